//! `counters.ib-port` and `counters.rdma-transport`: the RDMA ports' link counters (the IB
//! PMA counters, `counters/`) and transport counters (the driver's, `hw_counters/`).

use super::fate::{by_function, placed_fates, Fate};
use super::judge::{finding, gone, gone_finding, lost, plain, unless_baseline_damaged, with_lost};
use crate::counters::{self as c, Def, Judged};
use crate::model::{CounterBaseline, Fact, Node, PortCounters};
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

/// The ports (`dev/port`) the baseline holds judged `kind` counters for.
fn baseline_ports(
    b: &crate::model::CounterBaseline,
    kind: &str,
    d: &str,
    judged: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let under = format!("{kind}/{d}/");
    let mut v: Vec<String> = b
        .values
        .range(under.clone()..)
        .take_while(|(k, _)| k.starts_with(&under))
        .filter_map(|(k, _)| {
            let (port, counter) = k[under.len()..].split_once('/')?;
            judged(counter.rsplit('/').next()?).then(|| format!("{d}/{port}"))
        })
        .collect();
    v.dedup();
    v
}

/// One port check: `hw` judges `hw_counters/` (driver counters, keys `hw/...`), else
/// `counters/` (the IB PMA counters, keys `ib/...`).
struct PortCheck {
    id: &'static str,
    defs: &'static [Def],
    pick: fn(&PortCounters) -> &Fact<BTreeMap<String, u64>>,
    hw: bool,
    what: &'static str,
    fix: fn(&str, &[&Judged]) -> String,
}

impl PortCheck {
    /// The family of its baseline keys.
    fn kind(&self) -> &'static str {
        if self.hw {
            "hw"
        } else {
            "ib"
        }
    }
    fn judged(&self, n: &str) -> bool {
        c::find(self.defs, n).is_some()
    }
}

/// The sysfs directory of a port (`mlx5_0/1`).
fn port_source(sub: &str) -> String {
    format!("/sys/class/infiniband/{}", sub.replace('/', "/ports/"))
}

fn port_check(pc: &PortCheck, node: &Node) -> Vec<Finding> {
    let list = match node.health.port_counters.get() {
        Some(l) => l,
        None => {
            return vec![
                Finding::new(pc.id, Status::Error, "node", "cannot list the rdma ports").evidence(
                    node.health.port_counters.source(),
                    node.health.port_counters.describe(|_| String::new()),
                ),
            ]
        }
    };
    // Devices the baseline placed on a PCI function are followed by function, and the
    // baseline's port keys re-keyed to the names their functions carry now; what a placed
    // device lost, or what excuses it, is said per device.
    let fates = placed_fates(node);
    let mut placed_out = placed_findings(pc, node, &fates);
    let remapped;
    let node = match node
        .health
        .baseline
        .as_ref()
        .and_then(|b| by_function(b, &fates).map(|r| (b, r)))
    {
        Some((orig, (b, displaced))) => {
            placed_out.extend(displaced_findings(pc, node, orig, &fates, displaced));
            let mut n = node.clone();
            n.health.baseline = Some(b);
            remapped = n;
            &remapped
        }
        None => node,
    };
    // Ports the baseline read and that are not listed now (after the ports' own findings).
    let lost_ports = gone(
        node,
        pc.kind(),
        2,
        |n| pc.judged(n),
        |sub| {
            list.iter()
                .any(|p| sub.split_once('/') == Some((p.device.as_str(), &p.port.to_string())))
        },
    );
    if list.is_empty() && lost_ports.is_empty() && placed_out.is_empty() {
        return vec![Finding::new(pc.id, Status::Skip, "node", "no rdma port")];
    }
    let mut out = port_findings(pc, node, list);
    out.extend(lost_port_findings(pc, node, list, &fates, &lost_ports));
    out.extend(placed_out);
    out
}

/// What each device the baseline placed on a PCI function lost, or what excuses it.
fn placed_findings(
    pc: &PortCheck,
    node: &Node,
    fates: &BTreeMap<String, (String, Fate)>,
) -> Vec<Finding> {
    let mut placed_out = Vec::new();
    let Some(b) = node.health.baseline.as_ref() else {
        return placed_out;
    };
    let (id, what) = (pc.id, pc.what);
    for (d, (was_on, fate)) in fates {
        let ports = baseline_ports(b, pc.kind(), d, &|n| pc.judged(n));
        if ports.is_empty() {
            continue;
        }
        match fate {
            Fate::Now(_) => {}
            Fate::Excused(why) => placed_out.push(
                Finding::new(
                    id,
                    Status::Skip,
                    ports.join(" "),
                    format!(
                        "{} in the counter baseline and not listed now; {why}: not judged as lost",
                        ports.join(", ")
                    ),
                )
                .evidence(
                    "/sys/class/infiniband",
                    format!("{}: not listed; {why}", ports.join(", ")),
                ),
            ),
            Fate::Lost {
                why,
                path,
                seen,
                fix,
            } => {
                // Its name listed again on another function: say so, or the report shows
                // the name passing beside its own loss.
                let reused = node
                    .rdma
                    .get()
                    .and_then(|v| v.iter().find(|x| x.name == *d))
                    .and_then(|x| x.pci_bdf.get().cloned().flatten())
                    .filter(|now_on| now_on != was_on)
                    .map(|now_on| format!(" (the name {d} is carried now by the device on {now_on}: mlx5 hands a freed name to the next device that registers)"))
                    .unwrap_or_default();
                for sub in &ports {
                    let mut f = gone_finding(node, id, sub, what, port_source(sub), fix).expected(
                        path.as_str(),
                        seen.as_str(),
                        "an RDMA device on the function, as in the counter baseline",
                    );
                    f.message = format!("{}: {why}{reused}", f.message);
                    placed_out.push(f);
                }
            }
        }
    }
    placed_out
}

