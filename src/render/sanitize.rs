//! Text from the node made harmless for a terminal. Every string a node (or a snapshot, a
//! pasted file, a progress area) supplies passes through [`text`] before a human-facing
//! renderer prints it: the table, `topo`, JUnit, error lines and `watch`'s stall lines,
//! whatever `--color` says. A snapshot is input an attacker can write: an escape sequence in a
//! device name would otherwise move the cursor, rewrite earlier lines (a `FAIL` turned into
//! `PASS` on screen), set the window title or, on some terminals, answer back.
//!
//! Escaped, visibly, as Rust writes them: the C0 controls and DEL (`\x1b`, `\n`, `\t`, ...),
//! the C1 controls U+0080-U+009F (U+009B is a one-character CSI), and the Unicode
//! bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069, "Trojan Source":
//! they reorder what is shown). The JSON report is not touched: it is data, and serde escapes
//! control characters there.

use gdrdoctor_checks::report::Report;
use std::borrow::Cow;

/// Whether `c` must not reach a terminal as is.
fn dangerous(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every control character escaped (`\x1b[31m` shows as the text `\x1b[31m`);
/// borrowed when there is nothing to escape.
pub fn text(s: &str) -> Cow<'_, str> {
    if !s.chars().any(dangerous) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if dangerous(c) && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if dangerous(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A whole rendered text that carries no styling of its own (the fleet table, the GDR view of
/// `diagnose`): every line through [`text`], the line breaks kept.
pub fn lines(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c != '\n' && dangerous(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for (i, l) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&text(l));
    }
    Cow::Owned(out)
}

/// Every string of a report through [`text`] (findings, evidence, fixes, host, inventory, GDR
/// verdicts, probe records): what the table and JUnit renderers print. Borrowed when nothing
/// needed escaping.
pub fn report(r: &Report) -> Cow<'_, Report> {
    let Ok(mut v) = serde_json::to_value(r) else {
        return Cow::Owned(fallback(r));
    };
    if !walk(&mut v) {
        return Cow::Borrowed(r);
    }
    match serde_json::from_value(v) {
        Ok(clean) => Cow::Owned(clean),
        Err(_) => Cow::Owned(fallback(r)),
    }
}

/// Escape every string in a JSON value in place; whether anything changed.
fn walk(v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => match text(s) {
            Cow::Borrowed(_) => false,
            Cow::Owned(o) => {
                *s = o;
                true
            }
        },
        Value::Array(a) => a.iter_mut().fold(false, |ch, x| walk(x) | ch),
        Value::Object(m) => m.values_mut().fold(false, |ch, x| walk(x) | ch),
        _ => false,
    }
}

/// Should the JSON round trip ever fail: the fields the renderers print, escaped by hand.
fn fallback(r: &Report) -> Report {
    let t = |s: &str| text(s).into_owned();
    let mut c = r.clone();
    c.host.hostname = c.host.hostname.as_deref().map(t);
    c.host.kernel = c.host.kernel.as_deref().map(t);
    for f in &mut c.findings {
        f.id = t(&f.id);
        f.subject = t(&f.subject);
        f.message = t(&f.message);
        f.remediation = f.remediation.as_deref().map(t);
        for e in &mut f.evidence {
            e.source = t(&e.source);
            e.observed = t(&e.observed);
            e.expected = e.expected.as_deref().map(t);
        }
    }
    for p in &mut c.gdr {
        p.gpu = t(&p.gpu);
        p.nic = t(&p.nic);
        p.path = t(&p.path);
        p.reasons = p.reasons.iter().map(|s| t(s)).collect();
    }
    c.inventory.driver.nvidia_version = c.inventory.driver.nvidia_version.as_deref().map(t);
    c.inventory.driver.flavor = c.inventory.driver.flavor.as_deref().map(t);
    c.inventory.iommu.mode = t(&c.inventory.iommu.mode);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_not_obeyed() {
        assert!(matches!(text("mlx5_0 0000:19:00.0 ·"), Cow::Borrowed(_)));
        assert_eq!(text("a\u{1b}[2J\u{1b}[1;1Hb"), "a\\x1b[2J\\x1b[1;1Hb");
        assert_eq!(text("x\ny\tz\r"), "x\\ny\\tz\\r");
        assert_eq!(text("\u{9b}31m"), "\\u{009b}31m");
        assert_eq!(text("\u{7}\u{7f}"), "\\x07\\x7f");
        assert_eq!(text("abc\u{202e}def"), "abc\\u{202e}def");
        assert!(matches!(lines("a\nb\n"), Cow::Borrowed(_)));
        assert_eq!(
            lines("a\u{1b}]0;x\u{7}\nb\tc\n"),
            "a\\x1b]0;x\\x07\nb\\tc\n"
        );
        for c in (0u32..0x110000).filter_map(char::from_u32) {
            let s = c.to_string();
            assert!(!text(&s).chars().any(dangerous), "U+{:04X}", c as u32);
        }
    }
}
