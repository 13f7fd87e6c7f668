#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::model::{CounterBaseline, Fact, PortCounters};
use crate::testing::empty_node;

fn node_with(link_downed: u64, baseline: Option<u64>) -> Node {
    let mut n = empty_node();
    let m: BTreeMap<String, u64> = [
        ("link_downed".to_string(), link_downed),
        ("symbol_error".to_string(), 0),
    ]
    .into();
    n.health.port_counters = Fact::known(
        vec![PortCounters {
            device: "mlx5_0".into(),
            port: 1,
            counters: Fact::known(m, "/sys/class/infiniband/mlx5_0/ports/1/counters"),
            hw_counters: Fact::absent(
                "/sys/class/infiniband/mlx5_0/ports/1/hw_counters",
                "not exposed by this driver",
            ),
        }],
        "test",
    );
    n.health.baseline = baseline.map(|v| CounterBaseline {
        values: [("ib/mlx5_0/1/link_downed".to_string(), v)].into(),
        elapsed_ms: 10_000,
        origin: "--interval 10.0 s".into(),
        ages_ms: Default::default(),
    });
    n
}

#[test]
fn a_damaged_baseline_never_lets_one_reading_pass() {
    let mut n = node_with(0, None);
    assert_eq!(ib_port(&n)[0].status, Status::Pass);
    n.health.baseline_note = Some(format!(
        "{}/gdrdoctor/counters-baseline.json: expected value",
        crate::model::DAMAGED
    ));
    let f = ib_port(&n);
    assert_eq!(f[0].status, Status::Error, "{f:?}");
    assert!(f[0].message.contains("cannot be read"), "{}", f[0].message);
    // What warns or fails on one reading stays as it is.
    let plain = ib_port(&node_with(1_000_000, None))[0].status;
    assert_ne!(plain, Status::Pass);
    let mut n = node_with(1_000_000, None);
    n.health.baseline_note = Some(format!("{}x", crate::model::DAMAGED));
    assert_eq!(ib_port(&n)[0].status, plain);
    // A note that is not damage (a stale state file) changes nothing.
    let mut n = node_with(0, None);
    n.health.baseline_note = Some("state file from another boot: ignored".into());
    assert_eq!(ib_port(&n)[0].status, Status::Pass);
}

#[test]
fn a_flapping_port_fails_with_the_growth() {
    let f = ib_port(&node_with(5, Some(2)));
    assert_eq!(f[0].status, Status::Fail);
    assert!(
        f[0].message.contains("link_downed rose by 3 in 10.0 s"),
        "{}",
        f[0].message
    );
    assert!(f[0].remediation.as_deref().unwrap().contains("flapping"));
    assert!(f[0]
        .evidence
        .iter()
        .any(|e| e.observed == "link_downed 5 (+3 in 10.0 s)"));
}

#[test]
fn one_reading_passes_below_the_threshold_and_says_so() {
    let f = ib_port(&node_with(2, None));
    assert_eq!(f[0].status, Status::Pass);
    assert!(f[0]
        .evidence
        .iter()
        .any(|e| e.observed.contains("one reading")));
    let f = ib_port(&node_with(12, None));
    assert_eq!(f[0].status, Status::Warn);
    assert!(f[0].message.contains("threshold 10"), "{}", f[0].message);
}

#[test]
fn damaged_port_counters_are_an_error() {
    let mut n = node_with(0, None);
    if let Some(l) = match &mut n.health.port_counters {
        Fact::Known { value, .. } => Some(value),
        Fact::Absent { .. } => None,
    } {
        l[0].counters = Fact::absent(
            "/sys/class/infiniband/mlx5_0/ports/1/counters",
            format!("{}link_downed holds \"x\"", crate::model::DAMAGED),
        );
    }
    let f = ib_port(&n);
    assert_eq!(f[0].status, Status::Error, "{f:?}");
}

