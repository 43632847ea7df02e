//! sigd's event loop: one thread, one mio poll over the application socket, every
//! application connection, the UDP signalling socket and a signal pipe. It reads
//! the clock, the sockets and SO_PEERCRED, feeds what it read to the
//! [`Core`](crate::core::Core), and carries out what the core's `poll_output` returns;
//! every decision is the core's.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::PathBuf;
use std::time::Instant;

use mio::net::{UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Token};
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::core::fair::{self, Conns, Inbox, Ready, BUDGET, OUT_HIGH};
use crate::core::{AppId, Bucket, Core, HostFacts, Output};
use crate::metrics::http::MetricsServer;
use crate::sscop_sq;
use app::AppConn;

mod app;
mod known_peers;
mod measure;
mod ticket_key;

/// The Noise identity files, kept by `natm switch` as sigd keeps its own: the
/// static key (0600, made on first start, refused if others may read it) and the
/// known-peers file of keys pinned on first use.
pub mod identity {
    use std::collections::HashMap;
    use std::io;
    use std::net::SocketAddr;
    use std::path::Path;

    use natm_proto::sig::noise::PublicKey;

    /// The private key in `path`, made first if there is none.
    pub fn load_or_create_key(path: &Path) -> io::Result<[u8; 32]> {
        super::ticket_key::load_or_create_named(path, "Noise key")
    }

    /// The pins in `path` (none if it does not exist).
    pub fn load_pins(path: &Path) -> io::Result<HashMap<SocketAddr, PublicKey>> {
        super::known_peers::load(path)
    }

    /// Appends `pins` to `path` (made 0600).
    pub fn append_pins(path: &Path, pins: &[(SocketAddr, PublicKey)]) -> io::Result<()> {
        super::known_peers::append(path, pins)
    }
}

/// The errno values the accept loop tells apart.
mod libc_errno {
    pub(super) const EMFILE: i32 = rustix::io::Errno::MFILE.raw_os_error();
    pub(super) const ENFILE: i32 = rustix::io::Errno::NFILE.raw_os_error();
}

const LISTENER: Token = Token(0);
const SIGNALS: Token = Token(1);
const SIGNALLING: Token = Token(2);
/// `--metrics`: its listener and connections (`metrics::http::TOKENS` of them).
const METRICS: Token = Token(3);
const FIRST_APP: usize = 16;
const _: () = assert!(METRICS.0 + crate::metrics::http::TOKENS <= FIRST_APP);

