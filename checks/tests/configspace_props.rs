//! Properties of `pci::config::decode` / `parse_hex_dump` on hostile input,
//! plus small hand-built cases.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gdrdoctor_checks::pci::config::{cap_name, decode, ext_cap_name, parse_hex_dump};
use proptest::prelude::*;

/// A 4 KiB type-0 header with the capability list bit set and a PCIe
/// capability at 0x40 (so the extended list is walked too).
fn base_space() -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    b[0..2].copy_from_slice(&0x10deu16.to_le_bytes());
    b[2..4].copy_from_slice(&0x2335u16.to_le_bytes());
    b[6..8].copy_from_slice(&0x0010u16.to_le_bytes());
    b[0x0b] = 0x03;
    b[0x0a] = 0x02;
    b[0x34] = 0x40;
    b[0x40] = 0x10; // PCIe
    b[0x41] = 0x00;
    b[0x42] = 0x02; // v2 endpoint
    b
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// The same bytes in `lspci -xxxx` format.
fn to_hex_dump(header: &str, bytes: &[u8]) -> String {
    let mut s = format!("{header}\n");
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let off = i * 16;
        if off < 0x100 {
            s.push_str(&format!("{off:02x}:"));
        } else {
            s.push_str(&format!("{off:03x}:"));
        }
        for b in chunk {
            s.push_str(&format!(" {b:02x}"));
        }
        s.push('\n');
    }
    s
}

/// Standard-area bytes that make pointer chains likely to loop: most map to
/// a few aligned offsets in 0x40..0x54, some to odd/invalid values, some raw.
fn ptr_byte(x: u16) -> u8 {
    const PALETTE: [u8; 11] = [
        0x40, 0x44, 0x48, 0x4c, 0x50, 0x41, 0xfc, 0xff, 0x10, 0x00, 0x3c,
    ];
    let i = usize::from(x >> 8) % 16;
    PALETTE.get(i).copied().unwrap_or((x & 0xff) as u8)
}

