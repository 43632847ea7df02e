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
//! - The SETUP's party and every ADD PARTY from the root are routed as a point-to-
//!   point SETUP is (`routed.rs`): on the DTL they carry, or, at the root's
//!   switch, on a path it computes for the call's forward contract, whose DTL the
//!   party then carries (IE 0xD1, in ADD PARTY too). A hop that cannot open the
//!   party's branch refuses it with a crankback IE naming the blocked link (in
//!   RELEASE, or in ADD PARTY REJECT / DROP PARTY); transits relay it, adding their
//!   own trunk if it failed, and the root's switch routes the party again around
//!   what blocked it, at most `MAX_CRANKBACKS` times, before it refuses the party
//!   upstream (the call, for the SETUP's party). A party already acknowledged is
//!   not routed again.
//! - If the port a party leaves by already has a branch of the call, the party
//!   rides it (Q.2971's branching: the next switch, or the leaf's sigd, places it):
//!   ADD PARTY goes on the branch's call with an endpoint reference of the
//!   switch's, and its answer goes back upstream; an ADD PARTY for a branch still
//!   being set up waits for its CONNECT. Otherwise a new branch is
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
use natm_proto::wire::q2931::{Blocked, Crankback};

use super::routed::{crankable, MAX_CRANKBACKS};
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
    /// The link the branch leaves by, on a DTL: what a failure of its trunk blocks.
    link: Option<Blocked>,
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
    /// The parties this switch routed on a DTL of its own (it is their ingress), not
    /// yet acknowledged: what a crankback routes again.
    routes: BTreeMap<PartyRef, PartyRoute>,
    /// The forward contract, and what each branch reserves on its port.
    fwd: Contract,
    pub(super) fwd_cells: u64,
    qos: Qos,
    pub(super) called: String,
    pub(super) active: bool,
    pub(super) since: Instant,
}

/// How the ingress routed a party: the party as the root asked for it (no DTL), and
/// what crankbacks excluded so far.
#[derive(Debug)]
struct PartyRoute {
    params: CallParams,
    blocked: Vec<Blocked>,
}

