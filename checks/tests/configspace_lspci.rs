//! Differential test: `pci::config::decode` against the real `lspci`.
//!
//! For every dump we have (the hand-built `fixtures/configspace/*.hex` and the
//! real Haswell root port + ConnectX-3 Pro dump under `shared/realdata`), run
//! `lspci -F <dump> -vvv -nn`, parse its text and compare it field by field
//! with what `decode` says. Without `lspci` the comparisons skip with one printed line
//! (`GDRDOCTOR_TEST_REQUIRE_ALL=1` makes that a failure; `.ci/run` sets it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gdrdoctor_checks::pci::config::{decode, dump_bdf, parse_hex_dump, ConfigSpace};
use std::path::{Path, PathBuf};
use std::process::Command;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/configspace");
const REALDATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/realdata/pciutils-haswell-cx3pro-configspace"
);

// ---------------------------------------------------------------------------
// lspci availability
// ---------------------------------------------------------------------------

#[path = "../../tests/common/nodes.rs"]
mod nodes;
#[path = "../../tests/common/require.rs"]
mod require;

#[path = "configspace_lspci/bits.rs"]
mod bits;
#[path = "configspace_lspci/compare.rs"]
mod compare;
#[path = "configspace_lspci/lspci_text.rs"]
mod lspci_text;

use compare::{compare, Stats};
use lspci_text::*;

/// True when lspci can be run; otherwise a visible skip (a failure under
/// GDRDOCTOR_TEST_REQUIRE_ALL=1).
fn lspci_available() -> bool {
    match require::runs("lspci", &["--version"]) {
        Ok(()) => true,
        Err(e) => {
            require::skip(
                "config-space differential test against lspci",
                &e,
                "apt-get install pciutils (dnf install pciutils)",
            );
            false
        }
    }
}

