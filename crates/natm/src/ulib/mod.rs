//! ulib: the socket-like API of seed 000 §4 with QoS at connect and bind.
//!
//! ```no_run
//! use natm::ulib::{Host, HostConfig, Wait};
//! # fn main() -> Result<(), natm::ulib::Error> {
//! let host = Host::open(HostConfig::default())?;
//! let listener = host.bind("127.0.0.1:7000", "reliable")?;
//! let conn = host.connect(listener.local_addr()?, "reliable")?;
//! let peer = listener.accept(Wait::Block)?;
//! conn.send(b"hello", Wait::Block)?;
//! assert_eq!(peer.recv(Wait::Block)?.as_deref(), Some(&b"hello"[..]));
//! # Ok(()) }
//! ```
//!
//! A [`Connection`] is duplex: two simplex VCs, each with its own QoS, error control
//! and flow control (seed 000 §5.3). Every call that may wait takes a [`Wait`]: block
//! ([`Wait::Block`]), wait at most so long ([`Wait::For`], [`Wait::Until`]), or not at
//! all ([`Wait::No`]: [`Error::WouldBlock`] with seed 003's "window full", "over
//! rate" or "empty"). The `*_async` futures and `poll_*` calls are the async forms.
//!
//! Addresses are ATM addresses or names with an optional SAP (`"+4420001:echo"`),
//! and calls go through the host's signalling daemon (`natm sigd`, over the Unix
//! socket in [`HostConfig::sigd_socket`]): the listener sees each caller's address
//! and QoS and accepts or rejects before the connection exists
//! ([`Listener::next_call`], seed 004 §5.3), QoS is a target and a minimum and the
//! grant comes back ([`Connection::granted`]), and refusals carry the UNI cause
//! ([`Error::Refused`]). An IP socket address (`"127.0.0.1:7000"`) is "direct mode",
//! the fallback without sigd: the peer's UDP address, no admission control.

mod connection;
mod listener;
mod multipoint;
mod sigd;
mod split;
mod stats;
#[cfg(feature = "tokio")]
mod tokio_io;
mod wait;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use crate::engine::Chunk;
pub use connection::{Connection, Granted, QosChange, Release};
pub use listener::{IncomingCall, Listener};
pub use natm_proto::endpoint::VcCounters;
pub use natm_proto::transport::{AbortReason, QosOutcome};
pub use natm_proto::wire::qos::Qos;
pub use split::{Receiver, Sender};
pub use stats::{BareStats, ConnStats, ConnStatus, OamStats, RmStats, SealStats};
pub use wait::{Outgoing, Wait};

pub use crate::error::{Error, WouldBlock};
/// The reference-counted buffer [`Chunk`]s hand out (the `bytes` crate's).
pub use bytes::Bytes;
pub use multipoint::{LeafEvent, LeafId, Multipoint};

use crate::engine::{Conn, Engine, EngineConfig, Link};
use crate::sched::{guaranteed_weight, Level};
use crate::transport::TransportConfig;
use crate::wire::qos::{Direction, Service, TrafficClass};
use natm_proto::endpoint::{BareConfig, BareParams};

pub use crate::adaptor::MemNetwork;
pub use crate::engine::{
    current_cpus, pin_current_thread, ConnEvent, LinkMode, Network, PortStats, Ports,
    SendPoolStats, Watermarks, DEFAULT_SEND_POOL, DEFAULT_TRAIN_CELLS, EVENT_QUEUE,
};

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
    /// The host's sigd socket for calls to ATM addresses (`None`: direct mode only).
    /// Default: `$NATM_SIGD`, else `/run/natm/sigd.sock`.
    pub sigd_socket: Option<PathBuf>,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            engine: EngineConfig::default(),
            reorder_threshold: 3,
            min_rto: Duration::from_millis(20),
            connect_timeout: Duration::from_secs(5),
            sigd_socket: Some(
                std::env::var_os("NATM_SIGD")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from(crate::wire::ipc::DEFAULT_SOCKET)),
            ),
        }
    }
}

/// A host: one natm transport entity (engine) in this process.
#[derive(Debug, Clone)]
pub struct Host {
    eng: Arc<Engine>,
    cfg: HostConfig,
    sigd: Option<Arc<sigd::SigdClient>>,
    /// A data socket opened ahead for the next call through sigd (see
    /// [`Host::data_link`]).
    spare: Arc<crate::sync::OrderedMutex<Option<Link>>>,
}

