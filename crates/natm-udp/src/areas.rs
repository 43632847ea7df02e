//! Receive areas lent on without a copy.
//!
//! A receive fills a [`RecvBatch`]'s area (one or more GRO runs of up to 64 KiB).
//! Instead of copying every datagram's payload out of it into a `Bytes` of its own
//! (an allocation and a copy per datagram, which a plain UDP socket user does not
//! make), the reader takes the whole area out of the batch as one `Bytes`
//! ([`AreaPool::lend`]), gives the batch a free area for its next receive, and hands
//! each payload on as a slice of it: a reference count, not a copy. When the last
//! slice of an area drops (its payloads delivered, forwarded or discarded), the area
//! comes home to its pool and is received into again, so that in the steady state
//! nothing is allocated per datagram or per receive.
//!
//! # The memory bound
//! One held slice keeps its whole area alive: a peer that sends runs of small
//! datagrams, one of which the reader holds from each run (a PSB behind a gap, a slow
//! output queue), could otherwise pin an area per receive. Two bounds, each chosen
//! by the user of the pool:
//! - per borrower: an [`AreaAccount`] counts the areas lent to it, and
//!   [`AreaPool::lend`] declines once they fill the borrower's budget (the host engine
//!   gives each connection its VC's receive buffer);
//! - per pool: at most `max_areas` areas exist, lent or home (the switch process).
//!
//! A declined lend leaves the batch as it is: the reader copies the payloads out, each
//! copy as large as its datagram and bounded by the reader's own queue limits, until
//! an area comes home. Areas home beyond `max_home` are freed.
//!
//! Users: the engine's connections (`natm::engine`, one account each, one pool per
//! engine) and the switch process's frame ports (`natm-switchd`, one account, the
//! pool bounded).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use crate::batch::RecvBatch;

/// Areas a pool keeps home for reuse by default; more that come home are freed.
pub const MAX_HOME: usize = 64;

/// A receive of fewer octets than this is better copied than lent: a lone small
/// datagram (a ping, an ACK) costs less to copy than an area's round trip home.
pub const LEND_MIN: usize = 8 * 1024;

/// Where lent areas come home: the free list of one reader (an engine, a switch),
/// shared by its borrowers.
#[derive(Debug)]
pub struct AreaPool {
    /// A leaf lock (see the crate doc): held to push or pop one area.
    home: Mutex<Vec<Vec<u8>>>,
    /// Most areas kept home.
    max_home: usize,
    /// Most areas in existence that this pool made (lent or home).
    max_areas: usize,
    /// Areas this pool made that exist now.
    areas: AtomicUsize,
}

impl AreaPool {
    /// A pool that keeps up to `max_home` areas home and makes at most `max_areas`
    /// (`usize::MAX`: no bound but the borrowers' budgets).
    pub fn new(max_home: usize, max_areas: usize) -> Arc<AreaPool> {
        Arc::new(AreaPool {
            home: Mutex::new(Vec::new()),
            max_home: max_home.min(max_areas),
            max_areas: max_areas.max(1),
            areas: AtomicUsize::new(0),
        })
    }

