//! Issue 16, signalling peers: who may open a link, what a peer may claim and hold,
//! and what spoofed or replayed signalling can do — two (or three) cores in virtual
//! time. Each test is an attack that succeeded before these defences.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use natm_proto::sig::peer::Control;
use natm_proto::wire::ipc::Message;
use natm_proto::wire::sscop::{Pdu, SeqNum};
use natm_proto::wire::vcframe;
use natm_sigd::config::ConfigFile;
use natm_sigd::core::Output;
use natm_sigd::Config;

fn host(addr: &str, sig: &str, extra: &str) -> Config {
    let text = format!(
        "addresses = [\"{addr}\"]\nsocket = \"/nonexistent/sigd.sock\"\nsignalling = \"{sig}\"\n\
         [link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000\ncpu_share = 1.0\n{extra}"
    );
    ConfigFile::parse(&text, Path::new("t.toml"))
        .expect("parses")
        .check()
        .expect("valid")
}

fn bgn() -> Vec<u8> {
    let pdu = Pdu::Bgn {
        nsq: 1,
        nmr: SeqNum::new(128).unwrap(),
        uu: Vec::new(),
    };
    vcframe::signalling_frame(&pdu.to_bytes())
}

/// A Noise handshake's first message (any 32 octets make an ephemeral key).
fn noise_init(i: u32) -> Vec<u8> {
    Control::NoiseInit {
        sender: i,
        msg: &[i as u8; 32],
    }
    .to_bytes()
}

fn spoofed(i: u32) -> SocketAddr {
    SocketAddr::from((
        [10, 9, (i >> 8) as u8, i as u8],
        40_000 + (i % 20_000) as u16,
    ))
}

/// A call A→B to a listener on "echo", accepted, released; both applications leave.
fn call_and_release(p: &mut Pair) {
    let (_, _, (a_app, a_call, b_app, _)) = p.call_ab();
    p.send(
        Side::A,
        a_app,
        Message::Release {
            req: 0,
            call: a_call,
            cause: 16,
        },
    );
    p.close(Side::A, a_app);
    p.close(Side::B, b_app);
}

#[test]
fn a_flood_of_spoofed_sources_holds_nothing_and_the_real_peer_still_calls() {
    let mut p = Pair::noise();
    let before = p.stat(Side::B);
    // 1,100 handshake openings and BGNs from 1,100 forged sources (on main: 1,024
    // links, then none for A). The handshakes are challenged (no Noise state before
    // a cookie echo), the clear BGNs dropped.
    let now = p.now;
    for i in 0..1_100 {
        let d = if i % 2 == 0 { noise_init(i) } else { bgn() };
        p.b.core.handle_peer(now, spoofed(i), &d);
    }
    p.drive();
    let s = p.stat(Side::B);
    assert!(
        s.peers.is_empty(),
        "links for forged sources: {}",
        s.peers.len()
    );
    // Answers to forged sources are bounded (a reflection budget), the rest counted.
    assert!(s.counters.peer_challenges <= 256, "{:?}", s.counters);
    assert_eq!(
        s.counters.peer_challenges + s.counters.peer_refusals - before.counters.peer_refusals,
        1_100
    );
    eprintln!(
        "1,100 forged BGNs: links {}, challenges {}, dropped {}",
        s.peers.len(),
        s.counters.peer_challenges,
        s.counters.peer_refusals
    );
    call_and_release(&mut p);
    assert_eq!(p.stat(Side::B).peers.len(), 1);
}

#[test]
fn an_unknown_peer_is_admitted_by_its_cookie_echo_and_expires_when_idle() {
    // B has no route to A (a two-sigd setup where only the caller is configured).
    let mut p = Pair::noise();
    p.b = Node::with_config(host(B_ADDR, B_SIG, ""), 2);
    call_and_release(&mut p);
    let s = p.stat(Side::B);
    assert_eq!(s.counters.peers_admitted, 1, "{:?}", s.counters);
    assert_eq!(s.counters.peer_challenges, 1);
    assert_eq!(s.peers.len(), 1);
    // Admitted by its cookie, then authenticated by Noise (its key pinned).
    assert_eq!(s.peers[0].auth, "noise");
    assert!(s.peers[0].peer_key.is_some());
    // Idle for [peers] idle_ms (60 s by default): released and forgotten (the ENDs
    // of both ends cross, each for a link the other forgot, and may make an idle
    // link without a connection, which expires in turn).
    p.advance(Duration::from_secs(61));
    let s = p.stat(Side::B);
    assert!(
        s.peers.iter().all(|l| !l.up && l.calls == 0),
        "{:?}",
        s.peers
    );
    assert_eq!(s.counters.links_expired, 1);
    // ... at both ends (A got the END), and a new call brings it back.
    p.advance(Duration::from_secs(2));
    call_and_release(&mut p);
    assert_eq!(p.stat(Side::B).counters.peers_admitted, 2);
}

