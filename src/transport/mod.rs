//! The transport layer: one protocol status block ([`Psb`]) per simplex VC.
//!
//! seed 000 §5.3: "The transport layer provides *simplex* virtual circuits, error
//! control, and flow control (duplex service is provided by ulib, which opens and
//! manages two simplex transport connections)."
//!
//! This layer is sans-IO, in the style of quinn-proto: it holds no sockets, threads or
//! clocks. The owner hands it frames ([`Psb::handle_frame`]), application calls
//! ([`Psb::send`], [`Psb::recv_chunk`], [`Psb::close`]) and the time, and pulls out
//! frames to send ([`Psb::poll_transmit`]), events ([`Psb::poll_event`]) and the next
//! deadline ([`Psb::poll_timeout`], answered by [`Psb::handle_timeout`]). The same code
//! runs in the engine over UDP and in the deterministic simulator.

mod psb;
mod recv;
pub mod rtt;
mod send;
pub(crate) mod seq;
mod stats;
#[cfg(test)]
mod tests;

use bytes::Bytes;
use thiserror::Error;

pub use psb::Psb;
pub use rtt::{RttConfig, RttEstimator};
pub use stats::PsbStats;

use crate::wire::tpdu::{Header, HEADER_LEN, MAX_PAYLOAD};

/// Message or byte-stream semantics (seed 000 §2, service 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Semantics {
    /// Message boundaries are kept; unreliable VCs deliver only whole messages.
    #[default]
    Message,
    /// A byte stream with no boundaries.
    Stream,
}

/// Which flow-control algorithm a VC runs (seed 000 §5.3.3–5.3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FlowKind {
    /// None: as fast as the error-control window allows.
    #[default]
    None,
    /// Open loop: leaky-bucket shaping at the reserved rate.
    LeakyBucket,
    /// Feedback: packet-pair rate control (round-robin networks).
    PacketPair,
    /// Feedback: Reno-like dynamic window (FIFO networks).
    Window,
}

impl FlowKind {
    /// Code carried in the handshake options.
    pub const fn code(self) -> u32 {
        match self {
            FlowKind::None => 0,
            FlowKind::LeakyBucket => 1,
            FlowKind::PacketPair => 2,
            FlowKind::Window => 3,
        }
    }

    /// From a handshake code.
    pub const fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            0 => FlowKind::None,
            1 => FlowKind::LeakyBucket,
            2 => FlowKind::PacketPair,
            3 => FlowKind::Window,
            _ => return None,
        })
    }

    /// Whether the algorithm needs ACKs from the receiver.
    pub const fn is_feedback(self) -> bool {
        matches!(self, FlowKind::PacketPair | FlowKind::Window)
    }
}

/// Which mechanism caused a retransmission (the paper's claim is that timeouts are rare).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetxKind {
    /// A hole revealed by an ACK's (C, S) pair.
    Fast,
    /// The retransmission timeout.
    Timeout,
    /// The two-RTT check found the cumulative ack stalled.
    Head,
}

/// Everything that configures one simplex VC's transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// SMART error control on or off.
    pub error_control: bool,
    /// Flow-control algorithm (the sender's choice; the receiver learns it).
    pub flow: FlowKind,
    /// Message or stream semantics.
    pub semantics: Semantics,
    /// Payload bytes per TPDU (seed 000 §5.3.1: 4 KiB default).
    pub tpdu_size: u32,
    /// Error-control window in TPDUs; the receiver buffers at least this many.
    pub window: u32,
    /// Send buffer, bytes (seed 001 §6: the page pool writers sleep on).
    pub snd_buf: usize,
    /// Receive buffer, bytes.
    pub rcv_buf: usize,
    /// Largest message, bytes.
    pub max_msg: u64,
    /// Most messages outstanding in the send queue.
    pub outstanding: u32,
    /// Target rate, payload bit/s (0: none).
    pub rate: u64,
    /// Minimum acceptable rate, payload bit/s.
    pub min_rate: u64,
    /// The capability both ends hold; `None` on a listener adopts the caller's.
    pub cookie: Option<u32>,
    /// Initial sequence number.
    pub isn: u32,
    /// RTT estimator bounds.
    pub rtt: RttConfig,
    /// Holes are inferred lost only when S ≥ hole + threshold. 1 on ATM, which never
    /// reorders; 3 over UDP/IP (specs.md §7.2).
    pub reorder_threshold: u32,
    /// Detect lost retransmissions from ACK order (specs.md §7.2 refinement; off =
    /// the paper's rule exactly).
    pub detect_lost_retx: bool,
    /// CONN-REQ attempts before the connection fails.
    pub connect_attempts: u32,
    /// CLOSE attempts before the close is abandoned.
    pub close_attempts: u32,
    /// Consecutive retransmission timeouts before the VC is aborted (peer dead).
    pub max_timeouts: u32,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig::reliable()
    }
}

