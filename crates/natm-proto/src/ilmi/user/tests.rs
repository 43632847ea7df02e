//! The user side against the network side, in virtual time: what a host and its
//! switch port reach over a link that loses, reorders nothing, and restarts.

use super::*;
use crate::ilmi::network::{Event, NetworkSide, PortIdentity};
use proptest::prelude::*;

const PREFIX: [u8; PREFIX_LEN] = [
    0x47, 0x00, 0x05, 0x80, 0xff, 0xe1, 0x00, 0x00, 0x00, 0xf2, 0x1a, 0x26, 0xd8,
];
const ESI: [u8; 6] = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];

fn expected() -> [u8; ADDRESS_LEN] {
    let mut a = [0u8; ADDRESS_LEN];
    a[..PREFIX_LEN].copy_from_slice(&PREFIX);
    a[PREFIX_LEN..PREFIX_LEN + 6].copy_from_slice(&ESI);
    a
}

fn port(now: Instant) -> NetworkSide {
    NetworkSide::new(
        now,
        PortIdentity {
            port: 1,
            name: "host".into(),
            system_id: [2, 0, 0, 0, 0, 1],
            description: "natm switch".into(),
        },
        PREFIX,
    )
}

/// A host and its switch port joined by a link that drops the messages `lose` says
/// (by their number in the order sent), run until `until`.
struct Pair {
    now: Instant,
    user: UserSide,
    net: NetworkSide,
    sent: u64,
    user_events: Vec<UserEvent>,
    net_events: Vec<Event>,
}

impl Pair {
    fn new() -> Pair {
        let now = Instant::ZERO;
        Pair {
            now,
            user: UserSide::new(now, ESI, 0),
            net: port(now),
            sent: 0,
            user_events: Vec::new(),
            net_events: Vec::new(),
        }
    }

    fn run(&mut self, until: Instant, claimable: bool, lose: &dyn Fn(u64) -> bool) {
        loop {
            let mut moved = false;
            while let Some(m) = self.user.poll_transmit() {
                moved = true;
                self.sent += 1;
                if !lose(self.sent) {
                    let _ = self.net.handle_message(self.now, &m, |_| claimable);
                }
            }
            while let Some(m) = self.net.poll_transmit() {
                moved = true;
                self.sent += 1;
                if !lose(self.sent) {
                    self.user
                        .handle_message(self.now, &m)
                        .expect("the switch's messages decode");
                }
            }
            self.user_events
                .extend(std::iter::from_fn(|| self.user.poll_event()));
            self.net_events
                .extend(std::iter::from_fn(|| self.net.poll_event()));
            if moved {
                continue;
            }
            let next = [self.user.poll_timeout(), self.net.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.user.handle_timeout(self.now);
                    self.net.handle_timeout(self.now);
                }
                _ => break,
            }
        }
        self.now = self.now.max(until);
    }
}

