//! `natm-lab perf switch`: a `natm switch` process (natm-lab's hidden `switch`) beside
//! the reference relay, cell and frame mode, on loopback; the JSON's shape is checked,
//! never the rates.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `natm-lab perf switch` with `extra` arguments, its JSON result.
fn perf_switch(extra: &[&str]) -> serde_json::Value {
    let mut child = Command::new(env!("CARGO_BIN_EXE_natm-lab"))
        .args([
            "perf",
            "switch",
            "--seconds",
            "0.2",
            "--runs",
            "1",
            "--train",
            "32",
            "--json",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("natm-lab perf switch did not finish in 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn perf_switch_measures_both_forwarders() {
    let v = perf_switch(&[]);
    // Switch and relay, cell mode and frame mode, each forwarded something.
    let rows = v["rows"].as_array().unwrap();
    let seen: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["mode"].as_str().unwrap(),
                r["forwarder"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("cell", "switch"),
            ("cell", "relay"),
            ("frame", "switch"),
            ("frame", "relay")
        ]
    );
    for r in rows {
        assert!(r["runs"][0]["cells_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["runs"][0]["vcis_seen"], 1, "{r}");
    }
}

#[test]
fn perf_switch_spreads_the_load_over_several_vcs() {
    let v = perf_switch(&["--vcs", "3"]);
    assert_eq!(v["vcs"], 3);
    // Every VC has its PVC through the switch: all three reach the receiver, in
    // both link modes (the relay passes them as they are).
    for r in v["rows"].as_array().unwrap() {
        assert_eq!(r["runs"][0]["vcis_seen"], 3, "{r}");
    }
}
