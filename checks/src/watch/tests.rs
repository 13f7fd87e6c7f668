#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::report::Status;

/// An area image built field by field, as progress.cuh lays it out.
pub struct Img {
    pub b: Vec<u8>,
}

impl Img {
    pub fn new(records: u32, sites: u32, kernels: u32, words: u32) -> Img {
        let off_sites = 4096u64;
        let round = |x: u64| x.div_ceil(4096) * 4096;
        let off_k = round(off_sites + 64 * u64::from(sites));
        let off_w = round(off_k + 64 * u64::from(kernels));
        let off_r = round(off_w + 8 * u64::from(words));
        let size = round(off_r + 64 * u64::from(records));
        let mut i = Img {
            b: vec![0; size as usize],
        };
        i.u64(0, MAGIC);
        i.u32(8, VERSION);
        i.u32(12, 256);
        i.u32(16, 4242);
        i.u64(32, 1_000);
        i.u64(56, size);
        i.u64(64, 0x7000_0000_0000);
        i.u64(72, 0x7000_0000_0000);
        i.u32(80, 256);
        i.u32(84, off_sites as u32);
        i.u32(88, sites);
        i.u32(92, off_k as u32);
        i.u32(96, kernels);
        i.u32(100, off_w as u32);
        i.u32(104, words);
        i.u32(108, off_r as u32);
        i.u32(112, records);
        i.u32(128, 64);
        i.u32(132, 64);
        i.u32(136, 64);
        i.b[144..147].copy_from_slice(b"job");
        i.u64(264, 1_000_000);
        i
    }
    pub fn u32(&mut self, off: usize, v: u32) {
        self.b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, off: usize, v: u64) {
        self.b[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    pub fn header(&self) -> Header {
        parse_header(&self.b, self.b.len() as u64).unwrap()
    }
    pub fn kernel(&mut self, name: &str, blocks: u32, warps: u32) -> u32 {
        let h = self.header();
        let slot = h.kernels_used;
        let off = h.kernel_offset as usize + 64 * slot as usize;
        self.b[off..off + name.len()].copy_from_slice(name.as_bytes());
        self.u32(off + 32, h.records_used);
        self.u32(off + 36, blocks);
        self.u32(off + 40, warps);
        self.u32(off + 56, 1);
        self.u32(116, h.records_used + blocks * warps);
        self.u32(120, slot + 1);
        slot
    }
    pub fn launch(&mut self, slot: u32) -> u32 {
        let h = self.header();
        let off = h.kernel_offset as usize + 64 * slot as usize + 44;
        let n = u32_at(&self.b, off) + 1;
        self.u32(off, n);
        n
    }
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        slot: u32,
        gen: u32,
        block: u32,
        warp: u32,
        phase: u32,
        site: u32,
        addr: u64,
        expected: u64,
        observed: u64,
        start: u64,
        beat: u64,
    ) {
        let h = self.header();
        let k = parse_kernels(&h, &self.b[h.kernel_offset as usize..]).unwrap();
        let k = &k[slot as usize];
        let idx = k.rec_base + block * k.warps_per_block + warp;
        let off = h.record_offset as usize + 64 * idx as usize;
        self.u32(off, 2);
        self.u32(off + 4, (phase << 24) | (CMP_WIDE << 16) | site);
        self.u32(off + 8, block);
        self.u32(off + 12, (7 << 16) | warp);
        self.u32(off + 16, (slot << 24) | gen);
        self.u64(off + 24, addr);
        self.u64(off + 32, expected);
        self.u64(off + 40, observed);
        self.u64(off + 48, start);
        self.u64(off + 56, beat);
    }
    pub fn site(&mut self, id: u32, name: &str, kind: u32, dev: i32, writer: i32) {
        let h = self.header();
        let off = h.site_offset as usize + 64 * id as usize;
        self.b[off..off + name.len()].copy_from_slice(name.as_bytes());
        self.u32(off + 44, kind);
        self.u32(off + 48, dev as u32);
        self.u32(off + 52, writer as u32);
        self.u32(off + 56, 1);
    }
    pub fn word(&mut self, i: u32, v: u64) -> u64 {
        let h = self.header();
        self.u64(h.words_offset as usize + 8 * i as usize, v);
        h.dev_base + u64::from(h.words_offset) + 8 * u64::from(i)
    }
    /// Analyse as a poll `now_rt` would (one tracker observation).
    pub fn analyse(&self, now_rt: u64, stall_ms: u64) -> Analysis {
        let h = self.header();
        let sites = parse_sites(&h, &self.b[h.site_offset as usize..]);
        let kernels = parse_kernels(&h, &self.b[h.kernel_offset as usize..]).unwrap();
        let (w0, w1) = h.words_range();
        let (r0, r1) = h.records_range();
        let records: Vec<Option<Record>> = self.b[r0 as usize..r1 as usize]
            .chunks(64)
            .enumerate()
            .map(|(i, c)| Some(decode_record(i as u32, c)))
            .collect();
        let mut tr = Tracker::default();
        let live: Vec<Record> = records.iter().flatten().copied().collect();
        tr.observe(&live, 0);
        let v = View {
            header: &h,
            sites: &sites,
            kernels: &kernels,
            words: &self.b[w0 as usize..w1 as usize],
            records: &records,
        };
        analyse(
            &v,
            &tr,
            &Clock::of(&h),
            now_rt,
            0,
            Thresholds {
                stall_ns: stall_ms * 1_000_000,
            },
        )
    }
}

const S: u64 = 1_000_000_000;

#[test]
fn a_fresh_area_parses() {
    let i = Img::new(64, 16, 4, 8);
    let h = i.header();
    assert_eq!(h.pid, 4242);
    assert_eq!(h.job, "job");
    assert_eq!(h.hb_ns, 1_000_000);
    assert_eq!(h.records_used, 0);
}

#[test]
fn damaged_headers_are_errors_naming_the_problem() {
    let base = Img::new(64, 16, 4, 8);
    type Damage = Box<dyn Fn(&mut Img)>;
    let cases: Vec<(Damage, &str)> = vec![
        (Box::new(|i: &mut Img| i.u64(0, 0)), "no magic"),
        (Box::new(|i: &mut Img| i.u64(0, 0x1234)), "bad magic"),
        (Box::new(|i: &mut Img| i.u32(8, 2)), "layout version 2"),
        (Box::new(|i: &mut Img| i.u32(128, 32)), "record_size is 32"),
        (Box::new(|i: &mut Img| i.u32(16, 0)), "pid 0"),
        (Box::new(|i: &mut Img| i.u32(112, u32::MAX)), "record_count"),
        (Box::new(|i: &mut Img| i.u32(116, 65)), "records_used 65"),
        (Box::new(|i: &mut Img| i.u32(120, 5)), "kernels_used 5"),
        (Box::new(|i: &mut Img| i.u64(56, 1 << 40)), "larger than"),
        (Box::new(|i: &mut Img| i.u32(108, 4096)), "overlap"),
        (Box::new(|i: &mut Img| i.u32(100, 4097)), "aligned"),
    ];
    for (damage, want) in cases {
        let mut i = Img { b: base.b.clone() };
        damage(&mut i);
        let e = parse_header(&i.b, i.b.len() as u64).unwrap_err();
        assert!(e.contains(want), "{want}: {e}");
    }
    // Truncated file, and too short for a header at all.
    let e = parse_header(&base.b, 4096).unwrap_err();
    assert!(e.contains("truncated"), "{e}");
    let e = parse_header(&base.b[..100], 100).unwrap_err();
    assert!(e.contains("too short"), "{e}");
}

#[test]
fn kernel_tables_are_validated() {
    let mut i = Img::new(64, 16, 4, 8);
    i.kernel("k", 2, 2);
    let h = i.header();
    assert_eq!(
        parse_kernels(&h, &i.b[h.kernel_offset as usize..]).unwrap()[0].records(),
        0..4
    );
    // Claims more records than are in use.
    let off = h.kernel_offset as usize;
    i.u32(off + 36, 40);
    let e = parse_kernels(&h, &i.b[off..]).unwrap_err();
    assert!(e.contains("beyond"), "{e}");
    i.u32(off + 36, 2);
    i.u32(off + 40, 33);
    assert!(parse_kernels(&h, &i.b[off..]).is_err());
    i.u32(off + 40, 2);
    i.u32(off + 56, 0);
    assert!(parse_kernels(&h, &i.b[off..])
        .unwrap_err()
        .contains("not declared"));
}

#[test]
fn a_healthy_waiter_is_not_stalled() {
    let mut i = Img::new(64, 16, 4, 8);
    let k = i.kernel("ring", 2, 1);
    i.launch(k);
    i.record(
        k,
        1,
        0,
        0,
        PH_WAITING,
        3,
        0x10,
        5,
        4,
        10 * S - 1_000,
        10 * S,
    );
    i.record(
        k,
        1,
        1,
        0,
        PH_PROGRESS,
        4,
        0x18,
        5,
        5,
        10 * S - 1_000,
        10 * S,
    );
    let a = i.analyse(10 * S + 1_000_000, 1000);
    assert!(a.stalled.is_empty() && a.slow.is_empty(), "{a:?}");
    assert_eq!((a.counts.waiting, a.counts.progress), (1, 1));
}

#[test]
fn a_waiter_with_heartbeats_on_a_value_nobody_writes_is_a_spin_stall() {
    let mut i = Img::new(64, 16, 4, 8);
    let k = i.kernel("ring", 2, 1);
    i.launch(k);
    i.site(4, "consumer waits head", WRITER_SAME_GPU, -1, -1);
    i.record(k, 1, 0, 0, PH_STARTED, 0, 0, 0, 0, 0, 0);
    i.record(
        k,
        1,
        1,
        0,
        PH_WAITING,
        4,
        0xdead0,
        1001,
        1000,
        10 * S,
        12 * S,
    );
    let a = i.analyse(12 * S + 1_000_000, 1000);
    assert_eq!(a.stalled.len(), 1, "{a:?}");
    let w = &a.stalled[0];
    assert_eq!(w.class, Some(Class::SpinStall));
    assert_eq!((w.block, w.warp, w.sm), (1, 0, 7));
    assert_eq!((w.expected.as_str(), w.observed.as_str()), ("1001", "1000"));
    assert_eq!(w.addr, "0xdead0");
    assert!((w.waited_ms - 2001.0).abs() < 1.0, "{}", w.waited_ms);
    assert!(
        w.text().contains("site 4 (consumer waits head)"),
        "{}",
        w.text()
    );
    assert!(w.why.contains("same gpu"), "{}", w.why);
}

#[test]
fn half_the_threshold_is_slow_not_stalled() {
    let mut i = Img::new(64, 16, 4, 8);
    let k = i.kernel("ring", 1, 1);
    i.launch(k);
    i.record(
        k,
        1,
        0,
        0,
        PH_WAITING,
        1,
        0x10,
        1,
        0,
        10 * S,
        10 * S + 600_000_000,
    );
    let a = i.analyse(10 * S + 600_000_000, 1000);
    assert!(a.stalled.is_empty());
    assert_eq!(a.slow.len(), 1);
}

#[test]
fn blocks_that_never_started_while_all_started_wait_is_forward_progress() {
    let mut i = Img::new(64, 16, 4, 8);
    let k = i.kernel("barrier", 4, 1);
    i.launch(k);
    let h = i.header();
    i.u32(h.kernel_offset as usize + 48, 4);
    for b in 0..3 {
        i.record(k, 1, b, 0, PH_WAITING, 5, 0x10, 1, 0, 10 * S, 12 * S);
    }
    let a = i.analyse(12 * S, 1000);
    assert_eq!(a.stalled.len(), 3);
    assert!(a
        .stalled
        .iter()
        .all(|w| w.class == Some(Class::ForwardProgress)));
    assert!(
        a.stalled[0].why.contains("1 of 4 blocks never started"),
        "{}",
        a.stalled[0].why
    );
    // Records of an older launch in the missing block do not count as started.
    i.record(k, 0, 3, 0, PH_DONE, 5, 0x10, 1, 1, S, S);
    assert_eq!(
        i.analyse(12 * S, 1000).stalled[0].class,
        Some(Class::ForwardProgress)
    );
    // The fourth block of this launch started and finished: not forward progress.
    i.record(k, 1, 3, 0, PH_DONE, 5, 0x10, 1, 1, S, S);
    assert_eq!(
        i.analyse(12 * S, 1000).stalled[0].class,
        Some(Class::SpinStall)
    );
}

#[test]
fn a_writer_kernel_launched_but_never_started_is_ordering() {
    let mut i = Img::new(64, 16, 4, 8);
    let cons = i.kernel("consumer", 1, 1);
    let prod = i.kernel("producer", 1, 1);
    i.launch(cons);
    i.launch(prod);
    i.site(1, "flag from producer", WRITER_SAME_GPU, -1, prod as i32);
    i.record(cons, 1, 0, 0, PH_WAITING, 1, 0x10, 1, 0, 10 * S, 12 * S);
    let a = i.analyse(12 * S, 1000);
    assert_eq!(a.stalled[0].class, Some(Class::Ordering));
    assert!(
        a.stalled[0].why.contains("never started"),
        "{}",
        a.stalled[0].why
    );
    // Once the producer's newest launch started, it is not ordering.
    i.record(prod, 1, 0, 0, PH_DONE, 0, 0, 0, 0, 0, 0);
    let a = i.analyse(12 * S, 1000);
    assert_eq!(a.stalled[0].class, Some(Class::SpinStall));
    assert!(
        a.stalled[0].why.contains("finished"),
        "{}",
        a.stalled[0].why
    );
    // A second launch handed out and not started: ordering again.
    i.launch(prod);
    assert_eq!(
        i.analyse(12 * S, 1000).stalled[0].class,
        Some(Class::Ordering)
    );
}

#[test]
fn memory_that_satisfies_the_wait_is_a_stale_read() {
    let mut i = Img::new(64, 16, 4, 8);
    let k = i.kernel("k", 1, 1);
    i.launch(k);
    let addr = i.word(3, 1);
    i.record(k, 1, 0, 0, PH_WAITING, 2, addr, 1, 0, 10 * S, 12 * S);
    let a = i.analyse(12 * S, 1000);
    assert_eq!(a.stalled[0].class, Some(Class::StaleRead));
    assert_eq!(a.stalled[0].memory.as_deref(), Some("1"));
    // Memory still 0: spin-stall, with the memory shown.
    i.word(3, 0);
    let a = i.analyse(12 * S, 1000);
    assert_eq!(a.stalled[0].class, Some(Class::SpinStall));
    assert_eq!(a.stalled[0].memory.as_deref(), Some("0"));
}

#[test]
fn no_heartbeat_for_the_threshold_is_silent() {
    let mut i = Img::new(64, 16, 4, 8);
    let k = i.kernel("k", 1, 1);
    i.launch(k);
    i.record(k, 1, 0, 0, PH_WAITING, 2, 0x10, 1, 0, 10 * S, 10 * S);
    assert_eq!(
        i.analyse(12 * S, 1000).stalled[0].class,
        Some(Class::Silent)
    );
}

#[test]
fn a_site_written_by_a_peer_gpu_is_remote_wait() {
    let mut i = Img::new(64, 16, 4, 8);
    let k = i.kernel("k", 1, 1);
    i.launch(k);
    i.site(7, "flag from gpu 1", WRITER_PEER_GPU, 1, -1);
    i.record(k, 1, 0, 0, PH_WAITING, 7, 0x10, 1, 0, 10 * S, 12 * S);
    let a = i.analyse(12 * S, 1000);
    assert_eq!(a.stalled[0].class, Some(Class::RemoteWait));
    assert!(a.stalled[0].why.contains("gpu 1"));
}

#[test]
fn comparisons_follow_the_words_type() {
    let mut r = Record {
        cmp: 1,
        expected: 5,
        ..Default::default()
    };
    assert!(r.satisfied_by(5) && r.satisfied_by(6) && !r.satisfied_by(4));
    r.cmp = CMP_SIGNED | 1; // 4-byte signed >=
    r.expected = (-1i32) as u32 as u64;
    assert!(r.satisfied_by(0) && !r.satisfied_by((-2i32) as u32 as u64));
    assert_eq!(r.show((-2i32) as u32 as u64), "-2");
    r.cmp = 5; // 4-byte unsigned <
    r.expected = 3;
    assert!(r.satisfied_by(2) && !r.satisfied_by(3));
    r.cmp = 2 | CMP_WIDE;
    assert!(r.satisfied_by(4) && !r.satisfied_by(3));
}

#[test]
fn records_that_cannot_come_from_the_header_are_problems() {
    let mut i = Img::new(64, 16, 4, 8);
    let k = i.kernel("k", 2, 2);
    let h = i.header();
    let kernels = parse_kernels(&h, &i.b[h.kernel_offset as usize..]).unwrap();
    let mut r = Record {
        index: 3,
        phase: PH_WAITING,
        kernel: k,
        block: 1,
        warp: 1,
        ..Default::default()
    };
    assert_eq!(record_problem(&r, &kernels), None);
    r.warp = 0;
    assert!(record_problem(&r, &kernels).is_some());
    r.kernel = 9;
    assert!(record_problem(&r, &kernels)
        .unwrap()
        .contains("not declared"));
    r.phase = 9;
    assert!(record_problem(&r, &kernels).is_some());
}

#[test]
fn a_stable_read_needs_two_equal_copies_and_an_even_seq() {
    let mut a = [0u8; 64];
    a[0] = 2;
    assert!(stable(&a, &a));
    let mut b = a;
    b[40] = 1;
    assert!(!stable(&a, &b));
    a[0] = 3;
    assert!(!stable(&a, &a));
}

#[test]
fn findings_group_waiters_and_carry_evidence() {
    let mut i = Img::new(64, 16, 4, 8);
    let k = i.kernel("barrier", 4, 1);
    i.launch(k);
    for b in 0..3 {
        i.record(k, 1, b, 0, PH_WAITING, 5, 0x10, 1, 0, 10 * S, 12 * S);
    }
    let a = i.analyse(12 * S, 1000);
    let rep = AreaReport {
        path: "/dev/shm/gdrdoctor-4242-0".into(),
        pid: Some(4242),
        job: "job".into(),
        process: "running".into(),
        header: Some(i.header()),
        threshold_ms: 1000.0,
        poll_ms: 10.0,
        counts: a.counts.clone(),
        episodes: a
            .stalled
            .iter()
            .map(|w| Episode {
                waiter: w.clone(),
                detected_ns: 12 * S,
                detected_after_ms: w.waited_ms,
                outcome: "stalled".into(),
                waited_ms: w.waited_ms,
            })
            .collect(),
        ..Default::default()
    };
    let f = findings(&rep);
    assert_eq!(f[0].id, "watch.area");
    assert_eq!(f[0].status, Status::Pass);
    let stall: Vec<_> = f.iter().filter(|f| f.id == "watch.stall").collect();
    assert_eq!(stall.len(), 1, "{f:#?}");
    assert_eq!(stall[0].status, Status::Fail);
    assert!(
        stall[0]
            .message
            .starts_with("forward-progress: kernel barrier block 0"),
        "{}",
        stall[0].message
    );
    assert!(stall[0].message.contains("(+2 more waiters)"));
    assert_eq!(
        stall[0]
            .evidence
            .iter()
            .filter(|e| e.source == "waiter")
            .count(),
        3
    );
    assert!(stall[0].remediation.is_some());
    // A damaged area is one error naming the file.
    let bad = AreaReport {
        path: "/dev/shm/gdrdoctor-1-0".into(),
        error: Some("bad magic".into()),
        ..Default::default()
    };
    let f = findings(&bad);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].status, Status::Error);
    assert!(f[0].message.contains("/dev/shm/gdrdoctor-1-0"));
}

