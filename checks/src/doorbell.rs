//! mlx5 doorbell (UAR) address arithmetic and its traps (gdr-ground-truth §4).
//!
//! The physical address of a doorbell is `BAR0 + page_id * UNIT + (reg_addr - base_addr) % 4096`
//! where `UNIT` is 4 KiB when the HCA uses 4 KiB UARs (`uar_4k`, which the kernel sets only
//! when the system page is larger than 4 KiB) and the system page otherwise, `page_id` is the
//! firmware index of the 4 KiB UAR that holds `reg_addr`, and `base_addr` is the start of the
//! mmapped *system* page. The doorbell/BlueFlame registers start at 0x800 in the UAR. Pure
//! functions: the probe feeds them what `mlx5dv_devx_alloc_uar` returned and what sysfs and
//! config space say about BAR0; the unit tests feed them each known trap.

use serde::Serialize;

/// The mlx5 initialization segment occupies BAR0 0x0000-0x200F (`struct mlx5_init_seg`); no UAR
/// may overlap it or the health page after it.
pub const INIT_SEGMENT_END: u64 = 0x3000;
/// Doorbell/BlueFlame area inside a 4 KiB UAR (`MLX5_BF_OFFSET`).
pub const BF_OFFSET: u64 = 0x800;
/// Non-cached dynamic UARs: four doorbells at a 0x100 stride (`MLX5_DB_BLUEFLAME_BUFFER_SIZE`).
pub const NC_OFFSETS: [u64; 4] = [0x800, 0x900, 0xA00, 0xB00];
/// DBR-less doorbell used by DOCA GPUNetIO / NCCL GDAKI (`base_addr + 0x600`).
pub const DBR_LESS_OFFSET: u64 = 0x600;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UarKind {
    /// BlueFlame UAR with `bf_reg_size` (512 typically): bfregs at 0x800 + k * size, each with
    /// two halves that successive posts alternate between.
    BlueFlame { bf_reg_size: u64 },
    /// Non-cached UAR: doorbells at 0x800, 0x900, 0xA00, 0xB00, no alternation.
    NonCached,
    /// DBR-less doorbell at 0x600 of the UAR.
    DbrLess,
}

/// What the probe knows about one allocated UAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Uar {
    /// System page size (`sysconf(_SC_PAGESIZE)`).
    pub sys_page: u64,
    /// The HCA uses 4 KiB UAR units (`uar_4k` cap). `None`: not queried; then the kernel's rule
    /// applies: 4 KiB units only when the system page is larger than 4 KiB.
    pub uar_4k: Option<bool>,
    /// BAR0 start and size from sysfs `resource`.
    pub bar0: u64,
    pub bar0_size: u64,
    /// `mlx5dv_devx_uar.page_id`.
    pub page_id: u64,
    /// `reg_addr - base_addr`: the doorbell's offset in the mmapped system page.
    pub reg_offset: u64,
    pub kind: UarKind,
    /// `mlx5dv_devx_uar.mmap_off`: the uverbs mmap cookie (`((cmd << 8) | idx) * page_size`),
    /// 0 when unknown. Not a BAR offset: kept only to recognise code that takes it for one.
    pub mmap_off: u64,
}

