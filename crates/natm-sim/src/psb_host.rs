//! Simulated hosts that run natm PSBs, with the application models that feed and
//! drain them: the same transport code the engine runs, on the virtual clock.

use std::collections::HashMap;

use super::ready::ReadySet;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;

use super::endpoint::{Endpoint, VcId};
use super::timers::TimerHeap;
use natm_proto::time::Instant;
use natm_proto::transport::{Event, Psb};

/// Period of the test pattern, bytes: a power of two, so stream offsets (which wrap
/// at 2^32) stay in step with it, and far longer than any TPDU.
const PATTERN_PERIOD: u32 = 1 << 20;
/// Most bytes a [`Source`] hands its PSB in one write.
const WRITE_MAX: usize = 64 * 1024;
/// Where in the period each tag's pattern starts, per tag: odd, so no two tags' data
/// line up on a TPDU boundary.
const TAG_STRIDE: u32 = 4099;

/// The byte at `offset` of the test pattern of VC `tag`: cheap, not periodic within a
/// TPDU, and different per VC, so misplaced, mixed or corrupted data never matches.
///
/// Every tag reads the same 1 MiB sequence from its own starting point, so a source
/// hands its PSB slices of one shared buffer instead of a copy per VC: a VC's queued
/// data costs its TPDU slots, not its bytes, and 100,000 VCs fit in memory.
pub fn pattern_byte(tag: u8, offset: u32) -> u8 {
    let x = offset.wrapping_add(u32::from(tag) * TAG_STRIDE) % PATTERN_PERIOD;
    let y = x.wrapping_mul(0x9E37_79B1).rotate_left(11) ^ x;
    (y >> 24) as u8
}

/// `len` (at most [`WRITE_MAX`]) bytes of tag `tag`'s pattern from `offset`: a slice
/// of the one shared pattern buffer, never a copy.
fn pattern_slice(tag: u8, offset: u32, len: usize) -> Bytes {
    static PATTERN: OnceLock<Bytes> = OnceLock::new();
    let all = PATTERN.get_or_init(|| {
        (0..PATTERN_PERIOD as usize + WRITE_MAX)
            .map(|i| pattern_byte(0, i as u32))
            .collect::<Vec<u8>>()
            .into()
    });
    let start = (offset.wrapping_add(u32::from(tag) * TAG_STRIDE) % PATTERN_PERIOD) as usize;
    all.slice(start..start + len.min(WRITE_MAX))
}

/// Where a [`Source`] writes: a PSB, or a duplex connection's sending half.
pub(crate) trait Outlet {
    fn capacity(&self) -> usize;
    fn send_bytes(
        &mut self,
        data: &Bytes,
        end: bool,
    ) -> Result<usize, natm_proto::transport::SendError>;
    fn close(&mut self);
}

/// Where a [`Sink`] reads.
pub(crate) trait Inlet {
    fn next_chunk(
        &mut self,
    ) -> Result<Option<natm_proto::transport::Chunk>, natm_proto::transport::RecvError>;
}

impl Outlet for Psb {
    fn capacity(&self) -> usize {
        self.send_capacity()
    }
    fn send_bytes(
        &mut self,
        data: &Bytes,
        end: bool,
    ) -> Result<usize, natm_proto::transport::SendError> {
        Psb::send_bytes(self, data, end)
    }
    fn close(&mut self) {
        Psb::close(self)
    }
}

impl Inlet for Psb {
    fn next_chunk(
        &mut self,
    ) -> Result<Option<natm_proto::transport::Chunk>, natm_proto::transport::RecvError> {
        self.recv_chunk()
    }
}

/// An application that sends `total` bytes as messages of `msg_size` bytes (or as a
/// byte stream), as fast as the PSB accepts them, then closes.
#[derive(Debug, Clone)]
pub struct Source {
    tag: u8,
    total: u64,
    msg_size: u64,
    queued: u64,
    msg_off: u64,
    start: Instant,
    started: bool,
    close_when_done: bool,
    closed: bool,
}

impl Source {
    /// A bulk source of `total` bytes in messages of `msg_size` bytes (`u64::MAX`: a
    /// byte stream).
    pub fn new(tag: u8, total: u64, msg_size: u64) -> Self {
        Source {
            tag,
            total,
            msg_size: msg_size.max(1),
            queued: 0,
            msg_off: 0,
            start: Instant::ZERO,
            started: false,
            close_when_done: true,
            closed: false,
        }
    }

