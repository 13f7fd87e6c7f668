//! JUnit XML: one testcase per finding (`<id> [<subject>]`, class `gdrdoctor.<category>`).
//! pass -> success, fail -> failure, error -> error, skip -> skipped, warn -> success with the
//! warning in system-out (a failure under `--fail-on warn`).
//!
//! Written by hand to the rules of the Jenkins xUnit plugin's `junit-10.xsd` (the schema most
//! CI systems validate against): `<testsuites>` carries only name/time/tests/failures/errors (no
//! `skipped`), `<testsuite>` requires name/tests/failures/errors, `<testcase>` carries only
//! name/time/classname/group, and `<failure>`/`<error>`/`<skipped>` only type/message.
//! tests/junit.rs enforces those rules; .ci/run validates against the XSD itself.

use super::Style;
pub use crate::sys::escape::{xml_attr as attr, xml_text as text};
use gdrdoctor_checks::report::{Finding, Report, Status};
use std::fmt::Write;

fn body(f: &Finding) -> String {
    let mut s = String::new();
    for e in &f.evidence {
        let _ = write!(s, "evidence: {}: {}", e.source, e.observed);
        if let Some(x) = &e.expected {
            let _ = write!(s, " (expected {x})");
        }
        s.push('\n');
    }
    if let Some(r) = &f.remediation {
        let _ = writeln!(s, "help: {r}");
    }
    let _ = writeln!(s, "explain: gdrdoctor explain {}", f.id);
    s
}

pub fn render(report: &Report, style: &Style) -> String {
    // Node strings enter here (CI logs print the XML: escape sequences stay text).
    let clean = super::sanitize::report(report);
    let report: &Report = &clean;
    let host = report
        .host
        .hostname
        .clone()
        .unwrap_or_else(|| "unknown-host".into());
    let command = if report.probe.is_some() {
        "probe"
    } else {
        "check"
    };
    let failing = |f: &Finding| {
        f.status == Status::Fail || (f.status == Status::Warn && style.warn_is_failure)
    };
    let tests = report.findings.len();
    let failures = report.findings.iter().filter(|f| failing(f)).count();
    let errors = report
        .findings
        .iter()
        .filter(|f| f.status == Status::Error)
        .count();
    let skipped = report
        .findings
        .iter()
        .filter(|f| f.status == Status::Skip)
        .count();
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        o,
        "<testsuites name=\"gdrdoctor\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\">"
    );
    let _ = write!(
        o,
        "  <testsuite name=\"{}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\" hostname=\"{}\"",
        attr(&format!("gdrdoctor {command} {host}")),
        attr(&host)
    );
    if let Some(t) = &report.timestamp {
        let _ = write!(o, " timestamp=\"{}\"", attr(t));
    }
    o.push_str(">\n    <properties>\n");
    for (k, v) in [
        ("gdrdoctor.version", report.tool.version.as_str()),
        ("gdrdoctor.schema", report.schema.as_str()),
        ("gdrdoctor.source", report.host.source.as_str()),
        ("gdrdoctor.exit_code", &report.summary.exit_code.to_string()),
    ] {
        let _ = writeln!(
            o,
            "      <property name=\"{}\" value=\"{}\"/>",
            attr(k),
            attr(v)
        );
    }
    o.push_str("    </properties>\n");
    for f in &report.findings {
        let cat = f.id.split('.').next().unwrap_or("check");
        let _ = write!(
            o,
            "    <testcase name=\"{}\" classname=\"{}\"",
            attr(&format!("{} [{}]", f.id, f.subject)),
            attr(&format!("gdrdoctor.{cat}"))
        );
        let inner = match f.status {
            Status::Pass => format!(
                "      <system-out>{}</system-out>\n",
                text(&format!("{}\n{}", f.message, body(f)))
            ),
            Status::Warn if !style.warn_is_failure => format!(
                "      <system-out>{}</system-out>\n",
                text(&format!("warning: {}\n{}", f.message, body(f)))
            ),
            Status::Warn | Status::Fail => format!(
                "      <failure message=\"{}\" type=\"{}\">{}</failure>\n",
                attr(&f.message),
                f.status.as_str(),
                text(&body(f))
            ),
            Status::Error => format!(
                "      <error message=\"{}\" type=\"error\">{}</error>\n",
                attr(&f.message),
                text(&body(f))
            ),
            Status::Skip => format!("      <skipped message=\"{}\"/>\n", attr(&f.message)),
        };
        let _ = write!(o, ">\n{inner}    </testcase>\n");
    }
    o.push_str("  </testsuite>\n</testsuites>\n");
    o
}
