//! What a QoS asks an admission control for, and the grant written back into it: the
//! one rule sigd's resource manager and a switch's admission both apply, so that a
//! call is granted the same rate whether a host or the network is its bottleneck.
//!
//! Only guaranteed service reserves. Each direction asks for a *target* (its SCR for
//! VBR, else its PCR, else its `max_pcr`; `max` is the whole link) and accepts down to
//! a *minimum* (`min_pcr`, else the target). The grant is the most between the two
//! that is free ([`grant`]); a direction whose minimum is not free refuses the call.
//! The granted QoS has the target lowered to the grant and everything else, the
//! minimum included, as asked: a later hop may lower it again, never below the
//! minimum.

use super::{Direction, Qos, Rate, Service};

/// What one direction of a QoS asks to reserve, payload bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Want {
    /// The rate wanted (0: nothing to reserve).
    pub target_bps: u64,
    /// The least the caller accepts (≤ target).
    pub min_bps: u64,
}

/// The rate granted to a direction that wants `target` and accepts `min` when `free`
/// is free: `target` if it fits, else all that is free if that is at least `min`;
/// `None` when even `min` does not fit.
pub fn grant(target: u64, min: u64, free: u64) -> Option<u64> {
    (min.min(target) <= free).then(|| target.min(free))
}

impl Qos {
    /// What direction `dir` asks to reserve; `capacity_bps` stands for a rate of
    /// `max`. Nothing unless the service is guaranteed and the direction is used.
    pub fn want(&self, dir: Direction, capacity_bps: u64) -> Want {
        if self.service() != Service::Guaranteed {
            return Want::default();
        }
        let p = match dir {
            Direction::Tx => self.tx(),
            Direction::Rx => self.rx(),
        };
        if !p.is_used() {
            return Want::default();
        }
        let bps = |r: Option<Rate>| r.map(|r| r.bits_per_sec().unwrap_or(capacity_bps));
        let target = bps(p.scr).or(bps(p.pcr)).or(bps(p.max_pcr)).unwrap_or(0);
        Want {
            target_bps: target,
            min_bps: bps(p.min_pcr).unwrap_or(target).min(target),
        }
    }

    /// This QoS with each direction's target lowered to what was granted it (`tx_bps`
    /// and `rx_bps`; a grant at or above the target leaves it as asked).
    pub fn with_grant(&self, tx_bps: u64, rx_bps: u64, capacity_bps: u64) -> Qos {
        if self.service() != Service::Guaranteed {
            return *self;
        }
        let (aal, mut tx, mut rx, t) = self.into_parts();
        for (p, g, w) in [
            (&mut tx, tx_bps, self.want(Direction::Tx, capacity_bps)),
            (&mut rx, rx_bps, self.want(Direction::Rx, capacity_bps)),
        ] {
            if w.target_bps == 0 || g >= w.target_bps {
                continue;
            }
            if p.scr.is_some() {
                p.scr = Some(Rate::Bps(g));
            } else if p.pcr.is_some() {
                p.pcr = Some(Rate::Bps(g));
            } else {
                p.max_pcr = Some(Rate::Bps(g));
            }
        }
        Qos::new(aal, tx, rx, t).unwrap_or(*self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1_000_000;

    #[test]
    fn the_grant_is_the_most_between_the_minimum_and_the_target() {
        assert_eq!(grant(200 * M, 50 * M, 100 * M), Some(100 * M));
        assert_eq!(grant(200 * M, 50 * M, 300 * M), Some(200 * M));
        assert_eq!(grant(200 * M, 50 * M, 50 * M), Some(50 * M));
        assert_eq!(grant(200 * M, 50 * M, 49 * M), None);
        // Without a minimum the target is the minimum.
        assert_eq!(grant(200 * M, 200 * M, 199 * M), None);
        assert_eq!(grant(0, 0, 0), Some(0));
    }

    #[test]
    fn a_granted_qos_lowers_the_target_and_keeps_the_minimum() {
        let q: Qos = "cbr:pcr=200Mbps,min_pcr=50Mbps".parse().unwrap();
        let w = q.want(Direction::Tx, 1_000 * M);
        assert_eq!((w.target_bps, w.min_bps), (200 * M, 50 * M));
        let g = q.with_grant(100 * M, 200 * M, 1_000 * M);
        assert_eq!(
            g.to_string(),
            "cbr:min_pcr=50Mbps,tx:pcr=100Mbps,rx:pcr=200Mbps"
        );
        // VBR lowers its SCR; `max` is the capacity.
        let v: Qos = "vbr:pcr=20Mbps,scr=10Mbps,min_pcr=5Mbps".parse().unwrap();
        assert_eq!(v.want(Direction::Rx, M).target_bps, 10 * M);
        assert_eq!(
            v.with_grant(6 * M, 6 * M, M).tx().scr,
            Some(Rate::Bps(6 * M))
        );
        let m: Qos = "cbr:pcr=max".parse().unwrap();
        assert_eq!(m.want(Direction::Tx, 7 * M).target_bps, 7 * M);
        // Nothing to reserve for other services.
        let r: Qos = "reliable".parse().unwrap();
        assert_eq!(r.want(Direction::Tx, M), Want::default());
    }
}
