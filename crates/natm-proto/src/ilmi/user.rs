//! The user side of ILMI on a host's link to its switch, sans-IO: the host learns its
//! network prefix from the switch and registers the one address it forms from it
//! (prefix, its end system identifier, selector), as Linux-ATM's `ilmid` does.
//!
//! ILMI 4.0 §8 (address registration), as [`super::network::NetworkSide`] speaks it:
//! the user sends a coldStart when its link comes up ([`UserSide::link_up`]) and reads
//! the network's ATM layer group; the network then sets the user's
//! `atmfNetPrefixStatus` for its prefix (answered here), and the user sets
//! `atmfAddressStatus` on the network for its address. The network's coldStart (it
//! restarted) starts the reading again without a coldStart of the user's, so two
//! restarts cannot chase each other. Every request is sent again each [`RETRY`] until
//! answered; a prefix that does not come within [`PREFIX_WAIT`], or a registration
//! unanswered after [`REGISTER_TRIES`], starts over with a coldStart.
//!
//! ILMI 4.0's connectivity procedure keeps the registration honest: once registered,
//! the user reads the network's `sysUpTime` and its own `atmfAddressStatus` there
//! every [`POLL_EVERY`]. An uptime that did not advance with the clock, or an address
//! the network no longer has, says the network restarted (its coldStart may have
//! been lost): the user registers again. [`POLL_MISSES`] unanswered reads in a row
//! start over.
//!
//! Departure: one address per host (ILMI lets a user register several); the selector
//! is the host's, as sigd's SAPs, not the address's, tell services apart.

use std::collections::VecDeque;
use std::time::Duration;

use super::{
    as_int, atm_layer, bind, decode, encode, error_reply, index_of, int, integer, octets_index,
    oid, pdu, status, ticks, GetRequest, GetResponse, IlmiError, Pdu, Pdus, SetRequest, VarBind,
    ADDRESS_LEN, PREFIX_LEN,
};
use crate::time::Instant;

/// Time between tries of a request until it is answered.
pub const RETRY: Duration = Duration::from_secs(1);
/// How long the network's prefix is awaited once it answered, before starting over.
pub const PREFIX_WAIT: Duration = Duration::from_secs(5);
/// Tries of a registration before starting over.
pub const REGISTER_TRIES: u32 = 10;
/// Time between reads of the network's `sysUpTime` once registered (ILMI 4.0's
/// default polling interval).
pub const POLL_EVERY: Duration = Duration::from_secs(5);
/// Unanswered reads in a row that start over (ILMI 4.0's default loss threshold).
pub const POLL_MISSES: u32 = 4;
/// How far the network's uptime may lag the clock (hundredths of a second) before it
/// counts as a restart: the read's round trip and the clocks' tick.
const UPTIME_SLACK_CS: u128 = 100;

/// `atmfAddressStatus` / `atmfNetPrefixStatus` values.
const VALID: i64 = 1;
const INVALID: i64 = 2;

/// What the host must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserEvent {
    /// The network took this address: the host calls from it and is called at it.
    Registered([u8; ADDRESS_LEN]),
    /// The address is no longer registered (the network restarted, withdrew the
    /// prefix, or the link went).
    Deregistered([u8; ADDRESS_LEN]),
    /// The network refused the address (its error status): tried again only after
    /// the next restart of either side.
    Refused([u8; ADDRESS_LEN], i64),
}

/// Where the user side stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UserState {
    /// The link is down.
    Down,
    /// coldStart sent; the network's ATM layer group asked as `request_id`.
    Starting { request_id: i64, retry_at: Instant },
    /// The network answered: its prefix is awaited until `deadline`.
    AwaitingPrefix { deadline: Instant },
    /// `address` offered as `request_id`, the `tries`th time.
    Registering {
        address: [u8; ADDRESS_LEN],
        request_id: i64,
        retry_at: Instant,
        tries: u32,
    },
    /// The network took `address`; its `sysUpTime` is read at `poll_at`, the read
    /// outstanding (if any) is `request_id`, and `missed` reads went unanswered.
    Registered {
        address: [u8; ADDRESS_LEN],
        poll_at: Instant,
        request_id: Option<i64>,
        missed: u32,
    },
    /// The network refused `address`.
    Refused { address: [u8; ADDRESS_LEN] },
}

/// Counters of the user side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserStats {
    /// Messages taken.
    pub received: u64,
    /// Messages dropped: malformed, too long, another version or community.
    pub dropped: u64,
    /// The network's coldStarts.
    pub cold_starts: u64,
    /// Starts over (a coldStart sent) after the link came up.
    pub restarts: u64,
}

