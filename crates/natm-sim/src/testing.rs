//! Small endpoints for tests, examples and benchmarks of the network itself.
//!
//! Their frames are "numbered": an 8-byte big-endian sequence number followed by filler
//! computed from it, so a receiver can check that a frame arrived byte for byte as sent.

use std::collections::VecDeque;
use std::time::Duration;

use super::endpoint::{Endpoint, VcId};
use natm_proto::time::Instant;

/// The filler of frame `seq` repeats every 256 bytes: byte `i` is `key(seq) ^ i`. It
/// varies with both, so a flipped bit anywhere shows, and it is built and checked by
/// block copies and compares, which keeps long runs cheap even in debug builds.
fn filler_block(seq: u64) -> [u8; 256] {
    let key = (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8;
    let mut block = [0u8; 256];
    for (i, b) in block.iter_mut().enumerate() {
        *b = key ^ i as u8;
    }
    block
}

/// A numbered frame of `len` bytes (at least 8: shorter requests are padded to 8).
pub fn numbered_frame(seq: u64, len: usize) -> Vec<u8> {
    let block = filler_block(seq);
    let mut f = Vec::with_capacity(len.max(8));
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < len {
        let at = f.len() % 256;
        let take = (256 - at).min(len - f.len());
        f.extend_from_slice(&block[at..at + take]);
    }
    f
}

/// The sequence number of a numbered frame, if it is long enough to have one.
pub fn frame_seq(frame: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(frame.get(..8)?.try_into().ok()?))
}

/// Whether a numbered frame is exactly as [`numbered_frame`] made it.
pub fn frame_intact(frame: &[u8]) -> bool {
    let Some(seq) = frame_seq(frame) else {
        return false;
    };
    let block = filler_block(seq);
    let mut at = 8;
    while at < frame.len() {
        let off = at % 256;
        let take = (256 - off).min(frame.len() - at);
        if frame[at..at + take] != block[off..off + take] {
            return false;
        }
        at += take;
    }
    true
}

/// Sends `count` numbered frames of `len` bytes on one VC: as fast as the transmit ring
/// takes them, or one per `interval` if paced. Counts what comes back.
#[derive(Debug, Clone)]
pub struct Blaster {
    vc: VcId,
    count: u64,
    len: usize,
    next: u64,
    next_at: Instant,
    interval: Option<Duration>,
    /// The latest time the simulator told us; a deadline not after it is not a timer.
    seen: Instant,
    received: u64,
}

impl Blaster {
    /// `count` frames of `len` bytes on `vc`, back to back from time zero.
    pub fn new(vc: VcId, count: u64, len: usize) -> Self {
        Blaster {
            vc,
            count,
            len,
            next: 0,
            next_at: Instant::ZERO,
            interval: None,
            seen: Instant::ZERO,
            received: 0,
        }
    }

    /// Starts sending at `t` instead of time zero.
    #[must_use]
    pub fn starting_at(mut self, t: Instant) -> Self {
        self.next_at = t;
        self
    }

    /// Sends one frame every `interval` (by timer) instead of back to back.
    #[must_use]
    pub fn paced(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Frames handed to the network so far.
    pub fn sent(&self) -> u64 {
        self.next
    }

    /// Whether every frame has been handed to the network.
    pub fn is_done(&self) -> bool {
        self.next >= self.count
    }

    /// Frames received back (acks or echoes).
    pub fn received(&self) -> u64 {
        self.received
    }
}

impl Endpoint for Blaster {
    fn handle_frame(&mut self, now: Instant, _vc: VcId, _frame: &[u8]) {
        self.seen = now;
        self.received += 1;
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(VcId, Vec<u8>)> {
        self.seen = now;
        if self.is_done() || now < self.next_at {
            return None;
        }
        let frame = numbered_frame(self.next, self.len);
        self.next += 1;
        if let Some(iv) = self.interval {
            self.next_at = self.next_at.max(now - iv) + iv;
        }
        Some((self.vc, frame))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        // Only a future send time is a timer; when ready now, the ring is what waits.
        (!self.is_done() && self.next_at > self.seen).then_some(self.next_at)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.seen = now;
    }
}

/// One frame as a [`Sink`] saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Arrival {
    /// When it was delivered.
    pub at: Instant,
    /// On which VC.
    pub vc: VcId,
    /// Its sequence number (`u64::MAX` if shorter than 8 bytes).
    pub seq: u64,
    /// Its length.
    pub len: usize,
}

/// Receives frames: counts them, checks that numbered frames are intact, optionally
/// records each arrival and answers each with an ack on the same VC.
#[derive(Debug, Clone, Default)]
pub struct Sink {
    record: bool,
    verify: bool,
    ack_len: Option<usize>,
    acks: VecDeque<(VcId, u64)>,
    arrivals: Vec<Arrival>,
    frames: u64,
    bytes: u64,
    damaged: u64,
}

impl Sink {
    /// Records and verifies every arrival.
    pub fn new() -> Self {
        Sink {
            record: true,
            verify: true,
            ..Sink::default()
        }
    }

    /// Only counts frames and bytes (for long runs where a record would cost memory).
    pub fn counting() -> Self {
        Sink::default()
    }

    /// Answers every frame with a numbered ack of `len` bytes carrying its sequence
    /// number, on the same VC.
    #[must_use]
    pub fn with_acks(mut self, len: usize) -> Self {
        self.ack_len = Some(len);
        self
    }