/// Extended headers whose next pointers land on a few nearby offsets.
fn ext_header() -> impl Strategy<Value = u32> {
    let next = prop_oneof![
        Just(0x100u32),
        Just(0x104),
        Just(0x108),
        Just(0x140),
        Just(0xffc),
        Just(0x000),
        Just(0x040),
        0u32..0x1000,
    ];
    prop_oneof![
        (any::<u16>(), 0u32..16, next)
            .prop_map(|(id, ver, nxt)| u32::from(id) | (ver << 16) | (nxt << 20)),
        Just(0xffff_ffffu32),
        Just(0u32),
        any::<u32>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
        let cs = decode(&bytes);
        prop_assert_eq!(cs.len, bytes.len());
        prop_assert_eq!(cs.limited, bytes.len() < 256);
        prop_assert!(cs.capabilities.len() <= 48);
        prop_assert!(cs.ext_capabilities.len() <= 512);
        // Serializes (the product emits JSON).
        prop_assert!(serde_json::to_string(&cs).is_ok());
    }

    #[test]
    fn random_pointers_terminate_and_are_bounded(
        std_area in proptest::collection::vec(any::<u16>(), 0xc0),
        first in any::<u16>(),
        ext in proptest::collection::vec(ext_header(), 1..64),
        ext_offsets in proptest::collection::vec(0usize..960, 1..64),
    ) {
        let mut b = base_space();
        // Random capability area, keeping the PCIe capability at 0x40 so
        // that the extended chain is walked too.
        for (i, x) in std_area.iter().enumerate().skip(4) {
            b[0x40 + i] = ptr_byte(*x);
        }
        b[0x41] = ptr_byte(std_area[1]);
        b[0x34] = ptr_byte(first);
        for (h, slot) in ext.iter().zip(ext_offsets.iter()) {
            put32(&mut b, 0x100 + slot * 4, *h);
        }
        put32(&mut b, 0x100, ext[0]);
        let cs = decode(&b);
        prop_assert!(cs.capabilities.len() <= 48, "{} std caps", cs.capabilities.len());
        prop_assert!(cs.ext_capabilities.len() <= 512, "{} ext caps", cs.ext_capabilities.len());
        // Visited sets: no offset twice, all in range and aligned.
        let mut seen = std::collections::BTreeSet::new();
        for c in &cs.capabilities {
            prop_assert!(c.offset >= 0x40 && c.offset < 0x100 && c.offset % 4 == 0, "{:?}", c);
            prop_assert!(seen.insert(c.offset), "duplicate std offset {:#x}", c.offset);
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in &cs.ext_capabilities {
            prop_assert!(c.offset >= 0x100 && c.offset < 0x1000 && c.offset % 4 == 0, "{:?}", c);
            prop_assert!(seen.insert(c.offset), "duplicate ext offset {:#x}", c.offset);
        }
        // Issue 18: a chain that did not end with a zero pointer is a recorded break, so no
        // check can read "capability absent" into it; and a break is always explained.
        let broken_note = cs.notes.iter().any(|n| {
            n.contains("looped") || n.contains("broken") || n.contains("points into")
                || n.contains("below 0x100") || n.contains("chain cut") || n.contains("all-ones")
        });
        prop_assert_eq!(broken_note, !cs.chain_breaks.is_empty(), "{:?} / {:?}", cs.notes, cs.chain_breaks);
        for b in &cs.chain_breaks {
            prop_assert!(b.offset < 0x1000, "{:?}", b);
            prop_assert_eq!(b.extended, b.offset >= 0x100, "{:?}", b);
        }
    }

    #[test]
    fn a_clean_chain_has_no_break(n_std in 1usize..12, n_ext in 1usize..40) {
        // PCIe at 0x40, then n_std capabilities 8 bytes apart; n_ext extended ones 8 apart.
        let mut b = base_space();
        let mut prev = 0x40usize;
        for i in 0..n_std {
            let off = 0x48 + 8 * i;
            b[prev + 1] = off as u8;
            b[off] = 0x09;
            prev = off;
        }
        for i in 0..n_ext {
            let off = 0x100 + 8 * i;
            let next = if i + 1 == n_ext { 0 } else { off + 8 };
            put32(&mut b, off, 0x000b | (1 << 16) | ((next as u32) << 20));
        }
        let cs = decode(&b);
        prop_assert!(cs.chain_breaks.is_empty(), "{:?}", cs.chain_breaks);
        prop_assert_eq!(cs.capabilities.len(), n_std + 1);
        prop_assert_eq!(cs.ext_capabilities.len(), n_ext);
    }

    #[test]
    fn self_pointers_stop_at_once(off in 0x11usize..0x40, ext_slot in 0usize..960) {
        let off = off * 4; // 0x44..0xfc (0x40 holds the PCIe capability)
        let mut b = base_space();
        b[0x41] = off as u8;
        b[off] = 0x05;
        b[off + 1] = off as u8; // points at itself
        let ext_off = 0x100 + ext_slot * 4;
        put32(&mut b, 0x100, 0x0001_0001 | ((ext_off as u32) << 20));
        put32(&mut b, ext_off, 0x0001_000d | ((ext_off as u32) << 20));
        let cs = decode(&b);
        prop_assert_eq!(cs.capabilities.len(), 2);
        let n_ext = if ext_off == 0x100 { 1 } else { 2 };
        prop_assert_eq!(cs.ext_capabilities.len(), n_ext);
        prop_assert!(cs.notes.iter().any(|n| n.starts_with("capability chain looped")), "{:?}", cs.notes);
        prop_assert!(cs.notes.iter().any(|n| n.starts_with("extended capability chain looped")), "{:?}", cs.notes);
        // Both recorded as breaks, each naming the pointer that loops.
        let std_break = cs.chain_breaks.iter().find(|x| !x.extended);
        prop_assert!(std_break.is_some_and(|x| usize::from(x.offset) == off + 1 && x.reason.contains("itself")), "{:?}", cs.chain_breaks);
        let ext_break = cs.chain_breaks.iter().find(|x| x.extended);
        prop_assert!(ext_break.is_some_and(|x| usize::from(x.offset) == ext_off), "{:?}", cs.chain_breaks);
    }

    #[test]
    fn hex_dump_round_trips(bytes in proptest::collection::vec(any::<u8>(), 1..4096)) {
        let text = to_hex_dump("0000:3b:00.0 Ethernet controller: Test", &bytes);
        let devs = parse_hex_dump(&text);
        prop_assert_eq!(devs.len(), 1);
        prop_assert_eq!(&devs[0].0, "0000:3b:00.0 Ethernet controller: Test");
        prop_assert_eq!(&devs[0].1, &bytes);
    }

    #[test]
    fn parse_hex_dump_never_panics(text in "(?s).{0,400}") {
        for (_, bytes) in parse_hex_dump(&text) {
            prop_assert!(bytes.len() <= 4096);
        }
    }

    #[test]
    fn parse_hex_dump_never_panics_on_hexish_lines(
        lines in proptest::collection::vec("([0-9a-f]{1,9}:)?( [0-9a-fA-F]{1,3}){0,20}|[0-9a-f]{2}:[0-9a-f]{2}\\.[0-9] x", 0..40)
    ) {
        let text = lines.join("\n");
        for (_, bytes) in parse_hex_dump(&text) {
            prop_assert!(bytes.len() <= 4096);
            let _ = decode(&bytes);
        }
    }
}

#[test]
fn acs_ctl_0x001d_decodes() {
    let mut b = base_space();
    b[0x42] = 0x62; // v2 downstream port
    put32(&mut b, 0x100, 0x0001_000d); // ACS v1, last
    put16(&mut b, 0x104, 0x015f); // cap: SV TB RR CR UF DT, egress vector size 1
    put16(&mut b, 0x106, 0x001d);
    let cs = decode(&b);
    assert_eq!(
        cs.pcie.as_ref().unwrap().device_type_name,
        "Downstream Port"
    );
    let acs = cs.acs.expect("ACS decoded");
    assert_eq!(
        (acs.offset, acs.cap, acs.ctl, acs.egress_vector_size),
        (0x100, 0x015f, 0x001d, 1)
    );
    assert!(acs.src_valid && acs.req_redir && acs.cmplt_redir && acs.upstream_fwd);
    assert!(!acs.trans_blocking && !acs.egress_ctl && !acs.direct_trans);
    assert_eq!(cs.ext_capabilities.len(), 1);
    assert_eq!(cs.ext_capabilities[0].name, "Access Control Services");
    assert!(cs.notes.is_empty(), "{:?}", cs.notes);
}

#[test]
fn sixty_four_bytes_is_limited() {
    let b = base_space();
    let cs = decode(&b[..64]);
    assert!(cs.limited);
    assert!(!cs.extended_readable);
    assert!(cs.pcie.is_none());
    assert!(cs.capabilities.is_empty());
    assert_eq!(
        (cs.vendor_id, cs.device_id, cs.class),
        (Some(0x10de), Some(0x2335), Some(0x030200))
    );
    assert!(
        cs.notes.iter().any(|n| n.contains("only 64 bytes")),
        "{:?}",
        cs.notes
    );
    assert!(
        cs.notes.iter().any(|n| n.contains("truncated at 0x40")),
        "{:?}",
        cs.notes
    );
}

#[test]
fn empty_and_tiny_inputs() {
    let cs = decode(&[]);
    assert_eq!((cs.len, cs.vendor_id, cs.header_type), (0, None, None));
    assert!(cs.bars.is_empty() && cs.limited && !cs.notes.is_empty());
    let cs = decode(&[0x86, 0x80, 0x04]);
    assert_eq!((cs.vendor_id, cs.device_id), (Some(0x8086), None));
    let cs = decode(&[0xff; 4096]);
    assert!(
        cs.notes.iter().any(|n| n.contains("0xffff")),
        "{:?}",
        cs.notes
    );
}

#[test]
fn pcie_link_fields_and_bars() {
    let mut b = base_space();
    put32(&mut b, 0x10, 0xf400_000c); // BAR0 64-bit prefetchable
    put32(&mut b, 0x14, 0x0000_2bff);
    put32(&mut b, 0x18, 0x0000_e001); // BAR2 I/O
    put32(&mut b, 0x24, 0x0000_0004); // BAR5 64-bit in the last slot
    put32(&mut b, 0x44, 0x0000_8022); // DevCap: MPS 512, ExtTag
    put16(&mut b, 0x48, 0x5930); // DevCtl: MRRS 4096, NoSnoop, ExtTag, MPS 256, RO
    put32(&mut b, 0x4c, 0x0000_0105); // LnkCap 32GT/s x16
    put16(&mut b, 0x52, 0x0084); // LnkSta 16GT/s x8
    put32(&mut b, 0x64, 0x0000_0d9f); // DevCap2
    put32(&mut b, 0x6c, 0x0000_003e); // LnkCap2
    let cs = decode(&b);
    let p = cs.pcie.unwrap();
    assert_eq!((p.mps_supported, p.mps, p.mrrs), (512, 256, 4096));
    assert!(p.relaxed_ordering && p.no_snoop && p.ext_tag);
    assert_eq!((p.lnkcap_speed_gts, p.lnkcap_width), (Some(32.0), Some(16)));
    assert_eq!((p.lnksta_speed_gts, p.lnksta_width), (Some(16.0), Some(8)));
    assert_eq!((p.devcap2, p.lnkcap2), (Some(0x0d9f), Some(0x3e)));
    assert_eq!(cs.bars.len(), 5);
    let b0 = &cs.bars[0];
    assert_eq!(
        (b0.index, b0.mem64, b0.prefetchable, b0.raw_hi, b0.address),
        (0, true, true, Some(0x2bff), 0x2bff_f400_0000)
    );
    let b2 = &cs.bars[1];
    assert_eq!((b2.index, b2.io, b2.address), (2, true, 0xe000));
    let b5 = &cs.bars[4];
    assert_eq!((b5.index, b5.mem64, b5.raw_hi), (5, true, None));
    assert!(
        cs.notes.iter().any(|n| n.contains("BAR5")),
        "{:?}",
        cs.notes
    );
}

#[test]
fn unknown_link_speed_is_none() {
    let mut b = base_space();
    put32(&mut b, 0x4c, 0x0000_0107); // speed code 7
    put16(&mut b, 0x52, 0x0080); // speed code 0
    let p = decode(&b).pcie.unwrap();
    assert_eq!(
        (
            p.lnkcap_speed_gts,
            p.lnkcap_width,
            p.lnksta_speed_gts,
            p.lnksta_width
        ),
        (None, Some(16), None, Some(8))
    );
}

#[test]
fn ext_next_below_0x100_is_cut() {
    let mut b = base_space();
    put32(&mut b, 0x100, 0x0401_0001); // AER, next 0x040
    let cs = decode(&b);
    assert_eq!(cs.ext_capabilities.len(), 1);
    assert!(
        cs.notes.iter().any(|n| n.contains("below 0x100")),
        "{:?}",
        cs.notes
    );
}

#[test]
fn std_pointer_into_header_is_cut() {
    let mut b = base_space();
    b[0x41] = 0x20;
    let cs = decode(&b);
    assert_eq!(cs.capabilities.len(), 1);
    assert!(
        cs.notes.iter().any(|n| n.contains("0x20")),
        "{:?}",
        cs.notes
    );
}

#[test]
fn no_pcie_means_no_extended_walk() {
    let mut b = base_space();
    b[0x40] = 0x01; // PM instead of PCIe
    put32(&mut b, 0x100, 0x0001_000d);
    let cs = decode(&b);
    assert!(cs.ext_capabilities.is_empty() && cs.acs.is_none());
    assert!(
        cs.notes.iter().any(|n| n.contains("above 0x100 ignored")),
        "{:?}",
        cs.notes
    );
}

#[test]
fn hex_dump_parsing_rules() {
    let text =
        "00:02.0 PCI bridge: Intel\n00: 86 80 04 2f\n\t\tsome -vvv text: 00 11\n10: 01 02\n\n\
                0000:03:00.0 Ethernet: Mellanox\r\n  00: b3 15 07 10\r\n\
                00: 11 22\n00: 33 44\n";
    let devs = parse_hex_dump(text);
    assert_eq!(devs.len(), 2);
    assert_eq!(devs[0].0, "00:02.0 PCI bridge: Intel");
    assert_eq!(devs[0].1.len(), 0x12);
    assert_eq!(&devs[0].1[..4], &[0x86, 0x80, 0x04, 0x2f]);
    assert_eq!(&devs[0].1[4..0x10], &[0xff; 12]);
    assert_eq!(&devs[0].1[0x10..], &[1, 2]);
    // A named device takes repeated 00: lines as overwrites, like lspci.
    assert_eq!(devs[1].0, "0000:03:00.0 Ethernet: Mellanox");
    assert_eq!(devs[1].1, vec![0x33, 0x44, 0x07, 0x10]);
    // Hex without a header: unnamed devices, a new one at each 00: line.
    let devs = parse_hex_dump("00: 01 02\n10: 03\n00: 04\n");
    assert_eq!(devs.len(), 2);
    assert_eq!(devs[0].0, "");
    assert_eq!(devs[0].1.len(), 0x11);
    assert_eq!(devs[1].1, vec![4]);
    // Offsets past 4 KiB are dropped.
    let devs = parse_hex_dump(
        "01:00.0 x\nff0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 ee ee\n1000: 01\n",
    );
    assert_eq!(devs[0].1.len(), 4096);
}

#[test]
fn names() {
    assert_eq!(cap_name(0x10), "PCI Express");
    assert_eq!(cap_name(0x11), "MSI-X");
    assert_eq!(cap_name(0xee), "Unknown");
    assert_eq!(ext_cap_name(0x0d), "Access Control Services");
    assert_eq!(ext_cap_name(0x0f), "Address Translation Services");
    assert_eq!(ext_cap_name(0x01), "Advanced Error Reporting");
    assert_eq!(ext_cap_name(0xbeef), "Unknown");
}
