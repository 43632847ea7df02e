//! The network side against a user that behaves as Linux-ATM's `ilmid` does, in
//! virtual time.

use super::*;
use crate::ilmi::{self, oid as o};
use crate::ilmi::{null, GetNextRequest, GetRequest};

const PREFIX: [u8; PREFIX_LEN] = [
    0x47, 0x00, 0x05, 0x80, 0xff, 0xe1, 0x00, 0x00, 0x00, 0xf2, 0x1a, 0x26, 0xd8,
];

fn address(esi_last: u8) -> [u8; ADDRESS_LEN] {
    let mut a = [0u8; ADDRESS_LEN];
    a[..PREFIX_LEN].copy_from_slice(&PREFIX);
    a[PREFIX_LEN..PREFIX_LEN + 6].copy_from_slice(&[0x00, 0x20, 0xea, 0x00, 0x0e, esi_last]);
    a
}

fn port(now: Instant) -> NetworkSide {
    NetworkSide::new(
        now,
        PortIdentity {
            port: 3,
            name: "linux".into(),
            system_id: [2, 0, 0, 0, 0, 1],
            description: "natm switch".into(),
        },
        PREFIX,
    )
}

fn cold_start() -> Vec<u8> {
    ilmi::encode(ilmi::cold_start(0)).unwrap()
}

fn request(id: i64, names: &[&[u32]]) -> Vec<u8> {
    let binds = names.iter().map(|n| bind(n, null())).collect();
    ilmi::encode(Pdus::GetRequest(GetRequest(pdu(id, 0, 0, binds)))).unwrap()
}

fn register(id: i64, addrs: &[[u8; ADDRESS_LEN]], value: i64) -> Vec<u8> {
    let binds = addrs
        .iter()
        .map(|a| bind(&octets_index(o::ADDRESS_STATUS, 0, a), integer(value)))
        .collect();
    ilmi::encode(Pdus::SetRequest(SetRequest(pdu(id, 0, 0, binds)))).unwrap()
}

fn response(id: i64) -> Vec<u8> {
    ilmi::encode(Pdus::GetResponse(GetResponse(pdu(id, 0, 0, vec![])))).unwrap()
}

/// Everything sent, decoded.
fn sent(p: &mut NetworkSide) -> Vec<Pdus> {
    std::iter::from_fn(|| p.poll_transmit())
        .map(|b| {
            ilmi::decode(&b)
                .expect("what the switch sends decodes")
                .data
        })
        .collect()
}

fn events(p: &mut NetworkSide) -> Vec<Event> {
    std::iter::from_fn(|| p.poll_event()).collect()
}

/// The prefix SetRequest among `pdus`: its request-id.
fn prefix_offer(pdus: &[Pdus]) -> Option<i64> {
    pdus.iter().find_map(|p| match p {
        Pdus::SetRequest(SetRequest(r)) => {
            let vb = &r.variable_bindings[0];
            let index = index_of(&vb.name, o::NET_PREFIX_STATUS).expect("atmfNetPrefixStatus");
            assert_eq!(
                parse_octets_index(index, PREFIX_LEN),
                Some((0, PREFIX.to_vec()))
            );
            assert_eq!(vb.name.len(), 27, "ilmid takes exactly 27 arcs");
            assert_eq!(as_int(&vb.value), Some(1));
            int(&r.request_id)
        }
        _ => None,
    })
}

fn reply(pdus: &[Pdus]) -> &Pdu {
    pdus.iter()
        .find_map(|p| match p {
            Pdus::GetResponse(GetResponse(r)) => Some(r),
            _ => None,
        })
        .expect("a GetResponse")
}

