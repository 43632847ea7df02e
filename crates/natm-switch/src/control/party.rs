//! Point-to-multipoint calls through the switch (Q.2971, issue 19): the control plane
//! drives the data plane's branches ([`Switch::add_branch`]) from ADD PARTY and
//! DROP PARTY.
//!
//! A SETUP whose bearer says point-to-multipoint ([`CallParams::multipoint`]) is a
//! *multicast* transit: one root leg (the caller's port) and a branch leg per output
//! port that carries at least one of the call's parties. Only the forward direction
//! exists (root → leaves): each branch is admitted, reserved and cross-connected
//! for the forward rate on its port alone, and nothing a leaf sends on its label is
//! cross-connected (it is an unknown VC to the data plane, counted and dropped).
//!
//! - The SETUP opens the first branch (a multipoint SETUP on the routed port); its
//!   CONNECT installs the cross-connect from the root's label (allocated then) and
//!   answers CONNECT. The call's first party is party 0 on both legs.
//! - An ADD PARTY from the root is routed. If the port already has a branch of the
//!   call, the party rides it (Q.2971's branching: the next switch, or the leaf's
//!   sigd, places it): ADD PARTY goes on the branch's call with an endpoint
//!   reference of the switch's, and its answer goes back upstream; an ADD PARTY for
//!   a branch still being set up waits for its CONNECT. Otherwise a new branch is
//!   opened as the first was (cause 37 upstream if its port cannot carry the
//!   forward rate), and its CONNECT adds a data-plane branch and acknowledges the
//!   party upstream.
//! - A DROP PARTY from the root drops the party downstream, or releases its branch
//!   if it was the branch's last party (what is queued towards the branch drains
//!   first, as a released call's VCs do).
//! - A branch released from downstream (the leaf's application or sigd gone, a
//!   trunk's link lost), or a party dropped from downstream, becomes DROP PARTY
//!   upstream for each party it carried; the other branches go on. When the last
//!   branch goes, the call is released upstream (Q.2971: the last party's drop is
//!   the call's release). A RELEASE from the root releases every branch.
//!
//! Departures: a modification (Q.2963.1 MODIFY REQUEST) of a multipoint call is
//! refused with cause 63 (service or option not available): each branch would have
//! to be renegotiated downstream and admitted on its port, and one refusal would
//! leave the call's branches at different rates. Standard UNI ports (Linux's
//! atmsigd) carry no multipoint branch (cause 63): natm's ADD PARTY carries its
//! private IE.

use natm_proto::sig::call::PartyRef;

use super::stat::{BranchRow, CallRow};
use super::*;

/// Q.2931 cause 63: service or option not available.
const SERVICE_UNAVAILABLE: u8 = 63;

/// The switch's endpoint references on a branch's call: 1 to 32,767 (0 is the
/// branch's SETUP).
const MAX_EREF: u16 = 0x7fff;

/// The first party of a branch's call, as the switch (its caller) names it.
const BRANCH_FIRST: PartyRef = PartyRef {
    value: 0,
    ours: true,
};

/// One output port's leg of a multicast call.
#[derive(Debug)]
pub(super) struct Branch {
    pub(super) port: PortId,
    /// Call control's id of the branch's call on the port.
    pub(super) call: CallId,
    /// The label the switch named in the branch's SETUP (held, never cross-connected:
    /// nothing comes back).
    pub(super) vci_in: u16,
    /// The label the branch's far end receives on (from its CONNECT).
    pub(super) vci_out: Option<u16>,
    /// The host's data endpoint (host ports).
    pub(super) data: Option<SocketAddr>,
    /// The data plane's branch, once connected.
    pub(super) conn: Option<crate::ConnId>,
    /// The next endpoint reference to try for a party added on this branch.
    next_eref: u16,
    /// ADD PARTYs from the root waiting for this branch's CONNECT.
    waiting: Vec<(PartyRef, CallParams)>,
    /// The branch's own party 0 has no upstream party any more (the root dropped it
    /// before the branch connected): dropped once the branch connects.
    orphan_first: bool,
}

/// A party of the call as the root sees it, and where it lives.
#[derive(Debug, Clone, Copy)]
pub(super) struct Party {
    /// The branch carrying it.
    pub(super) branch: u64,
    /// The party on the branch's call (`None`: waiting for the branch to connect).
    pub(super) down: Option<PartyRef>,
    /// Acknowledged upstream (or, for party 0, connected).
    pub(super) active: bool,
}

