//! Transport tests on a quinn-proto style `Pair`: two PSBs, a virtual clock, and
//! in-flight queues that a test can edit to inject loss, duplication and reordering.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::flow::NoFlow;

/// One ACK per receive batch in order.
mod acks;
/// Guaranteed VCs keep their traffic contract whatever their flow control.
mod coalesce;
mod contract;
/// The error-control window kept in bytes when the path cuts TPDUs.
mod ec_window;
/// The flow controllers driven through real PSBs.
mod flow;
/// Point-to-multipoint (one-way) VCs.
mod one_way;
/// Sends that take the application's buffer.
mod owned;
/// SYNC probes and in-band QoS changes.
mod qos_sync;
/// No retransmission on a loss-free path whose ACKs come late now and then.
mod spurious;
/// Retransmission timers count from transmission.
mod timers;
/// Adaptive TPDU size.
mod tpdu_size;
use crate::time::Instant;
use crate::wire::tpdu::TpduType;

/// Decides the fate of each frame: deliver, drop, or deliver twice.
type Fate = Box<dyn FnMut(&Transmit, bool) -> u8>;

struct Pair {
    now: Instant,
    tx: Psb,
    rx: Psb,
    /// Frames in flight towards the receiver / the sender, with arrival times.
    fwd: VecDeque<(Instant, Bytes)>,
    back: VecDeque<(Instant, Bytes)>,
    delay: Duration,
    /// Serialisation time per byte on the forward link (0: infinite rate).
    per_byte: Duration,
    fwd_free_at: Instant,
    fate: Fate,
    delivered: Vec<Chunk>,
    events_tx: Vec<Event>,
    events_rx: Vec<Event>,
    /// Every data TPDU the sender emitted (new or retransmitted): when, and its
    /// payload bytes.
    sent: Vec<(Instant, usize)>,
    /// Extra delay of each frame towards the sender (a receiver that runs late now
    /// and then); frames still arrive in order.
    back_extra: Box<dyn FnMut() -> Duration>,
    /// Clear the receiver's arrival stamp (`tsval`) from every ACK on the way back,
    /// as a receiver that does not stamp would send it.
    strip_stamps: bool,
    /// With a depth in bytes, the forward link is a token-bucket shaper (Linux
    /// `tbf`) at `per_byte` instead of a serialising line: a frame leaves at once
    /// while the bucket holds tokens for it, so a burst passes at line rate.
    fwd_burst: usize,
}

impl Pair {
    fn new(tx_cfg: TransportConfig, rx_cfg: TransportConfig) -> Pair {
        Pair::with_flow(tx_cfg, rx_cfg, Box::new(NoFlow))
    }

    fn with_flow(
        tx_cfg: TransportConfig,
        rx_cfg: TransportConfig,
        flow: Box<dyn crate::flow::FlowController>,
    ) -> Pair {
        let now = Instant::from_nanos(1_000_000_000);
        Pair {
            now,
            tx: Psb::connect(tx_cfg, flow, now),
            rx: Psb::listen(rx_cfg),
            fwd: VecDeque::new(),
            back: VecDeque::new(),
            delay: Duration::from_micros(500),
            per_byte: Duration::ZERO,
            fwd_free_at: now,
            fate: Box::new(|_, _| 1),
            delivered: Vec::new(),
            events_tx: Vec::new(),
            events_rx: Vec::new(),
            sent: Vec::new(),
            back_extra: Box::new(|| Duration::ZERO),
            strip_stamps: false,
            fwd_burst: 0,
        }
    }

