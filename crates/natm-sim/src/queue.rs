//! A link's output queue: limits, tail drop, and the scheduling discipline (FIFO or
//! per-VC round robin), with per-VC accounting under either.
//!
//! Round robin is the discipline seed 000's packet-pair flow control assumes of the
//! network (§5.4, after Keshav): with per-VC queues served in turn, each VC sees its fair
//! share of the bottleneck and the spacing of a back-to-back pair measures it.

use std::collections::{HashMap, VecDeque};

use super::endpoint::VcId;
use super::frame::Packet;
use super::stats::{LinkStats, VcStats};
use super::topology::RouteIdx;

/// A bound on waiting frames and bytes; a frame that would exceed either is dropped
/// at the tail. The frame being serialized does not count against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimit {
    /// Most frames that may wait.
    pub frames: u64,
    /// Most bytes that may wait.
    pub bytes: u64,
}

impl QueueLimit {
    /// No limit.
    pub const UNLIMITED: QueueLimit = QueueLimit {
        frames: u64::MAX,
        bytes: u64::MAX,
    };

    /// At most `n` frames, any size.
    pub const fn frames(n: u64) -> Self {
        QueueLimit {
            frames: n,
            bytes: u64::MAX,
        }
    }

    /// At most `n` bytes, any number of frames.
    pub const fn bytes(n: u64) -> Self {
        QueueLimit {
            frames: u64::MAX,
            bytes: n,
        }
    }

    /// The same limit with a byte bound too.
    #[must_use]
    pub const fn and_bytes(self, n: u64) -> Self {
        QueueLimit { bytes: n, ..self }
    }

    fn admits(&self, frames: u64, bytes: u64, len: u64) -> bool {
        frames < self.frames && bytes.saturating_add(len) <= self.bytes
    }
}

impl Default for QueueLimit {
    fn default() -> Self {
        QueueLimit::UNLIMITED
    }
}

/// How a link's queue chooses the next frame to serialize.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Discipline {
    /// One queue, first come first served: a VC that floods takes what it sends.
    #[default]
    Fifo,
    /// One sub-queue per VC, served in turn, `weight` frames per turn (1 unless set with
    /// [`Sim::set_vc_weight`](super::Sim::set_vc_weight)); each sub-queue also obeys
    /// `per_vc`, so a flooding VC fills only its own share of the buffer.
    RoundRobin {
        /// The limit on each VC's sub-queue.
        per_vc: QueueLimit,
    },
}

/// Index of a VC's slot in a link's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotIdx(pub(crate) u32);

#[derive(Debug)]
struct Slot {
    vc: VcId,
    weight: u32,
    /// The route that carries this VC over the link, once one does.
    owner: Option<RouteIdx>,
    /// Waiting frames (round robin only; FIFO keeps them in one shared queue).
    q: VecDeque<Packet>,
    stats: VcStats,
}

/// The queue at the input of a link's transmitter.
#[derive(Debug)]
pub(crate) struct LinkQueue {
    discipline: Discipline,
    limit: QueueLimit,
    slots: Vec<Slot>,
    slot_of: HashMap<VcId, SlotIdx>,
    fifo: VecDeque<(SlotIdx, Packet)>,
    /// Round robin: slots that have frames, in the order they will be served.
    active: VecDeque<SlotIdx>,
    /// Round robin: frames the slot at the head of `active` has sent this turn.
    served_in_turn: u32,
}

impl LinkQueue {
    pub(crate) fn new(discipline: Discipline, limit: QueueLimit) -> Self {
        LinkQueue {
            discipline,
            limit,
            slots: Vec::new(),
            slot_of: HashMap::new(),
            fifo: VecDeque::new(),
            active: VecDeque::new(),
            served_in_turn: 0,
        }
    }

    /// The slot for `vc`, created on first use.
    pub(crate) fn slot(&mut self, vc: VcId) -> SlotIdx {
        if let Some(&s) = self.slot_of.get(&vc) {
            return s;
        }
        let s = SlotIdx(self.slots.len() as u32);
        self.slots.push(Slot {
            vc,
            weight: 1,
            owner: None,
            q: VecDeque::new(),
            stats: VcStats::default(),
        });
        self.slot_of.insert(vc, s);
        s
    }

