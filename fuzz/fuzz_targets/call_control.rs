//! Fuzzes Q.2931 call control: arbitrary messages, application requests, link
//! changes and time steps into one `CallControl`, with the party messages of a
//! point-to-multipoint call (Q.2971) among them.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use natm_proto::sig::call::{
    CallAccept, CallConfig, CallControl, CallEvent, CallId, CallParams, PartyRef, MAX_PARTIES,
};
use natm_proto::time::Instant;
use natm_proto::wire::addr::Aesa;
use natm_proto::wire::q2931::{Cause, CauseValue, Location, Message, NatmParams, PartyAddress};
use natm_proto::wire::qos::Qos;

fuzz_target!(|data: &[u8]| {
    let cfg = CallConfig {
        max_calls: 4,
        max_out_queue: 32,
        ..CallConfig::default()
    };
    let mut c = CallControl::new(cfg);
    let mut now = Instant::from_nanos(1);
    c.link_up(now);
    let mut calls: Vec<CallId> = Vec::new();
    let mut parties: Vec<(CallId, PartyRef)> = Vec::new();
    let called = PartyAddress::Aesa(Aesa::new([0x47; 20]).unwrap());
    let mut rest = data;
    // Records: op (1) | len (1) | len octets (a message for op 0-3).
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        let pick = calls.get(usize::from(*len) % calls.len().max(1)).copied();
        let normal = Cause::new(Location::User, CauseValue::NormalCallClearing);
        let party = parties.get(usize::from(*len) % parties.len().max(1)).copied();
        match op % 15 {
            0..=3 => c.handle_message(now, body),
            4 => {
                now += Duration::from_millis(u64::from(*len) * 100);
                c.handle_timeout(now);
            }
            5 => {
                let p = CallParams {
                    called: called.clone(),
                    calling: None,
                    sap: None,
                    qos: Qos::best_effort(),
                    natm: NatmParams::default(),
                    conn_id: None,
                    multipoint: false,
                    dtl: None,
                };
                if let Ok(id) = c.setup(now, p) {
                    calls.push(id);
                }
            }
            6 => {
                if let Some(id) = pick {
                    let _ = c.accept(now, id, CallAccept::default());
                }
            }
            7 => {
                if let Some(id) = pick {
                    let _ = c.proceeding(id);
                }
            }
            8 => {
                if let Some(id) = pick {
                    let _ = c.release(now, id, normal);
                }
            }
            9 => {
                if let Some(id) = pick {
                    let _ = c.status_enquiry(now, id);
                }
            }
            12 => {
                if let Some(id) = pick {
                    let p = CallParams {
                        called: called.clone(),
                        calling: None,
                        sap: None,
                        qos: Qos::best_effort(),
                        natm: NatmParams::default(),
                        conn_id: None,
                        multipoint: false,
                        dtl: None,
                    };
                    let eref = u16::from(*len) | (u16::from(body.first().copied().unwrap_or(0)) << 8);
                    if c.add_party(id, eref, &p).is_ok() {
                        parties.push((id, PartyRef { value: eref, ours: true }));
                    }
                }
            }
            13 => {
                if let Some((id, p)) = party {
                    let _ = c.drop_party(id, p, normal);
                }
            }
            14 => {
                if let Some((id, p)) = party {
                    if body.first().is_some_and(|b| b & 1 == 0) {
                        let _ = c.add_party_ack(id, p, &CallAccept::default());
                    } else {
                        let _ = c.add_party_reject(id, p, normal);
                    }
                }
            }
            10 => c.link_down(now),
            _ => c.link_up(now),
        }
        while let Some(m) = c.poll_message() {
            assert!(Message::parse(&m).is_ok(), "emitted messages parse");
        }
        while let Some(e) = c.poll_event() {
            match e {
                CallEvent::Incoming { call, .. } => calls.push(call),
                CallEvent::PartyAddRequested { call, party, .. } => {
                    assert!(calls.contains(&call), "a party of an unknown call");
                    assert!(!party.ours && party.value != 0);
                    parties.push((call, party));
                }
                CallEvent::PartyAdded { call, party, .. }
                | CallEvent::PartyRejected { call, party, .. }
                | CallEvent::PartyDropped { call, party, .. } => {
                    assert!(calls.contains(&call), "a party of an unknown call");
                    assert!(c.party_state(call, party).is_some() == matches!(e, CallEvent::PartyAdded { .. }));
                }
                CallEvent::Released { call, .. } => {
                    assert!(calls.contains(&call), "released an unknown call");
                    parties.retain(|(x, _)| *x != call);
                    calls.retain(|x| *x != call);
                    assert!(c.state(call).is_none(), "released calls are gone");
                }
                _ => {}
            }
        }
        assert!(c.call_count() <= 4, "calls bounded");
        parties.retain(|(id, p)| c.party_state(*id, *p).is_some());
        for id in &calls {
            let n = parties.iter().filter(|(x, _)| x == id).count();
            assert!(n <= MAX_PARTIES, "parties of a call bounded");
        }
        assert_eq!(
            c.call_count(),
            calls.len(),
            "every call ends in exactly one Released"
        );
    }
});
