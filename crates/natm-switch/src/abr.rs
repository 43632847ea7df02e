//! ABR explicit-rate marking at an output port: ERICA, the Explicit Rate Indication
//! for Congestion Avoidance of Jain, Kalyanaraman, Goyal, Fahmy and Viswanathan
//! (ATM Forum 95-0178, "ERICA switch algorithm: a complete description"), one of the
//! switch behaviours ATM Forum TM 4.0 §5.10.6 allows (a switch "may" lower ER).
//! Sans-IO: time is an argument; one [`Erica`] per output port, fed by the fabric
//! with every unit of an ABR VC routed to the port.
//!
//! Per **averaging interval** the port measures
//! * the ABR input rate: cells of ABR VCs routed to the port, RM cells included,
//!   counted as they reach the port (before its buffers admit or drop them: ERICA
//!   wants the offered load), over the interval's length;
//! * the active ABR VCs: those with at least one cell in the interval.
//!
//! A connection is **ABR** once it has carried a forward RM cell (an ABR source's
//! FRM, TM 4.0 source rule 3); one that carries only backward RM cells is the reverse
//! direction of an ABR VC (its acknowledgements), whose rate nothing here controls.
//!
//! At the end of an interval (ERICA §2):
//! ```text
//! target     = 0.9 × (line rate − rate reserved by the port's non-ABR connections)
//! z          = input rate / target                     (the load factor)
//! fair share = target / max(active ABR VCs, 1)
//! ```
//! and each forward RM cell leaving the port until the next interval ends gets
//! ```text
//! VC share   = CCR / z                   (CCR: the source's rate, from the cell)
//! ER         = min(max(fair share, VC share), target)
//! ER field   = min(ER field, ER)         (wire::rm::lower_er: never raised)
//! ```
//! Backward RM cells are never edited. Before the first full interval there is no
//! load measured: a forward cell gets the fair share among the VCs seen so far
//! (target / active), the least ERICA would give. An interval with no input (z = 0) gives the
//! target; a port whose reservations take the whole line gives ER 0.
//!
//! **Where**: natm marks the *forward* RM cells at the port they leave by, where that
//! port's load is measured; TM 4.0's switches usually mark the backward cells of the
//! same VC, which needs each port to know the reverse direction of every VC. A
//! forward cell marked here reaches the destination and comes back with the lowest
//! ER on its path, as a backward-marked one would (docs/decisions/0033-abr-erica.md).
//!
//! **The interval** is virtual time: [`AVERAGING_CELLS`] cell times of the port's
//! line, at least [`MIN_AVERAGING`]. It ends at the first ABR arrival at or after its
//! end (sans-IO: no timer). What is marked by is measured over the last **two**
//! intervals, a window that slides by one: the input rate is their cells over their
//! real length (an idle spell reads as the low load it was), the active VCs those
//! with a cell in either. A natm VC sends whole frames, so one interval alone may
//! miss a VC that is sending (departure from ERICA's single interval).
//!
//! Memory: an [`AbrVc`] lives in the connection's own state (so the ABR VC set is
//! bounded by the cross-connect table, and a VC is forgotten with its connection);
//! the port keeps counters and one measure.

use std::time::Duration;

use natm_proto::time::Instant;
use natm_proto::wire::rm::{lower_er, Direction, Rate, RmCell};

use crate::stats::{AbrInterval, AbrStats};

/// ERICA's target utilisation of the capacity left to ABR (95-0178 §2: 0.85–0.95;
/// 0.9 leaves a tenth of the line to drain queues).
pub const TARGET_UTILIZATION: f64 = 0.9;

/// The averaging interval, in cell times of the port's line.
pub const AVERAGING_CELLS: u32 = 500;

/// The shortest averaging interval, whatever the line (a `natm switch` process reads
/// its sockets about every millisecond).
pub const MIN_AVERAGING: Duration = Duration::from_millis(1);

/// What a connection routed to the port is to ABR, kept in the connection's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AbrVc {
    /// The last interval (its sequence number) it had a cell in.
    seen: u64,
    /// Its contract's reservation, counted as ABR's own (not taken off the target).
    reserved: u64,
}

