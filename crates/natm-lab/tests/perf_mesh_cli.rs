//! `natm-lab perf mesh` end to end as root: ten `natm switch` processes with routing,
//! each in its own network namespace with veth trunks, and three hosts' sigds in
//! theirs. What a user would notice: every host reaches every other across several
//! switches, and after a trunk a call uses goes down, that call ends and a new call
//! between the same hosts connects over another trunk. Trunks differ in rate (50 or
//! 30 Mbit/s) and MTU (1,400 or 9,000); each trunk's frames pass a delay line, and
//! every third trunk is 200 ms long one way: a round trip longer
//! than a network link's Timer_CC (200 ms) and Timer_NO_RESPONSE (400 ms), which
//! used to keep such a trunk from ever coming up. No figure is asserted; every wait in
//! the command has a deadline of its own. Skipped without root, ip, tc or ethtool.

use std::process::{Command, Stdio};

use serde_json::Value;

/// Why the mesh cannot be built here, if it cannot.
fn unavailable() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    for tool in ["ip", "tc", "ethtool"] {
        let found = Command::new("sh")
            .args([
                "-c",
                &format!("command -v {tool} || test -x /usr/sbin/{tool}"),
            ])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} missing"));
        }
    }
    None
}

fn namespaces() -> String {
    Command::new("sh")
        .args(["-c", "ip netns list || /usr/sbin/ip netns list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[test]
fn calls_cross_the_mesh_and_go_round_a_cut_trunk_or_skips() {
    if let Some(why) = unavailable() {
        eprintln!("skipping perf mesh test: {why}");
        let out = Command::new(env!("CARGO_BIN_EXE_natm-lab"))
            .args(["perf", "mesh", "--delay", "1ms"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("root") || err.contains("needs"), "{err}");
        return;
    }
    let child = Command::new(env!("CARGO_BIN_EXE_natm-lab"))
        .args([
            "perf",
            "mesh",
            "--switches",
            "10",
            "--hosts",
            "3",
            "--calls",
            "10",
            "--rate",
            "50Mbps,30Mbps",
            "--mtu",
            "1400,9000",
            "--delay",
            "2ms,2ms,200ms",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "perf mesh failed: {err}");
    // Nothing of its own left behind.
    let left = namespaces();
    assert!(
        !left.contains(&format!("natm-mesh-{pid}-")),
        "namespaces left: {left}"
    );
    assert!(!std::env::temp_dir()
        .join(format!("natm-mesh-{pid}"))
        .exists());
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let delays: Vec<f64> = doc["trunk_delay_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_f64().unwrap())
        .collect();
    assert_eq!(delays.len(), 15, "{doc}");
    assert_eq!(delays.iter().filter(|d| **d == 200.0).count(), 5, "{doc}");
    // Each trunk its own rate and MTU, dealt in turn.
    assert_eq!(doc["trunk_rate_bps"][1], 30_000_000, "{doc}");
    assert_eq!(doc["trunk_mtu"][1], 9000, "{doc}");
    let pairs = doc["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 6, "{doc}");
    for p in pairs {
        assert_eq!(p["connected"], true, "every host calls every other: {p}");
    }
    assert!(
        pairs.iter().any(|p| p["hops"].as_u64() >= Some(2)),
        "some call crosses several switches: {doc}"
    );
    assert_eq!(doc["burst_connected"], doc["burst_attempted"], "{doc}");
    let cut = &doc["cut"];
    assert!(
        cut["released_ms"].as_f64().is_some(),
        "the call over the cut trunk was released: {cut}"
    );
    assert!(
        cut["reconnected_ms"].as_f64().is_some(),
        "a new call between the same hosts connected: {cut}"
    );
    let first = cut["new_first_hop"].as_u64().expect("the new call's trunk");
    assert_ne!(
        Some(first),
        cut["trunk"][1].as_u64(),
        "the new call leaves by another trunk: {cut}"
    );
}