    /// What `batch` received, as one `Bytes` over its area (the datagrams at
    /// `batch.spans()`), the batch given a free area for its next receive; `None`
    /// (read the batch as usual and copy) when the areas lent to `account` already
    /// fill `budget` octets or the pool has made all it may.
    pub fn lend<A: Copy>(
        self: &Arc<Self>,
        account: &AreaAccount,
        batch: &mut RecvBatch<A>,
        budget: usize,
    ) -> Option<Bytes> {
        let len = batch.area_len();
        let max = budget / len.max(1);
        // Reserve the area in the account first: two readers cannot both take the last.
        if account
            .lent
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_err()
        {
            account.declined.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let Some(fresh) = self.take(len) else {
            account.lent.fetch_sub(1, Ordering::AcqRel);
            account.declined.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let full = batch
            .swap_area(fresh)
            .expect("a free area has the batch's length");
        account.lends.fetch_add(1, Ordering::Relaxed);
        Some(Bytes::from_owner(Area {
            buf: full,
            pool: self.clone(),
            lent: account.lent.clone(),
        }))
    }

    /// An area of `len` octets: one home, or a new one if the pool may make it.
    fn take(&self, len: usize) -> Option<Vec<u8>> {
        {
            let mut home = self.home.lock().unwrap_or_else(PoisonError::into_inner);
            // Areas of another length (another batch size) are let go.
            while home.last().is_some_and(|a| a.len() != len) {
                home.pop();
                self.forget_one();
            }
            if let Some(a) = home.pop() {
                return Some(a);
            }
        }
        self.areas
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_areas).then_some(n + 1)
            })
            .ok()
            .map(|_| vec![0; len])
    }

    fn put(&self, area: Vec<u8>) {
        let mut home = self.home.lock().unwrap_or_else(PoisonError::into_inner);
        if home.len() < self.max_home {
            home.push(area);
        } else {
            drop(home);
            self.forget_one();
        }
    }

    /// One area freed. Saturating: a batch's own first area enters the pool when it
    /// is lent (a swap gives the batch one of the pool's instead), so with several
    /// batches more areas may be freed than the pool made.
    fn forget_one(&self) {
        let _ = self
            .areas
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(1))
            });
    }

    /// Areas home now.
    pub fn home(&self) -> usize {
        self.home
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Areas this pool made that exist now (lent or home; a batch's own area is not
    /// counted).
    pub fn areas(&self) -> usize {
        self.areas.load(Ordering::Acquire)
    }
}

/// One borrower's account of the areas lent to it (see the module doc).
#[derive(Debug, Default)]
pub struct AreaAccount {
    lent: Arc<AtomicUsize>,
    /// Octets of small receives copied out whole ([`copy_out`]) and held now.
    copied: Arc<AtomicUsize>,
    /// Receives lent without a copy.
    lends: AtomicU64,
    /// Receives declined (copied) because the budget or the pool was spent.
    declined: AtomicU64,
}

impl AreaAccount {
    /// Areas lent to this borrower now.
    pub fn lent(&self) -> usize {
        self.lent.load(Ordering::Acquire)
    }

    /// Octets of small receives copied out whole that are held now.
    pub fn copied(&self) -> usize {
        self.copied.load(Ordering::Acquire)
    }

    /// Receives lent, and receives declined.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.lends.load(Ordering::Relaxed),
            self.declined.load(Ordering::Relaxed),
        )
    }
}

/// One area lent out: counted against its borrower until the last `Bytes` slice of
/// it drops, then home to its pool.
struct Area {
    buf: Vec<u8>,
    pool: Arc<AreaPool>,
    lent: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for Area {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        self.pool.put(std::mem::take(&mut self.buf));
        self.lent.fetch_sub(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for Area {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Area")
            .field("len", &self.buf.len())
            .finish()
    }
}

/// What a small `batch` received (its area up to the end of its last datagram),
/// copied once into one `Bytes` its payloads are sliced from at the same offsets as
/// in the batch: one allocation per receive instead of one per datagram. Counted
/// against `account` until the last slice drops; `None` (copy each payload alone)
/// if that would put the octets `account` holds so over `budget`, or if the
/// datagrams lie sparse in the area (slots received one by one, not packed).
pub fn copy_out<A: Copy>(
    account: &AreaAccount,
    batch: &RecvBatch<A>,
    budget: usize,
) -> Option<Bytes> {
    let (end, octets) = batch
        .spans()
        .fold((0, 0), |(e, n), (_, r)| (e.max(r.end), n + r.len()));
    if end == 0 || end > 2 * octets {
        return None;
    }
    account
        .copied
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n + end <= budget).then_some(n + end)
        })
        .ok()?;
    Some(Bytes::from_owner(SmallCopy {
        buf: batch.area()[..end].to_vec(),
        held: account.copied.clone(),
    }))
}

