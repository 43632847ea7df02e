//! Fuzzes the SSCOP state machine: arbitrary PDU sequences, user requests and time
//! steps into one `Sscop`.
#![no_main]

use std::time::Duration;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use natm_proto::sig::sscop::{Sscop, SscopConfig, SscopEvent};
use natm_proto::time::Instant;
use natm_proto::wire::sscop::Pdu;

fuzz_target!(|data: &[u8]| {
    let cfg = SscopConfig {
        window: 16,
        max_buffered: 32,
        max_out_queue: 64,
        ..SscopConfig::default()
    };
    let mut s = Sscop::new(cfg.clone());
    let mut now = Instant::from_nanos(1);
    let mut rest = data;
    // Records: op (1) | len (1) | len octets.
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        match op % 8 {
            0 | 1 | 2 => s.handle_pdu(now, body),
            3 => {
                now += Duration::from_millis(u64::from(*len) * 50);
                s.handle_timeout(now);
            }
            4 => {
                let _ = s.send(now, Bytes::copy_from_slice(body));
            }
            5 => s.establish(now),
            6 => s.release(now, body),
            _ => s.resync(now),
        }
        while let Some(p) = s.poll_transmit() {
            assert!(Pdu::parse(&p).is_ok(), "emitted PDUs parse");
        }
        let mut delivered = 0;
        while let Some(e) = s.poll_event() {
            if let SscopEvent::Data(d) = e {
                assert!(d.len() <= 4096);
                delivered += 1;
            }
        }
        assert!(
            delivered <= 1 + cfg.window as usize,
            "one SD delivers at most a window"
        );
        assert!(s.buffered() <= cfg.max_buffered, "send buffer bounded");
        assert!(
            !s.is_idle() || s.poll_timeout().is_none(),
            "an idle end runs no timer"
        );
    }
});
