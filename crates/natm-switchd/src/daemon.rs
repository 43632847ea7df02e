//! The switch's event loop: one thread, one mio poll over every port's UDP socket
//! and a signal pipe. It reads the clock and the sockets, hands cells and frames to
//! the [`Switch`], and sends what `poll_transmit` returns when `poll_timeout` says
//! the line is free; every forwarding decision is the data plane's.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::os::fd::AsRawFd;

use bytes::Bytes;
use mio::net::UnixStream;
use mio::{Events, Interest, Poll, Token};
use natm_proto::sig::noise::{self, NoiseError, Trust};
use natm_proto::sig::peer::Control as PeerControl;
use natm_proto::wire::cell::CELL_LEN;
use natm_proto::wire::sscop::Pdu as SscopPdu;
use natm_proto::wire::vcframe;
use natm_switch::control::{self, Control, ControlConfig, ControlPort, PortRole};
use natm_switch::{CrossConnect, PortId, Switch, Transmit, VcAddr, VpAddr};
use natm_udp::{AreaAccount, AreaPool, RecvBatch};
use std::collections::HashMap;
use tracing::{info, warn};

use crate::atmtcp_link::AtmtcpPorts;
use crate::config::{Config, ConfigError, LinkMode, PortAuth, PvcEnd, SignallingRole};
use crate::ilmi_port::IlmiPort;
use crate::link::{open_socket, uni_label, Link, Rng};
use crate::noise_port::{Dropped, Inner, NoisePort};
use crate::stat::{PortSnapshot, Snapshot};
use crate::stat_file::StatFile;
use crate::train;
use natm_sigd::metrics::http::MetricsServer;

const SIGNALS: Token = Token(0);
/// `--metrics`: its listener and connections, above every port's token and below the
/// atmtcp links'.
const METRICS: Token = Token(1 << 23);
const _: () = assert!(
    METRICS.0 > FIRST_PORT + u16::MAX as usize
        && METRICS.0 + natm_sigd::metrics::http::TOKENS <= crate::atmtcp_link::TOKEN_BASE
);
const FIRST_PORT: usize = 1;
/// How far behind `now` a port may still use line slots it missed: a wake-up is late
/// by up to the poll's millisecond granularity, and without this the line would
/// lose those slots and run below its rate.
const CATCH_UP: Duration = Duration::from_millis(2);
/// Octets read from one socket before the others get a turn and the ports send:
/// about 1,200 cells, so that the cells queued between reading and sending stay in
/// the CPU's caches (a burst of 256 datagrams of 128-cell trains queued 1.8 MB).
const READ_BURST: usize = 64 * 1024;
/// Buffers one `recvmmsg` fills, each up to 64 KiB of GRO run.
const RECV_SLOTS: usize = 4;
/// Receive areas (of `RECV_SLOTS` × 64 KiB) that queued frames may hold at once
/// before frame-mode ports copy SDUs instead (`natm_udp::areas`; `rx`'s own
/// included): 4 MiB.
const MAX_RX_AREAS: usize = 16;

pub use natm_sigd::Stop;

/// The switch process.
#[derive(Debug)]
pub struct SwitchDaemon {
    sw: Switch,
    /// The control plane, if any port runs signalling.
    control: Option<Control>,
    poll: Poll,
    links: Vec<Link>,
    signals: Option<UnixStream>,
    stop: Stop,
    /// The stat file's writer (`stat_json`), off the forwarding thread: started by
    /// [`SwitchDaemon::run`], so that it runs as confined as the loop.
    stat_file: Option<StatFile>,
    /// `stat_json`.
    stat_path: Option<PathBuf>,
    /// The directories the switch writes while it runs ([`SwitchDaemon::needs`]).
    needs: natm_sigd::confine::Needs,
    stat_interval: Duration,
    next_stat: Instant,
    epoch: Instant,
    /// What one `recvmmsg` fills, shared by the ports (read one at a time).
    rx: RecvBatch,
    /// Areas `rx` lends to the data plane with a frame-mode port's SDUs: at most
    /// `MAX_RX_AREAS` with `rx`'s own.
    rx_areas: Arc<AreaPool>,
    /// The data plane's account of them (no budget but the pool's bound).
    rx_lent: AreaAccount,
    /// The ports whose link is an atmtcp TCP connection (their `links` entry has no
    /// UDP socket).
    atmtcp: AtmtcpPorts,
    /// `/metrics`, if configured.
    metrics: Option<MetricsServer>,
    /// Receive errors the sockets report (ICMP errors anyone can forge in the name
    /// of a port's peer): at most 10 lines a second, then one with `suppressed`.
    recv_error_log: natm_sigd::core::Bucket,
    /// Each signalling port's last BGN N(SQ), by port name, and where it is kept for
    /// the next instance (`natm_sigd::sscop_sq`, `ControlPort::first_sq`).
    last_sq: HashMap<String, u8>,
    sscop_sq_file: Option<std::path::PathBuf>,
}

fn endpoint_of(end: &PvcEnd, port: PortId) -> (Option<VcAddr>, VpAddr) {
    (
        end.vci.map(|vci| VcAddr::new(port, end.vpi, vci)),
        VpAddr::new(port, end.vpi),
    )
}

