//! The worker side of `probe --doorbell` (owns the CUDA context and, with an mlx5 device, a
//! DEVX UAR).
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
//! saved `lspci -vv`), check it (`gdrdoctor_checks::doorbell::check`), and map it for the GPU.
//! Nothing is written to the NIC unless `--allow-mmio-write`.

use super::{DoorbellOutput, FlavourResult, LayoutResult, Mlx5Result, Options, FLAVOURS};
use crate::live::cuda::{Context, Driver, Function, KernelArg, Stream};
use crate::live::{os, verbs};
use crate::probe::kernels;
use crate::source::reader::Root;
use crate::worker::protocol::{self, WorkerError};
use gdrdoctor_checks::doorbell::{self as db, Uar, UarKind};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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
                    // The ring kernel may still spin: report without releasing anything.
                    crate::live::cuda::abandon();
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

/// The NIC's PCI address: the last component of `/sys/class/infiniband/<dev>/device`, resolved
/// by the reader (so under the test-only `GDRDOCTOR_LIVE_ROOT` it is the fixture's NIC).
fn nic_bdf(root: &Root, dev: &str) -> Option<String> {
    let p = root
        .canonical(&format!("/sys/class/infiniband/{dev}/device"))
        .ok()?;
    p.rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

fn sysfs_bar0(root: &Root, bdf: &str) -> Option<(u64, u64)> {
    let t = root
        .read_text(&format!("/sys/bus/pci/devices/{bdf}/resource"))
        .ok()?;
    let r = gdrdoctor_checks::parse::resource_file(&t).ok()?;
    r.first()
        .filter(|r| r.is_set())
        .map(|r| (r.start, r.size()))
}

fn config_bar0(root: &Root, bdf: &str) -> Option<u64> {
    let b = root
        .read(&format!("/sys/bus/pci/devices/{bdf}/config"))
        .ok()?;
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
    let root = Root::live();
    let mut out = Vec::new();
    // A faulting GPU write leaves the CUDA context unusable: later devices are not mapped.
    let mut faulted: Option<String> = None;
    for d in devs {
        let mut r = Mlx5Result {
            device: d.name.clone(),
            ..Default::default()
        };
        let pci = nic_bdf(&root, &d.name);
        r.pci = pci.clone();
        let ctx = match v.open(&d.name) {
            Ok(c) => c,
            Err(e) => {
                r.error = Some(format!("cannot open the device: {e}"));
                out.push(r);
                continue;
            }
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
        r.bar0_resource = pci.as_deref().and_then(|b| sysfs_bar0(&root, b));
        r.bar0_config = pci.as_deref().and_then(|b| config_bar0(&root, b));
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