    fn pump(&mut self) {
        loop {
            let mut any = false;
            while let Some(t) = self.tx.poll_transmit(self.now) {
                any = true;
                if matches!(t.kind, TransmitKind::Data | TransmitKind::Retransmission(_)) {
                    self.sent.push((self.now, t.payload.len()));
                }
                let copies = (self.fate)(&t, true);
                let cost = self.per_byte * t.len() as u32;
                let done = if self.fwd_burst > 0 {
                    // GCRA: `fwd_free_at` is the theoretical arrival time; a frame
                    // conforms once it is less than the bucket's depth ahead.
                    let tau = self.per_byte * self.fwd_burst as u32;
                    let leave = self.now.max(self.fwd_free_at - tau);
                    self.fwd_free_at = self.fwd_free_at.max(leave) + cost;
                    leave
                } else {
                    let start = self.fwd_free_at.max(self.now);
                    self.fwd_free_at = start + cost;
                    start + cost
                };
                for _ in 0..copies {
                    self.fwd
                        .push_back((done + self.delay, Bytes::from(t.to_vec())));
                }
            }
            while let Some(t) = self.rx.poll_transmit(self.now) {
                any = true;
                let copies = (self.fate)(&t, false);
                let extra = (self.back_extra)();
                let last = self.back.back().map_or(Instant::ZERO, |b| b.0);
                let at = (self.now + self.delay + extra).max(last);
                let mut frame = t.to_vec();
                if self.strip_stamps && t.header.ty == TpduType::Ack {
                    frame[20..24].fill(0);
                }
                for _ in 0..copies {
                    self.back.push_back((at, Bytes::from(frame.clone())));
                }
            }
            while let Some(e) = self.tx.poll_event() {
                self.events_tx.push(e);
            }
            while let Some(e) = self.rx.poll_event() {
                self.events_rx.push(e);
            }
            while let Ok(Some(c)) = self.rx.recv_chunk() {
                any = true;
                self.delivered.push(c);
            }
            if !any {
                break;
            }
        }
    }

    /// Advance to the next event; false when nothing is left to happen.
    fn step(&mut self) -> bool {
        self.pump();
        self.advance(None)
    }

    /// Move the clock to the next arrival or timer (or at most `tick` ahead), deliver
    /// what is due and run due timers; false when nothing is left to happen.
    fn advance(&mut self, tick: Option<Duration>) -> bool {
        let mut next: Option<Instant> = None;
        for t in [
            self.fwd.iter().map(|x| x.0).min(),
            self.back.iter().map(|x| x.0).min(),
            self.tx.poll_timeout(),
            self.rx.poll_timeout(),
            tick.map(|d| self.now + d),
        ]
        .into_iter()
        .flatten()
        {
            next = Some(next.map_or(t, |n: Instant| n.min(t)));
        }
        let Some(t) = next else { return false };
        self.now = self.now.max(t);
        let now = self.now;
        while let Some(i) = self.fwd.iter().position(|x| x.0 <= now) {
            let (_, f) = self.fwd.remove(i).unwrap_or_default();
            self.rx.handle_frame(now, f);
        }
        while let Some(i) = self.back.iter().position(|x| x.0 <= now) {
            let (_, f) = self.back.remove(i).unwrap_or_default();
            self.tx.handle_frame(now, f);
        }
        if self.tx.poll_timeout().is_some_and(|t| t <= now) {
            self.tx.handle_timeout(now);
        }
        if self.rx.poll_timeout().is_some_and(|t| t <= now) {
            self.rx.handle_timeout(now);
        }
        true
    }

    fn drive(&mut self, limit: Duration) {
        let end = self.now + limit;
        while self.now < end && self.step() {}
        self.pump();
    }

    /// Send `msgs` fully (feeding as the buffer drains), close, and run to the end.
    fn transfer(&mut self, msgs: &[Vec<u8>], limit: Duration) {
        self.transfer_with(msgs, limit, |tx, m, off| tx.send(&m[off..], true));
    }