/// What an RM cell was to the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RmSeen {
    /// A forward RM cell; `marked` if its ER was lowered.
    Forward { marked: bool },
    /// A backward RM cell, passed on untouched.
    Backward,
    /// Not an ABR RM cell natm reads (length, protocol ID, CRC-10): passed on
    /// untouched, counted.
    Invalid,
}

/// The interval being measured.
#[derive(Debug, Clone, Copy)]
struct Interval {
    start: Instant,
    cells: u64,
    /// VCs with a cell in it.
    active: u32,
    /// Of those, VCs with no cell in the interval before.
    new: u32,
}

impl Interval {
    fn new(start: Instant) -> Interval {
        Interval {
            start,
            cells: 0,
            active: 0,
            new: 0,
        }
    }
}

/// A closed interval: its cells, its length and its active VCs.
#[derive(Debug, Clone, Copy, Default)]
struct Closed {
    cells: u64,
    length: Duration,
    active: u32,
}

/// Where the port's measurement is.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// No cell of an ABR VC has come yet.
    Idle,
    /// Measuring the first interval: RM cells pass untouched.
    First(Interval),
    /// Marking by the last full interval's figures while measuring the next.
    Marking { open: Interval, last: AbrInterval },
}

/// ERICA at one output port (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Erica {
    /// The line's cells per second.
    line: f64,
    interval: Duration,
    phase: Phase,
    /// Sequence number of the interval being measured (from 2: an [`AbrVc`] starts
    /// at 0, "never seen", which is not the interval before the first).
    seq: u64,
    /// The interval before the open one (zero before the first has closed).
    prev: Closed,
    /// Cells/s reserved by every connection routed to the port.
    reserved: u64,
    /// Of those, by its ABR connections.
    abr_reserved: u64,
    stats: AbrStats,
}

impl Erica {
    /// ERICA for a port whose line carries `cells_per_sec`, each cell taking
    /// `cell_time`.
    pub(crate) fn new(cells_per_sec: u64, cell_time: Duration) -> Erica {
        let interval = cell_time.saturating_mul(AVERAGING_CELLS).max(MIN_AVERAGING);
        Erica {
            line: cells_per_sec as f64,
            interval,
            phase: Phase::Idle,
            seq: 2,
            prev: Closed::default(),
            reserved: 0,
            abr_reserved: 0,
            stats: AbrStats::default(),
        }
    }

    /// The averaging interval.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    /// A connection routed to the port reserving `cells_per_sec` was installed.
    pub(crate) fn reserve(&mut self, cells_per_sec: u64) {
        self.reserved = self.reserved.saturating_add(cells_per_sec);
    }

    /// A connection routed to the port reserving `cells_per_sec` (its [`AbrVc`],
    /// if it became ABR) went.
    pub(crate) fn release(&mut self, cells_per_sec: u64, abr: Option<AbrVc>) {
        self.reserved = self.reserved.saturating_sub(cells_per_sec);
        if let Some(a) = abr {
            self.abr_reserved = self.abr_reserved.saturating_sub(a.reserved);
        }
    }

    /// A connection's reservation changed from `old` to `new` (a modified call).
    pub(crate) fn rereserve(&mut self, old: u64, new: u64, abr: Option<&mut AbrVc>) {
        self.release(old, abr.as_deref().copied());
        self.reserve(new);
        if let Some(a) = abr {
            a.reserved = new;
            self.abr_reserved = self.abr_reserved.saturating_add(new);
        }
    }

    /// `cells` data cells of ABR VC `vc` reach the port at `now`.
    pub(crate) fn data(&mut self, now: Instant, vc: &mut AbrVc, cells: u32) {
        self.arrive(now, vc, cells);
    }

