//! Bare AAL5 VCs (`transport=none`): the two simplex machines of a VC that carries
//! plain AAL5 SDUs, as a Linux-ATM socket sends them — no TPDU header, handshake,
//! cookie, acknowledgement or retransmission.
//!
//! A message is one SDU. The sender refuses a message over the VC's `max_sdu` (a
//! typed error, nothing sent) and shapes a CBR or VBR VC's SDUs to its traffic
//! contract — the PCR, and a VBR VC's SCR and MBS too (GCRA and dual GCRA,
//! `flow::gcra`); the receiver delivers each SDU as one message, dropping (and
//! counting) what is over its `max_sdu` or what does not fit its receive buffer. The
//! VC exists only because signalling or a configured PVC made it: there is no state
//! for an unknown sender.
//!
//! Departures from natm's transport (seed 000 §5.3) are the point: a bare VC is what
//! Linux's ATM stack offers (`aread`/`awrite`, `svc_send`), so natm applications can
//! talk to it. Its end is signalling's RELEASE (or, on a PVC, nothing at all): the
//! receiver learns of the end from [`BareRx::peer_released`].
//!
//! Sans-IO like the rest of natm-proto: time comes with every call.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Buf, Bytes};

use crate::flow::gcra::{cell_interval, DualGcra, Gcra};
use crate::time::Instant;
use crate::transport::{AbortReason, SendError};
use crate::wire::qos::{Direction, Qos, Rate, TrafficClass, BITS_PER_CELL};

/// AAL5 CPCS trailer octets (UU, CPI, Length, CRC-32), counted when the shaper sizes
/// an SDU in cells.
const AAL5_TRAILER: usize = 8;

/// Send queue of a bare VC when the configuration does not say: room for a burst of
/// SDUs held by the shaper.
pub const DEFAULT_BARE_QUEUE: usize = 256 * 1024;

/// Receive buffer of a bare VC when the configuration does not say: 1 MiB, a natm
/// VC's default, so that the engine's watermarks (half the buffer) hold the socket
/// as late for a bare VC as for natm's transport.
pub const DEFAULT_BARE_RCV_BUF: usize = 1024 * 1024;

/// How long a bare receiver still takes SDUs after the call's release: the RELEASE
/// crosses the signalling path, the last SDUs the data path, and neither waits for the
/// other (a bare VC has no close of its own), so the last SDUs can come second.
pub const RELEASE_GRACE: Duration = Duration::from_millis(50);

/// How one simplex bare VC runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BareConfig {
    /// Largest SDU, bytes: a larger message is refused (sending) or dropped
    /// (receiving).
    pub max_sdu: u32,
    /// Shape the SDUs sent at this peak rate, payload bit/s (`None`: send at once).
    pub pcr_bps: Option<u64>,
    /// A VBR contract's sustainable rate (payload bit/s) and maximum burst size
    /// (cells): the SDUs are shaped to the dual GCRA of PCR and SCR/MBS, which a
    /// policing switch applies to them (`None`: the PCR alone).
    pub scr: Option<(u64, u32)>,
    /// Bytes the VC may hold: SDUs queued for the shaper (sending) or not yet read
    /// (receiving). At least one `max_sdu` is always allowed.
    pub queue_bytes: usize,
}

impl BareConfig {
    /// A direction of `qos` (which must be a bare QoS, though nothing here needs it):
    /// its `max_sdu`, and for a sending CBR or VBR direction with a numeric `pcr` (or
    /// else `max_pcr`), shaping at that rate; a VBR direction with an `scr` is shaped
    /// to it too, with its `mbs` (1 cell if not given, as the switch's policer takes
    /// it).
    pub fn from_qos(qos: &Qos, dir: Direction) -> BareConfig {
        let tp = match dir {
            Direction::Tx => qos.tx(),
            Direction::Rx => qos.rx(),
        };
        let shaped =
            dir == Direction::Tx && matches!(tp.class, TrafficClass::Cbr | TrafficClass::Vbr);
        let pcr_bps = shaped
            .then(|| tp.pcr.or(tp.max_pcr).and_then(Rate::bits_per_sec))
            .flatten()
            .filter(|&bps| bps > 0);
        let scr = pcr_bps
            .and(tp.scr)
            .and_then(Rate::bits_per_sec)
            .filter(|&bps| bps > 0)
            .map(|bps| (bps, tp.mbs.unwrap_or(1).max(1)));
        BareConfig {
            max_sdu: qos.max_sdu(dir),
            pcr_bps,
            scr,
            queue_bytes: match dir {
                Direction::Tx => DEFAULT_BARE_QUEUE,
                Direction::Rx => DEFAULT_BARE_RCV_BUF,
            },
        }
    }