/// How a listener through sigd answers its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Accept {
    /// Every call is offered first: the application sees the caller and the QoS and
    /// accepts or rejects before the connection exists ([`Listener::next_call`],
    /// seed 004 §5.3). The default.
    #[default]
    Explicit,
    /// Pre-authorised, like a TCP listen backlog with the QoS check kept: sigd answers
    /// a call whose QoS fits the listener's (same service; for guaranteed service no
    /// direction's target above the listener's) with CONNECT itself, on a data socket
    /// this host opened ahead, and [`Listener::accept`] returns it already connected.
    /// Policy and admission still refuse calls as before. Up to `backlog` answered
    /// calls wait for `accept`; callers beyond that are refused with cause 17 (user
    /// busy). Calls that do not fit are offered as in `Explicit` mode (`accept` takes
    /// them too; [`Listener::next_call`] shows only those). Direct mode always accepts.
    Auto {
        /// Calls answered ahead of `accept`, 1 to 1,024 (one data socket each).
        backlog: u16,
    },
}

/// Where a call goes: an IP socket address (direct mode) or an ATM address or name
/// with an optional `:SAP` (through sigd).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The peer's UDP address: direct mode.
    Ip(SocketAddr),
    /// `ATM address or name[:SAP]` (for `bind`: `[address]:SAP` or `SAP`).
    Atm(String),
}

/// Anything [`Host::connect`] and [`Host::bind`] take as an address.
pub trait IntoTarget {
    /// The target.
    fn into_target(self) -> Target;
}

impl IntoTarget for SocketAddr {
    fn into_target(self) -> Target {
        Target::Ip(self)
    }
}

impl IntoTarget for &str {
    fn into_target(self) -> Target {
        match self.trim().parse::<SocketAddr>() {
            Ok(a) => Target::Ip(a),
            Err(_) => Target::Atm(self.trim().to_owned()),
        }
    }
}

impl IntoTarget for String {
    fn into_target(self) -> Target {
        self.as_str().into_target()
    }
}

impl IntoTarget for &String {
    fn into_target(self) -> Target {
        self.as_str().into_target()
    }
}

/// Anything the API takes as a QoS: a [`Qos`], or its text (Linux-ATM syntax with
/// natm's extensions, e.g. `"reliable"`, `"cbr:pcr=10Mbps"`), parsed once here. From
/// this point on the QoS is typed: it crosses the IPC to sigd as a `Qos`, so a text
/// that does not parse is this call's [`Error::Qos`] and never reaches the network.
pub trait IntoQos {
    /// The QoS, or why the text is not one.
    fn into_qos(self) -> Result<Qos, Error>;
}

impl IntoQos for Qos {
    fn into_qos(self) -> Result<Qos, Error> {
        Ok(self)
    }
}

impl IntoQos for &Qos {
    fn into_qos(self) -> Result<Qos, Error> {
        Ok(*self)
    }
}

impl IntoQos for &str {
    fn into_qos(self) -> Result<Qos, Error> {
        self.parse()
            .map_err(|e: crate::wire::qos::QosParseError| Error::Qos(e.render(self)))
    }
}

impl IntoQos for String {
    fn into_qos(self) -> Result<Qos, Error> {
        self.as_str().into_qos()
    }
}

impl IntoQos for &String {
    fn into_qos(self) -> Result<Qos, Error> {
        self.as_str().into_qos()
    }
}

impl IntoTarget for Target {
    fn into_target(self) -> Target {
        self
    }
}

/// What a QoS resolves to on this host.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) cfg: TransportConfig,
    pub(crate) level: Level,
    pub(crate) weight: u32,
    /// A bare AAL5 VC pair (`transport=none`): the sending and receiving VCs' setup.
    pub(crate) bare: Option<(BareConfig, BareConfig)>,
    /// `smooth=cell`: the cell rate its sending VC's cells are spaced at (seed 001
    /// §7), where the link is in cell mode.
    pub(crate) cell_rate: Option<u64>,
    /// The directions the QoS marks `none`, `(tx, rx)`: a simplex connection.
    pub(crate) unused: (bool, bool),
}

impl Resolved {
    /// Refuse a bare QoS where a bare VC cannot be set up (direct mode: there is no
    /// handshake to agree its VCIs).
    fn not_bare(self) -> Result<Resolved, Error> {
        if self.bare.is_some() {
            return Err(Error::Qos(
                "transport=none (bare AAL5 SDUs) has no handshake of its own: call an ATM \
                 address through sigd, or open a PVC (Host::open_pvc), instead of a direct \
                 IP address"
                    .into(),
            ));
        }
        Ok(self)
    }
}

