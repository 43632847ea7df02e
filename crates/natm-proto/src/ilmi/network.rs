//! The network side of ILMI on one switch port, sans-IO: answers the user's requests
//! from the switch's MIB, hands the user its network prefix (a SetRequest on the user's
//! `atmfNetPrefixStatus`, sent again until answered), and takes the user's address
//! registrations (SetRequests on `atmfAddressStatus`), only for addresses under that
//! prefix and at most [`MAX_ADDRESSES`] at once. What the switch must know comes out
//! as [`Event`]s; the messages to send as [`NetworkSide::poll_transmit`].
//!
//! ILMI 4.0 §8 (address registration): the network registers its prefix with the user
//! once ILMI is up between them (here: when the user reads the ATM layer group, after
//! its coldStart and attachment-point check), and the user then registers each
//! address it forms from that prefix. A user's coldStart (it restarted) and a lost link end every
//! registration. The switch's own coldStart goes out when the link (re)connects
//! ([`NetworkSide::link_up`]), never in answer to the user's, so two restarts cannot
//! chase each other.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use rasn_smi::v1::{IpAddress, NetworkAddress};

use super::{GetResponse, Pdu, Pdus, SetRequest};

use super::{
    as_int, atm_layer, bind, decode, encode, error_reply, index_of, int, integer, octets,
    octets_index, oid, parse_octets_index, pdu, status, ticks, IlmiError, ADDRESS_LEN, PREFIX_LEN,
};
use crate::time::Instant;

/// Most addresses one port may have registered.
pub const MAX_ADDRESSES: usize = 16;
/// Time between tries of the prefix SetRequest until the user answers it.
pub const PREFIX_RETRY: Duration = Duration::from_secs(1);
/// Tries of the prefix SetRequest after each coldStart.
pub const PREFIX_TRIES: u32 = 10;

/// `atmfAddressStatus` / `atmfNetPrefixStatus` values.
const VALID: i64 = 1;
const INVALID: i64 = 2;

/// What the switch must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The user registered this address: calls to it go to this port, and it may call
    /// from it.
    Registered([u8; ADDRESS_LEN]),
    /// The registration ended (the user withdrew it, restarted, or the link went).
    Deregistered([u8; ADDRESS_LEN]),
}

/// How the switch describes itself and the port.
#[derive(Debug, Clone)]
pub struct PortIdentity {
    /// The port's number (`atmfPortMyIdentifier`).
    pub port: u32,
    /// The port's name (`atmfPortMyIfName`).
    pub name: String,
    /// The switch's 6-octet system identifier (`atmfMySystemIdentifier`).
    pub system_id: [u8; 6],
    /// `sysDescr`.
    pub description: String,
}

/// Counters of one port's ILMI.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IlmiStats {
    /// Messages taken.
    pub received: u64,
    /// Messages dropped: malformed, too long, another version or community.
    pub dropped: u64,
    /// Requests answered.
    pub answered: u64,
    /// Registrations refused: outside the prefix, or the port's table full.
    pub refused: u64,
    /// The user's coldStarts.
    pub cold_starts: u64,
}

/// Where the prefix SetRequest stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrefixState {
    /// Not sent: the user has not started (no coldStart or request seen).
    Idle,
    /// Sent as `request_id`; tried again at `retry_at` until `tries` run out.
    Offered {
        request_id: i64,
        retry_at: Instant,
        tries: u32,
    },
    /// The user answered it.
    Taken,
    /// Not answered after [`PREFIX_TRIES`]: offered again on the next coldStart.
    Unanswered,
}

/// One port's network side of ILMI.
#[derive(Debug)]
pub struct NetworkSide {
    identity: PortIdentity,
    prefix: [u8; PREFIX_LEN],
    started: Instant,
    prefix_state: PrefixState,
    registered: BTreeSet<[u8; ADDRESS_LEN]>,
    next_request_id: i64,
    out: VecDeque<Vec<u8>>,
    events: VecDeque<Event>,
    stats: IlmiStats,
}

impl NetworkSide {
    /// The network side of a port whose users' addresses start with `prefix`.
    pub fn new(now: Instant, identity: PortIdentity, prefix: [u8; PREFIX_LEN]) -> NetworkSide {
        NetworkSide {
            identity,
            prefix,
            started: now,
            prefix_state: PrefixState::Idle,
            registered: BTreeSet::new(),
            next_request_id: 1,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: IlmiStats::default(),
        }
    }

    /// The port's network prefix.
    pub fn prefix(&self) -> [u8; PREFIX_LEN] {
        self.prefix
    }

    /// The addresses registered now.
    pub fn registered(&self) -> impl Iterator<Item = &[u8; ADDRESS_LEN]> {
        self.registered.iter()
    }

    /// Whether the user has taken the prefix.
    pub fn prefix_taken(&self) -> bool {
        self.prefix_state == PrefixState::Taken
    }

