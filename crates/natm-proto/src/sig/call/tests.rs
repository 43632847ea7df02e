//! Call control tests: two `CallControl`s joined back to back (an ideal channel), and
//! single-ended tests with hand-made messages.

use super::*;
use crate::sig::testing::aesa;
use crate::wire::addr::E164;
use crate::wire::q2931::{
    Bhli, BhliType, Blli, CalledNumber, ConnectionId, IeBody, MessageType, NatmParams,
    PartyAddress, TrafficDescriptor,
};
use crate::wire::qos::Qos;

fn t(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

fn params() -> CallParams {
    CallParams {
        dtl: None,
        called: aesa(1),
        calling: Some(aesa(2)),
        sap: Some(Sap::new(b"echo").unwrap()),
        qos: "cbr:max_pcr=10Mbps,min_pcr=1Mbps".parse().unwrap(),
        natm: NatmParams {
            data_endpoint: Some("127.0.0.1:40001".parse().unwrap()),
            cookie: Some(0xC0FF_EE01),
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, 100)),
        multipoint: false,
    }
}

fn up(cfg: CallConfig) -> CallControl {
    let mut c = CallControl::new(cfg);
    c.link_up(t(0));
    c
}

fn msgs(c: &mut CallControl) -> Vec<Message> {
    std::iter::from_fn(|| c.poll_message())
        .map(|b| Message::parse(&b).expect("call control emits valid messages"))
        .collect()
}

fn events(c: &mut CallControl) -> Vec<CallEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// Moves every message both ways until both are quiet.
fn exchange(now: Instant, a: &mut CallControl, b: &mut CallControl) -> usize {
    let mut n = 0;
    loop {
        let mut moved = false;
        while let Some(m) = a.poll_message() {
            b.handle_message(now, &m);
            moved = true;
            n += 1;
        }
        while let Some(m) = b.poll_message() {
            a.handle_message(now, &m);
            moved = true;
            n += 1;
        }
        if !moved {
            return n;
        }
    }
}

fn incoming(evs: &[CallEvent]) -> (CallId, CallParams) {
    match evs {
        [CallEvent::Incoming { call, params }] => (*call, params.clone()),
        other => panic!("expected one Incoming, got {other:?}"),
    }
}

/// A call set up from `a` to `b` at t = 0 and accepted: (caller's id, callee's id).
/// The events it caused are left for the test to read.
fn accepted_call(a: &mut CallControl, b: &mut CallControl) -> (CallId, CallId) {
    let ca = a.setup(t(0), params()).unwrap();
    exchange(t(0), a, b);
    let (cb, _) = incoming(&events(b));
    b.accept(t(0), cb, CallAccept::default()).unwrap();
    exchange(t(0), a, b);
    (ca, cb)
}

#[test]
fn setup_message_carries_the_typed_params() {
    let mut a = up(CallConfig::default());
    a.setup(t(0), params()).unwrap();
    let m = msgs(&mut a);
    let [setup] = &m[..] else { panic!("one SETUP") };
    assert_eq!(setup.kind, MessageType::Setup);
    assert_eq!(setup.call_ref, CallRef::new(1));
    assert_eq!(
        setup.find::<CalledNumber>().map(|c| &c.address),
        Some(&aesa(1))
    );
    let td = setup.find::<TrafficDescriptor>().unwrap();
    assert_eq!(
        td.fwd.pcr01,
        Some(crate::wire::qos::wire_cells(10_000_000u64.div_ceil(384), 4096) as u32),
        "target PCR, in cells on the wire with each TPDU's overhead"
    );
    assert_eq!(td.fwd.pcr01, Some(26_551));
    assert!(!td.best_effort);
    let natm = setup.find::<NatmParams>().unwrap();
    assert_eq!(natm.cookie, Some(0xC0FF_EE01));
    let q: Qos = natm.qos.as_deref().unwrap().parse().unwrap();
    assert_eq!(q, params().qos, "target and minimum travel as text");
    // The receiving side rebuilds the same params.
    let back = CallParams::from_setup(setup).unwrap();
    assert_eq!(back, params());
}

