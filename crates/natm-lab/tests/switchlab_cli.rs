//! `natm-lab perf switchlab`: one short run of every measurement, its JSON checked for
//! shape and for what the data plane must do whatever the machine's load — the
//! policer takes cells from the violator only, EPD+PPD delivers more whole frames
//! than tail drop, a frame sent back to back queues at the slower output port and
//! overflows a VC buffer shorter than itself, from the lab's sources and from a
//! natm host's own `smooth=frame` VCs alike.
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

    // 3b. The same on a natm host's own VCs: smooth=frame sends each frame's cells in
    // one train, which queues by the frame's length and overflows a short buffer;
    // smooth=cell VCs deliver (their queue and loss depend on scheduling).
    let real = v["smoothing_hosts"].as_array().unwrap();
    let kinds: Vec<(&str, u64)> = real
        .iter()
        .map(|c| {
            (
                c["smoothing"].as_str().unwrap(),
                c["vc_buffer_cells"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("cell", 4096),
            ("packet", 4096),
            ("cell", 10),
            ("packet", 10)
        ]
    );
    assert!(
        median(&real[1]["max_queue_cells"]) >= frame_cells - 1.0,
        "{v}"
    );
    assert!(median(&real[3]["queue_dropped_fraction"]) > 0.3, "{v}");
    assert_eq!(median(&real[3]["good_frame_fraction"]), 0.0, "{v}");
    for c in real {
        for k in ["offered_cells_per_s", "delivered_cells_per_s"] {
            assert!(median(&c[k]) > 0.0, "{k}: {c}");
        }
    }
    assert!(v["machine"]["loadavg"].is_string());
}