#[test]
fn a_user_that_starts_gets_the_prefix_and_registers_an_address_under_it() {
    let t0 = Instant::ZERO;
    let mut p = port(t0);
    // ilmid's start: coldStart, then the attachment point's GetRequest; nothing is
    // offered meanwhile (ilmid would start over).
    p.handle_message(t0, &cold_start(), |_| true).unwrap();
    assert!(sent(&mut p).is_empty(), "no answer to a coldStart");
    let t1 = t0 + Duration::from_millis(100);
    p.handle_message(
        t1,
        &request(
            1,
            &[
                o::PORT_MY_IDENTIFIER,
                o::PORT_MY_IF_NAME,
                o::MY_SYSTEM_IDENTIFIER,
                o::SYS_UP_TIME,
            ],
        ),
        |_| true,
    )
    .unwrap();
    let out = sent(&mut p);
    let r = reply(&out);
    assert_eq!(int(&r.request_id), Some(1));
    assert_eq!(int(&r.error_status), Some(status::NO_ERROR));
    let values: Vec<_> = r
        .variable_bindings
        .iter()
        .map(|v| v.value.clone())
        .collect();
    assert_eq!(values[0], integer(3));
    assert_eq!(values[1], octets(b"linux"));
    assert_eq!(values[2], octets(&[2, 0, 0, 0, 0, 1]));
    assert_eq!(values[3], ticks(10), "uptime in hundredths");
    assert!(
        prefix_offer(&out).is_none(),
        "not during the attachment-point check"
    );
    // The ATM layer group: a node, ILMI 4.0, UNI 4.0 (the user keeps its own).
    let layer = |c: u32| [o::ATM_LAYER, &[c, 0]].concat();
    let names = [
        layer(atm_layer::UNI_VERSION),
        layer(atm_layer::MAX_VPI_BITS),
        layer(atm_layer::MAX_VCI_BITS),
        layer(atm_layer::UNI_TYPE),
        layer(atm_layer::DEVICE_TYPE),
        o::ADDRESS_REGISTRATION_ADMIN_STATUS.to_vec(),
    ];
    let refs: Vec<&[u32]> = names.iter().map(Vec::as_slice).collect();
    p.handle_message(t1, &request(2, &refs), |_| true).unwrap();
    let out = sent(&mut p);
    let got: Vec<_> = reply(&out)
        .variable_bindings
        .iter()
        .map(|v| as_int(&v.value))
        .collect();
    assert_eq!(got, [4, 8, 16, 2, 2, 1].map(Some));
    let offer = prefix_offer(&out).expect("offered once the user reads its configuration");
    p.handle_message(t1, &request(3, &refs), |_| true).unwrap();
    assert!(
        prefix_offer(&sent(&mut p)).is_none(),
        "offered once, not per request"
    );
    // The user answers the prefix; then registers prefix + ESI + selector.
    p.handle_message(t1, &response(offer), |_| true).unwrap();
    assert!(p.prefix_taken());
    assert_eq!(p.poll_timeout(), None, "no more tries once taken");
    p.handle_message(t1, &register(3, &[address(0xe5)], 1), |_| true)
        .unwrap();
    let out = sent(&mut p);
    assert_eq!(int(&reply(&out).error_status), Some(status::NO_ERROR));
    assert_eq!(events(&mut p), [Event::Registered(address(0xe5))]);
    assert_eq!(p.registered().collect::<Vec<_>>(), [&address(0xe5)]);
    // The same again changes nothing; withdrawing it ends it.
    p.handle_message(t1, &register(4, &[address(0xe5)], 1), |_| true)
        .unwrap();
    assert_eq!(events(&mut p), []);
    p.handle_message(t1, &register(5, &[address(0xe5)], 2), |_| true)
        .unwrap();
    assert_eq!(events(&mut p), [Event::Deregistered(address(0xe5))]);
}

