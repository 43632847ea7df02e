//! The per-call TPDU keys (issue 16, docs/decisions/0016-sealed-tpdus.md) as
//! two sigd cores agree them in virtual time: on by default between hosts, off on
//! request, none with a peer that sends no key share, and the call released when
//! `encrypt=on` meets such a peer.

use crate::support::*;
use bytes::Bytes;
use natm_proto::wire::ipc::Message;
use natm_proto::wire::q2931::{self, IeBody, MessageType as Q, NatmParams};
use natm_proto::wire::sscop::Pdu;
use natm_proto::wire::vcframe::{self, FrameKind};

/// The key shares a datagram's Q.2931 message carries (if it is an SD with one).
fn share_in(d: &Datagram) -> Option<(Q, Option<[u8; 32]>)> {
    let m = d.q2931()?;
    let natm = m.find::<NatmParams>();
    Some((m.kind, natm.and_then(|n| n.key_share())))
}

/// Take the key share out of every CONNECT: the callee is a peer that does not
/// know natm's key exchange (natm before issue 16; a Linux-ATM host answers with no
/// natm IE at all).
fn strip_connect_share(d: &mut Datagram) {
    let Ok((r, pdu)) = vcframe::Repr::parse_bytes(&d.bytes) else {
        return;
    };
    if r.kind != FrameKind::Signalling {
        return;
    }
    let Ok(Pdu::Sd { ns, info }) = Pdu::parse(pdu) else {
        return;
    };
    let Ok(mut m) = q2931::Message::parse(&info) else {
        return;
    };
    if m.kind != Q::Connect {
        return;
    }
    for ie in &mut m.ies {
        if let IeBody::Natm(n) = &mut ie.body {
            n.extra.retain(|(t, _)| *t != NatmParams::TAG_KEY_SHARE);
        }
    }
    let info = m.to_bytes().expect("the CONNECT re-encodes");
    d.bytes = Bytes::from(vcframe::signalling_frame(&Pdu::Sd { ns, info }.to_bytes()));
}

#[test]
fn calls_between_hosts_are_encrypted_by_default_with_one_key_per_direction() {
    let mut p = Pair::default();
    let (a, b, _) = p.call_ab();
    let (ka, kb) = (a.keys.expect("caller keys"), b.keys.expect("callee keys"));
    // What A seals, B opens, and the other way; the two directions differ.
    assert_eq!(ka, kb.reversed());
    assert_ne!(ka.tx, ka.rx);
    // The shares travelled in SETUP and CONNECT; the keys did not.
    let stat = p.stat(Side::A);
    assert!(stat.calls.iter().all(|c| c.encrypted), "{stat:?}");
    let stat = p.stat(Side::B);
    assert!(stat.calls.iter().all(|c| c.encrypted), "{stat:?}");
    // Another call gets other keys (the shares come from the OS, not from the
    // cores' seeded id streams, which are the same here).
    let (a2, _, _) = Pair::default().call_ab();
    assert_ne!(a2.keys.expect("keys").tx, ka.tx);
}

#[test]
fn shares_travel_in_setup_and_connect_and_differ_per_call() {
    let mut p = Pair::default();
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    p.rewrite = Box::new(move |d| {
        if let Some(x) = share_in(d) {
            log.borrow_mut().push(x);
        }
    });
    p.call_ab();
    let seen = seen.borrow();
    let setup = seen.iter().find(|(k, _)| *k == Q::Setup).expect("a SETUP");
    let connect = seen
        .iter()
        .find(|(k, _)| *k == Q::Connect)
        .expect("a CONNECT");
    let (s, c) = (
        setup.1.expect("SETUP share"),
        connect.1.expect("CONNECT share"),
    );
    assert_ne!(s, c);
    assert_ne!(s, [0; 32]);
}

#[test]
fn encrypt_off_sends_no_share_and_gives_no_keys() {
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "clear", "reliable");
    let a_app = p.app(Side::A);
    let a_call = p.connect(Side::A, a_app, "+4420002:clear", "reliable:encrypt=off");
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, qos, .. }] => {
            assert_eq!(qos.transport().encrypt, Some(false), "{qos}");
            *call
        }
        other => panic!("expected one Incoming, got {other:?}"),
    };
    let b = connected_of(&p.accept(Side::B, b_app, b_call), b_call);
    let a = connected_of(&p.take(Side::A, a_app), a_call);
    assert_eq!((a.keys, b.keys), (None, None));
    assert!(p.stat(Side::A).calls.iter().all(|c| !c.encrypted));
}

#[test]
fn a_peer_without_key_share_gets_clear_tpdus() {
    let mut p = Pair::default();
    p.rewrite = Box::new(strip_connect_share);
    let (a, b, _) = p.call_ab();
    // A never got B's share: A runs in clear, as with a callee that cannot encrypt
    // (which derives no keys either). Here B did derive keys — a CONNECT stripped
    // on the way is a downgrade attempt, and the call then fails closed (each end
    // drops the other's frames) rather than run half in clear.
    assert_eq!(a.keys, None);
    assert!(b.keys.is_some());
    assert!(p.stat(Side::A).calls.iter().all(|c| !c.encrypted));
}

#[test]
fn encrypt_on_with_a_peer_without_key_share_is_released() {
    let mut p = Pair::default();
    p.rewrite = Box::new(strip_connect_share);
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "must", "reliable");
    let a_app = p.app(Side::A);
    let a_call = p.connect(Side::A, a_app, "+4420002:must", "reliable:encrypt=on");
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("expected one Incoming, got {other:?}"),
    };
    p.accept(Side::B, b_app, b_call);
    p.drive();
    let (cause, detail) = released_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(cause, 63, "{detail}");
    assert!(detail.contains("key share"), "{detail}");
    // And the callee hears of it: RELEASE went out.
    assert!(p.sent_by(Side::A).contains(&Q::Release), "{:?}", p.trace);
}

#[test]
fn local_calls_are_clear_unless_asked_and_then_keyed() {
    let mut p = Pair::default();
    for (qos, want) in [("reliable", false), ("reliable:encrypt=on", true)] {
        let callee = p.app(Side::A);
        p.bind(Side::A, callee, "loc", qos);
        let caller = p.app(Side::A);
        let call = p.connect(Side::A, caller, "+4420001:loc", qos);
        let offered = match p.take(Side::A, callee).as_slice() {
            [Message::Incoming { call, .. }] => *call,
            other => panic!("expected an offer, got {other:?}"),
        };
        let callee_path = connected_of(&p.accept(Side::A, callee, offered), offered);
        let caller_path = connected_of(&p.take(Side::A, caller), call);
        assert_eq!(caller_path.keys.is_some(), want, "{qos}");
        if want {
            assert_eq!(caller_path.keys, callee_path.keys.map(|k| k.reversed()));
        }
        p.close(Side::A, caller);
        p.close(Side::A, callee);
        p.drive();
    }
}
