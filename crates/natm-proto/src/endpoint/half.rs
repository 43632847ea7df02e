//! The two simplex halves of a duplex connection, each a sans-IO machine of its own.
//!
//! Why two types and not one: the engine lets a sending thread and a receiving thread
//! work on one connection at once (inline sends from one, the blocked `recv` reading
//! the socket in the other), and measured that they must not contend for one lock. So
//! each half owns everything its direction needs — its PSB, its VCI, the flags the
//! application waits on — and an I/O layer may lock them separately. What couples the
//! two directions is one rule, [`super::coupling`]: [`Connection`](super::Connection)
//! applies it for drivers that own both halves, and an I/O layer that locks them apart
//! asks it when a half reports its abort.

use std::collections::VecDeque;

use bytes::Bytes;

use super::bare::{BareRx, BareTx, VcCounters};
use crate::flow::FlowController;
use crate::time::Instant;
use crate::transport::{
    AbortReason, Chunk, Event, Psb, PsbStats, QosBoundsError, QosChangeError, QosOutcome,
    RecvError, SendError, Transmit,
};
use crate::wire::rm::RmCell;
use crate::wire::tpdu::Header;

/// Which half of a duplex connection a frame or a transmit belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Half {
    /// The VC this end sends on (its ACKs and handshake answers come back on it).
    Tx,
    /// The VC this end receives on.
    Rx,
}

/// What one half has come to, in the terms the application waits on (seed 003's
/// status flags of one simplex VC, kept as they happen rather than recomputed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HalfStatus {
    /// The VC's handshake completed (or signalling set it up).
    pub connected: bool,
    /// The handshake gave up (no answer).
    pub connect_failed: bool,
    /// Receive half: the peer closed and everything it sent was delivered.
    pub peer_closed: bool,
    /// Send half: our close completed, the peer has everything.
    pub closed: bool,
    /// The VC was aborted, and why.
    pub aborted: Option<AbortReason>,
    /// How the last QoS change of this VC ended (seed 003 "QoS changed"): the
    /// sender's once the peer answered, the receiver's when the peer announced it.
    pub qos: Option<QosOutcome>,
}

/// What runs a half: natm's transport (a PSB) or a bare AAL5 VC (`transport=none`).
#[derive(Debug)]
// The transport's PSB is the common case and the hot path: it stays inline.
#[allow(clippy::large_enum_variant)]
enum Machine {
    Natm(Psb),
    BareTx(BareTx),
    BareRx(BareRx),
}

/// State and plumbing both halves share: the machine and the events it produced.
#[derive(Debug)]
struct Core {
    machine: Machine,
    vpi: u8,
    vci: u16,
    status: HalfStatus,
    events: VecDeque<Event>,
}

impl Core {
    fn new(machine: Machine, vpi: u8, vci: u16) -> Core {
        let mut c = Core {
            machine,
            vpi,
            vci,
            status: HalfStatus::default(),
            events: VecDeque::new(),
        };
        if c.is_bare() {
            // A bare VC exists because signalling or a PVC made it: up at once.
            c.status.connected = true;
            c.events.push_back(Event::Connected);
        }
        c.absorb();
        c
    }

    fn is_bare(&self) -> bool {
        !matches!(self.machine, Machine::Natm(_))
    }

    /// Move the machine's events into this half's queue, recording what they mean, so
    /// the flags are right whether or not anybody polls the events.
    fn absorb(&mut self) {
        match &mut self.machine {
            Machine::Natm(psb) => {
                while let Some(e) = psb.poll_event() {
                    match e {
                        Event::Connected => self.status.connected = true,
                        Event::ConnectFailed => self.status.connect_failed = true,
                        Event::PeerClosed => self.status.peer_closed = true,
                        Event::Closed => self.status.closed = true,
                        Event::Aborted(r) => self.status.aborted = Some(r),
                        Event::QosChanged { rate } => {
                            self.status.qos = Some(QosOutcome::Changed { rate })
                        }
                        Event::QosRefused { rate } => {
                            self.status.qos = Some(QosOutcome::Refused { rate })
                        }
                        Event::Writable | Event::Readable => {}
                    }
                    self.events.push_back(e);
                }
            }
            Machine::BareTx(tx) => {
                if tx.is_closed() && !self.status.closed && self.status.aborted.is_none() {
                    self.status.closed = true;
                    self.events.push_back(Event::Closed);
                }
            }
            Machine::BareRx(rx) => {
                if rx.peer_closed() && !self.status.peer_closed && self.status.aborted.is_none() {
                    self.status.peer_closed = true;
                    self.events.push_back(Event::PeerClosed);
                }
            }
        }
    }