/// A point-to-multipoint transit call.
#[derive(Debug)]
pub(super) struct Multicast {
    /// The root's side (`vci_in`: the label the root sends on, from the first
    /// CONNECT; `vci_out` unused).
    pub(super) root: Leg,
    /// Branches by number, oldest first.
    pub(super) branches: BTreeMap<u64, Branch>,
    next_branch: u64,
    /// The root's parties (upstream endpoint references).
    pub(super) parties: BTreeMap<PartyRef, Party>,
    /// The forward contract, and what each branch reserves on its port.
    fwd: Contract,
    pub(super) fwd_cells: u64,
    qos: Qos,
    pub(super) called: String,
    pub(super) active: bool,
    pub(super) since: Instant,
}

impl Multicast {
    fn branch_of(&self, port: PortId, call: CallId) -> Option<u64> {
        self.branches
            .iter()
            .find(|(_, b)| b.port == port && b.call == call)
            .map(|(k, _)| *k)
    }

    fn parties_on(&self, k: u64) -> impl Iterator<Item = (PartyRef, Party)> + '_ {
        self.parties
            .iter()
            .filter(move |(_, p)| p.branch == k)
            .map(|(r, p)| (*r, *p))
    }

    /// A live data-plane connection of the call, to add branches to.
    fn live_conn(&self, sw: &Switch) -> Option<crate::ConnId> {
        self.branches
            .values()
            .filter_map(|b| b.conn)
            .find(|c| sw.vc_stats(*c).is_some())
    }
}

impl Multicast {
    /// What `natm switch stat` shows of the call.
    pub(super) fn row(&self, id: u64) -> CallRow {
        let branches: Vec<BranchRow> = self
            .branches
            .iter()
            .map(|(k, b)| BranchRow {
                port: b.port.0,
                vci_in: b.vci_in,
                vci_out: b.vci_out,
                connected: b.conn.is_some(),
                parties: self.parties_on(*k).map(|(r, _)| r.value).collect(),
                reserved_cells: self.fwd_cells,
            })
            .collect();
        let b = branches
            .first()
            .map_or((0, None, None), |b| (b.port, Some(b.vci_in), b.vci_out));
        CallRow {
            id,
            called: self.called.clone(),
            qos: self.qos.to_string(),
            a: (self.root.port.0, self.root.vci_in, None),
            b,
            active: self.active,
            reserved_cells: (self.fwd_cells * branches.len() as u64, 0),
            branches,
        }
    }
}

impl Control {
    fn party_reject(&mut self, port: PortId, call: CallId, party: PartyRef, c: Cause) {
        let now = self.now;
        if let Some(l) = self.links.get_mut(&port) {
            let _ = l.saal.add_party_reject(now, call, party, c);
        }
        self.dirty.push(port);
    }

    /// Whether `port`'s call `call` belongs to a multicast: (id, is the root's leg).
    pub(super) fn multicast_of(&self, port: PortId, call: CallId) -> Option<(u64, bool)> {
        let &(id, root) = self.links.get(&port)?.calls.get(&call)?;
        self.multicasts.contains_key(&id).then_some((id, root))
    }

