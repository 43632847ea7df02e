//! The sending VC's path MTU search on a frame-mode UDP link (issue 30): natm-proto's
//! RFC 8899 machine ([`Plpmtud`]) and the probes that carry it.
//!
//! A probe is an OAM F5 end-to-end loopback request (`engine::oam`) padded with zero
//! octets to the size probed: the peer's end point answers it like any loopback, with
//! a 48-octet answer (RFC 8899 §4.1 lets an acknowledgement be smaller than its
//! probe), signed on a sealed call, within its answer budget. So a probe needs nothing
//! new from the peer beyond taking a padded request, and an off-path sender cannot
//! confirm a size: on a sealed call the answer must carry the peer's signature, and on
//! a clear one the connection's correlation tag (random per connection, as for every
//! loopback). A probe leaves with DF set and is never fragmented: a size the kernel
//! refuses is simply not confirmed.
//!
//! The sending VC's TPDUs are cut to the PLPMTU less the VC and TPDU headers (and the
//! seal), never above the kernel's path MTU. Departure from seed 000, whose TPDU size
//! is fixed at setup on an ATM adaptor with no path MTU beneath it.

use natm_proto::transport::plpmtud::{Plpmtud, PlpmtudStats, BASE_PLPMTU};
use natm_proto::transport::Stall;

use crate::time::Instant;
use crate::wire::cell::PAYLOAD_LEN;

/// One sending VC's search and the probe it has on the path.
#[derive(Debug, Default)]
pub(crate) struct PathProbe {
    machine: Plpmtud,
    /// The probe on the path: its OAM correlation tag and size.
    probe: Option<(u32, usize)>,
    /// The VC's losses (retransmissions no ACK showed needless) when the probe
    /// left: more by its timeout, and its loss was among data losses.
    retx_at_probe: u64,
    /// The PLPMTU and whether a search was under way, as last reported
    /// ([`PathProbe::news`]).
    reported: Option<(usize, bool)>,
    /// A black hole was declared in the VC's current stall (its timeouts in a row):
    /// one stall declares one.
    declared: bool,
    /// A first timeout's head is out ([`Stall::head_out`]) at a PLPMTU above base:
    /// it leaves as cells that fit base ([`PathProbe::fit`]), and the ACK past it
    /// judges the window behind it. Holds the VC's `windows_lost` from then.
    suspect: Option<u64>,
}

/// Retransmission timeouts in a row, with no cumulative ACK between them, that
/// declare the PLPMTU a black hole (RFC 8899 §4.3). The first timeout resends the
/// head alone (F-RTO); a second with no ACK means the head was lost again. A dead
/// peer trips it too, at the cost of a search that confirms the old size in one
/// probe's round trip if the path is whole.
pub(crate) const BLACK_HOLE_TIMEOUTS: u32 = 2;

/// What [`PathProbe::step`] wants done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    /// Send a probe of this many octets (VC header included).
    pub(crate) probe: Option<usize>,
    /// A probe given up on: its tag, to forget among the OAM probes.
    pub(crate) lost: Option<u32>,
}

