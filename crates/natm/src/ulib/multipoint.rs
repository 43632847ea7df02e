//! Point-to-multipoint VCs: one root sending to many leaves (issue 19).
//!
//! Seed 000 offers multicast VCs for the unreliable and guaranteed services; seed 003
//! (A1) gives applications `add_sink` to add receivers to a connection. A
//! [`Multipoint`] is the root's handle: [`Multipoint::add_sink`] adds a leaf,
//! [`Multipoint::drop_sink`] drops one, [`Multipoint::send`] sends a message to every
//! leaf. Leaves take the call with an ordinary [`Listener`](super::Listener) and
//! receive on an ordinary [`Connection`]. Data goes one way, root to leaves, as on ATM
//! point-to-multipoint VCs.
//!
//! A leaf is reached one of two ways, whichever the network allows:
//! - **Replicated by the network.** Through sigd, the first leaf opens a
//!   point-to-multipoint call (`ConnectMultipoint`: a Q.2971 SETUP with endpoint
//!   reference 0) and each further leaf is a party of it (ADD PARTY); the root sends
//!   every message once, on the call's one VC, and the switches copy it to every
//!   branch, admitted per branch. The VC is one-way (`TransportConfig::one_way`): the
//!   root's close needs no answer, and a leaf added while the root sends joins at the
//!   next whole message.
//! - **A call of its own, replicated by the root's engine.** A leaf the network
//!   cannot put on the call — in direct mode (an IP address), on the root's own host,
//!   through another first hop than the call's, a second leaf on a host the call
//!   already reaches, or any leaf of a call that would be sealed (network replication
//!   has no group key) — gets a call of its own, and
//!   `send` hands the message to that branch too. Each such branch is admitted,
//!   shaped, sealed and counted on its own.
//!
//! The leaves are the parties of a [`PartyTable`] (Q.2971 party states, endpoint
//! references as [`LeafId`]s): adding a leaf is the party's setup (P1 → P7, or
//! refused → P0), dropping one its release (P11 → P0), and a leaf that goes by itself
//! — its application closed or died, its host's sigd did, the network released its
//! branch — is a party that left, reported as [`LeafEvent::Left`] with the cause; the
//! other leaves are not touched.
//!
//! Only the best-effort and guaranteed services are offered (seed 000 §5: multicast
//! for unreliable and guaranteed service); a reliable multipoint VC would need every
//! leaf's acknowledgements merged at the root, and is refused.

use crate::ulib::Wait;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use natm_proto::sig::party::{PartyConfig, PartyEvent, PartyTable};
use natm_proto::time::Instant as ProtoInstant;

use super::sigd::{PartyNote, Session};
use super::{Connection, Error, Host, IntoQos, IntoTarget, Target};
use crate::wire::qos::{Qos, Service};

/// A leaf of a [`Multipoint`]: its endpoint reference (0 for the first leaf).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeafId(pub u16);

impl std::fmt::Display for LeafId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "leaf {}", self.0)
    }
}

/// What happened to a leaf, as [`Multipoint::events`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeafEvent {
    /// The leaf was added and receives from now on.
    Added(LeafId),
    /// The leaf left by itself: its application closed or died, or its host's sigd
    /// did, or the network released its branch.
    Left {
        /// The leaf.
        leaf: LeafId,
        /// UNI cause value.
        cause: u8,
        /// What sigd said, or what failed.
        detail: String,
    },
    /// [`Multipoint::drop_sink`] finished dropping the leaf.
    Dropped(LeafId),
}

/// How one leaf is reached.
#[derive(Debug)]
enum Reach {
    /// A party of the network's point-to-multipoint call, by sigd's endpoint
    /// reference.
    Network(u16),
    /// A call of its own, replicated by this engine.
    Own(Box<Connection>),
}

/// The point-to-multipoint call the network replicates: its one VC.
struct NetCall {
    conn: Connection,
    session: Arc<Session>,
    call: u64,
}

/// The root of a point-to-multipoint VC ([`Host::connect_multipoint`]).
pub struct Multipoint {
    host: Host,
    /// The root's QoS: the network call's.
    qos: Qos,
    /// A leaf's own call's QoS (`branch_qos`).
    branch_qos: Qos,
    net: Option<NetCall>,
    parties: PartyTable<String>,
    leaves: BTreeMap<u16, Reach>,
    epoch: Instant,
    events: Vec<LeafEvent>,
}

