//! The bindings: the `#[repr(C)]` structs of rdma-core's `libibverbs/verbs.h` and
//! `providers/mlx5/mlx5dv.h` (`tests/verbs.rs` compares every offset and size with the system
//! headers) and the prototypes of the functions [`super::load`] looks up.

use super::{LINK_LAYER_ETHERNET, LINK_LAYER_INFINIBAND};
use std::ffi::{c_char, c_int, c_void};

/// `struct ibv_device`: only ever handled by pointer.
#[repr(C)]
pub struct IbvDevice {
    _opaque: [u8; 0],
}

/// The head of `struct ibv_context`. We never allocate one; we read `device` (offset 0) from
/// a context libibverbs returned. The rest of the struct (ops table, fds, mutex) is not
/// declared.
#[repr(C)]
pub struct IbvContext {
    /// `struct ibv_device *device`.
    pub device: *mut IbvDevice,
}

/// `struct ibv_pd` (complete).
#[repr(C)]
pub struct IbvPd {
    /// `struct ibv_context *context`.
    pub context: *mut IbvContext,
    /// `uint32_t handle`: the kernel object handle.
    pub handle: u32,
}

/// `struct ibv_mr` (complete).
#[repr(C)]
pub struct IbvMr {
    /// `struct ibv_context *context`.
    pub context: *mut IbvContext,
    /// `struct ibv_pd *pd`.
    pub pd: *mut IbvPd,
    /// `void *addr`: the registered address (the dma-buf offset for a dma-buf MR).
    pub addr: *mut c_void,
    /// `size_t length`.
    pub length: usize,
    /// `uint32_t handle`.
    pub handle: u32,
    /// `uint32_t lkey`.
    pub lkey: u32,
    /// `uint32_t rkey`.
    pub rkey: u32,
}

/// `struct ibv_port_attr`, sized to the newest known layout (rdma-core >= 49 adds
/// `active_speed_ex`: 56 bytes; rdma-core 44, Debian 12, ends at `port_cap_flags2`: 52 bytes).
/// The exported `ibv_query_port` fills only the compat prefix up to `flags` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbvPortAttr {
    /// `enum ibv_port_state` (4 = `IBV_PORT_ACTIVE`).
    pub state: u32,
    /// `enum ibv_mtu` (1 = 256 .. 5 = 4096).
    pub max_mtu: u32,
    /// `enum ibv_mtu`.
    pub active_mtu: u32,
    /// `int gid_tbl_len`.
    pub gid_tbl_len: i32,
    /// `uint32_t port_cap_flags`.
    pub port_cap_flags: u32,
    /// `uint32_t max_msg_sz`.
    pub max_msg_sz: u32,
    /// `uint32_t bad_pkey_cntr`.
    pub bad_pkey_cntr: u32,
    /// `uint32_t qkey_viol_cntr`.
    pub qkey_viol_cntr: u32,
    /// `uint16_t pkey_tbl_len`.
    pub pkey_tbl_len: u16,
    /// `uint16_t lid`.
    pub lid: u16,
    /// `uint16_t sm_lid`.
    pub sm_lid: u16,
    /// `uint8_t lmc`.
    pub lmc: u8,
    /// `uint8_t max_vl_num`.
    pub max_vl_num: u8,
    /// `uint8_t sm_sl`.
    pub sm_sl: u8,
    /// `uint8_t subnet_timeout`.
    pub subnet_timeout: u8,
    /// `uint8_t init_type_reply`.
    pub init_type_reply: u8,
    /// `uint8_t active_width` (IB encoding: 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x).
    pub active_width: u8,
    /// `uint8_t active_speed` (IB encoding).
    pub active_speed: u8,
    /// `uint8_t phys_state` (5 = LinkUp).
    pub phys_state: u8,
    /// `uint8_t link_layer` (1 = InfiniBand, 2 = Ethernet).
    pub link_layer: u8,
    /// `uint8_t flags`: the last field the exported (compat) `ibv_query_port` fills.
    pub flags: u8,
    /// `uint16_t port_cap_flags2`: not filled through the compat symbol; reads as 0.
    pub port_cap_flags2: u16,
    /// `uint32_t active_speed_ex` (rdma-core >= 49): not filled through the compat symbol.
    pub active_speed_ex: u32,
}

