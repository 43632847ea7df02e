//! The sans-IO endpoint: demultiplexing of arriving frames to duplex connections, the
//! direct-mode handshake on the listening side, and the connections themselves
//! (quinn-proto's `Endpoint`/`Connection` split).
//!
//! seed 000 §5.3: "duplex service is provided by ulib, which opens and manages two
//! simplex transport connections". A [`Connection`] is that pair — a [`TxHalf`] and an
//! [`RxHalf`], each one [`Psb`](crate::transport::Psb) — and the [`Endpoint`] is what
//! the adaptor's receive path did by hand: find the connection of a frame by its VCI
//! and cookie (seed 001 §4.2: the cookie is the capability that binds the data path),
//! check its source, and turn a CONN-REQ on the listening VCI into a new connection.
//!
//! Like the transport this is sans-IO: no sockets, threads, clock reads or OS
//! randomness. Time comes with every call; cookies and initial sequence numbers come
//! from a generator seeded by the caller ([`EndpointConfig::seed`]).
//!
//! Frames are datagrams of the UDP adaptor's format (docs/wire.md): a 4-octet VC
//! header, then one TPDU.

mod bare;
mod connection;
pub mod coupling;
mod half;
mod host;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

pub use crate::transport::{AbortReason, Chunk, PsbStats, RecvError, SendError};
pub use bare::{
    BareConfig, BareRx, BareTx, VcCounters, DEFAULT_BARE_QUEUE, DEFAULT_BARE_RCV_BUF, RELEASE_GRACE,
};
pub use connection::{Connection, ConnectionStats, Event, Side, State};
pub use half::{Half, HalfStatus, RxHalf, Simplex, TxHalf};
pub use host::{mark_call, Dir, HostKey, HostRoutes, RouteTaken, CALL_MARK};

use crate::flow;
use crate::time::Instant;
use crate::transport::{ConfigError, Psb, TransmitKind, TransportConfig};
use crate::wire::tpdu::{Header, TpduType};
use crate::wire::vcframe;

/// The VCI of the VC from the connecting side to the accepting side in direct mode
/// (the listener takes CONN-REQs on it).
pub const VCI_FORWARD: u16 = 32;
/// The VCI of the VC from the accepting side back to the connecting side.
pub const VCI_BACKWARD: u16 = 33;

/// A connection's name at its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle(pub usize);

/// What identifies a connection's frames: the VCI of each direction and the cookie
/// both carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// VCI of the VC this end sends on.
    pub tx_vci: u16,
    /// VCI of the VC this end receives on.
    pub rx_vci: u16,
    /// The capability every frame of the connection carries.
    pub cookie: u32,
}

/// Why a datagram was not taken by a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Refusal {
    /// Not a natm data frame (another VC header kind, stray traffic, too short).
    #[error("not a natm data frame")]
    NotNatm,
    /// The VC header names a VC this connection does not use.
    #[error("no VC with this VCI here")]
    UnknownVc,
    /// The TPDU's cookie is not the connection's (seed 001 §4.2).
    #[error("the frame's cookie is not the VC's")]
    BadCookie,
    /// The frame came from another address than the connection's peer.
    #[error("the frame came from an address other than the peer's")]
    BadSource,
}

impl Route {
    /// Which half uses `vci` here, if either does.
    pub fn half_of(&self, vci: u16) -> Option<Half> {
        if vci == self.rx_vci {
            Some(Half::Rx)
        } else if vci == self.tx_vci {
            Some(Half::Tx)
        } else {
            None
        }
    }

    /// Which half a datagram (VC header + TPDU) is for, with VCI and cookie checked.
    pub fn classify(&self, datagram: &[u8]) -> Result<Half, Refusal> {
        let (vci, cookie, _) = peek(datagram).ok_or(Refusal::NotNatm)?;
        let half = self.half_of(vci).ok_or(Refusal::UnknownVc)?;
        if cookie != self.cookie {
            return Err(Refusal::BadCookie);
        }
        Ok(half)
    }
}

