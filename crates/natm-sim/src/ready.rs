//! The VC ends of a host that may have a frame to send: a bit per VC end, found in
//! ascending order from any point (the round robin's cursor). Insert and remove are a
//! bit each and the scan moves a word (64 VC ends) at a time, with no allocation per
//! change as an ordered tree set's nodes take.

/// A set of small indices.
#[derive(Debug, Default)]
pub(crate) struct ReadySet {
    words: Vec<u64>,
}

impl ReadySet {
    pub(crate) fn insert(&mut self, i: usize) {
        let w = i / 64;
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (i % 64);
    }

    pub(crate) fn remove(&mut self, i: usize) {
        if let Some(w) = self.words.get_mut(i / 64) {
            *w &= !(1 << (i % 64));
        }
    }

    /// The smallest member in `from..to`.
    pub(crate) fn first_in(&self, from: usize, to: usize) -> Option<usize> {
        let mut w = from / 64;
        if from >= to || w >= self.words.len() {
            return None;
        }
        let mut bits = self.words[w] & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                return (i < to).then_some(i);
            }
            w += 1;
            if w >= self.words.len() || w * 64 >= to {
                return None;
            }
            bits = self.words[w];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Any sequence of inserts and removes agrees with an ordered set on every range.
        #[test]
        fn agrees_with_an_ordered_set(
            ops in proptest::collection::vec((any::<bool>(), 0usize..300), 0..400),
            from in 0usize..320,
            len in 0usize..320,
        ) {
            let mut s = ReadySet::default();
            let mut model = BTreeSet::new();
            for (add, i) in ops {
                if add {
                    s.insert(i);
                    model.insert(i);
                } else {
                    s.remove(i);
                    model.remove(&i);
                }
            }
            let to = from + len;
            prop_assert_eq!(s.first_in(from, to), model.range(from..to).next().copied());
        }
    }
}
