//! Point-to-multipoint VCs (issue 19), each leaf on its own host (its own sigd on
//! loopback).
//!
//! Through a `natm switch`: one point-to-multipoint call whose one VC the switch
//! replicates to every leaf (ADD PARTY per leaf, a branch per port) — a guaranteed
//! VC to 3 leaves with one leaf killed mid-stream, and a leaf added mid-stream that
//! joins at a whole message.
//!
//! Between sigds peered directly (no switch): the first leaf's call is the
//! point-to-multipoint call, the others are reached through other links, so each gets
//! a call of its own and the root's engine replicates to it — a guaranteed VC to 3
//! leaves with one killed, a branch refused by admission, drop_sink, best effort.

use natm::ulib::Wait;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::sigd_support::{free_port, ChildGuard, Sigd, LINK};
use crate::switch_support::SwitchProc;
use natm::ulib::{Error, Host, LeafEvent, LeafId, Multipoint};

/// A root (+4420001) and one sigd per leaf (+44200(02+i)), the root routing each
/// leaf's number to its sigd and each leaf routing the root's back. `links[i]` is
/// leaf i's `[link]` section.
fn network(links: &[&str]) -> (Sigd, Vec<Sigd>) {
    let root_port = free_port();
    let ports: Vec<_> = links.iter().map(|_| free_port()).collect();
    let mut root_cfg = format!("addresses = [\"+4420001\"]\n{LINK}\n");
    for (i, p) in ports.iter().enumerate() {
        root_cfg.push_str(&format!(
            "[[directory]]\nprefix = \"+44200{:02}\"\npeer = \"{p}\"\n",
            i + 2
        ));
    }
    let root = Sigd::start_at(&root_cfg, root_port);
    let leaves = links
        .iter()
        .zip(&ports)
        .enumerate()
        .map(|(i, (link, p))| {
            Sigd::start_at(
                &format!(
                    "addresses = [\"+44200{:02}\"]\n{link}\n[[directory]]\nprefix = \"+4420001\"\npeer = \"{root_port}\"\n",
                    i + 2
                ),
                *p,
            )
        })
        .collect();
    (root, leaves)
}

fn leaf_addr(i: usize) -> String {
    format!("+44200{:02}:mc", i + 2)
}

/// Message `n` of the stream: its number, then bytes that depend on it.
fn message(n: u32, len: usize) -> Vec<u8> {
    let mut m = n.to_be_bytes().to_vec();
    m.extend((0..len - 4).map(|i| (i as u32).wrapping_mul(31).wrapping_add(n) as u8));
    m
}

/// What a leaf thread hands back: every message, and the time first to last.
type Received = std::thread::JoinHandle<(Vec<Vec<u8>>, Duration)>;

/// A leaf in this process: binds `mc`, accepts one call, and reports every message
/// and the time from the first to the last.
fn leaf(host: Host) -> (mpsc::Receiver<()>, Received) {
    let (ready_tx, ready) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let l = host.bind("mc", "best-effort").unwrap();
        ready_tx.send(()).unwrap();
        let c = l.accept(Wait::For(Duration::from_secs(20))).unwrap();
        let mut got = Vec::new();
        let mut first = None;
        let mut last = Instant::now();
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(20))).unwrap() {
            first.get_or_insert_with(Instant::now);
            last = Instant::now();
            got.push(m);
        }
        let span = first.map_or(Duration::ZERO, |f| last - f);
        (got, span)
    });
    (ready, t)
}

/// `natm listen` on `mc` through `sigd`, discarding: a leaf process to kill.
fn leaf_process(sigd: &Sigd) -> ChildGuard {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["listen", "mc", "--discard", "--quiet", "--sigd"])
        .arg(&sigd.socket)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    ChildGuard(Some(child))
}

/// Add `addr` as a leaf, retrying while its listener is not bound yet (cause 88).
fn add(root: &mut Multipoint, addr: &str) -> LeafId {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        match root.add_sink(addr) {
            Ok(l) => return l,
            Err(Error::Refused { cause: 88, .. }) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("add_sink {addr}: {e}"),
        }
    }
}