#[test]
fn a_port_the_baseline_read_and_that_is_gone_is_an_error() {
    let mut n = node_with(0, Some(0));
    assert!(ib_port(&n).iter().all(|f| f.status == Status::Pass));
    // mlx5_1 port 1 was read by the last run; it is not listed now (a VF hot-removed, a
    // NIC fallen off the bus): every other port passes, the lost one is an error.
    if let Some(b) = n.health.baseline.as_mut() {
        b.values.insert("ib/mlx5_1/1/link_downed".into(), 0);
        // A counter no check judges says nothing about the port.
        b.values.insert("ib/mlx5_2/1/port_rcv_data".into(), 7);
    }
    let f = ib_port(&n);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0].status, Status::Pass);
    assert_eq!(
        (f[1].status, f[1].subject.as_str()),
        (Status::Error, "mlx5_1/1")
    );
    assert!(f[1].message.contains("gone now"), "{}", f[1].message);
    assert!(f[1].has_evidence());
    assert!(
        f[1].evidence[0].source.ends_with("mlx5_1/ports/1"),
        "{:?}",
        f[1].evidence
    );
    // Without a baseline nothing remembers it.
    n.health.baseline = None;
    assert_eq!(ib_port(&n).len(), 1);
    // Another port of the same device is not this one.
    let mut n = node_with(0, Some(0));
    if let Some(b) = n.health.baseline.as_mut() {
        b.values.insert("ib/mlx5_0/2/symbol_error".into(), 0);
    }
    let f = ib_port(&n);
    assert_eq!(
        f.last().map(|f| (f.status, f.subject.as_str())),
        Some((Status::Error, "mlx5_0/2"))
    );
}

/// A port counter reading of `dev` port 1.
fn port_of(dev: &str) -> PortCounters {
    PortCounters {
        device: dev.into(),
        port: 1,
        counters: Fact::known(
            [("link_downed".to_string(), 0)].into(),
            format!("/sys/class/infiniband/{dev}/ports/1/counters"),
        ),
        hw_counters: Fact::absent("hw_counters", "not exposed by this driver"),
    }
}

/// A node of mlx5 functions (`(address, is a VF, bound to mlx5_core)`), RDMA devices
/// (`(name, address)`) with their port counters, and a baseline of `link_downed` for
/// each of `before`'s devices.
fn stand_in_node(fns: &[(&str, bool, bool)], devs: &[(&str, &str)], before: &[&str]) -> Node {
    use crate::testing::{nic, rdma, with};
    let pci = fns
        .iter()
        .map(|(bdf, vf, bound)| {
            let mut p = nic(&format!("/sys/devices/pci0000:45/0000:45:01.0/{bdf}"), 0);
            p.is_virtfn = *vf;
            p.driver = Fact::known(bound.then(|| "mlx5_core".to_string()), "test");
            p
        })
        .collect();
    let rd = devs.iter().map(|(n, b)| rdma(n, b, "4: ACTIVE")).collect();
    let mut n = with(empty_node(), pci, rd);
    n.health.port_counters = Fact::known(
        devs.iter().map(|(d, _)| port_of(d)).collect(),
        "/sys/class/infiniband",
    );
    n.health.baseline = Some(CounterBaseline {
        values: before
            .iter()
            .map(|d| (format!("ib/{d}/1/link_downed"), 0))
            .collect(),
        elapsed_ms: 300_000,
        origin: "the last run (test, 5 min ago)".into(),
        ages_ms: Default::default(),
    });
    n
}

/// `n`'s baseline with the PCI function of each `(device, address)` (as every reading
/// since the `rdma-at` keys records).
fn placed(mut n: Node, at: &[(&str, &str)]) -> Node {
    if let Some(b) = n.health.baseline.as_mut() {
        for (d, bdf) in at {
            b.values.insert(format!("{}/{d}/{bdf}", c::RDMA_AT), 1);
        }
    }
    n
}

/// `n` with every RDMA port on Ethernet (RoCE).
fn roce(mut n: Node) -> Node {
    let mut devs = n.rdma.get().cloned().unwrap_or_default();
    for d in devs.iter_mut() {
        let mut ports = d.ports.get().cloned().unwrap_or_default();
        for p in ports.iter_mut() {
            p.link_layer = Fact::known("Ethernet".to_string(), "test");
        }
        d.ports = Fact::known(ports, "test");
    }
    n.rdma = Fact::known(devs, "test");
    n
}

/// `n` with `bdf`'s driver set to `driver`.
fn bound_to(mut n: Node, bdf: &str, driver: Option<&str>) -> Node {
    let mut pci = n.pci.get().cloned().unwrap_or_default();
    for p in pci.iter_mut().filter(|p| p.bdf == bdf) {
        p.driver = Fact::known(driver.map(str::to_string), "test");
    }
    n.pci = Fact::known(pci, "test");
    n
}