impl SwitchDaemon {
    /// Binds every port's socket and installs the permanent cross-connects.
    pub fn bind(cfg: Config) -> Result<SwitchDaemon, ConfigError> {
        cfg.check()?;
        let io_err =
            |what: String| move |e: io::Error| ConfigError::Invalid(format!("{what}: {e}"));
        let poll = Poll::new().map_err(io_err("cannot create the poll".into()))?;
        let mut sw = Switch::new();
        let mut links = Vec::new();
        let mut atmtcp = AtmtcpPorts::default();
        let identity = Identity::load(&cfg)?;
        for (i, p) in cfg.ports.iter().enumerate() {
            let pc = p.port_config()?;
            let id = sw
                .add_port(pc)
                .map_err(|e| ConfigError::Invalid(format!("port {}: {e}", p.name)))?;
            let (socket, bind, peer) = if p.mode == LinkMode::Atmtcp {
                let (role, addr) = p.atmtcp_endpoint()?;
                let endpoint = match role {
                    crate::AtmtcpRole::Listen => crate::atmtcp_link::Endpoint::Listen {
                        addr,
                        admission: p.atmtcp_admission()?,
                    },
                    crate::AtmtcpRole::Connect => crate::atmtcp_link::Endpoint::Connect(addr),
                };
                let addr = atmtcp
                    .add(
                        i,
                        id,
                        &p.name,
                        endpoint,
                        p.signalling.is_some(),
                        poll.registry(),
                    )
                    .map_err(io_err(format!("port {}: cannot listen on {addr}", p.name)))?;
                if let Some(prefix) = p.ilmi_prefix()? {
                    let now = natm_proto::time::Instant::ZERO;
                    atmtcp.run_ilmi_on(i, IlmiPort::new(now, i, &p.name, prefix));
                }
                let none = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
                match role {
                    crate::AtmtcpRole::Listen => (None, addr, none),
                    crate::AtmtcpRole::Connect => (None, none, addr),
                }
            } else {
                let (bind, peer) = p.udp_endpoints()?;
                let socket = open_socket(bind)
                    .map_err(io_err(format!("port {}: cannot bind {bind}", p.name)))?;
                poll.registry()
                    .register(
                        &mut mio::unix::SourceFd(&socket.as_raw_fd()),
                        Token(FIRST_PORT + i),
                        Interest::READABLE,
                    )
                    .map_err(io_err(format!("port {}: cannot register", p.name)))?;
                let bind = socket
                    .local_addr()
                    .map_err(io_err(format!("port {}: no local address", p.name)))?;
                (Some(socket), bind, peer)
            };
            debug_assert_eq!(id.index(), i);
            links.push(Link {
                name: p.name.clone(),
                socket,
                bind,
                peer,
                mode: p.mode,
                train: p.train,
                cell_time: pc.cell_time(),
                next_arrival: natm_proto::time::Instant::ZERO,
                line_idle: true,
                loss: p.loss,
                burst: p.gilbert.map(|g| (g.model(), false)),
                delay: p.delay(),
                delayed: Default::default(),
                rng: Rng::new(cfg.seed.wrapping_add(i as u64)),
                counters: Default::default(),
                sources: Default::default(),
                noise: match (p.signalling_auth()?, &identity) {
                    (PortAuth::Noise { public_key, psk }, Some(id)) => Some(Box::new(id.port(
                        public_key,
                        psk,
                        peer,
                        u64::from_le_bytes(random()?),
                    ))),
                    _ => None,
                },
                // An atmtcp port's ILMI runs on its connection (above).
                ilmi: match (p.mode, p.ilmi_prefix()?) {
                    (LinkMode::Atmtcp, _) | (_, None) => None,
                    (_, Some(prefix)) => Some(IlmiPort::new(
                        natm_proto::time::Instant::ZERO,
                        i,
                        &p.name,
                        prefix,
                    )),
                },
                dests: Default::default(),
                tx: Default::default(),
            });
        }
        for v in &cfg.pvcs {
            let (a, b) = (PvcEnd::parse(&v.from)?, PvcEnd::parse(&v.to)?);
            let port_of = |e: &PvcEnd| {
                cfg.port_index(&e.port)
                    .and_then(|i| u16::try_from(i).ok())
                    .map(PortId)
                    .ok_or_else(|| ConfigError::Invalid(format!("no port `{}`", e.port)))
            };
            let (pa, pb) = (port_of(&a)?, port_of(&b)?);
            let link_cells = sw.port_config(pa).map_or(0, |c| c.cells_per_sec());
            let contract = v.contract(link_cells)?;
            let (va, vpa) = endpoint_of(&a, pa);
            let (vb, vpb) = endpoint_of(&b, pb);
            let (fwd, rev) = match (va, vb) {
                (Some(x), Some(y)) => (CrossConnect::vc(x, y), CrossConnect::vc(y, x)),
                _ => (CrossConnect::vp(vpa, vpb), CrossConnect::vp(vpb, vpa)),
            };
            let mut install = |xc: CrossConnect| {
                sw.connect(xc, contract)
                    .map_err(|e| ConfigError::Invalid(format!("pvc {} -> {}: {e}", v.from, v.to)))
            };
            install(fwd)?;
            if v.duplex {
                install(rev)?;
            }
        }
        let metrics = match cfg.metrics.as_deref() {
            Some(text) => {
                let addr =
                    natm_sigd::metrics::http::parse_addr(text).map_err(ConfigError::Invalid)?;
                Some(
                    MetricsServer::bind(addr, poll.registry(), METRICS)
                        .map_err(io_err("metrics".into()))?,
                )
            }
            None => None,
        };
        let now = Instant::now();
        let sscop_sq_file = cfg.sscop_sq_path();
        let last_sq: HashMap<String, u8> = sscop_sq_file
            .as_deref()
            .map(natm_sigd::sscop_sq::load)
            .unwrap_or_default();
        let control = Self::control(&cfg, &links, &last_sq)?;
        let mut needs = natm_sigd::confine::Needs::default();
        for f in cfg
            .stat_json
            .iter()
            .chain(cfg.known_peers_path().iter())
            .chain(sscop_sq_file.iter())
        {
            needs.file(f);
        }
        let rx = links
            .iter()
            .find_map(|l| l.socket.as_ref())
            .map_or_else(|| RecvBatch::new(1, 1), |s| s.recv_batch(RECV_SLOTS));
        Ok(SwitchDaemon {
            sw,
            control,
            poll,
            links,
            signals: None,
            stop: Stop::default(),
            stat_file: None,
            stat_path: cfg.stat_json.clone(),
            needs,
            stat_interval: Duration::from_millis(cfg.stat_interval_ms.max(10)),
            next_stat: now,
            epoch: now,
            rx,
            rx_areas: AreaPool::new(MAX_RX_AREAS, MAX_RX_AREAS - 1),
            rx_lent: AreaAccount::default(),
            atmtcp,
            metrics,
            recv_error_log: natm_sigd::core::Bucket::new(10),
            last_sq,
            sscop_sq_file,
        })
    }

