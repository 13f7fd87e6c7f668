//! The holes the campaigns found, each kept closed by its own test.

use super::*;

/// Found by the mutation test (seed 0x1720eb8): garbage in an Ethernet port's `link_layer` of
/// the RoCE-v1-only node took the port out of the RoCE checks, its `roce.gid` failure vanished
/// and the node exited 0. A port whose link layer cannot be read or is not one the kernel
/// writes is now undecided: `rdma.ports` and every `roce.*` check say `error` for it.
#[test]
fn a_damaged_link_layer_leaves_the_port_undecided() {
    let rel = "sys/devices/pci0000:25/0000:25:01.0/0000:26:00.0/0000:27:01.0/0000:29:00.0/infiniband/mlx5_1/ports/1/link_layer";
    let damages: [(&str, Option<&[u8]>); 4] = [
        ("garbage", Some(b"T\xd5\x91F\xad\x1f+:\n")),
        ("Unknown", Some(b"Unknown\n")),
        ("empty", Some(b"")),
        ("removed", None),
    ];
    for (what, bytes) in damages {
        let t = tempfile::tempdir().unwrap();
        copy_tree(&fixture("hgx-h200x8-cx7x8-roce-v1-only"), t.path());
        let base = report(t.path()).unwrap();
        assert_eq!(base.summary.exit_code, 1, "the fixture fails roce.gid");
        let file = t.path().join(rel);
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), "Ethernet");
        match bytes {
            Some(b) => std::fs::write(&file, b).unwrap(),
            None => std::fs::remove_file(&file).unwrap(),
        }
        let r = report(t.path()).unwrap();
        let s = statuses(&r);
        let of = |id: &str| s.get(&(id.to_string(), "mlx5_1/1".to_string())).copied();
        for id in [
            "rdma.ports",
            "roce.gid",
            "roce.netdev",
            "roce.mtu",
            "roce.qos",
        ] {
            assert_eq!(of(id), Some(Status::Error), "{what}: {id}");
        }
        assert_eq!(r.summary.exit_code, 3, "{what}");
        // The other ports are still judged.
        assert_eq!(
            s.get(&("roce.gid".to_string(), "mlx5_0/1".to_string())),
            Some(&Status::Pass),
            "{what}"
        );
    }
}

/// Found by the mutation test (seed 771758768): removing `link_downed` of the flapping port of
/// `port-flapping` left only `link_error_recovery` to judge (a warn) and the node exited 0. A
/// judged counter the snapshot's baseline holds for a port and that cannot be read now makes
/// the port's finding an error (a known failure stays a failure), naming the counter.
#[test]
fn a_counter_lost_since_the_baseline_is_not_good_news() {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-port-flapping"), t.path());
    let key = ("counters.ib-port".to_string(), "mlx5_2/1".to_string());
    let base = report(t.path()).unwrap();
    assert_eq!(statuses(&base).get(&key), Some(&Status::Fail));
    let rel = "sys/devices/pci0000:35/0000:35:01.0/0000:36:00.0/0000:37:01.0/0000:39:00.0/infiniband/mlx5_2/ports/1/counters/link_downed";
    std::fs::remove_file(t.path().join(rel)).unwrap();
    let r = report(t.path()).unwrap();
    assert_eq!(statuses(&r).get(&key), Some(&Status::Error));
    assert_ne!(r.summary.exit_code, 0);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == key.0 && f.subject == key.1)
        .unwrap();
    assert!(f.message.contains("link_downed"), "{}", f.message);
    // Another port whose counters are all there is judged as before.
    assert_eq!(
        statuses(&r).get(&("counters.ib-port".to_string(), "mlx5_0/1".to_string())),
        statuses(&base).get(&("counters.ib-port".to_string(), "mlx5_0/1".to_string()))
    );
}