/// The errors of `counters.ib-port` on `n`, (subject, message); every one with evidence.
fn errors_of(n: &Node) -> Vec<(String, String)> {
    ib_port(n)
        .into_iter()
        .filter(|f| f.status == Status::Error)
        .inspect(|f| assert!(f.has_evidence() && f.remediation.is_some(), "{f:?}"))
        .map(|f| (f.subject, f.message))
        .collect()
}

/// Its skips' messages; none of its findings an error.
fn skips_of(n: &Node) -> Vec<String> {
    let f = ib_port(n);
    assert!(f.iter().all(|f| f.status != Status::Error), "{f:?}");
    f.iter()
        .filter(|f| f.status == Status::Skip)
        .map(|f| f.message.clone())
        .collect()
}

/// With the devices' PCI functions in the baseline, a device gone is judged by what is at
/// its function now, not by its name or by counting stand-ins.
#[test]
fn a_device_gone_is_judged_by_its_pci_function_when_the_baseline_placed_it() {
    let sriov = by_function_sr_iov_and_a_reused_name();
    by_function_renumbered();
    by_function_without_a_device();
    by_function_roce_lag();
    by_function_renamed_or_in_a_pod();
    by_function_a_port_or_the_listing();
    by_function_transport_counters(sriov);
}

/// The functions of the card the cases below use (its two PFs and a VF), and one elsewhere.
const CARD: (&str, &str, &str) = ("0000:49:00.0", "0000:49:00.1", "0000:49:00.2");
const OTHER: &str = "0000:4a:00.0";

/// `e` is one error, of `sub`, saying `says`.
fn one(e: Vec<(String, String)>, sub: &str, says: &str) {
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, sub, "{e:?}");
    assert!(e[0].1.contains(says), "{e:?}");
}

/// By function: a PF gone while SR-IOV added a VF device, and the name it freed taken.
fn by_function_sr_iov_and_a_reused_name() -> Node {
    let (pf0, pf1, vf) = CARD;
    // SR-IOV enabled since (a VF device, mlx5_2) while PF1 fell off the bus. Counted, one
    // stand-in for one device gone: not judged (the gap placing closes).
    let sriov = stand_in_node(
        &[(pf0, false, true), (vf, true, true)],
        &[("mlx5_0", pf0), ("mlx5_2", vf)],
        &["mlx5_0", "mlx5_1"],
    );
    assert_eq!(skips_of(&sriov).len(), 1);
    let sriov = placed(sriov, &[("mlx5_0", pf0), ("mlx5_1", pf1)]);
    one(
        errors_of(&sriov),
        "mlx5_1/1",
        "0000:49:00.1 is no longer on the PCI bus",
    );
    // The other order: PF1 lost first, then the VF's device took the free name mlx5_1.
    // By name nothing is missing; by function PF1 is.
    let reused = placed(
        stand_in_node(
            &[(pf0, false, true), (vf, true, true)],
            &[("mlx5_0", pf0), ("mlx5_1", vf)],
            &["mlx5_0", "mlx5_1"],
        ),
        &[("mlx5_0", pf0), ("mlx5_1", pf1)],
    );
    one(
        errors_of(&reused),
        "mlx5_1/1",
        "0000:49:00.1 is no longer on the PCI bus",
    );
    one(
        errors_of(&reused),
        "mlx5_1/1",
        "the name mlx5_1 is carried now by the device on 0000:49:00.2",
    );
    sriov
}

