//! The `NCCL_*` variables that change the GDR answer, parsed the way the chosen NCCL version
//! parses them. Every setting keeps where its value came from, so that a verdict can print
//! "threshold PHB (NCCL_NET_GDR_LEVEL=3 from gdrdoctor/meta.json)" or "(NCCL 2.28's default)".
//!
//! NCCL reads integer parameters with `strtoll(str, NULL, 0)` and keeps the default only when
//! the string is empty or `errno` is set (src/misc/param.cc v2.30.7-1 L93-100): `yes` is 0,
//! `0x10` is 16, `010` is 8. Path levels go through `ncclGetLevel()` (src/graph/paths.cc
//! v2.30.7-1 L244-280): an exact name of that version's path types, else a legacy integer
//! when the first character is a digit, else ignored.

use super::version::{PathKind, Version};
use std::collections::BTreeMap;

/// A value and where it came from (`NCCL_NET_GDR_READ=1 (environment)`, `NCCL 2.28's
/// default`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting<T> {
    pub value: T,
    pub source: String,
    /// Set by the user (not NCCL's default).
    pub user: bool,
}

/// `NCCL_IB_HCA`: which RDMA devices and ports NCCL may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaFilter {
    pub raw: String,
    /// `^`: the list excludes.
    pub exclude: bool,
    /// `=`: names match exactly (otherwise as prefixes: `mlx5_1` also matches `mlx5_10`).
    pub exact: bool,
    /// (name or prefix, port or -1 for any port).
    pub entries: Vec<(String, i64)>,
}

impl HcaFilter {
    /// NCCL's `parseStringList()` (src/misc/utils.cc v2.30.7-1 L189-214) after the `^` and
    /// `=` prefixes (src/transport/net_ib/init.cc v2.30.7-1 L317-324). 2.4 strips neither.
    pub fn parse(raw: &str, v: Version) -> HcaFilter {
        let mut s = raw;
        let (mut exclude, mut exact) = (false, false);
        if s.starts_with('^') {
            exclude = true;
            if v.ib_hca_prefixes_parsed() {
                s = &s[1..];
            }
        }
        if v.ib_hca_prefixes_parsed() && s.starts_with('=') {
            exact = true;
            s = &s[1..];
        }
        let entries = s
            .split(',')
            .filter(|e| !e.is_empty())
            .filter_map(|e| {
                let mut parts = e.split(':');
                let name = parts.next().unwrap_or("");
                if name.is_empty() {
                    return None;
                }
                let port = match parts.next() {
                    Some(p) if !p.is_empty() => atoi(p),
                    _ => -1,
                };
                Some((name.to_string(), port))
            })
            .collect();
        HcaFilter {
            raw: raw.to_string(),
            exclude,
            exact,
            entries,
        }
    }

    /// Whether NCCL uses `port` of `dev`: `matchIfList() ^ searchNot` (init.cc L366-369;
    /// src/misc/utils.cc L216-243: prefix or exact name, port -1 matches any port). An empty
    /// list matches everything.
    pub fn allows(&self, dev: &str, port: u32) -> bool {
        let hit = self.entries.is_empty()
            || self.entries.iter().any(|(name, p)| {
                let name_ok = if self.exact {
                    dev == name
                } else {
                    dev.starts_with(name.as_str())
                };
                name_ok && (*p == -1 || *p == i64::from(port))
            });
        hit != self.exclude
    }
}

/// C's `atoi`: leading spaces, a sign, decimal digits; 0 when there are none.
fn atoi(s: &str) -> i64 {
    strtoll(s, 10).unwrap_or(0)
}

/// C's `strtoll(s, NULL, base)`: `None` on overflow (errno ERANGE), 0 when no digits.
/// Base 0 picks 16 for `0x`, 8 for a leading `0`, else 10.
pub fn strtoll(s: &str, base: u32) -> Option<i64> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (digits, radix) = if base == 0 || base == 16 {
        let hex = (t.starts_with("0x") || t.starts_with("0X"))
            && t[2..].chars().next().is_some_and(|c| c.is_ascii_hexdigit());
        if hex {
            (&t[2..], 16)
        } else if base == 0 && t.starts_with('0') {
            (t, 8)
        } else {
            (t, if base == 0 { 10 } else { base })
        }
    } else {
        (t, base)
    };
    let mut v: i128 = 0;
    let mut overflow = false;
    for c in digits.chars() {
        let Some(d) = c.to_digit(radix) else { break };
        v = v * i128::from(radix) + i128::from(d);
        if v > i128::from(i64::MAX) + 1 {
            overflow = true;
            v = i128::from(i64::MAX) + 1;
        }
    }
    let v = if neg { -v } else { v };
    if overflow || v > i128::from(i64::MAX) || v < i128::from(i64::MIN) {
        return None;
    }
    Some(v as i64)
}