    /// The port's ILMI counters.
    pub fn stats(&self) -> IlmiStats {
        self.stats
    }

    /// The link to the user (re)connected: tell it the switch (re)started, so that it
    /// starts over and registers again.
    pub fn link_up(&mut self, now: Instant) {
        self.forget_all();
        self.prefix_state = PrefixState::Idle;
        self.send(super::cold_start(self.uptime(now)));
    }

    /// The link to the user is gone: every registration ends.
    pub fn link_lost(&mut self) {
        self.forget_all();
        self.prefix_state = PrefixState::Idle;
        self.out.clear();
    }

    /// One message from the user. `claimable` says whether the switch would let this
    /// port have an address (no other port's route or registration sends it
    /// elsewhere); a registration it refuses, or outside the prefix, is badValue.
    /// Every error is also counted in `dropped`.
    pub fn handle_message(
        &mut self,
        now: Instant,
        sdu: &[u8],
        claimable: impl Fn(&[u8; ADDRESS_LEN]) -> bool,
    ) -> Result<(), IlmiError> {
        let m = match decode(sdu) {
            Ok(m) => m,
            Err(e) => {
                self.stats.dropped += 1;
                return Err(e);
            }
        };
        self.stats.received += 1;
        match m.data {
            Pdus::GetRequest(r) => {
                let reply = self.get(now, &r.0);
                self.answer(reply);
                // A user that reads the ATM layer group has checked the attachment
                // point: it is time for its prefix. Not before: Linux's ilmid, still
                // waiting for that check's answer, takes any other message as a
                // reason to start over (a coldStart and the same question again).
                if asks_for_atm_layer(&r.0) {
                    self.offer_prefix(now);
                }
            }
            Pdus::GetNextRequest(r) => {
                // No table is walked here: the end of the MIB for every name.
                let reply = error_reply(&r.0, status::NO_SUCH_NAME, 1);
                self.answer(reply);
            }
            Pdus::SetRequest(r) => {
                let reply = self.set(&r.0, claimable);
                self.answer(reply);
            }
            Pdus::GetResponse(GetResponse(r)) => {
                if let PrefixState::Offered { request_id, .. } = self.prefix_state {
                    if int(&r.request_id) == Some(request_id) {
                        self.prefix_state = PrefixState::Taken;
                    }
                }
            }
            Pdus::Trap(t) => {
                if int(&t.generic_trap) == Some(0) {
                    // coldStart: the user (re)started; its registrations are gone.
                    self.stats.cold_starts += 1;
                    self.forget_all();
                    self.prefix_state = PrefixState::Idle;
                }
            }
        }
        Ok(())
    }

