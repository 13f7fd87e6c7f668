//! NCCL's topology dump (`NCCL_TOPO_DUMP_FILE`): the XML NCCL builds of the node before it
//! computes paths, written by `ncclTopoDumpXmlRec()` (src/graph/xml.cc v2.30.7-1 L275-292):
//! one element per line, `key="value"` attributes, `/>` for an element without children.
//!
//! ```text
//! <system version="1">
//!   <cpu numaid="0" affinity="..." arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
//!     <pci busid="0000:16:00.0" class="0x060400" ...>
//!       <pci busid="0000:18:00.0" class="0x030200" ...>
//!         <gpu dev="0" sm="90" rank="0" gdr="1">
//!           <nvlink target="0000:05:00.0" count="18" tclass="0x068000"/>
//!         </gpu>
//!       </pci>
//!       <pci busid="0000:19:00.0" class="0x020700" ...>
//!         <nic><net name="mlx5_0" dev="0" speed="400000" port="1" gdr="1" .../></nic>
//!       </pci>
//! ```
//!
//! [`Dump::system`] turns it into the rule's [`System`], so that gdrdoctor's prediction can be
//! made from exactly what NCCL saw. The parser is lenient (attributes in any order, missing
//! ones absent) and never panics.

use super::rule::{Gpu, Nic, Support, System};
use super::version::PathKind;

/// One XML element.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Element {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub children: Vec<Element>,
}

impl Element {
    pub fn attr(&self, k: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
    }
}

/// Parse the XML into its root element (`system`). `None` when there is no element.
pub fn parse_xml(text: &str) -> Option<Element> {
    let mut stack: Vec<Element> = vec![Element {
        name: "#doc".into(),
        ..Default::default()
    }];
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        if rest.starts_with('?') || rest.starts_with('!') {
            let end = if rest.starts_with("!--") {
                rest.find("-->").map(|e| e + 3)
            } else {
                rest.find('>').map(|e| e + 1)
            };
            rest = &rest[end.unwrap_or(rest.len())..];
            continue;
        }
        let Some(end) = tag_end(rest) else { break };
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim();
            // Close up to the matching element (lenient on mismatches).
            if let Some(pos) = stack.iter().rposition(|e| e.name == name) {
                while stack.len() > pos.max(1) {
                    let Some(done) = stack.pop() else { break };
                    if let Some(parent) = stack.last_mut() {
                        parent.children.push(done);
                    }
                }
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let (name, attrs) = parse_tag(tag);
        if name.is_empty() {
            continue;
        }
        let el = Element {
            name,
            attrs,
            children: Vec::new(),
        };
        if self_closing {
            if let Some(parent) = stack.last_mut() {
                parent.children.push(el);
            }
        } else {
            stack.push(el);
        }
    }
    while stack.len() > 1 {
        let Some(done) = stack.pop() else { break };
        if let Some(parent) = stack.last_mut() {
            parent.children.push(done);
        }
    }
    stack.pop().and_then(|d| d.children.into_iter().next())
}

/// The index of the `>` that ends a tag, outside quoted values.
fn tag_end(s: &str) -> Option<usize> {
    let mut quote = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => quote = !quote,
            '>' if !quote => return Some(i),
            _ => {}
        }
    }
    None
}

fn parse_tag(tag: &str) -> (String, Vec<(String, String)>) {
    let tag = tag.trim();
    let name_end = tag.find(|c: char| c.is_whitespace()).unwrap_or(tag.len());
    let name = tag[..name_end].to_string();
    let mut attrs = Vec::new();
    let mut rest = &tag[name_end..];
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim().to_string();
        let after = rest[eq + 1..].trim_start();
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            match q.find('"') {
                Some(e) => (&q[..e], &q[e + 1..]),
                None => (q, ""),
            }
        } else {
            let e = after
                .find(|c: char| c.is_whitespace())
                .unwrap_or(after.len());
            (&after[..e], &after[e..])
        };
        if !key.is_empty() {
            attrs.push((key, unescape(value)));
        }
        rest = next;
    }
    (name, attrs)
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// A GPU in the dump.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DumpGpu {
    pub busid: String,
    pub dev: Option<i64>,
    pub rank: Option<i64>,
    /// `sm="90"`: compute capability 9.0.
    pub sm: Option<i64>,
    pub gdr: Option<bool>,
    /// (target bus id, link count, target class).
    pub nvlinks: Vec<(String, i64, String)>,
    /// A `<c2c>` element: the GPU reaches its CPU over NVLink-C2C.
    pub c2c: bool,
    /// PCI switch nodes above it, nearest first (NCCL's tree), and its CPU's `numaid`.
    pub switches: Vec<String>,
    pub cpu: Option<String>,
}