    /// [`Pair::transfer`] with the send call given: `push(tx, msg, off)` queues what
    /// fits of `msg` from octet `off` and says how much it took.
    fn transfer_with<M: AsRef<[u8]>>(
        &mut self,
        msgs: &[M],
        limit: Duration,
        mut push: impl FnMut(&mut Psb, &M, usize) -> Result<usize, SendError>,
    ) {
        let end = self.now + limit;
        let (mut i, mut off) = (0, 0);
        while self.now < end {
            while i < msgs.len() {
                match push(&mut self.tx, &msgs[i], off) {
                    Ok(n) if off + n == msgs[i].as_ref().len() => (i, off) = (i + 1, 0),
                    Ok(n) => {
                        off += n;
                        break;
                    }
                    Err(SendError::WindowFull | SendError::OverRate) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
            if i == msgs.len() {
                self.tx.close();
            }
            if !self.step() || (self.tx.is_finished() && self.rx.is_finished()) {
                break;
            }
        }
        self.pump();
    }

    fn messages(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut cur: Option<Vec<u8>> = None;
        for c in &self.delivered {
            if c.start {
                assert!(cur.is_none(), "a message started inside another");
                cur = Some(Vec::new());
            }
            let m = cur.as_mut().expect("data outside a message");
            m.extend_from_slice(&c.data);
            if c.end {
                out.push(cur.take().unwrap_or_default());
            }
        }
        out
    }
}

fn small(cfg: TransportConfig) -> TransportConfig {
    TransportConfig {
        tpdu_size: 1024,
        window: 32,
        snd_buf: 64 * 1024,
        rcv_buf: 32 * 1024,
        flow: FlowKind::None,
        rtt: RttConfig {
            initial_rto: Duration::from_millis(50),
            min_rto: Duration::from_millis(20),
            ..RttConfig::default()
        },
        ..cfg
    }
}

fn msgs(sizes: &[usize]) -> Vec<Vec<u8>> {
    sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| (0..n).map(|i| (i * 7 + k * 13) as u8).collect())
        .collect()
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() % 1_000_000) as f64 / 1e6 < p
    }
}

#[test]
fn handshake_negotiates_window_and_limits() {
    let tx = small(TransportConfig::reliable());
    let rx = TransportConfig {
        window: 8,
        max_msg: 5000,
        ..small(TransportConfig::reliable())
    };
    let mut p = Pair::new(tx, rx);
    p.drive(Duration::from_millis(10));
    assert_eq!(p.events_tx, vec![Event::Connected]);
    assert_eq!(p.events_rx, vec![Event::Connected]);
    let agreed = p.tx.params().copied().unwrap();
    assert_eq!(agreed.window, 8);
    assert_eq!(agreed.max_msg, 5000);
    assert_eq!(agreed.tpdu_size, 1024);
    assert!(p.rx.params().is_some());
    assert_eq!(
        p.tx.send(&[0u8; 6000], true),
        Err(SendError::MessageTooLarge {
            size: 6000,
            max: 5000
        })
    );
}

#[test]
fn reliable_transfer_without_loss_is_exact_and_closes() {
    let m = msgs(&[1, 1023, 1024, 1025, 5000, 0, 70_000]);
    let mut p = Pair::new(
        small(TransportConfig::reliable()),
        small(TransportConfig::reliable()),
    );
    p.transfer(&m, Duration::from_secs(5));
    assert_eq!(p.messages(), m);
    assert!(p.events_rx.contains(&Event::PeerClosed));
    assert!(p.events_tx.contains(&Event::Closed));
    assert_eq!(p.tx.stats().retransmissions(), 0);
    assert!(p.tx.status().closed && p.rx.status().peer_closed);
}

#[test]
fn smart_recovers_the_worked_trace() {
    // specs.md §7.4: first transmissions of 2 and 5 lost, and the first
    // retransmission of 5 as well; SMART exactly as the paper (no refinement).
    let mut cfg = small(TransportConfig::reliable());
    cfg.detect_lost_retx = false;
    let mut p = Pair::new(cfg.clone(), cfg);
    let mut seen = std::collections::HashMap::<u32, u32>::new();
    p.fate = Box::new(move |t, fwd| {
        if !fwd || t.header.ty != TpduType::Data {
            return 1;
        }
        let n = seen.entry(t.header.seq).or_default();
        *n += 1;
        match (t.header.seq, *n) {
            (2, 1) | (5, 1) | (5, 2) => 0,
            _ => 1,
        }
    });
    let m: Vec<Vec<u8>> = (0..10).map(|i| vec![i as u8; 100]).collect();
    p.transfer(&m, Duration::from_secs(5));
    assert_eq!(p.messages(), m);
    let s = p.tx.stats();
    assert_eq!(s.retx_fast, 2, "2 and 5 fast-retransmitted once each");
    assert_eq!(s.retransmissions(), 3, "5 again by the head check");
    assert_eq!(s.retx_head + s.retx_timeout, 1);
    assert_eq!(
        s.timeouts, 0,
        "the two-RTT head check, not the RTO, recovers"
    );
}