    /// The route that owns `vc` on this link, if any.
    pub(crate) fn owner(&self, vc: VcId) -> Option<RouteIdx> {
        self.slot_of
            .get(&vc)
            .and_then(|s| self.slots[s.0 as usize].owner)
    }

    pub(crate) fn set_owner(&mut self, slot: SlotIdx, route: RouteIdx) {
        self.slots[slot.0 as usize].owner = Some(route);
    }

    pub(crate) fn set_weight(&mut self, slot: SlotIdx, weight: u32) {
        self.slots[slot.0 as usize].weight = weight;
    }

    /// Per-VC counters, if the VC has ever been configured on this link.
    pub(crate) fn vc_stats(&self, vc: VcId) -> Option<&VcStats> {
        self.slot_of
            .get(&vc)
            .map(|s| &self.slots[s.0 as usize].stats)
    }

    /// Every VC on this link with its counters, in the order they were configured.
    pub(crate) fn vcs(&self) -> impl Iterator<Item = (VcId, &VcStats)> + '_ {
        self.slots.iter().map(|s| (s.vc, &s.stats))
    }

    pub(crate) fn vc_stats_mut(&mut self, slot: SlotIdx) -> &mut VcStats {
        &mut self.slots[slot.0 as usize].stats
    }

    /// Queues `pkt` for `slot`, or gives it back if a limit refuses it (tail drop).
    pub(crate) fn enqueue(
        &mut self,
        slot: SlotIdx,
        pkt: Packet,
        link: &mut LinkStats,
    ) -> Result<(), Packet> {
        let len = pkt.bytes.len() as u64;
        let per_vc = match self.discipline {
            Discipline::Fifo => QueueLimit::UNLIMITED,
            Discipline::RoundRobin { per_vc } => per_vc,
        };
        let s = &mut self.slots[slot.0 as usize];
        link.frames_in += 1;
        link.bytes_in += len;
        s.stats.frames_in += 1;
        s.stats.bytes_in += len;
        if !self.limit.admits(link.queue_frames, link.queue_bytes, len)
            || !per_vc.admits(s.stats.queue_frames, s.stats.queue_bytes, len)
        {
            link.dropped_queue_full += 1;
            s.stats.dropped_queue_full += 1;
            return Err(pkt);
        }
        link.queue_frames += 1;
        link.queue_bytes += len;
        link.max_queue_frames = link.max_queue_frames.max(link.queue_frames);
        link.max_queue_bytes = link.max_queue_bytes.max(link.queue_bytes);
        let v = &mut s.stats;
        v.queue_frames += 1;
        v.queue_bytes += len;
        v.max_queue_frames = v.max_queue_frames.max(v.queue_frames);
        v.max_queue_bytes = v.max_queue_bytes.max(v.queue_bytes);
        match self.discipline {
            Discipline::Fifo => self.fifo.push_back((slot, pkt)),
            Discipline::RoundRobin { .. } => {
                if s.q.is_empty() {
                    self.active.push_back(slot);
                }
                s.q.push_back(pkt);
            }
        }
        Ok(())
    }

    /// The next frame to serialize, by the discipline.
    pub(crate) fn dequeue(&mut self, link: &mut LinkStats) -> Option<(SlotIdx, Packet)> {
        let (slot, pkt) = match self.discipline {
            Discipline::Fifo => self.fifo.pop_front()?,
            Discipline::RoundRobin { .. } => {
                let slot = *self.active.front()?;
                let s = &mut self.slots[slot.0 as usize];
                let pkt = s.q.pop_front().expect("active slots are never empty");
                self.served_in_turn += 1;
                if s.q.is_empty() {
                    self.active.pop_front();
                    self.served_in_turn = 0;
                } else if self.served_in_turn >= s.weight {
                    self.active.rotate_left(1);
                    self.served_in_turn = 0;
                }
                (slot, pkt)
            }
        };
        let len = pkt.bytes.len() as u64;
        link.queue_frames -= 1;
        link.queue_bytes -= len;
        let v = &mut self.slots[slot.0 as usize].stats;
        v.queue_frames -= 1;
        v.queue_bytes -= len;
        Some((slot, pkt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(tag: u8, len: usize) -> Packet {
        let mut bytes = vec![0; len.max(1)];
        bytes[0] = tag;
        Packet::new(RouteIdx(0), bytes)
    }

    fn drain(q: &mut LinkQueue, st: &mut LinkStats) -> Vec<u8> {
        std::iter::from_fn(|| q.dequeue(st))
            .map(|(_, p)| p.bytes[0])
            .collect()
    }

    #[test]
    fn fifo_serves_in_arrival_order() {
        let mut st = LinkStats::default();
        let mut q = LinkQueue::new(Discipline::Fifo, QueueLimit::UNLIMITED);
        let (a, b) = (q.slot(VcId(1)), q.slot(VcId(2)));
        for (s, tag) in [(a, 1), (a, 2), (b, 3), (a, 4)] {
            q.enqueue(s, pkt(tag, 10), &mut st).unwrap();
        }
        assert_eq!(drain(&mut q, &mut st), [1, 2, 3, 4]);
        assert_eq!((st.queue_frames, st.queue_bytes), (0, 0));
        assert_eq!(st.max_queue_frames, 4);
        assert_eq!(q.vc_stats(VcId(1)).unwrap().max_queue_frames, 3);
    }

    #[test]
    fn round_robin_alternates_and_weights_take_turns() {
        let mut st = LinkStats::default();
        let rr = Discipline::RoundRobin {
            per_vc: QueueLimit::UNLIMITED,
        };
        let mut q = LinkQueue::new(rr, QueueLimit::UNLIMITED);
        let (a, b) = (q.slot(VcId(1)), q.slot(VcId(2)));
        for tag in [10, 11, 12, 13] {
            q.enqueue(a, pkt(tag, 10), &mut st).unwrap();
        }
        for tag in [20, 21] {
            q.enqueue(b, pkt(tag, 10), &mut st).unwrap();
        }
        assert_eq!(drain(&mut q, &mut st), [10, 20, 11, 21, 12, 13]);

        q.set_weight(a, 2);
        for tag in [10, 11, 12, 13] {
            q.enqueue(a, pkt(tag, 10), &mut st).unwrap();
        }
        for tag in [20, 21] {
            q.enqueue(b, pkt(tag, 10), &mut st).unwrap();
        }
        assert_eq!(drain(&mut q, &mut st), [10, 11, 20, 12, 13, 21]);
    }

    #[test]
    fn limits_drop_at_the_tail_and_count() {
        let mut st = LinkStats::default();
        let rr = Discipline::RoundRobin {
            per_vc: QueueLimit::frames(2),
        };
        let mut q = LinkQueue::new(rr, QueueLimit::bytes(250));
        let (a, b) = (q.slot(VcId(1)), q.slot(VcId(2)));
        assert!(q.enqueue(a, pkt(1, 100), &mut st).is_ok());
        assert!(q.enqueue(a, pkt(2, 100), &mut st).is_ok());
        // VC 1's share is full even though the link has room.
        assert!(q.enqueue(a, pkt(3, 10), &mut st).is_err());
        // The link's byte limit refuses a frame that would overflow it.
        assert!(q.enqueue(b, pkt(4, 100), &mut st).is_err());
        assert!(q.enqueue(b, pkt(5, 50), &mut st).is_ok());
        assert_eq!(st.frames_in, 5);
        assert_eq!(st.dropped_queue_full, 2);
        assert_eq!(st.queue_bytes, 250);
        assert_eq!(q.vc_stats(VcId(1)).unwrap().dropped_queue_full, 1);
        assert_eq!(q.vc_stats(VcId(2)).unwrap().dropped_queue_full, 1);
        assert_eq!(drain(&mut q, &mut st), [1, 5, 2]);
    }
}