fn connect(host: &Host, addr: &str, qos: &str) -> Multipoint {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        match host.connect_multipoint(addr, qos) {
            Ok(m) => return m,
            Err(Error::Refused { cause: 88, .. }) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("connect_multipoint {addr}: {e}"),
        }
    }
}

fn mbps(bytes: usize, span: Duration) -> f64 {
    bytes as f64 * 8.0 / span.as_secs_f64().max(1e-9) / 1e6
}

/// Joins the leaf threads and checks each received exactly `expect`, in order;
/// prints each leaf's rate (`label`: which run; `diag`: what to show on failure).
fn check_leaves(label: &str, leaves: [Received; 2], expect: &[Vec<u8>], diag: impl Fn() -> String) {
    for (i, t) in leaves.into_iter().enumerate() {
        let (got, span) = t.join().unwrap();
        assert_eq!(got.len(), expect.len(), "leaf {i}: {}", diag());
        assert!(
            got == expect,
            "leaf {i} received other bytes than were sent"
        );
        let bytes: usize = got.iter().map(Vec::len).sum();
        eprintln!(
            "{label} leaf {i}: {bytes} bytes in {:.3} s = {:.3} Mbit/s (reserved 4 Mbit/s)",
            span.as_secs_f64(),
            mbps(bytes, span)
        );
    }
}

#[test]
fn guaranteed_to_three_leaves_survives_a_leaf_killed_mid_stream() {
    guaranteed_to_three_leaves(true);
}

#[test]
fn guaranteed_to_three_leaves_at_the_reserved_rate() {
    guaranteed_to_three_leaves(false);
}

/// A guaranteed 4 Mbit/s VC to two leaves in this process and one leaf process,
/// killed a third of the way through the stream if `kill`.
fn guaranteed_to_three_leaves(kill: bool) {
    const RATE: &str = "guaranteed:pcr=4Mbps";
    const MSGS: u32 = 400;
    const LEN: usize = 4000;
    let (root, leaves) = network(&[LINK, LINK, LINK]);
    let (r0, t0) = leaf(leaves[0].host());
    let (r1, t1) = leaf(leaves[1].host());
    r0.recv().unwrap();
    r1.recv().unwrap();
    let mut killed = leaf_process(&leaves[2]);

    let host = root.host();
    let mut m = connect(&host, &leaf_addr(0), RATE);
    let l1 = add(&mut m, &leaf_addr(1));
    let l2 = add(&mut m, &leaf_addr(2));
    assert_eq!(m.leaves().len(), 3);
    let one_way: natm::ulib::Qos = "guaranteed:pcr=4Mbps,rx:pcr=64kbps".parse().unwrap();
    assert_eq!(*m.branch_qos(), one_way);
    // The first leaf is the point-to-multipoint call's party 0; the others are
    // reached through other links (no switch joins them), each on a call of its own.
    assert_eq!(m.replicated_by_network(LeafId(0)), Some(true));
    assert_eq!(m.replicated_by_network(l1), Some(false));
    assert_eq!(m.replicated_by_network(l2), Some(false));
    // Three calls, each admitted on the root's link: three reservations.
    assert_eq!(
        root.stat()["calls"].as_array().unwrap().len(),
        3,
        "{}",
        root.stat()
    );

    let start = Instant::now();
    for n in 0..MSGS {
        if kill && n == MSGS / 3 {
            killed.kill9();
        }
        m.send(&message(n, LEN)).unwrap();
    }
    let root_span = start.elapsed();
    if kill {
        // The root learns which leaf left (its sigd released the branch).
        let until = Instant::now() + Duration::from_secs(15);
        let left = loop {
            m.poll();
            if let Some(ev) = m
                .events()
                .into_iter()
                .find(|e| matches!(e, LeafEvent::Left { .. }))
            {
                break ev;
            }
            assert!(Instant::now() < until, "the killed leaf was never reported");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            matches!(left, LeafEvent::Left { leaf, .. } if leaf == l2),
            "{left:?}"
        );
        assert_eq!(
            m.leaves().iter().map(|(l, _)| *l).collect::<Vec<_>>(),
            vec![LeafId(0), l1]
        );
    } else {
        assert_eq!(m.poll(), 3);
        assert_eq!(
            m.events(),
            vec![
                LeafEvent::Added(LeafId(0)),
                LeafEvent::Added(l1),
                LeafEvent::Added(l2)
            ]
        );
    }
    m.close(Duration::from_secs(10)).unwrap();

    let expect: Vec<Vec<u8>> = (0..MSGS).map(|n| message(n, LEN)).collect();
    check_leaves(&format!("kill={kill}"), [t0, t1], &expect, String::new);
    eprintln!(
        "kill={kill} root: {} bytes per leaf in {:.3} s = {:.3} Mbit/s",
        MSGS as usize * LEN,
        root_span.as_secs_f64(),
        mbps(MSGS as usize * LEN, root_span)
    );
    root.wait_no_calls();
}

