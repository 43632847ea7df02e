//! The ATMARP table (IP address → ATM address, with ageing) and the ATMARP server of
//! RFC 2225 §8.4, sans-IO: packets and the time in, packets out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use super::atmarp::{Op, Repr};
use crate::time::Instant;
use crate::wire::addr::AtmAddr;

/// RFC 2225 §8.5: a server's entries live 20 minutes after their last registration.
pub const SERVER_AGE: Duration = Duration::from_secs(20 * 60);
/// RFC 2225 §8.5: a client's entries live 15 minutes (and it re-registers as often).
pub const CLIENT_AGE: Duration = Duration::from_secs(15 * 60);

/// One entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Where the address is.
    pub atm: AtmAddr,
    /// When the entry goes (`None`: never, e.g. the host's own address).
    pub expires: Option<Instant>,
}

/// IP → ATM entries, bounded in number, each ageing out at its own time.
#[derive(Debug, Clone)]
pub struct ArpTable {
    entries: HashMap<IpAddr, Entry>,
    max: usize,
}

impl ArpTable {
    /// An empty table that holds at most `max` entries.
    pub fn new(max: usize) -> ArpTable {
        ArpTable {
            entries: HashMap::new(),
            max,
        }
    }

    /// The live entry for `ip`.
    pub fn lookup(&self, now: Instant, ip: IpAddr) -> Option<AtmAddr> {
        self.entries
            .get(&ip)
            .filter(|e| e.expires.is_none_or(|t| t > now))
            .map(|e| e.atm)
    }

    /// Adds or refreshes `ip → atm` for `age` (`None`: for ever). `false` if the table
    /// is full and `ip` is not in it.
    pub fn insert(
        &mut self,
        now: Instant,
        ip: IpAddr,
        atm: AtmAddr,
        age: Option<Duration>,
    ) -> bool {
        if !self.entries.contains_key(&ip) && self.entries.len() >= self.max {
            self.expire(now);
            if self.entries.len() >= self.max {
                return false;
            }
        }
        self.entries.insert(
            ip,
            Entry {
                atm,
                expires: age.map(|a| now + a),
            },
        );
        true
    }

    /// Removes the entry for `ip`.
    pub fn remove(&mut self, ip: IpAddr) {
        self.entries.remove(&ip);
    }

    /// Drops every entry past its time; returns how many went.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|_, e| e.expires.is_none_or(|t| t > now));
        before - self.entries.len()
    }

    /// When the next entry expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.entries.values().filter_map(|e| e.expires).min()
    }

    /// The entries, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&IpAddr, &Entry)> {
        self.entries.iter()
    }

    /// Number of entries (live or not yet expired by [`ArpTable::expire`]).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What the server did with a packet, for its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerOutcome {
    /// A client's registration (or refresh) was taken.
    Registered,
    /// A resolution was answered with ARP_REPLY.
    Resolved,
    /// ARP_NAK: the target is unknown.
    Nak,
    /// Refused: the packet's source ATM address is not the caller's, the IP address
    /// belongs to another live ATM address, or the table is full.
    Refused,
    /// Not a request for the server (a reply, NAK or InARP packet): ignored.
    Ignored,
}

/// The ATMARP server of RFC 2225 §8.4: clients register by resolving their own
/// address, and resolve others'; entries age out unless refreshed.
#[derive(Debug, Clone)]
pub struct ArpServer {
    table: ArpTable,
    age: Duration,
    /// The logical IP subnets served (address, prefix length); empty: any address.
    subnets: Vec<(IpAddr, u8)>,
}

impl ArpServer {
    /// A server holding at most `max` entries, each for `age` after its registration.
    pub fn new(max: usize, age: Duration) -> ArpServer {
        ArpServer {
            table: ArpTable::new(max),
            age,
            subnets: Vec::new(),
        }
    }

    /// Serve only these logical IP subnets (RFC 2225 §8.1: one LIS per server): a
    /// registration of an address outside them is refused with a NAK and nothing is
    /// stored, so a client cannot fill the table with, or answer for, addresses that
    /// are not on the subnet.
    pub fn serving(mut self, subnets: impl IntoIterator<Item = (IpAddr, u8)>) -> ArpServer {
        self.subnets = subnets.into_iter().collect();
        self
    }

    /// Whether `ip` is on one of the subnets served (any, if none is set).
    fn serves(&self, ip: IpAddr) -> bool {
        self.subnets.is_empty()
            || self
                .subnets
                .iter()
                .any(|&(net, len)| same_prefix(net, ip, len))
    }

