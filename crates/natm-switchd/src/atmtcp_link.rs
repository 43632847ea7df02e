//! An atmtcp port's TCP link: the listener or the connector, the one connection at
//! a time, the decoder and a bounded send queue. The daemon hands it SDUs to send
//! and takes the SDUs it read; the format is in [`crate::atmtcp`].

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use natm_proto::wire::vcframe;
use natm_switch::control::Control;
use natm_switch::{PortId, Switch, Transmit};
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::allow::Allow;
use crate::atmtcp::{self, Control as AtmtcpControl, Decoder, Message};
use crate::ilmi_port::{IlmiPort, IlmiSnapshot};
use crate::link::Link;
use natm_sigd::core::{untrusted, Bucket};

/// Bytes queued for a slow peer beyond what the kernel's socket buffer holds; a
/// frame that would not fit is dropped and counted (the loop never blocks on a
/// peer). The rest of a frame already started is always kept, so the stream never
/// loses its framing: the queue holds at most this plus one message.
const TX_QUEUE: usize = 256 * 1024;
/// Octets read from the socket per call, before the caller forwards what came in.
const READ_CHUNK: usize = 64 * 1024;
/// Reads per call to [`AtmtcpLink::read`], so that one busy peer cannot starve the
/// other ports.
const READS_PER_CALL: usize = 4;
/// First and longest wait between connection attempts of a connecting port.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// Log lines a second about refused connections and control text, per port (the
/// rest are counted and said with the next line written).
const LOG_PER_S: u32 = 10;

/// Which end of the TCP connection the port is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Listens and accepts one connection at a time (`atmtcp virtual listen`).
    Listen,
    /// Connects, and again with backoff when the connection fails or closes.
    Connect,
}

/// What an atmtcp link counts (in `natm stat --switch --json` under `atmtcp`).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct AtmtcpCounters {
    /// Connections established (accepted or connected).
    pub connections: u64,
    /// Connections that ended (closed by the peer, failed, or refused framing).
    pub disconnects: u64,
    /// Connections accepted and closed at once because one was already up (and had
    /// received something within the port's `idle_ms`).
    pub refused: u64,
    /// Connections closed at once because their source is not in the port's `allow`.
    pub refused_source: u64,
    /// Connections closed because they had received nothing for `idle_ms` when a new
    /// allowed peer connected, which took the port.
    pub idle_taken_over: u64,
    /// Connection attempts that failed (connecting ports).
    pub connect_failures: u64,
    /// Connections closed on a header that is not atmtcp (a logged [`atmtcp::AtmtcpError`]).
    pub framing_errors: u64,
    /// Data messages received.
    pub frames_in: u64,
    /// Data messages sent.
    pub frames_out: u64,
    /// Control messages (`O`/`C` text on VC 0/0) received.
    pub control_in: u64,
    /// Frames dropped because the send queue was full.
    pub dropped_full: u64,
    /// Frames dropped because no connection was up.
    pub dropped_down: u64,
}

/// The link as `natm stat --switch` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct AtmtcpSnapshot {
    /// Listening or connecting.
    pub role: Role,
    /// The address listened on, or connected to.
    pub addr: SocketAddr,
    /// The peer of the connection up now.
    pub connected: Option<SocketAddr>,
    /// Octets waiting to be sent.
    pub queued: usize,
    /// The counters.
    pub counters: AtmtcpCounters,
}

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    /// A connecting port's connection before the handshake completes.
    pending: bool,
    /// When the peer last sent anything (or the connection was made).
    last_rx: Instant,
    decoder: Decoder,
    tx: Vec<u8>,
    tx_off: usize,
}

/// One atmtcp port's link.
#[derive(Debug)]
pub(crate) struct AtmtcpLink {
    name: String,
    role: Role,
    addr: SocketAddr,
    listener: Option<TcpListener>,
    conn: Option<Conn>,
    /// Tokens: the listener's, and the connection's.
    listen_token: Token,
    conn_token: Token,
    next_try: Option<Instant>,
    backoff: Duration,
    counters: AtmtcpCounters,
    buf: Vec<u8>,
    /// Sources a listening port accepts.
    allow: Allow,
    /// How long a connection may receive nothing before a new peer may take the port.
    idle: Duration,
    /// Log lines about refused connections and the peer's control text: a flood of
    /// either writes a bounded number of lines, then one with what was held back.
    log: Bucket,
    /// The log bucket's clock starts here.
    epoch: Instant,
}

impl AtmtcpLink {
    /// A listening port, bound now (so a configuration error shows at start).
    pub(crate) fn listen(
        name: &str,
        addr: SocketAddr,
        registry: &Registry,
        tokens: (Token, Token),
        (allow, idle): (Allow, Duration),
    ) -> io::Result<AtmtcpLink> {
        let mut l = TcpListener::bind(addr)?;
        registry.register(&mut l, tokens.0, Interest::READABLE)?;
        let addr = l.local_addr()?;
        let mut link = AtmtcpLink::new(name, Role::Listen, addr, Some(l), tokens);
        link.allow = allow;
        link.idle = idle;
        Ok(link)
    }