    /// Opens a branch of multicast `id` (or of the one being set up, `id` not yet in
    /// the map) on `port` for a leaf asked for with `params`: admission of the
    /// forward rate, a label, a multipoint SETUP. Err: the cause to refuse with and
    /// why.
    fn open_branch(
        &mut self,
        sw: &Switch,
        id: u64,
        port: PortId,
        params: &CallParams,
        qos: &Qos,
        fwd_cells: u64,
    ) -> Result<Branch, (u8, String)> {
        let called = super::called_text(params);
        let l = self.links.get(&port).ok_or_else(|| {
            let why = format!("no route to {called}: its port runs no signalling");
            (cause::NO_ROUTE, why)
        })?;
        if !l.saal.is_up() {
            let why = format!("the signalling link towards {called} is down");
            return Err((cause::DESTINATION_OUT_OF_ORDER, why));
        }
        if !l.cfg.role.is_natm() {
            let why = "a standard UNI user cannot be a leaf of a multipoint call".into();
            return Err((SERVICE_UNAVAILABLE, why));
        }
        // Admission per branch: the forward rate on this branch's port.
        let line = sw.port_config(port).map_or(0, |c| c.cells_per_sec());
        let free = line.saturating_sub(l.reserved_cells);
        if fwd_cells > free {
            let why = format!("forward {fwd_cells} cells/s needed, {free} free");
            return Err((cause::USER_CELL_RATE, why));
        }
        let vci = self
            .allocate_vci(sw, port, None)
            .ok_or_else(|| (cause::NO_VCI, "no free VCI".to_string()))?;
        let mut setup = params.clone();
        setup.multipoint = true;
        setup.conn_id = Some(ConnectionId::exclusive(0, vci));
        setup.qos = *qos;
        setup.natm.qos = Some(qos.to_string());
        let l = self.links.get_mut(&port).expect("looked up above");
        setup.natm.data_endpoint = Some(l.cfg.data);
        let call = match l.saal.setup(self.now, setup) {
            Ok(c) => c,
            Err(_) => {
                l.vcis.free(vci);
                let why = "the SETUP could not go out (call control refused it)".into();
                return Err((cause::TEMPORARY_FAILURE, why));
            }
        };
        l.calls.insert(call, (id, false));
        l.reserved_cells += fwd_cells;
        self.dirty.push(port);
        Ok(Branch {
            port,
            call,
            vci_in: vci,
            vci_out: None,
            data: None,
            conn: None,
            next_eref: 1,
            waiting: Vec::new(),
            orphan_first: false,
        })
    }

    /// A point-to-multipoint SETUP on port `a`: routed, admitted forward on the
    /// output port, and sent on as the call's first branch.
    pub(super) fn on_multipoint_setup(
        &mut self,
        sw: &mut Switch,
        a: PortId,
        call: CallId,
        params: CallParams,
    ) {
        let Some(b) = self.hop_route(sw, a, &params) else {
            let why = format!("no route to {}", super::called_text(&params));
            return self.refuse(a, call, cause::NO_ROUTE, a, why);
        };
        let Some(role_a) = self.role(a) else { return };
        if !role_a.is_natm() {
            let why = "a standard UNI user cannot be the root of a multipoint call".into();
            return self.refuse(a, call, SERVICE_UNAVAILABLE, a, why);
        }
        let a_data = params.natm.data_endpoint;
        if role_a == PortRole::Host && a_data.is_none() {
            let why = "the SETUP lacks natm's data endpoint".into();
            return self.refuse(a, call, cause::INVALID_IE, a, why);
        }
        let qos = params.offered_qos();
        let cells = sw.port_config(a).map_or(0, |c| c.cells_per_sec());
        let fwd = self.contract(&qos, cells, true);
        let id = self.next_id;
        let first = match self.open_branch(sw, id, b, &params, &qos, fwd.reserved) {
            Ok(br) => br,
            Err((c, why)) => return self.refuse(a, call, c, b, why),
        };
        self.next_id += 1;
        let now = self.now;
        let a_link = self.links.get_mut(&a).expect("the SETUP came in on it");
        a_link.calls.insert(call, (id, true));
        let _ = a_link.saal.proceeding_with(now, call, None);
        self.dirty.push(a);
        let mut parties = BTreeMap::new();
        // Q.2971 §9.1: the SETUP's party is party 0, the root's on the root's leg and
        // the switch's on the branch's.
        parties.insert(
            PartyRef {
                value: 0,
                ours: false,
            },
            Party {
                branch: 0,
                down: Some(BRANCH_FIRST),
                active: false,
            },
        );
        self.multicasts.insert(
            id,
            Multicast {
                root: Leg {
                    port: a,
                    call: Some(call),
                    vci_in: None,
                    vci_out: None,
                    data: a_data,
                },
                branches: BTreeMap::from([(0, first)]),
                next_branch: 1,
                parties,
                fwd,
                fwd_cells: fwd.reserved,
                qos,
                called: from_party(&params.called).map_or_else(String::new, |c| c.to_string()),
                active: false,
                since: now,
            },
        );
    }

