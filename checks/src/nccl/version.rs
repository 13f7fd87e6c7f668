//! NCCL versions, and what each one calls its path types.
//!
//! The GDR rule changed many times between NCCL 2.4 and 2.30 (docs/topology.md has the table).
//! Everything version-dependent in [`super::rule`] asks a [`Version`] through the methods
//! below, each citing the NCCL tag and source line where the behaviour starts (read from
//! NVIDIA/nccl at the tags named; line numbers are for that tag).

use serde::{Deserialize, Serialize};
use std::fmt;

/// An NCCL release, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The newest NCCL whose rules gdrdoctor knows (NVIDIA/nccl v2.30.7-1). Used when the node's
/// NCCL is unknown, and for any newer release.
pub const NEWEST: Version = Version::new(2, 30, 7);
/// The oldest NCCL modelled (v2.4.8-1; 2.3 and older had no topology-aware GDR rule).
pub const OLDEST: Version = Version::new(2, 4, 0);

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// `2.28.9`, `2.28` (patch 0), `v2.28.9-1`, `2.28.9+cuda13.0`, `2.28.9-1+cuda12.2`. The
    /// major must be 2 (NCCL 1.x had none of these rules).
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let core = s.split(['+', '-', ' ']).next().unwrap_or("");
        let mut it = core.split('.');
        let num = |p: Option<&str>| -> Option<u32> {
            let p = p?;
            if p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            p.parse().ok()
        };
        let major = num(it.next())?;
        let minor = num(it.next())?;
        let patch = match it.next() {
            None => 0,
            Some(p) => num(Some(p))?,
        };
        if it.next().is_some() || major != 2 {
            return None;
        }
        Some(Version::new(major, minor, patch))
    }

    /// NCCL's `NCCL_VERSION_CODE` (`ncclGetVersion`): 2.9+ `major*10000 + minor*100 + patch`,
    /// before that `major*1000 + minor*100 + patch` (src/nccl.h.in `NCCL_VERSION()`).
    pub fn from_code(code: i64) -> Option<Version> {
        if code >= 20900 {
            let (major, rest) = (code / 10000, code % 10000);
            Some(Version::new(
                major as u32,
                (rest / 100) as u32,
                (rest % 100) as u32,
            ))
        } else if code >= 2000 {
            let (major, rest) = (code / 1000, code % 1000);
            Some(Version::new(
                major as u32,
                (rest / 100) as u32,
                (rest % 100) as u32,
            ))
        } else {
            None
        }
    }

    fn at_least(&self, minor: u32, patch: u32) -> bool {
        (self.minor, self.patch) >= (minor, patch)
    }

    /// 2.4 and 2.5: the decision lives in `netGetGdrSupport()` (src/transport/net.cc, v2.5.7-1
    /// L59-86): `NCCL_NET_GDR_LEVEL` is a plain integer (default `PATH_PHB` = 2) and GDR needs
    /// `distance < level`; no names, no PXN.
    pub fn legacy(&self) -> bool {
        !self.at_least(6, 0)
    }
    /// 2.4 computes NODE (same NUMA node, another host bridge) as its own distance 3
    /// (src/include/topo.h v2.4.8-1 L32-38 `PATH_NODE`); 2.5 folds it into PHB
    /// (src/graph/topo.cc v2.5.7-1 L614-621 `pathDistance()`).
    pub fn has_node_distance(&self) -> bool {
        !self.at_least(5, 0)
    }
    /// PXN, on by default (src/graph/paths.cc v2.12.12-1 L427 `NCCL_PARAM(PxnDisable, ..., 0)`).
    pub fn has_pxn(&self) -> bool {
        self.at_least(12, 0)
    }
    /// 2.12-2.13 try PXN only for a GPU whose own path is beyond PXB (v2.12.12-1 L526); from
    /// 2.14 also when the peer has more bandwidth (v2.14.3-1 L576-579), which gdrdoctor cannot
    /// see: it applies the path condition only.
    pub fn pxn_any_peer(&self) -> bool {
        !self.at_least(18, 0)
    }
    /// 2.12-2.17 look for any NVLink peer within PXB of the NIC (preferring one whose own NIC
    /// it is); from 2.18 only the NIC's local GPU (`ncclTopoGetLocalGpu()`, v2.18.6-1 L586).
    pub fn pxn_local_gpu_only(&self) -> bool {
        self.at_least(18, 0)
    }
    /// From 2.30.3 the PXN peer must itself pass `ncclTopoCheckGdr(read=1)` (v2.30.7-1
    /// L826-830 `gdrMode != ncclTopoGdrModeDisable`).
    pub fn pxn_peer_needs_gdr(&self) -> bool {
        self.at_least(30, 3)
    }
    /// The own-path condition for PXN from 2.14: `type > PATH_PXB` up to 2.27.3
    /// (v2.27.3-1 L707), `type > PATH_PXN` from 2.27.5 (v2.27.7-1 L713), which leaves a P2C
    /// GPU on its own path.
    pub fn pxn_spares_p2c(&self) -> bool {
        self.at_least(27, 5)
    }
    /// The read gate without NVLink applies to every GPU up to 2.18 (v2.18.6-1 L363), only to
    /// GPUs below compute capability 8.0 from 2.19 (v2.19.1-1 L365 `cudaCompCap < 80`).
    pub fn read_gate_all_gpus(&self) -> bool {
        !self.at_least(19, 0)
    }
    /// A single GPU counts as "has NVLink" for the read gate from 2.6 (v2.6.4-1 L299); 2.4-2.5
    /// require an NVLink peer (v2.5.7-1 L66 `ncclTopoHasNvlink()`).
    pub fn read_gate_single_gpu_ok(&self) -> bool {
        self.at_least(6, 0)
    }
    /// Which peer-memory files `ncclIbGdrSupport()` looks for: up to 2.21 only
    /// `/sys/kernel/mm/memory_peers/nv_mem/version` (its other name, `nvidia-peermem`, never
    /// exists: the module registers as `nv_mem`; v2.21.5-1 src/transport/net_ib.cc); 2.22 adds
    /// `nv_mem_nc` (v2.22.3-1); from 2.23 also `/sys/module/nvidia_peermem/version`
    /// (v2.23.4-1 L694-696), which is there wherever the module is loaded (ground truth K02).
    pub fn sees_peermem_nc(&self) -> bool {
        self.at_least(22, 0)
    }
    /// See [`Version::sees_peermem_nc`].
    pub fn sees_peermem_module(&self) -> bool {
        self.at_least(23, 0)
    }
    /// NCCL registers dma-buf from 2.13 (v2.13.4-1 `ncclIbDmaBufSupport`, ground truth §5);
    /// before, only the peer-memory path exists.
    pub fn has_dmabuf(&self) -> bool {
        self.at_least(13, 0)
    }
    /// `NCCL_NET_GDR_C2C` exists from 2.26 (v2.26.6-1 L381, default 0) and defaults to 1
    /// from 2.27 (v2.27.3-1 L386).
    pub fn net_gdr_c2c_default(&self) -> Option<bool> {
        if self.at_least(27, 0) {
            Some(true)
        } else if self.at_least(26, 0) {
            Some(false)
        } else {
            None
        }
    }
    /// The P2C path type exists from 2.27 (src/graph/topo.h v2.27.3-1 L83).
    pub fn has_p2c(&self) -> bool {
        self.at_least(27, 0)
    }
    /// From 2.29 a PHB NIC becomes P2C only when it is among the GPU's closest NICs
    /// (src/graph/paths.cc v2.29.2-1 "P2C is only set when the NET is the closest").
    pub fn p2c_local_nets_only(&self) -> bool {
        self.at_least(29, 0)
    }
    /// `NCCL_PXN_C2C` exists from 2.27 (v2.27.3-1 L609, default 0) and defaults to 1 from 2.28
    /// (v2.28.3-1 L620).
    pub fn pxn_c2c_default(&self) -> Option<bool> {
        if self.at_least(28, 0) {
            Some(true)
        } else if self.at_least(27, 0) {
            Some(false)
        } else {
            None
        }
    }
    /// From 2.29 the default threshold is P2C when `NCCL_NET_GDR_C2C` is on, else PXB
    /// (v2.29.7-1 L460 / v2.30.7-1 L511); before, PXB, and 2.26-2.28 turn a C2C pair's
    /// distance into C2C instead (v2.27.3-1 L437-440).
    pub fn c2c_as_threshold(&self) -> bool {
        self.at_least(29, 0)
    }
    /// `NCCL_IB_HCA`: `=` for exact names from 2.5 (src/transport/net_ib.cc v2.5.7-1 L111);
    /// 2.4 does not even strip the `^` of an exclusion list (v2.4.8-1 L109-110).
    pub fn ib_hca_prefixes_parsed(&self) -> bool {
        self.at_least(5, 0)
    }

    /// NCCL's path-type names of this version, indexed by value (`topoPathTypeStr[]`,
    /// src/graph/topo.cc; from 2.30 src/include/graph.h L117-154 for the values). `None` for
    /// 2.4-2.5, which have no names.
    pub fn path_names(&self) -> Option<&'static [PathKind]> {
        use PathKind::*;
        if self.legacy() {
            None
        } else if !self.at_least(8, 0) {
            Some(&[Loc, Nvl, Pix, Pxb, Phb, Sys])
        } else if !self.at_least(12, 0) {
            Some(&[Loc, Nvl, Nvb, Pix, Pxb, Phb, Sys])
        } else if !self.at_least(26, 0) {
            Some(&[Loc, Nvl, Nvb, Pix, Pxb, Pxn, Phb, Sys])
        } else if !self.at_least(27, 0) {
            Some(&[Loc, Nvl, Nvb, C2c, Pix, Pxb, Pxn, Phb, Sys])
        } else if !self.pxn_spares_p2c() {
            // 2.27.3: PXN 6, P2C 7 (src/graph/topo.h v2.27.3-1 L80-83).
            Some(&[Loc, Nvl, Nvb, C2c, Pix, Pxb, Pxn, P2c, Phb, Sys])
        } else {
            // 2.27.5 and later: P2C 6, PXN 7 (v2.27.5-1 L80-83).
            Some(&[Loc, Nvl, Nvb, C2c, Pix, Pxb, P2c, Pxn, Phb, Sys])
        }
    }

    /// NCCL's number for a path type in this version (`distance N` in its logs), `None` when
    /// the version has no such type. 2.4-2.5: PIX 0, PXB 1, PHB 2, NODE 3 (2.4), SYS 4.
    pub fn value(&self, k: PathKind) -> Option<u8> {
        match self.path_names() {
            Some(names) => names.iter().position(|x| *x == k).map(|i| i as u8),
            None => match k {
                PathKind::Pix => Some(0),
                PathKind::Pxb => Some(1),
                PathKind::Phb => Some(2),
                PathKind::Sys => Some(4),
                _ => None,
            },
        }
    }
}