#[test]
fn call_accepted_and_released_end_to_end() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let call_a = a.setup(t(0), params()).unwrap();
    assert_eq!(a.state(call_a), Some(CallState::CALL_INITIATED));
    exchange(t(1), &mut a, &mut b);
    let (call_b, offered) = incoming(&events(&mut b));
    assert_eq!(offered, params());
    assert_eq!(b.state(call_b), Some(CallState::CALL_PRESENT));
    b.proceeding(call_b).unwrap();
    exchange(t(2), &mut a, &mut b);
    assert_eq!(events(&mut a), [CallEvent::Proceeding { call: call_a }]);
    assert_eq!(a.state(call_a), Some(CallState::OUTGOING_CALL_PROCEEDING));
    let answer = CallAccept {
        qos: Some("cbr:pcr=5Mbps".parse().unwrap()),
        natm: NatmParams {
            data_endpoint: Some("[::1]:40002".parse().unwrap()),
            cookie: Some(7),
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, 100)),
    };
    b.accept(t(3), call_b, answer.clone()).unwrap();
    assert_eq!(b.state(call_b), Some(CallState::CONNECT_REQUEST));
    exchange(t(4), &mut a, &mut b);
    let ev = events(&mut a);
    let [CallEvent::Connected { call, params: got }] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(*call, call_a);
    assert_eq!(got.qos, answer.qos);
    assert_eq!(got.natm.data_endpoint, answer.natm.data_endpoint);
    assert_eq!(got.natm.cookie, Some(7));
    assert_eq!(got.conn_id, answer.conn_id);
    assert_eq!(events(&mut b), [CallEvent::Established { call: call_b }]);
    assert_eq!(a.state(call_a), Some(CallState::ACTIVE));
    assert_eq!(b.state(call_b), Some(CallState::ACTIVE));
    assert_eq!(a.poll_timeout(), None, "no timer in the active state");
    assert_eq!(b.poll_timeout(), None);
    // Release from the caller.
    let normal = Cause::new(Location::User, CauseValue::NormalCallClearing);
    a.release(t(5), call_a, normal.clone()).unwrap();
    assert_eq!(a.state(call_a), Some(CallState::RELEASE_REQUEST));
    exchange(t(6), &mut a, &mut b);
    assert_eq!(
        events(&mut b),
        [CallEvent::Released {
            call: call_b,
            cause: normal.clone(),
            by: ClearedBy::Remote
        }]
    );
    assert_eq!(
        events(&mut a),
        [CallEvent::Released {
            call: call_a,
            cause: normal,
            by: ClearedBy::Local
        }]
    );
    assert_eq!(a.call_count() + b.call_count(), 0);
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn call_rejected_with_cause() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let call_a = a.setup(t(0), params()).unwrap();
    exchange(t(1), &mut a, &mut b);
    let (call_b, _) = incoming(&events(&mut b));
    let busy = Cause::new(Location::User, CauseValue::UserBusy);
    b.reject(call_b, busy.clone()).unwrap();
    exchange(t(2), &mut a, &mut b);
    assert_eq!(
        events(&mut a),
        [CallEvent::Released {
            call: call_a,
            cause: busy.clone(),
            by: ClearedBy::Remote
        }]
    );
    assert_eq!(
        events(&mut b),
        [CallEvent::Released {
            call: call_b,
            cause: busy,
            by: ClearedBy::Local
        }]
    );
    assert_eq!(
        b.reject(call_b, Cause::new(Location::User, CauseValue::UserBusy)),
        Err(CallError::UnknownCall(call_b))
    );
}

#[test]
fn t303_retries_once_then_fails_with_cause_102() {
    let mut a = up(CallConfig::default());
    let call = a.setup(t(0), params()).unwrap();
    let first = msgs(&mut a);
    assert_eq!(a.poll_timeout(), Some(t(4000)));
    a.handle_timeout(t(4000));
    let second = msgs(&mut a);
    assert_eq!(first, second, "the same SETUP again");
    assert!(events(&mut a).is_empty());
    a.handle_timeout(t(8000));
    let rc = msgs(&mut a);
    assert_eq!(rc.len(), 1);
    assert_eq!(rc[0].kind, MessageType::ReleaseComplete);
    let cause = Cause::timer_expiry(Location::User, 303);
    assert_eq!(rc[0].cause(), Some(&cause));
    assert_eq!(
        events(&mut a),
        [CallEvent::Released {
            call,
            cause,
            by: ClearedBy::Timer
        }]
    );
    assert_eq!(a.call_count(), 0);
}

#[test]
fn t310_and_t313_clear_with_release() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let call_a = a.setup(t(0), params()).unwrap();
    exchange(t(0), &mut a, &mut b);
    let (call_b, _) = incoming(&events(&mut b));
    b.proceeding(call_b).unwrap();
    exchange(t(0), &mut a, &mut b);
    let _ = events(&mut a);
    assert_eq!(a.poll_timeout(), Some(t(10_000)), "T310");
    a.handle_timeout(t(10_000));
    let rel = msgs(&mut a);
    assert_eq!(rel[0].kind, MessageType::Release);
    assert_eq!(
        rel[0].cause(),
        Some(&Cause::timer_expiry(Location::User, 310))
    );
    // Callee side: accept, then no CONNECT ACK → T313.
    let mut c = up(CallConfig::default());
    let mut d = up(CallConfig::default());
    c.setup(t(0), params()).unwrap();
    exchange(t(0), &mut c, &mut d);
    let (call_d, _) = incoming(&events(&mut d));
    d.accept(t(0), call_d, CallAccept::default()).unwrap();
    let _ = msgs(&mut d); // CONNECT lost
    d.handle_timeout(t(4000));
    let rel = msgs(&mut d);
    assert_eq!(rel[0].kind, MessageType::Release);
    assert_eq!(
        rel[0].cause(),
        Some(&Cause::timer_expiry(Location::User, 313))
    );
    assert_eq!(d.state(call_d), Some(CallState::RELEASE_REQUEST));
    let _ = call_a;
}

#[test]
fn t308_resends_release_once_then_frees_the_call() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let (call, _) = accepted_call(&mut a, &mut b);
    let _ = events(&mut a);
    let cause = Cause::new(Location::User, CauseValue::NormalCallClearing);
    a.release(t(100), call, cause.clone()).unwrap();
    let r1 = msgs(&mut a);
    a.handle_timeout(t(30_100));
    let r2 = msgs(&mut a);
    assert_eq!(r1, r2, "RELEASE sent again on the first T308 expiry");
    assert!(events(&mut a).is_empty());
    a.handle_timeout(t(60_100));
    assert!(msgs(&mut a).is_empty());
    assert_eq!(
        events(&mut a),
        [CallEvent::Released {
            call,
            cause: Cause::timer_expiry(Location::User, 308),
            by: ClearedBy::Timer
        }]
    );
}