/// VCI, cookie and TPDU type of a data datagram, if it is one.
fn peek(datagram: &[u8]) -> Option<(u16, u32, TpduType)> {
    let (vc, tpdu) = vcframe::Repr::parse_bytes(datagram).ok()?;
    if vc.kind != vcframe::FrameKind::Data || vc.vpi != 0 {
        return None;
    }
    let (h, _) = Header::parse_bytes(tpdu).ok()?;
    Some((vc.vci, h.cookie, h.ty))
}

/// A frame routed to one connection: which half, from where, and the TPDU (a slice
/// of the datagram, not a copy).
#[derive(Debug, Clone)]
pub struct ConnectionEvent {
    /// The half it is for.
    pub half: Half,
    /// Its source.
    pub from: SocketAddr,
    /// The TPDU.
    pub tpdu: Bytes,
}

/// What a connection tells its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointEvent {
    /// Both VCs are up (an accepted connection leaves the listener's backlog).
    Established,
    /// Finished in both directions: forget its routes.
    Drained,
}

/// One datagram to put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where to.
    pub destination: SocketAddr,
    /// Bytes appended to the caller's buffer.
    pub size: usize,
    /// Which half sent it.
    pub half: Half,
    /// What it is.
    pub kind: TransmitKind,
}

/// What [`Endpoint::handle`] made of a datagram.
#[derive(Debug)]
pub enum DatagramEvent {
    /// A frame for an existing connection: hand it to its `handle_event`.
    ConnectionEvent(ConnectionHandle, ConnectionEvent),
    /// A CONN-REQ opened a new connection (the request is already handled; poll it).
    /// Boxed: a connection is large and this event is rare.
    NewConnection(ConnectionHandle, Box<Connection>),
    /// An answer to send at once: the ABORT for a refused request or a frame of a VC
    /// nobody here knows (seed 000's transport answers a dead VC like a TCP RST).
    Response {
        /// Where to.
        destination: SocketAddr,
        /// The whole datagram.
        datagram: Vec<u8>,
    },
}

/// How an endpoint accepts connections (direct mode).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The VC towards us (our receiving end).
    pub rx: TransportConfig,
    /// The VC back (our sending end).
    pub tx: TransportConfig,
    /// Most accepted connections still in their handshake; requests beyond are
    /// refused (a request flood must not grow memory without bound).
    pub backlog: usize,
}

impl ServerConfig {
    /// Both directions from one configuration.
    pub fn new(cfg: TransportConfig) -> ServerConfig {
        ServerConfig {
            rx: cfg.clone(),
            tx: cfg,
            backlog: 256,
        }
    }
}

/// How one outgoing connection is set up.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Our sending VC.
    pub tx: TransportConfig,
    /// Our receiving VC.
    pub rx: TransportConfig,
}

impl ClientConfig {
    /// Both directions from one configuration.
    pub fn new(cfg: TransportConfig) -> ClientConfig {
        ClientConfig {
            rx: cfg.clone(),
            tx: cfg,
        }
    }
}

/// A connection whose parameters came from signalling (seed 001 §4.2): sigd handed
/// both ends the VCIs, the cookie, the peer's data address and the QoS.
#[derive(Debug, Clone)]
pub struct SignalledParams {
    /// The peer's data endpoint.
    pub peer: SocketAddr,
    /// VCI we send on.
    pub tx_vci: u16,
    /// VCI we receive on.
    pub rx_vci: u16,
    /// The call's cookie.
    pub cookie: u32,
    /// This end placed the call: its sending VC is the call's forward VC.
    pub caller: bool,
    /// Our sending VC's configuration (from the call's QoS).
    pub tx: TransportConfig,
    /// Our receiving VC's configuration.
    pub rx: TransportConfig,
}