#[test]
fn unknown_peers_are_refused_when_the_config_says_so() {
    let mut p = Pair::default();
    p.b = Node::with_config(host(B_ADDR, B_SIG, "[peers]\naccept_unknown = false"), 2);
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    p.advance(Duration::from_secs(10));
    let (cause, _) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 27, "destination out of order: no link");
    let s = p.stat(Side::B);
    assert!(s.peers.is_empty());
    assert!(s.counters.peer_refusals > 0);
}

#[test]
fn a_captured_setup_replayed_from_another_port_creates_no_call() {
    let mut p = Pair::noise();
    // Capture everything A sends B for one call.
    let captured: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let c2 = captured.clone();
    let a_sig: SocketAddr = A_SIG.parse().unwrap();
    p.lose = Box::new(move |d| {
        if d.from == a_sig {
            c2.lock().unwrap().push(d.bytes.clone());
        }
        false
    });
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    let offered = p.take(Side::B, b_app);
    assert!(matches!(offered.as_slice(), [Message::Incoming { .. }]));
    let frames: Vec<Bytes> = std::mem::take(&mut *captured.lock().unwrap());
    // Replay every frame from A's own address: SSCOP duplicates, no new offer.
    let now = p.now;
    for f in &frames {
        p.b.core.handle_peer(now, a_sig, f);
    }
    p.drive();
    assert!(p.take(Side::B, b_app).is_empty());
    // From another port, with the attacker echoing the challenge it gets there: the
    // link is admitted, but the captured handshake cannot be completed without A's
    // keys, and the captured transport messages name no session there.
    let thief: SocketAddr = "10.0.0.1:2906".parse().unwrap();
    for f in &frames {
        p.b.core.handle_peer(p.now, thief, f);
        let mut echoes = Vec::new();
        while let Some(o) = p.b.core.poll_output() {
            match o {
                Output::ToPeer(to, d) => {
                    if let (true, Ok(Control::Challenge { cookie, pdu })) =
                        (to == thief, Control::parse(&d))
                    {
                        echoes.push(Control::Echo { cookie, pdu }.to_bytes());
                    }
                }
                Output::ToApp(app, m) => p.b.inbox.entry(app).or_default().push_back(m),
                _ => {}
            }
        }
        for e in echoes {
            p.b.core.handle_peer(p.now, thief, &e);
        }
    }
    p.drive();
    assert!(p.take(Side::B, b_app).is_empty(), "the replay was offered");
    let s = p.stat(Side::B);
    assert!(s.counters.auth_failures > 0, "{:?}", s.counters);
    assert_eq!(s.calls.len(), 1);
}

#[test]
fn a_peer_cannot_claim_a_number_that_another_peer_owns() {
    // A calls as +4420003, which B routes to a third host; B's policy lets only
    // +4420003 in.
    let mut p = Pair::default();
    p.a = Node::with_config(
        host(
            "+4420003",
            A_SIG,
            &format!("[[directory]]\nprefix = \"{B_ADDR}\"\npeer = \"{B_SIG}\""),
        ),
        1,
    );
    p.b = Node::with_config(
        host(
            B_ADDR,
            B_SIG,
            &format!(
                "[[directory]]\nprefix = \"{A_ADDR}\"\npeer = \"{A_SIG}\"\n\
                 [[directory]]\nprefix = \"+4420003\"\npeer = \"10.0.0.3:2905\"\n\
                 [[policy]]\naction = \"allow\"\nprefix = \"+4420003\"\n\
                 [[policy]]\naction = \"reject\"\nprefix = \"*\""
            ),
        ),
        2,
    );
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    let (cause, _) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 21, "call rejected");
    assert!(p.take(Side::B, b_app).is_empty());
    assert_eq!(p.stat(Side::B).counters.caller_refusals, 1);
    // Listed in [[peer]] callers, the same claim is the peer's own.
    p.b = Node::with_config(
        host(
            B_ADDR,
            B_SIG,
            &format!(
                "[[directory]]\nprefix = \"+4420003\"\npeer = \"10.0.0.3:2905\"\n\
                 [[peer]]\naddress = \"{A_SIG}\"\ncallers = [\"+4420003\"]"
            ),
        ),
        2,
    );
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    p.advance(Duration::from_secs(5));
    let a_app = p.app(Side::A);
    p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    p.advance(Duration::from_millis(100));
    assert!(matches!(
        p.take(Side::B, b_app).as_slice(),
        [Message::Incoming { caller, .. }] if caller == "+4420003"
    ));
}

