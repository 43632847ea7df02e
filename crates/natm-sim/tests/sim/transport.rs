//! The transport through the simulated network: what a user would notice about each
//! service under loss, bursts, duplication and corruption.

use std::time::Duration;

use natm_proto::transport::{FlowKind, TransportConfig};
use natm_sim::scenario::{run, Report, Scenario, VcSpec};
use natm_sim::GilbertElliott;
use proptest::prelude::*;

fn scenario(cfg: TransportConfig, bytes: u64, msg_size: u64) -> Scenario {
    Scenario {
        vcs: vec![VcSpec {
            label: "vc".into(),
            config: cfg,
            bytes,
            msg_size,
            start: Duration::ZERO,
        }],
        time_limit: Duration::from_secs(3600),
        ..Scenario::default()
    }
}

fn small_reliable(flow: FlowKind) -> TransportConfig {
    let mut c = TransportConfig::reliable();
    c.flow = flow;
    c.window = 64;
    c.rcv_buf = 64 * 4096;
    c.snd_buf = 128 * 4096;
    c.connect_attempts = 60;
    c.close_attempts = 60;
    c.max_timeouts = 60;
    c
}

fn bounded(r: &Report, cfg: &TransportConfig) -> bool {
    r.vcs
        .iter()
        .all(|v| v.receiver.max_rcv_buffered <= (cfg.rcv_buf + cfg.tpdu_size as usize) as u64)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Reliable VCs deliver every message exactly once, in order, byte-exact, and close,
    /// whatever the loss (0–50 %), bursts, duplication and corruption.
    #[test]
    fn reliable_is_exact_under_any_impairment(
        seed in any::<u64>(),
        loss in 0.0f64..0.5,
        ack_loss in 0.0f64..0.2,
        bursty in any::<bool>(),
        dup in 0.0f64..0.05,
        corrupt in 0.0f64..0.05,
        msg_size in prop_oneof![1u64..64, 64u64..70_000, 70_000u64..(1 << 20)],
        window_flow in any::<bool>(),
    ) {
        let flow = if window_flow { FlowKind::Window } else { FlowKind::PacketPair };
        let cfg = small_reliable(flow);
        let bytes = (msg_size * 3).clamp(1, 1 << 20);
        let mut s = scenario(cfg.clone(), bytes, msg_size);
        s.seed = seed;
        s.loss = if bursty { 0.0 } else { loss };
        s.burst = bursty.then(|| GilbertElliott::new(loss / 10.0, 0.3));
        s.ack_loss = ack_loss;
        s.duplicate = dup;
        s.corrupt = corrupt;
        s.round_robin = !window_flow;
        let r = run(&s).unwrap();
        let v = &r.vcs[0];
        prop_assert!(v.intact, "corrupted data delivered");
        prop_assert_eq!(v.bad_messages, 0);
        prop_assert_eq!(v.bytes_delivered, bytes);
        prop_assert!(v.closed, "close did not complete: {:?}", v.sender);
        prop_assert!(bounded(&r, &cfg));
    }

    /// Unreliable VCs never deliver a corrupted, partial or duplicated message, and
    /// best effort never retransmits.
    #[test]
    fn unreliable_never_delivers_damage(
        seed in any::<u64>(),
        loss in 0.0f64..0.5,
        dup in 0.0f64..0.2,
        corrupt in 0.0f64..0.1,
        msg_size in 1u64..100_000,
    ) {
        let cfg = TransportConfig::best_effort();
        let bytes = (msg_size * 40).min(4 << 20);
        let mut s = scenario(cfg.clone(), bytes, msg_size);
        s.seed = seed;
        s.loss = loss;
        s.duplicate = dup;
        s.corrupt = corrupt;
        s.queue_frames = 1 << 20;
        let r = run(&s).unwrap();
        let v = &r.vcs[0];
        prop_assert!(v.intact);
        prop_assert_eq!(v.bad_messages, 0, "partial, duplicate or reordered message");
        prop_assert!(v.bytes_delivered <= bytes);
        prop_assert_eq!(v.sender.retransmissions(), 0);
        prop_assert!(bounded(&r, &cfg));
    }
}

/// Inputs that once failed (the close gave up after 6 attempts at 58 % loss of
/// CLOSE or CLOSE-ACK); kept as plain tests.
#[test]
fn reliable_closes_under_extreme_loss() {
    for (seed, loss, ack_loss, dup, corrupt, msg_size) in [
        (
            10711150267446953119u64,
            0.484,
            0.189,
            0.049,
            0.033,
            754_920u64,
        ),
        (8230404334514006268, 0.367, 0.151, 0.010, 0.039, 1),
        (9869063967233806182, 0.336, 0.191, 0.029, 0.042, 4097),
    ] {
        let cfg = small_reliable(FlowKind::PacketPair);
        let bytes = (msg_size * 3).clamp(1, 1 << 20);
        let mut s = scenario(cfg, bytes, msg_size);
        s.seed = seed;
        s.loss = loss;
        s.ack_loss = ack_loss;
        s.duplicate = dup;
        s.corrupt = corrupt;
        let r = run(&s).unwrap();
        let v = &r.vcs[0];
        assert!(
            v.intact && v.closed && v.bytes_delivered == bytes,
            "{seed}: {:?}",
            v.sender
        );
    }
}

