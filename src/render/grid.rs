//! Every text table of gdrdoctor (check, probe and watch's findings, fleet's roll-up, diagnose's
//! blocks, topo's matrices) is laid out here, by comfy-table: columns side by side with two
//! spaces between them, no borders, the header (when there is one) on the first line, cells
//! wrapped at spaces into the room the terminal leaves (`ContentArrangement::Dynamic` at the
//! width asked for: the terminal's, or a fixed one when stdout is not a terminal, so that a
//! script reads the same bytes every time).
//!
//! Each column says how it may be laid out ([`Fit`]); a table whose columns cannot fit the width
//! answers `None` from [`fit`], and its caller tries a narrower arrangement (fewer columns, a
//! stacked row) or takes [`force`], where comfy-table cuts what does not fit. Lines end without
//! trailing spaces and stay one column short of the width, so a terminal never wraps them itself.

use comfy_table::{
    Attribute, Cell, CellAlignment, Color, ColumnConstraint, ContentArrangement, Table, Width,
};
use unicode_width::UnicodeWidthStr;

/// How a column may be laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Never wrapped: as wide as its widest entry (a status, a check id, a number).
    Keep,
    /// Wrapped at spaces, never narrower than its longest word: no word is cut.
    Words,
    /// Wrapped at spaces, at least this many columns (or its widest entry, if less); a word
    /// wider than the column is cut (comfy-table's own split).
    Min(usize),
}

/// One column: its header, how it fits, and whether it is right-aligned (numbers).
#[derive(Debug, Clone)]
pub struct Column {
    pub head: String,
    pub fit: Fit,
    pub right: bool,
    /// At least this wide (so that tables printed one after the other line up).
    pub at_least: usize,
}

impl Column {
    pub fn new(head: &str, fit: Fit) -> Column {
        Column {
            head: head.to_string(),
            fit,
            right: false,
            at_least: 0,
        }
    }

    /// The same column, at least `n` columns wide.
    pub fn at_least(mut self, n: usize) -> Column {
        self.at_least = n;
        self
    }

    /// The same column, right-aligned.
    pub fn right(mut self) -> Column {
        self.right = true;
        self
    }
}

/// How a cell is painted when colour is on. Colour never changes the layout: comfy-table
/// measures the text, then paints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Paint {
    #[default]
    None,
    Green,
    Yellow,
    Red,
    Magenta,
    Cyan,
    Dim,
}

/// One cell: its text and its paint.
#[derive(Debug, Clone, Default)]
pub struct Text {
    pub text: String,
    pub paint: Paint,
    pub bold: bool,
}

impl Text {
    pub fn painted(text: impl Into<String>, paint: Paint, bold: bool) -> Text {
        Text {
            text: text.into(),
            paint,
            bold,
        }
    }
}

impl From<String> for Text {
    fn from(text: String) -> Text {
        Text {
            text,
            ..Text::default()
        }
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Text {
        Text::from(text.to_string())
    }
}

/// The layout of one table.
#[derive(Debug, Clone)]
pub struct Grid {
    pub columns: Vec<Column>,
    /// Print the column heads as the first line.
    pub header: bool,
    /// Spaces before the first column.
    pub indent: usize,
    /// Spaces between two columns (at least one).
    pub gap: usize,
    /// Paint the cells (`--color`).
    pub color: bool,
}

impl Grid {
    pub fn new(columns: Vec<Column>) -> Grid {
        Grid {
            columns,
            header: true,
            indent: 1,
            gap: 2,
            color: false,
        }
    }

    pub fn without_header(mut self) -> Grid {
        self.header = false;
        self
    }

    pub fn indent(mut self, indent: usize) -> Grid {
        self.indent = indent;
        self
    }

    pub fn gap(mut self, gap: usize) -> Grid {
        self.gap = gap.max(1);
        self
    }

    pub fn color(mut self, color: bool) -> Grid {
        self.color = color;
        self
    }
}

/// Display width of plain text.
fn width(s: &str) -> usize {
    s.lines().map(UnicodeWidthStr::width).max().unwrap_or(0)
}

fn longest_word(s: &str) -> usize {
    s.split([' ', '\n'])
        .map(UnicodeWidthStr::width)
        .max()
        .unwrap_or(0)
}

/// The narrowest each column can be (its content, without padding).
fn minimums(g: &Grid, rows: &[Vec<Text>]) -> Vec<usize> {
    g.columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let cells = rows
                .iter()
                .filter_map(|r| r.get(i).map(|t| t.text.as_str()))
                .chain(g.header.then_some(c.head.as_str()));
            let widest = || cells.clone().map(width).max().unwrap_or(0);
            match c.fit {
                Fit::Keep => widest(),
                Fit::Words => cells.clone().map(longest_word).max().unwrap_or(0),
                Fit::Min(n) => widest().min(n),
            }
            .max(c.at_least)
            .max(1)
        })
        .collect()
}

