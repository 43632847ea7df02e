//! VCI allocation per link, from 32 up (VCIs 0–31 are reserved by ITU-T I.361 and the
//! ATM Forum: 5 is signalling, 16 ILMI, 18 PNNI); used by sigd and by a switch.
//!
//! Each end of a link labels what it receives on. In direct mode a host's labels
//! are one-way, but through a switch every label is a bidirectional VC on its link
//! (a VC's acknowledgements travel back on its own label), so the two ends of a
//! link into a network draw from disjoint halves: the user side (a host, or the
//! switch with the lower UDP endpoint on a trunk) from [`USER_HALF`], the network
//! side from [`NETWORK_HALF`].

use std::collections::BTreeSet;
use std::ops::RangeInclusive;

/// First VCI handed to a user VC.
pub const FIRST: u16 = 32;

/// The labels the user side of a link into a network hands out.
pub const USER_HALF: RangeInclusive<u16> = FIRST..=32_767;

/// The labels the network side hands out.
pub const NETWORK_HALF: RangeInclusive<u16> = 32_768..=u16::MAX;

/// The VCIs in use on one link (one direction: the VCIs this side receives on).
#[derive(Debug, Clone)]
pub struct VciPool {
    used: BTreeSet<u16>,
    next: u16,
    first: u16,
    last: u16,
}

impl Default for VciPool {
    fn default() -> Self {
        VciPool::new()
    }
}

impl VciPool {
    /// An empty pool of every VCI from 32 up.
    pub fn new() -> VciPool {
        VciPool::range(FIRST..=u16::MAX)
    }

    /// An empty pool of the VCIs in `r` (those below 32 left out).
    pub fn range(r: RangeInclusive<u16>) -> VciPool {
        let first = (*r.start()).max(FIRST);
        VciPool {
            used: BTreeSet::new(),
            next: first,
            first,
            last: (*r.end()).max(first),
        }
    }

    /// The lowest free VCI at or after the last one handed out (wrapping to the
    /// first), so a VCI just released is not reused at once; `None` when all are
    /// taken.
    pub fn allocate(&mut self) -> Option<u16> {
        let (first, last) = (self.first, self.last);
        if !(first..=last).contains(&self.next) {
            self.next = first;
        }
        let span = usize::from(last - first) + 1;
        if self.used.len() >= span {
            return None;
        }
        let mut v = self.next;
        while self.used.contains(&v) {
            v = if v == last { first } else { v + 1 };
        }
        self.used.insert(v);
        self.next = if v == last { first } else { v + 1 };
        Some(v)
    }

    /// Take a particular VCI (a call a restarted daemon takes over): `false` if it
    /// is in use or outside the pool's range.
    pub fn reserve(&mut self, vci: u16) -> bool {
        (self.first..=self.last).contains(&vci) && self.used.insert(vci)
    }

    /// Give a VCI back.
    pub fn free(&mut self, vci: u16) {
        self.used.remove(&vci);
    }

    /// VCIs in use.
    pub fn in_use(&self) -> usize {
        self.used.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_32_and_reuses_only_after_wrapping() {
        let mut p = VciPool::new();
        assert_eq!(p.allocate(), Some(32));
        assert_eq!(p.allocate(), Some(33));
        p.free(32);
        assert_eq!(p.allocate(), Some(34));
        assert_eq!(p.in_use(), 2);
        let mut full = VciPool::new();
        for _ in FIRST..=u16::MAX {
            assert!(full.allocate().is_some());
        }
        assert_eq!(full.allocate(), None);
        full.free(40);
        assert_eq!(full.allocate(), Some(40));
    }

    #[test]
    fn a_range_stays_in_its_half() {
        let mut p = VciPool::range(NETWORK_HALF);
        assert_eq!(p.allocate(), Some(32_768));
        let mut small = VciPool::range(40..=41);
        assert_eq!(
            (small.allocate(), small.allocate(), small.allocate()),
            (Some(40), Some(41), None)
        );
        small.free(40);
        assert_eq!(small.allocate(), Some(40));
    }
}