    /// The next message to send on VCI 16.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// The next change of the port's registrations.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`NetworkSide::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.prefix_state {
            PrefixState::Offered { retry_at, .. } => Some(retry_at),
            _ => None,
        }
    }

    /// Offers the prefix again if the user has not answered.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let PrefixState::Offered {
            retry_at, tries, ..
        } = self.prefix_state
        {
            if now < retry_at {
                return;
            }
            if tries >= PREFIX_TRIES {
                self.prefix_state = PrefixState::Unanswered;
            } else {
                self.send_prefix(now, tries + 1);
            }
        }
    }

    fn uptime(&self, now: Instant) -> u32 {
        let cs = now.saturating_duration_since(self.started).as_millis() / 10;
        u32::try_from(cs).unwrap_or(u32::MAX)
    }

    fn offer_prefix(&mut self, now: Instant) {
        if matches!(self.prefix_state, PrefixState::Idle) {
            self.send_prefix(now, 1);
        }
    }

    fn send_prefix(&mut self, now: Instant, tries: u32) {
        let request_id = self.next_request_id;
        self.next_request_id = self.next_request_id % i64::from(i32::MAX) + 1;
        let name = octets_index(super::oid::NET_PREFIX_STATUS, 0, &self.prefix);
        self.send(Pdus::SetRequest(SetRequest(pdu(
            request_id,
            status::NO_ERROR,
            0,
            vec![bind(&name, integer(VALID))],
        ))));
        self.prefix_state = PrefixState::Offered {
            request_id,
            retry_at: now + PREFIX_RETRY,
            tries,
        };
    }

    fn answer(&mut self, reply: Pdu) {
        self.stats.answered += 1;
        self.send(Pdus::GetResponse(GetResponse(reply)));
    }

    fn send(&mut self, pdus: Pdus) {
        if let Some(b) = encode(pdus) {
            self.out.push_back(b);
        }
    }

    fn forget_all(&mut self) {
        for a in std::mem::take(&mut self.registered) {
            self.events.push_back(Event::Deregistered(a));
        }
    }

    /// A GetRequest's answer: every value, or noSuchName at the first unknown.
    fn get(&self, now: Instant, req: &Pdu) -> Pdu {
        super::get_reply(req, |name| self.value(now, name))
    }

    /// The switch's MIB as ILMI's user reads it.
    fn value(&self, now: Instant, name: &[u32]) -> Option<rasn_smi::v1::ObjectSyntax> {
        use super::oid as o;
        let id = &self.identity;
        if name == o::SYS_UP_TIME {
            return Some(ticks(self.uptime(now)));
        }
        if let Some([n, 0]) = index_of(name, o::SYSTEM) {
            return Some(match n {
                1 => octets(id.description.as_bytes()),
                2 => rasn_smi::v1::ObjectSyntax::Simple(rasn_smi::v1::SimpleSyntax::Object(oid(
                    o::ATMF,
                ))),
                4 | 6 => octets(b""),
                5 => octets(id.name.as_bytes()),
                7 => integer(2), // sysServices: a layer-2 device
                _ => return None,
            });
        }
        if name == o::PORT_MY_IDENTIFIER {
            return Some(integer(i64::from(id.port)));
        }
        if name == o::PORT_MY_IF_NAME {
            return Some(octets(id.name.as_bytes()));
        }
        if name == o::MY_SYSTEM_IDENTIFIER {
            return Some(octets(&id.system_id));
        }
        if name == o::MY_IP_NM_ADDRESS {
            return Some(rasn_smi::v1::ObjectSyntax::ApplicationWide(
                rasn_smi::v1::ApplicationSyntax::Address(NetworkAddress::Internet(IpAddress(
                    [0u8; 4].into(),
                ))),
            ));
        }
        // A registration's status (the user checks its address is still here).
        if let Some(ix) = index_of(name, o::ADDRESS_STATUS) {
            let (_port, a) = parse_octets_index(ix, ADDRESS_LEN)?;
            let a: [u8; ADDRESS_LEN] = a.try_into().ok()?;
            return self.registered.contains(&a).then(|| integer(VALID));
        }
        if name == o::ADDRESS_REGISTRATION_ADMIN_STATUS {
            return Some(integer(1)); // supported
        }
        if let Some([column, 0]) = index_of(name, o::ATM_LAYER) {
            return Some(integer(match *column {
                atm_layer::MAX_VPI_BITS => 8,
                atm_layer::MAX_VCI_BITS => 16,
                atm_layer::UNI_TYPE => 2,        // private
                atm_layer::UNI_VERSION => 4,     // 4.0: the user keeps its own (3.0, 3.1, 4.0)
                atm_layer::DEVICE_TYPE => 2,     // node
                atm_layer::ILMI_VERSION => 2,    // 4.0
                atm_layer::NNI_SIG_VERSION => 1, // unsupported
                _ => return None,
            }));
        }
        None
    }

    /// A SetRequest's answer: address registrations, nothing else writable.
    fn set(&mut self, req: &Pdu, claimable: impl Fn(&[u8; ADDRESS_LEN]) -> bool) -> Pdu {
        let mut changes = Vec::new();
        for (i, vb) in req.variable_bindings.iter().enumerate() {
            let refuse = |s: i64| error_reply(req, s, i + 1);
            let Some(index) = index_of(&vb.name, super::oid::ADDRESS_STATUS) else {
                return refuse(status::NO_SUCH_NAME);
            };
            let Some((_port, address)) = parse_octets_index(index, ADDRESS_LEN) else {
                return refuse(status::NO_SUCH_NAME);
            };
            let address: [u8; ADDRESS_LEN] = address.try_into().expect("ADDRESS_LEN octets");
            match as_int(&vb.value) {
                Some(VALID) if address[..PREFIX_LEN] == self.prefix && claimable(&address) => {
                    changes.push((address, true));
                }
                Some(INVALID) => changes.push((address, false)),
                // Another network's address, one the switch sends elsewhere (either
                // would claim another port's calls), or not a status.
                _ => {
                    self.stats.refused += 1;
                    return refuse(status::BAD_VALUE);
                }
            }
        }
        let adding = changes
            .iter()
            .filter(|(a, add)| *add && !self.registered.contains(a))
            .count();
        if self.registered.len() + adding > MAX_ADDRESSES {
            self.stats.refused += 1;
            return error_reply(req, status::BAD_VALUE, 1);
        }
        for (address, add) in changes {
            if add {
                if self.registered.insert(address) {
                    self.events.push_back(Event::Registered(address));
                }
            } else if self.registered.remove(&address) {
                self.events.push_back(Event::Deregistered(address));
            }
        }
        pdu(
            int(&req.request_id).unwrap_or(0),
            status::NO_ERROR,
            0,
            req.variable_bindings.clone(),
        )
    }
}

/// Whether `req` reads the ATM layer group (the user's configuration query).
fn asks_for_atm_layer(req: &Pdu) -> bool {
    req.variable_bindings
        .iter()
        .any(|vb| index_of(&vb.name, super::oid::ATM_LAYER).is_some())
}

#[cfg(test)]
mod tests;
