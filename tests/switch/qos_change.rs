//! QoS changes on an open call (seed 003 `setqos`, issue 19), SYNC round-trip probes
//! and the status flags, between two sigds on loopback and through a `natm switch`.
//!
//! A guaranteed VC reserved at 8 Mbit/s with a floor of 1 Mbit/s sends at R = 4
//! Mbit/s, then 2R, then R/2: the receiver's measured rate follows each change in
//! direction (no timing asserted); a change beyond the agreed bounds is refused and
//! the rate stays. The receiver sees the status flags with every message. A
//! best-effort VC, which has no ACKs, gets its RTT from SYNC probes.

use natm::ulib::Wait;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sigd_support::{free_port, pair, Sigd, LINK};
use crate::switch_support::SwitchProc;
use natm::ulib::{Connection, Error, Host, HostConfig, QosOutcome};

const MBPS: u64 = 1_000_000;
/// Reserved at 8 Mbit/s; may go down to 1 Mbit/s.
const QOS: &str = "cbr:pcr=8Mbps,min_pcr=1Mbps";
/// How long each rate is held.
const PHASE: Duration = Duration::from_millis(1500);

fn host(sigd: &Sigd) -> Host {
    Host::open(HostConfig {
        sigd_socket: Some(sigd.socket.clone()),
        connect_timeout: Duration::from_secs(5),
        ..HostConfig::default()
    })
    .unwrap()
}

/// What the receiver saw: per rate it was told of, the bytes and the time they
/// arrived in; and whether every message carried start and end.
#[derive(Default)]
struct Seen {
    phases: Vec<Phase>,
    every_message_whole: bool,
    peer_changes: Vec<QosOutcome>,
    ended_closed: bool,
}

/// Data that arrived while the peer was at one rate: its bytes, when the last came,
/// and the time it was arriving over.
struct Phase {
    bps: u64,
    bytes: usize,
    last: Instant,
    /// The gaps between its messages, those of an idle sender left out: the caller
    /// stops sending while it checks the switch or changes the rate again.
    active: Duration,
}

/// A gap between two messages longer than this is the sender idle, not the rate (at
/// the lowest rate, 1 Mbit/s, a 4000-byte message takes 32 ms).
const IDLE: Duration = Duration::from_millis(100);

impl Seen {
    fn rate(&self, bps: u64) -> f64 {
        let p = self
            .phases
            .iter()
            .find(|p| p.bps == bps)
            .unwrap_or_else(|| panic!("no data while at {bps} bit/s"));
        p.bytes as f64 * 8.0 / p.active.as_secs_f64().max(1e-3)
    }
}

/// Receive until the end of data, splitting what arrived by the rate the peer was
/// at (the receiver learns each change from the peer's QOS TPDU).
fn receive(c: &Connection) -> Seen {
    let mut seen = Seen {
        every_message_whole: true,
        ..Seen::default()
    };
    loop {
        let (m, st) = c.recv_with_status(Duration::from_secs(10)).unwrap();
        let Some(m) = m else {
            seen.ended_closed = st.peer_closed;
            return seen;
        };
        seen.every_message_whole &= st.message_start && st.message_end;
        if let Some(q) = st.peer_qos {
            if seen.peer_changes.last() != Some(&q) {
                seen.peer_changes.push(q);
            }
        }
        let now = Instant::now();
        match seen.phases.last_mut() {
            Some(p) if p.bps == st.rx_rate_bps => {
                let gap = now.duration_since(p.last);
                if gap < IDLE {
                    p.active += gap;
                    p.bytes += m.len();
                }
                p.last = now;
            }
            _ => seen.phases.push(Phase {
                bps: st.rx_rate_bps,
                bytes: 0,
                last: now,
                active: Duration::ZERO,
            }),
        }
    }
}

/// Send at whatever rate the shaper allows for `d`.
fn send_for(c: &Connection, d: Duration) {
    let msg = vec![0x5a; 4000];
    let end = Instant::now() + d;
    while Instant::now() < end {
        c.send(&msg, Wait::Block).unwrap();
    }
}