/// Refuse a called party's bad SAP ("bob:my sap", "bob:") before anything is sent,
/// rather than have sigd or the network refuse the address. What follows the last
/// colon is not a SAP when the whole text is an ATM address written with a colon
/// (`e164:hex`, a subaddress); names from sigd's hosts file hold no colon.
pub(crate) fn check_called_sap(called: &str) -> Result<(), Error> {
    crate::sig::Sap::of_called(called, |t| t.parse::<crate::wire::addr::AtmAddr>().is_ok())?;
    Ok(())
}

impl Host {
    /// Start a host's engine.
    pub fn open(cfg: HostConfig) -> Result<Host, Error> {
        let eng = Engine::start(cfg.engine.clone()).map_err(Error::Io)?;
        let sigd = cfg
            .sigd_socket
            .clone()
            .map(|p| sigd::SigdClient::new(p, Arc::downgrade(&eng)));
        Ok(Host {
            eng,
            cfg,
            sigd,
            spare: Arc::new(crate::sync::OrderedMutex::new(
                crate::sync::Level::SpareLink,
                None,
            )),
        })
    }

    fn resolve_qos(&self, q: &Qos) -> Result<Resolved, Error> {
        // An IP path is not a round-robin network: feedback flow control defaults to
        // the dynamic window (seed 000 §5.3.3).
        let mut cfg = TransportConfig::from_qos(q, false).map_err(Error::Config)?;
        cfg.reorder_threshold = self.cfg.reorder_threshold;
        cfg.rtt.min_rto = self.cfg.min_rto;
        cfg.rtt.initial_rto = self.cfg.min_rto.max(Duration::from_millis(200));
        if q.is_bare() {
            // A bare VC has no transport service: it is scheduled by its class, a
            // shaped CBR/VBR sender with the guaranteed VCs.
            let tx = BareConfig::from_qos(q, Direction::Tx);
            let rx = BareConfig::from_qos(q, Direction::Rx);
            let (level, weight) = match (q.class(), tx.pcr_bps) {
                (TrafficClass::Cbr | TrafficClass::Vbr, Some(bps)) => {
                    (Level::Guaranteed, guaranteed_weight(bps))
                }
                _ => (Level::BestEffort, 1),
            };
            return Ok(Resolved {
                cfg,
                level,
                weight,
                bare: Some((tx, rx)),
                cell_rate: q.smoothing_cells(),
                unused: (!q.tx().is_used(), !q.rx().is_used()),
            });
        }
        let (level, weight) = match q.service() {
            Service::Guaranteed => (Level::Guaranteed, guaranteed_weight(cfg.rate)),
            Service::Reliable => (Level::Reliable, 1),
            Service::BestEffort => (Level::BestEffort, 1),
        };
        Ok(Resolved {
            cfg,
            level,
            weight,
            bare: None,
            cell_rate: q.smoothing_cells(),
            unused: (!q.tx().is_used(), !q.rx().is_used()),
        })
    }

    fn session(&self) -> Result<Arc<sigd::Session>, Error> {
        match &self.sigd {
            Some(c) => c.session(),
            None => Err(Error::NeedsSigd(
                "an ATM address needs sigd: set HostConfig::sigd_socket, or give an IP socket address for direct mode",
            )),
        }
    }

    /// Listen with `qos` (a [`Qos`] or its text, e.g. `"reliable"`, `"cbr:pcr=10Mbps"`).
    /// Through sigd, `addr` is a SAP ("echo"), optionally on one of this host's
    /// addresses ("+4420001:echo"); in direct mode it is a UDP address to bind.
    pub fn bind(&self, addr: impl IntoTarget, qos: impl IntoQos) -> Result<Listener, Error> {
        let qos = qos.into_qos()?;
        let r = self.resolve_qos(&qos)?;
        match addr.into_target() {
            Target::Ip(a) => Listener::bind(self.eng.clone(), a, r.not_bare()?),
            Target::Atm(sap) => {
                crate::sig::Sap::of_listener(&sap)?;
                let session = self.session()?;
                let id = session.request(|req| crate::wire::ipc::Message::Bind {
                    req,
                    sap: sap.clone(),
                    qos,
                })?;
                let b = sigd::Binding::new(session, id, sap, qos, None);
                Ok(Listener::signalled(self.clone(), b))
            }
        }
    }

