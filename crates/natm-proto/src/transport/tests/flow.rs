//! The flow controllers of `crate::flow` driven through real PSBs on the `Pair`
//! harness: what the application receives, not what the controller thinks.

use super::*;
use crate::flow::build;

/// Feed `m` (refilling as the buffer drains), run to the end, and call `watch` after
/// every step. Returns whether `send` ever answered `OverRate`.
fn run(p: &mut Pair, m: &[Vec<u8>], limit: Duration, mut watch: impl FnMut(&Pair)) -> bool {
    let end = p.now + limit;
    let (mut i, mut off, mut over) = (0, 0, false);
    while p.now < end {
        while i < m.len() {
            match p.tx.send(&m[i][off..], true) {
                Ok(n) if off + n == m[i].len() => (i, off) = (i + 1, 0),
                Ok(n) => {
                    off += n;
                    break;
                }
                Err(SendError::OverRate) => {
                    over = true;
                    break;
                }
                Err(SendError::WindowFull) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        if i == m.len() {
            p.tx.close();
        }
        if !p.step() {
            break;
        }
        watch(p);
        if p.tx.is_finished() && p.rx.is_finished() {
            break;
        }
    }
    p.pump();
    over
}

/// A guaranteed VC offered more than its rate: the application receives payload at
/// the bucket's rate within 0.5 %, and is told it is over rate.
#[test]
fn guaranteed_vc_delivers_at_the_bucket_rate() {
    let mut cfg = small(TransportConfig::guaranteed(8_000_000)); // 1 MB/s of payload
    cfg.flow = FlowKind::LeakyBucket;
    let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
    let m = msgs(&[32 * 1024; 64]);
    let mut arrivals: Vec<(Instant, usize)> = Vec::new();
    let over = run(&mut p, &m, Duration::from_secs(10), |p| {
        let n = p.delivered.iter().filter(|c| c.end).count();
        if n > arrivals.len() {
            arrivals.push((p.now, n));
        }
    });
    assert_eq!(p.messages(), m);
    assert!(over, "an application outpacing its bucket hears OverRate");
    // Whole messages are delivered; from the first to the last, 63 × 32 KiB.
    assert!(arrivals
        .iter()
        .all(|a| a.1 == arrivals.iter().position(|b| b == a).unwrap() + 1));
    let (t0, _) = arrivals[0];
    let (t1, _) = arrivals[arrivals.len() - 1];
    let got = 63.0 * 32768.0 / (t1 - t0).as_secs_f64();
    assert!((got - 1e6).abs() / 1e6 < 0.005, "delivered {got} B/s");
}

/// A burst of small messages queued at once — what `Connection::send_many` hands a
/// guaranteed VC in one call, for the engine to send in one GSO batch — leaves within
/// the leaky bucket, in virtual time: the first instant releases several TPDUs but no
/// more than the bucket's depth, at no instant has more than `depth + rate·t` left,
/// the rest goes at the rate, and every message arrives whole and in order.
#[test]
fn a_burst_queued_at_once_leaves_within_the_bucket() {
    use std::cell::RefCell;
    use std::rc::Rc;
    const RATE: f64 = 1e6; // B/s of payload
    const DEPTH: usize = 8 * 1024;
    let mut cfg = small(TransportConfig::guaranteed(8_000_000));
    cfg.flow = FlowKind::LeakyBucket;
    cfg.bucket = Some(DEPTH as u32);
    let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
    let released = Rc::new(RefCell::new(Vec::<usize>::new()));
    let log = released.clone();
    p.fate = Box::new(move |t, forward| {
        if forward && !t.payload.is_empty() {
            log.borrow_mut().push(t.payload.len());
        }
        1
    });
    p.drive(Duration::from_millis(20)); // the handshake
    let m = msgs(&[64; 400]);
    for (i, msg) in m.iter().enumerate() {
        assert_eq!(p.tx.send(msg, true), Ok(64), "message {i} of the burst");
    }
    let t0 = p.now;
    // (instant, payload released up to and including it)
    let mut at: Vec<(Instant, usize)> = Vec::new();
    let mut total = 0;
    while p.messages().len() < m.len() && p.now < t0 + Duration::from_secs(2) {
        let (now, before) = (p.now, released.borrow().len());
        if !p.step() {
            break;
        }
        let got: usize = released.borrow()[before..].iter().sum();
        if got > 0 {
            total += got;
            at.push((now, total));
        }
    }
    p.pump();
    assert_eq!(p.messages(), m);
    let first = at[0];
    assert_eq!(first.0, t0, "the burst starts at once");
    assert!(
        (2 * 64..=DEPTH).contains(&first.1),
        "first instant released {} B",
        first.1
    );
    for &(t, sent) in &at {
        let allowed = DEPTH as f64 + RATE * (t - t0).as_secs_f64() + 64.0;
        assert!(sent as f64 <= allowed, "{sent} B by {:?}", t - t0);
    }
    let (t1, sent1) = at[at.len() - 1];
    let rate = (sent1 - first.1) as f64 / (t1 - t0).as_secs_f64();
    assert!(
        (rate - RATE).abs() / RATE < 0.01,
        "after the bucketful: {rate} B/s"
    );
}

/// Reliable transfer over a 1 MB/s bottleneck (1056-byte frames, 1024 of payload):
/// packet-pair finds the bottleneck's payload rate, keeps the queue at the link near
/// its set-point where NoFlow fills it with the whole window, and loses no time.
#[test]
fn packet_pair_fills_the_bottleneck_with_a_short_queue() {
    let link_payload = 1024.0 / 1056e-6; // B/s
    let go = |pp: bool, loss: f64| {
        let mut cfg = small(TransportConfig::reliable());
        cfg.flow = if pp {
            FlowKind::PacketPair
        } else {
            FlowKind::None
        };
        let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
        p.per_byte = Duration::from_micros(1);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        p.fate = Box::new(move |t, fwd| {
            u8::from(!(fwd && t.header.ty == TpduType::Data && rng.chance(loss)))
        });
        let m = msgs(&[100_000; 6]);
        let start = p.now;
        let mut queue = Duration::ZERO;
        let mut rates = Vec::new();
        run(&mut p, &m, Duration::from_secs(30), |p| {
            let t = p.now - start;
            if t > Duration::from_millis(100) {
                queue = queue.max(p.fwd_free_at.saturating_duration_since(p.now));
            }
            // λ while the application keeps the VC busy (the transfer takes ~0.6 s).
            if t > Duration::from_millis(100) && t < Duration::from_millis(500) {
                rates.extend(p.tx.flow().rate_bps().map(|r| r / 8.0));
            }
        });
        assert_eq!(p.messages(), m);
        let secs = (p.now - start).as_secs_f64();
        let rate = (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64);
        (secs, queue, rate)
    };
    let (_, queue_none, _) = go(false, 0.0);
    let (secs, queue, rate) = go(true, 0.0);
    let rate = rate.expect("packet-pair sets a rate");
    // Within 5 %: a pair whose second member is a message's short last TPDU measures
    // the payload rate of a smaller frame, where the 32-byte header weighs more.
    assert!(
        (rate - link_payload).abs() / link_payload < 0.05,
        "λ {rate}"
    );
    let ideal = 600_000.0 / link_payload;
    assert!(secs < ideal * 1.02, "{secs} s, ideal {ideal} s");
    // B = 4 TPDUs and the pair being served; NoFlow queues its whole window.
    let tpdu_time = Duration::from_micros(1056);
    assert!(queue <= tpdu_time * 7, "queue {queue:?}");
    assert!(queue_none >= tpdu_time * 25, "NoFlow queue {queue_none:?}");
    // Losses do not cut the rate: 3 % of the data lost, the rate holds.
    let (secs, _, rate) = go(true, 0.03);
    let rate = rate.expect("still rate-controlled");
    assert!(rate > 0.95 * link_payload, "λ {rate}");
    assert!(secs < ideal * 1.1, "{secs} s with loss, ideal {ideal} s");
}

/// A return path that bunches ACKs (a receiver read in batches, a busy host on the
/// way back): the receiver's arrival stamps keep the pair spacing the bottleneck
/// gave, so packet-pair still finds the bottleneck's rate and keeps its queue short.
#[test]
fn packet_pair_times_pairs_by_arrival_when_acks_come_back_bunched() {
    let link_payload = 1024.0 / 1056e-6; // B/s
    let go = |stamped: bool| {
        let mut cfg = small(TransportConfig::reliable());
        cfg.flow = FlowKind::PacketPair;
        let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
        p.per_byte = Duration::from_micros(1);
        p.strip_stamps = !stamped;
        // Each ACK waits up to 3 ms more, in order: ACKs come back in bunches of
        // several TPDU times.
        let mut rng = Rng(0x5851_f42d_4c95_7f2d);
        p.back_extra = Box::new(move || Duration::from_micros(rng.next() % 3000));
        let m = msgs(&[100_000; 6]);
        let start = p.now;
        let mut queue = Duration::ZERO;
        let mut rates = Vec::new();
        run(&mut p, &m, Duration::from_secs(30), |p| {
            let t = p.now - start;
            if t > Duration::from_millis(100) {
                queue = queue.max(p.fwd_free_at.saturating_duration_since(p.now));
            }
            if t > Duration::from_millis(100) && t < Duration::from_millis(500) {
                rates.extend(p.tx.flow().rate_bps().map(|r| r / 8.0));
            }
        });
        assert_eq!(p.messages(), m);
        let rate = (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64);
        (rate, queue)
    };
    let (rate, queue) = go(true);
    let rate = rate.expect("packet-pair sets a rate");
    assert!(
        (rate - link_payload).abs() / link_payload < 0.1,
        "λ {rate} against {link_payload}"
    );
    // The set-point plus what the bunching holds back (3 ms of ACKs).
    assert!(queue <= Duration::from_millis(8), "queue {queue:?}");
    // Timed by when the ACKs came back instead, the same path misleads the estimator.
    let (rate, queue) = go(false);
    let off = rate.is_none_or(|r| (r - link_payload).abs() / link_payload > 0.1);
    assert!(
        off || queue > Duration::from_millis(8),
        "{rate:?} {queue:?}"
    );
}

/// A token-bucket shaper as the bottleneck (Linux `tbf`, the lab's rate limit):
/// while it holds tokens a pair passes at line rate and arrives unspread, so
/// packet-pair lengthens its trains until one outlasts the burst, and then finds the
/// shaper's rate.
#[test]
fn packet_trains_find_the_rate_of_a_token_bucket_shaper() {
    let rate = 1024.0 / 1056e-6; // B/s of payload at the shaper's byte rate
    let mut cfg = small(TransportConfig::reliable());
    cfg.flow = FlowKind::PacketPair;
    let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
    p.per_byte = Duration::from_micros(1);
    // A bucket of three frames, as the lab's `tbf ... burst 32kbit` is at 1,500 octets.
    p.fwd_burst = 3 * 1056;
    p.delay = Duration::from_millis(5);
    let m = msgs(&[100_000; 20]);
    let start = p.now;
    let mut rates = Vec::new();
    run(&mut p, &m, Duration::from_secs(60), |p| {
        let t = p.now - start;
        if t > Duration::from_millis(500) && t < Duration::from_millis(1500) {
            rates.extend(p.tx.flow().rate_bps().map(|r| r / 8.0));
        }
    });
    assert_eq!(p.messages(), m);
    assert!(
        !rates.is_empty(),
        "still probing: every train came back unspread"
    );
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    assert!((mean - rate).abs() / rate < 0.15, "λ {mean} against {rate}");
    let secs = (p.now - start).as_secs_f64();
    let ideal = 2_000_000.0 / rate;
    assert!(secs < ideal * 1.3, "{secs} s, ideal {ideal} s");
}

/// The dynamic window over a lossy bottleneck: everything arrives, the window grows
/// and is cut by losses.
#[test]
fn dynamic_window_grows_and_backs_off_on_loss() {
    let mut cfg = small(TransportConfig::reliable());
    cfg.flow = FlowKind::Window;
    let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
    p.per_byte = Duration::from_micros(1);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    p.fate = Box::new(move |t, fwd| {
        u8::from(!(fwd && t.header.ty == TpduType::Data && rng.chance(0.02)))
    });
    let m = msgs(&[50_000; 6]);
    let (mut peak, mut cut) = (0.0f64, false);
    run(&mut p, &m, Duration::from_secs(60), |p| {
        let w = p.tx.flow().window().expect("a window");
        if w <= peak / 2.0 + 1.0 && peak >= 4.0 {
            cut = true;
        }
        peak = peak.max(w);
    });
    assert_eq!(p.messages(), m);
    assert!(peak >= 4.0, "the window grew to {peak}");
    assert!(cut, "a loss halved the window");
    assert!(p.tx.stats().retx_fast > 0);
}