/// The caller's side of the test: R, 2R, R/2, then a refused change.
fn change_rates(c: &Connection) {
    let granted = c.granted().expect("a call through sigd").tx_bps;
    assert_eq!(granted, 8 * MBPS);
    for (qos, bps) in [
        ("cbr:pcr=4Mbps", 4 * MBPS),
        ("cbr:pcr=8Mbps", 8 * MBPS),
        ("cbr:pcr=2Mbps", 2 * MBPS),
    ] {
        let ch = c.set_qos(qos, Duration::from_secs(5)).unwrap();
        assert_eq!(ch.rate_bps, bps);
        let st = c.status();
        assert!(!st.qos_pending);
        assert_eq!(st.qos, Some(QosOutcome::Changed { rate: bps }));
        assert_eq!(st.tx_rate_bps, bps);
        assert_eq!(c.stats().rate_bps, Some(bps));
        send_for(c, PHASE);
    }
    // Beyond what was reserved: refused at once, nothing asked, the rate stays.
    match c.set_qos("cbr:pcr=16Mbps", Duration::from_secs(5)) {
        Err(Error::QosBounds(b)) => assert_eq!((b.min, b.max), (MBPS, 8 * MBPS)),
        other => panic!("a change beyond the grant: {other:?}"),
    }
    assert_eq!(c.stats().rate_bps, Some(2 * MBPS));
    assert_eq!(c.status().tx_rate_bps, 2 * MBPS);
    // A text without a rate changes nothing either.
    assert!(matches!(
        c.set_qos("ubr", Duration::from_secs(1)),
        Err(Error::QosNotNegotiable(_))
    ));
    c.close();
    c.flush(Duration::from_secs(10)).unwrap();
}

fn check(seen: &Seen) {
    let (r, two_r, half_r) = (
        seen.rate(4 * MBPS),
        seen.rate(8 * MBPS),
        seen.rate(2 * MBPS),
    );
    assert!(
        two_r > 1.3 * r,
        "2R measured {two_r:.0} bit/s after R {r:.0}"
    );
    assert!(
        half_r < 0.75 * r,
        "R/2 measured {half_r:.0} bit/s after R {r:.0}"
    );
    assert!(seen.every_message_whole);
    assert!(seen.ended_closed);
    // A raise can race the peer's sigd: its `QosChanged` (the receiver's new bound)
    // goes through the receiving application's session thread, the QOS TPDU straight
    // to the VC, so the first QOS may be refused and the caller's `set_qos` asks again
    // (`Connection::set_qos_through`). The receiver then hears that refusal, and the
    // change right after it; no other refusal, and the changes in force are R, 2R, R/2.
    let mut in_force = Vec::new();
    let mut changes = seen.peer_changes.iter().peekable();
    while let Some(q) = changes.next() {
        match *q {
            QosOutcome::Refused { rate } => assert_eq!(
                changes.peek(),
                Some(&&QosOutcome::Changed { rate }),
                "a refusal not followed by the same change: {:?}",
                seen.peer_changes
            ),
            changed => in_force.push(changed),
        }
    }
    assert_eq!(
        in_force,
        [4, 8, 2].map(|m| QosOutcome::Changed { rate: m * MBPS })
    );
}

/// `a` calls `b` (addresses `to`), the QoS changes on the way; the receiver checks.
fn qos_changes_between(a: &Sigd, b: &Sigd, to: &str) {
    let hb = host(b);
    let l = hb.bind("qos", QOS).unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
        receive(&c)
    });
    let ha = host(a);
    let c = ha.connect(format!("{to}:qos"), QOS).unwrap();
    change_rates(&c);
    drop(c);
    check(&t.join().unwrap());
}

#[test]
fn rate_changes_between_two_hosts_are_confirmed_and_followed() {
    let (a, b) = pair(LINK, LINK);
    qos_changes_between(&a, &b, "+4420002");
}

