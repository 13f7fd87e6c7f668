//! The detector: polls the records in host-mapped memory while a scenario runs (never a CUDA
//! call: it runs on its own thread beside a worker whose kernels may be wedged), and on a stall
//! classifies it with the rules `gdrdoctor watch` shares (`gdrdoctor_checks::stall::classify`,
//! most specific first: blocks never started, the writer is on the peer GPU, the producer
//! launch never started, stale read, silent waiter, plain spin stall).

use super::layout::*;
use super::model::{Options, Stalled, Verdict};
use crate::live::cuda::KernelArg;
use crate::live::shared::Region;
use gdrdoctor_checks::progress_record as rec;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The host-mapped region, as the detector sees it: shared memory, no CUDA handle in reach.
pub(super) struct View<'a> {
    pub(super) mem: Region<'a>,
    pub(super) opts: Options,
    pub(super) offset_ns: i64,
    /// The peer GPU, described for verdicts (`GPU1 0000:..`).
    pub(super) peer_desc: Option<String>,
}

impl<'a> View<'a> {
    pub(super) fn ctl(&self) -> Control<'a> {
        Control::at(self.mem, OFF_CTRL)
    }
    pub(super) fn launch(&self, i: usize) -> LaunchRecord<'a> {
        LaunchRecord::at(self.mem, OFF_LAUNCH + 64 * i)
    }
    pub(super) fn flag(&self, i: usize) -> &'a AtomicU64 {
        self.mem.u64_at(OFF_FLAGS + 64 * i)
    }
    pub(super) fn rec(&self, i: usize) -> HangRecord<'a> {
        HangRecord::at(self.mem, OFF_RECS + rec::SIZE * i)
    }
    pub(super) fn reset(&self) {
        // Zero the mapped region between scenarios (no kernel is running).
        self.mem.zero();
        let c = self.ctl();
        let t = self.opts.threshold.as_nanos() as u64;
        c.hb_ns.store(1_000_000, Ordering::Relaxed);
        // printf: a line once a wait is older than a quarter of the threshold, then at most one
        // per waiter per half threshold.
        c.slow_ns.store(t / 4, Ordering::Relaxed);
        c.print_ns.store(t / 2, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    pub(super) fn nlaunches(plan: &LaunchPlan) -> usize {
        plan.steps
            .iter()
            .filter(|s| matches!(s, Step::Launch(_)))
            .count()
    }

    pub(super) fn all_done(&self, n: usize) -> bool {
        (0..n).all(|i| self.launch(i).state.load(Ordering::Acquire) == L_DONE)
    }

    /// Map a %globaltimer value to host realtime.
    pub(super) fn gt_to_host(&self, gt: u64) -> u64 {
        (gt as i64 + self.offset_ns) as u64
    }
}

/// A kernel argument.
pub(super) type Arg = KernelArg;

pub(super) struct Launch {
    pub(super) func: &'static str,
    pub(super) grid: u32,
    pub(super) block: u32,
    pub(super) stream: usize,
    pub(super) rec_base: usize,
    pub(super) args: Vec<Arg>,
    pub(super) cooperative: bool,
    /// Launched on the peer GPU (its context, module and stream).
    pub(super) on_peer: bool,
}

pub(super) enum Step {
    Launch(Launch),
    Record(usize),
    Wait(usize),
}

pub(super) struct Site {
    pub(super) id: u32,
    pub(super) what: String,
    pub(super) flag: Option<usize>,
    pub(super) writer: Option<usize>,
}

pub(super) struct LaunchPlan {
    pub(super) steps: Vec<Step>,
    pub(super) sites: Vec<Site>,
    /// (launch index, first record, record count)
    pub(super) ranges: Vec<(usize, usize, usize)>,
    pub(super) capacity: Option<u32>,
    pub(super) notes: Vec<String>,
}

/// The detector: polls the records (mapped memory only), returns when every launch finished
/// or a waiter stalled. Runs on its own thread; never calls CUDA.
pub(super) struct Watch {
    t_change: Vec<Instant>,
    last: Vec<(u32, u64)>,
    t_beat: Vec<Instant>,
    last_beat: Vec<u64>,
    /// Whether the host has seen this record's heartbeat change since its first poll.
    beat_moved: Vec<bool>,
}

pub(super) enum Outcome {
    Completed,
    Hang(Verdict),
}

pub(super) fn detect(g: &View, plan: &LaunchPlan, warnings: &mut Vec<String>) -> Outcome {
    let n = View::nlaunches(plan);
    let total: usize = plan.ranges.iter().map(|r| r.2).sum();
    let start = Instant::now();
    let mut w = Watch {
        t_change: vec![start; total],
        last: vec![(u32::MAX, 0); total],
        t_beat: vec![start; total],
        last_beat: vec![0; total],
        beat_moved: vec![false; total],
    };
    let threshold = g.opts.threshold;
    let mut warned = false;
    loop {
        if g.all_done(n) {
            return Outcome::Completed;
        }
        let now = Instant::now();
        let mut stalled: Vec<(usize, usize, Snap)> = Vec::new();
        let mut slow: Vec<(usize, Snap)> = Vec::new();
        let mut k = 0usize;
        for (ri, &(_, base, count)) in plan.ranges.iter().enumerate() {
            for j in 0..count {
                let s = g.rec(base + j).snapshot();
                if (s.phase, s.iter) != w.last[k] {
                    w.last[k] = (s.phase, s.iter);
                    w.t_change[k] = now;
                }
                if s.beat_gt != w.last_beat[k] {
                    w.beat_moved[k] |= w.last_beat[k] != 0;
                    w.last_beat[k] = s.beat_gt;
                    w.t_beat[k] = now;
                }
                if s.phase == PH_WAITING {
                    // The stall clock starts when the wait began on the device (its
                    // %globaltimer, mapped to host time), not when the host first noticed: a
                    // wait is published lazily, after 1024 polls.
                    let host_age = now - w.t_change[k];
                    let dev_age = if s.wait_start_gt > 0 {
                        Duration::from_nanos(
                            realtime_ns().saturating_sub(g.gt_to_host(s.wait_start_gt)),
                        )
                    } else {
                        host_age
                    };
                    let age = dev_age.max(host_age);
                    if age >= threshold {
                        stalled.push((ri, k, s));
                    } else if age >= threshold / 2 {
                        slow.push((k, s));
                    }
                }
                k += 1;
            }
        }
        if !slow.is_empty() && !warned && stalled.is_empty() {
            warned = true;
            let (_, s) = slow[0];
            warnings.push(format!(
                "{} waiter(s) slow for {} ms (half the threshold); first: block {} site {} waits for {} at 0x{:x}, sees {}",
                slow.len(),
                threshold.as_millis() / 2,
                s.block,
                s.site,
                s.expected,
                s.addr,
                s.observed
            ));
        }
        if !stalled.is_empty() {
            return Outcome::Hang(classify(g, plan, &w, &stalled, now));
        }
        std::thread::sleep(g.opts.poll);
    }
}

/// A record's heartbeat age: since the host saw it change. A heartbeat the host has not seen
/// move since its first poll may have stopped before that (a busy host, a late start): then
/// its age is taken from the device's stamp (%globaltimer mapped to host time) when that is
/// older, as the wait's own age is. Once the host has seen it move, the host clock alone: a
/// stepped wall clock or a resynced GPU timer must not make a live heartbeat look stale.
fn heartbeat_age(g: &View, w: &Watch, k: usize, s: &Snap, now: Instant, at: u64) -> Duration {
    let host = now - w.t_beat[k];
    if w.beat_moved[k] || s.beat_gt == 0 {
        return host;
    }
    host.max(Duration::from_nanos(
        at.saturating_sub(g.gt_to_host(s.beat_gt)),
    ))
}

pub(super) fn classify(
    g: &View,
    plan: &LaunchPlan,
    w: &Watch,
    stalled: &[(usize, usize, Snap)],
    now: Instant,
) -> Verdict {
    let at = realtime_ns();
    let threshold = g.opts.threshold;
    let (ri, _, primary) = stalled[0];
    let (lid, base, count) = plan.ranges[ri];
    let snaps: Vec<Snap> = (0..count).map(|j| g.rec(base + j).snapshot()).collect();
    let never_started = snaps.iter().filter(|s| s.phase == PH_NOT_STARTED).count();
    let started = count - never_started;
    let all_started_wait = snaps
        .iter()
        .filter(|s| s.phase != PH_NOT_STARTED)
        .all(|s| s.phase == PH_WAITING);
    let site = plan.sites.iter().find(|s| s.id == primary.site);
    let writer_state = site
        .and_then(|s| s.writer)
        .map(|l| g.launch(l).state.load(Ordering::Acquire));
    let memory = |s: &Snap| -> Option<u64> {
        plan.sites
            .iter()
            .find(|x| x.id == s.site)
            .and_then(|x| x.flag)
            .map(|f| g.flag(f).load(Ordering::Acquire))
    };
    // The heartbeat age of the primary record (host clock).
    let mut k0 = 0;
    for r in &plan.ranges[..ri] {
        k0 += r.2;
    }
    let beat_age = stalled
        .iter()
        .find(|(r, _, _)| *r == ri)
        .map(|(_, k, s)| heartbeat_age(g, w, *k, s, now, at))
        .unwrap_or_default();
    let _ = k0;
    let mem = memory(&primary);
    let writer_on_peer = site
        .and_then(|s| s.writer)
        .and_then(|l| {
            plan.steps
                .iter()
                .filter_map(|s| match s {
                    Step::Launch(x) => Some(x),
                    _ => None,
                })
                .nth(l)
        })
        .is_some_and(|x| x.on_peer);
    // The wait's comparison: `>=` (cmp 1) or `==`.
    let satisfies = |v: u64| {
        if primary.cmp == 1 {
            v >= primary.expected
        } else {
            v == primary.expected
        }
    };
    let class = gdrdoctor_checks::stall::classify(&gdrdoctor_checks::stall::Signs {
        never_started,
        all_started_wait: started > 0 && all_started_wait,
        writer_on_peer,
        writer_never_started: writer_state == Some(L_ENQUEUED),
        memory_satisfies: mem.is_some_and(satisfies) && !satisfies(primary.observed),
        heartbeat_stale: beat_age >= threshold,
    });
    let _ = lid;
    let describe = |(_, k, s): &(usize, usize, Snap)| -> Stalled {
        let waited = at.saturating_sub(g.gt_to_host(s.wait_start_gt)) as f64 / 1e6;
        Stalled {
            block: s.block,
            warp: s.warp,
            sm: s.smid,
            site: s.site,
            site_what: plan
                .sites
                .iter()
                .find(|x| x.id == s.site)
                .map(|x| x.what.clone())
                .unwrap_or_default(),
            addr: format!("0x{:x}", s.addr),
            expected: s.expected,
            observed: s.observed,
            memory: memory(s),
            waited_ms: waited,
            heartbeat_age_ms: heartbeat_age(g, w, *k, s, now, at).as_secs_f64() * 1e3,
            phase: phase_name(s.phase).into(),
            cmp: if s.cmp == 1 { ">=" } else { "==" }.into(),
        }
    };
    let list: Vec<Stalled> = stalled.iter().take(16).map(describe).collect();
    let latency_ms = list.first().map(|s| s.waited_ms).unwrap_or(0.0);
    Verdict {
        class,
        latency_ms,
        threshold_ms: threshold.as_secs_f64() * 1e3,
        poll_ms: g.opts.poll.as_secs_f64() * 1e3,
        stalled_total: stalled.len(),
        stalled: list,
        never_started,
        started,
        capacity: plan.capacity,
        writer: site.and_then(|s| s.writer).map(|l| {
            format!(
                "launch {l} ({})",
                match g.launch(l).state.load(Ordering::Acquire) {
                    L_ENQUEUED => "enqueued, never started",
                    L_STARTED => "running",
                    L_DONE => "finished",
                    _ => "?",
                }
            )
        }),
        peer: if writer_on_peer {
            g.peer_desc.clone()
        } else {
            None
        },
        at_realtime_ns: at,
    }
}

#[cfg(test)]
mod tests {
    //! The detector and classifier without a GPU: a heap buffer stands in for the host-mapped
    //! region, and the test writes records the way the kernels do.
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_arguments)]
    use super::*;
    use crate::probe::hang::model::Class;

    struct Fake {
        buf: crate::live::shared::HeapRegion,
    }

    impl Fake {
        fn new() -> Fake {
            Fake {
                buf: crate::live::shared::HeapRegion::new(MAPPED_SIZE),
            }
        }
        fn view(&mut self, threshold_ms: u64) -> View<'_> {
            View {
                mem: self.buf.region(),
                opts: Options {
                    ordinal: 0,
                    threshold: Duration::from_millis(threshold_ms),
                    poll: Duration::from_millis(2),
                    grace: Duration::from_millis(50),
                    scenarios: vec![],
                    bench: 0,
                    force_ptx: false,
                    peer: None,
                },
                offset_ns: 0,
                peer_desc: Some("GPU1 0000:28:00.0".into()),
            }
        }
    }

    fn set_rec(
        v: &View,
        i: usize,
        phase: u32,
        site: u32,
        flag_addr: u64,
        expected: u64,
        observed: u64,
        ws: u64,
    ) {
        let r = v.rec(i);
        let s = r.seq.load(Ordering::Relaxed);
        r.seq.store(s + 1, Ordering::Relaxed);
        r.phase_site.store((phase << 24) | site, Ordering::Relaxed);
        r.block.store(i as u32, Ordering::Relaxed);
        r.addr.store(flag_addr, Ordering::Relaxed);
        r.expected.store(expected, Ordering::Relaxed);
        r.observed.store(observed, Ordering::Relaxed);
        r.wait_start_gt.store(ws, Ordering::Relaxed);
        r.beat_gt.store(ws, Ordering::Relaxed);
        r.seq.store(s + 2, Ordering::Release);
    }

    fn plan(sites: Vec<Site>, ranges: Vec<(usize, usize, usize)>, launches: usize) -> LaunchPlan {
        let steps = (0..launches)
            .map(|_| {
                Step::Launch(Launch {
                    func: "x",
                    grid: 1,
                    block: 1,
                    stream: 0,
                    rec_base: 0,
                    args: vec![],
                    cooperative: false,
                    on_peer: false,
                })
            })
            .collect();
        LaunchPlan {
            steps,
            sites,
            ranges,
            capacity: Some(4),
            notes: vec![],
        }
    }

    fn run(v: &View, p: &LaunchPlan, beat: bool) -> Outcome {
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            if beat {
                // A live waiter: heartbeats every millisecond.
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        v.rec(0).beat_gt.store(realtime_ns(), Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
            }
            let mut w = Vec::new();
            let o = detect(v, p, &mut w);
            stop.store(true, Ordering::Relaxed);
            o
        })
    }

    fn class(o: Outcome) -> (Class, Verdict) {
        match o {
            Outcome::Hang(v) => (v.class, v),
            Outcome::Completed => panic!("expected a hang"),
        }
    }

    #[test]
    fn spin_stall_with_live_heartbeats_and_exact_details() {
        let mut f = Fake::new();
        let v = f.view(60);
        let flag = 0x1000;
        set_rec(&v, 0, PH_WAITING, 1, flag, 1, 0, realtime_ns());
        let p = plan(
            vec![Site {
                id: 1,
                what: "flag nobody writes".into(),
                flag: Some(1),
                writer: None,
            }],
            vec![(0, 0, 1)],
            1,
        );
        let t0 = Instant::now();
        let (c, verdict) = class(run(&v, &p, true));
        assert_eq!(c, Class::SpinStall);
        let waited = t0.elapsed().as_secs_f64() * 1e3;
        assert!(
            (60.0..60.0 + 3.0 * 2.0 + 20.0).contains(&waited),
            "{waited}"
        );
        let s = &verdict.stalled[0];
        assert_eq!(
            (s.block, s.site, s.expected, s.observed, s.memory),
            (0, 1, 1, 0, Some(0))
        );
        assert_eq!(s.addr, "0x1000");
        assert!(verdict.latency_ms >= 60.0, "{}", verdict.latency_ms);
    }

    #[test]
    fn stale_read_when_memory_already_holds_the_value() {
        let mut f = Fake::new();
        let v = f.view(40);
        set_rec(&v, 0, PH_WAITING, 1, 0, 1, 0, realtime_ns());
        v.flag(2).store(1, Ordering::Release);
        let p = plan(
            vec![Site {
                id: 1,
                what: "flag".into(),
                flag: Some(2),
                writer: None,
            }],
            vec![(0, 0, 1)],
            1,
        );
        assert_eq!(class(run(&v, &p, true)).0, Class::StaleRead);
    }

    /// One launch of one block waiting on flag 1, which no launch writes.
    fn one_waiter_nobody_writes() -> LaunchPlan {
        plan(
            vec![Site {
                id: 1,
                what: "flag".into(),
                flag: Some(1),
                writer: None,
            }],
            vec![(0, 0, 1)],
            1,
        )
    }

    #[test]
    fn silent_when_heartbeats_stop() {
        let mut f = Fake::new();
        let v = f.view(40);
        set_rec(&v, 0, PH_WAITING, 1, 0, 1, 0, realtime_ns());
        let p = one_waiter_nobody_writes();
        assert_eq!(class(run(&v, &p, false)).0, Class::Silent);
    }

    #[test]
    fn silent_when_heartbeats_stopped_before_the_detector_started() {
        // The wait and its last heartbeat are 30 ms old when the detector starts (a busy host,
        // or `watch` attaching late): with the host clock alone the heartbeat looked 10 ms old
        // at the 40 ms stall, and the waiter was taken for a spinning one.
        let mut f = Fake::new();
        let v = f.view(40);
        let ws = realtime_ns() - 30_000_000;
        set_rec(&v, 0, PH_WAITING, 1, 0, 1, 0, ws);
        let p = one_waiter_nobody_writes();
        let (c, verdict) = class(run(&v, &p, false));
        assert_eq!(c, Class::Silent, "{verdict:?}");
        // The age shown is the one the class was decided on.
        assert!(verdict.stalled[0].heartbeat_age_ms >= 40.0, "{verdict:?}");
    }

    #[test]
    fn ordering_when_the_writer_launch_never_started() {
        let mut f = Fake::new();
        let v = f.view(40);
        set_rec(&v, 0, PH_WAITING, 1, 0, 1, 0, realtime_ns());
        v.launch(1).state.store(L_ENQUEUED, Ordering::Release);
        let p = plan(
            vec![Site {
                id: 1,
                what: "flag".into(),
                flag: Some(1),
                writer: Some(1),
            }],
            vec![(0, 0, 1), (1, 1, 1)],
            2,
        );
        let (c, verdict) = class(run(&v, &p, true));
        assert_eq!(c, Class::Ordering);
        assert!(verdict.writer.unwrap().contains("never started"));
    }

    #[test]
    fn remote_wait_names_the_peer_whose_write_never_came() {
        let mut f = Fake::new();
        let v = f.view(40);
        set_rec(&v, 0, PH_WAITING, 7, 0, 1, 0, realtime_ns());
        // The peer's kernel ran to the end without writing the awaited word.
        v.launch(1).state.store(L_DONE, Ordering::Release);
        let mut p = plan(
            vec![Site {
                id: 7,
                what: "flag in this gpu's memory".into(),
                flag: None,
                writer: Some(1),
            }],
            vec![(0, 0, 1), (1, 1, 1)],
            2,
        );
        if let Step::Launch(l) = &mut p.steps[1] {
            l.on_peer = true;
        }
        let (c, verdict) = class(run(&v, &p, true));
        assert_eq!(c, Class::RemoteWait);
        assert_eq!(verdict.peer.as_deref(), Some("GPU1 0000:28:00.0"));
        assert!(verdict.writer.unwrap().contains("finished"));
        // The same plan with the writer on this GPU is a plain spin stall, not remote-wait.
        if let Step::Launch(l) = &mut p.steps[1] {
            l.on_peer = false;
        }
        let (c, verdict) = class(run(&v, &p, true));
        assert_eq!(c, Class::SpinStall);
        assert!(verdict.peer.is_none());
    }

    #[test]
    fn forward_progress_when_blocks_never_started() {
        let mut f = Fake::new();
        let v = f.view(40);
        for i in 0..4 {
            set_rec(&v, i, PH_WAITING, 5, 0, 1, 0, realtime_ns());
        }
        // records 4 and 5 stay NOT_STARTED (zeroed)
        let p = plan(
            vec![Site {
                id: 5,
                what: "last block's flag".into(),
                flag: Some(0),
                writer: Some(0),
            }],
            vec![(0, 0, 6)],
            1,
        );
        let (c, verdict) = class(run(&v, &p, true));
        assert_eq!(c, Class::ForwardProgress);
        assert_eq!(
            (verdict.never_started, verdict.started, verdict.capacity),
            (2, 4, Some(4))
        );
    }

    #[test]
    fn completion_is_not_a_hang_and_progress_resets_the_clock() {
        let mut f = Fake::new();
        let v = f.view(80);
        set_rec(&v, 0, PH_WAITING, 1, 0, 1, 0, realtime_ns());
        let p = plan(vec![], vec![(0, 0, 1)], 1);
        let o = std::thread::scope(|s| {
            s.spawn(|| {
                // Progress at 40 ms (a new wait begins), completion at 100 ms: never 80 ms idle.
                std::thread::sleep(Duration::from_millis(40));
                set_rec(&v, 0, PH_WAITING, 1, 0, 2, 1, realtime_ns());
                v.rec(0).iter.store(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(60));
                v.launch(0).state.store(L_DONE, Ordering::Release);
            });
            let mut w = Vec::new();
            detect(&v, &p, &mut w)
        });
        assert!(matches!(o, Outcome::Completed));
    }

    #[test]
    fn seqlock_snapshot_is_consistent() {
        let mut f = Fake::new();
        let v = f.view(40);
        set_rec(&v, 3, PH_WAITING, 7, 0xabc, 9, 8, 123);
        let s = v.rec(3).snapshot();
        assert_eq!(
            (
                s.phase,
                s.site,
                s.addr,
                s.expected,
                s.observed,
                s.wait_start_gt
            ),
            (PH_WAITING, 7, 0xabc, 9, 8, 123)
        );
        // An update in flight (odd seq) is not returned as consistent data.
        v.rec(3).seq.store(7, Ordering::Release);
        let s = v.rec(3).snapshot();
        assert_eq!(s.addr, 0, "odd seq never yields a torn record");
    }

    #[test]
    fn options_round_trip_through_the_protocol_and_keep_their_floors() {
        let o = Options {
            ordinal: 1,
            threshold: Duration::from_millis(250),
            poll: Duration::from_millis(5),
            grace: Duration::from_millis(300),
            scenarios: vec!["never-set".into(), "ring".into()],
            bench: 3,
            force_ptx: true,
            peer: Some(2),
        };
        let req = crate::worker::protocol::Request::new("hang", &o).unwrap();
        let back: Options = crate::worker::protocol::params(req.params).unwrap();
        assert_eq!(back, o);
        let tiny = Options {
            threshold: Duration::from_millis(1),
            poll: Duration::ZERO,
            ..o
        }
        .normalized();
        assert_eq!(
            (tiny.threshold, tiny.poll),
            (Duration::from_millis(20), Duration::from_millis(1))
        );
    }
}
