//! A check page (`docs/checks/<id>.md`) laid out for the terminal, for `gdrdoctor explain`:
//! headings set apart, paragraphs and list items re-flowed to the width at spaces (never inside
//! a word) with hanging indents, code blocks kept verbatim and indented (a line wider than the
//! terminal is broken at a space and continues further in), tables aligned (or one record per
//! row when too wide), links followed by where they point.
//!
//! With color: headings bold, code cyan, emphasis bold/italic. Without: headings underlined
//! with `=`/`-`, inline code keeps its backticks, so nothing is lost in plain text.
//!
//! Prose is wrapped to the terminal width but at most [`MAX_PROSE`] columns, the line length
//! that stays readable; code and tables use the full width.

use super::{grid, wrap};
use anstyle::{AnsiColor, Style as Ansi};
use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// Prose lines are never longer than this, however wide the terminal.
pub const MAX_PROSE: usize = 100;
/// A code line too wide for the terminal continues this many columns further in.
const CODE_HANG: usize = 4;

#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Kind {
    strong: bool,
    emph: bool,
    code: bool,
    heading: bool,
}

/// A word is made of fragments of different kinds (`` `x`, `` is code then plain).
type Word = Vec<(String, Kind)>;

struct List {
    /// The next number of an ordered list.
    next: Option<u64>,
}

struct Ctx {
    color: bool,
    /// Full width (code, tables) and prose width.
    full: usize,
    prose: usize,
    out: String,
    /// Inline text of the block being read.
    words: Vec<Word>,
    /// The last fragment ended in whitespace: the next text starts a new word.
    space: bool,
    kind: Kind,
    /// Indentation of the current block's content.
    indent: usize,
    /// The list marker still to print on the first line of the next block in this item.
    marker: Option<String>,
    lists: Vec<List>,
    /// Indentation at each open item, to restore at its end.
    item_indent: Vec<usize>,
    quote: usize,
    code: Option<String>,
    link: Vec<String>,
    table: Option<Table>,
    /// Whether a blank line is owed before the next block.
    gap: bool,
}

#[derive(Default)]
struct Table {
    rows: Vec<Vec<String>>,
    cell: String,
    in_head: bool,
    head_rows: usize,
}

impl Ctx {
    fn push_text(&mut self, text: &str) {
        if let Some(t) = &mut self.table {
            t.cell.push_str(text);
            return;
        }
        for (i, piece) in text.split(' ').enumerate() {
            if i > 0 {
                self.space = true;
            }
            if piece.is_empty() {
                continue;
            }
            if self.space || self.words.is_empty() {
                self.words.push(Vec::new());
                self.space = false;
            }
            if let Some(w) = self.words.last_mut() {
                w.push((piece.to_string(), self.kind));
            }
        }
    }

    fn style(&self, text: &str, k: Kind) -> String {
        if !self.color {
            return text.to_string();
        }
        let mut s = Ansi::new();
        if k.heading || k.strong {
            s = s.bold();
        }
        if k.emph {
            s = s.italic();
        }
        if k.code {
            s = s.fg_color(Some(AnsiColor::Cyan.into()));
        }
        super::paint(text, s)
    }

    fn blank_line_if_owed(&mut self) {
        if self.gap && !self.out.is_empty() {
            self.out.push('\n');
        }
        self.gap = false;
    }

    fn prefix(&self) -> String {
        "| ".repeat(self.quote)
    }

    /// Write the gathered words as one wrapped block.
    fn flush(&mut self, heading: Option<HeadingLevel>) {
        if self.words.is_empty() {
            return;
        }
        self.blank_line_if_owed();
        let words = std::mem::take(&mut self.words);
        let quote = self.prefix();
        let marker = self.marker.take();
        let first_pad = match &marker {
            Some(m) => format!(
                "{}{m}",
                " ".repeat(self.indent.saturating_sub(wrap::width(m)))
            ),
            None => " ".repeat(self.indent),
        };
        let rest_pad = " ".repeat(self.indent);
        let max = self.prose.max(self.indent + 20);
        let mut lines: Vec<(usize, String)> = Vec::new(); // (plain width, styled text)
        let mut plain_line = 0usize;
        let mut line = String::new();
        let mut plain_all: Vec<String> = Vec::new();
        let mut cur_plain = String::new();
        for w in words {
            let plain: String = w.iter().map(|(t, _)| t.as_str()).collect();
            let ww = wrap::width(&plain);
            let start = wrap::width(&quote) + self.indent;
            if plain_line > 0 && start + plain_line + 1 + ww > max {
                lines.push((plain_line, std::mem::take(&mut line)));
                plain_all.push(std::mem::take(&mut cur_plain));
                plain_line = 0;
            }
            if plain_line > 0 {
                line.push(' ');
                cur_plain.push(' ');
                plain_line += 1;
            }
            for (t, k) in &w {
                line.push_str(&self.style(t, *k));
            }
            cur_plain.push_str(&plain);
            plain_line += ww;
        }
        lines.push((plain_line, line));
        plain_all.push(cur_plain);
        for (i, (_, l)) in lines.iter().enumerate() {
            let pad = if i == 0 { &first_pad } else { &rest_pad };
            self.out.push_str(&format!("{quote}{pad}{l}\n"));
        }
        if let Some(level) = heading {
            if !self.color {
                let ch = if level == HeadingLevel::H1 { '=' } else { '-' };
                let w = plain_all.iter().map(|l| wrap::width(l)).max().unwrap_or(0);
                self.out
                    .push_str(&format!("{quote}{}\n", ch.to_string().repeat(w)));
            }
        }
        self.gap = true;
    }

