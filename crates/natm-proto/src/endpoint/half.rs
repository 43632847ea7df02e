//! The two simplex halves of a duplex connection, each a sans-IO machine of its own.
//!
//! Why two types and not one: the engine lets a sending thread and a receiving thread
//! work on one connection at once (inline sends from one, the blocked `recv` reading
//! the socket in the other), and measured that they must not contend for one lock. So
//! each half owns everything its direction needs — its PSB, its VCI, the flags the
//! application waits on — and an I/O layer may lock them separately. What couples the
//! two directions (the connection is up only when both are, an abort of one ends both)
//! lives in [`Connection`](super::Connection) for drivers that own both halves, and is
//! repeated by an I/O layer that locks them apart through the same half-level events.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::flow::FlowController;
use crate::time::Instant;
use crate::transport::{
    AbortReason, Chunk, Event, Psb, PsbStats, QosBoundsError, RecvError, SendError, Transmit,
};
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
}

/// State and plumbing both halves share: the PSB and the events it produced.
#[derive(Debug)]
struct Core {
    psb: Psb,
    vci: u16,
    status: HalfStatus,
    events: VecDeque<Event>,
}

impl Core {
    fn new(psb: Psb, vci: u16) -> Core {
        let mut c = Core {
            psb,
            vci,
            status: HalfStatus::default(),
            events: VecDeque::new(),
        };
        c.absorb();
        c
    }

    /// Move the PSB's events into this half's queue, recording what they mean, so the
    /// flags are right whether or not anybody polls the events.
    fn absorb(&mut self) {
        while let Some(e) = self.psb.poll_event() {
            match e {
                Event::Connected => self.status.connected = true,
                Event::ConnectFailed => self.status.connect_failed = true,
                Event::PeerClosed => self.status.peer_closed = true,
                Event::Closed => self.status.closed = true,
                Event::Aborted(r) => self.status.aborted = Some(r),
                Event::Writable | Event::Readable => {}
            }
            self.events.push_back(e);
        }
    }

    fn handle_frame(&mut self, now: Instant, tpdu: Bytes) {
        self.psb.handle_frame(now, tpdu);
        self.absorb();
    }

    fn handle_tpdu(&mut self, now: Instant, header: Header, payload: Bytes) {
        self.psb.handle_tpdu(now, header, payload);
        self.absorb();
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.psb.handle_timeout(now);
        self.absorb();
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let t = self.psb.poll_transmit(now);
        // Sending may finish a close or free the buffer (Writable without ACKs).
        self.absorb();
        t
    }

    fn abort(&mut self, reason: AbortReason) {
        if self.finished() {
            return;
        }
        self.psb.abort();
        self.absorb();
        if self.status.aborted.is_none() {
            // The PSB reports no event for a local abort; the half records who ended it
            // (the application, or the peer through the other direction or sigd).
            self.status.aborted = Some(reason);
            self.events.push_back(Event::Aborted(reason));
        }
    }

    fn finished(&self) -> bool {
        self.status.aborted.is_some() || self.status.connect_failed || self.psb.is_finished()
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

        /// Timers of this half fired (call at or after [`Self::poll_timeout`]).
        pub fn handle_timeout(&mut self, now: Instant) {
            self.core.handle_timeout(now)
        }

        /// When [`Self::handle_timeout`] should next be called.
        pub fn poll_timeout(&self) -> Option<Instant> {
            self.core.psb.poll_timeout()
        }

        /// The next TPDU of this half to put on the wire, if one may go now.
        pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
            self.core.poll_transmit(now)
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

        /// The half's protocol status block (read-only: counters, RTT, parameters).
        pub fn psb(&self) -> &Psb {
            &self.core.psb
        }

        /// The half's counters.
        pub fn stats(&self) -> &PsbStats {
            self.core.psb.stats()
        }

        /// Whether the VC carries a byte stream (agreed at setup).
        pub fn is_stream(&self) -> bool {
            self.core
                .psb
                .params()
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
    /// See [`TxHalf::handle_timeout`].
    fn handle_timeout(&mut self, now: Instant);
    /// See [`TxHalf::poll_timeout`].
    fn poll_timeout(&self) -> Option<Instant>;
    /// See [`TxHalf::poll_transmit`].
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit>;
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
    fn psb(&self) -> &Psb;
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
            fn handle_timeout(&mut self, now: Instant) {
                <$t>::handle_timeout(self, now)
            }
            fn poll_timeout(&self) -> Option<Instant> {
                <$t>::poll_timeout(self)
            }
            fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
                <$t>::poll_transmit(self, now)
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
            fn psb(&self) -> &Psb {
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
            core: Core::new(psb, vci),
        }
    }

    common_half_api!();

    /// Queue message bytes; `end` closes the message. Returns the bytes taken (all, or
    /// a prefix when the buffer filled) — the one copy seed 000 §5.5.1 also makes.
    pub fn send(&mut self, data: &[u8], end: bool) -> Result<usize, SendError> {
        self.core.psb.send(data, end)
    }

    /// As [`TxHalf::send`], taking a `Bytes` without copying it.
    pub fn send_bytes(&mut self, data: &Bytes, end: bool) -> Result<usize, SendError> {
        self.core.psb.send_bytes(data, end)
    }

    /// Close the sending direction in order: everything queued is still delivered.
    pub fn close(&mut self) {
        self.core.psb.close();
        self.core.absorb();
    }

    /// Free bytes in the send buffer.
    pub fn capacity(&self) -> usize {
        self.core.psb.send_capacity()
    }

    /// Bytes queued and not yet acknowledged.
    pub fn buffered(&self) -> usize {
        self.core.psb.send_buffered()
    }

    /// The sender is ahead of its leaky bucket (seed 003 "over rate").
    pub fn over_rate(&self) -> bool {
        self.core.psb.flow().over_rate()
    }

    /// The flow controller (rate, window).
    pub fn flow(&self) -> &dyn FlowController {
        self.core.psb.flow()
    }

    /// Change the sending rate within the agreed bounds (seed 003 `set_qos`).
    pub fn set_rate(&mut self, bps: u64) -> Result<(), QosBoundsError> {
        self.core.psb.set_rate(bps)
    }
}

/// The receiving half: one simplex VC this end receives on.
#[derive(Debug)]
pub struct RxHalf {
    core: Core,
}

impl RxHalf {
    /// A receiving VC that waits for the peer's CONN-REQ (or starts established).
    pub(crate) fn listen(psb: Psb, vci: u16) -> RxHalf {
        RxHalf {
            core: Core::new(psb, vci),
        }
    }

    common_half_api!();

    /// The next chunk of received data, handed out as the `Bytes` slice of the frame
    /// it arrived in (no copy); `Ok(None)` if none is ready.
    pub fn recv(&mut self) -> Result<Option<Chunk>, RecvError> {
        let c = self.core.psb.recv_chunk();
        // Reading may reopen a shut window (a window update to send).
        self.core.absorb();
        c
    }

    /// Copy stream bytes into `buf` (for `io::Read`-style callers).
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, RecvError> {
        let n = self.core.psb.read(buf);
        self.core.absorb();
        n
    }

    /// Bytes ready for the application.
    pub fn readable(&self) -> usize {
        self.core.psb.readable()
    }

    /// The receive buffer's size in bytes.
    pub fn rcv_buf(&self) -> usize {
        self.core.psb.rcv_buf()
    }

    /// The call was released normally by the peer: the stream ends after what was
    /// received ([`Psb::peer_released`]).
    pub fn peer_released(&mut self) {
        self.core.psb.peer_released();
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
