//! The worker side of `probe --hang`: owns the context, loads every kernel before the first
//! launch, puts the records in host-mapped memory, launches a scenario, and hands the records to
//! a detector thread that only reads mapped memory (never a CUDA call). On a stall the detector
//! classifies (most specific first: blocks never started, producer launch never started, stale
//! read, silent waiter, plain spin stall), the worker sets the abort flag, waits a short grace,
//! synchronizes (which flushes device printf) and moves on; a kernel that ignores the abort
//! makes the worker print what it has and `exit(3)`, and the parent kills it if needed and
//! checks the GPU's health in a fresh process.

use super::detector::{detect, Arg, Launch, LaunchPlan, Outcome, Site, Step, View};
use super::layout::*;
use super::model::*;
use crate::live::cuda::{Context, DeviceBuffer, Driver, Event, Stream};
use crate::live::os;
use crate::probe::kernels::{self, Kernels};
use crate::worker::protocol::{self, WorkerError};
use gdrdoctor_checks::progress_record as rec;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

struct Gpu<'a> {
    view: View<'a>,
    ctx: Context,
    mapped_dev: u64,
    dev_mem: DeviceBuffer,
    streams: [Stream; 2],
    funcs: Kernels,
    sms: i32,
    /// Device memory of this GPU that the peer writes (remote flags), 4 KiB.
    remote: DeviceBuffer,
    peer: Result<Peer, String>,
}

/// The peer GPU of the cross-GPU scenarios.
struct Peer {
    /// The peer's context, module and stream; `None`: loopback, this GPU's own (stream 1).
    other: Option<PeerGpu>,
}

struct PeerGpu {
    ctx: Context,
    funcs: Kernels,
    stream: Stream,
}

impl Peer {
    fn loopback(&self) -> bool {
        self.other.is_none()
    }
}

impl<'a> std::ops::Deref for Gpu<'a> {
    type Target = View<'a>;
    fn deref(&self) -> &View<'a> {
        &self.view
    }
}