    fn limit(&self) -> usize {
        self.queue_bytes.max(self.max_sdu as usize)
    }
}

/// Counters of one bare VC (what `natm call`/`natm listen` print for it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VcCounters {
    /// SDUs put on the wire.
    pub sdus_sent: u64,
    /// Their bytes.
    pub bytes_sent: u64,
    /// SDUs received and queued for the application.
    pub sdus_received: u64,
    /// Their bytes.
    pub bytes_received: u64,
    /// Messages refused because they were over `max_sdu` (nothing was sent).
    pub refused_too_big: u64,
    /// Sends that found the shaping queue full (the sender waited, or got
    /// "would block").
    pub queue_full: u64,
    /// SDUs the shaper held back because they came ahead of the peak rate.
    pub shaped: u64,
    /// Received SDUs dropped: over `max_sdu`.
    pub dropped_too_big: u64,
    /// Received SDUs dropped: the receive buffer was full (the application did not
    /// read).
    pub dropped_queue_full: u64,
    /// Received SDUs dropped: empty (AAL5's Length 0 is an abort), or arriving on the
    /// VC this end sends on (a bare VC is simplex).
    pub dropped_other: u64,
}

/// Where a bare half is, in the terms the engine waits on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Flags {
    closed: bool,
    aborted: Option<AbortReason>,
}

/// The cell rate of `bps` payload bit/s, rounded up (at least 1 cell/s).
fn cells_per_sec(bps: u64) -> u64 {
    bps.div_ceil(BITS_PER_CELL).max(1)
}

/// A bare sender's shaper: GCRA(1/PCR, 0) for CBR, the dual GCRA for VBR.
#[derive(Debug, Clone)]
enum Shaper {
    Peak(Gcra),
    Dual(DualGcra),
}

impl Shaper {
    /// seed 000 §5.3.4's leaky bucket in its ATM form (specs §3.4's frame-at-a-time
    /// shaper): virtual scheduling with a limit of 0 on the PCR, and for VBR also the
    /// SCR's test with its burst tolerance BT = (MBS − 1)(T_s − T) (specs §3.1), so
    /// up to MBS cells go at the PCR and the rest at the SCR. Departure from seed 000:
    /// no leaky-bucket depth at the PCR, since a Linux peer behind a policing switch
    /// must see PCR-conforming frames.
    fn new(cfg: &BareConfig) -> Option<Shaper> {
        let pcr = cell_interval(cells_per_sec(cfg.pcr_bps?));
        Some(match cfg.scr {
            None => Shaper::Peak(Gcra::new(pcr, Duration::ZERO)),
            Some((scr_bps, mbs)) => Shaper::Dual(DualGcra::new(
                pcr,
                Duration::ZERO,
                cell_interval(cells_per_sec(scr_bps)),
                mbs,
                None,
            )),
        })
    }

    /// The earliest departure at or after `now` of a frame of `cells` cells.
    ///
    /// A frame's cells reach the switch back to back, so the SCR test sees the whole
    /// frame at once: the frame waits until its *last* cell would conform,
    /// `TAT_s + (cells − 1)·T_s − BT ≤ t`, not only its first (specs §3.4's rule for
    /// one cell). With only the first cell's test the frame's other cells need
    /// `(cells − 1)·T_s` of CDVT at the policer; with this rule the SCR test needs
    /// none, and the policer's CDVT has only the PCR test's `(cells − 1)·T` to cover,
    /// which every frame-at-a-time sender needs. A frame longer than the MBS can never
    /// conform so; it goes by its first cell's test.
    fn earliest(&self, now: Instant, cells: u32) -> Instant {
        match self {
            Shaper::Peak(g) => g.earliest(now),
            Shaper::Dual(g) => {
                let s = g.sustained();
                let rest = s.increment().saturating_mul(cells.saturating_sub(1));
                let last = match s.tat() {
                    Some(tat) if rest <= s.limit() => {
                        Instant::from_nanos((tat + rest).as_nanos().saturating_sub(
                            u64::try_from(s.limit().as_nanos()).unwrap_or(u64::MAX),
                        ))
                    }
                    _ => now,
                };
                g.earliest(now).max(last)
            }
        }
    }

