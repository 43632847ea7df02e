//! QoS renegotiation through the network (issue 19): an application's `Modify`
//! becomes a Q.2963.1 MODIFY REQUEST on the call's signalling link after this host's
//! admission control has reserved the new rate, and a peer's MODIFY REQUEST is
//! admitted here before MODIFY ACKNOWLEDGE goes back
//! (docs/decisions/0019-qos-renegotiation-through-the-network.md).
//!
//! seed 003: "once these parameters have been agreed then the QoS may be dynamically
//! changed at the transport layer without going to the network once the change is
//! within the agreed bounds" — a change beyond the reservation is the other case, and
//! goes to the network. Only the transmit rate of the asking side changes; it stays
//! within the bounds agreed at setup, `min_pcr` up to `max_pcr` (without `max_pcr`,
//! the rate granted at setup).
//!
//! While a request is pending, each direction holds the larger of its old and new
//! rate, so that an answer either way fits without asking admission again: a refusal
//! (MODIFY REJECT from any hop, a released call) gives back the raise, and an
//! acceptance gives back a decrease.

use natm_proto::sig::call::traffic_descriptor;
use natm_proto::wire::q2931::TrafficDescriptor;
use natm_proto::wire::qos::{Rate, TrafficClass, TrafficParams, BITS_PER_CELL};

use super::qos::demand;
use super::*;
use crate::admission::{Demand, Refusal};

/// A modification this sigd asked its peer for, waiting for MODIFY ACKNOWLEDGE.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    /// The application and its request tag, answered when the peer answers.
    app: AppId,
    req: u64,
    /// The reservation before the request, restored on a refusal.
    old: Grant,
    /// The reservation after an acceptance, out and in, bit/s.
    new_out: u64,
    new_in: u64,
    /// The call's QoS once accepted (this side's view).
    qos: Qos,
}

/// A direction's target rate (what `demand` reserves) set to `bps`; the text's other
/// parameters stay. VBR changes its SCR; otherwise the PCR (added when only
/// `max_pcr` was given, which stays the bound).
fn with_target(p: &mut TrafficParams, bps: u64) {
    if p.scr.is_some() {
        p.scr = Some(Rate::Bps(bps));
    } else {
        p.pcr = Some(Rate::Bps(bps));
    }
}

/// `q` with this side's transmit (`tx`) or receive target rate set to `bps`. A
/// direction without `max_pcr` gets its current target as `max_pcr`: the rate
/// granted at setup stays its bound after a decrease.
fn retarget(q: &Qos, tx: bool, bps: u64, capacity: u64) -> Option<Qos> {
    let target = demand(q, tx, capacity).target_bps;
    let (aal, mut t, mut r, tp) = q.into_parts();
    let p = if tx { &mut t } else { &mut r };
    if p.max_pcr.is_none() && target > 0 {
        p.max_pcr = Some(Rate::Bps(target));
    }
    with_target(p, bps);
    Qos::new(aal, t, r, tp).ok()
}

/// The bounds a direction's rate may be renegotiated within, bit/s: `min_pcr` (0
/// without) and `max_pcr` (`max`: the link; without it, the current target).
fn bounds(q: &Qos, tx: bool, capacity: u64) -> (u64, u64) {
    let p = if tx { q.tx() } else { q.rx() };
    let target = demand(q, tx, capacity).target_bps;
    let min = p
        .min_pcr
        .map_or(0, |r| r.bits_per_sec().unwrap_or(capacity));
    let max = p
        .max_pcr
        .map_or(target, |r| r.bits_per_sec().unwrap_or(capacity))
        .max(target);
    (min, max)
}

/// A direction's rate in a traffic descriptor, cells/s on the wire: the SCR of a VBR
/// direction, else the PCR.
fn cells_of(td: &TrafficDescriptor, forward: bool, class: TrafficClass) -> Option<u64> {
    let r = if forward { &td.fwd } else { &td.bwd };
    let c = if class == TrafficClass::Vbr {
        r.scr01.or(r.pcr01)
    } else {
        r.pcr01
    };
    c.map(u64::from)
}

