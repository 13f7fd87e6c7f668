//! Findings and the versioned JSON report (`gdrdoctor.report/v1`, see docs/report-format.md).
//!
//! The JSON is the contract: renderers for humans may change, this shape may only grow.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "gdrdoctor.report/v1";

/// A PCI address as the report writes it (`0000:18:00.0`; domains may be longer than 4 digits).
pub const BDF_PATTERN: &str = r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$";

/// What happened when a check looked at one subject.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Status {
    Pass,
    Skip,
    Warn,
    Error,
    Fail,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Pass,
        Status::Warn,
        Status::Fail,
        Status::Skip,
        Status::Error,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
            Status::Error => "error",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One piece of evidence: what we read, where, and what a healthy node shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "evidence")]
pub struct Evidence {
    pub source: String,
    pub observed: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub expected: Option<String>,
}

/// The outcome of one check for one subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "finding")]
pub struct Finding {
    /// Stable check id, `category.name`.
    #[schemars(regex(pattern = r"^[a-z0-9-]+\.[a-z0-9.-]+$"))]
    pub id: String,
    pub status: Status,
    /// `node`, a PCI address, an RDMA device (`mlx5_0`, `mlx5_0/1`), or a pair (`0000:..|mlx5_0`).
    pub subject: String,
    /// Lowercase, no trailing period: states what is, not what to do.
    pub message: String,
    #[serde(default)]
    #[schemars(extend("x-required" = true))]
    pub evidence: Vec<Evidence>,
    /// What to change, with exact commands; only on non-passing findings.
    #[serde(default)]
    pub remediation: Option<String>,
    #[schemars(regex(pattern = r"^docs/checks/.+\.md$"))]
    pub docs: String,
}

impl Finding {
    pub fn new(
        id: &str,
        status: Status,
        subject: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            id: id.to_string(),
            status,
            subject: subject.into(),
            message: message.into(),
            evidence: Vec::new(),
            remediation: None,
            docs: format!("docs/checks/{id}.md"),
        }
    }
    pub fn evidence(mut self, source: impl Into<String>, observed: impl Into<String>) -> Self {
        self.evidence.push(Evidence {
            source: source.into(),
            observed: observed.into(),
            expected: None,
        });
        self
    }
    /// Evidence with the value that would have passed (`Option::expect` is another thing: this
    /// never panics).
    pub fn expected(
        mut self,
        source: impl Into<String>,
        observed: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        self.evidence.push(Evidence {
            source: source.into(),
            observed: observed.into(),
            expected: Some(expected.into()),
        });
        self
    }
    pub fn fix(mut self, remediation: impl Into<String>) -> Self {
        self.remediation = Some(remediation.into());
        self
    }
    /// At least one evidence item names where it read (`source`) and what it saw (`observed`):
    /// what every `pass` must carry (a pass on nothing is no pass).
    pub fn has_evidence(&self) -> bool {
        self.evidence
            .iter()
            .any(|e| !e.source.trim().is_empty() && !e.observed.trim().is_empty())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "summary")]
pub struct Summary {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
    pub error: usize,
    #[schemars(extend("enum" = [0, 1, 2, 3]))]
    pub exit_code: i32,
}

impl Summary {
    pub fn count(findings: &[Finding]) -> Summary {
        let mut s = Summary::default();
        for f in findings {
            match f.status {
                Status::Pass => s.pass += 1,
                Status::Warn => s.warn += 1,
                Status::Fail => s.fail += 1,
                Status::Skip => s.skip += 1,
                Status::Error => s.error += 1,
            }
        }
        s
    }
}

/// What makes `check`/`probe` exit non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailOn {
    Warn,
    #[default]
    Fail,
}

/// The exit-code contract: 0 nothing failed, 1 at least one fail (or warn with `--fail-on warn`),
/// 3 nothing failed but some checks could not be evaluated (unless `allow_incomplete`).
/// Code 2 (could not run at all) is decided by the caller before any check runs.
pub fn exit_code(findings: &[Finding], fail_on: FailOn, allow_incomplete: bool) -> i32 {
    let s = Summary::count(findings);
    if s.fail > 0 || (fail_on == FailOn::Warn && s.warn > 0) {
        1
    } else if s.error > 0 && !allow_incomplete {
        3
    } else {
        0
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "tool")]
pub struct Tool {
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "host")]
pub struct Host {
    #[schemars(extend("x-required" = true))]
    pub hostname: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub kernel: Option<String>,
    /// `live`, `sysroot`, `host-root` (the host's `/` mounted into a container), or `evidence`
    /// (pasted tool output).
    #[schemars(extend("enum" = ["live", "sysroot", "host-root", "evidence"]))]
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "link")]
pub struct Link {
    #[schemars(extend("x-required" = true))]
    pub cur_speed_gts: Option<f64>,
    #[schemars(extend("x-required" = true))]
    pub cur_width: Option<u32>,
    #[schemars(extend("x-required" = true))]
    pub max_speed_gts: Option<f64>,
    #[schemars(extend("x-required" = true))]
    pub max_width: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "bar")]