    /// An RM cell's 48-octet `payload` on a connection reserving `reserved` (`vc`:
    /// its ABR state, made at its first forward RM cell) reaches the port at `now`:
    /// counted, and a forward cell's ER lowered to the port's explicit rate.
    pub(crate) fn rm(
        &mut self,
        now: Instant,
        vc: &mut Option<AbrVc>,
        reserved: u64,
        payload: &mut [u8],
    ) -> RmSeen {
        let cell = match RmCell::parse(payload) {
            Ok(c) => c,
            Err(_) => {
                self.stats.rm_invalid += 1;
                if let Some(a) = vc.as_mut() {
                    self.arrive(now, a, 1);
                }
                return RmSeen::Invalid;
            }
        };
        match cell.dir {
            Direction::Backward => {
                self.stats.rm_backward += 1;
                if let Some(a) = vc.as_mut() {
                    self.arrive(now, a, 1);
                }
                RmSeen::Backward
            }
            Direction::Forward => {
                self.stats.rm_forward += 1;
                let a = vc.get_or_insert_with(|| {
                    self.abr_reserved = self.abr_reserved.saturating_add(reserved);
                    AbrVc { seen: 0, reserved }
                });
                self.arrive(now, a, 1);
                let er = match self.phase {
                    Phase::Marking { last, .. } => explicit_rate(&last, cell.ccr.cells()),
                    // No load measured yet: the fair share among the VCs seen so far,
                    // the least ERICA would give, so a source's first BRM cannot
                    // lift it to its PCR on an unmarked cell.
                    Phase::First(open) => self.target() / f64::from(open.active.max(1)),
                    Phase::Idle => return RmSeen::Forward { marked: false },
                };
                let er = Rate::from_cells(er);
                let marked = er.cells() < cell.er.cells() && lower_er(payload, er);
                self.stats.rm_marked += u64::from(marked);
                RmSeen::Forward { marked }
            }
        }
    }

    /// The counters and the last interval's figures.
    pub(crate) fn stats(&self) -> AbrStats {
        let mut s = self.stats;
        s.interval = match self.phase {
            Phase::Marking { last, .. } => Some(last),
            Phase::Idle | Phase::First(_) => None,
        };
        s
    }

    /// `cells` of ABR VC `vc` arrive at `now`: the interval ends first if its time is
    /// up, then they are counted in the open one.
    fn arrive(&mut self, now: Instant, vc: &mut AbrVc, cells: u32) {
        self.tick(now);
        // `tick` has opened an interval.
        if let Phase::First(open) | Phase::Marking { open, .. } = &mut self.phase {
            open.cells = open.cells.saturating_add(u64::from(cells));
            if vc.seen != self.seq {
                if vc.seen + 1 != self.seq {
                    open.new = open.new.saturating_add(1);
                }
                vc.seen = self.seq;
                open.active = open.active.saturating_add(1);
            }
        }
    }

    /// Ends the open interval if it has lasted its length by `now`, and opens the next.
    fn tick(&mut self, now: Instant) {
        let open = match self.phase {
            Phase::Idle => {
                self.phase = Phase::First(Interval::new(now));
                return;
            }
            Phase::First(open) | Phase::Marking { open, .. } => open,
        };
        let elapsed = now.saturating_duration_since(open.start);
        if elapsed < self.interval {
            return;
        }
        let last = self.measure(&open, elapsed);
        self.prev = Closed {
            cells: open.cells,
            length: elapsed,
            active: open.active,
        };
        self.seq += 1;
        self.phase = Phase::Marking {
            open: Interval::new(now),
            last,
        };
    }

    /// ERICA's figures for interval `i`, which lasted `elapsed` (at least the
    /// averaging interval, so not zero), together with the one before it.
    /// ERICA's target: 0.9 of the line less what the port's other connections reserve.
    fn target(&self) -> f64 {
        let others = self.reserved.saturating_sub(self.abr_reserved) as f64;
        TARGET_UTILIZATION * (self.line - others).max(0.0)
    }

    fn measure(&self, i: &Interval, elapsed: Duration) -> AbrInterval {
        let target = self.target();
        let window = (elapsed + self.prev.length).as_secs_f64();
        let input_rate = (i.cells + self.prev.cells) as f64 / window.max(f64::MIN_POSITIVE);
        let active = self.prev.active.saturating_add(i.new);
        AbrInterval {
            input_rate,
            target,
            load: if target > 0.0 {
                input_rate / target
            } else {
                0.0
            },
            fair_share: target / f64::from(active.max(1)),
            active_vcs: active,
        }
    }
}

/// ERICA's explicit rate for a forward RM cell whose CCR is `ccr` (95-0178 §2):
/// the larger of the fair share and the VC's share of the target, at most the target.
fn explicit_rate(m: &AbrInterval, ccr: f64) -> f64 {
    if m.target <= 0.0 {
        return 0.0;
    }
    let vc_share = if m.load > 0.0 { ccr / m.load } else { m.target };
    m.fair_share.max(vc_share).min(m.target)
}

#[cfg(test)]
mod tests;
