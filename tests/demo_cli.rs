//! `natm demo --switch` end to end: a real `natm switch` and three hosts' `natm sigd`
//! processes on loopback, spawned by the binary itself. Only the shape of the results
//! is checked — every class moved data — never their size.

use std::process::Command;

fn natm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(args)
        .output()
        .expect("run natm")
}

#[test]
fn demo_switch_shows_three_classes_moving_data_and_cleans_up() {
    let out = natm(&["demo", "--switch", "--seconds", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The summary: one row per class with a non-zero mean rate.
    let summary = stdout
        .rsplit_once("mean Mbit/s")
        .map(|x| x.1)
        .expect("a summary table");
    for class in ["reliable", "guaranteed", "best-effort"] {
        let row = summary
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{class} ")))
            .unwrap_or_else(|| panic!("no {class} row in\n{stdout}"));
        let rate: f64 = row
            .split_whitespace()
            .nth(2)
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no rate in {row:?}"));
        assert!(rate > 0.0, "{row}");
    }
}