    fn handle_frame(&mut self, now: Instant, tpdu: Bytes) {
        match &mut self.machine {
            Machine::Natm(psb) => psb.handle_frame(now, tpdu),
            // On a bare VC the frame is the SDU.
            Machine::BareRx(rx) => {
                if rx.handle_sdu(tpdu) {
                    self.events.push_back(Event::Readable);
                }
            }
            Machine::BareTx(tx) => tx.handle_stray(),
        }
        self.absorb();
    }

    fn handle_tpdu(&mut self, now: Instant, header: Header, payload: Bytes) {
        self.handle_tpdu_at(now, now, header, payload)
    }

    fn handle_tpdu_at(&mut self, now: Instant, arrived: Instant, header: Header, payload: Bytes) {
        match &mut self.machine {
            Machine::Natm(psb) => psb.handle_tpdu_at(now, arrived, header, payload),
            // Only the transport parses TPDU headers: an I/O layer hands a bare VC's
            // frames to `handle_frame`. One that did not is counted, not misread.
            Machine::BareRx(_) | Machine::BareTx(_) => self.handle_frame(now, Bytes::new()),
        }
        self.absorb();
    }

    fn handle_timeout(&mut self, now: Instant) {
        match &mut self.machine {
            Machine::Natm(psb) => psb.handle_timeout(now),
            Machine::BareRx(rx) => rx.handle_timeout(now),
            // A bare sender's shaper is looked at by `poll_sdu` itself.
            Machine::BareTx(_) => {}
        }
        self.absorb();
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match &self.machine {
            Machine::Natm(psb) => psb.poll_timeout(),
            Machine::BareTx(tx) => tx.poll_timeout(),
            Machine::BareRx(rx) => rx.poll_timeout(),
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let Machine::Natm(psb) = &mut self.machine else {
            return None;
        };
        let t = psb.poll_transmit(now);
        // Sending may finish a close or free the buffer (Writable without ACKs).
        self.absorb();
        t
    }

    fn poll_sdu(&mut self, now: Instant) -> Option<Bytes> {
        let Machine::BareTx(tx) = &mut self.machine else {
            return None;
        };
        let sdu = tx.poll_transmit(now);
        if sdu.is_some() {
            self.events.push_back(Event::Writable);
        }
        self.absorb();
        sdu
    }

    fn abort(&mut self, reason: AbortReason) {
        if self.finished() {
            return;
        }
        match &mut self.machine {
            Machine::Natm(psb) => psb.abort(),
            Machine::BareTx(tx) => tx.abort(reason),
            Machine::BareRx(rx) => rx.abort(reason),
        }
        self.absorb();
        if self.status.aborted.is_none() {
            // The PSB reports no event for a local abort; the half records who ended it
            // (the application, or the peer through the other direction or sigd).
            self.status.aborted = Some(reason);
            self.events.push_back(Event::Aborted(reason));
        }
    }

    fn finished(&self) -> bool {
        if self.status.aborted.is_some() || self.status.connect_failed {
            return true;
        }
        match &self.machine {
            Machine::Natm(psb) => psb.is_finished(),
            Machine::BareTx(tx) => tx.is_closed(),
            Machine::BareRx(rx) => rx.peer_closed(),
        }
    }

    fn psb(&self) -> Option<&Psb> {
        match &self.machine {
            Machine::Natm(psb) => Some(psb),
            _ => None,
        }
    }

    fn stats(&self) -> PsbStats {
        match &self.machine {
            Machine::Natm(psb) => psb.stats().clone(),
            // A bare VC's counters in the transport's terms (an SDU is a TPDU and a
            // message); the rest stays 0: nothing is acknowledged or retransmitted.
            Machine::BareTx(tx) => {
                let c = tx.counters();
                PsbStats {
                    tpdus_sent: c.sdus_sent,
                    bytes_sent: c.bytes_sent,
                    ..PsbStats::default()
                }
            }
            Machine::BareRx(rx) => {
                let c = rx.counters();
                PsbStats {
                    tpdus_received: c.sdus_received,
                    bytes_delivered: c.bytes_received,
                    messages_delivered: c.sdus_received,
                    ..PsbStats::default()
                }
            }
        }
    }

    fn bare_counters(&self) -> Option<VcCounters> {
        match &self.machine {
            Machine::Natm(_) => None,
            Machine::BareTx(tx) => Some(*tx.counters()),
            Machine::BareRx(rx) => Some(*rx.counters()),
        }
    }
}

macro_rules! common_half_api {
    () => {
        /// A TPDU for this half arrived (the VC header already taken off; the payload
        /// of any data is kept as a slice of `tpdu`, never copied).
        pub fn handle_frame(&mut self, now: Instant, tpdu: Bytes) {
            self.core.handle_frame(now, tpdu)
        }

        /// A TPDU whose header the caller parsed, with its payload apart (see
        /// [`Psb::handle_tpdu`]).
        pub fn handle_tpdu(&mut self, now: Instant, header: Header, payload: Bytes) {
            self.core.handle_tpdu(now, header, payload)
        }

        /// [`Self::handle_tpdu`] of a TPDU that reached the host at `arrived` (see
        /// [`Psb::handle_tpdu_at`]).
        pub fn handle_tpdu_at(
            &mut self,
            now: Instant,
            arrived: Instant,
            header: Header,
            payload: Bytes,
        ) {
            self.core.handle_tpdu_at(now, arrived, header, payload)
        }

        /// Timers of this half fired (call at or after [`Self::poll_timeout`]).
        pub fn handle_timeout(&mut self, now: Instant) {
            self.core.handle_timeout(now)
        }

        /// When [`Self::handle_timeout`] should next be called.
        pub fn poll_timeout(&self) -> Option<Instant> {
            self.core.poll_timeout()
        }

        /// The next TPDU of this half to put on the wire, if one may go now (never on
        /// a bare VC: see [`Self::poll_sdu`]).
        pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
            self.core.poll_transmit(now)
        }

        /// A bare VC's next SDU to put on the wire (behind a VC header), if its
        /// shaper lets it go now; never on natm's transport.
        pub fn poll_sdu(&mut self, now: Instant) -> Option<Bytes> {
            self.core.poll_sdu(now)
        }

        /// A forward RM cell due on this VC now ([`Psb::poll_rm`]); never on a bare VC
        /// or a receiving half.
        pub fn poll_rm(&mut self, now: Instant) -> Option<RmCell> {
            match &mut self.core.machine {
                Machine::Natm(psb) => psb.poll_rm(now),
                Machine::BareTx(_) | Machine::BareRx(_) => None,
            }
        }

        /// The next event of this half (the PSB's events, already reflected in
        /// [`Self::status`]).
        pub fn poll_event(&mut self) -> Option<Event> {
            self.core.events.pop_front()
        }

        /// What the half has come to.
        pub fn status(&self) -> HalfStatus {
            self.core.status
        }

        /// Whether the half's VC exchanges ACKs ([`Psb::exchanges_acks`]); never on a
        /// bare VC.
        pub fn exchanges_acks(&self) -> bool {
            match &self.core.machine {
                Machine::Natm(psb) => psb.exchanges_acks(),
                Machine::BareTx(_) | Machine::BareRx(_) => false,
            }
        }

        /// The VCI this half's frames carry.
        pub fn vci(&self) -> u16 {
            self.core.vci
        }

        /// Whether the half has finished, in order or not, with nothing left to send.
        pub fn is_finished(&self) -> bool {
            self.core.finished()
        }

        /// Abort this direction (`reason` is what the application will be told).
        pub fn abort(&mut self, reason: AbortReason) {
            self.core.abort(reason)
        }

        /// The half's protocol status block (read-only: counters, RTT, parameters);
        /// `None` on a bare VC, which has none.
        pub fn psb(&self) -> Option<&Psb> {
            self.core.psb()
        }

        /// The half's counters (a bare VC's in the transport's terms: SDUs as TPDUs
        /// and messages).
        pub fn stats(&self) -> PsbStats {
            self.core.stats()
        }

        /// A bare VC's own counters (`None` for natm's transport).
        pub fn bare_counters(&self) -> Option<VcCounters> {
            self.core.bare_counters()
        }

        /// Whether this is a bare AAL5 VC (`transport=none`): its frames are SDUs
        /// without a TPDU header (use [`Self::poll_sdu`] and [`Self::handle_frame`]).
        pub fn is_bare(&self) -> bool {
            self.core.is_bare()
        }

        /// The VPI this half's frames carry (0 but on a PVC).
        pub fn vpi(&self) -> u8 {
            self.core.vpi
        }

        /// Whether the VC carries a byte stream (agreed at setup).
        pub fn is_stream(&self) -> bool {
            self.core
                .psb()
                .and_then(|p| p.params())
                .is_some_and(|p| p.options & crate::wire::tpdu::ConnParams::OPT_STREAM != 0)
        }
    };
}

