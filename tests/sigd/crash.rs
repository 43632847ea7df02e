//! Crash cleanup (issue 6 item 7): an application killed with SIGKILL loses its sigd
//! socket, sigd releases its calls, and the peer application sees the abort; a
//! listener that dies hands its waiting calls to another; sigd killed and restarted.

use natm::ulib::Wait;
use std::time::{Duration, Instant};

use crate::sigd_support::{helper, helper_with, Sigd};
use natm::transport::AbortReason;
use natm::ulib::Error;

const CONF: &str = "addresses = [\"+4420001\"]\n[link]\ntpdu_cost_ns = 1000\n";

#[test]
fn sigkill_of_an_application_aborts_its_peer() {
    let sigd = Sigd::start(CONF);
    let server = sigd.host();
    let l = server.bind("crash", "reliable").unwrap();
    let accepting = std::thread::spawn(move || l.accept(Wait::For(Duration::from_secs(10))));
    let (mut child, line) = helper(&sigd, "+4420001:crash");
    assert!(line.starts_with("connected"), "{line}");
    let c = accepting.join().unwrap().unwrap();
    let m = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
    assert_eq!(m, b"hello from the helper");
    let killed = Instant::now();
    child.kill9();
    let r = c.recv(Wait::For(Duration::from_secs(2)));
    let took = killed.elapsed();
    match r {
        Err(Error::Aborted(AbortReason::Peer)) => {}
        other => panic!("expected 'aborted by the peer', got {other:?} after {took:?}"),
    }
    eprintln!("peer saw the SIGKILLed application's abort after {took:?}");
    assert!(took < Duration::from_secs(2));
    // sigd freed everything the dead process held.
    let st = sigd.stat();
    assert!(st["calls"].as_array().unwrap().is_empty(), "{st}");
    assert_eq!(st["counters"]["app_deaths_cleaned"], 1, "{st}");
}

/// A process that closes a connection, lingers and exits at once (as a C program
/// returns from main after `atm_close`) has its call released normally: its peer,
/// reading only after the process is gone, still gets every message and then the
/// end — not an abort (sigd's cleanup after an exit without closing, cause 41, which
/// discards what the peer had not read).
#[test]
fn a_process_that_lingers_then_exits_has_all_its_messages_read() {
    let sigd = Sigd::start(CONF);
    let server = sigd.host();
    for qos in ["best-effort", "ubr:transport=none", "reliable"] {
        let l = server.bind("linger", qos).unwrap();
        let accepting = std::thread::spawn(move || l.accept(Wait::For(Duration::from_secs(10))));
        let (mut child, line) = helper_with(
            &sigd,
            &[
                "--connect",
                "+4420001:linger",
                "--qos",
                qos,
                "--send-and-exit",
                "20",
            ],
        );
        assert!(line.starts_with("connected"), "{qos}: {line}");
        let c = accepting
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("{qos}: accept: {e:?}"));
        // The helper is gone before anything is read here.
        let status = child.0.take().unwrap().wait().unwrap();
        assert!(status.success(), "{qos}: the helper failed: {status}");
        let first = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
        assert_eq!(first, b"hello from the helper", "{qos}");
        for i in 0..20 {
            let m = c.recv(Wait::For(Duration::from_secs(5)));
            let m = m.unwrap_or_else(|e| panic!("{qos}: message {i}: {e}"));
            assert_eq!(
                m.as_deref(),
                Some(format!("message {i}").as_bytes()),
                "{qos}"
            );
        }
        let end = c.recv(Wait::For(Duration::from_secs(5)));
        assert!(
            matches!(end, Ok(None)),
            "{qos}: after the messages: {end:?} (released: {:?})",
            c.released()
        );
        // sigd's word on the call: a normal release (it may follow the data's end).
        let released = loop {
            match c.next_event(Wait::For(Duration::from_secs(5))) {
                Some(natm::ulib::ConnEvent::Released { cause, .. }) => break cause,
                Some(_) => continue,
                None => panic!("{qos}: no release: {:?}", c.released()),
            }
        };
        assert_eq!(released, 16, "{qos}");
    }
    let st = sigd.stat();
    assert_eq!(st["counters"]["app_deaths_cleaned"], 0, "{st}");
}