    /// Listen like [`Host::bind`], choosing how calls through sigd are answered
    /// ([`Accept::Auto`]: pre-authorised, with a backlog).
    pub fn bind_with(
        &self,
        addr: impl IntoTarget,
        qos: impl IntoQos,
        accept: Accept,
    ) -> Result<Listener, Error> {
        let qos = qos.into_qos()?;
        let backlog = match accept {
            Accept::Explicit => return self.bind(addr, qos),
            Accept::Auto { backlog } => backlog,
        };
        if !(1..=crate::wire::ipc::MAX_ENDPOINTS).contains(&usize::from(backlog)) {
            return Err(Error::BadBacklog(backlog));
        }
        let r = self.resolve_qos(&qos)?;
        match addr.into_target() {
            Target::Ip(a) => Listener::bind(self.eng.clone(), a, r.not_bare()?),
            Target::Atm(sap) => {
                crate::sig::Sap::of_listener(&sap)?;
                let session = self.session()?;
                let links = (0..backlog)
                    .map(|_| self.new_data_link())
                    .collect::<Result<Vec<_>, _>>()?;
                let pool = listener::AutoLinks::new(links, usize::from(backlog))?;
                let data = pool.endpoints();
                let id = session.request(|req| crate::wire::ipc::Message::BindAuto {
                    req,
                    sap: sap.clone(),
                    qos,
                    data,
                })?;
                let b = sigd::Binding::new(session, id, sap, qos, Some(pool));
                Ok(Listener::signalled(self.clone(), b))
            }
        }
    }

    /// Connect with `qos` for both directions; blocks until both VCs are set up, the
    /// call is refused, or the connect timeout passes. `addr` is an ATM address or
    /// name with an optional `:SAP` (through sigd), or an IP socket address (direct).
    pub fn connect(&self, addr: impl IntoTarget, qos: impl IntoQos) -> Result<Connection, Error> {
        let qos = qos.into_qos()?;
        let r = self.resolve_qos(&qos)?;
        match addr.into_target() {
            Target::Ip(a) => Connection::connect(
                self.eng.clone(),
                (None, a),
                r.not_bare()?,
                self.cfg.connect_timeout,
            ),
            Target::Atm(called) => self.connect_signalled(&called, qos),
        }
    }

    /// Connect directly to `addr` from the local UDP address `local`, as
    /// [`Host::connect`] does from an ephemeral one: for a path whose far end
    /// admits only a known address, e.g. a `natm switch` port whose `peer` is this
    /// host's end of the link.
    pub fn connect_from(
        &self,
        local: SocketAddr,
        addr: SocketAddr,
        qos: impl IntoQos,
    ) -> Result<Connection, Error> {
        let r = self.resolve_qos(&qos.into_qos()?)?;
        Connection::connect(
            self.eng.clone(),
            (Some(local), addr),
            r.not_bare()?,
            self.cfg.connect_timeout,
        )
    }

    /// Open a bare AAL5 PVC (`qos` must say `transport=none`): VPI `vpi`, VCI `vci`
    /// both ways, towards the UDP data endpoint `peer` — a `natm switch` port with a
    /// `[[pvc]]` on that VC, or another host's PVC — with no signalling, as Linux's
    /// `aread`/`awrite` open `itf.vpi.vci`. Messages are AAL5 SDUs of at most the QoS's
    /// `max_sdu`; nothing tells the other end when this one is done (a PVC has no
    /// release), so a receiver decides by itself when to stop.
    pub fn open_pvc(
        &self,
        vpi: u8,
        vci: u16,
        peer: SocketAddr,
        qos: impl IntoQos,
    ) -> Result<Connection, Error> {
        let any: SocketAddr = if peer.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        self.open_pvc_from(any, vpi, vci, peer, qos)
    }

    /// As [`Host::open_pvc`], from the local UDP address `local` (a switch port admits
    /// only its configured `peer`).
    pub fn open_pvc_from(
        &self,
        local: SocketAddr,
        vpi: u8,
        vci: u16,
        peer: SocketAddr,
        qos: impl IntoQos,
    ) -> Result<Connection, Error> {
        let qos = qos.into_qos()?;
        let r = self.resolve_qos(&qos)?;
        let Some((tx, rx)) = r.bare else {
            return Err(Error::Qos(format!(
                "a PVC carries bare AAL5 SDUs: its QoS needs transport=none (e.g. {}:transport=none)",
                qos.class()
            )));
        };
        if crate::wire::cell::is_reserved_vci(vci) {
            return Err(Error::Qos(format!(
                "VCI {vci} is reserved (0..=31: signalling, OAM, ILMI); a PVC takes {}..=65535",
                crate::wire::cell::VCI_FIRST_USER
            )));
        }
        let link = Link::bind(&self.eng, local).map_err(Error::Io)?;
        let params = BareParams {
            peer,
            vpi,
            tx_vci: vci,
            rx_vci: vci,
            tx,
            rx,
        };
        let conn = Conn::open_bare(&self.eng, link, params, (r.level, r.weight))?;
        conn.smooth_cells(&self.eng, r.cell_rate);
        conn.set_unused(r.unused);
        Ok(Connection::from_conn(self.eng.clone(), conn))
    }