/// What both halves offer, for an I/O layer that drives either the same way.
pub trait Simplex {
    /// See [`TxHalf::handle_frame`].
    fn handle_frame(&mut self, now: Instant, tpdu: Bytes);
    /// See [`TxHalf::handle_tpdu`].
    fn handle_tpdu(&mut self, now: Instant, header: Header, payload: Bytes);
    /// See [`TxHalf::handle_tpdu_at`].
    fn handle_tpdu_at(&mut self, now: Instant, arrived: Instant, header: Header, payload: Bytes);
    /// See [`TxHalf::handle_timeout`].
    fn handle_timeout(&mut self, now: Instant);
    /// See [`TxHalf::poll_timeout`].
    fn poll_timeout(&self) -> Option<Instant>;
    /// See [`TxHalf::poll_transmit`].
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit>;
    /// See [`TxHalf::poll_sdu`].
    fn poll_sdu(&mut self, now: Instant) -> Option<Bytes>;
    /// See [`TxHalf::is_bare`].
    fn is_bare(&self) -> bool;
    /// See [`TxHalf::vpi`].
    fn vpi(&self) -> u8;
    /// See [`TxHalf::poll_event`].
    fn poll_event(&mut self) -> Option<Event>;
    /// See [`TxHalf::status`].
    fn status(&self) -> HalfStatus;
    /// See [`TxHalf::vci`].
    fn vci(&self) -> u16;
    /// See [`TxHalf::is_finished`].
    fn is_finished(&self) -> bool;
    /// See [`TxHalf::abort`].
    fn abort(&mut self, reason: AbortReason);
    /// See [`TxHalf::psb`].
    fn psb(&self) -> Option<&Psb>;
    /// See [`TxHalf::poll_rm`].
    fn poll_rm(&mut self, now: Instant) -> Option<RmCell>;
}

