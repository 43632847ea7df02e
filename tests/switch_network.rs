//! An ATM network of separate processes (issue 13): three hosts' sigds and two
//! `natm switch`es on loopback, calls routed hop by hop by address prefix.
//!
//! ```text
//!  h1 (+4420001) ─┐
//!                 S1 ── trunk ── S2 ── h3 (+4420003)
//!  h2 (+4420002) ─┘
//! ```
//!
//! Calls between every pair carry data byte-exact through one or two switches, with
//! the VCIs each switch chose; a killed switch releases every call through it at
//! every end within a second.

mod sigd_support;
mod switch_support;

use natm::ulib::Wait;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sigd_support::{free_port, Sigd, LINK};
use switch_support::SwitchProc;

struct Net {
    s1: SwitchProc,
    s2: SwitchProc,
    h: [Sigd; 3],
    /// S1's end of the trunk.
    trunk: SocketAddr,
}

fn port(name: &str, bind: SocketAddr, peer: SocketAddr, role: &str) -> String {
    port_in("frame", name, bind, peer, role)
}

fn port_in(mode: &str, name: &str, bind: SocketAddr, peer: SocketAddr, role: &str) -> String {
    format!(
        "[[port]]\nname = \"{name}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = \"{mode}\"\nline_rate = 1000000000\nbuffer = 16384\nsignalling = \"{role}\"\n"
    )
}

/// An application host on `sigd` whose UDP links carry `link` (frame or cell mode).
fn app(sigd: &Sigd, link: &str) -> natm::ulib::Host {
    let mut cfg = natm::ulib::HostConfig {
        sigd_socket: Some(sigd.socket.clone()),
        connect_timeout: Duration::from_secs(5),
        ..natm::ulib::HostConfig::default()
    };
    cfg.engine.link_mode = link.parse().unwrap();
    natm::ulib::Host::open(cfg).unwrap()
}

fn route(prefix: &str, port: &str) -> String {
    format!("[[route]]\nprefix = \"{prefix}\"\nport = \"{port}\"\n")
}

fn host(n: u8, sig: SocketAddr, switch: SocketAddr) -> Sigd {
    Sigd::start_at(
        &format!(
            "addresses = [\"+442000{n}\"]\n{LINK}\n[[directory]]\nprefix = \"*\"\npeer = \"{switch}\"\nswitch = true\n"
        ),
        sig,
    )
}

fn net() -> Net {
    net_with("frame")
}

/// The network with h3's port on S2 (and h3's applications) in `h3_mode`, and the
/// trunk in cell mode when h3 is.
fn net_with(h3_mode: &str) -> Net {
    net_with_trunk(h3_mode, "")
}

