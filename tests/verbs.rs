//! The runtime-loaded verbs FFI (`src/live/verbs/`) against the real rdma-core.
//!
//! Needs (Debian): `libibverbs1` and `ibverbs-providers` (the libraries), `libibverbs-dev`
//! (the headers for the layout oracle `tests/verbs_layout.c`) and `gcc` (`cc`). Without them
//! the tests that need them skip with one printed line per missing piece, saying what to
//! install; `GDRDOCTOR_TEST_REQUIRE_ALL=1` (set by `.ci/run`) makes those skips failures.
//!
//! The no-device path is asserted from what the kernel exposes: without
//! `/sys/class/infiniband_verbs/abi_version` libibverbs answers `ENOSYS` (observed on the
//! development VM: `ibv_get_device_list: Function not implemented (os error 38)`); with it,
//! the device list is whatever `/sys/class/infiniband` holds.
//!
//! `GDRDOCTOR_VERBS_CFLAGS="-I DIR"` points the layout oracle at another rdma-core's headers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::require;
use gdrdoctor::live::verbs::*;
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The real libibverbs, or a visible skip that says what to install (a failure under
/// GDRDOCTOR_TEST_REQUIRE_ALL=1).
fn real_verbs() -> Option<Verbs> {
    match Verbs::load() {
        Ok(v) => Some(v),
        Err(e) => {
            require::skip(
                "verbs against the real libibverbs",
                &e.to_string(),
                "apt-get install libibverbs1 ibverbs-providers (dnf install libibverbs)",
            );
            None
        }
    }
}

fn sysfs() -> PathBuf {
    PathBuf::from(std::env::var("RDMAV_SYSFS_PATH").unwrap_or_else(|_| "/sys".into()))
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

#[test]
fn bogus_library_is_a_load_error_with_dlerror_text() {
    let name = "libibverbs-does-not-exist.so.1";
    let e = Verbs::load_from(name).unwrap_err();
    assert_eq!(e.library, name);
    assert_eq!(e.symbol, None);
    // libloading's Display is only "dlopen failed"; the dlerror text must be there too.
    assert!(
        e.detail
            .contains(&format!("{name}: cannot open shared object file")),
        "{}",
        e.detail
    );
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("{name} not loadable: ")),
        "{shown}"
    );
    assert!(shown.contains("cannot open shared object file"), "{shown}");
}

#[test]
fn library_without_the_verbs_symbols_is_a_load_error_naming_the_symbol() {
    // libc loads everywhere and exports no verbs.
    let e = Verbs::load_from("libc.so.6").unwrap_err();
    assert_eq!(e.library, "libc.so.6");
    assert_eq!(e.symbol.as_deref(), Some("ibv_get_device_list@IBVERBS_1.1"));
    assert!(e.detail.contains("ibv_get_device_list"), "{}", e.detail);
    assert!(e
        .to_string()
        .contains("lacks symbol ibv_get_device_list@IBVERBS_1.1"));
}

#[test]
fn missing_libmlx5_is_a_value_not_an_error() {
    if real_verbs().is_none() {
        return;
    }
    let v = Verbs::load_paths(IBVERBS_LIB, "libmlx5-does-not-exist.so.1").unwrap();
    let e = v.mlx5dv().unwrap_err();
    assert_eq!(e.library, "libmlx5-does-not-exist.so.1");
    assert!(e.detail.contains("cannot open shared object file"), "{e}");
}