    fn code_block(&mut self, text: &str) {
        self.blank_line_if_owed();
        let quote = self.prefix();
        let marker = self.marker.take();
        let pad = " ".repeat(self.indent + 4);
        if let Some(m) = marker {
            // A code block that opens a list item: the marker on a line of its own.
            self.out.push_str(&format!(
                "{quote}{}{m}\n",
                " ".repeat(self.indent.saturating_sub(m.len()))
            ));
        }
        // Code is verbatim; only a line wider than the terminal is broken, at spaces, with its
        // continuation CODE_HANG columns further in (the terminal would cut it mid-word).
        let room = self
            .full
            .saturating_sub(1 + wrap::width(&quote) + pad.len())
            .max(20);
        for l in text.trim_end_matches('\n').split('\n') {
            let parts = break_code(l, room);
            for p in parts {
                let shown = if self.color {
                    super::paint(&p, AnsiColor::Cyan.on_default())
                } else {
                    p
                };
                self.out
                    .push_str(format!("{quote}{pad}{shown}").trim_end_matches(' '));
                self.out.push('\n');
            }
        }
        self.gap = true;
    }

    fn table_out(&mut self, t: Table) {
        self.blank_line_if_owed();
        let quote = self.prefix();
        let pad = " ".repeat(self.indent + 2);
        // Aligned (render::grid), every cell whole, the header rows set apart (bold, or a rule
        // of dashes under them), when the table fits the line after its indentation.
        let ncol = t.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..ncol)
            .map(|i| {
                t.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| wrap::width(c))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut rows: Vec<Vec<grid::Text>> = Vec::new();
        for (n, r) in t.rows.iter().enumerate() {
            let head = n < t.head_rows;
            rows.push(
                r.iter()
                    .map(|c| grid::Text::painted(c.as_str(), grid::Paint::None, head))
                    .collect(),
            );
            if n + 1 == t.head_rows && !self.color {
                rows.push(
                    widths
                        .iter()
                        .map(|w| grid::Text::from("-".repeat(*w)))
                        .collect(),
                );
            }
        }
        let g = grid::Grid::new(
            (0..ncol)
                .map(|_| grid::Column::new("", grid::Fit::Keep))
                .collect(),
        )
        .without_header()
        .indent(0)
        .color(self.color);
        let room = self.full.saturating_sub(wrap::width(&quote) + pad.len());
        if let Some(table) = grid::fit(&g, &rows, room) {
            for l in table.lines() {
                self.out.push_str(format!("{quote}{pad}{l}").trim_end());
                self.out.push('\n');
            }
        } else {
            // Too wide to align: one record per row, a `header: value` line per cell, wrapped.
            let head = t.rows.first().cloned().unwrap_or_default();
            for r in t.rows.iter().skip(t.head_rows) {
                for (i, cell) in r.iter().enumerate() {
                    let text = match head.get(i).filter(|h| !h.is_empty() && t.head_rows > 0) {
                        Some(h) => format!("{h}: {cell}"),
                        None => cell.clone(),
                    };
                    let first = format!("{quote}{pad}{}", if i == 0 { "- " } else { "  " });
                    let w = wrap::width(&first);
                    self.out.push_str(&wrap::hanging(
                        &first,
                        w,
                        w + 2,
                        &text,
                        self.prose.max(w + 20),
                    ));
                }
            }
        }
        self.gap = true;
    }
}

