//! Node pairs in rounds of disjoint pairs: the circle method (a round-robin tournament). With
//! `n` nodes every pair meets exactly once in `n - 1` rounds (`n` rounds when `n` is odd: one
//! node rests each round), and no node is in two pairs of one round, so each pair's bandwidth
//! is measured without another pair sharing its links.

/// The rounds for `n` nodes (indices `0..n`): each round a list of pairs `(a, b)` with `a < b`.
pub fn rounds(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    // With an odd count a phantom node `n` makes it even; its partner rests.
    let m = if n.is_multiple_of(2) { n } else { n + 1 };
    let mut ring: Vec<usize> = (1..m).collect();
    let mut out = Vec::with_capacity(m - 1);
    for _ in 0..m - 1 {
        let mut round = Vec::with_capacity(m / 2);
        let first = ring[ring.len() - 1];
        push(&mut round, 0, first, n);
        for i in 0..(m / 2 - 1) {
            let a = ring[i];
            let b = ring[ring.len() - 2 - i];
            push(&mut round, a, b, n);
        }
        round.sort_unstable();
        out.push(round);
        ring.rotate_right(1);
    }
    out
}

fn push(round: &mut Vec<(usize, usize)>, a: usize, b: usize, n: usize) {
    if a < n && b < n {
        round.push((a.min(b), a.max(b)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_pair_meets_once_in_disjoint_rounds() {
        for n in 0..40 {
            let r = rounds(n);
            let want_rounds = match n {
                0 | 1 => 0,
                n if n.is_multiple_of(2) => n - 1,
                n => n,
            };
            assert_eq!(r.len(), want_rounds, "n={n}");
            let mut seen = BTreeSet::new();
            for round in &r {
                let mut busy = BTreeSet::new();
                for &(a, b) in round {
                    assert!(a < b && b < n);
                    assert!(
                        busy.insert(a) && busy.insert(b),
                        "n={n}: a node twice in a round"
                    );
                    assert!(seen.insert((a, b)), "n={n}: ({a},{b}) twice");
                }
                assert!(round.len() >= n / 2, "n={n}: a round with idle pairs");
            }
            assert_eq!(seen.len(), n * n.saturating_sub(1) / 2, "n={n}");
        }
    }
}
