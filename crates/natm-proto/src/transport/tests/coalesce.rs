//! Small messages sent one per `send` on a guaranteed VC leave in runs while the
//! application streams, at the contract's rate, and a message after a pause leaves at
//! once (issue 34, `transport::coalesce`).

use super::*;
use crate::flow::{build, LeakyBucket};
use crate::transport::coalesce::{HOLD, MAX_RUN};

/// A 100 Mbit/s CBR VC (a leaky bucket) whose application sends a 64-octet message
/// every `gap`, one per `send`, for `total`; returns the pair.
fn stream(gap: Duration, total: Duration) -> (Pair, usize) {
    let cfg = TransportConfig::guaranteed(100_000_000);
    let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
    p.drive(Duration::from_millis(5));
    assert!(p.events_tx.contains(&Event::Connected), "the VC opens");
    let end = p.now + total;
    let (mut n, mut off) = (0, 0);
    let mut next = p.now;
    while p.now < end || off > 0 {
        // One `send` every `gap` (other events in between); a message the buffer
        // took only part of is finished by the next.
        if p.now >= next {
            if let Ok(k) = p.tx.send(&[n as u8; 64][off..], true) {
                off += k;
                if off == 64 {
                    (n, off) = (n + 1, 0);
                }
            }
            next += gap;
        }
        p.pump();
        let wait = next.saturating_duration_since(p.now);
        p.advance(Some(wait));
    }
    // What the bucket still holds drains at the PCR.
    p.drive(Duration::from_millis(200));
    (p, n)
}

#[test]
fn a_stream_of_small_sends_under_the_pcr_leaves_in_runs() {
    // 64 B every 6 µs is 85 Mbit/s offered, under the PCR: runs of about a hold.
    let (p, _) = stream(Duration::from_micros(6), Duration::from_millis(20));
    let sent = &p.sent;
    let instants = {
        let mut t: Vec<_> = sent.iter().map(|s| s.0).collect();
        t.dedup();
        t.len()
    };
    assert!(
        instants * 8 <= sent.len(),
        "{} TPDUs left at {instants} instants: not in runs",
        sent.len()
    );
}

#[test]
fn a_stream_over_the_pcr_keeps_the_contract() {
    // 64 B every 2 µs is 256 Mbit/s offered: the bucket holds it to 100.
    let (p, n) = stream(Duration::from_micros(2), Duration::from_millis(20));
    let sent = &p.sent;
    // Every message accepted arrived, in order.
    let got = p.messages();
    assert_eq!(got.len(), n);
    assert!(got.iter().enumerate().all(|(i, m)| m == &vec![i as u8; 64]));
    // The contract: past the bucket's first burst (its depth, 2 ms of the PCR),
    // the PCR within 1 %, however the TPDUs are grouped.
    let depth = LeakyBucket::default_depth(100_000_000, cfg_tpdu());
    let first: u64 = sent
        .iter()
        .take_while(|s| s.0 == sent[0].0)
        .map(|s| s.1 as u64)
        .sum();
    assert!(first <= depth, "a first run of {first} B");
    let steady = sent[0].0 + Duration::from_millis(5);
    let tail: Vec<_> = sent.iter().filter(|s| s.0 >= steady).collect();
    let (t0, t1) = (tail[0].0, tail[tail.len() - 1].0);
    let bytes: usize = tail[..tail.len() - 1].iter().map(|s| s.1).sum();
    let bps = bytes as f64 * 8.0 / (t1 - t0).as_secs_f64();
    assert!((bps - 1e8).abs() / 1e8 < 0.01, "{bps} bit/s");
}

fn cfg_tpdu() -> u32 {
    TransportConfig::guaranteed(100_000_000).tpdu_size
}

#[test]
fn a_slow_stream_is_held_no_longer_than_the_hold() {
    // 64 B every 10 µs (51 Mbit/s, under the PCR): runs of about HOLD / 10 µs, and
    // no message waits longer than the hold.
    let gap = Duration::from_micros(10);
    let (p, n) = stream(gap, Duration::from_millis(10));
    assert_eq!(p.messages().len(), n);
    let sent = &p.sent;
    let mut runs = 0;
    let mut longest = 0;
    let mut i = 0;
    while i < sent.len() {
        let j = sent[i..].iter().take_while(|s| s.0 == sent[i].0).count();
        runs += 1;
        longest = longest.max(j as u64);
        i += j;
    }
    assert!(
        runs * 3 <= sent.len(),
        "{} TPDUs in {runs} runs",
        sent.len()
    );
    assert!(longest <= MAX_RUN, "a run of {longest}");
    // Runs follow each other at most a hold (plus the step a message came in) apart.
    let spacing = sent
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .max()
        .unwrap_or_default();
    assert!(spacing <= HOLD + gap, "{spacing:?} between runs");
}

#[test]
fn a_stream_slower_than_a_hold_is_not_held() {
    // 64 B every 150 µs (3.4 Mbit/s), more than a hold apart: each leaves when it is
    // sent.
    let (p, n) = stream(Duration::from_micros(150), Duration::from_millis(5));
    assert_eq!(p.messages().len(), n);
    let mut t: Vec<_> = p.sent.iter().map(|s| s.0).collect();
    t.dedup();
    assert_eq!(t.len(), p.sent.len(), "every TPDU alone");
}

#[test]
fn a_message_after_a_pause_leaves_at_once() {
    let cfg = TransportConfig::guaranteed(100_000_000);
    let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
    p.drive(Duration::from_millis(5));
    for k in 0..5u8 {
        let at = p.now;
        p.tx.send(&[k; 64], true).expect("room");
        p.pump();
        assert_eq!(p.sent.last().map(|s| s.0), Some(at), "message {k} waited");
        p.drive(Duration::from_millis(1));
    }
    assert_eq!(p.messages().len(), 5);
}
