//! The rule's view of the node ([`System`]): per GPU its compute capability and NVLink-C2C
//! attachment, per NIC its ports, the PCIe path and NVLink of every pair, and whether NCCL
//! can register each GPU's memory with each NIC.

use super::c2c::c2c_of;
use super::context::Context;
use super::p2p;
use crate::model::{CpuVendor, Node, RdmaDevice};
use crate::nccl::rule::{self, Support, System};
use crate::nccl::PathKind;
use crate::topo;

/// Compute capability from a GPU's name when CUDA did not say: the chip code name of a pci.ids
/// name (`NVIDIA GH100 [H200 SXM 141GB]`), else the product name `nvidia-smi -q` prints
/// (`NVIDIA A100-SXM4-80GB`, `Tesla V100-SXM2-32GB`). A heuristic, and said so where used.
pub fn cc_from_model(name: &str) -> Option<(i32, i32)> {
    cc_from_name(name).or_else(|| cc_from_product(name))
}

/// `nvidia-smi -q` product names (NVIDIA's CUDA GPUs table: developer.nvidia.com/cuda-gpus).
fn cc_from_product(name: &str) -> Option<(i32, i32)> {
    let n = name.to_ascii_uppercase();
    let has = |w: &str| {
        n.split(|c: char| !c.is_ascii_alphanumeric()).any(|t| {
            t == w
                || (t.starts_with(w)
                    && t[w.len()..]
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == 'G' || c == 'B'))
        })
    };
    let table: &[(&[&str], (i32, i32))] = &[
        (&["GB300", "B300"], (10, 3)),
        (&["GB200", "B200", "B100"], (10, 0)),
        (&["GH200", "H200", "H100", "H800", "H20"], (9, 0)),
        (&["L40S", "L40", "L4", "L20", "ADA"], (8, 9)),
        (&["A100", "A800", "A30"], (8, 0)),
        (
            &["A40", "A10", "A16", "A2", "A6000", "A5000", "A4000"],
            (8, 6),
        ),
        (&["V100", "TITAN V"], (7, 0)),
        (&["T4", "RTX6000", "RTX8000"], (7, 5)),
        (&["P100"], (6, 0)),
        (&["P40", "P4"], (6, 1)),
        (&["K80"], (3, 7)),
    ];
    for (words, cc) in table {
        if words.iter().any(|w| has(w)) {
            return Some(*cc);
        }
    }
    // GeForce / RTX by generation: RTX 50xx 12.0, 40xx 8.9, 30xx 8.6, 20xx 7.5, GTX 10xx 6.1.
    let num = n
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|t| t.len() == 4 && t.chars().all(|c| c.is_ascii_digit()))?;
    if !(n.contains("RTX") || n.contains("GTX")) {
        return None;
    }
    match &num[..2] {
        "50" => Some((12, 0)),
        "40" => Some((8, 9)),
        "30" => Some((8, 6)),
        "20" => Some((7, 5)),
        "10" => Some((6, 1)),
        _ => None,
    }
}

/// The chip code name in a pci.ids name (`GH100` Hopper 9.0, `GA100` 8.0, `GV100` 7.0, ...).
fn cc_from_name(name: &str) -> Option<(i32, i32)> {
    let chip = name.split_whitespace().find(|w| {
        w.len() >= 4
            && w.chars().take(2).all(|c| c.is_ascii_uppercase())
            && w.chars().nth(2).is_some_and(|c| c.is_ascii_digit())
    })?;
    match &chip[..2] {
        "GK" => Some((3, 5)),
        "GM" => Some((5, 0)),
        "GP" => Some((6, 0)),
        "GV" => Some((7, 0)),
        "TU" => Some((7, 5)),
        "GA" if chip.starts_with("GA100") => Some((8, 0)),
        "GA" => Some((8, 6)),
        "AD" => Some((8, 9)),
        "GH" => Some((9, 0)),
        "GB" if chip.starts_with("GB1") => Some((10, 0)),
        "GB" => Some((12, 0)),
        _ => None,
    }
}