    /// The data socket for a call through sigd: the one opened ahead if there is one.
    fn data_link(&self) -> Result<Link, Error> {
        if let Some(l) = self.spare.lock().take() {
            return Ok(l);
        }
        self.new_data_link()
    }

    pub(crate) fn new_data_link(&self) -> Result<Link, Error> {
        let any: SocketAddr = (std::net::Ipv4Addr::UNSPECIFIED, 0).into();
        Link::bind(&self.eng, any).map_err(Error::Io)
    }

    /// Open the next call's data socket while this call's request is with sigd: the
    /// thread would only wait there, and opening a socket (several system calls)
    /// leaves the critical path of the next setup. Best effort.
    pub(crate) fn open_spare_link(&self) {
        if self.spare.lock().is_some() {
            return;
        }
        if let Ok(l) = self.new_data_link() {
            let mut s = self.spare.lock();
            if s.is_none() {
                *s = Some(l);
            }
        }
    }

    /// Open a point-to-multipoint call through sigd (`ConnectMultipoint`) to its first
    /// leaf `called`: the network replicates its one VC to every leaf. Returns the
    /// connection (its VC, sending only) and the call's id for `AddParty`.
    pub(crate) fn connect_multipoint_signalled(
        &self,
        called: &str,
        qos: Qos,
    ) -> Result<(Connection, u64), Error> {
        use crate::wire::ipc::Message;
        check_called_sap(called)?;
        let session = self.session()?;
        let link = self.data_link()?;
        let data = link.local_addr().map_err(Error::Io)?;
        let req = session.send_request(|req| Message::ConnectMultipoint {
            req,
            called: called.to_owned(),
            qos,
            data,
        })?;
        let call = session.answer(req)?;
        // Before any party can be added: nothing said about one is lost.
        session.watch_parties(call);
        let conn = self.await_connected(&session, call, link, true)?;
        Ok((conn, call))
    }

    fn connect_signalled(&self, called: &str, qos: Qos) -> Result<Connection, Error> {
        use crate::wire::ipc::Message;
        check_called_sap(called)?;
        let session = self.session()?;
        let link = self.data_link()?;
        let data = link.local_addr().map_err(Error::Io)?;
        let req = session.send_request(|req| Message::Connect {
            req,
            called: called.to_owned(),
            qos,
            data,
        })?;
        self.open_spare_link();
        let call = session.answer(req)?;
        self.await_connected(&session, call, link, true)
    }

    /// Wait for sigd's `Connected` for `call`, then open the data path (`caller`: this
    /// end placed the call).
    pub(crate) fn await_connected(
        &self,
        session: &Arc<sigd::Session>,
        call: u64,
        link: Link,
        caller: bool,
    ) -> Result<Connection, Error> {
        use crate::wire::ipc::Message;
        match session.call_event(call, self.cfg.connect_timeout) {
            Ok(ev @ sigd::CallEvent::Connected(_)) => {
                self.open_signalled(session, call, link, ev, caller)
            }
            Ok(sigd::CallEvent::Released { cause, detail }) => {
                session.forget(call);
                Err(Error::Refused { cause, detail })
            }
            Err(e) => {
                // No answer in time: give the call up so sigd frees it (cause 102,
                // recovery on timer expiry).
                session.notify(|req| Message::Release {
                    req,
                    call,
                    cause: 102,
                });
                session.forget(call);
                Err(e)
            }
        }
    }

