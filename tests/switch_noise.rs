//! Issue 31: a host's sigd and the `natm switch` port it is attached to authenticate
//! their signalling link with Noise by default, as two sigds do — a call through the
//! switch works with no key configured, forged clear SSCOP ENDs and RELEASEs from
//! either end's spoofed address release nothing, a peer proving another key than
//! the pinned one is refused, and `clear = true` on both ends keeps clear
//! signalling.
//!
//! ```text
//!  h1 (+4420001) ── S ── h2 (+4420002)
//! ```
//!
//! and the same for a trunk between two switches.

mod sigd_support;
mod spoof_support;
mod switch_support;

use natm::ulib::Wait;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sigd_support::{free_port, Sigd, LINK};
use spoof_support::Spoofer;
use switch_support::SwitchProc;

/// How long a test waits for what it expects.
const DEADLINE: Duration = Duration::from_secs(20);

/// Forged clear signalling: SSCOP END (S=0), and SSCOP SDs carrying a Q.2931
/// RELEASE for the first few call references, on VPI 0/VCI 5.
fn forgeries() -> Vec<Vec<u8>> {
    use natm_proto::wire::q2931::{CallRef, Message, MessageType};
    use natm_proto::wire::sscop::{Pdu, SeqNum};
    let frame = |p: Pdu| natm_proto::wire::vcframe::signalling_frame(&p.to_bytes());
    let mut v = vec![frame(Pdu::End {
        source_sscop: false,
        uu: Vec::new(),
    })];
    for n in 0..4u32 {
        for cr in 1..4u32 {
            let info = Message::new(MessageType::Release, CallRef::new(cr))
                .to_bytes()
                .unwrap();
            v.push(frame(Pdu::Sd {
                ns: SeqNum::new(n).unwrap(),
                info,
            }));
        }
    }
    v
}

fn port(name: &str, bind: SocketAddr, peer: SocketAddr, extra: &str) -> String {
    format!(
        "[[port]]\nname = \"{name}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = \"frame\"\nline_rate = 1000000000\nbuffer = 16384\nsignalling = \"host\"\n{extra}"
    )
}

fn route(prefix: &str, port: &str) -> String {
    format!("[[route]]\nprefix = \"{prefix}\"\nport = \"{port}\"\n")
}

/// A host `+442000{n}` at `sig` attached to the switch port `switch`, with `peer`
/// lines for its `[[peer]]` entry for the switch (none if empty).
fn host(n: u8, sig: SocketAddr, switch: SocketAddr, peer: &str) -> Sigd {
    let entry = if peer.is_empty() {
        String::new()
    } else {
        format!("[[peer]]\naddress = \"{switch}\"\n{peer}\n")
    };
    Sigd::start_at(
        &format!(
            "addresses = [\"+442000{n}\"]\n{LINK}\n[[directory]]\nprefix = \"*\"\npeer = \"{switch}\"\nswitch = true\n{entry}"
        ),
        sig,
    )
}

struct Net {
    sw: SwitchProc,
    h: [Sigd; 2],
    /// Each host's switch port.
    ports: [SocketAddr; 2],
}

/// The switch and two hosts: `sw_extra[i]` added to host i's port, `peer[i]` to
/// host i's `[[peer]]` for the switch.
fn net(sw_extra: [&str; 2], peer: [&str; 2]) -> Net {
    let [h1, h2, p1, p2] = std::array::from_fn(|_| free_port());
    let sw = SwitchProc::start(
        "noise",
        &[
            port("h1", p1, h1, sw_extra[0]),
            port("h2", p2, h2, sw_extra[1]),
            route("+4420001", "h1"),
            route("+4420002", "h2"),
        ]
        .concat(),
    );
    let h = [host(1, h1, p1, peer[0]), host(2, h2, p2, peer[1])];
    Net {
        sw,
        h,
        ports: [p1, p2],
    }
}

