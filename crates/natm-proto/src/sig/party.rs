//! The root's side of a point-to-multipoint call: its parties (leaves), each named by
//! an endpoint reference, and their states (Q.2971 / UNI 3.1 §9, the party states of
//! [`EndpointState`]). Sans-IO: the caller hands in time and the peer's answers, and
//! takes back what to send ([`PartyOut`]) and what happened ([`PartyEvent`]).
//!
//! Seed 003 (A1) gives applications `add_sink` to add receivers to a connection; seed
//! 000 offers multicast VCs for the unreliable and guaranteed services. This table is
//! the bookkeeping behind `ulib::Multipoint`: one party per leaf, the first one (the
//! leaf of the SETUP) with endpoint reference 0 (Q.2971 §8.1.1).
//!
//! States used (the root never receives ADD PARTY, so P6 and P12 do not occur here):
//! - P0 null: not in the table.
//! - P1 add party initiated: ADD PARTY (or the SETUP) sent, T399 running.
//! - P7 active: ADD PARTY ACKNOWLEDGE (or CONNECT) received.
//! - P11 drop party initiated: DROP PARTY sent, T398 running.
//!
//! Timers (UNI 3.1 Table 5-8 / Q.2971 Table 10): T399 14 s from ADD PARTY to its
//! answer; expiry clears the party (cause 102, recovery on timer expiry) and sends
//! DROP PARTY. T398 4 s from DROP PARTY to DROP PARTY ACKNOWLEDGE; expiry clears the
//! party. Both are [`PartyConfig`] fields.
//!
//! Memory is bounded: at most [`PartyConfig::max_parties`] parties (Q.2971 allows
//! 32,768) and [`PartyConfig::max_pending`] in P1 at once; more is refused with cause
//! 92 (too many pending add party requests). Answers naming an endpoint reference the
//! table does not hold are refused with cause 89 and change nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use thiserror::Error;

use crate::time::Instant;
use crate::wire::q2931::{CauseValue, EndpointRef, EndpointState};

/// Limits and timers of a party table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartyConfig {
    /// T399: ADD PARTY to its acknowledgement or rejection.
    pub t399: Duration,
    /// T398: DROP PARTY to its acknowledgement.
    pub t398: Duration,
    /// Parties held at once (any state).
    pub max_parties: usize,
    /// Parties in P1 (add party initiated) at once.
    pub max_pending: usize,
}

impl Default for PartyConfig {
    fn default() -> Self {
        PartyConfig {
            t399: Duration::from_secs(14),
            t398: Duration::from_secs(4),
            max_parties: 256,
            max_pending: 32,
        }
    }
}

/// Why the table refused a request or an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PartyError {
    /// The endpoint reference names no party of this call (cause 89).
    #[error("endpoint reference {0} names no party of this call")]
    Unknown(u16),
    /// The answer does not fit the party's state (cause 101, message not compatible
    /// with the party state).
    #[error("{what} does not fit party {eref} in state {state:?}")]
    WrongState {
        /// The party.
        eref: u16,
        /// Its state.
        state: EndpointState,
        /// The message or request.
        what: &'static str,
    },
    /// Too many parties (cause 92).
    #[error("this call already has {0} parties (or add-party requests pending), its limit")]
    Full(usize),
}

impl PartyError {
    /// The UNI cause a peer or application is told.
    pub fn cause(&self) -> CauseValue {
        match self {
            PartyError::Unknown(_) => CauseValue::InvalidEndpointRef,
            PartyError::WrongState { .. } => CauseValue::MessageIncompatibleWithState,
            PartyError::Full(_) => CauseValue::TooManyAddParty,
        }
    }
}

/// What the table asks its owner to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartyOut {
    /// DROP PARTY for `eref` with `cause`.
    DropParty {
        /// The party.
        eref: EndpointRef,
        /// The cause to carry.
        cause: u8,
    },
}

/// What happened to a party.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartyEvent {
    /// The party was added (ADD PARTY ACKNOWLEDGE or CONNECT): it now receives.
    Added(u16),
    /// The party was refused (ADD PARTY REJECT, or T399 ran out: cause 102).
    Refused {
        /// The party.
        eref: u16,
        /// The UNI cause.
        cause: u8,
    },
    /// The party left by itself (DROP PARTY from the network or the leaf).
    Left {
        /// The party.
        eref: u16,
        /// The UNI cause.
        cause: u8,
    },
    /// A drop the root asked for is complete (DROP PARTY ACKNOWLEDGE or T398).
    Dropped(u16),
}