    /// An event of call control on a multicast's leg.
    pub(super) fn on_multicast_event(
        &mut self,
        sw: &mut Switch,
        port: PortId,
        id: u64,
        root: bool,
        ev: CallEvent,
    ) {
        match ev {
            CallEvent::Released { call, cause, .. } => {
                if let Some(l) = self.links.get_mut(&port) {
                    l.calls.remove(&call);
                }
                if root {
                    if let Some(m) = self.multicasts.get_mut(&id) {
                        m.root.call = None;
                    }
                    self.end_multicast(sw, id, cause);
                } else if let Some(k) = self
                    .multicasts
                    .get(&id)
                    .and_then(|m| m.branch_of(port, call))
                {
                    self.branch_gone(sw, id, k, cause, false);
                }
            }
            CallEvent::Established { .. } => {
                if let Some(m) = self.multicasts.get_mut(&id) {
                    m.active = true;
                }
            }
            CallEvent::ModifyRequested { call, .. } => {
                // See the module doc: a multicast's rate is not modified.
                let now = self.now;
                if let Some(l) = self.links.get_mut(&port) {
                    let _ = l
                        .saal
                        .modify_reject(now, call, net_cause(SERVICE_UNAVAILABLE));
                }
                self.dirty.push(port);
            }
            CallEvent::PartyAddRequested {
                call,
                party,
                params,
            } if root => self.on_add_party(sw, id, call, party, params),
            CallEvent::PartyDropped {
                party,
                cause,
                by_peer: true,
                ..
            } if root => self.on_root_drop(sw, id, party, cause),
            CallEvent::Connected { call, params } if !root => {
                self.on_branch_connect(sw, id, port, call, params)
            }
            CallEvent::PartyAdded { call, party, .. } if !root => {
                self.on_branch_party(sw, id, port, call, party, None)
            }
            CallEvent::PartyRejected { call, party, cause } if !root => {
                self.on_branch_party(sw, id, port, call, party, Some(cause))
            }
            CallEvent::PartyDropped {
                call,
                party,
                cause,
                by_peer: true,
            } if !root => self.on_branch_party(sw, id, port, call, party, Some(cause)),
            CallEvent::PartyAddRequested { call, party, .. } => {
                // Leaves do not add parties: only the root does (Q.2971 §9).
                self.party_reject(port, call, party, net_cause(SERVICE_UNAVAILABLE));
            }
            _ => {}
        }
    }

    /// The root's ADD PARTY for `party`: ride an existing branch on the leaf's port,
    /// or open a new one.
    fn on_add_party(
        &mut self,
        sw: &mut Switch,
        id: u64,
        root_call: CallId,
        party: PartyRef,
        params: CallParams,
    ) {
        let Some(m) = self.multicasts.get(&id) else {
            return;
        };
        let root_port = m.root.port;
        let Some(port) = self.hop_route(sw, root_port, &params) else {
            let why = format!("no route to {}", super::called_text(&params));
            let c = self.refusal(cause::NO_ROUTE, root_port, why, true);
            return self.party_reject(root_port, root_call, party, c);
        };
        // The oldest branch on the port: connected, or waiting for its CONNECT.
        let existing = m
            .branches
            .iter()
            .find(|(_, b)| b.port == port)
            .map(|(k, b)| (*k, b.conn.is_some()));
        match existing {
            Some((k, true)) => self.forward_party(id, k, party, params),
            Some((k, false)) => {
                let m = self.multicasts.get_mut(&id).expect("looked up above");
                m.parties.insert(
                    party,
                    Party {
                        branch: k,
                        down: None,
                        active: false,
                    },
                );
                if let Some(b) = m.branches.get_mut(&k) {
                    b.waiting.push((party, params));
                }
            }
            None => {
                let (qos, fwd_cells) = (m.qos, m.fwd_cells);
                match self.open_branch(sw, id, port, &params, &qos, fwd_cells) {
                    Err((c, why)) => {
                        let c = self.refusal(c, port, why, true);
                        self.party_reject(root_port, root_call, party, c)
                    }
                    Ok(br) => {
                        let m = self.multicasts.get_mut(&id).expect("looked up above");
                        let k = m.next_branch;
                        m.next_branch += 1;
                        m.branches.insert(k, br);
                        m.parties.insert(
                            party,
                            Party {
                                branch: k,
                                down: Some(BRANCH_FIRST),
                                active: false,
                            },
                        );
                    }
                }
            }
        }
    }