    /// A connecting port; the first attempt is made by [`AtmtcpLink::handle_timeout`].
    pub(crate) fn connect(name: &str, addr: SocketAddr, tokens: (Token, Token)) -> AtmtcpLink {
        let mut l = AtmtcpLink::new(name, Role::Connect, addr, None, tokens);
        l.next_try = Some(Instant::now());
        l
    }

    fn new(
        name: &str,
        role: Role,
        addr: SocketAddr,
        listener: Option<TcpListener>,
        tokens: (Token, Token),
    ) -> AtmtcpLink {
        AtmtcpLink {
            name: name.to_string(),
            role,
            addr,
            listener,
            conn: None,
            listen_token: tokens.0,
            conn_token: tokens.1,
            next_try: None,
            backoff: RETRY_MIN,
            counters: AtmtcpCounters::default(),
            buf: vec![0; READ_CHUNK],
            allow: Allow::loopback(),
            idle: crate::config::DEFAULT_ATMTCP_IDLE,
            log: Bucket::new(LOG_PER_S),
            epoch: Instant::now(),
        }
    }

    /// The address listened on (the bound one, for port 0) or connected to.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters and the connection, for the stat file.
    pub(crate) fn snapshot(&self) -> AtmtcpSnapshot {
        AtmtcpSnapshot {
            role: self.role,
            addr: self.addr,
            connected: self.conn.as_ref().filter(|c| !c.pending).map(|c| c.peer),
            queued: self.conn.as_ref().map_or(0, |c| c.tx.len() - c.tx_off),
            counters: self.counters,
        }
    }

