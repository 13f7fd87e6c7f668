//! Findings alike but for the device they name, folded for the human table.
//!
//! On an 8-GPU node one cause (no peer-memory client, a NIC model's firmware) fails the same
//! check once per GPU or NIC, with messages that differ only in the device they name (`nearest
//! mlx5_0` on one GPU, `nearest mlx5_1` on the next). The table shows such a run once, with
//! every subject it holds; `-v`, JSON and every other format keep one finding per subject.
//!
//! Two texts are alike when they are equal once every device name in them is masked: PCI
//! addresses (`0000:18:00.0`, `18:00.0`), the report's RDMA device names and names of the
//! shape rdma-core's providers give (`mlx5_3`, `bnxt_re0`: a pasted log names NICs the
//! report's inventory may not hold).

use gdrdoctor_checks::report::{Evidence, Finding, Report};

/// The device names of one report, longest first (so `mlx5_10` is masked before `mlx5_1`).
pub struct Masker {
    names: Vec<String>,
}

const MASK: char = '\u{1}';

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn hex(b: &[u8], at: usize, n: usize) -> bool {
    b.len() >= at + n && b[at..at + n].iter().all(|c| c.is_ascii_hexdigit())
}

/// The length of the PCI address starting at byte `i` of `b` (`dddd:bb:dd.f` or `bb:dd.f`),
/// or 0.
fn bdf_len(b: &[u8], i: usize) -> usize {
    let short = |at: usize| {
        hex(b, at, 2)
            && b.get(at + 2) == Some(&b':')
            && hex(b, at + 3, 2)
            && b.get(at + 5) == Some(&b'.')
            && b.get(at + 6).is_some_and(|c| (b'0'..=b'7').contains(c))
    };
    let len = if hex(b, i, 4) && b.get(i + 4) == Some(&b':') && short(i + 5) {
        12
    } else if short(i) {
        7
    } else {
        return 0;
    };
    match b.get(i + len) {
        Some(c) if is_word(*c as char) => 0,
        _ => len,
    }
}

/// The stems of the names rdma-core's providers give their devices (`mlx5_3`, `bnxt_re0`), and
/// of `nvidia-smi topo -m`'s names for the rows and columns of a pasted matrix (`GPU3`, `NIC1`).
const RDMA_STEMS: &[&str] = &[
    "mlx5_", "mlx4_", "bnxt_re", "irdma", "erdma_", "efa_", "rxe_", "siw_", "hfi1_", "qedr",
    "ionic_", "GPU", "NIC",
];

/// The length of a device name of one of [`RDMA_STEMS`] (the stem and digits) starting at byte
/// `i`, or 0.
fn rdma_name_len(b: &[u8], i: usize) -> usize {
    let mut j = i;
    while j < b.len() && is_word(b[j] as char) {
        j += 1;
    }
    let word = &b[i..j];
    RDMA_STEMS
        .iter()
        .find(|s| {
            word.len() > s.len()
                && word.starts_with(s.as_bytes())
                && word[s.len()..].iter().all(u8::is_ascii_digit)
        })
        .map_or(0, |_| word.len())
}

impl Masker {
    pub fn new(report: &Report) -> Masker {
        let mut names: Vec<String> = report
            .inventory
            .nics
            .iter()
            .map(|n| n.ibdev.clone())
            .filter(|n| !n.is_empty())
            .collect();
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        names.dedup();
        Masker { names }
    }

    /// `s` with every device name in it replaced by one mask character.
    pub fn mask(&self, s: &str) -> String {
        let b = s.as_bytes();
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        while i < s.len() {
            let boundary = i == 0 || !is_word(b[i - 1] as char);
            if boundary {
                let mut n = bdf_len(b, i);
                if n == 0 {
                    n = self
                        .names
                        .iter()
                        .find(|name| {
                            s[i..].starts_with(name.as_str())
                                && !s[i + name.len()..].starts_with(is_word)
                        })
                        .map_or(0, |name| name.len());
                }
                if n == 0 {
                    n = rdma_name_len(b, i);
                }
                if n > 0 {
                    out.push(MASK);
                    i += n;
                    continue;
                }
            }
            // Advance by one whole character (the text is UTF-8).
            let c = s[i..].chars().next().unwrap_or(MASK);
            out.push(c);
            i += c.len_utf8().max(1);
        }
        out
    }