/// A bare AAL5 VC pair (`transport=none`): what signalling agreed for a call, or
/// what an administrator configured for a PVC. No cookie: the VCs are told apart by
/// VPI/VCI and by the socket, which is connected to `peer`.
#[derive(Debug, Clone)]
pub struct BareParams {
    /// The peer's data endpoint (a host, or a switch port).
    pub peer: SocketAddr,
    /// VPI of both VCs (0 for a call; a PVC's own).
    pub vpi: u8,
    /// VCI we send on.
    pub tx_vci: u16,
    /// VCI we receive on (a PVC uses one VCI both ways).
    pub rx_vci: u16,
    /// Our sending VC.
    pub tx: BareConfig,
    /// Our receiving VC.
    pub rx: BareConfig,
}

/// How an endpoint runs.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Seed of the generator for cookies and initial sequence numbers (the I/O layer
    /// passes OS randomness; tests a constant).
    pub seed: u64,
    /// Both VCs of a direct connection must be up within this time.
    pub handshake_timeout: Duration,
    /// Accept direct connections (`None`: refuse every CONN-REQ).
    pub server: Option<ServerConfig>,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            seed: 0,
            handshake_timeout: Duration::from_secs(10),
            server: None,
        }
    }
}

/// A configuration the endpoint cannot open a connection with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConnectError {
    /// One direction's transport configuration is unusable.
    #[error("invalid transport configuration: {0}")]
    Config(#[from] ConfigError),
    /// Another connection here already uses these VCIs with this cookie.
    #[error("VCI {0} with this cookie is already in use at this endpoint")]
    RouteInUse(u16),
}

/// Counters of frames the endpoint handled before any connection saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Datagrams routed to a connection.
    pub routed: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// CONN-REQs refused (no server configuration, or the backlog full).
    pub refused: u64,
    /// Datagrams that were not natm data frames.
    pub not_natm: u64,
    /// Frames for no connection here (answered with ABORT unless an ABORT).
    pub unknown_vc: u64,
    /// Frames of a known connection from another address than its peer's.
    pub bad_source: u64,
}

/// SplitMix64: a small seeded generator (cookies and ISNs need to be unpredictable to
/// a peer only as far as the seed is; the I/O layer seeds from the OS).
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 32) as u32
    }
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    route: Route,
    remote: SocketAddr,
    pinned: bool,
    /// Accepted here and not yet established (counts against the backlog).
    in_backlog: bool,
}

/// Demultiplexes datagrams to connections and accepts new ones (quinn-proto's
/// `Endpoint`). It keeps only what routing needs; the caller owns the connections.
///
/// Call order: give every arriving datagram to [`handle`](Self::handle) and act on
/// the [`DatagramEvent`]; hand every [`EndpointEvent`] a connection yields to
/// [`handle_event`](Self::handle_event).
#[derive(Debug)]
pub struct Endpoint {
    cfg: EndpointConfig,
    rng: Rng,
    conns: HashMap<ConnectionHandle, Meta>,
    /// (local VCI, cookie) → the connection and which of its halves uses that VCI.
    routes: HashMap<(u16, u32), (ConnectionHandle, Half)>,
    next_handle: usize,
    backlog: usize,
    stats: EndpointStats,
}

impl Endpoint {
    /// An endpoint; `cfg.server` decides whether it accepts connections.
    pub fn new(cfg: EndpointConfig) -> Endpoint {
        Endpoint {
            rng: Rng(cfg.seed),
            cfg,
            conns: HashMap::new(),
            routes: HashMap::new(),
            next_handle: 0,
            backlog: 0,
            stats: EndpointStats::default(),
        }
    }

    /// Start or stop accepting connections.
    pub fn set_server_config(&mut self, server: Option<ServerConfig>) {
        self.cfg.server = server;
    }