/// Two hosts' sigds (+4420001, +4420002) whose only link is one `natm switch`,
/// with both links up.
fn two_hosts_through_a_switch() -> (SwitchProc, Sigd, Sigd) {
    let [h1, h2, s1h1, s1h2] = std::array::from_fn(|_| free_port());
    let port = |name: &str, bind: SocketAddr, peer: SocketAddr| {
        format!(
            "[[port]]\nname = \"{name}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = \"frame\"\nline_rate = 1000000000\nbuffer = 16384\nsignalling = \"host\"\n"
        )
    };
    let route = |p: &str, port: &str| format!("[[route]]\nprefix = \"{p}\"\nport = \"{port}\"\n");
    let s = SwitchProc::start(
        "s1",
        &[
            port("h1", s1h1, h1),
            port("h2", s1h2, h2),
            route("+4420001", "h1"),
            route("+4420002", "h2"),
        ]
        .concat(),
    );
    let start = |n: u8, sig: SocketAddr, sw: SocketAddr| {
        Sigd::start_at(
            &format!(
                "addresses = [\"+442000{n}\"]\n{LINK}\n[[directory]]\nprefix = \"*\"\npeer = \"{sw}\"\nswitch = true\n"
            ),
            sig,
        )
    };
    let (a, b) = (start(1, h1, s1h1), start(2, h2, s1h2));
    let until = Instant::now() + Duration::from_secs(20);
    while [&a, &b].iter().any(|h| h.stat()["peers"][0]["up"] != true) {
        assert!(Instant::now() < until, "links not up: {}", s.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    (s, a, b)
}

#[test]
fn rate_changes_cross_a_switch() {
    let (_switch, a, b) = two_hosts_through_a_switch();
    qos_changes_between(&a, &b, "+4420002");
}

#[test]
fn a_best_effort_call_gets_an_rtt_from_sync() {
    let (a, b) = pair(LINK, LINK);
    let hb = host(&b);
    let l = hb.bind("be", "ubr").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
        while !d.load(Ordering::Relaxed) {
            let _ = c.recv(Wait::For(Duration::from_millis(100)));
        }
        c.stats()
    });
    let ha = host(&a);
    let c = ha.connect("+4420002:be", "ubr").unwrap();
    // No data: the SYNC at the start and the next, a second later, time the path.
    let until = Instant::now() + Duration::from_secs(10);
    while c.stats().srtt.is_none() {
        assert!(Instant::now() < until, "no RTT: {:?}", c.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = c.stats();
    assert!(s.srtt.unwrap() < Duration::from_secs(1), "{s:?}");
    assert!(s.tx.sync_echoes >= 1 && s.tx.acks_received == 0, "{s:?}");
    done.store(true, Ordering::Relaxed);
    let theirs = t.join().unwrap();
    // The callee's VC was probed too: its own SYNCs got answers.
    assert_eq!(theirs.rx.acks_sent, 0);
    drop(c);
}

/// Reserved at R = 4 Mbit/s each way, renegotiable from 1 up to 4R through the
/// network (Q.2963.1 modification, every hop re-running admission).
const NET_QOS: &str = "cbr:pcr=4Mbps,max_pcr=16Mbps,min_pcr=1Mbps";

/// The reservation sigd `s` holds for the call with [`NET_QOS`]'s bound, out and in.
fn reservation(s: &Sigd) -> (u64, u64) {
    let st = s.stat();
    let row = st["calls"]
        .as_array()
        .and_then(|c| {
            c.iter().find(|r| {
                r["qos"]
                    .as_str()
                    .is_some_and(|q| q.contains("max_pcr=16Mbps"))
            })
        })
        .cloned()
        .unwrap_or_else(|| panic!("no call with max_pcr in {st}"));
    (
        row["reserved_out_bps"].as_u64().unwrap(),
        row["reserved_in_bps"].as_u64().unwrap(),
    )
}

/// `a` calls `b` with [`NET_QOS`]; the caller goes to 2R (the network confirms it at
/// every hop, the receiver's rate rises), back to R/2 (the bandwidth is freed: a
/// second call that needs it is set up), then asks for 2R again while that call
/// holds the bandwidth (refused with cause 37, the rate stays) and for more than 4R
/// (refused at once). `on_raise` checks the switch, if any. The times of the
/// changes through the network and of in-band ones, for docs/PERFORMANCE.md.
fn network_changes_between(
    a: &Sigd,
    b: &Sigd,
    to: &str,
    on_raise: &dyn Fn(),
) -> (Vec<Duration>, Vec<Duration>) {
    let hb = host(b);
    let l = hb.bind("net", NET_QOS).unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
        receive(&c)
    });
    let ha = host(a);
    let c = ha.connect(format!("{to}:net"), NET_QOS).unwrap();
    assert_eq!(c.granted().unwrap().tx_bps, 4 * MBPS);
    send_for(&c, PHASE);

    let up = c.set_qos("cbr:pcr=8Mbps", Duration::from_secs(10)).unwrap();
    assert_eq!(up.rate_bps, 8 * MBPS);
    assert_eq!(c.status().tx_rate_bps, 8 * MBPS);
    assert_eq!(reservation(a), (8 * MBPS, 4 * MBPS));
    let (out, inn) = reservation(b);
    assert_eq!(out, 4 * MBPS);
    assert!((8 * MBPS..8 * MBPS + 384).contains(&inn), "{inn}");
    on_raise();
    send_for(&c, PHASE);

    // Timing: raises and decreases through the network, and in-band changes to the
    // rate already reserved (the QOS/QOS-ACK round trip alone).
    let (mut net, mut inband) = (vec![up.took], Vec::new());
    for _ in 0..5 {
        net.push(
            c.set_qos("cbr:pcr=6Mbps", Duration::from_secs(10))
                .unwrap()
                .took,
        );
        inband.push(
            c.set_qos("cbr:pcr=6Mbps", Duration::from_secs(10))
                .unwrap()
                .took,
        );
        net.push(
            c.set_qos("cbr:pcr=8Mbps", Duration::from_secs(10))
                .unwrap()
                .took,
        );
        inband.push(
            c.set_qos("cbr:pcr=8Mbps", Duration::from_secs(10))
                .unwrap()
                .took,
        );
    }

    let down = c.set_qos("cbr:pcr=2Mbps", Duration::from_secs(10)).unwrap();
    assert_eq!(down.rate_bps, 2 * MBPS);
    assert_eq!(reservation(a), (2 * MBPS, 4 * MBPS));
    // 94 Mbit/s each way fits the 100 Mbit/s links only because 6 were given back.
    let hog = hb.bind("hog", "cbr:pcr=94Mbps").unwrap();
    let ht = std::thread::spawn(move || hog.accept(Wait::For(Duration::from_secs(10))));
    let h = ha.connect(format!("{to}:hog"), "cbr:pcr=94Mbps").unwrap();
    let held = ht.join().unwrap().unwrap();
    match c.set_qos("cbr:pcr=8Mbps", Duration::from_secs(10)) {
        Err(Error::Refused { cause, detail }) => assert_eq!(cause, 37, "{detail}"),
        other => panic!("a raise with the bandwidth taken: {other:?}"),
    }
    assert_eq!(c.status().tx_rate_bps, 2 * MBPS);
    assert_eq!(reservation(a), (2 * MBPS, 4 * MBPS));
    // Beyond 4R: refused at once, nothing asked.
    match c.set_qos("cbr:pcr=20Mbps", Duration::from_secs(5)) {
        Err(Error::QosBounds(b)) => assert_eq!((b.min, b.max), (MBPS, 16 * MBPS)),
        other => panic!("a change beyond max_pcr: {other:?}"),
    }
    send_for(&c, PHASE);
    drop((h, held));
    c.close();
    c.flush(Duration::from_secs(10)).unwrap();
    drop(c);
    let seen = t.join().unwrap();
    let (r, two_r, half_r) = (
        seen.rate(4 * MBPS),
        seen.rate(8 * MBPS),
        seen.rate(2 * MBPS),
    );
    assert!(
        two_r > 1.3 * r,
        "2R measured {two_r:.0} bit/s after R {r:.0}"
    );
    assert!(
        half_r < 0.75 * r,
        "R/2 measured {half_r:.0} bit/s after R {r:.0}"
    );
    (net, inband)
}

