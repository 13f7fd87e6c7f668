use super::*;
use crate::model::{Fact, Node};
use crate::pci::config;
use crate::report::Status;
use crate::testing::*;

fn set_link(n: &mut Node, bdf: &str, cur: (&str, u32), max: (&str, u32)) {
    if let Fact::Known { value: pci, .. } = &mut n.pci {
        for d in pci.iter_mut().filter(|d| d.bdf == bdf) {
            d.cur_link_speed = known(cur.0.into());
            d.cur_link_width = known(cur.1);
            d.max_link_speed = known(max.0.into());
            d.max_link_width = known(max.1);
        }
    }
}

#[test]
fn a_narrow_nic_link_warns_an_idle_gpu_speed_passes_unknown_is_an_error() {
    let mut n = switch_pair();
    set_link(
        &mut n,
        "0000:18:00.0",
        ("2.5 GT/s PCIe", 16),
        ("32.0 GT/s PCIe", 16),
    );
    set_link(
        &mut n,
        "0000:19:00.0",
        ("32.0 GT/s PCIe", 8),
        ("32.0 GT/s PCIe", 16),
    );
    let f = link(&n);
    let by = |b: &str| f.iter().find(|f| f.subject == b).map(|f| f.status);
    assert_eq!(
        by("0000:18:00.0"),
        Some(Status::Pass),
        "idle gpus lower their speed"
    );
    assert_eq!(by("0000:19:00.0"), Some(Status::Warn), "x8 of x16");
    // The switch's upstream port has no link facts: said so, not passed.
    assert_eq!(by("0000:16:00.0"), Some(Status::Error));
}

/// A 4 KiB config space: ids, the capability list bit, a PCI Express capability of `kind`
/// at 0x40 (DevCtl `devctl`), and the extended capabilities `ext` (offset, header, the
/// dword after it) from 0x100.
fn config(vendor: u16, device: u16, kind: u8, devctl: u16, ext: &[(usize, u32, u32)]) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    let put16 = |c: &mut Vec<u8>, o: usize, v: u16| c[o..o + 2].copy_from_slice(&v.to_le_bytes());
    let put32 = |c: &mut Vec<u8>, o: usize, v: u32| c[o..o + 4].copy_from_slice(&v.to_le_bytes());
    put16(&mut c, 0x00, vendor);
    put16(&mut c, 0x02, device);
    put16(&mut c, 0x06, 0x0010);
    let bridge = kind != config::PCIE_TYPE_ENDPOINT;
    c[0x0b] = if bridge { 0x06 } else { 0x02 };
    c[0x0a] = if bridge { 0x04 } else { 0x07 };
    c[0x0e] = u8::from(bridge);
    c[0x34] = 0x40;
    c[0x40] = 0x10;
    put16(&mut c, 0x42, 0x0002 | (u16::from(kind) << 4));
    put16(&mut c, 0x48, devctl);
    for (off, header, next_dword) in ext {
        put32(&mut c, *off, *header);
        put32(&mut c, off + 4, *next_dword);
    }
    c
}

/// An extended capability header: id, version 1, next pointer.
fn ext(id: u16, next: usize) -> u32 {
    u32::from(id) | (1 << 16) | ((next as u32) << 20)
}

fn set_config(n: &mut Node, bdf: &str, bytes: Vec<u8>) {
    if let Fact::Known { value: pci, .. } = &mut n.pci {
        for d in pci.iter_mut().filter(|d| d.bdf == bdf) {
            d.config = known(bytes.clone());
        }
    }
}

/// switch_pair with both downstream ports (the bridges between its GPU and NIC) holding
/// `dsp` (a function of the bridge's address).
fn with_dsps(dsp: impl Fn() -> Vec<u8>) -> Node {
    let mut n = switch_pair();
    for b in ["0000:17:00.0", "0000:17:01.0"] {
        set_config(&mut n, b, dsp());
    }
    n
}

const DSP: u8 = config::PCIE_TYPE_DOWNSTREAM;
const ACS: u16 = config::EXT_CAP_ID_ACS;
const AER: u16 = config::EXT_CAP_ID_AER;