/// A user's path level (`NCCL_NET_GDR_LEVEL`, `NCCL_P2P_LEVEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Kind(PathKind),
    /// NCCL 2.4-2.5: `NCCL_NET_GDR_LEVEL` is a raw integer compared with `distance < level`.
    Legacy(i64),
}

impl Level {
    pub fn describe(&self) -> String {
        match self {
            Level::Kind(k) => k.as_str().to_string(),
            Level::Legacy(n) => format!("{n} (2.4-2.5 numbering: PIX 0, PXB 1, PHB 2, SYS 4)"),
        }
    }
}

/// `ncclGetLevel()`: an exact name of this version's path types, else (first character a
/// digit) `levelsOldToNew[min(strtol(s, NULL, 0), 5)]` = LOC, PIX, PXB, PHB, SYS, SYS. `None`:
/// NCCL ignores the value.
pub fn parse_level(s: &str, v: Version) -> Option<PathKind> {
    let names = v.path_names()?;
    if let Some(k) = names.iter().find(|k| k.as_str() == s) {
        return Some(*k);
    }
    if s.as_bytes().first().is_some_and(|b| b.is_ascii_digit()) {
        const OLD: [PathKind; 6] = [
            PathKind::Loc,
            PathKind::Pix,
            PathKind::Pxb,
            PathKind::Phb,
            PathKind::Sys,
            PathKind::Sys,
        ];
        let n = strtoll(s, 0).unwrap_or(i64::MAX).clamp(0, 5) as usize;
        return Some(OLD[n]);
    }
    None
}

/// The settings of one environment, for one NCCL version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclEnv {
    /// Where the variables were read: `environment`, `gdrdoctor/meta.json`, ... or `none
    /// known` (a pasted matrix).
    pub origin: String,
    /// `NCCL_NET_GDR_LEVEL` when set and understood.
    pub gdr_level: Option<Setting<Level>>,
    /// `NCCL_NET_GDR_READ` (default -2: the read gate).
    pub gdr_read: Setting<i64>,
    /// `NCCL_NET_GDR_C2C` (2.26+; `None` before).
    pub gdr_c2c: Option<Setting<bool>>,
    /// `NCCL_PXN_DISABLE == 1` (src/graph/paths.cc v2.30.7-1 L668-684 compares with 1).
    pub pxn_disable: Setting<bool>,
    /// `NCCL_PXN_C2C` (2.27+).
    pub pxn_c2c: Option<Setting<bool>>,
    /// `NCCL_P2P_PXN_LEVEL` (default 2; 0 keeps point-to-point operations off PXN).
    pub p2p_pxn_level: Setting<i64>,
    pub ib_hca: Option<Setting<HcaFilter>>,
    /// `NCCL_IB_DISABLE` non-zero (src/transport/net_ib/init.cc v2.30.7-1 L291).
    pub ib_disable: Setting<bool>,
    /// `NCCL_DMABUF_ENABLE` (default 1).
    pub dmabuf_enable: Setting<bool>,
    /// `NCCL_P2P_DISABLE=1` (LOC) or `NCCL_P2P_LEVEL`, when set.
    pub p2p_level: Option<Setting<PathKind>>,
    /// Values NCCL ignores or reads surprisingly (`NCCL_NET_GDR_LEVEL=pix` is ignored).
    pub notes: Vec<String>,
}