    /// The control plane for the ports that run signalling, with the routes; each
    /// port's SSCOP counts on from `last_sq`'s N(SQ) for it, else a random one.
    fn control(
        cfg: &Config,
        links: &[Link],
        last_sq: &HashMap<String, u8>,
    ) -> Result<Option<Control>, ConfigError> {
        if cfg.ports.iter().all(|p| p.signalling.is_none()) {
            return Ok(None);
        }
        let mut routes = Vec::new();
        for r in &cfg.routes {
            let i = cfg.port_index(&r.port).expect("checked by Config::check");
            routes.push((cfg.route_prefix(r)?, port_id(i)));
        }
        let mut ctl = Control::new(ControlConfig {
            // Named in the refusals it sends: its own name, else where its first
            // port listens (unique on a machine).
            name: cfg.name.clone().unwrap_or_else(|| {
                links
                    .first()
                    .map_or_else(|| "switch".into(), |l| format!("switch at {}", l.bind))
            }),
            routes,
            cdvt: cfg
                .svc_cdvt_us
                .map_or(natm_switch::control::DEFAULT_CDVT, Duration::from_micros),
            drain: cfg
                .svc_drain_ms
                .map_or(natm_switch::control::DEFAULT_DRAIN, Duration::from_millis),
            preserve: cfg.svc_preserve_ms.map_or(
                natm_switch::control::DEFAULT_PRESERVE,
                Duration::from_millis,
            ),
            routing: cfg
                .routing
                .as_ref()
                .map(crate::config::RoutingSection::config),
            ..ControlConfig::default()
        });
        for (i, p) in cfg.ports.iter().enumerate() {
            let Some(role) = p.signalling else { continue };
            ctl.add_port(
                natm_proto::time::Instant::from_nanos(1),
                ControlPort {
                    port: port_id(i),
                    name: p.name.clone(),
                    role: match role {
                        SignallingRole::Host => PortRole::Host,
                        SignallingRole::Switch => PortRole::Switch,
                        SignallingRole::Uni => PortRole::Uni,
                    },
                    link_cells: link_cells(role, p.line_rate),
                    preserve: p.preserve_ms.map(Duration::from_millis),
                    no_response: p.sscop_no_response_ms.map(Duration::from_millis),
                    screen_calling: p.screen_calling,
                    first_sq: Some(match last_sq.get(&p.name) {
                        Some(&sq) => sq,
                        None => random::<1>()?[0],
                    }),
                    data: links[i].bind,
                    // Towards a host, and on a trunk for the switch with the higher
                    // endpoint, the network's half; the lower takes the user's.
                    vcis: if role == SignallingRole::Switch && links[i].bind < links[i].peer {
                        natm_proto::sig::vci::USER_HALF
                    } else {
                        natm_proto::sig::vci::NETWORK_HALF
                    },
                },
            );
        }
        Ok(Some(ctl))
    }

    /// Carries out what the control plane asks: signalling PDUs to peers, and each
    /// signalled VC's data endpoint on host ports.
    fn drain_control(&mut self, wall: Instant) {
        let now = self.at(wall);
        let Some(ctl) = self.control.as_mut() else {
            return;
        };
        let mut sq_changed = false;
        while let Some(o) = ctl.poll_output(&mut self.sw) {
            match o {
                control::Output::Signal(p, pdu) => {
                    // A BGN's N(SQ) is the next instance's to count on from.
                    if let Ok(SscopPdu::Bgn { nsq, .. }) = SscopPdu::parse(&pdu) {
                        if let Some(l) = self.links.get(p.index()) {
                            sq_changed |= self.last_sq.insert(l.name.clone(), nsq) != Some(nsq);
                        }
                    }
                    if self
                        .atmtcp
                        .send_signal(p.index(), &pdu, self.poll.registry(), wall)
                    {
                        continue;
                    }
                    if let Some(l) = self.links.get_mut(p.index()) {
                        if let Some(n) = l.noise.as_mut() {
                            for d in n.seal(now, &pdu) {
                                l.send(&d, wall);
                            }
                            continue;
                        }
                        l.send(&vcframe::signalling_frame(&pdu), wall);
                    }
                }
                control::Output::Routing(p, frame) => {
                    // Routing runs on UDP trunks (an atmtcp port is never a trunk).
                    if let Some(l) = self.links.get_mut(p.index()) {
                        match l.noise.as_mut() {
                            Some(n) => {
                                for d in n.seal_routing(now, &frame) {
                                    l.send(&d, wall);
                                }
                            }
                            None => l.send(&vcframe::routing_frame(&frame), wall),
                        }
                    }
                }
                control::Output::Source(vc, addr) => {
                    if let Some(l) = self.links.get_mut(vc.port.index()) {
                        match addr {
                            Some(a) => {
                                l.sources.insert((a, vc.vpi, vc.vci));
                            }
                            None => l.sources.retain(|s| (s.1, s.2) != (vc.vpi, vc.vci)),
                        }
                    }
                }
                control::Output::Dest(vc, addr) => {
                    if let Some(l) = self.links.get_mut(vc.port.index()) {
                        match addr {
                            Some(a) => {
                                l.dests.insert((vc.vpi, vc.vci), a);
                            }
                            None => {
                                l.dests.remove(&(vc.vpi, vc.vci));
                            }
                        }
                    }
                }
            }
        }
        if let (true, Some(f)) = (sq_changed, &self.sscop_sq_file) {
            let mut last: Vec<(&String, u8)> = self.last_sq.iter().map(|(k, v)| (k, *v)).collect();
            last.sort();
            if let Err(e) = natm_sigd::sscop_sq::store(f, &last) {
                warn!(file = %f.display(), "cannot record the SSCOP sequence numbers: {e}");
            }
        }
        // Each refusal once, at most `REFUSALS_LOGGED_PER_S` a second (the rest are
        // counted in `suppressed` and in the stat file's `calls_refused`).
        while let Some(r) = ctl.poll_refused() {
            warn!(
                cause = r.cause,
                switch = %r.refusal.switch,
                link = %r.refusal.link,
                suppressed = r.suppressed,
                "call refused: {}",
                r.refusal.reason
            );
        }
    }