fn median_ms(mut v: Vec<Duration>) -> String {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "median {:.2} ms (min {:.2}, max {:.2}, n={})",
        ms(v[v.len() / 2]),
        ms(v[0]),
        ms(v[v.len() - 1]),
        v.len()
    )
}

#[test]
fn a_change_beyond_the_reservation_goes_through_both_sigds() {
    let (a, b) = pair(LINK, LINK);
    let (net, inband) = network_changes_between(&a, &b, "+4420002", &|| {});
    eprintln!(
        "direct: through the network {}; in band {}",
        median_ms(net),
        median_ms(inband)
    );
}

#[test]
fn a_change_beyond_the_reservation_goes_through_a_switch() {
    let (s, a, b) = two_hosts_through_a_switch();
    let (net, inband) = network_changes_between(&a, &b, "+4420002", &|| {
        // The switch's forward reservation follows the raise: 8 Mbit/s of payload
        // and the TPDUs' overhead, in cells per second, above what 4 would need.
        let st = s.stat_until(|st| {
            st["calls"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|r| r["reserved_cells"][0].as_u64() > Some(8_000_000 / 384))
            })
        });
        let row = st["calls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["qos"].as_str().is_some_and(|q| q.contains("max_pcr")))
            .cloned()
            .unwrap();
        assert!(
            row["reserved_cells"][1].as_u64() < Some(8_000_000 / 384),
            "{row}"
        );
    });
    eprintln!(
        "through a switch: through the network {}; in band {}",
        median_ms(net),
        median_ms(inband)
    );
}

