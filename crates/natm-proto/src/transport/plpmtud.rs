//! Packetization-layer path MTU discovery for a sending VC (RFC 8899, datagram PLPMTUD;
//! issue 30).
//!
//! The kernel's path MTU (classic PMTUD, fed by ICMP "fragmentation needed") is an
//! upper bound, not a promise: a path that drops large datagrams without a word (a
//! tunnel, a firewall that filters ICMP) is a black hole to it. This machine finds
//! what the path really carries by sending probes — padded datagrams the peer
//! acknowledges — and tells the sender the largest size confirmed, the PLPMTU. Sizes
//! are UDP payload octets, the unit the adaptor sends.
//!
//! * **Base.** Until a probe confirms more, the PLPMTU is [`BASE_PLPMTU`] (RFC 8899
//!   §5.1.2: 1,200 octets, which IPv6 and any sane IPv4 path carry), or the upper
//!   bound if that is smaller. Data never waits for a probe.
//! * **Search** (§5.3). The first probe is the largest useful size (the upper bound:
//!   the kernel's path payload, capped at what a full TPDU needs), so a path that
//!   carries it (loopback, a 9000-octet link) is done in one round trip. A size lost
//!   [`MAX_PROBES`] times in a row is taken to fail; then the search halves the gap
//!   between the PLPMTU and the smallest failed size until it is under
//!   [`SEARCH_STEP`].
//! * **Search complete.** Nothing is probed for [`RAISE_TIMER`], then the search runs
//!   again from the top (§5.2: the path may have grown).
//! * **Black hole** (§4.3). When the sender sees data at the PLPMTU stop getting
//!   through ([`Plpmtud::black_hole`]), the PLPMTU falls back to base and the search
//!   starts again below the size that failed.
//! * **PTB.** A smaller upper bound (the kernel learnt a smaller path MTU) lowers the
//!   PLPMTU at once ([`Plpmtud::set_upper`]).
//!
//! A probe is lost when no acknowledgement comes within four of its measured round
//! trips, never less than [`PROBE_TIMEOUT_FLOOR`] nor the VC's own retransmission
//! timeout ([`Plpmtud::set_data_rto`]). A probe lost while the VC's
//! own data was lost too is not held against its size (congestion, RFC 8899 §4.4:
//! a full receive queue drops a probe as it drops data); the search backs off
//! instead. Departure from RFC 8899: its
//! PROBE_TIMER is at least 1 s (15 s suggested) for packetization layers that have
//! no round-trip estimate; this machine has one from its own probes, as QUIC's
//! PLPMTUD uses its loss detection.
//!
//! Sans-IO: the owner sends the probe [`Plpmtud::poll_probe`] asks for, reports its
//! acknowledgement ([`Plpmtud::on_ack`]) and runs [`Plpmtud::handle_timeout`] at
//! [`Plpmtud::poll_timeout`].

use std::time::Duration;

use crate::time::Instant;

/// The PLPMTU before any probe is confirmed (RFC 8899 §5.1.2's BASE_PLPMTU).
pub const BASE_PLPMTU: usize = 1_200;
/// Times one size is probed before it is taken to fail (RFC 8899 MAX_PROBES).
pub const MAX_PROBES: u8 = 3;
/// The search stops when the gap between the PLPMTU and the smallest failed size is
/// below this (a step of 32 octets costs at most 2 % of a 1,500-octet path).
pub const SEARCH_STEP: usize = 32;
/// The shortest wait for a probe's acknowledgement.
pub const PROBE_TIMEOUT_FLOOR: Duration = Duration::from_millis(100);
/// The longest a search waits before probing again after a probe lost among data
/// losses (the wait doubles from [`PROBE_TIMEOUT_FLOOR`] with each such loss).
pub const MAX_CONGESTED_WAIT: Duration = Duration::from_secs(1);
/// How long a completed search rests before it probes upwards again (RFC 8899
/// PMTU_RAISE_TIMER).
pub const RAISE_TIMER: Duration = Duration::from_secs(600);

/// Probes and their outcomes, for `natm stats` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlpmtudStats {
    /// The PLPMTU now: the largest datagram payload confirmed to cross the path.
    pub plpmtu: usize,
    /// Probes sent (every attempt).
    pub probes_sent: u64,
    /// Probes acknowledged.
    pub probes_acked: u64,
    /// Probes whose acknowledgement did not come in time.
    pub probes_lost: u64,
    /// Of those, probes lost while the VC's data was lost too: not held against
    /// their size (congestion, not the MTU).
    pub probes_lost_congested: u64,
    /// Times the PLPMTU fell back to base because data stopped getting through.
    pub black_holes: u64,
}

