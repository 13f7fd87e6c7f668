//! RoCE addressing as NCCL sees it: the GID table (addresses, RoCE v1/v2 types), the GID index
//! NCCL's `ncclIbGetGidIndex()` picks in each version, and the RoCE MTU the kernel derives from
//! the netdev MTU.
//!
//! Sources (NVIDIA/nccl, read per tag with `git show <tag>:<file>`):
//! - v2.30.7-1 `src/transport/net_ib/connect.cc`: params L12-14 (`NCCL_IB_GID_INDEX` -1,
//!   `NCCL_IB_ROUTABLE_FLID_GID_INDEX` 1, `NCCL_IB_ROCE_VERSION_NUM` 2), `envIbAddrFamily()`
//!   L101-117, `envIbAddrRange()` L119-161, `getGidAddrFamily()` L163-169,
//!   `matchGidAddrPrefix()` L171-211, `configuredGid()` L213-220, `linkLocalGid()` L222-228,
//!   `validGid()` L230-232, `ncclIbRoceGetVersionNum()` L234-266, `ncclUpdateGidIndex()`
//!   L268-296, `ncclIbGetGidIndex()` L298-334; the QP MTU is `min(remote, local active_mtu)`
//!   L759.
//! - v2.20.5-1 `src/transport/net_ib.cc` L80: `NCCL_IB_GID_INDEX` defaults to 0 and is used as
//!   is (L838, L1028): no selection before 2.21.
//! - v2.21.5-1 `src/transport/net_ib.cc` L80-81, `ncclIbGetGidIndex()` L292: the selection
//!   arrives (default index -1 = auto, RoCE v2, AF_INET).
//! - v2.26.2-1 `src/transport/net_ib.cc` L338: a type read failing with EINVAL (containers) is
//!   tolerated; before, every read error aborts the connection.
//! - v2.30.7-1 `src/misc/param.cc` L90-101: integer parameters are `strtoll(s, NULL, 0)`, and
//!   only an `errno` (overflow) falls back to the default.
//! - rdma-core `libibverbs/verbs.c` `ibv_query_gid()`: an empty table entry reads as the zero
//!   GID (ENODATA is hidden), so NCCL sees zeros where sysfs shows
//!   `0000:0000:0000:0000:0000:0000:0000:0000`.
//! - Linux `include/rdma/ib_addr.h` `iboe_get_mtu()`: RoCE active MTU = the largest IB MTU not
//!   above `netdev mtu - (GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4)`;
//!   `drivers/infiniband/hw/mlx5/main.c` `mlx5_query_port_roce()` takes `min(max_mtu, that)`.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A GID: 16 bytes in network order.
pub type Gid = [u8; 16];

/// Parse a GID as sysfs prints it (`fe80:0000:0000:0000:0ac0:ebff:fef0:28b2`) or as
/// `ibv_devinfo -v` does (`fe80::ac0:ebff:fef0:28b2`, `::ffff:27.105.179.3`).
/// A bare IPv4 address (what [`display`] prints for IPv4-mapped GIDs) is read as `::ffff:a.b.c.d`.
pub fn parse_gid(s: &str) -> Option<Gid> {
    let s = s.trim();
    match s.parse::<Ipv6Addr>() {
        Ok(a) => Some(a.octets()),
        Err(_) => s
            .parse::<Ipv4Addr>()
            .ok()
            .map(|a| a.to_ipv6_mapped().octets()),
    }
}

fn word(g: &Gid, i: usize) -> u32 {
    u32::from_be_bytes([g[4 * i], g[4 * i + 1], g[4 * i + 2], g[4 * i + 3]])
}

/// The address family NCCL asks for and GIDs belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Inet,
    Inet6,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Inet => "AF_INET",
            Family::Inet6 => "AF_INET6",
        }
    }
    pub fn short(self) -> &'static str {
        match self {
            Family::Inet => "IPv4",
            Family::Inet6 => "IPv6",
        }
    }
}