    /// Adds an entry that never ages (the server host's own address).
    pub fn add_permanent(&mut self, now: Instant, ip: IpAddr, atm: AtmAddr) -> bool {
        self.table.insert(now, ip, atm, None)
    }

    /// The table.
    pub fn table(&self) -> &ArpTable {
        &self.table
    }

    /// Answers `req`, which came on a VC from `caller` (the calling party address sigd
    /// authenticated). RFC 2225 §8.4.1: an ARP_REQUEST's source registers or refreshes
    /// the client, then its target is resolved (a client resolving itself is a
    /// registration, answered with its own entry).
    ///
    /// Departure, for the threat model: a source ATM address other than the VC's
    /// calling party is refused (NAK, nothing stored), so no client can register an
    /// IP address for another host; and a live entry is never moved to another ATM
    /// address (RFC 2225 §8.4.1's duplicate-address rule: the requester is answered
    /// with the entry that holds the address).
    pub fn handle(
        &mut self,
        now: Instant,
        caller: AtmAddr,
        req: &Repr,
    ) -> (ServerOutcome, Option<Repr>) {
        if req.op != Op::Request {
            return (ServerOutcome::Ignored, None);
        }
        let nak = Repr {
            op: Op::Nak,
            ..*req
        };
        let mut outcome = None;
        if let (Some(sip), Some(satm)) = (req.source_ip, req.source_atm) {
            if satm != caller || !self.serves(sip) {
                return (ServerOutcome::Refused, Some(nak));
            }
            match self.table.lookup(now, sip) {
                Some(held) if held != satm => outcome = Some(ServerOutcome::Refused),
                _ => {
                    if self.table.insert(now, sip, satm, Some(self.age)) {
                        if req.target_ip == Some(sip) {
                            outcome = Some(ServerOutcome::Registered);
                        }
                    } else {
                        return (ServerOutcome::Refused, Some(nak));
                    }
                }
            }
        }
        let Some(tip) = req.target_ip else {
            return (ServerOutcome::Refused, Some(nak));
        };
        match self.table.lookup(now, tip) {
            Some(atm) => {
                let reply = Repr {
                    op: Op::Reply,
                    ipv6: req.ipv6,
                    source_atm: Some(atm),
                    source_ip: Some(tip),
                    target_atm: req.source_atm,
                    target_ip: req.source_ip,
                };
                (outcome.unwrap_or(ServerOutcome::Resolved), Some(reply))
            }
            None => (outcome.unwrap_or(ServerOutcome::Nak), Some(nak)),
        }
    }

    /// Ages entries out; returns how many went.
    pub fn expire(&mut self, now: Instant) -> usize {
        self.table.expire(now)
    }
}

