//! Bare AAL5 calls (`transport=none`) between two sigds on loopback: set up by
//! signalling like any call, then plain SDUs on the data path — no TPDU header, no
//! handshake, no ACK. Both ends are natm applications (the library); the CLI's own
//! tests are in `switch/bare_cli.rs`.

use natm::ulib::Wait;
use std::time::Duration;

use crate::sigd_support::{pair, LINK};
use natm::ulib::Error;
use natm::wire::vcframe;

fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + seed * 7) % 251) as u8).collect()
}

#[test]
fn a_bare_call_echoes_sdus_byte_exact_and_ends_with_the_release() {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb.bind("echo", "ubr").unwrap();
    let t = std::thread::spawn(move || {
        let call = l.next_call(Wait::For(Duration::from_secs(10))).unwrap();
        assert!(call.qos.is_bare(), "{}", call.qos);
        let c = call.accept().unwrap();
        let mut n = 0u64;
        // The caller's release is the end of data: a bare VC has no close of its own.
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            c.send(&m, Wait::Block).unwrap();
            n += 1;
        }
        let s = c.stats().bare.expect("bare counters");
        assert_eq!((s.rx.sdus_received, s.tx.sdus_sent), (n, n));
        assert!(c.stats().srtt.is_none(), "no ACK, so no RTT");
        n
    });
    let ha = a.host();
    let c = ha.connect("+4420002:echo", "ubr:transport=none").unwrap();
    assert!(c.granted().unwrap().qos.is_bare());
    for i in 0..40usize {
        let msg = pattern(1 + i * 229, i);
        c.send(&msg, Wait::Block).unwrap();
        let back = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
        assert_eq!(back, msg, "message {i} comes back whole, as one SDU");
    }
    let s = c.stats();
    let bare = s.bare.expect("bare counters");
    assert_eq!((bare.tx.sdus_sent, bare.rx.sdus_received), (40, 40));
    assert_eq!(s.tx.retx_fast + s.tx.retx_timeout + s.tx.acks_received, 0);
    drop(c);
    assert!(ha.linger(Duration::from_secs(5)));
    assert_eq!(t.join().unwrap(), 40);
    a.wait_no_calls();
    b.wait_no_calls();
}

#[test]
fn a_shaped_cbr_bare_call_moves_a_load_byte_exact_and_reserves_its_rate() {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb.bind("sink", "cbr:pcr=20Mbps,transport=none").unwrap();
    let total = 1_500_000usize;
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::Block).unwrap();
        let mut got = Vec::with_capacity(total);
        let mut sizes = Vec::new();
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            sizes.push(m.len());
            got.extend_from_slice(&m);
        }
        let drops = c.stats().bare.unwrap().rx;
        (got, sizes, drops)
    });
    let ha = a.host();
    let c = ha
        .connect(
            "+4420002:sink",
            "cbr:pcr=20Mbps,transport=none,max_sdu=8000",
        )
        .unwrap();
    let g = c.granted().unwrap();
    assert_eq!(
        g.tx_bps, 20_000_000,
        "a bare CBR call reserves like any: {g:?}"
    );
    let data = pattern(total, 3);
    let start = std::time::Instant::now();
    for chunk in data.chunks(8000) {
        c.send(chunk, Wait::Block).unwrap();
    }
    c.close();
    c.flush(Duration::from_secs(10)).unwrap();
    let took = start.elapsed();
    let tx = c.stats().bare.unwrap().tx;
    assert_eq!(tx.sdus_sent, total.div_ceil(8000) as u64);
    // The shaper held the SDUs to 20 Mbit/s (plus AAL5's cell tax): 1.5 MB cannot
    // leave in less than 0.6 s. A floor, not a timing measurement: it only fails if
    // the shaper does not shape.
    assert!(took >= Duration::from_millis(550), "{took:?}");
    assert!(tx.shaped > 0, "{tx:?}");
    drop(c);
    assert!(ha.linger(Duration::from_secs(5)));
    let (got, sizes, drops) = t.join().unwrap();
    assert_eq!(
        drops.dropped_queue_full + drops.dropped_too_big,
        0,
        "{drops:?}"
    );
    assert!(sizes.iter().all(|&s| s <= 8000), "one SDU per message");
    assert_eq!(got.len(), data.len());
    assert!(got == data, "byte-exact");
}

