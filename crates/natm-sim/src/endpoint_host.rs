//! Simulated hosts that run a whole natm [`Endpoint`](natm_proto::endpoint::Endpoint)
//! — demultiplexing, the direct-mode handshake, duplex connections, close and abort —
//! the machine applications run through the engine, on the virtual clock.
//!
//! The simulator moves frames along routes named by a [`VcId`]; an endpoint names its
//! peers by address and its VCs by VCI inside the frame. A host therefore maps each
//! peer address to the simulator path (a `VcId`) that reaches it, and a frame carries
//! the natm VC header and TPDU unchanged, so several connections (and both simplex
//! VCs of each) share one path as they share one IP path in the engine.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

use bytes::Bytes;

use natm_proto::endpoint::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Endpoint as ProtoEndpoint,
    EndpointConfig, EndpointStats, Event,
};
use natm_proto::time::Instant;
use natm_proto::transport::{Chunk, RecvError, SendError};

use super::endpoint::{Endpoint, VcId};
use super::psb_host::{Inlet, Outlet, Sink, Source};

/// The application model on one connection: what it sends, what it checks.
#[derive(Debug, Clone, Default)]
pub struct ConnApp {
    /// Sends (and closes our direction when done, unless kept open).
    pub source: Option<Source>,
    /// Reads and checks everything that arrives.
    pub sink: Option<Sink>,
}

/// One connection on an [`EndpointHost`] with its application and its events.
#[derive(Debug)]
pub struct HostConn {
    /// The connection.
    pub conn: Connection,
    /// The application model.
    pub app: ConnApp,
    /// Events the connection raised, with their times.
    pub events: Vec<(Instant, Event)>,
}

impl HostConn {
    fn service(&mut self, now: Instant) {
        if let Some(s) = self.app.source.as_mut() {
            s.feed(now, &mut self.conn);
        }
        if let Some(s) = self.app.sink.as_mut() {
            s.drain(now, &mut self.conn);
        }
        while let Some(e) = self.conn.poll_event() {
            self.events.push((now, e));
        }
    }

    /// Whether an event like `e` was raised.
    pub fn saw(&self, e: Event) -> bool {
        self.events.iter().any(|(_, x)| *x == e)
    }
}

impl Outlet for Connection {
    fn capacity(&self) -> usize {
        self.send_capacity()
    }
    fn send_bytes(&mut self, data: &Bytes, end: bool) -> Result<usize, SendError> {
        Connection::send_bytes(self, data, end)
    }
    fn close(&mut self) {
        Connection::close(self)
    }
}

impl Inlet for Connection {
    fn next_chunk(&mut self) -> Result<Option<Chunk>, RecvError> {
        self.recv()
    }
}

#[derive(Debug)]
struct PlannedConnect {
    at: Instant,
    peer: SocketAddr,
    cfg: ClientConfig,
    app: ConnApp,
}

/// A host running one endpoint: connections it opens at planned times, and (with a
/// server configuration) connections it accepts, each given a copy of an application
/// model.
#[derive(Debug)]
pub struct EndpointHost {
    addr: SocketAddr,
    ep: ProtoEndpoint,
    paths: Vec<(SocketAddr, VcId)>,
    conns: BTreeMap<ConnectionHandle, HostConn>,
    /// Connections that were drained and forgotten by the endpoint, kept for reports.
    planned: Vec<PlannedConnect>,
    accept_app: ConnApp,
    accepted: Vec<ConnectionHandle>,
    out: VecDeque<(VcId, Vec<u8>)>,
    next: usize,
}

impl EndpointHost {
    /// A host at `addr` (its name on the simulated network) running an endpoint.
    pub fn new(addr: SocketAddr, cfg: EndpointConfig) -> EndpointHost {
        EndpointHost {
            addr,
            ep: ProtoEndpoint::new(cfg),
            paths: Vec::new(),
            conns: BTreeMap::new(),
            planned: Vec::new(),
            accept_app: ConnApp::default(),
            accepted: Vec::new(),
            out: VecDeque::new(),
            next: 0,
        }
    }

    /// Frames to `peer` go along the simulator route `path` (and frames arriving on
    /// `path` come from `peer`).
    pub fn path(mut self, peer: SocketAddr, path: VcId) -> Self {
        self.paths.push((peer, path));
        self
    }

    /// Accepted connections get a copy of `app`.
    pub fn accepting_with(mut self, app: ConnApp) -> Self {
        self.accept_app = app;
        self
    }