macro_rules! simplex_impl {
    ($t:ty) => {
        impl Simplex for $t {
            fn handle_frame(&mut self, now: Instant, tpdu: Bytes) {
                <$t>::handle_frame(self, now, tpdu)
            }
            fn handle_tpdu(&mut self, now: Instant, header: Header, payload: Bytes) {
                <$t>::handle_tpdu(self, now, header, payload)
            }
            fn handle_tpdu_at(
                &mut self,
                now: Instant,
                arrived: Instant,
                header: Header,
                payload: Bytes,
            ) {
                <$t>::handle_tpdu_at(self, now, arrived, header, payload)
            }
            fn handle_timeout(&mut self, now: Instant) {
                <$t>::handle_timeout(self, now)
            }
            fn poll_timeout(&self) -> Option<Instant> {
                <$t>::poll_timeout(self)
            }
            fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
                <$t>::poll_transmit(self, now)
            }
            fn poll_sdu(&mut self, now: Instant) -> Option<Bytes> {
                <$t>::poll_sdu(self, now)
            }
            fn poll_rm(&mut self, now: Instant) -> Option<RmCell> {
                <$t>::poll_rm(self, now)
            }
            fn is_bare(&self) -> bool {
                <$t>::is_bare(self)
            }
            fn vpi(&self) -> u8 {
                <$t>::vpi(self)
            }
            fn poll_event(&mut self) -> Option<Event> {
                <$t>::poll_event(self)
            }
            fn status(&self) -> HalfStatus {
                <$t>::status(self)
            }
            fn vci(&self) -> u16 {
                <$t>::vci(self)
            }
            fn is_finished(&self) -> bool {
                <$t>::is_finished(self)
            }
            fn abort(&mut self, reason: AbortReason) {
                <$t>::abort(self, reason)
            }
            fn psb(&self) -> Option<&Psb> {
                <$t>::psb(self)
            }
        }
    };
}

