//! The output schedulers of a port, one per file: `fifo` (first come, first
//! served), `rr` (per-VC round robin, the discipline packet-pair assumes, seed 000
//! §5.3.3) and `wrr` (round robin weighted by reserved rate, so that a guaranteed
//! VC keeps its rate through a congested port). `drr` is the deficit round robin
//! both round robins run on.
//!
//! Contract with the port: after a unit is queued for a VC, `Scheduler::enqueued`;
//! `Scheduler::pick` names the VC whose head unit goes next (the scheduler is told
//! the head's size in cells through `head`), the port takes exactly that unit off the
//! VC's queue and calls `Scheduler::sent`; a VC whose queue was flushed is
//! `Scheduler::remove`d.

pub(crate) mod drr;
pub(crate) mod fifo;
pub(crate) mod rr;
pub(crate) mod wrr;

use crate::table::Slot;

/// Which scheduler a port runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum SchedulerKind {
    /// One queue in arrival order: a VC gets what it sends.
    Fifo,
    /// Per-VC round robin, one cell's worth per turn: every backlogged VC gets an
    /// equal share.
    #[default]
    RoundRobin,
    /// Per-VC round robin weighted by each VC's reserved rate.
    WeightedRoundRobin,
}

impl SchedulerKind {
    /// The name used in configuration and `natm stat`: `fifo`, `rr`, `wrr`.
    pub const fn name(self) -> &'static str {
        match self {
            SchedulerKind::Fifo => "fifo",
            SchedulerKind::RoundRobin => "rr",
            SchedulerKind::WeightedRoundRobin => "wrr",
        }
    }
}

/// A port's scheduler.
#[derive(Debug)]
pub(crate) enum Scheduler {
    Fifo(fifo::Fifo),
    Rr(rr::RoundRobin),
    Wrr(wrr::WeightedRoundRobin),
}

impl Scheduler {
    pub(crate) fn new(kind: SchedulerKind) -> Scheduler {
        match kind {
            SchedulerKind::Fifo => Scheduler::Fifo(fifo::Fifo::default()),
            SchedulerKind::RoundRobin => Scheduler::Rr(rr::RoundRobin::default()),
            SchedulerKind::WeightedRoundRobin => Scheduler::Wrr(wrr::WeightedRoundRobin::default()),
        }
    }

    /// A unit was queued for `slot`, whose queue was empty before if `was_empty`;
    /// `weight` is the VC's [`wrr::weight`].
    #[inline]
    pub(crate) fn enqueued(&mut self, slot: Slot, was_empty: bool, weight: u32) {
        match self {
            Scheduler::Fifo(s) => s.enqueued(slot),
            Scheduler::Rr(s) => s.enqueued(slot, was_empty),
            Scheduler::Wrr(s) => s.enqueued(slot, was_empty, weight),
        }
    }

    /// The VC whose head unit is sent next; `head` gives a VC's head size in cells.
    #[inline]
    pub(crate) fn pick(&mut self, head: impl Fn(Slot) -> Option<u32>) -> Option<Slot> {
        match self {
            Scheduler::Fifo(s) => s.pick(),
            Scheduler::Rr(s) => s.pick(head),
            Scheduler::Wrr(s) => s.pick(head),
        }
    }

    /// The head unit of the picked `slot` was sent; its queue is now empty if `empty`.
    #[inline]
    pub(crate) fn sent(&mut self, slot: Slot, empty: bool) {
        match self {
            Scheduler::Fifo(s) => s.sent(slot),
            Scheduler::Rr(s) => s.sent(slot, empty),
            Scheduler::Wrr(s) => s.sent(slot, empty),
        }
    }

    /// The VC whose head unit is sent next, and how many units of one cell each it
    /// may send in a row if its head is a run of cells: the same as that many
    /// [`Scheduler::pick`]s, each followed by [`Scheduler::sent`] (`u64::MAX`: all it
    /// has). Report what went with [`Scheduler::sent_run`].
    #[inline]
    pub(crate) fn pick_run(&mut self, head: impl Fn(Slot) -> Option<u32>) -> Option<(Slot, u64)> {
        match self {
            Scheduler::Fifo(s) => s.pick_run(),
            Scheduler::Rr(s) => s.pick_run(head),
            Scheduler::Wrr(s) => s.pick_run(head),
        }
    }

    /// `n` cells of the VC [`Scheduler::pick_run`] named were sent; its queue is now
    /// empty if `empty`.
    #[inline]
    pub(crate) fn sent_run(&mut self, slot: Slot, n: u32, empty: bool) {
        match self {
            Scheduler::Fifo(s) => s.sent_run(slot, n),
            Scheduler::Rr(s) => s.sent_run(slot, u64::from(n), empty),
            Scheduler::Wrr(s) => s.sent_run(slot, u64::from(n), empty),
        }
    }

    /// Forgets `slot` (its queue was flushed).
    pub(crate) fn remove(&mut self, slot: Slot) {
        match self {
            Scheduler::Fifo(s) => s.remove(slot),
            Scheduler::Rr(s) => s.remove(slot),
            Scheduler::Wrr(s) => s.remove(slot),
        }
    }
}
