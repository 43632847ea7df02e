//! What a call's QoS asks of the resource manager (seed 000 §5.2, docs/sigd.md
//! "Admission"), the grant written back into the QoS, and the fit of a call to a
//! pre-authorised listener.

use natm_proto::wire::qos::{Direction, Qos, Service};

use super::Core;
use crate::admission::{Demand, Grant, Refusal};

/// The QoS seen from the other end: what one side sends, the other receives.
pub(super) fn reverse(q: &Qos) -> Qos {
    let (aal, tx, rx, t) = q.into_parts();
    Qos::new(aal, rx, tx, t).unwrap_or(*q)
}

/// What a QoS asks of the resource manager, one direction (`tx`: this side sends):
/// [`Qos::want`], the rule a switch's admission applies too, with the TPDU size that
/// sets its CPU cost.
pub(super) fn demand(q: &Qos, tx: bool, capacity: u64) -> Demand {
    let w = q.want(if tx { Direction::Tx } else { Direction::Rx }, capacity);
    if w.target_bps == 0 {
        return Demand::default();
    }
    Demand {
        target_bps: w.target_bps,
        min_bps: w.min_bps,
        tpdu_size: q.resolved_transport(false).tpdu_size,
    }
}

/// The QoS with each direction's target rate lowered to what was granted
/// ([`Qos::with_grant`]).
pub(super) fn granted_qos(q: &Qos, out_bps: u64, in_bps: u64, capacity: u64) -> Qos {
    q.with_grant(out_bps, in_bps, capacity)
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