pub struct Bar {
    pub index: usize,
    #[schemars(regex(pattern = r"^0x[0-9a-f]+$"))]
    pub start: String,
    pub size: u64,
    pub prefetchable: bool,
    pub mem64: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "gpu")]
pub struct GpuInv {
    #[schemars(regex(pattern = BDF_PATTERN))]
    pub bdf: String,
    pub vendor_id: String,
    pub device_id: String,
    pub name: String,
    #[schemars(extend("x-required" = true))]
    pub numa_node: Option<i32>,
    pub link: Link,
    pub bars: Vec<Bar>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "port")]
pub struct PortInv {
    pub port: u32,
    #[schemars(extend("x-required" = true))]
    pub state: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub phys_state: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub link_layer: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub rate: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "nic")]
pub struct NicInv {
    pub ibdev: String,
    #[schemars(extend("x-required" = true), regex(pattern = BDF_PATTERN))]
    pub bdf: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub fw_ver: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub hca_type: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub board_id: Option<String>,
    pub ports: Vec<PortInv>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "pcie")]
pub struct PcieInv {
    #[schemars(extend("x-required" = true))]
    pub lnkcap_speed_gts: Option<f64>,
    #[schemars(extend("x-required" = true))]
    pub lnkcap_width: Option<u8>,
    #[schemars(extend("x-required" = true))]
    pub lnksta_speed_gts: Option<f64>,
    #[schemars(extend("x-required" = true))]
    pub lnksta_width: Option<u8>,
    pub mps: u32,
    pub mrrs: u32,
    pub relaxed_ordering: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "acs")]
pub struct AcsInv {
    #[schemars(regex(pattern = r"^0x[0-9a-f]{4}$"))]
    pub ctl: String,
    pub src_valid: bool,
    pub req_redir: bool,
    pub cmplt_redir: bool,
    pub upstream_fwd: bool,
    pub egress_ctl: bool,
    pub direct_trans: bool,
    pub trans_blocking: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ats")]
pub struct AtsInv {
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "pci")]
pub struct PciInv {
    #[schemars(regex(pattern = BDF_PATTERN))]
    pub bdf: String,
    #[schemars(extend("x-required" = true), regex(pattern = r"^0x[0-9a-f]{6}$"))]
    pub class: Option<String>,
    #[schemars(extend("x-required" = true), regex(pattern = r"^[0-9a-f]{4}$"))]
    pub vendor_id: Option<String>,
    #[schemars(extend("x-required" = true), regex(pattern = r"^[0-9a-f]{4}$"))]
    pub device_id: Option<String>,
    #[schemars(extend("x-required" = true), regex(pattern = BDF_PATTERN))]
    pub parent: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub pcie: Option<PcieInv>,
    #[schemars(extend("x-required" = true))]
    pub acs: Option<AcsInv>,
    #[schemars(extend("x-required" = true))]
    pub ats: Option<AtsInv>,
    /// Bytes of config space that were readable (64 for non-root readers); null when not read.
    #[serde(default)]
    pub config_bytes: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "driver")]
pub struct DriverInv {
    #[schemars(extend("x-required" = true))]
    pub nvidia_version: Option<String>,
    #[schemars(extend("x-required" = true), extend("enum" = ["open", "proprietary", null]))]
    pub flavor: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub peermem: Option<bool>,
    #[schemars(extend("x-required" = true))]
    pub nv_peer_mem: Option<bool>,
    /// `PeerMappingOverride=1` in RegistryDwords (GPU may map NIC doorbells without root).
    #[serde(default)]
    pub peer_mapping_override: Option<bool>,
    /// `EnableStreamMemOPs` (cuStreamWaitValue/WriteValue without the driver fallback).
    #[serde(default)]
    pub stream_memops: Option<bool>,
    /// `GrdmaPciTopoCheckOverride`: 0 driver decides, 1 force allow, 2 force deny.
    #[serde(default)]
    pub grdma_topo_override: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "iommu")]
pub struct IommuInv {
    #[schemars(extend("enum" = ["off", "passthrough", "translated", "unknown"]))]
    pub mode: String,
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "inventory")]
pub struct Inventory {
    pub gpus: Vec<GpuInv>,
    pub nics: Vec<NicInv>,
    pub pci: Vec<PciInv>,
    pub driver: DriverInv,
    pub iommu: IommuInv,
    /// `/proc/cmdline`, one parameter per item; null when unreadable.
    #[serde(default)]
    pub cmdline: Option<Vec<String>>,
    /// The `NCCL_*`, `NVSHMEM_*` and `CUDA_*` environment the checks ran with; null when unknown.
    #[serde(default)]
    pub env: Option<std::collections::BTreeMap<String, String>>,
}