/// One `<net>` in the dump.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DumpNet {
    pub name: String,
    pub dev: Option<i64>,
    pub port: Option<i64>,
    pub gdr: Option<bool>,
    /// The PCI device of its `<nic>` (absent for a NIC directly under a CPU, e.g. sockets).
    pub busid: Option<String>,
    pub switches: Vec<String>,
    pub cpu: Option<String>,
}

/// What a topology dump says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dump {
    pub gpus: Vec<DumpGpu>,
    pub nets: Vec<DumpNet>,
    /// `arch` and `vendor` of the first CPU.
    pub cpu_arch: Option<String>,
    pub cpu_vendor: Option<String>,
}

fn int(s: Option<&str>) -> Option<i64> {
    s.and_then(|v| super::env::strtoll(v, 0))
}

/// Parse a topology dump. `None`: no `<system>` element.
pub fn parse(text: &str) -> Option<Dump> {
    let root = parse_xml(text)?;
    if root.name != "system" {
        return None;
    }
    let mut d = Dump::default();
    for cpu in root.children.iter().filter(|c| c.name == "cpu") {
        if d.cpu_arch.is_none() {
            d.cpu_arch = cpu.attr("arch").map(str::to_string);
            d.cpu_vendor = cpu.attr("vendor").map(str::to_string);
        }
        let numa = cpu.attr("numaid").map(str::to_string);
        walk(cpu, &numa, &mut Vec::new(), &mut d);
    }
    Some(d)
}

/// `chain`: bus ids of the enclosing `<pci>` elements, outermost first.
fn walk(el: &Element, cpu: &Option<String>, chain: &mut Vec<String>, d: &mut Dump) {
    for c in &el.children {
        match c.name.as_str() {
            "pci" => {
                let bus = c.attr("busid").unwrap_or("").to_lowercase();
                chain.push(bus);
                walk(c, cpu, chain, d);
                chain.pop();
            }
            "gpu" => {
                // The GPU is the innermost <pci>; its switches are the ones above it.
                let busid = chain.last().cloned().unwrap_or_default();
                let switches = chain.iter().rev().skip(1).cloned().collect();
                d.gpus.push(DumpGpu {
                    busid,
                    dev: int(c.attr("dev")),
                    rank: int(c.attr("rank")),
                    sm: int(c.attr("sm")),
                    gdr: int(c.attr("gdr")).map(|x| x != 0),
                    nvlinks: c
                        .children
                        .iter()
                        .filter(|x| x.name == "nvlink")
                        .map(|x| {
                            (
                                x.attr("target").unwrap_or("").to_lowercase(),
                                int(x.attr("count")).unwrap_or(1),
                                x.attr("tclass").unwrap_or("").to_lowercase(),
                            )
                        })
                        .collect(),
                    c2c: c.children.iter().any(|x| x.name == "c2c"),
                    switches,
                    cpu: cpu.clone(),
                });
            }
            "nic" => {
                let busid = chain.last().cloned();
                let switches: Vec<String> = chain.iter().rev().skip(1).cloned().collect();
                for n in c.children.iter().filter(|x| x.name == "net") {
                    d.nets.push(DumpNet {
                        name: n.attr("name").unwrap_or("").to_string(),
                        dev: int(n.attr("dev")),
                        port: int(n.attr("port")),
                        gdr: int(n.attr("gdr")).map(|x| x != 0),
                        busid: busid.clone(),
                        switches: switches.clone(),
                        cpu: cpu.clone(),
                    });
                }
            }
            _ => walk(c, cpu, chain, d),
        }
    }
}

/// NCCL's path type between two devices of the dump (the same rule as `topo::path()`).
fn path(
    a_sw: &[String],
    a_cpu: &Option<String>,
    b_sw: &[String],
    b_cpu: &Option<String>,
) -> PathKind {
    let shared = a_sw
        .iter()
        .enumerate()
        .find_map(|(ia, s)| b_sw.iter().position(|t| t == s).map(|ib| (ia, ib)));
    match shared {
        Some((0, 0)) => PathKind::Pix,
        Some(_) => PathKind::Pxb,
        None if a_cpu.is_some() && a_cpu == b_cpu => PathKind::Phb,
        None => PathKind::Sys,
    }
}