simplex_impl!(TxHalf);
simplex_impl!(RxHalf);

/// The sending half: one simplex VC this end sends on (seed 000 §5.3).
#[derive(Debug)]
pub struct TxHalf {
    core: Core,
}

impl TxHalf {
    /// A sending VC that opens with the transport handshake (CONN-REQ queued).
    pub(crate) fn connect(psb: Psb, vci: u16) -> TxHalf {
        TxHalf {
            core: Core::new(Machine::Natm(psb), 0, vci),
        }
    }

    /// A bare AAL5 VC this end sends on, up at once.
    pub(crate) fn bare(tx: BareTx, vpi: u8, vci: u16) -> TxHalf {
        TxHalf {
            core: Core::new(Machine::BareTx(tx), vpi, vci),
        }
    }

    common_half_api!();

    /// Queue message bytes; `end` closes the message. Returns the bytes taken (all, or
    /// a prefix when the buffer filled) — the one copy seed 000 §5.5.1 also makes. On
    /// a bare VC every call is one whole message (one SDU), taken all or not at all.
    pub fn send(&mut self, data: &[u8], end: bool) -> Result<usize, SendError> {
        match &mut self.core.machine {
            Machine::Natm(psb) => psb.send(data, end),
            Machine::BareTx(tx) => tx.send(data),
            Machine::BareRx(_) => Err(SendError::NotSender),
        }
    }

    /// Take the copies [`TxHalf::send`] makes from `copies` (a natm VC's;
    /// [`Psb::lend_copy_buffers`]). A bare VC copies each SDU as before.
    pub fn lend_copy_buffers(&mut self, copies: std::sync::Arc<dyn crate::transport::CopyBuffers>) {
        if let Machine::Natm(psb) = &mut self.core.machine {
            psb.lend_copy_buffers(copies);
        }
    }

    /// As [`TxHalf::send`], taking a `Bytes` without copying it.
    pub fn send_bytes(&mut self, data: &Bytes, end: bool) -> Result<usize, SendError> {
        match &mut self.core.machine {
            Machine::Natm(psb) => psb.send_bytes(data, end),
            Machine::BareTx(tx) => tx.send_bytes(data.clone()),
            Machine::BareRx(_) => Err(SendError::NotSender),
        }
    }

    /// Close the sending direction in order: everything queued is still delivered.
    pub fn close(&mut self) {
        match &mut self.core.machine {
            Machine::Natm(psb) => psb.close(),
            Machine::BareTx(tx) => tx.close(),
            Machine::BareRx(_) => {}
        }
        self.core.absorb();
    }

    /// Free bytes in the send buffer.
    pub fn capacity(&self) -> usize {
        match &self.core.machine {
            Machine::Natm(psb) => psb.send_capacity(),
            Machine::BareTx(tx) => tx.capacity(),
            Machine::BareRx(_) => 0,
        }
    }

    /// Bytes queued and not yet acknowledged (on a bare VC: not yet sent).
    pub fn buffered(&self) -> usize {
        match &self.core.machine {
            Machine::Natm(psb) => psb.send_buffered(),
            Machine::BareTx(tx) => tx.buffered(),
            Machine::BareRx(_) => 0,
        }
    }

    /// The sender is ahead of its leaky bucket (seed 003 "over rate"), or a bare VC's
    /// shaper holds SDUs back.
    pub fn over_rate(&self) -> bool {
        match &self.core.machine {
            Machine::Natm(psb) => psb.flow().over_rate(),
            Machine::BareTx(tx) => tx.over_rate(),
            Machine::BareRx(_) => false,
        }
    }

    /// The flow controller (rate, window); `None` on a bare VC.
    pub fn flow(&self) -> Option<&dyn FlowController> {
        self.core.psb().map(Psb::flow)
    }

    /// Ask the peer for a new sending rate within the agreed bounds (seed 003
    /// `setqos`, [`Psb::set_qos`]); the change is pending until the peer answers.
    /// A bare AAL5 VC has no peer transport to ask: refused.
    pub fn set_qos(&mut self, now: Instant, bps: u64) -> Result<u32, QosChangeError> {
        let r = match &mut self.core.machine {
            Machine::Natm(psb) => psb.set_qos(now, bps),
            Machine::BareTx(_) | Machine::BareRx(_) => Err(QosChangeError::NotEstablished),
        };
        if r.is_ok() {
            self.core.status.qos = None;
        }
        r
    }