#[derive(Debug, Clone)]
struct Party<A> {
    state: EndpointState,
    addr: A,
    deadline: Option<Instant>,
}

/// The parties of one point-to-multipoint call, as its root sees them. `A` is what
/// the owner keeps per party (e.g. its address).
#[derive(Debug, Clone)]
pub struct PartyTable<A> {
    cfg: PartyConfig,
    parties: BTreeMap<u16, Party<A>>,
    next: u16,
    out: Vec<PartyOut>,
    events: Vec<PartyEvent>,
}

impl<A: Clone> PartyTable<A> {
    /// An empty table.
    pub fn new(cfg: PartyConfig) -> Self {
        PartyTable {
            cfg,
            parties: BTreeMap::new(),
            next: 0,
            out: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Start adding the party at `addr` (SETUP for the first, ADD PARTY for the
    /// others): it enters P1 and T399 starts. Returns its endpoint reference, the
    /// lowest value not in use after the last one handed out (0 for the first party).
    pub fn add(&mut self, now: Instant, addr: A) -> Result<u16, PartyError> {
        if self.parties.len() >= self.cfg.max_parties || self.pending() >= self.cfg.max_pending {
            return Err(PartyError::Full(self.parties.len()));
        }
        let mut v = self.next;
        while self.parties.contains_key(&v) {
            v = (v + 1) & EndpointRef::MAX;
        }
        self.next = (v + 1) & EndpointRef::MAX;
        self.parties.insert(
            v,
            Party {
                state: EndpointState::ADD_PARTY_INITIATED,
                addr,
                deadline: Some(now + self.cfg.t399),
            },
        );
        Ok(v)
    }

    /// ADD PARTY ACKNOWLEDGE (or CONNECT for party 0): P1 → P7.
    pub fn on_ack(&mut self, eref: u16) -> Result<(), PartyError> {
        let p = self.in_state(eref, EndpointState::ADD_PARTY_INITIATED, "ADD PARTY ACK")?;
        p.state = EndpointState::ACTIVE;
        p.deadline = None;
        self.events.push(PartyEvent::Added(eref));
        Ok(())
    }

    /// ADD PARTY REJECT (or RELEASE COMPLETE for party 0): P1 → P0.
    pub fn on_reject(&mut self, eref: u16, cause: u8) -> Result<(), PartyError> {
        self.in_state(eref, EndpointState::ADD_PARTY_INITIATED, "ADD PARTY REJECT")?;
        self.parties.remove(&eref);
        self.events.push(PartyEvent::Refused { eref, cause });
        Ok(())
    }

    /// The root drops a party: DROP PARTY goes out, P1/P7 → P11, T398 starts.
    pub fn drop_party(&mut self, now: Instant, eref: u16, cause: u8) -> Result<(), PartyError> {
        let t398 = self.cfg.t398;
        let p = self
            .parties
            .get_mut(&eref)
            .ok_or(PartyError::Unknown(eref))?;
        if p.state == EndpointState::DROP_PARTY_INITIATED {
            return Err(PartyError::WrongState {
                eref,
                state: p.state,
                what: "drop",
            });
        }
        p.state = EndpointState::DROP_PARTY_INITIATED;
        p.deadline = Some(now + t398);
        self.out.push(PartyOut::DropParty {
            eref: EndpointRef {
                flag: false,
                value: eref,
            },
            cause,
        });
        Ok(())
    }

    /// DROP PARTY ACKNOWLEDGE: P11 → P0.
    pub fn on_drop_ack(&mut self, eref: u16) -> Result<(), PartyError> {
        self.in_state(eref, EndpointState::DROP_PARTY_INITIATED, "DROP PARTY ACK")?;
        self.parties.remove(&eref);
        self.events.push(PartyEvent::Dropped(eref));
        Ok(())
    }

    /// DROP PARTY from the network or the leaf (the leaf closed, its host or sigd
    /// died): any state → P0. In P11 both sides dropped at once: the drop is complete.
    pub fn on_drop(&mut self, eref: u16, cause: u8) -> Result<(), PartyError> {
        let p = self
            .parties
            .remove(&eref)
            .ok_or(PartyError::Unknown(eref))?;
        self.events
            .push(if p.state == EndpointState::DROP_PARTY_INITIATED {
                PartyEvent::Dropped(eref)
            } else {
                PartyEvent::Left { eref, cause }
            });
        Ok(())
    }

    /// Run the timers due at `now`.
    pub fn poll_timeout(&mut self, now: Instant) {
        let due: Vec<u16> = self
            .parties
            .iter()
            .filter(|(_, p)| p.deadline.is_some_and(|d| d <= now))
            .map(|(&e, _)| e)
            .collect();
        for eref in due {
            let p = self.parties.remove(&eref).expect("listed");
            if p.state == EndpointState::ADD_PARTY_INITIATED {
                // Q.2971 §9.1.3: T399 expiry clears the party and tells the network.
                let cause = CauseValue::RecoveryOnTimerExpiry.raw();
                self.out.push(PartyOut::DropParty {
                    eref: EndpointRef {
                        flag: false,
                        value: eref,
                    },
                    cause,
                });
                self.events.push(PartyEvent::Refused { eref, cause });
            } else {
                self.events.push(PartyEvent::Dropped(eref));
            }
        }
    }

    /// The earliest running timer.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.parties.values().filter_map(|p| p.deadline).min()
    }

    /// Messages to send, oldest first.
    pub fn drain_out(&mut self) -> Vec<PartyOut> {
        std::mem::take(&mut self.out)
    }

    /// Events, oldest first.
    pub fn drain_events(&mut self) -> Vec<PartyEvent> {
        std::mem::take(&mut self.events)
    }

    /// A party's state (P0 null if it is not held).
    pub fn state(&self, eref: u16) -> EndpointState {
        self.parties
            .get(&eref)
            .map_or(EndpointState::NULL, |p| p.state)
    }

    /// What the owner keeps for a party.
    pub fn addr(&self, eref: u16) -> Option<&A> {
        self.parties.get(&eref).map(|p| &p.addr)
    }

    /// The active parties (P7), by endpoint reference.
    pub fn active(&self) -> impl Iterator<Item = (u16, &A)> {
        self.parties
            .iter()
            .filter(|(_, p)| p.state == EndpointState::ACTIVE)
            .map(|(&e, p)| (e, &p.addr))
    }

    /// Parties held in any state.
    pub fn len(&self) -> usize {
        self.parties.len()
    }

    /// No party is held: the call has no leaf left and is to be released
    /// (Q.2971 §9.1.4: dropping the last party clears the call).
    pub fn is_empty(&self) -> bool {
        self.parties.is_empty()
    }

    fn pending(&self) -> usize {
        self.parties
            .values()
            .filter(|p| p.state == EndpointState::ADD_PARTY_INITIATED)
            .count()
    }

    fn in_state(
        &mut self,
        eref: u16,
        want: EndpointState,
        what: &'static str,
    ) -> Result<&mut Party<A>, PartyError> {
        let p = self
            .parties
            .get_mut(&eref)
            .ok_or(PartyError::Unknown(eref))?;
        if p.state != want {
            return Err(PartyError::WrongState {
                eref,
                state: p.state,
                what,
            });
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn first_party_is_zero_and_each_add_gets_a_fresh_reference() {
        let mut t = PartyTable::new(PartyConfig::default());
        assert_eq!(t.add(at(0), "a").unwrap(), 0);
        assert_eq!(t.add(at(0), "b").unwrap(), 1);
        t.on_ack(0).unwrap();
        t.on_ack(1).unwrap();
        assert_eq!(t.state(0), EndpointState::ACTIVE);
        assert_eq!(
            t.drain_events(),
            vec![PartyEvent::Added(0), PartyEvent::Added(1)]
        );
        // A left party's reference is not reused at once.
        t.on_drop(0, 31).unwrap();
        assert_eq!(t.add(at(1), "c").unwrap(), 2);
        assert_eq!(t.active().map(|(e, _)| e).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn a_rejected_party_leaves_the_others_alone() {
        let mut t = PartyTable::new(PartyConfig::default());
        for a in ["a", "b", "c"] {
            t.add(at(0), a).unwrap();
        }
        t.on_ack(0).unwrap();
        t.on_ack(2).unwrap();
        t.on_reject(1, 37).unwrap();
        assert_eq!(t.state(1), EndpointState::NULL);
        assert_eq!(t.active().count(), 2);
        assert!(t
            .drain_events()
            .contains(&PartyEvent::Refused { eref: 1, cause: 37 }));
        // A second answer for the gone party changes nothing.
        assert_eq!(t.on_ack(1), Err(PartyError::Unknown(1)));
        assert_eq!(
            t.on_ack(1).unwrap_err().cause(),
            CauseValue::InvalidEndpointRef
        );
        assert_eq!(t.active().count(), 2);
    }

    #[test]
    fn t399_clears_an_unanswered_add_with_cause_102() {
        let mut t = PartyTable::new(PartyConfig::default());
        t.add(at(0), "a").unwrap();
        t.on_ack(0).unwrap();
        t.add(at(1_000), "b").unwrap();
        assert_eq!(t.next_timeout(), Some(at(15_000)));
        t.poll_timeout(at(14_999));
        assert_eq!(t.state(1), EndpointState::ADD_PARTY_INITIATED);
        t.poll_timeout(at(15_000));
        assert_eq!(t.state(1), EndpointState::NULL);
        assert_eq!(t.state(0), EndpointState::ACTIVE);
        assert_eq!(
            t.drain_out(),
            vec![PartyOut::DropParty {
                eref: EndpointRef {
                    flag: false,
                    value: 1
                },
                cause: 102
            }]
        );
        assert!(t.drain_events().contains(&PartyEvent::Refused {
            eref: 1,
            cause: 102
        }));
        assert_eq!(t.next_timeout(), None);
    }

    #[test]
    fn drop_is_acknowledged_or_times_out_after_t398() {
        let mut t = PartyTable::new(PartyConfig::default());
        for a in ["a", "b", "c"] {
            let e = t.add(at(0), a).unwrap();
            t.on_ack(e).unwrap();
        }
        t.drain_events();
        t.drop_party(at(100), 1, 31).unwrap();
        assert_eq!(t.state(1), EndpointState::DROP_PARTY_INITIATED);
        assert_eq!(t.drop_party(at(100), 1, 31).unwrap_err().cause().raw(), 101);
        t.on_drop_ack(1).unwrap();
        t.drop_party(at(200), 2, 31).unwrap();
        t.poll_timeout(at(4_199));
        assert_eq!(t.state(2), EndpointState::DROP_PARTY_INITIATED);
        t.poll_timeout(at(4_200));
        assert_eq!(t.state(2), EndpointState::NULL);
        assert_eq!(
            t.drain_events(),
            vec![PartyEvent::Dropped(1), PartyEvent::Dropped(2)]
        );
        assert_eq!(t.active().map(|(e, _)| e).collect::<Vec<_>>(), vec![0]);
        // The last party gone: the call is to be released.
        t.on_drop(0, 41).unwrap();
        assert!(t.is_empty());
        assert_eq!(
            t.drain_events(),
            vec![PartyEvent::Left { eref: 0, cause: 41 }]
        );
    }

    #[test]
    fn answers_out_of_state_are_refused_and_change_nothing() {
        let mut t = PartyTable::new(PartyConfig::default());
        t.add(at(0), "a").unwrap();
        assert!(matches!(
            t.on_drop_ack(0),
            Err(PartyError::WrongState { eref: 0, .. })
        ));
        t.on_ack(0).unwrap();
        assert!(t.on_reject(0, 21).is_err());
        assert!(t.on_ack(0).is_err());
        assert_eq!(t.state(0), EndpointState::ACTIVE);
        assert_eq!(t.on_drop(9, 31), Err(PartyError::Unknown(9)));
    }

    #[test]
    fn the_table_is_bounded() {
        let cfg = PartyConfig {
            max_parties: 4,
            max_pending: 2,
            ..PartyConfig::default()
        };
        let mut t = PartyTable::new(cfg);
        t.add(at(0), 0).unwrap();
        t.add(at(0), 1).unwrap();
        let e = t.add(at(0), 2).unwrap_err();
        assert_eq!(e.cause(), CauseValue::TooManyAddParty);
        t.on_ack(0).unwrap();
        t.on_ack(1).unwrap();
        t.add(at(0), 2).unwrap();
        t.add(at(0), 3).unwrap();
        t.on_ack(2).unwrap();
        t.on_ack(3).unwrap();
        assert_eq!(t.add(at(0), 4), Err(PartyError::Full(4)));
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn references_wrap_past_the_15_bit_limit_skipping_those_in_use() {
        let mut t = PartyTable::new(PartyConfig {
            max_pending: 4,
            ..PartyConfig::default()
        });
        t.next = EndpointRef::MAX;
        t.add(at(0), "a").unwrap(); // 0x7FFF
        assert_eq!(t.add(at(0), "b").unwrap(), 0);
        t.on_ack(0).unwrap();
        t.next = EndpointRef::MAX;
        assert_eq!(t.add(at(0), "c").unwrap(), 1);
    }
}