#[test]
fn release_collision_clears_both_without_release_complete() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let (ca, cb) = accepted_call(&mut a, &mut b);
    let _ = (events(&mut a), events(&mut b));
    let ca_cause = Cause::new(Location::User, CauseValue::NormalCallClearing);
    let cb_cause = Cause::new(Location::User, CauseValue::NormalUnspecified);
    a.release(t(1), ca, ca_cause.clone()).unwrap();
    b.release(t(1), cb, cb_cause.clone()).unwrap();
    let (ra, rb) = (msgs(&mut a), msgs(&mut b));
    for m in &rb {
        a.handle_message(t(2), &m.to_bytes().unwrap());
    }
    for m in &ra {
        b.handle_message(t(2), &m.to_bytes().unwrap());
    }
    assert!(
        msgs(&mut a).is_empty() && msgs(&mut b).is_empty(),
        "Q.2931 §5.4.5"
    );
    assert_eq!(
        events(&mut a),
        [CallEvent::Released {
            call: ca,
            cause: ca_cause,
            by: ClearedBy::Local
        }]
    );
    assert_eq!(
        events(&mut b),
        [CallEvent::Released {
            call: cb,
            cause: cb_cause,
            by: ClearedBy::Local
        }]
    );
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn status_enquiry_is_answered_with_the_call_state() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let (ca, _) = accepted_call(&mut a, &mut b);
    a.status_enquiry(t(1), ca).unwrap();
    let se = msgs(&mut a);
    assert_eq!(se[0].kind, MessageType::StatusEnquiry);
    b.handle_message(t(1), &se[0].to_bytes().unwrap());
    let st = msgs(&mut b);
    assert_eq!(st[0].kind, MessageType::Status);
    assert_eq!(
        st[0].call_ref,
        CallRef {
            value: 1,
            flag: true
        }
    );
    assert_eq!(st[0].find::<CallState>(), Some(&CallState::ACTIVE));
    assert_eq!(
        st[0].cause().map(|c| c.value),
        Some(CauseValue::ResponseToStatusEnquiry)
    );
    assert!(a.poll_timeout().is_some(), "T322 runs");
    a.handle_message(t(2), &st[0].to_bytes().unwrap());
    assert_eq!(a.poll_timeout(), None, "STATUS stops T322");
    assert_eq!(a.state(ca), Some(CallState::ACTIVE));
    // STATUS ENQUIRY for a call that does not exist: STATUS with state 0.
    let se = Message::new(MessageType::StatusEnquiry, CallRef::new(77));
    b.handle_message(t(3), &se.to_bytes().unwrap());
    let st = msgs(&mut b);
    assert_eq!(st[0].find::<CallState>(), Some(&CallState::NULL));
    assert_eq!(
        st[0].call_ref,
        CallRef {
            value: 77,
            flag: true
        }
    );
}

#[test]
fn status_with_null_state_clears_the_call() {
    let mut a = up(CallConfig::default());
    let ca = a.setup(t(0), params()).unwrap();
    let _ = msgs(&mut a);
    let st = Message::new(
        MessageType::Status,
        CallRef {
            value: 1,
            flag: true,
        },
    )
    .with(Cause::new(
        Location::User,
        CauseValue::ResponseToStatusEnquiry,
    ))
    .with(CallState::NULL);
    a.handle_message(t(1), &st.to_bytes().unwrap());
    assert!(
        matches!(&events(&mut a)[..], [CallEvent::Released { call, by: ClearedBy::Remote, .. }] if *call == ca)
    );
}

#[test]
fn unknown_call_reference_gets_release_complete_81() {
    let mut b = up(CallConfig::default());
    let connect = Message::new(
        MessageType::Connect,
        CallRef {
            value: 5,
            flag: true,
        },
    );
    b.handle_message(t(0), &connect.to_bytes().unwrap());
    let m = msgs(&mut b);
    assert_eq!(m[0].kind, MessageType::ReleaseComplete);
    assert_eq!(
        m[0].call_ref,
        CallRef {
            value: 5,
            flag: false
        }
    );
    assert_eq!(
        m[0].cause().map(|c| c.value),
        Some(CauseValue::InvalidCallRef)
    );
    // RELEASE COMPLETE for an unknown call is ignored.
    let rc = Message::new(MessageType::ReleaseComplete, CallRef::new(9));
    b.handle_message(t(0), &rc.to_bytes().unwrap());
    assert!(msgs(&mut b).is_empty());
}