    /// A datagram arrived from `from`.
    pub fn handle(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: Bytes,
    ) -> Option<DatagramEvent> {
        let Some((vci, cookie, ty)) = peek(&datagram) else {
            self.stats.not_natm += 1;
            return None;
        };
        if let Some(&(h, half)) = self.routes.get(&(vci, cookie)) {
            let meta = self.conns.get_mut(&h)?;
            if meta.pinned && meta.remote != from {
                if ty == TpduType::ConnRequest && vci == VCI_FORWARD {
                    // Another caller drew the cookie a call from elsewhere holds: its
                    // VCs could not be told apart. Refused at once (it may call again
                    // with another), where dropping it left it to time out.
                    self.stats.refused += 1;
                    return Some(abort_response(from, VCI_FORWARD, cookie));
                }
                self.stats.bad_source += 1;
                return None;
            }
            meta.remote = from;
            meta.pinned = true;
            self.stats.routed += 1;
            let tpdu = datagram.slice(vcframe::HEADER_LEN..);
            return Some(DatagramEvent::ConnectionEvent(
                h,
                ConnectionEvent { half, from, tpdu },
            ));
        }
        if ty == TpduType::ConnRequest && vci == VCI_FORWARD {
            return Some(self.accept(now, from, cookie, datagram));
        }
        self.stats.unknown_vc += 1;
        if ty == TpduType::Abort {
            // Never answer an ABORT (two dead ends would talk for ever).
            return None;
        }
        Some(abort_response(from, vci, cookie))
    }

    /// seed 000 §5.3: the receiver of a CONN-REQ agrees parameters; here it also
    /// opens the VC back, so that the connection is duplex.
    fn accept(
        &mut self,
        now: Instant,
        from: SocketAddr,
        cookie: u32,
        datagram: Bytes,
    ) -> DatagramEvent {
        let Some(server) = self.cfg.server.as_ref() else {
            self.stats.refused += 1;
            return abort_response(from, VCI_FORWARD, cookie);
        };
        if self.backlog >= server.backlog {
            self.stats.refused += 1;
            return abort_response(from, VCI_FORWARD, cookie);
        }
        let route = Route {
            tx_vci: VCI_BACKWARD,
            rx_vci: VCI_FORWARD,
            cookie,
        };
        let rx_cfg = TransportConfig {
            cookie: Some(cookie),
            ..server.rx.clone()
        };
        let tx_cfg = TransportConfig {
            cookie: Some(cookie),
            isn: self.rng.next_u32(),
            ..server.tx.clone()
        };
        let flow = flow::build(tx_cfg.flow, &tx_cfg);
        let tx = TxHalf::connect(Psb::connect(tx_cfg, flow, now), route.tx_vci);
        let rx = RxHalf::listen(Psb::listen(rx_cfg), route.rx_vci);
        let deadline = now + self.cfg.handshake_timeout;
        let mut conn = Connection::new(route, Side::Server, tx, rx, from, Some(deadline));
        let h = self.insert(route, from, true, true);
        self.stats.accepted += 1;
        conn.handle_event(
            now,
            ConnectionEvent {
                half: Half::Rx,
                from,
                tpdu: datagram.slice(vcframe::HEADER_LEN..),
            },
        );
        DatagramEvent::NewConnection(h, Box::new(conn))
    }

    fn insert(
        &mut self,
        route: Route,
        remote: SocketAddr,
        pinned: bool,
        in_backlog: bool,
    ) -> ConnectionHandle {
        let h = ConnectionHandle(self.next_handle);
        self.next_handle += 1;
        self.routes
            .insert((route.tx_vci, route.cookie), (h, Half::Tx));
        self.routes
            .insert((route.rx_vci, route.cookie), (h, Half::Rx));
        self.conns.insert(
            h,
            Meta {
                route,
                remote,
                pinned,
                in_backlog,
            },
        );
        if in_backlog {
            self.backlog += 1;
        }
        h
    }

    fn check_free(&self, route: Route) -> Result<(), ConnectError> {
        for vci in [route.tx_vci, route.rx_vci] {
            if self.routes.contains_key(&(vci, route.cookie)) {
                return Err(ConnectError::RouteInUse(vci));
            }
        }
        Ok(())
    }