    /// When the next connection attempt is due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.next_try
    }

    /// Makes the connection attempt that is due.
    pub(crate) fn handle_timeout(&mut self, wall: Instant, registry: &Registry) {
        if self.next_try.is_none_or(|t| t > wall) || self.conn.is_some() {
            return;
        }
        self.next_try = None;
        match TcpStream::connect(self.addr) {
            Ok(mut stream) => {
                let interest = Interest::READABLE | Interest::WRITABLE;
                if let Err(e) = registry.register(&mut stream, self.conn_token, interest) {
                    warn!(port = %self.name, "cannot register the atmtcp connection: {e}");
                    self.retry(wall);
                    return;
                }
                self.conn = Some(Conn::new(stream, self.addr, true, wall));
            }
            Err(e) => {
                debug!(port = %self.name, addr = %self.addr, "atmtcp connect: {e}");
                self.counters.connect_failures += 1;
                self.retry(wall);
            }
        }
    }

    fn retry(&mut self, wall: Instant) {
        self.next_try = Some(wall + self.backoff);
        self.backoff = (self.backoff * 2).min(RETRY_MAX);
    }

    /// Whether `t` is one of this link's tokens.
    pub(crate) fn owns(&self, t: Token) -> bool {
        t == self.listen_token || t == self.conn_token
    }

    /// Handles a readiness event on one of this link's tokens: accepts, completes a
    /// connection, flushes the send queue. Returns whether the connection may be
    /// readable (then call [`AtmtcpLink::read`]).
    pub(crate) fn handle_event(&mut self, t: Token, registry: &Registry, wall: Instant) -> bool {
        if t == self.listen_token {
            self.accept(registry, wall);
            return self.conn.is_some();
        }
        let Some(c) = self.conn.as_mut() else {
            return false;
        };
        if c.pending {
            match c.stream.take_error() {
                Ok(None) if c.stream.peer_addr().is_ok() => {
                    c.pending = false;
                    let _ = c.stream.set_nodelay(true);
                    self.counters.connections += 1;
                    self.backoff = RETRY_MIN;
                    info!(port = %self.name, peer = %self.addr, "atmtcp connected");
                }
                Ok(None) => return false,
                Ok(Some(e)) | Err(e) => {
                    debug!(port = %self.name, addr = %self.addr, "atmtcp connect: {e}");
                    self.counters.connect_failures += 1;
                    self.drop_conn(registry);
                    self.retry(wall);
                    return false;
                }
            }
        }
        if let Err(e) = self.flush() {
            self.close(registry, wall, &format!("send failed: {e}"));
            return false;
        }
        true
    }

    fn accept(&mut self, registry: &Registry, wall: Instant) {
        loop {
            let Some(l) = self.listener.as_ref() else {
                return;
            };
            let (mut stream, peer) = match l.accept() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    warn!(port = %self.name, "atmtcp accept: {e}");
                    return;
                }
            };
            if !self.allow.permits(peer.ip()) {
                // Closed as it is dropped; nothing of it is kept.
                self.counters.refused_source += 1;
                if let Some(held) = may_log(&mut self.log, self.epoch, wall) {
                    warn!(
                        port = %self.name, %peer, suppressed = held,
                        "atmtcp connection refused: source not in allow ({})", self.allow
                    );
                }
                continue;
            }
            if let Some(c) = self.conn.as_ref().filter(|c| !c.pending) {
                // Like `atmtcp virtual listen`: one peer at a time — unless the one up
                // has received nothing for `idle`, which no live atmtcp peer's link
                // needs to hold a port against another allowed one.
                if wall.saturating_duration_since(c.last_rx) < self.idle {
                    self.counters.refused += 1;
                    if let Some(held) = may_log(&mut self.log, self.epoch, wall) {
                        warn!(
                            port = %self.name, %peer, suppressed = held,
                            "atmtcp connection refused: one is up"
                        );
                    }
                    continue;
                }
                self.counters.idle_taken_over += 1;
                let why = format!("idle for {:?}, {peer} connected", self.idle);
                self.close(registry, wall, &why);
            }
            let _ = stream.set_nodelay(true);
            let interest = Interest::READABLE | Interest::WRITABLE;
            if let Err(e) = registry.register(&mut stream, self.conn_token, interest) {
                warn!(port = %self.name, "cannot register the atmtcp connection: {e}");
                continue;
            }
            self.counters.connections += 1;
            info!(port = %self.name, %peer, "atmtcp peer connected");
            self.conn = Some(Conn::new(stream, peer, false, wall));
        }
    }

    /// Reads what the peer sent, a bounded amount: data messages go to `out`, control
    /// text is logged and counted. Returns whether more may be waiting.
    pub(crate) fn read(
        &mut self,
        registry: &Registry,
        wall: Instant,
        out: &mut Vec<(u8, u16, Bytes)>,
    ) -> bool {
        for _ in 0..READS_PER_CALL {
            let Some(c) = self.conn.as_mut().filter(|c| !c.pending) else {
                return false;
            };
            let n = match c.stream.read(&mut self.buf) {
                Ok(0) => {
                    self.close(registry, wall, "closed by the peer");
                    return false;
                }
                Ok(n) => {
                    c.last_rx = wall;
                    n
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.close(registry, wall, &format!("receive failed: {e}"));
                    return false;
                }
            };
            let mut input = &self.buf[..n];
            let mut failed = None;
            while !input.is_empty() {
                match c.decoder.handle(input) {
                    Ok((used, m)) => {
                        input = &input[used..];
                        match m {
                            Some(Message::Data { vpi, vci, sdu }) => {
                                self.counters.frames_in += 1;
                                out.push((vpi, vci, sdu));
                            }
                            Some(Message::Control(ctl)) => {
                                self.counters.control_in += 1;
                                if let Some(held) = may_log(&mut self.log, self.epoch, wall) {
                                    log_control(&self.name, &ctl, held);
                                }
                            }
                            None => {}
                        }
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = failed {
                // No frame boundary is left in the stream: only a new connection helps.
                self.counters.framing_errors += 1;
                warn!(port = %self.name, "atmtcp peer sent a bad header: {e}");
                self.close(registry, wall, &format!("not atmtcp: {e}"));
                return false;
            }
        }
        true
    }

    /// Queues one SDU for the peer, or drops and counts it (no connection, or the
    /// queue full). `Err` only for an SDU atmtcp cannot carry.
    pub(crate) fn send(
        &mut self,
        vpi: u16,
        vci: u16,
        sdu: &[u8],
        registry: &Registry,
        wall: Instant,
    ) -> Result<(), atmtcp::AtmtcpError> {
        let h = atmtcp::data_header(vpi, vci, sdu)?;
        let Some(c) = self.conn.as_mut().filter(|c| !c.pending) else {
            self.counters.dropped_down += 1;
            return Ok(());
        };
        let queued = c.tx.len() - c.tx_off;
        if queued > 0 && queued + atmtcp::HEADER_LEN + sdu.len() > TX_QUEUE {
            self.counters.dropped_full += 1;
            return Ok(());
        }
        if c.tx_off == c.tx.len() {
            c.tx.clear();
            c.tx_off = 0;
        }
        c.tx.extend_from_slice(&h.to_bytes());
        c.tx.extend_from_slice(sdu);
        self.counters.frames_out += 1;
        if let Err(e) = self.flush() {
            self.close(registry, wall, &format!("send failed: {e}"));
        }
        Ok(())
    }

    /// Writes the queue until it is empty or the socket is full.
    fn flush(&mut self) -> io::Result<()> {
        let Some(c) = self.conn.as_mut().filter(|c| !c.pending) else {
            return Ok(());
        };
        while c.tx_off < c.tx.len() {
            match c.stream.write(&c.tx[c.tx_off..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => c.tx_off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if c.tx_off == c.tx.len() {
            c.tx.clear();
            c.tx_off = 0;
        } else if c.tx_off > TX_QUEUE {
            c.tx.drain(..c.tx_off);
            c.tx_off = 0;
        }
        Ok(())
    }

    fn close(&mut self, registry: &Registry, wall: Instant, why: &str) {
        if let Some(c) = self.conn.as_ref() {
            info!(port = %self.name, peer = %c.peer, "atmtcp connection closed: {why}");
        }
        self.counters.disconnects += 1;
        self.drop_conn(registry);
        if self.role == Role::Connect {
            self.retry(wall);
        }
    }

    fn drop_conn(&mut self, registry: &Registry) {
        if let Some(mut c) = self.conn.take() {
            let _ = registry.deregister(&mut c.stream);
        }
    }
}

/// Whether a refusal or control line may be written at `wall`: `Some(n)` with the
/// lines held back since the last one written.
fn may_log(log: &mut Bucket, epoch: Instant, wall: Instant) -> Option<u64> {
    let since = wall.saturating_duration_since(epoch);
    log.allow(natm_proto::time::Instant::from_nanos(
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
    ))
}

impl Conn {
    fn new(stream: TcpStream, peer: SocketAddr, pending: bool, now: Instant) -> Conn {
        Conn {
            stream,
            peer,
            pending,
            last_rx: now,
            decoder: Decoder::new(),
            tx: Vec::new(),
            tx_off: 0,
        }
    }
}

/// The peer's control text, escaped and cut to
/// [`natm_sigd::core::UNTRUSTED_CHARS`] characters (the peer chose it).
fn log_control(port: &str, c: &AtmtcpControl, suppressed: u64) {
    match c {
        AtmtcpControl::Open { vpi, vci, detail } => {
            let detail = untrusted(detail);
            info!(
                port,
                suppressed, "atmtcp peer opened VC {vpi}.{vci} ({detail})"
            )
        }
        AtmtcpControl::Close { vpi, vci } => {
            info!(port, suppressed, "atmtcp peer closed VC {vpi}.{vci}")
        }
        AtmtcpControl::Other(t) => {
            info!(port, suppressed, "atmtcp control text {}", untrusted(t))
        }
    }
}

/// Where the atmtcp links' tokens start: far above the UDP ports' (one per port).
pub(crate) const TOKEN_BASE: usize = 1 << 24;

/// An atmtcp port's end of the TCP connection, as configured.
#[derive(Debug)]
pub(crate) enum Endpoint {
    /// Listen on `addr`, taking connections from the sources `admission` allows and
    /// letting a connection idle for its duration give the port up.
    Listen {
        addr: SocketAddr,
        admission: (Allow, Duration),
    },
    /// Connect to this address, and again with backoff.
    Connect(SocketAddr),
}

/// One atmtcp port of the switch.
#[derive(Debug)]
struct Port {
    index: usize,
    id: PortId,
    signalling: bool,
    link: AtmtcpLink,
    /// The link's `disconnects` already reported by [`AtmtcpPorts::lost`].
    disconnects_seen: u64,
    /// ILMI's network side on VPI 0/VCI 16, if the port runs it.
    ilmi: Option<IlmiPort>,
}

/// A switch's atmtcp ports: the daemon's narrow hook. Each call takes the parts of
/// the daemon it needs, so the UDP loop stays as it is.
#[derive(Debug, Default)]
pub(crate) struct AtmtcpPorts {
    ports: Vec<Port>,
    rx: Vec<(u8, u16, Bytes)>,
}

impl AtmtcpPorts {
    /// Adds port `index` (`id` in the data plane): listens now, or connects soon.
    /// Returns the address listened on or connected to.
    pub(crate) fn add(
        &mut self,
        index: usize,
        id: PortId,
        name: &str,
        endpoint: Endpoint,
        signalling: bool,
        registry: &Registry,
    ) -> io::Result<SocketAddr> {
        let n = self.ports.len();
        let tokens = (Token(TOKEN_BASE + 2 * n), Token(TOKEN_BASE + 2 * n + 1));
        let link = match endpoint {
            Endpoint::Listen { addr, admission } => {
                AtmtcpLink::listen(name, addr, registry, tokens, admission)?
            }
            Endpoint::Connect(a) => AtmtcpLink::connect(name, a, tokens),
        };
        let addr = link.addr();
        self.ports.push(Port {
            index,
            id,
            signalling,
            link,
            disconnects_seen: 0,
            ilmi: None,
        });
        Ok(addr)
    }

    /// The signalling ports whose connection ended since the last call: their
    /// signalling link is gone with it (see `Control::port_lost`).
    pub(crate) fn lost(&mut self) -> Vec<PortId> {
        let mut lost = Vec::new();
        for p in &mut self.ports {
            let d = p.link.counters.disconnects;
            if d != p.disconnects_seen {
                p.disconnects_seen = d;
                if p.signalling {
                    lost.push(p.id);
                }
            }
        }
        lost
    }

    /// Whether `t` is an atmtcp link's token.
    pub(crate) fn owns(t: Token) -> bool {
        t.0 >= TOKEN_BASE
    }

    /// The earliest connection attempt due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.ports
            .iter()
            .filter_map(|p| p.link.poll_timeout())
            .min()
    }

    /// Makes the connection attempts that are due.
    pub(crate) fn handle_timeout(&mut self, wall: Instant, registry: &Registry) {
        for p in &mut self.ports {
            p.link.handle_timeout(wall, registry);
        }
    }

    /// Handles an event on token `t` and reads a bounded amount: SDUs on VPI 0/VCI 5
    /// of a signalling port go to the control plane, the others to the data plane.
    /// Returns whether the connection may hold more to read.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn handle_event(
        &mut self,
        t: Token,
        registry: &Registry,
        wall: Instant,
        now: natm_proto::time::Instant,
        sw: &mut Switch,
        mut control: Option<&mut Control>,
        links: &mut [Link],
    ) -> bool {
        let Some(p) = self.ports.iter_mut().find(|p| p.link.owns(t)) else {
            return false;
        };
        let mut more = p.link.handle_event(t, registry, wall);
        if more {
            self.rx.clear();
            more = p.link.read(registry, wall, &mut self.rx);
        }
        if let Some(i) = p.ilmi.as_mut() {
            // A new connection's coldStart and reset before anything it sent.
            i.tick(now, &p.link.counters, p.link.snapshot().connected.is_some());
        }
        let counters = &mut links[p.index].counters;
        for (vpi, vci, sdu) in self.rx.drain(..) {
            counters.datagrams_in += 1;
            if vpi == 0 && vci == natm_proto::ilmi::ILMI_VCI {
                if let Some(i) = p.ilmi.as_mut() {
                    i.on_sdu(now, p.id, &sdu, control.as_deref());
                    continue;
                }
            }
            if p.signalling && vpi == 0 && vci == vcframe::SIGNALLING_VCI {
                if let Some(ctl) = control.as_deref_mut() {
                    ctl.handle_signal(now, p.id, &sdu);
                    continue;
                }
            }
            // Only an unknown port fails, and this one exists.
            let _ = sw.handle_frame(now, p.id, vcframe::Repr::data(vpi, vci), sdu);
        }
        if let Some(i) = p.ilmi.as_mut() {
            let link = &mut p.link;
            i.flush(p.id, &link.name.clone(), control, |m| {
                let _ = link.send(0, natm_proto::ilmi::ILMI_VCI, m, registry, wall);
            });
        }
        more
    }

    /// Sends a signalling PDU on VPI 0/VCI 5 of port `index`; false if it is not an
    /// atmtcp port.
    pub(crate) fn send_signal(
        &mut self,
        index: usize,
        pdu: &[u8],
        registry: &Registry,
        wall: Instant,
    ) -> bool {
        let Some(p) = self.ports.iter_mut().find(|p| p.index == index) else {
            return false;
        };
        let _ = p.link.send(0, vcframe::SIGNALLING_VCI, pdu, registry, wall);
        true
    }

    /// Drains port `index` as the daemon drains a frame port: units whose line slot
    /// is at most `horizon` ahead (and at most `earliest` behind) leave.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn transmit(
        &mut self,
        index: usize,
        sw: &mut Switch,
        horizon: natm_proto::time::Instant,
        earliest: natm_proto::time::Instant,
        registry: &Registry,
        wall: Instant,
        link: &mut Link,
    ) {
        let Some(p) = self.ports.iter_mut().find(|p| p.index == index) else {
            return;
        };
        while let Some(slot) = sw.port_timeout(p.id) {
            if slot > horizon {
                break;
            }
            let Some(unit) = sw.poll_transmit(slot.max(earliest), p.id) else {
                break;
            };
            match unit {
                // Linux's atmtcp carries AAL5 SDUs only: an ABR RM frame would reach
                // the guest's socket as data. Its ABR source gets no backward RM
                // cells, as from any destination that does not turn them around.
                Transmit::Frame { header, .. } if header.kind == vcframe::FrameKind::Rm => {
                    link.counters.mode_mismatch += 1;
                }
                Transmit::Frame { header, sdu } => {
                    let vpi = u16::from(header.vpi);
                    match p.link.send(vpi, header.vci, &sdu, registry, wall) {
                        Ok(()) => link.counters.datagrams_out += 1,
                        Err(e) => {
                            link.counters.send_errors += 1;
                            debug!(port = %link.name, "atmtcp cannot carry a frame: {e}");
                        }
                    }
                }
                Transmit::Cell(_) => link.counters.mode_mismatch += 1,
            }
        }
    }

    /// Port `index`'s link for the stat file.
    pub(crate) fn snapshot(&self, index: usize) -> Option<AtmtcpSnapshot> {
        self.ports
            .iter()
            .find(|p| p.index == index)
            .map(|p| p.link.snapshot())
    }

    /// Runs ILMI's network side on port `index` (VPI 0/VCI 16).
    pub(crate) fn run_ilmi_on(&mut self, index: usize, ilmi: IlmiPort) {
        if let Some(p) = self.ports.iter_mut().find(|p| p.index == index) {
            p.ilmi = Some(ilmi);
        }
    }

    /// Port `index`'s ILMI, if it runs it.
    pub(crate) fn ilmi_snapshot(&self, index: usize) -> Option<IlmiSnapshot> {
        self.ports
            .iter()
            .find(|p| p.index == index)
            .and_then(|p| p.ilmi.as_ref().map(IlmiPort::snapshot))
    }

    /// The earliest ILMI timer (the prefix offered again).
    pub(crate) fn ilmi_timeout(&self) -> Option<natm_proto::time::Instant> {
        self.ports
            .iter()
            .filter_map(|p| p.ilmi.as_ref().and_then(IlmiPort::poll_timeout))
            .min()
    }

    /// Runs each port's ILMI: follows its connection and timers, sends what it has to
    /// send on VCI 16, and hands its registrations to the control plane.
    pub(crate) fn run_ilmi(
        &mut self,
        now: natm_proto::time::Instant,
        registry: &Registry,
        wall: Instant,
        mut control: Option<&mut Control>,
    ) {
        for p in &mut self.ports {
            let Some(i) = p.ilmi.as_mut() else {
                continue;
            };
            let connected = p.link.snapshot().connected.is_some();
            i.tick(now, &p.link.counters, connected);
            let link = &mut p.link;
            i.flush(p.id, &link.name.clone(), control.as_deref_mut(), |m| {
                let _ = link.send(0, natm_proto::ilmi::ILMI_VCI, m, registry, wall);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener as StdListener, TcpStream as StdStream, UdpSocket};
    use std::path::PathBuf;
    use std::thread::JoinHandle;
    use std::time::Duration;

    use natm_proto::wire::vcframe;

    use crate::atmtcp::{emit_control, emit_data};
    use crate::{Config, Stop, SwitchDaemon};

    const WAIT: Duration = Duration::from_secs(10);

    /// A switch in a thread with an atmtcp port `l` (the given `listen`/`connect`
    /// line) and a frame port `u` whose peer is the returned UDP socket, joined by a
    /// duplex PVC l:0.100 <-> u:0.100.
    struct Rig {
        stop: Stop,
        thread: Option<JoinHandle<()>>,
        udp: UdpSocket,
        switch_udp: std::net::SocketAddr,
        listen: std::net::SocketAddr,
        stat: PathBuf,
    }

    impl Rig {
        fn start(name: &str, tcp: &str, signalling: bool) -> Rig {
            let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
            udp.set_read_timeout(Some(WAIT)).unwrap();
            let stat = std::env::temp_dir()
                .join(format!("natm-atmtcp-{name}-{}.json", std::process::id()));
            let sig = if signalling {
                "signalling = \"host\"\n"
            } else {
                ""
            };
            let toml = format!(
                "stat_json = {stat:?}\nstat_interval_ms = 50\n\
                 [[port]]\nname = \"l\"\nmode = \"atmtcp\"\n{tcp}\nline_rate = 100000000\n{sig}\
                 [[port]]\nname = \"u\"\nmode = \"frame\"\nbind = \"127.0.0.1:0\"\npeer = \"{}\"\n\
                 [[pvc]]\nfrom = \"l:0.100\"\nto = \"u:0.100\"\nduplex = true\n",
                udp.local_addr().unwrap()
            );
            let d = SwitchDaemon::bind(Config::from_toml(&toml).unwrap()).unwrap();
            let ends = d.endpoints();
            let stop = d.stopper();
            let thread = std::thread::spawn(move || d.run().unwrap());
            Rig {
                stop,
                thread: Some(thread),
                udp,
                switch_udp: ends[1].1,
                listen: ends[0].1,
                stat,
            }
        }

        /// Stops the switch and returns its final stat file.
        fn finish(mut self) -> serde_json::Value {
            self.stop.stop();
            self.thread.take().unwrap().join().unwrap();
            let v = serde_json::from_slice(&std::fs::read(&self.stat).unwrap()).unwrap();
            let _ = std::fs::remove_file(&self.stat);
            v
        }

        fn udp_recv(&self) -> (u16, Vec<u8>) {
            let mut b = vec![0; 70_000];
            let n = self.udp.recv(&mut b).expect("a frame from the switch");
            let (h, sdu) = vcframe::Repr::parse_bytes(&b[..n]).unwrap();
            (h.vci, sdu.to_vec())
        }

        fn udp_send(&self, vci: u16, sdu: &[u8]) {
            let mut d = vcframe::Repr::data(0, vci).to_bytes().to_vec();
            d.extend_from_slice(sdu);
            self.udp.send_to(&d, self.switch_udp).unwrap();
        }
    }

    impl Drop for Rig {
        fn drop(&mut self) {
            self.stop.stop();
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
            let _ = std::fs::remove_file(&self.stat);
        }
    }

    fn read_msg(s: &mut StdStream) -> (u16, u16, Vec<u8>) {
        let mut h = [0u8; 8];
        s.read_exact(&mut h).unwrap();
        let h = crate::atmtcp::Header::parse(&h).unwrap();
        let mut body = vec![0; h.length as usize];
        s.read_exact(&mut body).unwrap();
        (h.vpi, h.vci, body)
    }

    fn connect(addr: std::net::SocketAddr) -> StdStream {
        let s = StdStream::connect(addr).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s
    }

    /// Whether the switch closed `s` (EOF or reset) within the wait.
    fn closed(s: &mut StdStream) -> bool {
        let mut b = [0u8; 1];
        matches!(s.read(&mut b), Ok(0) | Err(_))
    }

    #[test]
    fn a_pvc_joins_an_atmtcp_peer_and_a_frame_port_both_ways() {
        let rig = Rig::start("pvc", "listen = \"127.0.0.1:0\"", false);
        let mut tcp = connect(rig.listen);
        let mut out = Vec::new();
        emit_control("O 0.100 0.0.100 ubr,aal5:tx:max_sdu=29,rx:none", &mut out).unwrap();
        let payload: Vec<u8> = (0..=255).cycle().take(3000).collect();
        emit_data(0, 100, &payload, &mut out).unwrap();
        emit_data(0, 100, b"", &mut out).unwrap();
        // Written an octet at a time: the switch must reassemble the stream.
        for b in &out {
            tcp.write_all(&[*b]).unwrap();
        }
        assert_eq!(rig.udp_recv(), (100, payload.clone()));
        assert_eq!(rig.udp_recv(), (100, Vec::new()));
        rig.udp_send(100, b"from the natm side");
        assert_eq!(read_msg(&mut tcp), (0, 100, b"from the natm side".to_vec()));

        // A second peer while one is up is turned away; the first keeps working.
        let mut second = connect(rig.listen);
        assert!(closed(&mut second), "one connection at a time");
        rig.udp_send(100, b"still here");
        assert_eq!(read_msg(&mut tcp), (0, 100, b"still here".to_vec()));

        // The kernel's control marker on the wire: the switch closes the connection...
        tcp.write_all(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff])
            .unwrap();
        assert!(closed(&mut tcp), "a bad header ends the connection");
        // ...and takes the next one.
        let mut again = connect(rig.listen);
        let mut out = Vec::new();
        emit_data(0, 100, b"after reconnect", &mut out).unwrap();
        again.write_all(&out).unwrap();
        assert_eq!(rig.udp_recv(), (100, b"after reconnect".to_vec()));
        let mut out = Vec::new();
        emit_control("C 0.100", &mut out).unwrap();
        again.write_all(&out).unwrap();
        drop(again);
        std::thread::sleep(Duration::from_millis(200));

        let stat = rig.finish();
        let l = &stat["ports"][0];
        assert_eq!(l["mode"], "atmtcp");
        let c = &l["atmtcp"]["counters"];
        assert_eq!(c["connections"], 2, "{c}");
        assert_eq!(c["refused"], 1, "{c}");
        assert_eq!(c["framing_errors"], 1, "{c}");
        assert_eq!(c["control_in"], 2, "{c}");
        assert_eq!(c["frames_in"], 3, "{c}");
        assert_eq!(c["frames_out"], 2, "{c}");
        assert_eq!(l["stats"]["counters"]["frames_in"], 3, "{l}");
    }

    #[test]
    fn a_peer_that_does_not_read_costs_a_bounded_queue_and_counted_drops() {
        let mut poll = mio::Poll::new().unwrap();
        let tokens = (mio::Token(1), mio::Token(2));
        let mut link = super::AtmtcpLink::listen(
            "slow",
            "127.0.0.1:0".parse().unwrap(),
            poll.registry(),
            tokens,
            (crate::allow::Allow::loopback(), Duration::from_secs(30)),
        )
        .unwrap();
        let peer = connect(link.addr());
        let mut events = mio::Events::with_capacity(8);
        let t0 = std::time::Instant::now();
        while link.snapshot().connected.is_none() {
            assert!(t0.elapsed() < WAIT, "never accepted");
            poll.poll(&mut events, Some(Duration::from_millis(50)))
                .unwrap();
            for ev in events.iter() {
                link.handle_event(ev.token(), poll.registry(), std::time::Instant::now());
            }
        }
        // Far more than the kernel's buffers on both ends hold: the send queue fills,
        // never blocks, and stays within its bound.
        let sdu = vec![0x42u8; crate::atmtcp::MAX_LEN];
        let n = 400;
        for _ in 0..n {
            link.send(0, 100, &sdu, poll.registry(), std::time::Instant::now())
                .unwrap();
            let queued = link.snapshot().queued;
            assert!(
                queued <= super::TX_QUEUE + crate::atmtcp::HEADER_LEN + sdu.len(),
                "{queued}"
            );
        }
        let c = link.snapshot().counters;
        assert!(c.dropped_full > 0, "{c:?}");
        assert_eq!(c.frames_out + c.dropped_full, n);
        // What was queued is whole frames: the peer reads them intact.
        let mut peer = peer;
        for _ in 0..3 {
            assert_eq!(read_msg(&mut peer), (0, 100, sdu.clone()));
        }
    }

    /// A connection to `to` from the loopback address `from`.
    fn connect_from(from: std::net::IpAddr, to: std::net::SocketAddr) -> StdStream {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&std::net::SocketAddr::new(from, 0).into()).unwrap();
        s.connect(&to.into()).unwrap();
        let s: StdStream = s.into();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s
    }

    #[test]
    fn sources_outside_allow_are_closed_at_once_and_the_allowed_peer_keeps_the_port() {
        let rig = Rig::start(
            "allow",
            "listen = \"127.0.0.1:0\"\nallow = [\"127.0.0.1\", \"127.0.1.0/24\"]",
            false,
        );
        // Sixty sources outside the list, one after another and all at once: each is
        // closed before it can hold the port or send a frame.
        let mut strangers: Vec<StdStream> = (2..62_u8)
            .map(|i| connect_from([127, 0, 0, i].into(), rig.listen))
            .collect();
        for s in &mut strangers {
            let mut out = Vec::new();
            emit_data(0, 100, b"from a stranger", &mut out).unwrap();
            let _ = s.write_all(&out);
            assert!(closed(s), "a source outside allow is closed");
        }
        // Both kinds of allowed source are taken; the first holds the port.
        let mut tcp = connect_from([127, 0, 1, 9].into(), rig.listen);
        let mut out = Vec::new();
        emit_data(0, 100, b"allowed", &mut out).unwrap();
        tcp.write_all(&out).unwrap();
        assert_eq!(rig.udp_recv(), (100, b"allowed".to_vec()));
        rig.udp_send(100, b"back");
        assert_eq!(read_msg(&mut tcp), (0, 100, b"back".to_vec()));
        let stat = rig.finish();
        let c = &stat["ports"][0]["atmtcp"]["counters"];
        assert_eq!(c["refused_source"], 60, "{c}");
        assert_eq!(c["connections"], 1, "{c}");
        assert_eq!(c["frames_in"], 1, "no stranger's frame went through: {c}");
    }

    #[test]
    fn an_idle_connection_gives_the_port_up_to_a_new_peer_and_a_live_one_does_not() {
        let poll = mio::Poll::new().unwrap();
        let tokens = (mio::Token(1), mio::Token(2));
        let idle = Duration::from_secs(1);
        let mut link = super::AtmtcpLink::listen(
            "idle",
            "127.0.0.1:0".parse().unwrap(),
            poll.registry(),
            tokens,
            (crate::allow::Allow::loopback(), idle),
        )
        .unwrap();
        // Virtual wall time: the link is told when each event happens.
        let t0 = std::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut first = connect(link.addr());
        link.handle_event(tokens.0, poll.registry(), at(0));
        let holder = link.snapshot().connected.expect("the first peer is taken");

        // Fresh: a second peer is turned away.
        let mut second = connect(link.addr());
        link.handle_event(tokens.0, poll.registry(), at(500));
        assert!(closed(&mut second));
        assert_eq!(link.snapshot().connected, Some(holder));

        // The holder sends at 900 ms: at 1,500 ms it is live, and a third is refused.
        let mut out = Vec::new();
        emit_data(0, 100, b"alive", &mut out).unwrap();
        first.write_all(&out).unwrap();
        let mut got = Vec::new();
        let until = std::time::Instant::now() + WAIT;
        while got.is_empty() {
            assert!(
                std::time::Instant::now() < until,
                "the holder's frame never came"
            );
            link.read(poll.registry(), at(900), &mut got);
        }
        let mut third = connect(link.addr());
        link.handle_event(tokens.0, poll.registry(), at(1_500));
        assert!(closed(&mut third));
        assert_eq!(link.snapshot().connected, Some(holder));

        // Silent since 900 ms: at 2,000 ms a new peer takes the port.
        let fourth = connect(link.addr());
        link.handle_event(tokens.0, poll.registry(), at(2_000));
        assert!(closed(&mut first), "the idle holder is let go");
        assert_eq!(
            link.snapshot().connected,
            Some(fourth.local_addr().unwrap())
        );
        let c = link.snapshot().counters;
        assert_eq!(
            (c.refused, c.idle_taken_over, c.connections),
            (2, 1, 2),
            "{c:?}"
        );
    }

    #[test]
    fn a_connecting_port_retries_and_reconnects() {
        // A port nobody listens on yet (bound and released).
        let addr = StdListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let rig = Rig::start("connect", &format!("connect = \"{addr}\""), false);
        // Let a few attempts fail first.
        std::thread::sleep(Duration::from_millis(400));
        let listener = StdListener::bind(addr).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        // The switch may see its connection complete after this accept, and drops a
        // frame sent before as "down": send until one arrives.
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut got = None;
        for _ in 0..100 {
            rig.udp_send(100, b"to the listener");
            let mut h = [0u8; 8];
            if s.read_exact(&mut h).is_ok() {
                s.set_read_timeout(Some(WAIT)).unwrap();
                let mut body = vec![0; u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize];
                s.read_exact(&mut body).unwrap();
                got = Some((h, body));
                break;
            }
        }
        let (h, body) = got.expect("a frame through the connected port");
        assert_eq!(&h[..4], &[0, 0, 0, 100]);
        assert_eq!(body, b"to the listener");
        drop(s);
        // The switch connects again after the peer closed.
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut out = Vec::new();
        emit_data(0, 100, b"from the listener", &mut out).unwrap();
        s.write_all(&out).unwrap();
        assert_eq!(rig.udp_recv(), (100, b"from the listener".to_vec()));
        let stat = rig.finish();
        let c = &stat["ports"][0]["atmtcp"]["counters"];
        assert!(c["connect_failures"].as_u64().unwrap() >= 1, "{c}");
        assert_eq!(c["connections"], 2, "{c}");
    }

    #[test]
    fn signalling_on_vci_5_reaches_the_control_plane_and_back() {
        let rig = Rig::start("sig", "listen = \"127.0.0.1:0\"", true);
        let mut tcp = connect(rig.listen);
        // The SSCOP BGN atmsigd sends first (N(SQ) 0, N(MR) 30, no user data).
        let bgn = [0, 0, 0, 0, 0x01, 0, 0, 0x1e];
        let mut out = Vec::new();
        emit_data(0, 5, &bgn, &mut out).unwrap();
        tcp.write_all(&out).unwrap();
        // The switch starts its own link too (its BGN may come first); whatever it
        // sends is SSCOP on 0.5, and it answers ours with BGAK.
        // Q.2110: the PDU type is the low nibble of the last word's first octet.
        let mut types = Vec::new();
        while !types.contains(&2) && types.len() < 8 {
            let (vpi, vci, pdu) = read_msg(&mut tcp);
            assert_eq!((vpi, vci), (0, 5), "{pdu:02x?}");
            assert!(pdu.len() >= 4 && pdu.len() % 4 == 0, "{pdu:02x?}");
            types.push(pdu[pdu.len() - 4] & 0x0f);
        }
        assert!(types.contains(&2), "no BGAK among SSCOP types {types:?}");
        drop(rig.finish());
    }
}