/// atmsigd's refusal of a SETUP it cannot parse carries the call reference shifted by
/// one octet; the caller hears the refusal at once instead of after two T303s.
#[test]
fn a_refusal_under_atmsigds_misread_call_reference_clears_the_setup() {
    let mut a = up(CallConfig::default());
    let call = a.setup(t(0), params()).unwrap();
    let setup = msgs(&mut a).remove(0);
    let cref = setup.call_ref.value;
    // Another call's reference, and a wrong shift, change nothing.
    let other = Message::new(
        MessageType::ReleaseComplete,
        CallRef {
            value: ((cref + 1) << 8) | 0x05,
            flag: true,
        },
    );
    a.handle_message(t(1), &other.to_bytes().unwrap());
    assert!(events(&mut a).is_empty());
    let cause = Cause::new(Location::User, CauseValue::from_raw(111));
    let rc = Message::new(
        MessageType::ReleaseComplete,
        CallRef {
            value: ((cref << 8) | 0x05) & CallRef::MAX,
            flag: true,
        },
    )
    .with(cause.clone());
    a.handle_message(t(2), &rc.to_bytes().unwrap());
    assert_eq!(
        events(&mut a),
        vec![CallEvent::Released {
            call,
            cause,
            by: ClearedBy::Remote
        }]
    );
    assert_eq!(a.call_count(), 0);
}

#[test]
fn message_out_of_state_gets_status_101() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    a.setup(t(0), params()).unwrap();
    exchange(t(0), &mut a, &mut b);
    let (cb, _) = incoming(&events(&mut b));
    // CONNECT ACK while the callee is in state 6.
    let ack = Message::new(MessageType::ConnectAck, CallRef::new(1));
    b.handle_message(t(1), &ack.to_bytes().unwrap());
    let m = msgs(&mut b);
    assert_eq!(m[0].kind, MessageType::Status);
    assert_eq!(
        m[0].cause().map(|c| c.value),
        Some(CauseValue::MessageIncompatibleWithState)
    );
    assert_eq!(m[0].find::<CallState>(), Some(&CallState::CALL_PRESENT));
    assert_eq!(b.state(cb), Some(CallState::CALL_PRESENT));
    // An unknown message type: cause 97.
    let odd = Message::new(MessageType::Other(0x33), CallRef::new(1));
    b.handle_message(t(1), &odd.to_bytes().unwrap());
    let m = msgs(&mut b);
    assert_eq!(
        m[0].cause().map(|c| c.value),
        Some(CauseValue::MessageTypeNonExistent)
    );
}

#[test]
fn setup_without_mandatory_ies_is_refused_with_96() {
    let mut b = up(CallConfig::default());
    let mut setup = Message::new(MessageType::Setup, CallRef::new(3));
    setup.push(CalledNumber::aesa(match aesa(1) {
        PartyAddress::Aesa(a) => a,
        _ => unreachable!(),
    }));
    b.handle_message(t(0), &setup.to_bytes().unwrap());
    let m = msgs(&mut b);
    assert_eq!(m[0].kind, MessageType::ReleaseComplete);
    let c = m[0].cause().unwrap();
    assert_eq!(c.value, CauseValue::MandatoryIeMissing);
    assert_eq!(
        c.diagnostics,
        [0x59, 0x5E, 0x5C],
        "traffic, bearer, QoS missing"
    );
    assert!(events(&mut b).is_empty());
}

#[test]
fn malformed_messages_get_the_codec_cause() {
    let mut a = up(CallConfig::default());
    a.setup(t(0), params()).unwrap();
    let mut setup = msgs(&mut a)[0].to_bytes().unwrap();
    // Wrong message length → cause 104 in RELEASE COMPLETE.
    setup[8] = setup[8].wrapping_add(1);
    let mut b = up(CallConfig::default());
    b.handle_message(t(0), &setup);
    let m = msgs(&mut b);
    assert_eq!(m[0].kind, MessageType::ReleaseComplete);
    assert_eq!(
        m[0].cause().map(|c| c.value),
        Some(CauseValue::IncorrectMessageLength)
    );
    // Not Q.2931 at all: ignored.
    b.handle_message(t(0), &[0x08, 3, 0, 0, 1, 5, 0x80, 0, 0]);
    b.handle_message(t(0), &[1, 2, 3]);
    assert!(msgs(&mut b).is_empty());
    assert_eq!(b.stats().malformed, 3);
}

#[test]
fn bad_mandatory_ie_contents_refused_with_100() {
    let mut a = up(CallConfig::default());
    a.setup(t(0), params()).unwrap();
    let setup = msgs(&mut a).remove(0);
    let mut bytes = setup.to_bytes().unwrap();
    // Corrupt the bearer capability's class octet extension bit (0x5E IE, octet 5).
    let at = bytes.windows(2).position(|w| w == [0x5E, 0x80]).unwrap();
    bytes[at + 4] &= 0x7F;
    bytes[at + 5] = 0x00;
    let mut b = up(CallConfig::default());
    b.handle_message(t(0), &bytes);
    let m = msgs(&mut b);
    assert_eq!(m[0].kind, MessageType::ReleaseComplete, "{m:?}");
    let c = m[0].cause().unwrap();
    assert_eq!(c.value, CauseValue::InvalidIeContents);
    assert_eq!(c.diagnostics, [0x5E]);
}

#[test]
fn max_calls_bounds_both_directions() {
    let cfg = CallConfig {
        max_calls: 2,
        ..CallConfig::default()
    };
    let mut small = up(cfg.clone());
    small.setup(t(0), params()).unwrap();
    small.setup(t(0), params()).unwrap();
    assert_eq!(
        small.setup(t(0), params()),
        Err(CallError::TooManyCalls { limit: 2 })
    );
    let mut a = up(CallConfig::default());
    let mut b = up(cfg);
    for _ in 0..3 {
        a.setup(t(0), params()).unwrap();
    }
    exchange(t(0), &mut a, &mut b);
    assert_eq!(events(&mut b).len(), 2, "two calls offered");
    let ev = events(&mut a);
    assert!(
        matches!(&ev[..], [CallEvent::Released { cause, by: ClearedBy::Remote, .. }] if cause.value == CauseValue::ResourcesUnavailable),
        "{ev:?}"
    );
    assert_eq!(b.stats().refused_full, 1);
    assert_eq!(b.call_count(), 2);
}

