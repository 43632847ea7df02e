//! The composition: two `Saal`s over a lossy in-memory wire with a virtual clock
//! (calls end to end over SSCOP, link failure and re-establishment), and property
//! tests of random interleavings.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::testing::{aesa, Dir, Net};
use super::*;
use crate::wire::q2931::{
    CallState, CauseValue, ConnectionId, Location, Message, MessageType, NatmParams,
};
use crate::wire::sscop::Pdu;

fn params() -> CallParams {
    CallParams {
        dtl: None,
        called: aesa(1),
        calling: Some(aesa(2)),
        sap: Some(Sap::new(b"echo").unwrap()),
        qos: "vbr:pcr=10Mbps,scr=4Mbps,mbs=100".parse().unwrap(),
        natm: NatmParams {
            data_endpoint: Some("10.0.0.1:5000".parse().unwrap()),
            cookie: Some(42),
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, 32)),
        multipoint: false,
    }
}

fn normal() -> Cause {
    Cause::new(Location::User, CauseValue::NormalCallClearing)
}

/// Two links, `a` started (it keeps the link up), a 5 ms wire.
fn pair(seed: u64, loss: f64) -> Net<Saal> {
    let mut net = Net::new(
        Saal::new(SaalConfig::default()),
        Saal::new(SaalConfig::default()),
        seed,
    );
    net.loss = loss;
    let now = net.now;
    net.a.start(now);
    assert!(
        net.run_until(Duration::from_secs(60), |n| n.a.is_up() && n.b.is_up()),
        "link comes up"
    );
    assert_eq!(net.a.poll_event(), Some(SigEvent::LinkUp));
    assert_eq!(net.b.poll_event(), Some(SigEvent::LinkUp));
    net
}

