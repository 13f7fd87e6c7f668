//! Prometheus text exposition for node_exporter's textfile collector. Bounded cardinality: one
//! series per (check, status), never per subject; free text never goes into labels. Every status
//! series is emitted for every check so alerts do not break when a series disappears.
//!
//! Every series carries `command="check"` or `command="probe"`, and both commands write the same
//! HELP and TYPE lines: a `check` file and a `probe` file in one textfile directory merge into
//! one family per metric without a duplicate series (the probe's exit code no longer hides the
//! check's). `promtool check metrics` is clean (tests/cli.rs runs it when installed).

use crate::sys::escape::prometheus_label as esc;
use gdrdoctor_checks::checks::CHECKS;
use gdrdoctor_checks::report::{Report, Status};
use std::collections::BTreeMap;
use std::fmt::Write;

pub fn render(report: &Report) -> String {
    let command = if report.probe.is_some() {
        "probe"
    } else {
        "check"
    };
    let mut worst: BTreeMap<&str, Status> = BTreeMap::new();
    let mut counts: BTreeMap<(&str, Status), usize> = BTreeMap::new();
    for f in &report.findings {
        let w = worst.entry(f.id.as_str()).or_insert(f.status);
        if f.status > *w {
            *w = f.status;
        }
        *counts.entry((f.id.as_str(), f.status)).or_insert(0) += 1;
    }
    // Keep registry order, then any id not in the registry (probes).
    let mut ids: Vec<&str> = CHECKS
        .iter()
        .map(|c| c.id)
        .filter(|id| worst.contains_key(id))
        .collect();
    for id in worst.keys() {
        if !ids.contains(id) {
            ids.push(id);
        }
    }
    let mut o = String::new();
    let _ = writeln!(o, "# HELP gdrdoctor_check_status Worst status of a gdrdoctor check on this node (one-hot over status).");
    let _ = writeln!(o, "# TYPE gdrdoctor_check_status gauge");
    for id in &ids {
        let cat = id.split('.').next().unwrap_or("");
        for s in Status::ALL {
            let v = u8::from(worst.get(id) == Some(&s));
            let _ = writeln!(
                o,
                "gdrdoctor_check_status{{command=\"{command}\",check=\"{}\",category=\"{}\",status=\"{}\"}} {v}",
                esc(id),
                esc(cat),
                s.as_str()
            );
        }
    }
    let _ = writeln!(o, "# HELP gdrdoctor_check_findings Number of findings of a check per status (one per subject).");
    let _ = writeln!(o, "# TYPE gdrdoctor_check_findings gauge");
    for id in &ids {
        for s in Status::ALL {
            let n = counts.get(&(*id, s)).copied().unwrap_or(0);
            let _ = writeln!(
                o,
                "gdrdoctor_check_findings{{command=\"{command}\",check=\"{}\",status=\"{}\"}} {n}",
                esc(id),
                s.as_str()
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP gdrdoctor_findings Findings on this node by status."
    );
    let _ = writeln!(o, "# TYPE gdrdoctor_findings gauge");
    let sm = &report.summary;
    for (s, n) in [
        ("pass", sm.pass),
        ("warn", sm.warn),
        ("fail", sm.fail),
        ("skip", sm.skip),
        ("error", sm.error),
    ] {
        let _ = writeln!(
            o,
            "gdrdoctor_findings{{command=\"{command}\",status=\"{s}\"}} {n}"
        );
    }
    let _ = writeln!(
        o,
        "# HELP gdrdoctor_exit_code Exit code of the gdrdoctor run (0 ok, 1 fail, 3 incomplete)."
    );
    let _ = writeln!(o, "# TYPE gdrdoctor_exit_code gauge");
    let _ = writeln!(
        o,
        "gdrdoctor_exit_code{{command=\"{command}\"}} {}",
        sm.exit_code
    );
    let _ = writeln!(
        o,
        "# HELP gdrdoctor_gdr_pairs GPU x NIC pairs by GDR verdict."
    );
    let _ = writeln!(o, "# TYPE gdrdoctor_gdr_pairs gauge");
    let en = report.gdr.iter().filter(|p| p.enabled).count();
    let _ = writeln!(
        o,
        "gdrdoctor_gdr_pairs{{command=\"{command}\",enabled=\"true\"}} {en}"
    );
    let _ = writeln!(
        o,
        "gdrdoctor_gdr_pairs{{command=\"{command}\",enabled=\"false\"}} {}",
        report.gdr.len() - en
    );
    let _ = writeln!(
        o,
        "# HELP gdrdoctor_build_info gdrdoctor version and report schema."
    );
    let _ = writeln!(o, "# TYPE gdrdoctor_build_info gauge");
    let _ = writeln!(
        o,
        "gdrdoctor_build_info{{command=\"{command}\",version=\"{}\",schema=\"{}\"}} 1",
        esc(&report.tool.version),
        esc(&report.schema)
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let _ = writeln!(
        o,
        "# HELP gdrdoctor_last_run_timestamp_seconds Unix time this report was produced."
    );
    let _ = writeln!(o, "# TYPE gdrdoctor_last_run_timestamp_seconds gauge");
    let _ = writeln!(
        o,
        "gdrdoctor_last_run_timestamp_seconds{{command=\"{command}\"}} {now}"
    );
    o
}