    /// Runs each host port's ILMI: follows its signalling link and timers, sends what
    /// it has to send on VCI 16 (sealed on a Noise port), and hands its registrations
    /// to the control plane.
    fn run_ilmi(&mut self, now: natm_proto::time::Instant, wall: Instant) {
        for (i, l) in self.links.iter_mut().enumerate() {
            let Some(mut ilmi) = l.ilmi.take() else {
                continue;
            };
            let port = port_id(i);
            let up = self.control.as_ref().is_some_and(|c| c.is_up(port));
            ilmi.follow_link(now, up);
            let mut out = Vec::new();
            ilmi.flush(port, &l.name, self.control.as_mut(), |m| {
                out.push(m.to_vec())
            });
            for m in out {
                match l.noise.as_mut() {
                    Some(n) => {
                        for d in n.seal_ilmi(now, &m) {
                            l.send(&d, wall);
                        }
                    }
                    None => l.send(&vcframe::ilmi_frame(&m), wall),
                }
            }
            l.ilmi = Some(ilmi);
        }
    }

    /// A handle that stops [`SwitchDaemon::run`].
    pub fn stopper(&self) -> Stop {
        self.stop.clone()
    }

    /// The directories the switch writes while it runs (the stat file's, the
    /// known-peers file's), for [`natm_sigd::confine::confine`].
    pub fn needs(&self) -> &natm_sigd::confine::Needs {
        &self.needs
    }

    /// Each port's name and bound UDP endpoint (an atmtcp port's listening address,
    /// or 0.0.0.0:0 if it connects).
    pub fn endpoints(&self) -> Vec<(String, std::net::SocketAddr)> {
        self.links
            .iter()
            .map(|l| (l.name.clone(), l.bind))
            .collect()
    }