/// The same rule for PCIe AER (`aer-rising`): removing `aer_dev_nonfatal` of GPU 2, whose
/// TOTAL_ERR_NONFATAL rose, folded the GPU into the node's AER pass and the node exited 0. The
/// kernel creates the three files together, so one missing beside the others is damage; a
/// function the baseline read and that is no longer listed is an error too.
#[test]
fn a_lost_aer_file_or_function_is_not_good_news() {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-aer-rising"), t.path());
    let key = ("counters.aer".to_string(), "0000:38:00.0".to_string());
    let base = report(t.path()).unwrap();
    assert_eq!(statuses(&base).get(&key), Some(&Status::Fail));
    assert_ne!(base.summary.exit_code, 0);
    let dir = "sys/devices/pci0000:35/0000:35:01.0/0000:36:00.0/0000:37:00.0/0000:38:00.0";
    std::fs::remove_file(t.path().join(dir).join("aer_dev_nonfatal")).unwrap();
    let r = report(t.path()).unwrap();
    assert_eq!(statuses(&r).get(&key), Some(&Status::Error));
    assert_ne!(r.summary.exit_code, 0);
    // All three gone: the baseline read them, so still an error, not "no AER statistics".
    for f in ["aer_dev_correctable", "aer_dev_fatal"] {
        std::fs::remove_file(t.path().join(dir).join(f)).unwrap();
    }
    let r = report(t.path()).unwrap();
    assert_eq!(statuses(&r).get(&key), Some(&Status::Error));
    // The GPU gone from the bus listing: its AER finding says so (and other checks notice).
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-aer-rising"), t.path());
    std::fs::remove_file(t.path().join("sys/bus/pci/devices/0000:38:00.0")).unwrap();
    let r = report(t.path()).unwrap();
    assert_eq!(statuses(&r).get(&key), Some(&Status::Error));
    assert_ne!(r.summary.exit_code, 0);
}