/// Lay out `md` for a terminal `width` columns wide.
pub fn render(md: &str, width: usize, color: bool) -> String {
    let full = width.max(40);
    let mut c = Ctx {
        color,
        full,
        prose: full.saturating_sub(1).min(MAX_PROSE),
        out: String::new(),
        words: Vec::new(),
        space: false,
        kind: Kind::default(),
        indent: 0,
        marker: None,
        lists: Vec::new(),
        item_indent: Vec::new(),
        quote: 0,
        code: None,
        link: Vec::new(),
        table: None,
        gap: false,
    };
    let mut heading: Option<HeadingLevel> = None;
    for ev in Parser::new_ext(md, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
        match ev {
            Event::Start(tag) => match tag {
                Tag::Paragraph => c.flush(None),
                Tag::Heading { level, .. } => {
                    c.flush(None);
                    heading = Some(level);
                    c.kind.heading = true;
                    c.gap = true;
                }
                Tag::BlockQuote(_) => {
                    c.flush(None);
                    c.quote += 1;
                }
                Tag::CodeBlock(_) => {
                    c.flush(None);
                    c.code = Some(String::new());
                }
                Tag::List(start) => {
                    c.flush(None);
                    c.lists.push(List { next: start });
                    // A blank line before a list, none before a list nested in an item.
                    c.gap = c.lists.len() == 1;
                }
                Tag::Item => {
                    c.flush(None);
                    c.item_indent.push(c.indent);
                    let marker = match c.lists.last_mut() {
                        Some(List { next: Some(n) }) => {
                            let m = format!("{n}. ");
                            *n += 1;
                            m
                        }
                        _ => "- ".to_string(),
                    };
                    c.indent += wrap::width(&marker);
                    c.marker = Some(marker);
                }
                Tag::Emphasis => c.kind.emph = true,
                Tag::Strong => c.kind.strong = true,
                Tag::Link { dest_url, .. } => c.link.push(dest_url.to_string()),
                Tag::Table(_) => {
                    c.flush(None);
                    c.table = Some(Table::default());
                }
                Tag::TableHead => {
                    if let Some(t) = &mut c.table {
                        t.in_head = true;
                        t.rows.push(Vec::new());
                    }
                }
                Tag::TableRow => {
                    if let Some(t) = &mut c.table {
                        t.rows.push(Vec::new());
                    }
                }
                Tag::TableCell => {
                    if let Some(t) = &mut c.table {
                        t.cell.clear();
                    }
                }
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Paragraph => c.flush(None),
                TagEnd::Heading(_) => {
                    c.flush(heading.take());
                    c.kind.heading = false;
                }
                TagEnd::BlockQuote(_) => {
                    c.flush(None);
                    c.quote = c.quote.saturating_sub(1);
                }
                TagEnd::CodeBlock => {
                    let text = c.code.take().unwrap_or_default();
                    c.code_block(&text);
                }
                TagEnd::List(_) => {
                    c.flush(None);
                    c.lists.pop();
                    c.gap = true;
                }
                TagEnd::Item => {
                    c.flush(None);
                    c.indent = c.item_indent.pop().unwrap_or(0);
                    // Items of a tight list follow each other without a blank line.
                    c.gap = false;
                }
                TagEnd::Emphasis => c.kind.emph = false,
                TagEnd::Strong => c.kind.strong = false,
                TagEnd::Link => {
                    if let Some(url) = c.link.pop() {
                        if let Some(note) = link_note(&url) {
                            c.push_text(&format!(" ({note})"));
                        }
                    }
                }
                TagEnd::Table => {
                    if let Some(t) = c.table.take() {
                        c.table_out(t);
                    }
                }
                TagEnd::TableHead => {
                    if let Some(t) = &mut c.table {
                        t.in_head = false;
                        t.head_rows = t.rows.len();
                    }
                }
                TagEnd::TableCell => {
                    if let Some(t) = &mut c.table {
                        let cell = t.cell.trim().to_string();
                        if let Some(r) = t.rows.last_mut() {
                            r.push(cell);
                        }
                    }
                }
                _ => {}
            },
            Event::Text(t) => {
                if let Some(code) = &mut c.code {
                    code.push_str(&t);
                } else {
                    c.push_text(&t);
                }
            }
            Event::Code(t) => {
                if c.table.is_some() {
                    c.push_text(&t);
                } else {
                    let saved = c.kind;
                    c.kind.code = true;
                    let shown = if c.color {
                        t.to_string()
                    } else {
                        format!("`{t}`")
                    };
                    c.push_text(&shown);
                    c.kind = saved;
                }
            }
            Event::Html(t) | Event::InlineHtml(t) => {
                if let Some(code) = &mut c.code {
                    code.push_str(&t);
                } else {
                    c.push_text(t.trim_end_matches('\n'));
                }
            }
            Event::SoftBreak => c.push_text(" "),
            Event::HardBreak => c.flush(None),
            Event::Rule => {
                c.flush(None);
                c.blank_line_if_owed();
                let w = c.prose.min(40);
                c.out.push_str(&format!("{}\n", "-".repeat(w)));
                c.gap = true;
            }
            Event::FootnoteReference(t) => c.push_text(&format!("[{t}]")),
            Event::TaskListMarker(done) => c.push_text(if done { "[x]" } else { "[ ]" }),
            _ => {}
        }
    }
    c.flush(None);
    c.out
}

