//! `lsmod`, `lsmod | grep ..` and `/proc/modules`.
//!
//! A whole listing is conclusive both ways: a module it does not show is not loaded (peer
//! memory clients such as `nvidia_peermem` and `nv_peer_mem` are always loadable modules, never
//! built in). A `grep`-filtered listing is conclusive only for names the pattern matches, and
//! only when the paste shows the command (`lsmod | grep peermem` printing nothing proves
//! `nvidia_peermem` is not loaded). A listing with a header but few rows may be an excerpt:
//! it proves what it shows, not what it does not.

use super::block::{status, Block, RawBlock};
use super::clean::Line;
use crate::model::LoadedModule;
use serde::Serialize;
use std::collections::BTreeMap;

/// Rows a header-bearing `lsmod` needs before we call it the whole list (a GPU + RDMA node
/// loads well over a hundred modules; a handful of rows under a header is an excerpt).
pub const WHOLE_LIST_MIN_ROWS: usize = 20;

/// The loaded modules a paste shows.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ModuleList {
    pub modules: BTreeMap<String, LoadedModule>,
    /// The listing is the whole list of loaded modules.
    pub complete: bool,
    /// `grep` patterns the listing was filtered by (lower-case when `-i`), if known.
    pub filter: Vec<String>,
    /// The filter ignores case.
    pub filter_icase: bool,
    /// Why the listing is (not) conclusive, for evidence.
    pub note: String,
}

impl ModuleList {
    /// `Some(true)` loaded, `Some(false)` provably not loaded, `None` the paste cannot tell.
    pub fn knows(&self, name: &str) -> Option<bool> {
        if self.modules.contains_key(name) {
            return Some(true);
        }
        if self.complete {
            return Some(false);
        }
        let n = if self.filter_icase {
            name.to_lowercase()
        } else {
            name.to_string()
        };
        if !self.filter.is_empty() && self.filter.iter().any(|p| n.contains(p.as_str())) {
            // grep matched whole lines: the module's own row would contain the pattern.
            return Some(false);
        }
        None
    }
}

/// The patterns of `grep` in `lsmod | grep [-i] [-E] PATTERN` (alternations split on `|`).
pub fn grep_patterns(command: &str) -> Option<(Vec<String>, bool)> {
    let (_, after) = command.split_once('|')?;
    let mut words = after.split_whitespace();
    let g = words.next()?;
    if g != "grep" && g != "egrep" {
        return None;
    }
    let mut icase = false;
    let mut pattern = None;
    let mut invert = false;
    for w in words {
        if w == "|" {
            break;
        }
        if let Some(o) = w.strip_prefix('-') {
            icase |= o.contains('i');
            invert |= o.contains('v');
            continue;
        }
        pattern = Some(w.trim_matches(|c| c == '\'' || c == '"').to_string());
        break;
    }
    if invert {
        return None;
    }
    let p = pattern?;
    if p.chars().any(|c| "[]().*+?^$\\".contains(c)) {
        // A regular expression we do not evaluate: the filter is unknown.
        return None;
    }
    let pats = p
        .split('|')
        .filter(|x| !x.is_empty())
        .map(|x| {
            if icase {
                x.to_lowercase()
            } else {
                x.to_string()
            }
        })
        .collect();
    Some((pats, icase))
}

fn row(text: &str) -> Option<(String, LoadedModule)> {
    let t: Vec<&str> = text.split_whitespace().collect();
    if t.len() < 3 || !t[1].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !t[0]
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return None;
    }
    // /proc/modules: name size refcnt deps state addr [taint]
    let proc_fmt = t.len() >= 6 && ["Live", "Loading", "Unloading"].contains(&t[4]);
    let used = if proc_fmt {
        t[3]
    } else {
        t.get(3).copied().unwrap_or("")
    };
    let used_by = used
        .split(',')
        .filter(|x| !x.is_empty() && *x != "-")
        .map(str::to_string)
        .collect();
    Some((
        t[0].to_string(),
        LoadedModule {
            state: if proc_fmt {
                t[4].to_string()
            } else {
                "Live".into()
            },
            used_by,
        },
    ))
}