/// `getGidAddrFamily()`: IPv4-mapped (`::ffff:a.b.c.d`) and IPv4-mapped multicast
/// (`ff0e::ffff:a.b.c.d`) GIDs are AF_INET, everything else (the zero GID included) AF_INET6.
pub fn family(g: &Gid) -> Family {
    let mapped = (word(g, 0) | word(g, 1)) == 0 && word(g, 2) == 0x0000_ffff;
    let mapped_mc = word(g, 0) == 0xff0e_0000 && word(g, 1) == 0 && word(g, 2) == 0x0000_ffff;
    if mapped || mapped_mc {
        Family::Inet
    } else {
        Family::Inet6
    }
}

/// `configuredGid()`: not the zero GID and not the bare `fe80::` prefix.
pub fn configured(g: &Gid) -> bool {
    let trailer = word(g, 1) | word(g, 2) | word(g, 3);
    !((word(g, 0) | trailer) == 0 || (word(g, 0) == 0xfe80_0000 && trailer == 0))
}

/// `linkLocalGid()`: `fe80::/64`.
pub fn link_local(g: &Gid) -> bool {
    word(g, 0) == 0xfe80_0000 && word(g, 1) == 0
}

/// `validGid()`: configured and not link-local.
pub fn valid(g: &Gid) -> bool {
    configured(g) && !link_local(g)
}

pub fn is_zero(g: &Gid) -> bool {
    g.iter().all(|&b| b == 0)
}

/// The IPv4 address of an IPv4-mapped GID.
pub fn ipv4(g: &Gid) -> Option<Ipv4Addr> {
    (family(g) == Family::Inet).then(|| Ipv4Addr::new(g[12], g[13], g[14], g[15]))
}

/// Human form: `10.0.0.1` for IPv4-mapped GIDs, compressed IPv6 otherwise.
pub fn display(g: &Gid) -> String {
    match ipv4(g) {
        Some(a) if word(g, 0) == 0 => a.to_string(),
        _ => Ipv6Addr::from(*g).to_string(),
    }
}

/// A GID's RoCE type from `gid_attrs/types/<i>` (`ncclIbRoceGetVersionNum()`: prefix match on
/// `IB/RoCE v1`, `RoCE v1`, `RoCE v2`).
pub fn roce_version(type_text: &str) -> Option<i64> {
    let t = type_text.trim_start();
    if t.starts_with("IB/RoCE v1") || t.starts_with("RoCE v1") {
        Some(1)
    } else if t.starts_with("RoCE v2") {
        Some(2)
    } else {
        None
    }
}

/// What reading `gid_attrs/types/<i>` gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeRead {
    Text(String),
    /// `read()` failed with EINVAL (a GID not mapped into a container's sysfs).
    Einval,
    /// Any other failure (missing file, ENODATA for an empty entry, ...), with the reason.
    Error(String),
}

/// One populated GID table entry as the rules need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub index: u32,
    pub gid: Gid,
    pub kind: TypeRead,
}

/// An NCCL version: the one type the NCCL rules use (`crate::nccl::Version`).
pub use crate::nccl::Version as NcclVersion;

/// NCCL's GID selection appears in 2.21.
pub const AUTO_GID_SINCE: NcclVersion = NcclVersion::new(2, 21, 0);
/// EINVAL from a type read is tolerated since 2.26.
pub const EINVAL_TOLERATED_SINCE: NcclVersion = NcclVersion::new(2, 26, 0);

/// `strtoll(s, NULL, 0)` as glibc does it: leading blanks, a sign, `0x`/`0` prefixes; no digits
/// gives 0. `None` on overflow (errno ERANGE: NCCL then keeps the default).
pub fn strtoll0(s: &str) -> Option<i64> {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if (t.starts_with("0x") || t.starts_with("0X"))
        && t[2..].starts_with(|c: char| c.is_ascii_hexdigit())
    {
        (16, &t[2..])
    } else if t.starts_with('0') {
        (8, t)
    } else {
        (10, t)
    };
    let mut v: i128 = 0;
    for c in digits.chars() {
        let Some(d) = c.to_digit(radix) else { break };
        v = v * i128::from(radix) + i128::from(d);
        if v > i128::from(i64::MAX) + 1 {
            return None;
        }
    }
    let v = if neg { -v } else { v };
    i64::try_from(v).ok()
}

