//! Feeds a sender and a receiver PSB arbitrary frame sequences (each frame prefixed by
//! a 2-byte length and a 1-byte time step): neither panics, and neither holds more than
//! its configured buffers, whatever arrives.
#![no_main]

use std::time::Duration;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use natm_proto::flow::NoFlow;
use natm_proto::time::Instant;
use natm_proto::transport::{Psb, TransportConfig};

fuzz_target!(|data: &[u8]| {
    let mut cfg = TransportConfig::reliable();
    cfg.window = 16;
    cfg.tpdu_size = 512;
    cfg.rcv_buf = 8 * 512;
    cfg.snd_buf = 16 * 512;
    let mut now = Instant::from_nanos(1);
    let mut tx = Psb::connect(cfg.clone(), Box::new(NoFlow), now);
    let mut rx = Psb::listen(cfg.clone());
    let _ = tx.send(&[7u8; 3000], true);
    let mut rest = data;
    while rest.len() >= 3 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 3);
        now += Duration::from_micros(u64::from(rest[2]) * 100);
        let frame = Bytes::copy_from_slice(&rest[3..3 + len]);
        rest = &rest[3 + len..];
        tx.handle_frame(now, frame.clone());
        rx.handle_frame(now, frame);
        for p in [&mut tx, &mut rx] {
            if p.poll_timeout().is_some_and(|t| t <= now) {
                p.handle_timeout(now);
            }
            let mut n = 0;
            while p.poll_transmit(now).is_some() {
                n += 1;
                assert!(n < 10_000, "poll_transmit never runs dry");
            }
            while p.poll_event().is_some() {}
        }
        while let Ok(Some(_)) = rx.recv_chunk() {}
        assert!(rx.recv_buffered() <= cfg.rcv_buf + cfg.tpdu_size as usize);
        assert!(tx.send_buffered() <= cfg.snd_buf);
    }
});
