//! Calls routed on designated transit lists, and crankback (issue 33): where the
//! control plane meets `crate::routing`.
//!
//! - A SETUP without a DTL whose called address is not behind one of this switch's
//!   own host ports is routed by the topology: this switch is the ingress, computes a
//!   path with room for the call's contract ([`Router::path`]) and sends the SETUP on
//!   with the DTL (IE 0xD1). A static route to a trunk is the fallback when no switch
//!   advertises the address.
//! - A SETUP with a DTL goes out by the port its current entry names; the last entry
//!   (port 0) is the destination, which routes by its static host routes.
//! - A hop that cannot take the call (link down, no room, no VCI) refuses it with a
//!   crankback IE (0xE1) naming the blocked link; a callee side whose trunk failed
//!   before CONNECT is cranked back by the switch before it. Transit switches relay
//!   the crankback; the ingress excludes the blocked link or node and routes the call
//!   again, at most [`MAX_CRANKBACKS`] times, before it gives up with the last cause.

use std::collections::BTreeMap;

use natm_proto::sig::{CallId, CallParams};
use natm_proto::wire::addr::from_party;
use natm_proto::wire::q2931::{Blocked, Cause, Crankback, Dtl};
use natm_proto::wire::qos::Direction;

use super::{called_text, cause, payload_bps, Control, Output, PortRole};
use crate::routing::{port_of, LocalLink, NoPath, RouterEvent};
use crate::{PortId, Switch};

/// The most times the ingress routes one call again after crankbacks.
pub const MAX_CRANKBACKS: usize = 3;

/// Whether a refusal with cause `c` is the network's, worth a path around it: link
/// or node down (27, 38, 41), no cell rate (37), no VCI (45), no resources (47).
pub(super) fn crankable(c: u8) -> bool {
    matches!(c, 27 | 37 | 38 | 41 | 45 | 47)
}

/// How a DTL-routed call was routed here.
#[derive(Debug)]
pub(super) struct RouteState {
    /// The caller's SETUP, kept by the ingress (`None` at a transit) to route it
    /// again after a crankback.
    pub(super) params: Option<CallParams>,
    /// What crankbacks excluded so far.
    pub(super) blocked: Vec<Blocked>,
    /// The link the call left by: this switch, its port, the next node.
    pub(super) link: Blocked,
}

/// Where a SETUP goes next.
#[derive(Debug)]
pub(super) struct NextHop {
    pub(super) b: PortId,
    /// The DTL the SETUP goes on with (pointer on the next node).
    pub(super) dtl: Option<Dtl>,
    /// Whether this switch built the DTL.
    pub(super) originated: bool,
    /// The link taken, on a DTL.
    pub(super) link: Option<Blocked>,
    /// On a transit, the link the call came in by (the previous node's).
    pub(super) back_link: Option<Blocked>,
}

impl NextHop {
    fn plain(b: PortId) -> NextHop {
        NextHop {
            b,
            dtl: None,
            originated: false,
            link: None,
            back_link: None,
        }
    }
}

/// A refusal of a SETUP, before it is sent.
#[derive(Debug)]
pub(super) struct HopRefusal {
    pub(super) cause: u8,
    pub(super) at: PortId,
    pub(super) why: String,
    pub(super) crankback: Option<Crankback>,
}

impl HopRefusal {
    pub(super) fn new(cause: u8, at: PortId, why: String) -> HopRefusal {
        HopRefusal {
            cause,
            at,
            why,
            crankback: None,
        }
    }

    pub(super) fn with_crankback(mut self, cb: Crankback) -> HopRefusal {
        self.crankback = Some(cb);
        self
    }
}

/// The routing part of `natm stat --switch`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RoutingRow {
    /// This switch's node number.
    pub node: u32,
    /// Trunks with a two-way neighbour: (port, node).
    pub neighbours: Vec<(u16, u32)>,
    /// The topology database.
    pub database: Vec<crate::routing::DbRow>,
    /// The route a best-effort call would take now to each node that reaches
    /// prefixes: (node, the nodes on the way; empty: unreachable).
    pub routes: Vec<(u32, Vec<u32>)>,
    /// The routing's counters.
    pub counters: crate::routing::RoutingCounters,
    /// Calls routed again after a crankback.
    pub crankbacks: u64,
}

impl Control {
    /// Calls this switch routed again after a crankback.
    pub fn crankbacks(&self) -> u64 {
        self.crankbacks
    }

    /// The routing's state, if it runs.
    pub fn routing(&self) -> Option<RoutingRow> {
        let r = self.router.as_ref()?;
        Some(RoutingRow {
            node: r.node().0,
            neighbours: self
                .links
                .keys()
                .filter_map(|p| r.neighbour(*p).map(|n| (p.0, n.0)))
                .collect(),
            database: r.database(),
            routes: r
                .routes()
                .into_iter()
                .map(|(n, p)| (n.0, p.into_iter().map(|x| x.0).collect()))
                .collect(),
            counters: r.counters(),
            crankbacks: self.crankbacks,
        })
    }