/// `strtol(s, NULL, 10)`: the mask in `NCCL_IB_ADDR_RANGE`.
fn strtol10(s: &str) -> i64 {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut v: i64 = 0;
    for c in t.chars() {
        let Some(d) = c.to_digit(10) else { break };
        v = v.saturating_mul(10).saturating_add(i64::from(d));
    }
    if neg {
        -v
    } else {
        v
    }
}

/// The environment NCCL's GID selection reads, decoded as NCCL decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEnv {
    /// `NCCL_IB_GID_INDEX` after `strtoll`; `None` = unset, empty or overflowing (the default).
    pub gid_index: Option<i64>,
    /// `NCCL_IB_ADDR_FAMILY`: `AF_INET6` exactly gives AF_INET6, anything else AF_INET.
    pub family: Family,
    /// `NCCL_IB_ROCE_VERSION_NUM` (default 2).
    pub roce_version: i64,
    /// `NCCL_IB_ADDR_RANGE` as NCCL keeps it: the prefix bytes (4 or 16) and the mask length;
    /// `None` when unset or ignored (no `/`, an address of the wrong family, a mask too long).
    pub range: Option<(Vec<u8>, i64)>,
    /// What was set, for evidence (`NCCL_IB_GID_INDEX=3`).
    pub set: Vec<String>,
    /// Values NCCL ignores or reads differently than intended.
    pub notes: Vec<String>,
}

pub fn gid_env(env: &BTreeMap<String, String>) -> GidEnv {
    let get = |k: &str| env.get(k).filter(|v| !v.is_empty());
    let mut notes = Vec::new();
    let mut set = Vec::new();
    let gid_index = match get("NCCL_IB_GID_INDEX") {
        Some(v) => {
            set.push(format!("NCCL_IB_GID_INDEX={v}"));
            let n = strtoll0(v);
            if n.is_none() {
                notes.push(format!(
                    "NCCL_IB_GID_INDEX={v} overflows: NCCL keeps its default"
                ));
            } else if v.trim().parse::<i64>().is_err() {
                notes.push(format!(
                    "NCCL_IB_GID_INDEX={v} is not a plain number: NCCL reads it as {}",
                    n.unwrap_or(0)
                ));
            }
            n
        }
        None => None,
    };
    let family = match get("NCCL_IB_ADDR_FAMILY") {
        Some(v) => {
            set.push(format!("NCCL_IB_ADDR_FAMILY={v}"));
            if v == "AF_INET6" {
                Family::Inet6
            } else {
                if v != "AF_INET" {
                    notes.push(format!(
                        "NCCL_IB_ADDR_FAMILY={v} is neither AF_INET nor AF_INET6: NCCL uses AF_INET"
                    ));
                }
                Family::Inet
            }
        }
        None => Family::Inet,
    };
    let roce_version = match get("NCCL_IB_ROCE_VERSION_NUM") {
        Some(v) => {
            set.push(format!("NCCL_IB_ROCE_VERSION_NUM={v}"));
            strtoll0(v).unwrap_or(2)
        }
        None => 2,
    };
    let range = match get("NCCL_IB_ADDR_RANGE") {
        Some(v) => {
            set.push(format!("NCCL_IB_ADDR_RANGE={v}"));
            let parsed = v.split_once('/').and_then(|(addr, mask)| {
                let bytes = match family {
                    Family::Inet => addr.parse::<Ipv4Addr>().ok().map(|a| a.octets().to_vec()),
                    Family::Inet6 => addr.parse::<Ipv6Addr>().ok().map(|a| a.octets().to_vec()),
                }?;
                let m = strtol10(mask);
                let max = if family == Family::Inet { 32 } else { 128 };
                (m <= max).then_some((bytes, m))
            });
            if parsed.is_none() {
                notes.push(format!(
                    "NCCL_IB_ADDR_RANGE={v} is ignored by NCCL (needs `<{} address>/<mask>`)",
                    family.short()
                ));
            }
            parsed
        }
        None => None,
    };
    GidEnv {
        gid_index,
        family,
        roce_version,
        range,
        set,
        notes,
    }
}

