//! The signalling core's own cost: one whole call (SETUP, CALL PROCEEDING, CONNECT,
//! CONNECT ACK, RELEASE, RELEASE COMPLETE) through two `Saal`s joined in memory, i.e.
//! Q.2931 call control plus SSCOP SDs, with no I/O. The reference in the same run is
//! the codec alone: building and parsing the same six messages (`Message::to_bytes`
//! and `Message::parse`), which every implementation pays.
//!
//! `cargo bench --bench sig -- --warm-up-time 1 --measurement-time 3`; the figures are
//! in `docs/PERFORMANCE.md` ("Signalling core").

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use natm::sig::{CallAccept, CallEvent, CallParams, Saal, SaalConfig, Sap, SigEvent};
use natm::time::Instant;
use natm::wire::addr::Aesa;
use natm::wire::q2931::{
    AalParams, CallRef, Cause, CauseValue, ConnectionId, Location, Message, MessageType,
    NatmParams, PartyAddress,
};

fn params() -> CallParams {
    let mut a = [0u8; 20];
    a[0] = 0x47;
    a[19] = 1;
    CallParams {
        called: PartyAddress::Aesa(Aesa::new(a).unwrap()),
        calling: None,
        sap: Some(Sap::new(b"bench").unwrap()),
        qos: "cbr:pcr=10Mbps".parse().unwrap(),
        natm: NatmParams {
            data_endpoint: Some("127.0.0.1:40000".parse().unwrap()),
            cookie: Some(1),
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, 32)),
    }
}

fn shuttle(now: Instant, a: &mut Saal, b: &mut Saal) {
    loop {
        let mut moved = false;
        while let Some(f) = a.poll_transmit() {
            b.handle_frame(now, &f);
            moved = true;
        }
        while let Some(f) = b.poll_transmit() {
            a.handle_frame(now, &f);
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

/// One call from SETUP to RELEASE COMPLETE; the clock moves 1 µs per call.
fn one_call(now: &mut Instant, a: &mut Saal, b: &mut Saal, p: &CallParams) {
    *now += Duration::from_micros(1);
    let t = *now;
    let ca = a.setup(t, p.clone()).unwrap();
    shuttle(t, a, b);
    let mut cb = None;
    while let Some(e) = b.poll_event() {
        if let SigEvent::Call(CallEvent::Incoming { call, .. }) = e {
            cb = Some(call);
        }
    }
    let cb = cb.unwrap();
    b.proceeding(t, cb).unwrap();
    b.accept(t, cb, CallAccept::default()).unwrap();
    shuttle(t, a, b);
    a.release(
        t,
        ca,
        Cause::new(Location::User, CauseValue::NormalCallClearing),
    )
    .unwrap();
    shuttle(t, a, b);
    while a.poll_event().is_some() {}
    while b.poll_event().is_some() {}
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("signalling");
    g.throughput(Throughput::Elements(1));
    g.bench_function("call through two Saals", |bch| {
        let mut a = Saal::new(SaalConfig::default());
        let mut b = Saal::new(SaalConfig::default());
        let mut now = Instant::from_nanos(1);
        a.start(now);
        shuttle(now, &mut a, &mut b);
        let p = params();
        bch.iter(|| {
            one_call(&mut now, &mut a, &mut b, &p);
            // The window is 128 SDs and acknowledgements come on SSCOP's POLL timer:
            // jump the virtual clock to it whenever half the window is used (the
            // POLL/STAT cost is then in the figure, amortised over ~20 calls).
            if a.sscop().buffered() >= 64 || b.sscop().buffered() >= 64 {
                for _ in 0..2 {
                    let d = [a.poll_timeout(), b.poll_timeout()]
                        .into_iter()
                        .flatten()
                        .min()
                        .unwrap();
                    now = now.max(d);
                    a.handle_timeout(now);
                    b.handle_timeout(now);
                    shuttle(now, &mut a, &mut b);
                }
                assert!(a.is_up() && b.is_up());
            }
        });
    });
    g.bench_function("codec only (same six messages)", |bch| {
        let p = params();
        let cr = CallRef::new(1);
        bch.iter(|| {
            let mut setup = Message::new(MessageType::Setup, cr);
            for ie in [
                natm::wire::q2931::Ie::from(AalParams::aal5(9188, 9188)),
                natm::wire::q2931::Ie::from(natm::sig::call::traffic_descriptor(&p.qos, 353_207)),
                natm::wire::q2931::Ie::from(natm::wire::q2931::CalledNumber {
                    ton: natm::wire::q2931::TypeOfNumber::Unknown,
                    address: p.called.clone(),
                }),
                natm::wire::q2931::Ie::from(p.natm.clone()),
            ] {
                setup.push(ie);
            }
            let msgs = [
                setup,
                Message::new(MessageType::CallProceeding, cr.reply()),
                Message::new(MessageType::Connect, cr.reply())
                    .with(AalParams::aal5(9188, 9188))
                    .with(NatmParams::default()),
                Message::new(MessageType::ConnectAck, cr),
                Message::new(MessageType::Release, cr)
                    .with(Cause::new(Location::User, CauseValue::NormalCallClearing)),
                Message::new(MessageType::ReleaseComplete, cr.reply()),
            ];
            for m in &msgs {
                let b = m.to_bytes().unwrap();
                black_box(Message::parse(&b).unwrap());
            }
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
