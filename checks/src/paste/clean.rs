//! Undo what terminals, chat clients and issue trackers do to command output before a parser
//! sees it: CRLF line ends, carriage-return overwrites, ANSI escapes (current `nvidia-smi`
//! underlines the `topo -m` header even into a file), other control characters, a byte-order
//! mark, and quoting prefixes (`> ` from Markdown or mail, `// ` and `# ` from code comments).
//!
//! Each repair is unambiguous (the bytes removed carry no command output) and is reported once
//! per kind, so the evidence can say what was done to the text.

/// One line of a pasted file after cleaning, with its 1-based number in that file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub no: usize,
    pub text: String,
}

/// The cleaned lines and what was repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    pub lines: Vec<Line>,
    pub repairs: Vec<String>,
    /// The repairs made to each line, by line number.
    pub per_line: std::collections::BTreeMap<usize, Vec<String>>,
}

impl Cleaned {
    /// The repairs made to lines `first..=last`, each once.
    pub fn repairs_in(&self, first: usize, last: usize) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, r) in self.per_line.range(first..=last) {
            for x in r {
                if !out.contains(x) {
                    out.push(x.clone());
                }
            }
        }
        out
    }
}

/// Remove ANSI escape sequences (CSI `ESC [ ... final`, OSC `ESC ] ... BEL|ESC \`, and
/// two-byte `ESC x`) and control characters other than tab. Returns the text and whether
/// anything was removed, as (escapes, controls).
pub fn strip_escapes(s: &str) -> (String, bool, bool) {
    let mut out = String::with_capacity(s.len());
    let mut esc = false;
    let mut ctl = false;
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            esc = true;
            match it.peek().copied() {
                Some('[') => {
                    it.next();
                    // Parameters and intermediates, then one final byte in @..~.
                    for d in it.by_ref() {
                        if ('@'..='~').contains(&d) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    it.next();
                    while let Some(d) = it.next() {
                        if d == '\u{7}' {
                            break;
                        }
                        if d == '\u{1b}' {
                            if it.peek() == Some(&'\\') {
                                it.next();
                            }
                            break;
                        }
                    }
                }
                Some(_) => {
                    it.next();
                }
                None => {}
            }
            continue;
        }
        // C1 CSI (0x9b) behaves like ESC [.
        if c == '\u{9b}' {
            esc = true;
            for d in it.by_ref() {
                if ('@'..='~').contains(&d) {
                    break;
                }
            }
            continue;
        }
        if c.is_control() && c != '\t' {
            ctl = true;
            continue;
        }
        out.push(c);
    }
    (out, esc, ctl)
}

/// The quoting prefix of a line, if any: Markdown/mail `>` (nested too), `//`, `# `.
/// Returns the text after the prefix and the prefix as written.
pub fn strip_quote(s: &str) -> Option<(&str, &'static str)> {
    let t = s.trim_start_matches(' ');
    // Markdown allows up to three spaces before `>`.
    if s.len() - t.len() <= 3 {
        if let Some(rest) = t.strip_prefix('>') {
            let mut rest = rest.strip_prefix(' ').unwrap_or(rest);
            while let Some(r) = rest.strip_prefix('>') {
                rest = r.strip_prefix(' ').unwrap_or(r);
            }
            return Some((rest, "> "));
        }
    }
    if let Some(rest) = s.strip_prefix("// ") {
        return Some((rest, "// "));
    }
    if s == "//" {
        return Some(("", "// "));
    }
    if let Some(rest) = s.strip_prefix("# ") {
        return Some((rest, "# "));
    }
    if s == "#" {
        return Some(("", "# "));
    }
    None
}

const NBSP: &str = "no-break spaces and tabs read as spaces";
const ZERO_WIDTH: &str = "zero-width characters removed";

/// Spaces as web pages, chat and editors paste them: no-break and other Unicode spaces, and
/// tabs, become one space each (every reader splits on whitespace; a tab between `NCCL` and
/// `INFO` or `NVRM:` and `Xid` hid the line); zero-width characters and a byte-order mark
/// inside the text are removed. Returns the line and whether spaces / zero-width characters
/// were changed (a tab alone is no repair worth a note).
pub fn normalise_spaces(s: &str) -> (std::borrow::Cow<'_, str>, bool, bool) {
    let odd_space = |c: char| {
        matches!(
            c,
            '\u{a0}' | '\u{1680}' | '\u{2000}'..='\u{200a}' | '\u{202f}' | '\u{205f}' | '\u{3000}'
        )
    };
    let zero = |c: char| {
        matches!(
            c,
            '\u{200b}' | '\u{200c}' | '\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{00ad}'
        )
    };
    if !s.chars().any(|c| c == '\t' || odd_space(c) || zero(c)) {
        return (std::borrow::Cow::Borrowed(s), false, false);
    }
    let (mut sp, mut zw) = (false, false);
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '\t' {
            out.push(' ');
        } else if odd_space(c) {
            sp = true;
            out.push(' ');
        } else if zero(c) {
            zw = true;
        } else {
            out.push(c);
        }
    }
    (std::borrow::Cow::Owned(out), sp, zw)
}