/// `matchGidAddrPrefix()`, including its corner cases (a negative mask matches nothing, a zero
/// mask everything).
pub fn match_prefix(family: Family, range: Option<&(Vec<u8>, i64)>, g: &Gid) -> bool {
    let Some((prefix, len)) = range else {
        return true;
    };
    let mut prefixlen = *len;
    let netmask = |bits: i64| -> u32 {
        if bits >= 32 {
            u32::MAX
        } else {
            u32::MAX ^ ((1u32 << (32 - bits)) - 1)
        }
    };
    let pword = |i: usize| -> u32 {
        let b = |k: usize| prefix.get(4 * i + k).copied().unwrap_or(0);
        u32::from_be_bytes([b(0), b(1), b(2), b(3)])
    };
    let mut i = 0;
    while prefixlen > 0 && i < 4 {
        match family {
            Family::Inet => {
                let m = netmask(prefixlen);
                if (pword(0) & m) != (word(g, 3) & m) {
                    break;
                }
                prefixlen = 0;
                break;
            }
            Family::Inet6 => {
                if prefixlen >= 32 {
                    if pword(i) != word(g, i) {
                        break;
                    }
                    prefixlen -= 32;
                    i += 1;
                } else {
                    let m = netmask(prefixlen);
                    if (pword(i) & m) != (word(g, i) & m) {
                        break;
                    }
                    prefixlen = 0;
                }
            }
        }
    }
    prefixlen == 0
}

/// NCCL's pick, and how it came to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The index NCCL uses; `None` when NCCL's selection itself fails (connections fail).
    pub index: Option<u32>,
    /// Which rule applied: `NCCL >= 2.26 (newest rules; NCCL version unknown)`.
    pub rules: String,
    /// How the index was reached (`NCCL_IB_GID_INDEX=3`, `auto: ...`).
    pub how: String,
    /// Why NCCL's selection fails, when it does.
    pub failure: Option<String>,
}

fn zero() -> Gid {
    [0; 16]
}

/// `ncclIbGetGidIndex()` for a RoCE port, in the given NCCL version (newest rules when `None`).
pub fn nccl_gid_index(
    tbl_len: usize,
    entries: &[Entry],
    env: &GidEnv,
    version: Option<NcclVersion>,
) -> Choice {
    let by_index: BTreeMap<u32, &Entry> = entries.iter().map(|e| (e.index, e)).collect();
    let gid = |i: u32| by_index.get(&i).map(|e| e.gid).unwrap_or_else(zero);
    let rules = match version {
        None => "NCCL >= 2.26 rules (the NCCL version is unknown: newest rules)".to_string(),
        Some(v) if v < AUTO_GID_SINCE => format!("NCCL {v} rules (before 2.21: no GID selection)"),
        Some(v) if v < EINVAL_TOLERATED_SINCE => {
            format!("NCCL {v} rules (2.21-2.25: any GID type read error aborts)")
        }
        Some(v) => format!("NCCL {v} rules (>= 2.26)"),
    };
    if version.is_some_and(|v| v < AUTO_GID_SINCE) {
        // Before 2.21 the index is the parameter, default 0 (v2.20.5-1 net_ib.cc L80).
        let idx = env.gid_index.unwrap_or(0);
        return fixed_index(idx, tbl_len, rules, env.gid_index.is_some());
    }
    if let Some(idx) = env.gid_index.filter(|i| *i >= 0) {
        return fixed_index(idx, tbl_len, rules, true);
    }
    let tolerate_einval = version.is_none_or(|v| v >= EINVAL_TOLERATED_SINCE);
    let usr = env.family;
    let read_type = |i: u32| -> Result<Option<i64>, String> {
        match by_index.get(&i).map(|e| &e.kind) {
            Some(TypeRead::Text(t)) => Ok(roce_version(t)),
            Some(TypeRead::Einval) if tolerate_einval => Ok(None),
            Some(TypeRead::Einval) => Err(format!(
                "reading gid_attrs/types/{i} fails with EINVAL, which NCCL < 2.26 does not tolerate"
            )),
            Some(TypeRead::Error(e)) => Err(format!("gid_attrs/types/{i} cannot be read ({e})")),
            None => Err(format!(
                "gid_attrs/types/{i} cannot be read (no GID at that index: ENODATA)"
            )),
        }
    };
    let mut idx: u32 = 0;
    let len = u32::try_from(tbl_len).unwrap_or(u32::MAX);
    let mut steps: Vec<String> = Vec::new();
    for cand in 1..len {
        let g = gid(idx);
        let c = gid(cand);
        let cfam = family(&c);
        let matched = match_prefix(usr, env.range.as_ref(), &c);
        if cfam != family(&g) && cfam == usr && matched {
            steps.push(format!("{cand} ({}, family)", display(&c)));
            idx = cand;
            continue;
        }
        if cfam != usr || !valid(&c) || !matched {
            continue;
        }
        let vg = match read_type(idx) {
            Ok(v) => v,
            Err(e) => return failed(rules, e),
        };
        let vc = match read_type(cand) {
            Ok(v) => v,
            Err(e) => return failed(rules, e),
        };
        if (vg != vc || !valid(&g)) && vc == Some(env.roce_version) {
            steps.push(format!(
                "{cand} ({}, RoCE v{})",
                display(&c),
                env.roce_version
            ));
            idx = cand;
        }
    }
    let how = if steps.is_empty() {
        format!(
            "auto: no GID of family {} with RoCE v{} beat index 0",
            usr.name(),
            env.roce_version
        )
    } else {
        format!("auto: 0 -> {}", steps.join(" -> "))
    };
    Choice {
        index: Some(idx),
        rules,
        how,
        failure: None,
    }
}