    /// Where `/metrics` is served, if it is.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::local_addr)
    }

    /// An event of `/metrics`: the exposition is made from the counters now.
    fn scrape(&mut self, t: Token) {
        let Some(mut m) = self.metrics.take() else {
            return;
        };
        m.handle_event(t, self.poll.registry(), Instant::now(), || {
            crate::metrics::render(&self.snapshot())
        });
        self.metrics = Some(m);
    }

    /// Stop on SIGTERM and SIGINT (the signals write to a pipe the loop watches).
    pub fn handle_signals(&mut self) -> io::Result<()> {
        self.signals = Some(natm_sigd::signal_pipe(self.poll.registry(), SIGNALS)?);
        Ok(())
    }

    /// The data plane's clock for wall time `t` (never zero).
    fn at(&self, t: Instant) -> natm_proto::time::Instant {
        at(self.epoch, t)
    }

    /// The counters as `natm stat --switch` reads them.
    pub fn snapshot(&self) -> Snapshot {
        let st = self.sw.stat();
        let signalling = self.control.as_ref().map(|c| c.links()).unwrap_or_default();
        Snapshot {
            uptime_s: self.epoch.elapsed().as_secs_f64(),
            ports: self
                .links
                .iter()
                .zip(st.ports)
                .enumerate()
                .map(|(i, (l, stats))| {
                    let atmtcp = self.atmtcp.snapshot(i);
                    let ilmi = self
                        .atmtcp
                        .ilmi_snapshot(i)
                        .or_else(|| l.ilmi.as_ref().map(IlmiPort::snapshot));
                    let signals = signalling.iter().any(|r| usize::from(r.port) == i);
                    let n = l.noise.as_deref();
                    PortSnapshot {
                        auth: signals.then(|| {
                            match n {
                                Some(n) if n.has_psk() => "noise+psk",
                                Some(_) => "noise",
                                None => "clear",
                            }
                            .to_owned()
                        }),
                        peer_key: n.and_then(|n| n.peer_key()).map(|k| noise::key_to_text(&k)),
                        auth_failures: n.map_or(0, |n| n.auth_failures),
                        key_mismatches: n.map_or(0, |n| n.key_mismatches),
                        name: l.name.clone(),
                        bind: l.bind,
                        peer: atmtcp.as_ref().and_then(|a| a.connected).unwrap_or(l.peer),
                        mode: l.mode,
                        link: l.counters,
                        stats,
                        atmtcp,
                        ilmi,
                    }
                })
                .collect(),
            vcs: st.vcs,
            signalling,
            calls: self.control.as_ref().map(|c| c.calls()).unwrap_or_default(),
            calls_refused: self.control.as_ref().map_or(0, |c| c.refused()),
            calls_screened: self.control.as_ref().map_or(0, |c| c.calls_screened()),
            routing: self.control.as_ref().and_then(Control::routing),
        }
    }

    /// The snapshot as the stat file holds it.
    fn stat_json(&self) -> Vec<u8> {
        // Counters, names and addresses: serialising cannot fail.
        serde_json::to_vec_pretty(&self.snapshot()).unwrap_or_default()
    }

    /// Hands the stat file's writer a new snapshot.
    fn write_stat(&self) {
        if let Some(f) = &self.stat_file {
            f.offer(self.stat_json());
        }
    }

    /// Forward until stopped; then write the stat file a last time.
    pub fn run(mut self) -> io::Result<()> {
        if let Some(p) = self.stat_path.clone() {
            self.stat_file = Some(StatFile::start(p).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot start the stat file's writer: {e}"),
                )
            })?);
        }
        for l in &self.links {
            info!(port = %l.name, bind = %l.bind, peer = %l.peer, mode = ?l.mode, "port up");
        }
        info!(vcs = self.sw.stat().vcs.len(), metrics = ?self.metrics_addr(), "switch forwarding");
        let mut events = Events::with_capacity(256);
        while !self.stop.stopped() {
            let wall = Instant::now();
            let mut wake = self.next_stat;
            if let Some(t) = self.sw.poll_timeout() {
                let t = self.epoch + Duration::from_nanos(t.as_nanos().saturating_sub(1));
                wake = wake.min(t);
            }
            if let Some(t) = self.control.as_ref().and_then(Control::poll_timeout) {
                let t = self.epoch + Duration::from_nanos(t.as_nanos().saturating_sub(1));
                wake = wake.min(t);
            }
            for l in &self.links {
                if let Some((due, ..)) = l.delayed.front() {
                    wake = wake.min(*due);
                }
            }
            if let Some(t) = self.atmtcp.poll_timeout() {
                wake = wake.min(t);
            }
            let ilmi = self
                .links
                .iter()
                .filter_map(|l| l.ilmi.as_ref()?.poll_timeout());
            if let Some(t) = ilmi.chain(self.atmtcp.ilmi_timeout()).min() {
                wake = wake.min(self.epoch + Duration::from_nanos(t.as_nanos()));
            }
            if let Some(t) = self.metrics.as_ref().and_then(MetricsServer::poll_timeout) {
                wake = wake.min(t);
            }
            let timeout = wake.saturating_duration_since(wall);
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut readable = Vec::new();
            let mut atmtcp_ready = Vec::new();
            let mut scrapes = Vec::new();
            for ev in events.iter() {
                match ev.token() {
                    SIGNALS => {
                        info!("signal received, stopping");
                        self.stop.stop();
                    }
                    t if self.metrics.as_ref().is_some_and(|m| m.owns(t)) => scrapes.push(t),
                    t if AtmtcpPorts::owns(t) => atmtcp_ready.push(t),
                    Token(t) => readable.push(t - FIRST_PORT),
                }
            }
            self.atmtcp_events(atmtcp_ready);
            for t in scrapes {
                self.scrape(t);
            }
            // Edge-triggered: read each ready socket until it would block, a burst
            // at a time, sending between bursts so queues drain as they fill.
            while !readable.is_empty() {
                readable.retain(|&i| self.read_burst(i));
                self.drain_control(Instant::now());
                self.transmit_all();
            }
            let wall = Instant::now();
            let now = self.at(wall);
            // Released calls' VCs whose drain time is up.
            self.sw.handle_timeout(now);
            if let Some(c) = self.control.as_mut() {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
            self.drain_control(wall);
            self.atmtcp.handle_timeout(wall, self.poll.registry());
            self.atmtcp
                .run_ilmi(now, self.poll.registry(), wall, self.control.as_mut());
            self.run_ilmi(now, wall);
            // A closed atmtcp connection takes its signalling link with it now, not
            // after SSCOP's Timer_NO_RESPONSE.
            if let Some(c) = self.control.as_mut() {
                for port in self.atmtcp.lost() {
                    c.port_lost(now, port);
                }
            }
            self.transmit_all();
            // A released call's side is released once its VCs have drained.
            self.drain_control(Instant::now());
            let wall = Instant::now();
            for l in &mut self.links {
                l.release_delayed(wall);
            }
            if let Some(m) = self.metrics.as_mut() {
                m.handle_timeout(self.poll.registry(), wall);
            }
            if wall >= self.next_stat {
                self.write_stat();
                self.next_stat = wall + self.stat_interval;
            }
        }
        let now = self.at(Instant::now());
        if let Some(c) = self.control.as_mut() {
            // Every call through the switch is released at both ends before it goes.
            c.shutdown(now, &mut self.sw);
            self.drain_control(Instant::now());
            for l in &mut self.links {
                l.flush();
            }
        }
        if let Some(f) = self.stat_file.take() {
            f.finish(self.stat_json());
        }
        info!(copied_receives = self.rx_lent.counts().1, "switch stopped");
        Ok(())
    }

    /// Reads about [`READ_BURST`] octets from port `i` (whole `recvmmsg` batches);
    /// whether it may hold more.
    fn read_burst(&mut self, i: usize) -> bool {
        let port = port_id(i);
        let mut read = 0;
        while read < READ_BURST {
            let epoch = self.epoch;
            let Some(link) = self.links.get_mut(i) else {
                return false;
            };
            let Some(socket) = link.socket.as_ref() else {
                return false;
            };
            match socket.recv(&mut self.rx) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // ICMP port unreachable from a peer not yet up: not fatal. Counted
                    // against the burst, so that an error that repeats cannot hold
                    // the loop.
                    if e.kind() != io::ErrorKind::ConnectionRefused {
                        let t = at(epoch, Instant::now());
                        if let Some(suppressed) = self.recv_error_log.allow(t) {
                            warn!(port = %link.name, suppressed, "receive error: {e}");
                        }
                    }
                    read += READ_BURST / 4;
                    continue;
                }
            }
            link.counters.recv_calls += 1;
            // Each datagram arrived when the kernel stamped it: a cell is policed and
            // queued from then, not from when the switch got the CPU to read it (a
            // conforming VC read late, in a backlog, looked like a burst). Unstamped:
            // now, when every datagram of the batch had arrived.
            let now = at(epoch, Instant::now());
            let wall = natm_udp::wall_clock();
            let arrived = |stamp| now - natm_udp::stamp_age(wall, stamp).unwrap_or_default();
            // A frame port's SDUs go to the queues as slices of the area received
            // into, not copies, while areas are free.
            let area = if link.mode == LinkMode::Frame {
                self.rx_areas.lend(&self.rx_lent, &mut self.rx, usize::MAX)
            } else {
                None
            };
            let mut octets = 0;
            match &area {
                Some(area) => {
                    for (from, span, stamp) in self.rx.stamped_spans() {
                        octets += span.len();
                        let data = &area[span];
                        let sw = &mut self.sw;
                        let t = arrived(stamp);
                        receive(
                            sw,
                            self.control.as_mut(),
                            link,
                            port,
                            t,
                            from,
                            data,
                            Some(area),
                        );
                    }
                }
                None => {
                    for (from, data, stamp) in self.rx.stamped_iter() {
                        octets += data.len();
                        let sw = &mut self.sw;
                        let t = arrived(stamp);
                        receive(sw, self.control.as_mut(), link, port, t, from, data, None);
                    }
                }
            }
            read += octets.max(1);
            if !self.rx.may_have_more() {
                return false;
            }
        }
        true
    }

    /// Sends what every port may send now, each port's datagrams batched.
    fn transmit_all(&mut self) {
        let wall = Instant::now();
        let now = self.at(wall);
        for i in 0..self.links.len() {
            self.transmit(i, now, wall);
        }
        for l in &mut self.links {
            l.flush();
        }
    }

    /// Drains port `i`: units whose line slot is at most `train` cell times ahead of
    /// `now` (and at most [`CATCH_UP`] behind it) leave, cells batched into trains
    /// written straight into the link's send batch.
    /// Catch-up is for slots a late wake-up missed while the port had work: a port
    /// that was empty when last drained has nothing it could have sent before now,
    /// so its line starts now. (Without this, units reaching an idle port left back
    /// to back up to `CATCH_UP` of line time at once: a packet pair's two TPDUs left
    /// microseconds apart instead of one service interval, and packet-pair read the
    /// bottleneck as 10–100× faster than it is.)
    fn transmit(&mut self, i: usize, now: natm_proto::time::Instant, wall: Instant) {
        let port = port_id(i);
        let link = &mut self.links[i];
        let horizon = now + link.cell_time * u32::try_from(link.train).unwrap_or(u32::MAX);
        let earliest = if link.line_idle {
            now
        } else {
            natm_proto::time::Instant::from_nanos(
                now.as_nanos()
                    .saturating_sub(CATCH_UP.as_nanos() as u64)
                    .max(1),
            )
        };
        if link.mode == LinkMode::Atmtcp {
            let registry = self.poll.registry();
            self.atmtcp
                .transmit(i, &mut self.sw, horizon, earliest, registry, wall, link);
            return;
        }
        let train_len = train::train_len(link.train);
        if link.mode == LinkMode::Cell && link.dests.is_empty() {
            // Every train goes to the peer: the data plane writes runs of cells
            // straight into it.
            loop {
                link.open(link.peer, train_len);
                link.tx.datagram().push(train::TRAIN_MAGIC);
                let mut cells = 0;
                let full = loop {
                    let d = link.tx.datagram();
                    let at = d.len();
                    let other =
                        self.sw
                            .poll_cells_by(earliest, horizon, port, link.train - cells, d);
                    cells += (d.len() - at) / CELL_LEN;
                    match other {
                        Some(_) => link.counters.mode_mismatch += 1,
                        None => break cells >= link.train,
                    }
                };
                if cells == 0 {
                    link.discard_open();
                } else {
                    link.close(wall);
                }
                if !full {
                    break;
                }
            }
            link.line_idle = self.sw.port_timeout(port).is_none();
            return;
        }
        // The open train's destination and cells: a signalled VC on a host port goes
        // to its own data endpoint, so a train holds the cells of one destination.
        let mut open: Option<std::net::SocketAddr> = None;
        let mut cells = 0;
        while let Some(unit) = self.sw.poll_transmit_by(earliest, horizon, port) {
            match (link.mode, unit) {
                (crate::config::LinkMode::Cell, Transmit::Cell(c)) => {
                    let dest = if link.dests.is_empty() {
                        link.peer
                    } else {
                        let (vpi, vci) = uni_label(&c);
                        link.dest(vpi, vci)
                    };
                    if open != Some(dest) {
                        if open.is_some() {
                            link.close(wall);
                        }
                        link.open(dest, train_len);
                        link.tx.datagram().push(train::TRAIN_MAGIC);
                        open = Some(dest);
                        cells = 0;
                    }
                    link.tx.datagram().extend_from_slice(&c);
                    cells += 1;
                    if cells >= link.train {
                        link.close(wall);
                        open = None;
                    }
                }
                (crate::config::LinkMode::Frame, Transmit::Frame { header, sdu }) => {
                    let dest = link.dest(u16::from(header.vpi), header.vci);
                    link.open(dest, vcframe::HEADER_LEN + sdu.len());
                    let d = link.tx.datagram();
                    d.extend_from_slice(&header.to_bytes());
                    d.extend_from_slice(&sdu);
                    link.close(wall);
                }
                _ => link.counters.mode_mismatch += 1,
            }
        }
        if open.is_some() {
            link.close(wall);
        }
        link.line_idle = self.sw.port_timeout(port).is_none();
    }
}