/// The padding of column `i`: the indent before the first, the gap between columns (one space
/// after each column, the rest before the next), one after the last (trimmed from every line).
fn padding(g: &Grid, i: usize) -> (usize, usize) {
    (if i == 0 { g.indent } else { g.gap.max(1) - 1 }, 1)
}

/// The columns laid out in `width` terminal columns, or `None` when they cannot be: the
/// narrowest every column may be is wider than the line.
pub fn fit(g: &Grid, rows: &[Vec<Text>], width: usize) -> Option<String> {
    let min = minimums(g, rows);
    let total: usize = min
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (l, r) = padding(g, i);
            m + l + r
        })
        .sum();
    (total <= width).then(|| lay_out(g, rows, width, &min))
}

/// As [`fit`], and when the columns cannot fit, laid out anyway: comfy-table cuts words, and
/// what cannot be cut (a column that keeps its width) sticks out.
pub fn force(g: &Grid, rows: &[Vec<Text>], width: usize) -> String {
    fit(g, rows, width).unwrap_or_else(|| {
        // Loosen every wrapping column to one column of room.
        let loose = Grid {
            columns: g
                .columns
                .iter()
                .map(|c| Column {
                    fit: match c.fit {
                        Fit::Keep => Fit::Keep,
                        _ => Fit::Min(1),
                    },
                    ..c.clone()
                })
                .collect(),
            ..g.clone()
        };
        let min = minimums(&loose, rows);
        lay_out(&loose, rows, width, &min)
    })
}

/// [`fit`] as asked; else with every [`Fit::Words`] column loosened to `Fit::Min(min)` (a word
/// wider than its column is cut); else [`force`].
pub fn best(g: &Grid, rows: &[Vec<Text>], width: usize, min: usize) -> String {
    fit(g, rows, width).unwrap_or_else(|| {
        let loose = Grid {
            columns: g
                .columns
                .iter()
                .map(|c| Column {
                    fit: match c.fit {
                        Fit::Words => Fit::Min(min),
                        f => f,
                    },
                    ..c.clone()
                })
                .collect(),
            ..g.clone()
        };
        force(&loose, rows, width)
    })
}

/// The first of `layouts` (widest first) whose columns fit `width`; when none does, the last
/// one [`force`]d.
pub fn first_fit(layouts: &[Grid], rows: &[Vec<Text>], width: usize) -> String {
    layouts
        .iter()
        .find_map(|g| fit(g, rows, width))
        .or_else(|| layouts.last().map(|g| force(g, rows, width)))
        .unwrap_or_default()
}