#[test]
fn an_unanswered_guaranteed_call_holds_its_reservation_only_for_reserve_ms() {
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "video", "cbr:pcr=20Mbps");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:video", "cbr:pcr=20Mbps");
    assert!(matches!(
        p.take(Side::B, b_app).as_slice(),
        [Message::Incoming { .. }]
    ));
    let held = p.stat(Side::B);
    assert_eq!(held.free_in_bps, 80_000_000);
    // [timers] reserve_ms is 2 s by default (accept_ms, 10 s, for best effort).
    p.advance(Duration::from_millis(2_100));
    let (cause, detail) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 18, "{detail}");
    let s = p.stat(Side::B);
    assert_eq!(s.free_in_bps, 100_000_000);
    assert!(s.calls.is_empty());
    assert_eq!(s.counters.reserve_expiries, 1);
}

#[test]
fn one_peer_cannot_hold_more_than_its_half_open_share() {
    // A configured peer's share is the link by default; here 25 Mbit/s.
    let mut p = Pair::new("", "[peers]\nhalf_open = \"25Mbps\"");
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "video", "cbr:pcr=20Mbps");
    let a_app = p.app(Side::A);
    p.connect(Side::A, a_app, "+4420002:video", "cbr:pcr=20Mbps");
    let second = p.connect(Side::A, a_app, "+4420002:video", "cbr:pcr=20Mbps");
    let (cause, detail) = released_of(&p.take(Side::A, a_app), second);
    assert_eq!(cause, 47, "{detail}");
    assert_eq!(p.take(Side::B, b_app).len(), 1, "one offer only");
    // Answering the first frees the share.
    let first = match p.stat(Side::B).calls.as_slice() {
        [c] => u64::from_str_radix(&c.id, 16).unwrap(),
        other => panic!("{other:?}"),
    };
    p.accept(Side::B, b_app, first);
    let third = p.connect(Side::A, a_app, "+4420002:video", "cbr:pcr=20Mbps");
    assert!(p
        .take(Side::A, a_app)
        .iter()
        .all(|m| !matches!(m, Message::Released { call, .. } if *call == third)));
    assert_eq!(p.take(Side::B, b_app).len(), 1);
}

/// B listens on `echo` (pre-authorised), and A calls it `n` times: the releases of
/// the calls B refused, in order.
fn calls_until_refused(p: &mut Pair, n: usize) -> Vec<Message> {
    let b_app = p.app(Side::B);
    let endpoints = (0..20).map(|i| data(30_000 + i)).collect();
    p.bind_auto(Side::B, b_app, "echo", "reliable", endpoints);
    let a_app = p.app(Side::A);
    let mut refused = Vec::new();
    for _ in 0..n {
        let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
        let msgs = p.take(Side::A, a_app);
        if let Some(m) = msgs
            .iter()
            .find(|m| matches!(m, Message::Released { call: c, .. } if *c == call))
        {
            refused.push(m.clone());
        }
    }
    refused
}

#[test]
fn incoming_calls_count_against_the_call_limit_and_each_peer_share() {
    let mut p = Pair::new("", "[limits]\ncalls = 8");
    let refused = calls_until_refused(&mut p, 8);
    // Three quarters of 8 for one peer: 6 held, 2 refused with cause 47.
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused
        .iter()
        .all(|m| matches!(m, Message::Released { cause: 47, .. })));
    let s = p.stat(Side::B);
    assert_eq!(s.calls.len(), 6);
    assert_eq!(s.counters.peer_limit_refusals, 2);
}