/// A code line as lines of at most `room` columns: verbatim when it fits; else broken at the
/// last space that fits (runs of spaces inside each piece kept, so columns stay aligned), the
/// pieces after the first indented [`CODE_HANG`] columns more than the line. A word wider
/// than the room stays whole, on a piece of its own.
fn break_code(line: &str, room: usize) -> Vec<String> {
    if wrap::width(line) <= room {
        return vec![line.to_string()];
    }
    let body = line.trim_start();
    let lead = &line[..line.len() - body.len()];
    let cont = format!("{lead}{}", " ".repeat(CODE_HANG));
    let mut out = Vec::new();
    let mut rest = body;
    let mut prefix = lead.to_string();
    loop {
        let limit = room.saturating_sub(wrap::width(&prefix));
        if wrap::width(rest) <= limit {
            out.push(format!("{prefix}{rest}"));
            break;
        }
        // The last space whose text before it fits, not counting leading ones.
        let mut cut = None;
        let mut w = 0;
        for (i, ch) in rest.char_indices() {
            if ch == ' ' && i > 0 && w <= limit {
                cut = Some(i);
            }
            w += unicode_width::UnicodeWidthChar::width(ch).unwrap_or(0);
            if w > limit && cut.is_some() {
                break;
            }
        }
        match cut {
            Some(i) => {
                out.push(format!("{prefix}{}", rest[..i].trim_end()));
                rest = rest[i..].trim_start();
                prefix.clone_from(&cont);
            }
            // Not even one word fits: break after the first word (it overflows alone).
            None => match rest.find(' ') {
                Some(i) => {
                    out.push(format!("{prefix}{}", &rest[..i]));
                    rest = rest[i..].trim_start();
                    prefix.clone_from(&cont);
                }
                None => {
                    out.push(format!("{prefix}{rest}"));
                    break;
                }
            },
        }
    }
    out
}