/// NCCL's path types (the union over all versions; [`Version::value`] gives the number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PathKind {
    Loc,
    Nvl,
    Nvb,
    C2c,
    Pix,
    Pxb,
    P2c,
    Pxn,
    Phb,
    Sys,
}

impl PathKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PathKind::Loc => "LOC",
            PathKind::Nvl => "NVL",
            PathKind::Nvb => "NVB",
            PathKind::C2c => "C2C",
            PathKind::Pix => "PIX",
            PathKind::Pxb => "PXB",
            PathKind::P2c => "P2C",
            PathKind::Pxn => "PXN",
            PathKind::Phb => "PHB",
            PathKind::Sys => "SYS",
        }
    }
    pub fn from_name(s: &str) -> Option<PathKind> {
        use PathKind::*;
        [Loc, Nvl, Nvb, C2c, Pix, Pxb, P2c, Pxn, Phb, Sys]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
    /// The PCIe kinds gdrdoctor's tree computes ([`crate::topo::PathType`]).
    pub fn from_pcie(p: crate::topo::PathType) -> PathKind {
        match p {
            crate::topo::PathType::Loc => PathKind::Loc,
            crate::topo::PathType::Pix => PathKind::Pix,
            crate::topo::PathType::Pxb => PathKind::Pxb,
            crate::topo::PathType::P2c => PathKind::P2c,
            crate::topo::PathType::Phb => PathKind::Phb,
            crate::topo::PathType::Sys => PathKind::Sys,
        }
    }
}

