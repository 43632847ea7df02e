//! Feeds the two ends of a guaranteed VC (no ACKs: SYNC probes, leaky bucket) arbitrary
//! frame sequences, interleaved with QoS changes the sender asks for: neither end
//! panics, the receiver answers at most one SYNC per 10 ms, and the sender's rate
//! never leaves the agreed bounds whatever QOS-ACKs arrive.
//!
//! Input: records of a 2-byte length, a 1-byte time step (×1 ms) and a 1-byte
//! action (odd: ask for the rate `action × 100 kbit/s`), then the frame.
#![no_main]

use std::time::Duration;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use natm_proto::flow::{self, FlowKind};
use natm_proto::time::Instant;
use natm_proto::transport::{Psb, TransportConfig};
use natm_proto::wire::tpdu::TpduType;

fuzz_target!(|data: &[u8]| {
    let mut cfg = TransportConfig::guaranteed(8_000_000);
    cfg.flow = FlowKind::LeakyBucket;
    cfg.min_rate = 1_000_000;
    cfg.cookie = Some(0x5eed);
    cfg.sync_interval = Some(Duration::from_millis(10));
    let mut now = Instant::from_nanos(1);
    let lb = flow::build(FlowKind::LeakyBucket, &cfg);
    let mut tx = Psb::established_sender(cfg.clone(), lb, now);
    let mut rx = Psb::established_receiver(cfg.clone());
    let mut rest = data;
    let mut echoes = 0u64;
    while rest.len() >= 4 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 4);
        let step = Duration::from_millis(u64::from(rest[2]));
        now += step;
        let action = rest[3];
        let frame = Bytes::copy_from_slice(&rest[4..4 + len]);
        rest = &rest[4 + len..];
        if action & 1 == 1 {
            let _ = tx.set_qos(now, u64::from(action) * 100_000);
        }
        let _ = tx.send(&[action; 100], true);
        tx.handle_frame(now, frame.clone());
        rx.handle_frame(now, frame);
        for (i, p) in [&mut tx, &mut rx].into_iter().enumerate() {
            if p.poll_timeout().is_some_and(|t| t <= now) {
                p.handle_timeout(now);
            }
            let mut n = 0;
            while let Some(t) = p.poll_transmit(now) {
                n += 1;
                assert!(n < 10_000, "poll_transmit never runs dry");
                if i == 1 && t.header.ty == TpduType::SyncEcho {
                    echoes += 1;
                }
            }
            while p.poll_event().is_some() {}
        }
        let elapsed = now.saturating_duration_since(Instant::from_nanos(1));
        assert!(
            echoes <= elapsed.as_millis() as u64 / 10 + 1,
            "{echoes} echoes in {elapsed:?}"
        );
        let rate = tx.qos_rate();
        assert!((1_000_000..=8_000_000).contains(&rate), "rate {rate} left the bounds");
        assert!(tx.send_buffered() <= cfg.snd_buf);
    }
});