    /// Send a frame of `cells` cells at `at` (no earlier than [`Shaper::earliest`]).
    fn charge(&mut self, at: Instant, cells: u32) {
        match self {
            Shaper::Peak(g) => {
                g.shape_n(at, cells);
            }
            Shaper::Dual(g) => {
                g.shape_n(at, cells);
            }
        }
    }

    /// When a frame of `cells` may go, once a frame has gone (before: at once).
    fn next_at(&self, cells: u32) -> Option<Instant> {
        let sent = match self {
            Shaper::Peak(g) => g.tat().is_some(),
            Shaper::Dual(g) => g.peak().tat().is_some(),
        };
        sent.then(|| self.earliest(Instant::ZERO, cells))
    }
}

/// Cells of an SDU of `len` octets with its AAL5 trailer.
fn sdu_cells(len: usize) -> u32 {
    u32::try_from((len + AAL5_TRAILER).div_ceil(48)).unwrap_or(u32::MAX)
}

/// The sending half of a bare VC.
#[derive(Debug)]
pub struct BareTx {
    cfg: BareConfig,
    shaper: Option<Shaper>,
    queue: VecDeque<Bytes>,
    queued: usize,
    flags: Flags,
    counters: VcCounters,
}

impl BareTx {
    /// A sending VC, up at once.
    pub fn new(cfg: BareConfig) -> BareTx {
        // Each SDU is charged its cells (specs §3.4's frame-at-a-time shaper).
        let shaper = Shaper::new(&cfg);
        BareTx {
            cfg,
            shaper,
            queue: VecDeque::new(),
            queued: 0,
            flags: Flags::default(),
            counters: VcCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &BareConfig {
        &self.cfg
    }

    /// Queue one message as one SDU, without copying it. All or nothing: over
    /// `max_sdu` is [`SendError::MessageTooLarge`], an empty message
    /// [`SendError::Empty`], and a full queue [`SendError::WindowFull`] — in each case
    /// nothing is taken.
    pub fn send_bytes(&mut self, sdu: Bytes) -> Result<usize, SendError> {
        self.admit(sdu.len())?;
        Ok(self.push(sdu))
    }

    /// As [`BareTx::send_bytes`], copying `data` once (after the checks).
    pub fn send(&mut self, data: &[u8]) -> Result<usize, SendError> {
        self.admit(data.len())?;
        Ok(self.push(Bytes::copy_from_slice(data)))
    }

    fn admit(&mut self, len: usize) -> Result<(), SendError> {
        if let Some(r) = self.flags.aborted {
            return Err(SendError::Aborted(r));
        }
        if self.flags.closed {
            return Err(SendError::Closed);
        }
        if len > self.cfg.max_sdu as usize {
            self.counters.refused_too_big += 1;
            return Err(SendError::MessageTooLarge {
                size: len as u64,
                max: u64::from(self.cfg.max_sdu),
            });
        }
        if len == 0 {
            return Err(SendError::Empty);
        }
        if self.queued + len > self.cfg.limit() {
            self.counters.queue_full += 1;
            return Err(SendError::WindowFull);
        }
        Ok(())
    }

    fn push(&mut self, sdu: Bytes) -> usize {
        let len = sdu.len();
        self.queued += len;
        self.queue.push_back(sdu);
        len
    }

    /// The next SDU to put on the wire, if the shaper lets it go at `now`.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Bytes> {
        let len = self.queue.front()?.len();
        if let Some(g) = &mut self.shaper {
            let cells = sdu_cells(len);
            if g.earliest(now, cells) > now {
                return None;
            }
            g.charge(now, cells);
        }
        let sdu = self.queue.pop_front()?;
        self.queued -= len;
        self.counters.sdus_sent += 1;
        self.counters.bytes_sent += len as u64;
        if let (Some(g), Some(next)) = (&self.shaper, self.queue.front()) {
            if g.earliest(now, sdu_cells(next.len())) > now {
                self.counters.shaped += 1;
            }
        }
        Some(sdu)
    }

    /// When the shaper lets the next queued SDU go (`None`: nothing waits for it).
    /// With a limit of 0 that is the shaper's theoretical arrival time.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let next = self.queue.front()?;
        self.shaper.as_ref()?.next_at(sdu_cells(next.len()))
    }