/// GDR verdict for one GPU x NIC pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "gdr")]
pub struct GdrPair {
    #[schemars(regex(pattern = BDF_PATTERN))]
    pub gpu: String,
    pub nic: String,
    /// NCCL's path type (`PIX`, `PXB`, `PHB`, `SYS`, ...).
    pub path: String,
    /// The same path as `nvidia-smi topo -m` names it (`NODE` is NCCL's `PHB` across host bridges).
    #[serde(default)]
    pub nvidia_smi: Option<String>,
    pub enabled: bool,
    #[schemars(extend("x-required" = true))]
    pub mechanism: Option<String>,
    /// Why GDR is off for this pair (empty when enabled).
    pub reasons: Vec<String>,
    /// Live-only facts the verdict assumes (a sysroot or a node without CUDA cannot tell).
    #[serde(default)]
    pub assumptions: Vec<String>,
    /// GDR for sends (the NIC reads GPU memory; NCCL's `read=1`), when decided. `enabled` is
    /// true when either direction uses GDR: the read gate can leave sends staged through host
    /// memory while receives use GDR.
    #[serde(default)]
    pub send: Option<bool>,
    /// GDR for receives (the NIC writes GPU memory; `read=0`).
    #[serde(default)]
    pub receive: Option<bool>,
    /// NCCL's path after its rewrites: `PXN` (sends through `via`), `P2C` (a NIC on the GPU's
    /// own C2C-attached CPU), else the same as `path`.
    #[serde(default)]
    pub nccl_path: Option<String>,
    /// The NVLink peer GPU that proxies this GPU's sends to the NIC (PXN).
    #[serde(default)]
    pub via: Option<String>,
    /// NCCL maps GPU memory for the NIC in PCIe mode (`/GDRDMA(PCI)`: a C2C GPU whose NIC
    /// is not reached through its own CPU).
    #[serde(default)]
    pub pci_mode: bool,
    /// The distance threshold applied (`PXB`, `P2C`, `PHB`, ...) and where it came from.
    #[serde(default)]
    pub threshold: Option<String>,
    #[serde(default)]
    pub threshold_source: Option<String>,
    /// Whose rules: `NCCL 2.28.9 rules (libnccl.so.2 2.28.9 at ...)`.
    #[serde(default)]
    pub rules: Option<String>,
    /// Why the verdict could not be decided (unknown inputs); empty when it was.
    #[serde(default)]
    pub undecided: Vec<String>,
    /// How the verdict came about beyond the reasons (PXN, P2C, forced reads).
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    #[schemars(extend("const" = SCHEMA))]
    pub schema: String,
    pub tool: Tool,
    /// When the report was produced (RFC 3339, UTC, seconds), set by the binary; absent in
    /// reports built in-process (the golden files), so that those stay deterministic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        with = "String",
        regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"),
        extend("format" = "date-time")
    )]
    pub timestamp: Option<String>,
    pub host: Host,
    pub summary: Summary,
    pub inventory: Inventory,
    pub findings: Vec<Finding>,
    pub gdr: Vec<GdrPair>,
    /// Raw measurements of `gdrdoctor probe` (timings per step); absent for `check`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any_object")]
    pub probe: Option<serde_json::Value>,
}

/// The published JSON Schema of the report (docs/schema/gdrdoctor.report.v1.schema.json),
/// derived from [`Report`] ([`crate::schema`]).
pub fn json_schema() -> serde_json::Value {
    crate::schema::published::<Report>(
        SCHEMA,
        "The JSON report of `gdrdoctor check` and `gdrdoctor probe` (docs/report-format.md), derived from the serde types. v1 only grows: objects take members they do not know (additionalProperties true), and consumers must ignore fields they do not know.",
        true,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn f(s: Status) -> Finding {
        Finding::new("x.y", s, "node", "m")
    }

    #[test]
    fn exit_codes_follow_the_contract() {
        assert_eq!(exit_code(&[], FailOn::Fail, false), 0);
        assert_eq!(
            exit_code(&[f(Status::Pass), f(Status::Warn)], FailOn::Fail, false),
            0
        );
        assert_eq!(
            exit_code(&[f(Status::Pass), f(Status::Warn)], FailOn::Warn, false),
            1
        );
        assert_eq!(
            exit_code(&[f(Status::Fail), f(Status::Error)], FailOn::Fail, false),
            1
        );
        assert_eq!(
            exit_code(&[f(Status::Pass), f(Status::Error)], FailOn::Fail, false),
            3
        );
        assert_eq!(
            exit_code(&[f(Status::Pass), f(Status::Error)], FailOn::Fail, true),
            0
        );
        assert_eq!(exit_code(&[f(Status::Skip)], FailOn::Warn, false), 0);
        assert_eq!(
            exit_code(&[f(Status::Warn), f(Status::Error)], FailOn::Warn, false),
            1
        );
    }

    #[test]
    fn summary_counts_each_status() {
        let s = Summary::count(&[
            f(Status::Pass),
            f(Status::Pass),
            f(Status::Skip),
            f(Status::Error),
        ]);
        assert_eq!((s.pass, s.warn, s.fail, s.skip, s.error), (2, 0, 0, 1, 1));
    }
}