fn run_lspci(dump: &Path, args: &[&str]) -> String {
    let out = Command::new("lspci")
        .arg("-F")
        .arg(dump)
        .args(args)
        .output()
        .expect("running lspci");
    assert!(
        out.status.success(),
        "lspci -F {} {:?} failed: {}",
        dump.display(),
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("lspci output is UTF-8")
}

// ---------------------------------------------------------------------------
// Comparison (lspci's text: configspace_lspci/lspci_text.rs; one device, field by
// field: configspace_lspci/compare.rs; the bits lspci names: configspace_lspci/bits.rs)
// ---------------------------------------------------------------------------

/// Compare every device of `dump` (an lspci -xxxx style file) with lspci.
fn compare_dump_file(dump: &Path, errs: &mut Vec<String>, stats: &mut Stats) {
    let text = std::fs::read_to_string(dump).unwrap();
    let ours = parse_hex_dump(&text);
    assert!(!ours.is_empty(), "{}: no devices parsed", dump.display());
    let lspci = parse_lspci(&run_lspci(dump, &["-vvv", "-nn"]));
    let name = dump.file_name().unwrap().to_string_lossy().to_string();
    if lspci.len() != ours.len() {
        errs.push(format!(
            "{name}: lspci shows {} devices, parse_hex_dump found {}",
            lspci.len(),
            ours.len()
        ));
    }
    for (header, bytes) in &ours {
        let bdf = dump_bdf(header);
        let Some(ld) = lspci.iter().find(|d| bdf_of(&d.header) == bdf) else {
            errs.push(format!("{name}: lspci does not show {bdf}"));
            continue;
        };
        let cs = decode(bytes);
        compare(&cs, ld, &format!("{name} {bdf}"), true, errs, stats);
    }

    // parse_hex_dump agrees with lspci's own reader: lspci -xxxx re-emits
    // what it read, and we must read back the same bytes.
    let back = parse_hex_dump(&run_lspci(dump, &["-xxxx"]));
    for (header, bytes) in &ours {
        let bdf = dump_bdf(header);
        match back.iter().find(|(h, _)| dump_bdf(h) == bdf) {
            Some((_, b)) if b == bytes => {}
            Some((_, b)) => errs.push(format!(
                "{name} {bdf}: lspci -xxxx re-emits {} bytes that differ from parse_hex_dump's {}",
                b.len(),
                bytes.len()
            )),
            None => errs.push(format!("{name} {bdf}: missing from lspci -xxxx")),
        }
    }
}

fn fixture_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .unwrap_or_else(|e| panic!("reading {FIXTURES}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "hex"))
        .collect();
    v.sort();
    v
}

fn load_fixture(file: &str, bdf: &str) -> ConfigSpace {
    let text = std::fs::read_to_string(Path::new(FIXTURES).join(file)).unwrap();
    let devs = parse_hex_dump(&text);
    let (_, bytes) = devs
        .iter()
        .find(|(h, _)| dump_bdf(h) == bdf)
        .unwrap_or_else(|| panic!("{file}: no {bdf}"));
    decode(bytes)
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn fixtures_match_lspci() {
    let files = fixture_files();
    assert!(
        files.len() >= 8,
        "expected >= 8 fixture dumps, found {files:?}"
    );
    if !lspci_available() {
        return;
    }
    let mut errs = Vec::new();
    let mut stats = Stats::default();
    for f in &files {
        compare_dump_file(f, &mut errs, &mut stats);
    }
    eprintln!("fixtures vs lspci: {stats:?}");
    assert!(
        errs.is_empty(),
        "{} mismatches:\n{}",
        errs.len(),
        errs.join("\n")
    );
    // The comparison must actually have compared things.
    assert!(stats.devices >= 11, "{stats:?}");
    assert_eq!(stats.ids, stats.devices, "{stats:?}");
    assert!(stats.pcie >= 10, "{stats:?}");
    assert!(stats.links >= 8, "{stats:?}");
    assert!(stats.acs >= 3, "{stats:?}");
    assert!(stats.ats >= 2, "{stats:?}");
    assert!(stats.aer >= 7, "{stats:?}");
    assert!(stats.aer_any_set >= 8, "{stats:?}");
    assert!(stats.loops >= 4, "{stats:?}");
    assert!(stats.limited >= 1, "{stats:?}");
    assert!(stats.bars >= 8, "{stats:?}");
    assert!(stats.flags >= 500, "{stats:?}");
}

/// Header line + hex lines of a `lspci -vvv -xxxx` capture.
fn extract_hex(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with(char::is_whitespace) {
            continue;
        }
        if is_hex_dump_line(line) {
            out.push_str(line);
            out.push('\n');
        } else {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn realdata_matches_lspci() {
    if require::realdata(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).is_none() {
        return;
    }
    let file = Path::new(REALDATA).join("lspci-vvv-xxxx.txt");
    let text = std::fs::read_to_string(&file).unwrap();
    let devs = parse_hex_dump(&text);
    assert_eq!(
        devs.len(),
        2,
        "expected the root port and the ConnectX-3 Pro"
    );
    for (h, b) in &devs {
        assert_eq!(b.len(), 4096, "{h}");
    }

    // Facts stated by the capture's own lspci text, checked without lspci.
    let rp = decode(&devs[0].1);
    let acs = rp.acs.as_ref().expect("root port ACS");
    assert_eq!((acs.offset, acs.ctl), (0x110, 0x001f));
    assert!(
        acs.src_valid && acs.trans_blocking && acs.req_redir && acs.cmplt_redir && acs.upstream_fwd
    );
    assert!(!acs.egress_ctl && !acs.direct_trans);
    let p = rp.pcie.as_ref().unwrap();
    assert_eq!(
        (p.device_type_name, p.lnksta_speed_gts, p.lnksta_width),
        ("Root Port", Some(8.0), Some(8))
    );
    let nic = decode(&devs[1].1);
    assert_eq!((nic.vendor_id, nic.device_id), (Some(0x15b3), Some(0x1007)));
    let p = nic.pcie.as_ref().unwrap();
    assert_eq!((p.mps_supported, p.mps, p.mrrs), (256, 256, 512));
    assert_eq!(nic.aer.as_ref().map(|a| a.offset), Some(0x154));
    assert!(nic.notes.is_empty(), "{:?}", nic.notes);

    // The -vvv text stored next to the hex (an older pciutils) is a second oracle.
    let mut errs = Vec::new();
    let mut stats = Stats::default();
    let stored = parse_lspci(&text);
    assert_eq!(stored.len(), 2);
    for ((h, b), ld) in devs.iter().zip(&stored) {
        compare(
            &decode(b),
            ld,
            &format!("stored text {}", dump_bdf(h)),
            false,
            &mut errs,
            &mut stats,
        );
    }
    assert!(
        stats.pcie == 2 && stats.acs == 1 && stats.aer == 2,
        "{stats:?}"
    );

    if lspci_available() {
        let tmp =
            std::env::temp_dir().join(format!("gdrdoctor-realdata-{}.hex", std::process::id()));
        std::fs::write(&tmp, extract_hex(&text)).unwrap();
        let mut live = Stats::default();
        compare_dump_file(&tmp, &mut errs, &mut live);
        let _ = std::fs::remove_file(&tmp);
        eprintln!("realdata vs lspci: {live:?}");
        assert!(
            live.devices == 2 && live.pcie == 2 && live.acs == 1 && live.aer == 2,
            "{live:?}"
        );
    }
    assert!(
        errs.is_empty(),
        "{} mismatches:\n{}",
        errs.len(),
        errs.join("\n")
    );
}

/// The fixtures decode to what they were built to contain (no lspci needed).
#[test]
fn fixtures_decode_as_designed() {
    // Switch downstream port: ACS ctl 0x001d, AER with errors logged.
    let dsp = load_fixture("switch-dsp-acs-aer.hex", "05:08.0");
    let p = dsp.pcie.as_ref().unwrap();
    assert_eq!(
        (p.device_type, p.device_type_name, p.slot_implemented),
        (6, "Downstream Port", true)
    );
    assert_eq!((dsp.secondary_bus, dsp.subordinate_bus), (Some(6), Some(6)));
    let acs = dsp.acs.as_ref().unwrap();
    assert_eq!((acs.cap, acs.ctl), (0x005f, 0x001d));
    assert!(
        acs.src_valid
            && !acs.trans_blocking
            && acs.req_redir
            && acs.cmplt_redir
            && acs.upstream_fwd
    );
    assert!(!acs.egress_ctl && !acs.direct_trans);
    let aer = dsp.aer.as_ref().unwrap();
    assert_eq!(
        (aer.uncor_status, aer.uncor_mask, aer.cor_status),
        (0x0010_4000, 0x0010_0000, 0x2041)
    );
    assert_eq!(aer.root_status, None);
    let usp = load_fixture("switch-dsp-acs-aer.hex", "04:00.0");
    assert_eq!(usp.pcie.as_ref().unwrap().device_type_name, "Upstream Port");
    assert!(usp.acs.is_none());

    // ConnectX-7-like NIC.
    let nic = load_fixture("nic-cx7-endpoint.hex", "17:00.0");
    assert_eq!(
        (nic.vendor_id, nic.device_id, nic.class),
        (Some(0x15b3), Some(0x1021), Some(0x020000))
    );
    let p = nic.pcie.as_ref().unwrap();
    assert_eq!(
        (p.device_type_name, p.mps_supported, p.mps, p.mrrs),
        ("Endpoint", 512, 256, 512)
    );
    assert!(p.relaxed_ordering && p.no_snoop && p.ext_tag);
    assert_eq!((p.lnkcap_speed_gts, p.lnkcap_width), (Some(32.0), Some(16)));
    assert_eq!((p.lnksta_speed_gts, p.lnksta_width), (Some(16.0), Some(8)));
    let ats = nic.ats.as_ref().unwrap();
    assert!(ats.enabled && ats.page_aligned);
    assert_eq!((ats.invalidate_queue_depth, ats.stu), (0, 0));
    let bar0 = &nic.bars[0];
    assert!(bar0.mem64 && bar0.prefetchable && !bar0.io);
    assert_eq!(
        (bar0.index, bar0.raw_hi, bar0.address),
        (0, Some(0x2bff), 0x2bff_f400_0000)
    );
    assert_eq!(
        nic.bars.iter().map(|b| b.index).collect::<Vec<_>>(),
        [0, 2, 3, 4, 5]
    );
    assert!(nic.notes.is_empty(), "{:?}", nic.notes);

    // H200-like GPU.
    let gpu = load_fixture("gpu-h200-endpoint.hex", "18:00.0");
    let p = gpu.pcie.as_ref().unwrap();
    assert_eq!(
        (
            p.lnkcap_speed_gts,
            p.lnkcap_width,
            p.lnksta_speed_gts,
            p.lnksta_width
        ),
        (Some(32.0), Some(16), Some(32.0), Some(16))
    );
    assert_eq!((p.mps, p.mrrs), (256, 4096));
    assert!(!gpu.ats.as_ref().unwrap().enabled);
    assert_eq!(
        gpu.bars
            .iter()
            .map(|b| (b.index, b.address))
            .collect::<Vec<_>>(),
        [
            (0, 0x9100_0000),
            (1, 0x2a00_0000_0000),
            (3, 0x2a20_0200_0000),
            (5, 0)
        ]
    );

    // Root port: ACS present, everything off.
    let rp = load_fixture("rootport-acs-off.hex", "00:01.1");
    assert_eq!(rp.pcie.as_ref().unwrap().device_type_name, "Root Port");
    let acs = rp.acs.as_ref().unwrap();
    assert_eq!(acs.ctl, 0);
    assert!(
        !(acs.src_valid
            || acs.trans_blocking
            || acs.req_redir
            || acs.cmplt_redir
            || acs.upstream_fwd
            || acs.egress_ctl
            || acs.direct_trans)
    );
    assert!(rp.aer.as_ref().unwrap().root_status.is_some());

    // Loops.
    let l0 = load_fixture("looped-chain.hex", "3b:00.0");
    assert_eq!(
        l0.capabilities.iter().map(|c| c.offset).collect::<Vec<_>>(),
        [0x40, 0x50, 0x90]
    );
    assert_eq!(
        l0.ext_capabilities
            .iter()
            .map(|c| c.offset)
            .collect::<Vec<_>>(),
        [0x100, 0x140]
    );
    assert!(
        l0.notes
            .iter()
            .any(|n| n == "capability chain looped at 0x40"),
        "{:?}",
        l0.notes
    );
    assert!(
        l0.notes
            .iter()
            .any(|n| n == "extended capability chain looped at 0x100"),
        "{:?}",
        l0.notes
    );
    let l1 = load_fixture("looped-chain.hex", "3b:00.1");
    assert_eq!(l1.capabilities.len(), 2);
    assert_eq!(l1.ext_capabilities.len(), 1);

    // 64 bytes: header only.
    let t = load_fixture("truncated-64.hex", "41:00.0");
    assert!(t.limited && t.pcie.is_none() && t.capabilities.is_empty());
    assert_eq!(t.len, 64);
    assert_eq!(t.bars[0].address, 0x2c00_0000_0000);
    assert!(
        t.notes.iter().any(|n| n.contains("only 64 bytes")),
        "{:?}",
        t.notes
    );

    // 256 bytes: PCIe but no extended space (the ACS written at 0x100 is not in the dump).
    let s = load_fixture("short-256.hex", "c1:00.0");
    assert!(!s.limited && !s.extended_readable);
    assert!(s.ext_capabilities.is_empty() && s.acs.is_none());
    assert_eq!(s.pcie.as_ref().unwrap().lnksta_speed_gts, Some(2.5));
    assert!(
        s.notes
            .iter()
            .any(|n| n == "extended config space not readable (256 bytes)"),
        "{:?}",
        s.notes
    );

    // No-link devices.
    let rciep = load_fixture("rc-no-link.hex", "00:01.0");
    let p = rciep.pcie.as_ref().unwrap();
    assert_eq!(p.device_type_name, "Root Complex Integrated Endpoint");
    assert_eq!(
        (p.lnkcap, p.lnksta, p.lnkcap_speed_gts, p.lnkcap2),
        (None, None, None, None)
    );
    assert!(p.devcap2.is_some());
    let rcec = load_fixture("rc-no-link.hex", "00:02.0");
    assert_eq!(
        rcec.pcie.as_ref().unwrap().device_type_name,
        "Root Complex Event Collector"
    );
    assert_eq!(rcec.aer.as_ref().unwrap().uncor_status, 0x0004_0000);
}

/// The lspci text parser itself must see what it is meant to see (so that a
/// parser bug cannot make the differential test pass vacuously).
#[test]
fn lspci_text_parser_sanity() {
    let sample = "05:08.0 PCI bridge [0604]: Foo [1000:c030] (rev b0)\n\
\tCapabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00\n\
\t\tDevCtl:\tCorrErr- NonFatalErr- FatalErr- UnsupReq-\n\
\t\t\tRlxdOrd+ ExtTag- PhantFunc- AuxPwr- NoSnoop+\n\
\t\t\tMaxPayload 256 bytes, MaxReadReq 512 bytes\n\
\t\tLnkSta:\tSpeed 16GT/s (downgraded), Width x8 (downgraded)\n\
\tCapabilities: [148 v1] Access Control Services\n\
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n\
\tCapabilities: [100 v1] <chain looped>\n";
    let devs = parse_lspci(sample);
    assert_eq!(devs.len(), 1);
    let d = &devs[0];
    assert_eq!(d.looped, [0x100]);
    assert_eq!(d.caps.len(), 2);
    let e = &d.caps[0];
    let ctl = e.section("DevCtl").unwrap();
    assert_eq!(
        (
            flag(ctl, "RlxdOrd"),
            flag(ctl, "ExtTag"),
            flag(ctl, "NoSnoop")
        ),
        (Some(true), Some(false), Some(true))
    );
    assert_eq!(
        (num_after(ctl, "MaxPayload "), num_after(ctl, "MaxReadReq ")),
        (Some(256), Some(512))
    );
    let sta = e.section("LnkSta").unwrap();
    assert_eq!(
        (speed(sta), num_after(sta, "Width x")),
        (Some(16.0), Some(8))
    );
    assert_eq!(flag("Speed unknown", "Speed"), None);
    assert_eq!(speed("Speed unknown, Width x0"), None);
    let acs = d.caps[1].section("ACSCtl").unwrap();
    assert_eq!(flag(acs, "TransBlk"), Some(false));
    assert_eq!(flag(acs, "CmpltRedir"), Some(true));
    assert_eq!(flag("AdvNonFatalErr+", "NonFatalErr"), None);
    assert_eq!((d.caps[1].offset, d.caps[1].version), (0x148, Some(1)));
}

/// Every binary `config` file of the fixture nodes (the H200 captured with `gdrdoctor
/// snapshot`, and the constructed HGX switch ports, GPUs and NICs), written as an `lspci -xxxx`
/// dump and compared with `lspci -F` field by field.
#[test]
fn sysroot_config_files_match_lspci() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(&p, out);
            } else if ft.is_file() && p.file_name().is_some_and(|n| n == "config") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    for n in nodes::names() {
        walk(&nodes::fixture(&n), &mut files);
    }
    files.sort();
    assert!(
        files.len() >= 40,
        "expected the sysroot config files, found {}",
        files.len()
    );
    if !lspci_available() {
        return;
    }
    // One dump per distinct config space (the constructed scenarios repeat devices).
    let mut seen = std::collections::BTreeSet::new();
    let tmp =
        std::env::temp_dir().join(format!("gdrdoctor-sysroot-configs-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut errs = Vec::new();
    let mut stats = Stats::default();
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        if !seen.insert(bytes.clone()) {
            continue;
        }
        let bdf = f
            .parent()
            .and_then(|p| p.file_name())
            .unwrap()
            .to_string_lossy()
            .to_string();
        let short = bdf.get(5..).unwrap_or(&bdf).to_string();
        let mut text = format!("{short} Device from {}\n", f.display());
        for (i, chunk) in bytes.chunks(16).enumerate() {
            text.push_str(&format!("{:02x}:", i * 16));
            for b in chunk {
                text.push_str(&format!(" {b:02x}"));
            }
            text.push('\n');
        }
        let dump = tmp.join(format!("{}.hex", seen.len()));
        std::fs::write(&dump, text).unwrap();
        compare_dump_file(&dump, &mut errs, &mut stats);
    }
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("sysroot configs vs lspci: {stats:?}");
    assert!(
        errs.is_empty(),
        "{} mismatches:\n{}",
        errs.len(),
        errs.join("\n")
    );
    assert!(stats.devices >= 8, "{stats:?}");
    assert!(
        stats.acs >= 2,
        "ACS of the switch ports compared: {stats:?}"
    );
    assert!(stats.links >= 4, "{stats:?}");
}
