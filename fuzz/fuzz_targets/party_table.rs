//! Drives a point-to-multipoint call's party table (Q.2971 party states) with an
//! arbitrary sequence of adds, answers, drops and timer runs, as a hostile or broken
//! peer could send them: it never panics, stays within its bounds, and an answer
//! for a reference it does not hold changes nothing.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use natm_proto::sig::party::{PartyConfig, PartyTable};
use natm_proto::time::Instant;
use natm_proto::wire::q2931::EndpointState;

fuzz_target!(|data: &[u8]| {
    let cfg = PartyConfig {
        max_parties: 8,
        max_pending: 4,
        ..PartyConfig::default()
    };
    let mut t = PartyTable::new(cfg);
    let mut now = Instant::ZERO;
    for op in data.chunks_exact(3) {
        let eref = u16::from_be_bytes([op[1], op[2]]) & 0x7FFF;
        let before = t.len();
        let held = t.state(eref) != EndpointState::NULL;
        let r = match op[0] % 7 {
            0 => t.add(now, ()).map(|_| ()),
            1 => t.on_ack(eref),
            2 => t.on_reject(eref, op[1]),
            3 => t.drop_party(now, eref, op[1]),
            4 => t.on_drop_ack(eref),
            5 => t.on_drop(eref, op[1]),
            _ => {
                now = now + Duration::from_millis(u64::from(op[1]) * 100);
                t.poll_timeout(now);
                Ok(())
            }
        };
        if op[0] % 7 != 0 && op[0] % 7 != 6 && !held {
            assert!(r.is_err());
            assert_eq!(t.len(), before);
        }
        assert!(t.len() <= cfg.max_parties);
        assert!(t.drain_out().len() <= cfg.max_parties);
        t.drain_events();
    }
});
