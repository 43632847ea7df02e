//! `natm ip` through the ATM network (issue 18), each case in network namespaces of
//! its own, removed on every exit path:
//!
//! - two hosts whose sigds reach each other only through two chained `natm switch`
//!   processes (in a third namespace, joined to the hosts by veths): ping both ways,
//!   TCP byte-exact, the on-demand VC in the switches' calls and the sigds', its idle
//!   release removing it from the switches, and a CBR class the switches admit;
//! - an MTU of 65,000 where both ends agree (a 60,000-byte ping and UDP datagram
//!   unfragmented), and 9,180 towards a host that does not (ICMP fragmentation
//!   needed, ICMPv6 packet too big);
//! - two hosts on a PVC with no sigd, finding each other by InATMARP;
//! - TCP byte-exact both ways between a host with the TUN's offloads (TSO and GRO)
//!   and one without.
//!
//! Needs root and /dev/net/tun; skips with a message otherwise.
#![allow(clippy::needless_range_loop)] // hosts are numbered: namespace i runs host i

mod ip_support;

use std::path::Path;
use std::process::Stdio;

use ip_support::{ip_calls, python, unavailable, Lab, NATM, TCP_SINK, TCP_SOURCE};
use serde_json::Value;

/// The QoS of each call through a switch that is an IP data VC (its QoS offers an
/// MTU: `msg=`), as opposed to the ATMARP VC.
fn switch_ip_calls(stat: &Value) -> Vec<String> {
    stat["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["qos"].as_str().unwrap_or_default().to_owned())
        .filter(|q| q.contains("msg="))
        .collect()
}

fn sigd_config(
    addr: &str,
    sock: &str,
    signalling: &str,
    directory: &[(&str, &str, bool)],
) -> String {
    let mut s = format!(
        "addresses = [\"{addr}\"]\nsocket = \"{sock}\"\nsignalling = \"{signalling}\"\n\
         [link]\ncapacity = \"1Gbps\"\ntpdu_cost_ns = 1000\n"
    );
    for (prefix, peer, switch) in directory {
        s += &format!("[[directory]]\nprefix = \"{prefix}\"\npeer = \"{peer}\"\n");
        if *switch {
            s += "switch = true\n";
        }
    }
    s
}

/// Writes `text` to `name` in the lab's directory and starts `natm sigd` on it in
/// namespace `i`; returns its socket once it exists.
fn start_sigd(lab: &mut Lab, i: usize, name: &str, text: &str) {
    let cfg = lab.path(&format!("{name}.toml"));
    std::fs::write(&cfg, text).expect("config");
    lab.spawn(i, &[NATM, "sigd", "--config", &cfg], name);
}

/// `natm ip` in namespace `i` with `args` after the common ones.
fn start_ip(lab: &mut Lab, i: usize, name: &str, args: &[&str]) {
    let mut a = vec![NATM, "ip", "--report", "1s"];
    a.extend_from_slice(args);
    lab.spawn(i, &a, name);
    lab.wait_for("natm0 up", 30, || {
        lab.run(i, &["ip", "link", "show", "natm0"])
            .status
            .success()
    });
    lab.wait_ip_up(name, 30);
}

/// The last `--report` line `natm ip` printed.
fn report(lab: &Lab, name: &str) -> String {
    lab.log(&format!("{name}.err"))
        .lines()
        .rev()
        .find(|l| l.starts_with("natm ip: Counters"))
        .unwrap_or_default()
        .to_owned()
}

/// A counter's value in a `--report` line (`name: N`).
fn counter(line: &str, name: &str) -> u64 {
    line.split(&format!("{name}: "))
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Prints "ready" once bound, then receives datagrams until `argv[3]` seconds pass
/// without one; prints the count and the bytes, and the sizes seen.
const UDP_SINK: &str = "import socket,sys\n\
fam=socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET\n\
s=socket.socket(fam, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2]))); s.settimeout(float(sys.argv[3]))\n\
print('ready', flush=True)\n\
n=0; b=0; sizes=set()\n\
try:\n  while True:\n    d,_=s.recvfrom(65536); n+=1; b+=len(d); sizes.add(len(d))\nexcept socket.timeout: pass\n\
print(n, b, sorted(sizes))\n";

/// A running UDP_SINK: started, and bound once `UdpSink::start` returns.
struct UdpSink {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl UdpSink {
    /// Starts UDP_SINK in namespace `at` on `to`:`port` and waits for its "ready" line
    /// (printed once it is bound), so nothing sent after this is lost to a sink that
    /// is still starting.
    fn start(lab: &Lab, at: usize, to: &str, port: &str) -> UdpSink {
        use std::io::BufRead;
        let mut child = python(lab, at, UDP_SINK, &[to, port, "3"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("sink");
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).expect("sink");
        assert_eq!(line.trim(), "ready", "the UDP sink did not start");
        UdpSink { child, out }
    }

    /// The sink's report, once it has heard nothing for its timeout.
    fn report(mut self) -> String {
        use std::io::Read;
        let mut rep = String::new();
        self.out.read_to_string(&mut rep).expect("sink");
        let _ = self.child.wait();
        rep.trim().to_owned()
    }
}

/// Sends datagrams of `size` to HOST PORT at `rate` bytes/s for `secs` (DF set when
/// argv[6] is 'df'); prints bytes sent.
const UDP_SOURCE: &str = "import socket,sys,time\n\
s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
if len(sys.argv) > 6 and sys.argv[6]=='df': s.setsockopt(socket.IPPROTO_IP, 10, 2)\n\
size=int(sys.argv[3]); rate=float(sys.argv[4]); secs=float(sys.argv[5]); n=0; t0=time.time()\n\
b=bytes(i % 251 for i in range(size))\n\
while time.time()-t0 < secs:\n  \
s.sendto(b,(sys.argv[1], int(sys.argv[2]))); n+=size\n  \
d=t0+n/rate-time.time()\n  \
if d>0: time.sleep(d)\n\
print(n)\n";

/// Sends `size`-byte datagrams at `rate` bytes/s for `secs` from namespace `from` to
/// `to`:`port` in namespace `at`: (bytes sent, the sink's report).
#[allow(clippy::too_many_arguments)]
fn udp_flow(
    lab: &Lab,
    from: usize,
    at: usize,
    to: &str,
    port: &str,
    size: usize,
    rate: f64,
    secs: f64,
) -> (usize, String) {
    let sink = UdpSink::start(lab, at, to, port);
    let o = python(
        lab,
        from,
        UDP_SOURCE,
        &[
            to,
            port,
            &size.to_string(),
            &rate.to_string(),
            &secs.to_string(),
        ],
    )
    .output()
    .expect("source");
    let sent = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("udp source: {}", String::from_utf8_lossy(&o.stderr)));
    (sent, sink.report())
}

/// Bytes received in a sink's report.
fn received(report: &str) -> usize {
    report
        .split_whitespace()
        .nth(1)
        .and_then(|b| b.parse().ok())
        .unwrap_or(0)
}

fn switch_config(lab: &Lab, name: &str, ports: &[String], routes: &[(&str, &str)]) -> String {
    let mut s = format!(
        "stat_json = \"{}\"\nstat_interval_ms = 100\n",
        lab.path(&format!("{name}.json"))
    );
    for p in ports {
        s += p;
    }
    for (prefix, port) in routes {
        s += &format!("[[route]]\nprefix = \"{prefix}\"\nport = \"{port}\"\n");
    }
    s
}

fn port(name: &str, bind: &str, peer: &str, role: &str) -> String {
    format!(
        "[[port]]\nname = \"{name}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = \"frame\"\n\
         line_rate = 1000000000\nbuffer = 16384\nscheduler = \"wrr\"\nsignalling = \"{role}\"\n"
    )
}

const ADDR: [&str; 2] = ["+4420001", "+4420002"];
const V4: [&str; 2] = ["10.77.0.1", "10.77.0.2"];
const V6: [&str; 2] = ["fd77::1", "fd77::2"];

///  A (+4420001) ── S1 ── trunk ── S2 ── B (+4420002), the switches in namespace 2.
#[test]
fn ip_through_two_chained_switches() {
    if let Some(why) = unavailable() {
        eprintln!("skipping ip_through_two_chained_switches: {why}");
        return;
    }
    let mut lab = Lab::new("s", 3);
    lab.veth(0, "10.231.1.1", 2, "10.231.1.254");
    lab.veth(1, "10.231.2.1", 2, "10.231.2.254");
    let s1 = switch_config(
        &lab,
        "s1",
        &[
            port("h", "10.231.1.254:2906", "10.231.1.1:2905", "host"),
            port("trunk", "127.0.0.1:2910", "127.0.0.1:2911", "switch"),
        ],
        &[(ADDR[0], "h"), ("*", "trunk")],
    );
    let s2 = switch_config(
        &lab,
        "s2",
        &[
            port("h", "10.231.2.254:2906", "10.231.2.1:2905", "host"),
            port("trunk", "127.0.0.1:2911", "127.0.0.1:2910", "switch"),
        ],
        &[(ADDR[1], "h"), ("*", "trunk")],
    );
    for (name, text) in [("s1", s1), ("s2", s2)] {
        let cfg = lab.path(&format!("{name}.toml"));
        std::fs::write(&cfg, text).expect("config");
        lab.spawn(2, &[NATM, "switch", "--config", &cfg], name);
    }
    let socks = [lab.path("sigd0.sock"), lab.path("sigd1.sock")];
    for i in 0..2 {
        let text = sigd_config(
            ADDR[i],
            &socks[i],
            &format!("10.231.{}.1:2905", i + 1),
            &[("*", &format!("10.231.{}.254:2906", i + 1), true)],
        );
        start_sigd(&mut lab, i, &format!("sigd{i}"), &text);
    }
    lab.wait_for("sigds linked to their switches, trunk up", 60, || {
        let up = |name: &str| {
            lab.switch_stat(name)["signalling"]
                .as_array()
                .is_some_and(|l| l.len() == 2 && l.iter().all(|r| r["up"] == true))
        };
        up("s1") && up("s2")
    });
    for i in 0..2 {
        let (v4, v6) = (format!("{}/24", V4[i]), format!("{}/64", V6[i]));
        let mut args = vec![
            "--address",
            ADDR[i],
            "--ipv4",
            &v4,
            "--ipv6",
            &v6,
            "--sigd",
            &socks[i],
            "--idle",
            "4s",
            "--policy",
            "udp dport 5004 -> cbr:pcr=8Mbps",
        ];
        if i == 0 {
            args.push("--arp-server");
        } else {
            args.extend(["--arp", ADDR[0]]);
        }
        start_ip(&mut lab, i, &format!("ip{i}"), &args);
    }

    // Ping both ways, IPv4 and IPv6: ATMARP through both switches, then the VC.
    lab.ping_ok(0, &[V4[1]]);
    lab.ping_ok(1, &[V4[0]]);
    lab.ping_ok(0, &[V6[1]]);
    lab.ping_ok(1, &[V6[0]]);
    // The on-demand VC is a call at both sigds and through both switches.
    for i in 0..2 {
        let calls = ip_calls(&lab.sigd_stat(i, &socks[i]));
        assert!(
            calls.iter().any(|q| q.starts_with("best-effort")),
            "sigd {i} shows the VC: {calls:?}"
        );
    }
    for s in ["s1", "s2"] {
        let calls = switch_ip_calls(&lab.switch_stat(s));
        assert!(
            calls.iter().any(|q| q.starts_with("best-effort")),
            "{s} carries the VC: {calls:?}\n{}",
            lab.switch_stat(s)
        );
    }

    // TCP, byte-exact, 2 MB.
    tcp_exact(&lab, 0, 1, V4[1], "7001", 2_000_000);

    // The CBR class: its VC is admitted by both switches with a reservation; a
    // flow within its 8 Mbit/s (4 Mbit/s) arrives whole.
    let (sent, rep) = udp_flow(&lab, 0, 1, V4[1], "5004", 1000, 500_000.0, 2.0);
    assert_eq!(
        received(&rep),
        sent,
        "within its rate nothing is lost: {rep}"
    );
    for s in ["s1", "s2"] {
        let st = lab.switch_stat(s);
        let cbr = st["calls"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["qos"].as_str().is_some_and(|q| q.starts_with("cbr")))
            .unwrap_or_else(|| panic!("{s} admitted the CBR VC: {st}"))
            .clone();
        assert!(
            cbr["reserved_cells"][0].as_u64() > Some(0),
            "{s} reserved the CBR VC's rate: {cbr}"
        );
    }
    // A flow at twice its rate: the VC carries its rate, not the flow's.
    let (sent, rep) = udp_flow(&lab, 0, 1, V4[1], "5004", 1000, 2_000_000.0, 3.0);
    let got = received(&rep);
    let policing: Vec<u64> = ["s1", "s2"]
        .iter()
        .map(|s| {
            lab.switch_stat(s)["vcs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v["counters"]["dropped"]["policing"].as_u64().unwrap_or(0))
                .sum()
        })
        .collect();
    eprintln!(
        "CBR 8 Mbit/s VC, flow at 16 Mbit/s: {sent} bytes sent, {got} received; \
         cells dropped by the switches' policers: {policing:?}; sender: {}",
        report(&lab, "ip0")
    );
    assert!(
        got > 0 && got * 4 < sent * 3,
        "above its rate the flow loses: {got} of {sent}"
    );

    // Idle release: with nothing sent for 4 s, the VCs go from both sigds and from
    // both switches' calls (the ATMARP VC stays).
    lab.wait_for("idle VCs released everywhere", 60, || {
        (0..2).all(|i| ip_calls(&lab.sigd_stat(i, &socks[i])).is_empty())
            && ["s1", "s2"].iter().all(|s| {
                let st = lab.switch_stat(s);
                !st.is_null() && switch_ip_calls(&st).is_empty()
            })
    });
    // And the next packet sets one up again, through both switches.
    lab.ping_ok(1, &[V4[0]]);
    assert!(!switch_ip_calls(&lab.switch_stat("s1")).is_empty());
}

const V4M: [&str; 3] = ["10.78.0.1", "10.78.0.2", "10.78.0.3"];
const V6M: [&str; 3] = ["fd78::1", "fd78::2", "fd78::3"];
const ADDRM: [&str; 3] = ["+4430001", "+4430002", "+4430003"];

/// A and B with --mtu 65000, C with the default (sends 8464, takes 9180); the sigds
/// direct on a bridge.
#[test]
fn a_larger_mtu_where_both_ends_agree_and_9180_where_they_do_not() {
    if let Some(why) = unavailable() {
        eprintln!("skipping a_larger_mtu_where_both_ends_agree_and_9180_where_they_do_not: {why}");
        return;
    }
    // Namespace 3 holds a bridge joining the three hosts on 10.232.0.0/24.
    let mut lab = Lab::new("m", 4);
    lab.bridge(3, &["10.232.0.1", "10.232.0.2", "10.232.0.3"]);
    let socks: Vec<String> = (0..3).map(|i| lab.path(&format!("sigd{i}.sock"))).collect();
    for i in 0..3 {
        let peers: Vec<(String, String)> = (0..3)
            .filter(|&j| j != i)
            .map(|j| (ADDRM[j].to_owned(), format!("10.232.0.{}:2905", j + 1)))
            .collect();
        let dir: Vec<(&str, &str, bool)> = peers
            .iter()
            .map(|(p, a)| (p.as_str(), a.as_str(), false))
            .collect();
        let text = sigd_config(
            ADDRM[i],
            &socks[i],
            &format!("10.232.0.{}:2905", i + 1),
            &dir,
        );
        start_sigd(&mut lab, i, &format!("sigd{i}"), &text);
    }
    for i in 0..3 {
        let s = socks[i].clone();
        lab.wait_for("sigd up", 30, || Path::new(&s).exists());
    }
    for i in 0..3 {
        let (v4, v6) = (format!("{}/24", V4M[i]), format!("{}/64", V6M[i]));
        let mut args = vec![
            "--address",
            ADDRM[i],
            "--ipv4",
            &v4,
            "--ipv6",
            &v6,
            "--sigd",
            &socks[i],
        ];
        if i != 2 {
            args.extend(["--mtu", "65000"]);
        }
        if i == 0 {
            args.push("--arp-server");
        } else {
            args.extend(["--arp", ADDRM[0]]);
        }
        start_ip(&mut lab, i, &format!("ip{i}"), &args);
    }

    // A and B agree on 65,000: a 60,000-byte ping with DF goes both ways, and a
    // 60,000-byte UDP datagram with DF arrives as one.
    lab.ping_ok(0, &["-M", "do", "-s", "60000", V4M[1]]);
    lab.ping_ok(1, &["-M", "do", "-s", "60000", V4M[0]]);
    lab.ping_ok(0, &["-M", "do", "-s", "60000", V6M[1]]);
    let sink = UdpSink::start(&lab, 1, V4M[1], "7100");
    let o = python(
        &lab,
        0,
        UDP_SOURCE,
        &[V4M[1], "7100", "60000", "600000", "1", "df"],
    )
    .output()
    .expect("source");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rep = sink.report();
    assert!(
        rep.ends_with("[60000]") && !rep.starts_with("0 "),
        "60,000-byte datagrams arrive whole: {rep}"
    );
    let calls = ip_calls(&lab.sigd_stat(0, &socks[0]));
    assert!(
        calls.iter().any(|q| q.contains("msg=65008")),
        "the A-B VC carries 65,000 + 8: {calls:?}"
    );

    // C takes 9,180 only: A's call offering 65,000 is refused (cause 73) and offered
    // again at 9,180; a DF ping too big for it gets fragmentation-needed, mtu 9180.
    lab.ping_ok(0, &["-s", "1000", V4M[2]]);
    let calls = ip_calls(&lab.sigd_stat(2, &socks[2]));
    assert!(
        calls.iter().any(|q| q.contains("msg=9188"))
            && !calls.iter().any(|q| q.contains("msg=65008")),
        "the A-C VC fell back to 9,180: {calls:?}"
    );
    let o = lab.ping(0, &["-M", "do", "-s", "20000", V4M[2]]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "too big for 9,180: {text}");
    assert!(
        text.contains("mtu = 9180") || text.contains("mtu=9180"),
        "fragmentation needed with MTU 9180: {text}"
    );
    // The kernel took the path MTU: its route to C says so, and DF pings that fit go,
    // larger than C's own interface MTU (8464, what C sends): C takes 9180.
    let route =
        String::from_utf8_lossy(&lab.run(0, &["ip", "route", "get", V4M[2]]).stdout).into_owned();
    assert!(route.contains("mtu 9180"), "{route}");
    let link =
        String::from_utf8_lossy(&lab.run(2, &["ip", "link", "show", "natm0"]).stdout).into_owned();
    assert!(
        link.contains("mtu 8464"),
        "C's default interface MTU: {link}"
    );
    lab.ping_ok(0, &["-M", "do", "-s", "9000", V4M[2]]);
    // IPv6: packet too big, then the kernel fragments at the source to fit.
    let _ = lab.ping(0, &["-c", "1", "-s", "20000", V6M[2]]);
    let route = String::from_utf8_lossy(&lab.run(0, &["ip", "-6", "route", "get", V6M[2]]).stdout)
        .into_owned();
    assert!(
        route.contains("mtu 9180"),
        "IPv6 packet too big taken: {route}"
    );
    lab.ping_ok(0, &["-s", "20000", V6M[2]]);
    eprintln!("A's last report: {}", report(&lab, "ip0"));
}

/// Two hosts (namespaces 0 and 1, joined by a veth on `net`.1 and `net`.2) whose
/// `natm ip`s, at `v4`/24 with `extra` arguments each, share PVC 0.100 and no sigd.
fn pvc_pair(case: &str, net: &str, v4: [&str; 2], extra: [&[&str]; 2]) -> Lab {
    let mut lab = Lab::new(case, 2);
    lab.veth(0, &format!("{net}.1"), 1, &format!("{net}.2"));
    for i in 0..2 {
        let addr = format!("{}/24", v4[i]);
        let bind = format!("{net}.{}:7100", i + 1);
        let via = format!("{net}.{}:7100", 2 - i);
        let mut args = vec![
            "--ipv4",
            &addr,
            "--pvc",
            "0.100",
            "--pvc-bind",
            &bind,
            "--pvc-via",
            &via,
        ];
        args.extend_from_slice(extra[i]);
        start_ip(&mut lab, i, &format!("ip{i}"), &args);
    }
    lab
}

/// Two hosts on a PVC (bare AAL5 over the veth) with no sigd and no ATMARP server.
#[test]
fn pvc_peers_find_each_other_by_inatmarp() {
    if let Some(why) = unavailable() {
        eprintln!("skipping pvc_peers_find_each_other_by_inatmarp: {why}");
        return;
    }
    let v4 = ["10.79.0.1", "10.79.0.2"];
    let lab = pvc_pair("p", "10.233.0", v4, [&[], &[]]);
    lab.ping_ok(0, &[v4[1]]);
    lab.ping_ok(1, &[v4[0]]);
    // Both reports show the exchange and the address learnt on the PVC (from the
    // peer's reply or from its request, whichever came first), and no call.
    lab.wait_for("reports show InATMARP", 30, || {
        let r: Vec<String> = (0..2).map(|i| report(&lab, &format!("ip{i}"))).collect();
        let sum = |name: &str| r.iter().map(|l| counter(l, name)).sum::<u64>();
        (0..2).all(|i| {
            counter(&r[i], "inarp_requests") > 0
                && r[i].contains(&format!("{} at 0.0.100", v4[1 - i]))
                && counter(&r[i], "setups") == 0
        }) && sum("inarp_replies") > 0
            && sum("inarp_answered") > 0
    });
}

/// `tun offloads on|off: R reads for P packets` in a `--report` line.
fn tun_reads(line: &str) -> Option<(bool, u64, u64)> {
    let rest = line.split("tun offloads ").nth(1)?;
    let on = rest.starts_with("on");
    let mut words = rest.split([' ', ':']).filter(|w| !w.is_empty());
    let reads = words.nth(1)?.parse().ok()?;
    let packets = words.nth(2)?.parse().ok()?;
    Some((on, reads, packets))
}

/// TCP, byte-exact, `bytes` (not all one value) from host `from` to host `to` (at
/// `addr`) on `port`.
fn tcp_exact(lab: &Lab, from: usize, to: usize, addr: &str, port: &str, bytes: u32) {
    let data: Vec<u8> = (0..bytes)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let src = lab.path(&format!("data{port}.bin"));
    std::fs::write(&src, &data).expect("data");
    let got = lab.path(&format!("tcp{port}.out"));
    let mut sink = python(lab, to, TCP_SINK, &[addr, port, &got])
        .spawn()
        .expect("sink");
    let o = python(lab, from, TCP_SOURCE, &[addr, port, &src])
        .output()
        .expect("source");
    assert!(
        o.status.success(),
        "tcp source: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        lab.logs()
    );
    assert!(sink.wait().expect("sink").success());
    assert!(
        std::fs::read(&got).expect("received") == data,
        "TCP data from {from} to {to} differs"
    );
}

/// Two hosts on a PVC, A with the TUN's offloads (the default) and B without
/// (`--no-offload`): TCP byte-exact both ways, A's reads carrying the kernel's TSO
/// segments cut into packets of the MTU, B's one packet each.
#[test]
fn tcp_byte_exact_with_tun_offloads_at_one_end_only() {
    if let Some(why) = unavailable() {
        eprintln!("skipping tcp_byte_exact_with_tun_offloads_at_one_end_only: {why}");
        return;
    }
    let v4 = ["10.80.0.1", "10.80.0.2"];
    let lab = pvc_pair("o", "10.234.0", v4, [&[], &["--no-offload"]]);
    lab.ping_ok(0, &[v4[1]]);
    tcp_exact(&lab, 0, 1, v4[1], "7001", 8_000_000);
    tcp_exact(&lab, 1, 0, v4[0], "7002", 8_000_000);
    // 8 MB at an MTU of 9,180 is at least 870 packets each way.
    lab.wait_for("reports show the transfers", 30, || {
        let a = tun_reads(&report(&lab, "ip0"));
        let b = tun_reads(&report(&lab, "ip1"));
        matches!((a, b), (Some((true, _, pa)), Some((false, _, pb))) if pa > 870 && pb > 870)
    });
    let (a, b) = (report(&lab, "ip0"), report(&lab, "ip1"));
    let (_, reads, packets) = tun_reads(&a).expect("A's report");
    assert!(
        reads < packets,
        "A's kernel handed over TSO segments, cut into packets: {a}"
    );
    let (_, reads, packets) = tun_reads(&b).expect("B's report");
    assert_eq!(reads, packets, "B reads one packet at a time: {b}");
    eprintln!("A: {a}\nB: {b}");
}