#[test]
fn lost_retransmission_refinement_avoids_the_stall() {
    // On by default (issue 17): the trace above with the default configuration.
    let cfg = small(TransportConfig::reliable());
    assert!(cfg.detect_lost_retx);
    let mut p = Pair::new(cfg.clone(), cfg);
    let mut seen = std::collections::HashMap::<u32, u32>::new();
    p.fate = Box::new(move |t, fwd| {
        if !fwd || t.header.ty != TpduType::Data {
            return 1;
        }
        let n = seen.entry(t.header.seq).or_default();
        *n += 1;
        u8::from(!matches!((t.header.seq, *n), (2, 1) | (5, 1) | (5, 2)))
    });
    let m: Vec<Vec<u8>> = (0..40).map(|i| vec![i as u8; 100]).collect();
    p.transfer(&m, Duration::from_secs(5));
    assert_eq!(p.messages(), m);
    let s = p.tx.stats();
    assert_eq!(
        s.retx_fast, 3,
        "the lost retransmission of 5 is found by a later ACK"
    );
    assert_eq!(s.retx_head + s.retx_timeout, 0);
}

#[test]
fn best_effort_never_retransmits_and_delivers_only_whole_messages() {
    let mut p = Pair::new(
        small(TransportConfig::best_effort()),
        small(TransportConfig::best_effort()),
    );
    let mut rng = Rng(99);
    p.fate = Box::new(move |t, _| u8::from(t.header.ty != TpduType::Data || !rng.chance(0.2)));
    let m = msgs(&[3000; 50]);
    p.transfer(&m, Duration::from_secs(5));
    let got = p.messages();
    assert!(
        got.len() < m.len(),
        "20% loss must lose some 3-TPDU messages"
    );
    assert!(!got.is_empty());
    for g in &got {
        assert!(m.contains(g), "only whole, intact messages are delivered");
    }
    let s = p.tx.stats();
    assert_eq!(s.retransmissions(), 0);
    assert_eq!(p.rx.stats().acks_sent, 0, "best effort sends no ACKs");
    assert!(p.rx.stats().partial_messages_dropped + p.rx.stats().drop_headless > 0);
}

/// Loses exactly the data TPDUs at the given indices (0-based, in the order the
/// sender first sends them); every other frame passes.
fn lose_data(lost: &'static [u32]) -> Fate {
    let mut n = 0u32;
    Box::new(move |t, fwd| {
        if !fwd || t.header.ty != TpduType::Data {
            return 1;
        }
        n += 1;
        u8::from(!lost.contains(&(n - 1)))
    })
}

#[test]
fn unreliable_loss_is_counted_exactly_once_per_tpdu_and_message() {
    // 20 messages of 3 TPDUs (1,024-octet TPDUs): message k is TPDUs 3k..3k+2.
    // Lost: the middle of message 0; all of 1; the tail of 2 and the head of 3 (one
    // run); all of 4 and 5 (one run); the tail of 6; and at the end either all of
    // message 19 or only its last TPDU — nothing after it reveals those but the CLOSE.
    const WHOLE_LAST: &[u32] = &[1, 3, 4, 5, 8, 9, 12, 13, 14, 15, 16, 17, 20, 57, 58, 59];
    const TAIL_LAST: &[u32] = &[1, 3, 4, 5, 8, 9, 12, 13, 14, 15, 16, 17, 20, 59];
    for (lost, runs) in [(WHOLE_LAST, 6), (TAIL_LAST, 6)] {
        let mut p = Pair::new(
            small(TransportConfig::best_effort()),
            small(TransportConfig::best_effort()),
        );
        p.fate = lose_data(lost);
        // A line of ~80 Mbit/s: TPDUs arrive one by one and are read as they come, so
        // the receive buffer never drops (what it drops counts as lost too).
        p.per_byte = Duration::from_nanos(100);
        let m = msgs(&[3000; 20]);
        p.transfer(&m, Duration::from_secs(5));
        assert!(p.rx.is_finished(), "the CLOSE arrived");
        let got = p.messages();
        let which: Vec<Option<usize>> = got.iter().map(|g| m.iter().position(|x| x == g)).collect();
        let want: Vec<Option<usize>> = (7..19).map(Some).collect();
        assert_eq!(which, want, "exactly the untouched messages arrive");
        let s = p.rx.stats();
        assert_eq!(s.tpdus_lost, lost.len() as u64, "{lost:?}");
        assert_eq!(s.messages_lost, 8, "messages 0-6 and 19: {lost:?}");
        assert_eq!(s.messages_lost + got.len() as u64, m.len() as u64);
        assert_eq!(s.drop_rcv_buf, 0);
        assert_eq!(s.gaps, runs, "runs of lost TPDUs, the old count");
        assert_eq!(s.tpdus_received + s.tpdus_lost, p.tx.stats().tpdus_sent);
    }
}