#[test]
fn a_branch_without_bandwidth_is_refused_and_the_others_go_on() {
    let (root, leaves) = network(&[LINK, "[link]\ncapacity = \"2Mbps\"\ntpdu_cost_ns = 1000"]);
    let (r0, t0) = leaf(leaves[0].host());
    r0.recv().unwrap();
    let (r1, _t1) = leaf(leaves[1].host());
    r1.recv().unwrap();
    let host = root.host();
    let mut m = connect(&host, &leaf_addr(0), "guaranteed:pcr=4Mbps");
    match m.add_sink(leaf_addr(1).as_str()) {
        Err(Error::Refused { cause: 37, detail }) => assert!(!detail.is_empty()),
        other => panic!("expected cause 37, got {other:?}"),
    }
    assert_eq!(m.leaves().len(), 1);
    assert_eq!(m.events(), vec![LeafEvent::Added(LeafId(0))]);
    for n in 0..20 {
        assert_eq!(m.send(&message(n, 1000)).unwrap(), 1);
    }
    m.close(Duration::from_secs(10)).unwrap();
    let (got, _) = t0.join().unwrap();
    assert_eq!(got, (0..20).map(|n| message(n, 1000)).collect::<Vec<_>>());
    // Reliable multipoint is refused before any call is placed.
    let e = host
        .connect_multipoint(leaf_addr(0).as_str(), "reliable")
        .unwrap_err();
    assert!(matches!(e, Error::Qos(_)), "{e}");
    root.wait_no_calls();
}

#[test]
fn best_effort_drop_sink_ends_one_leaf_and_the_other_keeps_receiving() {
    let (root, leaves) = network(&[LINK, LINK]);
    let (r0, t0) = leaf(leaves[0].host());
    let (r1, t1) = leaf(leaves[1].host());
    r0.recv().unwrap();
    r1.recv().unwrap();
    let host = root.host();
    let mut m = connect(&host, &leaf_addr(0), "best-effort");
    let l1 = add(&mut m, &leaf_addr(1));
    for n in 0..50 {
        assert_eq!(m.send(&message(n, 1000)).unwrap(), 2);
        std::thread::sleep(Duration::from_millis(2));
    }
    m.drop_sink(LeafId(0), Duration::from_secs(10)).unwrap();
    assert_eq!(m.leaves(), vec![(l1, leaf_addr(1))]);
    for n in 50..100 {
        assert_eq!(m.send(&message(n, 1000)).unwrap(), 1);
        std::thread::sleep(Duration::from_millis(2));
    }
    let ev = m.events();
    assert!(ev.contains(&LeafEvent::Dropped(LeafId(0))), "{ev:?}");
    m.close(Duration::from_secs(10)).unwrap();
    // Best effort may lose on a loaded machine; what arrives is whole and in order,
    // the dropped leaf's call ends and it gets nothing sent after the drop.
    let (g0, _) = t0.join().unwrap();
    let (g1, _) = t1.join().unwrap();
    let num = |m: &Vec<u8>| u32::from_be_bytes(m[..4].try_into().unwrap());
    for (g, hi) in [(&g0, 50), (&g1, 100)] {
        assert!(!g.is_empty());
        let mut prev = None;
        for msg in g {
            let n = num(msg);
            assert!(n < hi, "message {n} after the drop");
            assert_eq!(*msg, message(n, 1000));
            assert!(prev.is_none_or(|p| p < n), "out of order");
            prev = Some(n);
        }
    }
    assert!(
        g1.iter().any(|m| num(m) >= 50),
        "the kept leaf got nothing after the drop"
    );
    root.wait_no_calls();
}