#[test]
fn link_down_clears_setup_calls_and_keeps_active_ones_for_t309() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let (active, _) = accepted_call(&mut a, &mut b);
    let _ = events(&mut a);
    let pending = a.setup(t(1), params()).unwrap();
    a.link_down(t(2));
    assert!(msgs(&mut a).is_empty(), "queued messages dropped");
    let ev = events(&mut a);
    assert!(
        matches!(&ev[..], [CallEvent::Released { call, by: ClearedBy::Link, .. }] if *call == pending)
    );
    assert_eq!(a.state(active), Some(CallState::ACTIVE));
    assert_eq!(a.setup(t(2), params()), Err(CallError::LinkDown));
    // Back within T309: STATUS ENQUIRY checks the call.
    a.link_up(t(5_000));
    let m = msgs(&mut a);
    assert_eq!(m[0].kind, MessageType::StatusEnquiry);
    // Lost for longer than T309: the active call is cleared with cause 27.
    a.link_down(t(6_000));
    a.handle_timeout(t(16_000));
    let ev = events(&mut a);
    assert!(
        matches!(&ev[..], [CallEvent::Released { call, cause, by: ClearedBy::Timer }]
        if *call == active && cause.value == CauseValue::DestinationOutOfOrder),
        "{ev:?}"
    );
}

#[test]
fn e164_called_party_and_no_sap() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let p = CallParams {
        called: PartyAddress::E164(E164::new("4122123456").unwrap()),
        calling: None,
        sap: None,
        qos: Qos::best_effort(),
        natm: NatmParams::default(),
        conn_id: None,
        multipoint: false,
        dtl: None,
    };
    a.setup(t(0), p.clone()).unwrap();
    exchange(t(0), &mut a, &mut b);
    let (_, got) = incoming(&events(&mut b));
    assert_eq!(got.called, p.called);
    assert_eq!(got.sap, None);
    assert_eq!(got.qos, p.qos);
}

#[test]
fn sap_is_bounded() {
    assert!(Sap::new(b"").is_err());
    assert!(Sap::new(b"123456789").is_err());
    assert_eq!(Sap::new(b"12345678").unwrap().as_bytes(), b"12345678");
    // ttcp_atm's vendor-specific application (FORE's OUI), text both ways.
    let v = Sap::parse("@0060d7.01000003").unwrap();
    assert_eq!(v, Sap::vendor([0x00, 0x60, 0xd7], 0x0100_0003));
    assert_eq!(v.to_string(), "@0060d7.01000003");
    assert_eq!(v.as_bytes(), [0x00, 0x60, 0xd7, 0x01, 0x00, 0x00, 0x03]);
    assert_eq!(Sap::parse("echo").unwrap().to_string(), "echo");
    for bad in ["@0060d7", "@0060d7.0100000", "@0060dz.01000003", "@"] {
        assert!(Sap::parse(bad).is_err(), "{bad}");
    }
    match v.to_ie().body {
        IeBody::Bhli(b) => {
            assert_eq!(b.kind, BhliType::VendorSpecific);
            assert_eq!(Sap::from_bhli(&b), Some(v));
        }
        other => panic!("a vendor SAP rides in B-HLI: {other:?}"),
    }
}

/// Classical IP's SAP (RFC 2225, Linux's atmarpd): B-LLI layer 2 LLC, no B-HLI.
#[test]
fn a_blli_sap_is_text_both_ways_and_rides_in_the_blli_ie() {
    let llc = Sap::parse("blli.llc").unwrap();
    assert_eq!(llc, Sap::llc());
    assert!(llc.is_blli());
    assert_eq!(llc.to_string(), "blli.llc");
    assert_eq!(Sap::parse("blli.cc").unwrap(), llc, "the LLC octet in hex");
    assert_eq!("blli.llc".parse::<Sap>().unwrap(), llc);
    assert_eq!(Sap::of_listener("+4420001:blli.llc").unwrap(), llc);
    // Another layer 2 (X.25 link layer, 0x06) and layer 3 octets, kept as given.
    let other = Sap::parse("blli.c6e6").unwrap();
    assert_eq!(other.to_string(), "blli.c6e6");
    assert_ne!(other, llc);
    for bad in ["blli.", "blli.c", "blli.zz", "blli.llcx"] {
        assert!(Sap::parse(bad).is_err(), "{bad}");
        assert!(
            matches!(Sap::from_text(bad), Err(SapTextError::BadBlli(_))),
            "{bad}"
        );
    }
    match llc.to_ie().body {
        IeBody::Blli(b) => assert_eq!(b, Blli::llc()),
        other => panic!("{other:?}"),
    }
    // A SETUP naming its service only by B-LLI (as Linux's atmarpd does) is offered
    // on that SAP; natm's own SETUP carries it the same way, and no B-HLI.
    let p = CallParams {
        sap: Some(llc.clone()),
        ..params()
    };
    let mut setup = Message::new(MessageType::Setup, CallRef::new(3));
    p.setup_ies(&mut setup, 0, false);
    assert!(setup.find::<Bhli>().is_none());
    assert_eq!(setup.find::<Blli>(), Some(&Blli::llc()));
    assert_eq!(CallParams::from_setup(&setup).unwrap().sap, Some(llc));
    // With both, B-HLI names the service.
    let mut both = Message::new(MessageType::Setup, CallRef::new(4));
    params().setup_ies(&mut both, 0, false);
    both.push(Blli::llc());
    assert_eq!(CallParams::from_setup(&both).unwrap().sap, params().sap);
}