#[test]
fn unreliable_stream_loss_counts_tpdus_and_no_messages() {
    let mut cfg = small(TransportConfig::best_effort());
    cfg.semantics = crate::wire::qos::Semantics::Stream;
    let mut p = Pair::new(cfg.clone(), cfg);
    p.fate = lose_data(&[0, 5, 6, 9]);
    p.transfer(&msgs(&[10 * 1024]), Duration::from_secs(5));
    let s = p.rx.stats();
    assert_eq!((s.tpdus_lost, s.messages_lost), (4, 0));
    assert_eq!(s.tpdus_received, 6);
}

#[test]
fn stream_semantics_coalesce_small_writes() {
    let mut cfg = small(TransportConfig::reliable());
    cfg.semantics = Semantics::Stream;
    let mut p = Pair::new(cfg.clone(), cfg);
    // Before the handshake completes, many small writes fill TPDUs rather than
    // becoming a TPDU each.
    for i in 0..100u8 {
        assert_eq!(p.tx.send(&[i; 10], false), Ok(10));
    }
    p.tx.close();
    p.drive(Duration::from_secs(1));
    let mut all = Vec::new();
    for c in &p.delivered {
        all.extend_from_slice(&c.data);
    }
    let want: Vec<u8> = (0..100u8).flat_map(|i| [i; 10]).collect();
    assert_eq!(all, want);
    assert_eq!(
        p.tx.stats().tpdus_sent,
        1,
        "1000 bytes fit one 1024-byte TPDU"
    );
    assert!(p.events_rx.contains(&Event::PeerClosed));
}

#[test]
fn a_message_cut_by_a_full_buffer_is_not_split_into_runts() {
    // A writer whose message is accepted in pieces as the buffer drains must still
    // produce full TPDUs (the silly-window syndrome would halve TPDU sizes each time).
    let mut cfg = small(TransportConfig::reliable());
    cfg.snd_buf = 1500;
    let mut p = Pair::new(cfg.clone(), cfg);
    let m = msgs(&[10_240; 4]);
    p.transfer(&m, Duration::from_secs(10));
    assert_eq!(p.messages(), m);
    assert_eq!(
        p.tx.stats().tpdus_sent,
        40,
        "4 messages of 10 full 1 KiB TPDUs"
    );
}

#[test]
fn abort_reaches_the_peer_and_drops_data() {
    let mut p = Pair::new(
        small(TransportConfig::reliable()),
        small(TransportConfig::reliable()),
    );
    p.drive(Duration::from_millis(5));
    p.tx.send(&[1u8; 500], true).unwrap();
    p.tx.abort();
    p.drive(Duration::from_millis(50));
    assert!(p.events_rx.contains(&Event::Aborted(AbortReason::Peer)));
    assert_eq!(
        p.rx.recv_chunk(),
        Err(RecvError::Aborted(AbortReason::Peer))
    );
    assert_eq!(
        p.tx.send(&[1], true),
        Err(SendError::Aborted(AbortReason::Local))
    );
}