impl std::fmt::Debug for Multipoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Multipoint")
            .field("qos", &self.qos)
            .field("leaves", &self.leaves())
            .field("network_call", &self.net.as_ref().map(|n| n.call))
            .finish()
    }
}

/// The backward direction of a guaranteed branch: the leaf sends nothing on it.
const BACKWARD: &str = "rx:pcr=64kbps";

/// The branch QoS: the root's QoS, with a nominal backward reservation if guaranteed.
fn branch_qos(q: &Qos) -> Result<Qos, Error> {
    if q.is_bare() {
        return Err(Error::Qos(
            "a point-to-multipoint VC carries natm's best-effort or guaranteed service; \
             transport=none is not offered"
                .into(),
        ));
    }
    let t = q.resolved_transport(false);
    if t.service == Service::Reliable || t.error_control {
        return Err(Error::Qos(
            "a point-to-multipoint VC is best-effort or guaranteed: reliable service \
             (error control) would need every leaf's acknowledgements; use \
             guaranteed:pcr=… or best-effort"
                .into(),
        ));
    }
    if t.service != Service::Guaranteed {
        return Ok(*q);
    }
    // The canonical text names the receive direction only where it differs.
    let spec = q.to_string();
    // natm connections carry data both ways; a guaranteed branch's backward direction
    // (which the leaf never uses) is reserved at a nominal rate, not the forward one.
    let one_way = if spec.contains(':') {
        format!("{spec},{BACKWARD}")
    } else {
        format!("{spec}:{BACKWARD}")
    };
    // The root's QoS must not already name its receive direction.
    one_way
        .parse::<Qos>()
        .map_err(|e: crate::wire::qos::QosParseError| {
            Error::Qos(format!(
                "a point-to-multipoint VC is one-way ({BACKWARD} is implied): {}",
                e.render(&one_way)
            ))
        })
}

impl Host {
    /// Open a point-to-multipoint VC with `qos` (best-effort or guaranteed, sending
    /// only) to `first_leaf`; add more leaves with [`Multipoint::add_sink`]. Blocks
    /// until the first leaf has accepted, or fails as [`Host::connect`] does (a
    /// guaranteed branch that cannot be admitted is [`Error::Refused`] with cause 37).
    /// Through sigd the network replicates the VC where it can (module doc).
    pub fn connect_multipoint(
        &self,
        first_leaf: impl IntoTarget,
        qos: impl IntoQos,
    ) -> Result<Multipoint, Error> {
        let qos = qos.into_qos()?;
        let branch_qos = branch_qos(&qos)?;
        let mut m = Multipoint {
            host: self.clone(),
            qos,
            branch_qos,
            net: None,
            parties: PartyTable::new(PartyConfig::default()),
            leaves: BTreeMap::new(),
            epoch: Instant::now(),
            events: Vec::new(),
        };
        m.add_sink(first_leaf)?;
        Ok(m)
    }
}

