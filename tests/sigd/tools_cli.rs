//! `natm call`, `natm listen` and `natm ping` as a user runs them, between two sigds
//! on loopback (issue 14): files and stdin byte-exact at each service class, a load's
//! JSON summary, echo and ping, and refusals that name their cause and what to do.
//! Every process runs under a deadline and is killed if the test fails.

use std::path::Path;
use std::time::Duration;

use crate::sigd_support::tool::{data, listen, natm};
use crate::sigd_support::{pair, LINK};

const LIMIT: Duration = Duration::from_secs(30);

fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
}

#[test]
fn a_file_crosses_byte_exact_at_each_service_class() {
    let (a, b) = pair(LINK, LINK);
    let dir = a.dir.clone();
    let src = dir.join("src.bin");
    let body = data(3_000_000);
    std::fs::write(&src, &body).unwrap();
    for qos in ["reliable", "ubr", "cbr:pcr=50Mbps", "cbr:pcr=50Mbps,ec=on"] {
        let dst = dir.join(format!("dst-{}.bin", qos.replace([':', '='], "_")));
        let l = listen(&b, &["ttcp", "--qos", qos, "--out", dst.to_str().unwrap()]);
        let mut args = vec!["call", "+4420002:ttcp", "--qos", qos, "--file"];
        args.push(src.to_str().unwrap());
        if qos == "ubr" {
            // Best effort has no flow control: paced, so that a loaded test machine's
            // receiver keeps up and loopback loses nothing.
            args.extend(["--rate", "200Mbps"]);
        }
        let c = natm(&a, &args, None).wait(LIMIT);
        assert!(c.status.success(), "{qos}: {}", c.stderr);
        assert!(c.stderr.contains(&format!("granted {qos}")), "{}", c.stderr);
        let l = l.wait(LIMIT);
        assert!(l.status.success(), "{qos}: {}", l.stderr);
        let got = std::fs::read(&dst).unwrap();
        assert!(
            got == body,
            "{qos}: {} bytes arrived, not the same",
            got.len()
        );
        if qos.starts_with("cbr") {
            assert!(c.stderr.contains("50.0 Mbit/s reserved"), "{}", c.stderr);
        }
    }
    for s in [&a, &b] {
        s.wait_no_calls();
    }
}

/// `--ports host` (issue 30): the listener's host carries its calls on one UDP socket
/// for every VC, the caller's on a socket per VC end; an encrypted reliable call and a
/// best-effort one still cross byte-exact.
#[test]
fn a_host_on_one_port_takes_calls_from_a_host_with_a_socket_per_vc() {
    let (a, b) = pair(LINK, LINK);
    let dir = a.dir.clone();
    let src = dir.join("src-ports.bin");
    let body = data(2_000_000);
    std::fs::write(&src, &body).unwrap();
    for qos in ["reliable:encrypt=on", "ubr"] {
        let dst = dir.join(format!("dst-ports-{}.bin", qos.replace([':', '='], "_")));
        let l = listen(
            &b,
            &[
                "ttcp",
                "--ports",
                "host",
                "--qos",
                qos,
                "--out",
                dst.to_str().unwrap(),
            ],
        );
        let mut args = vec!["call", "+4420002:ttcp", "--ports", "vc", "--qos", qos];
        args.extend(["--file", src.to_str().unwrap()]);
        if qos == "ubr" {
            args.extend(["--rate", "200Mbps"]);
        }
        let c = natm(&a, &args, None).wait(LIMIT);
        assert!(c.status.success(), "{qos}: {}", c.stderr);
        let l = l.wait(LIMIT);
        assert!(l.status.success(), "{qos}: {}", l.stderr);
        let got = std::fs::read(&dst).unwrap();
        assert!(
            got == body,
            "{qos}: {} bytes arrived, not the same",
            got.len()
        );
        // The listener's summary counts its one port; the caller, with a socket per
        // VC, has none to count.
        let read: u64 = l
            .stderr
            .lines()
            .find_map(|line| line.strip_prefix("host port "))
            .and_then(|rest| rest.split(": ").nth(1))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{qos}: no port line: {}", l.stderr));
        // 2 MB in datagrams of at most 64 KiB, and the call's own frames.
        assert!(read >= 30, "{qos}: {read} datagrams: {}", l.stderr);
        assert!(!c.stderr.contains("host port "), "{qos}: {}", c.stderr);
    }
    for s in [&a, &b] {
        s.wait_no_calls();
    }
}