/// [`net_with`], `trunk` added to both ends of the trunk's `[[port]]`.
fn net_with_trunk(h3_mode: &str, trunk: &str) -> Net {
    let [h1, h2, h3, s1h1, s1h2, s1t, s2h3, s2t] = std::array::from_fn(|_| free_port());
    let s1 = SwitchProc::start(
        "s1",
        &[
            port("h1", s1h1, h1, "host"),
            port("h2", s1h2, h2, "host"),
            port_in(h3_mode, "trunk", s1t, s2t, "switch") + trunk,
            route("+4420001", "h1"),
            route("+4420002", "h2"),
            route("*", "trunk"),
        ]
        .concat(),
    );
    let s2 = SwitchProc::start(
        "s2",
        &[
            port_in(h3_mode, "h3", s2h3, h3, "host"),
            port_in(h3_mode, "trunk", s2t, s1t, "switch") + trunk,
            route("+4420003", "h3"),
            route("*", "trunk"),
        ]
        .concat(),
    );
    let h = [host(1, h1, s1h1), host(2, h2, s1h2), host(3, h3, s2h3)];
    let n = Net {
        s1,
        s2,
        h,
        trunk: s1t,
    };
    // Every signalling link up: each sigd's to its switch, and the trunk.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let hosts_up = n.h.iter().all(|s| s.stat()["peers"][0]["up"] == true);
        let up = |s: &SwitchProc| {
            s.stat()["signalling"]
                .as_array()
                .is_some_and(|l| !l.is_empty() && l.iter().all(|r| r["up"] == true))
        };
        if hosts_up && up(&n.s1) && up(&n.s2) {
            return n;
        }
        assert!(
            Instant::now() < until,
            "links not up: {} {} {}\n{}\n{}",
            n.s1.stat(),
            n.s2.stat(),
            n.h[0].stat(),
            n.s1.log(),
            n.s2.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Calls `to:SAP` from `from`, echoes 20 messages through it, closes.
fn echo_call(from: &Sigd, to: &Sigd, to_addr: &str, qos: &str, diag: &dyn Fn() -> String) {
    echo_hosts(from.host(), to.host(), to_addr, qos, diag);
}

/// [`echo_call`] between two application hosts.
fn echo_hosts(
    ha: natm::ulib::Host,
    hb: natm::ulib::Host,
    to_addr: &str,
    qos: &str,
    diag: &dyn Fn() -> String,
) {
    let l = hb.bind("echo", qos).unwrap();
    let q = qos.to_owned();
    let t = std::thread::spawn(move || {
        let qos = q;
        let call = l.next_call(Wait::For(Duration::from_secs(10))).unwrap();
        let c = call.accept().unwrap();
        loop {
            match c.recv(Wait::For(Duration::from_secs(10))) {
                Ok(Some(m)) => c.send(&m, Wait::Block).unwrap(),
                Ok(None) => break,
                Err(e) => panic!("callee of {qos}: {e}"),
            }
        }
    });
    let c = ha
        .connect(format!("{to_addr}:echo").as_str(), qos)
        .unwrap_or_else(|e| panic!("{to_addr} ({qos}): {e}"));
    for i in 0..20u32 {
        let msg: Vec<u8> = (0..20_000 + i as usize)
            .map(|k| (k as u32 * 31 + i) as u8)
            .collect();
        c.send(&msg, Wait::Block).unwrap();
        let got = c
            .recv(Wait::For(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("{to_addr} ({qos}) message {i}: {e}\n{}", diag()))
            .unwrap_or_else(|| panic!("{to_addr} ({qos}) message {i}: closed\n{}", diag()));
        assert!(got == msg, "{to_addr}: message {i} differs");
    }
    c.close();
    c.flush(Duration::from_secs(5)).unwrap();
    drop(c);
    t.join()
        .unwrap_or_else(|_| panic!("callee failed\n{}", diag()));
}

#[test]
fn calls_between_every_pair_cross_one_or_two_switches_byte_exact() {
    let n = net();
    let addr = |i: usize| format!("+442000{}", i + 1);
    for (a, b, qos) in [
        (0, 1, "reliable"),
        (0, 2, "reliable"),
        (1, 2, "cbr:pcr=20Mbps"),
        (2, 0, "reliable"),
        (2, 1, "reliable"),
        (1, 0, "reliable"),
    ] {
        let diag = || {
            format!(
                "{}\n{}\n{}\n{}",
                n.s1.stat(),
                n.s2.stat(),
                n.h[a].log(),
                n.h[b].log()
            )
        };
        echo_call(&n.h[a], &n.h[b], &addr(b), qos, &diag);
    }
    for s in &n.h {
        s.wait_no_calls();
    }
    // Both switches forwarded frames and hold no call or cross-connect afterwards.
    for s in [&n.s1, &n.s2] {
        let st = s.stat_until(|st| {
            st["calls"].as_array().is_some_and(|c| c.is_empty())
                && st["vcs"].as_array().is_some_and(|v| v.is_empty())
        });
        let frames: u64 = st["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["stats"]["counters"]["frames_out"].as_u64().unwrap_or(0))
            .sum();
        assert!(frames > 40, "{st}");
    }
}

#[test]
fn a_call_through_two_switches_is_relabelled_on_every_link() {
    let n = net();
    let hb = n.h[2].host();
    let l = hb.bind("hold", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let c = l
            .next_call(Wait::For(Duration::from_secs(10)))
            .unwrap()
            .accept()
            .unwrap();
        let m = c.recv(Wait::For(Duration::from_secs(10))).unwrap();
        (c, m)
    });
    let c = n.h[0].host().connect("+4420003:hold", "reliable").unwrap();
    c.send(b"through two switches", Wait::Block).unwrap();
    let (_held, m) = t.join().unwrap();
    assert_eq!(m.as_deref(), Some(&b"through two switches"[..]));
    // Each switch holds the call with a VCI of its own on each side; the hosts'
    // labels are the ones their switch gave them.
    let active = |st: &serde_json::Value| st["calls"][0]["active"] == true;
    let r1 = n.s1.stat_until(active)["calls"][0].clone();
    let r2 = n.s2.stat_until(active)["calls"][0].clone();
    let caller = &n.h[0].stat()["calls"][0];
    let callee = &n.h[2].stat()["calls"][0];
    // Caller → S1: the caller sends with the VCI S1 receives on (r1.a.1) and receives
    // on the one it chose (r1.a.2).
    assert_eq!(caller["tx_vci"], r1["a"][1], "{caller} {r1}");
    assert_eq!(caller["rx_vci"], r1["a"][2], "{caller} {r1}");
    // S2 → callee, likewise.
    assert_eq!(callee["tx_vci"], r2["b"][1], "{callee} {r2}");
    assert_eq!(callee["rx_vci"], r2["b"][2], "{callee} {r2}");
    // The trunk: what S1 sends with is what S2 receives on, and back.
    assert_eq!(r1["b"][2], r2["a"][1], "{r1} {r2}");
    assert_eq!(r2["a"][2], r1["b"][1], "{r1} {r2}");
    // `natm stat --switch` shows the call and the links.
    let out = Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["stat", "--switch"])
        .arg(n.s2.dir.join("stat.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("+4420003") && text.contains("active") && text.contains("switch"),
        "{text}"
    );
}

#[test]
fn a_killed_switch_releases_every_call_through_it_within_a_second() {
    let mut n = net();
    // h1→h3 and h2→h3 cross both switches; h1→h2 only S1. A thread per caller waits
    // for its connection to end and reports when.
    let (tx, rx) = mpsc::channel();
    let mut held = Vec::new();
    for (a, b) in [(0usize, 2usize), (1, 2), (0, 1)] {
        let hb = n.h[b].host();
        let l = hb.bind(format!("k{a}{b}"), "reliable").unwrap();
        let acc = std::thread::spawn(move || {
            l.next_call(Wait::For(Duration::from_secs(10)))
                .unwrap()
                .accept()
                .unwrap()
        });
        let c = n.h[a]
            .host()
            .connect(format!("+442000{}:k{a}{b}", b + 1).as_str(), "reliable")
            .unwrap();
        let callee = acc.join().unwrap();
        for (who, conn) in [
            (format!("caller h{}", a + 1), c),
            (format!("callee h{}", b + 1), callee),
        ] {
            let tx = tx.clone();
            held.push(std::thread::spawn(move || {
                let r = conn.recv(Wait::For(Duration::from_secs(10)));
                let _ = tx.send((who, Instant::now(), format!("{r:?}")));
            }));
        }
    }
    assert_eq!(n.h[2].stat()["calls"].as_array().unwrap().len(), 2);
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    n.s1.kill();
    let mut ends = Vec::new();
    for _ in 0..6 {
        let (who, at, r) = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("every end released");
        ends.push((who, at.duration_since(killed), r));
    }
    for (who, after, r) in &ends {
        eprintln!(
            "{who}: released {:.0} ms after the kill: {r}",
            after.as_secs_f64() * 1e3
        );
        assert!(r.contains("Err"), "{who} saw {r}");
        // Released when a link to the dead switch failed (Timer_NO_RESPONSE: a
        // trunk's 400 ms, a host link's 2 s; T309 = 0), not by the ends' 10 s wait.
        assert!(
            *after < Duration::from_secs(5),
            "{who}: {after:?}: {ends:?}"
        );
    }
    for s in &n.h {
        s.wait_no_calls();
    }
    // The surviving switch cleared the calls it carried for the dead one.
    // (Its stat file is rewritten every 50 ms.)
    n.s2.stat_until(|st| st["calls"].as_array().is_some_and(|c| c.is_empty()));
    for t in held {
        t.join().unwrap();
    }
}

#[test]
fn a_cell_mode_host_calls_through_a_cell_trunk_and_a_frame_host_answers() {
    // h3's applications send AAL5 cells in trains to S2, the trunk carries cells, and
    // S1 reassembles them into frames for h1's frame-mode port; and back.
    let n = net_with("cell");
    let hb = app(&n.h[0], "frame");
    let l = hb.bind("echo", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let c = l
            .next_call(Wait::For(Duration::from_secs(10)))
            .unwrap()
            .accept()
            .unwrap();
        while let Ok(Some(m)) = c.recv(Wait::For(Duration::from_secs(10))) {
            c.send(&m, Wait::Block).unwrap();
        }
    });
    let ha = app(&n.h[2], "cell");
    let c = ha.connect("+4420001:echo", "reliable").unwrap();
    for i in 0..10u32 {
        let msg: Vec<u8> = (0..30_000 + i as usize)
            .map(|k| (k as u32 ^ i) as u8)
            .collect();
        c.send(&msg, Wait::Block).unwrap();
        let got = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
        assert!(got == msg, "message {i} differs");
    }
    assert!(c.stats().cells.is_some_and(|s| s.trains_in > 0));
    c.close();
    c.flush(Duration::from_secs(5)).unwrap();
    drop(c);
    t.join().unwrap();
    // S2's h3 port and the trunk carried cells; S1's h1 port frames (the stat files
    // are rewritten every 50 ms: wait for the snapshots that show it).
    n.s2.stat_until(|st| {
        st["ports"].as_array().is_some_and(|ps| {
            ps.iter().all(|p| {
                p["mode"] == "cell" && p["stats"]["counters"]["cells_in"].as_u64() > Some(1000)
            })
        })
    });
    n.s1.stat_until(|st| st["ports"][0]["stats"]["counters"]["frames_out"].as_u64() > Some(10));
}

#[test]
fn a_capture_of_the_trunk_shows_the_calls_signalling_and_cells_decoded() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: natm capture needs root for a raw packet socket");
        return;
    }
    assert!(
        Command::new("tshark").arg("--version").output().is_ok(),
        "tshark is not installed: scripts/test.sh installs it"
    );
    // A clear trunk: the capture decodes its signalling (a Noise trunk's is sealed).
    let n = net_with_trunk("cell", "clear = true\n");
    let pcap = n.s1.dir.join("trunk.pcap");
    let mut cap = Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["capture", "-i", "lo", "--seconds", "4", "--port"])
        .arg(n.trunk.port().to_string())
        .arg("-w")
        .arg(&pcap)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It says "capturing on" once its socket is open.
    let mut err = std::io::BufReader::new(cap.stderr.take().unwrap());
    let mut said = String::new();
    std::io::BufRead::read_line(&mut err, &mut said).unwrap();
    assert!(said.contains("capturing on"), "natm capture: {said}");
    let diag = || String::new();
    echo_hosts(
        app(&n.h[0], "frame"),
        app(&n.h[2], "cell"),
        "+4420003",
        "reliable",
        &diag,
    );
    let status = cap.wait().unwrap();
    std::io::Read::read_to_string(&mut err, &mut said).unwrap();
    assert!(status.success(), "{said}");
    let run = |args: &[&str]| {
        let o = Command::new("tshark")
            .arg("-r")
            .arg(&pcap)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let list = run(&[]);
    // The switches' SETUP/CONNECT/RELEASE on the trunk, and the call's cells,
    // reassembled into AAL5 frames on the trunk's VCIs.
    for m in ["SETUP", "CONNECT", "RELEASE"] {
        assert!(list.contains(m), "no {m} in:\n{list}");
    }
    let phs = run(&["-q", "-z", "io,phs"]);
    eprintln!("{phs}");
    assert!(phs.contains("q2931") && phs.contains("sscop"), "{phs}");
    let data = run(&[
        "-Y",
        "atm.vci != 5 && atm.vci >= 32",
        "-T",
        "fields",
        "-e",
        "atm.vci",
    ]);
    assert!(
        data.lines().count() > 20,
        "the call's frames:\n{data}\n{list}"
    );
    assert_eq!(run(&["-V"]).matches("Malformed").count(), 0, "{list}");
}

