//! Fuzzes Q.2963.1 modification in call control: two `CallControl`s with an active
//! call between them; arbitrary messages (raw, or mutated MODIFY REQUEST /
//! ACKNOWLEDGE / REJECT on the call's reference), modify requests and answers, and
//! time steps. Checks emitted messages parse and the call's sub-state stays sane.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use natm_proto::sig::call::{
    CallAccept, CallConfig, CallControl, CallEvent, CallParams, ModifyState,
};
use natm_proto::time::Instant;
use natm_proto::wire::addr::Aesa;
use natm_proto::wire::q2931::{
    CallState, Cause, CauseValue, CellRates, Location, Message, MessageType, NatmParams,
    PartyAddress, TrafficDescriptor,
};
use natm_proto::wire::qos::Qos;

fn pump(now: Instant, a: &mut CallControl, b: &mut CallControl) {
    for _ in 0..64 {
        let mut moved = false;
        while let Some(m) = a.poll_message() {
            assert!(Message::parse(&m).is_ok(), "emitted messages parse");
            b.handle_message(now, &m);
            moved = true;
        }
        while let Some(m) = b.poll_message() {
            assert!(Message::parse(&m).is_ok(), "emitted messages parse");
            a.handle_message(now, &m);
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let cfg = CallConfig {
        max_calls: 2,
        max_out_queue: 32,
        ..CallConfig::default()
    };
    let mut a = CallControl::new(cfg.clone());
    let mut b = CallControl::new(cfg);
    let mut now = Instant::from_nanos(1);
    a.link_up(now);
    b.link_up(now);
    let p = CallParams {
        called: PartyAddress::Aesa(Aesa::new([0x47; 20]).unwrap()),
        calling: None,
        sap: None,
        qos: Qos::best_effort(),
        natm: NatmParams::default(),
        conn_id: None,
        multipoint: false,
        dtl: None,
    };
    let Ok(ca) = a.setup(now, p) else { return };
    pump(now, &mut a, &mut b);
    let Some(cb) = std::iter::from_fn(|| b.poll_event()).find_map(|e| match e {
        CallEvent::Incoming { call, .. } => Some(call),
        _ => None,
    }) else {
        return;
    };
    let _ = b.accept(now, cb, CallAccept::default());
    pump(now, &mut a, &mut b);
    let Some(cref) = a.call_ref(ca) else { return };
    let mut rest = data;
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        let td = TrafficDescriptor {
            fwd: CellRates {
                pcr01: Some(u32::from(*len) * 1000),
                ..CellRates::default()
            },
            ..TrafficDescriptor::default()
        };
        let cause = Cause::new(Location::User, CauseValue::UserCellRateUnavailable);
        match op % 9 {
            0 => b.handle_message(now, body),
            1 => {
                // A modification message on the call's reference with fuzzed IEs.
                let kind = [
                    MessageType::ModifyRequest,
                    MessageType::ModifyAck,
                    MessageType::ModifyReject,
                    MessageType::ConnectionAvailable,
                ][usize::from(*len) % 4];
                if let Ok(mut m) = Message::new(kind, cref.reply()).to_bytes() {
                    m.extend_from_slice(body);
                    let blen = u16::try_from(m.len() - 9).unwrap_or(0).to_be_bytes();
                    m[7..9].copy_from_slice(&blen);
                    a.handle_message(now, &m);
                }
            }
            2 => {
                let _ = a.modify(now, ca, td);
            }
            3 => {
                let _ = b.modify(now, cb, td);
            }
            4 => {
                let _ = b.modify_accept(cb);
                let _ = a.modify_accept(ca);
            }
            5 => {
                let _ = b.modify_reject(cb, cause.clone());
                let _ = a.modify_reject(ca, cause);
            }
            6 => pump(now, &mut a, &mut b),
            7 => {
                now += Duration::from_millis(u64::from(*len) * 500);
                a.handle_timeout(now);
                b.handle_timeout(now);
            }
            _ => a.handle_message(now, body),
        }
        for (c, id) in [(&a, ca), (&b, cb)] {
            if let Some(st) = c.modify_state(id) {
                if *st != ModifyState::Idle {
                    assert_eq!(c.state(id), Some(CallState::ACTIVE), "modify only when active");
                }
            }
        }
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
        while let Some(m) = a.poll_message() {
            assert!(Message::parse(&m).is_ok(), "emitted messages parse");
        }
    }
});