    /// A backward RM cell of this VC came back ([`Psb::handle_backward_rm`]); nothing
    /// on a bare VC, which has no ABR source.
    pub fn handle_backward_rm(&mut self, now: Instant, cell: &RmCell) {
        if let Machine::Natm(psb) = &mut self.core.machine {
            psb.handle_backward_rm(now, cell);
        }
    }

    /// The network reserved a new rate for this VC: the bound of
    /// [`TxHalf::set_qos`] follows ([`Psb::set_rate_bound`]); nothing on a bare VC.
    pub fn set_rate_bound(&mut self, max: u64) {
        if let Machine::Natm(psb) = &mut self.core.machine {
            psb.set_rate_bound(max);
        }
    }

    /// See [`Psb::stall`] (nothing on a bare VC).
    pub fn stall(&self) -> crate::transport::Stall {
        match &self.core.machine {
            Machine::Natm(psb) => psb.stall(),
            _ => crate::transport::Stall::default(),
        }
    }

    /// See [`Psb::late_rtt`] (zero on a bare VC).
    pub fn late_rtt(&self) -> std::time::Duration {
        match &self.core.machine {
            Machine::Natm(psb) => psb.late_rtt(),
            _ => std::time::Duration::ZERO,
        }
    }

    /// See [`Psb::share_late_rtt`] (nothing on a bare VC).
    pub fn share_late_rtt(&mut self, d: std::time::Duration) {
        if let Machine::Natm(psb) = &mut self.core.machine {
            psb.share_late_rtt(d);
        }
    }

    /// The path carries at most `cap` payload octets per TPDU unfragmented
    /// ([`Psb::set_path_cap`]). A bare VC's SDUs are the application's messages and
    /// cannot be cut: nothing changes there.
    pub fn set_path_cap(&mut self, cap: usize) {
        if let Machine::Natm(psb) = &mut self.core.machine {
            psb.set_path_cap(cap);
        }
    }

    /// Whether this VC searches its path MTU ([`Psb::searches_path`]).
    pub fn searches_path(&self) -> bool {
        matches!(&self.core.machine, Machine::Natm(psb) if psb.searches_path())
    }

    /// The largest TPDU payload this VC may send whatever the path
    /// ([`Psb::tpdu_limit`]); `None` on a bare VC.
    pub fn tpdu_limit(&self) -> Option<usize> {
        match &self.core.machine {
            Machine::Natm(psb) => psb.tpdu_limit(),
            _ => None,
        }
    }

    /// The connection's other direction has delivered `epoch` receives so far (a
    /// count the caller keeps): a send after it delivered something is a reply, and
    /// is never held to coalesce with others ([`Psb::note_reverse`]).
    pub fn note_reverse(&mut self, epoch: u64) {
        if let Machine::Natm(psb) = &mut self.core.machine {
            psb.note_reverse(epoch);
        }
    }

    /// Whether a QoS change waits for the peer's answer.
    pub fn qos_pending(&self) -> bool {
        self.core.psb().is_some_and(|p| p.status().qos_pending)
    }

    /// Change the sending rate at once, within the agreed bounds, without telling the
    /// peer (a local adjustment; [`TxHalf::set_qos`] is the confirmed change); on a
    /// bare VC, its shaping rate.
    pub fn set_rate(&mut self, bps: u64) -> Result<(), QosBoundsError> {
        match &mut self.core.machine {
            Machine::Natm(psb) => psb.set_rate(bps),
            Machine::BareTx(tx) => {
                tx.set_rate(bps);
                Ok(())
            }
            Machine::BareRx(_) => Err(QosBoundsError {
                requested: bps,
                min: 0,
                max: 0,
            }),
        }
    }
}

/// The receiving half: one simplex VC this end receives on.
#[derive(Debug)]
pub struct RxHalf {
    core: Core,
}

impl RxHalf {
    /// The network reserved a new rate for this VC: the bound of the sender's QOS
    /// requests this side accepts follows ([`Psb::set_rate_bound`]).
    pub fn set_rate_bound(&mut self, max: u64) {
        if let Machine::Natm(psb) = &mut self.core.machine {
            psb.set_rate_bound(max);
        }
    }