    fn finding_key(&self, f: &Finding) -> (String, String, String, String) {
        (
            f.id.clone(),
            f.status.as_str().to_string(),
            self.mask(&f.message),
            self.mask(f.remediation.as_deref().unwrap_or("")),
        )
    }

    fn evidence_key(&self, e: &Evidence) -> (String, String, String) {
        (
            self.mask(&e.source),
            self.mask(&e.observed),
            self.mask(e.expected.as_deref().unwrap_or("")),
        )
    }
}

/// `items` in groups of alike ones (by `key`), each group in the order of its first member.
fn group_by<'a, T, K: PartialEq>(items: &[&'a T], key: impl Fn(&T) -> K) -> Vec<Vec<&'a T>> {
    let mut groups: Vec<(K, Vec<&'a T>)> = Vec::new();
    for it in items {
        let k = key(it);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(it),
            None => groups.push((k, vec![it])),
        }
    }
    groups.into_iter().map(|(_, m)| m).collect()
}

/// The findings in groups alike but for the devices they name (same check, status, message
/// and fix once masked), in order of first appearance.
pub fn findings<'a>(fs: &[&'a Finding], m: &Masker) -> Vec<Vec<&'a Finding>> {
    group_by(fs, |f| m.finding_key(f))
}

/// One finding's evidence in groups alike but for the devices they name.
pub fn evidence<'a>(es: &'a [Evidence], m: &Masker) -> Vec<Vec<&'a Evidence>> {
    let refs: Vec<&Evidence> = es.iter().collect();
    group_by(&refs, |e| m.evidence_key(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(names: &[&str]) -> Masker {
        let mut names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        Masker { names }
    }

    #[test]
    fn device_names_are_masked_and_nothing_else() {
        let k = m(&["ib0dev", "roce9"]);
        assert_eq!(
            k.mask("nearest mlx5_0 (PIX) on 0000:18:00.0"),
            k.mask("nearest mlx5_11 (PIX) on 0000:c8:00.0")
        );
        assert_eq!(
            k.mask("gpu 18:00.0 and ib0dev"),
            k.mask("gpu 19:00.1 and roce9")
        );
        assert_eq!(k.mask("bnxt_re0 port 1"), k.mask("bnxt_re7 port 1"));
        assert_eq!(k.mask("GPU3 row, NIC0"), k.mask("GPU12 row, NIC5"));
        // Not device names: numbers, versions, paths, words with digits.
        for (a, b) in [
            ("400 Gb/sec", "200 Gb/sec"),
            ("firmware 28.43.1014", "firmware 28.39.1002"),
            ("MaxPayload 256 bytes", "MaxPayload 512 bytes"),
            ("NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_C2C"),
            ("12:00.8", "13:00.9"),
            ("0000:18:00.0x", "0000:19:00.0x"),
            ("ib0dev2", "roce92"),
            ("sm_90", "sm_80"),
            ("mlx5_", "mlx5_x"),
            ("GPU", "GPUs"),
            ("NICs", "NIC"),
        ] {
            assert_ne!(k.mask(a), k.mask(b), "{a} / {b}");
        }
        // Multi-byte text survives.
        assert_eq!(k.mask("gpu · µs 0000:18:00.0"), "gpu · µs \u{1}");
        assert_eq!(k.mask(""), "");
    }

    #[test]
    fn long_names_before_their_prefixes() {
        let k = m(&["nic1", "nic10"]);
        assert_eq!(k.mask("nic10 down"), "\u{1} down");
        assert_eq!(k.mask("nic1 down"), "\u{1} down");
        assert_eq!(k.mask("nic100 down"), "nic100 down");
    }
}