impl SwitchDaemon {
    /// The atmtcp links' events: each ready connection is read a bounded amount at a
    /// time, with the ports drained between reads, as the UDP sockets are.
    fn atmtcp_events(&mut self, mut ready: Vec<Token>) {
        while !ready.is_empty() {
            ready.retain(|&t| {
                let wall = Instant::now();
                let now = self.at(wall);
                self.atmtcp.handle_event(
                    t,
                    self.poll.registry(),
                    wall,
                    now,
                    &mut self.sw,
                    self.control.as_mut(),
                    &mut self.links,
                )
            });
            self.drain_control(Instant::now());
            self.transmit_all();
        }
    }
}

/// One datagram received on `link` (port `port`) from `from` at `now`: signalling to
/// the control plane, cells and frames to the data plane. `data` lies in `area` if
/// given: a frame's SDU is then queued as a slice of it instead of a copy.
#[allow(clippy::too_many_arguments)]
fn receive(
    sw: &mut Switch,
    mut control: Option<&mut Control>,
    link: &mut Link,
    port: PortId,
    now: natm_proto::time::Instant,
    from: std::net::SocketAddr,
    data: &[u8],
    area: Option<&Bytes>,
) {
    if from != link.peer && link.sources.is_empty() {
        link.counters.bad_datagrams += 1;
        return;
    }
    // A keyed or Noise port's signalling is sealed: anything else on the signalling
    // VCs is dropped (a forged END or RS from the peer's address included).
    let signalling = vcframe::signalling_pdu(data).is_some() || PeerControl::parse(data).is_ok();
    // A Noise trunk's routing frames are sealed too, and a Noise host port's ILMI.
    let noise_frame = signalling
        || (link.noise.is_some()
            && (vcframe::routing_pdu(data).is_some() || vcframe::ilmi_pdu(data).is_some()));
    if let (Some(ctl), true) = (control.as_deref_mut(), noise_frame) {
        if let Some(mut n) = link.noise.take() {
            noise_signal(ctl, link, &mut n, port, now, from, data);
            link.noise = Some(n);
            return;
        }
    }
    // ILMI (VPI 0/VCI 16) on a clear host port that runs it.
    if let (Some(ctl), Some(msg), Some(ilmi)) = (
        control.as_deref_mut(),
        vcframe::ilmi_pdu(data),
        link.ilmi.as_mut(),
    ) {
        if from == link.peer {
            link.counters.datagrams_in += 1;
            ilmi.on_sdu(now, port, msg, Some(ctl));
        } else {
            link.counters.bad_datagrams += 1;
        }
        return;
    }
    // Routing frames (VPI 0/VCI 18) too, unsealed even on a keyed port (issue 33).
    if let (Some(ctl), Some(frame)) = (control.as_deref_mut(), vcframe::routing_pdu(data)) {
        if from == link.peer {
            link.counters.datagrams_in += 1;
            ctl.handle_routing(now, port, frame);
        } else {
            link.counters.bad_datagrams += 1;
        }
        return;
    }
    // A port's signalling travels as frames in either link mode (sigds speak so).
    if let (Some(ctl), Some(pdu)) = (control, vcframe::signalling_pdu(data)) {
        if from == link.peer {
            link.counters.datagrams_in += 1;
            ctl.handle_signal(now, port, pdu);
        } else {
            link.counters.bad_datagrams += 1;
        }
        return;
    }
    link.counters.datagrams_in += 1;
    match link.mode {
        crate::config::LinkMode::Cell => {
            let Ok(cells) = train::parse(data) else {
                link.counters.bad_datagrams += 1;
                return;
            };
            let t = link.next_arrival.max(now);
            fn whole(c: &[u8]) -> &[u8; CELL_LEN] {
                c.try_into().expect("chunks_exact yields whole cells")
            }
            if from == link.peer {
                // Only an unknown port fails, and this one exists.
                if let Ok(next) = sw.handle_cells(t, link.cell_time, port, cells.map(whole)) {
                    link.next_arrival = next;
                }
                return;
            }
            let mut t = t;
            for c in cells {
                // A VC's own data endpoint may send only its VC's cells.
                let cell: [u8; CELL_LEN] = *whole(c);
                let (vpi, vci) = uni_label(&cell);
                if !link.may_send(from, vpi, vci) {
                    link.counters.bad_datagrams += 1;
                    break;
                }
                // Only an unknown port fails, and this one exists.
                let _ = sw.handle_cell(t, port, cell);
                t += link.cell_time;
            }
            link.next_arrival = t;
        }
        crate::config::LinkMode::Frame => {
            let Ok((header, sdu)) = vcframe::Repr::parse_bytes(data) else {
                link.counters.bad_datagrams += 1;
                return;
            };
            if !link.may_send(from, u16::from(header.vpi), header.vci) {
                link.counters.bad_datagrams += 1;
                return;
            }
            let sdu = match area {
                Some(a) => a.slice_ref(sdu),
                None => Bytes::copy_from_slice(sdu),
            };
            let _ = sw.handle_frame(now, port, header, sdu);
        }
        // An atmtcp port has no UDP socket, so no datagram.
        crate::config::LinkMode::Atmtcp => link.counters.bad_datagrams += 1,
    }
}