impl IbvPortAttr {
    /// The port state as the kernel's sysfs `ports/N/state` spells it (`ACTIVE`, `DOWN`...).
    pub fn state_name(&self) -> &'static str {
        match self.state {
            0 => "NOP",
            1 => "DOWN",
            2 => "INIT",
            3 => "ARMED",
            4 => "ACTIVE",
            5 => "ACTIVE_DEFER",
            _ => "UNKNOWN",
        }
    }

    /// The physical state as sysfs `ports/N/phys_state` spells it (`LinkUp`, `Polling`...).
    pub fn phys_state_name(&self) -> &'static str {
        match self.phys_state {
            1 => "Sleep",
            2 => "Polling",
            3 => "Disabled",
            4 => "PortConfigurationTraining",
            5 => "LinkUp",
            6 => "LinkErrorRecovery",
            7 => "Phy Test",
            _ => "<unknown>",
        }
    }

    /// The link layer as sysfs `ports/N/link_layer` spells it. libibverbs reports 0
    /// (unspecified) for InfiniBand on old providers, as `ibv_devinfo` does we call that
    /// InfiniBand.
    pub fn link_layer_name(&self) -> &'static str {
        match self.link_layer {
            0 | LINK_LAYER_INFINIBAND => "InfiniBand",
            LINK_LAYER_ETHERNET => "Ethernet",
            _ => "Unknown",
        }
    }

    /// `active_mtu` in bytes (`None` for an encoding outside 1..=5).
    pub fn active_mtu_bytes(&self) -> Option<u32> {
        mtu_bytes(self.active_mtu)
    }

    /// `max_mtu` in bytes (`None` for an encoding outside 1..=5).
    pub fn max_mtu_bytes(&self) -> Option<u32> {
        mtu_bytes(self.max_mtu)
    }
}

fn mtu_bytes(enc: u32) -> Option<u32> {
    (1..=5).contains(&enc).then(|| 128u32 << enc)
}

/// `struct ibv_device_attr` (complete; 232 bytes on LP64).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbvDeviceAttr {
    /// `char fw_ver[64]`, NUL-terminated.
    pub fw_ver: [c_char; 64],
    /// `__be64 node_guid` (network byte order as stored).
    pub node_guid: u64,
    /// `__be64 sys_image_guid`.
    pub sys_image_guid: u64,
    /// `uint64_t max_mr_size`.
    pub max_mr_size: u64,
    /// `uint64_t page_size_cap`.
    pub page_size_cap: u64,
    /// `uint32_t vendor_id` (IEEE OUI; 0x02c9 = Mellanox).
    pub vendor_id: u32,
    /// `uint32_t vendor_part_id` (the PCI device id, e.g. 4129 = ConnectX-7).
    pub vendor_part_id: u32,
    /// `uint32_t hw_ver`.
    pub hw_ver: u32,
    /// `int max_qp`.
    pub max_qp: i32,
    /// `int max_qp_wr`.
    pub max_qp_wr: i32,
    /// `unsigned int device_cap_flags`.
    pub device_cap_flags: u32,
    /// `int max_sge`.
    pub max_sge: i32,
    /// `int max_sge_rd`.
    pub max_sge_rd: i32,
    /// `int max_cq`.
    pub max_cq: i32,
    /// `int max_cqe`.
    pub max_cqe: i32,
    /// `int max_mr`.
    pub max_mr: i32,
    /// `int max_pd`.
    pub max_pd: i32,
    /// `int max_qp_rd_atom`.
    pub max_qp_rd_atom: i32,
    /// `int max_ee_rd_atom`.
    pub max_ee_rd_atom: i32,
    /// `int max_res_rd_atom`.
    pub max_res_rd_atom: i32,
    /// `int max_qp_init_rd_atom`.
    pub max_qp_init_rd_atom: i32,
    /// `int max_ee_init_rd_atom`.
    pub max_ee_init_rd_atom: i32,
    /// `enum ibv_atomic_cap atomic_cap`.
    pub atomic_cap: u32,
    /// `int max_ee`.
    pub max_ee: i32,
    /// `int max_rdd`.
    pub max_rdd: i32,
    /// `int max_mw`.
    pub max_mw: i32,
    /// `int max_raw_ipv6_qp`.
    pub max_raw_ipv6_qp: i32,
    /// `int max_raw_ethy_qp`.
    pub max_raw_ethy_qp: i32,
    /// `int max_mcast_grp`.
    pub max_mcast_grp: i32,
    /// `int max_mcast_qp_attach`.
    pub max_mcast_qp_attach: i32,
    /// `int max_total_mcast_qp_attach`.
    pub max_total_mcast_qp_attach: i32,
    /// `int max_ah`.
    pub max_ah: i32,
    /// `int max_fmr`.
    pub max_fmr: i32,
    /// `int max_map_per_fmr`.
    pub max_map_per_fmr: i32,
    /// `int max_srq`.
    pub max_srq: i32,
    /// `int max_srq_wr`.
    pub max_srq_wr: i32,
    /// `int max_srq_sge`.
    pub max_srq_sge: i32,
    /// `uint16_t max_pkeys`.
    pub max_pkeys: u16,
    /// `uint8_t local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// `uint8_t phys_port_cnt`.
    pub phys_port_cnt: u8,
}