impl Multipoint {
    fn now(&self) -> ProtoInstant {
        ProtoInstant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Add a leaf and, once it has accepted, send it everything sent from then on. A
    /// refusal (cause 37 when its branch lacks bandwidth, 88 without a listener...)
    /// leaves the other leaves as they were.
    pub fn add_sink(&mut self, leaf: impl IntoTarget) -> Result<LeafId, Error> {
        self.poll();
        let target = leaf.into_target();
        let name = match &target {
            Target::Ip(a) => a.to_string(),
            Target::Atm(s) => s.clone(),
        };
        let eref = self
            .parties
            .add(self.now(), name)
            .map_err(|e| Error::Refused {
                cause: e.cause().raw(),
                detail: e.to_string(),
            })?;
        match self.reach(target) {
            Ok(r) => {
                self.parties.on_ack(eref).expect("a party just added");
                self.leaves.insert(eref, r);
                self.collect();
                Ok(LeafId(eref))
            }
            Err(e) => {
                let cause = match &e {
                    Error::Refused { cause, .. } => *cause,
                    // 27: destination out of order (no answer, no sigd).
                    _ => 27,
                };
                self.parties
                    .on_reject(eref, cause)
                    .expect("a party just added");
                // A refused leaf is the caller's error, not an event.
                self.parties.drain_events();
                Err(e)
            }
        }
    }

    /// Reach a new leaf: as a party of the network's call where the network can
    /// replicate to it, else with a call of its own.
    fn reach(&mut self, target: Target) -> Result<Reach, Error> {
        /// 63, service or option not available: sigd's answer when the network
        /// cannot replicate the call to this leaf.
        const NOT_REPLICATED: u8 = 63;
        if let Target::Atm(addr) = &target {
            super::check_called_sap(addr)?;
            match &self.net {
                // sigd refuses with 63 what it cannot send on the call; the leaf's
                // host does too when the call already reaches an application there
                // (ADD PARTY REJECT): either way the leaf gets a call of its own.
                Some(net) => match net
                    .session
                    .add_party(net.call, addr)
                    .and_then(|party| self.await_party(party))
                {
                    Ok(r) => return Ok(r),
                    Err(Error::Refused {
                        cause: NOT_REPLICATED,
                        ..
                    }) => {}
                    Err(e) => return Err(e),
                },
                None if self.host.sigd.is_some() => {
                    match self.host.connect_multipoint_signalled(addr, self.qos) {
                        Ok((conn, call)) => {
                            let (session, _) = conn.sig_call().ok_or(Error::SigdGone)?;
                            self.net = Some(NetCall {
                                conn,
                                session,
                                call,
                            });
                            // Q.2971 §9.1: the SETUP's party is 0.
                            return Ok(Reach::Network(0));
                        }
                        Err(Error::Refused {
                            cause: NOT_REPLICATED,
                            ..
                        }) => {}
                        Err(e) => return Err(e),
                    }
                }
                None => {}
            }
        }
        let conn = match target {
            Target::Ip(a) => self.host.connect(a, self.branch_qos),
            Target::Atm(s) => self.host.connect(s.as_str(), self.branch_qos),
        }?;
        Ok(Reach::Own(Box::new(conn)))
    }

    /// Wait for the network's answer to an ADD PARTY (bounded by the host's connect
    /// timeout; without one the party is dropped, cause 102).
    fn await_party(&mut self, party: u16) -> Result<Reach, Error> {
        let net = self.net.as_ref().expect("a party of the network's call");
        match net
            .session
            .party_note(net.call, party, self.host.cfg.connect_timeout)
        {
            Ok(PartyNote::Added(_)) => Ok(Reach::Network(party)),
            Ok(PartyNote::Rejected(_, cause, detail))
            | Ok(PartyNote::Dropped { cause, detail, .. }) => Err(Error::Refused { cause, detail }),
            Err(e) => {
                // 102: recovery on timer expiry.
                let _ = net.session.drop_party(net.call, party, 102);
                Err(e)
            }
        }
    }

    /// The leaves on the network's call.
    fn network_leaves(&self) -> impl Iterator<Item = (u16, u16)> + '_ {
        self.leaves.iter().filter_map(|(&e, r)| match r {
            Reach::Network(p) => Some((e, *p)),
            Reach::Own(_) => None,
        })
    }

    /// Drop a leaf: what was sent before reaches it, then its branch is released;
    /// the other leaves go on. Waits up to `timeout` for the drop.
    pub fn drop_sink(&mut self, leaf: LeafId, timeout: Duration) -> Result<(), Error> {
        self.poll();
        self.parties
            .drop_party(self.now(), leaf.0, 16)
            .map_err(|e| Error::Refused {
                cause: e.cause().raw(),
                detail: e.to_string(),
            })?;
        self.parties.drain_out();
        let until = Instant::now() + timeout;
        let done = match self.leaves.remove(&leaf.0).expect("an active party") {
            Reach::Own(c) => {
                c.close();
                c.flush(timeout)
            }
            Reach::Network(party) => self.drop_network_leaf(party, until),
        };
        // The branch's release is the DROP PARTY ACKNOWLEDGE.
        self.parties
            .on_drop_ack(leaf.0)
            .expect("a party being dropped");
        self.collect();
        done
    }

    /// Drop `party` of the network's call: the VC's queue drains first (the switch
    /// drains the branch before releasing it). The call's last party closes the call.
    fn drop_network_leaf(&mut self, party: u16, until: Instant) -> Result<(), Error> {
        let left = |u: Instant| u.saturating_duration_since(Instant::now());
        if self.network_leaves().next().is_none() {
            let net = self.net.take().expect("a network leaf");
            net.conn.close();
            return net.conn.flush(left(until));
        }
        let net = self.net.as_ref().expect("a network leaf");
        net.conn.flush(left(until))?;
        net.session.drop_party(net.call, party, 16)?;
        match net.session.party_note(net.call, party, left(until))? {
            PartyNote::Dropped { .. } => Ok(()),
            other => Err(Error::Refused {
                cause: 111,
                detail: format!("sigd answered DROP PARTY with {other:?}"),
            }),
        }
    }