    /// Open the data path of `call` on `link` from sigd's `Connected` (`ev`);
    /// `caller`: this end placed the call.
    pub(crate) fn open_signalled(
        &self,
        session: &Arc<sigd::Session>,
        call: u64,
        link: Link,
        ev: sigd::CallEvent,
        caller: bool,
    ) -> Result<Connection, Error> {
        use crate::wire::ipc::Message;
        let sigd::CallEvent::Connected(path) = ev else {
            return Err(Error::SigdGone);
        };
        // Kept for a restarted sigd (`Reclaim`), with this side's data endpoint.
        let kept = (*path).clone();
        let data = link.local_addr().map_err(Error::Io)?;
        let crate::wire::ipc::DataPath {
            peer,
            cookie,
            tx_vci,
            rx_vci,
            granted_bps,
            qos,
            keys,
            multipoint,
            ..
        } = *path;
        let r = match self.resolve_qos(&qos) {
            // A point-to-multipoint call's VC is one-way (Q.2971): its root only
            // sends, its leaves only receive, and a leaf joins the stream where it
            // finds it (`TransportConfig::one_way`).
            Ok(mut r) => {
                r.cfg.one_way = multipoint;
                r
            }
            Err(e) => {
                session.notify(|req| Message::Release {
                    req,
                    call,
                    cause: 73,
                });
                session.forget(call);
                return Err(e);
            }
        };
        // Both VCs start established from what signalling agreed (no TPDU
        // handshake): each end derives the VC's ISN from the call's cookie and the
        // VC's direction, so sender and receiver agree without a round trip. A bare
        // call (`transport=none`) opens bare VCs on the same data path instead: no
        // cookie, no ISN, no transport at all.
        let conn = match r.bare {
            Some((tx, rx)) => Conn::open_bare(
                &self.eng,
                link,
                BareParams {
                    peer,
                    vpi: 0,
                    tx_vci,
                    rx_vci,
                    tx,
                    rx,
                },
                (r.level, r.weight),
            )?,
            None => Conn::open_signalled(
                &self.eng,
                link,
                (peer, cookie, tx_vci, rx_vci, caller),
                r.cfg,
                (r.level, r.weight),
                keys.as_ref(),
            )?,
        };
        conn.smooth_cells(&self.eng, r.cell_rate);
        conn.set_unused(r.unused);
        session.established(call, &conn, kept, data);
        let granted = Granted {
            tx_bps: granted_bps,
            qos,
        };
        Connection::signalled(
            self.eng.clone(),
            conn,
            session.clone(),
            call,
            granted,
            self.cfg.connect_timeout,
        )
    }

    /// Wait up to `timeout` for the connections this host's application dropped to
    /// finish closing (SO_LINGER's idea): each finishes its close on the data path
    /// and only then releases its call (cause 16) — a process that exits first ends
    /// its calls as a crash does. Whether all finished in time.
    pub fn linger(&self, timeout: Duration) -> bool {
        let until = std::time::Instant::now() + timeout;
        loop {
            if self.eng.is_idle() {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Ask sigd for its state (the JSON of `natm stat --json`): the first page. sigd
    /// pages the document so that no reply exceeds an IPC frame; when more calls or
    /// listeners follow, the document's `next` is the offset to give
    /// [`Host::sigd_stat_page`]. A user other than root sees only its own calls and
    /// listeners.
    pub fn sigd_stat(&self) -> Result<String, Error> {
        self.session()?.stat(0)
    }

    /// The page of sigd's state from row `offset` (a previous page's `next`).
    pub fn sigd_stat_page(&self, offset: u64) -> Result<String, Error> {
        self.session()?.stat(offset)
    }

    /// Add an ATM address to this host's directory while this host's sigd session
    /// lives (calls to it then reach this host's listeners).
    pub fn register_address(&self, address: &str) -> Result<(), Error> {
        self.session()?
            .request(|req| crate::wire::ipc::Message::Register {
                req,
                address: address.to_owned(),
            })
            .map(|_| ())
    }

    /// The send buffer pool every sending VC of this host draws on (seed 001 §6,
    /// `HostConfig::engine.send_pool`): its bound, what the VCs hold now and at most,
    /// and how many sends it held back; and the buffers it keeps for large sends'
    /// copies.
    pub fn send_pool(&self) -> SendPoolStats {
        let (spare, reused) = self.eng.send_buffers.counts();
        SendPoolStats {
            spare,
            reused,
            ..self.eng.send_pool.stats()
        }
    }

    /// The host's UDP ports and their counters, one per local address, with one port
    /// per host (`Ports::PerHost`); empty with a socket per VC. Reads
    /// `/proc/net/udp` once for the kernel's drops.
    pub fn ports(&self) -> Vec<PortStats> {
        self.eng.host_ports.stats()
    }

    /// The configuration.
    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }
}
