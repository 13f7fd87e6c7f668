//! The texts of a picture: short names and addresses, link speeds, a link below its
//! capability, a finding in one line, a GPU-NIC pair's label and hover text.

use gdrdoctor_checks::model::PciDevice;
use gdrdoctor_checks::report::{Finding, GdrPair, Status};
use std::fmt::Write;

/// `0000:18:00.0` -> `18:00.0` (domain 0 only).
pub(super) fn short_bdf(bdf: &str) -> &str {
    bdf.strip_prefix("0000:").unwrap_or(bdf)
}

/// The name users know: the part in brackets of a pci.ids name (`H200 SXM 141GB`,
/// `ConnectX-7`), else the whole name.
pub(super) fn short_name(name: &str) -> String {
    match (name.find('['), name.rfind(']')) {
        (Some(a), Some(b)) if b > a + 1 => name[a + 1..b].to_string(),
        _ => name.to_string(),
    }
}

pub(super) fn gts(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

pub(super) fn fmt_gts(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// `x16 32 GT/s`, from sysfs.
pub(super) fn link_text(d: &PciDevice) -> Option<String> {
    let w = d.cur_link_width.get()?;
    let s = d.cur_link_speed.get().and_then(|s| gts(s))?;
    Some(format!("x{w} {} GT/s", fmt_gts(s)))
}

/// A link below its capability: `x8 of x16`, `16 of 32 GT/s`, or both.
pub(super) fn degraded(d: &PciDevice) -> Option<String> {
    let (cw, mw) = (d.cur_link_width.get(), d.max_link_width.get());
    let (cs, ms) = (
        d.cur_link_speed.get().and_then(|s| gts(s)),
        d.max_link_speed.get().and_then(|s| gts(s)),
    );
    let narrow = matches!((cw, mw), (Some(c), Some(m)) if c < m);
    let slow = matches!((cs, ms), (Some(c), Some(m)) if c < m);
    match (narrow, slow) {
        (true, true) => Some(format!(
            "x{}/{} GT of x{}/{}",
            cw.copied().unwrap_or(0),
            fmt_gts(cs.unwrap_or(0.0)),
            mw.copied().unwrap_or(0),
            fmt_gts(ms.unwrap_or(0.0))
        )),
        (true, false) => Some(format!(
            "x{} of x{}",
            cw.copied().unwrap_or(0),
            mw.copied().unwrap_or(0)
        )),
        (false, true) => Some(format!(
            "{} of {} GT/s",
            fmt_gts(cs.unwrap_or(0.0)),
            fmt_gts(ms.unwrap_or(0.0))
        )),
        (false, false) => None,
    }
}

pub(super) fn link_title(d: &PciDevice) -> String {
    format!(
        "link above {}: {} x{} (capable of {} x{})",
        short_bdf(&d.bdf),
        d.cur_link_speed
            .get()
            .cloned()
            .unwrap_or_else(|| "?".into()),
        d.cur_link_width
            .get()
            .map(|w| w.to_string())
            .unwrap_or_else(|| "?".into()),
        d.max_link_speed
            .get()
            .cloned()
            .unwrap_or_else(|| "?".into()),
        d.max_link_width
            .get()
            .map(|w| w.to_string())
            .unwrap_or_else(|| "?".into()),
    )
}

pub(super) fn finding_line(f: &Finding) -> String {
    format!("{} {} ({}): {}", f.status, f.id, f.subject, f.message)
}

/// The mark of a pair as a word for labels.
pub(super) fn pair_word(p: &GdrPair) -> String {
    let path = p.nccl_path.clone().unwrap_or_else(|| p.path.clone());
    match crate::render::topo::mark(p) {
        "r" => format!("{path} recv only"),
        "s" => format!("{path} send only"),
        "?" if p.enabled => format!("{path} ?"),
        _ => path,
    }
}

pub(super) fn pair_title(p: &GdrPair, gpu_name: &str) -> String {
    let mut t = String::new();
    let verdict = if p.enabled {
        match &p.via {
            Some(v) => format!(
                "GDR through NVLink peer {} (PXN); own PCIe path {}",
                short_bdf(v),
                p.path
            ),
            None => format!(
                "GDR, path {}{}",
                p.nccl_path.as_deref().unwrap_or(&p.path),
                p.mechanism
                    .as_deref()
                    .map(|m| format!(", {m}"))
                    .unwrap_or_default()
            ),
        }
    } else if !p.undecided.is_empty() {
        format!("undecided, path {}", p.path)
    } else {
        format!("no GDR, path {}", p.path)
    };
    let dir = |d: Option<bool>| match d {
        Some(true) => "yes",
        Some(false) => "no",
        None => "undecided",
    };
    let _ = write!(
        t,
        "{gpu_name} -> {}: {verdict}; send {}, receive {}",
        p.nic,
        dir(p.send),
        dir(p.receive)
    );
    for r in p.reasons.iter().chain(p.undecided.iter()) {
        let _ = write!(t, "\n- {r}");
    }
    for n in &p.notes {
        let _ = write!(t, "\nnote: {n}");
    }
    for a in &p.assumptions {
        let _ = write!(t, "\nassumed: {a}");
    }
    if let (Some(th), Some(src)) = (&p.threshold, &p.threshold_source) {
        let _ = write!(t, "\nthreshold {th} ({src})");
    }
    t
}

pub(super) fn worst(fs: &[&Finding]) -> Option<Status> {
    let rank = |s: Status| match s {
        Status::Fail => 4,
        Status::Error => 3,
        Status::Warn => 2,
        Status::Skip => 1,
        Status::Pass => 0,
    };
    fs.iter()
        .map(|f| f.status)
        .filter(|s| matches!(s, Status::Fail | Status::Error | Status::Warn))
        .max_by_key(|s| rank(*s))
}

/// A device's NUMA node as the picture says it (`-1`, `?` when unreadable).
pub(super) fn numa_text(d: &PciDevice) -> String {
    match d.numa_node.get() {
        Some(-1) => "-1".into(),
        Some(n) => n.to_string(),
        None => "?".into(),
    }
}