/// Pasted bytes as text: UTF-8 (a byte-order mark dropped), or UTF-16 little- or big-endian
/// with its byte-order mark (PowerShell's `>`, Windows editors) or without one when every
/// other byte is NUL. Invalid sequences become U+FFFD. Also what was done, when anything was.
pub fn decode(bytes: &[u8]) -> (String, Option<String>) {
    let utf16 = |b: &[u8], le: bool| -> String {
        let units: Vec<u16> = b
            .chunks(2)
            .map(|c| {
                let (x, y) = (c[0], c.get(1).copied().unwrap_or(0));
                if le {
                    u16::from_le_bytes([x, y])
                } else {
                    u16::from_be_bytes([x, y])
                }
            })
            .collect();
        char::decode_utf16(units)
            .map(|r| r.unwrap_or('\u{fffd}'))
            .collect()
    };
    if let Some(b) = bytes.strip_prefix(&[0xff, 0xfe]) {
        return (
            utf16(b, true),
            Some("decoded from UTF-16LE (byte-order mark)".into()),
        );
    }
    if let Some(b) = bytes.strip_prefix(&[0xfe, 0xff]) {
        return (
            utf16(b, false),
            Some("decoded from UTF-16BE (byte-order mark)".into()),
        );
    }
    let b = bytes.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(bytes);
    // Without a mark: ASCII text in UTF-16 has a NUL in every other byte.
    if b.len() >= 4 {
        let n = b.len() / 2 * 2;
        let odd_nul = b[..n]
            .iter()
            .skip(1)
            .step_by(2)
            .filter(|x| **x == 0)
            .count();
        let even_nul = b[..n].iter().step_by(2).filter(|x| **x == 0).count();
        let half = n / 2;
        if odd_nul * 10 >= half * 9 && even_nul * 10 < half {
            return (utf16(b, true), Some("decoded from UTF-16LE".into()));
        }
        if even_nul * 10 >= half * 9 && odd_nul * 10 < half {
            return (utf16(b, false), Some("decoded from UTF-16BE".into()));
        }
    }
    (String::from_utf8_lossy(b).into_owned(), None)
}