    /// Open a direct connection to `peer`: our VC to it opens with CONN-REQ (cookie and
    /// ISN drawn here); the VC back opens when the listener's CONN-REQ comes.
    pub fn connect(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        config: ClientConfig,
    ) -> Result<(ConnectionHandle, Connection), ConnectError> {
        config.tx.validate()?;
        config.rx.validate()?;
        let mut route = Route {
            tx_vci: VCI_FORWARD,
            rx_vci: VCI_BACKWARD,
            cookie: self.rng.next_u32(),
        };
        while self.check_free(route).is_err() {
            route.cookie = self.rng.next_u32();
        }
        let isn = self.rng.next_u32();
        let conn = Connection::connect(
            now,
            peer,
            config,
            route.cookie,
            isn,
            self.cfg.handshake_timeout,
        )?;
        let h = self.insert(route, peer, false, false);
        Ok((h, conn))
    }

    /// Open a connection signalling set up: both VCs start established, no handshake
    /// (see `Psb::established_sender` for the departure from seed 000 §5.3).
    pub fn open_signalled(
        &mut self,
        now: Instant,
        params: SignalledParams,
    ) -> Result<(ConnectionHandle, Connection), ConnectError> {
        let route = Route {
            tx_vci: params.tx_vci,
            rx_vci: params.rx_vci,
            cookie: params.cookie,
        };
        self.check_free(route)?;
        let conn = Connection::signalled(now, params)?;
        let h = self.insert(route, conn.remote(), true, false);
        Ok((h, conn))
    }

    /// A connection's event (from its `poll_endpoint_event`).
    pub fn handle_event(&mut self, h: ConnectionHandle, ev: EndpointEvent) {
        match ev {
            EndpointEvent::Established => {
                if let Some(m) = self.conns.get_mut(&h) {
                    if std::mem::take(&mut m.in_backlog) {
                        self.backlog -= 1;
                    }
                }
            }
            EndpointEvent::Drained => self.forget(h),
        }
    }

    /// Forget a connection (drained, or dropped by the application).
    pub fn forget(&mut self, h: ConnectionHandle) {
        let Some(m) = self.conns.remove(&h) else {
            return;
        };
        if m.in_backlog {
            self.backlog -= 1;
        }
        self.routes.remove(&(m.route.tx_vci, m.route.cookie));
        self.routes.remove(&(m.route.rx_vci, m.route.cookie));
    }

    /// Refuse a connection [`Endpoint::handle`] just accepted that its owner cannot
    /// open after all (a host port where another call holds its cookie, no socket to
    /// give it): forget it and answer its CONN-REQ with the ABORT a full backlog gets,
    /// so the caller learns at once instead of waiting out its handshake. `None` if
    /// `h` is not known.
    pub fn refuse(&mut self, h: ConnectionHandle) -> Option<DatagramEvent> {
        let m = self.conns.get(&h)?;
        let (to, cookie) = (m.remote, m.route.cookie);
        self.forget(h);
        self.stats.refused += 1;
        Some(abort_response(to, VCI_FORWARD, cookie))
    }

    /// Connections the endpoint routes to.
    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }

    /// Accepted connections still in their handshake.
    pub fn backlog(&self) -> usize {
        self.backlog
    }

    /// Counters.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }
}

impl Connection {
    /// The calling side of a direct connection, outside any endpoint (a connection
    /// with a socket of its own): our VC opens with CONN-REQ carrying `cookie` and
    /// `isn`, the VC back opens when the listener's CONN-REQ comes, and both must be
    /// up within `handshake_timeout`. [`Endpoint::connect`] draws cookie and ISN.
    pub fn connect(
        now: Instant,
        peer: SocketAddr,
        config: ClientConfig,
        cookie: u32,
        isn: u32,
        handshake_timeout: Duration,
    ) -> Result<Connection, ConnectError> {
        config.tx.validate()?;
        config.rx.validate()?;
        let route = Route {
            tx_vci: VCI_FORWARD,
            rx_vci: VCI_BACKWARD,
            cookie,
        };
        let tx_cfg = TransportConfig {
            cookie: Some(cookie),
            isn,
            ..config.tx
        };
        let rx_cfg = TransportConfig {
            cookie: Some(cookie),
            ..config.rx
        };
        let flow = flow::build(tx_cfg.flow, &tx_cfg);
        let tx = TxHalf::connect(Psb::connect(tx_cfg, flow, now), route.tx_vci);
        let rx = RxHalf::listen(Psb::listen(rx_cfg), route.rx_vci);
        let deadline = now + handshake_timeout;
        Ok(Connection::new(
            route,
            Side::Client,
            tx,
            rx,
            peer,
            Some(deadline),
        ))
    }