/// Whether `a` and `b` share their first `len` bits (false across address families).
fn same_prefix(a: IpAddr, b: IpAddr, len: u8) -> bool {
    let bits = |ip: IpAddr| match ip {
        IpAddr::V4(v) => (u128::from(u32::from(v)), 32_u32),
        IpAddr::V6(v) => (u128::from(v), 128),
    };
    let ((x, w), (y, w2)) = (bits(a), bits(b));
    if w != w2 {
        return false;
    }
    let shift = w.saturating_sub(u32::from(len));
    shift >= w || x >> shift == y >> shift
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atm(s: &str) -> AtmAddr {
        s.parse().expect("address")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn request(from_atm: &str, from_ip: &str, target: &str) -> Repr {
        Repr {
            op: Op::Request,
            ipv6: false,
            source_atm: Some(atm(from_atm)),
            source_ip: Some(ip(from_ip)),
            target_atm: None,
            target_ip: Some(ip(target)),
        }
    }

    #[test]
    fn table_entries_age_out_and_the_table_is_bounded() {
        let mut t = ArpTable::new(2);
        let t0 = Instant::ZERO;
        assert!(t.insert(t0, ip("10.0.0.1"), atm("+1"), Some(Duration::from_secs(10))));
        assert!(t.insert(t0, ip("10.0.0.2"), atm("+2"), None));
        assert!(!t.insert(t0, ip("10.0.0.3"), atm("+3"), None), "full");
        assert_eq!(
            t.lookup(t0 + Duration::from_secs(9), ip("10.0.0.1")),
            Some(atm("+1"))
        );
        let later = t0 + Duration::from_secs(10);
        assert_eq!(t.lookup(later, ip("10.0.0.1")), None, "aged out");
        assert_eq!(t.next_expiry(), Some(later));
        assert!(
            t.insert(later, ip("10.0.0.3"), atm("+3"), None),
            "room after ageing"
        );
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn clients_register_resolve_and_get_naks() {
        let mut s = ArpServer::new(16, SERVER_AGE);
        let t0 = Instant::ZERO;
        let (o, r) = s.handle(t0, atm("+1"), &request("+1", "10.0.0.1", "10.0.0.1"));
        assert_eq!(o, ServerOutcome::Registered);
        assert_eq!(
            r.map(|r| (r.op, r.source_atm)),
            Some((Op::Reply, Some(atm("+1"))))
        );
        let (o, r) = s.handle(t0, atm("+2"), &request("+2", "10.0.0.2", "10.0.0.1"));
        assert_eq!(o, ServerOutcome::Resolved);
        let r = r.expect("a reply");
        assert_eq!(
            (r.op, r.source_ip, r.source_atm),
            (Op::Reply, Some(ip("10.0.0.1")), Some(atm("+1")))
        );
        assert_eq!(r.target_ip, Some(ip("10.0.0.2")));
        let (o, r) = s.handle(t0, atm("+2"), &request("+2", "10.0.0.2", "10.0.0.9"));
        assert_eq!((o, r.map(|r| r.op)), (ServerOutcome::Nak, Some(Op::Nak)));
        // After 20 minutes without a refresh the first client is gone.
        let later = t0 + SERVER_AGE;
        let (o, _) = s.handle(later, atm("+2"), &request("+2", "10.0.0.2", "10.0.0.1"));
        assert_eq!(o, ServerOutcome::Nak);
    }

    #[test]
    fn registrations_outside_the_served_subnets_are_refused() {
        let mut s =
            ArpServer::new(16, SERVER_AGE).serving([(ip("10.0.0.0"), 24), (ip("fd77::"), 64)]);
        let t0 = Instant::ZERO;
        for outside in ["10.0.1.1", "192.0.2.1"] {
            let (o, r) = s.handle(t0, atm("+1"), &request("+1", outside, outside));
            assert_eq!(
                (o, r.map(|r| r.op)),
                (ServerOutcome::Refused, Some(Op::Nak))
            );
        }
        assert!(s.table().is_empty(), "nothing stored");
        let (o, _) = s.handle(t0, atm("+1"), &request("+1", "10.0.0.7", "10.0.0.7"));
        assert_eq!(o, ServerOutcome::Registered);
        assert!(same_prefix(ip("fd77::5"), ip("fd77::"), 64));
        assert!(!same_prefix(ip("fd78::5"), ip("fd77::"), 64));
        assert!(
            !same_prefix(ip("10.0.0.1"), ip("::a00:1"), 24),
            "families differ"
        );
        assert!(same_prefix(ip("203.0.113.9"), ip("0.0.0.0"), 0));
    }

    #[test]
    fn nobody_registers_an_address_for_another_host_or_takes_a_live_one() {
        let mut s = ArpServer::new(16, SERVER_AGE);
        let t0 = Instant::ZERO;
        let (o, _) = s.handle(t0, atm("+9"), &request("+1", "10.0.0.1", "10.0.0.1"));
        assert_eq!(
            o,
            ServerOutcome::Refused,
            "source ATM address is not the caller's"
        );
        assert!(s.table().is_empty());
        s.handle(t0, atm("+1"), &request("+1", "10.0.0.1", "10.0.0.1"));
        let (o, r) = s.handle(t0, atm("+9"), &request("+9", "10.0.0.1", "10.0.0.1"));
        assert_eq!(o, ServerOutcome::Refused);
        assert_eq!(
            r.and_then(|r| r.source_atm),
            Some(atm("+1")),
            "told who holds it"
        );
        assert_eq!(s.table().lookup(t0, ip("10.0.0.1")), Some(atm("+1")));
    }

    #[test]
    fn a_full_server_refuses_without_storing() {
        let mut s = ArpServer::new(1, SERVER_AGE);
        let t0 = Instant::ZERO;
        s.handle(t0, atm("+1"), &request("+1", "10.0.0.1", "10.0.0.1"));
        let (o, r) = s.handle(t0, atm("+2"), &request("+2", "10.0.0.2", "10.0.0.2"));
        assert_eq!(
            (o, r.map(|r| r.op)),
            (ServerOutcome::Refused, Some(Op::Nak))
        );
        assert_eq!(s.table().len(), 1);
    }
}