#[test]
fn a_config_space_that_does_not_fit_the_tree_is_not_judged() {
    // Bus numbers as the kernel enumerated them: primary, secondary, subordinate.
    let cfg = |t: u8, buses: [u8; 3]| {
        let mut v = config(0x10b5, 0x8796, t, 0, &[(0x100, ext(ACS, 0), 0x001d << 16)]);
        v[0x18..0x1b].copy_from_slice(&buses);
        v
    };
    let a = cfg(DSP, [0x17, 0x18, 0x18]);
    let b = cfg(DSP, [0x17, 0x19, 0x19]);
    let usp = cfg(config::PCIE_TYPE_UPSTREAM, [0x16, 0x17, 0x19]);
    let node = |x: &[u8], y: &[u8]| {
        let mut n = switch_pair();
        set_config(&mut n, "0000:17:00.0", x.to_vec());
        set_config(&mut n, "0000:17:01.0", y.to_vec());
        n
    };
    // In place: the redirect is judged (fails) on both downstream ports.
    let f = acs_redirect(&node(&a, &b));
    assert!(f.iter().all(|f| f.status == Status::Fail), "{f:?}");
    // The two downstream ports' config swapped (same ids, same type): nothing is judged.
    let f = acs_redirect(&node(&b, &a));
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f.iter().all(|f| f.status == Status::Error), "{f:?}");
    assert!(
        f[0].evidence[0]
            .observed
            .contains("0000:18:00.0 right below 0000:17:00.0 is on bus 18"),
        "{f:?}"
    );
    // The upstream port's config on a downstream port.
    let f = acs_redirect(&node(&usp, &b));
    assert_eq!(f[0].status, Status::Error, "{f:?}");
    assert!(
        f[0].evidence[0]
            .observed
            .contains("primary bus 16, but 0000:17:00.0 is on bus 17"),
        "{f:?}"
    );
}

#[test]
fn acs_is_judged_when_the_chain_is_sound() {
    let ok = with_dsps(|| config(0x10b5, 0x8796, DSP, 0, &[(0x100, ext(ACS, 0), 0)]));
    let f = acs_redirect(&ok);
    assert!(f.iter().all(|f| f.status == Status::Pass), "{f:?}");
    let redirect = with_dsps(|| {
        config(
            0x10b5,
            0x8796,
            DSP,
            0,
            &[(0x100, ext(ACS, 0), 0x001d << 16)],
        )
    });
    assert!(acs_redirect(&redirect)
        .iter()
        .all(|f| f.status == Status::Fail));
    // No ACS anywhere in a chain walked to its end: direct routing, a pass with evidence.
    let none = with_dsps(|| config(0x10b5, 0x8796, DSP, 0, &[(0x100, ext(AER, 0), 0)]));
    let f = acs_redirect(&none);
    assert!(
        f.iter()
            .all(|f| f.status == Status::Pass && f.has_evidence()),
        "{f:?}"
    );
}

#[test]
fn a_broken_chain_is_an_error_naming_the_device_and_offset_never_no_acs() {
    // ACS with ReqRedir sits at 0x140, reached only if the chain from 0x100 holds.
    let acs_at_140 = (0x140, ext(ACS, 0), 0x001d << 16);
    type Chain = Vec<(usize, u32, u32)>;
    let cases: Vec<(&str, Chain, &str)> = vec![
        (
            "self-loop",
            vec![(0x100, ext(AER, 0x100), 0), acs_at_140],
            "0x100: next pointer points to itself",
        ),
        (
            "all-ones",
            vec![(0x100, 0xffff_ffff, 0xffff_ffff), acs_at_140],
            "0x100: all-ones header",
        ),
        (
            "below 0x100",
            vec![(0x100, ext(AER, 0x040), 0), acs_at_140],
            "next pointer 0x040 points below 0x100",
        ),
        (
            "loop",
            vec![
                (0x100, ext(AER, 0x180), 0),
                (0x180, ext(0x0b, 0x100), 0),
                acs_at_140,
            ],
            "loops back to 0x100",
        ),
    ];
    for (name, chain, needle) in cases {
        let n = with_dsps(|| config(0x10b5, 0x8796, DSP, 0, &chain));
        let f = acs_redirect(&n);
        assert_eq!(f.len(), 2, "{name}: {f:?}");
        for x in &f {
            assert_eq!(x.status, Status::Error, "{name}: {x:?}");
            assert!(x.subject.starts_with("0000:17:0"), "{name}: {x:?}");
            assert!(
                x.evidence.iter().any(|e| e.observed.contains(needle)),
                "{name}: {needle} in {x:?}"
            );
        }
    }
    // A broken standard list hides the PCI Express capability, and with it the extended
    // list: not "no acs" either.
    let n = with_dsps(|| {
        let mut c = config(
            0x10b5,
            0x8796,
            DSP,
            0,
            &[(0x100, ext(ACS, 0), 0x001d << 16)],
        );
        c[0x40] = 0x01; // power management first ...
        c[0x41] = 0x20; // ... pointing into the header
        c
    });
    let f = acs_redirect(&n);
    assert!(f.iter().all(|x| x.status == Status::Error), "{f:?}");
    assert!(
        f[0].evidence[0]
            .observed
            .contains("capability list broken at 0x041"),
        "{f:?}"
    );
}

#[test]
fn config_space_of_another_device_is_not_trusted() {
    // sysfs says 10b5:8796 (the bridge builder); config space says an Intel device.
    let n = with_dsps(|| config(0x8086, 0x2030, DSP, 0, &[(0x100, ext(ACS, 0), 0)]));
    let f = acs_redirect(&n);
    assert!(f.iter().all(|x| x.status == Status::Error), "{f:?}");
    assert!(
        f[0].evidence[0]
            .observed
            .contains("vendor id 0x8086 differs"),
        "{f:?}"
    );
    // All-ones: the device does not answer.
    let n = with_dsps(|| vec![0xff; 4096]);
    assert!(acs_redirect(&n).iter().all(|x| x.status == Status::Error));
}