    /// Moves the router's frames and events out and tells it the switch's own state;
    /// whether it produced output.
    pub(super) fn service_routing(&mut self, sw: &Switch) -> bool {
        if self.router.is_none() {
            return false;
        }
        if std::mem::take(&mut self.routing_stale) {
            self.update_routing(sw);
        }
        let now = self.now;
        let r = self.router.as_mut().expect("checked");
        let mut down = Vec::new();
        while let Some(e) = r.poll_event() {
            if let RouterEvent::Down { port, .. } = e {
                down.push(port);
            }
        }
        while let Some((p, f)) = r.poll_transmit() {
            self.out.push_back(Output::Routing(p, f));
        }
        // A neighbour no longer heard: its trunk's signalling fails now (its calls
        // are released with cause 27 at once, as on any trunk failure) rather than
        // after SSCOP's own timer.
        for p in down {
            if let Some(l) = self.links.get_mut(&p) {
                l.saal.lower_layer_failed(now);
                self.dirty.push(p);
            }
        }
        !self.out.is_empty() || !self.dirty.is_empty()
    }

    /// The trunks' free cell rates and the prefixes of this switch's own ports, as
    /// the router advertises them.
    fn update_routing(&mut self, sw: &Switch) {
        let cells = |p: PortId| sw.port_config(p).map_or(0, |c| c.cells_per_sec());
        let to_u32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        let links: BTreeMap<PortId, LocalLink> = self
            .links
            .iter()
            .filter(|(_, l)| l.cfg.role == PortRole::Switch)
            .map(|(p, l)| {
                let max = cells(*p);
                // A trunk whose signalling is down takes no call.
                let avail = if l.saal.is_up() {
                    max.saturating_sub(l.reserved_cells)
                } else {
                    0
                };
                (
                    *p,
                    LocalLink {
                        max_cells: to_u32(max),
                        avail_cells: to_u32(avail),
                    },
                )
            })
            .collect();
        let prefixes = self
            .cfg
            .routes
            .iter()
            .filter(|(_, p)| {
                self.links
                    .get(p)
                    .is_some_and(|l| l.cfg.role != PortRole::Switch)
            })
            .map(|(pre, _)| pre.clone())
            .chain(self.registered.iter().map(|(pre, _)| pre.clone()))
            .collect();
        let now = self.now;
        if let Some(r) = self.router.as_mut() {
            r.set_local(now, links, prefixes);
        }
    }

    /// The cells/s a call's contract needs at least forward and backward: its
    /// minimum where it has one (`wire::qos::grant` still picks the grant per hop).
    fn path_need(&self, sw: &Switch, a: PortId, params: &CallParams) -> (u64, u64) {
        let qos = params.offered_qos();
        let cells_a = sw.port_config(a).map_or(0, |c| c.cells_per_sec());
        let cap = payload_bps(&qos, cells_a);
        let (wf, wb) = (qos.want(Direction::Tx, cap), qos.want(Direction::Rx, cap));
        let low = qos
            .with_grant(wf.min_bps, u64::MAX, cap)
            .with_grant(u64::MAX, wb.min_bps, cap);
        (
            self.contract(&low, cells_a, true).reserved,
            self.contract(&low, cells_a, false).reserved,
        )
    }