/// A probe on the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outstanding {
    size: usize,
    deadline: Instant,
}

/// Where the search is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No upper bound yet (the socket has no peer): the PLPMTU is base, nothing is
    /// probed.
    Idle,
    /// Looking for a larger size.
    Searching {
        /// The probe on the path, if one is.
        outstanding: Option<Outstanding>,
        /// The size being probed and its attempts so far.
        attempts: u8,
        /// The smallest size taken to fail in this search.
        failed: Option<usize>,
        /// No probe before this (after a probe lost among data losses).
        not_before: Instant,
    },
    /// Done until `until` (then [`Phase::Searching`] from the top again).
    Complete { until: Instant },
}

/// One sending VC's PLPMTUD state.
#[derive(Debug, Clone)]
pub struct Plpmtud {
    plpmtu: usize,
    /// The largest size worth probing; 0 while [`Phase::Idle`].
    upper: usize,
    phase: Phase,
    /// The round trip of the newest acknowledged probe.
    rtt: Option<Duration>,
    /// The wait after the last probe lost among data losses (0: none lately).
    congested_wait: Duration,
    /// The VC's retransmission timeout, a floor under the probe timeout.
    data_rto: Duration,
    stats: PlpmtudStats,
}

impl Default for Plpmtud {
    fn default() -> Self {
        Plpmtud::new()
    }
}

impl Plpmtud {
    /// A VC before its path is known: the PLPMTU is [`BASE_PLPMTU`].
    pub fn new() -> Plpmtud {
        Plpmtud {
            plpmtu: BASE_PLPMTU,
            upper: 0,
            phase: Phase::Idle,
            rtt: None,
            congested_wait: Duration::ZERO,
            data_rto: Duration::ZERO,
            stats: PlpmtudStats::default(),
        }
    }

    /// The largest datagram payload confirmed to cross the path.
    pub fn plpmtu(&self) -> usize {
        self.plpmtu
    }

    /// What was probed and how it went.
    pub fn stats(&self) -> PlpmtudStats {
        PlpmtudStats {
            plpmtu: self.plpmtu,
            ..self.stats
        }
    }

    /// The size of the probe on the path, if one is.
    pub fn outstanding(&self) -> Option<usize> {
        match self.phase {
            Phase::Searching {
                outstanding: Some(o),
                ..
            } => Some(o.size),
            _ => None,
        }
    }

    /// The largest size worth probing; 0 until the path is known
    /// ([`Plpmtud::set_upper`]).
    pub fn upper(&self) -> usize {
        self.upper
    }

    /// Whether a search is under way.
    pub fn searching(&self) -> bool {
        matches!(self.phase, Phase::Searching { .. })
    }

    /// The largest size worth probing is now `upper`: the kernel's path payload for
    /// the peer, capped at what a full TPDU needs. A bound below the PLPMTU lowers it
    /// at once (the kernel refuses larger datagrams anyway); a larger one than before
    /// starts a search.
    pub fn set_upper(&mut self, upper: usize) {
        if upper == self.upper {
            return;
        }
        let grew = upper > self.upper;
        self.upper = upper;
        if upper <= BASE_PLPMTU || upper <= self.plpmtu {
            // Nothing above the bound is worth a probe: it is the PLPMTU (the kernel
            // refuses larger datagrams, and one below base is believed as it is).
            self.plpmtu = upper;
            self.phase = Phase::Complete {
                until: Instant::ZERO,
            };
        } else if grew || !matches!(self.phase, Phase::Complete { .. }) {
            self.search(None);
        }
    }

    fn search(&mut self, failed: Option<usize>) {
        self.phase = Phase::Searching {
            outstanding: None,
            attempts: 0,
            failed,
            not_before: Instant::ZERO,
        };
    }