#[test]
fn mrrs_rejects_reserved_encodings_and_broken_chains() {
    let nic = |devctl: u16| {
        let mut n = switch_pair();
        set_config(
            &mut n,
            "0000:19:00.0",
            config(0x15b3, 0x1021, config::PCIE_TYPE_ENDPOINT, devctl, &[]),
        );
        n
    };
    // MaxReadReq 4096 (101b), MaxPayload 256 (001b): a pass.
    let f = mrrs(&nic(0x5000 | 0x0020));
    assert_eq!(f[0].status, Status::Pass, "{f:?}");
    // 110b and 111b are reserved, in either field.
    for devctl in [0x6000u16, 0x7000, 0x5000 | (6 << 5), 0x5000 | (7 << 5)] {
        let f = mrrs(&nic(devctl));
        assert_eq!(f[0].status, Status::Error, "DevCtl {devctl:#06x}: {f:?}");
        assert!(f[0].message.contains("reserved"), "{f:?}");
    }
    // No PCI Express capability because the list is broken: not "has no capability".
    let mut n = switch_pair();
    let mut c = config(0x15b3, 0x1021, config::PCIE_TYPE_ENDPOINT, 0x5000, &[]);
    c[0x34] = 0x50;
    c[0x50] = 0x05;
    c[0x51] = 0x50; // MSI pointing to itself
    set_config(&mut n, "0000:19:00.0", c);
    let f = mrrs(&n);
    assert_eq!(f[0].status, Status::Error);
    assert!(
        f[0].evidence[0].observed.contains("points to itself"),
        "{f:?}"
    );
}

#[test]
fn ats_absent_needs_a_whole_chain() {
    let mut n = switch_pair();
    set_config(
        &mut n,
        "0000:19:00.0",
        config(
            0x15b3,
            0x1021,
            config::PCIE_TYPE_ENDPOINT,
            0x5000,
            &[(0x100, ext(AER, 0x100), 0)],
        ),
    );
    let f = ats(&n);
    assert_eq!(f[0].status, Status::Error, "{f:?}");
    let mut n = switch_pair();
    set_config(
        &mut n,
        "0000:19:00.0",
        config(
            0x15b3,
            0x1021,
            config::PCIE_TYPE_ENDPOINT,
            0x5000,
            &[(0x100, ext(AER, 0), 0)],
        ),
    );
    assert_eq!(ats(&n)[0].status, Status::Pass);
}

#[test]
fn bars_never_pass_on_nothing() {
    use crate::model::Resource;
    let mut n = switch_pair();
    let gpu_cfg = {
        let mut c = config(0x10de, 0x2335, config::PCIE_TYPE_ENDPOINT, 0, &[]);
        c[0x0b] = 0x03;
        c[0x0a] = 0x02;
        c[0x10..0x14].copy_from_slice(&0x9000_0000u32.to_le_bytes());
        c
    };
    let bar0 = Resource {
        index: 0,
        start: 0x9000_0000,
        end: 0x90ff_ffff,
        flags: 0x40200,
    };
    let unset = |i| Resource {
        index: i,
        start: 0,
        end: 0,
        flags: 0,
    };
    let set = |n: &mut Node, cfg: Vec<u8>, res: Vec<Resource>| {
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for d in pci.iter_mut().filter(|d| d.bdf == "0000:18:00.0") {
                d.config = known(cfg.clone());
                d.resources = known(res.clone());
            }
        }
    };
    let full: Vec<Resource> = std::iter::once(bar0).chain((1..7).map(unset)).collect();
    set(&mut n, gpu_cfg.clone(), full.clone());
    let by = |n: &Node| {
        bars(n)
            .into_iter()
            .find(|f| f.subject == "0000:18:00.0")
            .map(|f| f.status)
    };
    assert_eq!(by(&n), Some(Status::Pass));
    // No assigned bar in sysfs: nothing was compared, so nothing passes.
    set(&mut n, gpu_cfg.clone(), (0..7).map(unset).collect());
    assert_eq!(by(&n), Some(Status::Error));
    // Config space cut short.
    set(&mut n, gpu_cfg[..0x20].to_vec(), full.clone());
    assert_eq!(by(&n), Some(Status::Error));
    // Another device's config space.
    let mut other = gpu_cfg.clone();
    other[0..2].copy_from_slice(&0x1234u16.to_le_bytes());
    set(&mut n, other, full);
    assert_eq!(by(&n), Some(Status::Error));
}

#[test]
fn acs_and_bars_without_config_space_are_never_a_pass() {
    let n = switch_pair();
    for f in acs_redirect(&n).into_iter().chain(bars(&n)) {
        assert_ne!(f.status, Status::Pass, "{f:?}");
    }
    let lonely = with(empty_node(), vec![bridge(ROOT_PORT, 0)], vec![]);
    assert_eq!(acs_redirect(&lonely)[0].status, Status::Skip);
}