/// Issue 16: host ports keyed with a pre-shared key (`[[port]] key` at the switch,
/// `[[peer]] key` at the sigd): the links come up with every signalling frame sealed,
/// and calls cross the switch as before; a sigd with the wrong key gets no link.
/// Since issue 31 the key is mixed into the links' Noise handshake (`noise+psk`).
#[test]
fn keyed_host_ports_authenticate_signalling_and_carry_calls() {
    let [h1, h2, s1h1, s1h2] = std::array::from_fn(|_| free_port());
    let (k1, k2) = ("a1".repeat(32), "b2".repeat(16));
    let keyed = |name: &str, bind: SocketAddr, peer: SocketAddr, key: &str| {
        format!("{}key = \"{key}\"\n", port(name, bind, peer, "host"))
    };
    let s1 = SwitchProc::start(
        "s1",
        &[
            keyed("h1", s1h1, h1, &k1),
            keyed("h2", s1h2, h2, &k2),
            route("+4420001", "h1"),
            route("+4420002", "h2"),
        ]
        .concat(),
    );
    let keyed_host = |n: u8, sig: SocketAddr, switch: SocketAddr, key: &str| {
        Sigd::start_at(
            &format!(
                "addresses = [\"+442000{n}\"]\n{LINK}\n[[directory]]\nprefix = \"*\"\npeer = \"{switch}\"\nswitch = true\n\
                 [[peer]]\naddress = \"{switch}\"\nkey = \"{key}\"\n"
            ),
            sig,
        )
    };
    let a = keyed_host(1, h1, s1h1, &k1);
    // h2 first with the wrong key: its link never comes up.
    let wrong = keyed_host(2, h2, s1h2, &k1);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(wrong.stat()["peers"][0]["up"], false, "{}", wrong.stat());
    drop(wrong);
    let b = keyed_host(2, h2, s1h2, &k2);
    let until = Instant::now() + Duration::from_secs(20);
    while !(a.stat()["peers"][0]["up"] == true && b.stat()["peers"][0]["up"] == true) {
        assert!(
            Instant::now() < until,
            "keyed links not up: {} {}\n{}",
            a.stat(),
            b.stat(),
            s1.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    echo_call(&a, &b, "+4420002", "reliable", &|| s1.log());
    assert_eq!(a.stat()["counters"]["auth_failures"], 0, "{}", a.stat());
    assert_eq!(a.stat()["peers"][0]["auth"], "noise+psk", "{}", a.stat());
    let ports = s1.stat_until(|v| v["ports"][1]["auth"].is_string());
    assert_eq!(ports["ports"][0]["auth"], "noise+psk", "{ports}");
    assert_eq!(ports["ports"][1]["auth"], "noise+psk", "{ports}");
}

/// Bare one-way AAL5 calls (`transport=none`, `rx:none`) cross a switch one after
/// another: each is set up (the labels of the one before may still be draining), its
/// SDUs arrive, and it is released.
#[test]
fn bare_one_way_calls_cross_the_switch_back_to_back() {
    const ROUNDS: usize = 3;
    let n = net();
    let (ha, hb) = (n.h[0].host(), n.h[1].host());
    let l = hb.bind("bare", "ubr:transport=none").unwrap();
    let callee = std::thread::spawn(move || {
        let mut counts = Vec::new();
        for _ in 0..ROUNDS {
            let Ok(call) = l.next_call(Wait::For(Duration::from_secs(10))) else {
                break;
            };
            let c = call.accept().unwrap();
            let mut got = 0usize;
            while let Ok(Some(m)) = c.recv(Wait::For(Duration::from_secs(5))) {
                assert_eq!(m.len(), 4000);
                got += 1;
            }
            counts.push(got);
        }
        counts
    });
    for round in 0..ROUNDS {
        let c = ha
            .connect("+4420002:bare", "ubr:transport=none,max_sdu=8192,rx:none")
            .unwrap_or_else(|e| panic!("round {round}: {e}\n{}\n{}", n.s1.stat(), n.s1.log()));
        for _ in 0..50 {
            c.send(&[7u8; 4000], Wait::Block).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        c.close();
        let _ = c.flush(Duration::from_secs(5));
        drop(c);
    }
    let counts = callee.join().unwrap();
    assert_eq!(counts.len(), ROUNDS, "{counts:?}\n{}", n.s1.stat());
    assert!(counts.iter().all(|&g| g > 0), "{counts:?}\n{}", n.s1.stat());
}
