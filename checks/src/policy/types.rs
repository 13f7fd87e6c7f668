//! The policy file's shape (docs/guides/fleet.md shows a whole file). Every table rejects
//! unknown keys, and every value type checks itself while it is deserialized, so that the
//! TOML reader can name the line of any mistake.

use schemars::JsonSchema;
use serde::de::{self, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

/// The schema id a policy file may declare (`schema = "gdrdoctor.policy/v1"`).
pub const POLICY_SCHEMA: &str = "gdrdoctor.policy/v1";

/// Where `check` looks for a policy when `--policy` is not given (live runs only).
pub const DEFAULT_PATH: &str = "/etc/gdrdoctor/policy.toml";

/// `open` or `proprietary`, as the policy and the report's inventory spell a driver flavor.
pub fn flavor_str(f: crate::model::Flavor) -> &'static str {
    match f {
        crate::model::Flavor::Open => "open",
        crate::model::Flavor::Proprietary => "proprietary",
    }
}

/// A whole policy file. Every section is optional: a policy states only what the site cares
/// about.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// `gdrdoctor.policy/v1` when present.
    #[serde(default)]
    pub schema: Option<SchemaId>,
    #[serde(default)]
    pub gpu: Option<GpuRule>,
    #[serde(default)]
    pub rdma: Option<RdmaRule>,
    #[serde(default)]
    pub pcie: Option<PcieRule>,
    #[serde(default)]
    pub driver: Option<DriverRule>,
    #[serde(default)]
    pub peer_memory: Option<PeerMemoryRule>,
    #[serde(default)]
    pub iommu: Option<IommuRule>,
    #[serde(default)]
    pub gdr: Option<GdrRule>,
    #[serde(default)]
    pub kernel: Option<KernelRule>,
    /// Check id or category -> the status its non-passing findings get.
    #[serde(default)]
    pub severity: BTreeMap<CheckRef, Severity>,
    #[serde(default, rename = "waiver")]
    pub waivers: Vec<Waiver>,
}