/// Issue 31: the links of peers nobody configured share their calls per network
/// (`calls_per_unknown_prefix`, a quarter of `[limits] calls`) and in all
/// (`calls_unknown`, half), so that an attacker's many addresses, each a link of its
/// own with its own `calls_per_peer`, cannot take the calls configured peers and the
/// host itself need.
#[test]
fn unknown_peers_share_their_calls_per_network_and_in_all() {
    let run = |extra: &str| {
        let mut p = Pair::noise();
        p.b = Node::with_config(host(B_ADDR, B_SIG, extra), 2);
        let refused = calls_until_refused(&mut p, 8);
        assert!(
            refused
                .iter()
                .all(|m| matches!(m, Message::Released { cause: 47, .. })),
            "{refused:?}"
        );
        let s = p.stat(Side::B);
        assert_eq!(s.counters.peer_limit_refusals, refused.len() as u64);
        (s.calls.len(), refused)
    };
    // A is unknown to B: of 16 calls, a quarter (4) from A's /24 (calls_per_peer
    // alone would have let 12 in).
    let (held, refused) = run("[limits]\ncalls = 16");
    assert_eq!((held, refused.len()), (4, 4));
    // With a larger share per network, the bound on all unknown peers (half) holds.
    let (held, refused) = run("[limits]\ncalls = 12\n[peers]\ncalls_per_unknown_prefix = 12");
    assert_eq!((held, refused.len()), (6, 2));
}

/// Issue 31: what unconfigured peers' answered guaranteed calls hold is bounded per
/// network (`bandwidth_per_unknown_prefix`, a quarter of the link) and in all
/// (`bandwidth_unknown`, half), as their number is; a configured peer is not bound
/// by it, and a released call gives its share back.
#[test]
fn unknown_peers_share_the_bandwidth_their_calls_hold() {
    let run = |extra: &str, configured: bool| {
        let mut p = Pair::noise();
        p.b = Node::with_config(host(B_ADDR, B_SIG, extra), 2);
        if configured {
            let a_key = natm_proto::sig::noise::key_to_text(&p.a.core.public_key());
            p.b = Node::with_config(
                host(
                    B_ADDR,
                    B_SIG,
                    &format!("{extra}\n[[peer]]\naddress = \"{A_SIG}\"\npublic_key = \"{a_key}\""),
                ),
                2,
            );
        }
        let b_app = p.app(Side::B);
        let endpoints = (0..20).map(|i| data(31_000 + i)).collect();
        p.bind_auto(Side::B, b_app, "video", "guaranteed:pcr=8Mbps", endpoints);
        let a_app = p.app(Side::A);
        let mut held = Vec::new();
        let mut refused = Vec::new();
        for _ in 0..8 {
            let call = p.connect(Side::A, a_app, "+4420002:video", "guaranteed:pcr=8Mbps");
            let msgs = p.take(Side::A, a_app);
            match msgs
                .iter()
                .find(|m| matches!(m, Message::Released { call: c, .. } if *c == call))
            {
                Some(m) => refused.push(m.clone()),
                None => held.push(call),
            }
        }
        (p, a_app, held, refused)
    };
    // 8 Mbit/s calls on a 100 Mbit/s link: A's network may hold 25, so 3 calls.
    let (mut p, a_app, held, refused) = run("", false);
    assert_eq!((held.len(), refused.len()), (3, 5), "{refused:?}");
    assert!(
        refused
            .iter()
            .all(|m| matches!(m, Message::Released { cause: 47, .. })),
        "{refused:?}"
    );
    assert_eq!(p.stat(Side::B).counters.peer_limit_refusals, 5);
    // A released call gives its share back: one more fits.
    p.send(
        Side::A,
        a_app,
        Message::Release {
            req: 0,
            call: held[0],
            cause: 16,
        },
    );
    p.take(Side::A, a_app);
    let call = p.connect(Side::A, a_app, "+4420002:video", "guaranteed:pcr=8Mbps");
    assert!(
        !p.take(Side::A, a_app)
            .iter()
            .any(|m| matches!(m, Message::Released { call: c, .. } if *c == call)),
        "the freed share was not given back"
    );
    // A larger share per network: all unconfigured peers together hold half (50).
    let (_, _, held, _) = run("[peers]\nbandwidth_per_unknown_prefix = \"100Mbps\"", false);
    assert_eq!(held.len(), 6);
    // A configured peer is bound by neither (8 calls, 64 of the 100 Mbit/s).
    let (_, _, held, refused) = run("", true);
    assert_eq!((held.len(), refused.len()), (8, 0), "{refused:?}");
}