impl NcclEnv {
    /// Parse the `NCCL_*` variables of `vars` for version `v`. `vars` `None`: not known (the
    /// defaults apply, and `origin` says so).
    pub fn parse(vars: Option<&BTreeMap<String, String>>, origin: &str, v: Version) -> NcclEnv {
        let get = |k: &str| vars.and_then(|m| m.get(k)).map(String::as_str);
        let src = |k: &str, val: &str| format!("{k}={val} from {origin}");
        let dflt = |what: &str| format!("NCCL {}.{}'s default{what}", v.major, v.minor);
        let mut notes = Vec::new();
        // An integer parameter: NCCL_PARAM / ncclLoadParam.
        let int = |k: &str, d: i64, notes: &mut Vec<String>| -> Setting<i64> {
            match get(k) {
                Some(s) if !s.is_empty() => match strtoll(s, 0) {
                    Some(n) => {
                        if n == 0 && !s.trim_start().starts_with(['0', '+', '-']) {
                            notes.push(format!(
                                "{k}={s} is not a number: NCCL reads it as 0 (strtoll)"
                            ));
                        }
                        Setting {
                            value: n,
                            source: src(k, s),
                            user: true,
                        }
                    }
                    None => {
                        notes.push(format!(
                            "{k}={s} is out of range: NCCL keeps its default {d}"
                        ));
                        Setting {
                            value: d,
                            source: dflt(""),
                            user: false,
                        }
                    }
                },
                _ => Setting {
                    value: d,
                    source: dflt(""),
                    user: false,
                },
            }
        };
        let gdr_level = match get("NCCL_NET_GDR_LEVEL") {
            None => None,
            Some(s) if v.legacy() => {
                let n = int("NCCL_NET_GDR_LEVEL", 2, &mut notes);
                n.user.then(|| Setting {
                    value: Level::Legacy(n.value),
                    source: format!(
                        "{} ({} for NCCL {v})",
                        src("NCCL_NET_GDR_LEVEL", s),
                        n.value
                    ),
                    user: true,
                })
            }
            Some(s) => match parse_level(s, v) {
                Some(k) => Some(Setting {
                    value: Level::Kind(k),
                    source: src("NCCL_NET_GDR_LEVEL", s),
                    user: true,
                }),
                None => {
                    notes.push(format!(
                        "NCCL_NET_GDR_LEVEL={s} is ignored by NCCL {v}: not one of its path names ({}) nor a number",
                        v.path_names()
                            .unwrap_or(&[])
                            .iter()
                            .map(|k| k.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    ));
                    None
                }
            },
        };
        let gdr_read = int("NCCL_NET_GDR_READ", -2, &mut notes);
        let boolean = |s: Setting<i64>| Setting {
            value: s.value != 0,
            source: s.source,
            user: s.user,
        };
        let gdr_c2c = v.net_gdr_c2c_default().map(|d| {
            let s = int("NCCL_NET_GDR_C2C", i64::from(d), &mut notes);
            let mut b = boolean(s);
            if !b.user {
                b.source = dflt(&format!(" NCCL_NET_GDR_C2C={}", u8::from(d)));
            }
            b
        });
        let pxn = int("NCCL_PXN_DISABLE", 0, &mut notes);
        let pxn_disable = Setting {
            value: pxn.value == 1,
            source: pxn.source,
            user: pxn.user,
        };
        if pxn.user && pxn.value != 0 && pxn.value != 1 {
            notes.push(format!(
                "NCCL_PXN_DISABLE={} does not disable PXN: NCCL compares it with 1",
                pxn.value
            ));
        }
        let pxn_c2c = v.pxn_c2c_default().map(|d| {
            let mut b = boolean(int("NCCL_PXN_C2C", i64::from(d), &mut notes));
            if !b.user {
                b.source = dflt(&format!(" NCCL_PXN_C2C={}", u8::from(d)));
            }
            b
        });
        let p2p_pxn_level = int("NCCL_P2P_PXN_LEVEL", 2, &mut notes);
        let ib_hca = get("NCCL_IB_HCA")
            .filter(|s| !s.is_empty())
            .map(|s| Setting {
                value: HcaFilter::parse(s, v),
                source: src("NCCL_IB_HCA", s),
                user: true,
            });
        let ib_disable = boolean(int("NCCL_IB_DISABLE", 0, &mut notes));
        let dmabuf_enable = boolean(int("NCCL_DMABUF_ENABLE", 1, &mut notes));
        let p2p_level = if v.legacy() {
            None
        } else {
            let disable = get("NCCL_P2P_DISABLE").map(|s| (s, strtoll(s, 0).unwrap_or(0)));
            match disable {
                Some((s, 1)) => Some(Setting {
                    value: PathKind::Loc,
                    source: src("NCCL_P2P_DISABLE", s),
                    user: true,
                }),
                _ => get("NCCL_P2P_LEVEL").and_then(|s| {
                    let k = parse_level(s, v);
                    if k.is_none() {
                        notes.push(format!("NCCL_P2P_LEVEL={s} is ignored by NCCL {v}"));
                    }
                    k.map(|k| Setting {
                        value: k,
                        source: src("NCCL_P2P_LEVEL", s),
                        user: true,
                    })
                }),
            }
        };
        NcclEnv {
            origin: origin.to_string(),
            gdr_level,
            gdr_read,
            gdr_c2c,
            pxn_disable,
            pxn_c2c,
            p2p_pxn_level,
            ib_hca,
            ib_disable,
            dmabuf_enable,
            p2p_level,
            notes,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn env(pairs: &[(&str, &str)], v: &str) -> NcclEnv {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        NcclEnv::parse(Some(&m), "test", Version::parse(v).unwrap())
    }

    #[test]
    fn strtoll_like_c() {
        assert_eq!(strtoll("12", 0), Some(12));
        assert_eq!(strtoll("  -3", 0), Some(-3));
        assert_eq!(strtoll("0x10", 0), Some(16));
        assert_eq!(strtoll("010", 0), Some(8));
        assert_eq!(strtoll("08", 0), Some(0));
        assert_eq!(strtoll("0x", 0), Some(0));
        assert_eq!(strtoll("yes", 0), Some(0));
        assert_eq!(strtoll("99999999999999999999", 0), None);
        assert_eq!(strtoll("-9223372036854775808", 0), Some(i64::MIN));
    }

    #[test]
    fn gdr_level_names_and_legacy_integers() {
        // src/graph/paths.cc v2.30.7-1 L243 levelsOldToNew = LOC, PIX, PXB, PHB, SYS, SYS.
        let v = Version::parse("2.30.7").unwrap();
        assert_eq!(parse_level("PHB", v), Some(PathKind::Phb));
        assert_eq!(parse_level("P2C", v), Some(PathKind::P2c));
        for (s, k) in [
            ("0", PathKind::Loc),
            ("1", PathKind::Pix),
            ("2", PathKind::Pxb),
            ("3", PathKind::Phb),
            ("4", PathKind::Sys),
            ("5", PathKind::Sys),
            ("77", PathKind::Sys),
        ] {
            assert_eq!(parse_level(s, v), Some(k), "{s}");
        }
        assert_eq!(parse_level("pix", v), None, "names are case-sensitive");
        // P2C is not a name before 2.27 (src/graph/topo.cc v2.26.6-1 topoPathTypeStr).
        assert_eq!(parse_level("P2C", Version::parse("2.26.6").unwrap()), None);
        // No names at all in 2.4-2.5 (NCCL_PARAM integer, src/transport/net.cc v2.5.7-1 L57).
        assert_eq!(parse_level("PHB", Version::parse("2.5.7").unwrap()), None);
    }

    #[test]
    fn legacy_gdr_level_is_an_integer_and_names_read_as_zero() {
        // NCCL 2.4: NCCL_PARAM(NetGdrLevel, ..., PATH_PHB) read with strtoll (src/include/
        // param.h v2.4.8-1 L56-71): "PHB" is 0, which turns GDR off for every pair.
        let e = env(&[("NCCL_NET_GDR_LEVEL", "PHB")], "2.4.8");
        assert_eq!(
            e.gdr_level.as_ref().map(|s| s.value),
            Some(Level::Legacy(0))
        );
        assert!(e.notes.iter().any(|n| n.contains("reads it as 0")));
        let e = env(&[("NCCL_NET_GDR_LEVEL", "3")], "2.5.7");
        assert_eq!(e.gdr_level.map(|s| s.value), Some(Level::Legacy(3)));
    }

    #[test]
    fn c2c_and_pxn_defaults_by_version() {
        // NET_GDR_C2C: absent before 2.26, default 0 in 2.26 (v2.26.6-1 L381), 1 from 2.27
        // (v2.27.3-1 L386). PXN_C2C: 0 in 2.27 (v2.27.3-1 L609), 1 from 2.28 (v2.28.3-1 L620).
        assert!(env(&[], "2.25.1").gdr_c2c.is_none());
        assert_eq!(env(&[], "2.26.6").gdr_c2c.map(|s| s.value), Some(false));
        assert_eq!(env(&[], "2.27.3").gdr_c2c.map(|s| s.value), Some(true));
        assert_eq!(env(&[], "2.27.7").pxn_c2c.map(|s| s.value), Some(false));
        assert_eq!(env(&[], "2.28.3").pxn_c2c.map(|s| s.value), Some(true));
        let e = env(&[("NCCL_NET_GDR_C2C", "0")], "2.30.7");
        let c = e.gdr_c2c.unwrap();
        assert!(!c.value && c.user && c.source.contains("NCCL_NET_GDR_C2C=0"));
        assert!(env(&[], "2.30.7")
            .gdr_c2c
            .unwrap()
            .source
            .contains("default"));
    }

    #[test]
    fn pxn_disable_compares_with_one() {
        // src/graph/paths.cc v2.30.7-1 L819 `ncclPxnDisable(comm) != 1`.
        assert!(
            env(&[("NCCL_PXN_DISABLE", "1")], "2.30.7")
                .pxn_disable
                .value
        );
        let e = env(&[("NCCL_PXN_DISABLE", "2")], "2.30.7");
        assert!(!e.pxn_disable.value);
        assert!(e.notes.iter().any(|n| n.contains("compares it with 1")));
    }

    #[test]
    fn gdr_read_values() {
        // NET_GDR_READ default -2 (src/graph/paths.cc v2.30.7-1 L460); "yes" is strtoll 0.
        assert_eq!(env(&[], "2.30.7").gdr_read.value, -2);
        assert_eq!(
            env(&[("NCCL_NET_GDR_READ", "1")], "2.18.6").gdr_read.value,
            1
        );
        assert_eq!(
            env(&[("NCCL_NET_GDR_READ", "yes")], "2.18.6")
                .gdr_read
                .value,
            0
        );
        assert_eq!(
            env(&[("NCCL_NET_GDR_READ", "")], "2.18.6").gdr_read.value,
            -2
        );
    }

    #[test]
    fn ib_hca_lists() {
        // src/misc/utils.cc v2.30.7-1 L189-243; init.cc L317-369.
        let v = Version::parse("2.30.7").unwrap();
        let f = HcaFilter::parse("mlx5_1", v);
        assert!(
            f.allows("mlx5_1", 1) && f.allows("mlx5_10", 1),
            "prefix match"
        );
        assert!(!f.allows("mlx5_2", 1));
        let f = HcaFilter::parse("=mlx5_1", v);
        assert!(f.allows("mlx5_1", 1) && !f.allows("mlx5_10", 1));
        let f = HcaFilter::parse("^mlx5_0,mlx5_1", v);
        assert!(!f.allows("mlx5_0", 1) && !f.allows("mlx5_1", 1) && f.allows("mlx5_2", 1));
        let f = HcaFilter::parse("mlx5_0:1,mlx5_1:2", v);
        assert!(f.allows("mlx5_0", 1) && !f.allows("mlx5_0", 2) && f.allows("mlx5_1", 2));
        let f = HcaFilter::parse("^=mlx5_0:1", v);
        assert!(!f.allows("mlx5_0", 1) && f.allows("mlx5_0", 2) && f.allows("mlx5_00", 1));
        let f = HcaFilter::parse("mlx5_0:x", v);
        assert!(
            !f.allows("mlx5_0", 1),
            "atoi(\"x\") is port 0, which no port has"
        );
        // NCCL 2.4 does not strip '^' (src/transport/net_ib.cc v2.4.8-1 L109): "^mlx5_0"
        // matches nothing, and the XOR then keeps every device.
        let f = HcaFilter::parse("^mlx5_0", Version::parse("2.4.8").unwrap());
        assert!(f.allows("mlx5_0", 1));
    }

    #[test]
    fn p2p_disable_and_level() {
        // ncclGetLevel("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"): disable==1 -> LOC (v2.30.7-1
        // L247-253).
        let e = env(
            &[("NCCL_P2P_DISABLE", "1"), ("NCCL_P2P_LEVEL", "SYS")],
            "2.28.9",
        );
        assert_eq!(e.p2p_level.map(|s| s.value), Some(PathKind::Loc));
        let e = env(&[("NCCL_P2P_LEVEL", "NVL")], "2.28.9");
        assert_eq!(e.p2p_level.map(|s| s.value), Some(PathKind::Nvl));
        assert!(env(&[("NCCL_P2P_DISABLE", "0")], "2.28.9")
            .p2p_level
            .is_none());
    }

    #[test]
    fn ignored_level_is_a_note() {
        let e = env(&[("NCCL_NET_GDR_LEVEL", "pix")], "2.30.7");
        assert!(e.gdr_level.is_none());
        assert!(e.notes[0].contains("ignored"));
    }

    proptest! {
        #[test]
        fn parsing_never_panics(k in "(NCCL_NET_GDR_LEVEL|NCCL_IB_HCA|NCCL_NET_GDR_READ|NCCL_P2P_LEVEL)", val in "\\PC{0,24}", minor in 4u32..32) {
            let m: BTreeMap<String, String> = [(k, val.clone())].into_iter().collect();
            let _ = NcclEnv::parse(Some(&m), "p", Version::new(2, minor, 0));
            let f = HcaFilter::parse(&val, Version::new(2, minor, 0));
            let _ = f.allows("mlx5_0", 1);
            let _ = strtoll(&val, 0);
        }
    }
}