    /// Open a connection to `peer` at `at`, run by `app`.
    pub fn connect_at(
        mut self,
        at: Instant,
        peer: SocketAddr,
        cfg: ClientConfig,
        app: ConnApp,
    ) -> Self {
        self.planned.push(PlannedConnect { at, peer, cfg, app });
        self
    }

    /// This host's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint's counters.
    pub fn endpoint_stats(&self) -> EndpointStats {
        self.ep.stats()
    }

    /// Connections the endpoint still routes to.
    pub fn open_connections(&self) -> usize {
        self.ep.open_connections()
    }

    /// Every connection this host had (forgotten ones included), by handle.
    pub fn conns(&self) -> impl Iterator<Item = (ConnectionHandle, &HostConn)> {
        self.conns.iter().map(|(h, c)| (*h, c))
    }

    /// Handles of the connections this host accepted, in order.
    pub fn accepted(&self) -> &[ConnectionHandle] {
        &self.accepted
    }

    /// One connection.
    pub fn conn(&self, h: ConnectionHandle) -> Option<&HostConn> {
        self.conns.get(&h)
    }

    fn path_to(&self, peer: SocketAddr) -> Option<VcId> {
        self.paths.iter().find(|(a, _)| *a == peer).map(|(_, p)| *p)
    }

    fn peer_on(&self, path: VcId) -> Option<SocketAddr> {
        self.paths.iter().find(|(_, p)| *p == path).map(|(a, _)| *a)
    }

    fn start_planned(&mut self, now: Instant) {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.planned)
            .into_iter()
            .partition(|p| p.at <= now);
        self.planned = later;
        for p in due {
            // A configuration the endpoint refuses is a bug in the scenario.
            let Ok((h, conn)) = self.ep.connect(now, p.peer, p.cfg) else {
                continue;
            };
            self.conns.insert(
                h,
                HostConn {
                    conn,
                    app: p.app,
                    events: Vec::new(),
                },
            );
        }
    }

    /// Let every connection's application run and hand its endpoint events over.
    fn service_all(&mut self, now: Instant) {
        for (&h, c) in self.conns.iter_mut() {
            c.service(now);
            while let Some(e) = c.conn.poll_endpoint_event() {
                self.ep.handle_event(h, e);
            }
        }
    }
}

impl Endpoint for EndpointHost {
    fn handle_frame(&mut self, now: Instant, vc: VcId, frame: &[u8]) {
        let Some(from) = self.peer_on(vc) else {
            return;
        };
        // The simulator lends the frame; the connection keeps slices of its own copy.
        match self.ep.handle(now, from, Bytes::copy_from_slice(frame)) {
            Some(DatagramEvent::ConnectionEvent(h, ev)) => {
                if let Some(c) = self.conns.get_mut(&h) {
                    c.conn.handle_event(now, ev);
                }
            }
            Some(DatagramEvent::NewConnection(h, conn)) => {
                self.accepted.push(h);
                self.conns.insert(
                    h,
                    HostConn {
                        conn: *conn,
                        app: self.accept_app.clone(),
                        events: Vec::new(),
                    },
                );
            }
            Some(DatagramEvent::Response {
                destination,
                datagram,
            }) => {
                if let Some(p) = self.path_to(destination) {
                    self.out.push_back((p, datagram));
                }
            }
            None => {}
        }
        self.service_all(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(VcId, Vec<u8>)> {
        if let Some(f) = self.out.pop_front() {
            return Some(f);
        }
        self.start_planned(now);
        self.service_all(now);
        let handles: Vec<_> = self.conns.keys().copied().collect();
        let n = handles.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let Some(c) = self.conns.get_mut(&handles[i]) else {
                continue;
            };
            let mut buf = Vec::new();
            if let Some(t) = c.conn.poll_transmit(now, &mut buf) {
                self.next = (i + 1) % n;
                let Some(p) = self.path_to(t.destination) else {
                    continue;
                };
                return Some((p, buf));
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let conns = self.conns.values().flat_map(|c| {
            let start = c
                .app
                .source
                .as_ref()
                .filter(|s| !s.started())
                .map(|s| s.start());
            [c.conn.poll_timeout(), start]
        });
        let planned = self.planned.iter().map(|p| Some(p.at));
        conns.chain(planned).flatten().min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.start_planned(now);
        for c in self.conns.values_mut() {
            if c.conn.poll_timeout().is_some_and(|t| t <= now) {
                c.conn.handle_timeout(now);
            }
        }
        self.service_all(now);
    }
}
