//! Local users (issue 16, docs/SECURITY.md "Local users"), in virtual time: a user
//! other than root cannot hijack a remote address or squat on another user's SAP,
//! one user's connections cannot lock another out, idle connections are closed,
//! a flood of binds is refused at a bound, `[[access]]` bounds rates, and `natm
//! stat` pages its reply and shows a user only its own calls and listeners.

use std::time::Duration;

use crate::support::*;
use natm_proto::wire::ipc::{Message, MAX_FRAME};
use natm_sigd::core::Stat;

const USER: u32 = 1000;
const OTHER: u32 = 1001;

/// The `Refused` cause of `req` in `msgs`.
fn refused(msgs: &[Message], req: u64) -> (u8, String) {
    msgs.iter()
        .find_map(|m| match m {
            Message::Refused {
                req: r,
                cause,
                detail,
            } if *r == req => Some((*cause, detail.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no refusal of {req} in {msgs:?}"))
}

fn register(p: &mut Pair, s: Side, app: natm_sigd::core::AppId, address: &str) -> Vec<Message> {
    let req = p.req();
    p.send(
        s,
        app,
        Message::Register {
            req,
            address: address.into(),
        },
    );
    p.take(s, app)
}

fn bind_msgs(
    p: &mut Pair,
    s: Side,
    app: natm_sigd::core::AppId,
    sap: &str,
    qos: &str,
) -> (u64, Vec<Message>) {
    let req = p.req();
    p.send(
        s,
        app,
        Message::Bind {
            req,
            sap: sap.into(),
            qos: qos.parse().expect("test QoS"),
        },
    );
    (req, p.take(s, app))
}

#[test]
fn a_user_cannot_register_a_remote_address_and_hijack_its_calls() {
    let mut p = Pair::default();
    // B's real listener for +4420002:echo.
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "ubr");
    // On A, user 1000 tries to take B's address and listen on it.
    let thief = p.app_as(Side::A, USER);
    let msgs = register(&mut p, Side::A, thief, B_ADDR);
    let (cause, detail) = refused(&msgs, p.req() - 1);
    assert_eq!(cause, 57, "not authorised: {detail}");
    assert!(detail.contains("may not register +4420002"), "{detail}");
    let (req, msgs) = bind_msgs(&mut p, Side::A, thief, &format!("{B_ADDR}:echo"), "ubr");
    assert_eq!(refused(&msgs, req).0, 1, "B's address is not A's");
    // A's users still reach B.
    let caller = p.app(Side::A);
    let call = p.connect(Side::A, caller, &format!("{B_ADDR}:echo"), "ubr");
    assert!(
        matches!(
            p.take(Side::B, b_app).as_slice(),
            [Message::Incoming { .. }]
        ),
        "the call to {B_ADDR} went to B, not to the thief (call {call:x})"
    );
    assert!(p.take(Side::A, thief).is_empty(), "the thief heard nothing");
    // Its own host's address is not refused (it changes nothing); root may register
    // any address.
    let msgs = register(&mut p, Side::A, thief, A_ADDR);
    assert!(matches!(msgs.as_slice(), [Message::Ack { .. }]), "{msgs:?}");
    let root = p.app(Side::A);
    let msgs = register(&mut p, Side::A, root, "+4420077");
    assert!(matches!(msgs.as_slice(), [Message::Ack { .. }]), "{msgs:?}");
    let stat = p.stat(Side::A);
    assert!(!stat.addresses.contains(&B_ADDR.to_owned()), "{stat:?}");
    assert!(stat.counters.access_refusals >= 1);
}

#[test]
fn an_access_rule_lets_a_user_register_its_prefix_only() {
    let extra = format!("[[access]]\nuser = \"{USER}\"\nregister = [\"+44200\"]\n");
    let mut p = Pair::new(&extra, "");
    let app = p.app_as(Side::A, USER);
    let msgs = register(&mut p, Side::A, app, "+4420077");
    assert!(matches!(msgs.as_slice(), [Message::Ack { .. }]), "{msgs:?}");
    let msgs = register(&mut p, Side::A, app, "+1555");
    assert_eq!(refused(&msgs, p.req() - 1).0, 57);
    // Another user cannot take the address from it.
    let other = p.app_as(Side::A, OTHER);
    let msgs = register(&mut p, Side::A, other, "+4420077");
    assert_eq!(refused(&msgs, p.req() - 1).0, 57);
}

#[test]
fn a_sap_bound_by_one_user_cannot_be_bound_by_another() {
    let mut p = Pair::default();
    let owner = p.app_as(Side::B, USER);
    p.bind(Side::B, owner, "echo", "ubr");
    let squatter = p.app_as(Side::B, OTHER);
    let (req, msgs) = bind_msgs(&mut p, Side::B, squatter, "echo", "ubr");
    let (cause, detail) = refused(&msgs, req);
    assert_eq!(cause, 57, "{detail}");
    assert!(detail.contains("held by uid 1000"), "{detail}");
    // Nor on one of the host's addresses in particular.
    let (req, msgs) = bind_msgs(&mut p, Side::B, squatter, &format!("{B_ADDR}:echo"), "ubr");
    assert_eq!(refused(&msgs, req).0, 57);
    // The owner's second application may; calls go to the owner.
    let owner2 = p.app_as(Side::B, USER);
    p.bind(Side::B, owner2, "echo", "ubr");
    let caller = p.app(Side::A);
    p.connect(Side::A, caller, &format!("{B_ADDR}:echo"), "ubr");
    assert!(matches!(
        p.take(Side::B, owner).as_slice(),
        [Message::Incoming { .. }]
    ));
    assert!(p.take(Side::B, squatter).is_empty());
    // Once the owner's listeners are gone the SAP is free.
    p.close(Side::B, owner);
    p.close(Side::B, owner2);
    p.bind(Side::B, squatter, "echo", "ubr");
}

#[test]
fn one_users_connections_do_not_lock_another_out() {
    let extra = "[limits]\nconnections = 8\n";
    let mut p = Pair::new(extra, "");
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(p.app_as(Side::A, USER));
    }
    // Its share is an eighth: the rest were told why and closed.
    let refused: Vec<_> = held
        .iter()
        .filter(|a| p.a.closed.contains(a))
        .copied()
        .collect();
    assert_eq!(refused.len(), 7, "user 1000 keeps 1 of 8");
    let why = p.take(Side::A, refused[0]);
    assert!(
        matches!(&why[..], [Message::Error { cause: 47, detail }] if detail.contains("connections_per_user")),
        "{why:?}"
    );
    // Another user still gets in, and so does root.
    let other = p.app_as(Side::A, OTHER);
    assert!(!p.a.closed.contains(&other));
    p.bind(Side::A, other, "echo", "ubr");
    let root = p.app(Side::A);
    assert!(!p.a.closed.contains(&root));
    assert_eq!(p.stat(Side::A).counters.connections_refused, 7);
}

#[test]
fn many_users_together_cannot_take_the_connections_kept_for_root() {
    // 64 connections: 8 per user, the last 4 kept for root (the defaults' shares).
    let mut p = Pair::new("[limits]\nconnections = 64\n", "");
    let mut admitted = std::collections::HashMap::<u32, usize>::new();
    let mut reasons = Vec::new();
    // Ten users, each trying for twice its share, interleaved as a race would.
    for _round in 0..16 {
        for uid in 2000..2010u32 {
            let app = p.app_as(Side::A, uid);
            if p.a.closed.contains(&app) {
                match p.take(Side::A, app).as_slice() {
                    [Message::Error { cause: 47, detail }] => reasons.push(detail.clone()),
                    other => panic!("refused without its reason: {other:?}"),
                }
            } else {
                *admitted.entry(uid).or_default() += 1;
            }
        }
    }
    let total: usize = admitted.values().sum();
    assert_eq!(total, 60, "every slot but root's 4 taken: {admitted:?}");
    assert!(admitted.values().all(|&n| n <= 8), "{admitted:?}");
    assert!(
        reasons.iter().any(|r| r.contains("root_reserve")),
        "{reasons:?}"
    );
    // Root still gets in, four times, and can work.
    let roots: Vec<_> = (0..4).map(|_| p.app(Side::A)).collect();
    assert!(roots.iter().all(|r| !p.a.closed.contains(r)));
    p.bind(Side::A, roots[0], "echo", "ubr");
    // The total still binds root.
    let over = p.app(Side::A);
    assert!(p.a.closed.contains(&over));
    // A user is still refused: the total is reached.
    let some_user = p.app_as(Side::A, 2000);
    assert!(p.a.closed.contains(&some_user));
}

#[test]
fn root_services_saps_are_roots_only() {
    let mut cfg = config(Side::B, "");
    cfg.access.root_saps.push("dns".into());
    let mut p = Pair::default();
    p.b = Node::with_config(cfg, 2);
    let user = p.app_as(Side::B, USER);
    // `blli.cc` is `blli.llc` (Classical IP's B-LLI, natm ip's), written another way.
    for sap in ["ip", "atmarp", "blli.llc", "blli.cc", "dns"] {
        let (req, msgs) = bind_msgs(&mut p, Side::B, user, sap, "ubr");
        let (cause, detail) = refused(&msgs, req);
        assert_eq!(cause, 57, "{detail}");
        assert!(detail.contains("root service"), "{detail}");
        let (req, msgs) = bind_msgs(&mut p, Side::B, user, &format!("{B_ADDR}:{sap}"), "ubr");
        assert_eq!(refused(&msgs, req).0, 57, "{sap} on an address");
    }
    // Root's `natm ip` binds them and gets the calls for them.
    let root = p.app(Side::B);
    p.bind(Side::B, root, "ip", "ubr");
    let caller = p.app(Side::A);
    p.connect(Side::A, caller, &format!("{B_ADDR}:ip"), "ubr");
    assert!(matches!(
        p.take(Side::B, root).as_slice(),
        [Message::Incoming { .. }]
    ));
    assert!(p.take(Side::B, user).is_empty());
}

#[test]
fn a_sap_another_user_holds_is_refused_to_root_too() {
    let mut p = Pair::default();
    let user = p.app_as(Side::B, USER);
    p.bind(Side::B, user, "echo", "ubr");
    // Root's later Bind is refused with the holder named, not acknowledged in silence.
    let root = p.app(Side::B);
    let (req, msgs) = bind_msgs(&mut p, Side::B, root, "echo", "ubr");
    let (cause, detail) = refused(&msgs, req);
    assert_eq!(cause, 57, "{detail}");
    assert!(detail.contains("held by uid 1000"), "{detail}");
    assert_eq!(msgs.len(), 1, "only the refusal: {msgs:?}");
    // Once the user is gone, root binds it.
    p.close(Side::B, user);
    p.bind(Side::B, root, "echo", "ubr");
    // And a user cannot take it from root either.
    let other = p.app_as(Side::B, OTHER);
    let (req, msgs) = bind_msgs(&mut p, Side::B, other, "echo", "ubr");
    assert!(refused(&msgs, req).1.contains("held by uid 0"));
}

#[test]
fn a_sap_written_another_way_is_the_same_sap() {
    // FORE's vendor SAP in capitals, held by one user, is refused to another in small
    // letters; and a listener bound with it gets the calls for it.
    let mut p = Pair::default();
    let user = p.app_as(Side::B, USER);
    p.bind(Side::B, user, "@0060D7.01000003", "ubr");
    let other = p.app_as(Side::B, OTHER);
    let (req, msgs) = bind_msgs(&mut p, Side::B, other, "@0060d7.01000003", "ubr");
    assert!(refused(&msgs, req).1.contains("held by uid 1000"));
    let caller = p.app(Side::A);
    p.connect(
        Side::A,
        caller,
        &format!("{B_ADDR}:@0060d7.01000003"),
        "ubr",
    );
    assert!(matches!(
        p.take(Side::B, user).as_slice(),
        [Message::Incoming { .. }]
    ));
}

#[test]
fn idle_connections_are_closed_and_busy_ones_kept() {
    let extra = "[limits]\nidle_close_ms = 5000\n";
    let mut p = Pair::new(extra, "");
    let idle = p.app_as(Side::A, USER);
    let listening = p.app_as(Side::A, USER);
    p.bind(Side::A, listening, "echo", "ubr");
    let talking = p.app_as(Side::A, USER);
    p.advance(Duration::from_secs(4));
    // A request keeps a connection alive.
    let req = p.req();
    p.send(Side::A, talking, Message::Stat { req });
    p.take(Side::A, talking);
    p.advance(Duration::from_secs(2));
    assert_eq!(p.a.closed, vec![idle], "only the silent, empty one");
    let why = p.take(Side::A, idle);
    assert!(
        matches!(&why[..], [Message::Error { detail, .. }] if detail.contains("idle_close_ms")),
        "{why:?}"
    );
    p.advance(Duration::from_secs(10));
    assert!(p.a.closed.contains(&talking));
    assert!(!p.a.closed.contains(&listening), "a listener is not idle");
    assert_eq!(p.stat(Side::A).counters.idle_closed, 2);
}

#[test]
fn a_flood_of_binds_is_refused_at_the_connections_bound() {
    let mut p = Pair::default();
    let app = p.app_as(Side::A, USER);
    let mut refusals = 0;
    for i in 0..200_000u32 {
        let req = u64::from(i) + 1_000_000;
        let now = p.now;
        p.a.core.handle_app(
            now,
            app,
            Message::Bind {
                req,
                sap: format!("s{}", i % 1_000_000),
                qos: "ubr".parse().unwrap(),
            },
        );
        while let Some(o) = p.a.core.poll_output() {
            if let natm_sigd::core::Output::ToApp(_, Message::Refused { cause, .. }) = o {
                assert_eq!(cause, 47);
                refusals += 1;
            }
        }
    }
    assert_eq!(refusals, 200_000 - 1024, "listeners_per_connection = 1024");
    let stat = p.stat(Side::A);
    assert_eq!(stat.listeners.len(), 1024);
}

#[test]
fn a_user_asks_no_more_than_its_max_rate() {
    let extra =
        format!("[[access]]\nuser = \"{USER}\"\nmax_rate = \"10Mbps\"\nbind = [\"echo\"]\n");
    let mut p = Pair::new(&extra, "");
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "ubr");
    let app = p.app_as(Side::A, USER);
    let req = p.req();
    p.send(
        Side::A,
        app,
        Message::Connect {
            req,
            called: format!("{B_ADDR}:echo"),
            qos: "cbr:pcr=20Mbps".parse().unwrap(),
            data: data(40_001),
        },
    );
    let (cause, detail) = refused(&p.take(Side::A, app), req);
    assert_eq!(cause, 57, "{detail}");
    assert!(detail.contains("max_rate"), "{detail}");
    p.connect(Side::A, app, &format!("{B_ADDR}:echo"), "cbr:pcr=5Mbps");
    let (req, msgs) = bind_msgs(&mut p, Side::A, app, "ftp", "ubr");
    assert_eq!(refused(&msgs, req).0, 57, "bind lists echo only");
}

/// Every page of `natm stat` as `app` sees it, each checked to fit one frame.
fn stat_pages(p: &mut Pair, s: Side, app: natm_sigd::core::AppId) -> (Stat, usize) {
    let mut offset = 0;
    let mut all: Option<Stat> = None;
    let mut pages = 0;
    loop {
        let req = p.req();
        let m = if offset == 0 {
            Message::Stat { req }
        } else {
            Message::StatPage { req, offset }
        };
        p.send(s, app, m);
        let msgs = p.take(s, app);
        let [Message::StatReply { json, .. }] = msgs.as_slice() else {
            panic!("{msgs:?}");
        };
        let bytes = Message::StatReply {
            req,
            json: json.clone(),
        }
        .to_bytes();
        assert!(bytes.len() <= MAX_FRAME, "a page of {} bytes", bytes.len());
        pages += 1;
        let page: Stat = serde_json::from_str(json).unwrap();
        let next = page.next;
        match &mut all {
            None => all = Some(page),
            Some(a) => {
                a.calls.extend(page.calls);
                a.listeners.extend(page.listeners);
            }
        }
        match next {
            Some(n) => {
                assert!(n > offset);
                offset = n;
            }
            None => return (all.unwrap(), pages),
        }
    }
}

#[test]
fn stat_pages_thousands_of_rows_and_shows_a_user_only_its_own() {
    let extra = "[limits]\nlisteners_per_connection = 4000\n";
    let mut p = Pair::new("", extra);
    let root = p.app(Side::B);
    for i in 0..3_000 {
        p.bind(Side::B, root, &format!("l{i}"), "ubr");
    }
    // 1,600 calls into B, answered by a pre-authorised listener of user 1000.
    let user = p.app_as(Side::B, USER);
    let endpoints: Vec<_> = (0..1_000).map(|i| data(20_000 + i)).collect();
    let l = p.bind_auto(Side::B, user, "bulk", "ubr", endpoints);
    let caller = p.app(Side::A);
    for i in 0..1_600u16 {
        if i % 1_000 == 999 {
            let req = p.req();
            let more: Vec<_> = (0..1_000).map(|j| data(30_000 + j)).collect();
            p.send(
                Side::B,
                user,
                Message::Endpoints {
                    req,
                    listener: l,
                    data: more,
                },
            );
        }
        p.connect(Side::A, caller, &format!("{B_ADDR}:bulk"), "ubr");
    }
    p.take(Side::B, user);
    let (all, pages) = stat_pages(&mut p, Side::B, root);
    assert_eq!(all.calls.len(), 1_600);
    assert_eq!(all.listeners.len(), 3_001);
    assert!(pages >= 3, "{pages} pages");
    let mut ids: Vec<_> = all.calls.iter().map(|c| c.id.clone()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 1_600, "no row twice");
    // User 1000 sees its calls and its listener, not root's 3,000.
    let viewer = p.app_as(Side::B, USER);
    let (mine, _) = stat_pages(&mut p, Side::B, viewer);
    assert_eq!(mine.calls.len(), 1_600);
    assert_eq!(mine.listeners.len(), 1);
    assert!(mine.calls.iter().all(|c| c.uid == Some(USER)));
    let stranger = p.app_as(Side::B, OTHER);
    let (none, pages) = stat_pages(&mut p, Side::B, stranger);
    assert!(none.calls.is_empty() && none.listeners.is_empty());
    assert_eq!(pages, 1);
}

#[test]
fn one_users_calls_together_keep_to_its_bandwidth_share() {
    // The audit: max_rate bounds one call, so a user's ten 10 Mbit/s calls took the
    // whole 100 Mbit/s link. Its calls now hold at most a quarter of it together.
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "ubr");
    let user = p.app_as(Side::A, USER);
    let mut calls = Vec::new();
    let mut refusals = Vec::new();
    for _ in 0..10 {
        let req = p.req();
        p.send(
            Side::A,
            user,
            Message::Connect {
                req,
                called: format!("{B_ADDR}:echo"),
                qos: "guaranteed:pcr=10Mbps,max_pcr=40Mbps".parse().unwrap(),
                data: data(40_001),
            },
        );
        let msgs = p.take(Side::A, user);
        match msgs.iter().find_map(|m| match m {
            Message::Ack { req: r, id } if *r == req => Some(Ok(*id)),
            Message::Refused {
                req: r,
                cause,
                detail,
            } if *r == req => Some(Err((*cause, detail.clone()))),
            _ => None,
        }) {
            Some(Ok(id)) => {
                let b_call = match p.take(Side::B, b_app).as_slice() {
                    [Message::Incoming { call, .. }] => *call,
                    other => panic!("expected one Incoming, got {other:?}"),
                };
                p.accept(Side::B, b_app, b_call);
                calls.push(id);
            }
            Some(Err(r)) => refusals.push(r),
            None => panic!("no answer: {msgs:?}"),
        }
    }
    assert_eq!(calls.len(), 2, "25 Mbit/s hold two 10 Mbit/s calls");
    assert_eq!(refusals.len(), 8);
    let (cause, detail) = &refusals[0];
    assert_eq!(*cause, 47, "{detail}");
    assert!(detail.contains("bandwidth_per_user"), "{detail}");
    let st = p.stat(Side::A);
    assert_eq!(st.free_out_bps, 80_000_000, "the rest of the link is free");
    // Root is not bound by it: it takes 60 of the 80 left.
    let root = p.app(Side::A);
    p.connect(Side::A, root, &format!("{B_ADDR}:echo"), "cbr:pcr=60Mbps");
    // Another user has a share of its own.
    let other = p.app_as(Side::A, OTHER);
    p.connect(Side::A, other, &format!("{B_ADDR}:echo"), "cbr:pcr=10Mbps");
    // Raising one of its calls counts the same: 10 + 20 is over, 10 + 15 is not.
    for (qos, ok) in [
        ("guaranteed:pcr=20Mbps", false),
        ("guaranteed:pcr=15Mbps", true),
    ] {
        let req = p.req();
        p.send(
            Side::A,
            user,
            Message::Modify {
                req,
                call: calls[1],
                qos: qos.parse().expect("test QoS"),
            },
        );
        p.drive();
        let msgs = p.take(Side::A, user);
        let answer = msgs
            .iter()
            .find(|m| matches!(m, Message::Ack { req: r, .. } | Message::Refused { req: r, .. } if *r == req))
            .unwrap_or_else(|| panic!("no answer to Modify: {msgs:?}"));
        match (answer, ok) {
            (Message::Ack { .. }, true) => {}
            (
                Message::Refused {
                    cause: 47, detail, ..
                },
                false,
            ) => {
                assert!(detail.contains("bandwidth_per_user"), "{detail}")
            }
            other => panic!("{qos}: {other:?}"),
        }
    }
    // A call the user ends gives its share back.
    let req = p.req();
    p.send(
        Side::A,
        user,
        Message::Release {
            req,
            call: calls[0],
            cause: 16,
        },
    );
    p.drive();
    p.connect(Side::A, user, &format!("{B_ADDR}:echo"), "cbr:pcr=10Mbps");
}
