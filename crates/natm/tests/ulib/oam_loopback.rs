//! OAM F5 loopback between two natm end points (no switch): an end-to-end probe is
//! answered by the far end's engine on the same VC, in either direction and over
//! either adaptor; a segment probe has nobody to answer it (the first switch would);
//! the data path is not disturbed.

use natm::ulib::Wait;
use std::time::Duration;

use natm::ulib::{Connection, Host, LinkMode};
use natm::wire::oam::Scope;

pub(crate) fn connect(a: &Host, b: &Host, at: &str, qos: &str) -> (Connection, Connection) {
    let l = b.bind(at, qos).unwrap();
    let addr = l.local_addr().unwrap();
    let (a, q) = (a.clone(), qos.to_string());
    let t = std::thread::spawn(move || a.connect(addr, &q).unwrap());
    let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
    (t.join().unwrap(), server)
}

pub(crate) fn check_pair(c: &Connection, s: &Connection) {
    let wait = Duration::from_secs(2);
    for i in 0..5 {
        let rtt = c.oam_loopback(Scope::EndToEnd, wait).unwrap();
        assert!(rtt.is_some_and(|r| r < wait), "probe {i}: {rtt:?}");
    }
    // The other way round: the callee probes the caller.
    assert!(s.oam_loopback(Scope::EndToEnd, wait).unwrap().is_some());
    // Segment: an end point does not answer it, so the probe times out.
    let t = std::time::Instant::now();
    let short = Duration::from_millis(150);
    assert_eq!(c.oam_loopback(Scope::Segment, short).unwrap(), None);
    assert!(t.elapsed() >= short);
    // Data still flows, and OAM frames never reached the transport.
    c.send(b"after the probes", Wait::Block).unwrap();
    assert_eq!(
        s.recv(Wait::For(wait)).unwrap().as_deref(),
        Some(&b"after the probes"[..])
    );
    let (co, so) = (c.stats().oam, s.stats().oam);
    assert_eq!((co.probes_sent, co.answers, co.looped), (6, 5, 1));
    assert_eq!((so.probes_sent, so.answers, so.looped), (1, 1, 5));
    assert_eq!((so.ignored, so.unmatched, so.malformed), (1, 0, 0));
    assert_eq!(c.stats().refused_frames + s.stats().refused_frames, 0);
}

#[test]
fn end_to_end_probes_are_answered_over_udp() {
    let a = Host::open(crate::support::host_config()).unwrap();
    let b = Host::open(crate::support::host_config()).unwrap();
    let (c, s) = connect(&a, &b, "127.0.0.1:0", "reliable");
    check_pair(&c, &s);
}

/// Several direct calls between one pair of hosts: on one port per host they all ride
/// VCIs 32 and 33, and each call's probes and answers still reach that call's ends
/// (the oldest call's too, which the port once handed to the newest).
#[test]
fn each_of_several_direct_calls_between_two_hosts_gets_its_own_answers() {
    let a = Host::open(crate::support::host_config()).unwrap();
    let b = Host::open(crate::support::host_config()).unwrap();
    let l = b.bind("127.0.0.1:0", "reliable").unwrap();
    let addr = l.local_addr().unwrap();
    let pairs: Vec<(Connection, Connection)> = (0..3)
        .map(|_| {
            let a = a.clone();
            let t = std::thread::spawn(move || a.connect(addr, "reliable").unwrap());
            let s = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
            (t.join().unwrap(), s)
        })
        .collect();
    for (c, s) in &pairs {
        check_pair(c, s);
    }
}

#[test]
fn end_to_end_probes_are_answered_in_cell_mode() {
    // Each OAM frame travels as one OAM cell in a train, and comes back as one.
    let mut cfg = crate::support::host_config();
    cfg.engine.link_mode = LinkMode::Cell { train: 8 };
    let a = Host::open(cfg.clone()).unwrap();
    let b = Host::open(cfg).unwrap();
    let (c, s) = connect(&a, &b, "127.0.0.1:0", "best-effort");
    check_pair(&c, &s);
}