/// By function: devices renumbered after one fell off the bus.
fn by_function_renumbered() {
    // Renumbered: A (mlx5_0) fell off the bus, B and C registered again as mlx5_0 and
    // mlx5_1. The loss is A's, named by its baseline name and function; B and C are
    // followed to their new names and judged against their own readings.
    let (a, b2, c2) = ("0000:17:00.0", "0000:27:00.0", "0000:37:00.0");
    let mut renumbered = placed(
        stand_in_node(
            &[(b2, false, true), (c2, false, true)],
            &[("mlx5_0", b2), ("mlx5_1", c2)],
            &["mlx5_0", "mlx5_1", "mlx5_2"],
        ),
        &[("mlx5_0", a), ("mlx5_1", b2), ("mlx5_2", c2)],
    );
    one(
        errors_of(&renumbered),
        "mlx5_0/1",
        "0000:17:00.0 is no longer on the PCI bus",
    );
    // B's link flapped before: its reading, now under mlx5_0, is B's, not A's.
    if let Some(b) = renumbered.health.baseline.as_mut() {
        b.values.insert("ib/mlx5_1/1/link_downed".into(), 5);
    }
    let mut hc = renumbered
        .health
        .port_counters
        .get()
        .cloned()
        .unwrap_or_default();
    hc[0].counters = Fact::known(
        [("link_downed".to_string(), 5)].into(),
        "/sys/class/infiniband/mlx5_0/ports/1/counters",
    );
    renumbered.health.port_counters = Fact::known(hc, "/sys/class/infiniband");
    let f = ib_port(&renumbered);
    let b_now = f.iter().find(|f| f.subject == "mlx5_0/1").unwrap();
    assert_eq!(b_now.status, Status::Pass, "{b_now:?}");
}

/// By function: functions that serve RDMA without their device: a sub-function beside it, a failed driver, no RoCE bond.
fn by_function_without_a_device() {
    let (pf0, pf1, vf) = CARD;
    // Two devices on one function (a PF and its sub-function): the PF's device gone, the
    // sub-function's left. Not a rename.
    let sf = placed(
        stand_in_node(
            &[(pf0, false, true)],
            &[("mlx5_5", pf0)],
            &["mlx5_0", "mlx5_5"],
        ),
        &[("mlx5_0", pf0), ("mlx5_5", pf0)],
    );
    one(
        errors_of(&sf),
        "mlx5_0/1",
        "still carries mlx5_5 but no longer mlx5_0",
    );
    // A PF bound to mlx5_core without a device, no bond on its card, its VF still
    // serving: the RDMA driver failed on it. An error, not "a pod".
    let pf_failed = placed(
        stand_in_node(
            &[(pf0, false, true), (vf, true, true)],
            &[("mlx5_2", vf)],
            &["mlx5_0", "mlx5_2"],
        ),
        &[("mlx5_0", pf0), ("mlx5_2", vf)],
    );
    one(
        errors_of(&pf_failed),
        "mlx5_0/1",
        "no RoCE bond formed on its card",
    );
    // The dual-port card's PF1 without a device and no LAG: the same.
    let no_lag = placed(
        stand_in_node(
            &[(pf0, false, true), (pf1, false, true)],
            &[("mlx5_0", pf0)],
            &["mlx5_0", "mlx5_1"],
        ),
        &[("mlx5_0", pf0), ("mlx5_1", pf1)],
    );
    one(errors_of(&no_lag), "mlx5_1/1", "no RoCE bond formed");
}

/// By function: a RoCE bond formed, not formed, and undone.
fn by_function_roce_lag() {
    let (pf0, pf1, _) = CARD;
    // RoCE LAG formed since: mlx5_0 is followed to the bond, PF1 is LAG's second port.
    let lag = roce(placed(
        stand_in_node(
            &[(pf0, false, true), (pf1, false, true)],
            &[("mlx5_bond_0", pf0)],
            &["mlx5_0", "mlx5_1"],
        ),
        &[("mlx5_0", pf0), ("mlx5_1", pf1)],
    ));
    let s = skips_of(&lag);
    assert!(
        s.len() == 1 && s[0].contains("beside mlx5_bond_0") && s[0].contains("LAG"),
        "{s:?}"
    );
    // Not a bond: InfiniBand (no RoCE LAG there), a sub-function new beside PF0's own
    // device, or PF0 only renumbered. PF1 without a device is an error in each.
    let ib = roce(lag.clone());
    let mut ib_only = ib.clone();
    let mut devs = ib_only.rdma.get().cloned().unwrap_or_default();
    for d in devs.iter_mut() {
        d.ports = Fact::known(
            vec![crate::testing::rdma("x", pf0, "4: ACTIVE")
                .ports
                .get()
                .cloned()
                .unwrap_or_default()[0]
                .clone()],
            "test",
        );
    }
    ib_only.rdma = Fact::known(devs, "test");
    one(errors_of(&ib_only), "mlx5_1/1", "no RoCE bond formed");
    let sf_beside = roce(placed(
        stand_in_node(
            &[(pf0, false, true), (pf1, false, true)],
            &[("mlx5_0", pf0), ("mlx5_2", pf0)],
            &["mlx5_0", "mlx5_1"],
        ),
        &[("mlx5_0", pf0), ("mlx5_1", pf1)],
    ));
    one(errors_of(&sf_beside), "mlx5_1/1", "no RoCE bond formed");
    let renumbered_pf0 = roce(placed(
        stand_in_node(
            &[(pf0, false, true), (pf1, false, true)],
            &[("mlx5_0", pf0)],
            &["mlx5_1", "mlx5_2"],
        ),
        &[("mlx5_1", pf0), ("mlx5_2", pf1)],
    ));
    let e = errors_of(&renumbered_pf0);
    assert!(
        e.iter()
            .any(|(s, m)| s == "mlx5_2/1" && m.contains("no RoCE bond formed")),
        "{e:?}"
    );
    // ... and undone: the bond's function carries mlx5_0 again, PF1 was not placed.
    let unbond = placed(
        stand_in_node(
            &[(pf0, false, true), (pf1, false, true)],
            &[("mlx5_0", pf0), ("mlx5_1", pf1)],
            &["mlx5_bond_0"],
        ),
        &[("mlx5_bond_0", pf0)],
    );
    assert!(skips_of(&unbond).is_empty());
}