#[test]
fn guaranteed_service_with_feedback_and_no_error_control_works() {
    // seed 000 §8: "non error-controlled but feedback flow controlled" must work too.
    let mut cfg = TransportConfig::best_effort();
    cfg.flow = FlowKind::PacketPair;
    let mut s = scenario(cfg, 20_000_000, 8192);
    s.loss = 0.01;
    let r = run(&s).unwrap();
    let v = &r.vcs[0];
    assert!(v.intact);
    assert_eq!(v.bad_messages, 0);
    assert!(v.receiver.acks_sent > 0, "feedback flow control needs ACKs");
    assert_eq!(v.sender.retransmissions(), 0);
    let share = v.bytes_delivered as f64 / 20e6;
    assert!(
        (0.9..=1.0).contains(&share),
        "about 1% of 2-TPDU messages lost: {share} {:?} {:?}",
        v.sender,
        v.receiver
    );
}

#[test]
fn every_combination_of_services_delivers() {
    use natm_proto::transport::Semantics;
    for ec in [false, true] {
        for flow in [
            FlowKind::None,
            FlowKind::LeakyBucket,
            FlowKind::PacketPair,
            FlowKind::Window,
        ] {
            for sem in [Semantics::Message, Semantics::Stream] {
                let mut cfg = TransportConfig::best_effort();
                cfg.error_control = ec;
                cfg.flow = flow;
                cfg.semantics = sem;
                cfg.window = 64;
                if flow == FlowKind::LeakyBucket {
                    cfg.rate = 40_000_000;
                }
                let mut s = scenario(cfg, 4_000_000, 10_000);
                s.queue_frames = 512;
                let r = run(&s).unwrap();
                let v = &r.vcs[0];
                assert!(v.intact, "{ec} {flow:?} {sem:?}");
                assert_eq!(v.bad_messages, 0, "{ec} {flow:?} {sem:?}");
                if ec || flow != FlowKind::None {
                    // Error control recovers losses; flow control avoids them (the
                    // only loss here is overflow of the bottleneck's buffer).
                    assert_eq!(
                        v.bytes_delivered, 4_000_000,
                        "{ec} {flow:?} {sem:?}: {:?}",
                        v.sender
                    );
                } else {
                    // Best effort at 10x the bottleneck rate loses what overflows.
                    assert!(v.bytes_delivered > 0 && v.bytes_delivered < 4_000_000);
                }
                if ec {
                    assert!(v.closed, "{flow:?} {sem:?}");
                }
            }
        }
    }
}

/// Issue 17: a reliable VC at 20 ms RTT with lost-retransmission detection (the
/// default) and a 4 MiB window (1024 TPDUs, `window=1024`) keeps at least 0.93 of
/// (1 − p)·C at 5 % and 10 % random loss, and its window never stops it. With the
/// paper's rule and the default window of 256 the sender stalled on its window behind
/// holes at the head (0.79 and 0.61 of (1 − p)·C, thousands of stalls). The default
/// window stays 256: on a real path of fragmented TPDUs a 4 MiB window can fill the
/// receiving kernel's reassembly memory (docs/PERFORMANCE.md).
#[test]
fn a_4mib_window_keeps_its_goodput_under_loss_at_20ms_rtt() {
    let cfg = TransportConfig {
        window: 1024,
        rcv_buf: 4 << 20,
        snd_buf: 8 << 20,
        ..TransportConfig::reliable()
    };
    for loss in [0.05, 0.10] {
        let s = Scenario {
            rtt: Duration::from_millis(20),
            loss,
            seed: 7,
            time_limit: Duration::from_secs(4),
            ..scenario(cfg.clone(), u64::MAX / 4, 65536)
        };
        let r = run(&s).unwrap();
        let v = &r.vcs[0];
        let goodput = v.bytes_delivered as f64 * 8.0 / r.sim_time.as_secs_f64();
        let ideal = (1.0 - loss) * s.rate_bps as f64;
        assert!(
            goodput >= 0.93 * ideal,
            "{loss}: {goodput:.0} bit/s is {:.3} of (1 - p)C",
            goodput / ideal
        );
        assert_eq!(v.sender.window_stalls, 0, "{loss}: window stalls");
        assert_eq!(v.sender.timeouts, 0, "{loss}: timeouts");
        assert!(v.bad_messages == 0 && v.messages_lost == 0);
    }
}