    /// Free bytes in the queue, reported as 0 until a largest SDU fits, so that a
    /// sender woken by room can always queue its message.
    pub fn capacity(&self) -> usize {
        let free = self.cfg.limit().saturating_sub(self.queued);
        if free >= self.cfg.max_sdu as usize {
            free
        } else {
            0
        }
    }

    /// Bytes queued and not yet sent.
    pub fn buffered(&self) -> usize {
        self.queued
    }

    /// Something is queued that the shaper holds back.
    pub fn over_rate(&self) -> bool {
        !self.queue.is_empty() && self.shaper.is_some()
    }

    /// Change the shaping rate (payload bit/s); a VC without a shaper gets one. The
    /// rate is the one a change of QoS moves: a VBR contract's SCR (within its PCR),
    /// any other's PCR.
    pub fn set_rate(&mut self, bps: u64) {
        match (self.cfg.scr.as_mut(), self.cfg.pcr_bps) {
            (Some(scr), Some(pcr)) => scr.0 = bps.min(pcr),
            _ => self.cfg.pcr_bps = Some(bps),
        }
        self.shaper = Shaper::new(&self.cfg);
    }

    /// No more messages: the VC is closed once the queue has drained (there is
    /// nothing to tell the peer; signalling ends the call).
    pub fn close(&mut self) {
        self.flags.closed = true;
    }

    /// Drop what is queued and stop.
    pub fn abort(&mut self, reason: AbortReason) {
        if self.flags.aborted.is_none() {
            self.flags.aborted = Some(reason);
        }
        self.queue.clear();
        self.queued = 0;
    }

    /// Closed with the queue drained.
    pub fn is_closed(&self) -> bool {
        self.flags.closed && self.queue.is_empty()
    }

    /// Why the VC was aborted, if it was.
    pub fn aborted(&self) -> Option<AbortReason> {
        self.flags.aborted
    }

    /// A frame arrived on the VC this end sends on: a bare VC is simplex, so it is
    /// dropped and counted.
    pub fn handle_stray(&mut self) {
        self.counters.dropped_other += 1;
    }

    /// The counters.
    pub fn counters(&self) -> &VcCounters {
        &self.counters
    }
}

/// The receiving half of a bare VC.
#[derive(Debug)]
pub struct BareRx {
    cfg: BareConfig,
    ready: VecDeque<Bytes>,
    readable: usize,
    /// The release came: SDUs are still taken until then.
    ending_at: Option<Instant>,
    peer_closed: bool,
    aborted: Option<AbortReason>,
    counters: VcCounters,
}