/// By function: a device renamed, moved into a pod, handed to vfio-pci or left without a driver.
fn by_function_renamed_or_in_a_pod() {
    let (pf0, _, vf) = CARD;
    // A rename, and a VF's device moved into a pod.
    let renamed = placed(
        stand_in_node(&[(pf0, false, true)], &[("ib0", pf0)], &["mlx5_0"]),
        &[("mlx5_0", pf0)],
    );
    assert!(skips_of(&renamed).is_empty());
    assert!(ib_port(&renamed).iter().all(|f| f.status == Status::Pass));
    let pod = placed(
        stand_in_node(
            &[(pf0, false, true), (vf, true, true)],
            &[("mlx5_0", pf0)],
            &["mlx5_0", "mlx5_9"],
        ),
        &[("mlx5_0", pf0), ("mlx5_9", vf)],
    );
    let s = skips_of(&pod);
    assert!(
        s.iter().any(|m| m.contains(vf) && m.contains("pod")),
        "{s:?}"
    );
    // That VF handed to vfio-pci, or left without a driver.
    let vfio = bound_to(pod.clone(), vf, Some("vfio-pci"));
    one(errors_of(&vfio), "mlx5_9/1", "bound to vfio-pci now");
    let unbound = bound_to(pod.clone(), vf, None);
    one(errors_of(&unbound), "mlx5_9/1", "has no driver bound now");
    // Its driver link unreadable: unknown, an error that says so.
    let mut unreadable = pod.clone();
    let mut pci = unreadable.pci.get().cloned().unwrap_or_default();
    pci[1].driver = Fact::absent(
        "/sys/bus/pci/devices/0000:49:00.2/driver",
        "permission denied",
    );
    unreadable.pci = Fact::known(pci, "test");
    one(
        errors_of(&unreadable),
        "mlx5_9/1",
        "cannot be read (permission denied)",
    );
}

/// By function: a port gone from a device still there, the functions unreadable, a baseline that places one device of two.
fn by_function_a_port_or_the_listing() {
    let (pf0, _, vf) = CARD;
    let other = OTHER;
    // The same device on the same function without the port the baseline read: lost,
    // whatever stands in elsewhere (a VF without a device here).
    let mut port2 = placed(
        stand_in_node(
            &[(pf0, false, true), (vf, true, true)],
            &[("mlx5_0", pf0)],
            &["mlx5_0"],
        ),
        &[("mlx5_0", pf0)],
    );
    if let Some(b) = port2.health.baseline.as_mut() {
        b.values.insert("ib/mlx5_0/2/link_downed".into(), 0);
    }
    one(errors_of(&port2), "mlx5_0/2", "without this port");
    // The PCI functions unreadable now: a placed device gone is an error, not excused.
    let mut blind = placed(
        stand_in_node(&[(other, false, true)], &[("ib0", other)], &["mlx5_0"]),
        &[("mlx5_0", pf0)],
    );
    blind.pci = Fact::absent("/sys/bus/pci/devices", "permission denied");
    one(errors_of(&blind), "mlx5_0/1", "cannot be listed");
    // A baseline that places one device and not another (its address was unreadable
    // then): the placed one by function, the other by the count.
    let mixed = placed(
        stand_in_node(
            &[(pf0, false, true), (vf, true, true)],
            &[("mlx5_2", vf)],
            &["mlx5_0", "mlx5_1"],
        ),
        &[("mlx5_0", pf0)],
    );
    let e = errors_of(&mixed);
    assert!(
        e.iter()
            .any(|(s, m)| s == "mlx5_0/1" && m.contains("no RoCE bond formed")),
        "{e:?}"
    );
}

