//! Point-to-multipoint VCs (issue 19): a root adds leaves through sigd, each leaf on
//! its own host (its own sigd on loopback); the root's engine replicates every
//! message to every branch. A guaranteed VC to 3 leaves with one leaf killed
//! mid-stream, a branch refused by admission, drop_sink, and best effort.

mod sigd_support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use natm::ulib::{Error, Host, LeafEvent, LeafId, Multipoint};
use sigd_support::{free_port, ChildGuard, Sigd, LINK};

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
        let c = l.accept_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = Vec::new();
        let mut first = None;
        let mut last = Instant::now();
        while let Some(m) = c.recv_timeout(Duration::from_secs(20)).unwrap() {
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
    assert_eq!(m.qos(), "guaranteed:pcr=4Mbps,rx:pcr=64kbps");
    // Each branch is its own call, admitted on the root's link: three reservations.
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
    for (i, t) in [t0, t1].into_iter().enumerate() {
        let (got, span) = t.join().unwrap();
        assert_eq!(got.len(), expect.len(), "leaf {i}");
        assert!(
            got == expect,
            "leaf {i} received other bytes than were sent"
        );
        eprintln!(
            "kill={kill} leaf {i}: {} bytes in {:.3} s = {:.3} Mbit/s (reserved 4 Mbit/s)",
            got.len() * LEN,
            span.as_secs_f64(),
            mbps(got.len() * LEN, span)
        );
    }
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