impl BareRx {
    /// A receiving VC, up at once.
    pub fn new(cfg: BareConfig) -> BareRx {
        BareRx {
            cfg,
            ready: VecDeque::new(),
            readable: 0,
            ending_at: None,
            peer_closed: false,
            aborted: None,
            counters: VcCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &BareConfig {
        &self.cfg
    }

    /// An SDU arrived (the frame without its VC header). Returns whether it was
    /// queued for the application; otherwise it was dropped and counted.
    pub fn handle_sdu(&mut self, sdu: Bytes) -> bool {
        if self.aborted.is_some() || self.peer_closed {
            self.counters.dropped_other += 1;
            return false;
        }
        let len = sdu.len();
        if len == 0 {
            self.counters.dropped_other += 1;
            return false;
        }
        if len > self.cfg.max_sdu as usize {
            self.counters.dropped_too_big += 1;
            return false;
        }
        if self.readable + len > self.cfg.limit() {
            self.counters.dropped_queue_full += 1;
            return false;
        }
        self.readable += len;
        self.counters.sdus_received += 1;
        self.counters.bytes_received += len as u64;
        self.ready.push_back(sdu);
        true
    }

    /// The next whole message (one SDU), as the buffer it arrived in.
    pub fn recv(&mut self) -> Option<Bytes> {
        let sdu = self.ready.pop_front()?;
        self.readable -= sdu.len();
        Some(sdu)
    }

    /// Copy received bytes into `buf` for a byte-oriented reader (an SDU may be
    /// taken over several reads).
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(front) = self.ready.front_mut() else {
                break;
            };
            let k = front.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&front[..k]);
            front.advance(k);
            n += k;
            self.readable -= k;
            if front.is_empty() {
                self.ready.pop_front();
            }
        }
        n
    }

    /// Bytes ready for the application.
    pub fn readable(&self) -> usize {
        self.readable
    }

    /// The receive buffer's size in bytes.
    pub fn rcv_buf(&self) -> usize {
        self.cfg.limit()
    }

    /// The call was released at `now`: SDUs are still taken for [`RELEASE_GRACE`]
    /// (the last ones may come after the RELEASE), then the data ends; what is queued
    /// is still read.
    pub fn peer_released(&mut self, now: Instant) {
        if self.ending_at.is_none() {
            self.ending_at = Some(now + RELEASE_GRACE);
        }
    }

    /// When the data ends after a release ([`BareRx::handle_timeout`] then).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ending_at.filter(|_| !self.peer_closed)
    }

    /// Timers: the release's grace is over, the data has ended.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.ending_at.is_some_and(|t| t <= now) {
            self.peer_closed = true;
        }
    }

    /// Whether the peer is done (the call released).
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Drop what is queued and stop.
    pub fn abort(&mut self, reason: AbortReason) {
        if self.aborted.is_none() {
            self.aborted = Some(reason);
        }
        self.ready.clear();
        self.readable = 0;
    }

    /// Why the VC was aborted, if it was.
    pub fn aborted(&self) -> Option<AbortReason> {
        self.aborted
    }

    /// The counters.
    pub fn counters(&self) -> &VcCounters {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::endpoint::{BareParams, Connection, Event, State};
    use crate::flow::DualGcra;
    use crate::wire::vcframe;

    const A: &str = "127.0.0.1:7001";
    const B: &str = "127.0.0.1:7002";

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn cfg(max_sdu: u32, pcr_bps: Option<u64>) -> BareConfig {
        BareConfig {
            max_sdu,
            pcr_bps,
            scr: None,
            queue_bytes: DEFAULT_BARE_QUEUE,
        }
    }

    /// Two ends of a bare VC pair: A sends on VCI 100 and receives on 101.
    fn pair(tx: BareConfig, rx: BareConfig) -> (Connection, Connection) {
        let a = Connection::bare(BareParams {
            peer: addr(B),
            vpi: 0,
            tx_vci: 100,
            rx_vci: 101,
            tx,
            rx,
        });
        let b = Connection::bare(BareParams {
            peer: addr(A),
            vpi: 0,
            tx_vci: 101,
            rx_vci: 100,
            tx,
            rx,
        });
        (a, b)
    }

    /// Move every datagram `from` has ready now to `to`; returns how many.
    fn pump(now: Instant, from: &mut Connection, to: &mut Connection, src: &str) -> usize {
        let mut n = 0;
        loop {
            let mut buf = Vec::new();
            let Some(t) = from.poll_transmit(now, &mut buf) else {
                return n;
            };
            assert_eq!(t.size, buf.len());
            assert!(to.handle_frame(now, addr(src), Bytes::from(buf)));
            n += 1;
        }
    }

    #[test]
    fn up_at_once_and_messages_cross_one_sdu_each_both_ways() {
        let now = Instant::ZERO;
        let (mut a, mut b) = pair(cfg(9188, None), cfg(9188, None));
        assert_eq!(
            (a.state(), b.state()),
            (State::Established, State::Established)
        );
        assert_eq!(a.poll_event(), Some(Event::Connected));
        let msgs: Vec<Vec<u8>> = (1..=20usize)
            .map(|i| (0..i * 400).map(|j| (j * 7 + i) as u8).collect())
            .collect();
        for m in &msgs {
            assert_eq!(a.send(m, true), Ok(m.len()));
        }
        assert_eq!(pump(now, &mut a, &mut b, A), 20, "one frame per message");
        for m in &msgs {
            let c = b.recv().unwrap().expect("a message");
            assert!(c.start && c.end);
            assert_eq!(&c.data[..], &m[..]);
        }
        assert_eq!(b.recv(), Ok(None));
        // Nothing goes back: no ACKs on a bare VC.
        let mut buf = Vec::new();
        assert!(b.poll_transmit(now, &mut buf).is_none());
        b.send(b"back", true).unwrap();
        assert_eq!(pump(now, &mut b, &mut a, B), 1);
        assert_eq!(&a.recv().unwrap().unwrap().data[..], b"back");
        let total: u64 = msgs.iter().map(|m| m.len() as u64).sum();
        let (ac, bc) = (
            a.tx().bare_counters().unwrap(),
            b.rx().bare_counters().unwrap(),
        );
        assert_eq!((ac.sdus_sent, ac.bytes_sent), (20, total));
        assert_eq!((bc.sdus_received, bc.bytes_received), (20, total));
        assert_eq!(a.stats().tx.tpdus_sent, 20);
        assert_eq!(b.stats().rx.messages_delivered, 20);
    }

    #[test]
    fn the_wire_form_is_the_vc_header_then_the_sdu_itself() {
        let (mut a, _) = pair(cfg(100, None), cfg(100, None));
        a.send(b"hello linux", true).unwrap();
        let mut buf = Vec::new();
        a.poll_transmit(Instant::ZERO, &mut buf).unwrap();
        let (vc, sdu) = vcframe::Repr::parse_bytes(&buf).unwrap();
        assert_eq!(
            (vc.kind, vc.vpi, vc.vci),
            (vcframe::FrameKind::Data, 0, 100)
        );
        assert_eq!(sdu, b"hello linux");
    }

    #[test]
    fn a_message_over_max_sdu_is_refused_with_nothing_sent() {
        let (mut a, _) = pair(cfg(1000, None), cfg(1000, None));
        assert_eq!(
            a.send(&[7u8; 1001], true),
            Err(SendError::MessageTooLarge {
                size: 1001,
                max: 1000
            })
        );
        assert_eq!(a.send(&[], true), Err(SendError::Empty));
        let mut buf = Vec::new();
        assert!(a.poll_transmit(Instant::ZERO, &mut buf).is_none());
        let c = a.tx().bare_counters().unwrap();
        assert_eq!((c.refused_too_big, c.sdus_sent), (1, 0));
        assert_eq!(a.send(&[7u8; 1000], true), Ok(1000));
    }

    #[test]
    fn the_receiver_drops_and_counts_what_it_cannot_take() {
        let small = BareConfig {
            max_sdu: 1000,
            pcr_bps: None,
            scr: None,
            queue_bytes: 2500,
        };
        // A sends SDUs of up to 9000 bytes; B takes at most 1000 and holds 2500.
        let (mut a, mut b) = pair(cfg(9000, None), small);
        a.send(&[1u8; 5000], true).unwrap();
        for _ in 0..4 {
            a.send(&[2u8; 800], true).unwrap();
        }
        let now = Instant::ZERO;
        pump(now, &mut a, &mut b, A);
        assert!(b.handle_frame(
            now,
            addr(A),
            Bytes::from(vcframe::Repr::data(0, 100).to_bytes().to_vec())
        ));
        let c = b.rx().bare_counters().unwrap();
        assert_eq!(c.dropped_too_big, 1);
        assert_eq!(c.sdus_received, 3, "3 × 800 fit 2500 bytes");
        assert_eq!(c.dropped_queue_full, 1);
        assert_eq!(c.dropped_other, 1, "the empty SDU");
        // Reading makes room again.
        b.recv().unwrap().unwrap();
        a.send(&[3u8; 800], true).unwrap();
        pump(now, &mut a, &mut b, A);
        assert_eq!(b.rx().bare_counters().unwrap().sdus_received, 4);
        // Another VPI or VCI is not this connection's.
        let other = [
            vcframe::Repr::data(1, 100).to_bytes(),
            vcframe::Repr::data(0, 7).to_bytes(),
        ];
        for h in other {
            let mut d = h.to_vec();
            d.extend_from_slice(b"x");
            assert!(!b.handle_frame(now, addr(A), Bytes::from(d)));
        }
    }

    #[test]
    fn a_cbr_sender_is_shaped_at_its_pcr_in_virtual_time() {
        // 1000 cells/s; a 1000-byte SDU is 21 cells with the AAL5 trailer: 21 ms.
        let pcr = 1000 * BITS_PER_CELL;
        let (mut a, mut b) = pair(cfg(9188, Some(pcr)), cfg(9188, None));
        for _ in 0..10 {
            a.send(&[9u8; 1000], true).unwrap();
        }
        let mut now = Instant::ZERO;
        let mut departures = Vec::new();
        while departures.len() < 10 {
            let n = pump(now, &mut a, &mut b, A);
            departures.extend(std::iter::repeat_n(now, n));
            if departures.len() == 10 {
                break;
            }
            let t = a.poll_timeout().expect("the shaper holds the rest");
            assert!(t > now);
            now = t;
            a.handle_timeout(now);
        }
        for w in departures.windows(2) {
            assert_eq!(
                w[1].as_nanos() - w[0].as_nanos(),
                21_000_000,
                "{departures:?}"
            );
        }
        assert!(a.poll_timeout().is_none());
        assert_eq!(a.tx().bare_counters().unwrap().shaped, 9);
        assert_eq!(b.rx().bare_counters().unwrap().sdus_received, 10);
    }

    /// Queue `n` SDUs of `len` bytes on a sender of `tx` and drive it in virtual time:
    /// the departure of each.
    fn departures(tx: BareConfig, n: usize, len: usize) -> Vec<Instant> {
        let (mut a, mut b) = pair(tx, cfg(9188, None));
        for _ in 0..n {
            a.send(&vec![5u8; len], true).unwrap();
        }
        let mut now = Instant::ZERO;
        let mut out = Vec::new();
        loop {
            let k = pump(now, &mut a, &mut b, A);
            out.extend(std::iter::repeat_n(now, k));
            if out.len() == n {
                return out;
            }
            let t = a.poll_timeout().expect("the shaper holds the rest");
            assert!(t > now, "a timer in the past at {now:?}");
            now = t;
            a.handle_timeout(now);
        }
    }

    /// Police every cell of frames of `cells` cells departing at `at`, arriving back
    /// to back 1 µs apart; the number of non-conforming cells.
    fn non_conforming(police: &mut DualGcra, at: &[Instant], cells: u32) -> usize {
        use crate::flow::Conformance;
        let mut bad = 0;
        for &t in at {
            for k in 0..cells {
                if !police.conforms(t + Duration::from_micros(u64::from(k))) {
                    bad += 1;
                }
            }
        }
        bad
    }

    /// `vbr:pcr=2000 cells/s,scr=500 cells/s,mbs=100`, 1000-byte SDUs (21 cells): the
    /// first MBS worth of frames leaves at the PCR, the rest at the SCR, and every cell
    /// conforms to the dual GCRA with the SCR test's burst tolerance exactly BT and a
    /// CDVT of one frame at the PCR — where a sender shaped at the PCR alone (issue
    /// 34: 3.92 Mbit/s against a 2 Mbit/s SCR) breaks the SCR test.
    #[test]
    fn a_vbr_sender_bursts_its_mbs_at_the_pcr_then_keeps_its_scr() {
        let ms = |x: f64| Duration::from_nanos((x * 1e6) as u64);
        let pcr = cfg(9188, Some(2000 * BITS_PER_CELL));
        let vbr = BareConfig {
            scr: Some((500 * BITS_PER_CELL, 100)),
            ..pcr
        };
        let at = departures(vbr, 40, 1000);
        let gap = |i: usize| at[i + 1] - at[i];
        for i in 0..3 {
            assert_eq!(gap(i), ms(10.5), "frame {i} of the burst, at the PCR");
        }
        // BT = 99 × 1.5 ms: the fifth frame's last cell conforms at 4 × 42 + 20 × 2
        // − 148.5 ms.
        assert_eq!(at[4] - at[0], ms(59.5));
        for i in 4..39 {
            assert_eq!(gap(i), ms(42.0), "frame {i}, at the SCR");
        }
        let policer = || DualGcra::new(ms(0.5), ms(0.5) * 20, ms(2.0), 100, Some(Duration::ZERO));
        assert_eq!(non_conforming(&mut policer(), &at, 21), 0);
        let at_pcr = departures(pcr, 40, 1000);
        assert!(non_conforming(&mut policer(), &at_pcr, 21) > 100);
        // The QoS text carries the SCR and MBS to the sender.
        let q: Qos = "vbr:pcr=2Mbps,scr=1Mbps,mbs=300,transport=none"
            .parse()
            .unwrap();
        let tx = BareConfig::from_qos(&q, Direction::Tx);
        assert_eq!(
            (tx.pcr_bps, tx.scr),
            (Some(2_000_000), Some((1_000_000, 300)))
        );
    }

    #[test]
    fn the_shaping_queue_fills_and_refuses_whole_messages() {
        let tx = BareConfig {
            max_sdu: 1000,
            pcr_bps: Some(BITS_PER_CELL),
            scr: None,
            queue_bytes: 3000,
        };
        let (mut a, _) = pair(tx, cfg(1000, None));
        for _ in 0..3 {
            a.send(&[1u8; 1000], true).unwrap();
        }
        let mut buf = Vec::new();
        a.poll_transmit(Instant::ZERO, &mut buf).unwrap();
        assert_eq!(a.send_capacity(), 1000);
        a.send(&[1u8; 1000], true).unwrap();
        assert_eq!(a.send_capacity(), 0);
        assert_eq!(a.send(&[1u8; 10], true), Err(SendError::WindowFull));
        assert_eq!(a.tx().bare_counters().unwrap().queue_full, 1);
        assert!(a.tx().over_rate());
    }

    #[test]
    fn release_ends_the_data_and_close_and_abort_finish_the_halves() {
        let now = Instant::ZERO;
        let (mut a, mut b) = pair(cfg(100, None), cfg(100, None));
        a.send(b"last", true).unwrap();
        pump(now, &mut a, &mut b, A);
        let (_, _, _, mut rx) = b.into_parts();
        rx.peer_released(now);
        // An SDU the release overtook is still taken during the grace.
        a.send(b"late", true).unwrap();
        let mut buf = Vec::new();
        a.poll_transmit(now, &mut buf).unwrap();
        rx.handle_frame(now, Bytes::from(buf).slice(vcframe::HEADER_LEN..));
        assert!(!rx.status().peer_closed);
        let end = rx.poll_timeout().expect("the grace's end");
        assert_eq!(end, now + RELEASE_GRACE);
        rx.handle_timeout(end);
        assert!(rx.status().peer_closed);
        assert!(rx.is_finished());
        assert_eq!(&rx.recv().unwrap().unwrap().data[..], b"last");
        assert_eq!(&rx.recv().unwrap().unwrap().data[..], b"late");
        assert_eq!(rx.recv(), Ok(None));
        // After the grace nothing more is taken.
        rx.handle_frame(end, Bytes::from_static(b"too late"));
        assert_eq!(rx.bare_counters().unwrap().dropped_other, 1);
        a.close();
        assert_eq!(a.send(b"x", true), Err(SendError::Closed));
        assert!(a.tx().is_finished());
        let (mut c, _) = pair(cfg(100, None), cfg(100, None));
        c.send(b"dropped", true).unwrap();
        c.abort();
        assert!(matches!(c.state(), State::Aborted(AbortReason::Local)));
        assert!(c.poll_transmit(now, &mut Vec::new()).is_none());
        assert_eq!(
            c.recv(),
            Err(crate::transport::RecvError::Aborted(AbortReason::Local))
        );
    }

    #[test]
    fn config_from_qos_shapes_only_a_cbr_or_vbr_sender() {
        let q: Qos = "cbr:pcr=10Mbps,transport=none,rx:max_sdu=1500"
            .parse()
            .unwrap();
        let tx = BareConfig::from_qos(&q, Direction::Tx);
        assert_eq!((tx.max_sdu, tx.pcr_bps), (9188, Some(10_000_000)));
        let rx = BareConfig::from_qos(&q, Direction::Rx);
        assert_eq!((rx.max_sdu, rx.pcr_bps), (1500, None));
        let q: Qos = "ubr:pcr=10Mbps,transport=none".parse().unwrap();
        assert_eq!(BareConfig::from_qos(&q, Direction::Tx).pcr_bps, None);
        let q: Qos = "cbr:pcr=max,transport=none".parse().unwrap();
        assert_eq!(BareConfig::from_qos(&q, Direction::Tx).pcr_bps, None);
    }
}