mod props {
    use super::*;
    use proptest::prelude::*;
    proptest! {
        /// Whatever the bytes, parsing never panics, and an accepted header keeps every
        /// region inside the area.
        #[test]
        fn any_header_bytes_parse_or_error(bytes in proptest::collection::vec(any::<u8>(), 0..400), len in 0u64..(1 << 31)) {
            if let Ok(h) = parse_header(&bytes, len) {
                prop_assert!(h.area_size <= len);
                prop_assert!(h.records_range().1 <= h.area_size);
                prop_assert!(h.sites_range().1 <= h.area_size);
                prop_assert!(h.words_range().1 <= h.area_size);
            }
        }

        /// A valid header with random tables and records: parsing and analysis never panic.
        #[test]
        fn any_tables_and_records_analyse(kt in proptest::collection::vec(any::<u8>(), 256), rt in proptest::collection::vec(any::<u8>(), 64 * 8), st in proptest::collection::vec(any::<u8>(), 64 * 4), now in any::<u64>()) {
            let mut i = Img::new(8, 4, 4, 8);
            i.u32(116, 8);
            i.u32(120, 4);
            let h = i.header();
            let sites = parse_sites(&h, &st);
            let kernels = parse_kernels(&h, &kt).unwrap_or_default();
            let records: Vec<Option<Record>> = rt.chunks(64).enumerate().map(|(n, c)| Some(decode_record(n as u32, c))).collect();
            let mut tr = Tracker::default();
            tr.observe(&records.iter().flatten().copied().collect::<Vec<_>>(), now / 2);
            let v = View { header: &h, sites: &sites, kernels: &kernels, words: &[0u8; 64], records: &records };
            let a = analyse(&v, &tr, &Clock::of(&h), now, now, Thresholds { stall_ns: 1 });
            for w in &a.stalled {
                prop_assert!(w.class.is_some());
            }
        }
    }
}