#[test]
fn an_address_outside_the_prefix_or_past_the_table_is_refused() {
    let t0 = Instant::ZERO;
    let mut p = port(t0);
    let mut other = address(1);
    other[3] ^= 0xff;
    p.handle_message(t0, &register(1, &[other], 1), |_| true)
        .unwrap();
    let out = sent(&mut p);
    let r = reply(&out);
    assert_eq!(int(&r.error_status), Some(status::BAD_VALUE));
    assert_eq!(int(&r.error_index), Some(1));
    assert_eq!(events(&mut p), []);
    // A bad binding refuses the whole request: nothing of it is registered.
    p.handle_message(t0, &register(2, &[address(1), other], 1), |_| true)
        .unwrap();
    assert_eq!(int(&reply(&sent(&mut p)).error_index), Some(2));
    assert_eq!(events(&mut p), []);
    // 16 registrations do not fit one 484-octet message: eight at a time.
    let all: Vec<_> = (0..MAX_ADDRESSES as u8).map(address).collect();
    for (k, eight) in all.chunks(8).enumerate() {
        p.handle_message(t0, &register(30 + k as i64, eight, 1), |_| true)
            .unwrap();
        sent(&mut p);
    }
    assert_eq!(events(&mut p).len(), MAX_ADDRESSES);
    p.handle_message(t0, &register(4, &[address(200)], 1), |_| true)
        .unwrap();
    assert_eq!(
        int(&reply(&sent(&mut p)).error_status),
        Some(status::BAD_VALUE)
    );
    assert_eq!(events(&mut p), []);
    assert_eq!(p.stats().refused, 3);
    // One the switch routes to another port: refused too.
    let mut q = port(t0);
    q.handle_message(t0, &register(6, &[address(7)], 1), |a| *a != address(7))
        .unwrap();
    assert_eq!(
        int(&reply(&sent(&mut q)).error_status),
        Some(status::BAD_VALUE)
    );
    assert_eq!(events(&mut q), []);
    // Writing anything else: noSuchName.
    let set = ilmi::encode(Pdus::SetRequest(SetRequest(pdu(
        5,
        0,
        0,
        vec![bind(o::SYS_UP_TIME, integer(0))],
    ))))
    .unwrap();
    p.handle_message(t0, &set, |_| true).unwrap();
    assert_eq!(
        int(&reply(&sent(&mut p)).error_status),
        Some(status::NO_SUCH_NAME)
    );
}

#[test]
fn a_cold_start_or_a_lost_link_ends_every_registration() {
    let t0 = Instant::ZERO;
    let mut p = port(t0);
    p.handle_message(t0, &register(1, &[address(1), address(2)], 1), |_| true)
        .unwrap();
    assert_eq!(events(&mut p).len(), 2);
    sent(&mut p);
    p.handle_message(t0, &cold_start(), |_| true).unwrap();
    let mut gone = events(&mut p);
    gone.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        gone,
        [
            Event::Deregistered(address(1)),
            Event::Deregistered(address(2))
        ]
    );
    assert!(sent(&mut p).is_empty(), "nothing until the user asks again");
    p.handle_message(
        t0,
        &request(7, &[&[o::ATM_LAYER, &[9, 0]].concat()]),
        |_| true,
    )
    .unwrap();
    assert!(prefix_offer(&sent(&mut p)).is_some(), "offered again");
    p.handle_message(t0, &register(2, &[address(3)], 1), |_| true)
        .unwrap();
    events(&mut p);
    p.link_lost();
    assert_eq!(events(&mut p), [Event::Deregistered(address(3))]);
    assert!(sent(&mut p).is_empty());
    // The link back: the switch's own coldStart, and nothing registered.
    p.link_up(t0);
    let out = sent(&mut p);
    assert!(matches!(&out[..], [Pdus::Trap(t)] if int(&t.generic_trap) == Some(0)));
    assert_eq!(p.registered().count(), 0);
}

