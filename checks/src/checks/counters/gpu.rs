//! `counters.nvlink` and `counters.pcie-replay`: the GPUs' NVLink and PCIe replay counters,
//! from NVML (live).

use super::judge::{finding, gone, gone_finding, lost, unless_baseline_damaged, with_lost};
use crate::counters::{self as c, Def, Judged};
use crate::model::Node;
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

fn gpu_check(id: &str, node: &Node, defs: &'static [Def], nvlink: bool) -> Vec<Finding> {
    let gpus = crate::derive::gpus(node);
    if gpus.is_empty() {
        return vec![Finding::new(id, Status::Skip, "node", "no nvidia gpu")];
    }
    if node.live.nvml.get().is_none() {
        return vec![super::super::gpu::absent(id, node, &node.live.nvml)];
    }
    let mut by: BTreeMap<String, (Vec<c::Reading>, Vec<c::Reading>)> =
        c::gpu_readings_of(node, nvlink)
            .into_iter()
            .map(|(g, a, b)| (g, (a, b)))
            .collect();
    let mut out = Vec::new();
    for g in gpus.iter().copied() {
        let Some((links, replay)) = by.remove(&g.bdf) else {
            out.push(super::super::gpu::no_nvml_answer(id, node, &g.bdf));
            continue;
        };
        let rs = if nvlink { links } else { replay };
        // Counters the baseline holds that NVML does not give now; a link NVML reports as
        // down is gpu.nvlink's finding, not a lost counter.
        let down: Vec<String> = node
            .live
            .nvml
            .get()
            .and_then(|n| n.gpus.iter().find(|x| x.bdf == g.bdf))
            .map(|x| {
                x.nvlinks
                    .iter()
                    .filter(|l| !l.active)
                    .map(|l| l.link.to_string())
                    .collect()
            })
            .unwrap_or_default();
        let (under, source) = if nvlink {
            (
                format!("nvlink/{}", g.bdf),
                "nvmlDeviceGetNvLinkErrorCounter",
            )
        } else {
            (
                format!("pcie-replay/{}", g.bdf),
                "nvmlDeviceGetPcieReplayCounter",
            )
        };
        let missing: Vec<String> = lost(node, &under, &rs, |rest| match rest.split_once('/') {
            Some((link, name)) => c::find(defs, name).is_some() && !down.iter().any(|d| d == link),
            None => !nvlink,
        })
        .into_iter()
        .map(|m| match m.split_once('/') {
            Some((link, name)) => format!("link {link} {name}"),
            None => "replay".into(),
        })
        .collect();
        let again = format!(
            "read the counters again (`nvidia-smi -q -i {}`); NVML that stops answering a counter it gave within the same boot points at the driver (`dmesg` for Xid errors); a snapshot that lost it needs a new capture",
            g.bdf
        );
        // Links NVML reports down now whose counters the baseline read: they went down since.
        // gpu.nvlink compares GPUs with each other, so the same link lost on every GPU (one
        // failed NVSwitch) would be seen by nobody.
        let went_down: Vec<&String> = if nvlink {
            down.iter()
                .filter(|l| {
                    node.health.baseline.as_ref().is_some_and(|b| {
                        let p = format!("{under}/{l}/");
                        b.values.keys().any(|k| k.starts_with(&p))
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let down_since = |mut f: Finding| -> Finding {
            if went_down.is_empty() {
                return f;
            }
            let list = went_down
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            if matches!(f.status, Status::Pass | Status::Skip) {
                f.status = Status::Warn;
                f.remediation = Some(format!("`nvidia-smi nvlink -s -i {}` shows the link states; a link that went down needs the GPU (and on NVSwitch systems the fabric manager's view, `nvidia-smi -q | grep -i fabric`) checked: `dmesg` for Xid 74/79, then a GPU reset and `dcgmi diag -r 2`", g.bdf));
            }
            f.message = format!(
                "{}; link(s) {list} went down since the counter baseline (active and counted then)",
                f.message
            );
            f.expected(
                source,
                format!("link(s) {list}: down"),
                "active, as in the counter baseline",
            )
        };
        if rs.is_empty() {
            let why = if nvlink {
                "nvml reports no nvlink error counters for this gpu (no active nvlink, or nvmlDeviceGetNvLinkErrorCounter is not supported here)"
            } else {
                "nvml reports no pcie replay counter for this gpu"
            };
            let f = down_since(Finding::new(id, Status::Skip, &g.bdf, why));
            out.push(with_lost(f, &missing, source, again));
            continue;
        }
        let js = c::judge(rs, defs, node.health.baseline.as_ref());
        let bdf = g.bdf.clone();
        let (what, label): (&str, fn(&Judged) -> String) = if nvlink {
            ("nvlink", |j: &Judged| {
                let link = j.reading.key.rsplit('/').nth(1).unwrap_or("?");
                format!("link {link} {}", j.reading.name)
            })
        } else {
            ("pcie replay", |j: &Judged| {
                format!("pcie {}", j.reading.name)
            })
        };
        let f = finding(
            id,
            &g.bdf,
            what,
            &js,
            node,
            source,
            |_| {
                if nvlink {
                    format!("read the link errors (`nvidia-smi nvlink -e -i {bdf}`, `nvidia-smi nvlink -s`); links that keep retraining need the GPU (and on NVSwitch systems the fabric) reset and then `dcgmi diag -r 2`; recurring errors on one link: reseat or RMA the board")
                } else {
                    format!("the GPU's PCIe link replays TLPs: check `lspci -vvv -s {bdf}` and counters.aer on the bridges above it; reseat the GPU or riser; a BIOS update can change the link equalisation")
                }
            },
            label,
        );
        out.push(with_lost(down_since(f), &missing, source, again));
    }
    let (prefix, source) = if nvlink {
        ("nvlink", "nvmlDeviceGetNvLinkErrorCounter")
    } else {
        ("pcie-replay", "nvmlDeviceGetPcieReplayCounter")
    };
    for sub in gone(
        node,
        prefix,
        1,
        |n| !nvlink || c::find(defs, n).is_some(),
        |b| gpus.iter().any(|g| g.bdf == b),
    ) {
        out.push(gone_finding(
            node,
            id,
            &sub,
            if nvlink { "nvlink" } else { "pcie replay" },
            format!("/sys/bus/pci/devices/{sub} ({source})"),
            "the GPU was read by the run the baseline comes from and is not among the GPUs on the PCI bus now: it fell off the bus (`dmesg` for Xid 79, `nvidia-smi`) or was hot-removed (a VM's GPU detached by the hypervisor); drain the node and reset or re-seat the GPU",
        ));
    }
    out
}

pub fn nvlink(node: &Node) -> Vec<Finding> {
    unless_baseline_damaged(node, gpu_check("counters.nvlink", node, c::NVLINK, true))
}

pub fn pcie_replay(node: &Node) -> Vec<Finding> {
    unless_baseline_damaged(
        node,
        gpu_check("counters.pcie-replay", node, c::PCIE_REPLAY, false),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::model::{CounterBaseline, Fact};
    use crate::testing::empty_node;
    fn gpu_node(recovery_now: u64, replay_now: u64) -> Node {
        use crate::model::{NvLink, NvmlFacts, NvmlGpu};
        let g = crate::testing::gpu("/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0", 0);
        let mut n = crate::testing::with(empty_node(), vec![g], vec![]);
        n.live.nvml = Fact::known(
            NvmlFacts {
                gpus: vec![NvmlGpu {
                    bdf: "0000:18:00.0".into(),
                    nvlinks: vec![NvLink {
                        link: 3,
                        active: true,
                        recovery_errors: Some(recovery_now),
                        replay_errors: Some(0),
                        ..Default::default()
                    }],
                    pcie_replay_counter: Some(replay_now),
                    ..Default::default()
                }],
                ..Default::default()
            },
            "NVML",
        );
        n.health.baseline = Some(CounterBaseline {
            values: [
                ("nvlink/0000:18:00.0/3/recovery".to_string(), 0),
                ("pcie-replay/0000:18:00.0".to_string(), 100),
            ]
            .into(),
            elapsed_ms: 60_000,
            origin: "the last run".into(),
            ages_ms: Default::default(),
        });
        n
    }

    #[test]
    fn nvlink_recovery_growth_fails_and_names_the_link() {
        let f = nvlink(&gpu_node(2, 100));
        assert_eq!(f[0].status, Status::Fail);
        assert!(
            f[0].message
                .starts_with("link 3 recovery rose by 2 in 60.0 s"),
            "{}",
            f[0].message
        );
        assert_eq!(nvlink(&gpu_node(0, 100))[0].status, Status::Pass);
    }

    #[test]
    fn pcie_replay_growth_warns() {
        let f = pcie_replay(&gpu_node(0, 130));
        assert_eq!(f[0].status, Status::Warn);
        assert!(
            f[0].message.starts_with("pcie replay rose by 30"),
            "{}",
            f[0].message
        );
        // A driver reload resets it: lower than the baseline is judged alone (not judged).
        assert_eq!(pcie_replay(&gpu_node(0, 5))[0].status, Status::Pass);
    }

    #[test]
    fn a_counter_the_baseline_holds_and_nvml_lost_is_an_error() {
        // Both counters there: judged as before.
        assert_eq!(pcie_replay(&gpu_node(0, 100))[0].status, Status::Pass);
        let lose = |f: &dyn Fn(&mut crate::model::NvmlGpu)| {
            let mut n = gpu_node(0, 100);
            if let Fact::Known { value, .. } = &mut n.live.nvml {
                f(&mut value.gpus[0]);
            }
            n
        };
        let n = lose(&|g| g.pcie_replay_counter = None);
        let f = pcie_replay(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(
            f[0].message.contains("replay (in the counter baseline)"),
            "{}",
            f[0].message
        );
        // Without a baseline the same NVML answer is a skip, as before.
        let mut plain = n.clone();
        plain.health.baseline = None;
        assert_eq!(pcie_replay(&plain)[0].status, Status::Skip);
        // An active link whose recovery counter NVML stopped giving.
        let f = nvlink(&lose(&|g| g.nvlinks[0].recovery_errors = None));
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(f[0].message.contains("link 3 recovery"), "{}", f[0].message);
        // A link gone from NVML's list.
        let f = nvlink(&lose(&|g| g.nvlinks.clear()));
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        // A link NVML reports as down is not a lost counter, but it went down since the
        // baseline: a warning (gpu.nvlink cannot see it when every GPU lost the same link).
        let f = nvlink(&lose(&|g| g.nvlinks[0].active = false));
        assert_eq!(f[0].status, Status::Warn, "{f:?}");
        assert!(
            f[0].message.contains("link(s) 3 went down"),
            "{}",
            f[0].message
        );
        // A known failure stays a failure, and still names what was lost.
        let mut n = gpu_node(2, 100);
        if let Fact::Known { value, .. } = &mut n.live.nvml {
            value.gpus[0].nvlinks.push(crate::model::NvLink {
                link: 4,
                active: true,
                ..Default::default()
            });
        }
        if let Some(b) = n.health.baseline.as_mut() {
            b.values.insert("nvlink/0000:18:00.0/4/replay".into(), 0);
        }
        let f = nvlink(&n);
        assert_eq!(f[0].status, Status::Fail, "{f:?}");
        assert!(f[0].message.contains("link 4 replay"), "{}", f[0].message);
    }

    #[test]
    fn a_gpu_the_baseline_read_and_that_is_gone_is_an_error() {
        let mut n = gpu_node(0, 100);
        assert!(pcie_replay(&n).iter().all(|f| f.status == Status::Pass));
        if let Some(b) = n.health.baseline.as_mut() {
            b.values.insert("pcie-replay/0000:28:00.0".into(), 0);
            b.values.insert("nvlink/0000:28:00.0/0/recovery".into(), 0);
        }
        for f in [pcie_replay(&n), nvlink(&n)] {
            let gone: Vec<_> = f.iter().filter(|f| f.subject == "0000:28:00.0").collect();
            assert_eq!(gone.len(), 1, "{f:?}");
            assert_eq!(gone[0].status, Status::Error);
            assert!(gone[0].message.contains("gone now"), "{}", gone[0].message);
        }
    }
}