fn exact(bps: u64, tpdu_size: u32) -> Demand {
    Demand {
        target_bps: bps,
        min_bps: bps,
        tpdu_size,
    }
}

fn mbps(bps: u64) -> String {
    format!("{} Mbit/s", bps as f64 / 1e6)
}

impl Core {
    /// Reserve exactly `out`/`inn` for call `id` in place of what it holds; on a
    /// refusal the old reservation is restored (it fitted before) and the refusal
    /// returned.
    fn regrant(&mut self, id: u64, out: u64, inn: u64) -> Result<(), Refusal> {
        let Some(c) = self.calls.get(&id) else {
            return Err(Refusal::new(cause::INVALID_CALL_REF, "the call is gone"));
        };
        let (old, tpdu) = (c.grant, c.qos.resolved_transport(false).tpdu_size);
        self.res.release(&old);
        match self.res.admit(&exact(out, tpdu), &exact(inn, tpdu)) {
            Ok(g) => {
                if let Some(c) = self.calls.get_mut(&id) {
                    c.grant = g;
                }
            }
            Err(e) => {
                self.counters.admission_refusals += 1;
                let back = self
                    .res
                    .admit(&exact(old.out_bps, tpdu), &exact(old.in_bps, tpdu))
                    .unwrap_or_default();
                if let Some(c) = self.calls.get_mut(&id) {
                    c.grant = back;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// An application's `Modify`: the new transmit rate of one of its active,
    /// guaranteed calls, checked against the call's bounds and the user's
    /// `max_rate`, reserved here, then asked of the peer (MODIFY REQUEST) or, for a
    /// call inside this host, in force at once.
    pub(super) fn modify_request(&mut self, t: AppId, req: u64, call: u64, asked: Qos) {
        if !self.owned(t, call, Some(CallState::Active)) {
            return self.refuse(
                t,
                req,
                cause::INVALID_CALL_REF,
                "no active call with that id on this connection".into(),
            );
        }
        if self.modifies.contains_key(&call) {
            return self.refuse(
                t,
                req,
                cause::WRONG_STATE,
                "a QoS change of this call is pending: wait for its answer".into(),
            );
        }
        let capacity = self.res.capacity_bps();
        let c = &self.calls[&call];
        let current = c.qos;
        if current.service() != natm_proto::wire::qos::Service::Guaranteed
            || !current.tx().is_used()
        {
            return self.refuse(
                t,
                req,
                cause::SERVICE_UNAVAILABLE,
                "only a guaranteed call's sending rate is reserved, so only it changes through the network; change other calls' rates in band".into(),
            );
        }
        // The rate asked for: the text's transmit rate, as `set_qos` reads it.
        let p = asked.tx();
        let Some(new) = p
            .scr
            .or(p.pcr)
            .or(p.max_pcr)
            .map(|r| r.bits_per_sec().unwrap_or(capacity))
            .filter(|&r| r > 0)
        else {
            return self.refuse(
                t,
                req,
                cause::UNSUPPORTED_TRAFFIC,
                format!("\"{asked}\" names no transmit rate (scr, pcr or max_pcr)"),
            );
        };
        let (min, max) = bounds(&current, true, capacity);
        if new < min || new > max {
            return self.refuse(
                t,
                req,
                cause::UNSUPPORTED_TRAFFIC,
                format!(
                    "{} is outside the bounds agreed at setup, {} to {} (min_pcr and max_pcr)",
                    mbps(new),
                    mbps(min),
                    mbps(max)
                ),
            );
        }
        let Some(qos) = retarget(&current, true, new, capacity) else {
            return self.refuse(
                t,
                req,
                cause::UNSUPPORTED_TRAFFIC,
                format!("{} does not fit the call's QoS {current}", mbps(new)),
            );
        };
        if let Some(why) = self.rate_refusal(t, &qos) {
            self.counters.access_refusals += 1;
            return self.refuse(t, req, cause::NOT_AUTHORIZED, why);
        }
        // A call inside the host is charged to its caller's half only.
        let charged = c.outgoing || !matches!(c.remote, Remote::Local(_));
        let want = if charged { self.share_demand(&qos) } else { 0 };
        if let Some(why) = self.share_refusal(t, want, Some(call)) {
            self.counters.access_refusals += 1;
            return self.refuse(t, req, cause::RESOURCES, why);
        }
        match c.remote {
            Remote::Local(other) => self.modify_local(t, req, call, other, qos, new),
            Remote::Peer {
                link,
                call: Some(cid),
            } => self.modify_peer(t, req, call, link, cid, qos, new),
            Remote::Peer { call: None, .. } => self.refuse(
                t,
                req,
                cause::WRONG_STATE,
                "the call has no signalling link yet".into(),
            ),
        }
    }

    /// A call between two applications of this host: charged once, to the caller's
    /// half (`calls::connect`); nothing to ask, so the change is in force at once and
    /// both applications are told.
    fn modify_local(&mut self, t: AppId, req: u64, call: u64, other: u64, qos: Qos, new: u64) {
        let caller_asks = self.calls[&call].outgoing;
        let holder = if caller_asks { call } else { other };
        let Some(h) = self.calls.get(&holder) else {
            return self.refuse(t, req, cause::TEMPORARY_FAILURE, "the peer is gone".into());
        };
        let (out, inn) = if caller_asks {
            (new, h.grant.in_bps)
        } else {
            (h.grant.out_bps, new)
        };
        if let Err(r) = self.regrant(holder, out, inn) {
            return self.refuse(t, req, r.cause, r.detail);
        }
        if let Some(c) = self.calls.get_mut(&call) {
            c.qos = qos;
        }
        let theirs = super::qos::reverse(&qos);
        let peer_owner = self.calls.get_mut(&other).and_then(|o| {
            o.qos = theirs;
            o.owner
        });
        if let Some(suppressed) = self.app_log() {
            info!(call, rate = new, suppressed, "local call's rate changed");
        }
        self.tell(
            t,
            Message::QosChanged {
                call,
                qos,
                resume: self.current_ticket(call),
            },
        );
        self.tell(t, Message::Ack { req, id: call });
        if let Some(o) = peer_owner {
            self.tell(
                o,
                Message::QosChanged {
                    call: other,
                    qos: theirs,
                    resume: self.current_ticket(other),
                },
            );
        }
    }

    /// A call over a signalling link: reserve the larger of the old and new rate
    /// here, then MODIFY REQUEST with the new traffic descriptor (forward is the
    /// caller's direction).
    #[allow(clippy::too_many_arguments)]
    fn modify_peer(
        &mut self,
        t: AppId,
        req: u64,
        call: u64,
        link: SocketAddr,
        cid: CallId,
        qos: Qos,
        new: u64,
    ) {
        let c = &self.calls[&call];
        let (old, outgoing) = (c.grant, c.outgoing);
        if let Err(r) = self.regrant(call, new.max(old.out_bps), old.in_bps) {
            return self.refuse(t, req, r.cause, r.detail);
        }
        let caller_view = if outgoing {
            qos
        } else {
            super::qos::reverse(&qos)
        };
        let cells = self.saal_cfg.calls.link_cell_rate;
        let td = traffic_descriptor(&caller_view, cells);
        let now = self.now;
        let r = match self.peers.get_mut(&link) {
            Some(l) => l.saal.modify(now, cid, td).map_err(|e| e.to_string()),
            None => Err("the signalling link is gone".into()),
        };
        if let Err(e) = r {
            let _ = self.regrant(call, old.out_bps, old.in_bps);
            return self.refuse(
                t,
                req,
                cause::TEMPORARY_FAILURE,
                format!("the modification could not be asked for: {e}"),
            );
        }
        self.dirty.push(link);
        if let Some(suppressed) = self.app_log() {
            info!(call, rate = new, %link, suppressed, "modification requested");
        }
        self.modifies.insert(
            call,
            Pending {
                app: t,
                req,
                old,
                new_out: new,
                new_in: old.in_bps,
                qos,
            },
        );
    }

    /// The peer acknowledged this side's MODIFY REQUEST: the new reservation stands
    /// (a decrease gives back what was held meanwhile) and the application hears
    /// `QosChanged`, then `Ack`.
    pub(super) fn on_modified(&mut self, link: SocketAddr, cid: CallId) {
        let Some(id) = self.call_on(link, cid) else {
            return;
        };
        let Some(p) = self.modifies.remove(&id) else {
            debug!(call = id, "unexpected MODIFY ACKNOWLEDGE");
            return;
        };
        // Within what is held: it fits.
        let _ = self.regrant(id, p.new_out, p.new_in);
        if let Some(c) = self.calls.get_mut(&id) {
            c.qos = p.qos;
        }
        info!(call = id, rate = p.new_out, "modification acknowledged");
        self.tell(
            p.app,
            Message::QosChanged {
                call: id,
                qos: p.qos,
                resume: self.current_ticket(id),
            },
        );
        self.tell(p.app, Message::Ack { req: p.req, id });
    }

    /// The peer (or a switch on the path) refused this side's MODIFY REQUEST: the old
    /// reservation is back and the application hears `Refused` with the cause.
    pub(super) fn on_modify_refused(&mut self, link: SocketAddr, cid: CallId, c: u8) {
        let Some(id) = self.call_on(link, cid) else {
            return;
        };
        let Some(p) = self.modifies.remove(&id) else {
            return;
        };
        let _ = self.regrant(id, p.old.out_bps, p.old.in_bps);
        info!(call = id, cause = c, "modification refused");
        self.refuse(
            p.app,
            p.req,
            c,
            format!(
                "the network refused the new rate of {} (cause {c}: {}); the old rate stays",
                mbps(p.new_out),
                cause_text(c)
            ),
        );
    }

    /// A call ends with its modification pending: what was held is freed with the
    /// call; the application's request is answered with the call's cause.
    pub(super) fn end_modify(&mut self, id: u64, c: u8) {
        if let Some(p) = self.modifies.remove(&id) {
            self.refuse(
                p.app,
                p.req,
                c,
                format!(
                    "the call ended before the network answered the QoS change (cause {c}: {})",
                    cause_text(c)
                ),
            );
        }
    }

    pub(super) fn call_on(&self, link: SocketAddr, cid: CallId) -> Option<u64> {
        self.peers.get(&link)?.calls.get(&cid).copied()
    }

    /// A peer's MODIFY REQUEST (Q.2963.1): each direction whose rate changed must stay
    /// within the bounds agreed at setup (else MODIFY REJECT cause 73) and fit this
    /// host's admission control (else its cause, 37 or 47); then MODIFY ACKNOWLEDGE,
    /// the call's QoS follows, and its application hears `QosChanged`.
    pub(super) fn on_modify_requested(
        &mut self,
        link: SocketAddr,
        cid: CallId,
        td: TrafficDescriptor,
    ) {
        let now = self.now;
        let reject = |this: &mut Core, c: u8, why: &str| {
            if let Some(suppressed) = this.remote_log(super::ratelog::Event::Refused) {
                info!(%link, %cid, cause = c, why, suppressed, "modification refused");
            }
            if let Some(l) = this.peers.get_mut(&link) {
                let _ = l.saal.modify_reject(now, cid, uni_cause(c));
            }
            this.dirty.push(link);
        };
        let Some(id) = self.call_on(link, cid) else {
            return reject(self, cause::INVALID_CALL_REF, "no such call");
        };
        let c = &self.calls[&id];
        if c.state != CallState::Active || self.modifies.contains_key(&id) {
            return reject(self, cause::WRONG_STATE, "the call is not active");
        }
        let (mut qos, grant, outgoing) = (c.qos, c.grant, c.outgoing);
        let capacity = self.res.capacity_bps();
        let mut rates = [grant.out_bps, grant.in_bps];
        for (i, tx) in [true, false].into_iter().enumerate() {
            let p = if tx { qos.tx() } else { qos.rx() };
            if !p.is_used() || demand(&qos, tx, capacity).target_bps == 0 {
                continue;
            }
            // Forward is the caller's transmit direction.
            let Some(cells) = cells_of(&td, tx == outgoing, p.class) else {
                continue;
            };
            // The descriptor counts cells on the wire (`Qos::wire_cells`, each frame's
            // overhead included, in the caller's frames); the rates here are payload.
            let caller_view = if outgoing {
                qos
            } else {
                super::qos::reverse(&qos)
            };
            let cells = caller_view.payload_cells(cells);
            let target = demand(&qos, tx, capacity).target_bps;
            if cells == target.div_ceil(BITS_PER_CELL) {
                continue;
            }
            let (min, max) = bounds(&qos, tx, capacity);
            // Cells round up: the bound is compared in cells, and the rate kept at
            // most the bound.
            let bps = cells.saturating_mul(BITS_PER_CELL).min(max);
            if bps < min || cells > max.div_ceil(BITS_PER_CELL) {
                let why = format!(
                    "{} is outside the bounds agreed at setup, {} to {}",
                    mbps(cells.saturating_mul(BITS_PER_CELL)),
                    mbps(min),
                    mbps(max)
                );
                return reject(self, cause::UNSUPPORTED_TRAFFIC, &why);
            }
            let Some(q) = retarget(&qos, tx, bps, capacity) else {
                return reject(
                    self,
                    cause::UNSUPPORTED_TRAFFIC,
                    "the rate does not fit the QoS",
                );
            };
            qos = q;
            rates[i] = bps;
        }
        let more = rates[0].max(rates[1]);
        if more > grant.out_bps.max(grant.in_bps) && !outgoing {
            if let Some(why) = self.unknown_bandwidth_full(link, more, Some(id)) {
                self.counters.peer_limit_refusals += 1;
                return reject(self, cause::RESOURCES, &why);
            }
        }
        if let Err(r) = self.regrant(id, rates[0], rates[1]) {
            return reject(self, r.cause, &r.detail);
        }
        let r = match self.peers.get_mut(&link) {
            Some(l) => l.saal.modify_accept(now, cid).map(|_| ()),
            None => return,
        };
        self.dirty.push(link);
        if r.is_err() {
            let _ = self.regrant(id, grant.out_bps, grant.in_bps);
            return;
        }
        let Some(c) = self.calls.get_mut(&id) else {
            return;
        };
        c.qos = qos;
        let owner = c.owner;
        info!(call = id, %link, out = rates[0], inn = rates[1], "modification acknowledged");
        if let Some(o) = owner {
            let resume = self.current_ticket(id);
            self.tell(
                o,
                Message::QosChanged {
                    call: id,
                    qos,
                    resume,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_min_pcr_to_max_pcr_or_the_target() {
        let q: Qos = "guaranteed:pcr=10Mbps,max_pcr=40Mbps,min_pcr=2Mbps"
            .parse()
            .unwrap();
        assert_eq!(bounds(&q, true, 100_000_000), (2_000_000, 40_000_000));
        let q: Qos = "guaranteed:pcr=10Mbps".parse().unwrap();
        assert_eq!(bounds(&q, true, 100_000_000), (0, 10_000_000));
        let r = retarget(&q, true, 5_000_000, 100_000_000).unwrap();
        assert_eq!(demand(&r, true, 100_000_000).target_bps, 5_000_000);
        // The setup rate stays the bound after a decrease.
        assert_eq!(bounds(&r, true, 100_000_000), (0, 10_000_000));
    }
}