impl TransportConfig {
    const DEFAULT_TPDU: u32 = 4096;
    const DEFAULT_WINDOW: u32 = 256;

    fn base() -> Self {
        let window = Self::DEFAULT_WINDOW;
        let buf = (window * Self::DEFAULT_TPDU) as usize;
        TransportConfig {
            error_control: false,
            flow: FlowKind::None,
            semantics: Semantics::Message,
            tpdu_size: Self::DEFAULT_TPDU,
            window,
            snd_buf: 2 * buf,
            rcv_buf: buf,
            max_msg: u64::MAX,
            outstanding: u32::MAX,
            rate: 0,
            min_rate: 0,
            cookie: None,
            isn: 0,
            rtt: RttConfig::default(),
            reorder_threshold: 1,
            detect_lost_retx: false,
            connect_attempts: 6,
            close_attempts: 6,
            max_timeouts: 10,
        }
    }

    /// Reliable service: SMART and feedback flow control (seed 000 §2).
    pub fn reliable() -> Self {
        TransportConfig {
            error_control: true,
            flow: FlowKind::PacketPair,
            ..Self::base()
        }
    }

    /// Guaranteed service: leaky-bucket shaping at `rate` payload bit/s, no
    /// retransmission.
    pub fn guaranteed(rate: u64) -> Self {
        TransportConfig {
            flow: FlowKind::LeakyBucket,
            rate,
            min_rate: rate,
            ..Self::base()
        }
    }

    /// Best-effort service: neither error nor flow control.
    pub fn best_effort() -> Self {
        Self::base()
    }

    /// Check the configuration is usable; the error says which knob to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.tpdu_size == 0 || self.tpdu_size as usize > MAX_PAYLOAD {
            return Err(ConfigError::TpduSize(self.tpdu_size));
        }
        if self.window == 0 || self.window > u32::from(u16::MAX) {
            return Err(ConfigError::Window(self.window));
        }
        if self.error_control && self.rcv_buf < self.tpdu_size as usize {
            return Err(ConfigError::RcvBuf(self.rcv_buf, self.tpdu_size));
        }
        if self.snd_buf < self.tpdu_size as usize {
            return Err(ConfigError::SndBuf(self.snd_buf, self.tpdu_size));
        }
        if self.flow == FlowKind::LeakyBucket && self.rate == 0 {
            return Err(ConfigError::NoRate);
        }
        if self.rate != 0 && self.min_rate > self.rate {
            return Err(ConfigError::MinRate(self.min_rate, self.rate));
        }
        if self.outstanding == 0 {
            return Err(ConfigError::Outstanding);
        }
        Ok(())
    }

    /// Whether the receiver must send ACKs.
    pub fn acks(&self) -> bool {
        self.error_control || self.flow.is_feedback()
    }
}

/// A transport configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// TPDU size out of range.
    #[error("TPDU size {0} is out of range: use 1..={MAX_PAYLOAD} bytes (4096 is the default)")]
    TpduSize(u32),
    /// Window out of range.
    #[error("error-control window {0} is out of range: use 1..=65535 TPDUs")]
    Window(u32),
    /// Receive buffer smaller than a TPDU.
    #[error("receive buffer of {0} bytes cannot hold one {1}-byte TPDU: raise rcv_buf")]
    RcvBuf(usize, u32),
    /// Send buffer smaller than a TPDU.
    #[error("send buffer of {0} bytes cannot hold one {1}-byte TPDU: raise snd_buf")]
    SndBuf(usize, u32),
    /// Leaky bucket without a rate.
    #[error("leaky-bucket flow control needs a rate: give a pcr in the QoS")]
    NoRate,
    /// Minimum above target.
    #[error("minimum rate {0} bit/s is above the target rate {1} bit/s")]
    MinRate(u64, u64),
    /// Zero outstanding messages.
    #[error("most messages outstanding must be at least 1")]
    Outstanding,
}