/// A signalling datagram on a Noise port (`noise` is `link`'s, taken out).
fn noise_signal(
    ctl: &mut Control,
    link: &mut Link,
    noise: &mut NoisePort,
    port: PortId,
    now: natm_proto::time::Instant,
    from: std::net::SocketAddr,
    data: &[u8],
) {
    if from != link.peer {
        link.counters.bad_datagrams += 1;
        return;
    }
    match noise.receive(now, data) {
        Ok(noise::Received::Pdu(plain)) => match noise.inner(plain) {
            Some(Inner::Signal(pdu)) => {
                link.counters.datagrams_in += 1;
                ctl.handle_signal(now, port, &pdu);
            }
            Some(Inner::Routing(frame)) => {
                link.counters.datagrams_in += 1;
                ctl.handle_routing(now, port, &frame);
            }
            Some(Inner::Ilmi(msg)) => match link.ilmi.as_mut() {
                Some(ilmi) => {
                    link.counters.datagrams_in += 1;
                    ilmi.on_sdu(now, port, &msg, Some(ctl));
                }
                None => link.counters.bad_datagrams += 1,
            },
            None => link.counters.bad_datagrams += 1,
        },
        Ok(noise::Received::Send(frames)) => {
            link.counters.datagrams_in += 1;
            for d in frames {
                link.send(&d, Instant::now());
            }
        }
        Err(Dropped::Noise(NoiseError::WrongKey { seen, pinned })) => {
            link.counters.bad_datagrams += 1;
            // Once a second at most: a flood of handshakes must not become one of log.
            if noise
                .last_mismatch_log
                .is_none_or(|t| now.as_nanos().saturating_sub(t.as_nanos()) >= 1_000_000_000)
            {
                noise.last_mismatch_log = Some(now);
                tracing::error!(
                    port = %link.name,
                    peer = %from,
                    seen = %noise::key_to_text(&seen),
                    pinned = %noise::key_to_text(&pinned),
                    "host's sigd proved a different Noise key than the one pinned or configured: link refused (if its key really changed, remove its line from known_peers_file or fix the port's public_key)"
                );
            }
        }
        // Counted, not logged: a flood of forgeries must not become one of log.
        Err(_) => link.counters.bad_datagrams += 1,
    }
    if let Some(k) = noise.take_new_pin() {
        info!(port = %link.name, peer = %from, key = %noise::key_to_text(&k), "pinned a host's Noise key on first use");
        if let Some(f) = &noise.pins_file {
            if let Err(e) = natm_sigd::identity::append_pins(f, &[(from, k)]) {
                warn!(file = %f.display(), "cannot record the pinned key: {e}");
            }
        }
    }
}