#[test]
fn a_vc_to_a_dead_peer_fails_instead_of_hanging() {
    let mut p = Pair::new(
        small(TransportConfig::reliable()),
        small(TransportConfig::reliable()),
    );
    p.fate = Box::new(|_, _| 0);
    p.drive(Duration::from_secs(60));
    assert_eq!(p.events_tx, vec![Event::ConnectFailed]);
    assert!(p.tx.poll_timeout().is_none());
}

#[test]
fn a_silent_receiver_aborts_the_sender_after_repeated_timeouts() {
    let mut p = Pair::new(
        small(TransportConfig::reliable()),
        small(TransportConfig::reliable()),
    );
    p.drive(Duration::from_millis(5));
    p.fate = Box::new(|_, _| 0);
    p.tx.send(&[7u8; 4000], true).unwrap();
    p.drive(Duration::from_secs(600));
    assert!(p.events_tx.contains(&Event::Aborted(AbortReason::Timeout)));
}

#[test]
fn forged_cookie_and_garbage_are_dropped_and_counted() {
    let mut cfg = small(TransportConfig::reliable());
    cfg.cookie = Some(0xABCD);
    let mut p = Pair::new(cfg.clone(), cfg);
    p.drive(Duration::from_millis(5));
    let forged = crate::wire::tpdu::Header {
        cookie: 0x1234,
        ..crate::wire::tpdu::Header::new(TpduType::Abort)
    };
    p.rx.handle_frame(p.now, Bytes::copy_from_slice(&forged.to_bytes()));
    p.rx.handle_frame(p.now, Bytes::from_static(b"not a tpdu"));
    assert_eq!(p.rx.stats().drop_bad_cookie, 1);
    assert_eq!(p.rx.stats().drop_malformed, 1);
    assert!(!p.rx.status().aborted);
}

/// Both ends opened from what signalling agreed (a call through sigd): no handshake.
fn signalled_pair(cfg: TransportConfig) -> Pair {
    let mut p = Pair::new(cfg.clone(), cfg.clone());
    p.tx = Psb::established_sender(cfg.clone(), Box::new(NoFlow), p.now);
    p.rx = Psb::established_receiver(cfg);
    p
}

#[test]
fn signalled_vc_starts_established_without_handshake_frames() {
    let mut cfg = small(TransportConfig::reliable());
    cfg.cookie = Some(0x5151);
    cfg.isn = 77;
    let mut p = signalled_pair(cfg);
    assert!(p.tx.status().connected && p.rx.status().connected);
    assert_eq!(p.tx.poll_event(), Some(Event::Connected));
    assert_eq!(p.rx.poll_event(), Some(Event::Connected));
    // Nothing goes on the wire before the first data TPDU.
    assert!(p.tx.poll_transmit(p.now).is_none());
    assert!(p.rx.poll_transmit(p.now).is_none());
    assert_eq!(p.tx.params(), p.rx.params());
    let m = msgs(&[1, 1023, 1024, 5000, 0, 70_000]);
    p.transfer(&m, Duration::from_secs(5));
    assert_eq!(p.messages(), m);
    assert!(p.tx.status().closed && p.rx.status().peer_closed);
    assert_eq!(p.tx.stats().retransmissions(), 0);
}

#[test]
fn signalled_vc_recovers_loss_and_keeps_message_limits() {
    let mut cfg = small(TransportConfig::reliable());
    cfg.cookie = Some(9);
    cfg.max_msg = 5000;
    let mut p = signalled_pair(cfg);
    let mut rng = Rng(0x1234_5678);
    p.fate = Box::new(move |_, _| u8::from(!rng.chance(0.1)));
    assert_eq!(
        p.tx.send(&[0u8; 6000], true),
        Err(SendError::MessageTooLarge {
            size: 6000,
            max: 5000
        })
    );
    let m = msgs(&[4000; 30]);
    p.transfer(&m, Duration::from_secs(60));
    assert_eq!(p.messages(), m);
}