    /// A receiving VC that waits for the peer's CONN-REQ (or starts established).
    pub(crate) fn listen(psb: Psb, vci: u16) -> RxHalf {
        RxHalf {
            core: Core::new(Machine::Natm(psb), 0, vci),
        }
    }

    /// A bare AAL5 VC this end receives on, up at once.
    pub(crate) fn bare(rx: BareRx, vpi: u8, vci: u16) -> RxHalf {
        RxHalf {
            core: Core::new(Machine::BareRx(rx), vpi, vci),
        }
    }

    common_half_api!();

    /// The next chunk of received data, handed out as the `Bytes` slice of the frame
    /// it arrived in (no copy); `Ok(None)` if none is ready. On a bare VC a chunk is
    /// one whole SDU.
    pub fn recv(&mut self) -> Result<Option<Chunk>, RecvError> {
        let c = match &mut self.core.machine {
            Machine::Natm(psb) => psb.recv_chunk(),
            Machine::BareRx(rx) => match rx.recv() {
                Some(data) => Ok(Some(Chunk {
                    data,
                    msg: 0,
                    offset: 0,
                    start: true,
                    end: true,
                })),
                None => match rx.aborted() {
                    Some(r) => Err(RecvError::Aborted(r)),
                    None => Ok(None),
                },
            },
            Machine::BareTx(_) => Err(RecvError::NotReceiver),
        };
        // Reading may reopen a shut window (a window update to send).
        self.core.absorb();
        // The half's own record of who ended it wins: a PSB stopped from this side
        // (the other half's abort, sigd's release) only knows it was stopped here.
        c.map_err(|e| match (e, self.core.status.aborted) {
            (RecvError::Aborted(_), Some(r)) => RecvError::Aborted(r),
            (e, _) => e,
        })
    }

    /// Copy stream bytes into `buf` (for `io::Read`-style callers).
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, RecvError> {
        let n = match &mut self.core.machine {
            Machine::Natm(psb) => psb.read(buf),
            Machine::BareRx(rx) => Ok(rx.read(buf)),
            Machine::BareTx(_) => Err(RecvError::NotReceiver),
        };
        self.core.absorb();
        n
    }

    /// Whether a read left something to send (a window update, [`Psb::has_control`]):
    /// the host transmits it now, or the sender waits for its retransmission timer.
    pub fn has_control(&self) -> bool {
        match &self.core.machine {
            Machine::Natm(psb) => psb.has_control(),
            Machine::BareRx(_) | Machine::BareTx(_) => false,
        }
    }

    /// Whether the advertised window bounds what the sender has in flight
    /// ([`Psb::window_bounds_sender`]); never on a bare VC.
    pub fn window_bounds_sender(&self) -> bool {
        match &self.core.machine {
            Machine::Natm(psb) => psb.window_bounds_sender(),
            Machine::BareRx(_) | Machine::BareTx(_) => false,
        }
    }

    /// Bytes ready for the application.
    pub fn readable(&self) -> usize {
        match &self.core.machine {
            Machine::Natm(psb) => psb.readable(),
            Machine::BareRx(rx) => rx.readable(),
            Machine::BareTx(_) => 0,
        }
    }

    /// The receive buffer's size in bytes.
    pub fn rcv_buf(&self) -> usize {
        match &self.core.machine {
            Machine::Natm(psb) => psb.rcv_buf(),
            Machine::BareRx(rx) => rx.rcv_buf(),
            Machine::BareTx(_) => 0,
        }
    }

    /// The call was released normally by the peer at `now`: the stream ends after
    /// what was received ([`Psb::peer_released`]). On a bare VC this is the only end
    /// of data, after [`super::bare::RELEASE_GRACE`] for the SDUs still on their way.
    pub fn peer_released(&mut self, now: Instant) {
        match &mut self.core.machine {
            Machine::Natm(psb) => psb.peer_released(),
            Machine::BareRx(rx) => rx.peer_released(now),
            Machine::BareTx(_) => {}
        }
        self.core.absorb();
    }

    /// The application is done receiving: in order if the peer has closed, else an
    /// abort of this direction (a receiver that leaves early cannot take the rest).
    pub fn close(&mut self) {
        if self.core.status.peer_closed {
            return;
        }
        self.core.abort(AbortReason::Local);
    }
}
