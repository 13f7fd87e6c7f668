//! JUnit XML: one testcase per finding (`<id> [<subject>]`, class `gdrdoctor.<category>`).
//! pass -> success, fail -> failure, error -> error, skip -> skipped, warn -> success with the
//! warning in system-out (a failure under `--fail-on warn`).

use super::Style;
use gdrdoctor_checks::report::{Finding, Report, Status};
use quick_junit::{NonSuccessKind, Report as JReport, TestCase, TestCaseStatus, TestSuite};

fn body(f: &Finding) -> String {
    let mut s = String::new();
    for e in &f.evidence {
        s.push_str(&format!("evidence: {}: {}", e.source, e.observed));
        if let Some(x) = &e.expected {
            s.push_str(&format!(" (expected {x})"));
        }
        s.push('\n');
    }
    if let Some(r) = &f.remediation {
        s.push_str(&format!("help: {r}\n"));
    }
    s.push_str(&format!("explain: gdrdoctor explain {}\n", f.id));
    s
}

pub fn render(report: &Report, style: &Style) -> String {
    // Node strings enter here (CI logs print the XML: escape sequences stay text).
    let clean = super::sanitize::report(report);
    let report: &Report = &clean;
    let mut jr = JReport::new("gdrdoctor");
    let host = report
        .host
        .hostname
        .clone()
        .unwrap_or_else(|| "unknown-host".into());
    let mut suite = TestSuite::new(format!("gdrdoctor check {host}"));
    for f in &report.findings {
        let status = match f.status {
            Status::Pass => TestCaseStatus::success(),
            Status::Warn if !style.warn_is_failure => TestCaseStatus::success(),
            Status::Warn | Status::Fail => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message(f.message.clone());
                st.set_type(f.status.as_str());
                st.set_description(body(f));
                st
            }
            Status::Error => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
                st.set_message(f.message.clone());
                st.set_type("error");
                st.set_description(body(f));
                st
            }
            Status::Skip => {
                let mut st = TestCaseStatus::skipped();
                st.set_message(f.message.clone());
                st
            }
        };
        let mut tc = TestCase::new(format!("{} [{}]", f.id, f.subject), status);
        let cat = f.id.split('.').next().unwrap_or("check");
        tc.set_classname(format!("gdrdoctor.{cat}"));
        if f.status == Status::Warn && !style.warn_is_failure {
            tc.set_system_out(format!("warning: {}\n{}", f.message, body(f)));
        } else if f.status == Status::Pass {
            tc.set_system_out(format!("{}\n{}", f.message, body(f)));
        }
        suite.add_test_case(tc);
    }
    jr.add_test_suite(suite);
    match jr.to_string() {
        Ok(s) => s,
        Err(e) => format!("<!-- junit serialisation failed: {e} -->\n"),
    }
}