/// What a link's text is followed by: the address of a web link, the docs path of a page
/// outside docs/checks; nothing for another check's page (its text names it: `gdrdoctor
/// explain` shows it) or for an anchor.
fn link_note(url: &str) -> Option<String> {
    if url.starts_with('#') || url.is_empty() {
        return None;
    }
    if url.contains("://") || url.starts_with("mailto:") {
        return Some(url.to_string());
    }
    let path = url.split('#').next().unwrap_or(url);
    if let Some(id) = path.strip_suffix(".md").filter(|p| !p.contains('/')) {
        if gdrdoctor_checks::findings::page(id).is_some() {
            return Some(format!("gdrdoctor explain {id}"));
        }
    }
    let p = path
        .strip_prefix("../")
        .map_or_else(|| format!("docs/checks/{path}"), |p| format!("docs/{p}"));
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# kmod.x: a title that is long enough to need wrapping at forty columns

**Category:** kmod · **Statuses:** pass, fail

## What it checks

The check repeats NCCL's peer-memory test. It asks whether any of these three files
exists, then says `/sys/module/nvidia_peermem/version` is there.

```
modprobe nvidia-peermem   # a long command line that must never be wrapped by the renderer
```

- **pass**: at least one file exists. The message says how the client was found:
  - \"nvidia_peermem loaded\" when the file exists;
  - otherwise registered.
- **fail**: none.

1. Load it:
   ```
   modprobe nvidia-peermem
   ```
2. See [topology](../topology.md) and [the other](pcie.acs-redirect.md).

| bit | name | meaning |
|---|---|---|
| `0x01` | SrcValid | source validation |
";

    fn plain(w: usize) -> String {
        render(PAGE, w, false)
    }

    #[test]
    fn headings_are_set_apart_without_markers() {
        let out = plain(80);
        assert!(!out.lines().any(|l| l.starts_with('#')), "{out}");
        assert!(
            out.contains("\n\nWhat it checks\n--------------\n\n"),
            "{out}"
        );
        let title = "kmod.x: a title that is long enough to need wrapping at forty columns";
        assert!(
            out.starts_with(&format!("{title}\n{}\n\n", "=".repeat(title.len()))),
            "{out}"
        );
        assert!(
            out.contains("\nCategory: kmod · Statuses: pass, fail\n"),
            "{out}"
        );
        assert!(!out.contains("**"), "{out}");
        // A heading wider than the line wraps, and its rule is as wide as its widest line.
        let out = plain(40);
        let want = format!(
            "kmod.x: a title that is long enough to\nneed wrapping at forty columns\n{}\n",
            "=".repeat(38)
        );
        assert!(out.starts_with(&want), "{out}");
    }

    #[test]
    fn prose_is_reflowed_and_never_cut_inside_a_word() {
        for w in [40, 60, 80, 120, 200] {
            let out = plain(w);
            let prose_max = (w - 1).min(MAX_PROSE);
            for l in out
                .lines()
                .filter(|l| !l.starts_with("        ") && !l.contains("modprobe"))
            {
                assert!(wrap::width(l) <= prose_max, "{w}: {l:?}");
            }
            // Every word of the source paragraph is there, whole.
            for word in [
                "peer-memory",
                "`/sys/module/nvidia_peermem/version`",
                "whether",
            ] {
                assert!(
                    out.split_whitespace()
                        .any(|t| t.trim_end_matches(',') == word),
                    "{w}: {word}\n{out}"
                );
            }
        }
        // Re-flowed: the source's line break after "files" is gone at 120 columns.
        assert!(
            plain(120).contains("these three files exists"),
            "{}",
            plain(120)
        );
    }

    #[test]
    fn code_is_verbatim_and_indented() {
        let out = plain(100);
        assert!(out.contains(
            "\n    modprobe nvidia-peermem   # a long command line that must never be wrapped by the renderer\n"
        ), "{out}");
        // Wider than the terminal: broken at a space, the continuation further in, the
        // spaces inside kept.
        let out = plain(60);
        assert!(out.contains(
            "\n    modprobe nvidia-peermem   # a long command line that\n        must never be wrapped by the renderer\n"
        ), "{out}");
        assert_eq!(break_code("  a  b   c", 6), vec!["  a  b", "      c"]);
        assert_eq!(break_code("  abcdefgh", 6), vec!["  abcdefgh"]);
        assert_eq!(
            break_code("ab cd ef gh", 5),
            vec!["ab cd", "    ef", "    gh"]
        );
        // Inside a numbered item the code block is indented under the item's text.
        assert!(
            out.contains("1. Load it:\n\n       modprobe nvidia-peermem\n"),
            "{out}"
        );
    }

    #[test]
    fn lists_hang_and_nest() {
        let out = plain(60);
        assert!(
            out.contains(
                "- pass: at least one file exists. The message says how the\n  client was found:\n"
            ),
            "{out}"
        );
        assert!(out.contains("client was found:\n  - \"nvidia_peermem loaded\" when the file exists;\n  - otherwise registered.\n- fail: none.\n"), "{out}");
        assert!(out.contains("\n2. See topology (docs/topology.md) and the other (gdrdoctor\n   explain pcie.acs-redirect).\n"), "{out}");
    }

    #[test]
    fn tables_align_or_become_records() {
        let out = plain(80);
        assert!(out.contains("  bit   name      meaning\n  ----  --------  -----------------\n  0x01  SrcValid  source validation\n"), "{out}");
        let narrow = render("| a | b |\n|---|---|\n| a very long cell that cannot fit | another long cell of text |\n", 40, false);
        assert!(
            narrow.contains(
                "  - a: a very long cell that cannot fit\n    b: another long cell of text\n"
            ),
            "{narrow}"
        );
    }

    #[test]
    fn color_styles_instead_of_markers() {
        let out = render(PAGE, 80, true);
        assert!(out.contains("\x1b[1m"), "{out}");
        assert!(!out.contains("`/sys/module"), "{out}");
        assert!(!out.contains("====="), "{out}");
    }

    #[test]
    fn every_check_page_renders_within_the_width() {
        for (id, page) in gdrdoctor_checks::findings::all().map(|f| (f.id, f.page)) {
            for w in [80, 200] {
                let out = render(page, w, false);
                assert!(out.lines().count() > 5, "{id}");
                let source: Vec<&str> = page.lines().map(str::trim).collect();
                for l in out.lines() {
                    if wrap::width(l) < w {
                        continue;
                    }
                    // Only a verbatim code line, or one word too long for any line (after
                    // its indentation and list marker), may be longer.
                    let word = l.trim_start().trim_start_matches("- ").trim_start();
                    assert!(
                        source.contains(&l.trim()) || !word.contains(' '),
                        "{id} at {w}: {l:?}"
                    );
                }
            }
        }
    }
}
