//! VCI allocation per link, from 32 up (VCIs 0–31 are reserved by ITU-T I.361 and the
//! ATM Forum: 5 is signalling, 16 ILMI, 18 PNNI).

use std::collections::BTreeSet;

/// First VCI handed to a user VC.
pub const FIRST: u16 = 32;

/// The VCIs in use on one link (one direction: the VCIs this side receives on).
#[derive(Debug, Default, Clone)]
pub struct VciPool {
    used: BTreeSet<u16>,
    next: u16,
}

impl VciPool {
    /// An empty pool.
    pub fn new() -> VciPool {
        VciPool {
            used: BTreeSet::new(),
            next: FIRST,
        }
    }

    /// The lowest free VCI at or after the last one handed out (wrapping to 32), so a
    /// VCI just released is not reused at once; `None` when all 65,504 are taken.
    pub fn allocate(&mut self) -> Option<u16> {
        if self.next < FIRST {
            self.next = FIRST;
        }
        let span = usize::from(u16::MAX - FIRST) + 1;
        if self.used.len() >= span {
            return None;
        }
        let mut v = self.next;
        while self.used.contains(&v) {
            v = if v == u16::MAX { FIRST } else { v + 1 };
        }
        self.used.insert(v);
        self.next = if v == u16::MAX { FIRST } else { v + 1 };
        Some(v)
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
}
