//! `natm-lab perf switchlab`: one short run of every measurement, its JSON checked for
//! shape and for what the data plane must do whatever the machine's load — the
//! policer takes cells from the violator only, EPD+PPD delivers more whole frames
//! than tail drop, a frame sent back to back queues at the slower output port and
//! overflows a VC buffer shorter than itself.
//! Rates and the cell-level queue depend on scheduling and are not asserted.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn median(v: &Value) -> f64 {
    v["median"]
        .as_f64()
        .unwrap_or_else(|| panic!("no median in {v}"))
}

#[test]
fn switchlab_polices_discards_frames_and_queues_bursts() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_natm-lab"))
        .args([
            "perf",
            "switchlab",
            "--seconds",
            "1",
            "--runs",
            "1",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("natm-lab perf switchlab did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["experiment"], "switchlab");
    assert_eq!(v["runs"], 1);

    // 1. Policing: discard cuts the violator only; tag marks the violator only.
    let pol = v["policing"].as_array().unwrap();
    assert_eq!(pol.len(), 2, "{v}");
    let (discard, tag) = (&pol[0], &pol[1]);
    assert_eq!(discard["violation"], "discard");
    assert_eq!(tag["violation"], "tag");
    assert!(
        median(&discard["violating"]["policing_drops"]) > 0.0,
        "{discard}"
    );
    assert_eq!(
        median(&discard["conforming"]["policing_drops"]),
        0.0,
        "{discard}"
    );
    assert!(median(&tag["violating"]["tagged"]) > 0.0, "{tag}");
    assert_eq!(median(&tag["violating"]["policing_drops"]), 0.0, "{tag}");
    assert_eq!(median(&tag["conforming"]["tagged"]), 0.0, "{tag}");
    assert_eq!(median(&tag["conforming"]["policing_drops"]), 0.0, "{tag}");

    // 2. Frame discard: the classic ordering of whole frames delivered.
    let dis = v["discard"].as_array().unwrap();
    let kinds: Vec<&str> = dis.iter().map(|c| c["discard"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["tail-drop", "ppd", "epd-ppd"]);
    let frames = |i: usize| median(&dis[i]["frames_per_s"]);
    assert!(frames(2) > frames(0), "EPD+PPD above tail drop: {v}");
    assert!(median(&dis[2]["dropped_epd"]) > 0.0, "{v}");
    assert!(median(&dis[0]["dropped_queue_full"]) > 0.0, "{v}");
    assert_eq!(median(&dis[0]["dropped_ppd"]), 0.0, "no PPD when off: {v}");
    assert!(median(&dis[1]["dropped_ppd"]) > 0.0, "{v}");

    // 3. Smoothing: a frame arriving back to back fills the queue by its length,
    // whatever else the machine does; the other figures are only well-formed.
    let smo = v["smoothing"].as_array().unwrap();
    assert_eq!(smo[0]["smoothing"], "cell");
    assert_eq!(smo[1]["smoothing"], "packet");
    let frame_cells = v["smoothing_setup"]["frame_cells"].as_f64().unwrap();
    assert!(
        median(&smo[1]["max_queue_cells"]) >= frame_cells - 1.0,
        "{v}"
    );
    // With VC buffers shorter than a frame, every back-to-back frame overflows its
    // buffer: at least (20 - 10 - 1) of its 20 cells are lost, whatever the timing.
    assert_eq!(smo[3]["smoothing"], "packet");
    assert_eq!(smo[3]["vc_buffer_cells"], 10);
    assert!(median(&smo[3]["lost_fraction"]) > 0.3, "{v}");
    for c in smo {
        for k in ["delivered_cells_per_s", "delay_p50_us", "delay_p99_us"] {
            assert!(median(&c[k]) > 0.0, "{k}: {c}");
        }
        assert!(c["mean_queue_cells"]["median"].is_number(), "{c}");
    }
    assert!(v["machine"]["loadavg"].is_string());
}