const NVSWITCH_CLASS: &str = "0x068000";

impl Dump {
    /// The rule's [`System`]: GPU and NIC support from the `gdr` attributes NCCL wrote,
    /// NVLink from the `<nvlink>` elements, C2C from `<c2c>`, compute capability from `sm`.
    pub fn system(&self) -> System {
        let gpus: Vec<Gpu> = self
            .gpus
            .iter()
            .map(|g| Gpu {
                id: g.busid.clone(),
                cc: g.sm.map(|s| ((s / 10) as i32, (s % 10) as i32)),
                cc_source: "sm in NCCL's topology dump".into(),
                c2c: Some(g.c2c),
                c2c_source: "<c2c> in NCCL's topology dump".into(),
            })
            .collect();
        let nics: Vec<Nic> = self
            .nets
            .iter()
            .map(|n| Nic {
                name: n.name.clone(),
                // NCCL lists only ACTIVE ports: every <net> is one.
                ports: Some(vec![(n.port.unwrap_or(1).max(0) as u32, true)]),
            })
            .collect();
        let paths = self
            .gpus
            .iter()
            .map(|g| {
                self.nets
                    .iter()
                    .map(|n| match n.busid {
                        // A net without a PCI device (a socket interface) hangs off its CPU.
                        None if n.cpu.is_some() => Some(path(&g.switches, &g.cpu, &[], &n.cpu)),
                        None => None,
                        Some(_) => Some(path(&g.switches, &g.cpu, &n.switches, &n.cpu)),
                    })
                    .collect()
            })
            .collect();
        let switch_links = |g: &DumpGpu| -> i64 {
            g.nvlinks
                .iter()
                .filter(|l| l.2 == NVSWITCH_CLASS)
                .map(|l| l.1)
                .sum()
        };
        let nvlink = self
            .gpus
            .iter()
            .map(|a| {
                self.gpus
                    .iter()
                    .map(|b| {
                        let direct = a.nvlinks.iter().any(|l| l.0 == b.busid)
                            || b.nvlinks.iter().any(|l| l.0 == a.busid);
                        Some(direct || (switch_links(a) > 0 && switch_links(b) > 0))
                    })
                    .collect()
            })
            .collect();
        let gpu_paths = self
            .gpus
            .iter()
            .map(|a| {
                self.gpus
                    .iter()
                    .map(|b| Some(path(&a.switches, &a.cpu, &b.switches, &b.cpu)))
                    .collect()
            })
            .collect();
        let support = self
            .gpus
            .iter()
            .map(|g| {
                self.nets
                    .iter()
                    .map(|n| Support {
                        peermem: None,
                        dmabuf: None,
                        // NCCL's own NIC-level answer: a peer-memory client or dma-buf.
                        nic_logged: n.gdr,
                        gpu: g.gdr,
                        nic_off: format!(
                            "NIC-level GDR off: NCCL wrote gdr=\"0\" for {} in its topology dump (no peer memory and no dma-buf)",
                            n.name
                        ),
                        gpu_off: format!(
                            "NCCL wrote gdr=\"0\" for GPU {} in its topology dump",
                            g.busid
                        ),
                        peermem_off: String::new(),
                        unknown: vec![format!("no gdr attribute for {} in the dump", n.name)],
                        assumptions: Vec::new(),
                        damaged: Vec::new(),
                    })
                    .collect()
            })
            .collect();
        System {
            gpus,
            nics,
            smi: vec![vec![None; self.nets.len()]; self.gpus.len()],
            paths,
            path_hint: String::new(),
            nvlink,
            nvlink_source: "<nvlink> elements of NCCL's topology dump".into(),
            gpu_paths,
            support,
            amd_two_gpus: self.cpu_arch.as_deref() == Some("x86_64")
                && self.cpu_vendor.as_deref() == Some("AuthenticAMD")
                && self.gpus.len() <= 2,
            cpu: match (self.cpu_arch.as_deref(), self.cpu_vendor.as_deref()) {
                (Some("x86_64"), Some("AuthenticAMD")) => Some(crate::model::CpuVendor::Amd),
                (Some("x86_64"), Some("GenuineIntel")) => Some(crate::model::CpuVendor::Intel),
                (Some("x86_64"), Some(_)) => Some(crate::model::CpuVendor::Other),
                (Some("arm64"), _) => Some(crate::model::CpuVendor::Arm),
                (Some("ppc64"), _) => Some(crate::model::CpuVendor::Power),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// The shape NCCL 2.28.9 dumped on our two-GPU machine (knowledge/gdr-ground-truth.md,
    /// "Observed"), reduced: two H200 with 18 NVLinks to the NVSwitch, a socket NIC eth0.
    pub const TWO_H200: &str = r#"<system version="1">
  <cpu host_hash="0x1" numaid="-1" affinity="ffffffff" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="17">
    <pci busid="0000:00:06.0" class="0x030200" vendor="0x10de" device="0x2335" subsystem_vendor="0x10de" subsystem_device="0x18bf" link_speed="32.0 GT/s PCIe" link_width="16">
      <gpu dev="0" sm="90" rank="0" gdr="1">
        <nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>
      </gpu>
    </pci>
    <pci busid="0000:00:07.0" class="0x030200" vendor="0x10de" device="0x2335" subsystem_vendor="0x10de" subsystem_device="0x18bf" link_speed="32.0 GT/s PCIe" link_width="16">
      <gpu dev="1" sm="90" rank="1" gdr="1">
        <nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>
      </gpu>
    </pci>
    <nic>
      <net name="eth0" dev="0" speed="10000" port="0" latency="0.000000" maxconn="65536" gdr="0"/>
    </nic>
  </cpu>
</system>
"#;

    #[test]
    fn reads_gpus_nvlinks_and_socket_nets() {
        let d = parse(TWO_H200).unwrap();
        assert_eq!(d.gpus.len(), 2);
        assert_eq!(d.gpus[1].busid, "0000:00:07.0");
        assert_eq!(d.gpus[0].sm, Some(90));
        assert_eq!(d.gpus[0].gdr, Some(true));
        assert_eq!(d.gpus[0].nvlinks[0].1, 18);
        assert_eq!(d.nets.len(), 1);
        assert_eq!(d.nets[0].gdr, Some(false));
        assert_eq!(d.nets[0].busid, None);
        let s = d.system();
        assert_eq!(s.nvlink[0][1], Some(true), "both reach the NVSwitch");
        assert_eq!(s.paths[0][0], Some(PathKind::Phb));
        assert!(s.amd_two_gpus);
        assert_eq!(s.gpus[0].cc, Some((9, 0)));
    }

    #[test]
    fn nested_switches_give_pix_and_pxb_and_c2c() {
        let x = r#"<system version="1"><cpu numaid="0" arch="arm64" vendor="ARM">
 <pci busid="0000:10:00.0" class="0x060400"><pci busid="0000:11:00.0" class="0x060400">
  <pci busid="0000:12:00.0" class="0x030200"><gpu dev="0" sm="90" rank="0" gdr="1"><c2c bw="450000" count="10"/></gpu></pci>
  <pci busid="0000:13:00.0" class="0x020700"><nic><net name="mlx5_0" dev="0" port="1" gdr="1"/></nic></pci>
 </pci>
 <pci busid="0000:14:00.0" class="0x020700"><nic><net name="mlx5_1" dev="1" port="1" gdr="1"/></nic></pci>
 </pci></cpu>
 <cpu numaid="1" arch="arm64" vendor="ARM"><pci busid="0001:00:00.0" class="0x020700"><nic><net name="mlx5_2" dev="2" port="1" gdr="1"/></nic></pci></cpu>
</system>"#;
        let d = parse(x).unwrap();
        let s = d.system();
        assert_eq!(s.paths[0][0], Some(PathKind::Pix));
        assert_eq!(s.paths[0][1], Some(PathKind::Pxb));
        assert_eq!(s.paths[0][2], Some(PathKind::Sys));
        assert_eq!(s.gpus[0].c2c, Some(true));
        assert_eq!(d.cpu_arch.as_deref(), Some("arm64"));
    }

    #[test]
    fn not_a_dump() {
        assert!(parse("").is_none());
        assert!(parse("<graphs></graphs>").is_none());
        assert!(parse("hello").is_none());
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = parse(&s).map(|d| d.system());
        }
        #[test]
        fn never_panics_on_tag_soup(parts in proptest::collection::vec("(<system>|</system>|<cpu numaid=\"0\">|</cpu>|<pci busid=\"0000:0[0-9]:00.0\">|</pci>|<gpu dev=\"[0-9]\" sm=\"[0-9]{0,3}\"/>|<nic>|</nic>|<net name=\"m\" gdr=\"[01]\"/>|<nvlink target=\"x\" count=\"[0-9]\"/>|\"|=| )", 0..40)) {
            let _ = parse(&parts.concat()).map(|d| d.system());
        }
    }
}
