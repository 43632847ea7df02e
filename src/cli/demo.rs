//! `natm demo`: a whole natm network in one process — a guaranteed, a reliable and a
//! best-effort VC at once through one round-robin bottleneck, on the simulator's
//! virtual clock, with a live table of each VC's rate and a summary.

use std::time::Duration;

use clap::Args;

use super::units;
use super::{outln, CliResult};
use natm::sim::scenario::{run_observed, Scenario, VcSpec};
use natm::transport::TransportConfig;

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Bottleneck rate.
    #[arg(long, default_value = "100Mbps", value_parser = units::rate)]
    rate: u64,
    /// Rate reserved by the guaranteed VC.
    #[arg(long, default_value = "20Mbps", value_parser = units::rate)]
    guaranteed: u64,
    /// Simulated time to run.
    #[arg(long, default_value = "3s", value_parser = units::duration)]
    time: Duration,
    /// Random loss on the bottleneck.
    #[arg(long, default_value = "1%", value_parser = units::probability)]
    loss: f64,
}

pub(crate) fn run(a: DemoArgs) -> CliResult {
    let bytes = u64::MAX / 4;
    let mut reliable = TransportConfig::reliable();
    reliable.flow = natm::transport::FlowKind::PacketPair;
    let vcs = vec![
        VcSpec {
            label: "guaranteed".into(),
            config: TransportConfig::guaranteed(a.guaranteed),
            bytes,
            msg_size: 8192,
            start: Duration::ZERO,
        },
        VcSpec {
            label: "reliable".into(),
            config: reliable,
            bytes,
            msg_size: 65536,
            start: Duration::from_millis(200),
        },
        VcSpec {
            label: "best-effort".into(),
            config: TransportConfig::best_effort(),
            bytes,
            msg_size: 1500,
            start: Duration::from_millis(400),
        },
    ];
    let s = Scenario {
        rate_bps: a.rate,
        loss: a.loss,
        rtt: Duration::from_millis(2),
        queue_frames: 64,
        round_robin: true,
        vcs,
        time_limit: a.time,
        series_interval: Some(Duration::from_millis(250)),
        ..Scenario::default()
    };
    outln!(
        "natm demo: 3 VCs through a {:.0} Mbit/s round-robin bottleneck, {:.1}% loss, 2 ms RTT (simulated)",
        a.rate as f64 / 1e6,
        a.loss * 100.0
    );
    outln!(
        "{:>7}  {:>22}  {:>22}  {:>22}  {:>6}",
        "time",
        "guaranteed Mbit/s",
        "reliable Mbit/s",
        "best-effort Mbit/s",
        "queue"
    );
    let report = run_observed(&s, |row| {
        let cell = |i: usize| row.vcs.get(i).map_or(0.0, |v| v.rate_bps / 1e6);
        outln!(
            "{:>6.2}s  {:>22.2}  {:>22.2}  {:>22.2}  {:>6}",
            row.t,
            cell(0),
            cell(1),
            cell(2),
            row.queue_frames
        );
    })
    .map_err(|e| e.to_string())?;
    outln!();
    outln!(
        "{:<12} {:>14} {:>10} {:>12} {:>10} {:>8}  data",
        "VC",
        "goodput Mbit/s",
        "srtt",
        "retransmits",
        "lost msgs",
        "drops"
    );
    for v in &report.vcs {
        outln!(
            "{:<12} {:>14.2} {:>8}µs {:>12} {:>10} {:>8}  {}",
            v.label,
            v.goodput_bps / 1e6,
            v.srtt.as_micros(),
            v.sender.retransmissions(),
            v.receiver.partial_messages_dropped,
            v.receiver.drop_rcv_buf + v.receiver.drop_late,
            if v.intact { "intact" } else { "CORRUPTED" }
        );
    }
    outln!(
        "bottleneck: {} frames out, {} dropped ({} queue full, {} random loss)",
        report.bottleneck.frames_out,
        report.bottleneck.dropped(),
        report.bottleneck.dropped_queue_full,
        report.bottleneck.dropped_random
    );
    Ok(())
}
