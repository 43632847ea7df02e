//! What the API's calls report (`ulib::Error`): each error says what happened and
//! what to do. On the ground floor, under the engine and ulib, so the engine reports
//! errors without reaching up into the API.

use std::io;

use thiserror::Error;

use crate::transport::{AbortReason, ConfigError};

/// Why a non-blocking call took nothing (seed 003's status flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WouldBlock {
    /// The send buffer or window is full: wait, or block.
    WindowFull,
    /// Sending faster than the reserved rate: the leaky bucket holds the data.
    OverRate,
    /// The host's send buffer pool is spent: the host's VCs together hold
    /// `EngineConfig::send_pool` octets not yet acknowledged. Wait, or block.
    SendPool,
    /// No message has arrived yet.
    Empty,
}

/// An error from the natm API.
#[derive(Debug, Error)]
pub enum Error {
    /// The call would have blocked.
    #[error("would block: {0:?}")]
    WouldBlock(WouldBlock),
    /// A socket operation failed.
    #[error("I/O error: {0}")]
    Io(#[source] io::Error),
    /// The address resolved to nothing.
    #[error("the address resolved to no socket address; give host:port")]
    NoAddress,
    /// The SAP is not one (1 to 8 ASCII letters, digits, `-` or `_`, or
    /// `@OUI.APPID`): refused before anything is sent.
    #[error("bad SAP: {0}")]
    Sap(#[from] crate::sig::SapTextError),
    /// The QoS text is not valid (the message points at the offending token).
    #[error("bad QoS: {0}")]
    Qos(String),
    /// The QoS asks for a transport that cannot work.
    #[error("unusable QoS: {0}")]
    Config(#[source] ConfigError),
    /// No answer from the peer within the connect timeout.
    #[error("no answer from {0} within the connect timeout: is a natm listener bound there?")]
    Unreachable(std::net::SocketAddr),
    /// The call was refused (by sigd's admission control or policy, the network, or
    /// the called application), with the UNI cause (Q.2931 Table 4-3).
    #[error("call refused, cause {cause} ({}): {detail}", crate::wire::q2931::CauseValue::from_raw(*cause).meaning())]
    Refused {
        /// UNI cause value: 37 user cell rate unavailable, 47 resources unavailable,
        /// 21 call rejected, 3 no route, 88 incompatible destination (no listener)...
        cause: u8,
        /// What happened, e.g. "80 Mbit/s requested, 35 Mbit/s free on the link".
        detail: String,
    },
    /// The host's sigd cannot be reached.
    #[error("cannot reach sigd at {}: {source}; start `natm sigd`, or if permission was denied ask its owner for access to that socket (or set HostConfig::sigd_socket / $NATM_SIGD to one you may use)", path.display())]
    NoSigd {
        /// The socket path tried.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// sigd went away (stopped or crashed) while a request was pending.
    #[error("sigd went away: pending calls are gone; established connections keep running, and listeners are bound again once sigd is back")]
    SigdGone,
    /// sigd closed this application's session itself and said why: a limit it holds
    /// the application's user to, an idle session, or a protocol error. A new
    /// request opens a new session.
    #[error("sigd closed the session (cause {cause}): {detail}")]
    SigdClosed {
        /// UNI cause value (47: resources unavailable, 16: idle).
        cause: u8,
        /// sigd's reason.
        detail: String,
    },
    /// The call needs sigd (an ATM address, or showing a call before it connects).
    #[error("{0}")]
    NeedsSigd(&'static str),
    /// The connection was aborted.
    #[error("connection aborted ({0:?}): undelivered data is lost; open a new connection")]
    Aborted(AbortReason),
    /// `close` was called or the peer finished: no more data this way.
    #[error("the connection is closed in this direction")]
    Closed,
    /// A send or receive in the direction a simplex connection does not use
    /// (`tx:none` or `rx:none` in its QoS, seed 000 §5.3).
    #[error("this connection is simplex: {0}")]
    Simplex(&'static str),
    /// The message is larger than agreed at setup.
    #[error("message of {size} bytes exceeds the agreed maximum of {max} bytes")]
    MessageTooLarge {
        /// Size given.
        size: u64,
        /// Largest allowed.
        max: u64,
    },
    /// An empty message on a bare AAL5 VC (`transport=none`), which cannot carry one.
    #[error("a bare AAL5 VC (transport=none) cannot carry an empty message: AAL5's Length 0 means abort")]
    EmptyMessage,
    /// A timed call ran out of time.
    #[error("timed out")]
    TimedOut,
    /// A pre-authorised listener's backlog outside what sigd takes.
    #[error("backlog {0} outside 1..=1024: a pre-authorised listener holds room for 1 to 1,024 accepted calls")]
    BadBacklog(u16),
    /// An OAM loopback probe while this many already wait for answers on the
    /// connection (the bound on its probe table).
    #[error("{0} OAM loopback probes already wait for answers on this connection")]
    TooManyProbes(usize),
    /// A rate outside what was agreed.
    #[error(transparent)]
    QosBounds(#[from] crate::transport::QosBoundsError),
    /// Another QoS change of the connection still waits for the peer's answer.
    #[error("a QoS change to {0} bit/s is still pending; wait for its answer")]
    QosPending(u64),
    /// The peer refused the QoS change, or never answered it; the rate stayed.
    #[error("the peer refused the QoS change to {rate} bit/s (or never answered); the rate is unchanged")]
    QosRefused {
        /// The rate that was asked for, payload bit/s.
        rate: u64,
    },
    /// The QoS text changes something only a new call can (only the rate is
    /// renegotiated on an open connection).
    #[error("{0}")]
    QosNotNegotiable(String),
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::WouldBlock(_) => io::ErrorKind::WouldBlock,
            Error::Io(e) => e.kind(),
            Error::Unreachable(_) => io::ErrorKind::TimedOut,
            Error::Refused { .. } => io::ErrorKind::ConnectionRefused,
            Error::NoSigd { .. } | Error::SigdGone | Error::SigdClosed { .. } => {
                io::ErrorKind::NotConnected
            }
            Error::Aborted(_) => io::ErrorKind::ConnectionAborted,
            Error::Closed => io::ErrorKind::BrokenPipe,
            Error::TimedOut => io::ErrorKind::TimedOut,
            Error::MessageTooLarge { .. }
            | Error::EmptyMessage
            | Error::Qos(_)
            | Error::Sap(_)
            | Error::QosBounds(_)
            | Error::QosNotNegotiable(_)
            | Error::Config(_) => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}