#[test]
fn a_dead_listener_hands_its_waiting_call_to_another() {
    let sigd = Sigd::start(CONF);
    // Listener 1 sees the call and never answers, then goes away.
    let h1 = sigd.host();
    let l1 = h1.bind("pool", "reliable").unwrap();
    let h2 = sigd.host();
    let l2 = h2.bind("pool", "reliable").unwrap();
    let client = sigd.host();
    let t = std::thread::spawn(move || client.connect("+4420001:pool", "reliable"));
    // Whichever listener got the offer dies with it unanswered (its process would
    // close the socket; here its host's session ends).
    let first = l1.next_call(Wait::For(Duration::from_millis(500)));
    let survivor = match first {
        Ok(call) => {
            std::mem::forget(call); // no reject: as if the process died mid-decision
            drop(l1);
            drop(h1);
            l2
        }
        Err(_) => {
            let call = l2.next_call(Wait::For(Duration::from_secs(2))).unwrap();
            std::mem::forget(call);
            drop(l2);
            drop(h2);
            l1
        }
    };
    let c = survivor
        .next_call(Wait::For(Duration::from_secs(5)))
        .expect("the call moved to the other listener")
        .accept()
        .unwrap();
    let caller = t.join().unwrap().unwrap();
    caller.send(b"moved", Wait::Block).unwrap();
    assert_eq!(
        c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
        b"moved"
    );
}

#[test]
fn sigd_killed_and_restarted() {
    let mut sigd = Sigd::start(CONF);
    let server = sigd.host();
    let l = server.bind("keep", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::Block).unwrap();
        // Waiting for the next call when sigd dies: an error at once.
        let waited = Instant::now();
        let e = l.next_call(Wait::Block).unwrap_err();
        (c, e, waited.elapsed())
    });
    let client = sigd.host();
    let c = client.connect("+4420001:keep", "reliable").unwrap();
    // A call pending at a listener that does not answer when sigd dies.
    let _slow = server.bind("slow", "reliable").unwrap();
    let c2 = client.clone();
    let calls = |s: &Sigd| s.stat()["calls"].as_array().map_or(0, Vec::len);
    let before = calls(&sigd);
    let pending = std::thread::spawn(move || {
        let r = c2.connect("+4420001:slow", "reliable");
        (r.map(|_| ()), Instant::now())
    });
    // Killed once sigd holds the pending call (offered, never answered).
    let until = Instant::now() + Duration::from_secs(10);
    while calls(&sigd) == before {
        assert!(Instant::now() < until, "the call never reached sigd");
        std::thread::sleep(Duration::from_millis(10));
    }
    let killed_at = Instant::now();
    sigd.kill();
    let (r, failed_at) = pending.join().unwrap();
    assert!(matches!(r, Err(Error::SigdGone)), "{r:?}");
    assert!(failed_at.duration_since(killed_at) < Duration::from_secs(2));
    let (peer, e, waited) = t.join().unwrap();
    assert!(matches!(e, Error::SigdGone), "{e:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    // Existing VCs keep carrying data without sigd (docs/ARCHITECTURE.md).
    c.send(b"still here", Wait::Block).unwrap();
    assert_eq!(
        peer.recv(Wait::For(Duration::from_secs(5)))
            .unwrap()
            .unwrap(),
        b"still here"
    );
    // New calls fail clearly and at once.
    let t0 = Instant::now();
    match client.connect("+4420001:keep", "reliable") {
        Err(Error::NoSigd { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(2));
    // A restarted sigd serves new calls (the hosts reconnect by themselves).
    sigd.restart();
    let l = server.bind("again", "reliable").unwrap();
    let t = std::thread::spawn(move || l.accept(Wait::Block).unwrap());
    let c2 = client.connect("+4420001:again", "reliable").unwrap();
    let p2 = t.join().unwrap();
    c2.send(b"new sigd", Wait::Block).unwrap();
    assert_eq!(
        p2.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
        b"new sigd"
    );
    // The old connection still works too.
    peer.send(b"old vc", Wait::Block).unwrap();
    assert_eq!(
        c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
        b"old vc"
    );
}
