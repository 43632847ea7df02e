//! The reliable service's goodput against random loss and TPDU size, pinned as a
//! snapshot (smoltcp style): any change in loss recovery shows up as a diff of
//! `tests/snapshots/goodput_table.md` in review. The simulator is deterministic, so
//! the table is exact. Regenerate with `NATM_UPDATE_SNAPSHOTS=1 cargo test --release
//! -p natm-sim --test sim -- goodput_snapshot::` after a deliberate change, and explain
//! the diff.

use std::fmt::Write as _;
use std::time::Duration;

use natm_proto::transport::TransportConfig;
use natm_sim::scenario::{run, Scenario, VcSpec};

fn table() -> String {
    let losses = [0.0, 0.01, 0.05, 0.10];
    let tpdus = [1024u32, 4096, 16384];
    let mut out = String::new();
    writeln!(
        out,
        "Reliable VC (SMART + packet-pair), 100 Mbit/s round-robin bottleneck, 1 ms RTT,\n\
         20 MB of 64 KiB messages, seed 7. Goodput in Mbit/s, then fast retransmits /\n\
         head retransmits / timeouts.\n"
    )
    .unwrap();
    write!(out, "| loss |").unwrap();
    for t in tpdus {
        write!(out, " TPDU {t} B |").unwrap();
    }
    writeln!(out).unwrap();
    writeln!(out, "|---|{}", "---|".repeat(tpdus.len())).unwrap();
    for loss in losses {
        write!(out, "| {:.0} % |", loss * 100.0).unwrap();
        for tpdu in tpdus {
            let mut cfg = TransportConfig::reliable();
            cfg.tpdu_size = tpdu;
            cfg.window = (1 << 20) / tpdu;
            cfg.rcv_buf = 1 << 20;
            cfg.snd_buf = 2 << 20;
            let s = Scenario {
                loss,
                seed: 7,
                vcs: vec![VcSpec {
                    label: "reliable".into(),
                    config: cfg,
                    bytes: 20_000_000,
                    msg_size: 65536,
                    start: Duration::ZERO,
                }],
                ..Scenario::default()
            };
            let r = run(&s).unwrap();
            let v = &r.vcs[0];
            assert!(v.intact && v.closed && v.bytes_delivered == 20_000_000);
            write!(
                out,
                " {:.2} ({}/{}/{}) |",
                v.goodput_bps / 1e6,
                v.sender.retx_fast,
                v.sender.retx_head,
                v.sender.timeouts
            )
            .unwrap();
        }
        writeln!(out).unwrap();
    }
    out
}

#[test]
fn goodput_table_matches_the_snapshot() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/snapshots/goodput_table.md"
    );
    let got = table();
    if std::env::var_os("NATM_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(path)
        .expect("snapshot missing: run with NATM_UPDATE_SNAPSHOTS=1 to create it");
    assert_eq!(
        got, want,
        "goodput table changed; review, then regenerate the snapshot"
    );
}