impl PathProbe {
    /// Bring the search up to `now`: `kernel` is the kernel's path payload for the
    /// peer (`None` while the socket has none), `full` the datagram a full TPDU
    /// makes, `sending` whether the VC has data queued. A VC probes only while it has
    /// something to send: an idle VC (or one still being set up) costs the path
    /// nothing.
    /// `rto` is the VC's retransmission timeout, under which no probe is given up
    /// on; `retx` counts the VC's retransmissions so far that no ACK showed
    /// needless (read only when a probe leaves or times out): a head check fired by
    /// late ACKs, on a receiver kept off its CPU, does not excuse a lost probe.
    /// `stall` is what the VC's retransmission timeouts say: [`BLACK_HOLE_TIMEOUTS`]
    /// in a row, or a window lost whole when the first timeout's head, resent as
    /// cells that fit base, crossed ([`Stall::windows_lost`]), drop the PLPMTU to
    /// base (RFC 8899 §4.3: any loss of data may start black-hole detection; the
    /// head is its confirmation at base, one round trip after the first timeout
    /// instead of at the second), and what was sent larger leaves as cells
    /// (`UdpLink::cells_above`). Random loss judges a window lost whole only when
    /// every TPDU of it is lost; a search then confirms the size again.
    pub(crate) fn step(
        &mut self,
        now: Instant,
        (kernel, full): (Option<usize>, usize),
        (sending, rto, stall): (bool, std::time::Duration, Stall),
        retx: impl Fn() -> u64,
    ) -> Step {
        if let Some(k) = kernel {
            self.machine.set_upper(k.min(full));
        }
        if stall.timeouts < BLACK_HOLE_TIMEOUTS {
            self.declared = false;
        } else {
            self.declare();
        }
        match self.suspect {
            None if stall.head_out
                && self.machine.upper() > 0
                && self.machine.plpmtu() > self.base_fit() =>
            {
                self.suspect = Some(stall.windows_lost);
            }
            Some(before) if !stall.head_out => {
                self.suspect = None;
                if stall.windows_lost > before {
                    self.declare();
                }
            }
            _ => {}
        }
        let mut lost = None;
        if self.machine.poll_timeout().is_some_and(|t| t <= now) {
            let data_lost = self.probe.is_some() && retx() > self.retx_at_probe;
            self.machine.handle_timeout(now, data_lost);
            if self.machine.outstanding().is_none() {
                lost = self.probe.take().map(|(tag, _)| tag);
            }
        }
        let probe = if sending {
            self.machine.set_data_rto(rto);
            self.machine.poll_probe(now)
        } else {
            None
        };
        if probe.is_some() {
            self.retx_at_probe = retx();
        }
        Step { probe, lost }
    }

    /// The probe of `size` just sent carries `tag`.
    pub(crate) fn sent(&mut self, tag: u32, size: usize) {
        self.probe = Some((tag, size));
    }

    /// Whether `tag` is this VC's probe: then it is confirmed, `rtt` after it left.
    pub(crate) fn answered(&mut self, now: Instant, tag: u32, rtt: std::time::Duration) -> bool {
        match self.probe {
            Some((t, size)) if t == tag => {
                self.probe = None;
                self.machine.on_ack(now, size, rtt);
                true
            }
            _ => false,
        }
    }

    /// The PLPMTU and whether a search is under way, when either changed since the
    /// last call (for the application's status events); nothing before the path is
    /// known.
    pub(crate) fn news(&mut self) -> Option<(usize, bool)> {
        let now = (self.machine.plpmtu(), self.machine.searching());
        if self.machine.upper() == 0 || self.reported == Some(now) {
            return None;
        }
        self.reported = Some(now);
        Some(now)
    }

    /// The tag of the probe on the path.
    pub(crate) fn tag(&self) -> Option<u32> {
        self.probe.map(|(t, _)| t)
    }

    /// Drop the PLPMTU to base, once per stall.
    fn declare(&mut self) {
        if !self.declared {
            self.declared = true;
            self.machine.black_hole();
        }
    }

    /// The largest frame to send whole, once the path is known: frames cut larger
    /// before (a black hole found since, a kernel MTU lowered) leave as cells, and
    /// while a timeout's head is to judge the path ([`PathProbe::step`]), every
    /// frame above base.
    pub(crate) fn fit(&self) -> Option<usize> {
        (self.machine.upper() > 0).then(|| match self.suspect {
            Some(_) => self.base_fit(),
            None => self.machine.plpmtu(),
        })
    }

    /// Base, or the path's upper bound if that is lower.
    fn base_fit(&self) -> usize {
        BASE_PLPMTU.min(self.machine.upper())
    }

    /// The largest datagram confirmed to cross the path.
    pub(crate) fn plpmtu(&self) -> usize {
        self.machine.plpmtu()
    }