    /// The size of the probe to send now, if one is due; it is then on the path until
    /// [`Plpmtud::on_ack`] or its timeout.
    pub fn poll_probe(&mut self, now: Instant) -> Option<usize> {
        let timeout = self.probe_timeout();
        let Phase::Searching {
            outstanding,
            attempts,
            failed,
            not_before,
        } = &mut self.phase
        else {
            return None;
        };
        if outstanding.is_some() || now < *not_before {
            return None;
        }
        let size = match *failed {
            None => self.upper,
            Some(f) if f.saturating_sub(self.plpmtu) < SEARCH_STEP => {
                self.phase = Phase::Complete {
                    until: now + RAISE_TIMER,
                };
                return None;
            }
            Some(f) => self.plpmtu + (f - self.plpmtu) / 2,
        };
        if size <= self.plpmtu {
            self.phase = Phase::Complete {
                until: now + RAISE_TIMER,
            };
            return None;
        }
        *attempts += 1;
        *outstanding = Some(Outstanding {
            size,
            deadline: now + timeout,
        });
        self.stats.probes_sent += 1;
        Some(size)
    }

    fn probe_timeout(&self) -> Duration {
        self.rtt
            .map_or(PROBE_TIMEOUT_FLOOR, |r| r * 4)
            .max(PROBE_TIMEOUT_FLOOR)
            .max(self.data_rto)
    }

    /// The VC's own retransmission timeout now: a probe is never given up on sooner
    /// (a queue that delays the VC's data delays its probes as much).
    pub fn set_data_rto(&mut self, rto: Duration) {
        self.data_rto = rto;
    }

    /// The peer acknowledged a probe of `size` sent `rtt` ago: the path carries it.
    /// An acknowledgement of a probe no longer waited for still confirms its size.
    pub fn on_ack(&mut self, now: Instant, size: usize, rtt: Duration) {
        self.stats.probes_acked += 1;
        self.rtt = Some(rtt);
        self.congested_wait = Duration::ZERO;
        if size > self.plpmtu && size <= self.upper.max(self.plpmtu) {
            self.plpmtu = size;
        }
        if let Phase::Searching {
            outstanding,
            attempts,
            failed,
            ..
        } = &mut self.phase
        {
            if outstanding.is_some_and(|o| o.size <= size) {
                *outstanding = None;
                *attempts = 0;
            }
            if failed.is_some_and(|f| f <= self.plpmtu) {
                *failed = None;
            }
            if self.plpmtu >= self.upper {
                self.phase = Phase::Complete {
                    until: now + RAISE_TIMER,
                };
            }
        }
    }

