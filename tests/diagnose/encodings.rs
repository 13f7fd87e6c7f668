//! Issue 34 item 6: the encodings people paste in (no-break spaces and zero-width characters
//! from web pages and chat, UTF-16 with a byte-order mark from PowerShell and Windows editors,
//! CRLF, tabs) never hide a failure: any such encoding of a failing paste exits non-zero.

use super::*;
use gdrdoctor_checks::paste::clean::decode;
use proptest::prelude::*;

/// Failing pastes, constructed: an Xid line, an `ibv_devinfo` with a port down, an `lsmod`
/// without a peer-memory client beside mlx5_ib, NCCL's `no module` lines.
const FAILING: [(&str, &str); 4] = [
    (
        "xid",
        "[ 1843.308145] NVRM: Xid (PCI:0000:b3:00): 79, pid=2211, name=python3, GPU has fallen off the bus.\n",
    ),
    (
        "ibv",
        "hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.39.1002\n\tnode_guid:\t\t\t946d:ae03:0012:3456\n\tsys_image_guid:\t\t\t946d:ae03:0012:3456\n\tvendor_id:\t\t\t0x02c9\n\tvendor_part_id:\t\t\t4129\n\thw_ver:\t\t\t\t0x0\n\tboard_id:\t\t\tMT_0000000838\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tmax_mtu:\t\t4096 (5)\n\t\t\tactive_mtu:\t\t4096 (5)\n\t\t\tsm_lid:\t\t\t0\n\t\t\tport_lid:\t\t0\n\t\t\tport_lmc:\t\t0x00\n\t\t\tlink_layer:\t\tInfiniBand\n\n",
    ),
    (
        "nccl",
        "gpu-1:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\ngpu-1:100:200 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)\ngpu-1:100:200 [0] NCCL INFO Channel 00/0 : 0[18000] -> 1[18000] [send] via NET/IB/0\n",
    ),
    (
        "warn",
        "gpu-1:100:200 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Bad address\n",
    ),
];

fn exit_of(name: &str, text: String) -> i32 {
    diagnose(&[input(name, text)], &RunOptions::default())
        .summary
        .exit_code
}

/// One encoding of a text: each space a no-break space with probability `nbsp`, a
/// zero-width character after each character with probability `zw`, runs of spaces
/// as tabs, CRLF, then UTF-16 with a byte-order mark (read back through `decode`, as
/// `diagnose` reads a file).
fn encode(
    t: &str,
    seed: &[u8],
    nbsp: bool,
    zw: bool,
    tabs: bool,
    crlf: bool,
    utf16: Option<bool>,
) -> String {
    let mut s = String::new();
    for (i, c) in t.chars().enumerate() {
        let r = seed.get(i % seed.len().max(1)).copied().unwrap_or(0);
        match c {
            ' ' if nbsp && r % 2 == 0 => {
                s.push(['\u{a0}', '\u{202f}', '\u{2009}'][(r as usize / 2) % 3])
            }
            ' ' if tabs && r % 3 == 0 => s.push('\t'),
            '\n' if crlf => s.push_str("\r\n"),
            c => s.push(c),
        }
        if zw && r % 5 == 0 && c != '\n' {
            s.push(['\u{200b}', '\u{200d}', '\u{feff}', '\u{2060}'][(r as usize / 5) % 4]);
        }
    }
    match utf16 {
        None => s,
        Some(le) => {
            let mut b: Vec<u8> = if le {
                vec![0xff, 0xfe]
            } else {
                vec![0xfe, 0xff]
            };
            for u in s.encode_utf16() {
                b.extend(if le { u.to_le_bytes() } else { u.to_be_bytes() });
            }
            decode(&b).0
        }
    }
}

#[test]
fn the_failing_pastes_fail_as_they_are() {
    for (name, t) in FAILING {
        assert_ne!(exit_of(name, t.to_string()), 0, "{name}");
    }
}

#[test]
fn decode_reads_utf16_with_and_without_a_mark() {
    let t = "NVRM: Xid 79\n";
    let le: Vec<u8> = t.encode_utf16().flat_map(u16::to_le_bytes).collect();
    assert_eq!(decode(&le).0, t);
    let mut bom = vec![0xfe, 0xff];
    bom.extend(t.encode_utf16().flat_map(u16::to_be_bytes));
    assert_eq!(decode(&bom).0, t);
    assert_eq!(decode(b"\xef\xbb\xbfplain").0, "plain");
    assert_eq!(decode("é plain".as_bytes()).1, None);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn no_encoding_of_a_failing_paste_exits_0(
        which in 0usize..4,
        seed in proptest::collection::vec(any::<u8>(), 1..16),
        nbsp in any::<bool>(),
        zw in any::<bool>(),
        tabs in any::<bool>(),
        crlf in any::<bool>(),
        utf16 in proptest::option::of(any::<bool>()),
    ) {
        let (name, t) = FAILING[which];
        let e = encode(t, &seed, nbsp, zw, tabs, crlf, utf16);
        prop_assert_ne!(exit_of(name, e.clone()), 0, "{} {:?}", name, e);
    }
}