#[test]
fn stdin_reaches_the_listeners_stdout_byte_exact() {
    let (a, b) = pair(LINK, LINK);
    let body = data(500_000);
    let l = listen(&b, &["cat"]);
    let c = natm(
        &a,
        &["call", "+4420002:cat", "--size", "1000"],
        Some(body.clone()),
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
    assert!(l.stdout == body, "{} bytes arrived", l.stdout.len());
    assert!(l.stderr.contains("call from +4420001"), "{}", l.stderr);
}

#[test]
fn a_generated_load_reports_a_plausible_json_summary() {
    let (a, b) = pair(LINK, LINK);
    let l = listen(&b, &["load", "--discard", "--json"]);
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:load",
            "--bytes",
            "20MB",
            "--json",
            "--quiet",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
    let (cs, ls) = (json(&c.stdout), json(&l.stdout));
    for s in [&cs, &ls] {
        assert_eq!(s["bytes"], 20_000_000, "{s}");
        assert_eq!(s["qos"], "reliable", "{s}");
        let d = s["duration_s"].as_f64().unwrap();
        assert!(d > 0.0 && d < 30.0, "{s}");
        let r = s["mbit_per_s"].as_f64().unwrap();
        assert!((r - 160.0 / d).abs() < 1.0, "{s}");
    }
    assert_eq!(cs["role"], "call");
    assert_eq!(cs["bytes_sent"], 20_000_000);
    assert_eq!(ls["bytes_received"], 20_000_000);
    // 20 MB in 64 KiB messages.
    assert_eq!(ls["messages_received"], 306, "{ls}");
    assert!(cs["setup_ms"].as_f64().unwrap() > 0.0, "{cs}");
    assert!(
        cs["srtt_us"].as_u64().is_some(),
        "a reliable VC times its ACKs: {cs}"
    );
    assert_eq!(ls["gaps"], 0, "{ls}");
    assert_eq!(cs["error_control"], true, "{cs}");
    eprintln!(
        "retransmissions on loopback (issue 34, 0034-spurious-retransmissions): {} \
         ({} timeouts, {} TPDUs marked lost)",
        cs["retransmissions"], cs["timeouts"], cs["tpdus_marked_lost"]
    );
}

#[test]
fn ping_through_an_echo_listener_loses_nothing() {
    let (a, b) = pair(LINK, LINK);
    let l = listen(&b, &["echo", "--echo"]);
    let p = natm(
        &a,
        &["ping", "+4420002", "-c", "5", "-i", "50ms", "--json"],
        None,
    )
    .wait(LIMIT);
    assert!(p.status.success(), "{}", p.stderr);
    let s = json(&p.stdout);
    assert_eq!(s["target"], "+4420002:echo", "{s}");
    assert_eq!(s["sent"], 5, "{s}");
    assert_eq!(s["received"], 5, "{s}");
    assert_eq!(s["loss_pct"], 0.0, "{s}");
    let (min, avg, max) = (
        s["min_ms"].as_f64().unwrap(),
        s["avg_ms"].as_f64().unwrap(),
        s["max_ms"].as_f64().unwrap(),
    );
    assert!(0.0 < min && min <= avg && avg <= max && max < 1000.0, "{s}");
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
    // The text form: per-probe lines and ping's summary.
    let l = listen(&b, &["echo", "--echo"]);
    let p = natm(
        &a,
        &["ping", "+4420002:echo", "-c", "2", "-i", "20ms"],
        None,
    )
    .wait(LIMIT);
    let out = String::from_utf8_lossy(&p.stdout);
    assert!(out.contains("seq=1 time="), "{out}");
    assert!(out.contains("2 probes sent, 2 received, 0% loss"), "{out}");
    assert!(out.contains("rtt min/avg/max/mdev = "), "{out}");
    l.wait(LIMIT);
}

#[test]
fn refusals_say_their_cause_and_what_to_do() {
    let (a, b) = pair(LINK, LINK);
    // Nobody listens on the SAP.
    let c = natm(&a, &["call", "+4420002:nobody"], Some(Vec::new())).wait(LIMIT);
    assert!(!c.status.success());
    assert!(
        c.stderr
            .contains("nobody listens on SAP \"nobody\" at +4420002 (cause 88"),
        "{}",
        c.stderr
    );
    assert!(c.stderr.contains("natm listen nobody"), "{}", c.stderr);
    // A SAP that cannot be one is refused before any call is made: no UNI cause.
    for (tool, target) in [("call", "+4420002:my sap"), ("listen", "")] {
        let c = natm(&a, &[tool, target], Some(Vec::new())).wait(LIMIT);
        assert!(!c.status.success());
        assert!(
            c.stderr.contains("bad SAP"),
            "{tool} {target:?}: {}",
            c.stderr
        );
        assert!(
            !c.stderr.contains("cause"),
            "{tool} {target:?}: {}",
            c.stderr
        );
    }
    // QoS that parses but natm cannot carry is refused at connect, saying what to drop.
    let c = natm(
        &a,
        &["call", "+4420002:nobody", "--qos", "ubr,aal0"],
        Some(Vec::new()),
    )
    .wait(LIMIT);
    assert!(!c.status.success());
    assert!(c.stderr.contains("drop aal0"), "{}", c.stderr);
    // More than the 100 Mbit/s link: admission says what is free.
    let l = listen(&b, &["ttcp"]);
    let c = natm(
        &a,
        &["call", "+4420002:ttcp", "--qos", "cbr:pcr=150Mbps"],
        Some(Vec::new()),
    )
    .wait(LIMIT);
    assert!(!c.status.success());
    for want in [
        "admission refused",
        "150 Mbit/s requested",
        "100 Mbit/s free",
        "cause 37",
        "lower pcr",
    ] {
        assert!(c.stderr.contains(want), "{want}: {}", c.stderr);
    }
    drop(l);
    // A listener that takes only up to 10 Mbit/s rejects 20 with cause 73.
    let l = listen(&b, &["cbr", "--qos", "cbr:pcr=10Mbps"]);
    let c = natm(
        &a,
        &["call", "+4420002:cbr", "--qos", "cbr:pcr=20Mbps"],
        Some(Vec::new()),
    )
    .wait(LIMIT);
    assert!(!c.status.success());
    assert!(c.stderr.contains("cause 73"), "{}", c.stderr);
    drop(l);
    for s in [&a, &b] {
        s.wait_no_calls();
    }
    assert!(Path::new(&a.socket).exists());
}

#[test]
fn an_echo_listener_sends_the_callers_stdin_back_and_keep_takes_call_after_call() {
    let (a, b) = pair(LINK, LINK);
    let l = listen(&b, &["echo", "--echo", "--keep", "--json"]);
    for n in [1usize, 200_000] {
        let body = data(n);
        let c = natm(
            &a,
            &["call", "+4420002:echo", "--size", "4096"],
            Some(body.clone()),
        )
        .wait(LIMIT);
        assert!(c.status.success(), "{}", c.stderr);
        assert!(c.stdout == body, "{n}: {} bytes came back", c.stdout.len());
    }
    // Still listening after two calls: a third is answered too.
    let c = natm(
        &a,
        &["call", "+4420002:echo", "--quiet"],
        Some(b"3".to_vec()),
    )
    .wait(LIMIT);
    assert_eq!(c.stdout, b"3", "{}", c.stderr);
    drop(l);
    for s in [&a, &b] {
        s.wait_no_calls();
    }
}

/// `natm call` as a multipoint root: three leaves (`natm listen` on three SAPs), leaf 1
/// dropped during the transfer; the root prints each leaf event and the other two
/// leaves receive everything. The dropped leaf's listener sees the end of its data.
#[test]
fn a_multipoint_root_drops_a_leaf_and_the_others_receive_everything() {
    let (a, b) = pair(LINK, LINK);
    let leaves: Vec<_> = (0..3)
        .map(|i| listen(&b, &[&format!("mc{i}"), "--discard", "--json", "--events"]))
        .collect();
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:mc0",
            "--leaf",
            "+4420002:mc1",
            "--leaf",
            "+4420002:mc2",
            "--qos",
            "guaranteed:pcr=8Mbps",
            "--bytes",
            "1MB",
            "--size",
            "8KiB",
            "--drop-leaf",
            "0.3s:1",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    for want in [
        "multipoint root to 3 leaves",
        "leaf 0 added (+4420002:mc0)",
        "leaf 2 added (+4420002:mc2)",
        "leaf 1 dropped (+4420002:mc1)",
        "sent 1000000 bytes in 123 messages to 2 leaves",
    ] {
        assert!(c.stderr.contains(want), "no {want:?} in {}", c.stderr);
    }
    let got: Vec<_> = leaves.into_iter().map(|l| l.wait(LIMIT)).collect();
    for (i, l) in got.iter().enumerate() {
        assert!(l.status.success(), "leaf {i}: {}", l.stderr);
        assert!(
            l.stderr.contains("event: the peer closed"),
            "leaf {i}: {}",
            l.stderr
        );
        let bytes = json(&l.stdout)["bytes_received"].as_u64().unwrap();
        if i == 1 {
            assert!(bytes < 1_000_000, "the dropped leaf got {bytes} bytes");
        } else {
            assert_eq!(bytes, 1_000_000, "leaf {i}");
        }
    }
}

/// `--events` on both ends of a call whose rate is changed during the transfer: the
/// caller prints the change asked for and confirmed, the listener the peer's change
/// and close.
#[test]
fn events_show_a_qos_change_on_both_ends() {
    let (a, b) = pair(LINK, LINK);
    let qos = "cbr:pcr=8Mbps,min_pcr=1Mbps";
    let l = listen(&b, &["q", "--discard", "--events"]);
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:q",
            "--qos",
            qos,
            "--bytes",
            "1MB",
            "--set-qos",
            "0.2s:cbr:pcr=4Mbps",
            "--events",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    for want in [
        "natm call: event: QoS change to 4.0 Mbit/s asked for",
        "natm call: event: QoS changed: sending at 4.0 Mbit/s",
    ] {
        assert!(c.stderr.contains(want), "no {want:?} in {}", c.stderr);
    }
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
    for want in [
        "natm listen: event: the peer changed its QoS: now sending at 4.0 Mbit/s",
        "natm listen: event: the peer closed",
    ] {
        assert!(l.stderr.contains(want), "no {want:?} in {}", l.stderr);
    }
}

/// A simplex call from the command line (seed 000 §5.3): `--qos …,rx:none` sends a file
/// one way to a listener whose QoS says `tx:none`; the caller expects nothing back.
#[test]
fn a_simplex_call_sends_a_file_one_way() {
    let (a, b) = pair(LINK, LINK);
    let src = a.dir.join("simplex-src.bin");
    let dst = a.dir.join("simplex-dst.bin");
    let body = data(1_000_000);
    std::fs::write(&src, &body).unwrap();
    let l = listen(
        &b,
        &[
            "ttcp",
            "--qos",
            "reliable:tx:none",
            "--out",
            dst.to_str().unwrap(),
        ],
    );
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:ttcp",
            "--qos",
            "reliable:rx:none",
            "--file",
            src.to_str().unwrap(),
        ],
        None,
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
    assert!(std::fs::read(&dst).unwrap() == body, "the file differs");
    for s in [&a, &b] {
        s.wait_no_calls();
    }
}

/// `natm listen --at` answers a guaranteed call at a lower rate (issue 33's
/// counter-offer): the caller asks 40 Mbit/s (at least 5) and is granted the
/// listener's 10; a caller whose minimum is above it is rejected with cause 73.
#[test]
fn a_listener_answers_at_its_own_rate_within_the_callers_minimum() {
    let (a, b) = pair(LINK, LINK);
    let body = data(200_000);
    let l = listen(&b, &["tv", "--at", "10Mbps", "--discard", "--keep"]);
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:tv",
            "--qos",
            "cbr:pcr=40Mbps,min_pcr=5Mbps",
        ],
        Some(body),
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    assert!(c.stderr.contains("10.0 Mbit/s reserved"), "{}", c.stderr);
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:tv",
            "--qos",
            "cbr:pcr=40Mbps,min_pcr=20Mbps",
        ],
        Some(b"x".to_vec()),
    )
    .wait(LIMIT);
    assert!(!c.status.success(), "{}", c.stderr);
    assert!(c.stderr.contains("73"), "{}", c.stderr);
    drop(l);
    for s in [&a, &b] {
        s.wait_no_calls();
    }
}