    /// Sends the root's party `party` on as ADD PARTY on connected branch `k`.
    fn forward_party(&mut self, id: u64, k: u64, party: PartyRef, params: CallParams) {
        let Some(m) = self.multicasts.get_mut(&id) else {
            return;
        };
        let (root_port, root_call) = (m.root.port, m.root.call);
        let in_use: Vec<u16> = m
            .parties
            .values()
            .filter(|p| p.branch == k)
            .filter_map(|p| p.down.map(|d| d.value))
            .collect();
        let qos = m.qos;
        let Some(b) = m.branches.get_mut(&k) else {
            return;
        };
        // A fresh reference: the call holds at most MAX_PARTIES + 1 parties, so one
        // is found among the next few.
        let mut eref = b.next_eref;
        while in_use.contains(&eref) {
            eref = if eref >= MAX_EREF { 1 } else { eref + 1 };
        }
        b.next_eref = if eref >= MAX_EREF { 1 } else { eref + 1 };
        let (port, call, vci) = (b.port, b.call, b.vci_in);
        let mut p = params;
        p.multipoint = true;
        p.qos = qos;
        p.natm.qos = Some(qos.to_string());
        p.conn_id = Some(ConnectionId::exclusive(0, vci));
        let now = self.now;
        let sent = match self.links.get_mut(&port) {
            Some(l) => {
                p.natm.data_endpoint = Some(l.cfg.data);
                l.saal.add_party(now, call, eref, &p).is_ok()
            }
            None => false,
        };
        self.dirty.push(port);
        let m = self.multicasts.get_mut(&id).expect("looked up above");
        if sent {
            m.parties.insert(
                party,
                Party {
                    branch: k,
                    down: Some(PartyRef {
                        value: eref,
                        ours: true,
                    }),
                    active: false,
                },
            );
        } else {
            m.parties.remove(&party);
            if let Some(rc) = root_call {
                self.party_reject(root_port, rc, party, net_cause(cause::TEMPORARY_FAILURE));
            }
        }
    }

    /// The root dropped `party` (call control has acknowledged it).
    fn on_root_drop(&mut self, sw: &mut Switch, id: u64, party: PartyRef, c: Cause) {
        let Some(m) = self.multicasts.get_mut(&id) else {
            return;
        };
        let Some(p) = m.parties.remove(&party) else {
            return;
        };
        let k = p.branch;
        let others = m.parties.values().any(|q| q.branch == k);
        let Some(b) = m.branches.get_mut(&k) else {
            return;
        };
        if !others {
            // The branch's last party: the branch goes.
            return self.branch_gone(sw, id, k, c, true);
        }
        match p.down {
            None => b.waiting.retain(|(r, _)| *r != party),
            Some(d) if b.conn.is_none() => {
                // Only the branch's SETUP can be this party; it is dropped once the
                // branch connects and its waiting parties are placed.
                debug_assert_eq!(d, BRANCH_FIRST);
                b.orphan_first = true;
            }
            Some(d) => {
                let (port, call) = (b.port, b.call);
                let now = self.now;
                if let Some(l) = self.links.get_mut(&port) {
                    let _ = l.saal.drop_party(now, call, d, c);
                }
                self.dirty.push(port);
            }
        }
    }