/// The switch's Noise identity for its signalling links (host ports and trunks): its
/// static key and the peers' keys pinned so far.
struct Identity {
    private: [u8; noise::KEY_LEN],
    pins: std::collections::HashMap<std::net::SocketAddr, noise::PublicKey>,
    pins_file: Option<PathBuf>,
}

impl Identity {
    /// The key file's key (made on first start) and the pins, if any port signals
    /// over Noise.
    fn load(cfg: &Config) -> Result<Option<Identity>, ConfigError> {
        let any = cfg
            .ports
            .iter()
            .any(|p| matches!(p.signalling_auth(), Ok(PortAuth::Noise { .. })));
        if !any {
            return Ok(None);
        }
        let private = match cfg.key_path() {
            Some(f) => natm_sigd::identity::load_or_create_key(&f)
                .map_err(|e| ConfigError::Invalid(e.to_string()))?,
            None => random()?,
        };
        let pins_file = cfg.known_peers_path();
        let pins = match &pins_file {
            Some(f) => natm_sigd::identity::load_pins(f)
                .map_err(|e| ConfigError::Invalid(e.to_string()))?,
            None => Default::default(),
        };
        info!(
            key = %noise::key_to_text(&noise::public_key(&private)),
            "Noise static key for signalling links (host ports and trunks)"
        );
        Ok(Some(Identity {
            private,
            pins,
            pins_file,
        }))
    }

    /// A host port's Noise link to `peer`: proving `configured`, else the pinned key,
    /// else pinning the first; `psk` mixed in if the port has a key.
    fn port(
        &self,
        configured: Option<noise::PublicKey>,
        psk: Option<[u8; noise::KEY_LEN]>,
        peer: std::net::SocketAddr,
        seed: u64,
    ) -> NoisePort {
        let trust = match configured.or_else(|| self.pins.get(&peer).copied()) {
            Some(k) => Trust::Pinned(k),
            None => Trust::FirstUse,
        };
        let mut n = NoisePort::new(self.private, trust, psk, seed);
        n.pins_file = self.pins_file.clone();
        n
    }
}

/// The switch's Noise public key (base64) from `cfg`'s key file, made first if
/// there is none (`natm switch --show-key`).
pub fn show_key(cfg: &Config) -> io::Result<String> {
    let f = cfg.key_path().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "no key_file and no configuration file",
        )
    })?;
    let private = natm_sigd::identity::load_or_create_key(&f)?;
    Ok(noise::key_to_text(&noise::public_key(&private)))
}

/// 32 random octets from the OS (a secret, a nonce).
fn random<const N: usize>() -> Result<[u8; N], ConfigError> {
    let mut b = [0u8; N];
    let mut got = 0;
    while got < N {
        got += rustix::rand::getrandom(&mut b[got..], rustix::rand::GetRandomFlags::empty())
            .map_err(|e| ConfigError::Invalid(format!("no randomness from the OS: {e}")))?;
    }
    Ok(b)
}

/// The data plane's clock for wall time `t`, counted from `epoch` (never zero).
fn at(epoch: Instant, t: Instant) -> natm_proto::time::Instant {
    let ns = u64::try_from(t.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX - 1);
    natm_proto::time::Instant::from_nanos(ns + 1)
}

fn port_id(i: usize) -> PortId {
    PortId(u16::try_from(i).expect("port ids fit u16: add_port checks"))
}

/// Linux's atmtcp interface reports an OC-3 line (`ATM_OC3_PCR`, 353,207 cells/s) and
/// its `atmsigd` refuses a SETUP whose peak cell rate exceeds it (cause 88).
const OC3_PAYLOAD_CELLS: u32 = 353_207;

/// The cell rate a best-effort call's peak rate stands for on a signalling port: the
/// port's line, and towards a standard UNI user at most OC-3.
fn link_cells(role: SignallingRole, line_bps: u64) -> u32 {
    let cells = u32::try_from(line_bps / (53 * 8)).unwrap_or(u32::MAX);
    match role {
        SignallingRole::Uni => cells.min(OC3_PAYLOAD_CELLS),
        SignallingRole::Host | SignallingRole::Switch => cells,
    }
}
