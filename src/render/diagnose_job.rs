//! `diagnose`'s job view of an NCCL log, as text: per host and rank its GPU, NICs, GDR (NCCL's
//! own word) and the transport to each peer; the rank that differs; the decisions no pasted
//! pair takes; the runs of a paste side by side. The same is in the JSON (`nccl.ranks`,
//! `nccl.unplaced`, `nccl.runs`).

use super::sanitize;
use gdrdoctor_checks::paste::report::DiagnoseReport;

fn pad(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut o = String::new();
    for r in rows {
        let mut line = String::from("  ");
        for (i, c) in r.iter().enumerate() {
            line.push_str(c);
            if i + 1 < r.len() {
                let w = widths.get(i).copied().unwrap_or(0);
                line.push_str(&" ".repeat(w.saturating_sub(c.chars().count()) + 2));
            }
        }
        o.push_str(line.trim_end());
        o.push('\n');
    }
    o
}

/// The job view, empty when the log names fewer than two ranks and holds one run.
pub fn render(r: &DiagnoseReport) -> String {
    let Some(n) = &r.nccl else {
        return String::new();
    };
    let mut o = String::new();
    if n.ranks.len() >= 2 {
        let mut hosts: Vec<&str> = n.ranks.iter().filter_map(|x| x.host.as_deref()).collect();
        hosts.sort();
        hosts.dedup();
        o.push_str(&format!(
            "NCCL job view ({}: {} rank(s) on {} host(s); GDR is NCCL's own /GDRDMA word):\n",
            n.block,
            n.ranks.len(),
            hosts.len().max(1)
        ));
        let mut rows = vec![vec![
            "host".to_string(),
            "rank".into(),
            "pid".into(),
            "GPU (busId, nvmlDev)".into(),
            "NICs".into(),
            "GDR".into(),
            "to peers".into(),
        ]];
        for x in &n.ranks {
            let peers = x
                .peers
                .iter()
                .map(|(p, t)| format!("{p}: {}", t.join(" + ")))
                .collect::<Vec<_>>()
                .join("; ");
            rows.push(vec![
                x.host.clone().unwrap_or_else(|| "?".into()),
                x.rank.to_string(),
                x.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                match (&x.bus_id, x.nvml_dev, x.cuda_dev) {
                    (Some(b), Some(d), _) => format!("{b}, {d}"),
                    (Some(b), None, _) => b.clone(),
                    (None, Some(d), _) => format!("?, {d}"),
                    (None, None, Some(c)) => format!("? (cudaDev {c})"),
                    (None, None, None) => "?".into(),
                },
                if x.nics.is_empty() {
                    "-".into()
                } else {
                    x.nics.join(", ")
                },
                match (x.gdr, x.gdr_mixed) {
                    (_, true) => "mixed".into(),
                    (Some(true), _) => "GDRDMA".into(),
                    (Some(false), _) => "no GDRDMA".into(),
                    (None, _) => "-".into(),
                },
                if peers.is_empty() { "-".into() } else { peers },
            ]);
        }
        o.push_str(&pad(&rows));
        for f in r.findings.iter().filter(|f| f.id == "nccl.ranks") {
            o.push_str(&format!("  => {}\n", f.message));
        }
    }
    if !n.unplaced.is_empty() {
        o.push_str(&format!(
            "{} logged decision(s) not placed on a pasted pair:\n",
            n.unplaced.len()
        ));
        for u in n.unplaced.iter().take(8) {
            o.push_str(&format!(
                "  line {}: {} rank {} GPU {} {} {}: {}\n",
                u.line,
                u.host.as_deref().unwrap_or("?"),
                u.rank,
                u.bus_id.as_deref().unwrap_or("?"),
                u.nic.as_deref().unwrap_or("?"),
                if u.gdr { "GDRDMA" } else { "no GDRDMA" },
                u.why
            ));
        }
    }
    if !n.runs.is_empty() {
        o.push_str("Runs side by side (the verdicts follow the last of each block):\n");
        let mut rows = vec![vec![
            "run".to_string(),
            "lines".into(),
            "NCCL".into(),
            "NCCL_* settings".into(),
            "network".into(),
            "/GDRDMA lines".into(),
            "failures".into(),
        ]];
        for x in &n.runs {
            rows.push(vec![
                format!("{} run {}", x.block, x.run),
                format!("{}-{}", x.lines[0], x.lines[1]),
                if x.versions.is_empty() {
                    "?".into()
                } else {
                    x.versions.join(", ")
                },
                if x.env.is_empty() {
                    "-".into()
                } else {
                    x.env
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                },
                if x.networks.is_empty() {
                    "?".into()
                } else {
                    x.networks.join(", ")
                },
                format!("{} of {}", x.gdr_lines, x.net_lines),
                x.failures.to_string(),
            ]);
        }
        o.push_str(&pad(&rows));
    }
    sanitize::lines(&o).into_owned()
}
