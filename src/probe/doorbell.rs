//! `probe --doorbell`: the doorbell arithmetic and the GPU-to-NIC write path
//! (gdr-ground-truth §4). Worker side.
//!
//! Always, as a self-test of the GPU side: an emulated doorbell page in host-mapped memory. The
//! GPU rings a table of layouts computed with the mlx5 formula and the host checks every write
//! landed where it should and nowhere else; then, per store flavour, the GPU waits for a host
//! token, writes a payload and the doorbell, and the host times token -> doorbell seen over
//! thousands of rings, beside the floor (a mapped-memory ping-pong, halved), and counts rings
//! whose payload was not yet visible when the doorbell was.
//!
//! With an mlx5 device (libibverbs + libmlx5 at run time): allocate a UAR, compute its doorbell's
//! physical address from BAR0 (sysfs `resource`, cross-checked with config space and an optional
//! saved `lspci -vv`), check it (`gdrdoctor_checks::doorbell::check`), and map it for the GPU
//! (`cuMemHostRegister` with the IO-memory flag + `cuMemHostGetDevicePointer`). Nothing is
//! written to the NIC.

use crate::live::cuda::{Context, Driver, Function, KernelArg, Stream};
use crate::live::{os, verbs};
use crate::probe::kernels;
use crate::probe::protocol::{self, WorkerError};
use gdrdoctor_checks::doorbell::{self as db, Uar, UarKind};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub const FLAVOURS: [(&str, u32); 6] = [
    ("floor (ping-pong, no payload, st.volatile echo)", 5),
    ("st.global (weak, no fence)", 0),
    ("st.global.wt (write-through)", 1),
    ("st.release.sys", 2),
    ("st.mmio.relaxed.sys", 3),
    ("__threadfence_system + st.volatile", 4),
];

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LayoutResult {
    pub name: String,
    pub expected_offset: u64,
    pub alternate_offset: Option<u64>,
    pub ok: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FlavourResult {
    pub flavour: String,
    pub rings: usize,
    /// Token written by the host -> doorbell seen by the host, ns.
    pub rtt_p50_ns: f64,
    pub rtt_p99_ns: f64,
    /// Rings whose payload was not yet fully visible when the doorbell was.
    pub payload_late: usize,
    /// For st.mmio: whether the PTX had the instruction (else it ran st.release.sys).
    pub native: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Mlx5Result {
    pub device: String,
    pub pci: Option<String>,
    pub uar_type: String,
    pub page_id: Option<u64>,
    pub reg_offset: Option<u64>,
    pub bar0_resource: Option<(u64, u64)>,
    pub bar0_config: Option<u64>,
    pub bar0_lspci: Option<(u64, u64)>,
    pub doorbell_phys: Option<u64>,
    pub issues: Vec<String>,
    pub gpu_map: Option<String>,
    pub gpu_map_ok: bool,
    /// Addresses the known mistakes would give for this UAR (where they differ from the right one).
    #[serde(default)]
    pub trap_addresses: Vec<String>,
    /// With --allow-mmio-write: what one GPU store to the doorbell did.
    pub mmio_write: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DoorbellOutput {
    pub gpu: String,
    pub kernel_source: String,
    pub st_mmio_native: bool,
    pub layouts: Vec<LayoutResult>,
    pub stray_writes: Vec<u64>,
    pub flavours: Vec<FlavourResult>,
    pub mlx5: Vec<Mlx5Result>,
    pub mlx5_skipped: Option<String>,
    pub page_size: u64,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

const BAR_SIZE: usize = 1 << 20;

/// One warp of `f` on `stream` (the doorbell kernels run one thread's work per launch).
fn launch(f: &Function, stream: &Stream, args: &[KernelArg]) -> Result<(), String> {
    f.launch(1, 32, stream, args).map_err(err)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[(((v.len() - 1) as f64) * p).round() as usize]
}

/// The worker side of `probe --doorbell`.
pub fn worker(o: Options) -> Result<DoorbellOutput, WorkerError> {
    let rings = o.rings.clamp(10, 1_000_000);
    let lspci = o
        .lspci
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok());
    let (allow_write, force_ptx) = (o.allow_mmio_write, o.force_ptx);
    let drv = Driver::init()?;
    let d = drv.device(o.ordinal)?;
    let page = os::page_size().max(4096);
    let mut out = DoorbellOutput {
        gpu: d.bdf().unwrap_or_default(),
        page_size: page,
        ..Default::default()
    };
    let ctx = d.primary_context()?;
    let m = kernels::load(
        &ctx,
        &kernels::DOORBELL,
        &["db_layouts", "db_ring", "db_poke"],
        force_ptx,
    )?;
    out.kernel_source = m.source.clone();
    let mapped = ctx.alloc_mapped_host(BAR_SIZE + 4096 * 2)?;
    let stream = ctx.stream()?;
    let mem = mapped.region();
    let dev = mapped.device_ptr();
    // Region: [BAR 1 MiB][layout table, info, go, abort, payload, doorbell].
    let tbl_off = BAR_SIZE;
    let info_off = BAR_SIZE + 1024;
    let go_off = BAR_SIZE + 2048;
    let abort_off = BAR_SIZE + 2112;
    let payload_off = BAR_SIZE + 2176;
    let db_off = BAR_SIZE + 2304;
    // 1. Layout table.
    let layouts = db::emulated_layouts();
    for (i, (_, u, alt)) in layouts.iter().enumerate() {
        let half = match (alt, u.kind) {
            (true, UarKind::BlueFlame { bf_reg_size }) => bf_reg_size / 2,
            _ => 0,
        };
        let vals = [u.unit(), u.page_id, u.reg_offset, half];
        for (k, v) in vals.iter().enumerate() {
            mem.u64_at(tbl_off + i * 32 + k * 8)
                .store(*v, Ordering::Relaxed);
        }
    }
    launch(
        m.get("db_layouts")?,
        &stream,
        &[
            KernelArg::U64(dev),
            KernelArg::U64(dev + tbl_off as u64),
            KernelArg::U32(layouts.len() as u32),
            KernelArg::U64(dev + info_off as u64),
        ],
    )?;
    // Waits for a kernel that does not wait on anything.
    stream.synchronize()?;
    out.st_mmio_native = mem.u32_at(info_off).load(Ordering::Acquire) == 1;
    let mut expected: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    let word = |off: u64| -> Option<u64> {
        usize::try_from(off)
            .ok()
            .filter(|o| *o < BAR_SIZE)
            .and_then(|o| mem.get_u64(o))
            .map(|w| w.load(Ordering::Acquire))
    };
    for (i, (name, u, alt)) in layouts.iter().enumerate() {
        let off = u.doorbell_phys() - u.bar0;
        let alt_off = match (alt, u.kind) {
            (true, UarKind::BlueFlame { bf_reg_size }) => Some(off ^ (bf_reg_size / 2)),
            _ => None,
        };
        expected.insert(off, i as u64 + 1);
        if let Some(a) = alt_off {
            expected.insert(a, i as u64 + 1 + 0x100);
        }
        let got = word(off);
        let got_alt = alt_off.map(word);
        out.layouts.push(LayoutResult {
            name: name.to_string(),
            expected_offset: off,
            alternate_offset: alt_off,
            ok: got == Some(i as u64 + 1)
                && got_alt.is_none_or(|g| g == Some(i as u64 + 1 + 0x100)),
        });
    }
    for w in 0..BAR_SIZE / 8 {
        let v = mem.u64_at(w * 8).load(Ordering::Acquire);
        if v != 0 && expected.get(&((w * 8) as u64)) != Some(&v) {
            out.stray_writes.push((w * 8) as u64);
        }
    }
    // 2. Latency and ordering per store flavour.
    let f_ring = m.get("db_ring")?;
    let (go, dbw, abort) = (
        mem.u64_at(go_off),
        mem.u64_at(db_off),
        mem.u32_at(abort_off),
    );
    for (name, fl) in FLAVOURS {
        protocol::progress(&format!("probe --doorbell: {name}"));
        go.store(0, Ordering::SeqCst);
        dbw.store(0, Ordering::SeqCst);
        let n = rings + 100;
        launch(
            f_ring,
            &stream,
            &[
                KernelArg::U64(dev + go_off as u64),
                KernelArg::U64(dev + payload_off as u64),
                KernelArg::U64(dev + db_off as u64),
                KernelArg::U32(n),
                KernelArg::U32(fl),
                KernelArg::U64(dev + abort_off as u64),
            ],
        )?;
        let mut rtts = Vec::with_capacity(rings as usize);
        let mut late = 0usize;
        for i in 1..=u64::from(n) {
            let t0 = Instant::now();
            go.store(i, Ordering::Release);
            loop {
                if dbw.load(Ordering::Acquire) == i {
                    break;
                }
                if t0.elapsed() > Duration::from_secs(5) {
                    abort.store(1, Ordering::Release);
                    return Err(format!("the GPU did not ring ({name}) within 5 s").into());
                }
                std::hint::spin_loop();
            }
            let dt = t0.elapsed().as_nanos() as f64;
            if fl != 5 {
                let ok =
                    (0..8).all(|k| mem.u64_at(payload_off + 8 * k).load(Ordering::Acquire) >= i);
                if !ok && i > 100 {
                    late += 1;
                }
            }
            if i > 100 {
                rtts.push(dt);
            }
        }
        // The kernel returns after the last token.
        stream.synchronize()?;
        out.flavours.push(FlavourResult {
            flavour: name.to_string(),
            rings: rtts.len(),
            rtt_p50_ns: pct(&mut rtts, 0.5),
            rtt_p99_ns: pct(&mut rtts, 0.99),
            payload_late: late,
            native: fl != 3 || out.st_mmio_native,
        });
    }
    // 3. A real mlx5 UAR, when there is one.
    let poke = if allow_write {
        Some((m.get("db_poke")?, &stream))
    } else {
        None
    };
    match mlx5(&ctx, page, lspci.as_deref(), poke, out.st_mmio_native) {
        Ok(v) => out.mlx5 = v,
        Err(e) => out.mlx5_skipped = Some(e),
    }
    Ok(out)
}

fn sysfs_bar0(bdf: &str) -> Option<(u64, u64)> {
    let t = std::fs::read_to_string(format!("/sys/bus/pci/devices/{bdf}/resource")).ok()?;
    let r = gdrdoctor_checks::parse::resource_file(&t).ok()?;
    r.first()
        .filter(|r| r.is_set())
        .map(|r| (r.start, r.size()))
}

fn config_bar0(bdf: &str) -> Option<u64> {
    let b = std::fs::read(format!("/sys/bus/pci/devices/{bdf}/config")).ok()?;
    let cs = gdrdoctor_checks::pci::config::decode(&b);
    cs.bars
        .iter()
        .find(|b| b.index == 0 && !b.io)
        .map(|b| b.address)
}

/// Allocate a UAR on every mlx5 device and check its doorbell address and GPU mapping.
fn mlx5(
    gpu: &Context,
    page: u64,
    lspci: Option<&str>,
    poke: Option<(&Function, &Stream)>,
    st_mmio_native: bool,
) -> Result<Vec<Mlx5Result>, String> {
    let v = verbs::Verbs::load().map_err(|e| e.to_string())?;
    if let Err(e) = v.mlx5dv() {
        return Err(format!("libmlx5 not usable: {e}"));
    }
    let devs = v
        .devices()
        .map_err(|e| format!("ibv_get_device_list: {}", e.message))?;
    let all = devs.len();
    let devs: Vec<_> = devs
        .into_iter()
        .filter(|d| d.is_mlx5 != Some(false))
        .collect();
    if devs.is_empty() {
        return Err(if all == 0 {
            "no RDMA device (ibv_get_device_list returned none)".into()
        } else {
            format!("none of the {all} RDMA devices is an mlx5 device")
        });
    }
    let mut out = Vec::new();
    // A faulting GPU write leaves the CUDA context unusable: later devices are not mapped.
    let mut faulted: Option<String> = None;
    for d in devs {
        let mut r = Mlx5Result {
            device: d.name.clone(),
            ..Default::default()
        };
        let pci = std::fs::canonicalize(format!("/sys/class/infiniband/{}/device", d.name))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        r.pci = pci.clone();
        let Ok(ctx) = v.open(&d.name) else {
            r.error = Some("cannot open the device".into());
            out.push(r);
            continue;
        };
        // Non-cached dedicated (rdma-core >= 45), else BlueFlame.
        let (uar, kind) = match ctx.alloc_devx_uar(verbs::MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED) {
            Ok(u) => (u, UarKind::NonCached),
            Err(nc) => match ctx.alloc_devx_uar(verbs::MLX5DV_UAR_ALLOC_TYPE_BF) {
                Ok(u) => (u, UarKind::BlueFlame { bf_reg_size: 512 }),
                Err(e) => {
                    r.error = Some(format!(
                        "mlx5dv_devx_alloc_uar: non-cached dedicated: {}; BlueFlame: {}",
                        nc.message, e.message
                    ));
                    out.push(r);
                    continue;
                }
            },
        };
        r.uar_type = match kind {
            UarKind::NonCached => "non-cached dedicated".into(),
            UarKind::BlueFlame { .. } => "BlueFlame".into(),
            UarKind::DbrLess => "DBR-less".into(),
        };
        let reg = uar.reg_addr() as u64;
        let base = uar.base_addr() as u64;
        r.page_id = Some(u64::from(uar.page_id()));
        r.reg_offset = Some(reg.wrapping_sub(base));
        r.bar0_resource = pci.as_deref().and_then(sysfs_bar0);
        r.bar0_config = pci.as_deref().and_then(config_bar0);
        r.bar0_lspci = lspci.and_then(|t| db::bar0_from_lspci(t, pci.as_deref()));
        if lspci.is_some() && r.bar0_lspci.is_none() {
            r.issues.push(format!(
                "the saved lspci text has no `Region 0: Memory at` line for {}",
                pci.as_deref().unwrap_or("this device")
            ));
        }
        if let Some((bar0, bar0_size)) = r.bar0_resource {
            let u = Uar {
                sys_page: page,
                uar_4k: None,
                bar0,
                bar0_size,
                page_id: u64::from(uar.page_id()),
                reg_offset: reg.wrapping_sub(base),
                kind,
                mmap_off: u64::try_from(uar.mmap_off()).unwrap_or(0),
            };
            r.doorbell_phys = Some(u.doorbell_phys());
            r.issues.extend(
                db::check(&u, None)
                    .into_iter()
                    .map(|i| format!("{}: {}", i.kind, i.message)),
            );
            // What the classic mistakes would compute: compare with your own code's address.
            r.trap_addresses = db::trap_addresses(&u)
                .into_iter()
                // A DBR-less address is a mistake only for a DBR-less doorbell.
                .filter(|(n, a)| {
                    *a != u.doorbell_phys()
                        && (*n != "dbr-less-from-base" || u.kind == UarKind::DbrLess)
                })
                .map(|(n, a)| format!("{n}: 0x{a:x}"))
                .collect();
            if let Some(c) = r.bar0_config {
                if c != bar0 {
                    r.issues.push(format!(
                        "bar0: sysfs resource 0x{bar0:x}, config space 0x{c:x}"
                    ));
                }
            }
            if let Some((l, _)) = r.bar0_lspci {
                if l != bar0 {
                    r.issues.push(format!(
                        "bar0: sysfs resource 0x{bar0:x}, saved lspci 0x{l:x}"
                    ));
                }
            }
        } else {
            r.error = Some(format!(
                "BAR0 of {} not readable from /sys/bus/pci/devices/*/resource",
                pci.as_deref().unwrap_or(&d.name)
            ));
            drop(uar);
            out.push(r);
            continue;
        }
        // GPU mapping of the doorbell page (read-only use: nothing is written).
        match gpu.map_uar(&uar, page) {
            Ok(map) => {
                let dp = map.doorbell_device_ptr();
                r.gpu_map_ok = dp.is_ok();
                r.gpu_map = Some(match &dp {
                    Ok(gpu_db) => format!("mapped for the GPU at 0x{gpu_db:x}"),
                    Err(e) => format!("cuMemHostGetDevicePointer: {}", e.name),
                });
                if let Some(why) = &faulted {
                    r.mmio_write = Some(format!("not written: {why}"));
                } else if let (Ok(gpu_db), Some((f, stream))) = (dp, poke) {
                    // One GPU store of 0 to the doorbell of our own dedicated UAR (no queue
                    // attached): the write path completes or faults.
                    let res = launch(f, stream, &[KernelArg::U64(gpu_db), KernelArg::U64(0)])
                        .and_then(|()| stream.synchronize().map_err(err));
                    r.mmio_write = Some(match res {
                        Ok(()) => format!(
                            "the GPU wrote the doorbell register ({}, value 0) without a fault",
                            if st_mmio_native {
                                "st.mmio.relaxed.sys"
                            } else {
                                "st.release.sys"
                            }
                        ),
                        Err(e) => {
                            faulted =
                                Some(format!("the GPU write to {}'s doorbell faulted", d.name));
                            format!("the GPU write to the doorbell failed: {e}")
                        }
                    });
                }
                drop(map);
            }
            Err(e) => {
                let t = e.to_string();
                r.gpu_map = Some(
                    if t.contains("NOT_PERMITTED")
                        || t.contains("NOT_SUPPORTED")
                        || t.contains("INVALID_VALUE")
                    {
                        format!("{t}: mapping NIC MMIO for the GPU needs PeerMappingOverride=1 in NVreg_RegistryDwords or CAP_SYS_ADMIN (dmesg: `osCreateOsDescriptorFromIoMemory(): permission denied, allowPeermapping=0`)")
                    } else {
                        t
                    },
                );
            }
        }
        drop(uar);
        out.push(r);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Parent side: run the worker, turn its output into findings.

use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::{Finding, Status};

/// What `probe --doorbell` was asked to do (the worker's parameters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    pub ordinal: i32,
    pub rings: u32,
    /// A saved `lspci -vv` of the NIC, to cross-check BAR0.
    pub lspci: Option<std::path::PathBuf>,
    pub allow_mmio_write: bool,
    /// Use the PTX carried in the binary even when NVRTC is available.
    pub force_ptx: bool,
}

/// Run the doorbell probe in a worker.
pub fn run(
    node: &Node,
    o: &Options,
    deadline: Duration,
) -> (Vec<Finding>, Option<serde_json::Value>) {
    let mut out = Vec::new();
    if let Some(f) = crate::probe::no_gpu(node) {
        out.push(f);
        out.push(Finding::new(
            "probe.doorbell-mlx5",
            Status::Skip,
            "node",
            "no nvidia gpu on the pci bus: no GPU-initiated doorbells to check",
        ));
        return (out, None);
    }
    if let Some(p) = &o.lspci {
        if let Err(e) = std::fs::metadata(p) {
            out.push(Finding::new(
                "probe.doorbell-mlx5",
                Status::Error,
                "node",
                format!("--lspci {}: {e}", p.display()),
            ));
            return (out, None);
        }
    }
    let Some(run) = crate::probe::start("doorbell", o, deadline, &mut out) else {
        return (out, None);
    };
    let result = run.value().cloned();
    if let Some(e) = crate::probe::worker_error(&run) {
        out.push(Finding::new(
            "probe.cuda",
            Status::Error,
            "node",
            format!("the doorbell probe could not run: {e}"),
        ));
        crate::probe::health_after_kill(&run, &mut out);
        return (out, result);
    }
    let parsed: Option<DoorbellOutput> = result
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let Some(d) = parsed else {
        out.push(Finding::new(
            "probe.cuda",
            Status::Error,
            "node",
            run.failure()
                .map(|f| f.to_string())
                .unwrap_or_else(|| "the doorbell worker printed no result".into()),
        ));
        crate::probe::health_after_kill(&run, &mut out);
        return (out, result);
    };
    out.extend(findings(&d));
    (out, result)
}

/// Store flavours whose memory-model semantics put the payload before the doorbell (a release
/// store, or a system fence before the store). `st.mmio.relaxed.sys` is relaxed: it needs a
/// fence of its own before it, as do the weak stores.
fn ordered(flavour: &str) -> bool {
    flavour.starts_with("st.release") || flavour.starts_with("__threadfence")
}

/// Findings from one worker's output (pure: the tests feed it constructed outputs).
pub fn findings(d: &DoorbellOutput) -> Vec<Finding> {
    let mut out = Vec::new();
    let subject = if d.gpu.is_empty() {
        "gpu".to_string()
    } else {
        d.gpu.to_lowercase()
    };
    // Layouts.
    let bad: Vec<&LayoutResult> = d.layouts.iter().filter(|l| !l.ok).collect();
    let mut f = if d.layouts.is_empty() {
        Finding::new(
            "probe.doorbell-layout",
            Status::Error,
            &subject,
            "the worker rang no layouts",
        )
    } else if bad.is_empty() && d.stray_writes.is_empty() {
        Finding::new(
            "probe.doorbell-layout",
            Status::Pass,
            &subject,
            format!("the GPU rang {} doorbell layouts (4 KiB and 64 KiB pages, BlueFlame alternation, DBR-less) at the offsets the mlx5 formula gives, and wrote nowhere else", d.layouts.len()),
        )
    } else {
        Finding::new(
            "probe.doorbell-layout",
            Status::Fail,
            &subject,
            format!(
                "{} of {} layouts missed their doorbell, {} stray writes in the emulated BAR: the GPU's address arithmetic differs from BAR0 + page_id * unit + offset",
                bad.len(),
                d.layouts.len(),
                d.stray_writes.len()
            ),
        )
        .fix("see docs/guides/doorbell.md: the unit is 4 KiB only when the HCA uses 4 KiB UARs; reg_addr - base_addr is taken modulo 4096 when page_id already names the 4 KiB UAR")
    };
    for l in &d.layouts {
        f = f.evidence(
            &l.name,
            format!(
                "BAR0 + 0x{:x}{} {}",
                l.expected_offset,
                l.alternate_offset
                    .map(|a| format!(" / 0x{a:x}"))
                    .unwrap_or_default(),
                if l.ok { "ok" } else { "MISSED" }
            ),
        );
    }
    if !d.stray_writes.is_empty() {
        let s: Vec<String> = d
            .stray_writes
            .iter()
            .take(8)
            .map(|w| format!("0x{w:x}"))
            .collect();
        f = f.evidence("stray writes at", s.join(", "));
    }
    out.push(f);
    // Latency and ordering.
    if d.flavours.is_empty() {
        out.push(Finding::new(
            "probe.doorbell-latency",
            Status::Error,
            &subject,
            "no store flavour was measured",
        ));
    } else {
        let floor = d.flavours.iter().find(|f| f.flavour.starts_with("floor"));
        let ordered_late: Vec<&FlavourResult> = d
            .flavours
            .iter()
            .filter(|f| f.payload_late > 0 && ordered(&f.flavour))
            .collect();
        let weak_late: Vec<&FlavourResult> = d
            .flavours
            .iter()
            .filter(|f| f.payload_late > 0 && !ordered_late.iter().any(|o| o.flavour == f.flavour))
            .collect();
        let best = d
            .flavours
            .iter()
            .filter(|f| f.payload_late == 0 && ordered(&f.flavour))
            .min_by(|a, b| a.rtt_p50_ns.total_cmp(&b.rtt_p50_ns));
        let rings = d.flavours.iter().map(|f| f.rings).min().unwrap_or(0);
        let summary = format!(
            "gpu doorbell write -> host sees it: {} ~{:.0} ns one way (round trip p50 {:.0} ns, floor ping-pong RTT/2 = {:.0} ns) over {rings} rings",
            best.map(|b| b.flavour.as_str()).unwrap_or("no ordered flavour"),
            best.map(|b| (b.rtt_p50_ns - floor.map(|f| f.rtt_p50_ns / 2.0).unwrap_or(0.0)).max(0.0)).unwrap_or(0.0),
            best.map(|b| b.rtt_p50_ns).unwrap_or(0.0),
            floor.map(|f| f.rtt_p50_ns / 2.0).unwrap_or(0.0),
        );
        let mut f = if !ordered_late.is_empty() {
            Finding::new(
                "probe.doorbell-latency",
                Status::Fail,
                &subject,
                format!(
                    "{}: the payload was not visible when the doorbell was, with a release/fenced store ({} rings)",
                    ordered_late.iter().map(|f| f.flavour.as_str()).collect::<Vec<_>>().join(", "),
                    ordered_late.iter().map(|f| f.payload_late).sum::<usize>()
                ),
            )
            .fix("the host-mapped path reorders release stores: check `dmesg` for PCIe errors and whether the GPU sits behind a switch with relaxed ordering forced on (see docs/guides/doorbell.md)")
        } else if !weak_late.is_empty() {
            Finding::new("probe.doorbell-latency", Status::Warn, &subject, format!(
                "{summary}; weak stores let the doorbell overtake the payload in {} rings ({}): ring doorbells with st.release.sys, or a system fence before st.mmio",
                weak_late.iter().map(|f| f.payload_late).sum::<usize>(),
                weak_late.iter().map(|f| f.flavour.as_str()).collect::<Vec<_>>().join(", ")
            ))
            .fix("write the WQE, then ring the doorbell with st.release.sys (or st.mmio.relaxed.sys after a fence.sc.sys / __threadfence_system()), never a plain st.global")
        } else {
            Finding::new("probe.doorbell-latency", Status::Pass, &subject, summary)
        };
        for fl in &d.flavours {
            f = f.evidence(
                &fl.flavour,
                format!(
                    "p50 {:.0} ns, p99 {:.0} ns round trip{}{}{}",
                    fl.rtt_p50_ns,
                    fl.rtt_p99_ns,
                    match floor {
                        Some(fl0) if !fl.flavour.starts_with("floor") => format!(
                            " (one way ~{:.0} ns)",
                            (fl.rtt_p50_ns - fl0.rtt_p50_ns / 2.0).max(0.0)
                        ),
                        _ => String::new(),
                    },
                    if fl.flavour.starts_with("floor") {
                        String::new()
                    } else {
                        format!(", payload late in {}", fl.payload_late)
                    },
                    if fl.native {
                        ""
                    } else {
                        " (no st.mmio in this PTX: ran st.release.sys)"
                    }
                ),
            );
        }
        out.push(f);
    }
    // The real NIC.
    if d.mlx5.is_empty() {
        let why = d
            .mlx5_skipped
            .clone()
            .unwrap_or_else(|| "no mlx5 device".into());
        out.push(Finding::new(
            "probe.doorbell-mlx5",
            Status::Skip,
            "node",
            format!("no real doorbell checked: {why}"),
        ));
    }
    for r in &d.mlx5 {
        let subject = r.device.clone();
        let mut f = if let Some(e) = &r.error {
            let f = Finding::new("probe.doorbell-mlx5", Status::Error, &subject, e.clone());
            if e.starts_with("mlx5dv_devx_alloc_uar") {
                f.fix("mlx5dv_devx_alloc_uar needs DEVX: a recent MLNX_OFED or upstream rdma-core with the mlx5_ib module; check `ibv_devinfo -v` and `dmesg`")
            } else if e.starts_with("BAR0") {
                f.fix("check that /sys/bus/pci/devices/<nic>/resource exists and is readable (`cat` it), and run as root (`sudo gdrdoctor probe --doorbell`); inside a container the host's sysfs must be visible")
            } else {
                f.fix("`ibv_devinfo -d <device>` must open it: check /dev/infiniband permissions and that mlx5_ib is loaded")
            }
        } else if !r.issues.is_empty() {
            Finding::new("probe.doorbell-mlx5", Status::Fail, &subject, format!("doorbell address check failed: {}", r.issues.join("; ")))
                .fix("compute the doorbell as BAR0 + page_id * unit + (reg_addr - base_addr) % 4096; see docs/guides/doorbell.md")
        } else if !r.gpu_map_ok {
            Finding::new(
                "probe.doorbell-mlx5",
                Status::Fail,
                &subject,
                format!("doorbell address correct but the GPU cannot map it: {}", r.gpu_map.clone().unwrap_or_default()),
            )
            .fix("add PeerMappingOverride=1 to the driver's registry (`options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"` in /etc/modprobe.d, then reload the driver) or run with CAP_SYS_ADMIN")
        } else {
            Finding::new(
                "probe.doorbell-mlx5",
                Status::Pass,
                &subject,
                format!(
                    "{} UAR doorbell at 0x{:x} inside BAR0, at a register offset, {}",
                    r.uar_type,
                    r.doorbell_phys.unwrap_or(0),
                    r.gpu_map.clone().unwrap_or_default()
                ),
            )
        };
        if let Some(p) = &r.pci {
            f = f.evidence("pci", p.clone());
        }
        if let (Some(pid), Some(off)) = (r.page_id, r.reg_offset) {
            f = f.evidence(
                "page_id / reg_addr - base_addr",
                format!("{pid} / 0x{off:x}"),
            );
        }
        if let Some((b, s)) = r.bar0_resource {
            f = f.evidence("BAR0 (sysfs resource)", format!("0x{b:x} size 0x{s:x}"));
        }
        if let Some(b) = r.bar0_config {
            f = f.evidence("BAR0 (config space)", format!("0x{b:x}"));
        }
        if let Some((b, s)) = r.bar0_lspci {
            f = f.evidence("BAR0 (saved lspci -vv)", format!("0x{b:x} size 0x{s:x}"));
        }
        for t in &r.trap_addresses {
            f = f.evidence("a classic mistake would compute", t.clone());
        }
        if let Some(w) = &r.mmio_write {
            if w.contains("failed") && f.status == Status::Pass {
                f.status = Status::Fail;
                f.message = format!("doorbell address correct and mapped, but {w}");
                f = f.fix("check `dmesg` for Xid 13/31 (GPU MMU fault) and AER errors on the NIC; the NIC BAR may be behind an IOMMU or an ACS-redirecting switch");
            }
            f = f.evidence("--allow-mmio-write", w.clone());
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sample() -> DoorbellOutput {
        DoorbellOutput {
            gpu: "0000:18:00.0".into(),
            layouts: db::emulated_layouts()
                .iter()
                .map(|(n, u, _)| LayoutResult {
                    name: n.to_string(),
                    expected_offset: u.doorbell_phys(),
                    alternate_offset: None,
                    ok: true,
                })
                .collect(),
            flavours: FLAVOURS
                .iter()
                .map(|(n, _)| FlavourResult {
                    flavour: n.to_string(),
                    rings: 10_000,
                    rtt_p50_ns: 1500.0,
                    rtt_p99_ns: 2000.0,
                    payload_late: 0,
                    native: true,
                })
                .collect(),
            mlx5_skipped: Some("no mlx5 RDMA device".into()),
            ..Default::default()
        }
    }

    fn status(f: &[Finding], id: &str) -> Status {
        f.iter().find(|x| x.id == id).map(|x| x.status).unwrap()
    }

    #[test]
    fn healthy_output_passes_and_skips_mlx5() {
        let f = findings(&sample());
        assert_eq!(status(&f, "probe.doorbell-layout"), Status::Pass);
        assert_eq!(status(&f, "probe.doorbell-latency"), Status::Pass);
        assert_eq!(status(&f, "probe.doorbell-mlx5"), Status::Skip);
    }

    #[test]
    fn missed_layout_stray_write_and_late_payload_are_caught() {
        let mut d = sample();
        d.layouts[3].ok = false;
        d.stray_writes.push(0x10800);
        let f = findings(&d);
        assert_eq!(status(&f, "probe.doorbell-layout"), Status::Fail);
        let mut d = sample();
        d.flavours[1].payload_late = 3; // st.global weak
        assert_eq!(
            status(&findings(&d), "probe.doorbell-latency"),
            Status::Warn
        );
        d.flavours[3].payload_late = 1; // st.release.sys
        assert_eq!(
            status(&findings(&d), "probe.doorbell-latency"),
            Status::Fail
        );
    }

    #[test]
    fn mlx5_results_map_to_statuses() {
        let mut d = sample();
        let ok = Mlx5Result {
            device: "mlx5_0".into(),
            uar_type: "NonCached".into(),
            doorbell_phys: Some(0x1000_0800),
            gpu_map_ok: true,
            gpu_map: Some("mapped".into()),
            ..Default::default()
        };
        d.mlx5 = vec![
            ok.clone(),
            Mlx5Result {
                device: "mlx5_1".into(),
                issues: vec!["outside-bar0: x".into()],
                ..ok.clone()
            },
            Mlx5Result {
                device: "mlx5_2".into(),
                gpu_map_ok: false,
                gpu_map: Some("CUDA_ERROR_NOT_PERMITTED".into()),
                ..ok.clone()
            },
            Mlx5Result {
                device: "mlx5_3".into(),
                error: Some("mlx5dv_devx_alloc_uar: EOPNOTSUPP".into()),
                ..ok
            },
        ];
        let f: Vec<(String, Status)> = findings(&d)
            .into_iter()
            .filter(|f| f.id == "probe.doorbell-mlx5")
            .map(|f| (f.subject, f.status))
            .collect();
        assert_eq!(
            f,
            vec![
                ("mlx5_0".into(), Status::Pass),
                ("mlx5_1".into(), Status::Fail),
                ("mlx5_2".into(), Status::Fail),
                ("mlx5_3".into(), Status::Error)
            ]
        );
        assert!(findings(&d)
            .iter()
            .find(|f| f.subject == "mlx5_2")
            .unwrap()
            .remediation
            .as_deref()
            .unwrap_or("")
            .contains("PeerMappingOverride"));
    }
}