    /// Send one message to every leaf, blocking while the VC's rate holds it (a
    /// guaranteed VC sends at its reserved rate; a leaf on its own call adds its
    /// branch's send). A leaf that left is removed ([`LeafEvent::Left`]) and the
    /// others still get the message. Returns how many leaves it went to;
    /// [`Error::Closed`] once no leaf is left.
    pub fn send(&mut self, msg: &[u8]) -> Result<usize, Error> {
        // Leaves gone since the last call are removed first; a branch that fails now
        // is a leaf that left too.
        self.poll();
        let mut sent = 0;
        let mut net_failed = false;
        if let Some(net) = &self.net {
            match net.conn.send(msg, Wait::Block) {
                Ok(()) => sent += self.network_leaves().count(),
                Err(e @ (Error::MessageTooLarge { .. } | Error::EmptyMessage)) => return Err(e),
                Err(_) => net_failed = true,
            }
        }
        let mut gone = Vec::new();
        for (&eref, r) in &self.leaves {
            let Reach::Own(c) = r else { continue };
            match c.send(msg, Wait::Block) {
                Ok(()) => sent += 1,
                Err(e @ (Error::MessageTooLarge { .. } | Error::EmptyMessage)) => return Err(e),
                Err(_) => gone.push(eref),
            }
        }
        if net_failed {
            self.network_call_gone();
        }
        self.remove_own(gone);
        if self.leaves.is_empty() {
            return Err(Error::Closed);
        }
        Ok(sent)
    }

    /// Look for leaves that left without sending (a sender learns it at its next
    /// [`Multipoint::send`] anyway); returns how many leaves remain.
    pub fn poll(&mut self) -> usize {
        self.poll_network();
        if self
            .net
            .as_ref()
            .is_some_and(|n| n.conn.released().is_some())
        {
            self.network_call_gone();
        }
        let gone = self
            .leaves
            .iter()
            .filter(|(_, r)| matches!(r, Reach::Own(c) if c.released().is_some()))
            .map(|(&e, _)| e)
            .collect();
        self.remove_own(gone);
        self.leaves.len()
    }

    /// What sigd said of the network's parties: leaves that left by themselves.
    fn poll_network(&mut self) {
        let Some(net) = &self.net else { return };
        for note in net.session.party_notes(net.call) {
            if let PartyNote::Dropped {
                party,
                cause,
                detail,
                ..
            } = note
            {
                let leaf = self
                    .network_leaves()
                    .find(|&(_, p)| p == party)
                    .map(|(e, _)| e);
                if let Some(eref) = leaf {
                    self.leaves.remove(&eref);
                    self.left(eref, cause, detail);
                }
            }
        }
    }

    /// The network's call is gone (released: its last leaf left, or the network
    /// failed): every leaf it carried left.
    fn network_call_gone(&mut self) {
        let Some(net) = self.net.take() else { return };
        let (cause, detail) = match net.conn.released() {
            Some(r) => (r.cause, r.detail),
            // 41: temporary failure (the data path failed without a release).
            None => (41, "the network call's data path failed".into()),
        };
        let gone: Vec<u16> = self.network_leaves().map(|(e, _)| e).collect();
        for eref in gone {
            self.leaves.remove(&eref);
            self.left(eref, cause, detail.clone());
        }
        net.conn.abort();
    }

    fn remove_own(&mut self, gone: Vec<u16>) {
        for eref in gone {
            let Some(Reach::Own(c)) = self.leaves.remove(&eref) else {
                continue;
            };
            let (cause, detail) = match c.released() {
                Some(r) => (r.cause, r.detail),
                // 41: temporary failure (the data path failed without a release).
                None => (41, "the branch's data path failed".into()),
            };
            self.left(eref, cause, detail);
            c.abort();
        }
    }

    /// Leaf `eref` left by itself.
    fn left(&mut self, eref: u16, cause: u8, detail: String) {
        if self.parties.on_drop(eref, cause).is_err() {
            return;
        }
        for ev in self.parties.drain_events() {
            if let PartyEvent::Left { eref, cause } = ev {
                self.events.push(LeafEvent::Left {
                    leaf: LeafId(eref),
                    cause,
                    detail: detail.clone(),
                });
            }
        }
    }