/// By function: the transport counters (hw_counters/) follow the same rule.
fn by_function_transport_counters(sriov: Node) {
    // The transport counters (hw_counters/) follow the same rule.
    let mut hw = sriov.clone();
    let mut ports = hw.health.port_counters.get().cloned().unwrap_or_default();
    for p in ports.iter_mut() {
        p.hw_counters = Fact::known(
            [("out_of_sequence".to_string(), 0)].into(),
            format!("/sys/class/infiniband/{}/ports/1/hw_counters", p.device),
        );
    }
    hw.health.port_counters = Fact::known(ports, "/sys/class/infiniband");
    if let Some(b) = hw.health.baseline.as_mut() {
        for d in ["mlx5_0", "mlx5_1"] {
            b.values.insert(format!("hw/{d}/1/out_of_sequence"), 0);
        }
    }
    let e: Vec<(Status, String)> = rdma_transport(&hw)
        .into_iter()
        .filter(|f| f.status == Status::Error)
        .map(|f| (f.status, f.subject))
        .collect();
    assert_eq!(e, [(Status::Error, "mlx5_1/1".to_string())]);
}

/// `n` with `dev`'s `link_downed` reading `v` now.
fn link_downed_now(n: &mut Node, dev: &str, v: u64) {
    let mut hc = n.health.port_counters.get().cloned().unwrap_or_default();
    for p in hc.iter_mut().filter(|p| p.device == dev) {
        p.counters = Fact::known(
            [("link_downed".to_string(), v)].into(),
            format!("/sys/class/infiniband/{dev}/ports/1/counters"),
        );
    }
    n.health.port_counters = Fact::known(hc, "/sys/class/infiniband");
}

