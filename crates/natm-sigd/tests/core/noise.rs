//! Issue 31: signalling links between sigds are Noise-authenticated by default —
//! two cores in virtual time with no keys configured, forged frames from a spoofed
//! source, a pinned key that changes, a configured key, a restart.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use natm_proto::sig::noise::{key_to_text, public_key};
use natm_proto::sig::peer::Control;
use natm_proto::wire::ipc::Message;
use natm_proto::wire::sscop::Pdu;
use natm_proto::wire::vcframe;

fn end() -> Vec<u8> {
    vcframe::signalling_frame(
        &Pdu::End {
            source_sscop: false,
            uu: Vec::new(),
        }
        .to_bytes(),
    )
}

#[test]
fn two_sigds_without_keys_call_over_a_noise_link_and_pin_each_other() {
    let mut p = Pair::noise();
    // Nothing goes in clear on the signalling VC.
    let clear: Arc<Mutex<usize>> = Arc::default();
    let c2 = clear.clone();
    p.lose = Box::new(move |d| {
        if vcframe::signalling_pdu(&d.bytes).is_some() {
            *c2.lock().unwrap() += 1;
        }
        false
    });
    let (a_path, b_path, (a_app, a_call, b_app, b_call)) = p.call_ab();
    assert_eq!(*clear.lock().unwrap(), 0);
    // The call's TPDU keys, bound to both sigds' Noise keys, agree crossed.
    let (ka, kb) = (a_path.keys.expect("sealed"), b_path.keys.expect("sealed"));
    assert_eq!((ka.tx, ka.rx), (kb.rx, kb.tx));
    let (a_sig, b_sig): (SocketAddr, SocketAddr) = (A_SIG.parse().unwrap(), B_SIG.parse().unwrap());
    let s = p.stat(Side::A);
    assert_eq!(s.peers[0].auth, "noise");
    let b_key = public_key(&noise_key(b_sig));
    assert_eq!(s.peers[0].peer_key, Some(key_to_text(&b_key)));
    // Each pinned the other's key on first use, once.
    assert_eq!(p.a.core.take_new_pins(), vec![(b_sig, b_key)]);
    assert_eq!(
        p.b.core.take_new_pins(),
        vec![(a_sig, public_key(&noise_key(a_sig)))]
    );
    p.send(
        Side::A,
        a_app,
        Message::Release {
            req: 0,
            call: a_call,
            cause: 16,
        },
    );
    assert!(matches!(
        p.take(Side::B, b_app).as_slice(),
        [Message::Released { call, cause: 16, .. }] if *call == b_call
    ));
}

#[test]
fn forged_ends_from_a_spoofed_source_release_nothing() {
    let mut p = Pair::noise();
    let (_, _, (_, _, b_app, _)) = p.call_ab();
    let a_sig: SocketAddr = A_SIG.parse().unwrap();
    let now = p.now;
    // Five clear ENDs (what released every call on an unkeyed link before), and
    // five in made-up transport messages naming sessions B might hold.
    for i in 0..5u32 {
        p.b.core.handle_peer(now, a_sig, &end());
        let forged = Control::NoiseData {
            receiver: i.wrapping_mul(0x9e37_79b9),
            counter: u64::from(i),
            ciphertext: &[&end()[4..], &[0; 16][..]].concat(),
        }
        .to_bytes();
        p.b.core.handle_peer(now, a_sig, &forged);
    }
    p.advance(Duration::from_secs(3));
    let s = p.stat(Side::B);
    assert!(s.peers[0].up, "the link went down");
    assert_eq!(s.calls.len(), 1);
    assert_eq!(s.counters.auth_failures, 10, "{:?}", s.counters);
    assert!(p.take(Side::B, b_app).is_empty(), "the call was released");
}

#[test]
fn a_peer_proving_another_key_than_the_pinned_one_is_refused() {
    let mut p = Pair::noise();
    let b_sig: SocketAddr = B_SIG.parse().unwrap();
    // A pinned some other key for B's address before.
    let a_sig: SocketAddr = A_SIG.parse().unwrap();
    let pins = HashMap::from([(b_sig, public_key(&[0x33; 32]))]);
    p.a.core.set_identity(noise_key(a_sig), pins);
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    p.advance(Duration::from_secs(10));
    let (cause, _) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 27, "destination out of order: no link");
    assert!(p.take(Side::B, b_app).is_empty());
    let s = p.stat(Side::A);
    assert!(s.counters.key_mismatches > 0, "{:?}", s.counters);
    assert!(!s.peers.iter().any(|l| l.up));
    assert!(p.a.core.take_new_pins().is_empty(), "the pin was replaced");
}