impl fmt::Display for PathKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which NCCL's rules a verdict applies, and why those.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chosen {
    pub version: Version,
    /// `--nccl-version`, `libnccl.so.2 at /usr/lib/...`, or `newest known rules (no NCCL found)`.
    pub source: String,
    /// No NCCL was found and none was given: the newest rules apply.
    pub assumed: bool,
}

impl Chosen {
    pub fn newest(why: &str) -> Chosen {
        Chosen {
            version: NEWEST,
            source: format!("newest rules gdrdoctor knows; {why}"),
            assumed: true,
        }
    }
    /// `NCCL 2.28.9 (libnccl.so.2 at ...)`, for messages.
    pub fn describe(&self) -> String {
        format!("NCCL {} rules ({})", self.version, self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_users_and_libraries_write() {
        assert_eq!(Version::parse("2.28.9"), Some(Version::new(2, 28, 9)));
        assert_eq!(Version::parse("v2.28.9-1"), Some(Version::new(2, 28, 9)));
        assert_eq!(
            Version::parse("2.28.9+cuda13.0"),
            Some(Version::new(2, 28, 9))
        );
        assert_eq!(Version::parse("2.18"), Some(Version::new(2, 18, 0)));
        assert_eq!(Version::parse("1.3.4"), None);
        assert_eq!(Version::parse("2"), None);
        assert_eq!(Version::parse("2.x.1"), None);
        assert_eq!(Version::parse("2.28.9.1"), None);
        assert_eq!(Version::parse(""), None);
    }

    #[test]
    fn version_codes_like_nccl_h() {
        // src/nccl.h.in NCCL_VERSION(X,Y,Z): X*10000+Y*100+Z from 2.9, X*1000+Y*100+Z before.
        assert_eq!(Version::from_code(22809), Some(Version::new(2, 28, 9)));
        assert_eq!(Version::from_code(2708), Some(Version::new(2, 7, 8)));
        assert_eq!(Version::from_code(12), None);
    }

    #[test]
    fn path_values_by_version() {
        // src/graph/topo.h v2.6.4-1 L48-53, v2.8.4-1 L53-59, v2.12.12-1 L53-74,
        // v2.26.6-1 L59-83, v2.27.3-1 L62-89, v2.27.5-1 L80-83, src/include/graph.h v2.30.7-1
        // L117-145.
        let v = |s| Version::parse(s).unwrap_or(NEWEST);
        assert_eq!(v("2.6.4").value(PathKind::Pxb), Some(3));
        assert_eq!(v("2.8.4").value(PathKind::Pxb), Some(4));
        assert_eq!(v("2.12.12").value(PathKind::Pxn), Some(5));
        assert_eq!(v("2.12.12").value(PathKind::Sys), Some(7));
        assert_eq!(v("2.26.6").value(PathKind::Phb), Some(7));
        assert_eq!(v("2.26.6").value(PathKind::P2c), None);
        assert_eq!(v("2.27.3").value(PathKind::P2c), Some(7));
        assert_eq!(v("2.27.3").value(PathKind::Pxn), Some(6));
        assert_eq!(v("2.27.5").value(PathKind::P2c), Some(6));
        assert_eq!(v("2.30.7").value(PathKind::Pxn), Some(7));
        assert_eq!(v("2.30.7").value(PathKind::Sys), Some(9));
        // 2.4/2.5: src/include/topo.h v2.4.8-1 L32-38, src/include/graph.h v2.5.7-1 L18-22.
        assert_eq!(v("2.4.8").value(PathKind::Phb), Some(2));
        assert_eq!(v("2.4.8").value(PathKind::Nvl), None);
    }
}