/// The ports of devices the baseline could not place (`orig`) whose names other devices
/// carry now (`displaced`).
fn displaced_findings(
    pc: &PortCheck,
    node: &Node,
    orig: &CounterBaseline,
    fates: &BTreeMap<String, (String, Fate)>,
    displaced: Vec<String>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for u in displaced {
        let now_on = fates
            .iter()
            .find(|(_, (_, f))| matches!(f, Fate::Now(n) if *n == u))
            .map(|(d, (bdf, _))| format!("{d}'s function {bdf}"))
            .unwrap_or_default();
        for sub in baseline_ports(orig, pc.kind(), &u, &|n| pc.judged(n)) {
            let mut f = gone_finding(node, pc.id, &sub, pc.what, port_source(&sub), "the baseline does not say which PCI function this device was on (its address was unreadable then), and another device carries its name now: `ibv_devinfo -l`, `rdma dev`, `dmesg | grep -i mlx5` for a NIC that fell off the bus or failed");
            f.message = format!("{}: its name is carried now by {now_on}", f.message);
            out.push(f);
        }
    }
    out
}

/// The findings of the ports listed now.
fn port_findings(pc: &PortCheck, node: &Node, list: &[PortCounters]) -> Vec<Finding> {
    let (id, what, kind, hw) = (pc.id, pc.what, pc.kind(), pc.hw);
    let judged = |n: &str| pc.judged(n);
    let mut by: BTreeMap<String, Vec<c::Reading>> = c::port_readings_of(node, judged)
        .into_iter()
        .map(|(s, a, b)| (s, if hw { b } else { a }))
        .collect();
    let b = node.health.baseline.as_ref();
    let mut out = Vec::new();
    for p in list {
        let sub = format!("{}/{}", p.device, p.port);
        let fact = (pc.pick)(p);
        let rs: Vec<c::Reading> = by.remove(&sub).unwrap_or_default();
        let missing = lost(node, &format!("{kind}/{sub}"), &rs, judged);
        let again = format!(
            "read the port's counters again (`ls {}`); a snapshot with a lost counter file needs a new capture",
            fact.source()
        );
        if let Some(reason) = fact.reason() {
            let status = if reason.starts_with("permission") || crate::model::is_damaged(reason) {
                Status::Error
            } else {
                Status::Skip
            };
            let f = Finding::new(id, status, &sub, format!("no {what} counters: {reason}"))
                .evidence(fact.source(), format!("unknown ({reason})"));
            out.push(with_lost(f, &missing, fact.source(), again));
            continue;
        }
        if rs.is_empty() {
            let f = Finding::new(
                id,
                Status::Skip,
                &sub,
                format!("none of the {what} counters gdrdoctor judges is exposed here"),
            )
            .evidence(fact.source(), "no known counter file");
            out.push(with_lost(f, &missing, fact.source(), again));
            continue;
        }
        let js = c::judge(rs, pc.defs, b);
        let dev = p.device.clone();
        let f = finding(
            id,
            &sub,
            what,
            &js,
            node,
            fact.source(),
            |bad| (pc.fix)(&dev, bad),
            plain,
        );
        out.push(with_lost(f, &missing, fact.source(), again));
    }
    out
}