    /// Where the SETUP from `a` goes: see the module docs.
    pub(super) fn next_hop(
        &self,
        sw: &Switch,
        a: PortId,
        params: &CallParams,
        blocked: &[Blocked],
        last: Option<u8>,
    ) -> Result<NextHop, HopRefusal> {
        let called = called_text(params);
        let static_route = self.route(params).filter(|&b| b != a);
        let no_route = || HopRefusal::new(cause::NO_ROUTE, a, format!("no route to {called}"));
        let Some(router) = &self.router else {
            return static_route.map(NextHop::plain).ok_or_else(no_route);
        };
        let me = router.node();
        let is_trunk = |p: PortId| self.role(p) == Some(PortRole::Switch);
        if let Some(dtl) = &params.dtl {
            let Some(h) = dtl.current_hop().filter(|h| h.node == me) else {
                let why = "the DTL does not name this switch next".into();
                return Err(HopRefusal::new(cause::INVALID_IE, a, why));
            };
            let back_link = dtl
                .current
                .checked_sub(1)
                .and_then(|i| dtl.hops.get(i))
                .map(|p| Blocked::Link {
                    from: p.node,
                    port: p.port,
                    to: me,
                });
            if h.port == 0 {
                // The destination: its own host routes; a refusal for want of room
                // back on the trunk in can still be cranked back.
                return static_route
                    .filter(|b| !is_trunk(*b))
                    .map(|b| NextHop {
                        back_link,
                        ..NextHop::plain(b)
                    })
                    .ok_or_else(no_route);
            }
            let next = dtl.next_hop().map(|n| n.node).unwrap_or_default();
            let link = Blocked::Link {
                from: me,
                port: h.port,
                to: next,
            };
            let b = port_of(h.port).unwrap_or(PortId(u16::MAX));
            if !is_trunk(b) {
                let why = format!("the DTL names port {}, which is no trunk", h.port);
                let cb = Crankback::new(link, cause::NO_ROUTE);
                return Err(HopRefusal::new(cause::NO_ROUTE, a, why).with_crankback(cb));
            }
            let mut d = dtl.clone();
            d.current += 1;
            return Ok(NextHop {
                b,
                dtl: Some(d),
                originated: false,
                link: Some(link),
                back_link,
            });
        }
        if let Some(b) = static_route.filter(|b| self.role(*b).is_some_and(|_| !is_trunk(*b))) {
            return Ok(NextHop::plain(b));
        }
        let Some(addr) = from_party(&params.called) else {
            return Err(no_route());
        };
        let (fwd, bwd) = self.path_need(sw, a, params);
        match router.path(&addr, fwd, bwd, blocked) {
            Ok(mut dtl) if dtl.hops.len() >= 2 => {
                let h = dtl.hops[0];
                let link = Blocked::Link {
                    from: me,
                    port: h.port,
                    to: dtl.hops[1].node,
                };
                dtl.current = 1;
                Ok(NextHop {
                    b: port_of(h.port).unwrap_or(PortId(u16::MAX)),
                    dtl: Some(dtl),
                    originated: true,
                    link: Some(link),
                    back_link: None,
                })
            }
            Ok(_) | Err(NoPath::Unreachable) => {
                static_route.map(NextHop::plain).ok_or_else(no_route)
            }
            Err(NoPath::NoCapacity) => match (static_route, blocked.is_empty()) {
                (Some(b), true) => Ok(NextHop::plain(b)),
                _ => {
                    let c = last.unwrap_or(cause::USER_CELL_RATE);
                    let why = format!(
                        "no path to {called} with room for the call ({} tried)",
                        blocked.len() + 1
                    );
                    Err(HopRefusal::new(c, a, why))
                }
            },
        }
    }

    /// Refuses the SETUP `call` from `a`; towards a trunk with the crankback.
    pub(super) fn refuse_hop(&mut self, a: PortId, call: CallId, r: HopRefusal) {
        let natm = self.role(a).is_some_and(PortRole::is_natm);
        let mut cause = self.refusal(r.cause, r.at, r.why, natm);
        if self.role(a) == Some(PortRole::Switch) {
            cause.crankback = r.crankback;
        }
        let now = self.now;
        if let Some(l) = self.links.get_mut(&a) {
            let _ = l.saal.reject(now, call, cause);
        }
        self.dirty.push(a);
    }

    /// The callee side `b` of transit call `id` ended with `cause`. Before CONNECT
    /// on a DTL, a network refusal is cranked back: the ingress routes the call again
    /// around the blocking (`None`: it did); a transit adds its own link as the
    /// blocking if the cause has none and its trunk failed. Otherwise the cause to
    /// clear the call with.
    pub(super) fn crank_back(
        &mut self,
        sw: &mut Switch,
        b: PortId,
        id: u64,
        mut cause: Cause,
    ) -> Option<Cause> {
        let Some(t) = self.calls.get(&id) else {
            return Some(cause);
        };
        let Some(r) = t.route.as_ref() else {
            return Some(cause);
        };
        if t.b.vci_out.is_some() || t.a.vci_in.is_some() {
            // Connected, or a standard UNI caller told its VCI already.
            return Some(cause);
        }
        let value = cause.value.raw();
        let link_failed = !self.is_up(b) && matches!(value, 27 | 38 | 41);
        let blocked = match (cause.crankback, link_failed) {
            (Some(cb), _) => cb.blocked,
            (None, true) => r.link,
            _ => return Some(cause),
        };
        if r.params.is_none() || r.blocked.len() >= MAX_CRANKBACKS {
            if cause.crankback.is_none() {
                cause.crankback = Some(Crankback::new(blocked, value));
            }
            return Some(cause);
        }
        self.crankbacks += 1;
        let t = self.calls.remove(&id).expect("looked up above");
        self.modifies.remove(&id);
        for cid in &t.conns {
            let _ = sw.disconnect(*cid);
        }
        if let Some(l) = self.links.get_mut(&t.b.port) {
            l.reserved_cells = l.reserved_cells.saturating_sub(t.fwd_cells);
            if let Some(v) = t.b.vci_in {
                l.vcis.free(v);
            }
        }
        let a = t.a.port;
        let a_call = t.a.call?;
        if let Some(l) = self.links.get_mut(&a) {
            l.reserved_cells = l.reserved_cells.saturating_sub(t.bwd_cells);
            l.calls.remove(&a_call);
        }
        self.dirty.push(a);
        let mut r = *t.route.expect("checked");
        r.blocked.push(blocked);
        let params = r.params.expect("checked");
        self.route_setup(sw, a, a_call, params, r.blocked, false, Some(value));
        None
    }
}
