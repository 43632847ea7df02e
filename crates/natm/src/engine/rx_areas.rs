//! Receive areas lent to a connection, so that a received TPDU's payload reaches its
//! PSB — and a message of one TPDU the application — as a slice of the buffer the
//! kernel received it into, not as a copy (issue 17, round four).
//!
//! A receive fills a [`RecvBatch`]'s area (one GRO run of up to 64 KiB). Before, the
//! engine copied every payload out of it into a `Bytes` of its own: an allocation and
//! a copy per TPDU, about 9 % of a 64 KiB transfer's samples. Now the connection takes
//! the whole area out of the batch as one `Bytes` ([`RxAreas::lend`]), gives the batch
//! a free area for its next receive, and hands each payload on as a slice of it: a
//! reference count, not a copy. When the last slice of an area drops (its TPDUs
//! delivered and consumed, or discarded), the area goes to the engine's free list
//! ([`FreeAreas`]) and is received into again, so that in the steady state nothing is
//! allocated per TPDU or per receive.
//!
//! # The memory bound
//! One held slice keeps its whole area alive: a peer that sends runs of small TPDUs
//! out of order, one of which the PSB holds from each run, could otherwise make a
//! receive buffer of `rcv_buf` octets of payload pin `rcv_buf / 36` areas of 64 KiB.
//! So every area lent to a connection counts, whole, against an area budget equal to
//! the receiving VC's receive buffer: at most `rcv_buf / area` areas are lent to one
//! connection at a time. Once they are, [`RxAreas::lend`] declines and the payloads of
//! that receive are copied as before (each copy as long as its payload, and held only
//! within the PSB's own `rcv_buf` accounting) until an area comes home. A connection
//! therefore holds at most `rcv_buf` octets of lent areas plus `rcv_buf` octets of
//! copied payloads, whatever arrives; the engine's free list keeps at most
//! [`MAX_FREE_AREAS`] areas, the rest are freed. The same holds for slices the
//! application keeps: a message handed to it as a slice counts against its
//! connection's budget until it is dropped.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::adaptor::RecvBatch;
use crate::sync::{Level, OrderedMutex as Mutex};

/// Areas the engine keeps for reuse; more that come home are freed.
pub(crate) const MAX_FREE_AREAS: usize = 64;

/// A receive of fewer octets than this is copied, not lent: a lone small datagram (a
/// ping, an ACK) costs less to copy than an area's round trip through the free list.
pub(crate) const LEND_MIN: usize = 8 * 1024;

/// Areas that came home (their last slice dropped), shared by the engine's
/// connections.
#[derive(Debug)]
pub(crate) struct FreeAreas {
    areas: Mutex<Vec<Vec<u8>>>,
}

impl FreeAreas {
    pub(crate) fn new() -> Arc<FreeAreas> {
        Arc::new(FreeAreas {
            areas: Mutex::new(Level::RxAreas, Vec::new()),
        })
    }

    /// A free area of `len` octets, if one is home.
    fn take(&self, len: usize) -> Option<Vec<u8>> {
        let mut v = self.areas.lock();
        // Areas of another length (another batch size) are let go.
        while v.last().is_some_and(|a| a.len() != len) {
            v.pop();
        }
        v.pop()
    }

    fn put(&self, area: Vec<u8>) {
        let mut v = self.areas.lock();
        if v.len() < MAX_FREE_AREAS {
            v.push(area);
        }
    }

    /// Areas home now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.areas.lock().len()
    }
}

/// One area lent out: counted against its connection until the last `Bytes` slice of
/// it drops, then home to the free list.
struct Area {
    buf: Vec<u8>,
    home: Arc<FreeAreas>,
    lent: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for Area {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        self.home.put(std::mem::take(&mut self.buf));
        self.lent.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One connection's account of the areas lent to it (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct RxAreas {
    lent: Arc<AtomicUsize>,
    /// Receives lent without a copy.
    lends: AtomicU64,
    /// Receives copied because the connection's budget was spent.
    declined: AtomicU64,
}

impl RxAreas {
    /// What `batch` received, as one `Bytes` over its area (the datagrams at
    /// `batch.spans()`), the batch given a free area for its next receive; `None`
    /// (read the batch as usual and copy) when the areas lent to this connection
    /// already fill `budget` octets.
    pub(crate) fn lend<A: Copy>(
        &self,
        home: &Arc<FreeAreas>,
        batch: &mut RecvBatch<A>,
        budget: usize,
    ) -> Option<Bytes> {
        let len = batch.area_len();
        let max = budget / len.max(1);
        // Reserve the area in the account first: two readers cannot both take the last.
        if self
            .lent
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_err()
        {
            self.declined.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let fresh = home.take(len).unwrap_or_else(|| vec![0; len]);
        let full = batch
            .swap_area(fresh)
            .expect("a free area has the batch's length");
        self.lends.fetch_add(1, Ordering::Relaxed);
        Some(Bytes::from_owner(Area {
            buf: full,
            home: home.clone(),
            lent: self.lent.clone(),
        }))
    }

    /// Areas lent to the connection now.
    #[cfg(test)]
    pub(crate) fn lent(&self) -> usize {
        self.lent.load(Ordering::Acquire)
    }

    /// Receives lent, and receives copied because the budget was spent.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.lends.load(Ordering::Relaxed),
            self.declined.load(Ordering::Relaxed),
        )
    }
}

impl std::fmt::Debug for Area {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Area")
            .field("len", &self.buf.len())
            .finish()
    }
}

/// Octets `batch` received (every datagram).
pub(crate) fn received<A: Copy>(batch: &RecvBatch<A>) -> usize {
    batch.spans().map(|(_, r)| r.len()).sum()
}