impl Default for IbvDeviceAttr {
    fn default() -> Self {
        // SAFETY: every field is an integer or an array of integers; all-zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

impl IbvDeviceAttr {
    /// `fw_ver` up to its NUL (lossy UTF-8; the whole array if there is no NUL).
    pub fn fw_ver(&self) -> String {
        let bytes: Vec<u8> = self
            .fw_ver
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// `node_guid` as a number (converted from network byte order).
    pub fn node_guid(&self) -> u64 {
        u64::from_be(self.node_guid)
    }
}

/// `struct mlx5dv_devx_uar` (complete; providers/mlx5/mlx5dv.h).
#[repr(C)]
#[derive(Debug)]
pub struct Mlx5dvDevxUar {
    /// `void *reg_addr`: the exact doorbell VA.
    pub reg_addr: *mut c_void,
    /// `void *base_addr`: VA of the mmapped system page holding the UAR.
    pub base_addr: *mut c_void,
    /// `uint32_t page_id`: firmware index of the 4 KiB UAR containing `reg_addr`.
    pub page_id: u32,
    /// `off_t mmap_off`: the uverbs mmap cookie (not a BAR offset).
    pub mmap_off: libc::off_t,
    /// `uint64_t comp_mask`.
    pub comp_mask: u64,
}

// The prototypes of the functions looked up (verbs.h, mlx5dv.h).
pub(super) type GetDeviceListFn = unsafe extern "C" fn(num: *mut c_int) -> *mut *mut IbvDevice;
pub(super) type FreeDeviceListFn = unsafe extern "C" fn(list: *mut *mut IbvDevice);
pub(super) type GetDeviceNameFn = unsafe extern "C" fn(device: *mut IbvDevice) -> *const c_char;
pub(super) type GetDeviceGuidFn = unsafe extern "C" fn(device: *mut IbvDevice) -> u64;
pub(super) type OpenDeviceFn = unsafe extern "C" fn(device: *mut IbvDevice) -> *mut IbvContext;
pub(super) type CloseDeviceFn = unsafe extern "C" fn(context: *mut IbvContext) -> c_int;
pub(super) type QueryDeviceFn =
    unsafe extern "C" fn(context: *mut IbvContext, attr: *mut IbvDeviceAttr) -> c_int;
pub(super) type QueryPortFn =
    unsafe extern "C" fn(context: *mut IbvContext, port: u8, attr: *mut IbvPortAttr) -> c_int;
pub(super) type AllocPdFn = unsafe extern "C" fn(context: *mut IbvContext) -> *mut IbvPd;
pub(super) type DeallocPdFn = unsafe extern "C" fn(pd: *mut IbvPd) -> c_int;
pub(super) type RegMrFn = unsafe extern "C" fn(
    pd: *mut IbvPd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut IbvMr;
pub(super) type RegDmabufMrFn = unsafe extern "C" fn(
    pd: *mut IbvPd,
    offset: u64,
    len: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut IbvMr;
pub(super) type DeregMrFn = unsafe extern "C" fn(mr: *mut IbvMr) -> c_int;
pub(super) type Mlx5IsSupportedFn = unsafe extern "C" fn(device: *mut IbvDevice) -> bool;
pub(super) type Mlx5DevxAllocUarFn =
    unsafe extern "C" fn(context: *mut IbvContext, flags: u32) -> *mut Mlx5dvDevxUar;
pub(super) type Mlx5DevxFreeUarFn = unsafe extern "C" fn(uar: *mut Mlx5dvDevxUar);