#[test]
fn sap_text_is_checked_with_a_reason() {
    assert_eq!("echo".parse::<Sap>().unwrap().as_bytes(), b"echo");
    assert_eq!("a-b_12CD".parse::<Sap>().unwrap().as_bytes(), b"a-b_12CD");
    assert_eq!(
        "@0060d7.01000003".parse::<Sap>().unwrap(),
        Sap::vendor([0x00, 0x60, 0xd7], 0x0100_0003)
    );
    assert_eq!("".parse::<Sap>(), Err(SapTextError::Empty));
    assert_eq!("123456789".parse::<Sap>(), Err(SapTextError::TooLong(9)));
    assert_eq!(
        "x".repeat(300).parse::<Sap>(),
        Err(SapTextError::TooLong(300))
    );
    let space = "my sap".parse::<Sap>().unwrap_err();
    assert_eq!(
        space,
        SapTextError::BadCharacter {
            sap: "my sap".into(),
            ch: ' '
        }
    );
    assert!(space.to_string().contains("' ' is not allowed"), "{space}");
    // Non-ASCII: refused as a character, though "écho" fits in 8 octets.
    assert!(matches!(
        "écho".parse::<Sap>(),
        Err(SapTextError::BadCharacter { ch: 'é', .. })
    ));
    assert!(matches!(
        "@0060d7".parse::<Sap>(),
        Err(SapTextError::BadVendor(_))
    ));
    // Sap::parse, for what foreign SETUPs carry, stays permissive.
    assert!(Sap::parse("my sap").is_ok());
}

#[test]
fn a_listener_s_and_a_called_party_s_sap_are_found_and_checked() {
    assert_eq!(Sap::of_listener("echo").unwrap().as_bytes(), b"echo");
    assert_eq!(
        Sap::of_listener("+4420001:echo").unwrap().as_bytes(),
        b"echo"
    );
    assert_eq!(Sap::of_listener(""), Err(SapTextError::Empty));
    assert_eq!(Sap::of_listener("+4420001:"), Err(SapTextError::Empty));
    assert!(Sap::of_listener("bad sap").is_err());
    let no_address = |_: &str| false;
    assert_eq!(Sap::of_called("+4420001", no_address), Ok(None));
    assert_eq!(
        Sap::of_called("bob:echo", no_address)
            .unwrap()
            .unwrap()
            .as_bytes(),
        b"echo"
    );
    assert_eq!(Sap::of_called("bob:", no_address), Err(SapTextError::Empty));
    assert!(matches!(
        Sap::of_called("bob:my sap", no_address),
        Err(SapTextError::BadCharacter { ch: ' ', .. })
    ));
    // An address with a colon of its own (an AESA written e164-digits:hex) has no SAP.
    let sub = "123456789012345:0000000000000000000000";
    assert!(Sap::of_called(sub, |_| false).is_err());
    assert_eq!(Sap::of_called(sub, |t| t == sub), Ok(None));
}

#[test]
fn call_ids_are_never_reused() {
    let mut a = up(CallConfig::default());
    let mut seen = std::collections::HashSet::new();
    for i in 0..50 {
        let c = a.setup(t(i), params()).unwrap();
        assert!(seen.insert(c));
        a.release(
            t(i),
            c,
            Cause::new(Location::User, CauseValue::NormalCallClearing),
        )
        .unwrap();
        let rc = Message::new(MessageType::ReleaseComplete, a.call_ref(c).unwrap().reply());
        a.handle_message(t(i), &rc.to_bytes().unwrap());
        assert_eq!(a.call_count(), 0);
    }
}

#[test]
fn link_reset_clears_setups_and_checks_active_calls() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let (active, _) = accepted_call(&mut a, &mut b);
    let _ = events(&mut a);
    let pending = a.setup(t(1), params()).unwrap();
    let _ = msgs(&mut a); // lost in the resynchronisation
    a.link_reset(t(2));
    let m = msgs(&mut a);
    let kinds: Vec<MessageType> = m.iter().map(|m| m.kind).collect();
    assert_eq!(kinds, [MessageType::StatusEnquiry, MessageType::Release]);
    assert_eq!(
        m[1].cause().map(|c| c.value),
        Some(CauseValue::TemporaryFailure)
    );
    assert_eq!(a.state(active), Some(CallState::ACTIVE));
    assert_eq!(a.state(pending), Some(CallState::RELEASE_REQUEST));
}

