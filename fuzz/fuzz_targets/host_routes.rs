//! Fuzzes a host port's routing (`natm_proto::endpoint::HostRoutes`, issue 30): any
//! datagram a hostile sender makes is either routed to an end that holds a route or
//! dropped, never to an end that was removed, and never panics. The first octets pick
//! the routes; the rest is the datagram.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::endpoint::{HostKey, HostRoutes, Route};

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (head, datagram) = data.split_at(8);
    let cookie = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let vci = u16::from_be_bytes([head[4], head[5]]);
    let mut r = HostRoutes::new();
    let route = Route {
        tx_vci: vci,
        rx_vci: vci.wrapping_add(u16::from(head[6])),
        cookie,
    };
    let bare = head[7] & 1 == 1;
    let _ = r.insert(&HostKey::of(route, bare), 1u32);
    let _ = r.insert(&HostKey::of(route, !bare), 2u32);
    if head[7] & 2 == 2 {
        let _ = r.set_acceptor(3u32);
    }
    if let Some(end) = r.route(datagram) {
        assert!((1..=3).contains(&end), "routed to {end}, which holds no route");
    }
    r.remove(1);
    r.remove(2);
    r.remove(3);
    assert!(r.is_empty());
    assert_eq!(r.route(datagram), None, "routed after every end was removed");
});