/// A host's user side of ILMI on one link.
#[derive(Debug)]
pub struct UserSide {
    esi: [u8; 6],
    selector: u8,
    started: Instant,
    state: UserState,
    /// The network's `sysUpTime` last read, and when (one that did not advance with
    /// the clock: it restarted).
    network_uptime: Option<(u32, Instant)>,
    next_request_id: i64,
    out: VecDeque<Vec<u8>>,
    events: VecDeque<UserEvent>,
    stats: UserStats,
}

impl UserSide {
    /// The user side of a host whose addresses end with `esi` and `selector`; it
    /// starts when the link does ([`UserSide::link_up`]).
    pub fn new(now: Instant, esi: [u8; 6], selector: u8) -> UserSide {
        UserSide {
            esi,
            selector,
            started: now,
            state: UserState::Down,
            network_uptime: None,
            next_request_id: 1,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: UserStats::default(),
        }
    }

    /// The registered address, if the network took it.
    pub fn address(&self) -> Option<[u8; ADDRESS_LEN]> {
        match self.state {
            UserState::Registered { address, .. } => Some(address),
            _ => None,
        }
    }

    /// Where it stands, for `natm stat`: "down", "starting", "awaiting prefix",
    /// "registering", "registered" or "refused".
    pub fn state_name(&self) -> &'static str {
        match self.state {
            UserState::Down => "down",
            UserState::Starting { .. } => "starting",
            UserState::AwaitingPrefix { .. } => "awaiting prefix",
            UserState::Registering { .. } => "registering",
            UserState::Registered { .. } => "registered",
            UserState::Refused { .. } => "refused",
        }
    }

    /// The counters.
    pub fn stats(&self) -> UserStats {
        self.stats
    }

    /// The link to the switch (re)connected: tell it this host (re)started and start.
    pub fn link_up(&mut self, now: Instant) {
        self.restart(now, true);
    }

    /// The link is gone: the registration with it.
    pub fn link_lost(&mut self) {
        self.withdraw();
        self.state = UserState::Down;
        self.out.clear();
    }

    /// One message from the network. An error is also counted in `dropped` and
    /// changes nothing else.
    pub fn handle_message(&mut self, now: Instant, sdu: &[u8]) -> Result<(), IlmiError> {
        let m = match decode(sdu) {
            Ok(m) => m,
            Err(e) => {
                self.stats.dropped += 1;
                return Err(e);
            }
        };
        self.stats.received += 1;
        if self.state == UserState::Down {
            return Ok(());
        }
        match m.data {
            Pdus::GetRequest(r) => {
                let reply = self.get(now, &r.0);
                self.send(Pdus::GetResponse(GetResponse(reply)));
            }
            Pdus::GetNextRequest(r) => {
                let reply = error_reply(&r.0, status::NO_SUCH_NAME, 1);
                self.send(Pdus::GetResponse(GetResponse(reply)));
            }
            Pdus::SetRequest(r) => {
                let reply = self.set(now, &r.0);
                self.send(Pdus::GetResponse(GetResponse(reply)));
            }
            Pdus::GetResponse(GetResponse(r)) => self.on_response(now, &r),
            Pdus::Trap(t) => {
                if int(&t.generic_trap) == Some(0) {
                    // The network restarted: what it held is gone; read it again,
                    // without a coldStart of ours.
                    self.stats.cold_starts += 1;
                    self.restart(now, false);
                }
            }
        }
        Ok(())
    }

    /// The next message to send on VCI 16.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// The next change of the registration.
    pub fn poll_event(&mut self) -> Option<UserEvent> {
        self.events.pop_front()
    }

    /// When [`UserSide::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            UserState::Starting { retry_at, .. } | UserState::Registering { retry_at, .. } => {
                Some(retry_at)
            }
            UserState::AwaitingPrefix { deadline } => Some(deadline),
            UserState::Registered { poll_at, .. } => Some(poll_at),
            _ => None,
        }
    }

    /// Sends again what is unanswered, or starts over.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.poll_timeout().is_none_or(|t| now < t) {
            return;
        }
        match self.state {
            UserState::Starting { .. } => self.read_network(now),
            UserState::AwaitingPrefix { .. } => self.restart(now, true),
            UserState::Registering { address, tries, .. } if tries < REGISTER_TRIES => {
                self.register(now, address, tries + 1);
            }
            UserState::Registering { .. } => self.restart(now, true),
            UserState::Registered { missed, .. } if missed + 1 >= POLL_MISSES => {
                self.restart(now, true)
            }
            UserState::Registered {
                address,
                request_id,
                missed,
                ..
            } => self.poll(now, address, missed + u32::from(request_id.is_some())),
            _ => {}
        }
    }

    fn uptime(&self, now: Instant) -> u32 {
        let cs = now.saturating_duration_since(self.started).as_millis() / 10;
        u32::try_from(cs).unwrap_or(u32::MAX)
    }

    fn request_id(&mut self) -> i64 {
        let id = self.next_request_id;
        self.next_request_id = self.next_request_id % i64::from(i32::MAX) + 1;
        id
    }

    /// Starts over: the registration ends, a coldStart goes out if `cold`, and the
    /// network's ATM layer group is read.
    fn restart(&mut self, now: Instant, cold: bool) {
        self.withdraw();
        self.network_uptime = None;
        if cold {
            self.stats.restarts += 1;
            self.send(super::cold_start(self.uptime(now)));
        }
        self.read_network(now);
    }

    /// The read that tells the network this user is up (it offers its prefix then).
    fn read_network(&mut self, now: Instant) {
        let request_id = self.request_id();
        let mut names: Vec<VarBind> = [atm_layer::DEVICE_TYPE, atm_layer::ILMI_VERSION]
            .map(|c| bind(&[oid::ATM_LAYER, &[c, 0]].concat(), super::null()))
            .into();
        names.push(bind(oid::SYS_UP_TIME, super::null()));
        self.send(Pdus::GetRequest(GetRequest(pdu(
            request_id,
            status::NO_ERROR,
            0,
            names,
        ))));
        self.state = UserState::Starting {
            request_id,
            retry_at: now + RETRY,
        };
    }

    fn register(&mut self, now: Instant, address: [u8; ADDRESS_LEN], tries: u32) {
        let request_id = self.request_id();
        let name = octets_index(oid::ADDRESS_STATUS, 0, &address);
        self.send(Pdus::SetRequest(SetRequest(pdu(
            request_id,
            status::NO_ERROR,
            0,
            vec![bind(&name, integer(VALID))],
        ))));
        self.state = UserState::Registering {
            address,
            request_id,
            retry_at: now + RETRY,
            tries,
        };
    }

    /// Reads the network's `sysUpTime` (`missed` reads so far unanswered).
    fn poll(&mut self, now: Instant, address: [u8; ADDRESS_LEN], missed: u32) {
        let request_id = self.request_id();
        self.send(Pdus::GetRequest(GetRequest(pdu(
            request_id,
            status::NO_ERROR,
            0,
            vec![
                bind(oid::SYS_UP_TIME, super::null()),
                bind(
                    &octets_index(oid::ADDRESS_STATUS, 0, &address),
                    super::null(),
                ),
            ],
        ))));
        self.state = UserState::Registered {
            address,
            poll_at: now + POLL_EVERY,
            request_id: Some(request_id),
            missed,
        };
    }

    /// The registration, if any, ends.
    fn withdraw(&mut self) {
        if let UserState::Registered { address, .. } = self.state {
            self.events.push_back(UserEvent::Deregistered(address));
        }
    }

    fn on_response(&mut self, now: Instant, r: &Pdu) {
        let id = int(&r.request_id);
        match self.state {
            // Any answer says the network is there, an error included.
            UserState::Starting { request_id, .. } if id == Some(request_id) => {
                self.network_uptime = uptime_in(r).map(|u| (u, now));
                self.state = UserState::AwaitingPrefix {
                    deadline: now + PREFIX_WAIT,
                };
            }
            UserState::Registering {
                address,
                request_id,
                ..
            } if id == Some(request_id) => match int(&r.error_status) {
                Some(status::NO_ERROR) => {
                    self.state = UserState::Registered {
                        address,
                        poll_at: now + POLL_EVERY,
                        request_id: None,
                        missed: 0,
                    };
                    self.events.push_back(UserEvent::Registered(address));
                }
                e => {
                    self.state = UserState::Refused { address };
                    self.events
                        .push_back(UserEvent::Refused(address, e.unwrap_or(-1)));
                }
            },
            UserState::Registered {
                address,
                poll_at,
                request_id: Some(request_id),
                ..
            } if id == Some(request_id) => {
                let uptime = uptime_in(r);
                let went_back = uptime.is_some_and(|u| {
                    self.network_uptime.is_some_and(|(last, at)| {
                        let elapsed = now.saturating_duration_since(at).as_millis() / 10;
                        let expected = u128::from(last) + elapsed;
                        u128::from(u) + UPTIME_SLACK_CS < expected
                    })
                });
                // noSuchName at the address: the network does not have it.
                let forgotten = int(&r.error_status) == Some(status::NO_SUCH_NAME)
                    && int(&r.error_index) == Some(2);
                if went_back || forgotten {
                    // The network restarted and its coldStart did not arrive.
                    self.stats.cold_starts += 1;
                    return self.restart(now, false);
                }
                self.network_uptime = uptime.map(|u| (u, now)).or(self.network_uptime);
                self.state = UserState::Registered {
                    address,
                    poll_at,
                    request_id: None,
                    missed: 0,
                };
            }
            _ => {}
        }
    }

    /// The address this host forms under `prefix`.
    fn address_under(&self, prefix: &[u8; PREFIX_LEN]) -> [u8; ADDRESS_LEN] {
        let mut a = [0u8; ADDRESS_LEN];
        a[..PREFIX_LEN].copy_from_slice(prefix);
        a[PREFIX_LEN..PREFIX_LEN + 6].copy_from_slice(&self.esi);
        a[ADDRESS_LEN - 1] = self.selector;
        a
    }

    /// The prefix this side holds (taken, registering or registered under it).
    fn prefix(&self) -> Option<[u8; PREFIX_LEN]> {
        match self.state {
            UserState::Registering { address, .. }
            | UserState::Registered { address, .. }
            | UserState::Refused { address } => {
                Some(address[..PREFIX_LEN].try_into().expect("PREFIX_LEN octets"))
            }
            _ => None,
        }
    }

    /// The network's SetRequest: a prefix for `atmfNetPrefixStatus`, nothing else
    /// writable.
    fn set(&mut self, now: Instant, req: &Pdu) -> Pdu {
        let mut change = None;
        for (i, vb) in req.variable_bindings.iter().enumerate() {
            let refuse = |s: i64| error_reply(req, s, i + 1);
            let Some(index) = index_of(&vb.name, oid::NET_PREFIX_STATUS) else {
                return refuse(status::NO_SUCH_NAME);
            };
            let Some((_port, prefix)) = super::parse_octets_index(index, PREFIX_LEN) else {
                return refuse(status::NO_SUCH_NAME);
            };
            let prefix: [u8; PREFIX_LEN] = prefix.try_into().expect("PREFIX_LEN octets");
            match as_int(&vb.value) {
                Some(v @ (VALID | INVALID)) => change = Some((prefix, v == VALID)),
                _ => return refuse(status::BAD_VALUE),
            }
        }
        match change {
            // A prefix offered again (the answer was lost): nothing changes.
            Some((prefix, true)) if self.prefix() == Some(prefix) => {}
            Some((prefix, true)) => {
                self.withdraw();
                let address = self.address_under(&prefix);
                self.register(now, address, 1);
            }
            Some((prefix, false)) if self.prefix() == Some(prefix) => {
                self.withdraw();
                self.state = UserState::AwaitingPrefix {
                    deadline: now + PREFIX_WAIT,
                };
            }
            _ => {}
        }
        pdu(
            int(&req.request_id).unwrap_or(0),
            status::NO_ERROR,
            0,
            req.variable_bindings.clone(),
        )
    }

    /// A GetRequest's answer from the host's few objects: its uptime, its ATM layer
    /// (a user device, ILMI 4.0) and its prefix table.
    fn get(&self, now: Instant, req: &Pdu) -> Pdu {
        super::get_reply(req, |name| {
            if name == oid::SYS_UP_TIME {
                return Some(ticks(self.uptime(now)));
            }
            if let Some([column, 0]) = index_of(name, oid::ATM_LAYER) {
                return match *column {
                    atm_layer::DEVICE_TYPE => Some(integer(1)),  // user
                    atm_layer::ILMI_VERSION => Some(integer(2)), // 4.0
                    atm_layer::UNI_VERSION => Some(integer(4)),  // 4.0
                    _ => None,
                };
            }
            index_of(name, oid::NET_PREFIX_STATUS)
                .and_then(|ix| super::parse_octets_index(ix, PREFIX_LEN))
                .filter(|(_, p)| self.prefix().is_some_and(|held| held[..] == p[..]))
                .map(|_| integer(VALID))
        })
    }

    fn send(&mut self, pdus: Pdus) {
        if let Some(b) = encode(pdus) {
            self.out.push_back(b);
        }
    }
}

/// The `sysUpTime` an answer carries, if it does.
fn uptime_in(r: &Pdu) -> Option<u32> {
    use rasn_smi::v1::{ApplicationSyntax, ObjectSyntax};
    if int(&r.error_status) != Some(status::NO_ERROR) {
        return None;
    }
    r.variable_bindings.iter().find_map(|vb| {
        let name: &[u32] = &vb.name;
        match (&vb.value, name == oid::SYS_UP_TIME) {
            (ObjectSyntax::ApplicationWide(ApplicationSyntax::Ticks(t)), true) => Some(t.0),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests;