/// Clean a pasted text into numbered lines.
pub fn clean(text: &str) -> Cleaned {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // Lines ended by a bare carriage return (an old Mac editor, some web forms): no line feed
    // anywhere but at the very end, and more than one `\r`. Read as if it were a line feed;
    // taken for terminal overwrites, the whole paste would be one line, its last.
    let cr_only = !text.trim_end_matches(['\n', '\r']).contains('\n')
        && text.matches('\r').take(2).count() == 2;
    let converted;
    let text = if cr_only {
        converted = text.replace("\r\n", "\n").replace('\r', "\n");
        converted.as_str()
    } else {
        text
    };
    let mut lines = Vec::new();
    let (mut crlf, mut cr, mut esc, mut ctl) = (false, false, false, false);
    let (mut nbsp, mut zw) = (false, false);
    let mut quotes: Vec<&'static str> = Vec::new();
    let mut per_line: std::collections::BTreeMap<usize, Vec<String>> = Default::default();
    for (i, raw) in text.split('\n').enumerate() {
        let mut mine: Vec<String> = Vec::new();
        let mut l = raw;
        if l.ends_with('\r') {
            crlf = true;
            l = l.trim_end_matches('\r');
            mine.push("CRLF line ends read as LF".into());
        }
        // A carriage return inside a line: the terminal showed what came after the last one.
        let l = match l.rfind('\r') {
            Some(p) => {
                cr = true;
                mine.push("carriage-return overwrites: kept the text after the last \\r".into());
                &l[p + 1..]
            }
            None => l,
        };
        let (l, spaces, zero) = normalise_spaces(l);
        nbsp |= spaces;
        zw |= zero;
        if spaces {
            mine.push(NBSP.into());
        }
        if zero {
            mine.push(ZERO_WIDTH.into());
        }
        let (t, e, c) = strip_escapes(&l);
        esc |= e;
        ctl |= c;
        if e {
            mine.push("ANSI escape sequences removed".into());
        }
        if c {
            mine.push("control characters removed".into());
        }
        let t = match strip_quote(&t) {
            Some((rest, q)) => {
                if !quotes.contains(&q) {
                    quotes.push(q);
                }
                mine.push(format!("quoting prefix `{}` removed", q.trim_end()));
                rest.to_string()
            }
            None => t,
        };
        if !mine.is_empty() {
            per_line.insert(i + 1, mine);
        }
        lines.push(Line {
            no: i + 1,
            text: t.trim_end().to_string(),
        });
    }
    // A final newline does not make an extra line.
    if lines.last().is_some_and(|l| l.text.is_empty()) && text.ends_with('\n') {
        lines.pop();
    }
    let mut repairs = Vec::new();
    if cr_only {
        repairs.push("lines ended by a bare carriage return read as LF".to_string());
    }
    if crlf {
        repairs.push("CRLF line ends read as LF".to_string());
    }
    if cr {
        repairs.push("carriage-return overwrites: kept the text after the last \\r".to_string());
    }
    if esc {
        repairs.push("ANSI escape sequences removed".to_string());
    }
    if ctl {
        repairs.push("control characters removed".to_string());
    }
    if nbsp {
        repairs.push(NBSP.to_string());
    }
    if zw {
        repairs.push(ZERO_WIDTH.to_string());
    }
    for q in quotes {
        repairs.push(format!("quoting prefix `{}` removed", q.trim_end()));
    }
    Cleaned {
        lines,
        repairs,
        per_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn no_break_and_zero_width_characters_are_spaces_and_nothing() {
        let c = clean("NVRM:\u{a0}Xid\u{200b} (PCI:0000:b3:00):\u{202f}79\tx\n");
        assert_eq!(c.lines[0].text, "NVRM: Xid (PCI:0000:b3:00): 79 x");
        assert!(c.repairs.iter().any(|r| r.contains("no-break")));
        assert!(c.repairs.iter().any(|r| r.contains("zero-width")));
        assert!(clean("a\tb\n").repairs.is_empty(), "a tab is no repair");
    }

    #[test]
    fn removes_ansi_crlf_and_quotes() {
        let c =
            clean("\u{1b}[4m\tGPU0\tNIC0\u{1b}[0m\r\n> GPU0\t X \tPIX\r\n// NIC0 PIX X\n# lsmod\n");
        let t: Vec<&str> = c.lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            t,
            // Tabs read as spaces (every reader splits on whitespace).
            vec![" GPU0 NIC0", "GPU0  X  PIX", "NIC0 PIX X", "lsmod"]
        );
        assert_eq!(c.lines[2].no, 3);
        assert!(c.repairs.iter().any(|r| r.contains("CRLF")));
        assert!(c.repairs.iter().any(|r| r.contains("ANSI")));
        assert!(c.repairs.iter().any(|r| r.contains("`>`")));
        assert!(c.repairs.iter().any(|r| r.contains("`//`")));
        assert!(c.repairs.iter().any(|r| r.contains("`#`")));
    }

    #[test]
    fn nested_quotes_and_osc() {
        let c = clean("> > NIC0: mlx5_0\n\u{1b}]0;title\u{7}text\n");
        assert_eq!(c.lines[0].text, "NIC0: mlx5_0");
        assert_eq!(c.lines[1].text, "text");
    }

    #[test]
    fn carriage_return_overwrite_keeps_the_last_segment() {
        let c = clean("progress 10%\rprogress 100%\n");
        assert_eq!(c.lines[0].text, "progress 100%");
    }

    #[test]
    fn lines_ended_by_bare_carriage_returns_are_lines() {
        let c = clean("[ 1.0] NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.\r[ 2.0] second\rthird\r");
        assert_eq!(c.lines.len(), 3, "{:?}", c.lines);
        assert!(c.lines[0].text.contains("Xid"));
        assert_eq!(c.lines[2].text, "third");
        assert!(c.repairs.iter().any(|r| r.contains("bare carriage return")));
        // One overwrite inside a line feed-ended text stays an overwrite.
        let c = clean("a\rb\nc\n");
        assert_eq!(c.lines[0].text, "b");
    }

    proptest! {
        #[test]
        fn never_panics_and_never_adds_text(s in "\\PC{0,300}") {
            let c = clean(&s);
            let total: usize = c.lines.iter().map(|l| l.text.len()).sum();
            prop_assert!(total <= s.len());
            for l in &c.lines {
                prop_assert!(!l.text.contains('\x1b'), "escape left");
            }
        }
    }
}
