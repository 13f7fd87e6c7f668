//! A set of node numbers kept as sorted runs (`start..end`), so that the value most nodes share
//! costs a few runs, not one number per node: the roll-up's memory does not grow with the
//! number of reports (10,000 nodes x ~1,700 fields was 127 MiB of node lists).

/// Node numbers in sorted, disjoint, non-adjacent runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSet {
    runs: Vec<(u32, u32)>,
    len: usize,
}

impl NodeSet {
    /// Add `i`; in increasing order this only lengthens the last run. Out of order, the set is
    /// put back in order.
    pub fn push(&mut self, i: u32) {
        self.len += 1;
        match self.runs.last_mut() {
            Some((_, end)) if *end == i => *end += 1,
            Some((_, end)) if *end < i => self.runs.push((i, i + 1)),
            None => self.runs.push((i, i + 1)),
            Some(_) => {
                if self.contains(i) {
                    self.len -= 1;
                    return;
                }
                self.runs.push((i, i + 1));
                self.normalise();
            }
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many runs hold the set (its memory).
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    pub fn contains(&self, i: u32) -> bool {
        let k = self.runs.partition_point(|(s, _)| *s <= i);
        k > 0 && i < self.runs[k - 1].1
    }

    /// The numbers, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.runs.iter().flat_map(|(s, e)| *s..*e)
    }

    /// Every number of `other` too.
    pub fn union(&mut self, other: &NodeSet) {
        self.runs.extend_from_slice(&other.runs);
        self.normalise();
    }

    /// The set `{map[i] : i in self}`: a worker's own numbering to the fleet's.
    pub fn mapped(&self, map: &[u32]) -> NodeSet {
        let mut out = NodeSet::default();
        for i in self.iter() {
            if let Some(&g) = map.get(i as usize) {
                out.push(g);
            }
        }
        out
    }

    fn normalise(&mut self) {
        self.runs.sort_unstable();
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(self.runs.len());
        for &(s, e) in &self.runs {
            match out.last_mut() {
                Some((_, end)) if s <= *end => *end = (*end).max(e),
                _ => out.push((s, e)),
            }
        }
        self.len = out.iter().map(|(s, e)| (e - s) as usize).sum();
        self.runs = out;
    }
}

impl FromIterator<u32> for NodeSet {
    fn from_iter<T: IntoIterator<Item = u32>>(it: T) -> NodeSet {
        let mut s = NodeSet::default();
        for i in it {
            s.push(i);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn runs_stay_few() {
        let s: NodeSet = (0..10_000).collect();
        assert_eq!((s.len(), s.runs()), (10_000, 1));
        let mut a: NodeSet = (0..10).chain(20..30).collect();
        assert_eq!(a.runs(), 2);
        a.union(&(10..20).collect());
        assert_eq!((a.len(), a.runs()), (30, 1));
        assert!(a.contains(29) && !a.contains(30));
        let m = NodeSet::from_iter([0, 1, 2]).mapped(&[7, 8, 12]);
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![7, 8, 12]);
    }

    proptest! {
        #[test]
        fn behaves_as_a_set(v in proptest::collection::vec(0u32..200, 0..100), w in proptest::collection::vec(0u32..200, 0..100)) {
            let mut s: NodeSet = v.iter().copied().collect();
            let t: NodeSet = w.iter().copied().collect();
            s.union(&t);
            let want: std::collections::BTreeSet<u32> = v.iter().chain(&w).copied().collect();
            prop_assert_eq!(s.iter().collect::<Vec<_>>(), want.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(s.len(), want.len());
            for i in 0..200 {
                prop_assert_eq!(s.contains(i), want.contains(&i));
            }
        }
    }
}