impl Gpu<'_> {
    fn flag_dev(&self, i: usize) -> u64 {
        self.mapped_dev + (OFF_FLAGS + 64 * i) as u64
    }
    fn dev(&self, off: usize) -> u64 {
        self.mapped_dev + off as u64
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Gpu<'_> {
    fn enqueue(&self, plan: &LaunchPlan, events: &mut Vec<Event>) -> Result<(), String> {
        let mut li = 0usize;
        for s in &plan.steps {
            match s {
                Step::Launch(l) => {
                    let lr = self.launch(li);
                    lr.launch_id.store(li as u32, Ordering::Relaxed);
                    lr.state.store(L_ENQUEUED, Ordering::Release);
                    let peer = if l.on_peer {
                        Some(self.peer.as_ref().map_err(|e| e.clone())?)
                    } else {
                        None
                    };
                    let other = peer.and_then(|p| p.other.as_ref());
                    let module = match other {
                        Some(o) => &o.funcs,
                        None => &self.funcs,
                    };
                    let f = module.get(l.func)?;
                    let mut args = vec![
                        Arg::U64(self.dev(OFF_CTRL)),
                        Arg::U64(self.dev(OFF_RECS + rec::SIZE * l.rec_base)),
                        Arg::U64(self.dev(OFF_LAUNCH + 64 * li)),
                    ];
                    args.extend(l.args.iter().copied());
                    let stream = match (other, peer) {
                        (Some(o), _) => &o.stream,
                        // Loopback: the peer's kernel runs on this GPU's second stream.
                        (None, Some(_)) => &self.streams[1],
                        (None, None) => &self.streams[l.stream],
                    };
                    if let Some(o) = other {
                        o.ctx.make_current().map_err(err)?;
                    }
                    let r = if l.cooperative {
                        f.launch_cooperative(l.grid, l.block, stream, &args)
                    } else {
                        f.launch(l.grid, l.block, stream, &args)
                    };
                    if other.is_some() {
                        // Back to this GPU's context.
                        self.ctx.make_current().map_err(err)?;
                    }
                    r.map_err(err)?;
                    li += 1;
                }
                Step::Record(st) => {
                    let e = self.ctx.event().map_err(err)?;
                    e.record(&self.streams[*st]).map_err(err)?;
                    events.push(e);
                }
                Step::Wait(st) => {
                    let e = events.last().ok_or("wait without a recorded event")?;
                    self.streams[*st].wait_event(e).map_err(err)?;
                }
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), String> {
        for s in &self.streams {
            // Every launch on the stream has finished (checked by the caller).
            s.synchronize().map_err(err)?;
        }
        if let Ok(Peer { other: Some(o) }) = &self.peer {
            o.stream.synchronize().map_err(err)?;
        }
        Ok(())
    }
}

fn marker(text: &str) {
    // Device printf goes through C stdio; put our markers there too so lines stay in order.
    os::c_stdout_line(&format!("gdrdoctor-hang-scenario {text}"));
}

fn plan_for(g: &Gpu, name: &str) -> Result<LaunchPlan, String> {
    let flag = |i| Arg::U64(g.flag_dev(i));
    let wait = |site: u32, fl: usize, flavour: u32, stream: usize, rec: usize| {
        Step::Launch(Launch {
            func: "hp_wait_flag",
            grid: 1,
            block: 32,
            stream,
            rec_base: rec,
            args: vec![flag(fl), Arg::U64(1), Arg::U32(site), Arg::U32(flavour)],
            cooperative: false,
            on_peer: false,
        })
    };
    let set = |fl: usize, delay_ms: u64, stream: usize, rec: usize| {
        Step::Launch(Launch {
            func: "hp_set_flag",
            grid: 1,
            block: 32,
            stream,
            rec_base: rec,
            args: vec![flag(fl), Arg::U64(1), Arg::U64(delay_ms * 1_000_000)],
            cooperative: false,
            on_peer: false,
        })
    };
    let site = |id: u32, what: &str, fl: usize, writer: Option<usize>| Site {
        id,
        what: what.into(),
        flag: Some(fl),
        writer,
    };
    let capacity = || -> Result<u32, String> {
        let n = g
            .funcs
            .get("hp_last_block_sets")?
            .max_active_blocks_per_sm(1024)
            .map_err(err)?;
        Ok((n.max(1) as u32) * g.sms.max(1) as u32)
    };
    let barrier = |grid: u32, cooperative: bool| {
        Step::Launch(Launch {
            func: "hp_last_block_sets",
            grid,
            block: 1024,
            stream: 0,
            rec_base: 0,
            args: vec![flag(0), Arg::U64(1), Arg::U32(5)],
            cooperative,
            on_peer: false,
        })
    };
    let pair = |cons_flavour: u32, delay: u64, fl: usize| LaunchPlan {
        steps: vec![wait(1, fl, cons_flavour, 0, 0), set(fl, delay, 1, 1)],
        sites: vec![site(1, "flag set by hp_set_flag on stream 1", fl, Some(1))],
        ranges: vec![(0, 0, 1), (1, 1, 1)],
        capacity: None,
        notes: vec![],
    };
    Ok(match name {
        "handoff" | "control:ordering" => pair(0, 20, 0),
        "never-set" => LaunchPlan {
            steps: vec![wait(1, 1, 0, 0, 0)],
            sites: vec![site(1, "flag that no kernel writes", 1, None)],
            ranges: vec![(0, 0, 1)],
            capacity: None,
            notes: vec![],
        },
        "ordering" => LaunchPlan {
            steps: vec![wait(1, 2, 0, 0, 0), Step::Record(0), Step::Wait(1), set(2, 0, 1, 1)],
            sites: vec![site(1, "flag set by hp_set_flag on stream 1, which waits for an event recorded after this waiter", 2, Some(1))],
            ranges: vec![(0, 0, 1), (1, 1, 1)],
            capacity: None,
            notes: vec![],
        },
        "stale-read" => pair(1, 20, 3),
        "control:stale-read" => pair(0, 20, 3),
        "silent" => LaunchPlan {
            steps: vec![wait(1, 4, 2, 0, 0)],
            sites: vec![site(1, "flag that no kernel writes (waiter without heartbeats)", 4, None)],
            ranges: vec![(0, 0, 1)],
            capacity: None,
            notes: vec![],
        },
        "control:silent" => pair(2, 20, 4),
        "ignore-abort" => LaunchPlan {
            steps: vec![wait(1, 5, 3, 0, 0)],
            sites: vec![site(1, "flag that no kernel writes (waiter ignores abort)", 5, None)],
            ranges: vec![(0, 0, 1)],
            capacity: None,
            notes: vec![],
        },
        "control:ignore-abort" => pair(3, 20, 5),
        "remote-wait" | "control:remote-wait" => {
            let peer = g.peer.as_ref().map_err(|e| format!("no peer gpu: {e}"))?;
            // 4 KiB of this GPU's memory, owned by the worker; nothing runs.
            g.remote.memset_d8(0).map_err(err)?;
            let remote = g.remote.device_ptr();
            let target = if name == "remote-wait" { remote + 64 } else { remote };
            let desc = g.peer_desc.clone().unwrap_or_else(|| "the peer gpu".into());
            let mut notes = vec![format!("peer: {desc}")];
            if peer.loopback() {
                notes.push("loopback: the peer is this gpu (one gpu available), so the flag is written by a second kernel of the same gpu; the peer-access path itself is not exercised".into());
            }
            LaunchPlan {
                steps: vec![
                    Step::Launch(Launch {
                        func: "hp_wait_flag",
                        grid: 1,
                        block: 32,
                        stream: 0,
                        rec_base: 0,
                        args: vec![Arg::U64(remote), Arg::U64(1), Arg::U32(7), Arg::U32(0)],
                        cooperative: false,
                        on_peer: false,
                    }),
                    Step::Launch(Launch {
                        func: "hp_set_flag",
                        grid: 1,
                        block: 32,
                        stream: 1,
                        rec_base: 1,
                        args: vec![Arg::U64(target), Arg::U64(1), Arg::U64(20_000_000)],
                        cooperative: false,
                        on_peer: true,
                    }),
                ],
                // No host-readable copy of the flag: it lives in device memory.
                sites: vec![Site { id: 7, what: format!("flag in this gpu's memory that {desc} writes over peer access"), flag: None, writer: Some(1) }],
                ranges: vec![(0, 0, 1), (1, 1, 1)],
                capacity: None,
                notes,
            }
        }
        "grid-barrier" | "control:occupancy" | "occupancy" => {
            let cap = capacity()?;
            let extra = if name == "occupancy" { 8 } else { 0 };
            let grid = cap + extra;
            if grid as usize > MAX_REC {
                return Err(format!("grid {grid} exceeds the {MAX_REC} records of the probe"));
            }
            let mut notes = vec![format!("resident capacity {cap} blocks of 1024 threads ({} SMs)", g.sms)];
            if name == "occupancy" {
                // The cooperative launch of the same grid must be refused (knowledge/hang-probe.md §2.6).
                let mut p = LaunchPlan { steps: vec![barrier(grid, true)], sites: vec![], ranges: vec![], capacity: Some(cap), notes: vec![] };
                let mut ev = Vec::new();
                match g.enqueue(&p, &mut ev) {
                    Err(e) => notes.push(format!("cooperative launch of {grid} blocks refused: {e}")),
                    Ok(()) => {
                        notes.push(format!("cooperative launch of {grid} blocks was accepted (unexpected)"));
                        let _ = g.sync();
                    }
                }
                p.steps.clear();
                g.reset();
            }
            LaunchPlan {
                steps: vec![barrier(grid, false)],
                sites: vec![Site { id: 5, what: format!("flag set by the last block ({}) of the same grid", grid - 1), flag: Some(0), writer: Some(0) }],
                ranges: vec![(0, 0, grid as usize)],
                capacity: Some(cap),
                notes,
            }
        }
        other => return Err(format!("unknown scenario {other}")),
    })
}

fn run_scenario(g: &Gpu, name: &str) -> Result<ScenarioResult, String> {
    let meta = SCENARIOS
        .iter()
        .find(|s| s.0 == name)
        .ok_or_else(|| format!("unknown scenario {name}"))?;
    let mut r = ScenarioResult {
        name: name.into(),
        kind: meta.1.into(),
        expect: meta.2,
        description: meta.3.into(),
        ..Default::default()
    };
    g.reset();
    marker(name);
    protocol::progress(&format!("probe --hang: {name}"));
    if name == "pingpong" || name == "ring" {
        return protocol_timing(g, name, r);
    }
    let plan = plan_for(g, name)?;
    r.notes = plan.notes.clone();
    let t0 = Instant::now();
    let mut events = Vec::new();
    g.enqueue(&plan, &mut events)?;
    let mut warnings = Vec::new();
    let view: &View = g;
    let outcome = std::thread::scope(|s| s.spawn(|| detect(view, &plan, &mut warnings)).join());
    let outcome = outcome.map_err(|_| "detector thread panicked".to_string())?;
    r.warnings = warnings;
    let n = View::nlaunches(&plan);
    match outcome {
        Outcome::Completed => {
            r.completed = true;
            r.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
            g.sync()?;
            // Wake-up time needs both %globaltimer readings from one GPU.
            let cross_gpu = plan
                .steps
                .iter()
                .any(|s| matches!(s, Step::Launch(l) if l.on_peer))
                && g.peer.as_ref().is_ok_and(|p| !p.loopback());
            if plan.sites.iter().any(|s| s.writer == Some(1)) && n >= 2 && !cross_gpu {
                let consumer_end = g.launch(0).end_gt.load(Ordering::Acquire);
                let producer_end = g.launch(1).end_gt.load(Ordering::Acquire);
                if consumer_end >= producer_end && producer_end > 0 {
                    r.timing
                        .insert("wake_us".into(), (consumer_end - producer_end) as f64 / 1e3);
                }
            }
        }
        Outcome::Hang(v) => {
            r.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
            r.verdict = Some(v);
            // Cooperative abort, then a short grace.
            let ta = Instant::now();
            g.ctl().abort.store(1, Ordering::Release);
            while ta.elapsed() < g.opts.grace && !g.all_done(n) {
                std::thread::sleep(Duration::from_millis(1));
            }
            if g.all_done(n) {
                r.abort_ms = Some(ta.elapsed().as_secs_f64() * 1e3);
                r.aborted_cleanly = Some(true);
                g.sync()?; // flushes device printf
            } else {
                r.aborted_cleanly = Some(false);
                r.escalated = true;
            }
        }
    }
    // Nothing waits on the events any more: they go with `events`.
    drop(events);
    Ok(r)
}

/// Items the default probe's ring scenario passes (`--bench` passes 1e6 per round).
const DEFAULT_RING_ITEMS: u32 = 100_000;

/// Ping-pong round trip and ring throughput, one run each (instrumented, as the protocol).
fn protocol_timing(g: &Gpu, name: &str, mut r: ScenarioResult) -> Result<ScenarioResult, String> {
    let t0 = Instant::now();
    if name == "pingpong" {
        let rtt = pingpong(g, 20_000, true)?;
        r.timing.insert("rtt_ns".into(), rtt);
    } else {
        // 100k items: ~70 ms at the H200's 1.5e6 items/s, enough for a steady rate; the
        // million-item ring is for `--bench`, the default probe must stay under 1 s (issue 16).
        let ips = ring(g, DEFAULT_RING_ITEMS, true)?;
        r.timing.insert("items_per_s".into(), ips);
    }
    r.completed = true;
    r.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(r)
}

fn run_protocol(
    g: &Gpu,
    func: &'static str,
    args: Vec<Arg>,
    deadline: Duration,
) -> Result<(u64, u64, u64), String> {
    g.reset();
    let plan = LaunchPlan {
        steps: vec![Step::Launch(Launch {
            func,
            grid: 2,
            block: 32,
            stream: 0,
            rec_base: 0,
            args,
            cooperative: false,
            on_peer: false,
        })],
        sites: vec![],
        ranges: vec![],
        capacity: None,
        notes: vec![],
    };
    let mut ev = Vec::new();
    // Clear the device words the protocol uses.
    g.dev_mem.memset_d8(0).map_err(err)?;
    g.enqueue(&plan, &mut ev)?;
    let t0 = Instant::now();
    // Bare (uninstrumented) protocols do not write the launch record's state: wait on the stream.
    loop {
        if g.streams[0].query().map_err(err)? {
            break;
        }
        if t0.elapsed() > deadline {
            g.ctl().abort.store(1, Ordering::Release);
            // A bare protocol ignores the abort: releasing anything now would block.
            crate::live::cuda::abandon();
            return Err(format!(
                "{func} did not finish within {} s",
                deadline.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let lr = g.launch(0);
    Ok((
        lr.start_gt.load(Ordering::Acquire),
        lr.end_gt.load(Ordering::Acquire),
        lr.value.load(Ordering::Acquire),
    ))
}

fn pingpong(g: &Gpu, n: u32, instrumented: bool) -> Result<f64, String> {
    let (s, e, _) = run_protocol(
        g,
        "hp_pingpong",
        vec![
            Arg::U64(g.dev_mem.device_ptr()),
            Arg::U64(g.dev_mem.device_ptr() + 128),
            Arg::U32(n),
            Arg::U32(instrumented as u32),
        ],
        Duration::from_secs(30),
    )?;
    Ok(e.saturating_sub(s) as f64 / f64::from(n))
}

fn ring(g: &Gpu, n: u32, instrumented: bool) -> Result<f64, String> {
    let (s, e, _) = run_protocol(
        g,
        "hp_ring",
        vec![
            Arg::U64(g.dev_mem.device_ptr() + 256),
            Arg::U64(g.dev_mem.device_ptr() + 384),
            Arg::U64(g.dev_mem.device_ptr() + 512),
            Arg::U32(64),
            Arg::U32(n),
            Arg::U32(instrumented as u32),
        ],
        Duration::from_secs(60),
    )?;
    let secs = e.saturating_sub(s) as f64 / 1e9;
    Ok(if secs > 0.0 { f64::from(n) / secs } else { 0.0 })
}

/// Globaltimer <-> host realtime: the host writes a request, the kernel answers with
/// %globaltimer; the round trip with the smallest time wins.
fn calibrate(g: &Gpu) -> Result<(i64, u64), String> {
    g.reset();
    let rounds: u32 = 200;
    g.funcs
        .get("hp_clock")?
        .launch(
            1,
            32,
            &g.streams[0],
            &[
                Arg::U64(g.dev(OFF_CTRL)),
                Arg::U64(g.dev(OFF_CALIB)),
                Arg::U64(g.dev(OFF_CALIB + 64)),
                Arg::U32(rounds),
            ],
        )
        .map_err(err)?;
    let (reqa, respa) = (g.mem.u64_at(OFF_CALIB), g.mem.u64_at(OFF_CALIB + 64));
    let mut best = (0i64, u64::MAX);
    for i in 1..=u64::from(rounds) {
        let before = respa.load(Ordering::Acquire);
        let t0 = realtime_ns();
        reqa.store(i, Ordering::Release);
        let start = Instant::now();
        let gt = loop {
            let v = respa.load(Ordering::Acquire);
            if v != before {
                break v;
            }
            if start.elapsed() > Duration::from_secs(5) {
                g.ctl().abort.store(1, Ordering::Release);
                crate::live::cuda::abandon();
                return Err("clock calibration kernel did not answer".into());
            }
            std::hint::spin_loop();
        };
        let t1 = realtime_ns();
        let rtt = t1.saturating_sub(t0);
        if rtt < best.1 {
            best = (((t0 + t1) / 2) as i64 - gt as i64, rtt);
        }
    }
    // The kernel has answered every round.
    g.streams[0].synchronize().map_err(err)?;
    Ok(best)
}

/// Retain the peer GPU's context, load the kernels there, and let it write this GPU's memory
/// (`cuCtxEnablePeerAccess` from the peer's context). Leaves `own` current.
fn setup_peer(drv: &Driver, p: i32, own: &Context, force_ptx: bool) -> Result<PeerGpu, String> {
    let dp = drv.device(p).map_err(err)?;
    let da = own.device();
    if !dp.can_access_peer(&da).map_err(err)? {
        return Err(format!("cuDeviceCanAccessPeer(GPU{p} -> GPU{}) = 0: the peer cannot write this gpu's memory (see `gdrdoctor check --only gpu.p2p`)", da.ordinal()));
    }
    let ctx = dp.primary_context().map_err(err)?;
    let r = (|| -> Result<PeerGpu, String> {
        let funcs = kernels::load(&ctx, &kernels::HANG, &["hp_set_flag"], force_ptx)?;
        let stream = ctx.stream().map_err(err)?;
        ctx.enable_peer_access(own).map_err(err)?;
        Ok(PeerGpu {
            ctx: ctx.clone(),
            funcs,
            stream,
        })
    })();
    // Back to our context whatever happened (on failure the peer's context is released with
    // the last handle to it).
    let _ = own.make_current();
    r
}

/// The worker side of `probe --hang`. On an escalation (a kernel that ignores the abort) it
/// prints its reply itself and exits 3 without releasing the context.
pub fn worker(opts: Options) -> Result<HangOutput, WorkerError> {
    let opts = opts.normalized();
    let drv = Driver::init()?;
    let d = drv.device(opts.ordinal)?;
    let mut out = HangOutput {
        gpu: d.bdf().unwrap_or_default(),
        name: d.name(),
        ..Default::default()
    };
    out.sms = d
        .attribute(crate::live::cuda::Attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .unwrap_or(1);
    // The primary context of our device; never released on a hang path (exit instead).
    let ctx = d.primary_context()?;
    // printf FIFO before the first launch.
    let fifo: usize = 16 << 20;
    ctx.set_printf_fifo(fifo)?;
    out.printf_fifo_bytes = fifo as u64;
    let names = [
        "hp_wait_flag",
        "hp_set_flag",
        "hp_last_block_sets",
        "hp_pingpong",
        "hp_ring",
        "hp_clock",
    ];
    let funcs = kernels::load(&ctx, &kernels::HANG, &names, opts.force_ptx)?;
    out.kernel_source = funcs.source.clone();
    out.load_ms = funcs.load_ms;
    // Allocations and streams owned by the worker for its lifetime.
    let mapped = ctx.alloc_mapped_host(MAPPED_SIZE)?;
    let dev_mem = ctx.alloc(4096)?;
    let remote = ctx.alloc(4096)?;
    let streams = [ctx.stream()?, ctx.stream()?];
    let count = drv.device_count().unwrap_or(0);
    let peer = match opts.peer {
        None => Err("no peer gpu requested".to_string()),
        Some(p) if p == opts.ordinal => Ok(Peer { other: None }),
        Some(p) if p >= count => Err(format!(
            "GPU{p} is not visible to cuda here ({count} device(s); CUDA_VISIBLE_DEVICES?)"
        )),
        Some(p) => setup_peer(&drv, p, &ctx, opts.force_ptx).map(|o| Peer { other: Some(o) }),
    };
    let peer_desc = opts.peer.map(|p| {
        let bdf = drv
            .device(p)
            .ok()
            .and_then(|d| d.bdf().ok())
            .unwrap_or_default();
        if p == opts.ordinal {
            format!("GPU{p} {bdf} (loopback)")
        } else {
            format!("GPU{p} {bdf}")
        }
    });
    out.peer = match (&peer, &peer_desc) {
        (Ok(_), d) => d.clone(),
        (Err(e), _) if opts.peer.is_some() => Some(format!("peer setup failed: {e}")),
        _ => None,
    };
    let mut g = Gpu {
        view: View {
            mem: mapped.region(),
            opts: opts.clone(),
            offset_ns: 0,
            peer_desc,
        },
        ctx: ctx.clone(),
        mapped_dev: mapped.device_ptr(),
        dev_mem,
        streams,
        funcs,
        sms: out.sms,
        remote,
        peer,
    };
    let (off, rtt) = calibrate(&g)?;
    g.view.offset_ns = off;
    out.gt_offset_ns = off;
    out.gt_calibration_rtt_ns = rtt;
    let list: Vec<String> = if opts.scenarios.is_empty() {
        DEFAULT_SCENARIOS.iter().map(|s| s.to_string()).collect()
    } else {
        opts.scenarios.clone()
    };
    for name in &list {
        let r = match run_scenario(&g, name) {
            Ok(r) => r,
            Err(e) => ScenarioResult {
                name: name.clone(),
                kind: "error".into(),
                notes: vec![e],
                ..Default::default()
            },
        };
        let escalated = r.escalated;
        out.scenarios.push(r);
        if escalated {
            // The kernel ignores the abort: the context cannot be released. Report and leave
            // without running destructors (knowledge/hang-probe.md §2.5).
            protocol::reply("hang", protocol::Outcome::Ok(protocol::output(&out)?));
            marker("escalate");
            std::process::exit(3);
        }
    }
    if opts.bench > 0 {
        // A bench failure is reported as such, and keeps the scenario results.
        match bench(&g, opts.bench) {
            Ok(b) => out.bench = Some(b),
            Err(e) => out.scenarios.push(ScenarioResult {
                name: "bench".into(),
                kind: "error".into(),
                notes: vec![format!("the benchmark failed: {e}")],
                ..Default::default()
            }),
        }
    }
    // Every kernel finished: the streams, buffers, module and contexts go with `g`, then the
    // mapped region (the detector's view of it went with `g`).
    drop(g);
    drop(mapped);
    Ok(out)
}

/// Rounds of the overhead measurement (each: ping-pong and ring, bare and instrumented).
const BENCH_ROUNDS: usize = 11;

fn bench(g: &Gpu, n: usize) -> Result<Bench, String> {
    let mut b = Bench {
        detect_threshold_ms: g.opts.threshold.as_secs_f64() * 1e3,
        ..Default::default()
    };
    for i in 0..n {
        protocol::progress(&format!("bench: detection latency {}/{n}", i + 1));
        let r = run_scenario(g, "never-set")?;
        if let Some(v) = r.verdict {
            b.detect_latency_ms.push(v.latency_ms);
        }
        if r.escalated {
            return Err("never-set did not abort cleanly".into());
        }
    }
    // Bare and instrumented interleaved, BENCH_ROUNDS times: the medians compare runs that saw
    // the same clocks and the same neighbours.
    for i in 0..BENCH_ROUNDS {
        protocol::progress(&format!(
            "bench: ping-pong and ring {}/{BENCH_ROUNDS}",
            i + 1
        ));
        b.pingpong_rtt_ns_bare.push(pingpong(g, 20_000, false)?);
        b.pingpong_rtt_ns_instrumented
            .push(pingpong(g, 20_000, true)?);
        b.ring_items_per_s_bare.push(ring(g, 1_000_000, false)?);
        b.ring_items_per_s_instrumented
            .push(ring(g, 1_000_000, true)?);
    }
    // Host poll cost: snapshot every record, 100 times.
    g.reset();
    let t0 = Instant::now();
    let mut sink = 0u64;
    for _ in 0..100 {
        for i in 0..MAX_REC {
            sink = sink.wrapping_add(g.rec(i).snapshot().iter);
        }
    }
    b.poll_ns_per_record = t0.elapsed().as_nanos() as f64 / (100.0 * MAX_REC as f64);
    b.records_polled = MAX_REC;
    std::hint::black_box(sink);
    Ok(b)
}