    /// When [`Plpmtud::handle_timeout`] is due next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Searching {
                outstanding: Some(o),
                ..
            } => Some(o.deadline),
            Phase::Searching {
                outstanding: None,
                not_before,
                ..
            } if not_before != Instant::ZERO => Some(not_before),
            Phase::Complete { until } if until != Instant::ZERO => Some(until),
            _ => None,
        }
    }

    /// A probe that timed out is lost (the size fails after [`MAX_PROBES`]); a
    /// completed search that has rested for [`RAISE_TIMER`] starts again.
    /// `data_lost`: the VC's own data was lost (or retransmitted) since the probe
    /// left. Then the probe's loss says nothing about its size — the path, or the
    /// peer's receive queue, was congested (RFC 8899 §4.4) — and is not held against
    /// it; the next probe waits, twice as long after each such loss (up to
    /// [`MAX_CONGESTED_WAIT`]), so that a congested path is not probed into the
    /// ground.
    pub fn handle_timeout(&mut self, now: Instant, data_lost: bool) {
        match self.phase {
            Phase::Searching {
                outstanding: Some(o),
                attempts,
                failed,
                ..
            } if o.deadline <= now => {
                self.stats.probes_lost += 1;
                let (attempts, failed, not_before) = if data_lost {
                    self.stats.probes_lost_congested += 1;
                    self.congested_wait =
                        (self.congested_wait * 2).clamp(PROBE_TIMEOUT_FLOOR, MAX_CONGESTED_WAIT);
                    (
                        attempts.saturating_sub(1),
                        failed,
                        now + self.congested_wait,
                    )
                } else if attempts >= MAX_PROBES {
                    (
                        0,
                        Some(failed.map_or(o.size, |f| f.min(o.size))),
                        Instant::ZERO,
                    )
                } else {
                    (attempts, failed, Instant::ZERO)
                };
                self.phase = Phase::Searching {
                    outstanding: None,
                    attempts,
                    failed,
                    not_before,
                };
            }
            Phase::Searching {
                outstanding: None,
                attempts,
                failed,
                not_before,
            } if not_before != Instant::ZERO && not_before <= now => {
                self.phase = Phase::Searching {
                    outstanding: None,
                    attempts,
                    failed,
                    not_before: Instant::ZERO,
                };
            }
            Phase::Complete { until } if until != Instant::ZERO && until <= now => {
                if self.upper > self.plpmtu {
                    self.search(None);
                } else {
                    self.phase = Phase::Complete {
                        until: now + RAISE_TIMER,
                    };
                }
            }
            _ => {}
        }
    }

    /// Data sent at the PLPMTU stopped getting through while smaller datagrams (the
    /// peer's acknowledgements, its answers) still do — the path shrank without a
    /// word (RFC 8899 §4.3). The PLPMTU falls back to base and a search starts below
    /// the size that failed. Nothing happens at base or below (the path itself is
    /// failing, not its MTU).
    pub fn black_hole(&mut self) {
        if self.plpmtu <= BASE_PLPMTU.min(self.upper) || self.phase == Phase::Idle {
            return;
        }
        self.stats.black_holes += 1;
        let failed = self.plpmtu;
        self.plpmtu = BASE_PLPMTU.min(self.upper);
        self.search(Some(failed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(n * 1_000_000)
    }

    /// A path that carries datagrams up to `mtu` octets and drops larger ones without
    /// a word; each probe is acknowledged `rtt_ms` later. Returns the time the search
    /// completed.
    fn run(p: &mut Plpmtud, mtu: usize, start: u64, rtt_ms: u64) -> u64 {
        let mut now = start;
        for _ in 0..10_000 {
            if let Some(size) = p.poll_probe(ms(now)) {
                if size <= mtu {
                    now += rtt_ms;
                    p.on_ack(ms(now), size, Duration::from_millis(rtt_ms));
                    continue;
                }
            }
            if !p.searching() {
                return now;
            }
            now = p.poll_timeout().unwrap().as_nanos() / 1_000_000;
            p.handle_timeout(ms(now), false);
        }
        panic!("the search never ended: {p:?}");
    }

    #[test]
    fn a_path_that_carries_the_upper_bound_is_confirmed_in_one_round_trip() {
        let mut p = Plpmtud::new();
        assert_eq!(p.plpmtu(), BASE_PLPMTU, "base before the path is known");
        assert_eq!(p.poll_probe(ms(0)), None, "nothing probed without a bound");
        p.set_upper(4_200);
        let done = run(&mut p, 65_507, 0, 1);
        assert_eq!((p.plpmtu(), done), (4_200, 1));
        assert_eq!(p.stats().probes_sent, 1);
        assert_eq!(p.poll_timeout(), Some(ms(1) + RAISE_TIMER));
    }

    #[test]
    fn a_black_hole_below_the_kernels_mtu_is_found_within_a_step_in_virtual_time() {
        // An Ethernet path (1,472 octets of UDP payload) whose tunnel silently drops
        // anything over 1,300.
        let mut p = Plpmtud::new();
        p.set_upper(1_472);
        let done = run(&mut p, 1_300, 0, 2);
        assert!(p.plpmtu() <= 1_300, "{p:?}");
        assert!(p.plpmtu() > 1_300 - SEARCH_STEP, "{p:?}");
        let s = p.stats();
        assert_eq!(s.probes_lost % u64::from(MAX_PROBES), 0, "{s:?}");
        assert!(s.probes_lost >= u64::from(MAX_PROBES), "{s:?}");
        // Each failed size costs MAX_PROBES timeouts of the floor: a few seconds at
        // most, with the data at base (or above) all along.
        assert!(done <= 10_000, "{done} ms");
    }

    #[test]
    fn a_probe_lost_once_is_sent_again_and_the_size_still_confirmed() {
        let mut p = Plpmtud::new();
        p.set_upper(9_000);
        assert_eq!(p.poll_probe(ms(0)), Some(9_000));
        assert_eq!(p.poll_timeout(), Some(ms(0) + PROBE_TIMEOUT_FLOOR));
        p.handle_timeout(ms(100), false);
        assert_eq!(p.poll_probe(ms(100)), Some(9_000), "the same size again");
        p.on_ack(ms(101), 9_000, Duration::from_millis(1));
        assert_eq!(p.plpmtu(), 9_000);
        assert!(!p.searching());
    }

    #[test]
    fn the_probe_timeout_follows_the_measured_round_trip_above_the_floor() {
        let mut p = Plpmtud::new();
        p.set_upper(1_472);
        p.poll_probe(ms(0));
        p.on_ack(ms(300), 1_300, Duration::from_millis(300));
        // A later search waits four round trips.
        p.black_hole();
        let _ = p.poll_probe(ms(1_000)).unwrap();
        assert_eq!(p.poll_timeout(), Some(ms(2_200)));
    }

    #[test]
    fn a_black_hole_drops_to_base_and_searches_below_what_failed() {
        let mut p = Plpmtud::new();
        p.set_upper(1_472);
        run(&mut p, 1_472, 0, 1);
        assert_eq!(p.plpmtu(), 1_472);
        // The path now drops anything over 1,400.
        p.black_hole();
        assert_eq!(p.plpmtu(), BASE_PLPMTU);
        assert_eq!(p.stats().black_holes, 1);
        let first = p.poll_probe(ms(10)).unwrap();
        assert!(
            first < 1_472,
            "the failed size is not probed again: {first}"
        );
        p.handle_timeout(ms(10), false);
        run(&mut p, 1_400, 10, 1);
        assert!((1_400 - SEARCH_STEP..=1_400).contains(&p.plpmtu()), "{p:?}");
        // At base nothing more can be concluded.
        let mut q = Plpmtud::new();
        q.set_upper(1_472);
        q.black_hole();
        assert_eq!((q.plpmtu(), q.stats().black_holes), (BASE_PLPMTU, 0));
    }

    #[test]
    fn a_smaller_kernel_bound_lowers_the_plpmtu_at_once_and_a_larger_one_searches() {
        let mut p = Plpmtud::new();
        p.set_upper(9_000);
        run(&mut p, 9_000, 0, 1);
        assert_eq!(p.plpmtu(), 9_000);
        p.set_upper(1_472);
        assert_eq!(p.plpmtu(), 1_472, "ICMP said the path shrank");
        assert_eq!(p.poll_probe(ms(5)), None);
        p.set_upper(9_000);
        assert_eq!(p.poll_probe(ms(6)), Some(9_000), "the path grew back");
        // A bound below base is the PLPMTU itself: nothing to probe.
        let mut q = Plpmtud::new();
        q.set_upper(548);
        assert_eq!((q.plpmtu(), q.poll_probe(ms(0))), (548, None));
    }

    #[test]
    fn a_probe_lost_among_data_losses_is_not_held_against_its_size() {
        // The peer's receive queue overflows: probes and data alike are lost. The
        // size is not taken to fail, and the probes back off.
        let mut p = Plpmtud::new();
        p.set_upper(4_200);
        let mut now = 0;
        let mut waits = Vec::new();
        for _ in 0..6 {
            assert_eq!(p.poll_probe(ms(now)), Some(4_200), "the same size again");
            now = p.poll_timeout().unwrap().as_nanos() / 1_000_000;
            p.handle_timeout(ms(now), true);
            let next = p.poll_timeout().unwrap().as_nanos() / 1_000_000;
            waits.push(next - now);
            assert_eq!(p.poll_probe(ms(now)), None, "not before the wait");
            now = next;
            p.handle_timeout(ms(now), false);
        }
        assert_eq!(waits, [100, 200, 400, 800, 1_000, 1_000]);
        let s = p.stats();
        assert_eq!((s.probes_lost, s.probes_lost_congested), (6, 6));
        // The queue drains: the size is confirmed, and nothing was taken to fail.
        assert_eq!(p.poll_probe(ms(now)), Some(4_200));
        p.on_ack(ms(now + 1), 4_200, Duration::from_millis(1));
        assert_eq!(p.plpmtu(), 4_200);
    }

    #[test]
    fn a_probe_waits_at_least_the_vcs_own_retransmission_timeout() {
        let mut p = Plpmtud::new();
        p.set_upper(4_200);
        p.set_data_rto(Duration::from_millis(700));
        p.poll_probe(ms(0));
        assert_eq!(p.poll_timeout(), Some(ms(700)));
    }

    #[test]
    fn a_completed_search_probes_upwards_again_after_the_raise_timer() {
        let mut p = Plpmtud::new();
        p.set_upper(1_472);
        let done = run(&mut p, 1_300, 0, 1);
        let below = p.plpmtu();
        // The tunnel went away: after the raise timer the search finds the rest.
        let at = p.poll_timeout().unwrap();
        assert_eq!(at, ms(done) + RAISE_TIMER);
        p.handle_timeout(at, false);
        assert!(p.searching());
        run(&mut p, 1_472, at.as_nanos() / 1_000_000, 1);
        assert!(p.plpmtu() > below);
        assert_eq!(p.plpmtu(), 1_472);
    }
}
