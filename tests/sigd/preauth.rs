//! Pre-authorised listeners (`Accept::Auto`, issue 6's call-setup goal): sigd answers
//! SETUP with CONNECT itself on a data socket the listener opened ahead, so a caller
//! is connected before the called application runs. What must still hold: data
//! byte-exact both ways, the cookie check (also for frames that reached the socket
//! before the application took the call), policy and admission with their causes,
//! the backlog bound (cause 17), calls that do not fit the listener's QoS offered as
//! before, and crash cleanup of a listener with calls queued.

use natm::ulib::Wait;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::sigd_support::{helper_with, pair, LINK};
use natm::transport::AbortReason;
use natm::ulib::{Accept, Connection, Error};
use natm::wire::tpdu::{Header, TpduType};
use natm::wire::vcframe::Repr;

/// Waits until `c` has sent its first data TPDU (the window opens with one): on
/// loopback it is in the peer's socket then.
fn wait_first_tpdu(c: &Connection) {
    let until = Instant::now() + Duration::from_secs(10);
    while c.stats().tx.tpdus_sent == 0 {
        assert!(Instant::now() < until, "{:?}", c.stats());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The caller connects while nobody on B is in `accept`; a forged frame with a wrong
/// cookie reaches B's pre-opened socket before the application takes the call and is
/// dropped and counted then; the data is byte-exact both ways.
#[test]
fn a_pre_authorised_call_connects_before_accept_and_carries_data_exactly() {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb
        .bind_with("auto", "reliable", Accept::Auto { backlog: 4 })
        .unwrap();
    let ha = a.host();
    // Nobody accepts on B yet: sigd B answered the SETUP itself.
    let c = ha.connect("+4420002:auto", "reliable").unwrap();
    let st = b.stat();
    let row = st["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["direction"] == "in")
        .unwrap_or_else(|| panic!("{st}"))
        .clone();
    assert_eq!(row["state"], "active", "{st}");
    assert_eq!(st["counters"]["calls_pre_accepted"], 1, "{st}");
    assert_eq!(st["listeners"][0]["pre_authorised_free"], 3, "{st}");
    // A stranger's frame on B's receiving VC, with a wrong cookie, before accept.
    let data: SocketAddr = row["data"].as_str().unwrap().parse().unwrap();
    let rx_vci = row["rx_vci"].as_u64().unwrap() as u16;
    let forged = [
        Repr::data(0, rx_vci).to_bytes().to_vec(),
        Header {
            seq: 1,
            cookie: 0x0BAD_C0DE,
            ..Header::new(TpduType::Data)
        }
        .to_bytes()
        .to_vec(),
        b"forged".to_vec(),
    ]
    .concat();
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    stranger.send_to(&forged, data).unwrap();
    // Data sent before the application takes the call waits in B's socket.
    let early: Vec<u8> = (0..5000u32).map(|k| (k * 7) as u8).collect();
    c.send(&early, Wait::Block).unwrap();
    wait_first_tpdu(&c);
    let t = std::thread::spawn(move || {
        let p = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        while let Some(m) = p.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            got.extend_from_slice(&m);
            p.send(&m, Wait::Block).unwrap();
        }
        (got, p.stats(), l)
    });
    let mut sent = Vec::new();
    let mut echoed = Vec::new();
    sent.extend_from_slice(&early);
    for (i, n) in [1usize, 1024, 1025, 70_000].into_iter().enumerate() {
        let msg: Vec<u8> = (0..n).map(|k| (k * 31 + i * 7) as u8).collect();
        c.send(&msg, Wait::Block).unwrap();
        sent.extend_from_slice(&msg);
    }
    while echoed.len() < sent.len() {
        let m = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
        echoed.extend_from_slice(&m);
    }
    assert!(echoed == sent, "the echo differs");
    let mine = c.stats();
    c.close();
    c.flush(Duration::from_secs(5)).unwrap();
    drop(c);
    let (got, theirs, l) = t.join().unwrap();
    assert!(got == sent, "the callee received other bytes");
    // The stranger's frame: dropped on its cookie by the call's own socket (a socket
    // per VC end), or left unrouted by B's port (one port per host: no route takes
    // that cookie), never the connection's.
    let unrouted: u64 = hb.ports().iter().map(|p| p.unrouted).sum();
    if hb.ports().is_empty() {
        assert_eq!(theirs.rx.drop_bad_cookie, 1, "{theirs:?}");
    } else {
        assert_eq!(theirs.rx.drop_bad_cookie, 0, "{theirs:?}");
        assert!(unrouted >= 1, "B's port routed the stranger's frame");
    }
    assert_eq!((mine.rx.drop_bad_cookie, mine.tx.drop_bad_cookie), (0, 0));
    a.wait_no_calls();
    b.wait_no_calls();
    // The call's socket is not given back: the listener tops its backlog up only
    // when half is used (one message for several calls).
    assert_eq!(b.stat()["listeners"][0]["pre_authorised_free"], 3);
    drop(l);
}

#[test]
fn policy_and_admission_still_refuse_pre_authorised_calls() {
    // B admits at most 10 Mbit/s and rejects calls from +4420009.
    let (a, b) = pair(
        LINK,
        "[link]\ncapacity = \"10Mbps\"\ntpdu_cost_ns = 1000\n[[policy]]\naction = \"reject\"\nprefix = \"+4420001\"\ndirection = \"incoming\"",
    );
    let hb = b.host();
    let _l = hb
        .bind_with("cbr", "cbr:pcr=50Mbps", Accept::Auto { backlog: 2 })
        .unwrap();
    match a.host().connect("+4420002:cbr", "cbr:pcr=5Mbps") {
        Err(Error::Refused { cause: 21, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(b.stat()["counters"]["policy_rejections"], 1);
    // Without the policy, admission: 50 Mbit/s does not fit B's 10.
    let (a, b) = pair(LINK, "[link]\ncapacity = \"10Mbps\"\ntpdu_cost_ns = 1000");
    let hb = b.host();
    let l = hb
        .bind_with("cbr", "cbr:pcr=50Mbps", Accept::Auto { backlog: 2 })
        .unwrap();
    match a.host().connect("+4420002:cbr", "cbr:pcr=50Mbps") {
        Err(Error::Refused { cause: 37, .. }) => {}
        other => panic!("{other:?}"),
    }
    let st = b.stat();
    assert_eq!(st["counters"]["admission_refusals"], 1, "{st}");
    assert_eq!(st["listeners"][0]["pre_authorised_free"], 2, "{st}");
    // What fits is granted, and B's application learns the grant.
    let c = a
        .host()
        .connect("+4420002:cbr", "cbr:pcr=50Mbps,min_pcr=5Mbps")
        .unwrap();
    assert_eq!(c.granted().unwrap().tx_bps, 10_000_000);
    let p = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
    assert_eq!(p.granted().unwrap().tx_bps, 10_000_000);
}

/// A call whose QoS the listener did not pre-authorise is offered as before: the
/// application sees it and may reject it.
#[test]
fn a_call_that_does_not_fit_is_offered_explicitly() {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb
        .bind_with("mixed", "reliable", Accept::Auto { backlog: 2 })
        .unwrap();
    let t = std::thread::spawn(move || {
        let call = l.next_call(Wait::For(Duration::from_secs(10))).unwrap();
        let qos = call.qos;
        call.reject(21).unwrap();
        qos
    });
    match a.host().connect("+4420002:mixed", "cbr:pcr=1Mbps") {
        Err(Error::Refused { cause: 21, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        t.join().unwrap().class(),
        natm::wire::qos::TrafficClass::Cbr
    );
}

/// At most `backlog` calls wait for `accept`; the next caller is refused with cause 17
/// (user busy); taking a call gives the backlog room again.
#[test]
fn the_backlog_bounds_calls_waiting_for_accept() {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb
        .bind_with("busy", "reliable", Accept::Auto { backlog: 2 })
        .unwrap();
    let ha = a.host();
    let c1 = ha.connect("+4420002:busy", "reliable").unwrap();
    let c2 = ha.connect("+4420002:busy", "reliable").unwrap();
    match ha.connect("+4420002:busy", "reliable") {
        Err(Error::Refused { cause: 17, detail }) => {
            assert!(detail.contains("17"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(b.stat()["counters"]["backlog_refusals"], 1);
    // Take one: the listener hands sigd a fresh socket, and a new call fits.
    let p1 = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while b.stat()["listeners"][0]["pre_authorised_free"] != 1 {
        assert!(Instant::now() < until, "{}", b.stat());
        std::thread::sleep(Duration::from_millis(10));
    }
    let c3 = ha.connect("+4420002:busy", "reliable").unwrap();
    c1.send(b"first", Wait::Block).unwrap();
    assert_eq!(
        p1.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
        b"first"
    );
    // The queued calls are delivered in order, each with its own data path.
    for (c, m) in [(&c2, &b"second"[..]), (&c3, &b"third"[..])] {
        c.send(m, Wait::Block).unwrap();
        let p = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
        assert_eq!(
            p.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
            m
        );
    }
}

/// A pre-authorised listener's process dies (SIGKILL) with answered calls it never
/// took: sigd releases them, and each caller sees its connection aborted by the peer.
#[test]
fn a_killed_pre_authorised_listener_releases_its_queued_calls() {
    let (a, b) = pair(LINK, LINK);
    let (mut child, line) = helper_with(&b, &["--listen-auto", "gone"]);
    assert!(line.starts_with("listening"), "{line}");
    let ha = a.host();
    let c1 = ha.connect("+4420002:gone", "reliable").unwrap();
    let c2 = ha.connect("+4420002:gone", "reliable").unwrap();
    let killed = Instant::now();
    child.kill9();
    for c in [&c1, &c2] {
        match c.recv(Wait::For(Duration::from_secs(2))) {
            Err(Error::Aborted(AbortReason::Peer)) => {}
            other => panic!("expected 'aborted by the peer', got {other:?}"),
        }
    }
    eprintln!(
        "callers saw the abort {:?} after the kill",
        killed.elapsed()
    );
    b.wait_no_calls();
    a.wait_no_calls();
    assert_eq!(b.stat()["listeners"].as_array().unwrap().len(), 0);
}

/// Dropping a pre-authorised listener ends the calls it never took.
#[test]
fn dropping_a_pre_authorised_listener_releases_its_queued_calls() {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb
        .bind_with("drop", "reliable", Accept::Auto { backlog: 3 })
        .unwrap();
    let c = a.host().connect("+4420002:drop", "reliable").unwrap();
    // Sigd B answered the call; B's session learns of it only when a thread of B
    // waits, so sigd ends it when the listener unbinds.
    drop(l);
    match c.recv(Wait::For(Duration::from_secs(2))) {
        Err(Error::Aborted(AbortReason::Peer)) => {}
        other => panic!("expected 'aborted by the peer', got {other:?}"),
    }
    b.wait_no_calls();
    assert!(matches!(
        hb.bind_with("x", "reliable", Accept::Auto { backlog: 0 }),
        Err(Error::BadBacklog(0))
    ));
}

/// A caller that sends and closes before the listener takes its call: `accept` still
/// returns the call (sigd answered it), with everything the caller sent and then its
/// end. (The caller keeps its connection until then: one dropped at once, before its
/// peer closed, aborts its receiving VC and its close is lost — in direct mode too;
/// see the branch report.)
#[test]
fn a_call_closed_before_accept_still_delivers_its_data_then_ends() {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb
        .bind_with("brief", "reliable", Accept::Auto { backlog: 2 })
        .unwrap();
    let c = a.host().connect("+4420002:brief", "reliable").unwrap();
    c.send(b"said before hanging up", Wait::Block).unwrap();
    c.close();
    wait_first_tpdu(&c);
    let p = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
    assert_eq!(
        p.recv(Wait::For(Duration::from_secs(5)))
            .unwrap()
            .as_deref(),
        Some(&b"said before hanging up"[..])
    );
    let end = p.recv(Wait::For(Duration::from_secs(5)));
    assert!(matches!(end, Ok(None)), "{end:?} {:?}", p.stats());
    drop(c);
    drop(p);
    a.wait_no_calls();
    b.wait_no_calls();
}

/// A caller that sends and hangs up before the called application takes the call:
/// its hang-up stops the direction it received on (an abort of the callee's sending
/// VC, in B's socket before `accept`), but `accept` still gives the connection, the
/// callee reads what was sent, then the end, and its own sends fail as aborted by the
/// peer. (Whether the abort is read before or after `accept` checks the connection is
/// up is the engine's timing; `Conn::wait_up` takes either — it used to fail `accept`
/// when the abort came first, seen on a loaded CI run.)
#[test]
fn a_caller_that_sent_and_hung_up_before_accept_is_still_read() {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb
        .bind_with("gone", "reliable", Accept::Auto { backlog: 4 })
        .unwrap();
    let ha = a.host();
    let c = ha.connect("+4420002:gone", "reliable").unwrap();
    c.send(b"sent before accept", Wait::Block).unwrap();
    wait_first_tpdu(&c);
    // Dropped: the sending VC closes in order, the receiving one aborts at once.
    drop(c);
    let p = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
    assert_eq!(
        p.recv(Wait::For(Duration::from_secs(10)))
            .unwrap()
            .as_deref(),
        Some(&b"sent before accept"[..])
    );
    assert_eq!(p.recv(Wait::For(Duration::from_secs(10))).unwrap(), None);
    assert!(matches!(
        p.send(b"nobody reads this", Wait::Block),
        Err(Error::Aborted(AbortReason::Peer))
    ));
}
