//! Word wrapping for terminal text: lines break at spaces only, never inside a word. A word
//! longer than the line gets a line of its own and overflows it (a path or an id cut in two is
//! worse than a long line). Widths are display columns (`unicode-width`), so `·` counts one.

use unicode_width::UnicodeWidthStr;

/// Continuation lines of [`hanging`] start at least this far in (or at the indent asked for,
/// if that is less).
pub const MIN_INDENT: usize = 4;

/// Display width of plain text (no escape sequences).
pub fn width(s: &str) -> usize {
    UnicodeWidthStr::width(s)
}

/// Break `text` into lines of at most `max` columns at spaces. Runs of spaces collapse to one;
/// a newline in `text` always breaks. Never returns an empty vector.
pub fn lines(text: &str, max: usize) -> Vec<String> {
    lines_with(text, max, max)
}

/// As [`lines`], with `first` columns of room on the first line and `rest` on the others. When
/// the first word does not fit the first line but fits the others (or the others have more
/// room), the first line stays empty.
pub fn lines_with(text: &str, first: usize, rest: usize) -> Vec<String> {
    let rest = rest.max(1);
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    let mut w = 0;
    for (n, para) in text.split('\n').enumerate() {
        if n > 0 {
            out.push(std::mem::take(&mut line));
            w = 0;
        }
        for word in para.split(' ').filter(|s| !s.is_empty()) {
            let room = if out.is_empty() { first } else { rest };
            let ww = width(word);
            let fits = w + usize::from(w > 0) + ww <= room;
            // A first word that does not fit after the prefix goes to the next line when it
            // fits there, or sticks out less there.
            let first_word_moves =
                w == 0 && out.is_empty() && !fits && (ww <= rest || rest > first);
            if (w > 0 && !fits) || first_word_moves {
                out.push(std::mem::take(&mut line));
                w = 0;
            }
            if w > 0 {
                line.push(' ');
                w += 1;
            }
            line.push_str(word);
            w += ww;
        }
    }
    out.push(line);
    out
}

/// `first` (its display width `first_w`, which differs from its length when it carries color
/// codes), then `text` wrapped to `max` columns, continuation lines indented by `indent`
/// spaces. Each line ends with `\n`; no line ends with a space.
///
/// A word wider than the room after `indent` (a long path) would overflow the line and the
/// terminal would wrap it mid-word: the continuation lines then start further left, as far as
/// that word needs (but at least [`MIN_INDENT`] columns in).
pub fn hanging(first: &str, first_w: usize, indent: usize, text: &str, max: usize) -> String {
    let longest = text.split([' ', '\n']).map(width).max().unwrap_or(0);
    let indent = if indent + longest > max {
        max.saturating_sub(longest).max(indent.min(MIN_INDENT))
    } else {
        indent
    };
    let mut out = String::new();
    let ls = lines_with(
        text,
        max.saturating_sub(first_w),
        max.saturating_sub(indent).max(1),
    );
    for (i, l) in ls.iter().enumerate() {
        let start = out.len();
        if i == 0 {
            out.push_str(first);
        } else {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(l);
        let keep = start + out[start..].trim_end_matches(' ').len();
        out.truncate(keep);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn breaks_at_spaces() {
        assert_eq!(
            lines("the quick brown fox jumps", 10),
            vec!["the quick", "brown fox", "jumps"]
        );
        assert_eq!(lines("", 10), vec![""]);
        assert_eq!(lines("a  b", 10), vec!["a b"]);
        assert_eq!(lines("one\ntwo", 80), vec!["one", "two"]);
    }

    #[test]
    fn a_long_word_is_never_cut() {
        let p = "/sys/bus/pci/devices/0000:18:00.0/resource";
        assert_eq!(lines(&format!("see {p} now"), 12), vec!["see", p, "now"]);
    }

    #[test]
    fn hanging_indent() {
        let s = hanging(
            "   = help: ",
            11,
            11,
            "load the module and make it load at boot",
            31,
        );
        assert_eq!(
            s,
            "   = help: load the module and\n           make it load at boot\n"
        );
        // The first prefix wider than the indent.
        let s = hanging(
            "  0000:18:00.0 -> ",
            18,
            4,
            "no gdr (nearest mlx5_0 PHB)",
            30,
        );
        assert_eq!(s, "  0000:18:00.0 -> no gdr\n    (nearest mlx5_0 PHB)\n");
        // A word too long for the room after the indent pulls the continuation lines left.
        let p = "/sys/kernel/mm/memory_peers/nv_mem";
        let s = hanging("  x  ", 5, 10, &format!("only {p} here"), 40);
        assert_eq!(s, format!("  x  only\n      {p}\n      here\n"));
        // ... but never further left than MIN_INDENT.
        let s = hanging("  x  ", 5, 10, &format!("only {p} here"), 30);
        assert_eq!(s, format!("  x  only\n    {p}\n    here\n"));
        let s = hanging("  x  ", 5, 10, &format!("only a {p} here"), 45);
        assert_eq!(s, format!("  x  only a\n          {p}\n          here\n"));
        // Color codes in the prefix do not count.
        let s = hanging("\x1b[1mhelp\x1b[0m: ", 6, 6, "a b c", 12);
        assert_eq!(s, "\x1b[1mhelp\x1b[0m: a b c\n");
    }

    proptest! {
        /// Lines fit unless they are one overlong word; the words survive in order.
        #[test]
        fn wrapped_lines_fit_and_keep_every_word(
            words in proptest::collection::vec("[a-z0-9:/._·-]{1,30}", 0..40),
            max in 1usize..120,
        ) {
            let text = words.join(" ");
            let out = lines(&text, max);
            for l in &out {
                prop_assert!(width(l) <= max || !l.contains(' '), "{l:?} > {max}");
            }
            let back: Vec<&str> = out.iter().flat_map(|l| l.split(' ')).filter(|w| !w.is_empty()).collect();
            prop_assert_eq!(back, words.iter().map(String::as_str).collect::<Vec<_>>());
        }

        #[test]
        fn hanging_lines_fit(
            words in proptest::collection::vec("[a-z]{1,12}", 1..30),
            first_w in 0usize..30,
            indent in 0usize..20,
            max in 40usize..120,
        ) {
            let first = "x".repeat(first_w);
            let out = hanging(&first, first_w, indent, &words.join(" "), max);
            prop_assert!(out.ends_with('\n'));
            for l in out.lines() {
                // Only the caller's prefix may overflow: it is never wrapped.
                prop_assert!(width(l) <= max.max(first_w), "{l:?} > {max}");
            }
            let back: Vec<&str> = out.strip_prefix(&first).unwrap_or(&out).split_whitespace().collect();
            prop_assert_eq!(back, words.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
}
