//! A call's modification through the switch (Q.2963.1, issue 19): a MODIFY REQUEST
//! from either side is admitted on the output port of each direction whose rate
//! changes, forwarded to the other side, and answered with what that side answers.
//! Only MODIFY ACKNOWLEDGE from the far side changes the cross-connects' policers
//! (UPC) to the new contract, before the acknowledgement goes on, so the raised rate
//! the requester then sends is not policed away.
//!
//! While the request is pending each direction holds the larger of its old and new
//! reservation; a refusal from the far side (or the call's end) gives back the raise,
//! an acknowledgement gives back a decrease.

use natm_proto::wire::q2931::TrafficDescriptor;

use super::*;
use crate::Endpoint;

/// Causes of a refused modification (Q.2963.1 uses Q.2931's).
const INVALID_CALL_REF: u8 = 81;
const WRONG_STATE: u8 = 101;

/// A modification forwarded to the far side of a transit call.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    /// Whether the request came from the caller's side (leg a).
    from_a: bool,
    /// The contracts once acknowledged.
    fwd: Contract,
    bwd: Contract,
    /// The reservations before the request, cells/s (forward on b's output,
    /// backward on a's).
    old_fwd: u64,
    old_bwd: u64,
}

impl Control {
    fn modify_reject(&mut self, port: PortId, call: CallId, c: Cause) {
        let now = self.now;
        if let Some(l) = self.links.get_mut(&port) {
            let _ = l.saal.modify_reject(now, call, c);
        }
        self.dirty.push(port);
    }

    /// Sets the reservations of transit `id` to `fwd`/`bwd` cells/s (on b's output and
    /// a's), adjusting its ports' totals.
    fn reserve(&mut self, id: u64, fwd: u64, bwd: u64) {
        let Some(t) = self.calls.get_mut(&id) else {
            return;
        };
        let (a, b) = (t.a.port, t.b.port);
        let (old_fwd, old_bwd) = (t.fwd_cells, t.bwd_cells);
        t.fwd_cells = fwd;
        t.bwd_cells = bwd;
        if let Some(l) = self.links.get_mut(&b) {
            l.reserved_cells = l.reserved_cells.saturating_sub(old_fwd) + fwd;
        }
        if let Some(l) = self.links.get_mut(&a) {
            l.reserved_cells = l.reserved_cells.saturating_sub(old_bwd) + bwd;
        }
    }

    /// A MODIFY REQUEST on `port`: admitted on the output ports (cause 37 if the raise
    /// does not fit), then forwarded to the other side of the call.
    pub(super) fn on_modify_requested(
        &mut self,
        sw: &Switch,
        port: PortId,
        call: CallId,
        td: TrafficDescriptor,
    ) {
        let Some(&(id, from_a)) = self.links.get(&port).and_then(|l| l.calls.get(&call)) else {
            return self.modify_reject(port, call, net_cause(INVALID_CALL_REF));
        };
        let Some(t) = self.calls.get(&id) else {
            return self.modify_reject(port, call, net_cause(INVALID_CALL_REF));
        };
        let other = if from_a { t.b } else { t.a };
        let (Some(other_call), false, false) = (
            other.call,
            t.conns.is_empty(),
            self.modifies.contains_key(&id),
        ) else {
            return self.modify_reject(port, call, net_cause(WRONG_STATE));
        };
        let tpdu = t.qos.resolved_transport(false).tpdu_size;
        let new_fwd = if t.fwd_used {
            self.contract_of(&td, tpdu, true)
        } else {
            t.fwd
        };
        let new_bwd = if t.bwd_used {
            self.contract_of(&td, tpdu, false)
        } else {
            t.bwd
        };
        let (a, b, old_fwd, old_bwd) = (t.a.port, t.b.port, t.fwd_cells, t.bwd_cells);
        // Per-port admission, as for a SETUP: what the port carries beyond its other
        // calls' reservations.
        let free = |this: &Control, p: PortId, own: u64| {
            let cells = sw.port_config(p).map_or(0, |c| c.cells_per_sec());
            let held = this.links.get(&p).map_or(0, |l| l.reserved_cells);
            cells.saturating_sub(held.saturating_sub(own))
        };
        if new_fwd.reserved > free(self, b, old_fwd) || new_bwd.reserved > free(self, a, old_bwd) {
            return self.modify_reject(port, call, net_cause(cause::USER_CELL_RATE));
        }
        let now = self.now;
        let r = self
            .links
            .get_mut(&other.port)
            .map(|l| l.saal.modify(now, other_call, td));
        if !matches!(r, Some(Ok(()))) {
            return self.modify_reject(port, call, net_cause(cause::TEMPORARY_FAILURE));
        }
        self.dirty.push(other.port);
        self.reserve(
            id,
            old_fwd.max(new_fwd.reserved),
            old_bwd.max(new_bwd.reserved),
        );
        self.modifies.insert(
            id,
            Pending {
                from_a,
                fwd: new_fwd,
                bwd: new_bwd,
                old_fwd,
                old_bwd,
            },
        );
    }

    /// The requester's leg of a pending modification of transit `id`: (port, call).
    fn requester(&self, id: u64, p: &Pending) -> Option<(PortId, CallId)> {
        let t = self.calls.get(&id)?;
        let leg = if p.from_a { t.a } else { t.b };
        Some((leg.port, leg.call?))
    }

    /// The far side acknowledged: the policers of the call's data cross-connects take
    /// the new contracts, the reservations settle at the new rates, and MODIFY
    /// ACKNOWLEDGE goes on to the requester.
    pub(super) fn on_modified(&mut self, sw: &mut Switch, port: PortId, call: CallId) {
        let Some(&(id, _)) = self.links.get(&port).and_then(|l| l.calls.get(&call)) else {
            return;
        };
        let Some(p) = self.modifies.remove(&id) else {
            return;
        };
        let Some((req_port, req_call)) = self.requester(id, &p) else {
            return;
        };
        let Some(t) = self.calls.get_mut(&id) else {
            return;
        };
        let fwd_in =
            t.a.vci_in
                .map(|v| Endpoint::Vc(VcAddr::new(t.a.port, 0, v)));
        let bwd_in =
            t.b.vci_in
                .map(|v| Endpoint::Vc(VcAddr::new(t.b.port, 0, v)));
        for cid in &t.conns {
            let Some(from) = sw.vc_stats(*cid).map(|v| v.xc.from()) else {
                continue;
            };
            let c = if Some(from) == fwd_in && t.fwd_used {
                p.fwd
            } else if Some(from) == bwd_in && t.bwd_used {
                p.bwd
            } else {
                continue;
            };
            let _ = sw.renegotiate(*cid, c);
        }
        t.fwd = p.fwd;
        t.bwd = p.bwd;
        self.reserve(id, p.fwd.reserved, p.bwd.reserved);
        let now = self.now;
        if let Some(l) = self.links.get_mut(&req_port) {
            let _ = l.saal.modify_accept(now, req_call);
        }
        self.dirty.push(req_port);
    }

    /// The far side refused: the reservations are back as they were and MODIFY
    /// REJECT with the far side's cause goes on to the requester.
    pub(super) fn on_modify_refused(&mut self, port: PortId, call: CallId, c: Cause) {
        let Some(&(id, _)) = self.links.get(&port).and_then(|l| l.calls.get(&call)) else {
            return;
        };
        let Some(p) = self.modifies.remove(&id) else {
            return;
        };
        self.reserve(id, p.old_fwd, p.old_bwd);
        if let Some((req_port, req_call)) = self.requester(id, &p) {
            self.modify_reject(req_port, req_call, c);
        }
    }
}