fn call_events(s: &mut Saal) -> Vec<CallEvent> {
    std::iter::from_fn(|| s.poll_event())
        .filter_map(|e| match e {
            SigEvent::Call(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// Runs until side `b` (or `a`) has an event matching `f`; returns it.
fn wait_b<T>(net: &mut Net<Saal>, mut f: impl FnMut(&CallEvent) -> Option<T>) -> T {
    let mut found = None;
    let ok = net.run_until(Duration::from_secs(120), |n| {
        while let Some(e) = n.b.poll_event() {
            if let SigEvent::Call(c) = &e {
                if found.is_none() {
                    found = f(c);
                }
            }
        }
        found.is_some()
    });
    assert!(ok, "event on b did not come");
    found.unwrap()
}

fn wait_a<T>(net: &mut Net<Saal>, mut f: impl FnMut(&CallEvent) -> Option<T>) -> T {
    let mut found = None;
    let ok = net.run_until(Duration::from_secs(120), |n| {
        while let Some(e) = n.a.poll_event() {
            if let SigEvent::Call(c) = &e {
                if found.is_none() {
                    found = f(c);
                }
            }
        }
        found.is_some()
    });
    assert!(ok, "event on a did not come");
    found.unwrap()
}

#[test]
fn setup_bytes_in_the_sd_parse_and_match_the_params() {
    let mut net = pair(7, 0.0);
    net.keep_trace = true;
    let now = net.now;
    net.a.setup(now, params()).unwrap();
    net.run_for(Duration::from_millis(20));
    let sd = net
        .trace
        .iter()
        .find_map(|(d, f)| match Pdu::parse(f).unwrap() {
            Pdu::Sd { info, .. } if *d == Dir::AtoB => Some(info),
            _ => None,
        })
        .expect("the SETUP went out in an SD");
    let msg = Message::parse(&sd).expect("SD payload is a Q.2931 message");
    assert_eq!(msg.kind, MessageType::Setup);
    assert_eq!(CallParams::from_setup(&msg), Some(params()));
}

#[test]
fn calls_end_to_end_over_a_lossy_link() {
    let mut net = pair(11, 0.2);
    for round in 0..5 {
        let now = net.now;
        let ca = net.a.setup(now, params()).unwrap();
        let (cb, offered) = wait_b(&mut net, |e| match e {
            CallEvent::Incoming { call, params } => Some((*call, params.clone())),
            _ => None,
        });
        assert_eq!(offered, params());
        let now = net.now;
        if round % 2 == 0 {
            net.b.proceeding(now, cb).unwrap();
            let answer = CallAccept {
                qos: Some("cbr:pcr=1Mbps".parse().unwrap()),
                natm: NatmParams {
                    data_endpoint: Some("10.0.0.2:6000".parse().unwrap()),
                    cookie: Some(43),
                    ..NatmParams::default()
                },
                conn_id: None,
            };
            net.b.accept(now, cb, answer.clone()).unwrap();
            let got = wait_a(&mut net, |e| match e {
                CallEvent::Connected { call, params } if *call == ca => Some(params.clone()),
                _ => None,
            });
            assert_eq!(got, answer);
            wait_b(&mut net, |e| {
                matches!(e, CallEvent::Established { call } if *call == cb).then_some(())
            });
            let now = net.now;
            net.b.release(now, cb, normal()).unwrap();
            let (cause, by) = wait_a(&mut net, |e| match e {
                CallEvent::Released { call, cause, by } if *call == ca => {
                    Some((cause.clone(), *by))
                }
                _ => None,
            });
            assert_eq!((cause, by), (normal(), ClearedBy::Remote));
        } else {
            let busy = Cause::new(Location::User, CauseValue::UserBusy);
            net.b.reject(now, cb, busy.clone()).unwrap();
            let (cause, by) = wait_a(&mut net, |e| match e {
                CallEvent::Released { call, cause, by } if *call == ca => {
                    Some((cause.clone(), *by))
                }
                _ => None,
            });
            assert_eq!((cause.value, by), (CauseValue::UserBusy, ClearedBy::Remote));
        }
        // RELEASE COMPLETE may need an SSCOP retransmission (a POLL round) to arrive.
        assert!(
            net.run_until(Duration::from_secs(10), |n| n.a.calls().call_count()
                + n.b.calls().call_count()
                == 0),
            "round {round}: both sides back to null"
        );
    }
    assert!(net.dropped > 0, "the wire did lose frames");
}

#[test]
fn silent_callee_t303_twice_then_cause_102() {
    let mut net = pair(3, 0.0);
    let now = net.now;
    let start = now;
    let ca = net.a.setup(now, params()).unwrap();
    // b's daemon never answers the Incoming event.
    let (cause, by) = wait_a(&mut net, |e| match e {
        CallEvent::Released { call, cause, by } if *call == ca => Some((cause.clone(), *by)),
        _ => None,
    });
    assert_eq!(cause, Cause::timer_expiry(Location::User, 303));
    assert_eq!(by, ClearedBy::Timer);
    let took = net.now.saturating_duration_since(start);
    assert!(
        took >= Duration::from_secs(8) && took < Duration::from_millis(8100),
        "{took:?}"
    );
    // b saw the SETUP once (the repeat is ignored) and is cleared by the RELEASE COMPLETE.
    net.run_for(Duration::from_millis(100));
    let ev = call_events(&mut net.b);
    assert!(
        matches!(
            ev[..],
            [
                CallEvent::Incoming { .. },
                CallEvent::Released {
                    by: ClearedBy::Remote,
                    ..
                }
            ]
        ),
        "{ev:?}"
    );
}

#[test]
fn link_failure_and_reestablishment() {
    let mut net = pair(5, 0.0);
    let now = net.now;
    let ca = net.a.setup(now, params()).unwrap();
    let cb = wait_b(&mut net, |e| match e {
        CallEvent::Incoming { call, .. } => Some(*call),
        _ => None,
    });
    let now = net.now;
    net.b.accept(now, cb, CallAccept::default()).unwrap();
    wait_b(&mut net, |e| {
        matches!(e, CallEvent::Established { .. }).then_some(())
    });
    let _ = call_events(&mut net.a);
    // Cut the wire for 9 s: Timer_NO_RESPONSE (7 s) fails the link on both sides.
    net.cut = true;
    net.run_for(Duration::from_secs(9));
    assert!(!net.a.is_up() && !net.b.is_up());
    let downs: Vec<SigEvent> = std::iter::from_fn(|| net.a.poll_event()).collect();
    assert!(
        downs.contains(&SigEvent::LinkDown {
            reason: None,
            failure: true
        }),
        "{downs:?}"
    );
    // The active call waits for T309 (10 s): mend the wire in time.
    net.cut = false;
    assert!(net.run_until(Duration::from_secs(5), |n| n.a.is_up() && n.b.is_up()));
    assert_eq!(net.a.calls().state(ca), Some(CallState::ACTIVE));
    net.run_for(Duration::from_secs(15));
    assert_eq!(
        net.a.calls().state(ca),
        Some(CallState::ACTIVE),
        "survived, T309 stopped"
    );
    assert_eq!(net.b.calls().state(cb), Some(CallState::ACTIVE));
    // New calls work on the new connection.
    let now = net.now;
    net.a.setup(now, params()).unwrap();
    wait_b(&mut net, |e| {
        matches!(e, CallEvent::Incoming { .. }).then_some(())
    });
    // A long cut: T309 clears the active call with cause 27.
    net.cut = true;
    let (cause, by) = wait_a(&mut net, |e| match e {
        CallEvent::Released { call, cause, by } if *call == ca => Some((cause.clone(), *by)),
        _ => None,
    });
    assert_eq!(
        (cause.value, by),
        (CauseValue::DestinationOutOfOrder, ClearedBy::Timer)
    );
    net.cut = false;
    assert!(
        net.run_until(Duration::from_secs(30), |n| n.a.is_up() && n.b.is_up()),
        "re-established"
    );
}

#[test]
fn release_collision_over_the_link() {
    let mut net = pair(9, 0.0);
    let now = net.now;
    let ca = net.a.setup(now, params()).unwrap();
    let cb = wait_b(&mut net, |e| match e {
        CallEvent::Incoming { call, .. } => Some(*call),
        _ => None,
    });
    let now = net.now;
    net.b.accept(now, cb, CallAccept::default()).unwrap();
    wait_b(&mut net, |e| {
        matches!(e, CallEvent::Established { .. }).then_some(())
    });
    let now = net.now;
    net.a.release(now, ca, normal()).unwrap();
    net.b.release(now, cb, normal()).unwrap();
    net.run_for(Duration::from_secs(2));
    let ea = call_events(&mut net.a);
    let eb = call_events(&mut net.b);
    assert!(
        ea.iter().any(|e| matches!(
            e,
            CallEvent::Released {
                by: ClearedBy::Local,
                ..
            }
        )),
        "{ea:?}"
    );
    assert!(
        eb.iter().any(|e| matches!(
            e,
            CallEvent::Released {
                by: ClearedBy::Local,
                ..
            }
        )),
        "{eb:?}"
    );
    assert_eq!(net.a.calls().call_count() + net.b.calls().call_count(), 0);
    assert_eq!(net.a.calls().poll_timeout(), None, "T308 stopped");
}

#[test]
fn status_enquiry_over_the_link() {
    let mut net = pair(13, 0.1);
    let now = net.now;
    let ca = net.a.setup(now, params()).unwrap();
    let cb = wait_b(&mut net, |e| match e {
        CallEvent::Incoming { call, .. } => Some(*call),
        _ => None,
    });
    let now = net.now;
    net.b.accept(now, cb, CallAccept::default()).unwrap();
    wait_b(&mut net, |e| {
        matches!(e, CallEvent::Established { .. }).then_some(())
    });
    let now = net.now;
    net.a.status_enquiry(now, ca).unwrap();
    net.run_for(Duration::from_secs(30));
    assert_eq!(net.a.calls().state(ca), Some(CallState::ACTIVE));
    assert_eq!(
        net.a.calls().poll_timeout(),
        None,
        "STATUS arrived, T322 stopped"
    );
}

// ----- property tests -------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Setup,
    Proceeding(usize),
    Accept(usize),
    Reject(usize),
    ReleaseA(usize),
    ReleaseB(usize),
    Enquiry(usize),
    Wait(u64),
    Cut(bool),
    Garbage(bool, Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Setup),
        2 => any::<usize>().prop_map(Op::Proceeding),
        4 => any::<usize>().prop_map(Op::Accept),
        1 => any::<usize>().prop_map(Op::Reject),
        2 => any::<usize>().prop_map(Op::ReleaseA),
        2 => any::<usize>().prop_map(Op::ReleaseB),
        1 => any::<usize>().prop_map(Op::Enquiry),
        6 => (1u64..3_000).prop_map(Op::Wait),
        1 => any::<bool>().prop_map(Op::Cut),
        1 => (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(s, g)| Op::Garbage(s, g)),
    ]
}

/// Tracks the calls each side knows and checks the event rules as they come.
#[derive(Default)]
struct Book {
    live: Vec<CallId>,
    released: HashSet<CallId>,
}

impl Book {
    fn take(&mut self, s: &mut Saal) {
        while let Some(e) = s.poll_event() {
            if let SigEvent::Call(e) = e {
                match e {
                    CallEvent::Incoming { call, .. } => self.live.push(call),
                    CallEvent::Released { call, .. } => {
                        assert!(self.released.insert(call), "{call} released twice");
                        self.live.retain(|c| *c != call);
                    }
                    _ => {}
                }
            }
        }
    }

    fn pick(&self, i: usize) -> Option<CallId> {
        (!self.live.is_empty()).then(|| self.live[i % self.live.len()])
    }
}

fn run_ops(seed: u64, loss: f64, ops: &[Op]) {
    run_ops_jitter(seed, loss, Duration::ZERO, ops);
}

fn run_ops_jitter(seed: u64, loss: f64, jitter: Duration, ops: &[Op]) {
    let cfg = SaalConfig {
        calls: CallConfig {
            max_calls: 8,
            ..CallConfig::default()
        },
        ..SaalConfig::default()
    };
    let mut net = Net::new(Saal::new(cfg.clone()), Saal::new(cfg), seed);
    net.loss = loss;
    net.jitter = jitter;
    let now = net.now;
    net.a.start(now);
    net.b.start(now);
    let (mut ba, mut bb) = (Book::default(), Book::default());
    for op in ops {
        let now = net.now;
        // Errors are fine (wrong state, link down, too many calls); panics are not.
        match op {
            Op::Setup => {
                if let Ok(c) = net.a.setup(now, params()) {
                    ba.live.push(c);
                }
            }
            Op::Proceeding(i) => {
                if let Some(c) = bb.pick(*i) {
                    let _ = net.b.proceeding(now, c);
                }
            }
            Op::Accept(i) => {
                if let Some(c) = bb.pick(*i) {
                    let _ = net.b.accept(now, c, CallAccept::default());
                }
            }
            Op::Reject(i) => {
                if let Some(c) = bb.pick(*i) {
                    let _ = net.b.reject(now, c, normal());
                }
            }
            Op::ReleaseA(i) => {
                if let Some(c) = ba.pick(*i) {
                    let _ = net.a.release(now, c, normal());
                }
            }
            Op::ReleaseB(i) => {
                if let Some(c) = bb.pick(*i) {
                    let _ = net.b.release(now, c, normal());
                }
            }
            Op::Enquiry(i) => {
                if let Some(c) = ba.pick(*i) {
                    let _ = net.a.status_enquiry(now, c);
                }
            }
            Op::Wait(ms) => net.run_for(Duration::from_millis(*ms)),
            Op::Cut(c) => net.cut = *c,
            Op::Garbage(to_a, g) => {
                if *to_a {
                    net.a.handle_frame(now, g);
                } else {
                    net.b.handle_frame(now, g);
                }
            }
        }
        ba.take(&mut net.a);
        bb.take(&mut net.b);
        // Memory stays bounded at every step.
        assert!(net.a.calls().call_count() <= 8 && net.b.calls().call_count() <= 8);
        assert!(net.a.sscop().buffered() <= net.a.sscop().config().max_buffered);
    }
    // Quiet, healthy wire for long enough for every timer (T308 twice, T309, T303).
    net.cut = false;
    net.loss = 0.0;
    net.run_for(Duration::from_secs(200));
    ba.take(&mut net.a);
    bb.take(&mut net.b);
    assert!(net.a.is_up() && net.b.is_up(), "the link recovers");
    for (side, s) in [("a", &net.a), ("b", &net.b)] {
        for (c, st) in s.calls().calls() {
            assert_eq!(st, CallState::ACTIVE, "{side}: {c} stuck in {st}");
        }
    }
    // Both sides agree on the active calls by call reference.
    let refs = |s: &Saal| -> HashMap<u32, CallState> {
        s.calls()
            .calls()
            .map(|(c, st)| (s.calls().call_ref(c).unwrap().value, st))
            .collect()
    };
    assert_eq!(refs(&net.a), refs(&net.b));
}

proptest! {
    // PROPTEST_CASES raises the count for a longer search.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_interleavings_end_released_or_active(
        seed in any::<u64>(),
        loss in prop_oneof![Just(0.0), 0.0..0.3f64],
        jitter_ms in prop_oneof![Just(0u64), 1u64..30],
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        run_ops_jitter(seed, loss, Duration::from_millis(jitter_ms), &ops);
    }

    #[test]
    fn random_bytes_into_call_control_never_panic(
        msgs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..40),
    ) {
        let mut c = CallControl::new(CallConfig { max_calls: 4, ..CallConfig::default() });
        c.link_up(Instant::ZERO);
        for (i, m) in msgs.iter().enumerate() {
            let mut m = m.clone();
            // Give half of them a plausible header so they reach the state machine.
            if i % 2 == 0 && m.len() >= 9 {
                m[0] = 0x09;
                m[1] = 0x03;
                let len = (m.len() - 9) as u16;
                m[7..9].copy_from_slice(&len.to_be_bytes());
            }
            c.handle_message(Instant::from_nanos(i as u64 * 1_000_000), &m);
            prop_assert!(c.call_count() <= 4);
        }
        while c.poll_message().is_some() {}
        c.handle_timeout(Instant::from_nanos(1 << 40));
        c.handle_timeout(Instant::from_nanos(1 << 41));
        prop_assert!(c.calls().all(|(_, s)| s == CallState::ACTIVE || s == CallState::CALL_PRESENT));
    }
}