impl Uar {
    /// The UAR unit in bytes.
    pub fn unit(&self) -> u64 {
        match self.uar_4k {
            Some(true) => 4096,
            Some(false) => self.sys_page,
            None if self.sys_page > 4096 => 4096,
            None => self.sys_page,
        }
    }
    /// The correct physical address of the doorbell register.
    pub fn doorbell_phys(&self) -> u64 {
        self.bar0
            .wrapping_add(self.page_id.wrapping_mul(self.unit()))
            .wrapping_add(self.reg_offset % 4096)
    }
    /// The offset of the doorbell inside its 4 KiB UAR.
    pub fn offset_in_uar(&self) -> u64 {
        self.reg_offset % 4096
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issue {
    /// `outside-bar0`, `init-segment`, `offset`, `unit`, `sub-page`, or a trap name.
    pub kind: &'static str,
    pub message: String,
}

/// The known ways to get the address wrong, each as the address it produces.
pub fn trap_addresses(u: &Uar) -> Vec<(&'static str, u64)> {
    let mut v = Vec::new();
    // 1. PAGE_SIZE vs 4 KiB: page_id counted in system pages on a 64 KiB-page host.
    v.push((
        "page-size-units",
        u.bar0
            .wrapping_add(u.page_id.wrapping_mul(u.sys_page))
            .wrapping_add(u.reg_offset % 4096),
    ));
    // 2. Double counting: page_id already includes the 4 KiB sub-page, reg_addr - base_addr too.
    v.push((
        "double-counted-subpage",
        u.bar0
            .wrapping_add(u.page_id.wrapping_mul(4096))
            .wrapping_add(u.reg_offset),
    ));
    // 3. DBR-less doorbell computed from base_addr (the first UAR of the system page).
    let first = u.page_id - (u.reg_offset / 4096).min(u.page_id);
    v.push((
        "dbr-less-from-base",
        u.bar0
            .wrapping_add(first.wrapping_mul(4096))
            .wrapping_add(DBR_LESS_OFFSET),
    ));
    // 4. The mmap cookie taken for a BAR offset.
    if u.mmap_off != 0 {
        v.push((
            "mmap-cookie",
            u.bar0
                .wrapping_add(u.mmap_off)
                .wrapping_add(u.reg_offset % 4096),
        ));
    }
    v
}

/// Check one UAR; `claimed` is an address some code computed for the doorbell (to catch traps).
pub fn check(u: &Uar, claimed: Option<u64>) -> Vec<Issue> {
    let mut out = Vec::new();
    let phys = u.doorbell_phys();
    let end = u.bar0.saturating_add(u.bar0_size);
    if phys < u.bar0 || phys >= end {
        out.push(Issue {
            kind: "outside-bar0",
            message: format!(
                "doorbell 0x{phys:x} is outside BAR0 0x{:x}-0x{:x}",
                u.bar0, end
            ),
        });
    } else if phys < u.bar0.saturating_add(INIT_SEGMENT_END) {
        out.push(Issue { kind: "init-segment", message: format!("doorbell 0x{phys:x} falls in the initialization segment (BAR0 + 0x0-0x{INIT_SEGMENT_END:x})") });
    }
    let off = u.offset_in_uar();
    let ok_off = match u.kind {
        // Checked: bf_reg_size comes from the device (or a saved record) and may be anything.
        UarKind::BlueFlame { bf_reg_size } => (0..4u64).any(|k| {
            let reg = k
                .checked_mul(bf_reg_size)
                .and_then(|x| x.checked_add(BF_OFFSET));
            let half = reg.and_then(|r| r.checked_add(bf_reg_size / 2));
            reg == Some(off) || half == Some(off)
        }),
        UarKind::NonCached => NC_OFFSETS.contains(&off),
        UarKind::DbrLess => off == DBR_LESS_OFFSET,
    };
    if !ok_off {
        out.push(Issue {
            kind: "offset",
            message: format!(
                "doorbell at offset 0x{off:x} of its UAR, not a {:?} register offset",
                u.kind
            ),
        });
    }
    // On hosts with pages larger than 4 KiB the mmapped page holds several UARs: the sub-page
    // index in reg_addr - base_addr must agree with page_id's position in that page.
    if u.sys_page > 4096 && u.unit() == 4096 {
        let per = u.sys_page / 4096;
        if u.reg_offset / 4096 != u.page_id % per {
            out.push(Issue {
                kind: "sub-page",
                message: format!(
                    "reg_addr is UAR {} of its {} KiB page but page_id {} is UAR {} of it",
                    u.reg_offset / 4096,
                    u.sys_page / 1024,
                    u.page_id,
                    u.page_id % per
                ),
            });
        }
    }
    if u.uar_4k == Some(true) && u.sys_page == 4096 {
        // Harmless (unit = page) but not what the kernel configures on 4 KiB hosts.
        out.push(Issue {
            kind: "unit",
            message:
                "uar_4k set on a 4 KiB-page host (the kernel enables it only for larger pages)"
                    .into(),
        });
    }
    if let Some(c) = claimed {
        if c != phys {
            let trap = trap_addresses(u)
                .into_iter()
                .find(|(_, a)| *a == c)
                .map(|(n, _)| n);
            out.push(Issue {
                kind: trap.unwrap_or("wrong-address"),
                message: format!(
                    "computed doorbell 0x{c:x} differs from BAR0 + page_id * 0x{:x} + offset = 0x{phys:x} by {}0x{:x}{}",
                    u.unit(),
                    if c > phys { "+" } else { "-" },
                    c.abs_diff(phys),
                    trap.map(|t| format!(" ({t})")).unwrap_or_default()
                ),
            });
        }
    }
    out
}

/// BAR0 (start, size) from a saved `lspci -vv` text (`Region 0: Memory at 3bfff4000000
/// (64-bit, prefetchable) [size=32M]`). With several devices in the text, the block whose header
/// line starts with `bdf` (with or without the `0000:` domain); with one device, that one.
pub fn bar0_from_lspci(text: &str, bdf: Option<&str>) -> Option<(u64, u64)> {
    // Split into device blocks: a header line starts in column 0, details are indented.
    let mut blocks: Vec<(&str, Vec<&str>)> = Vec::new();
    for l in text.lines() {
        if !l.starts_with(char::is_whitespace) && !l.trim().is_empty() {
            blocks.push((l, Vec::new()));
        } else if let Some(b) = blocks.last_mut() {
            b.1.push(l);
        } else {
            blocks.push(("", vec![l]));
        }
    }
    let short = bdf.map(|b| b.strip_prefix("0000:").unwrap_or(b));
    let block = match short {
        Some(s) => blocks
            .iter()
            .find(|(h, _)| {
                h.starts_with(s) || h.strip_prefix("0000:").is_some_and(|h| h.starts_with(s))
            })
            .or(if blocks.len() == 1 {
                blocks.first()
            } else {
                None
            })?,
        None => blocks.first()?,
    };
    let line = block
        .1
        .iter()
        .find(|l| l.trim_start().starts_with("Region 0: Memory at "))?;
    let rest = line.trim_start().strip_prefix("Region 0: Memory at ")?;
    let addr = u64::from_str_radix(rest.split_whitespace().next()?, 16).ok()?;
    let size_txt = rest.split("[size=").nth(1)?.split(']').next()?;
    let (num, mult) = match size_txt.chars().last()? {
        'K' => (&size_txt[..size_txt.len() - 1], 1u64 << 10),
        'M' => (&size_txt[..size_txt.len() - 1], 1 << 20),
        'G' => (&size_txt[..size_txt.len() - 1], 1 << 30),
        'T' => (&size_txt[..size_txt.len() - 1], 1 << 40),
        _ => (size_txt, 1),
    };
    Some((addr, num.parse::<u64>().ok()?.checked_mul(mult)?))
}

/// The emulated-doorbell layout table the GPU self-test rings: (name, system page, unit,
/// page_id, offset in the system page, BlueFlame alternation).
pub fn emulated_layouts() -> Vec<(&'static str, Uar, bool)> {
    let bar0 = 0;
    let size = 1 << 20;
    let mk = |sys_page: u64, uar_4k: Option<bool>, page_id: u64, reg_offset: u64, kind| Uar {
        sys_page,
        uar_4k,
        bar0,
        bar0_size: size,
        page_id,
        reg_offset,
        kind,
        mmap_off: 0,
    };
    let bf = UarKind::BlueFlame { bf_reg_size: 512 };
    vec![
        ("4k-page, uar 5, bf 0", mk(4096, None, 5, 0x800, bf), false),
        (
            "4k-page, uar 5, bf 1 + alternation",
            mk(4096, None, 5, 0xa00, bf),
            true,
        ),
        (
            "4k-page, uar 9, nc 2",
            mk(4096, None, 9, 0xa00, UarKind::NonCached),
            false,
        ),
        (
            "64k-page, uar 16 (first in page), bf 0",
            mk(65536, None, 16, 0x800, bf),
            false,
        ),
        (
            "64k-page, uar 21 (6th in page), bf 0",
            mk(65536, None, 21, 5 * 4096 + 0x800, bf),
            false,
        ),
        (
            "64k-page, uar 31 (last in page), bf 3 + alternation",
            mk(65536, None, 31, 15 * 4096 + 0xe00, bf),
            true,
        ),
        (
            "64k-page, uar 18 (3rd in page), dbr-less",
            mk(65536, None, 18, 2 * 4096 + 0x600, UarKind::DbrLess),
            false,
        ),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn extreme_values_do_not_overflow() {
        // A BAR0 at the top of the address space and a BlueFlame register size from garbage:
        // debug builds used to panic with "attempt to add with overflow".
        let u = Uar {
            sys_page: 4096,
            uar_4k: None,
            bar0: u64::MAX - 0x10,
            bar0_size: 0x1000,
            page_id: 0,
            reg_offset: 0x4,
            kind: UarKind::BlueFlame {
                bf_reg_size: u64::MAX,
            },
            mmap_off: u64::MAX,
        };
        let issues = check(&u, Some(0));
        assert!(
            issues.iter().any(|i| i.kind == "init-segment"),
            "{issues:?}"
        );
        assert!(issues.iter().any(|i| i.kind == "offset"), "{issues:?}");
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn any_kind() -> impl Strategy<Value = UarKind> {
            prop_oneof![
                any::<u64>().prop_map(|bf_reg_size| UarKind::BlueFlame { bf_reg_size }),
                Just(UarKind::NonCached),
                Just(UarKind::DbrLess),
            ]
        }

        fn edge() -> impl Strategy<Value = u64> {
            prop_oneof![
                any::<u64>(),
                Just(0u64),
                Just(u64::MAX),
                Just(u64::MAX - 0xfff),
                Just(4096u64),
                Just(65536u64),
            ]
        }

        proptest! {
            #[test]
            fn check_never_panics(
                sys_page in edge(), uar_4k in any::<Option<bool>>(), bar0 in edge(),
                bar0_size in edge(), page_id in edge(), reg_offset in edge(),
                kind in any_kind(), mmap_off in edge(), claimed in any::<Option<u64>>(),
            ) {
                let u = Uar { sys_page, uar_4k, bar0, bar0_size, page_id, reg_offset, kind, mmap_off };
                let _ = u.unit();
                let _ = u.doorbell_phys();
                let _ = trap_addresses(&u);
                let issues = check(&u, claimed);
                // The correct address never gets a "wrong address" verdict against itself.
                let own = check(&u, Some(u.doorbell_phys()));
                prop_assert!(own.iter().all(|i| i.kind != "wrong-address"), "{own:?}");
                prop_assert!(issues.len() <= 6);
            }
        }
    }

    fn uar(sys_page: u64, page_id: u64, reg_offset: u64) -> Uar {
        // mmap cookie of a dynamic UAR: ((MLX5_IB_MMAP_ALLOC_WC << 8) | idx) * page_size.
        Uar {
            sys_page,
            uar_4k: None,
            bar0: 0x3bff_f400_0000,
            bar0_size: 32 << 20,
            page_id,
            reg_offset,
            kind: UarKind::BlueFlame { bf_reg_size: 512 },
            mmap_off: ((6 << 8) | page_id) * sys_page,
        }
    }

    #[test]
    fn correct_formula_on_4k_and_64k_hosts() {
        let u = uar(4096, 7, 0xa00);
        assert_eq!(u.unit(), 4096);
        assert_eq!(u.doorbell_phys(), 0x3bff_f400_0000 + 7 * 4096 + 0xa00);
        assert!(check(&u, Some(u.doorbell_phys())).is_empty());
        // 64 KiB host: UAR 21 is the 6th 4 KiB UAR of its system page.
        let u = uar(65536, 21, 5 * 4096 + 0x800);
        assert_eq!(u.unit(), 4096);
        assert_eq!(u.doorbell_phys(), 0x3bff_f400_0000 + 21 * 4096 + 0x800);
        assert!(check(&u, None).is_empty(), "{:?}", check(&u, None));
    }

    #[test]
    fn each_trap_is_caught_and_named() {
        // Trap 1: page_id in system pages on a 64 KiB host: 16x the offset (still inside this
        // 32 MiB BAR0, so only the comparison with the right address catches it).
        let u = uar(65536, 21, 5 * 4096 + 0x800);
        let traps = trap_addresses(&u);
        assert_eq!(traps.len(), 4);
        for (name, addr) in &traps {
            assert_ne!(
                *addr,
                u.doorbell_phys(),
                "{name} must differ from the right answer"
            );
            let issues = check(&u, Some(*addr));
            assert!(issues.iter().any(|i| i.kind == *name), "{name}: {issues:?}");
        }
        // Trap 2 on a 4 KiB host only bites when the UAR is not the first of its page: on 4 KiB
        // pages reg_offset < 4096, so double counting is harmless there.
        let u4 = uar(4096, 7, 0xa00);
        let dbl = trap_addresses(&u4)
            .into_iter()
            .find(|(n, _)| *n == "double-counted-subpage")
            .unwrap()
            .1;
        assert_eq!(dbl, u4.doorbell_phys());
        // Trap 3: DBR-less from base_addr is right only for the first UAR of the page.
        let first = uar(65536, 16, 0x600);
        let dbr = trap_addresses(&first)
            .into_iter()
            .find(|(n, _)| *n == "dbr-less-from-base")
            .unwrap()
            .1;
        assert_eq!(dbr, first.doorbell_phys());
    }

    #[test]
    fn bar0_bounds_init_segment_offsets_and_subpage() {
        let mut u = uar(4096, 0, 0x800);
        assert!(check(&u, None).iter().any(|i| i.kind == "init-segment"));
        u.page_id = (32 << 20) / 4096;
        assert!(check(&u, None).iter().any(|i| i.kind == "outside-bar0"));
        let u = uar(4096, 7, 0x700);
        assert!(check(&u, None).iter().any(|i| i.kind == "offset"));
        let nc = Uar {
            kind: UarKind::NonCached,
            ..uar(4096, 7, 0x900)
        };
        assert!(check(&nc, None).is_empty());
        // page_id says 3rd UAR of the 64 KiB page, reg_addr says 6th.
        let u = uar(65536, 18, 5 * 4096 + 0x800);
        assert!(check(&u, None).iter().any(|i| i.kind == "sub-page"));
        // uar_4k queried: on a 64 KiB host without it, the unit is the system page.
        let u = Uar {
            uar_4k: Some(false),
            ..uar(65536, 3, 0x800)
        };
        assert_eq!(u.doorbell_phys(), u.bar0 + 3 * 65536 + 0x800);
    }

    #[test]
    fn lspci_region_zero() {
        let t = "3b:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n\tRegion 0: Memory at 3bfff4000000 (64-bit, prefetchable) [size=32M]\n\tExpansion ROM at <ignored> [disabled]\n";
        assert_eq!(bar0_from_lspci(t, None), Some((0x3bff_f400_0000, 32 << 20)));
        assert_eq!(
            bar0_from_lspci(t, Some("0000:3b:00.0")),
            Some((0x3bff_f400_0000, 32 << 20))
        );
        assert_eq!(bar0_from_lspci("nothing", None), None);
        assert_eq!(
            bar0_from_lspci("\tRegion 0: Memory at zz (64-bit) [size=1M]", None),
            None
        );
        // Two NICs in one file: each device gets its own block, not the first Region 0.
        let two = format!("{t}5e:00.0 Infiniband controller: Mellanox\n\tRegion 0: Memory at 5efff4000000 (64-bit, prefetchable) [size=64M]\n");
        assert_eq!(
            bar0_from_lspci(&two, Some("5e:00.0")),
            Some((0x5eff_f400_0000, 64 << 20))
        );
        assert_eq!(
            bar0_from_lspci(&two, Some("0000:3b:00.0")),
            Some((0x3bff_f400_0000, 32 << 20))
        );
        assert_eq!(bar0_from_lspci(&two, Some("0000:99:00.0")), None);
    }

    #[test]
    fn emulated_layouts_are_all_valid() {
        for (name, u, _) in emulated_layouts() {
            assert!(
                check(&u, None).iter().all(|i| i.kind == "init-segment"),
                "{name}: {:?}",
                check(&u, None)
            );
        }
    }
}