fn failed(rules: String, why: String) -> Choice {
    Choice {
        index: None,
        rules,
        how: "auto".into(),
        failure: Some(format!(
            "NCCL's GID selection fails: {why}; NCCL then fails to connect (`NET/IB: ... ncclIbRoceGetVersionNum`)"
        )),
    }
}

fn fixed_index(idx: i64, tbl_len: usize, rules: String, from_env: bool) -> Choice {
    let how = if from_env {
        format!("NCCL_IB_GID_INDEX={idx}")
    } else {
        "NCCL_IB_GID_INDEX default 0".to_string()
    };
    match u32::try_from(idx) {
        Ok(i) if (i as usize) < tbl_len => Choice {
            index: Some(i),
            rules,
            how,
            failure: None,
        },
        _ => Choice {
            index: None,
            rules,
            how: how.clone(),
            failure: Some(format!(
                "{how} is outside the GID table (0..{}): `ibv_query_gid` fails and NCCL cannot connect",
                tbl_len.saturating_sub(1)
            )),
        },
    }
}

/// The best index for what NCCL asks (family, RoCE version, range), to suggest in a fix.
pub fn best_index(entries: &[Entry], env: &GidEnv) -> Option<u32> {
    entries
        .iter()
        .filter(|e| {
            family(&e.gid) == env.family
                && valid(&e.gid)
                && match_prefix(env.family, env.range.as_ref(), &e.gid)
                && matches!(&e.kind, TypeRead::Text(t) if roce_version(t) == Some(env.roce_version))
        })
        .map(|e| e.index)
        .min()
}

/// `iboe_get_mtu()`: the IB MTU a netdev MTU leaves room for (0 when below 256).
pub fn iboe_mtu(netdev_mtu: u32) -> u32 {
    const OVERHEAD: i64 = 40 + 8 + 12 + 4 + 28 + 4;
    let m = i64::from(netdev_mtu) - OVERHEAD;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&ib| m >= ib)
        .map(|v| v as u32)
        .unwrap_or(0)
}

/// The RoCE active MTU of an mlx5 port (max_mtu 4096) on a netdev with this MTU.
pub fn roce_active_mtu(netdev_mtu: u32) -> u32 {
    iboe_mtu(netdev_mtu).min(4096)
}

/// The smallest netdev MTU that gives a RoCE MTU of 4096.
pub const NETDEV_MTU_FOR_4096: u32 = 4096 + 96;