    /// Start sending at `t` rather than at once.
    pub fn starting_at(mut self, t: Instant) -> Self {
        self.start = t;
        self
    }

    /// Keep the VC open after the last byte.
    pub fn keep_open(mut self) -> Self {
        self.close_when_done = false;
        self
    }

    /// Bytes the PSB has accepted.
    pub fn queued(&self) -> u64 {
        self.queued
    }

    /// When the source starts.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Whether the source has started (its start time has come).
    pub fn started(&self) -> bool {
        self.started
    }

    /// Whether every byte has been handed to the PSB.
    pub fn done(&self) -> bool {
        self.queued >= self.total
    }

    pub(crate) fn feed(&mut self, now: Instant, psb: &mut impl Outlet) {
        if now < self.start {
            return;
        }
        self.started = true;
        while self.queued < self.total {
            let in_msg = self.msg_size - self.msg_off;
            let n = in_msg
                .min(self.total - self.queued)
                .min(WRITE_MAX as u64)
                .min(psb.capacity() as u64) as usize;
            if n == 0 && in_msg > 0 {
                break;
            }
            // Offsets restart with each message, as the TPDU's aux field counts them;
            // the pattern is keyed by offset within the stream for stream VCs.
            let base = if self.msg_size == u64::MAX {
                self.queued
            } else {
                self.msg_off
            };
            let data = pattern_slice(self.tag, base as u32, n);
            let end =
                self.msg_off + n as u64 == self.msg_size || self.queued + n as u64 == self.total;
            match psb.send_bytes(&data, end) {
                Ok(k) => {
                    self.queued += k as u64;
                    self.msg_off += k as u64;
                    if self.msg_off == self.msg_size || (end && k == n) {
                        self.msg_off = 0;
                    }
                    if k < n {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        if self.done() && self.close_when_done && !self.closed {
            psb.close();
            self.closed = true;
        }
    }
}

/// An application that reads everything, checks every byte against the pattern, and
/// records when data arrived.
#[derive(Debug, Clone)]
pub struct Sink {
    tag: u8,
    delivered: u64,
    messages: u64,
    intact: bool,
    first_at: Option<Instant>,
    last_at: Option<Instant>,
    first_bytes: u64,
    /// Message being received: its number and bytes so far.
    cur: Option<(u32, u64)>,
    last_msg: Option<u32>,
    expect: Option<(u64, u64)>,
    bad_messages: u64,
}

impl Sink {
    /// A sink checking the pattern of VC `tag`.
    pub fn new(tag: u8) -> Self {
        Sink {
            tag,
            delivered: 0,
            messages: 0,
            intact: true,
            first_at: None,
            last_at: None,
            first_bytes: 0,
            cur: None,
            last_msg: None,
            expect: None,
            bad_messages: 0,
        }
    }

    /// Check message framing too: messages of `msg_size` bytes (the last of `total`
    /// may be shorter), each delivered at most once and in order.
    pub fn expecting(mut self, msg_size: u64, total: u64) -> Self {
        self.expect = Some((msg_size, total));
        self
    }

    /// Messages missing before the last one delivered (lost whole, or dropped partial
    /// by the receiver), from their numbers; 0 unless [`Sink::expecting`] was set.
    pub fn messages_missing(&self) -> u64 {
        self.last_msg
            .map_or(0, |m| u64::from(m) + 1)
            .saturating_sub(self.messages)
    }

    /// Messages delivered partial, duplicated, out of order or of the wrong size.
    pub fn bad_messages(&self) -> u64 {
        self.bad_messages
    }

    /// Payload bytes delivered.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Whole messages delivered.
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// Whether every delivered byte matched what was sent at its place.
    pub fn intact(&self) -> bool {
        self.intact
    }

    /// The rate at which data arrived, bit/s: the bytes after the first delivery over
    /// the time from the first delivery to the last. Exact for periodic deliveries,
    /// whatever their size (a message VC delivers whole messages in lumps).
    pub fn steady_rate_bps(&self) -> Option<f64> {
        let (first, last) = self.span()?;
        let d = (last - first).as_secs_f64();
        (d > 0.0).then(|| (self.delivered - self.first_bytes) as f64 * 8.0 / d)
    }

    /// When the first and the last byte arrived.
    pub fn span(&self) -> Option<(Instant, Instant)> {
        Some((self.first_at?, self.last_at?))
    }

    pub(crate) fn drain(&mut self, now: Instant, psb: &mut impl Inlet) {
        while let Ok(Some(c)) = psb.next_chunk() {
            if c.data.is_empty() && !c.end {
                continue;
            }
            if self.first_at.is_none() || self.first_at == Some(now) {
                self.first_bytes += c.data.len() as u64;
            }
            self.first_at.get_or_insert(now);
            self.last_at = Some(now);
            self.check(&c.data, c.offset);
            self.frame(&c);
            self.delivered += c.data.len() as u64;
            if c.end {
                self.messages += 1;
            }
        }
    }

    fn frame(&mut self, c: &natm_proto::transport::Chunk) {
        let Some((size, total)) = self.expect else {
            return;
        };
        if c.start {
            if self.cur.is_some()
                || self
                    .last_msg
                    .is_some_and(|m| c.msg.wrapping_sub(m) > 1 << 31 || c.msg == m)
            {
                self.bad_messages += 1;
            }
            self.cur = Some((c.msg, 0));
        }
        match &mut self.cur {
            Some((m, n)) if *m == c.msg => *n += c.data.len() as u64,
            _ => {
                self.bad_messages += 1;
                return;
            }
        }
        if c.end {
            if let Some((m, n)) = self.cur.take() {
                let want = size.min(total - (u64::from(m) * size).min(total));
                if n != want {
                    self.bad_messages += 1;
                }
                self.last_msg = Some(m);
            }
        }
    }

    fn check(&mut self, data: &Bytes, offset: u32) {
        for (i, &b) in data.iter().enumerate() {
            if b != pattern_byte(self.tag, offset.wrapping_add(i as u32)) {
                self.intact = false;
                return;
            }
        }
    }
}

/// What drives one VC end on a host.
#[derive(Debug, Clone)]
pub enum App {
    /// Sends.
    Source(Source),
    /// Receives.
    Sink(Sink),
}

/// One VC end on a [`PsbHost`].
#[derive(Debug)]
pub struct HostVc {
    /// The VC.
    pub id: VcId,
    /// Its protocol status block.
    pub psb: Psb,
    /// The application model.
    pub app: App,
    /// Events the PSB raised, with their times (`Readable` and `Writable`, which
    /// follow nearly every frame, are not kept: a long transfer would grow this
    /// without bound).
    pub events: Vec<(Instant, Event)>,
    /// When this end first finished (closed or aborted, nothing left to send).
    pub finished_at: Option<Instant>,
}

/// A host running PSBs: polls its VCs round robin for frames to send.
///
/// It scales with the VCs it holds: a frame finds its VC through an index, the
/// earliest timer is the top of a heap, and a poll for frames visits only the VCs that
/// may have one (those touched by a frame, a timer or the application since they last
/// had nothing, and those whose deadline has come), in the same round-robin order a
/// scan of every VC would take, so the results are the same as that scan's.
#[derive(Debug, Default)]
pub struct PsbHost {
    vcs: Vec<HostVc>,
    index: HashMap<VcId, usize>,
    next: usize,
    /// VC ends that may have a frame to send.
    ready: ReadySet,
    /// Each VC end's next deadline (its PSB's, or its source's start).
    timers: TimerHeap,
    /// Whether each VC end is finished now.
    done: Vec<bool>,
    /// VC ends not finished now.
    unfinished: usize,
    due: Vec<usize>,
}

impl PsbHost {
    /// An empty host.
    pub fn new() -> Self {
        PsbHost::default()
    }

    /// Add a VC end. A second end with the same id on one host is ignored (the
    /// simulator routes a VC id to one end per host).
    pub fn add(&mut self, id: VcId, psb: Psb, app: App) {
        if self.index.contains_key(&id) {
            return;
        }
        let i = self.vcs.len();
        self.vcs.push(HostVc {
            id,
            psb,
            app,
            events: Vec::new(),
            finished_at: None,
        });
        self.index.insert(id, i);
        self.done.push(false);
        self.unfinished += 1;
        self.ready.insert(i);
        self.touch(i, None);
    }

    /// The VC ends on this host.
    pub fn vcs(&self) -> &[HostVc] {
        &self.vcs
    }

    /// One VC end.
    pub fn vc(&self, id: VcId) -> Option<&HostVc> {
        self.index.get(&id).map(|&i| &self.vcs[i])
    }

    fn service(now: Instant, vc: &mut HostVc) {
        match &mut vc.app {
            App::Source(s) => s.feed(now, &mut vc.psb),
            App::Sink(s) => s.drain(now, &mut vc.psb),
        }
        while let Some(e) = vc.psb.poll_event() {
            if !matches!(e, Event::Readable | Event::Writable) {
                vc.events.push((now, e));
            }
        }
    }

    /// After anything happened to VC end `i`: file its next deadline and note when it
    /// finished.
    fn touch(&mut self, i: usize, now: Option<Instant>) {
        let v = &mut self.vcs[i];
        let own = match &v.app {
            App::Source(s) if !s.started => Some(s.start),
            _ => None,
        };
        let at = [v.psb.poll_timeout(), own].into_iter().flatten().min();
        self.timers.set(i, at);
        if let Some(now) = now {
            let done = v.psb.is_finished();
            if done && v.finished_at.is_none() {
                v.finished_at = Some(now);
            }
            if done != self.done[i] {
                self.done[i] = done;
                if done {
                    self.unfinished -= 1;
                } else {
                    self.unfinished += 1;
                }
            }
        }
    }

    /// Whether every VC has finished (closed or aborted) with nothing left to send.
    pub fn finished(&self) -> bool {
        self.unfinished == 0
    }

    /// Offers VC end `i` a chance to send; its VC if it wrote a frame into `buf`.
    fn try_send(&mut self, now: Instant, i: usize, buf: &mut Vec<u8>) -> Option<VcId> {
        let v = &mut self.vcs[i];
        Self::service(now, v);
        let out = v.psb.poll_transmit(now).map(|t| {
            t.write_to(buf);
            v.id
        });
        if out.is_none() {
            self.ready.remove(i);
        }
        self.touch(i, Some(now));
        out
    }
}

impl Endpoint for PsbHost {
    fn handle_frame(&mut self, now: Instant, vc: VcId, frame: &[u8]) {
        if let Some(&i) = self.index.get(&vc) {
            let v = &mut self.vcs[i];
            v.psb.handle_frame(now, Bytes::copy_from_slice(frame));
            Self::service(now, v);
            self.ready.insert(i);
            self.touch(i, Some(now));
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(VcId, Vec<u8>)> {
        let mut buf = Vec::new();
        let vc = self.poll_transmit_into(now, &mut buf)?;
        Some((vc, buf))
    }

    fn poll_transmit_into(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<VcId> {
        buf.clear();
        let n = self.vcs.len();
        if n == 0 {
            return None;
        }
        // A VC whose deadline has come may send before its timer is handled.
        let mut due = std::mem::take(&mut self.due);
        self.timers.due(now, &mut due);
        for &i in &due {
            self.ready.insert(i);
        }
        self.due = due;
        // Round robin from `next`, as a scan of every VC would go.
        let start = self.next.min(n);
        for range in [start..n, 0..start] {
            let mut cursor = range.start;
            while let Some(i) = self.ready.first_in(cursor, range.end) {
                if let Some(vc) = self.try_send(now, i, buf) {
                    self.next = (i + 1) % n;
                    return Some(vc);
                }
                cursor = i + 1;
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.timers.earliest()
    }

    fn handle_timeout(&mut self, now: Instant) {
        let mut due = std::mem::take(&mut self.due);
        self.timers.due(now, &mut due);
        for &i in &due {
            let v = &mut self.vcs[i];
            if v.psb.poll_timeout().is_some_and(|t| t <= now) {
                v.psb.handle_timeout(now);
            }
            Self::service(now, v);
            self.ready.insert(i);
            self.touch(i, Some(now));
        }
        self.due = due;
    }
}

/// Goodput in bit/s for `bytes` delivered over `d`.
pub fn goodput(bytes: u64, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        bytes as f64 * 8.0 / d.as_secs_f64()
    }
}
