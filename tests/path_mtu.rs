//! TPDUs that fit the path (issue 30): a reliable call between two network
//! namespaces moves 100 MB byte-exact over a veth of MTU 1500, then of MTU 9000,
//! while the kernels' own counters (`/proc/net/snmp`: `FragCreates` at the sender,
//! `ReasmReqds` at the receiver) show that not one IP fragment was made; then the
//! veth's MTU falls from 9000 to 1500 in the middle of a transfer, which still ends
//! byte-exact with no datagram lost to the kernel's refusal (EMSGSIZE). And a path
//! that drops large datagrams without ICMP is found by the sending VC's probes (RFC
//! 8899). Needs root and `ip` (and `nft` and `ethtool` for the black hole); skips
//! with a message otherwise.

mod ip_support;

use std::process::Command;
use std::time::{Duration, Instant};

use ip_support::{Lab, NATM};
use md5::{Digest, Md5};
use serde_json::Value;

const ADDR: [&str; 2] = ["+4420011", "+4420012"];

fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root".into());
    }
    let ip = Command::new("sh")
        .args(["-c", "command -v ip"])
        .output()
        .is_ok_and(|o| o.status.success());
    (!ip).then(|| "ip (iproute2) missing".into())
}

/// Two namespaces joined by a veth, a sigd in each (`name` tells one test's apart).
fn lab(name: &str) -> Lab {
    let mut lab = Lab::new(name, 2);
    lab.veth(0, "10.233.0.1", 1, "10.233.0.2");
    for i in 0..2 {
        let cfg = lab.dir.join(format!("sigd{i}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "addresses = [\"{}\"]\nsocket = \"{}\"\nsignalling = \"10.233.0.{}:2905\"\n\
                 [link]\ncapacity = \"10Gbps\"\n\
                 [[directory]]\nprefix = \"{}\"\npeer = \"10.233.0.{}:2905\"\n",
                ADDR[i],
                lab.sock(i).display(),
                i + 1,
                ADDR[1 - i],
                2 - i
            ),
        )
        .expect("config");
        lab.spawn(
            i,
            &[NATM, "sigd", "--config", cfg.to_str().expect("utf-8")],
            &format!("sigd{i}"),
        );
    }
    for i in 0..2 {
        let sock = lab.sock(i);
        lab.wait_for("sigd up", 20, || sock.exists());
    }
    lab
}

/// Both ends of the veth at `mtu`.
fn set_mtu(lab: &Lab, mtu: u32) {
    let m = mtu.to_string();
    for (i, j) in [(0, 1), (1, 0)] {
        let dev = format!("v{}{i}{j}", lab.tag);
        let o = lab.run(i, &["ip", "link", "set", "dev", &dev, "mtu", &m]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// `Ip:` counters of namespace `i`'s kernel.
fn ip_counters(lab: &Lab, i: usize) -> std::collections::HashMap<String, u64> {
    let o = lab.run(i, &["cat", "/proc/net/snmp"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let mut lines = text.lines().filter(|l| l.starts_with("Ip:"));
    let (names, values) = (
        lines.next().expect("Ip names"),
        lines.next().expect("Ip values"),
    );
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .skip(1)
        .map(|(n, v)| (n.to_owned(), v.parse().unwrap_or(0)))
        .collect()
}

fn md5_of(path: &str) -> Vec<u8> {
    Md5::digest(std::fs::read(path).expect("file")).to_vec()
}

/// `n` bytes that do not repeat for a long way (xorshift).
fn data(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(n);
    v
}

/// Listeners sigd 1 holds on `sap`.
fn listeners(lab: &Lab, sap: &str) -> usize {
    lab.stat(1)["listeners"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|l| l["sap"] == sap).count())
}

/// The size of the listener's file `out` every 5 ms, from a thread of its own, until
/// [`Growth::stop`].
struct Growth {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<Vec<(Instant, u64)>>,
}

impl Growth {
    fn watch(out: &str) -> Growth {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, out) = (stop.clone(), out.to_owned());
        let sampler = std::thread::spawn(move || {
            let mut growth = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let n = std::fs::metadata(&out).map_or(0, |m| m.len());
                growth.push((Instant::now(), n));
                std::thread::sleep(Duration::from_millis(5));
            }
            growth
        });
        Growth { stop, sampler }
    }

    fn stop(self) -> Vec<(Instant, u64)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.sampler.join().expect("the sampler")
    }
}

/// One call of `src` from namespace 0 (`natm call … call_args`) to a listener in 1
/// writing `out`, each end's VCs on `ports` (`--ports`: `vc` or `host`); `during`
/// runs once the listener has received `mid` bytes. Returns
/// both summaries, and the longest time the listener's file did not grow after
/// `during` ran with the number of 5 ms samples it was read from.
fn transfer(
    lab: &mut Lab,
    (sap, ports): (&str, &str),
    src: &str,
    out: &str,
    call_args: &[&str],
    mid: u64,
    during: impl FnOnce(&Lab),
) -> (Value, Value, (Duration, usize)) {
    let sock1 = lab.sock(1).to_str().expect("utf-8").to_owned();
    let sock0 = lab.sock(0).to_str().expect("utf-8").to_owned();
    let listen_log = format!("listen-{sap}");
    lab.spawn(
        1,
        &[
            NATM, "listen", sap, "--out", out, "--json", "--quiet", "--sigd", &sock1, "--ports",
            ports,
        ],
        &listen_log,
    );
    lab.wait_for("the listener bound", 20, || listeners(lab, sap) == 1);
    let target = format!("{}:{sap}", ADDR[1]);
    let mut args = vec![
        NATM,
        "call",
        &target,
        "--file",
        src,
        "--discard",
        "--json",
        "--quiet",
        "--sigd",
        &sock0,
        "--ports",
        ports,
    ];
    args.extend_from_slice(call_args);
    let mut call = lab.cmd(0, &args);
    let call = call
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("natm call");
    let until = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(out).map_or(0, |m| m.len()) < mid {
        assert!(Instant::now() < until, "no data arrived\n{}", lab.logs());
        std::thread::sleep(Duration::from_millis(10));
    }
    let growth = Growth::watch(out);
    let from = Instant::now();
    during(lab);
    let o = call.wait_with_output().expect("natm call");
    let growth = growth.stop();
    let stall = (longest_stall(&growth, from), growth.len());
    assert!(
        o.status.success(),
        "natm call: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        lab.logs()
    );
    let sent = json(&o.stdout);
    lab.wait_for("the listener's summary", 30, || {
        lab.log(&listen_log).lines().any(|l| l.starts_with('{'))
    });
    (sent, json(lab.log(&listen_log).as_bytes()), stall)
}

fn json(b: &[u8]) -> Value {
    let text = String::from_utf8_lossy(b);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {text}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[test]
fn reliable_calls_fit_the_path_mtu_and_follow_it_down() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut lab = lab("mtu");
    let src = lab.path("src.bin");
    std::fs::write(&src, data(100 << 20)).expect("source file");
    let want = md5_of(&src);

    for (mtu, sap) in [(1500u32, "m1500"), (9000, "m9000")] {
        set_mtu(&lab, mtu);
        let (tx0, rx0) = (ip_counters(&lab, 0), ip_counters(&lab, 1));
        let out = lab.path(&format!("{sap}.out"));
        let (sent, got, _) = transfer(
            &mut lab,
            (sap, "vc"),
            &src,
            &out,
            &["--qos", "reliable"],
            0,
            |_| {},
        );
        let (tx1, rx1) = (ip_counters(&lab, 0), ip_counters(&lab, 1));
        assert_eq!(md5_of(&out), want, "MTU {mtu}: not byte-exact");
        assert_eq!(got["bytes"], 100u64 << 20, "{got}");
        assert_eq!(sent["path_mtu"], mtu, "{sent}");
        assert_eq!(sent["fragmented"], 0, "{sent}");
        // The sending VC's probes confirmed what the kernel says (RFC 8899): the
        // whole Ethernet payload, or more than it on the jumbo link.
        let plpmtu = sent["plpmtud"]["plpmtu"].as_u64().expect("plpmtu");
        match mtu {
            1500 => assert_eq!(plpmtu, 1_472, "{sent}"),
            _ => assert!(plpmtu > 1_472, "{sent}"),
        }
        assert_eq!(sent["send_errors"], 0, "{sent}");
        // The kernels made and reassembled no fragment, while datagrams did flow.
        assert_eq!(
            tx1["FragCreates"], tx0["FragCreates"],
            "MTU {mtu}: fragments sent"
        );
        assert_eq!(
            rx1["ReasmReqds"], rx0["ReasmReqds"],
            "MTU {mtu}: fragments received"
        );
        // Every TPDU fit one link packet: none carried more than the MTU less the
        // IP, UDP, VC and TPDU headers.
        let tpdus = got["tpdus_received"].as_u64().expect("tpdus_received");
        assert!(
            tpdus * u64::from(mtu - 64) >= 100 << 20,
            "MTU {mtu}: {tpdus} TPDUs for 100 MB\n{got}"
        );
        let _ = std::fs::remove_file(&out);
    }

    // The path shrinks under a transfer (9000 → 1500 with 10 MB of 100 delivered,
    // paced so that it is still running): TPDUs queued unsent are cut again, those
    // already cut larger leave as cells (the kernel refused them, EMSGSIZE), and
    // not one IP fragment is made — on a VC's own socket, and on a host port's
    // shared one, which has no peer of its own (its sub reads its peer's path again).
    for (ports, sap) in [("vc", "mdrop"), ("host", "mdroph")] {
        set_mtu(&lab, 9000);
        let tx0 = ip_counters(&lab, 0);
        let out = lab.path(&format!("{sap}.out"));
        let (sent, got, stall) = transfer(
            &mut lab,
            (sap, ports),
            &src,
            &out,
            &["--qos", "reliable:tpdu=8192", "--rate", "400Mbps"],
            10 << 20,
            |lab| set_mtu(lab, 1500),
        );
        let tx1 = ip_counters(&lab, 0);
        assert_eq!(md5_of(&out), want, "MTU drop ({ports}): not byte-exact");
        assert_eq!(got["bytes"], 100u64 << 20, "{got}");
        assert_eq!(sent["path_mtu"], 1500, "{sent}");
        assert_eq!(sent["send_errors"], 0, "{sent}");
        assert_eq!(sent["fragmented"], 0, "{ports}: {sent}");
        assert_eq!(
            tx1["FragCreates"], tx0["FragCreates"],
            "MTU drop ({ports}): fragments sent: {sent}"
        );
        eprintln!(
            "MTU 9000 → 1500 under a call (ports {ports}): {} TPDUs sent as cells, none \
             fragmented; longest stall of delivery after the change {:.0} ms ({} samples \
             5 ms apart; the VC's RTO floor 20 ms)",
            sent["sent_as_cells"],
            stall.0.as_secs_f64() * 1e3,
            stall.1
        );
        let _ = std::fs::remove_file(&out);
    }
}

/// Whether namespace 0 has nftables (`nft`) and `ethtool`.
fn has_nft(lab: &Lab) -> bool {
    lab.run(0, &["sh", "-c", "command -v nft && command -v ethtool"])
        .status
        .success()
}

/// Namespace 0's veth segments its GSO runs itself, so that a filter sees link
/// packets, as a real link's black hole does (not one super-packet per run).
fn segment_on_the_link(lab: &Lab) {
    let dev = format!("v{}01", lab.tag);
    let o = lab.run(
        0,
        &[
            "ethtool",
            "-K",
            &dev,
            "gso",
            "off",
            "tso",
            "off",
            "tx-udp-segmentation",
            "off",
        ],
    );
    assert!(
        o.status.success(),
        "ethtool: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Namespace 1 drops every IP packet over 1,320 octets and sends no ICMP: a tunnel
/// or a filtering firewall, a black hole to the kernel's path MTU discovery.
fn drop_over_1320(lab: &Lab) {
    for rule in [
        "add table inet natm_bh",
        "add chain inet natm_bh pre { type filter hook prerouting priority -300 ; }",
        "add rule inet natm_bh pre ip length > 1320 drop",
    ] {
        let args: Vec<&str> = std::iter::once("nft").chain(rule.split(' ')).collect();
        let o = lab.run(1, &args);
        assert!(
            o.status.success(),
            "nft {rule}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// A reliable call at 100 Mbit/s from namespace 0 to a listener in 1, fed from a
/// pipe the test keeps full until `done` says so. `done` sees each path MTU status
/// event (`natm call --events`), with the time the caller printed it, between the
/// test's writes of 1 MiB.
struct PipedCall {
    written: usize,
    sent: Value,
    got: Value,
    events: Vec<String>,
    took: Duration,
    /// The listener's file size every 5 ms while the call ran.
    growth: Vec<(Instant, u64)>,
}

/// The 1 MiB pattern a piped call writes, rotated by each MiB's index so that a
/// misplaced MiB shows.
fn piped_block() -> Vec<u8> {
    data(1 << 20)
}

fn piped_call(
    lab: &mut Lab,
    sap: &str,
    ports: &str,
    mut done: impl FnMut(&Lab, Instant, &str) -> bool,
) -> PipedCall {
    let out = lab.path(&format!("{sap}.out"));
    let listen_log = format!("listen-{sap}");
    let sock1 = lab.sock(1).to_str().expect("utf-8").to_owned();
    let sock0 = lab.sock(0).to_str().expect("utf-8").to_owned();
    lab.spawn(
        1,
        &[
            NATM, "listen", sap, "--out", &out, "--json", "--quiet", "--sigd", &sock1, "--ports",
            ports,
        ],
        &listen_log,
    );
    lab.wait_for("the listener bound", 20, || listeners(lab, sap) == 1);
    let target = format!("{}:{sap}", ADDR[1]);
    let t0 = Instant::now();
    let mut call = lab
        .cmd(
            0,
            &[
                NATM,
                "call",
                &target,
                "--qos",
                "reliable",
                "--rate",
                "100Mbps",
                "--events",
                "--discard",
                "--json",
                "--quiet",
                "--sigd",
                &sock0,
                "--ports",
                ports,
            ],
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("natm call");
    let (event_tx, event) = std::sync::mpsc::channel();
    let stderr = call.stderr.take().expect("stderr");
    let events = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.expect("stderr line");
            if line.contains("path MTU") {
                let _ = event_tx.send((Instant::now(), line.clone()));
            }
            lines.push(line);
        }
        lines
    });
    let sampler = Growth::watch(&out);
    let block = piped_block();
    let mut stdin = call.stdin.take().expect("stdin");
    let mut written = 0usize;
    let until = Instant::now() + Duration::from_secs(120);
    'feed: loop {
        use std::io::Write;
        let i = (written >> 20) % block.len();
        let (a, b) = block.split_at(i);
        // A caller that died is reported below, with its events.
        if stdin
            .write_all(b)
            .and_then(|()| stdin.write_all(a))
            .is_err()
        {
            break;
        }
        written += block.len();
        while let Ok((at, line)) = event.try_recv() {
            if done(lab, at, &line) {
                break 'feed;
            }
        }
        if Instant::now() > until {
            break;
        }
    }
    drop(stdin);
    let o = call.wait_with_output().expect("natm call");
    let took = t0.elapsed();
    let growth = sampler.stop();
    let events = events.join().expect("the event reader");
    assert!(
        o.status.success(),
        "natm call: {}\n{}",
        events.join("\n"),
        lab.logs()
    );
    let sent = json(&o.stdout);
    lab.wait_for("the listener's summary", 30, || {
        lab.log(&listen_log).lines().any(|l| l.starts_with('{'))
    });
    let got = json(lab.log(&listen_log).as_bytes());
    let recv = std::fs::read(&out).expect("the listener's file");
    assert_eq!(recv.len(), written, "{sap}: not all delivered\n{got}");
    let exact = recv.chunks(1 << 20).enumerate().all(|(n, mib)| {
        let (a, b) = block.split_at(n % block.len());
        mib[..b.len()] == *b && mib[b.len()..] == *a
    });
    assert!(exact, "{sap}: not byte-exact");
    assert_eq!(got["bytes"], written as u64, "{got}");
    PipedCall {
        written,
        sent,
        got,
        events,
        took,
        growth,
    }
}

/// The longest time after `from` that the listener's file did not grow (a figure,
/// not a check: the samples are 5 ms apart on a shared machine).
fn longest_stall(growth: &[(Instant, u64)], from: Instant) -> Duration {
    let mut longest = Duration::ZERO;
    let mut since: Option<(Instant, u64)> = None;
    for &(at, n) in growth.iter().filter(|(at, _)| *at >= from) {
        match since {
            Some((t, m)) if n == m => longest = longest.max(at - t),
            _ => since = Some((at, n)),
        }
    }
    longest
}

#[test]
fn a_path_that_drops_large_datagrams_without_a_word_is_found_by_probing() {
    // RFC 8899 (issue 30): the veth says 1500 and the kernel believes it, but
    // namespace 1 drops every IP packet over 1,320 octets and sends no ICMP — a
    // tunnel or a filtering firewall. TPDUs cut to the kernel's path MTU would never
    // arrive; the sending VC's probes find what the path carries and the call moves
    // its data byte-exact, none of it fragmented.
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut lab = lab("mtubh");
    if !has_nft(&lab) {
        eprintln!("skipped: nft (nftables) or ethtool missing");
        return;
    }
    set_mtu(&lab, 1500);
    segment_on_the_link(&lab);
    drop_over_1320(&lab);
    // The call is fed until its status events say the search is complete: under
    // load the VC's own data losses excuse lost probes and the search backs off
    // (RFC 8899 §4.4), so no fixed amount of data is sure to outlast it.
    let c = piped_call(&mut lab, "mbh", "vc", |_, _, e| {
        e.contains("search complete")
    });
    let (sent, got, written) = (&c.sent, &c.got, c.written);
    assert!(
        c.events
            .iter()
            .any(|l| l.contains("path MTU") && l.contains("search complete")),
        "no completed search in 120 s: {sent}\n{}",
        c.events.join("\n")
    );
    assert_eq!(
        sent["path_mtu"], 1500,
        "the kernel never learnt better: {sent}"
    );
    assert_eq!(sent["fragmented"], 0, "{sent}");
    // 1,320 octets of IP packet are 1,292 of UDP payload: the search ends within
    // its step below that, after losing the larger sizes' probes.
    let p = &sent["plpmtud"];
    let plpmtu = p["plpmtu"].as_u64().expect("plpmtu");
    assert!((1_292 - 32..=1_292).contains(&plpmtu), "{sent}");
    assert!(
        p["probes_lost"].as_u64().expect("probes_lost") >= 3,
        "{sent}"
    );
    // Every TPDU fit what the path carries.
    let tpdus = got["tpdus_received"].as_u64().expect("tpdus_received");
    assert!(
        tpdus * 1_200 >= written as u64,
        "{tpdus} TPDUs for {written} bytes\n{got}"
    );
    eprintln!(
        "black hole at 1,320 octets: PLPMTU {plpmtu} after {} probes ({} lost, {} of \
         them among data losses); {} MB at 100 Mbit/s in {:.2} s, call setup included",
        p["probes_sent"],
        p["probes_lost"],
        p["probes_lost_congested"],
        written >> 20,
        c.took.as_secs_f64()
    );
}

#[test]
fn a_path_that_shrinks_without_a_word_under_a_running_call_is_crossed_as_cells() {
    shrink_under_a_call("vc");
}

/// The same with every VC of each host on one shared UDP port (`--ports host`).
#[test]
fn the_same_on_one_port_per_host() {
    shrink_under_a_call("host");
}

fn shrink_under_a_call(ports: &str) {
    // RFC 8899 §4.3 (issue 30): a call runs at the 1,472 octets its probes confirmed
    // on a veth of MTU 1500; then namespace 1 starts dropping every IP packet over
    // 1,320 octets, without ICMP. The TPDUs in flight keep their size and sequence
    // number when SMART resends them: the VC declares a black hole when the first
    // timeout's head, resent as cells that fit base, crosses and the ACK it causes
    // shows the rest lost (or after two timeouts in a row), its new TPDUs are cut to
    // the base size and searched up
    // again, and the ones cut before cross the path as AAL5 cell trains that fit.
    // Everything arrives byte-exact, and not one IP fragment is made.
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut lab = lab(&format!("mtus{}", &ports[..1]));
    if !has_nft(&lab) {
        eprintln!("skipped: nft (nftables) or ethtool missing");
        return;
    }
    set_mtu(&lab, 1500);
    segment_on_the_link(&lab);
    let tx0 = ip_counters(&lab, 0);
    // The first completed search (at 1,472) starts the black hole; the search
    // completed after it ends the call.
    let mut holed: Option<Instant> = None;
    let mut declared: Option<Instant> = None;
    let c = piped_call(&mut lab, "msh", ports, |lab, at, e| match holed {
        None if e.contains("1472 octets") && e.contains("search complete") => {
            drop_over_1320(lab);
            holed = Some(Instant::now());
            false
        }
        Some(_) if declared.is_none() && e.contains("1200 octets") => {
            declared = Some(at);
            false
        }
        Some(_) => declared.is_some() && e.contains("search complete"),
        None => false,
    });
    let tx1 = ip_counters(&lab, 0);
    let sent = &c.sent;
    let (holed, declared) = (
        holed.unwrap_or_else(|| panic!("no search completed at 1,472: {}", c.events.join("\n"))),
        declared
            .unwrap_or_else(|| panic!("no black hole declared: {sent}\n{}", c.events.join("\n"))),
    );
    assert!(
        c.events
            .iter()
            .rfind(|l| l.contains("path MTU"))
            .is_some_and(|l| l.contains("search complete")),
        "the search after the black hole did not complete in 120 s: {sent}\n{}",
        c.events.join("\n")
    );
    let p = &sent["plpmtud"];
    assert!(
        p["black_holes"].as_u64().expect("black_holes") >= 1,
        "{sent}"
    );
    let plpmtu = p["plpmtu"].as_u64().expect("plpmtu");
    assert!((1_292 - 32..=1_292).contains(&plpmtu), "{sent}");
    assert!(
        sent["sent_as_cells"].as_u64().expect("sent_as_cells") >= 1,
        "the TPDUs in flight were resent as cells: {sent}"
    );
    assert_eq!(sent["fragmented"], 0, "{sent}");
    assert_eq!(
        tx1["FragCreates"], tx0["FragCreates"],
        "IP fragments sent: {sent}"
    );
    eprintln!(
        "path shrunk to 1,320 octets under a call at 100 Mbit/s (ports {ports}): black hole declared \
         {:.0} ms later ({} window(s) lost whole behind a first timeout's head, {} \
         timeouts), longest stall of delivery {:.0} ms, {} TPDUs resent as cells, \
         PLPMTU {plpmtu}; {} MB in {:.2} s",
        (declared - holed).as_secs_f64() * 1e3,
        sent["windows_lost"],
        sent["timeouts"],
        longest_stall(&c.growth, holed).as_secs_f64() * 1e3,
        sent["sent_as_cells"],
        c.written >> 20,
        c.took.as_secs_f64(),
    );
}