/// The ports the baseline read and that are not listed now (`lost_ports`).
fn lost_port_findings(
    pc: &PortCheck,
    node: &Node,
    list: &[PortCounters],
    fates: &BTreeMap<String, (String, Fate)>,
    lost_ports: &[String],
) -> Vec<Finding> {
    let (id, what, kind) = (pc.id, pc.what, pc.kind());
    let b = node.health.baseline.as_ref();
    let mut out = Vec::new();
    // A port gone from a device that is still on its function: lost, whatever stands in.
    let followed = |dev: &str| {
        fates
            .values()
            .find(|(_, f)| matches!(f, Fate::Now(n) if n == dev))
            .map(|(bdf, _)| bdf.as_str())
    };
    let mut unplaced_ports: Vec<&String> = Vec::new();
    for sub in lost_ports {
        let dev = sub.split_once('/').map(|(d, _)| d).unwrap_or(sub.as_str());
        match followed(dev) {
            Some(bdf) => {
                let mut f = gone_finding(
                    node,
                    id,
                    sub,
                    what,
                    port_source(sub),
                    &format!("the port is gone from a device that is still there: `rdma link show {dev}`, `dmesg | grep -i {bdf}`; a port removed on purpose needs nothing more (this is said once)"),
                );
                f.message = format!(
                    "{}: {dev} is still on its PCI function {bdf}, without this port",
                    f.message
                );
                out.push(f);
            }
            None => unplaced_ports.push(sub),
        }
    }
    // A baseline that does not place its devices (written before the rdma-at keys): what can
    // stand in for a vanished device without anything lost is counted, a device the baseline
    // does not know (a rename, RoCE LAG's mlx5_bond_0) and an RDMA function without a device
    // here (LAG's second PF, a VF or PF whose device moved into a pod), less those the placed
    // devices above took. As many of them as devices gone: not judged.
    let mut unplaced: Vec<&str> = unplaced_ports
        .iter()
        .filter_map(|s| s.split_once('/').map(|(d, _)| d))
        .collect();
    unplaced.sort_unstable();
    unplaced.dedup();
    let excused = fates
        .values()
        .filter(|(_, f)| matches!(f, Fate::Excused(_)))
        .count();
    let mut new_devs: Vec<&str> = list
        .iter()
        .map(|p| p.device.as_str())
        .filter(|d| {
            b.is_some_and(|b| {
                let under = format!("{kind}/{d}/");
                !b.values.keys().any(|k| k.starts_with(&under))
            })
        })
        .collect();
    new_devs.sort_unstable();
    new_devs.dedup();
    // Functions a placed device was on are judged above: never a stand-in here.
    let deviceless = super::super::rdma::deviceless_functions(node)
        .into_iter()
        .filter(|f| !fates.values().any(|(bdf, _)| bdf == f))
        .count();
    let stand_ins = (new_devs.len() + deviceless).saturating_sub(excused);
    if !unplaced.is_empty() && unplaced.len() <= stand_ins {
        let ports: Vec<&str> = unplaced_ports.iter().map(|s| s.as_str()).collect();
        out.push(
            Finding::new(
                id,
                Status::Skip,
                ports.join(" "),
                format!(
                    "{} in the counter baseline and not listed now, beside {stand_ins} device(s) the baseline does not know or rdma function(s) without a device here (a rename, RoCE LAG's mlx5_bond_N, a device moved into a pod's netns): not judged as lost (this baseline does not say which PCI function they were on)",
                    ports.join(", "),
                ),
            )
            .evidence(
                "/sys/class/infiniband",
                format!("{}: not listed", ports.join(", ")),
            ),
        );
    } else {
        for sub in unplaced_ports {
            out.push(gone_finding(
                node,
                id,
                sub,
                what,
                port_source(sub),
                "the RDMA port was read by the run the baseline comes from and is not among the ports listed now: a NIC that fell off the bus (`dmesg | grep -i mlx5`, `lspci -d 15b3:`), a VF hot-removed by the hypervisor, mlx5_ib unloaded, or the device renamed (RoCE LAG makes mlx5_bond_N); `ibv_devinfo -l` lists what is there",
            ));
        }
    }
    out
}

fn link_fix(dev: &str, bad: &[&Judged]) -> String {
    let flap = bad.iter().any(|j| j.reading.name == "link_downed");
    format!(
        "{}check the cable, transceiver and switch port of {dev}: `mlxlink -d {dev} -m -c -e` (signal, BER, FEC), the switch side's port counters; reseat or replace the cable; clear the counters after fixing (`perfquery -x -R` on InfiniBand) so the next reading starts from zero",
        if flap { "the link is flapping: every QP on it breaks and NCCL jobs using this rail fail; drain them, then " } else { "" }
    )
}

fn transport_fix(dev: &str, _bad: &[&Judged]) -> String {
    format!(
        "packets on {dev} are being lost or refused: on RoCE check PFC/ECN (roce.qos, `mlnx_qos -i <if>`) and the switch's buffer drops; on InfiniBand the link counters (counters.ib-port) and the switch; access errors usually come from an application freeing or deregistering memory (GPU memory included) while peers still use it"
    )
}

/// `counters.ib-port`.
const LINK: PortCheck = PortCheck {
    id: "counters.ib-port",
    defs: c::IB_PORT,
    pick: |p| &p.counters,
    hw: false,
    what: "link",
    fix: link_fix,
};

/// `counters.rdma-transport`.
const TRANSPORT: PortCheck = PortCheck {
    id: "counters.rdma-transport",
    defs: c::RDMA_TRANSPORT,
    pick: |p| &p.hw_counters,
    hw: true,
    what: "transport",
    fix: transport_fix,
};

pub fn ib_port(node: &Node) -> Vec<Finding> {
    let f = port_check(&LINK, node);
    unless_baseline_damaged(node, f)
}

pub fn rdma_transport(node: &Node) -> Vec<Finding> {
    let f = port_check(&TRANSPORT, node);
    unless_baseline_damaged(node, f)
}

#[cfg(test)]
mod tests;