/// A piece of received data. Reliable VCs may deliver a long message in several
/// chunks (a 1 GiB message never needs 1 GiB of receive buffer); unreliable message
/// VCs deliver a message's chunks only once all of them are in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The bytes.
    pub data: Bytes,
    /// Message number.
    pub msg: u32,
    /// Byte offset of `data[0]` within its message, modulo 2^32 (the TPDU's `aux`).
    pub offset: u32,
    /// Start of a message (seed 003 status flag).
    pub start: bool,
    /// End of a message (seed 003 status flag).
    pub end: bool,
}

/// What a frame from [`Psb::poll_transmit`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransmitKind {
    /// New data.
    Data,
    /// A retransmission, and why.
    Retransmission(RetxKind),
    /// An acknowledgement.
    Ack,
    /// Handshake, close or abort.
    Control,
}

/// A TPDU to put on the wire: the header and a reference-counted payload, so an
/// adaptor can gather them without copying.
#[derive(Debug, Clone)]
pub struct Transmit {
    /// The header.
    pub header: Header,
    /// The payload.
    pub payload: Bytes,
    /// What kind of frame this is.
    pub kind: TransmitKind,
}

impl Transmit {
    /// Length on the wire (header and payload).
    pub fn len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// Never empty: a TPDU has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Append the TPDU's bytes to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.header.to_bytes());
        out.extend_from_slice(&self.payload);
    }

    /// The TPDU as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.write_to(&mut v);
        v
    }
}

/// Why a connection ended abnormally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortReason {
    /// The application asked for it.
    Local,
    /// The peer sent ABORT.
    Peer,
    /// Too many retransmission timeouts: the peer or the path is gone.
    Timeout,
    /// The peer refused the connection parameters.
    Refused,
}

/// Something the application should know (quinn-proto's `poll` events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The three-way handshake finished; parameters are agreed.
    Connected,
    /// No answer to the connection request.
    ConnectFailed,
    /// The send buffer has room again after a `WindowFull`.
    Writable,
    /// Data became readable.
    Readable,
    /// The peer closed: everything it sent has been delivered (end of stream).
    PeerClosed,
    /// Our close completed: the peer has everything.
    Closed,
    /// The connection was aborted.
    Aborted(AbortReason),
}

/// Why `send` took nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SendError {
    /// The send buffer or message limit is full; wait for [`Event::Writable`].
    #[error("window full: the send buffer is full; wait until it drains or block")]
    WindowFull,
    /// The application is sending faster than its leaky bucket allows (seed 003).
    #[error("over rate: sending faster than the reserved rate; wait or lower the rate")]
    OverRate,
    /// The message is larger than agreed at setup.
    #[error("message of {size} bytes exceeds the agreed maximum of {max} bytes")]
    MessageTooLarge {
        /// Size given.
        size: u64,
        /// Largest allowed.
        max: u64,
    },
    /// `close` was called; no more data may be sent.
    #[error("the VC is closing: no data may follow close()")]
    Closed,
    /// The connection was aborted.
    #[error("the VC was aborted ({0:?}); open a new one")]
    Aborted(AbortReason),
    /// This end of the VC receives; it cannot send.
    #[error("this end of the simplex VC only receives")]
    NotSender,
}

/// Why `recv` returned no data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RecvError {
    /// The connection was aborted; undelivered data is gone.
    #[error("the VC was aborted ({0:?}); undelivered data is lost")]
    Aborted(AbortReason),
    /// This end of the VC sends; it cannot receive.
    #[error("this end of the simplex VC only sends")]
    NotReceiver,
}

/// Seed 003's status flags, as a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// The handshake has completed.
    pub connected: bool,
    /// The peer closed its sending side (end of data).
    pub peer_closed: bool,
    /// Our close completed.
    pub closed: bool,
    /// The connection was aborted.
    pub aborted: bool,
    /// The last `send` found the window full.
    pub window_full: bool,
    /// The application is over its rate.
    pub over_rate: bool,
    /// A QoS change is waiting to take effect.
    pub qos_pending: bool,
    /// The last QoS change took effect.
    pub qos_done: bool,
}

/// A `set_rate` outside what was agreed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("rate {requested} bit/s is outside the agreed bounds {min}..={max} bit/s; renegotiate through sigd")]
pub struct QosBoundsError {
    /// Rate asked for.
    pub requested: u64,
    /// Lowest agreed.
    pub min: u64,
    /// Highest agreed.
    pub max: u64,
}