/// Holes the review of the function-following rule found, closed: devices paired by node
/// GUID on a shared function, a device whose function is unreadable now still judged, a
/// name taken from a device the baseline could not place, placed functions never counted
/// as stand-ins for unplaced devices.
#[test]
fn following_devices_by_function_neither_hides_nor_invents() {
    let (pf0, pf1, b) = ("0000:49:00.0", "0000:49:00.1", "0000:4a:00.0");
    let fails = |n: &Node| -> Vec<String> {
        ib_port(n)
            .into_iter()
            .filter(|f| matches!(f.status, Status::Fail | Status::Error))
            .map(|f| format!("{:?} {} {}", f.status, f.subject, f.message))
            .collect()
    };
    // A PF's device (5 link downs) and its sub-function's (0) on one function, both
    // renamed (mlx5_0 -> mlx5_2, mlx5_10 -> mlx5_11). By name order the readings would
    // swap (a false "rose by 5"); by node GUID each keeps its own.
    let mut two = placed(
        stand_in_node(
            &[(pf0, false, true)],
            &[("mlx5_2", pf0), ("mlx5_11", pf0)],
            &["mlx5_0", "mlx5_10"],
        ),
        &[],
    );
    if let Some(bl) = two.health.baseline.as_mut() {
        bl.values.insert("ib/mlx5_0/1/link_downed".into(), 5);
        bl.values
            .insert(format!("{}/mlx5_0/{pf0}", c::RDMA_AT), 0x1111);
        bl.values
            .insert(format!("{}/mlx5_10/{pf0}", c::RDMA_AT), 0x2222);
    }
    let mut devs = two.rdma.get().cloned().unwrap_or_default();
    for d in devs.iter_mut() {
        let g = if d.name == "mlx5_2" {
            "0000:0000:0000:1111"
        } else {
            "0000:0000:0000:2222"
        };
        d.node_guid = Fact::known(g.to_string(), "test");
    }
    two.rdma = Fact::known(devs, "test");
    link_downed_now(&mut two, "mlx5_2", 5);
    assert!(fails(&two).is_empty(), "{:?}", fails(&two));
    // The same growth on the PF is still seen.
    let mut grew = two.clone();
    link_downed_now(&mut grew, "mlx5_2", 9);
    let f = fails(&grew);
    assert!(f.len() == 1 && f[0].starts_with("Fail mlx5_2/1"), "{f:?}");
    // Without GUIDs the two cannot be told apart: not judged, never a false fail.
    let mut blind = two.clone();
    if let Some(bl) = blind.health.baseline.as_mut() {
        bl.values.insert(format!("{}/mlx5_0/{pf0}", c::RDMA_AT), 1);
        bl.values.insert(format!("{}/mlx5_10/{pf0}", c::RDMA_AT), 1);
    }
    assert!(fails(&blind).is_empty(), "{:?}", fails(&blind));
    assert!(skips_of(&blind)
        .iter()
        .any(|m| m.contains("not told apart")));
    // Listed under its own name, its function unreadable now: still judged on its growth.
    let mut unreadable = placed(
        stand_in_node(&[(pf0, false, true)], &[("mlx5_0", pf0)], &["mlx5_0"]),
        &[("mlx5_0", pf0)],
    );
    let mut devs = unreadable.rdma.get().cloned().unwrap_or_default();
    devs[0].pci_bdf = Fact::absent("/sys/class/infiniband/mlx5_0/device", "permission denied");
    unreadable.rdma = Fact::known(devs, "test");
    link_downed_now(&mut unreadable, "mlx5_0", 4);
    let f = fails(&unreadable);
    assert!(f.len() == 1 && f[0].starts_with("Fail mlx5_0/1"), "{f:?}");
    // A placed device renamed into the name of one the baseline could not place (its
    // address unreadable then), which is gone: the unplaced one is an error.
    let mixed = placed(
        stand_in_node(
            &[(pf0, false, true)],
            &[("mlx5_1", pf0)],
            &["mlx5_0", "mlx5_1"],
        ),
        &[("mlx5_0", pf0)],
    );
    let e = errors_of(&mixed);
    assert!(
        e.iter()
            .any(|(s, m)| s == "mlx5_1/1" && m.contains("carried now by mlx5_0's function")),
        "{e:?}"
    );
    // PF1 judged lost (no device, no bond) does not also stand in for an unplaced mlx5_7.
    let double = placed(
        stand_in_node(
            &[(pf0, false, true), (pf1, false, true), (b, false, false)],
            &[("mlx5_0", pf0)],
            &["mlx5_0", "mlx5_1", "mlx5_7"],
        ),
        &[("mlx5_0", pf0), ("mlx5_1", pf1)],
    );
    let e = errors_of(&double);
    assert!(e.iter().any(|(s, _)| s == "mlx5_7/1"), "{e:?}");
    assert!(e.iter().any(|(s, _)| s == "mlx5_1/1"), "{e:?}");
}

/// The reading a run records places every RDMA device on its function.
#[test]
fn the_recorded_reading_places_each_rdma_device() {
    let n = stand_in_node(
        &[("0000:49:00.0", false, true)],
        &[("mlx5_0", "0000:49:00.0")],
        &[],
    );
    let v = c::values(&n);
    // The test device's node GUID reads 0: the key holds 1.
    assert_eq!(v.get("rdma-at/mlx5_0/0000:49:00.0"), Some(&1));
    assert_eq!(
        c::guid_value("b8ce:f603:00a1:2b3c"),
        Some(0xb8ce_f603_00a1_2b3c)
    );
    assert_eq!(c::guid_value("0000:0000:0000:0000"), None);
    assert_eq!(c::guid_value("garbage"), None);
    let b = CounterBaseline {
        values: v,
        elapsed_ms: 1,
        origin: "test".into(),
        ages_ms: Default::default(),
    };
    let mut next = n.clone();
    next.health.baseline = Some(b);
    let fates = placed_fates(&next);
    assert_eq!(
        fates.into_iter().collect::<Vec<_>>(),
        [(
            "mlx5_0".to_string(),
            ("0000:49:00.0".to_string(), Fate::Now("mlx5_0".into()))
        )]
    );
}

fn verdicts_of(n: &Node) -> Vec<(Status, String)> {
    ib_port(n)
        .into_iter()
        .map(|f| (f.status, f.subject))
        .collect()
}

