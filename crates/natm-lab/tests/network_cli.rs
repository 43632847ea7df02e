//! `natm-lab perf network` and `natm-lab perf multipoint` end to end: real switch and
//! sigd processes on loopback (natm-lab's hidden `switch` and `sigd`, natm's own code),
//! spawned by the binary itself. Only the shape of the results is checked — every VC
//! moved data — never their size: performance is measured with `natm-lab perf`, not
//! asserted in tests.

use std::process::Command;

use serde_json::Value;

fn lab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_natm-lab"))
        .args(args)
        .output()
        .expect("run natm-lab")
}

#[test]
fn perf_network_reports_every_case_and_every_vc_moved_data() {
    let out = lab(&[
        "perf",
        "network",
        "--seconds",
        "1",
        "--warmup",
        "300ms",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["experiment"], "network");
    assert!(doc["machine"]["loadavg"].is_string(), "{doc}");
    let cases = doc["cases"].as_array().expect("cases");
    let names: Vec<&str> = cases.iter().filter_map(|c| c["case"].as_str()).collect();
    assert_eq!(names, ["rr", "fifo", "abr", "wrr"]);
    for c in cases {
        assert!(c["headline"].as_f64().is_some_and(f64::is_finite), "{c}");
        let vcs = c["vcs"].as_array().expect("vcs");
        assert!(vcs.len() >= 3, "{c}");
        for v in vcs {
            let g = v["goodput_bps"].as_f64().expect("goodput");
            assert!(g.is_finite() && g > 0.0, "no data on {v}");
        }
    }
    // The round-robin case's reliable VCs use packet-pair, the FIFO case's the window.
    let flows = |i: usize| -> Vec<&str> {
        cases[i]["vcs"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["flow"].as_str())
            .collect()
    };
    assert!(
        flows(0).iter().all(|f| *f == "packet-pair"),
        "{:?}",
        flows(0)
    );
    assert!(flows(1).iter().all(|f| *f == "window"), "{:?}", flows(1));
    assert!(flows(2).iter().all(|f| *f == "abr"), "{:?}", flows(2));
    // Packet-pair and ABR really ran: their controllers set a rate on every VC.
    for case in [0, 2] {
        for run in cases[case]["per_run"].as_array().unwrap() {
            for v in run.as_array().unwrap() {
                assert!(v["fc_rate_bps"].as_u64().is_some_and(|r| r > 0), "{v}");
            }
        }
    }
}

#[test]
fn perf_multipoint_sends_one_copy_when_the_switch_replicates_and_one_per_leaf_otherwise() {
    let out = lab(&[
        "perf",
        "multipoint",
        "--leaves",
        "2",
        "--rate",
        "4Mbps",
        "--seconds",
        "1",
        "--warmup",
        "300ms",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["experiment"], "multipoint");
    let cases = doc["cases"].as_array().expect("cases");
    let names: Vec<&str> = cases.iter().filter_map(|c| c["case"].as_str()).collect();
    assert_eq!(names, ["network", "own-calls", "point-to-point"]);
    let run = |c: &Value| c["runs"][0].clone();
    // Every leaf of every case got data.
    for c in cases {
        let r = run(c);
        let rates = r["leaf_bps"].as_array().expect("leaf rates");
        assert!(rates.iter().all(|b| b.as_f64().unwrap() > 0.0), "{c}");
    }
    // The switch replicated the network case's one VC to both leaves; the sealed
    // calls were each a leaf's own; the root's bytes show it (one copy of the
    // stream, against one per leaf).
    let (net, own) = (run(&cases[0]), run(&cases[1]));
    assert_eq!(net["replicated"], 2, "{net}");
    assert_eq!(own["replicated"], 0, "{own}");
    let copies = |r: &Value| r["root_copies"].as_f64().unwrap();
    assert!(copies(&net) < 1.5 && copies(&own) > 1.5, "{net} {own}");
}

#[test]
fn perf_convergence_samples_every_phase_of_a_join_and_a_leave() {
    let out = lab(&[
        "perf",
        "convergence",
        "--flows",
        "abr,window",
        "--join",
        "600ms",
        "--leave",
        "1200ms",
        "--end",
        "1800ms",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["experiment"], "convergence");
    let flows = doc["flows"].as_array().expect("flows");
    let names: Vec<&str> = flows.iter().filter_map(|f| f["flow"].as_str()).collect();
    assert_eq!(names, ["abr", "window"]);
    for f in flows {
        assert_eq!(f["phases"].as_array().map(Vec::len), Some(3), "{f}");
        let samples = f["samples"].as_array().expect("samples");
        assert!(samples.len() >= 10, "{f}");
        // The third VC moved data between its join and its leave, and only then.
        let third = |t: f64| {
            samples
                .iter()
                .filter(|s| (s["t_s"].as_f64().unwrap() - t).abs() < 0.25)
                .map(|s| s["rates_bps"][2].as_f64().unwrap())
                .fold(0.0, f64::max)
        };
        assert!(third(0.95) > 0.0, "{f}");
        assert_eq!(third(0.25), 0.0, "{f}");
        assert!(samples.iter().any(|s| s["queue_cells"].is_u64()), "{f}");
    }
}