/// One small receive copied out whole: counted against its borrower until the last
/// `Bytes` slice of it drops.
struct SmallCopy {
    buf: Vec<u8>,
    held: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for SmallCopy {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for SmallCopy {
    fn drop(&mut self) {
        self.held.fetch_sub(self.buf.len(), Ordering::AcqRel);
    }
}

/// Octets `batch` received (every datagram).
pub fn received<A: Copy>(batch: &RecvBatch<A>) -> usize {
    batch.spans().map(|(_, r)| r.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The switch process's use: one account with no budget, the pool bounded to
    /// `max` areas in all, the batch's own included.
    struct Bounded {
        pool: Arc<AreaPool>,
        account: AreaAccount,
    }

    impl Bounded {
        fn new(max: usize) -> Bounded {
            Bounded {
                pool: AreaPool::new(usize::MAX, max - 1),
                account: AreaAccount::default(),
            }
        }

        /// Areas in existence, the batch's own included.
        fn areas(&self) -> usize {
            self.pool.areas() + 1
        }

        fn declined(&self) -> u64 {
            self.account.counts().1
        }
    }

    /// A batch of `slots` buffers of 64 octets, each filled with `runs[i]` datagrams
    /// of `size` octets coalesced (GRO), datagram `k` of the whole batch filled with
    /// octet `k`.
    fn fill(batch: &mut RecvBatch<u8>, runs: &[usize], size: usize, first: u8) -> Vec<Vec<u8>> {
        batch.clear();
        let mut sent = Vec::new();
        let mut k = first;
        for (slot, &n) in runs.iter().enumerate() {
            let mut run = Vec::new();
            for _ in 0..n {
                let d = vec![k; size];
                run.extend_from_slice(&d);
                sent.push(d);
                k = k.wrapping_add(1);
            }
            // What `UdpPort::recv` does for a GRO buffer: octets in place, then the
            // record; `push` of the whole run stands in for the kernel's copy.
            assert!(batch.push(slot as u8, &run));
        }
        sent
    }

    /// Splits a batch as the daemon does: one `Bytes` per datagram, sliced from the
    /// lent area, or copied when lending is declined.
    fn split(areas: &Bounded, batch: &mut RecvBatch<u8>, stride: usize) -> Vec<Bytes> {
        let spans: Vec<_> = batch.spans().collect();
        match areas.pool.lend(&areas.account, batch, usize::MAX) {
            Some(area) => spans
                .iter()
                .flat_map(|(_, r)| {
                    area[r.clone()]
                        .chunks(stride)
                        .map(|c| area.slice_ref(c))
                        .collect::<Vec<_>>()
                })
                .collect(),
            None => batch
                .iter()
                .flat_map(|(_, d)| d.chunks(stride).map(Bytes::copy_from_slice))
                .collect(),
        }
    }

    #[test]
    fn an_area_comes_home_when_its_last_frame_drops() {
        let areas = Bounded::new(3);
        let mut b: RecvBatch<u8> = RecvBatch::new(2, 64);
        fill(&mut b, &[3], 10, 0);
        let first = split(&areas, &mut b, 10);
        assert_eq!(areas.areas(), 2);
        let held = first[1].clone();
        drop(first);
        fill(&mut b, &[2], 10, 3);
        let second = split(&areas, &mut b, 10);
        assert_eq!(
            areas.areas(),
            3,
            "the first area is still held by one frame"
        );
        drop(second);
        fill(&mut b, &[1], 10, 5);
        let third = split(&areas, &mut b, 10);
        assert_eq!(areas.areas(), 3, "the second area was reused");
        assert_eq!(&held[..], &[1; 10][..], "a held frame keeps its octets");
        drop((third, held));
        // Everything home: no allocation however many receives follow.
        for i in 0..100u8 {
            fill(&mut b, &[2, 1], 10, i);
            let f = split(&areas, &mut b, 10);
            assert_eq!(f.len(), 3);
        }
        assert_eq!((areas.areas(), areas.declined()), (3, 0));
    }

    #[test]
    fn when_every_area_is_held_frames_are_copied() {
        let areas = Bounded::new(2);
        let mut b: RecvBatch<u8> = RecvBatch::new(1, 64);
        fill(&mut b, &[2], 8, 0);
        let held = split(&areas, &mut b, 8);
        let sent = fill(&mut b, &[2], 8, 2);
        let copied = split(&areas, &mut b, 8);
        assert_eq!(areas.declined(), 1);
        assert_eq!(copied.iter().map(|c| c.to_vec()).collect::<Vec<_>>(), sent);
        drop(held);
        fill(&mut b, &[1], 8, 4);
        let _lent = split(&areas, &mut b, 8);
        assert_eq!((areas.areas(), areas.declined()), (2, 1));
    }

    #[test]
    fn a_small_receive_is_copied_once_and_its_copies_are_bounded() {
        let account = AreaAccount::default();
        let mut b: RecvBatch<u8> = RecvBatch::new(1, 256);
        for (i, d) in [&[1u8; 10][..], &[2; 30], &[3; 5]].iter().enumerate() {
            assert!(b.push_packed(i as u8, &[d]));
        }
        let one = copy_out(&account, &b, 100).expect("45 octets fit a budget of 100");
        assert_eq!(account.copied(), 45);
        // The payloads lie at the batch's offsets, sliced, not copied again.
        let frames: Vec<Bytes> = b.spans().map(|(_, r)| one.slice(r)).collect();
        assert_eq!(frames[1], Bytes::from(vec![2u8; 30]));
        assert_eq!(frames[2].as_ptr(), one[40..].as_ptr());
        assert!(
            copy_out(&account, &b, 80).is_none(),
            "a second copy would pass the budget: each payload is copied alone"
        );
        let held = frames[0].clone();
        drop((one, frames));
        assert_eq!(account.copied(), 45, "one held payload keeps its copy");
        drop(held);
        assert_eq!(account.copied(), 0);
        // Slots received one by one, mostly empty: not copied whole.
        let mut sparse: RecvBatch<u8> = RecvBatch::new(4, 64);
        assert!(sparse.push(0, &[7; 4]));
        assert!(sparse.push(1, &[8; 4]));
        assert!(copy_out(&account, &sparse, usize::MAX).is_none());
    }

    proptest! {
        /// Frames split from GRO batches arrive whole and in order, whatever is held
        /// back, and the areas never exceed their bound.
        #[test]
        fn frames_arrive_whole_in_order_and_memory_stays_bounded(
            batches in proptest::collection::vec(
                (proptest::collection::vec(1usize..5, 1..4), 1usize..16, any::<bool>()),
                1..40,
            ),
            max in 2usize..6,
        ) {
            let areas = Bounded::new(max);
            let mut b: RecvBatch<u8> = RecvBatch::new(3, 80);
            let mut held: Vec<Bytes> = Vec::new();
            let mut k = 0u8;
            for (runs, size, keep) in batches {
                let sent = fill(&mut b, &runs, size, k);
                k = k.wrapping_add(sent.len() as u8);
                let got = split(&areas, &mut b, size);
                prop_assert_eq!(got.iter().map(|g| g.to_vec()).collect::<Vec<_>>(), sent);
                prop_assert!(areas.areas() <= max);
                if keep {
                    // A queue holding on to one frame of this receive.
                    held.extend(got.last().cloned());
                }
                if held.len() > 3 {
                    held.remove(0);
                }
            }
            // Held frames still read as they arrived.
            for h in &held {
                prop_assert!(h.iter().all(|&o| o == h[0]));
            }
        }
    }
}