/// Found by the first full sweep (`GDRDOCTOR_SWEEP=all`, 58,977 damaged sysroots): nine single
/// removals or emptyings that made a failing node exit 0. A NIC whose RDMA device is gone from
/// `/sys/class/infiniband` (or whose `device` link is) dropped out of every NIC check, with its
/// failures; an RDMA device whose PCI function is gone from `/sys/bus/pci/devices` too; a
/// selected GID whose `gid_attrs/types/<n>` was lost only warned.
#[test]
fn the_sweeps_first_holes_stay_closed() {
    let roce = "sys/devices/pci0000:25/0000:25:01.0/0000:26:00.0/0000:27:01.0/0000:29:00.0/infiniband/mlx5_1/ports/1/gid_attrs/types/1";
    let acs_dev = "sys/devices/pci0000:35/0000:35:01.0/0000:36:00.0/0000:37:01.0/0000:39:00.0/infiniband/mlx5_2/device";
    // (fixture, file, emptied (else removed), the finding, its status now)
    type Case<'a> = (&'a str, &'a str, bool, (&'a str, &'a str), Status);
    let cases: [Case; 7] = [
        (
            "hgx-h200x8-cx7x8-roce-v1-only",
            "sys/class/infiniband/mlx5_1",
            false,
            ("rdma.devices", "0000:29:00.0"),
            Status::Fail,
        ),
        (
            "hgx-h200x8-cx7x8-roce-v1-only",
            roce,
            false,
            ("roce.gid", "mlx5_1/1"),
            Status::Error,
        ),
        (
            "hgx-h200x8-cx7x8-roce-v1-only",
            roce,
            true,
            ("roce.gid", "mlx5_1/1"),
            Status::Error,
        ),
        (
            "hgx-h200x8-cx7x8-acs-redirect",
            "sys/bus/pci/devices/0000:39:00.0",
            false,
            ("rdma.devices", "0000:39:00.0"),
            Status::Error,
        ),
        (
            "hgx-h200x8-cx7x8-acs-redirect",
            "sys/class/infiniband/mlx5_2",
            false,
            ("rdma.devices", "0000:39:00.0"),
            Status::Fail,
        ),
        (
            "hgx-h200x8-cx7x8-acs-redirect",
            acs_dev,
            false,
            ("rdma.devices", "0000:39:00.0"),
            Status::Fail,
        ),
        (
            "hgx-h200x8-cx7x8-port-down",
            "sys/class/infiniband/mlx5_3",
            false,
            ("rdma.devices", "0000:49:00.0"),
            Status::Fail,
        ),
    ];
    for (fx, rel, empty, (id, subject), want) in cases {
        let t = tempfile::tempdir().unwrap();
        copy_tree(&fixture(fx), t.path());
        assert_ne!(report(t.path()).unwrap().summary.exit_code, 0, "{fx}");
        let p = t.path().join(rel);
        if empty {
            std::fs::write(&p, b"").unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
        let r = report(t.path()).unwrap();
        let what = format!("{fx}: {} {rel}", if empty { "empty" } else { "remove" });
        assert_ne!(r.summary.exit_code, 0, "{what}");
        assert_eq!(
            statuses(&r).get(&(id.to_string(), subject.to_string())),
            Some(&want),
            "{what}"
        );
    }
}

/// Found by the random mutation test (seed 692234378): the `config` files of a switch's
/// upstream port (0000:46:00.0) and of a downstream port with ACS redirect set (0000:37:00.0)
/// swapped. Same vendor and device ids, so the identity check passed both; the redirect moved
/// off the GPU-NIC path and the node exited 0. A port type that the tree rules out is an error.
#[test]
fn swapped_switch_port_config_spaces_are_not_good_news() {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-acs-redirect"), t.path());
    let a = t
        .path()
        .join("sys/devices/pci0000:45/0000:45:01.0/0000:46:00.0/config");
    let b = t
        .path()
        .join("sys/devices/pci0000:35/0000:35:01.0/0000:36:00.0/0000:37:00.0/config");
    let key = ("pcie.acs-redirect".to_string(), "0000:37:00.0".to_string());
    assert_eq!(
        statuses(&report(t.path()).unwrap()).get(&key),
        Some(&Status::Fail)
    );
    let (ca, cb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    std::fs::write(&a, cb).unwrap();
    std::fs::write(&b, ca).unwrap();
    let r = report(t.path()).unwrap();
    assert_eq!(statuses(&r).get(&key), Some(&Status::Error));
    assert_ne!(r.summary.exit_code, 0);
}

/// Every bridge's capability list damaged where it starts, one bridge and one way at a time:
/// the Capabilities List bit of Status cleared, the capability pointer (0x34) set to 0x00 and
/// to 0xff, the PCI Express capability's id byte overwritten. A PCIe port without a PCI Express
/// capability is impossible, so each is damaged config space: never a pass that was not one,
/// never a healthier exit code. Before, the acs-redirect node's redirect on 0000:37:00.0 read as
/// "no acs capability" and the node exited 0.
#[test]
fn every_bridges_capability_header_pointer_and_status_bit_damaged_is_never_good_news() {
    let mut problems = Vec::new();
    let mut runs = 0;
    for name in [
        "hgx-h200x8-cx7x8-acs-redirect",
        "pcie-h200x8-cx7x4-p2p-blocked",
    ] {
        let b = base(name);
        let mut configs = Vec::new();
        walk(b.dir.path(), &mut |p, t| {
            if t.is_file() && p.file_name().is_some_and(|n| n == "config") {
                configs.push(p.to_path_buf());
            }
        });
        configs.sort();
        for cfg in configs {
            let orig = std::fs::read(&cfg).unwrap();
            // Bridges only (header type 1), whose config space holds the capability list.
            if orig.len() < 0x100 || orig[0x0e] & 0x7f != 1 {
                continue;
            }
            let pcie_at = {
                let mut pos = usize::from(orig[0x34] & 0xfc);
                let mut found = None;
                for _ in 0..48 {
                    if pos < 0x40 || pos + 1 >= orig.len() {
                        break;
                    }
                    if orig[pos] == 0x10 {
                        found = Some(pos);
                        break;
                    }
                    pos = usize::from(orig[pos + 1] & 0xfc);
                }
                found
            };
            let mut damages: Vec<(&str, Vec<u8>)> = Vec::new();
            let mut d = orig.clone();
            d[0x06] &= !0x10;
            damages.push(("status capability-list bit cleared", d));
            for ptr in [0x00u8, 0xff] {
                let mut d = orig.clone();
                d[0x34] = ptr;
                damages.push((
                    if ptr == 0 {
                        "capability pointer 0x00"
                    } else {
                        "capability pointer 0xff"
                    },
                    d,
                ));
            }
            if let Some(at) = pcie_at {
                let mut d = orig.clone();
                d[at] = 0x00;
                damages.push(("pci express capability id overwritten", d));
            }
            for (how, bytes) in damages {
                std::fs::write(&cfg, &bytes).unwrap();
                let what = format!("{name}: {} {how}", cfg.display());
                if let Some(r) = report(b.dir.path()) {
                    check_invariants(&what, &r, (&b.status, b.exit), true, true, &mut problems);
                }
                runs += 1;
            }
            std::fs::write(&cfg, &orig).unwrap();
        }
    }
    assert!(runs >= 40, "{runs} damaged bridges only");
    conclude(
        format!("capability headers: {runs} damaged bridge config spaces"),
        &problems,
    );
}