/// What stands in for a vanished device without anything lost: a device the baseline does
/// not know (a rename, RoCE LAG's bond) and an RDMA function without a device here (LAG's
/// second PF, a VF or PF whose device moved into a pod). As many devices gone as stand-ins
/// is a skip; one more is an error for each.
#[test]
fn a_device_gone_beside_as_many_stand_ins_is_not_judged() {
    let (pf0, pf1, vf) = ("0000:49:00.0", "0000:49:00.1", "0000:49:00.2");
    let skip = |n: &Node, what: &str| {
        let v = verdicts_of(n);
        assert!(
            v.iter().all(|(s, _)| *s != Status::Error) && v.iter().any(|(s, _)| *s == Status::Skip),
            "{what}: {v:?}"
        );
    };
    // RoCE LAG formed since: mlx5_0 and mlx5_1 became mlx5_bond_0 on PF0; PF1 has none.
    let lag = stand_in_node(
        &[(pf0, false, true), (pf1, false, true)],
        &[("mlx5_bond_0", pf0)],
        &["mlx5_0", "mlx5_1"],
    );
    skip(&lag, "LAG");
    // A VF's device moved into a pod.
    let pod = stand_in_node(
        &[(pf0, false, true), (vf, true, true)],
        &[("mlx5_0", pf0)],
        &["mlx5_0", "mlx5_9"],
    );
    skip(&pod, "pod");
    // A rename.
    let renamed = stand_in_node(&[(pf0, false, true)], &[("ib0", pf0)], &["mlx5_0"]);
    skip(&renamed, "rename");
    // The same VF handed to vfio-pci (unbound here: not serving RDMA) stands in for
    // nothing: the device the baseline read is lost.
    let vfio = stand_in_node(
        &[(pf0, false, true), (vf, true, false)],
        &[("mlx5_0", pf0)],
        &["mlx5_0", "mlx5_9"],
    );
    assert_eq!(
        verdicts_of(&vfio),
        [
            (Status::Pass, "mlx5_0/1".to_string()),
            (Status::Error, "mlx5_9/1".to_string())
        ]
    );
    // Two gone, one VF without a device: both errors.
    let two = stand_in_node(
        &[(pf0, false, true), (vf, true, true)],
        &[("mlx5_0", pf0)],
        &["mlx5_0", "mlx5_8", "mlx5_9"],
    );
    let errors: Vec<String> = verdicts_of(&two)
        .into_iter()
        .filter(|(s, _)| *s == Status::Error)
        .map(|(_, d)| d)
        .collect();
    assert_eq!(errors, ["mlx5_8/1", "mlx5_9/1"]);
    // Every port gone (the only VF of a VM hot-removed): an error, not "no rdma port".
    let none = stand_in_node(&[], &[], &["mlx5_0"]);
    assert_eq!(
        verdicts_of(&none),
        [(Status::Error, "mlx5_0/1".to_string())]
    );
    let mut never = none.clone();
    never.health.baseline = None;
    assert_eq!(verdicts_of(&never), [(Status::Skip, "node".to_string())]);
}

#[test]
fn port_counters_all_lost_since_the_baseline_are_an_error() {
    let mut n = node_with(0, Some(0));
    if let Fact::Known { value, .. } = &mut n.health.port_counters {
        value[0].counters = Fact::known(
            [("symbol_error".to_string(), 0)].into(),
            "/sys/class/infiniband/mlx5_0/ports/1/counters",
        );
    }
    let f = ib_port(&n);
    assert_eq!(f[0].status, Status::Error, "{f:?}");
    // The counters directory gone as a whole.
    if let Fact::Known { value, .. } = &mut n.health.port_counters {
        value[0].counters =
            Fact::absent("/sys/class/infiniband/mlx5_0/ports/1/counters", "not found");
    }
    let f = ib_port(&n);
    assert_eq!(f[0].status, Status::Error, "{f:?}");
    assert!(f[0].message.contains("link_downed"), "{}", f[0].message);
    n.health.baseline = None;
    assert_eq!(ib_port(&n)[0].status, Status::Skip);
}

#[test]
fn hw_counters_not_exposed_is_a_skip() {
    let f = rdma_transport(&node_with(0, None));
    assert_eq!(f[0].status, Status::Skip);
}