/// The case the property test found: a SETUP repeated on T303 crosses the callee's
/// RELEASE COMPLETE; the callee's answer guard clears the stale call.
#[test]
fn repeated_setup_crossing_a_reject_does_not_leave_a_call() {
    run_ops(
        0,
        0.0,
        &[
            Op::Wait(5),
            Op::Setup,
            Op::Wait(986),
            Op::Cut(true),
            Op::ReleaseB(0),
            Op::Wait(2712),
        ],
    );
}

#[test]
fn resync_resets_calls_in_setup_and_keeps_active_ones() {
    let mut net = pair(21, 0.0);
    let now = net.now;
    let active = net.a.setup(now, params()).unwrap();
    let cb = wait_b(&mut net, |e| match e {
        CallEvent::Incoming { call, .. } => Some(*call),
        _ => None,
    });
    let now = net.now;
    net.b.accept(now, cb, CallAccept::default()).unwrap();
    wait_b(&mut net, |e| {
        matches!(e, CallEvent::Established { .. }).then_some(())
    });
    let now = net.now;
    let ca = net.a.setup(now, params()).unwrap();
    wait_b(&mut net, |e| {
        matches!(e, CallEvent::Incoming { .. }).then_some(())
    });
    let now = net.now;
    net.b.resync(now);
    let (cause, by) = wait_a(&mut net, |e| match e {
        CallEvent::Released { call, cause, by } if *call == ca => Some((cause.clone(), *by)),
        _ => None,
    });
    assert_eq!(cause.value, CauseValue::TemporaryFailure);
    assert!(matches!(by, ClearedBy::Link | ClearedBy::Remote), "{by:?}");
    net.run_for(Duration::from_secs(5));
    assert!(net.a.is_up() && net.b.is_up());
    assert_eq!(net.a.calls().state(active), Some(CallState::ACTIVE));
    assert_eq!(net.a.calls().call_count(), 1);
    assert_eq!(net.b.calls().call_count(), 1);
    assert_eq!(
        net.a.sscop().stats().link_failures,
        0,
        "numbering in step again"
    );
}
