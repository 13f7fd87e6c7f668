//! The verbs FFI (`src/live/verbs/`) walked in-process against the stand-in libibverbs and
//! libmlx5: every struct gdrdoctor reads (ports, device attributes, memory regions, the DEVX
//! UAR) comes back from a C library compiled against the system's rdma-core headers with the
//! values the scenario put in, which complements the layout oracle (tests/verbs.rs) with
//! values. One test in its own binary: the stand-ins read their scenario once per process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use gdrdoctor::live::verbs::*;

const SCENARIO: &str = "\
device mlx5_0 guid=0x0c42a10300a1b2c0 fw=28.43.1014 part=4129 ports=1
device mlx5_1 fw=28.39.1002 ports=2
device rxe0 mlx5=no
port mlx5_0 1 state=ACTIVE phys=LinkUp link_layer=InfiniBand width=4x speed=NDR mtu=4096 lid=7
port mlx5_1 1 state=ACTIVE link_layer=Ethernet mtu=1024
port mlx5_1 2 state=DOWN phys=Polling
uar mlx5_0 page_id=0x22 index=0 offset=0xa00 sys_page=4096
";

#[test]
fn the_ffi_reads_what_the_stand_ins_were_told() {
    let Some(l) = common::stand_ins::build() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("scenario");
    std::fs::write(&scenario, SCENARIO).unwrap();
    // The only test of this binary: no other thread reads the environment.
    std::env::set_var("GDRDOCTOR_STUB_SCENARIO", &scenario);
    let v = Verbs::load_paths(
        &l.current.join("libibverbs.so.1").display().to_string(),
        &l.current.join("libmlx5.so.1").display().to_string(),
    )
    .unwrap();
    assert!(v.has_reg_dmabuf_mr());
    let m = v.mlx5dv().unwrap();
    assert!(m.has_is_supported() && m.has_devx_uar());
    let devs = v.devices().unwrap();
    let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1", "rxe0"]);
    assert_eq!(devs[0].guid_hex(), "0c42a10300a1b2c0");
    assert_eq!(
        devs.iter().map(|d| d.is_mlx5).collect::<Vec<_>>(),
        [Some(true), Some(true), Some(false)]
    );

    let ctx = v.open("mlx5_0").unwrap();
    assert_eq!(ctx.is_mlx5(), Some(true));
    let a = ctx.query_device().unwrap();
    assert_eq!(a.fw_ver(), "28.43.1014");
    assert_eq!(
        (a.vendor_id, a.vendor_part_id, a.phys_port_cnt),
        (0x02c9, 4129, 1)
    );
    assert_eq!(a.node_guid(), 0x0c42_a103_00a1_b2c0);
    let p = ctx.query_port(1).unwrap();
    assert_eq!(
        (p.state_name(), p.phys_state_name(), p.link_layer_name()),
        ("ACTIVE", "LinkUp", "InfiniBand")
    );
    assert_eq!((p.active_width, p.active_speed, p.lid), (2, 128, 7));
    assert_eq!(p.active_mtu_bytes(), Some(4096));
    // The compat symbol fills nothing past `flags`.
    assert_eq!((p.port_cap_flags2, p.active_speed_ex), (0, 0));
    assert_eq!(ctx.query_port(2).unwrap_err().errno, 22);

    let pd = ctx.alloc_pd().unwrap();
    assert_eq!(pd.dmabuf_probe(), DmabufProbe::Supported { errno: 9 });
    let mut buf = vec![0u8; 64 << 10];
    let addr = buf.as_mut_ptr() as u64;
    let mr = pd
        .reg_mr(addr, buf.len(), ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
        .unwrap();
    assert_eq!((mr.addr() as u64, mr.length()), (addr, buf.len()));
    assert_ne!(mr.lkey(), mr.rkey());
    mr.deregister().unwrap();
    // Remote write without local write: the kernel's ib_check_mr_access refuses it.
    let e = pd.reg_mr(addr, buf.len(), ACCESS_REMOTE_WRITE).unwrap_err();
    assert_eq!((e.call, e.errno), ("ibv_reg_mr", 22));
    // Memory nobody mapped cannot be pinned.
    let e = pd.reg_mr(0x10, 4096, ACCESS_LOCAL_WRITE).unwrap_err();
    assert_eq!(e.errno, 14);
    // A file that is not a dma-buf is EINVAL (dma_buf_get), an fd that is not open EBADF.
    let f = std::fs::File::open("/proc/self/stat").unwrap();
    use std::os::fd::AsRawFd;
    let e = pd
        .reg_dmabuf_mr(0, 4096, 0, f.as_raw_fd(), ACCESS_LOCAL_WRITE)
        .unwrap_err();
    assert_eq!(e.errno, 22);
    let e = pd
        .reg_dmabuf_mr(0, 4096, 0, 1 << 20, ACCESS_LOCAL_WRITE)
        .unwrap_err();
    assert_eq!(e.errno, 9);

    let u = ctx
        .alloc_devx_uar(MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED)
        .unwrap();
    assert_eq!(u.page_id(), 0x22);
    assert_eq!(u.reg_addr() as u64 - u.base_addr() as u64, 0xa00);
    assert_eq!(u.base_addr() as u64 % 4096, 0);
    drop(u);
    drop(pd);
    ctx.close().unwrap();

    let ctx = v.open("mlx5_1").unwrap();
    assert_eq!(ctx.query_device().unwrap().fw_ver(), "28.39.1002");
    let p1 = ctx.query_port(1).unwrap();
    assert_eq!(
        (p1.link_layer_name(), p1.active_mtu_bytes()),
        ("Ethernet", Some(1024))
    );
    let p2 = ctx.query_port(2).unwrap();
    assert_eq!((p2.state_name(), p2.phys_state_name()), ("DOWN", "Polling"));
    drop(ctx);

    // Not an mlx5 device: gdrdoctor refuses the DEVX call itself, as libmlx5 would.
    let ctx = v.open("rxe0").unwrap();
    assert_eq!(ctx.is_mlx5(), Some(false));
    let e = ctx.alloc_devx_uar(MLX5DV_UAR_ALLOC_TYPE_BF).unwrap_err();
    assert_eq!(e.errno, 95);
    assert!(e.message.contains("not an mlx5 device"), "{e}");

    let e = v.open("mlx5_9").unwrap_err();
    assert_eq!((e.call, e.errno), ("ibv_open_device", 19));
}