    /// When [`PathProbe::step`] has work next.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.machine.poll_timeout()
    }

    pub(crate) fn stats(&self) -> PlpmtudStats {
        self.machine.stats()
    }
}

/// Write a probe of `size` octets into `out`: the VC `header`, the loopback
/// `request`, then zeros.
pub(crate) fn write_probe(out: &mut [u8], header: &[u8], request: &[u8; PAYLOAD_LEN]) {
    let (h, rest) = out.split_at_mut(header.len());
    h.copy_from_slice(header);
    let (r, pad) = rest.split_at_mut(PAYLOAD_LEN);
    r.copy_from_slice(request);
    pad.fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const ZERO: Duration = Duration::ZERO;

    /// A search that confirmed 1,472 octets, the whole path, at time zero.
    fn confirmed_at_1472() -> (PathProbe, Instant, (Option<usize>, usize)) {
        let mut p = PathProbe::default();
        let t0 = Instant::from_nanos(0);
        let path = (Some(1_472), 1_472);
        let s = p.step(t0, path, (true, ZERO, stalled(0)), || 0);
        p.sent(1, s.probe.unwrap());
        assert!(p.answered(t0, 1, Duration::from_micros(90)));
        (p, t0, path)
    }

    /// `n` timeouts in a row, no first ACK awaited.
    fn stalled(n: u32) -> Stall {
        Stall {
            timeouts: n,
            ..Stall::default()
        }
    }

    #[test]
    fn a_probe_is_matched_by_its_tag_and_a_lost_one_is_handed_back_to_forget() {
        let mut p = PathProbe::default();
        let t0 = Instant::from_nanos(0);
        let quiet = || 0;
        let s = p.step(t0, (None, 4_200), (true, ZERO, stalled(0)), quiet);
        assert_eq!(s.probe, None, "no probe before the path is known");
        let s = p.step(t0, (Some(65_507), 4_200), (false, ZERO, stalled(0)), quiet);
        assert_eq!(s.probe, None, "nor while the VC has nothing to send");
        let s = p.step(t0, (Some(65_507), 4_200), (true, ZERO, stalled(0)), quiet);
        assert_eq!(s.probe, Some(4_200), "the largest useful size first");
        p.sent(7, 4_200);
        assert!(!p.answered(t0, 8, Duration::ZERO), "another tag");
        // Not answered: at the deadline the probe is given up on and sent again.
        let at = p.deadline().unwrap();
        let s = p.step(at, (Some(65_507), 4_200), (true, ZERO, stalled(0)), quiet);
        assert_eq!((s.lost, s.probe), (Some(7), Some(4_200)));
        p.sent(9, 4_200);
        assert!(p.answered(at, 9, Duration::from_micros(40)));
        assert_eq!(p.plpmtu(), 4_200);
        assert_eq!(p.tag(), None);
    }

    #[test]
    fn a_probe_lost_while_the_vcs_data_was_retransmitted_is_excused() {
        let mut p = PathProbe::default();
        let t0 = Instant::from_nanos(0);
        let s = p.step(t0, (Some(1_472), 1_472), (true, ZERO, stalled(0)), || 10);
        p.sent(1, s.probe.unwrap());
        // Timed out, with two retransmissions since it left: congestion.
        let at = p.deadline().unwrap();
        let s = p.step(at, (Some(1_472), 1_472), (true, ZERO, stalled(0)), || 12);
        assert_eq!(
            (s.lost, s.probe),
            (Some(1), None),
            "lost, and the next one waits"
        );
        assert_eq!(p.stats().probes_lost_congested, 1);
    }

    #[test]
    fn the_news_is_the_search_starting_a_size_confirmed_and_the_search_done() {
        let mut p = PathProbe::default();
        let t0 = Instant::from_nanos(0);
        assert_eq!(p.news(), None, "nothing before the path is known");
        let s = p.step(t0, (Some(1_472), 1_472), (true, ZERO, stalled(0)), || 0);
        assert_eq!(p.news(), Some((1_200, true)), "base, searching");
        assert_eq!(p.news(), None, "told once");
        p.sent(3, s.probe.unwrap());
        assert!(p.answered(t0, 3, Duration::from_micros(90)));
        assert_eq!(p.news(), Some((1_472, false)), "the top confirmed: done");
        p.step(t0, (Some(1_472), 1_472), (true, ZERO, stalled(0)), || 0);
        assert_eq!(p.news(), None);
    }

    #[test]
    fn two_timeouts_in_a_row_drop_the_plpmtu_to_base_once_per_stall() {
        let (mut p, t0, path) = confirmed_at_1472();
        assert_eq!(p.plpmtu(), 1_472);
        p.step(t0, path, (true, ZERO, stalled(1)), || 0);
        assert_eq!(p.plpmtu(), 1_472, "one timeout is a loss, not a black hole");
        p.step(t0, path, (true, ZERO, stalled(2)), || 0);
        assert_eq!(p.plpmtu(), 1_200, "base, and searching below 1,472");
        assert_eq!(p.news(), Some((1_200, true)));
        assert_eq!(p.stats().black_holes, 1);
        p.step(t0, path, (true, ZERO, stalled(3)), || 0);
        assert_eq!(p.stats().black_holes, 1, "the same stall declares one");
        // The window moved, then stalled again at a size confirmed since.
        p.step(t0, path, (true, ZERO, stalled(0)), || 0);
        p.step(t0, path, (true, ZERO, stalled(2)), || 0);
        assert_eq!(
            p.stats().black_holes,
            1,
            "at base there is nothing to drop to"
        );
    }

    /// RFC 8899 §4.3 at the first timeout: while its head is out, frames above base
    /// leave as cells, and the first ACK after it declares a black hole when it
    /// shows a window lost whole.
    #[test]
    fn a_head_that_crosses_as_cells_when_its_window_did_not_declares_a_black_hole() {
        let (mut p, t0, path) = confirmed_at_1472();
        assert_eq!(p.fit(), Some(1_472));
        let head_out = |windows_lost| Stall {
            timeouts: 1,
            head_out: true,
            windows_lost,
        };
        let judged = |windows_lost| Stall {
            timeouts: 0,
            head_out: false,
            windows_lost,
        };
        // Random loss, or late ACKs: no window lost whole.
        p.step(t0, path, (true, ZERO, head_out(4)), || 0);
        assert_eq!(
            p.fit(),
            Some(1_200),
            "the head leaves as cells that fit base"
        );
        p.step(t0, path, (true, ZERO, judged(4)), || 0);
        assert_eq!(p.fit(), Some(1_472));
        assert_eq!(p.stats().black_holes, 0);
        // The head crossed as cells, and nothing sent before it did.
        p.step(t0, path, (true, ZERO, head_out(4)), || 0);
        p.step(t0, path, (true, ZERO, judged(5)), || 0);
        assert_eq!(p.stats().black_holes, 1);
        assert_eq!(p.plpmtu(), 1_200);
        assert_eq!(p.fit(), Some(1_200), "what was cut larger leaves as cells");
        // At base a timeout's head is sent as it is.
        p.step(t0, path, (true, ZERO, head_out(5)), || 0);
        assert!(p.suspect.is_none());
        // The second timeout of that stall declares nothing more.
        p.step(t0, path, (true, ZERO, stalled(2)), || 0);
        assert_eq!(p.stats().black_holes, 1);
    }

    #[test]
    fn a_probe_frame_is_header_request_and_zeros() {
        let mut out = [0xAA; 100];
        write_probe(&mut out, &[1, 2, 3, 4], &[5; PAYLOAD_LEN]);
        assert_eq!(&out[..4], &[1, 2, 3, 4]);
        assert!(out[4..52].iter().all(|&b| b == 5));
        assert!(out[52..].iter().all(|&b| b == 0));
    }
}