    /// A connection signalling set up, outside any endpoint (a connection with a
    /// socket of its own demultiplexes with [`Connection::handle_frame`]). The ISN of
    /// each VC is derived from the cookie and its direction ([`signalled_isn`]) so both
    /// ends agree without a round trip.
    pub fn signalled(now: Instant, p: SignalledParams) -> Result<Connection, ConnectError> {
        p.tx.validate()?;
        p.rx.validate()?;
        let route = Route {
            tx_vci: p.tx_vci,
            rx_vci: p.rx_vci,
            cookie: p.cookie,
        };
        let tx_cfg = TransportConfig {
            cookie: Some(p.cookie),
            isn: signalled_isn(p.cookie, p.caller),
            ..p.tx
        };
        let rx_cfg = TransportConfig {
            cookie: Some(p.cookie),
            isn: signalled_isn(p.cookie, !p.caller),
            ..p.rx
        };
        let flow = flow::build(tx_cfg.flow, &tx_cfg);
        let mut tx_psb = Psb::established_sender(tx_cfg, flow, now);
        let mut rx_psb = Psb::established_receiver(rx_cfg);
        // A point-to-multipoint call is one-way (Q.2971): its root (the caller)
        // only sends, its leaves only receive.
        if p.tx.one_way && p.rx.one_way {
            if p.caller {
                rx_psb.shut();
            } else {
                tx_psb.shut();
            }
        }
        let tx = TxHalf::connect(tx_psb, p.tx_vci);
        let rx = RxHalf::listen(rx_psb, p.rx_vci);
        Ok(Connection::new(
            route,
            Side::Signalled,
            tx,
            rx,
            p.peer,
            None,
        ))
    }
}

impl Connection {
    /// A bare AAL5 VC pair, up at once (no handshake: signalling or the PVC's
    /// configuration made it). Frames are demultiplexed by VPI/VCI alone.
    pub fn bare(p: BareParams) -> Connection {
        let route = Route {
            tx_vci: p.tx_vci,
            rx_vci: p.rx_vci,
            cookie: 0,
        };
        let tx = TxHalf::bare(BareTx::new(p.tx), p.vpi, p.tx_vci);
        let rx = RxHalf::bare(BareRx::new(p.rx), p.vpi, p.rx_vci);
        Connection::new(route, Side::Signalled, tx, rx, p.peer, None)
    }
}

/// The initial sequence number of a signalled VC, the same at both ends: derived
/// from the call's cookie and the VC's direction (`forward`: caller to callee). Not
/// from its VCI: a switch relabels the VC on every link, so the two ends see
/// different VCIs for the same VC.
pub fn signalled_isn(cookie: u32, forward: bool) -> u32 {
    (u64::from(cookie) << 16 | u64::from(forward))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_right(29) as u32
}

/// An ABORT for `vci` with `cookie`, as a datagram to `to`.
fn abort_response(to: SocketAddr, vci: u16, cookie: u32) -> DatagramEvent {
    let h = Header {
        cookie,
        ..Header::new(TpduType::Abort)
    };
    let mut datagram = Vec::with_capacity(vcframe::HEADER_LEN + crate::wire::tpdu::HEADER_LEN);
    datagram.extend_from_slice(&vcframe::Repr::data(0, vci).to_bytes());
    datagram.extend_from_slice(&h.to_bytes());
    DatagramEvent::Response {
        destination: to,
        datagram,
    }
}
