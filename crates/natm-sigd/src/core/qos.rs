//! What a call's QoS asks of the resource manager (seed 000 §5.2, docs/ARCHITECTURE.md
//! "Admission"), the grant written back into the QoS, and the fit of a call to a
//! pre-authorised listener.

use natm_proto::wire::qos::{Qos, Rate, Service};

use super::Core;
use crate::admission::{Demand, Grant, Refusal};

/// The QoS seen from the other end: what one side sends, the other receives.
pub(super) fn reverse(q: &Qos) -> Qos {
    let (aal, tx, rx, t) = q.into_parts();
    Qos::new(aal, rx, tx, t).unwrap_or(*q)
}

/// What a QoS asks of the resource manager, one direction (`tx`: this side sends).
/// Only guaranteed VCs reserve: their target rate (SCR for VBR, else PCR, else max
/// PCR; `max` is the whole link) and the minimum (`min_pcr`, else the target).
pub(super) fn demand(q: &Qos, tx: bool, capacity: u64) -> Demand {
    if q.service() != Service::Guaranteed {
        return Demand::default();
    }
    let p = if tx { q.tx() } else { q.rx() };
    if !p.is_used() {
        return Demand::default();
    }
    let bps = |r: Option<Rate>| r.map(|r| r.bits_per_sec().unwrap_or(capacity));
    let target = bps(p.scr).or(bps(p.pcr)).or(bps(p.max_pcr)).unwrap_or(0);
    let min = bps(p.min_pcr).unwrap_or(target).min(target);
    Demand {
        target_bps: target,
        min_bps: min,
        tpdu_size: q.resolved_transport(false).tpdu_size,
    }
}

/// The QoS with each direction's target rate lowered to what was granted.
pub(super) fn granted_qos(q: &Qos, out_bps: u64, in_bps: u64, capacity: u64) -> Qos {
    if q.service() != Service::Guaranteed {
        return *q;
    }
    let (aal, mut tx, mut rx, t) = q.into_parts();
    for (p, g, d) in [
        (&mut tx, out_bps, demand(q, true, capacity)),
        (&mut rx, in_bps, demand(q, false, capacity)),
    ] {
        if d.target_bps == 0 || g >= d.target_bps {
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
    Qos::new(aal, tx, rx, t).unwrap_or(*q)
}

/// Whether a call asking for `call` (the callee's view) fits a listener bound with
/// `bound`: the same service, and for guaranteed service neither direction's target
/// rate above the listener's.
pub(super) fn qos_fits(call: &Qos, bound: &Qos, capacity: u64) -> bool {
    if call.service() != bound.service() {
        return false;
    }
    if call.service() != Service::Guaranteed {
        return true;
    }
    [true, false]
        .iter()
        .all(|&tx| demand(call, tx, capacity).target_bps <= demand(bound, tx, capacity).target_bps)
}

impl Core {
    /// Reserve what `q` asks of this host (both directions, this side's view): the
    /// grant and the QoS lowered to it, or the refusal (counted) to answer with.
    pub(super) fn admit_qos(&mut self, q: &Qos) -> Result<(Grant, Qos), Refusal> {
        let capacity = self.res.capacity_bps();
        let grant = self
            .res
            .admit(&demand(q, true, capacity), &demand(q, false, capacity))
            .inspect_err(|_| self.counters.admission_refusals += 1)?;
        let granted = granted_qos(q, grant.out_bps, grant.in_bps, capacity);
        Ok((grant, granted))
    }

    /// Reserve one direction of `q` only (`tx`: the one this side sends): a
    /// point-to-multipoint call's forward direction, at its root or at a leaf. The
    /// other direction's QoS text stays as asked, unreserved.
    pub(super) fn admit_one_way(&mut self, q: &Qos, tx: bool) -> Result<(Grant, Qos), Refusal> {
        let capacity = self.res.capacity_bps();
        let d = demand(q, tx, capacity);
        let none = Demand {
            tpdu_size: d.tpdu_size,
            ..Demand::default()
        };
        let (out, inn) = if tx { (d, none) } else { (none, d) };
        let grant = self
            .res
            .admit(&out, &inn)
            .inspect_err(|_| self.counters.admission_refusals += 1)?;
        let (out_bps, in_bps) = if tx {
            (grant.out_bps, demand(q, false, capacity).target_bps)
        } else {
            (demand(q, true, capacity).target_bps, grant.in_bps)
        };
        Ok((grant, granted_qos(q, out_bps, in_bps, capacity)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_lower_the_target_and_keep_the_qos_valid() {
        let q: Qos = "cbr:pcr=80Mbps,min_pcr=10Mbps".parse().unwrap();
        let d = demand(&q, true, 100_000_000);
        assert_eq!((d.target_bps, d.min_bps), (80_000_000, 10_000_000));
        let g = granted_qos(&q, 35_000_000, 35_000_000, 100_000_000);
        assert_eq!(g.tx().pcr.and_then(|r| r.bits_per_sec()), Some(35_000_000));
        let r: Qos = "reliable".parse().unwrap();
        assert_eq!(demand(&r, true, 1), Demand::default());
    }
}