/// One `natm switch` with a host port per host: the root h1 (+4420001) and leaves h2,
/// h3, ... (+4420002, ...), every sigd routing everything to the switch.
pub(crate) struct Switched {
    pub(crate) sw: SwitchProc,
    pub(crate) root: Sigd,
    pub(crate) leaves: Vec<Sigd>,
}

/// Also the network of `simplex.rs`.
pub(crate) fn switched(leaves: usize) -> Switched {
    let hosts: Vec<SocketAddr> = (0..=leaves).map(|_| free_port()).collect();
    let ports: Vec<SocketAddr> = (0..=leaves).map(|_| free_port()).collect();
    // The policer's tolerance for scheduling jitter is the operator's to set
    // (`svc_cdvt_us`, 20 ms by default). These tests are about replication and
    // leaves that come and go, not policing, and run beside the whole suite on 2
    // CPUs, where the switch process was once descheduled long enough to read a
    // conforming root's frames as a burst and police two of them (398 of 400).
    let mut toml = String::from("svc_cdvt_us = 200000\n");
    for (i, (h, p)) in hosts.iter().zip(&ports).enumerate() {
        toml.push_str(&format!(
            "[[port]]\nname = \"h{n}\"\nbind = \"{p}\"\npeer = \"{h}\"\nmode = \"frame\"\nline_rate = 1000000000\nbuffer = 16384\nsignalling = \"host\"\n[[route]]\nprefix = \"+44200{n:02}\"\nport = \"h{n}\"\n",
            n = i + 1
        ));
    }
    let sw = SwitchProc::start("multipoint", &toml);
    let mut sigds: Vec<Sigd> = hosts
        .iter()
        .zip(&ports)
        .enumerate()
        .map(|(i, (h, p))| {
            Sigd::start_at(
                &format!(
                    "addresses = [\"+44200{:02}\"]\n{LINK}\n[[directory]]\nprefix = \"*\"\npeer = \"{p}\"\nswitch = true\n",
                    i + 1
                ),
                *h,
            )
        })
        .collect();
    let root = sigds.remove(0);
    let n = Switched {
        sw,
        root,
        leaves: sigds,
    };
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let hosts_up = std::iter::once(&n.root)
            .chain(&n.leaves)
            .all(|s| s.stat()["peers"][0]["up"] == true);
        let sw_up = n.sw.stat()["signalling"]
            .as_array()
            .is_some_and(|l| l.len() == leaves + 1 && l.iter().all(|r| r["up"] == true));
        if hosts_up && sw_up {
            return n;
        }
        assert!(
            Instant::now() < until,
            "links not up: {}\n{}",
            n.sw.stat(),
            n.sw.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the switch's stat file (rewritten every 50 ms) shows `n` branches of
/// point-to-multipoint calls through it.
fn await_branches(sw: &SwitchProc, n: usize) {
    sw.stat_until(|s| {
        s["calls"].as_array().map_or(0, |c| {
            c.iter()
                .map(|c| c["branches"].as_array().map_or(0, Vec::len))
                .sum()
        }) == n
    });
}

/// A guaranteed 4 Mbit/s VC through a switch to two leaves in this process and one
/// leaf process, killed a third of the way through the stream: the root sends each
/// message once, the switch copies it to each leaf's port, and the leaves that stay
/// get every message at the reserved rate.
#[test]
fn guaranteed_through_a_switch_to_three_leaves_one_killed_mid_stream() {
    const QOS: &str = "guaranteed:pcr=4Mbps,encrypt=off";
    const MSGS: u32 = 400;
    const LEN: usize = 4000;
    let n = switched(3);
    let (r0, t0) = leaf(n.leaves[0].host());
    let (r1, t1) = leaf(n.leaves[1].host());
    r0.recv().unwrap();
    r1.recv().unwrap();
    let mut killed = leaf_process(&n.leaves[2]);

    let host = n.root.host();
    let mut m = connect(&host, "+4420002:mc", QOS);
    let l1 = add(&mut m, "+4420003:mc");
    let l2 = add(&mut m, "+4420004:mc");
    for l in [LeafId(0), l1, l2] {
        assert_eq!(m.replicated_by_network(l), Some(true), "{l}");
    }
    // One call at the root, reserved once; three branches in the switch.
    assert_eq!(n.root.stat()["calls"].as_array().unwrap().len(), 1);
    await_branches(&n.sw, 3);

    let start = Instant::now();
    for k in 0..MSGS {
        if k == MSGS / 3 {
            killed.kill9();
        }
        assert!(m.send(&message(k, LEN)).unwrap() >= 2);
    }
    let root_span = start.elapsed();
    let until = Instant::now() + Duration::from_secs(15);
    let left = loop {
        if let Some(ev) = m
            .events()
            .into_iter()
            .find(|e| matches!(e, LeafEvent::Left { .. }))
        {
            break ev;
        }
        assert!(
            Instant::now() < until,
            "the killed leaf was never reported: {}",
            n.sw.stat()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        matches!(left, LeafEvent::Left { leaf, .. } if leaf == l2),
        "{left:?}"
    );
    assert_eq!(
        m.leaves().iter().map(|(l, _)| *l).collect::<Vec<_>>(),
        vec![LeafId(0), l1]
    );
    await_branches(&n.sw, 2);
    // The root sent one copy of the stream, whatever the number of leaves.
    let vc = m.branch(LeafId(0)).unwrap();
    vc.flush(Duration::from_secs(10)).unwrap();
    let sent = vc.stats().tx;
    assert_eq!(sent.bytes_sent, u64::from(MSGS) * LEN as u64, "{sent:?}");
    m.close(Duration::from_secs(10)).unwrap();

    let expect: Vec<Vec<u8>> = (0..MSGS).map(|k| message(k, LEN)).collect();
    check_leaves("switch", [t0, t1], &expect, || n.sw.stat().to_string());
    eprintln!(
        "switch: root: {} bytes of messages in {:.3} s = {:.3} Mbit/s; its one VC sent {} bytes in {} TPDUs for 3 leaves",
        MSGS as usize * LEN,
        root_span.as_secs_f64(),
        mbps(MSGS as usize * LEN, root_span),
        sent.bytes_sent,
        sent.tpdus_sent
    );
    n.root.wait_no_calls();
    for l in &n.leaves[..2] {
        l.wait_no_calls();
    }
}

/// A leaf added while the root sends takes the stream from the next whole message on,
/// in order, to the end; the first leaf is not disturbed.
#[test]
fn a_leaf_added_through_a_switch_mid_stream_joins_at_a_whole_message() {
    const QOS: &str = "guaranteed:pcr=2Mbps,encrypt=off";
    const MSGS: u32 = 200;
    const LEN: usize = 6000;
    let n = switched(2);
    let (r0, t0) = leaf(n.leaves[0].host());
    let (r1, t1) = leaf(n.leaves[1].host());
    r0.recv().unwrap();
    r1.recv().unwrap();
    let host = n.root.host();
    let mut m = connect(&host, "+4420002:mc", QOS);
    let mut l1 = None;
    for k in 0..MSGS {
        if k == MSGS / 2 {
            l1 = Some(add(&mut m, "+4420003:mc"));
        }
        m.send(&message(k, LEN)).unwrap();
    }
    assert_eq!(m.replicated_by_network(l1.unwrap()), Some(true));
    m.close(Duration::from_secs(10)).unwrap();
    let (g0, _) = t0.join().unwrap();
    assert_eq!(g0, (0..MSGS).map(|k| message(k, LEN)).collect::<Vec<_>>());
    let (g1, _) = t1.join().unwrap();
    let num = |m: &Vec<u8>| u32::from_be_bytes(m[..4].try_into().unwrap());
    let first = num(g1.first().expect("the late leaf got nothing"));
    // What the root's VC still held when the branch was added reaches the new leaf
    // too; message 0 went long before.
    assert!(first > 0, "the late leaf got the stream's first message");
    assert_eq!(
        g1,
        (first..MSGS).map(|k| message(k, LEN)).collect::<Vec<_>>(),
        "the late leaf's stream, from its first message to the end"
    );
    n.root.wait_no_calls();
}
