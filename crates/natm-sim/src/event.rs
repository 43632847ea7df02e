//! The event queue: a min-heap keyed by (time, sequence number).
//!
//! The sequence number breaks ties in scheduling order, so two events due at the same
//! instant always run in the same order and a seeded run is bit-identical.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::frame::Packet;
use super::topology::{HostId, LinkId};
use natm_proto::time::Instant;

/// Something the simulator must do at a given time.
#[derive(Debug)]
pub(crate) enum Event {
    /// Poll a host for frames and its next timeout (after it was added or touched).
    Wake(HostId),
    /// A host's timer, for the deadline it asked for; stale if the host changed it since.
    Timer(HostId, Instant),
    /// The frame in service on a link has been fully serialized onto the wire.
    TxDone(LinkId),
    /// A frame's last bit reached the far end of a link.
    Arrive(LinkId, Packet),
}

#[derive(Debug)]
struct Entry {
    at: Instant,
    seq: u64,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed: `BinaryHeap` is a max-heap and we want the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Pending events, earliest first, ties in insertion order.
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Entry>,
    seq: u64,
}

impl EventQueue {
    pub(crate) fn push(&mut self, at: Instant, event: Event) {
        let seq = self.seq;
        self.seq += 1;
        self.heap.push(Entry { at, seq, event });
    }

    pub(crate) fn peek_time(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.at)
    }

    pub(crate) fn pop(&mut self) -> Option<(Instant, Event)> {
        self.heap.pop().map(|e| (e.at, e.event))
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_insertion_order() {
        let mut q = EventQueue::default();
        let t = Instant::from_nanos;
        q.push(t(5), Event::Wake(HostId(0)));
        q.push(t(1), Event::Wake(HostId(1)));
        q.push(t(5), Event::Wake(HostId(2)));
        q.push(t(1), Event::Wake(HostId(3)));
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|(at, e)| match e {
                Event::Wake(h) => (at.as_nanos(), h.0),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, [(1, 1), (1, 3), (5, 0), (5, 2)]);
    }
}
