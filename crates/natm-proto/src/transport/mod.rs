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

pub mod coalesce;
mod config;
mod copy;
pub mod ec_window;
pub mod plpmtud;
mod psb;
mod qos;
mod recv;
pub mod rtt;
mod rx_priority;
mod send;
pub(crate) mod seq;
mod stats;
mod sync;
#[cfg(test)]
mod tests;
pub mod tpdu_size;
mod window_lost;

use bytes::Bytes;
use thiserror::Error;

pub use config::{
    shaped_send_buffer, ConfigError, TransportConfig, AUTO_TPDU_FLOOR, DEFAULT_SEND_DELAY,
};
pub use copy::CopyBuffers;
pub use psb::Psb;
pub use qos::QosOutcome;
pub use rtt::{RttConfig, RttEstimator, DEFAULT_MIN_HEAD_CHECK};
pub use rx_priority::RxPriority;
pub use send::Stall;
pub use stats::PsbStats;

use crate::wire::tpdu::{Header, HEADER_LEN};

pub use crate::wire::qos::{FlowKind, Semantics};

impl FlowKind {
    /// Code carried in the handshake options.
    pub const fn code(self) -> u32 {
        match self {
            FlowKind::None => 0,
            FlowKind::LeakyBucket => 1,
            FlowKind::PacketPair => 2,
            FlowKind::Window => 3,
            FlowKind::Abr => 4,
        }
    }

    /// From a handshake code.
    pub const fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            0 => FlowKind::None,
            1 => FlowKind::LeakyBucket,
            2 => FlowKind::PacketPair,
            3 => FlowKind::Window,
            4 => FlowKind::Abr,
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
    /// Nothing listens at the peer's address: its host answered the handshake with
    /// ICMP port unreachable (direct mode; what TCP reports as "connection refused").
    NoListener,
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
    /// A QoS change took effect (seed 003's "QoS changed" indicator): on the sender
    /// once the peer accepted it, on the receiver when the sender's request arrived.
    QosChanged {
        /// The rate now in force, payload bit/s.
        rate: u64,
    },
    /// A QoS change was refused by the peer or not answered; the rate stays.
    QosRefused {
        /// The rate that was asked for, payload bit/s.
        rate: u64,
    },
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
    /// An empty message on a bare AAL5 VC, which cannot carry one (an AAL5 Length of
    /// 0 means abort).
    #[error("a bare AAL5 VC cannot carry an empty message (AAL5 Length 0 means abort)")]
    Empty,
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
    /// A QoS change is waiting for the peer's answer (sender), or was announced by
    /// the peer (receiver: until the application reads the status).
    pub qos_pending: bool,
    /// The last QoS change took effect.
    pub qos_done: bool,
    /// The last QoS change was refused (or never answered); the rate stayed.
    pub qos_refused: bool,
}

/// Why [`Psb::set_qos`] started no change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum QosChangeError {
    /// The rate is outside what was agreed at setup.
    #[error(transparent)]
    OutOfBounds(#[from] QosBoundsError),
    /// Another change is still waiting for the peer's answer.
    #[error("a QoS change to {0} bit/s is still pending; wait for its answer")]
    Pending(u64),
    /// The VC is not (or no longer) established.
    #[error("the VC is not established; a QoS change needs an open VC")]
    NotEstablished,
    /// This end receives; the sender changes the QoS.
    #[error("this end of the simplex VC only receives; the sender changes the QoS")]
    NotSender,
    /// A point-to-multipoint VC: no receiver can answer a QOS TPDU.
    #[error(
        "a point-to-multipoint VC has no way back for its leaves' answers: its rate is \
         the one reserved at setup"
    )]
    OneWay,
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