#[test]
fn real_library_symbols() {
    let Some(v) = real_verbs() else { return };
    assert_eq!(v.library(), "libibverbs.so.1");
    // Debian 12 ships rdma-core 44; ibv_reg_dmabuf_mr@IBVERBS_1.12 is in every rdma-core >= 34.
    assert!(
        v.has_reg_dmabuf_mr(),
        "libibverbs lacks ibv_reg_dmabuf_mr@IBVERBS_1.12: rdma-core older than 34?"
    );
    match v.mlx5dv() {
        Ok(m) => {
            assert_eq!(m.library(), "libmlx5.so.1");
            assert!(m.has_is_supported(), "mlx5dv_is_supported@MLX5_1.8 missing");
            assert!(
                m.has_devx_uar(),
                "mlx5dv_devx_alloc_uar/free_uar@MLX5_1.7 missing"
            );
        }
        Err(e) => require::skip(
            "verbs mlx5 provider symbols",
            &e.to_string(),
            "apt-get install ibverbs-providers (dnf install libibverbs)",
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// The no-device path
// ---------------------------------------------------------------------------------------------

#[test]
fn device_list_matches_what_the_kernel_exposes() {
    let Some(v) = real_verbs() else { return };
    let abi = sysfs().join("class/infiniband_verbs/abi_version");
    let devices = v.devices();
    let opened = v.open("mlx5_99");
    eprintln!("abi_version present: {}", abi.exists());
    eprintln!("devices(): {devices:?}");
    eprintln!("open(\"mlx5_99\"): {:?}", opened.as_ref().map(|c| c.name()));
    if !abi.exists() {
        // No ib_uverbs: libibverbs' check_abi_version() fails and the list is NULL + ENOSYS.
        let e = devices.unwrap_err();
        assert_eq!(e.call, "ibv_get_device_list");
        assert_eq!(e.errno, 38, "{e}");
        assert!(
            e.message
                .starts_with("Function not implemented (os error 38)"),
            "{e}"
        );
        assert!(e.cause.contains("no kernel RDMA support"), "{e:?}");
        assert!(e.fix.contains("ib_uverbs"), "{e:?}");
        let e = opened.unwrap_err();
        assert_eq!((e.call, e.errno), ("ibv_get_device_list", 38), "{e}");
    } else {
        let list = devices.unwrap();
        let mut sys: Vec<String> = std::fs::read_dir(sysfs().join("class/infiniband"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        sys.sort();
        for d in &list {
            assert!(
                sys.contains(&d.name),
                "{} not under /sys/class/infiniband",
                d.name
            );
            assert_eq!(d.guid_hex().len(), 16);
        }
        if !sys.iter().any(|n| n == "mlx5_99") {
            let e = opened.unwrap_err();
            assert_eq!((e.call, e.errno), ("ibv_open_device", 19), "{e}");
            assert!(
                e.message.contains("no RDMA device named \"mlx5_99\""),
                "{e}"
            );
        }
    }
}

#[test]
fn repeated_calls_are_stable() {
    let Some(v) = real_verbs() else { return };
    let first = v.devices();
    for _ in 0..3 {
        assert_eq!(v.devices(), first);
    }
    // A second, independent load of the same library works alongside the first.
    let w = Verbs::load().unwrap();
    assert_eq!(w.devices(), first);
}

/// On a node with RDMA devices (none in CI), walk the whole API on each of them. With no
/// devices this checks nothing but that the walk itself is sound.
#[test]
fn live_walk_of_every_device() {
    let Some(v) = real_verbs() else { return };
    let Ok(devices) = v.devices() else { return };
    for d in devices {
        eprintln!("{d:?} guid {}", d.guid_hex());
        let ctx = v
            .open(&d.name)
            .unwrap_or_else(|e| panic!("{}: {e}", d.name));
        assert_eq!(ctx.name(), d.name);
        assert_eq!(ctx.is_mlx5(), d.is_mlx5);
        let attr = ctx.query_device().unwrap();
        eprintln!(
            "  fw {} vendor {:#x} part {} ports {}",
            attr.fw_ver(),
            attr.vendor_id,
            attr.vendor_part_id,
            attr.phys_port_cnt
        );
        assert!(attr.phys_port_cnt >= 1);
        for port in 1..=attr.phys_port_cnt {
            let p = ctx.query_port(port).unwrap();
            eprintln!(
                "  port {port}: {} {} {} mtu {:?}",
                p.state_name(),
                p.phys_state_name(),
                p.link_layer_name(),
                p.active_mtu_bytes()
            );
            // The compat symbol never fills past `flags`; we zeroed the rest.
            assert_eq!((p.port_cap_flags2, p.active_speed_ex), (0, 0));
        }
        let pd = ctx.alloc_pd().unwrap();
        let probe = pd.dmabuf_probe();
        eprintln!("  dmabuf probe: {probe:?}");
        assert!(!matches!(probe, DmabufProbe::SymbolMissing));
        let mut buf = vec![0u8; 64 << 10];
        let addr = buf.as_mut_ptr() as u64;
        let e = pd
            .reg_mr(addr, buf.len(), ACCESS_RELAXED_ORDERING)
            .unwrap_err();
        assert_eq!((e.call, e.errno), ("ibv_reg_mr", 22));
        let mr = pd
            .reg_mr(addr, buf.len(), ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
            .unwrap();
        assert_eq!((mr.addr() as u64, mr.length()), (addr, buf.len()));
        eprintln!("  mr lkey {:#x} rkey {:#x}", mr.lkey(), mr.rkey());
        mr.deregister().unwrap();
        if d.is_mlx5 == Some(true) {
            for (kind, flags) in [
                ("BF", MLX5DV_UAR_ALLOC_TYPE_BF),
                ("NC", MLX5DV_UAR_ALLOC_TYPE_NC),
                ("NC_DEDICATED", MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED),
            ] {
                match ctx.alloc_devx_uar(flags) {
                    Ok(u) => {
                        eprintln!("  devx uar {kind}: {u:?}");
                        let (reg, base) = (u.reg_addr() as usize, u.base_addr() as usize);
                        assert!(base != 0 && reg >= base && reg - base < 1 << 16, "{u:?}");
                    }
                    Err(e) => eprintln!("  devx uar {kind}: {e}"),
                }
            }
        } else {
            let e = ctx.alloc_devx_uar(MLX5DV_UAR_ALLOC_TYPE_NC).unwrap_err();
            assert_eq!(e.errno, 95, "{e}");
        }
        pd.dealloc().unwrap();
        ctx.close().unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// explain_errno
// ---------------------------------------------------------------------------------------------

#[test]
fn explain_efault_is_peer_memory() {
    let (cause, fix) = explain_errno("ibv_reg_mr", 14);
    assert!(cause.contains("no peer-memory client"), "{cause}");
    assert!(
        fix.contains("nvidia-peermem") && fix.contains("dma-buf"),
        "{fix}"
    );
}

#[test]
fn explain_eopnotsupp() {
    let (cause, fix) = explain_errno("ibv_reg_dmabuf_mr", 95);
    assert!(
        cause.contains("dma-buf") && cause.contains("rdma-core < 34"),
        "{cause}"
    );
    assert!(cause.contains("ON_DEMAND_PAGING"), "{cause}");
    assert!(fix.contains("5.12"), "{fix}");
    let (cause, _) = explain_errno("mlx5dv_devx_alloc_uar", 95);
    assert!(
        cause.contains("NC_DEDICATED needs rdma-core >= 45"),
        "{cause}"
    );
}

#[test]
fn explain_eprotonosupport() {
    let (cause, fix) = explain_errno("ibv_reg_dmabuf_mr", 93);
    assert!(
        cause.contains("lacks this method") && cause.contains("5.12"),
        "{cause}"
    );
    assert!(fix.contains("kernel"), "{fix}");
}

#[test]
fn explain_enosys() {
    let (cause, fix) = explain_errno("ibv_get_device_list", 38);
    assert!(cause.contains("no kernel RDMA support"), "{cause}");
    assert!(
        cause.contains("/sys/class/infiniband_verbs/abi_version"),
        "{cause}"
    );
    assert!(fix.contains("ib_uverbs"), "{fix}");
}

#[test]
fn explain_enomem_is_memlock() {
    let (cause, fix) = explain_errno("ibv_reg_mr", 12);
    assert!(cause.contains("RLIMIT_MEMLOCK"), "{cause}");
    assert!(fix.contains("ulimit -l unlimited"), "{fix}");
    let (cause, _) = explain_errno("ibv_reg_dmabuf_mr", 12);
    assert!(cause.contains("RLIMIT_MEMLOCK"), "{cause}");
    // EPERM from ibv_reg_mr is a memlock limit of 0 (ib_umem_get: can_do_mlock), not a
    // device permission; from ibv_open_device it is the device node's permissions.
    let (cause, fix) = explain_errno("ibv_reg_mr", 1);
    assert!(
        cause.contains("RLIMIT_MEMLOCK") && cause.contains("0"),
        "{cause}"
    );
    assert!(fix.contains("ulimit -l unlimited"), "{fix}");
    assert!(explain_errno("ibv_open_device", 1)
        .0
        .contains("permission denied"));
}

#[test]
fn explain_others() {
    assert!(explain_errno("ibv_reg_dmabuf_mr", 9)
        .0
        .contains("supported"));
    assert!(explain_errno("ibv_reg_dmabuf_mr", 524)
        .0
        .contains("PCI topology"));
    assert!(explain_errno("ibv_open_device", 13)
        .0
        .contains("permission denied"));
    assert!(explain_errno("ibv_reg_mr", 22).0.contains("access flags"));
    assert_eq!(explain_errno("ibv_reg_mr", 4242), ("", ""));
}

#[test]
fn verbs_error_carries_strerror_cause_and_fix() {
    let e = VerbsError::new("ibv_reg_mr", 14);
    assert_eq!((e.call, e.errno), ("ibv_reg_mr", 14));
    assert!(
        e.message.starts_with("Bad address (os error 14): "),
        "{}",
        e.message
    );
    assert_eq!((e.cause, e.fix), explain_errno("ibv_reg_mr", 14));
    assert_eq!(e.to_string(), format!("ibv_reg_mr: {}", e.message));
    let e = VerbsError::new("ibv_reg_mr", 0);
    assert!(e.message.contains("without setting errno"));
}

// ---------------------------------------------------------------------------------------------
// Layout: our #[repr(C)] structs against the system headers
// ---------------------------------------------------------------------------------------------

/// Compile and run tests/verbs_layout.c; `None` only when skipping.
fn c_layout() -> Option<BTreeMap<String, i64>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/verbs_layout.c");
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("verbs_layout");
    // Extra flags, e.g. `-I DIR` to check against another rdma-core's headers.
    let cflags = std::env::var("GDRDOCTOR_VERBS_CFLAGS").unwrap_or_default();
    let compile = |extra: &[&str]| {
        Command::new("cc")
            .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .args(cflags.split_whitespace())
            .args(extra)
            .arg(&src)
            .output()
    };
    let mut out = match compile(&["-DHAVE_ACTIVE_SPEED_EX"]) {
        Ok(o) => o,
        Err(e) => {
            require::skip(
                "verbs struct layout against the C headers",
                &format!("`cc` cannot be run ({e})"),
                "apt-get install gcc libibverbs-dev (dnf install gcc rdma-core-devel)",
            );
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() && stderr.contains("active_speed_ex") {
        // rdma-core < 49: no ibv_port_attr.active_speed_ex in the headers.
        out = compile(&[]).unwrap();
    }
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("infiniband/") && stderr.contains("No such file") {
            let first = stderr
                .lines()
                .find(|l| l.contains("infiniband/"))
                .unwrap_or("");
            require::skip(
                "verbs struct layout against the C headers",
                &format!("the rdma-core headers are missing ({})", first.trim()),
                "apt-get install libibverbs-dev (dnf install rdma-core-devel)",
            );
            return None;
        }
        panic!("tests/verbs_layout.c does not compile:\n{stderr}");
    }
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "{run:?}");
    let text = String::from_utf8(run.stdout).unwrap();
    let map: BTreeMap<String, i64> = text
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    assert!(
        map.len() > 80,
        "too few lines from the layout program:\n{text}"
    );
    Some(map)
}

/// The size of the field that `get` borrows.
fn field_size<T, F>(_get: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}

macro_rules! fields {
    ($map:ident, $c:literal, $t:ty, size, [$($f:ident),* $(,)?]) => {
        $map.insert(format!("{}.size", $c), size_of::<$t>() as i64);
        fields!($map, $c, $t, [$($f),*]);
    };
    ($map:ident, $c:literal, $t:ty, [$($f:ident),* $(,)?]) => {
        $(
            $map.insert(format!("{}.{}", $c, stringify!($f)), offset_of!($t, $f) as i64);
            $map.insert(
                format!("{}.{}:size", $c, stringify!($f)),
                field_size(|s: &$t| &s.$f) as i64,
            );
        )*
    };
}

/// Every size, offset and constant src/live/verbs/ declares, keyed as verbs_layout.c prints them.
fn rust_layout() -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    fields!(m, "ibv_pd", IbvPd, size, [context, handle]);
    fields!(
        m,
        "ibv_mr",
        IbvMr,
        size,
        [context, pd, addr, length, handle, lkey, rkey]
    );
    // Only the head of ibv_context is declared: no size.
    fields!(m, "ibv_context", IbvContext, [device]);
    fields!(
        m,
        "ibv_port_attr",
        IbvPortAttr,
        size,
        [
            state,
            max_mtu,
            active_mtu,
            gid_tbl_len,
            port_cap_flags,
            max_msg_sz,
            bad_pkey_cntr,
            qkey_viol_cntr,
            pkey_tbl_len,
            lid,
            sm_lid,
            lmc,
            max_vl_num,
            sm_sl,
            subnet_timeout,
            init_type_reply,
            active_width,
            active_speed,
            phys_state,
            link_layer,
            flags,
            port_cap_flags2,
            active_speed_ex,
        ]
    );
    fields!(
        m,
        "ibv_device_attr",
        IbvDeviceAttr,
        size,
        [
            fw_ver,
            node_guid,
            sys_image_guid,
            max_mr_size,
            page_size_cap,
            vendor_id,
            vendor_part_id,
            hw_ver,
            max_qp,
            max_qp_wr,
            device_cap_flags,
            max_sge,
            max_sge_rd,
            max_cq,
            max_cqe,
            max_mr,
            max_pd,
            max_qp_rd_atom,
            max_ee_rd_atom,
            max_res_rd_atom,
            max_qp_init_rd_atom,
            max_ee_init_rd_atom,
            atomic_cap,
            max_ee,
            max_rdd,
            max_mw,
            max_raw_ipv6_qp,
            max_raw_ethy_qp,
            max_mcast_grp,
            max_mcast_qp_attach,
            max_total_mcast_qp_attach,
            max_ah,
            max_fmr,
            max_map_per_fmr,
            max_srq,
            max_srq_wr,
            max_srq_sge,
            max_pkeys,
            local_ca_ack_delay,
            phys_port_cnt,
        ]
    );
    fields!(
        m,
        "mlx5dv_devx_uar",
        Mlx5dvDevxUar,
        size,
        [reg_addr, base_addr, page_id, mmap_off, comp_mask]
    );
    let consts: [(&str, i64); 12] = [
        ("IBV_ACCESS_LOCAL_WRITE", ACCESS_LOCAL_WRITE.into()),
        ("IBV_ACCESS_REMOTE_WRITE", ACCESS_REMOTE_WRITE.into()),
        ("IBV_ACCESS_REMOTE_READ", ACCESS_REMOTE_READ.into()),
        ("IBV_ACCESS_REMOTE_ATOMIC", ACCESS_REMOTE_ATOMIC.into()),
        (
            "IBV_ACCESS_RELAXED_ORDERING",
            ACCESS_RELAXED_ORDERING.into(),
        ),
        ("IBV_ACCESS_OPTIONAL_RANGE", ACCESS_OPTIONAL_RANGE.into()),
        ("IBV_PORT_ACTIVE", PORT_ACTIVE.into()),
        ("IBV_LINK_LAYER_INFINIBAND", LINK_LAYER_INFINIBAND.into()),
        ("IBV_LINK_LAYER_ETHERNET", LINK_LAYER_ETHERNET.into()),
        ("MLX5DV_UAR_ALLOC_TYPE_BF", MLX5DV_UAR_ALLOC_TYPE_BF.into()),
        ("MLX5DV_UAR_ALLOC_TYPE_NC", MLX5DV_UAR_ALLOC_TYPE_NC.into()),
        (
            "MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED",
            MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED.into(),
        ),
    ];
    for (k, v) in consts {
        m.insert(format!("const.{k}"), v);
    }
    m
}

#[test]
fn struct_layouts_match_the_system_headers() {
    let Some(mut c) = c_layout() else { return };
    let mut rust = rust_layout();
    eprintln!("C: {c:?}");

    // ibv_port_attr is sized for the newest rdma-core (active_speed_ex, >= 49). Against older
    // headers it must extend the C struct exactly by that one trailing field.
    if !c.contains_key("ibv_port_attr.active_speed_ex") {
        let c_size = c["ibv_port_attr.size"];
        assert_eq!(rust["ibv_port_attr.active_speed_ex"], c_size);
        assert_eq!(rust["ibv_port_attr.size"], c_size + 4);
        rust.remove("ibv_port_attr.active_speed_ex");
        rust.remove("ibv_port_attr.active_speed_ex:size");
        rust.insert("ibv_port_attr.size".into(), c_size);
        eprintln!("headers predate active_speed_ex: C ibv_port_attr is {c_size} bytes, ours 56");
    }
    // MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED is rdma-core >= 45 (Debian 12 has 44).
    if !c.contains_key("const.MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED") {
        rust.remove("const.MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED");
        eprintln!("headers predate MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED");
    }
    let mut diffs = Vec::new();
    for (k, v) in &rust {
        match c.remove(k) {
            Some(cv) if cv == *v => {}
            Some(cv) => diffs.push(format!("{k}: ours {v}, headers {cv}")),
            None => diffs.push(format!("{k}: declared here, not printed by verbs_layout.c")),
        }
    }
    for (k, v) in &c {
        diffs.push(format!(
            "{k} = {v}: printed by verbs_layout.c, not declared here"
        ));
    }
    assert!(diffs.is_empty(), "layout mismatches:\n{}", diffs.join("\n"));
}