    /// Every arrival, in order (empty for a counting sink).
    pub fn arrivals(&self) -> &[Arrival] {
        &self.arrivals
    }

    /// Frames received.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Bytes received.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Frames whose content was not what the sender made (0 unless the network lied).
    pub fn damaged(&self) -> u64 {
        self.damaged
    }
}

impl Endpoint for Sink {
    fn handle_frame(&mut self, now: Instant, vc: VcId, frame: &[u8]) {
        self.frames += 1;
        self.bytes += frame.len() as u64;
        if self.verify && !frame_intact(frame) {
            self.damaged += 1;
        }
        let seq = frame_seq(frame).unwrap_or(u64::MAX);
        if self.record {
            self.arrivals.push(Arrival {
                at: now,
                vc,
                seq,
                len: frame.len(),
            });
        }
        if self.ack_len.is_some() {
            self.acks.push_back((vc, seq));
        }
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<(VcId, Vec<u8>)> {
        let len = self.ack_len?;
        let (vc, seq) = self.acks.pop_front()?;
        Some((vc, numbered_frame(seq, len)))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

/// Sends every frame it receives back on the same VC, unchanged.
#[derive(Debug, Clone, Default)]
pub struct Echo {
    pending: VecDeque<(VcId, Vec<u8>)>,
    echoed: u64,
}

impl Echo {
    /// An echo with nothing pending.
    pub fn new() -> Self {
        Echo::default()
    }

    /// Frames sent back so far.
    pub fn echoed(&self) -> u64 {
        self.echoed
    }
}

impl Endpoint for Echo {
    fn handle_frame(&mut self, _now: Instant, vc: VcId, frame: &[u8]) {
        self.pending.push_back((vc, frame.to_vec()));
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<(VcId, Vec<u8>)> {
        let out = self.pending.pop_front()?;
        self.echoed += 1;
        Some(out)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

/// Any of the test endpoints, so one `Sim<TestHost>` can mix them with typed access.
#[derive(Debug, Clone)]
pub enum TestHost {
    /// A [`Blaster`].
    Blaster(Blaster),
    /// A [`Sink`].
    Sink(Sink),
    /// An [`Echo`].
    Echo(Echo),
}

impl TestHost {
    /// The blaster inside, if this is one.
    pub fn as_blaster(&self) -> Option<&Blaster> {
        match self {
            TestHost::Blaster(b) => Some(b),
            _ => None,
        }
    }

    /// The sink inside, if this is one.
    pub fn as_sink(&self) -> Option<&Sink> {
        match self {
            TestHost::Sink(s) => Some(s),
            _ => None,
        }
    }

    /// The echo inside, if this is one.
    pub fn as_echo(&self) -> Option<&Echo> {
        match self {
            TestHost::Echo(e) => Some(e),
            _ => None,
        }
    }

    fn inner(&mut self) -> &mut dyn Endpoint {
        match self {
            TestHost::Blaster(b) => b,
            TestHost::Sink(s) => s,
            TestHost::Echo(e) => e,
        }
    }
}

impl From<Blaster> for TestHost {
    fn from(b: Blaster) -> Self {
        TestHost::Blaster(b)
    }
}

impl From<Sink> for TestHost {
    fn from(s: Sink) -> Self {
        TestHost::Sink(s)
    }
}

impl From<Echo> for TestHost {
    fn from(e: Echo) -> Self {
        TestHost::Echo(e)
    }
}

impl Endpoint for TestHost {
    fn handle_frame(&mut self, now: Instant, vc: VcId, frame: &[u8]) {
        self.inner().handle_frame(now, vc, frame)
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(VcId, Vec<u8>)> {
        self.inner().poll_transmit(now)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            TestHost::Blaster(b) => b.poll_timeout(),
            TestHost::Sink(s) => s.poll_timeout(),
            TestHost::Echo(e) => e.poll_timeout(),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.inner().handle_timeout(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_frames_round_trip_and_show_damage() {
        let mut f = numbered_frame(42, 100);
        assert_eq!(f.len(), 100);
        assert_eq!(frame_seq(&f), Some(42));
        assert!(frame_intact(&f));
        f[57] ^= 0x10;
        assert!(!frame_intact(&f));
        let long = numbered_frame(3, 4096);
        assert!(frame_intact(&long));
        assert_eq!(long[300], long[300 + 256]);
        let mut long = long;
        long[4095] ^= 1;
        assert!(!frame_intact(&long));
        assert_eq!(numbered_frame(7, 3).len(), 8);
        assert_eq!(frame_seq(&[1, 2]), None);
    }

    #[test]
    fn paced_blaster_wants_a_timer_only_while_waiting() {
        let ms = |n| Instant::ZERO + Duration::from_millis(n);
        let mut b = Blaster::new(VcId(1), 2, 10).paced(Duration::from_millis(5));
        assert!(b.poll_transmit(ms(0)).is_some());
        assert!(b.poll_transmit(ms(0)).is_none());
        assert_eq!(b.poll_timeout(), Some(ms(5)));
        b.handle_timeout(ms(5));
        assert!(b.poll_transmit(ms(5)).is_some());
        assert!(b.is_done());
        assert_eq!(b.poll_timeout(), None);
    }
}
