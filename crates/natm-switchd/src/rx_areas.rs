//! Receive areas lent to the data plane, so that a frame-mode port hands each frame's
//! SDU to the switch without copying it.
//!
//! A `recvmmsg` fills the [`RecvBatch`]'s buffer area (up to four GRO runs of 64 KiB).
//! Instead of copying every SDU into a `Bytes` of its own (an allocation and a copy
//! per frame, which a plain UDP relay does not make), the port takes the whole area
//! out of the batch as one `Bytes` ([`RxAreas::lend`]), gives the batch a free area
//! for its next receive, and queues each SDU as a slice of the area: a reference
//! count, not a copy. When the last slice of an area is dropped (its frames sent or
//! discarded), the area comes home to the free list and is received into again, so
//! that in the steady state nothing is allocated per frame or per receive.
//!
//! Memory stays bounded whatever the traffic: at most `max_areas` areas exist. A queued
//! frame keeps its whole area alive, so a slow output port holding one small frame of
//! each of many receives could otherwise pin an area per frame; once every area is
//! lent, [`RxAreas::lend`] declines and the port copies SDUs as before (each copy as
//! large as its frame, bounded by the queues' own limits) until an area comes home.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use natm::adaptor::RecvBatch;

/// Areas that came home (their last slice dropped), ready for a receive.
type Home = Arc<Mutex<Vec<Vec<u8>>>>;

/// One area lent out: goes back to `home` when the last `Bytes` slice of it drops.
struct Area {
    buf: Vec<u8>,
    home: Home,
}

impl AsRef<[u8]> for Area {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        self.home
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(buf);
    }
}

/// The receive areas of one switch process (see the module doc).
#[derive(Debug)]
pub(crate) struct RxAreas {
    home: Home,
    /// Areas allocated so far, the batch's own included.
    areas: usize,
    max_areas: usize,
    /// Receives whose frames were copied because every area was lent.
    declined: u64,
}

impl RxAreas {
    /// At most `max_areas` areas (at least 2: the batch's own and one lent).
    pub(crate) fn new(max_areas: usize) -> RxAreas {
        RxAreas {
            home: Home::default(),
            // The batch was created with one.
            areas: 1,
            max_areas: max_areas.max(2),
            declined: 0,
        }
    }

    /// What `batch` received, as one `Bytes` over its area (the datagrams at
    /// `batch.spans()`), the batch given a free area for its next receive; `None`
    /// when every area is lent (read the batch as usual and copy).
    pub(crate) fn lend<A: Copy>(&mut self, batch: &mut RecvBatch<A>) -> Option<Bytes> {
        let len = batch.area_len();
        let free = {
            let mut home = self.home.lock().unwrap_or_else(PoisonError::into_inner);
            // An area of another length (none here: one batch) is let go.
            while home.last().is_some_and(|a| a.len() != len) {
                home.pop();
                self.areas -= 1;
            }
            home.pop()
        };
        let fresh = match free {
            Some(a) => a,
            None if self.areas < self.max_areas => {
                self.areas += 1;
                vec![0; len]
            }
            None => {
                self.declined += 1;
                return None;
            }
        };
        let full = batch
            .swap_area(fresh)
            .expect("a free area has the batch's length");
        Some(Bytes::from_owner(Area {
            buf: full,
            home: self.home.clone(),
        }))
    }

    /// Areas allocated (lent, free or the batch's).
    #[cfg(test)]
    pub(crate) fn areas(&self) -> usize {
        self.areas
    }

    /// Receives copied because every area was lent.
    pub(crate) fn declined(&self) -> u64 {
        self.declined
    }
}

impl std::fmt::Debug for Area {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Area")
            .field("len", &self.buf.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
    fn split(areas: &mut RxAreas, batch: &mut RecvBatch<u8>, stride: usize) -> Vec<Bytes> {
        let spans: Vec<_> = batch.spans().collect();
        match areas.lend(batch) {
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
        let mut areas = RxAreas::new(3);
        let mut b: RecvBatch<u8> = RecvBatch::new(2, 64);
        fill(&mut b, &[3], 10, 0);
        let first = split(&mut areas, &mut b, 10);
        assert_eq!(areas.areas(), 2);
        let held = first[1].clone();
        drop(first);
        fill(&mut b, &[2], 10, 3);
        let second = split(&mut areas, &mut b, 10);
        assert_eq!(
            areas.areas(),
            3,
            "the first area is still held by one frame"
        );
        drop(second);
        fill(&mut b, &[1], 10, 5);
        let third = split(&mut areas, &mut b, 10);
        assert_eq!(areas.areas(), 3, "the second area was reused");
        assert_eq!(&held[..], &[1; 10][..], "a held frame keeps its octets");
        drop((third, held));
        // Everything home: no allocation however many receives follow.
        for i in 0..100u8 {
            fill(&mut b, &[2, 1], 10, i);
            let f = split(&mut areas, &mut b, 10);
            assert_eq!(f.len(), 3);
        }
        assert_eq!((areas.areas(), areas.declined()), (3, 0));
    }

    #[test]
    fn when_every_area_is_held_frames_are_copied() {
        let mut areas = RxAreas::new(2);
        let mut b: RecvBatch<u8> = RecvBatch::new(1, 64);
        fill(&mut b, &[2], 8, 0);
        let held = split(&mut areas, &mut b, 8);
        let sent = fill(&mut b, &[2], 8, 2);
        let copied = split(&mut areas, &mut b, 8);
        assert_eq!(areas.declined(), 1);
        assert_eq!(copied.iter().map(|c| c.to_vec()).collect::<Vec<_>>(), sent);
        drop(held);
        fill(&mut b, &[1], 8, 4);
        let _lent = split(&mut areas, &mut b, 8);
        assert_eq!((areas.areas(), areas.declined()), (2, 1));
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
            let mut areas = RxAreas::new(max);
            let mut b: RecvBatch<u8> = RecvBatch::new(3, 80);
            let mut held: Vec<Bytes> = Vec::new();
            let mut k = 0u8;
            for (runs, size, keep) in batches {
                let sent = fill(&mut b, &runs, size, k);
                k = k.wrapping_add(sent.len() as u8);
                let got = split(&mut areas, &mut b, size);
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