#[test]
fn a_configured_public_key_must_be_proved() {
    let a_sig: SocketAddr = A_SIG.parse().unwrap();
    let b_sig: SocketAddr = B_SIG.parse().unwrap();
    let right = key_to_text(&public_key(&noise_key(b_sig)));
    let wrong = key_to_text(&public_key(&[0x44; 32]));
    for (key, works) in [(right, true), (wrong, false)] {
        let mut p = Pair::noise();
        p.a = Node::noise(
            Side::A,
            &format!("[[peer]]\naddress = \"{B_SIG}\"\npublic_key = \"{key}\""),
            1,
        );
        let b_app = p.app(Side::B);
        p.bind(Side::B, b_app, "echo", "reliable");
        let a_app = p.app(Side::A);
        p.connect(Side::A, a_app, "+4420002:echo", "reliable");
        p.advance(Duration::from_secs(10));
        let offered = p
            .take(Side::B, b_app)
            .iter()
            .any(|m| matches!(m, Message::Incoming { .. }));
        assert_eq!(offered, works, "key {key}");
        // A configured key is not a pin.
        assert!(p.a.core.take_new_pins().is_empty());
        let _ = a_sig;
    }
}

#[test]
fn a_restarted_peer_handshakes_again_and_takes_new_calls() {
    let mut p = Pair::noise();
    let (_, _, (a_app, a_call, ..)) = p.call_ab();
    p.send(
        Side::A,
        a_app,
        Message::Release {
            req: 0,
            call: a_call,
            cause: 16,
        },
    );
    // B restarts with its key file (the same key) and nothing else.
    p.b = Node::noise(Side::B, "", 2);
    p.advance(Duration::from_secs(5));
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    p.advance(Duration::from_secs(3));
    assert!(
        p.take(Side::B, b_app)
            .iter()
            .any(|m| matches!(m, Message::Incoming { .. })),
        "no offer after the restart"
    );
    let s = p.stat(Side::B);
    assert!(s.peers[0].up && s.peers[0].auth == "noise");
}

#[test]
fn clear_links_are_only_where_both_ends_say_so() {
    // A says clear, B does not: no link.
    let mut p = Pair::noise();
    p.a = Node::new(Side::A, "", 1);
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    p.advance(Duration::from_secs(10));
    let (cause, _) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 27);
    assert!(p.stat(Side::B).counters.auth_failures > 0);
    // Both say so: a clear link, shown as one.
    let mut p = Pair::default();
    p.call_ab();
    assert_eq!(p.stat(Side::A).peers[0].auth, "clear");
    assert_eq!(p.stat(Side::A).peers[0].peer_key, None);
}

/// A host attached to a switch (`[[directory]] switch = true`), with `extra` TOML.
fn attached(extra: &str) -> natm_sigd::Config {
    let port = SWITCH_PORTS[0];
    let text = format!(
        "addresses = [\"{A_ADDR}\"]\nsocket = \"/nonexistent/sigd.sock\"\nsignalling = \"{A_SIG}\"\n\
         [link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000\ncpu_share = 1.0\n\
         [[directory]]\nprefix = \"*\"\npeer = \"{port}\"\nswitch = true\n{extra}"
    );
    natm_sigd::config::ConfigFile::parse(&text, std::path::Path::new("test.toml"))
        .unwrap()
        .check()
        .unwrap()
}

/// What the core sends to `to` now.
fn sent_to(core: &mut natm_sigd::core::Core, to: SocketAddr) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(o) = core.poll_output() {
        if let natm_sigd::core::Output::ToPeer(p, b) = o {
            if p == to {
                out.push(b.to_vec());
            }
        }
    }
    out
}

/// Issue 31: a host's link to its switch is Noise-authenticated by default, as one
/// to a peer sigd is (the switch process runs the same layer: tests/switch_noise.rs):
/// it opens with a first handshake message, not a clear BGN, and a clear END from
/// the switch's address is refused. `clear = true` for the switch opens it in clear.
#[test]
fn a_link_to_a_switch_is_noise_unless_its_peer_entry_says_clear() {
    let port: SocketAddr = SWITCH_PORTS[0].parse().unwrap();
    let now = natm_proto::time::Instant::from_nanos(1_000_000);
    let mut n = Node::with_config(attached(""), 1);
    n.core.start(now);
    let out = sent_to(&mut n.core, port);
    assert!(
        matches!(Control::parse(&out[0]), Ok(Control::NoiseInit { .. })),
        "{out:?}"
    );
    assert!(out.iter().all(|d| vcframe::signalling_pdu(d).is_none()));
    n.core.handle_peer(now, port, &end());
    let s = n.core.stat();
    assert_eq!(s.peers[0].auth, "noise");
    assert_eq!(s.counters.auth_failures, 1);
    // Clear at the operator's word.
    let mut n = Node::with_config(
        attached(&format!("[[peer]]\naddress = \"{port}\"\nclear = true\n")),
        1,
    );
    n.core.start(now);
    let out = sent_to(&mut n.core, port);
    let bgn = vcframe::signalling_pdu(&out[0]).expect("a clear frame");
    assert!(matches!(Pdu::parse(bgn), Ok(Pdu::Bgn { .. })));
    assert_eq!(n.core.stat().peers[0].auth, "clear");
}