/// The rule's view of the node.
pub fn system(node: &Node, cx: &Context<'_>) -> System {
    let cuda = node.live.cuda.get();
    let cuda_dev = |bdf: &str| cuda.and_then(|c| c.devices.iter().find(|d| d.bdf == bdf));
    let gpus: Vec<rule::Gpu> = cx
        .gpus
        .iter()
        .map(|g| {
            let (cc, cc_source) = match cuda_dev(&g.bdf) {
                Some(d) => (
                    Some((d.cc_major, d.cc_minor)),
                    "CUDA compute capability".to_string(),
                ),
                None => {
                    let name = cx
                        .index
                        .get(&g.bdf)
                        .map(crate::names::device_name)
                        .unwrap_or_default();
                    // NVML knows it without CUDA (a GPU CUDA was not started on).
                    let nvml_cc = node.live.nvml.get().and_then(|n| {
                        n.gpus
                            .iter()
                            .find(|x| x.bdf == g.bdf)
                            .and_then(|x| Some((x.cc_major?, x.cc_minor?)))
                    });
                    if let Some(cc) = nvml_cc {
                        (
                            Some(cc),
                            "NVML compute capability (nvmlDeviceGetCudaComputeCapability)"
                                .to_string(),
                        )
                    } else {
                        match cc_from_model(&name) {
                            Some(cc) => (
                                Some(cc),
                                format!("GPU model {name} (CUDA not queried: heuristic)"),
                            ),
                            None => (None, format!("unknown for {name}")),
                        }
                    }
                }
            };
            let (c2c, c2c_source) = c2c_of(node, &g.bdf, &cx.index);
            rule::Gpu {
                id: g.bdf.clone(),
                cc,
                cc_source,
                c2c,
                c2c_source,
            }
        })
        .collect();
    let nics: Vec<rule::Nic> = cx
        .nics
        .iter()
        .map(|(d, _)| rule::Nic {
            name: d.name.clone(),
            ports: d.ports.get().map(|ps| {
                ps.iter()
                    .map(|p| (p.port, p.state_name() == Some("ACTIVE")))
                    .collect()
            }),
        })
        .collect();
    let mut paths = Vec::new();
    let mut smi = Vec::new();
    // Why paths are unknown although both ends are placed (a CPU whose numa node cannot be
    // read): the rule's hint for them, when no NIC's location is unknown too.
    let mut cpu_unknown: Vec<String> = Vec::new();
    for g in &cx.gpus {
        let (mut pr, mut sr) = (Vec::new(), Vec::new());
        for (_, ep) in &cx.nics {
            match ep {
                Some(n) => {
                    let p = topo::path(g, n);
                    if let Some(why) = p.unknown {
                        if !cpu_unknown.contains(&why) {
                            cpu_unknown.push(why);
                        }
                        pr.push(None);
                        sr.push(None);
                    } else {
                        pr.push(Some(PathKind::from_pcie(p.nccl)));
                        sr.push(Some(p.smi.as_str().to_string()));
                    }
                }
                None => {
                    pr.push(None);
                    sr.push(None);
                }
            }
        }
        paths.push(pr);
        smi.push(sr);
    }
    let path_hint = if !cpu_unknown.is_empty() && cx.nics.iter().all(|(_, e)| e.is_some()) {
        format!(
            "PHB (one cpu) cannot be told from SYS (two): {}",
            cpu_unknown.join("; ")
        )
    } else {
        String::new()
    };
    let gpu_paths = cx
        .gpus
        .iter()
        .map(|a| {
            cx.gpus
                .iter()
                .map(|b| {
                    let p = topo::path(a, b);
                    p.unknown.is_none().then(|| PathKind::from_pcie(p.nccl))
                })
                .collect()
        })
        .collect();
    // NVLink: NVML when it was queried, else the NVSwitches of an HGX board on the PCI bus.
    let ng = cx.gpus.len();
    let mut nvlink = vec![vec![None; ng]; ng];
    let nvml_gpus: Vec<&str> = node
        .live
        .nvml
        .get()
        .map(|n| n.gpus.iter().map(|g| g.bdf.as_str()).collect())
        .unwrap_or_default();
    let switches = p2p::nvswitches(node);
    let nvlink_source = if !nvml_gpus.is_empty() {
        "NVML NVLink state".to_string()
    } else if switches > 0 {
        format!(
            "assumed from {switches} NVSwitch(es) on the PCI bus (NVML not queried: run `gdrdoctor check` for the live links)"
        )
    } else {
        format!(
            "not known: NVML not queried ({})",
            node.live.nvml.reason().unwrap_or("no NVLink facts")
        )
    };
    let pairs = if !nvml_gpus.is_empty() {
        p2p::pairs(node)
    } else {
        Vec::new()
    };
    // Indexed once: the loops below are per GPU pair (a 512-GPU node has 262,144).
    let nvml_set: std::collections::HashSet<&str> = nvml_gpus.iter().copied().collect();
    let links: std::collections::HashMap<(&str, &str), usize> = pairs
        .iter()
        .flat_map(|p| {
            let n = p.nvlinks();
            [
                ((p.a.as_str(), p.b.as_str()), n),
                ((p.b.as_str(), p.a.as_str()), n),
            ]
        })
        .collect();
    for (a, ga) in cx.gpus.iter().enumerate() {
        for (b, gb) in cx.gpus.iter().enumerate() {
            if a == b {
                continue;
            }
            nvlink[a][b] =
                if nvml_set.contains(ga.bdf.as_str()) && nvml_set.contains(gb.bdf.as_str()) {
                    let n = links
                        .get(&(ga.bdf.as_str(), gb.bdf.as_str()))
                        .copied()
                        .unwrap_or(0);
                    Some(n > 0)
                } else if switches > 0 {
                    Some(true)
                } else {
                    None
                };
        }
    }
    let support = cx
        .gpus
        .iter()
        .map(|g| {
            let dev = cuda_dev(&g.bdf);
            let gap = crate::derive::cuda_gap(node, &g.bdf);
            cx.nics
                .iter()
                .map(|(nic, _)| support(node, cx, dev, gap.as_ref(), nic))
                .collect()
        })
        .collect();
    System {
        gpus,
        nics,
        paths,
        path_hint,
        smi,
        nvlink,
        nvlink_source,
        gpu_paths,
        support,
        amd_two_gpus: node.cpu_vendor.get() == Some(&CpuVendor::Amd) && ng <= 2,
        cpu: node.cpu_vendor.get().copied(),
    }
}

