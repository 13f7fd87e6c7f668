//! One line under 80 characters, for NHC-style wrappers, Slurm drain reasons and
//! node-problem-detector (which keeps only the start of a plugin's stdout as the condition
//! message). Shape: `STATUS ids: first message`, e.g.
//! `FAIL rdma.ports,gdr.gpu: mlx5_3/1: port DOWN (Polling), ...` or `OK 24 pass, 2 skip`.
//! The status word follows the exit code: OK (0), FAIL (1), ERROR (3).

use super::Style;
use gdrdoctor_checks::report::{Finding, Report, Status};

/// Bytes before the newline (node-problem-detector's usual `max_output_length` is 80).
pub const MAX: usize = 79;
/// The id list keeps at most this many characters, so that a message always follows.
const IDS_MAX: usize = 44;

fn ids_of<'a>(findings: impl Iterator<Item = &'a Finding>) -> Vec<&'a str> {
    let mut ids: Vec<&str> = Vec::new();
    for f in findings {
        if !ids.contains(&f.id.as_str()) {
            ids.push(&f.id);
        }
    }
    ids
}

/// `a,b,c` within `max` characters, else `a,b,+3`.
fn id_list(ids: &[&str], max: usize) -> String {
    let all = ids.join(",");
    if all.len() <= max {
        return all;
    }
    let mut out = String::new();
    for (i, id) in ids.iter().enumerate() {
        let rest = ids.len() - i;
        let tail = format!(",+{}", rest);
        let add = if out.is_empty() {
            id.len()
        } else {
            id.len() + 1
        };
        if out.len() + add + tail.len() > max {
            if out.is_empty() {
                let head: String = id.chars().take(max.saturating_sub(4)).collect();
                return format!("{head}+{rest}");
            }
            out.push_str(&tail);
            return out;
        }
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(id);
    }
    out
}

/// Cut to `max` bytes (node-problem-detector cuts its plugins' output by bytes), on a character
/// boundary, marking the cut with `...`; control characters become spaces.
pub fn clip(s: &str, max: usize) -> String {
    let s: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.len() <= max {
        return s;
    }
    let mut end = max.saturating_sub(3);
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", s[..end].trim_end())
}

fn about(f: &Finding) -> String {
    if f.subject == "node" {
        f.message.clone()
    } else {
        format!("{}: {}", f.subject, f.message)
    }
}

pub fn render(report: &Report, style: &Style) -> String {
    let s = &report.summary;
    let bad = |st: Status| st == Status::Fail || (style.warn_is_failure && st == Status::Warn);
    let line = match s.exit_code {
        1 => {
            let failing: Vec<&Finding> = report.findings.iter().filter(|f| bad(f.status)).collect();
            let word = if failing.iter().any(|f| f.status == Status::Fail) {
                "FAIL"
            } else {
                "WARN"
            };
            let ids = id_list(&ids_of(failing.iter().copied()), IDS_MAX);
            let first = failing.first().map(|f| about(f)).unwrap_or_default();
            format!("{word} {ids}: {first}")
        }
        3 => {
            let errs: Vec<&Finding> = report
                .findings
                .iter()
                .filter(|f| f.status == Status::Error)
                .collect();
            let ids = id_list(&ids_of(errs.iter().copied()), IDS_MAX);
            let first = errs.first().map(|f| about(f)).unwrap_or_default();
            format!("ERROR {ids}: {first}")
        }
        0 => {
            let mut t = format!("OK {} pass", s.pass);
            if s.warn > 0 {
                let warns = ids_of(report.findings.iter().filter(|f| f.status == Status::Warn));
                t.push_str(&format!(", {} warn ({})", s.warn, id_list(&warns, IDS_MAX)));
            }
            if s.skip > 0 {
                t.push_str(&format!(", {} skip", s.skip));
            }
            if s.error > 0 {
                t.push_str(&format!(", {} error", s.error));
            }
            t
        }
        other => format!("ERROR exit code {other}"),
    };
    format!("{}\n", clip(&line, MAX))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn id_lists_shorten_with_a_count() {
        assert_eq!(id_list(&["a.b", "c.d"], 20), "a.b,c.d");
        assert_eq!(
            id_list(&["aaaa.b", "cccc.d", "eeee.f"], 16),
            "aaaa.b,cccc.d,+1"
        );
        assert_eq!(id_list(&["aaaa.b", "cccc.d", "eeee.f"], 15), "aaaa.b,+2");
        assert!(id_list(&["x".repeat(60).as_str()], 20).len() <= 20);
    }

    proptest! {
        #[test]
        fn clip_bounds_the_line(s in "\\PC{0,200}", max in 10usize..100) {
            let c = clip(&s, max);
            prop_assert!(c.len() <= max);
            prop_assert!(!c.contains('\n'));
        }

        #[test]
        fn id_list_is_bounded(ids in proptest::collection::vec("[a-z]{1,12}\\.[a-z-]{1,20}", 0..20)) {
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            prop_assert!(id_list(&refs, IDS_MAX).len() <= IDS_MAX);
        }
    }
}