#[test]
fn the_prefix_is_offered_again_until_answered_then_no_more() {
    let mut now = Instant::ZERO;
    let mut p = port(now);
    let config = [o::ATM_LAYER, &[atm_layer::DEVICE_TYPE, 0]].concat();
    p.handle_message(now, &request(1, &[&config]), |_| true)
        .unwrap();
    let mut ids = vec![prefix_offer(&sent(&mut p)).expect("offered on the configuration query")];
    while let Some(t) = p.poll_timeout() {
        assert_eq!(t, now + PREFIX_RETRY);
        now = t;
        p.handle_timeout(now);
        ids.extend(prefix_offer(&sent(&mut p)));
    }
    assert_eq!(ids.len(), PREFIX_TRIES as usize);
    let mut distinct = ids.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "a new request-id each try");
    // A late answer to an old try does not count; after the next coldStart the
    // configuration query brings it again.
    p.handle_message(now, &response(ids[0]), |_| true).unwrap();
    assert!(!p.prefix_taken());
    p.handle_message(now, &cold_start(), |_| true).unwrap();
    p.handle_message(now, &request(2, &[&config]), |_| true)
        .unwrap();
    assert!(prefix_offer(&sent(&mut p)).is_some());
}

#[test]
fn unknown_names_and_walks_are_no_such_name_with_the_request_id() {
    let t0 = Instant::ZERO;
    let mut p = port(t0);
    p.handle_message(
        t0,
        &request(9, &[o::SYS_UP_TIME, &[1, 3, 6, 1, 9, 9]]),
        |_| true,
    )
    .unwrap();
    let out = sent(&mut p);
    let r = reply(&out);
    assert_eq!(int(&r.request_id), Some(9));
    assert_eq!(int(&r.error_status), Some(status::NO_SUCH_NAME));
    assert_eq!(int(&r.error_index), Some(2));
    let walk = ilmi::encode(Pdus::GetNextRequest(GetNextRequest(pdu(
        10,
        0,
        0,
        vec![bind(o::ADDRESS_STATUS, null())],
    ))))
    .unwrap();
    p.handle_message(t0, &walk, |_| true).unwrap();
    let out = sent(&mut p);
    assert_eq!(int(&reply(&out).request_id), Some(10));
    assert_eq!(int(&reply(&out).error_status), Some(status::NO_SUCH_NAME));
}

#[test]
fn bad_input_is_dropped_and_counted_and_answers_nothing() {
    let t0 = Instant::ZERO;
    let mut p = port(t0);
    for junk in [&b""[..], b"\x30\x00", &[0xff; 600], b"\xa0\x03\x02\x01\x00"] {
        assert!(p.handle_message(t0, junk, |_| true).is_err());
    }
    assert_eq!(p.stats().dropped, 4);
    assert!(sent(&mut p).is_empty());
    assert_eq!(events(&mut p), []);
}

proptest::proptest! {
    /// Any SDU, and valid messages with octets flipped: a typed error or an answer,
    /// never a panic; at most the answer and the prefix offer per message; nothing
    /// registered outside the prefix.
    #[test]
    fn no_input_breaks_the_port(
        junk in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
        flips in proptest::collection::vec((0usize..200, 1u8..=255), 0..4),
        which in 0usize..4,
    ) {
        let t0 = Instant::ZERO;
        let mut p = port(t0);
        let mut valid = [
            cold_start(),
            request(1, &[o::SYS_UP_TIME, &[o::ATM_LAYER, &[10, 0]].concat()]),
            register(2, &[address(1)], 1),
            response(1),
        ][which].clone();
        for (at, x) in flips {
            if let Some(b) = valid.get_mut(at) {
                *b ^= x;
            }
        }
        for sdu in [&junk[..], &valid[..]] {
            let _ = p.handle_message(t0, sdu, |_| true);
            let out = sent(&mut p);
            proptest::prop_assert!(out.len() <= 2);
            for e in events(&mut p) {
                if let Event::Registered(a) = e {
                    proptest::prop_assert_eq!(&a[..PREFIX_LEN], &PREFIX[..]);
                }
            }
        }
    }
}