#[test]
fn signalled_vc_drops_frames_with_another_cookie_or_isn() {
    let mut cfg = small(TransportConfig::reliable());
    cfg.cookie = Some(0xC0FFEE);
    let mut wrong = cfg.clone();
    wrong.cookie = Some(0xBAD);
    // A sender with the wrong cookie: every frame is dropped and counted.
    let mut p = signalled_pair(cfg.clone());
    p.tx = Psb::established_sender(wrong, Box::new(NoFlow), p.now);
    p.tx.send(&[1u8; 500], true).unwrap();
    p.drive(Duration::from_millis(5));
    assert!(p.delivered.is_empty());
    assert!(p.rx.stats().drop_bad_cookie >= 1);
    // A receiver that was given another ISN delivers nothing out of its window.
    let mut other = cfg.clone();
    other.isn = cfg.isn.wrapping_add(1_000_000);
    let mut p = signalled_pair(cfg);
    p.rx = Psb::established_receiver(other);
    p.tx.send(&[1u8; 500], true).unwrap();
    p.drive(Duration::from_millis(5));
    assert!(p.delivered.is_empty());
}

#[test]
fn window_full_then_writable() {
    let mut cfg = small(TransportConfig::reliable());
    cfg.snd_buf = 4096;
    let mut p = Pair::new(cfg.clone(), cfg);
    assert_eq!(p.tx.send(&[0u8; 5000], true), Ok(4096));
    assert_eq!(p.tx.send(&[0u8; 10], true), Err(SendError::WindowFull));
    assert!(p.tx.status().window_full);
    p.drive(Duration::from_millis(20));
    assert!(p.events_tx.contains(&Event::Writable));
    assert!(p.tx.send_capacity() > 0);
}

#[test]
fn slow_reader_shuts_the_window_and_reopens_it() {
    let mut cfg = small(TransportConfig::reliable());
    cfg.rcv_buf = 4 * 1024;
    let mut p = Pair::new(cfg.clone(), cfg);
    p.drive(Duration::from_millis(5));
    let data: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    let start = p.now;
    while got.len() < data.len() && p.now < start + Duration::from_secs(30) {
        if sent < data.len() {
            sent += p.tx.send(&data[sent..], true).unwrap_or(0);
        }
        // Pump the wire, but read only one chunk per step: a slow application.
        while let Some(t) = p.tx.poll_transmit(p.now) {
            p.fwd.push_back((p.now + p.delay, Bytes::from(t.to_vec())));
        }
        while let Some(t) = p.rx.poll_transmit(p.now) {
            p.back.push_back((p.now + p.delay, Bytes::from(t.to_vec())));
        }
        assert!(
            p.rx.recv_buffered() <= 4 * 1024 + 1024,
            "receive buffer bounded"
        );
        if let Ok(Some(c)) = p.rx.recv_chunk() {
            got.extend_from_slice(&c.data);
        }
        if !p.advance(Some(Duration::from_micros(100))) {
            break;
        }
    }
    assert_eq!(got, data);
    assert!(p.rx.stats().drop_rcv_buf + p.tx.stats().window_stalls > 0);
}

/// Issue 34: the read that reopens a shut window leaves a window update queued, and
/// says so (`has_control`): a host that waited for the next arrival to poll would
/// wait for the sender's retransmission timer, as the sender has nothing in flight.
#[test]
fn a_read_that_reopens_a_shut_window_has_an_update_to_send_at_once() {
    let mut cfg = small(TransportConfig::reliable());
    cfg.rcv_buf = 8 * 1024;
    let mut p = Pair::new(cfg.clone(), cfg);
    p.drive(Duration::from_millis(5));
    assert!(p.rx.window_bounds_sender());
    p.tx.send(&[5u8; 30_000], true).unwrap();
    // Run the wire without reading until the sender stops: the window is shut.
    let until = p.now + Duration::from_millis(15);
    while p.now < until {
        while let Some(t) = p.tx.poll_transmit(p.now) {
            p.fwd.push_back((p.now + p.delay, Bytes::from(t.to_vec())));
        }
        while let Some(t) = p.rx.poll_transmit(p.now) {
            p.back.push_back((p.now + p.delay, Bytes::from(t.to_vec())));
        }
        if !p.advance(Some(Duration::from_micros(100))) {
            break;
        }
    }
    while let Some(t) = p.rx.poll_transmit(p.now) {
        assert_eq!(t.header.ty, TpduType::Ack);
    }
    assert_eq!(p.rx.recv_buffered(), 8 * 1024, "the buffer is full");
    assert!(!p.rx.has_control());
    assert_eq!(p.tx.stats().retransmissions(), 0);
    // One read frees the window: the update is there to send now.
    assert!(p.rx.recv_chunk().unwrap().is_some());
    assert!(p.rx.has_control());
    let upd = p.rx.poll_transmit(p.now).expect("a window update");
    assert_eq!(upd.header.ty, TpduType::Ack);
    assert!(upd.header.window > 0);
    assert!(!p.rx.has_control());
}