/// The callee's counter-offer through a switch (issue 33): `b` accepts at 2 Mbit/s a
/// call asked at 8 (at least 1); the caller's connection is granted 2 and paced to
/// it, and the switch's call holds less than it was offered.
#[test]
fn a_callee_that_accepts_at_a_lower_rate_sets_the_callers_rate_through_a_switch() {
    let (s, a, b) = two_hosts_through_a_switch();
    let hb = host(&b);
    let l = hb.bind("qos", QOS).unwrap();
    let t = std::thread::spawn(move || {
        let offer = l.next_call(Wait::For(Duration::from_secs(10))).unwrap();
        let offered = offer.qos;
        let c = offer.accept_at(2 * MBPS, 2 * MBPS).unwrap();
        let mut got = 0usize;
        while let Ok(Some(m)) = c.recv(Wait::For(Duration::from_secs(5))) {
            got += m.len();
        }
        (offered, c.granted().cloned(), got)
    });
    let ha = host(&a);
    let c = ha.connect("+4420002:qos", QOS).unwrap();
    let g = c.granted().cloned().expect("through sigd");
    assert_eq!(g.tx_bps, 2 * MBPS, "{}", g.qos);
    assert_eq!(
        g.qos.tx().pcr.and_then(|r| r.bits_per_sec()),
        Some(2 * MBPS),
        "{}",
        g.qos
    );
    // The switch's reservation: 2 Mbit/s is about 5,300 cells/s on the wire, 8
    // would be four times that. The caller's CONNECT can arrive before the switch
    // has seen the call established (the stat then shows the offer's 8 Mbit/s):
    // wait for that.
    let st = s.stat_until(|st| {
        st["calls"].as_array().is_some_and(|c| c.len() == 1) && st["calls"][0]["active"] == true
    });
    let cells = st["calls"][0]["reserved_cells"][0].as_u64().unwrap_or(0);
    assert!((5_000..8_000).contains(&cells), "{}", st["calls"]);
    // 200 kB at the granted 2 Mbit/s, then the call ends.
    let msg = vec![7u8; 4000];
    for _ in 0..50 {
        c.send(&msg[..], Wait::Block).unwrap();
    }
    drop(c);
    let (offered, callee_granted, got) = t.join().unwrap();
    assert_eq!(
        offered.rx().pcr.and_then(|r| r.bits_per_sec()),
        Some(8 * MBPS),
        "the offer was the caller's 8 Mbit/s"
    );
    let cg = callee_granted.expect("through sigd");
    assert_eq!(
        cg.qos.rx().pcr.and_then(|r| r.bits_per_sec()),
        Some(2 * MBPS),
        "{}",
        cg.qos
    );
    assert_eq!(got, 200_000);
}