/// Whether NCCL can register this GPU's memory (`cuda_dev`: what CUDA says about the GPU;
/// `gap`: why CUDA's answer lacks it) with this NIC, from the node's facts.
fn support(
    node: &Node,
    cx: &Context<'_>,
    cuda_dev: Option<&crate::model::CudaDevice>,
    gap: Option<&crate::derive::CudaGap>,
    nic: &RdmaDevice,
) -> Support {
    let mut s = Support {
        peermem: cx.peermem.available,
        ..Default::default()
    };
    if cx.peermem.available == Some(true) {
        s.assumptions.extend(cx.peermem.reasons.iter().cloned());
    }
    let probe = node
        .live
        .verbs
        .get()
        .and_then(|v| v.dmabuf_probe.get(&nic.name).copied().flatten());
    s.dmabuf = cx.dmabuf.available;
    // Live facts recorded but unreadable (a snapshot's live.json damaged): what they would
    // have said is not assumed (a GPU_DIRECT_RDMA_SUPPORTED=0 or an unlisted NIC may be in
    // the part that was lost).
    for (what, reason) in [
        (
            "CUDA's GPU_DIRECT_RDMA_SUPPORTED for the gpu",
            node.live.cuda.reason(),
        ),
        ("whether libibverbs lists the NIC", node.live.verbs.reason()),
    ] {
        if let Some(r) = reason.filter(|r| crate::model::is_damaged(r)) {
            s.damaged.push(format!("cannot tell {what}: {r}"));
        }
    }
    // CUDA answered, but not for this GPU, and nothing says why (or its entries are damaged):
    // what it would have said is not assumed. Left out for its compute mode or hidden by
    // CUDA_VISIBLE_DEVICES stays an assumption, said so.
    if let Some(crate::derive::CudaGap::Damaged(r) | crate::derive::CudaGap::Unanswered(r)) = gap {
        s.damaged.push(format!(
            "cannot tell CUDA's GPU_DIRECT_RDMA_SUPPORTED for the gpu: {r}"
        ));
    }
    // CUDA asked and refusing to start (the fabric manager down, a GPU fallen off): no attribute
    // to assume, and NCCL cannot start either. (Under --host-root the library is the
    // container's, which may lack the devices: that stays an assumption.)
    if let Some(r) = node
        .live
        .cuda
        .reason()
        .filter(|r| r.starts_with("cuInit failed"))
    {
        if node.source != crate::model::SourceKind::HostRoot {
            s.damaged.push(format!(
                "cannot tell CUDA's GPU_DIRECT_RDMA_SUPPORTED for the gpu: {r} (CUDA cannot start here, and neither can NCCL)"
            ));
        }
    }
    // NCCL opens NICs through libibverbs: a NIC it cannot list is not used at all, whatever
    // sysfs shows (live verbs facts; ncclIbInit lists devices with ibv_get_device_list).
    if let Some(v) = node.live.verbs.get() {
        let unlisted = match v.list_errno {
            Some(e) => Some(format!(
                "libibverbs cannot list rdma devices (ibv_get_device_list errno {e}{}): NCCL finds no IB device and falls back to sockets, so no GDR",
                if e == 38 {
                    ": no kernel RDMA support, ib_uverbs not loaded or /sys/class/infiniband_verbs not visible (in a container)"
                } else {
                    ""
                }
            )),
            None if !v.devices.contains(&nic.name) => Some(format!(
                "libibverbs does not list {} (no user-space provider for it, or /dev/infiniband not visible): NCCL does not use it",
                nic.name
            )),
            None => None,
        };
        if let Some(why) = unlisted {
            s.peermem = Some(false);
            s.dmabuf = Some(false);
            s.nic_off = why;
            return s;
        }
    }
    if cx.peermem.available == Some(false) {
        s.peermem_off = cx.peermem.reasons.join("; ");
    }
    s.nic_off = format!(
        "NIC-level GDR off (NCCL: \"GPU Direct RDMA Disabled for HCA\"): {}, and no dma-buf path: {}",
        if s.peermem_off.is_empty() {
            "no peer-memory client"
        } else {
            s.peermem_off.as_str()
        },
        cx.dmabuf.reasons.join("; ")
    );
    s.unknown = vec![format!(
        "cannot tell whether the NIC supports GDR: {}",
        cx.peermem
            .reasons
            .iter()
            .chain(cx.dmabuf.reasons.iter())
            .cloned()
            .collect::<Vec<_>>()
            .join("; ")
    )];
    // NCCL's per-device dma-buf probe (D02) and the GPU's own dma-buf attribute (D03).
    if s.dmabuf == Some(true) {
        let gpu_no = cuda_dev.is_some_and(|d| d.dma_buf_supported == Some(0));
        let nic_no = matches!(probe, Some(95) | Some(93));
        if gpu_no || nic_no {
            s.dmabuf = Some(false);
            s.nic_off = if nic_no {
                format!(
                    "dma-buf refused by {} (ibv_reg_dmabuf_mr probe errno {}) and no peer-memory client",
                    nic.name,
                    probe.unwrap_or(0)
                )
            } else {
                "CUDA reports DMA_BUF_SUPPORTED=0 on this gpu and there is no peer-memory client"
                    .into()
            };
        }
        if cuda_dev.is_none() {
            s.assumptions.push(
                "dma-buf: CUDA DMA_BUF_SUPPORTED on this gpu (live fact, not known here)".into(),
            );
        }
        if probe.is_none() {
            s.assumptions.push(format!(
                "dma-buf: NCCL's ibv_reg_dmabuf_mr probe on {} (live fact, not known here)",
                nic.name
            ));
        }
    }
    // (4) GPU support: a CUDA attribute, live only.
    s.gpu_off =
        "CUDA reports GPU_DIRECT_RDMA_SUPPORTED=0 for this gpu: NCCL turns GDR off for it".into();
    match cuda_dev.and_then(|d| d.gpu_direct_rdma_supported) {
        Some(0) => s.gpu = Some(false),
        Some(_) => s.gpu = Some(true),
        None if s.damaged.is_empty() => s
            .assumptions
            .push("gpu: CUDA GPU_DIRECT_RDMA_SUPPORTED=1 (live fact, not known here)".into()),
        None => {}
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::super::c2c::grace_model;
    use super::*;

    #[test]
    fn compute_capability_from_the_model_name() {
        assert_eq!(cc_from_name("NVIDIA GH100 [H200 SXM 141GB]"), Some((9, 0)));
        assert_eq!(cc_from_name("NVIDIA GA100 [A100 SXM4 80GB]"), Some((8, 0)));
        assert_eq!(
            cc_from_name("NVIDIA GV100GL [Tesla V100 SXM2 32GB]"),
            Some((7, 0))
        );
        assert_eq!(cc_from_name("NVIDIA TU104GL [Tesla T4]"), Some((7, 5)));
        assert_eq!(cc_from_name("NVIDIA AD102GL [L40S]"), Some((8, 9)));
        assert_eq!(cc_from_name("10de:9999"), None);
    }

    #[test]
    fn compute_capability_from_cuda_then_nvml_then_the_name() {
        use crate::model::{CudaDevice, CudaFacts, NvmlFacts, NvmlGpu};
        use crate::testing::*;
        let mut n = switch_pair();
        let cc = |n: &Node| {
            let cx = Context::new(n);
            let s = system(n, &cx);
            (s.gpus[0].cc, s.gpus[0].cc_source.clone())
        };
        assert!(cc(&n).1.contains("heuristic"), "{:?}", cc(&n));
        // NVML knows it without CUDA (a GPU CUDA was not started on).
        n.live.nvml = known(NvmlFacts {
            gpus: vec![NvmlGpu {
                bdf: "0000:18:00.0".into(),
                cc_major: Some(9),
                cc_minor: Some(0),
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(
            cc(&n),
            (
                Some((9, 0)),
                "NVML compute capability (nvmlDeviceGetCudaComputeCapability)".to_string()
            )
        );
        // CUDA's own answer first.
        n.live.cuda = known(CudaFacts {
            devices: vec![CudaDevice {
                bdf: "0000:18:00.0".into(),
                cc_major: 9,
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(cc(&n).1, "CUDA compute capability");
    }

    #[test]
    fn compute_capability_from_nvidia_smi_product_names() {
        for (name, cc) in [
            ("NVIDIA H100 80GB HBM3", Some((9, 0))),
            ("NVIDIA A100-SXM4-80GB", Some((8, 0))),
            ("NVIDIA A800-SXM4-80GB", Some((8, 0))),
            ("NVIDIA A10", Some((8, 6))),
            ("Tesla V100-SXM2-32GB", Some((7, 0))),
            ("Tesla T4", Some((7, 5))),
            ("GeForce GTX 1080", Some((6, 1))),
            ("NVIDIA GeForce RTX 3090", Some((8, 6))),
            ("NVIDIA RTX 6000 Ada Generation", Some((8, 9))),
            ("NVIDIA L40S", Some((8, 9))),
            ("NVIDIA GH200 480GB", Some((9, 0))),
            ("NVIDIA B200", Some((10, 0))),
            ("Quadro K2200", None),
        ] {
            assert_eq!(cc_from_model(name), cc, "{name}");
        }
        assert!(grace_model("NVIDIA GH200 480GB") && !grace_model("NVIDIA H100 80GB HBM3"));
    }
}