#[test]
fn set_rate_stays_within_agreed_bounds() {
    let mut cfg = small(TransportConfig::reliable());
    cfg.rate = 10_000_000;
    cfg.min_rate = 1_000_000;
    let mut p = Pair::new(cfg.clone(), cfg);
    assert!(p.tx.set_rate(5_000_000).is_ok());
    assert!(p.tx.status().qos_done);
    let e = p.tx.set_rate(20_000_000).unwrap_err();
    assert_eq!((e.min, e.max), (1_000_000, 10_000_000));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Reliable VCs deliver every message exactly once, in order, byte-exact, under
    /// random loss (both directions), duplication and reordering of frames.
    #[test]
    fn reliable_delivers_everything_exactly_once(
        seed in 1u64..u64::MAX,
        loss in 0.0f64..0.5,
        dup in 0.0f64..0.1,
        refine in any::<bool>(),
        sizes in proptest::collection::vec(0usize..20_000, 1..12),
    ) {
        let mut cfg = small(TransportConfig::reliable());
        cfg.detect_lost_retx = refine;
        cfg.connect_attempts = 40;
        cfg.max_timeouts = 40;
        let mut p = Pair::new(cfg.clone(), cfg);
        let mut rng = Rng(seed);
        p.fate = Box::new(move |_, _| {
            if rng.chance(loss) { 0 } else if rng.chance(dup) { 2 } else { 1 }
        });
        let m = msgs(&sizes);
        p.transfer(&m, Duration::from_secs(3600));
        prop_assert_eq!(p.messages(), m);
        prop_assert!(p.rx.recv_buffered() == 0);
        let s = p.tx.stats();
        prop_assert!(s.retx_timeout <= s.retransmissions());
    }

    /// Unreliable message VCs never deliver a partial, corrupted or duplicated message.
    #[test]
    fn unreliable_never_delivers_partial_or_duplicate(
        seed in 1u64..u64::MAX,
        loss in 0.0f64..0.5,
        dup in 0.0f64..0.2,
        sizes in proptest::collection::vec(1usize..8_000, 1..30),
    ) {
        let cfg = small(TransportConfig::best_effort());
        let mut p = Pair::new(cfg.clone(), cfg);
        let mut rng = Rng(seed);
        p.fate = Box::new(move |t, _| {
            if t.header.ty != TpduType::Data { return 1; }
            if rng.chance(loss) { 0 } else if rng.chance(dup) { 2 } else { 1 }
        });
        let m = msgs(&sizes);
        p.transfer(&m, Duration::from_secs(60));
        let got = p.messages();
        let mut last = None;
        for g in &got {
            let idx = m.iter().position(|x| x == g);
            prop_assert!(idx.is_some(), "delivered a message that was never sent whole");
            prop_assert!(last < idx, "duplicate or out of order");
            last = idx;
        }
        prop_assert_eq!(p.tx.stats().retransmissions(), 0);
    }
}

#[test]
fn which_vcs_exchange_acks() {
    // The engine parks the socket of a VC that exchanges none between `recv` calls.
    let mut feedback = TransportConfig::best_effort();
    feedback.flow = FlowKind::PacketPair;
    for (cfg, acks) in [
        (TransportConfig::best_effort(), false),
        (TransportConfig::guaranteed(10_000_000), false),
        (TransportConfig::reliable(), true),
        (feedback, true),
    ] {
        let flow = cfg.flow;
        assert_eq!(Psb::listen(cfg).exchanges_acks(), acks, "{flow:?}");
    }
}