#[test]
fn release_during_link_loss_goes_out_when_the_link_is_back() {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let (ca, _) = accepted_call(&mut a, &mut b);
    let _ = (events(&mut a), events(&mut b));
    a.link_down(t(1));
    b.link_down(t(1));
    a.release(
        t(2),
        ca,
        Cause::new(Location::User, CauseValue::NormalCallClearing),
    )
    .unwrap();
    a.link_up(t(3));
    b.link_up(t(3));
    let kinds: Vec<MessageType> = msgs(&mut a).iter().map(|m| m.kind).collect();
    assert_eq!(
        kinds,
        [MessageType::Release],
        "no STATUS ENQUIRY for a call being cleared"
    );
    let se: Vec<MessageType> = msgs(&mut b).iter().map(|m| m.kind).collect();
    assert_eq!(se, [MessageType::StatusEnquiry], "b checks its active call");
}

// ----- Q.2963.1 modification -------------------------------------------------------

fn pcr_td(pcr: u32) -> TrafficDescriptor {
    let dir = crate::wire::q2931::CellRates {
        pcr01: Some(pcr),
        ..Default::default()
    };
    TrafficDescriptor {
        fwd: dir,
        bwd: dir,
        ..TrafficDescriptor::default()
    }
}

/// Two linked call controls with an accepted call between them, their events so
/// far taken.
fn active_call() -> (CallControl, CallControl, CallId, CallId) {
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let (ca, cb) = accepted_call(&mut a, &mut b);
    events(&mut a);
    events(&mut b);
    (a, b, ca, cb)
}

fn modify_requested(evs: &[CallEvent]) -> (CallId, TrafficDescriptor) {
    match evs {
        [CallEvent::ModifyRequested { call, traffic }] => (*call, traffic.clone()),
        other => panic!("expected one ModifyRequested, got {other:?}"),
    }
}

#[test]
fn modify_acknowledged_end_to_end() {
    let (mut a, mut b, ca, cb) = active_call();
    a.modify(t(10), ca, pcr_td(52_084)).unwrap();
    assert_eq!(
        a.modify_state(ca),
        Some(&ModifyState::Requested(pcr_td(52_084)))
    );
    assert_eq!(
        a.poll_timeout(),
        Some(t(10) + Duration::from_secs(30)),
        "T360"
    );
    // A second request while one is pending is refused locally.
    assert_eq!(
        a.modify(t(10), ca, pcr_td(1)),
        Err(CallError::ModifyPending(ca))
    );
    exchange(t(11), &mut a, &mut b);
    let (call, traffic) = modify_requested(&events(&mut b));
    assert_eq!((call, &traffic), (cb, &pcr_td(52_084)));
    assert_eq!(b.modify_state(cb), Some(&ModifyState::Received(traffic)));
    assert_eq!(b.modify_accept(cb).unwrap(), pcr_td(52_084));
    exchange(t(12), &mut a, &mut b);
    assert_eq!(
        events(&mut a),
        vec![CallEvent::Modified {
            call: ca,
            traffic: pcr_td(52_084)
        }]
    );
    assert_eq!(a.modify_state(ca), Some(&ModifyState::Idle));
    assert_eq!(b.modify_state(cb), Some(&ModifyState::Idle));
    assert_eq!(a.poll_timeout(), None, "T360 stopped");
    assert_eq!(a.state(ca), Some(CallState::ACTIVE));
    // The callee may modify too, and answering twice is an error.
    assert!(matches!(
        b.modify_accept(cb),
        Err(CallError::WrongState { .. })
    ));
    b.modify(t(13), cb, pcr_td(100)).unwrap();
    exchange(t(13), &mut a, &mut b);
    let (call, _) = modify_requested(&events(&mut a));
    assert_eq!(call, ca);
}

#[test]
fn modify_rejected_keeps_the_call_and_reports_the_cause() {
    let (mut a, mut b, ca, cb) = active_call();
    a.modify(t(10), ca, pcr_td(1_000_000)).unwrap();
    exchange(t(10), &mut a, &mut b);
    modify_requested(&events(&mut b));
    let cause = Cause::new(Location::PrivateLocal, CauseValue::UserCellRateUnavailable);
    b.modify_reject(cb, cause.clone()).unwrap();
    let m = msgs(&mut b);
    assert_eq!(m[0].kind, MessageType::ModifyReject);
    a.handle_message(t(11), &m[0].to_bytes().unwrap());
    assert_eq!(
        events(&mut a),
        vec![CallEvent::ModifyRefused { call: ca, cause }]
    );
    assert_eq!(a.state(ca), Some(CallState::ACTIVE));
    assert_eq!(a.modify_state(ca), Some(&ModifyState::Idle));
    assert!(msgs(&mut a).is_empty(), "nothing answers a MODIFY REJECT");
}

#[test]
fn t360_expiry_releases_the_call_with_cause_102() {
    let (mut a, _b, ca, _) = active_call();
    a.modify(t(0), ca, pcr_td(5)).unwrap();
    msgs(&mut a); // lost
    a.handle_timeout(t(29_999));
    assert!(msgs(&mut a).is_empty());
    a.handle_timeout(t(30_000));
    let m = msgs(&mut a);
    assert_eq!(m[0].kind, MessageType::Release);
    assert_eq!(
        m[0].cause(),
        Some(&Cause::timer_expiry(Location::User, 360))
    );
    assert_eq!(a.state(ca), Some(CallState::RELEASE_REQUEST));
}

