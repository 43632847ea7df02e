//! The link's round trip as SSCOP sees it, and the timers that must outlast it.
//!
//! Q.2110 fixes Timer_CC and Timer_NO_RESPONSE by management; natm's network links
//! run them at 200 ms and 400 ms (`SaalConfig::network`) so that a dead switch is
//! noticed within half a second. On a trunk whose round trip is longer than that (a
//! long or slow path) every BGN was retransmitted before its BGAK could come back,
//! MaxCC ran out, and the link never came up. Departure from Q.2110: each end
//! measures the round trip (a POLL to the STAT that echoes its N(PS); the first BGN
//! to its BGAK, an overestimate if a retransmission was answered), smooths it with the
//! transport's RFC 6298 estimator ([`RttEstimator`]), and never lets a timer that
//! waits for an answer run shorter than the answer takes.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Instant;
use crate::transport::rtt::{RttConfig, RttEstimator};
use crate::wire::sscop::SeqNum;

/// POLLs remembered for a sample (a STAT answers one of the last few).
const POLLS_KEPT: usize = 8;

/// The smoothed round trip and the POLLs it is measured from.
#[derive(Debug, Clone)]
pub(super) struct RoundTrip {
    est: RttEstimator,
    polls: VecDeque<(SeqNum, Instant)>,
}

impl Default for RoundTrip {
    fn default() -> Self {
        RoundTrip {
            est: RttEstimator::new(RttConfig::default()),
            polls: VecDeque::new(),
        }
    }
}

impl RoundTrip {
    /// The smoothed round trip, once measured.
    pub(super) fn srtt(&self) -> Option<Duration> {
        self.est.has_sample().then(|| self.est.srtt())
    }

    /// A measured round trip.
    pub(super) fn sample(&mut self, rtt: Duration) {
        self.est.on_sample(rtt);
    }

    /// POLL `nps` left at `now`.
    pub(super) fn poll_sent(&mut self, nps: SeqNum, now: Instant) {
        if self.polls.len() >= POLLS_KEPT {
            self.polls.pop_front();
        }
        self.polls.push_back((nps, now));
    }

    /// A STAT echoing `nps` arrived at `now`: a sample if that POLL is remembered;
    /// it and the POLLs before it are forgotten.
    pub(super) fn stat(&mut self, nps: SeqNum, now: Instant) {
        if let Some(i) = self.polls.iter().position(|(p, _)| *p == nps) {
            let sent = self.polls[i].1;
            self.polls.drain(..=i);
            self.sample(now.saturating_duration_since(sent));
        }
    }

    /// A new connection: no POLL is outstanding any more (the round trip is kept).
    pub(super) fn forget_polls(&mut self) {
        self.polls.clear();
    }

    /// `base`, or twice the round trip plus `extra` if that is longer: a timer that
    /// waits for an answer.
    pub(super) fn at_least(&self, base: Duration, extra: Duration) -> Duration {
        self.srtt().map_or(base, |s| base.max(s * 2 + extra))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn a_stat_samples_the_poll_it_echoes_and_smooths() {
        let mut r = RoundTrip::default();
        assert_eq!(
            r.at_least(Duration::from_millis(200), Duration::ZERO)
                .as_millis(),
            200
        );
        r.poll_sent(SeqNum::wrapping(1), t(0));
        r.poll_sent(SeqNum::wrapping(2), t(100));
        r.stat(SeqNum::wrapping(2), t(400));
        assert_eq!(r.srtt(), Some(Duration::from_millis(300)));
        // POLL 1 went with it: a late STAT for it is no sample.
        r.stat(SeqNum::wrapping(1), t(900));
        assert_eq!(r.srtt(), Some(Duration::from_millis(300)));
        r.poll_sent(SeqNum::wrapping(3), t(1000));
        r.stat(SeqNum::wrapping(3), t(1100));
        assert_eq!(r.srtt(), Some(Duration::from_millis(275)));
        assert_eq!(
            r.at_least(Duration::from_millis(200), Duration::from_millis(100)),
            Duration::from_millis(650)
        );
        assert_eq!(
            r.at_least(Duration::from_secs(7), Duration::ZERO),
            Duration::from_secs(7)
        );
    }

    #[test]
    fn a_stat_for_no_remembered_poll_changes_nothing() {
        let mut r = RoundTrip::default();
        for n in 0..20 {
            r.poll_sent(SeqNum::wrapping(n), t(u64::from(n)));
        }
        r.stat(SeqNum::wrapping(3), t(50));
        assert_eq!(
            r.srtt(),
            None,
            "POLL 3 was forgotten (only the last 8 are kept)"
        );
        r.forget_polls();
        r.stat(SeqNum::wrapping(19), t(50));
        assert_eq!(r.srtt(), None);
    }
}