/// GID lines of `ibv_devinfo -v` (`GID[  3]:  ::ffff:27.105.179.3, RoCE v2`), for pasted
/// evidence and tests: (index, gid, type text).
pub fn parse_ibv_devinfo_gids(text: &str) -> Vec<(u32, Gid, String)> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("GID[")?;
            let (idx, rest) = rest.split_once(']')?;
            let idx: u32 = idx.trim().parse().ok()?;
            let rest = rest.trim_start_matches(':').trim();
            let (g, kind) = match rest.split_once(',') {
                Some((g, k)) => (g.trim(), k.trim().to_string()),
                None => (rest, String::new()),
            };
            Some((idx, parse_gid(g)?, kind))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    fn e(i: u32, g: &str, t: &str) -> Entry {
        Entry {
            index: i,
            gid: parse_gid(g).unwrap(),
            kind: TypeRead::Text(t.into()),
        }
    }

    /// What a ConnectX port with one IPv4 address shows (realdata notes-cx6dx-roce-bond).
    fn cx6dx() -> Vec<Entry> {
        vec![
            e(0, "fe80::ac0:ebff:fef0:28b2", "IB/RoCE v1"),
            e(1, "fe80::ac0:ebff:fef0:28b2", "RoCE v2"),
            e(2, "::ffff:27.105.179.3", "IB/RoCE v1"),
            e(3, "::ffff:27.105.179.3", "RoCE v2"),
        ]
    }

    fn env(kv: &[(&str, &str)]) -> GidEnv {
        gid_env(
            &kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn gid_classes_match_nccl() {
        let ll = parse_gid("fe80:0000:0000:0000:0ac0:ebff:fef0:28b2").unwrap();
        assert!(configured(&ll) && link_local(&ll) && !valid(&ll));
        assert_eq!(family(&ll), Family::Inet6);
        let v4 = parse_gid("0000:0000:0000:0000:0000:ffff:0a00:0001").unwrap();
        assert!(valid(&v4));
        assert_eq!(family(&v4), Family::Inet);
        assert_eq!(display(&v4), "10.0.0.1");
        assert!(!configured(&zero()));
        assert_eq!(family(&zero()), Family::Inet6);
        assert!(!configured(&parse_gid("fe80::").unwrap()));
        let mc = parse_gid("ff0e::ffff:239.1.1.1").unwrap();
        assert_eq!(family(&mc), Family::Inet);
    }

    #[test]
    fn default_rules_pick_the_ipv4_roce_v2_gid() {
        // connect.cc L298-334: 0 (fe80 v1) -> 2 (first IPv4, family differs) -> 3 (v2 wins).
        let c = nccl_gid_index(255, &cx6dx(), &env(&[]), None);
        assert_eq!(c.index, Some(3), "{c:?}");
        assert!(c.how.contains("0 -> 2"), "{}", c.how);
        assert_eq!(best_index(&cx6dx(), &env(&[])), Some(3));
    }

    #[test]
    fn v1_only_table_ends_on_a_v1_gid() {
        let t = vec![
            e(0, "fe80::1", "IB/RoCE v1"),
            e(1, "::ffff:10.1.1.1", "IB/RoCE v1"),
        ];
        let c = nccl_gid_index(256, &t, &env(&[]), None);
        assert_eq!(c.index, Some(1));
        assert_eq!(best_index(&t, &env(&[])), None);
    }

    #[test]
    fn no_ipv4_address_leaves_index_zero() {
        let t = vec![e(0, "fe80::1", "IB/RoCE v1"), e(1, "fe80::1", "RoCE v2")];
        assert_eq!(nccl_gid_index(256, &t, &env(&[]), None).index, Some(0));
    }

    #[test]
    fn ipv6_family_and_version_one() {
        let mut t = cx6dx();
        t.push(e(4, "2001:db8::5", "IB/RoCE v1"));
        t.push(e(5, "2001:db8::5", "RoCE v2"));
        let c = nccl_gid_index(255, &t, &env(&[("NCCL_IB_ADDR_FAMILY", "AF_INET6")]), None);
        assert_eq!(c.index, Some(5), "{c:?}");
        let c = nccl_gid_index(
            255,
            &cx6dx(),
            &env(&[("NCCL_IB_ROCE_VERSION_NUM", "1")]),
            None,
        );
        assert_eq!(c.index, Some(2), "{c:?}");
    }

    #[test]
    fn addr_range_selects_the_subnet() {
        let mut t = cx6dx();
        t.push(e(4, "::ffff:10.2.0.7", "IB/RoCE v1"));
        t.push(e(5, "::ffff:10.2.0.7", "RoCE v2"));
        // Without a range the first IPv4 RoCE v2 GID stays: a later one of the same type never
        // replaces it (ncclUpdateGidIndex() needs a type change or an invalid current GID).
        assert_eq!(nccl_gid_index(255, &t, &env(&[]), None).index, Some(3));
        let c = nccl_gid_index(
            255,
            &t,
            &env(&[("NCCL_IB_ADDR_RANGE", "10.2.0.0/16")]),
            None,
        );
        assert_eq!(c.index, Some(5), "{c:?}");
        let c = nccl_gid_index(
            255,
            &t,
            &env(&[("NCCL_IB_ADDR_RANGE", "27.105.0.0/16")]),
            None,
        );
        assert_eq!(c.index, Some(3), "{c:?}");
        // No `/`: ignored, as in envIbAddrRange().
        let en = env(&[("NCCL_IB_ADDR_RANGE", "27.105.0.0")]);
        assert!(en.range.is_none() && !en.notes.is_empty());
        // A negative mask matches nothing: NCCL never leaves index 0.
        let c = nccl_gid_index(
            255,
            &t,
            &env(&[("NCCL_IB_ADDR_RANGE", "27.105.0.0/-1")]),
            None,
        );
        assert_eq!(c.index, Some(0));
        // Mask too long for IPv4: ignored.
        assert!(env(&[("NCCL_IB_ADDR_RANGE", "10.0.0.0/33")])
            .range
            .is_none());
    }

    #[test]
    fn explicit_index_and_old_versions() {
        let t = cx6dx();
        let c = nccl_gid_index(255, &t, &env(&[("NCCL_IB_GID_INDEX", "1")]), None);
        assert_eq!((c.index, c.how.as_str()), (Some(1), "NCCL_IB_GID_INDEX=1"));
        // Before 2.21 (v2.20.5-1 net_ib.cc L80): index 0 unless set.
        let c = nccl_gid_index(255, &t, &env(&[]), NcclVersion::parse("2.20.5"));
        assert_eq!(c.index, Some(0));
        assert!(c.rules.contains("before 2.21"));
        // -1 means auto from 2.21 on.
        let c = nccl_gid_index(255, &t, &env(&[("NCCL_IB_GID_INDEX", "-1")]), None);
        assert_eq!(c.index, Some(3));
        // Out of the table.
        let c = nccl_gid_index(4, &t, &env(&[("NCCL_IB_GID_INDEX", "7")]), None);
        assert!(c.index.is_none() && c.failure.unwrap().contains("outside"));
        // strtoll base 0: "0x3" is 3, "abc" is 0.
        assert_eq!(env(&[("NCCL_IB_GID_INDEX", "0x3")]).gid_index, Some(3));
        assert_eq!(env(&[("NCCL_IB_GID_INDEX", "abc")]).gid_index, Some(0));
        assert_eq!(
            env(&[("NCCL_IB_GID_INDEX", "99999999999999999999")]).gid_index,
            None
        );
    }

    #[test]
    fn einval_is_tolerated_from_2_26_only() {
        let mut t = cx6dx();
        t[2].kind = TypeRead::Einval;
        t[3].kind = TypeRead::Einval;
        let new = nccl_gid_index(255, &t, &env(&[]), NcclVersion::parse("2.26.2"));
        assert!(new.failure.is_none(), "{new:?}");
        // Index 2 (family switch) is kept: its type is unknown, candidate 3's too.
        assert_eq!(new.index, Some(2));
        let old = nccl_gid_index(255, &t, &env(&[]), NcclVersion::parse("2.25.1"));
        assert!(old.index.is_none());
        assert!(old.failure.unwrap().contains("EINVAL"));
        // A missing types file aborts in every version.
        let mut t = cx6dx();
        t[3].kind = TypeRead::Error("not found".into());
        assert!(nccl_gid_index(255, &t, &env(&[]), None).index.is_none());
    }

    #[test]
    fn ibv_devinfo_gid_lines() {
        let text = "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0ac0:ebff:fef0:28b2, RoCE v1\n\t\t\tGID[  3]:\t\t::ffff:27.105.179.3, RoCE v2\n";
        let g = parse_ibv_devinfo_gids(text);
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[1].0, display(&g[1].1), g[1].2.as_str()),
            (3, "27.105.179.3".into(), "RoCE v2")
        );
    }

    #[test]
    fn roce_mtu_from_netdev_mtu() {
        // include/rdma/ib_addr.h iboe_get_mtu(): 96 bytes of headers.
        assert_eq!(roce_active_mtu(9000), 4096);
        assert_eq!(roce_active_mtu(4192), 4096);
        assert_eq!(roce_active_mtu(4191), 2048);
        assert_eq!(roce_active_mtu(4096), 2048);
        assert_eq!(roce_active_mtu(1500), 1024);
        assert_eq!(roce_active_mtu(300), 0);
        assert_eq!(NETDEV_MTU_FOR_4096, 4192);
    }

    #[test]
    fn nccl_versions_parse() {
        assert_eq!(
            NcclVersion::parse("v2.21.5-1"),
            Some(NcclVersion::new(2, 21, 5))
        );
        assert_eq!(NcclVersion::parse("2.28"), Some(NcclVersion::new(2, 28, 0)));
        assert_eq!(NcclVersion::parse("x"), None);
    }

    fn arb_entry() -> impl Strategy<Value = Entry> {
        (
            0u32..16,
            prop::array::uniform16(prop_oneof![
                Just(0u8),
                Just(0xffu8),
                Just(0xfeu8),
                Just(0x80u8),
                any::<u8>()
            ]),
            prop_oneof![
                Just(TypeRead::Text("RoCE v2".into())),
                Just(TypeRead::Text("IB/RoCE v1".into())),
                Just(TypeRead::Text("garbage".into())),
                Just(TypeRead::Einval),
                Just(TypeRead::Error("x".into())),
            ],
        )
            .prop_map(|(index, gid, kind)| Entry { index, gid, kind })
    }

    proptest! {
        #[test]
        fn selection_never_panics_and_stays_in_the_table(
            entries in prop::collection::vec(arb_entry(), 0..12),
            len in 0usize..20,
            idx in prop::option::of(".{0,6}"),
            fam in prop::option::of(prop_oneof![Just("AF_INET6".to_string()), ".{0,8}"]),
            range in prop::option::of(".{0,20}"),
            ver in prop::option::of((2u32..3, 0u32..32, 0u32..10)),
        ) {
            let mut m = BTreeMap::new();
            if let Some(v) = idx { m.insert("NCCL_IB_GID_INDEX".to_string(), v); }
            if let Some(v) = fam { m.insert("NCCL_IB_ADDR_FAMILY".to_string(), v); }
            if let Some(v) = range { m.insert("NCCL_IB_ADDR_RANGE".to_string(), v); }
            let en = gid_env(&m);
            let v = ver.map(|(a, b, c)| NcclVersion::new(a, b, c));
            let c = nccl_gid_index(len, &entries, &en, v);
            if let Some(i) = c.index {
                prop_assert!((i as usize) < len.max(1));
            } else {
                prop_assert!(c.failure.is_some());
            }
        }

        #[test]
        fn gid_text_round_trips(bytes in prop::array::uniform16(any::<u8>())) {
            let sysfs = bytes.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect::<Vec<_>>().join(":");
            prop_assert_eq!(parse_gid(&sysfs), Some(bytes));
            prop_assert_eq!(parse_gid(&display(&bytes)), Some(bytes));
        }

        #[test]
        fn strtoll_never_panics(s in ".{0,24}") {
            let _ = strtoll0(&s);
            let _ = strtol10(&s);
        }
    }
}
