//! ulib: the socket-like API of seed 000 §4 with QoS at connect and bind.
//!
//! ```no_run
//! use natm::ulib::{Host, HostConfig};
//! # fn main() -> Result<(), natm::ulib::Error> {
//! let host = Host::open(HostConfig::default())?;
//! let listener = host.bind("127.0.0.1:7000", "reliable")?;
//! let conn = host.connect(listener.local_addr()?, "reliable")?;
//! let peer = listener.accept()?;
//! conn.send(b"hello")?;
//! assert_eq!(peer.recv()?.as_deref(), Some(&b"hello"[..]));
//! # Ok(()) }
//! ```
//!
//! A [`Connection`] is duplex: two simplex VCs, each with its own QoS, error control
//! and flow control (seed 000 §5.3). Calls block by default; the `try_*` calls return
//! [`Error::WouldBlock`] with seed 003's "window full" or "over rate" instead. Until
//! the signalling daemon takes over, addresses are the peer's UDP address ("direct
//! mode"); [`Host::connect`] resolves the address in one place, the seam where sigd
//! plugs in.

mod connection;
mod error;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

pub use connection::{ConnStats, Connection, Listener, Receiver, Sender};
pub use error::{Error, WouldBlock};

use crate::engine::{Engine, EngineConfig};
use crate::sched::{guaranteed_weight, Level};
use crate::transport::TransportConfig;
use crate::wire::qos::{Qos, Service};

pub use crate::adaptor::MemNetwork;
pub use crate::engine::{current_cpus, pin_current_thread, Network, Watermarks};

/// How a host runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// The engine: socket buffers, watermarks, busy polling.
    pub engine: EngineConfig,
    /// Holes are inferred lost only this many TPDUs behind the newest ACK: UDP/IP can
    /// reorder, ATM never does (specs.md §7.2).
    pub reorder_threshold: u32,
    /// Floor on the retransmission timeout.
    pub min_rto: Duration,
    /// Give up a connect after this long.
    pub connect_timeout: Duration,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            engine: EngineConfig::default(),
            reorder_threshold: 3,
            min_rto: Duration::from_millis(20),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// A host: one natm transport entity (engine) in this process.
#[derive(Debug, Clone)]
pub struct Host {
    eng: Arc<Engine>,
    cfg: HostConfig,
}

/// What a QoS resolves to on this host.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) cfg: TransportConfig,
    pub(crate) level: Level,
    pub(crate) weight: u32,
}

impl Host {
    /// Start a host's engine.
    pub fn open(cfg: HostConfig) -> Result<Host, Error> {
        let eng = Engine::start(cfg.engine.clone()).map_err(Error::Io)?;
        Ok(Host { eng, cfg })
    }

    fn resolve_qos(&self, qos: &str) -> Result<Resolved, Error> {
        let q: Qos = qos
            .parse()
            .map_err(|e: crate::wire::qos::QosParseError| Error::Qos(e.render(qos)))?;
        // An IP path is not a round-robin network: feedback flow control defaults to
        // the dynamic window (seed 000 §5.3.3).
        let mut cfg = TransportConfig::from_qos(&q, false).map_err(Error::Config)?;
        cfg.reorder_threshold = self.cfg.reorder_threshold;
        cfg.rtt.min_rto = self.cfg.min_rto;
        cfg.rtt.initial_rto = self.cfg.min_rto.max(Duration::from_millis(200));
        let (level, weight) = match q.service() {
            Service::Guaranteed => (Level::Guaranteed, guaranteed_weight(cfg.rate)),
            Service::Reliable => (Level::Reliable, 1),
            Service::BestEffort => (Level::BestEffort, 1),
        };
        Ok(Resolved { cfg, level, weight })
    }

    /// Direct mode: the address is the peer's UDP address. sigd replaces this with
    /// the ATM address directory (the seam for signalling).
    fn resolve_addr(addr: impl ToSocketAddrs) -> Result<SocketAddr, Error> {
        addr.to_socket_addrs()
            .map_err(Error::Io)?
            .next()
            .ok_or(Error::NoAddress)
    }

    /// Listen for connections at `addr` with `qos` (Linux-ATM QoS text, e.g.
    /// `"reliable"`, `"cbr:pcr=10Mbps"`): it bounds what callers get and sets the
    /// VC back to them.
    pub fn bind(&self, addr: impl ToSocketAddrs, qos: &str) -> Result<Listener, Error> {
        let r = self.resolve_qos(qos)?;
        let addr = Self::resolve_addr(addr)?;
        Listener::bind(self.eng.clone(), addr, r)
    }

    /// Connect to a listener with `qos` for both directions; blocks until both VCs
    /// are set up or the connect timeout passes.
    pub fn connect(&self, addr: impl ToSocketAddrs, qos: &str) -> Result<Connection, Error> {
        let r = self.resolve_qos(qos)?;
        let addr = Self::resolve_addr(addr)?;
        Connection::connect(self.eng.clone(), addr, r, self.cfg.connect_timeout)
    }

    /// The configuration.
    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }
}
