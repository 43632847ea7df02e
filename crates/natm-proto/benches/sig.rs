//! The signalling core's own cost: one whole call (SETUP, CALL PROCEEDING, CONNECT,
//! CONNECT ACK, RELEASE, RELEASE COMPLETE) through two `Saal`s joined in memory, i.e.
//! Q.2931 call control plus SSCOP SDs, with no I/O. The reference in the same run is
//! the codec alone: building and parsing the same six messages (`Message::to_bytes`
//! and `Message::parse`), which every implementation pays.
//!
//! A third case runs the two `Saal`s over UDP on loopback, one thread each, the SSCOP
//! PDUs in the UDP adaptor's VC frames (kind signalling, VPI 0/VCI 5): the time from
//! `setup` to the caller's `Connected` event, i.e. SETUP, CONNECT and (not waited for)
//! CONNECT ACK through two sockets and the kernel. No daemon and no IPC: the floor
//! under sigd's setup latency.
//!
//! `cargo bench --bench sig -- --warm-up-time 1 --measurement-time 3`; the figures are
//! in `docs/PERFORMANCE.md` ("Signalling core").

use std::hint::black_box;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use natm_proto::sig::{CallAccept, CallEvent, CallParams, Saal, SaalConfig, Sap, SigEvent};
use natm_proto::time::Instant;
use natm_proto::wire::addr::Aesa;
use natm_proto::wire::q2931::{
    AalParams, CallRef, Cause, CauseValue, ConnectionId, Location, Message, MessageType,
    NatmParams, PartyAddress,
};
use natm_proto::wire::vcframe::{FrameKind, Repr};

fn params() -> CallParams {
    let mut a = [0u8; 20];
    a[0] = 0x47;
    a[19] = 1;
    CallParams {
        dtl: None,
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
        multipoint: false,
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

/// The virtual clock of a loopback run: nanoseconds since `base`.
fn clock(base: std::time::Instant) -> Instant {
    Instant::from_nanos(u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// Sends every PDU the link has, each as one VC frame (VPI 0/VCI 5).
fn flush(s: &mut Saal, sock: &UdpSocket, buf: &mut Vec<u8>) {
    let header = Repr::new(FrameKind::Signalling, 0, 5).to_bytes();
    while let Some(pdu) = s.poll_transmit() {
        buf.clear();
        buf.extend_from_slice(&header);
        buf.extend_from_slice(&pdu);
        sock.send(buf).unwrap();
    }
}

/// Waits for one frame (at most until the link's next deadline, 1–20 ms) and runs
/// what is due.
fn drive(s: &mut Saal, sock: &UdpSocket, base: std::time::Instant, rx: &mut [u8]) {
    let now = clock(base);
    let wait = s
        .poll_timeout()
        .map_or(Duration::from_millis(20), |d| {
            d.saturating_duration_since(now)
        })
        .clamp(Duration::from_millis(1), Duration::from_millis(20));
    sock.set_read_timeout(Some(wait)).unwrap();
    if let Ok(n) = sock.recv(rx) {
        if let Ok((_, pdu)) = Repr::parse_bytes(&rx[..n]) {
            s.handle_frame(clock(base), pdu);
        }
    }
    let now = clock(base);
    if s.poll_timeout().is_some_and(|d| d <= now) {
        s.handle_timeout(now);
    }
}

/// The called side: accepts every call at once until `stop`.
fn callee(sock: UdpSocket, base: std::time::Instant, stop: Arc<AtomicBool>) {
    let mut b = Saal::new(SaalConfig::default());
    let (mut rx, mut tx) = (vec![0u8; 70_000], Vec::new());
    while !stop.load(Ordering::Relaxed) {
        drive(&mut b, &sock, base, &mut rx);
        while let Some(e) = b.poll_event() {
            if let SigEvent::Call(CallEvent::Incoming { call, .. }) = e {
                b.accept(clock(base), call, CallAccept::default()).unwrap();
            }
        }
        flush(&mut b, &sock, &mut tx);
    }
}

fn loopback(c: &mut Criterion) {
    let sa = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sb = UdpSocket::bind("127.0.0.1:0").unwrap();
    sa.connect(sb.local_addr().unwrap()).unwrap();
    sb.connect(sa.local_addr().unwrap()).unwrap();
    let base = std::time::Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let peer = {
        let stop = stop.clone();
        thread::spawn(move || callee(sb, base, stop))
    };
    let mut a = Saal::new(SaalConfig::default());
    let (mut rx, mut tx) = (vec![0u8; 70_000], Vec::new());
    a.start(clock(base));
    flush(&mut a, &sa, &mut tx);
    while !a.is_up() {
        drive(&mut a, &sa, base, &mut rx);
        flush(&mut a, &sa, &mut tx);
    }
    let p = params();
    let mut g = c.benchmark_group("signalling");
    g.throughput(Throughput::Elements(1));
    g.bench_function("setup to Connected over UDP loopback", |bch| {
        bch.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t0 = std::time::Instant::now();
                let ca = a.setup(clock(base), p.clone()).unwrap();
                flush(&mut a, &sa, &mut tx);
                'connected: loop {
                    drive(&mut a, &sa, base, &mut rx);
                    flush(&mut a, &sa, &mut tx);
                    while let Some(e) = a.poll_event() {
                        if matches!(e, SigEvent::Call(CallEvent::Connected { call, .. }) if call == ca)
                        {
                            break 'connected;
                        }
                    }
                }
                total += t0.elapsed();
                // Release outside the timed part, and wait until it is complete.
                let cause = Cause::new(Location::User, CauseValue::NormalCallClearing);
                a.release(clock(base), ca, cause).unwrap();
                flush(&mut a, &sa, &mut tx);
                while a.calls().call_count() > 0 {
                    drive(&mut a, &sa, base, &mut rx);
                    flush(&mut a, &sa, &mut tx);
                }
                while a.poll_event().is_some() {}
            }
            total
        });
    });
    g.finish();
    stop.store(true, Ordering::Relaxed);
    peer.join().unwrap();
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
                natm_proto::wire::q2931::Ie::from(AalParams::aal5(9188, 9188)),
                natm_proto::wire::q2931::Ie::from(natm_proto::sig::call::traffic_descriptor(
                    &p.qos, 353_207,
                )),
                natm_proto::wire::q2931::Ie::from(natm_proto::wire::q2931::CalledNumber {
                    ton: natm_proto::wire::q2931::TypeOfNumber::Unknown,
                    address: p.called.clone(),
                }),
                natm_proto::wire::q2931::Ie::from(p.natm.clone()),
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

criterion_group!(benches, bench, loopback);
criterion_main!(benches);