/// Issue 31: an unconfigured peer cannot raise its answered calls past its network's
/// share either (a MODIFY REQUEST beyond is rejected with cause 47, the grant kept).
#[test]
fn an_unconfigured_peer_cannot_raise_its_calls_past_its_networks_bandwidth() {
    const QOS: &str = "guaranteed:pcr=10Mbps,max_pcr=40Mbps,min_pcr=1Mbps";
    let mut p = Pair::noise();
    p.b = Node::with_config(host(B_ADDR, B_SIG, ""), 2);
    let b_app = p.app(Side::B);
    let endpoints = (0..4).map(|i| data(32_000 + i)).collect();
    p.bind_auto(Side::B, b_app, "video", QOS, endpoints);
    let a_app = p.app(Side::A);
    let calls: Vec<u64> = (0..2)
        .map(|_| p.connect(Side::A, a_app, "+4420002:video", QOS))
        .collect();
    p.take(Side::A, a_app);
    let modify = |p: &mut Pair, qos: &str| {
        let req = p.req();
        let call = calls[0];
        p.send(
            Side::A,
            a_app,
            Message::Modify {
                req,
                call,
                qos: qos.parse().unwrap(),
            },
        );
        p.take(Side::A, a_app)
            .into_iter()
            .find(|m| matches!(m, Message::Ack { req: r, .. } | Message::Refused { req: r, .. } if *r == req))
            .expect("an answer to the Modify")
    };
    // About 20 of the network's 25 Mbit/s held (cells round up): one call raised to
    // 20 does not fit, to 12 does.
    let refused = modify(&mut p, "guaranteed:pcr=20Mbps");
    assert!(
        matches!(refused, Message::Refused { cause: 47, .. }),
        "{refused:?}"
    );
    assert_eq!(p.stat(Side::B).counters.peer_limit_refusals, 1);
    let done = modify(&mut p, "guaranteed:pcr=12Mbps");
    assert!(matches!(done, Message::Ack { .. }), "{done:?}");
}

#[test]
fn a_spoofed_end_does_not_drop_an_authenticated_link() {
    let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let mut p = Pair::new(
        &format!("[[peer]]\naddress = \"{B_SIG}\"\nkey = \"{key}\""),
        &format!("[[peer]]\naddress = \"{A_SIG}\"\nkey = \"{key}\""),
    );
    // Nothing goes in clear on the signalling VC.
    let clear: Arc<Mutex<usize>> = Arc::default();
    let c2 = clear.clone();
    p.lose = Box::new(move |d| {
        if vcframe::signalling_pdu(&d.bytes).is_some() {
            *c2.lock().unwrap() += 1;
        }
        false
    });
    let (_, _, (a_app, a_call, b_app, b_call)) = p.call_ab();
    assert_eq!(*clear.lock().unwrap(), 0);
    let s = p.stat(Side::B);
    assert_eq!(s.peers[0].auth, "noise+psk");
    // A forged END from A's address, in clear and in a transport message.
    let end = vcframe::signalling_frame(
        &Pdu::End {
            source_sscop: false,
            uu: Vec::new(),
        }
        .to_bytes(),
    );
    let a_sig: SocketAddr = A_SIG.parse().unwrap();
    let now = p.now;
    p.b.core.handle_peer(now, a_sig, &end);
    let forged = Control::NoiseData {
        receiver: 7,
        counter: 99,
        ciphertext: &[&end[4..], &[0; 16][..]].concat(),
    }
    .to_bytes();
    p.b.core.handle_peer(now, a_sig, &forged);
    p.advance(Duration::from_secs(3));
    let s = p.stat(Side::B);
    assert!(s.peers[0].up, "the link went down");
    assert_eq!(s.counters.auth_failures, 2);
    assert!(p.take(Side::B, b_app).is_empty(), "the call was released");
    // The call is still there and releases normally.
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
fn a_peer_with_the_wrong_key_gets_no_link() {
    let mut p = Pair::new(
        &format!(
            "[[peer]]\naddress = \"{B_SIG}\"\nkey = \"{}\"",
            "11".repeat(32)
        ),
        &format!(
            "[[peer]]\naddress = \"{A_SIG}\"\nkey = \"{}\"",
            "22".repeat(32)
        ),
    );
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    p.advance(Duration::from_secs(10));
    let (cause, _) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 27);
    assert!(p.take(Side::B, b_app).is_empty());
    assert!(!p.stat(Side::B).peers.iter().any(|l| l.up));
    assert!(p.stat(Side::A).counters.auth_failures > 0);
}