impl Net {
    fn diag(&self) -> String {
        format!(
            "{}\n{}\n{}\n--- switch\n{}\n--- h1\n{}\n--- h2\n{}",
            self.sw.stat(),
            self.h[0].stat(),
            self.h[1].stat(),
            self.sw.log(),
            self.h[0].log(),
            self.h[1].log()
        )
    }

    /// Waits until every host's link to the switch, and the switch's to each, is up.
    fn wait_up(&self) {
        let until = Instant::now() + DEADLINE;
        loop {
            let hosts = self.h.iter().all(|s| s.stat()["peers"][0]["up"] == true);
            let sw = self.sw.stat()["signalling"]
                .as_array()
                .is_some_and(|l| l.len() == 2 && l.iter().all(|r| r["up"] == true));
            if hosts && sw {
                return;
            }
            assert!(Instant::now() < until, "links not up:\n{}", self.diag());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn show_key(args: &[&str], path: &std::path::Path) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(args)
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

fn switch_key(sw: &SwitchProc) -> String {
    show_key(
        &["switch", "--show-key", "--config"],
        &sw.dir.join("switch.toml"),
    )
}

fn sigd_key(s: &Sigd) -> String {
    show_key(&["sigd", "--show-key", "--socket"], &s.socket)
}

/// An echo call from h1 to h2: the caller's connection and the callee's thread.
fn echo_call(n: &Net) -> (natm::ulib::Connection, std::thread::JoinHandle<()>) {
    let l = n.h[1].host().bind("echo", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            c.send(&m, Wait::Block).unwrap();
        }
    });
    let c = n.h[0]
        .host()
        .connect("+4420002:echo", "reliable")
        .unwrap_or_else(|e| panic!("{e}\n{}", n.diag()));
    (c, t)
}

fn echo(c: &natm::ulib::Connection, msg: &[u8], n: &Net) {
    c.send(msg, Wait::Block).unwrap();
    let got = c
        .recv(Wait::For(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("{e}\n{}", n.diag()))
        .unwrap_or_else(|| panic!("closed\n{}", n.diag()));
    assert_eq!(got, msg);
}

fn close(c: natm::ulib::Connection, t: std::thread::JoinHandle<()>) {
    c.close();
    c.flush(Duration::from_secs(5)).unwrap();
    drop(c);
    t.join().unwrap();
}

#[test]
fn hosts_call_through_a_switch_over_noise_and_forged_ends_and_releases_release_nothing() {
    let n = net(["", ""], ["", ""]);
    n.wait_up();
    let (c, t) = echo_call(&n);
    echo(&c, b"before", &n);
    // Both ends of each host's link say Noise, each holding the key the other proves.
    let (sk, st) = (switch_key(&n.sw), n.sw.stat());
    for (i, h) in n.h.iter().enumerate() {
        let s = h.stat();
        assert_eq!(s["peers"][0]["auth"], "noise", "{s}");
        assert_eq!(s["peers"][0]["peer_key"], sk, "{s}");
        assert_eq!(st["ports"][i]["auth"], "noise", "{st}");
        assert_eq!(st["ports"][i]["peer_key"], sigd_key(h), "{st}");
    }
    // The tables say so: sigd's links table and the switch's signalling table.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["stat", "--socket"])
        .arg(&n.h[0].socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.contains(&n.ports[0].to_string()))
        .unwrap_or("");
    assert!(row.contains(" noise ") && row.contains(&sk[..11]), "{text}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["stat", "--switch"])
        .arg(&n.sw.stat)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("h1 ")
            && l.contains(" noise ")
            && l.contains(&sigd_key(&n.h[0])[..11])),
        "{text}"
    );
    // Each pinned the other: the switch in the known-peers file beside its
    // configuration, the host beside its socket; the switch's key file is 0600.
    let pins = std::fs::read_to_string(n.sw.dir.join("switch.known-peers")).unwrap();
    assert!(
        pins.contains(&format!("{} {}", n.h[0].signalling, sigd_key(&n.h[0]))),
        "{pins}"
    );
    let pins = std::fs::read_to_string(n.h[0].socket.with_extension("known-peers")).unwrap();
    assert!(pins.contains(&format!("{} {sk}", n.ports[0])), "{pins}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(n.sw.dir.join("switch.noise-key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // The audit's attack, both ways on both hosts' links: clear ENDs and RELEASEs
    // from the host's address to its switch port, and from the switch port's
    // address to the host; and the same from another loopback address.
    let spoof = Spoofer::open();
    let forged = forgeries();
    for _ in 0..5 {
        for (h, p) in n.h.iter().zip(n.ports) {
            for f in &forged {
                spoof.send(h.signalling, p, f);
                spoof.send(p, h.signalling, f);
            }
        }
    }
    let other = std::net::UdpSocket::bind("127.0.0.7:0").unwrap();
    for f in &forged {
        other.send_to(f, n.ports[0]).unwrap();
        other.send_to(f, n.h[0].signalling).unwrap();
    }
    // Every forgery counted as refused at each end before the call is checked.
    let until = Instant::now() + DEADLINE;
    let want = 5 * forged.len() as u64;
    loop {
        let st = n.sw.stat();
        let sw_ok = (0..2).all(|i| st["ports"][i]["auth_failures"].as_u64().unwrap_or(0) >= want);
        let h_ok =
            n.h.iter()
                .all(|h| h.stat()["counters"]["auth_failures"].as_u64().unwrap_or(0) >= want);
        if sw_ok && h_ok {
            break;
        }
        assert!(
            Instant::now() < until,
            "forgeries not all refused:\n{}",
            n.diag()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The call still carries data, and every link is still up with it.
    echo(&c, b"after", &n);
    let (s0, s1, st) = (n.h[0].stat(), n.h[1].stat(), n.sw.stat());
    assert_eq!(s0["calls"][0]["state"], "active", "{s0}");
    assert_eq!(s1["peers"][0]["up"], true, "{s1}");
    assert_eq!(st["calls"].as_array().map(Vec::len), Some(1), "{st}");
    assert!(
        st["signalling"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["up"] == true),
        "{st}"
    );
    close(c, t);
}

/// Issue 33 over issue 31's links: ILMI between a host without an address and its
/// switch port rides the link's Noise session, so forged clear ILMI — a registration
/// of another address and a coldStart from the host's address, a prefix withdrawal
/// and a coldStart from the switch port's — is refused at both ends and changes no
/// registration.
#[test]
fn forged_ilmi_from_either_end_registers_and_withdraws_nothing() {
    use natm_proto::ilmi::{self, bind, integer, octets_index, oid, pdu, Pdus, SetRequest};
    use natm_proto::wire::vcframe::ilmi_frame;
    const PREFIX: &str = "47.0005.80ffe1000000f21a26d8";
    let [h1, p1] = std::array::from_fn(|_| free_port());
    let sw = SwitchProc::start(
        "noise-ilmi",
        &port("h1", p1, h1, &format!("ilmi_prefix = \"{PREFIX}\"\n")),
    );
    let h = Sigd::start_at(
        &format!("{LINK}\n[[directory]]\nprefix = \"*\"\npeer = \"{p1}\"\nswitch = true\n"),
        h1,
    );
    // What the switch's ILMI holds: the registrations and the coldStarts it took.
    let registered = |st: &serde_json::Value| {
        let i = &st["ports"][0]["ilmi"];
        (i["registered"].clone(), i["cold_starts"].clone())
    };
    let until = Instant::now() + DEADLINE;
    let (addr, before) = loop {
        let (hs, st) = (h.stat(), sw.stat());
        if hs["addresses"].as_array().is_some_and(|a| a.len() == 1)
            && registered(&st).0.as_array().is_some_and(|r| r.len() == 1)
        {
            break (hs["addresses"][0].clone(), registered(&st));
        }
        assert!(
            Instant::now() < until,
            "no address learned:\n{hs}\n{st}\n{}",
            h.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let prefix = hex::decode(PREFIX.replace('.', "")).unwrap();
    let mut other = [0x11u8; 20];
    other[..13].copy_from_slice(&prefix);
    let set = |name: Vec<u32>, v: i64| {
        ilmi::encode(Pdus::SetRequest(SetRequest(pdu(
            9,
            0,
            0,
            vec![bind(&name, integer(v))],
        ))))
        .unwrap()
    };
    let to_switch = [
        ilmi_frame(&set(octets_index(oid::ADDRESS_STATUS, 0, &other), 1)),
        ilmi_frame(&ilmi::encode(ilmi::cold_start(0)).unwrap()),
    ];
    let to_host = [
        ilmi_frame(&set(octets_index(oid::NET_PREFIX_STATUS, 0, &prefix), 2)),
        ilmi_frame(&ilmi::encode(ilmi::cold_start(0)).unwrap()),
    ];
    let spoof = Spoofer::open();
    for _ in 0..5 {
        for f in &to_switch {
            spoof.send(h1, p1, f);
        }
        for f in &to_host {
            spoof.send(p1, h1, f);
        }
    }
    // Every forgery refused at each end before the registrations are checked.
    let until = Instant::now() + DEADLINE;
    loop {
        let (st, hs) = (sw.stat(), h.stat());
        let sw_ok = st["ports"][0]["auth_failures"].as_u64().unwrap_or(0) >= 10;
        let h_ok = hs["counters"]["auth_failures"].as_u64().unwrap_or(0) >= 10;
        if sw_ok && h_ok {
            break;
        }
        assert!(
            Instant::now() < until,
            "forgeries not all refused:\n{st}\n{hs}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (st, hs) = (sw.stat(), h.stat());
    assert_eq!(registered(&st), before, "{st}");
    assert_eq!(hs["addresses"], serde_json::json!([addr]), "{hs}");
    assert!(
        hs["peers"][0]["ilmi"]
            .as_str()
            .is_some_and(|i| i.starts_with("registered")),
        "{hs}"
    );
}

#[test]
fn a_peer_proving_another_key_than_the_pinned_one_is_refused() {
    // h1's port pins a key h1 does not hold; h2 pins a key the switch does not
    // hold. Neither link comes up, and each refusing end says why.
    let wrong = natm_proto::sig::noise::key_to_text(&natm_proto::sig::noise::public_key(&[9; 32]));
    let n = net(
        [&format!("public_key = \"{wrong}\"\n"), ""],
        ["", &format!("public_key = \"{wrong}\"")],
    );
    let until = Instant::now() + DEADLINE;
    loop {
        let st = n.sw.stat();
        let sw = st["ports"][0]["key_mismatches"].as_u64().unwrap_or(0) > 0;
        let h2 = n.h[1].stat()["counters"]["key_mismatches"]
            .as_u64()
            .unwrap_or(0)
            > 0;
        if sw && h2 {
            break;
        }
        assert!(
            Instant::now() < until,
            "no key mismatch seen:\n{}",
            n.diag()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(n.sw.log().contains("different Noise key"), "{}", n.sw.log());
    assert!(
        n.h[1].log().contains("different Noise key"),
        "{}",
        n.h[1].log()
    );
    for h in &n.h {
        assert_eq!(h.stat()["peers"][0]["up"], false, "{}", h.stat());
    }
    // A key file others may read is refused at start, as sigd's is.
    use std::os::unix::fs::PermissionsExt;
    let cfg = n.sw.dir.join("switch.toml");
    let key = n.sw.dir.join("switch.noise-key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["switch", "--show-key", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("Noise key file") && err.contains("chmod 600"),
        "{err}"
    );
}

#[test]
fn clear_on_both_ends_keeps_clear_signalling() {
    let n = net(
        ["clear = true\n", "clear = true\n"],
        ["clear = true", "clear = true"],
    );
    n.wait_up();
    let (c, t) = echo_call(&n);
    echo(&c, b"clear", &n);
    let st = n.sw.stat();
    for (i, h) in n.h.iter().enumerate() {
        assert_eq!(h.stat()["peers"][0]["auth"], "clear", "{}", h.stat());
        assert_eq!(st["ports"][i]["auth"], "clear", "{st}");
    }
    close(c, t);
}

/// A switch killed and started again (its key and pins kept beside its
/// configuration) is taken back by both hosts without a key mismatch, and calls
/// cross it again: the hosts' sessions it forgot are replaced by new handshakes.
#[test]
fn a_restarted_switch_keeps_its_key_and_its_hosts_link_up_again() {
    let mut n = net(["", ""], ["", ""]);
    n.wait_up();
    let (c, t) = echo_call(&n);
    echo(&c, b"first", &n);
    let key = switch_key(&n.sw);
    // Each port's last BGN N(SQ) is kept beside the configuration; the restarted
    // switch counts on from it, so that no host takes its first BGN for a
    // retransmission of the last one (and keeps the old link's sequence numbers).
    let record = n.sw.dir.join("switch.sscop-sq");
    let sq = |text: &str, port: &str| -> u8 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{port} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no N(SQ) for {port}: {text:?}"))
    };
    let before = std::fs::read_to_string(&record).expect("the N(SQ) record");
    n.sw.restart();
    // The call is gone with the switch; the links come back.
    drop(c);
    let _ = t.join();
    n.wait_up();
    assert_eq!(switch_key(&n.sw), key);
    let after = std::fs::read_to_string(&record).expect("the N(SQ) record");
    for port in ["h1", "h2"] {
        assert_eq!(
            sq(&after, port),
            sq(&before, port).wrapping_add(1),
            "{before:?} then {after:?}"
        );
    }
    let (c, t) = echo_call(&n);
    echo(&c, b"again", &n);
    let st = n.sw.stat();
    for (i, h) in n.h.iter().enumerate() {
        let s = h.stat();
        assert_eq!(s["counters"]["key_mismatches"], 0, "{s}");
        assert_eq!(s["peers"][0]["peer_key"], key, "{s}");
        assert_eq!(st["ports"][i]["peer_key"], sigd_key(h), "{st}");
        assert!(st["ports"][i]["key_mismatches"].is_null(), "{st}");
    }
    close(c, t);
}

/// Switch↔switch: the trunk between two switches runs Noise by default too, its
/// routing frames with its signalling. A call from a host on S1 to one on S2 works;
/// each switch's trunk port shows the other's key; clear SSCOP ENDs and RELEASEs
/// and clear routing frames spoofed from S2's trunk address to S1's (and back)
/// release nothing and are counted.
#[test]
fn a_trunk_between_two_switches_runs_noise_and_forgeries_on_it_release_nothing() {
    let [h1, h2, p1, p2, t1, t2] = std::array::from_fn(|_| free_port());
    let trunk = |name: &str, bind: SocketAddr, peer: SocketAddr| {
        port(name, bind, peer, "").replace("signalling = \"host\"", "signalling = \"switch\"")
    };
    let s1 = SwitchProc::start(
        "t1",
        &[
            port("h1", p1, h1, ""),
            trunk("trunk", t1, t2),
            route("+4420001", "h1"),
            route("*", "trunk"),
        ]
        .concat(),
    );
    let s2 = SwitchProc::start(
        "t2",
        &[
            port("h2", p2, h2, ""),
            trunk("trunk", t2, t1),
            route("+4420002", "h2"),
            route("*", "trunk"),
        ]
        .concat(),
    );
    let h = [host(1, h1, p1, ""), host(2, h2, p2, "")];
    let diag = || {
        format!(
            "{}\n{}\n--- s1\n{}\n--- s2\n{}",
            s1.stat(),
            s2.stat(),
            s1.log(),
            s2.log()
        )
    };
    let up = |s: &SwitchProc| {
        s.stat()["signalling"]
            .as_array()
            .is_some_and(|l| l.len() == 2 && l.iter().all(|r| r["up"] == true))
    };
    let until = Instant::now() + DEADLINE;
    while !(up(&s1) && up(&s2) && h.iter().all(|s| s.stat()["peers"][0]["up"] == true)) {
        assert!(Instant::now() < until, "links not up:\n{}", diag());
        std::thread::sleep(Duration::from_millis(50));
    }
    let l = h[1].host().bind("echo", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            c.send(&m, Wait::Block).unwrap();
        }
    });
    let c = h[0]
        .host()
        .connect("+4420002:echo", "reliable")
        .unwrap_or_else(|e| panic!("{e}\n{}", diag()));
    let echo = |msg: &[u8]| {
        c.send(msg, Wait::Block).unwrap();
        let got = c
            .recv(Wait::For(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("{e}\n{}", diag()))
            .unwrap_or_else(|| panic!("closed\n{}", diag()));
        assert_eq!(got, msg);
    };
    echo(b"before");
    let (k1, k2) = (switch_key(&s1), switch_key(&s2));
    let (st1, st2) = (s1.stat(), s2.stat());
    assert_eq!(st1["ports"][1]["auth"], "noise", "{st1}");
    assert_eq!(st1["ports"][1]["peer_key"], k2, "{st1}");
    assert_eq!(st2["ports"][1]["peer_key"], k1, "{st2}");
    let spoof = Spoofer::open();
    let mut forged = forgeries();
    forged.push(natm_proto::wire::vcframe::routing_frame(&[0; 40]));
    for _ in 0..5 {
        for f in &forged {
            spoof.send(t2, t1, f);
            spoof.send(t1, t2, f);
        }
    }
    let want = 5 * forged.len() as u64;
    let until = Instant::now() + DEADLINE;
    while !(s1.stat()["ports"][1]["auth_failures"].as_u64().unwrap_or(0) >= want
        && s2.stat()["ports"][1]["auth_failures"].as_u64().unwrap_or(0) >= want)
    {
        assert!(
            Instant::now() < until,
            "forgeries not all refused:\n{}",
            diag()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    echo(b"after");
    assert!(up(&s1) && up(&s2), "{}", diag());
    assert_eq!(
        s1.stat()["calls"].as_array().map(Vec::len),
        Some(1),
        "{}",
        diag()
    );
    c.close();
    c.flush(Duration::from_secs(5)).unwrap();
    drop(c);
    t.join().unwrap();
}

/// Call setup through the switch, timed (a measurement, not a check): `CALLS`
/// (default 300) calls from h1 to h2 one after another, each set up, answered and
/// released; prints the median and 90th percentile of `connect` in µs. The
/// processes are `NATM_BIN` if set (another build's `natm`, e.g. main's, for a
/// before/after comparison), else this build's; `NATM_CLEAR=1` configures the
/// links clear at both ends (refused by a build without the key). Run:
/// `cargo test -p natm-cli --test switch_noise call_setup_timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn call_setup_timing() {
    use std::process::{Command, Stdio};
    let bin = std::env::var("NATM_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_natm").into());
    let clear = std::env::var("NATM_CLEAR").is_ok_and(|v| v == "1");
    let calls: usize = std::env::var("CALLS").map_or(300, |v| v.parse().unwrap());
    let dir = std::env::temp_dir().join(format!("natm-setup-timing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let [h1, h2, p1, p2] = std::array::from_fn(|_| free_port());
    let sw_clear = if clear { "clear = true\n" } else { "" };
    let sw_cfg = dir.join("switch.toml");
    let stat = dir.join("stat.json");
    std::fs::write(
        &sw_cfg,
        [
            format!("stat_json = {stat:?}\nstat_interval_ms = 100\n"),
            port("h1", p1, h1, sw_clear),
            port("h2", p2, h2, sw_clear),
            route("+4420001", "h1"),
            route("+4420002", "h2"),
        ]
        .concat(),
    )
    .unwrap();
    /// Killed and reaped on drop, a failed run's too.
    struct Children(Vec<std::process::Child>);
    impl Drop for Children {
        fn drop(&mut self) {
            for c in &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut children = Children(Vec::new());
    children.0.push(
        Command::new(&bin)
            .args(["switch", "--config"])
            .arg(&sw_cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut sockets = Vec::new();
    for (n, sig, sw) in [(1, h1, p1), (2, h2, p2)] {
        let socket = dir.join(format!("h{n}.sock"));
        let peer = if clear {
            format!("[[peer]]\naddress = \"{sw}\"\nclear = true\n")
        } else {
            String::new()
        };
        let cfg = dir.join(format!("h{n}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "socket = \"{}\"\nsignalling = \"{sig}\"\naddresses = [\"+442000{n}\"]\n{LINK}\n\
                 [[directory]]\nprefix = \"*\"\npeer = \"{sw}\"\nswitch = true\n{peer}",
                socket.display()
            ),
        )
        .unwrap();
        children.0.push(
            Command::new(&bin)
                .args(["sigd", "--config"])
                .arg(&cfg)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        sockets.push(socket);
    }
    let host = |s: &std::path::Path| {
        natm::ulib::Host::open(natm::ulib::HostConfig {
            sigd_socket: Some(s.to_path_buf()),
            connect_timeout: Duration::from_secs(5),
            ..natm::ulib::HostConfig::default()
        })
    };
    // Both sigds up and each link to the switch up: the first call that succeeds.
    let until = Instant::now() + DEADLINE;
    while !sockets
        .iter()
        .all(|s| std::os::unix::net::UnixStream::connect(s).is_ok())
    {
        assert!(Instant::now() < until, "sigds did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ha, hb) = (host(&sockets[0]).unwrap(), host(&sockets[1]).unwrap());
    let l = hb.bind("t", "reliable").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let callee = std::thread::spawn(move || {
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            // Held until the caller lets go: a callee that let go at once could
            // abort the call before the caller's `connect` returned it.
            if let Ok(c) = l.accept(Wait::For(Duration::from_millis(200))) {
                while let Ok(Some(_)) = c.recv(Wait::For(Duration::from_secs(5))) {}
            }
        }
    });
    loop {
        let e = match ha.connect("+4420002:t", "reliable") {
            Ok(c) => {
                drop(c);
                break;
            }
            Err(e) => e,
        };
        assert!(Instant::now() < until, "no call through the switch: {e}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // CPU time (user + system, clock ticks) each process has used so far.
    let cpu = |c: &Children| -> Vec<u64> {
        c.0.iter()
            .map(|p| {
                let st = std::fs::read_to_string(format!("/proc/{}/stat", p.id())).unwrap();
                let f: Vec<&str> = st.rsplit_once(") ").unwrap().1.split(' ').collect();
                f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
            })
            .collect()
    };
    let before = cpu(&children);
    let mut us = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let c = ha.connect("+4420002:t", "reliable").unwrap();
        us.push(t.elapsed().as_secs_f64() * 1e6);
        drop(c);
    }
    let after = cpu(&children);
    // Datagrams the switch exchanged with the hosts per call (from its stat file).
    let datagrams = || -> u64 {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stat).unwrap_or_default())
                .unwrap_or_default();
        (0..2)
            .map(|i| {
                v["ports"][i]["link"]["datagrams_in"].as_u64().unwrap_or(0)
                    + v["ports"][i]["link"]["datagrams_out"].as_u64().unwrap_or(0)
            })
            .sum()
    };
    let d0 = datagrams();
    std::thread::sleep(Duration::from_millis(300));
    let d1 = datagrams();
    eprintln!("switch datagrams so far: {d0} (then {d1}) for {calls} calls and their warm-up");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    callee.join().unwrap();
    let tick_us = 1e6 / 100.0;
    let per_call: Vec<String> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| format!("{:.0}", (a - b) as f64 * tick_us / calls as f64))
        .collect();
    us.sort_by(f64::total_cmp);
    println!(
        "call setup through a switch ({}, {calls} calls): median {:.0} µs, p90 {:.0} µs; CPU per call (switch, h1, h2) {} µs",
        if clear { "clear" } else { "default" },
        us[us.len() / 2],
        us[us.len() * 9 / 10],
        per_call.join(", ")
    );
    drop(children);
    let _ = std::fs::remove_dir_all(&dir);
}