    /// Branch `k` of multicast `id` is connected: the data plane replicates to it,
    /// the root learns (CONNECT for the call's first branch, ADD PARTY ACKNOWLEDGE
    /// otherwise), and the parties waiting for it are sent on.
    fn on_branch_connect(
        &mut self,
        sw: &mut Switch,
        id: u64,
        port: PortId,
        call: CallId,
        params: CallAccept,
    ) {
        let Some(m) = self.multicasts.get(&id) else {
            return;
        };
        let Some(k) = m.branch_of(port, call) else {
            return;
        };
        let host = self.role(port) == Some(PortRole::Host);
        let root_host = self.role(m.root.port) == Some(PortRole::Host);
        let data = params.natm.data_endpoint;
        let Some(out) = params
            .conn_id
            .map(|c| c.vci)
            .filter(|_| !host || data.is_some())
        else {
            return self.branch_gone(sw, id, k, net_cause(cause::INVALID_IE), true);
        };
        let to = VcAddr::new(port, 0, out);
        let (root, fwd) = (m.root, m.fwd);
        let first = m.live_conn(sw);
        // The call's first connected branch: the root's label, the cross-connect, and
        // CONNECT to the root.
        let (conn, root_in) = match first {
            Some(c) => (sw.add_branch(c, to, fwd), None),
            None => {
                let Some(v) = self.allocate_vci(sw, root.port, None) else {
                    return self.end_multicast(sw, id, net_cause(cause::NO_VCI));
                };
                let from = VcAddr::new(root.port, 0, v);
                (sw.connect(CrossConnect::vc(from, to), fwd), Some(v))
            }
        };
        let Ok(conn) = conn else {
            if let (Some(v), Some(l)) = (root_in, self.links.get_mut(&root.port)) {
                l.vcis.free(v);
            }
            return self.branch_gone(sw, id, k, net_cause(cause::TEMPORARY_FAILURE), true);
        };
        let m = self.multicasts.get_mut(&id).expect("looked up above");
        let b = m.branches.get_mut(&k).expect("found above");
        b.vci_out = Some(out);
        b.data = data;
        b.conn = Some(conn);
        let waiting = std::mem::take(&mut b.waiting);
        let orphan = std::mem::take(&mut b.orphan_first);
        if host && data.is_some() {
            self.out.push_back(Output::Dest(to, data));
        }
        let now = self.now;
        let root_call = root.call;
        if let Some(v) = root_in {
            m.root.vci_in = Some(v);
            if root.data.is_some() && root_host {
                let vc = VcAddr::new(root.port, 0, v);
                self.out.push_back(Output::Source(vc, root.data));
            }
            let mut accept = params.clone();
            accept.conn_id = Some(ConnectionId::exclusive(0, v));
            let l = self
                .links
                .get_mut(&root.port)
                .expect("the call came in on it");
            accept.natm.data_endpoint = Some(l.cfg.data);
            let ok = root_call.is_some_and(|rc| l.saal.accept(now, rc, accept).is_ok());
            self.dirty.push(root.port);
            if !ok {
                return self.end_multicast(sw, id, net_cause(cause::TEMPORARY_FAILURE));
            }
        }
        // The party (or parties) this branch's SETUP placed is acknowledged
        // upstream; party 0 was by the CONNECT.
        let m = self.multicasts.get_mut(&id).expect("looked up above");
        let placed: Vec<PartyRef> = m
            .parties
            .iter_mut()
            .filter(|(_, p)| p.branch == k && p.down == Some(BRANCH_FIRST))
            .map(|(r, p)| {
                p.active = true;
                *r
            })
            .collect();
        let ack = CallAccept {
            qos: None,
            natm: natm_proto::wire::q2931::NatmParams {
                data_endpoint: self.links.get(&root.port).map(|l| l.cfg.data),
                ..Default::default()
            },
            conn_id: None,
        };
        for r in placed.into_iter().filter(|r| r.value != 0) {
            if let (Some(rc), Some(l)) = (root_call, self.links.get_mut(&root.port)) {
                let _ = l.saal.add_party_ack(now, rc, r, &ack);
            }
        }
        self.dirty.push(root.port);
        for (r, p) in waiting {
            self.forward_party(id, k, r, p);
        }
        if orphan {
            let now = self.now;
            if let Some(l) = self.links.get_mut(&port) {
                let _ = l.saal.drop_party(now, call, BRANCH_FIRST, net_cause(16));
            }
            self.dirty.push(port);
            let gone = self
                .multicasts
                .get(&id)
                .is_some_and(|m| m.parties_on(k).next().is_none());
            if gone {
                self.branch_gone(sw, id, k, net_cause(16), true);
            }
        }
    }

    /// A party of branch call `call` was added (`cause` None), refused or dropped
    /// downstream: the root's party learns the same.
    fn on_branch_party(
        &mut self,
        sw: &mut Switch,
        id: u64,
        port: PortId,
        call: CallId,
        down: PartyRef,
        c: Option<Cause>,
    ) {
        let Some(m) = self.multicasts.get_mut(&id) else {
            return;
        };
        let Some(k) = m.branch_of(port, call) else {
            return;
        };
        let Some((up, _)) = m.parties_on(k).find(|(_, p)| p.down == Some(down)) else {
            return;
        };
        let (root_port, root_call) = (m.root.port, m.root.call);
        let now = self.now;
        match c {
            None => {
                if let Some(p) = m.parties.get_mut(&up) {
                    p.active = true;
                }
                let ack = CallAccept {
                    qos: None,
                    natm: natm_proto::wire::q2931::NatmParams {
                        data_endpoint: self.links.get(&root_port).map(|l| l.cfg.data),
                        ..Default::default()
                    },
                    conn_id: None,
                };
                if let (Some(rc), Some(l)) = (root_call, self.links.get_mut(&root_port)) {
                    let _ = l.saal.add_party_ack(now, rc, up, &ack);
                }
                self.dirty.push(root_port);
            }
            Some(c) => {
                m.parties.remove(&up);
                let empty = m.parties_on(k).next().is_none();
                if let (Some(rc), Some(l)) = (root_call, self.links.get_mut(&root_port)) {
                    // A party not yet acknowledged is refused instead.
                    let _ = l.saal.drop_party(now, rc, up, c.clone());
                }
                self.dirty.push(root_port);
                if empty {
                    self.branch_gone(sw, id, k, c, true);
                }
            }
        }
    }