impl Policy {
    /// What parses but cannot mean what its author wants: a rule that expects nothing (it
    /// would pass every node), an empty list of accepted values (it would fail every node), a
    /// waiver for no host, a policy with no expectation at all. One line each; empty: none.
    pub fn lint(&self) -> Vec<String> {
        let mut out = Vec::new();
        let expects_something = self.gpu.is_some()
            || self.rdma.is_some()
            || self.pcie.is_some()
            || self.driver.is_some()
            || self.peer_memory.is_some()
            || self.iommu.is_some()
            || self.gdr.is_some()
            || self.kernel.is_some()
            || !self.severity.is_empty()
            || !self.waivers.is_empty();
        if !expects_something {
            out.push("the policy says nothing (no [gpu], [rdma], [pcie], [driver], [peer_memory], [iommu], [gdr], [kernel], [severity] or [[waiver]]): an empty or truncated file? `gdrdoctor policy init` writes one from a healthy node".to_string());
        }
        if let Some(r) = &self.rdma {
            for (i, p) in r.ports.0.iter().enumerate() {
                if p.state.is_none()
                    && p.link_layer.is_none()
                    && p.rate_gbps.is_none()
                    && p.width.is_none()
                {
                    out.push(format!("rdma.ports[{i}]: the rule expects nothing of its ports: give state, link_layer, rate_gbps or width"));
                }
            }
        }
        if let Some(g) = &self.gdr {
            if g.every_gpu.is_none() && g.min_pairs.is_none() {
                out.push("gdr: max_path alone checks nothing: add `every_gpu = true` or `min_pairs = N` (max_path is the distance they count within)".to_string());
            }
        }
        if self.iommu.as_ref().is_some_and(|r| r.mode.0.is_empty()) {
            out.push("iommu.mode: an empty list accepts no mode, so every node would fail: name the accepted modes, or leave [iommu] out".to_string());
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaId;

impl<'de> Deserialize<'de> for SchemaId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == POLICY_SCHEMA {
            Ok(SchemaId)
        } else {
            Err(de::Error::custom(format!(
                "unsupported policy schema `{s}`: this gdrdoctor reads `{}`",
                POLICY_SCHEMA
            )))
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct GpuRule {
    /// Exactly this many NVIDIA GPUs on the PCI bus.
    #[serde(default)]
    pub count: Option<u32>,
    /// A substring of every GPU's name (`H200`, `H100 SXM`), case-insensitive.
    #[serde(default)]
    pub model: Option<NonEmpty>,
    /// Every GPU's PCI id, `10de:2335`.
    #[serde(default)]
    pub device_id: Option<PciId>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct RdmaRule {
    /// Exactly this many RDMA devices (`/sys/class/infiniband`).
    #[serde(default)]
    pub count: Option<u32>,
    /// Port expectations: one table (`[rdma.ports]`) or several (`[[rdma.ports]]`), each for the
    /// devices its `devices` patterns select.
    #[serde(default)]
    pub ports: OneOrMany<PortRule>,
    #[serde(default)]
    pub firmware: Option<FirmwareRule>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct PortRule {
    /// Which ports: device names or `device/port`, with `*` and `?` (default: every port).
    #[serde(default)]
    pub devices: Vec<NonEmpty>,
    #[serde(default)]
    pub state: Option<PortState>,
    #[serde(default)]
    pub link_layer: Option<LinkLayer>,
    /// The port rate in Gb/s, as `/sys/class/infiniband/*/ports/*/rate` states it (400 for
    /// `400 Gb/sec (4X NDR)`).
    #[serde(default)]
    pub rate_gbps: Option<Rate>,
    /// The lane count, `4X` in `400 Gb/sec (4X NDR)`.
    #[serde(default)]
    pub width: Option<PortWidth>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[schemars(inline)]
pub enum PortState {
    #[serde(rename = "ACTIVE")]
    Active,
    #[serde(rename = "ARMED")]
    Armed,
    #[serde(rename = "INIT")]
    Init,
    #[serde(rename = "DOWN")]
    Down,
}

impl PortState {
    pub fn as_str(self) -> &'static str {
        match self {
            PortState::Active => "ACTIVE",
            PortState::Armed => "ARMED",
            PortState::Init => "INIT",
            PortState::Down => "DOWN",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[schemars(inline)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
}

impl LinkLayer {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct FirmwareRule {
    /// Which devices (default: every RDMA device), `*` and `?` allowed.
    #[serde(default)]
    pub devices: Vec<NonEmpty>,
    /// Exactly this firmware on every selected device.
    #[serde(default)]
    pub version: Option<Version>,
    /// At least this firmware (numeric comparison of the dotted parts).
    #[serde(default)]
    pub min_version: Option<Version>,
    /// Every selected device runs the same firmware.
    #[serde(default)]
    pub all_equal: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct PcieRule {
    #[serde(default)]
    pub gpu: Option<LinkRule>,
    #[serde(default)]
    pub nic: Option<LinkRule>,
    /// The bridges (root ports, switch ports) above GPUs and NICs.
    #[serde(default)]
    pub switch: Option<LinkRule>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct LinkRule {
    /// At least this link speed, GT/s (2.5, 5, 8, 16, 32, 64).
    #[serde(default)]
    pub speed_gts: Option<LinkSpeed>,
    /// At least this many lanes.
    #[serde(default)]
    pub width: Option<LinkWidth>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct DriverRule {
    #[serde(default)]
    pub flavor: Option<DriverFlavor>,
    /// Exactly this version (`580.95.05`).
    #[serde(default)]
    pub version: Option<Version>,
    /// At least this version.
    #[serde(default)]
    pub min_version: Option<Version>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum DriverFlavor {
    Open,
    Proprietary,
}

impl DriverFlavor {
    pub fn as_str(self) -> &'static str {
        match self {
            DriverFlavor::Open => "open",
            DriverFlavor::Proprietary => "proprietary",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct PeerMemoryRule {
    pub mechanism: Mechanism,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[schemars(inline)]
pub enum Mechanism {
    #[serde(rename = "peermem")]
    Peermem,
    #[serde(rename = "dma-buf")]
    DmaBuf,
    #[serde(rename = "either")]
    Either,
}

impl Mechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::Peermem => "peermem",
            Mechanism::DmaBuf => "dma-buf",
            Mechanism::Either => "either",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct IommuRule {
    /// One mode or a list of accepted modes.
    pub mode: OneOrMany<IommuModeName>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum IommuModeName {
    Off,
    Passthrough,
    Translated,
}

impl IommuModeName {
    pub fn as_str(self) -> &'static str {
        match self {
            IommuModeName::Off => "off",
            IommuModeName::Passthrough => "passthrough",
            IommuModeName::Translated => "translated",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct GdrRule {
    /// Every GPU has at least one NIC that NCCL would use GPUDirect RDMA with.
    #[serde(default)]
    pub every_gpu: Option<bool>,
    /// ... at this PCIe distance or closer (PIX, PXB, PHB, NODE, SYS).
    #[serde(default)]
    pub max_path: Option<PathName>,
    /// At least this many GPU x NIC pairs with GPUDirect RDMA (within `max_path` when given).
    #[serde(default)]
    pub min_pairs: Option<u32>,
}

/// A PCIe distance as NCCL (PIX, PXB, PHB, SYS) or nvidia-smi (NODE) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathName {
    pub name: &'static str,
    /// NCCL's rank (lower is closer): PIX 4, PXB 5, P2C 6, PHB 8 (NODE too), SYS 9.
    pub rank: u8,
}

impl PathName {
    pub fn parse(s: &str) -> Option<PathName> {
        let (name, rank) = match s.to_ascii_uppercase().as_str() {
            "PIX" => ("PIX", 4),
            "PXB" => ("PXB", 5),
            "P2C" => ("P2C", 6),
            "PHB" => ("PHB", 8),
            "NODE" => ("NODE", 8),
            "SYS" => ("SYS", 9),
            _ => return None,
        };
        Some(PathName { name, rank })
    }
}

impl<'de> Deserialize<'de> for PathName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        PathName::parse(&s).ok_or_else(|| {
            de::Error::custom(format!(
                "unknown path `{s}`, expected one of PIX, PXB, P2C, PHB, NODE, SYS"
            ))
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct KernelRule {
    /// Exactly this release (`uname -r`).
    #[serde(default)]
    pub release: Option<NonEmpty>,
    /// At least this release (numeric parts compared: 6.8.0-49 < 6.8.0-51).
    #[serde(default)]
    pub min_release: Option<Version>,
    #[serde(default)]
    pub cmdline: Option<CmdlineRule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct CmdlineRule {
    /// Parameters that must be present, exactly (`iommu=pt`, `quiet`).
    #[serde(default)]
    pub require: Vec<CmdlineParam>,
    /// Parameters that must not be present: `key` forbids every value, `key=value` one.
    #[serde(default)]
    pub forbid: Vec<CmdlineParam>,
    /// Keys whose values differ per node (`root`, `resume`): never compared.
    #[serde(default)]
    pub ignore: Vec<NonEmpty>,
    /// Whether parameters the policy does not list are accepted (default true).
    #[serde(default = "yes")]
    pub allow_extra: bool,
}

fn yes() -> bool {
    true
}

/// One kernel command-line parameter: `key` or `key=value`, no whitespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdlineParam(pub String);

impl CmdlineParam {
    pub fn key(&self) -> &str {
        self.0.split_once('=').map(|(k, _)| k).unwrap_or(&self.0)
    }
    pub fn has_value(&self) -> bool {
        self.0.contains('=')
    }
}

impl<'de> Deserialize<'de> for CmdlineParam {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() || s.starts_with('=') {
            return Err(de::Error::custom(
                "a command-line parameter needs a name (`iommu=pt`, `quiet`)",
            ));
        }
        if s.chars().any(|c| c.is_whitespace()) && !s.contains('"') {
            return Err(de::Error::custom(format!(
                "`{s}` holds whitespace: list each parameter as its own string"
            )));
        }
        Ok(CmdlineParam(s))
    }
}

/// The status a check's non-passing findings get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Severity {
    Warn,
    Fail,
}

impl Severity {
    pub fn status(self) -> crate::report::Status {
        match self {
            Severity::Warn => crate::report::Status::Warn,
            Severity::Fail => crate::report::Status::Fail,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct Waiver {
    /// A check id or category.
    pub check: CheckRef,
    /// Only findings about this subject (`0000:18:00.0`, `mlx5_3/1`, `*` patterns); default all.
    #[serde(default)]
    pub subject: Option<NonEmpty>,
    /// Only on these hosts (hostname patterns); default every host.
    #[serde(default, deserialize_with = "some_hosts")]
    #[schemars(with = "Vec<NonEmpty>")]
    pub hosts: Vec<NonEmpty>,
    /// Why the finding is accepted (a ticket, a vendor case): shown with every waived finding.
    pub reason: NonEmpty,
    /// The last day (UTC) the waiver applies; from the next day the finding counts again.
    pub expires: Date,
}

/// A waiver's `hosts`: `[]` names no host, and is refused (left out, every host).
fn some_hosts<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<NonEmpty>, D::Error> {
    let v = Vec::<NonEmpty>::deserialize(d)?;
    if v.is_empty() {
        return Err(de::Error::custom(
            "`hosts = []` names no host: leave `hosts` out to waive on every host, or list the hosts",
        ));
    }
    Ok(v)
}

/// A check id or category that `gdrdoctor list` knows.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CheckRef(pub String);

impl CheckRef {
    pub fn matches(&self, id: &str) -> bool {
        self.0 == id || id.split_once('.').map(|(c, _)| c) == Some(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for CheckRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if super::findings::known_check(&s) {
            Ok(CheckRef(s))
        } else {
            Err(de::Error::custom(format!(
                "unknown check id or category `{s}` (`gdrdoctor list` shows them)"
            )))
        }
    }
}

/// A string that is not empty (after trimming).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonEmpty(pub String);

impl NonEmpty {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim().is_empty() {
            Err(de::Error::custom("must not be empty"))
        } else {
            Ok(NonEmpty(s.trim().to_string()))
        }
    }
}

/// `vendor:device` in hex (`10de:2335`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciId {
    pub vendor: u16,
    pub device: u16,
}

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:04x}", self.vendor, self.device)
    }
}

impl<'de> Deserialize<'de> for PciId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let parse = |x: &str| {
            (x.len() == 4)
                .then(|| u16::from_str_radix(x, 16).ok())
                .flatten()
        };
        match s.split_once(':') {
            Some((v, p)) => match (parse(v), parse(p)) {
                (Some(vendor), Some(device)) => Ok(PciId { vendor, device }),
                _ => Err(de::Error::custom(format!(
                    "`{s}` is not a pci id: expected vendor:device in hex, like 10de:2335"
                ))),
            },
            None => Err(de::Error::custom(format!(
                "`{s}` is not a pci id: expected vendor:device in hex, like 10de:2335"
            ))),
        }
    }
}

/// A version compared by its numeric parts (`580.95.05` = [580, 95, 5]; `6.8.0-49-generic` =
/// [6, 8, 0, 49]); missing parts count as 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub text: String,
    pub parts: Vec<u64>,
}

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        let parts: Vec<u64> = s
            .split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<u64>().unwrap_or(u64::MAX))
            .collect();
        if parts.is_empty() || !s.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        Some(Version {
            text: s.trim().to_string(),
            parts,
        })
    }
    /// Numeric comparison, missing parts as 0.
    pub fn cmp_parts(&self, other: &Version) -> std::cmp::Ordering {
        let n = self.parts.len().max(other.parts.len());
        for i in 0..n {
            let a = self.parts.get(i).copied().unwrap_or(0);
            let b = other.parts.get(i).copied().unwrap_or(0);
            match a.cmp(&b) {
                std::cmp::Ordering::Equal => continue,
                o => return o,
            }
        }
        std::cmp::Ordering::Equal
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Version;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a version string such as \"580.95.05\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Version, E> {
                Version::parse(s).ok_or_else(|| {
                    E::custom(format!(
                        "`{s}` is not a version: expected dotted numbers such as \"580.95.05\""
                    ))
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Version, E> {
                Err(E::custom(format!(
                    "write versions as strings (\"{v}\"), so that 28.39 and 28.390 stay distinct"
                )))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Version, E> {
                Err(E::custom(format!(
                    "write versions as strings (\"{v}\"), so that 28.39 and 28.390 stay distinct"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// A port rate in Gb/s, greater than 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate(pub f64);

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if v.is_finite() && v > 0.0 {
            Ok(Rate(v))
        } else {
            Err(de::Error::custom(format!(
                "a rate in Gb/s must be above 0 (got {v})"
            )))
        }
    }
}

/// A port width: `1X`, `2X`, `4X`, `8X` or `12X`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortWidth(pub String);

impl<'de> Deserialize<'de> for PortWidth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let up = s.to_ascii_uppercase();
        if ["1X", "2X", "4X", "8X", "12X"].contains(&up.as_str()) {
            Ok(PortWidth(up))
        } else {
            Err(de::Error::custom(format!(
                "unknown port width `{s}`, expected one of 1X, 2X, 4X, 8X, 12X"
            )))
        }
    }
}

/// A PCIe link speed in GT/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpeed(pub f64);

impl<'de> Deserialize<'de> for LinkSpeed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if [2.5, 5.0, 8.0, 16.0, 32.0, 64.0].contains(&v) {
            Ok(LinkSpeed(v))
        } else {
            Err(de::Error::custom(format!(
                "{v} GT/s is not a pcie speed: expected 2.5, 5, 8, 16, 32 or 64 (gen1-gen6)"
            )))
        }
    }
}

/// A PCIe link width in lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkWidth(pub u32);

impl<'de> Deserialize<'de> for LinkWidth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u32::deserialize(d)?;
        if [1, 2, 4, 8, 12, 16, 32].contains(&v) {
            Ok(LinkWidth(v))
        } else {
            Err(de::Error::custom(format!(
                "x{v} is not a pcie width: expected 1, 2, 4, 8, 12, 16 or 32"
            )))
        }
    }
}

/// A calendar date (UTC), `2026-03-31`: a TOML date or a string. A `jiff` civil date: the
/// calendar (leap years, days of the month, Unix time to a date) is jiff's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Date(pub jiff::civil::Date);

impl Date {
    /// `YYYY-MM-DD` exactly (four-digit year, two-digit month and day), a day that exists.
    pub fn parse(s: &str) -> Option<Date> {
        let s = s.trim();
        let b = s.as_bytes();
        // jiff also reads other ISO 8601 shapes (`20260331`, `+002026-03-31`, a date with a
        // time); a waiver's date is written one way only.
        let digits =
            |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
        if b.len() != 10
            || b[4] != b'-'
            || b[7] != b'-'
            || !digits(0..4)
            || !digits(5..7)
            || !digits(8..10)
        {
            return None;
        }
        s.parse::<jiff::civil::Date>().ok().map(Date)
    }
    /// The civil date of a Unix time (seconds), UTC; times beyond jiff's range (years -9999 to
    /// 9999) are clamped to it.
    pub fn from_unix(secs: i64) -> Date {
        let t = jiff::Timestamp::from_second(secs).unwrap_or(if secs < 0 {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        });
        Date(jiff::tz::TimeZone::UTC.to_datetime(t).date())
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // jiff writes years 0-9999 as four digits, as ISO 8601 (and TOML) do.
        fmt::Display::fmt(&self.0, f)
    }
}

/// The key under which the `toml` crate hands a native TOML date to a deserializer.
const TOML_DATETIME_KEY: &str = "$__toml_private_datetime";

impl<'de> Deserialize<'de> for Date {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        fn parse<E: de::Error>(s: &str) -> Result<Date, E> {
            Date::parse(s).ok_or_else(|| {
                E::custom(format!(
                    "`{s}` is not a date: expected YYYY-MM-DD, like 2026-03-31"
                ))
            })
        }
        impl<'de> Visitor<'de> for V {
            type Value = Date;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a date, YYYY-MM-DD")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Date, E> {
                parse(s)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Date, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom("expected a date, YYYY-MM-DD"));
                };
                if key != TOML_DATETIME_KEY {
                    return Err(de::Error::custom("expected a date, YYYY-MM-DD"));
                }
                let s: String = map.next_value()?;
                if s.len() != 10 {
                    return Err(de::Error::custom(format!(
                        "`{s}`: give a date only (YYYY-MM-DD); a waiver lasts to the end of that day, UTC"
                    )));
                }
                parse(&s)
            }
        }
        d.deserialize_any(V)
    }
}

/// One value or a list of them (`mode = "off"` or `mode = ["off", "passthrough"]`; `[rdma.ports]`
/// or `[[rdma.ports]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<T> Default for OneOrMany<T> {
    fn default() -> Self {
        OneOrMany(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a value or a list of values")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                T::deserialize(s.into_deserializer()).map(|t| OneOrMany(vec![t]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Vec::<T>::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(OneOrMany)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|t| OneOrMany(vec![t]))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

// ---- JSON Schema of the value types that check themselves (docs/schema/gdrdoctor.policy.v1.schema.json)

/// A check id or category, as `gdrdoctor list` shows them.
const CHECK_REF_PATTERN: &str = r"^[a-z0-9-]+(\.[a-z0-9.-]+)?$";
/// Dotted numbers, compared numerically.
const VERSION_SCHEMA_PATTERN: &str = "^[0-9]";

macro_rules! value_schema {
    ($t:ty, $name:literal, $schema:tt) => {
        impl JsonSchema for $t {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!($schema)
            }
        }
    };
}

value_schema!(SchemaId, "SchemaId", { "const": POLICY_SCHEMA });
value_schema!(NonEmpty, "NonEmpty", { "type": "string", "minLength": 1, "pattern": "\\S" });
value_schema!(PciId, "PciId", { "type": "string", "pattern": "^[0-9a-fA-F]{4}:[0-9a-fA-F]{4}$" });
value_schema!(Version, "Version", {
    "type": "string",
    "pattern": VERSION_SCHEMA_PATTERN,
    "description": "dotted numbers, compared numerically"
});
value_schema!(Rate, "Rate", { "type": "number", "exclusiveMinimum": 0 });
value_schema!(PortWidth, "PortWidth", { "type": "string", "pattern": "^(1|2|4|8|12)[xX]$" });
value_schema!(LinkSpeed, "LinkSpeed", {
    "enum": [2.5, 5, 8, 16, 32, 64],
    "description": "at least this, GT/s"
});
value_schema!(LinkWidth, "LinkWidth", {
    "enum": [1, 2, 4, 8, 12, 16, 32],
    "description": "at least this many lanes"
});
value_schema!(PathName, "PathName", {
    "enum": ["PIX", "PXB", "P2C", "PHB", "NODE", "SYS", "pix", "pxb", "p2c", "phb", "node", "sys"]
});
value_schema!(CmdlineParam, "CmdlineParam", { "type": "string", "minLength": 1, "pattern": "^[^=\\s]" });
value_schema!(CheckRef, "CheckRef", {
    "type": "string",
    "pattern": CHECK_REF_PATTERN,
    "description": "a check id or category that `gdrdoctor list` shows"
});
// As a key of `[severity]`, the same pattern holds the names (schemars' `patternProperties`).
value_schema!(Date, "Date", {
    "anyOf": [
        { "type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$" },
        {
            "type": "object",
            "properties": {
                TOML_DATETIME_KEY: { "type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$" }
            },
            "additionalProperties": false,
            "required": [TOML_DATETIME_KEY]
        }
    ],
    "description": "a TOML date or a YYYY-MM-DD string: the last day (UTC) the waiver applies"
});

impl<T: JsonSchema> JsonSchema for OneOrMany<T> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        format!("OneOrMany_{}", T::schema_name()).into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let one = g.subschema_for::<T>();
        schemars::json_schema!({ "anyOf": [one, { "type": "array", "items": one }] })
    }
}

/// The published JSON Schema of the policy (docs/schema/gdrdoctor.policy.v1.schema.json),
/// derived from [`Policy`]: closed (`additionalProperties: false`), as the loader refuses
/// unknown keys.
pub fn json_schema() -> serde_json::Value {
    crate::schema::published_toml::<Policy>(
        POLICY_SCHEMA,
        "The site policy `gdrdoctor check --policy FILE` reads (TOML; docs/guides/fleet.md). Editors that take JSON Schemas for TOML (taplo, Even Better TOML) can use this file; gdrdoctor itself checks more (known check ids, versions) and names the line of any error.",
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn versions_compare_numerically() {
        let v = |s| Version::parse(s).unwrap();
        assert!(v("580.95.05").cmp_parts(&v("580.95.5")).is_eq());
        assert!(v("580.159.04").cmp_parts(&v("580.95.05")).is_gt());
        assert!(v("28.39.1002").cmp_parts(&v("28.43.1014")).is_lt());
        assert!(v("6.8.0-49-generic").cmp_parts(&v("6.8.0-51")).is_lt());
        assert!(v("570").cmp_parts(&v("570.0.0")).is_eq());
        assert!(Version::parse("abc").is_none());
        assert!(Version::parse("").is_none());
        assert!(Version::parse("r570").is_none());
    }

    #[test]
    fn dates_parse_and_come_from_unix_time() {
        assert_eq!(
            Date::parse("2026-03-31"),
            Some(Date(jiff::civil::date(2026, 3, 31)))
        );
        assert!(Date::parse("2026-02-29").is_none());
        assert!(Date::parse("2024-02-29").is_some());
        assert!(Date::parse("2026-13-01").is_none());
        assert!(Date::parse("2026-3-1").is_none());
        // Only YYYY-MM-DD: the other ISO 8601 shapes jiff reads are refused.
        for other in [
            "20260331",
            "+002026-03-31",
            "2026-03-31T00:00",
            "2026-03-3a",
            "2026+03-31",
        ] {
            assert!(Date::parse(other).is_none(), "{other}");
        }
        assert!(Date::parse("1900-02-29").is_none());
        assert!(Date::parse("2000-02-29").is_some());
        assert_eq!(Date::from_unix(0).to_string(), "1970-01-01");
        assert_eq!(Date::from_unix(951_782_400).to_string(), "2000-02-29");
        assert_eq!(Date::from_unix(1_796_084_248).to_string(), "2026-12-01");
        assert_eq!(Date::from_unix(-1).to_string(), "1969-12-31");
    }

    proptest! {
        #[test]
        fn date_text_round_trips(days in -100_000i64..200_000) {
            let d = Date::from_unix(days * 86_400);
            prop_assert_eq!(Date::parse(&d.to_string()), Some(d));
            let next = Date::from_unix((days + 1) * 86_400);
            prop_assert!(next > d);
        }

        #[test]
        fn version_parse_never_panics(s in "\\PC{0,24}") {
            if let Some(v) = Version::parse(&s) {
                prop_assert!(!v.parts.is_empty());
                prop_assert!(v.cmp_parts(&v).is_eq());
            }
        }
    }
}