#[test]
fn an_oversize_send_is_refused_and_nothing_leaves() {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb.bind("x", "ubr").unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::Block).unwrap();
        let first = c.recv(Wait::For(Duration::from_secs(10))).unwrap().unwrap();
        let rest = c.recv(Wait::For(Duration::from_secs(10))).unwrap();
        (first, rest, c.stats().bare.unwrap().rx)
    });
    let ha = a.host();
    let c = ha
        .connect(
            "+4420002:x",
            "ubr:transport=none,tx:max_sdu=1000,rx:max_sdu=2000",
        )
        .unwrap();
    match c.send(&[1u8; 1001], Wait::Block) {
        Err(Error::MessageTooLarge {
            size: 1001,
            max: 1000,
        }) => {}
        other => panic!("expected MessageTooLarge, got {other:?}"),
    }
    assert!(matches!(c.send(&[], Wait::Block), Err(Error::EmptyMessage)));
    c.send(&[2u8; 1000], Wait::Block).unwrap();
    let bare = c.stats().bare.unwrap().tx;
    assert_eq!((bare.refused_too_big, bare.sdus_sent), (1, 1));
    drop(c);
    let (first, rest, rx) = t.join().unwrap();
    assert_eq!(first, vec![2u8; 1000], "the refused message never left");
    assert_eq!(rest, None, "then the release");
    assert_eq!(rx.sdus_received, 1);
}

#[test]
fn direct_mode_and_a_natm_listener_qos_are_told_apart() {
    let (a, _b) = pair(LINK, LINK);
    let ha = a.host();
    match ha.connect("127.0.0.1:9", "ubr:transport=none") {
        Err(Error::Qos(m)) => assert!(m.contains("PVC"), "{m}"),
        other => panic!("expected a QoS error, got {other:?}"),
    }
    match ha.open_pvc(0, 5, "127.0.0.1:9".parse().unwrap(), "ubr:transport=none") {
        Err(Error::Qos(m)) => assert!(m.contains("reserved"), "{m}"),
        other => panic!("expected a reserved-VCI error, got {other:?}"),
    }
    match ha.open_pvc(0, 100, "127.0.0.1:9".parse().unwrap(), "ubr") {
        Err(Error::Qos(m)) => assert!(m.contains("transport=none"), "{m}"),
        other => panic!("expected a QoS error, got {other:?}"),
    }
}

#[test]
fn two_hosts_talk_over_a_bare_pvc_and_its_frames_are_plain_sdus() {
    let (a, _b) = pair(LINK, LINK);
    let (ha, hb) = (a.host(), a.host());
    let pa = crate::sigd_support::free_port();
    let pb = crate::sigd_support::free_port();
    let q = "ubr:transport=none";
    let ca = ha.open_pvc_from(pa, 1, 200, pb, q).unwrap();
    let cb = hb.open_pvc_from(pb, 1, 200, pa, q).unwrap();
    for i in 0..10usize {
        let m = pattern(100 + i * 900, i);
        ca.send(&m, Wait::Block).unwrap();
        assert_eq!(
            cb.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
            m
        );
        cb.send(&m[..50], Wait::Block).unwrap();
        assert_eq!(
            ca.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
            &m[..50]
        );
    }
    // What a PVC peer that is not natm (a switch port, Linux behind atmtcp) sees and
    // sends: the VC header, then the SDU itself.
    let raw = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let cr = ha.open_pvc(1, 300, raw.local_addr().unwrap(), q).unwrap();
    cr.send(b"to a foreign peer", Wait::Block).unwrap();
    let mut buf = [0u8; 128];
    let (n, from) = raw.recv_from(&mut buf).unwrap();
    let (h, sdu) = vcframe::Repr::parse_bytes(&buf[..n]).unwrap();
    assert_eq!((h.vpi, h.vci, sdu), (1, 300, &b"to a foreign peer"[..]));
    let mut reply = vcframe::Repr::data(1, 300).to_bytes().to_vec();
    reply.extend_from_slice(b"from a foreign peer");
    raw.send_to(&reply, from).unwrap();
    // A frame on another VC of the same link is not this PVC's: dropped, counted by
    // the PVC's own socket (a socket per VC end) or by the host's port, where no
    // route takes it (one port per host).
    let counted = || {
        let port: u64 = ha.ports().iter().map(|p| p.unrouted).sum();
        cr.stats().refused_frames + port
    };
    let before = counted();
    let mut stray = vcframe::Repr::data(1, 301).to_bytes().to_vec();
    stray.extend_from_slice(b"stray");
    raw.send_to(&stray, from).unwrap();
    assert_eq!(
        cr.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
        b"from a foreign peer"
    );
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while counted() == before {
        assert!(
            std::time::Instant::now() < until,
            "the stray frame is counted"
        );
        std::thread::sleep(Duration::from_millis(10));
        let _ = cr.recv(Wait::No);
    }
}