    /// Branch `k` of multicast `id` is gone (released downstream, or `release`: to be
    /// released by the switch): its parties are dropped upstream, its data-plane
    /// branch drains and ends, its reservation and labels are returned. The call
    /// ends with its last branch.
    fn branch_gone(&mut self, sw: &mut Switch, id: u64, k: u64, c: Cause, release: bool) {
        let Some(m) = self.multicasts.get_mut(&id) else {
            return;
        };
        let Some(b) = m.branches.remove(&k) else {
            return;
        };
        let fwd_cells = m.fwd_cells;
        let gone: Vec<PartyRef> = m.parties_on(k).map(|(r, _)| r).collect();
        for r in &gone {
            m.parties.remove(r);
        }
        let last = m.branches.is_empty();
        let (root_port, root_call) = (m.root.port, m.root.call);
        self.end_branch(sw, b, c.clone(), release, fwd_cells, true);
        if last {
            return self.end_multicast(sw, id, c);
        }
        let now = self.now;
        if let (Some(rc), Some(l)) = (root_call, self.links.get_mut(&root_port)) {
            for r in gone {
                let _ = l.saal.drop_party(now, rc, r, c.clone());
            }
        }
        self.dirty.push(root_port);
    }

    /// Returns branch `b`'s resources and releases its call (`release`; otherwise it
    /// is already gone), after what is queued towards it drained.
    fn end_branch(
        &mut self,
        sw: &mut Switch,
        b: Branch,
        c: Cause,
        release: bool,
        cells: u64,
        drain: bool,
    ) {
        let now = self.now;
        let within = if drain {
            self.cfg.drain
        } else {
            Duration::ZERO
        };
        if let Some(conn) = b.conn {
            let _ = sw.release(now, conn, within);
        }
        let Some(l) = self.links.get_mut(&b.port) else {
            return;
        };
        l.reserved_cells = l.reserved_cells.saturating_sub(cells);
        l.vcis.free(b.vci_in);
        let call = Some(b.call).filter(|c| release && l.calls.remove(c).is_some());
        if !release {
            l.calls.remove(&b.call);
        }
        let mut outputs = Vec::new();
        if let (Some(v), Some(_), PortRole::Host) = (b.vci_out, b.data, l.cfg.role) {
            outputs.push(Output::Dest(VcAddr::new(b.port, 0, v), None));
        }
        let side = Drain {
            port: b.port,
            call,
            cause: c,
            conns: b
                .conn
                .into_iter()
                .filter(|c| sw.vc_stats(*c).is_some())
                .collect(),
            until: now + within,
            outputs,
        };
        self.drain_side(side);
    }

    /// Ends multicast `id`: every branch released (after draining, unless `drain`
    /// is false: the switch is stopping), the root released (or refused) with `c`.
    pub(super) fn end_multicast(&mut self, sw: &mut Switch, id: u64, c: Cause) {
        self.end_multicast_within(sw, id, c, true);
    }

    pub(super) fn end_multicast_within(&mut self, sw: &mut Switch, id: u64, c: Cause, drain: bool) {
        let Some(m) = self.multicasts.remove(&id) else {
            return;
        };
        for (_, b) in m.branches {
            self.end_branch(sw, b, c.clone(), true, m.fwd_cells, drain);
        }
        let Some(l) = self.links.get_mut(&m.root.port) else {
            return;
        };
        if let Some(v) = m.root.vci_in {
            l.vcis.free(v);
        }
        let call = m.root.call.filter(|c| l.calls.remove(c).is_some());
        let mut outputs = Vec::new();
        if let (Some(v), Some(_), PortRole::Host) = (m.root.vci_in, m.root.data, l.cfg.role) {
            outputs.push(Output::Source(VcAddr::new(m.root.port, 0, v), None));
        }
        self.end_side(Drain {
            port: m.root.port,
            call,
            cause: c,
            conns: Vec::new(),
            until: self.now,
            outputs,
        });
    }
}