/// Where a party goes: a branch the call has on the port already (and whether it is
/// connected), or a new one.
enum Placement {
    Existing(u64, bool),
    New(Branch),
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
            link: None,
        })
    }

    /// Routes a party of multicast `id` (the SETUP's, `id` not yet in the map, or an
    /// ADD PARTY's) that came from `a`: on its DTL, or (this switch its ingress) on a
    /// path this switch computes around `blocked`, whose DTL the party then carries.
    /// It rides the call's branch on the port it leaves by, or a new branch is
    /// opened there; one the ingress cannot open on its own trunk is routed again
    /// around that trunk, and a transit's refusal names the link it blocked
    /// (crankback), as a point-to-point call's are. Ok: the placement, the party as
    /// it goes on, and the hop.
    #[allow(clippy::too_many_arguments)]
    fn route_party(
        &mut self,
        sw: &Switch,
        id: u64,
        a: PortId,
        params: &CallParams,
        blocked: &mut Vec<Blocked>,
        mut last: Option<u8>,
        qos: &Qos,
        fwd_cells: u64,
    ) -> Result<(Placement, CallParams, NextHop), HopRefusal> {
        loop {
            let hop = self.next_hop(sw, a, params, blocked, last)?;
            if hop.b == a {
                let why = format!("no route to {}", super::called_text(params));
                return Err(HopRefusal::new(cause::NO_ROUTE, a, why));
            }
            let mut p = params.clone();
            p.dtl = hop.dtl.clone();
            let existing = self.multicasts.get(&id).and_then(|m| {
                m.branches
                    .iter()
                    .find(|(_, b)| b.port == hop.b)
                    .map(|(k, b)| (*k, b.conn.is_some()))
            });
            if let Some((k, connected)) = existing {
                return Ok((Placement::Existing(k, connected), p, hop));
            }
            let (c, why) = match self.open_branch(sw, id, hop.b, &p, qos, fwd_cells) {
                Ok(mut br) => {
                    br.link = hop.link;
                    return Ok((Placement::New(br), p, hop));
                }
                Err(e) => e,
            };
            let refusal = HopRefusal::new(c, hop.b, why);
            match hop.link {
                Some(link) if hop.originated && blocked.len() < MAX_CRANKBACKS && crankable(c) => {
                    self.crankbacks += 1;
                    blocked.push(link);
                    last = Some(c);
                }
                Some(link) if !hop.originated && crankable(c) => {
                    return Err(refusal.with_crankback(Crankback::new(link, c)));
                }
                _ => return Err(refusal),
            }
        }
    }

    /// The cause a refusal of a party from `a` goes upstream with: counted and
    /// logged, its crankback towards a trunk.
    fn hop_refusal(&mut self, a: PortId, r: HopRefusal) -> Cause {
        let natm = self.role(a).is_some_and(PortRole::is_natm);
        let mut c = self.refusal(r.cause, r.at, r.why, natm);
        if self.role(a) == Some(PortRole::Switch) {
            c.crankback = r.crankback;
        }
        c
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
        let mut blocked = Vec::new();
        let routed = self.route_party(sw, id, a, &params, &mut blocked, None, &qos, fwd.reserved);
        let (first, hop) = match routed {
            Ok((Placement::New(br), _, hop)) => (br, hop),
            Ok((Placement::Existing(..), ..)) => unreachable!("a new call has no branch"),
            Err(r) => return self.refuse_hop(a, call, r),
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
        let party0 = PartyRef {
            value: 0,
            ours: false,
        };
        parties.insert(
            party0,
            Party {
                branch: 0,
                down: Some(BRANCH_FIRST),
                active: false,
            },
        );
        let called = from_party(&params.called).map_or_else(String::new, |c| c.to_string());
        let mut routes = BTreeMap::new();
        if hop.originated {
            routes.insert(party0, PartyRoute { params, blocked });
        }
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
                routes,
                fwd,
                fwd_cells: fwd.reserved,
                qos,
                called,
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
            CallEvent::PartyAddRequested { party, params, .. } if root => {
                self.on_add_party(sw, id, party, params)
            }
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
    /// or open a new one ([`Control::route_party`]).
    fn on_add_party(&mut self, sw: &mut Switch, id: u64, party: PartyRef, params: CallParams) {
        self.place_party(sw, id, party, params, Vec::new(), None);
    }

    /// Routes the root's `party` (around `blocked`, after a refusal with cause
    /// `last` if it is routed again) and places it; refuses it upstream if it
    /// cannot be. Whether it was placed.
    fn place_party(
        &mut self,
        sw: &mut Switch,
        id: u64,
        party: PartyRef,
        params: CallParams,
        mut blocked: Vec<Blocked>,
        last: Option<u8>,
    ) -> bool {
        let Some(m) = self.multicasts.get(&id) else {
            return false;
        };
        let (root_port, root_call, qos, fwd_cells) = (m.root.port, m.root.call, m.qos, m.fwd_cells);
        let routed = self.route_party(
            sw,
            id,
            root_port,
            &params,
            &mut blocked,
            last,
            &qos,
            fwd_cells,
        );
        let (placement, p, hop) = match routed {
            Ok(r) => r,
            Err(r) => {
                let c = self.hop_refusal(root_port, r);
                if let Some(m) = self.multicasts.get_mut(&id) {
                    m.routes.remove(&party);
                }
                match root_call {
                    Some(rc) if party.value != 0 => self.party_reject(root_port, rc, party, c),
                    // The SETUP's party, routed again: the call is refused.
                    _ => self.end_multicast(sw, id, c),
                }
                return false;
            }
        };
        let m = self.multicasts.get_mut(&id).expect("looked up above");
        if hop.originated {
            m.routes.insert(party, PartyRoute { params, blocked });
        }
        match placement {
            Placement::Existing(k, true) => self.forward_party(id, k, party, p),
            Placement::Existing(k, false) => {
                m.parties.insert(
                    party,
                    Party {
                        branch: k,
                        down: None,
                        active: false,
                    },
                );
                if let Some(b) = m.branches.get_mut(&k) {
                    b.waiting.push((party, p));
                }
            }
            Placement::New(br) => {
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
        true
    }

    /// Party `up` of multicast `id`, not yet acknowledged upstream, was refused
    /// downstream with `c` (its branch's trunk `link` on a DTL): if this switch is
    /// its ingress and the refusal names what blocked it (crankback), or the trunk
    /// failed, it is routed again around that, at most [`MAX_CRANKBACKS`] times.
    /// Whether it was (nothing goes upstream then). Otherwise `c` gets the crankback
    /// the trunk's failure makes, for upstream.
    fn crank_back_party(
        &mut self,
        sw: &mut Switch,
        id: u64,
        up: PartyRef,
        port: PortId,
        link: Option<Blocked>,
        c: &mut Cause,
    ) -> bool {
        let value = c.value.raw();
        let link_failed = !self.is_up(port) && matches!(value, 27 | 38 | 41);
        let blocked = match (c.crankback, link_failed, link) {
            (Some(cb), ..) => cb.blocked,
            (None, true, Some(l)) => l,
            _ => return false,
        };
        let Some(m) = self.multicasts.get_mut(&id) else {
            return false;
        };
        let Some(r) = m.routes.remove(&up) else {
            if c.crankback.is_none() {
                c.crankback = Some(Crankback::new(blocked, value));
            }
            return false;
        };
        if r.blocked.len() >= MAX_CRANKBACKS {
            if c.crankback.is_none() {
                c.crankback = Some(Crankback::new(blocked, value));
            }
            return false;
        }
        self.crankbacks += 1;
        m.parties.remove(&up);
        let mut excluded = r.blocked;
        excluded.push(blocked);
        self.place_party(sw, id, up, r.params, excluded, Some(value));
        true
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
        m.routes.remove(&party);
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
        for r in &placed {
            m.routes.remove(r);
        }
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
                m.routes.remove(&up);
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
            Some(mut c) => {
                let active = m.parties.get(&up).is_some_and(|p| p.active);
                let link = m.branches.get(&k).and_then(|b| b.link);
                if !active && self.crank_back_party(sw, id, up, port, link, &mut c) {
                    // Routed again (perhaps on this branch still): the branch goes
                    // only if nothing rides it now.
                    let empty = self.multicasts.get(&id).is_some_and(|m| {
                        m.branches.contains_key(&k) && m.parties_on(k).next().is_none()
                    });
                    if empty {
                        self.branch_gone(sw, id, k, c, true);
                    }
                    return;
                }
                let Some(m) = self.multicasts.get_mut(&id) else {
                    return;
                };
                m.parties.remove(&up);
                m.routes.remove(&up);
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
        let gone: Vec<(PartyRef, bool)> = m.parties_on(k).map(|(r, p)| (r, p.active)).collect();
        for (r, _) in &gone {
            m.parties.remove(r);
        }
        let (port, link) = (b.port, b.link);
        self.end_branch(sw, b, c.clone(), release, fwd_cells, true);
        // Parties refused before they were acknowledged may be routed again around
        // what blocked them (its reservation is back: the branch has ended).
        let mut dropped = Vec::new();
        let mut end_cause = c.clone();
        for (r, active) in gone {
            let mut cr = c.clone();
            if !active && self.crank_back_party(sw, id, r, port, link, &mut cr) {
                continue;
            }
            if let Some(m) = self.multicasts.get_mut(&id) {
                m.routes.remove(&r);
            }
            end_cause = cr.clone();
            dropped.push((r, cr));
        }
        let Some(m) = self.multicasts.get(&id) else {
            return; // ended while a party was routed again
        };
        if m.branches.is_empty() {
            return self.end_multicast(sw, id, end_cause);
        }
        let (root_port, root_call) = (m.root.port, m.root.call);
        let now = self.now;
        if let (Some(rc), Some(l)) = (root_call, self.links.get_mut(&root_port)) {
            for (r, c) in dropped {
                let _ = l.saal.drop_party(now, rc, r, c);
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