fn at(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

#[test]
fn a_host_whose_link_comes_up_learns_the_prefix_and_registers_its_address() {
    let mut p = Pair::new();
    assert_eq!(p.user.state_name(), "down");
    p.user.link_up(p.now);
    p.net.link_up(p.now);
    p.run(at(100), true, &|_| false);
    assert_eq!(p.user.address(), Some(expected()));
    assert_eq!(p.user.state_name(), "registered");
    assert_eq!(p.user_events, [UserEvent::Registered(expected())]);
    assert_eq!(p.net_events, [Event::Registered(expected())]);
    assert!(p.net.prefix_taken());
    assert_eq!(
        p.user.poll_timeout(),
        Some(at(0) + POLL_EVERY),
        "nothing left to send but the connectivity poll"
    );
    // Both coldStarts went once: neither answered the other's with its own.
    assert_eq!(p.user.stats().restarts, 1);
    assert_eq!(p.net.stats().cold_starts, 1);
    assert!(p.sent < 12, "{} messages", p.sent);
}

#[test]
fn lost_messages_are_sent_again_until_the_address_is_registered() {
    // Every second message lost for the first twenty.
    let mut p = Pair::new();
    p.user.link_up(p.now);
    p.run(at(60_000), true, &|n| n <= 20 && n % 2 == 0);
    assert_eq!(p.user.address(), Some(expected()));
    assert_eq!(p.net.registered().collect::<Vec<_>>(), [&expected()]);
    // A silent network: requests once a second, never faster.
    let mut q = Pair::new();
    q.user.link_up(q.now);
    q.run(at(30_000), true, &|_| true);
    assert_eq!(q.user.address(), None);
    assert!(q.sent <= 32, "{} messages in 30 s", q.sent);
}

#[test]
fn a_refused_address_is_not_registered_and_not_tried_again() {
    let mut p = Pair::new();
    p.user.link_up(p.now);
    p.run(at(20_000), false, &|_| false);
    assert_eq!(p.user.address(), None);
    assert_eq!(p.user.state_name(), "refused");
    assert_eq!(
        p.user_events,
        [UserEvent::Refused(expected(), status::BAD_VALUE)]
    );
    assert_eq!(p.net.stats().refused, 1, "asked once");
}

#[test]
fn a_switch_that_restarts_gets_the_address_registered_again() {
    let mut p = Pair::new();
    p.user.link_up(p.now);
    p.run(at(100), true, &|_| false);
    assert_eq!(p.user.address(), Some(expected()));
    // The switch restarts: a new port, which says so when the link is up again.
    p.net = port(p.now);
    p.net.link_up(p.now);
    p.user_events.clear();
    p.net_events.clear();
    p.run(at(200), true, &|_| false);
    assert_eq!(
        p.user_events,
        [
            UserEvent::Deregistered(expected()),
            UserEvent::Registered(expected())
        ]
    );
    assert_eq!(p.net_events, [Event::Registered(expected())]);
    assert_eq!(p.user.stats().cold_starts, 1);
    assert_eq!(
        p.user.stats().restarts,
        1,
        "no coldStart in answer to the switch's"
    );
}

#[test]
fn a_lost_link_ends_the_registration_and_a_withdrawn_prefix_too() {
    let mut p = Pair::new();
    p.user.link_up(p.now);
    p.run(at(100), true, &|_| false);
    p.user.link_lost();
    assert_eq!(
        p.user.poll_event(),
        Some(UserEvent::Deregistered(expected()))
    );
    assert_eq!(p.user.poll_timeout(), None);
    assert_eq!(p.user.poll_transmit(), None);
    // A message while down is taken and ignored.
    let cold = crate::ilmi::encode(crate::ilmi::cold_start(0)).unwrap();
    p.user.handle_message(p.now, &cold).unwrap();
    assert_eq!(p.user.poll_transmit(), None);
    // Up again, registered again; then the network withdraws the prefix.
    p.user.link_up(p.now);
    p.run(at(200), true, &|_| false);
    assert_eq!(p.user.address(), Some(expected()));
    let withdraw = SetRequest(pdu(
        77,
        status::NO_ERROR,
        0,
        vec![bind(
            &octets_index(oid::NET_PREFIX_STATUS, 0, &PREFIX),
            integer(INVALID),
        )],
    ));
    let m = crate::ilmi::encode(Pdus::SetRequest(withdraw)).unwrap();
    p.user.handle_message(p.now, &m).unwrap();
    assert_eq!(
        p.user.poll_event(),
        Some(UserEvent::Deregistered(expected()))
    );
    assert_eq!(p.user.state_name(), "awaiting prefix");
}

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let mut p = Pair::new();
    p.user.link_up(p.now);
    p.run(at(100), true, &|_| false);
    let before = p.user.stats();
    assert_eq!(
        p.user.handle_message(p.now, &[0u8; 600]),
        Err(IlmiError::TooLong(600))
    );
    assert_eq!(
        p.user.handle_message(p.now, b"\x30\x03junk"),
        Err(IlmiError::Malformed)
    );
    assert_eq!(p.user.stats().dropped, before.dropped + 2);
    assert_eq!(p.user.address(), Some(expected()));
    assert_eq!(p.user.poll_transmit(), None);
}

proptest! {
    /// Whatever the link loses early on, and however the switch's side restarts,
    /// the host ends registered once the link stops losing.
    #[test]
    fn the_host_ends_registered_once_the_link_stops_losing(
        lost in proptest::collection::vec(any::<bool>(), 0..40),
        switch_restarts_at in proptest::option::of(0u64..10_000),
    ) {
        let mut p = Pair::new();
        p.user.link_up(p.now);
        p.net.link_up(p.now);
        let lose = move |n: u64| lost.get(n as usize - 1).copied().unwrap_or(false);
        if let Some(ms) = switch_restarts_at {
            p.run(at(ms), true, &lose);
            p.net = port(p.now);
            p.net.link_up(p.now);
        }
        p.run(at(120_000), true, &lose);
        prop_assert_eq!(p.user.address(), Some(expected()));
        let want = expected();
        prop_assert_eq!(p.net.registered().collect::<Vec<_>>(), vec![&want]);
    }

    /// Any SDU: an error or a state the side can go on from, never a panic.
    #[test]
    fn any_sdu_is_taken_or_refused(sdu in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut p = Pair::new();
        p.user.link_up(p.now);
        let _ = p.user.handle_message(p.now, &sdu);
        p.run(at(60_000), true, &|_| false);
        prop_assert_eq!(p.user.address(), Some(expected()));
    }
}
