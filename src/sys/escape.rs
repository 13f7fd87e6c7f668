//! One escaper per output language, for text that comes from the node, a snapshot, a paste,
//! a report or a progress area (input an attacker can write):
//!
//! - the terminal ([`text`], [`lines`], [`message`]): an escape sequence in a device name would otherwise
//!   move the cursor, rewrite earlier lines (a `FAIL` turned into `PASS` on screen), set the
//!   window title or, on some terminals, answer back. Escaped, visibly, as Rust writes them: the
//!   C0 controls and DEL (`\x1b`, `\n`, `\t`, ...), the C1 controls U+0080-U+009F (U+009B is a
//!   one-character CSI), and the Unicode bidirectional overrides and isolates (U+202A-U+202E,
//!   U+2066-U+2069, "Trojan Source": they reorder what is shown);
//! - XML ([`xml_attr`], [`xml_text`]): JUnit and the SVG pictures;
//! - HTML ([`html`]): the fleet page;
//! - Markdown table cells ([`markdown_cell`]): `diagnose --format markdown`;
//! - Prometheus label values ([`prometheus_label`]): `check` and `fleet` metrics.
//!
//! (TOML strings are the pure crate's: `gdrdoctor_checks::policy::init::toml_str`.)

use std::borrow::Cow;

/// Whether `c` must not reach a terminal as is.
pub fn dangerous(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether `s` holds a character [`text`] escapes: printable ASCII is decided a byte at a time.
pub fn any_dangerous(s: &str) -> bool {
    s.bytes().any(|b| !(0x20..0x7f).contains(&b)) && s.chars().any(dangerous)
}

/// `s` with every control character escaped (`\x1b[31m` shows as the text `\x1b[31m`);
/// borrowed when there is nothing to escape.
pub fn text(s: &str) -> Cow<'_, str> {
    if !any_dangerous(s) {
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

/// An error message for the terminal: as [`text`], but its line breaks and tabs are kept (a
/// policy error quotes the line and points at the column under it: `\n` escapes made that one
/// line of `\n`s). Every other control character, a carriage return included (it would let a
/// line overwrite itself), is escaped.
pub fn message(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c != '\n' && c != '\t' && dangerous(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for (i, l) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for (j, part) in l.split('\t').enumerate() {
            if j > 0 {
                out.push('\t');
            }
            out.push_str(&text(part));
        }
    }
    Cow::Owned(out)
}

/// An XML attribute value: `&`, `<`, `>`, quotes and the whitespace controls escaped,
/// characters XML 1.0 cannot carry at all dropped.
pub fn xml_attr(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            '\n' => o.push_str("&#10;"),
            '\r' => o.push_str("&#13;"),
            '\t' => o.push_str("&#9;"),
            c if xml_char(c) => o.push(c),
            _ => {}
        }
    }
    o
}

/// XML text content: `&`, `<`, `>` escaped, characters XML cannot carry dropped.
pub fn xml_text(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '\r' => o.push_str("&#13;"),
            c if xml_char(c) => o.push(c),
            _ => {}
        }
    }
    o
}

/// XML 1.0 `Char`: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF].
fn xml_char(c: char) -> bool {
    matches!(c as u32, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

/// HTML text or a double- or single-quoted attribute value.
pub fn html(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Markdown prose (GitHub-flavoured) that shows the text, never renders it: HTML is entities
/// (`<img onerror=...>` is shown, not run), and the characters that start emphasis, links,
/// images, code, strikethrough or a table cell are backslash-escaped; a line break becomes a
/// space (the text stays in its list item or cell).
pub fn markdown(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' | '#' | '!' => {
                o.push('\\');
                o.push(c);
            }
            '\n' | '\r' => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// A cell of a Markdown table: [`markdown`], whose `|` would otherwise end the cell.
pub fn markdown_cell(s: &str) -> String {
    markdown(s)
}

/// A Markdown code span holding `s` verbatim: fenced by more backticks than any run inside
/// it (padded with a space where it starts or ends with one); a line break becomes a space.
pub fn markdown_code(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ");
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// A Prometheus label value (text exposition format): backslash, double quote and line feed.
pub fn prometheus_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_language_escapes_what_it_must() {
        assert_eq!(xml_text("a<b>&\"c\u{1}"), "a&lt;b&gt;&amp;\"c");
        assert_eq!(
            xml_attr("a<b>&\"c'\n\u{1}"),
            "a&lt;b&gt;&amp;&quot;c&apos;&#10;"
        );
        assert_eq!(
            html("<a href='x'>&\""),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;"
        );
        assert_eq!(markdown_cell("a|b\nc"), "a\\|b c");
        assert_eq!(
            markdown("<img src=x onerror=alert(1)> [x](javascript:y) **b**"),
            "&lt;img src=x onerror=alert(1)&gt; \\[x\\](javascript:y) \\*\\*b\\*\\*"
        );
        assert_eq!(markdown_code("a`b"), "``a`b``");
        assert_eq!(markdown_code("`x`"), "`` `x` ``");
        assert_eq!(markdown_code("<b>"), "`<b>`");
        assert_eq!(prometheus_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(text("ok"), "ok");
        assert_eq!(text("\u{1b}[31mFAIL\u{202e}"), "\\x1b[31mFAIL\\u{202e}");
        assert_eq!(lines("a\nb\u{7}"), "a\nb\\x07");
        assert_eq!(message("a\n\tb"), "a\n\tb");
        assert_eq!(
            message("x:3:1: bad\n  3 | k = \"\u{1b}[2J\r\u{202e}\"\n    | ^"),
            "x:3:1: bad\n  3 | k = \"\\x1b[2J\\r\\u{202e}\"\n    | ^"
        );
    }
}
