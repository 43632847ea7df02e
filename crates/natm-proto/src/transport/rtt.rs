//! Round-trip time estimation and the retransmission timeout (RFC 6298, specs.md §9.2).
//!
//! Every ACK echoes the timestamp of the TPDU that caused it, so every ACK is a valid
//! sample, retransmissions included (no Karn's rule needed, specs.md §7.1).

use std::time::Duration;

/// RFC 6298 estimator with a configurable floor.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    min_rtt: Option<Duration>,
    latest: Duration,
    backoff: u32,
    config: RttConfig,
    /// [`RttEstimator::rto`], worked out when a sample or a timeout changes it: the
    /// PSB asks on every poll, samples come once per ACK.
    rto: Duration,
}

/// Timer bounds for [`RttEstimator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttConfig {
    /// RTO before any sample (RFC 6298: 1 s).
    pub initial_rto: Duration,
    /// Floor on the RTO. RFC 6298 says 1 s; seed 001 §4.6 says 2 × the scheduler period.
    /// natm defaults to 200 ms like Linux, a deliberate departure for LAN/ATM use.
    pub min_rto: Duration,
    /// Ceiling on the RTO, backoff included.
    pub max_rto: Duration,
    /// Clock granularity G.
    pub granularity: Duration,
    /// Floor on the head check's two round trips ([`RttEstimator::head_check`]):
    /// [`DEFAULT_MIN_HEAD_CHECK`] unless set.
    pub min_head_check: Duration,
}

/// How late an ACK may come on a loss-free path before the head check takes it for
/// lost, whatever the measured RTT: the timing slack of a user-space stack on a
/// shared CPU, the leaky bucket's [`crate::flow::leaky_bucket::TIMER_SLACK`].
///
/// seed 000 §5.3.2: "We check every two round trip times if the cumulative ack has
/// increased. If not, ... retransmit the packet at the head." Departure: not sooner
/// than this. On loopback a paced VC measures a round trip of tens of microseconds
/// (nothing queues), so two of them are shorter than a receiver thread that runs a
/// few hundred microseconds late; each such late ACK cost a head retransmission of
/// a TPDU that had arrived (issue 34: 103 per 20 MB at 40 Mbit/s on loopback). On a
/// path whose RTT is above 1 ms the floor changes nothing.
pub const DEFAULT_MIN_HEAD_CHECK: Duration = Duration::from_millis(2);

impl Default for RttConfig {
    fn default() -> Self {
        RttConfig {
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            granularity: Duration::from_micros(1),
            min_head_check: DEFAULT_MIN_HEAD_CHECK,
        }
    }
}

impl RttEstimator {
    /// An estimator with no samples yet.
    pub fn new(config: RttConfig) -> Self {
        let mut e = RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            min_rtt: None,
            latest: Duration::ZERO,
            backoff: 1,
            config,
            rto: Duration::ZERO,
        };
        e.rto = e.work_out_rto();
        e
    }

    /// Feed one RTT sample; resets the backoff (a fresh, valid sample, RFC 6298 §5.7).
    pub fn on_sample(&mut self, r: Duration) {
        self.latest = r;
        self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let err = srtt.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + err / 4;
                self.srtt = Some(srtt * 7 / 8 + r / 8);
            }
        }
        self.backoff = 1;
        self.rto = self.work_out_rto();
    }

    /// Double the RTO after a timeout (RFC 6298 §5.5), up to the ceiling.
    pub fn on_timeout(&mut self) {
        if self.rto < self.config.max_rto {
            self.backoff = self.backoff.saturating_mul(2);
            self.rto = self.work_out_rto();
        }
    }

    /// The retransmission timeout now, backoff included.
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// RFC 6298 §2: SRTT + max(G, 4·RTTVAR), at least the floor, times the backoff,
    /// at most the ceiling; the initial RTO before any sample.
    fn work_out_rto(&self) -> Duration {
        let base = match self.srtt {
            None => self.config.initial_rto,
            Some(srtt) => {
                (srtt + self.config.granularity.max(self.rttvar * 4)).max(self.config.min_rto)
            }
        };
        base.saturating_mul(self.backoff).min(self.config.max_rto)
    }

    /// Smoothed RTT, or the initial RTO before any sample.
    pub fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(self.config.initial_rto)
    }

    /// The head check's interval before backoff: two smoothed RTTs (seed 000 §5.3.2),
    /// and at least [`RttConfig::min_head_check`].
    pub fn head_check(&self) -> Duration {
        self.srtt()
            .saturating_mul(2)
            .max(self.config.min_head_check)
    }

    /// Whether any sample has arrived.
    pub fn has_sample(&self) -> bool {
        self.srtt.is_some()
    }

    /// Smallest RTT seen (the base RTT for packet-pair).
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The latest sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// RTT variation.
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64(x / 1000.0)
    }

    fn close(a: Duration, b: Duration) -> bool {
        let d = a.abs_diff(b);
        d < Duration::from_micros(10)
    }

    /// specs.md §9.2 trace, G = 1 ms.
    #[test]
    fn rfc6298_trace() {
        let rows = [
            (100.0, 100.0, 50.0, 1000.0, 300.0),
            (116.0, 102.0, 41.5, 1000.0, 268.0),
            (84.0, 99.75, 35.625, 1000.0, 242.25),
            (300.0, 124.7812, 76.7812, 1000.0, 431.9062),
            (100.0, 121.6836, 63.7812, 1000.0, 376.8086),
            (100.0, 118.9731, 53.2568, 1000.0, 332.0005),
        ];
        let cfg = |min| RttConfig {
            min_rto: ms(min),
            granularity: ms(1.0),
            ..RttConfig::default()
        };
        let mut slow = RttEstimator::new(cfg(1000.0));
        let mut fast = RttEstimator::new(cfg(200.0));
        for (r, srtt, rttvar, rto_1s, rto_200) in rows {
            slow.on_sample(ms(r));
            fast.on_sample(ms(r));
            assert!(
                close(fast.srtt(), ms(srtt)),
                "srtt {:?} vs {srtt}",
                fast.srtt()
            );
            assert!(close(fast.rttvar(), ms(rttvar)));
            assert!(close(slow.rto(), ms(rto_1s)));
            assert!(close(fast.rto(), ms(rto_200)), "rto {:?}", fast.rto());
        }
        for expect in [664.0, 1328.0, 2656.0, 5312.0] {
            fast.on_timeout();
            assert!(close(fast.rto(), ms(expect)), "{:?}", fast.rto());
        }
        fast.on_sample(ms(100.0));
        assert!(fast.rto() < ms(400.0), "a new sample clears the backoff");
    }

    #[test]
    fn initial_rto_and_ceiling() {
        let mut e = RttEstimator::new(RttConfig::default());
        assert_eq!(e.rto(), Duration::from_secs(1));
        for _ in 0..20 {
            e.on_timeout();
        }
        assert_eq!(e.rto(), Duration::from_secs(60));
    }
}