fn to_u16(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

fn cell(t: &Text, color: bool) -> Cell {
    let mut c = Cell::new(&t.text);
    if !color {
        return c;
    }
    c = match t.paint {
        Paint::None => c,
        Paint::Green => c.fg(Color::Green),
        Paint::Yellow => c.fg(Color::Yellow),
        Paint::Red => c.fg(Color::Red),
        Paint::Magenta => c.fg(Color::Magenta),
        Paint::Cyan => c.fg(Color::Cyan),
        Paint::Dim => c.add_attribute(Attribute::Dim),
    };
    if t.bold {
        c = c.add_attribute(Attribute::Bold);
    }
    c
}

fn lay_out(g: &Grid, rows: &[Vec<Text>], width: usize, min: &[usize]) -> String {
    let mut t = Table::new();
    // No borders: columns are told apart by their padding alone.
    t.load_style(comfy_table::presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(to_u16(width))
        // Never asks stdout whether it is a terminal: the caller decided colour and width.
        .force_no_tty();
    if g.color {
        t.enforce_styling();
    }
    let n = g.columns.len();
    if g.header {
        t.set_header(g.columns.iter().map(|c| Cell::new(&c.head)));
    }
    for r in rows {
        let mut cells: Vec<Cell> = r.iter().take(n).map(|x| cell(x, g.color)).collect();
        cells.resize_with(n, || Cell::new(""));
        t.add_row(cells);
    }
    for (i, c) in g.columns.iter().enumerate() {
        let Some(col) = t.column_mut(i) else {
            continue;
        };
        let (l, r) = padding(g, i);
        col.set_padding((to_u16(l), to_u16(r)));
        if c.right {
            col.set_cell_alignment(CellAlignment::Right);
        }
        col.set_constraint(match c.fit {
            Fit::Keep if c.at_least > 0 => {
                ColumnConstraint::Absolute(Width::Fixed(to_u16(min[i] + l + r)))
            }
            Fit::Keep => ColumnConstraint::ContentWidth,
            // comfy-table's bounds count the padding.
            Fit::Words | Fit::Min(_) => {
                ColumnConstraint::LowerBoundary(Width::Fixed(to_u16(min[i] + l + r)))
            }
        });
    }
    let mut out = String::new();
    for line in t.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The display width of a line that may carry colour codes.
pub fn visible_width(line: &str) -> usize {
    let mut w = 0;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            // CSI: parameters up to the final byte.
            for d in chars.by_ref() {
                if ('@'..='~').contains(&d) && d != '[' {
                    break;
                }
            }
            continue;
        }
        w += unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
    }
    w
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rows(r: &[&[&str]]) -> Vec<Vec<Text>> {
        r.iter()
            .map(|r| r.iter().map(|s| Text::from(*s)).collect())
            .collect()
    }

    #[test]
    fn columns_side_by_side_two_spaces_apart() {
        let g = Grid::new(vec![
            Column::new("STATUS", Fit::Keep),
            Column::new("CHECK", Fit::Keep),
            Column::new("MESSAGE", Fit::Min(10)),
        ]);
        let out = fit(
            &g,
            &rows(&[
                &["PASS", "gpu.present", "8 gpus"],
                &["FAIL", "rdma.ports", "down"],
            ]),
            80,
        )
        .unwrap();
        assert_eq!(
            out,
            " STATUS  CHECK        MESSAGE\n PASS    gpu.present  8 gpus\n FAIL    rdma.ports   down\n"
        );
    }

    #[test]
    fn the_last_column_wraps_at_spaces_under_itself() {
        let g = Grid::new(vec![
            Column::new("ID", Fit::Keep),
            Column::new("TEXT", Fit::Words),
        ])
        .without_header();
        let out = fit(
            &g,
            &rows(&[&["a.b", "the quick brown fox jumps over the lazy dog"]]),
            20,
        )
        .unwrap();
        assert_eq!(
            out,
            " a.b  the quick\n      brown fox\n      jumps over\n      the lazy dog\n"
        );
        for l in out.lines() {
            assert!(width(l) < 20, "{l:?}");
        }
    }

    #[test]
    fn whole_words_do_not_fit_a_narrow_line() {
        let g = Grid::new(vec![
            Column::new("ID", Fit::Keep),
            Column::new("TEXT", Fit::Words),
        ]);
        let r = rows(&[&["a.b", "see /sys/kernel/mm/memory_peers/nv_mem"]]);
        assert!(fit(&g, &r, 30).is_none());
        assert!(fit(&g, &r, 40).is_none());
        assert!(fit(&g, &r, 41).is_some());
        // Forced: the word is cut and every line fits.
        let out = force(&g, &r, 30);
        for l in out.lines() {
            assert!(width(l) < 30, "{l:?}");
        }
        let joined: String = out.split_whitespace().collect();
        assert!(joined.contains("/sys/kernel/mm/"), "{out}");
    }

    #[test]
    fn color_paints_without_moving_anything() {
        let g = Grid::new(vec![
            Column::new("STATUS", Fit::Keep),
            Column::new("MESSAGE", Fit::Words),
        ]);
        let r = vec![vec![
            Text::painted("FAIL", Paint::Red, true),
            Text::from("port is down and nothing else is up"),
        ]];
        let plain = fit(&g, &r, 30).unwrap();
        let painted = fit(&g.clone().color(true), &r, 30).unwrap();
        assert!(painted.contains('\x1b'), "{painted:?}");
        assert!(!plain.contains('\x1b'));
        let stripped: Vec<usize> = painted.lines().map(visible_width).collect();
        let widths: Vec<usize> = plain.lines().map(width).collect();
        assert_eq!(stripped, widths);
    }

    #[test]
    fn numbers_align_right() {
        let g = Grid::new(vec![
            Column::new("CHECK", Fit::Keep),
            Column::new("PASS", Fit::Keep).right(),
        ]);
        let out = fit(&g, &rows(&[&["a", "3"], &["b", "12"]]), 80).unwrap();
        assert_eq!(out, " CHECK  PASS\n a         3\n b        12\n");
    }
}