#[test]
fn crossing_requests_are_both_refused_with_101() {
    let (mut a, mut b, ca, cb) = active_call();
    a.modify(t(1), ca, pcr_td(10)).unwrap();
    b.modify(t(1), cb, pcr_td(20)).unwrap();
    exchange(t(1), &mut a, &mut b);
    for (c, id) in [(&mut a, ca), (&mut b, cb)] {
        let ev = events(c);
        let [CallEvent::ModifyRefused { call, cause }] = &ev[..] else {
            panic!("expected one refusal, got {ev:?}");
        };
        assert_eq!(*call, id);
        assert_eq!(cause.value, CauseValue::MessageIncompatibleWithState);
        assert_eq!(c.modify_state(id), Some(&ModifyState::Idle));
        assert_eq!(c.state(id), Some(CallState::ACTIVE));
    }
}

#[test]
fn bad_modify_messages_are_answered_not_obeyed() {
    let (a, mut b, ca, cb) = active_call();
    let cref = a.call_ref(ca).unwrap();
    // MODIFY REQUEST without its traffic descriptor: MODIFY REJECT cause 96 (0x59).
    let bare = Message::new(MessageType::ModifyRequest, cref);
    b.handle_message(t(1), &bare.to_bytes().unwrap());
    let m = msgs(&mut b);
    assert_eq!(m[0].kind, MessageType::ModifyReject);
    let cause = m[0].cause().unwrap();
    assert_eq!(cause.value, CauseValue::MandatoryIeMissing);
    assert_eq!(cause.diagnostics, vec![0x59]);
    assert!(events(&mut b).is_empty());
    assert_eq!(b.modify_state(cb), Some(&ModifyState::Idle));
    // A MODIFY ACKNOWLEDGE nobody asked for: STATUS 101, nothing changes.
    let ack = Message::new(MessageType::ModifyAck, cref);
    b.handle_message(t(1), &ack.to_bytes().unwrap());
    let m = msgs(&mut b);
    assert_eq!(m[0].kind, MessageType::Status);
    assert_eq!(
        m[0].cause().map(|c| c.value),
        Some(CauseValue::MessageIncompatibleWithState)
    );
    assert!(events(&mut b).is_empty());
    // MODIFY REQUEST before the call is active: STATUS 101, and `modify` is refused.
    let mut c = up(CallConfig::default());
    let mut d = up(CallConfig::default());
    let cc = c.setup(t(0), params()).unwrap();
    exchange(t(0), &mut c, &mut d);
    assert!(matches!(
        c.modify(t(0), cc, pcr_td(1)),
        Err(CallError::WrongState { .. })
    ));
    let early = Message::new(MessageType::ModifyRequest, CallRef::new(1)).with(pcr_td(1));
    d.handle_message(t(1), &early.to_bytes().unwrap());
    assert_eq!(msgs(&mut d)[0].kind, MessageType::Status);
}

#[test]
fn a_peer_without_q2963_refuses_with_its_status_cause() {
    let (mut a, _b, ca, _) = active_call();
    a.modify(t(1), ca, pcr_td(7)).unwrap();
    msgs(&mut a);
    // What a UNI 3.1 peer answers an unknown message type with.
    let cref = a.call_ref(ca).unwrap().reply();
    let status = Message::new(MessageType::Status, cref)
        .with(Cause::new(
            Location::User,
            CauseValue::MessageTypeNonExistent,
        ))
        .with(CallState::ACTIVE);
    a.handle_message(t(2), &status.to_bytes().unwrap());
    let ev = events(&mut a);
    assert!(
        matches!(&ev[..], [CallEvent::ModifyRefused { call, cause }]
            if *call == ca && cause.value == CauseValue::MessageTypeNonExistent),
        "{ev:?}"
    );
    assert_eq!(a.poll_timeout(), None, "T360 stopped");
    assert_eq!(a.state(ca), Some(CallState::ACTIVE));
}

#[test]
fn a_dtl_goes_with_the_setup_and_a_crankback_comes_back_with_the_refusal() {
    use crate::wire::q2931::{Blocked, Crankback, Dtl, DtlHop, NodeId};
    let mut a = up(CallConfig::default());
    let mut b = up(CallConfig::default());
    let mut p = params();
    p.dtl = Some(Dtl {
        current: 1,
        hops: vec![
            DtlHop {
                node: NodeId(1),
                port: 2,
            },
            DtlHop {
                node: NodeId(2),
                port: 0,
            },
        ],
    });
    let ca = a.setup(t(0), p.clone()).unwrap();
    exchange(t(0), &mut a, &mut b);
    let (cb, offered) = incoming(&events(&mut b));
    assert_eq!(offered.dtl, p.dtl, "issue 33: the source route travels");
    let mut cause = Cause::new(Location::PrivateLocal, CauseValue::UserCellRateUnavailable);
    let cb_ie = Crankback::new(
        Blocked::Link {
            from: NodeId(2),
            port: 3,
            to: NodeId(3),
        },
        37,
    );
    cause.crankback = Some(cb_ie);
    b.reject(cb, cause).unwrap();
    exchange(t(1), &mut a, &mut b);
    let got = events(&mut a).into_iter().find_map(|e| match e {
        CallEvent::Released { call, cause, .. } if call == ca => Some(cause),
        _ => None,
    });
    assert_eq!(got.and_then(|c| c.crankback), Some(cb_ie));
    // Without a private IE (a standard UNI peer) no DTL goes out.
    let mut plain = up(CallConfig {
        private_ie: false,
        ..CallConfig::default()
    });
    plain.setup(t(2), p).unwrap();
    assert!(msgs(&mut plain)[0].find::<Dtl>().is_none());
}