/// Parse an `lsmod` block (its command, when the paste shows one, says whether it was filtered).
pub fn parse_lsmod(lines: &[Line], command: Option<&str>) -> ModuleList {
    let header = lines
        .iter()
        .any(|l| l.text.trim_start().starts_with("Module") && l.text.contains("Used by"));
    let mut m = ModuleList::default();
    for l in lines {
        if let Some((k, v)) = row(&l.text) {
            m.modules.insert(k, v);
        }
    }
    let filtered = command.is_some_and(|c| c.contains('|'));
    match command.and_then(grep_patterns) {
        Some((p, i)) => {
            m.note = format!(
                "`{}`: the list is filtered; it proves absence only for names containing {}",
                command.unwrap_or_default(),
                p.iter()
                    .map(|x| format!("`{x}`"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            );
            m.filter = p;
            m.filter_icase = i;
        }
        None if filtered => {
            m.note = format!(
                "`{}`: filtered by a pattern we do not evaluate; only what it shows is known",
                command.unwrap_or_default()
            );
        }
        None if header && (m.modules.len() >= WHOLE_LIST_MIN_ROWS || command.is_some()) => {
            m.complete = true;
            m.note = format!("whole lsmod listing ({} modules)", m.modules.len());
        }
        None => {
            m.note = format!(
                "{} module row(s) without the command or a whole listing: proves what it shows only",
                m.modules.len()
            );
        }
    }
    m
}

/// Parse a `/proc/modules` block.
pub fn parse_proc_modules(lines: &[Line], command: Option<&str>) -> ModuleList {
    let mut m = ModuleList::default();
    for l in lines {
        if let Some((k, v)) = row(&l.text) {
            m.modules.insert(k, v);
        }
    }
    let cat = command.is_some_and(|c| c.contains("/proc/modules") && !c.contains('|'));
    m.complete = cat || m.modules.len() >= WHOLE_LIST_MIN_ROWS;
    m.note = if m.complete {
        format!(
            "/proc/modules ({} modules, the whole list)",
            m.modules.len()
        )
    } else {
        format!(
            "{} /proc/modules row(s) without `cat /proc/modules`: proves what it shows only",
            m.modules.len()
        )
    };
    m
}

/// An `lsmod` block (`cmd`: the command, when pasted).
pub fn lsmod_block(b: &mut Block, raw: &RawBlock) -> ModuleList {
    modules_block(b, parse_lsmod(&raw.lines, raw.command.as_deref()))
}

/// A `/proc/modules` block.
pub fn proc_modules_block(b: &mut Block, raw: &RawBlock) -> ModuleList {
    modules_block(b, parse_proc_modules(&raw.lines, raw.command.as_deref()))
}

fn modules_block(b: &mut Block, m: ModuleList) -> ModuleList {
    b.summary = m.note.clone();
    b.status = status(&b.repairs, &b.problems);
    m
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::paste::clean::clean;
    use proptest::prelude::*;

    #[test]
    fn grep_output_proves_absence_only_for_the_pattern() {
        let l = clean("nvidia_peermem         12288  0\nib_core               491520  9 rdma_cm,ib_ipoib,nvidia_peermem\n").lines;
        let m = parse_lsmod(&l, Some("lsmod | grep peermem"));
        assert_eq!(m.knows("nvidia_peermem"), Some(true));
        assert_eq!(m.knows("ib_core"), Some(true));
        assert_eq!(
            m.knows("nv_peer_mem"),
            None,
            "`peermem` does not match nv_peer_mem"
        );
        assert_eq!(m.modules["ib_core"].used_by.len(), 3);
        let empty = parse_lsmod(&[], Some("lsmod | grep nvidia_peermem"));
        assert_eq!(empty.knows("nvidia_peermem"), Some(false));
        let icase = parse_lsmod(&[], Some("lsmod | grep -i PEER"));
        assert_eq!(icase.knows("nv_peer_mem"), Some(false));
        assert_eq!(
            parse_lsmod(&[], Some("lsmod | grep -E 'peer.*mem'")).knows("nv_peer_mem"),
            None
        );
        assert_eq!(
            parse_lsmod(&[], Some("lsmod | grep -v nvidia")).knows("nvidia"),
            None
        );
    }

    #[test]
    fn whole_listing_is_conclusive_excerpt_is_not() {
        let mut t = String::from("Module                  Size  Used by\n");
        for i in 0..25 {
            t.push_str(&format!("mod{i}   1000  0\n"));
        }
        let m = parse_lsmod(&clean(&t).lines, None);
        assert!(m.complete);
        assert_eq!(m.knows("nvidia_peermem"), Some(false));
        let short = parse_lsmod(&clean("Module Size Used by\nnvidia 1 0\n").lines, None);
        assert_eq!(short.knows("nvidia_peermem"), None);
        assert_eq!(short.knows("nvidia"), Some(true));
    }

    #[test]
    fn proc_modules_rows() {
        let t = "nvidia_peermem 16384 0 - Live 0x0000000000000000 (OE)\nib_core 434176 9 rdma_cm,ib_ipoib,nvidia_peermem, Live 0x0000000000000000\n";
        let m = parse_proc_modules(&clean(t).lines, Some("cat /proc/modules"));
        assert!(m.complete);
        assert_eq!(
            m.modules["ib_core"].used_by,
            vec!["rdma_cm", "ib_ipoib", "nvidia_peermem"]
        );
        assert_eq!(m.knows("nv_peer_mem"), Some(false));
    }

    proptest! {
        #[test]
        fn never_panics_and_shows_only_what_is_there(s in "\\PC{0,300}", cmd in proptest::option::of("lsmod( \\| grep (-i )?[a-z_|]{0,12})?")) {
            let l = clean(&s).lines;
            let m = parse_lsmod(&l, cmd.as_deref());
            for k in m.modules.keys() {
                prop_assert!(s.contains(k.as_str()));
            }
        }
    }
}
