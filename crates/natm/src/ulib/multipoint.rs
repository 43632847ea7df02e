//! Point-to-multipoint VCs: one root sending to many leaves (issue 19).
//!
//! Seed 000 offers multicast VCs for the unreliable and guaranteed services; seed 003
//! (A1) gives applications `add_sink` to add receivers to a connection. A
//! [`Multipoint`] is the root's handle: [`Multipoint::add_sink`] adds a leaf,
//! [`Multipoint::drop_sink`] drops one, [`Multipoint::send`] sends a message to every
//! leaf. Leaves take the call with an ordinary [`Listener`](super::Listener) and
//! receive on an ordinary [`Connection`]. Data goes one way, root to leaves, as on ATM
//! point-to-multipoint VCs; natm connections have a backward direction, which a
//! guaranteed branch reserves at a nominal 64 kbit/s and the leaf does not use.
//!
//! Each leaf is one branch: its own one-way call through sigd (admitted by each
//! branch's sigd on its own link: admission per branch, refusals with the UNI cause)
//! or in direct mode to an IP address, and the root's engine replicates every
//! message onto every branch's data path. The leaves are the parties of a
//! [`PartyTable`] (Q.2971 party states, endpoint references as [`LeafId`]s): adding a
//! leaf is the branch's setup (P1 → P7, or refused → P0), dropping one is its
//! release (P11 → P0), and a branch that sigd releases — the leaf's application
//! closed or died, or its host's sigd did — is a party that left, reported as
//! [`LeafEvent::Left`] with the cause; the other branches are not touched.
//!
//! Only the best-effort and guaranteed services are offered (seed 000 §5: multicast
//! for unreliable and guaranteed service); a reliable multipoint VC would need every
//! leaf's acknowledgements merged at the root, and is refused.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use natm_proto::sig::party::{PartyConfig, PartyEvent, PartyTable};
use natm_proto::time::Instant as ProtoInstant;

use super::{Connection, Error, Host, IntoTarget, Target};
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

/// The root of a point-to-multipoint VC ([`Host::connect_multipoint`]).
pub struct Multipoint {
    host: Host,
    qos: String,
    parties: PartyTable<String>,
    branches: BTreeMap<u16, Connection>,
    epoch: Instant,
    events: Vec<LeafEvent>,
}

impl std::fmt::Debug for Multipoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Multipoint")
            .field("qos", &self.qos)
            .field("leaves", &self.leaves())
            .finish()
    }
}

/// The backward direction of a guaranteed branch: the leaf sends nothing on it.
const BACKWARD: &str = "rx:pcr=64kbps";

/// The branch QoS: the root's QoS, with a nominal backward reservation if guaranteed.
fn branch_qos(qos: &str) -> Result<String, Error> {
    let q: Qos = qos
        .parse()
        .map_err(|e: crate::wire::qos::QosParseError| Error::Qos(e.render(qos)))?;
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
    let spec = qos.trim();
    if t.service != Service::Guaranteed {
        return Ok(spec.to_owned());
    }
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
        })?;
    Ok(one_way)
}