/// A stop request: set by SIGTERM/SIGINT (or by a test) to end [`Daemon::run`].
#[derive(Debug, Clone, Default)]
pub struct Stop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Stop {
    /// Ask the daemon to stop.
    pub fn stop(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    /// Whether a stop was asked for.
    pub fn stopped(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A pipe that SIGTERM and SIGINT write to, registered readable on `registry`
/// under `token` (natm-switchd's loop uses it too).
pub fn signal_pipe(registry: &mio::Registry, token: Token) -> io::Result<UnixStream> {
    let (rx, tx) = StdUnixStream::pair()?;
    rx.set_nonblocking(true)?;
    for s in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::low_level::pipe::register(s, tx.try_clone()?)?;
    }
    let mut rx = UnixStream::from_std(rx);
    registry.register(&mut rx, token, Interest::READABLE)?;
    Ok(rx)
}

/// The daemon.
#[derive(Debug)]
pub struct Daemon {
    core: Core,
    poll: Poll,
    listener: UnixListener,
    signalling: mio::net::UdpSocket,
    signals: Option<UnixStream>,
    apps: HashMap<usize, AppConn>,
    next_token: usize,
    stop: Stop,
    socket_path: PathBuf,
    /// The core's time zero.
    epoch: Instant,
    spare: SpareFd,
    /// When accept last failed for want of descriptors (logged once a second).
    fd_exhausted_logged: Option<Instant>,
    /// Application connections with input to serve, round-robin (`core::fair`).
    ready: Ready,
    /// Lines about applications dropped for not reading.
    drop_log: Bucket,
    /// Where pinned peer keys are appended (`[peers] known_peers_file`).
    known_peers_file: std::path::PathBuf,
    /// Where the last BGN N(SQ) of each link is kept (`sscop_sq`).
    sscop_sq_file: std::path::PathBuf,
    /// `/metrics`, if configured.
    metrics: Option<MetricsServer>,
}

/// 32 bytes from the OS for the core's ids and cookies.
fn os_seed() -> [u8; 32] {
    let mut b = [0u8; 32];
    if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).is_err() {
        // No getrandom: the std hasher's per-process keys, mixed with the time.
        use std::hash::{BuildHasher, RandomState};
        for chunk in b.chunks_mut(8) {
            let v = RandomState::new().hash_one(Instant::now()).to_be_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
    b
}

/// `e` with the path it concerns and, when it is a permission error, what to do.
fn with_path(e: io::Error, what: &str, path: &std::path::Path) -> io::Error {
    let fix = if e.kind() == io::ErrorKind::PermissionDenied {
        "; run sigd as root, or give it a --socket in a directory you can write \
         (e.g. /tmp/natm/sigd.sock) and point applications at it with $NATM_SIGD"
    } else {
        ""
    };
    io::Error::new(e.kind(), format!("{what} {}: {e}{fix}", path.display()))
}

/// Give the application socket its configured permission bits and group
/// (`socket_mode`, `socket_group`): who may connect at all. What each user may do
/// once connected is the core's `[[access]]` policy.
fn set_socket_access(path: &std::path::Path, mode: u32, group: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(|e| with_path(e, &format!("cannot give group {gid} to"), path))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| with_path(e, &format!("cannot set mode {mode:o} on"), path))
}

/// A descriptor held in reserve: when accept fails for want of descriptors (EMFILE,
/// ENFILE) it is closed for a moment so that the waiting connection can be
/// accepted, told why and closed, instead of staying in the backlog with its
/// application blocked (the listening socket is edge-triggered: a connection left
/// there would never be reported again).
#[derive(Debug)]
struct SpareFd(Option<std::fs::File>);

impl SpareFd {
    fn new() -> SpareFd {
        SpareFd(std::fs::File::open("/dev/null").ok())
    }
}

impl Daemon {
    /// The directories sigd writes while it runs (the socket's, the known-peers
    /// file's, the SSCOP record's), for [`crate::confine::confine`].
    pub fn needs(&self) -> crate::confine::Needs {
        let mut n = crate::confine::Needs::default();
        for f in [
            &self.socket_path,
            &self.known_peers_file,
            &self.sscop_sq_file,
        ] {
            n.file(f);
        }
        n
    }

    /// Gives up without running (its start failed after [`Daemon::bind`]): the socket
    /// is removed, so no stale one is left for the next start.
    pub fn abandon(self) {
        let _ = std::fs::remove_file(&self.socket_path);
    }

    /// Bind the application socket and the signalling socket, and measure the TPDU
    /// cost unless the configuration gives it.
    pub fn bind(cfg: Config) -> io::Result<Daemon> {
        let poll = Poll::new()?;
        // Listening before the application socket is: whoever sees sigd's socket
        // can scrape it.
        let metrics = match cfg.metrics {
            Some(a) => Some(MetricsServer::bind(a, poll.registry(), METRICS)?),
            None => None,
        };
        // The signalling port too: whoever sees sigd's socket may take it for a sigd
        // that serves, and a peer's datagram (or a test's) sent to a port not yet
        // bound is lost to an ICMP port unreachable. Bound here, a busy port also
        // fails the start before any socket file exists.
        let signalling = mio::net::UdpSocket::bind(cfg.signalling).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot bind the signalling endpoint {}: {e}",
                    cfg.signalling
                ),
            )
        })?;
        let path = cfg.socket.clone();
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| with_path(e, "cannot create the socket's directory", dir))?;
            }
        }
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            // Only a socket is sigd's to replace: anything else at the path (a file
            // given as --socket by mistake, a directory, a symlink) is left alone.
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and is not a socket: sigd will not remove it; give \
                         --socket another path",
                        path.display()
                    ),
                ));
            }
            // A live sigd answers on it; a dead one left a file behind.
            if StdUnixStream::connect(&path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "another sigd is serving {}; stop it, or give this one another --socket",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(&path)
                .map_err(|e| with_path(e, "cannot remove the stale socket", &path))?;
        }
        let listener =
            UnixListener::bind(&path).map_err(|e| with_path(e, "cannot listen on", &path))?;
        // From here, a failure (the ticket key unreadable) removes the socket just
        // made: no stale socket is left for the next start.
        Self::bind_rest(cfg, poll, listener, signalling, path.clone(), metrics).inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })
    }

    /// [`Daemon::bind`] once the application socket is bound.
    fn bind_rest(
        cfg: Config,
        poll: Poll,
        mut listener: UnixListener,
        mut signalling: mio::net::UdpSocket,
        path: PathBuf,
        metrics: Option<MetricsServer>,
    ) -> io::Result<Daemon> {
        set_socket_access(&path, cfg.socket_mode, cfg.socket_group)?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        poll.registry()
            .register(&mut signalling, SIGNALLING, Interest::READABLE)?;
        let cost = match cfg.tpdu_cost_ns {
            Some(c) => c,
            None => {
                let c = measure::tpdu_cost()?;
                info!(
                    tpdu_cost_ns = c,
                    "measured the PSB send path per 4 KiB TPDU"
                );
                c
            }
        };
        let facts = HostFacts {
            signalling: signalling.local_addr()?,
            tpdu_cost_ns: cost,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let key = ticket_key::load_or_create(&cfg.ticket_key_file)?;
        let noise_key = ticket_key::load_or_create_named(&cfg.noise_key_file, "Noise key")?;
        let pins = known_peers::load(&cfg.known_peers_file)?;
        let known_peers_file = cfg.known_peers_file.clone();
        let sscop_sq_file = cfg.sscop_sq_file.clone();
        let last_sq = sscop_sq::load(&sscop_sq_file);
        let mut core = Core::new(cfg, facts, os_seed());
        core.set_ticket_key(key);
        core.set_identity(noise_key, pins);
        core.set_last_sq(last_sq);
        info!(
            key = %natm_proto::sig::noise::key_to_text(&core.public_key()),
            "Noise static key for signalling links"
        );
        Ok(Daemon {
            core,
            poll,
            listener,
            signalling,
            signals: None,
            apps: HashMap::new(),
            next_token: FIRST_APP,
            stop: Stop::default(),
            socket_path: path,
            epoch: Instant::now(),
            spare: SpareFd::new(),
            fd_exhausted_logged: None,
            ready: Ready::new(),
            drop_log: Bucket::new(10),
            known_peers_file,
            sscop_sq_file,
            metrics,
        })
    }

    /// This host's Noise public key for signalling links (base64) from `key_file`
    /// (`[peers] key_file`), created first if there is none (`natm sigd --show-key`).
    pub fn show_key(key_file: &std::path::Path) -> io::Result<String> {
        let key = ticket_key::load_or_create_named(key_file, "Noise key")?;
        let public = natm_proto::sig::noise::public_key(&key);
        Ok(natm_proto::sig::noise::key_to_text(&public))
    }

    /// A handle that stops [`Daemon::run`].
    pub fn stopper(&self) -> Stop {
        self.stop.clone()
    }

    /// The signalling endpoint actually bound.
    pub fn signalling_addr(&self) -> io::Result<SocketAddr> {
        self.signalling.local_addr()
    }

    /// Where `/metrics` is served, if it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::local_addr)
    }

    /// Stop on SIGTERM and SIGINT (the signals write to a pipe the loop watches).
    pub fn handle_signals(&mut self) -> io::Result<()> {
        self.signals = Some(signal_pipe(self.poll.registry(), SIGNALS)?);
        Ok(())
    }

    /// The clock, as the core counts time (never zero).
    fn now(&self) -> natm_proto::time::Instant {
        let ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        natm_proto::time::Instant::from_nanos(ns + 1)
    }

    /// Serve until stopped; then release every call and remove the socket file.
    pub fn run(mut self) -> io::Result<()> {
        info!(
            socket = %self.socket_path.display(),
            signalling = %self.signalling.local_addr()?,
            addresses = ?self.core.local_addresses().iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            capacity_bps = self.core.capacity_bps(),
            metrics = ?self.metrics_addr(),
            "sigd serving"
        );
        let now = self.now();
        self.core.start(now);
        self.drain();
        let mut events = Events::with_capacity(256);
        while !self.stop.stopped() {
            // Connections with input left from their last turn: poll without sleeping.
            let timeout = if self.ready.is_empty() {
                let core = self
                    .core
                    .poll_timeout()
                    .map(|t| t.saturating_duration_since(self.now()));
                let scrape = self
                    .metrics
                    .as_ref()
                    .and_then(MetricsServer::poll_timeout)
                    .map(|t| t.saturating_duration_since(Instant::now()));
                core.into_iter().chain(scrape).min()
            } else {
                Some(std::time::Duration::ZERO)
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept_apps(),
                    SIGNALS => {
                        info!("signal received: stopping");
                        self.stop.stop();
                    }
                    SIGNALLING => self.read_signalling(),
                    t if self.metrics.as_ref().is_some_and(|m| m.owns(t)) => self.scrape(t),
                    Token(t) => {
                        if ev.is_readable() || ev.is_read_closed() {
                            if let Some(c) = self.apps.get_mut(&t) {
                                c.inbox.wake();
                                self.ready.push(t as u64);
                            }
                        }
                        if ev.is_writable() {
                            self.flush_app(t);
                        }
                    }
                }
            }
            // Every ready connection's turn, a budget each (`core::fair`).
            let mut ready = std::mem::take(&mut self.ready);
            fair::serve_round(&mut ready, &mut self, BUDGET);
            self.ready = ready;
            let now = self.now();
            self.core.handle_timeout(now);
            self.drain();
            self.flush_all();
            if let Some(m) = self.metrics.as_mut() {
                m.handle_timeout(self.poll.registry(), Instant::now());
            }
        }
        self.shutdown();
        Ok(())
    }

    /// An event of `/metrics`: the exposition is made from the core's counters now.
    fn scrape(&mut self, t: Token) {
        let Some(m) = self.metrics.as_mut() else {
            return;
        };
        let core = &self.core;
        m.handle_event(t, self.poll.registry(), Instant::now(), || {
            let (stat, calls, listeners) = core.stat_summary();
            crate::metrics::render(&stat, &calls, listeners)
        });
    }

    fn shutdown(&mut self) {
        let now = self.now();
        self.core.shutdown(now);
        self.drain();
        self.flush_all();
        let _ = std::fs::remove_file(&self.socket_path);
        info!("sigd stopped");
    }

    /// Carry out what the core asks, in its order.
    fn drain(&mut self) {
        let pins = self.core.take_new_pins();
        if !pins.is_empty() {
            if let Err(e) = known_peers::append(&self.known_peers_file, &pins) {
                warn!(file = %self.known_peers_file.display(), error = %e, "cannot record pinned peer keys: they hold until sigd stops");
            }
        }
        if let Some(last) = self.core.take_sq_record() {
            if let Err(e) = sscop_sq::store(&self.sscop_sq_file, &last) {
                warn!(file = %self.sscop_sq_file.display(), error = %e, "cannot record the links' SSCOP sequence values: a restart picks random ones");
            }
        }
        while let Some(o) = self.core.poll_output() {
            match o {
                Output::ToApp(app, m) => self.send(app, &m),
                Output::Flush(app) => {
                    if let Ok(t) = usize::try_from(app.0) {
                        self.flush_app(t);
                    }
                }
                Output::ToPeer(peer, d) => {
                    if let Err(e) = self.signalling.send_to(&d, peer) {
                        // SSCOP retransmits what is lost here.
                        debug!(%peer, error = %e, "signalling send failed");
                    }
                }
                Output::CloseApp(app) => {
                    if let Ok(t) = usize::try_from(app.0) {
                        if let Some(c) = self.apps.get_mut(&t) {
                            c.closing = true;
                        }
                        self.flush_app(t);
                    }
                }
            }
        }
    }

    // ---- application connections ----------------------------------------------------

    fn accept_apps(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    let t = self.next_token;
                    self.next_token += 1;
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, Token(t), Interest::READABLE)
                        .is_err()
                    {
                        continue;
                    }
                    let c = AppConn::new(stream);
                    let creds = c.creds;
                    self.apps.insert(t, c);
                    let now = self.now();
                    self.core.app_connected(now, AppId(t as u64), creds);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc_errno::EMFILE) | Some(libc_errno::ENFILE)
                    ) =>
                {
                    if !self.refuse_for_want_of_fds(&e) {
                        return;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "accept on the application socket failed");
                    return;
                }
            }
        }
    }

    /// Out of descriptors: free the spare one, accept the waiting connection, tell
    /// it why, close it, and take the spare back. False if nothing could be done
    /// (then the loop stops accepting until the next event; nothing spins).
    fn refuse_for_want_of_fds(&mut self, e: &io::Error) -> bool {
        let now = Instant::now();
        if self
            .fd_exhausted_logged
            .is_none_or(|t| now.duration_since(t) >= std::time::Duration::from_secs(1))
        {
            warn!(error = %e, "out of file descriptors: refusing applications until some close");
            self.fd_exhausted_logged = Some(now);
        }
        if self.spare.0.take().is_none() {
            return false;
        }
        let accepted = self.listener.accept();
        let ok = accepted.is_ok();
        if let Ok((stream, _)) = accepted {
            let refusal = natm_proto::wire::ipc::Message::Error {
                cause: crate::core::cause_resources(),
                detail: format!(
                    "sigd is out of file descriptors ({e}); try again when applications have \
                     closed, or raise its limit (ulimit -n / LimitNOFILE)"
                ),
            };
            // Written, then closed at once: no lingering, since this descriptor is
            // the spare and the next refusal needs it. A Unix stream keeps what was
            // written before a close readable to the peer (even when its own write
            // then fails with EPIPE), so the application still reads why
            // (`Message::Error`; docs/decisions/0032-operator-basics.md).
            let mut s: StdUnixStream = stream.into();
            let _ = std::io::Write::write_all(&mut s, &refusal.to_bytes());
            let _ = s.shutdown(std::net::Shutdown::Both);
            self.core_count_refused();
        }
        self.spare = SpareFd::new();
        ok
    }

    fn core_count_refused(&mut self) {
        self.core.count_refused_connection();
    }

    /// Read every signalling datagram queued and hand each to the core.
    fn read_signalling(&mut self) {
        let mut buf = [0u8; 9216];
        loop {
            match self.signalling.recv_from(&mut buf) {
                Ok((n, from)) => {
                    let now = self.now();
                    self.core.handle_peer(now, from, &buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    fn send(&mut self, app: AppId, m: &natm_proto::wire::ipc::Message) {
        let Ok(t) = usize::try_from(app.0) else {
            return;
        };
        let over = match self.apps.get_mut(&t) {
            Some(c) => !c.send(m),
            None => return,
        };
        if over {
            let now = self.now();
            if let Some(suppressed) = self.drop_log.allow(now) {
                warn!(
                    conn = t,
                    suppressed, "application does not read its sigd socket: dropping it"
                );
            }
            self.drop_app(t);
        }
    }

    fn flush_app(&mut self, t: usize) {
        let Some(c) = self.apps.get_mut(&t) else {
            return;
        };
        let had = c.want_write;
        let ok = c.flush();
        if !ok || (c.closing && c.drained()) {
            self.drop_app(t);
            return;
        }
        // Back-pressure released: its input is served again.
        if c.queued() <= OUT_HIGH && c.inbox.take_blocked() {
            self.ready.push(t as u64);
        }
        if c.want_write != had {
            let interest = if c.want_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let _ = self
                .poll
                .registry()
                .reregister(&mut c.stream, Token(t), interest);
        }
    }

    fn flush_all(&mut self) {
        let ts: Vec<usize> = self.apps.keys().copied().collect();
        for t in ts {
            self.flush_app(t);
        }
    }

    /// The connection is gone (closed, crashed, or dropped): the core releases what
    /// the application held.
    fn drop_app(&mut self, t: usize) {
        let Some(mut c) = self.apps.remove(&t) else {
            return;
        };
        let _ = c.flush();
        self.ready.remove(t as u64);
        let _ = self.poll.registry().deregister(&mut c.stream);
        let now = self.now();
        self.core.app_closed(now, AppId(t as u64));
    }
}

/// The loop's side of `core::fair`: the application connections, and the core.
impl Conns for Daemon {
    type Stream = UnixStream;

    fn conn(&mut self, t: u64) -> Option<(&mut Inbox, &mut UnixStream, usize)> {
        let c = self.apps.get_mut(&usize::try_from(t).ok()?)?;
        if c.closing {
            return None;
        }
        let queued = c.queued();
        Some((&mut c.inbox, &mut c.stream, queued))
    }

    fn deliver(&mut self, t: u64, m: natm_proto::wire::ipc::Message) {
        let now = self.now();
        self.core.handle_app(now, AppId(t), m);
        self.drain();
    }

    fn closed(&mut self, t: u64) {
        if let Ok(t) = usize::try_from(t) {
            self.drop_app(t);
        }
    }

    fn garbage(&mut self, t: u64, e: natm_proto::wire::ipc::IpcError) {
        let now = self.now();
        self.core.app_malformed(now, AppId(t), &e);
        self.drain();
    }
}