    fn collect(&mut self) {
        for ev in self.parties.drain_events() {
            match ev {
                PartyEvent::Added(e) => self.events.push(LeafEvent::Added(LeafId(e))),
                PartyEvent::Dropped(e) => self.events.push(LeafEvent::Dropped(LeafId(e))),
                PartyEvent::Left { eref, cause } => self.events.push(LeafEvent::Left {
                    leaf: LeafId(eref),
                    cause,
                    detail: String::new(),
                }),
                PartyEvent::Refused { .. } => {}
            }
        }
    }

    /// What happened to leaves since the last call, oldest first.
    pub fn events(&mut self) -> Vec<LeafEvent> {
        self.poll();
        std::mem::take(&mut self.events)
    }

    /// The leaves receiving now, with the address each was added by.
    pub fn leaves(&self) -> Vec<(LeafId, String)> {
        self.parties
            .active()
            .map(|(e, a)| (LeafId(e), a.clone()))
            .collect()
    }

    /// Whether the network replicates the VC to `leaf` (a party of the root's one
    /// point-to-multipoint call), rather than the root's engine on a call of the
    /// leaf's own; `None` for a leaf not receiving.
    pub fn replicated_by_network(&self, leaf: LeafId) -> Option<bool> {
        self.leaves
            .get(&leaf.0)
            .map(|r| matches!(r, Reach::Network(_)))
    }

    /// The QoS the root asked for: the network call's.
    pub fn qos(&self) -> &Qos {
        &self.qos
    }

    /// The QoS of a leaf's call of its own (the root's; if guaranteed, with
    /// `rx:pcr=64kbps`).
    pub fn branch_qos(&self) -> &Qos {
        &self.branch_qos
    }

    /// The connection that carries `leaf`'s data: the network call's one VC (shared
    /// by every leaf the network replicates to), or the leaf's own call.
    pub fn branch(&self, leaf: LeafId) -> Option<&Connection> {
        match self.leaves.get(&leaf.0)? {
            Reach::Own(c) => Some(&**c),
            Reach::Network(_) => self.net.as_ref().map(|n| &n.conn),
        }
    }

    /// Close every branch in order and wait up to `timeout` for all of them to
    /// finish and their calls to be released ([`Connection::linger`]): a process
    /// may exit right after, and its leaves still read everything sent.
    pub fn close(self, timeout: Duration) -> Result<(), Error> {
        let until = Instant::now() + timeout;
        let conns: Vec<Connection> = self
            .net
            .map(|n| n.conn)
            .into_iter()
            .chain(self.leaves.into_values().filter_map(|r| match r {
                Reach::Own(c) => Some(*c),
                Reach::Network(_) => None,
            }))
            .collect();
        for c in &conns {
            c.close();
        }
        let mut res = Ok(());
        for c in conns {
            let left = until.saturating_duration_since(Instant::now());
            if let Err(e) = c.flush(left) {
                res = Err(e);
            }
            let left = until.saturating_duration_since(Instant::now());
            if !c.linger(left) && res.is_ok() {
                res = Err(Error::TimedOut);
            }
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::{branch_qos, Qos};

    fn branch(text: &str) -> Result<Qos, crate::ulib::Error> {
        branch_qos(&text.parse().unwrap())
    }

    #[test]
    fn branches_are_one_way_and_reliable_is_refused() {
        let q = branch("guaranteed:pcr=4Mbps").unwrap();
        assert_eq!(q, "guaranteed:pcr=4Mbps,rx:pcr=64kbps".parse().unwrap());
        assert_eq!(q.tx().pcr.and_then(|r| r.bits_per_sec()), Some(4_000_000));
        assert_eq!(q.rx().pcr.and_then(|r| r.bits_per_sec()), Some(64_000));
        let be: Qos = "best-effort".parse().unwrap();
        assert_eq!(branch("best-effort").unwrap(), be);
        for bad in ["reliable", "ubr:ec=on", "cbr:pcr=1Mbps,transport=none"] {
            let e = branch(bad).unwrap_err().to_string();
            assert!(e.contains("best-effort or guaranteed"), "{bad}: {e}");
        }
        let e = branch("guaranteed:pcr=4Mbps,rx:pcr=1Mbps").unwrap_err();
        assert!(e.to_string().contains("one-way"), "{e}");
    }
}