impl Host {
    /// Open a point-to-multipoint VC with `qos` (best-effort or guaranteed, sending
    /// only) to `first_leaf`; add more leaves with [`Multipoint::add_sink`]. Blocks
    /// until the first leaf has accepted, or fails as [`Host::connect`] does (a
    /// guaranteed branch its sigd cannot admit is [`Error::Refused`] with cause 37).
    pub fn connect_multipoint(
        &self,
        first_leaf: impl IntoTarget,
        qos: &str,
    ) -> Result<Multipoint, Error> {
        let qos = branch_qos(qos)?;
        let mut m = Multipoint {
            host: self.clone(),
            qos,
            parties: PartyTable::new(PartyConfig::default()),
            branches: BTreeMap::new(),
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

    /// Add a leaf: set up its branch (admitted on its own by sigd) and, once the
    /// leaf has accepted, send it everything sent from then on. A refusal (cause 37
    /// when the branch lacks bandwidth, 88 without a listener...) leaves the other
    /// leaves as they were.
    pub fn add_sink(&mut self, leaf: impl IntoTarget) -> Result<LeafId, Error> {
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
        let conn = match target {
            Target::Ip(a) => self.host.connect(a, &self.qos),
            Target::Atm(s) => self.host.connect(s.as_str(), &self.qos),
        };
        match conn {
            Ok(c) => {
                self.parties.on_ack(eref).expect("a party just added");
                self.branches.insert(eref, c);
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

    /// Drop a leaf: its branch closes in order (what was sent before reaches it) and
    /// is released; the other leaves go on. Waits up to `timeout` for the close.
    pub fn drop_sink(&mut self, leaf: LeafId, timeout: Duration) -> Result<(), Error> {
        self.parties
            .drop_party(self.now(), leaf.0, 16)
            .map_err(|e| Error::Refused {
                cause: e.cause().raw(),
                detail: e.to_string(),
            })?;
        self.parties.drain_out();
        let c = self.branches.remove(&leaf.0).expect("an active party");
        c.close();
        let flushed = c.flush(timeout);
        drop(c);
        // The branch's release is the DROP PARTY ACKNOWLEDGE.
        self.parties
            .on_drop_ack(leaf.0)
            .expect("a party being dropped");
        self.collect();
        flushed
    }

    /// Send one message to every leaf, blocking while any branch's rate or window
    /// holds it (a guaranteed VC sends at its reserved rate). A branch that fails —
    /// its call was released — is a leaf that left ([`LeafEvent::Left`]): it is
    /// removed and the others still get the message. Returns how many leaves it went
    /// to; [`Error::Closed`] once no leaf is left.
    pub fn send(&mut self, msg: &[u8]) -> Result<usize, Error> {
        let mut gone = Vec::new();
        let mut sent = 0;
        for (&eref, c) in &self.branches {
            if c.released().is_some() {
                gone.push(eref);
                continue;
            }
            match c.send(msg) {
                Ok(()) => sent += 1,
                Err(e @ (Error::MessageTooLarge { .. } | Error::EmptyMessage)) => return Err(e),
                Err(_) => gone.push(eref),
            }
        }
        self.remove(gone);
        if self.branches.is_empty() {
            return Err(Error::Closed);
        }
        Ok(sent)
    }

    /// Look for leaves that left without sending (a sender learns it at its next
    /// [`Multipoint::send`] anyway); returns how many leaves remain.
    pub fn poll(&mut self) -> usize {
        let gone = self
            .branches
            .iter()
            .filter(|(_, c)| c.released().is_some())
            .map(|(&e, _)| e)
            .collect();
        self.remove(gone);
        self.branches.len()
    }

    fn remove(&mut self, gone: Vec<u16>) {
        for eref in gone {
            let c = self.branches.remove(&eref).expect("listed");
            let (cause, detail) = match c.released() {
                Some(r) => (r.cause, r.detail),
                // 41: temporary failure (the data path failed without a release).
                None => (41, "the branch's data path failed".into()),
            };
            self.parties.on_drop(eref, cause).expect("an active party");
            for ev in self.parties.drain_events() {
                if let PartyEvent::Left { eref, cause } = ev {
                    self.events.push(LeafEvent::Left {
                        leaf: LeafId(eref),
                        cause,
                        detail: detail.clone(),
                    });
                }
            }
            c.abort();
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
        std::mem::take(&mut self.events)
    }

    /// The leaves receiving now, with the address each was added by.
    pub fn leaves(&self) -> Vec<(LeafId, String)> {
        self.parties
            .active()
            .map(|(e, a)| (LeafId(e), a.clone()))
            .collect()
    }

    /// The branch QoS each leaf's call was set up with (the root's; if guaranteed, with
    /// `rx:pcr=64kbps`).
    pub fn qos(&self) -> &str {
        &self.qos
    }

    /// One leaf's branch (its counters, its granted QoS).
    pub fn branch(&self, leaf: LeafId) -> Option<&Connection> {
        self.branches.get(&leaf.0)
    }

    /// Close every branch in order and wait up to `timeout` for all of them; the
    /// calls are then released.
    pub fn close(self, timeout: Duration) -> Result<(), Error> {
        let until = Instant::now() + timeout;
        for c in self.branches.values() {
            c.close();
        }
        let mut res = Ok(());
        for c in self.branches.values() {
            let left = until.saturating_duration_since(Instant::now());
            if let Err(e) = c.flush(left) {
                res = Err(e);
            }
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::branch_qos;

    #[test]
    fn branches_are_one_way_and_reliable_is_refused() {
        assert_eq!(
            branch_qos("guaranteed:pcr=4Mbps").unwrap(),
            "guaranteed:pcr=4Mbps,rx:pcr=64kbps"
        );
        assert_eq!(branch_qos("best-effort").unwrap(), "best-effort");
        for bad in ["reliable", "ubr:ec=on", "cbr:pcr=1Mbps,transport=none"] {
            let e = branch_qos(bad).unwrap_err().to_string();
            assert!(e.contains("best-effort or guaranteed"), "{bad}: {e}");
        }
        let e = branch_qos("guaranteed:pcr=4Mbps,rx:pcr=1Mbps").unwrap_err();
        assert!(e.to_string().contains("one-way"), "{e}");
    }
}
