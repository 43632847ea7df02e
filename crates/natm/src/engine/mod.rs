//! The transport entity in the application's process (seed 000 §5): the PSBs of every
//! VC, the adaptor's sockets, the timers and the task scheduler, driven by the
//! application's own threads where they are waiting anyway and by one driver thread
//! for everything else.
//!
//! seed 000 §7's lesson — waking the scheduler on events rather than polling took the
//! round trip from 120 ms to 1.44 ms — is built in: nothing here polls on a period.
//! The driver sleeps in epoll until a socket is readable, a timer is due, or another
//! thread hands it work; application threads send inline when no higher-priority work
//! waits (the paper's kernel could not; a user-space stack can).

mod app;
mod chunk;
mod conn;
mod driver;
mod events;
mod gather;
mod host_port;
mod late_path;
mod link;
mod listener;
mod oam;
mod path_probe;
mod rx_order;
mod send_buffers;
mod send_pool;
mod smoother;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

pub(crate) use app::{copy_piece, hold_piece, PushPiece};
pub use chunk::Chunk;
pub(crate) use conn::{Conn, Life, OnGone, Which};
pub use events::{ConnEvent, EVENT_QUEUE};
pub use host_port::PortStats;
pub(crate) use link::{Link, UdpLink};
pub use link::{LinkMode, Network, DEFAULT_TRAIN_CELLS};
pub(crate) use listener::ListenerShared;
pub(crate) use oam::MAX_OUTSTANDING as MAX_OAM_PROBES;
pub use send_pool::{SendPoolStats, DEFAULT_SEND_POOL};

use crate::adaptor::RecvBatch;
use crate::sched::Scheduler;
use crate::sync::{Level, OrderedMutex as Mutex};
use crate::time::Instant;

/// High and low watermarks on a VC's undelivered receive data, in bytes (seed 000
/// §6.2.2): above `high` the engine stops reading the VC's socket, so the kernel
/// drops the excess before any work is wasted on it; below `low` it reads again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermarks {
    /// Stop reading above this many undelivered bytes.
    pub high: usize,
    /// Resume below this many.
    pub low: usize,
}

impl Watermarks {
    /// The watermarks as they apply to a VC whose receive buffer holds `rcv_buf`
    /// bytes: the high one at most half the buffer, the low one scaled with it. A
    /// high watermark above the buffer would never engage — the PSB would drop for
    /// want of buffer first, after the work of reading and reassembling (a small-TPDU
    /// VC's buffer, `tpdu=1024` × 256, is 256 KiB, below the default 512 KiB).
    pub fn for_buffer(self, rcv_buf: usize) -> Watermarks {
        let cap = (rcv_buf / 2).max(1);
        if self.high <= cap {
            return self;
        }
        // low / high kept: low' = low × cap / high, without overflow.
        let low = (self.low as u128 * cap as u128 / self.high.max(1) as u128) as usize;
        Watermarks { high: cap, low }
    }
}

/// How a host's VCs meet the kernel's UDP (issue 30; decisions
/// `0030-one-port-per-host`, `0030-shared-port-loses-per-vc-isolation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ports {
    /// A UDP socket per connection end: the kernel demultiplexes, each VC's queue is
    /// a socket buffer, and a waiting application thread sleeps in its own socket.
    /// The default: a flood on one VC fills only that VC's socket buffer.
    #[default]
    PerVc,
    /// One UDP socket per local address for every VC of the host, as a seed host has
    /// one adaptor (seed 000 §5): the engine's driver reads it in batches and
    /// demultiplexes by VCI and cookie (`engine::host_port`). A call opens no socket.
    /// Frame mode only: a cell-mode link ([`LinkMode::Cell`]) keeps a socket per VC
    /// end ([`EngineConfig::ports_in_use`]). The VCs share the socket's buffer in
    /// the kernel: what one VC floods in beyond the reader's pace drops the others'
    /// frames too.
    PerHost,
}

impl std::str::FromStr for Ports {
    type Err = String;

    /// `vc` (a socket per VC end) or `host` (one per host).
    fn from_str(s: &str) -> Result<Ports, String> {
        match s {
            "vc" => Ok(Ports::PerVc),
            "host" => Ok(Ports::PerHost),
            _ => Err(format!("ports {s:?}: vc or host")),
        }
    }
}

/// How a host's engine runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Socket receive buffer, bytes (each connection's queue in the kernel).
    pub socket_rcvbuf: usize,
    /// Socket send buffer, bytes.
    pub socket_sndbuf: usize,
    /// Receive watermarks; `None` reads and processes everything (livelock-prone).
    pub watermarks: Option<Watermarks>,
    /// Spin on the socket instead of sleeping in `recv` (a core for microseconds).
    pub busy_poll: bool,
    /// Send from the application's thread when no higher-priority work waits; off,
    /// every send is a task for the driver thread, as in the paper's kernel.
    pub inline_send: bool,
    /// The adaptor: UDP sockets, or in-process mem links.
    pub network: Network,
    /// Nice value the driver thread takes once the host opens a guaranteed VC: the
    /// driver paces guaranteed VCs (their leaky buckets' timers), and below the
    /// application's threads it still wakes on time while the host's own best-effort
    /// senders flood. Only then: a driver above the application's threads preempts a
    /// receiving application on every arrival, which doubled a reliable VC's round
    /// trip (measured). Needs CAP_SYS_NICE to go below 0; without it the driver keeps
    /// the default. `None` leaves the thread alone.
    pub driver_nice: Option<i32>,
    /// Pin the driver thread to these CPUs (`sched_setaffinity`); `None` leaves it
    /// where the kernel puts it. For experiments that give a host fewer CPUs than the
    /// machine has (receive livelock on one CPU); [`pin_current_thread`] pins an
    /// application thread the same way.
    pub driver_cpus: Option<Vec<usize>>,
    /// How UDP links carry frames: one per datagram (`Frame`, the default) or as AAL5
    /// cells in trains (`Cell`). Both ends of a connection must agree; the mem
    /// adaptor always carries frames.
    pub link_mode: LinkMode,
    /// The send buffer pool all of the host's sending VCs draw on, octets (seed 001
    /// §6; [`DEFAULT_SEND_POOL`]): each VC queues at most its own send buffer and all
    /// of them together at most this. A send that finds it spent waits (or hears
    /// [`WouldBlock::SendPool`](crate::WouldBlock::SendPool)) until another VC's
    /// octets are acknowledged.
    pub send_pool: usize,
    /// A socket per VC end, or one per host ([`Ports`]).
    pub ports: Ports,
}

/// Pin the calling thread to `cpus` (Linux `sched_setaffinity`). `InvalidInput` for an
/// empty list or a CPU number beyond what the kernel can name.
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    use rustix::thread::CpuSet;
    if cpus.is_empty() || cpus.iter().any(|&c| c >= CpuSet::MAX_CPU) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot pin to CPUs {cpus:?}: give CPU numbers below the machine's count"),
        ));
    }
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    rustix::thread::sched_setaffinity(None, &set).map_err(io::Error::from)
}

/// The CPUs the calling thread may run on now.
pub fn current_cpus() -> io::Result<Vec<usize>> {
    let set = rustix::thread::sched_getaffinity(None).map_err(io::Error::from)?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| set.is_set(c))
        .collect())
}

impl EngineConfig {
    /// The ports the engine uses: [`EngineConfig::ports`], except that a cell-mode
    /// link's trains carry cells, not the VC-headed frames a host port routes, so it
    /// keeps a socket per VC end.
    pub fn ports_in_use(&self) -> Ports {
        match self.link_mode {
            LinkMode::Frame => self.ports,
            LinkMode::Cell { .. } => Ports::PerVc,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            socket_rcvbuf: 4 << 20,
            socket_sndbuf: 4 << 20,
            // Below a VC's default 1 MiB receive buffer, so they engage before the
            // PSB has to drop.
            watermarks: Some(Watermarks {
                high: 512 << 10,
                low: 128 << 10,
            }),
            busy_poll: false,
            inline_send: true,
            network: Network::Udp,
            driver_nice: Some(-10),
            driver_cpus: None,
            link_mode: LinkMode::Frame,
            send_pool: DEFAULT_SEND_POOL,
            ports: Ports::default(),
        }
    }
}

/// The engine's clock: nanoseconds since the engine started (never zero).
#[derive(Debug)]
pub(crate) struct Clock {
    start: std::time::Instant,
}

impl Clock {
    pub(crate) fn now(&self) -> Instant {
        Instant::from_nanos(self.start.elapsed().as_nanos() as u64 + 1)
    }
}

/// Another descriptor the driver watches for its owner: the host's sigd IPC stream
/// (`ulib::sigd`), so that one thread, the driver, is the host's whole reactor. The
/// engine holds it weakly: watching never keeps the owner alive.
pub(crate) trait Source: Send + Sync + std::fmt::Debug {
    /// The descriptor turned readable (an edge): read what is queued, without blocking
    /// and without taking a lock another thread may hold for long (`try_lock`).
    /// Called by the driver with no lock held.
    fn on_readable(&self);

    /// The periodic report is due ([`Engine::want_reports`]): send it, and say
    /// whether another is wanted a [`REPORT_INTERVAL`] later. Called by the driver
    /// with no lock held.
    fn report(&self) -> bool {
        false
    }
}

/// How often a source's periodic report ([`Source::report`]) runs while it wants
/// one: sigd's view of each call's counters (`natm stat`) is at most this old.
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// The shared state of one host's engine.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) clock: Clock,
    pub(crate) cfg: EngineConfig,
    registry: mio::Registry,
    /// Shared with the driver, which keeps it open until it has seen the engine go:
    /// closing an eventfd takes its pending event out of the epoll set, so the wake-up
    /// `Drop` sends would otherwise be lost if the engine's own copy closed before the
    /// driver collected it, and the driver would sleep for ever (found by
    /// `tests/host_reactor.rs`: one dropped host in three kept its driver thread).
    waker: Arc<mio::Waker>,
    pub(crate) conns: Mutex<HashMap<usize, Arc<Conn>>>,
    /// The engine's hold on itself while connections the application dropped are still
    /// finishing (see [`Engine::linger`]); taken back with the last connection.
    keep: Mutex<Option<Arc<Engine>>>,
    /// Connections taken out of `conns` whose last task (`Conn::on_gone`: the
    /// release to sigd) has not run yet; `Host::linger` waits for these too, or a
    /// process that exits right after it would end such a call as a crash does.
    forgetting: AtomicUsize,
    pub(crate) listeners: Mutex<HashMap<usize, Arc<ListenerShared>>>,
    /// Other descriptors the driver watches, by token ([`Engine::watch`]).
    sources: Mutex<HashMap<usize, Weak<dyn Source>>>,
    timers: Mutex<BinaryHeap<Reverse<(u64, usize)>>>,
    /// When the driver will wake by itself (ns of engine time); 0 while it is awake.
    sleep_until: Arc<AtomicU64>,
    /// The driver's timer (nanoseconds, where epoll's timeout has milliseconds), set
    /// by the driver and brought forward by any thread with an earlier deadline
    /// ([`driver::set_timer_at`]); without one, epoll's timeout and the eventfd.
    timer: Option<std::os::fd::OwnedFd>,
    /// When the sources' periodic reports are due (ns of engine time); 0: none wanted.
    report_at: AtomicU64,
    /// Sockets left out of the driver's set between `recv` calls, and their sweep.
    pub(crate) parked: conn::Parked,
    pub(crate) sched: Mutex<Scheduler<usize>>,
    /// How many levels from the top have waiting tasks (0: none): a mirror of the
    /// scheduler kept so application threads decide on inline sends without taking
    /// the scheduler's lock, which the driver holds while a round of tasks runs.
    busy_levels: AtomicUsize,
    next_token: AtomicUsize,
    pub(crate) shutdown: AtomicBool,
    /// The driver thread, to raise its priority when a guaranteed VC opens.
    driver_tid: Mutex<Option<rustix::process::Pid>>,
    driver_raised: AtomicBool,
    /// Receive batches of threads that read no longer (64 KiB each).
    buffers: Mutex<Vec<RecvBatch>>,
    /// Receive areas that came home from the connections they were lent to.
    pub(crate) rx_areas: Arc<natm_udp::AreaPool>,
    /// The send buffer pool every sending VC draws on (`EngineConfig::send_pool`).
    pub(crate) send_pool: Arc<send_pool::SendPool>,
    /// The buffers large sends copy into, kept between sends (`send_buffers`).
    pub(crate) send_buffers: Arc<send_buffers::SendBuffers>,
    /// What the sending VCs to each peer host learnt of its late ACKs (`late_path`).
    pub(crate) late_paths: late_path::LatePaths,
    /// The host's one-per-address UDP ports (`Ports::PerHost`; empty otherwise).
    pub(crate) host_ports: host_port::HostPorts,
}

/// Receive batches kept for reuse; more concurrent readers allocate their own.
const MAX_POOLED_BATCHES: usize = 64;

const WAKER_TOKEN: usize = 0;
const TIMER_TOKEN: usize = 1;

impl Engine {
    /// Start an engine and its driver thread.
    pub(crate) fn start(cfg: EngineConfig) -> io::Result<Arc<Engine>> {
        let poll = mio::Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(WAKER_TOKEN))?);
        let driver_waker = waker.clone();
        let send_pool = send_pool::SendPool::new(cfg.send_pool);
        let timer = driver::timerfd(&poll);
        let eng = Arc::new(Engine {
            clock: Clock {
                start: std::time::Instant::now(),
            },
            cfg,
            registry,
            waker,
            conns: Mutex::new(Level::Conns, HashMap::new()),
            keep: Mutex::new(Level::Leaf, None),
            forgetting: AtomicUsize::new(0),
            listeners: Mutex::new(Level::Leaf, HashMap::new()),
            sources: Mutex::new(Level::Leaf, HashMap::new()),
            timers: Mutex::new(Level::Leaf, BinaryHeap::new()),
            sleep_until: Arc::new(AtomicU64::new(0)),
            timer,
            report_at: AtomicU64::new(0),
            parked: conn::Parked::new(),
            sched: Mutex::new(Level::Scheduler, Scheduler::new()),
            busy_levels: AtomicUsize::new(0),
            next_token: AtomicUsize::new(TIMER_TOKEN + 1),
            shutdown: AtomicBool::new(false),
            driver_tid: Mutex::new(Level::Leaf, None),
            driver_raised: AtomicBool::new(false),
            buffers: Mutex::new(Level::Leaf, Vec::new()),
            rx_areas: natm_udp::AreaPool::new(natm_udp::areas::MAX_HOME, usize::MAX),
            send_pool,
            send_buffers: send_buffers::SendBuffers::new(),
            late_paths: late_path::LatePaths::new(),
            host_ports: host_port::HostPorts::new(),
        });
        let weak = Arc::downgrade(&eng);
        let cpus = eng.cfg.driver_cpus.clone();
        let (pinned_tx, pinned) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("natm-driver".into())
            .spawn(move || {
                let pin = cpus.as_deref().map_or(Ok(()), pin_current_thread);
                let failed = pin.is_err();
                let _ = pinned_tx.send(pin.map(|()| rustix::thread::gettid()));
                if !failed {
                    driver::run(weak, poll)
                }
                drop(driver_waker);
            })?;
        let tid = pinned
            .recv()
            .map_err(|_| io::Error::other("the driver thread died at start"))??;
        *eng.driver_tid.lock() = Some(tid);
        Ok(eng)
    }

    /// The driver's waker.
    pub(crate) fn waker(&self) -> Arc<mio::Waker> {
        self.waker.clone()
    }

    /// Wake the driver now.
    pub(crate) fn wake(&self) {
        let _ = self.waker.wake();
    }

    pub(crate) fn token(&self) -> usize {
        self.next_token.fetch_add(1, Ordering::Relaxed)
    }

    /// Watch a socket for the driver.
    pub(crate) fn register(&self, fd: std::os::fd::RawFd, token: usize) -> io::Result<()> {
        self.registry.register(
            &mut mio::unix::SourceFd(&fd),
            mio::Token(token),
            mio::Interest::READABLE,
        )
    }

    /// Stop watching a socket. An error means it was not watched.
    pub(crate) fn deregister(&self, fd: std::os::fd::RawFd) -> io::Result<()> {
        self.registry.deregister(&mut mio::unix::SourceFd(&fd))
    }

    /// Watch `fd` under `token` (from [`Engine::token`]) for `source`: the driver calls
    /// [`Source::on_readable`] on each readiness edge while `source` lives.
    pub(crate) fn watch(
        &self,
        fd: std::os::fd::RawFd,
        token: usize,
        source: Weak<dyn Source>,
    ) -> io::Result<()> {
        self.sources.lock().insert(token, source);
        let r = self.register(fd, token);
        if r.is_err() {
            self.sources.lock().remove(&token);
        }
        r
    }

    /// Stop watching a source's descriptor for good.
    pub(crate) fn unwatch(&self, fd: std::os::fd::RawFd, token: usize) {
        let _ = self.deregister(fd);
        self.sources.lock().remove(&token);
    }

    /// The source watched under `token`, if it still lives.
    pub(crate) fn source(&self, token: usize) -> Option<Arc<dyn Source>> {
        let weak = self.sources.lock().get(&token).cloned();
        weak.and_then(|w| w.upgrade())
    }

    /// A source wants its periodic report ([`Source::report`]) from now on: due a
    /// [`REPORT_INTERVAL`] from now unless one is already due. The driver is woken
    /// only if it would otherwise sleep past it.
    pub(crate) fn want_reports(&self) {
        let at = self.clock.now().as_nanos() + REPORT_INTERVAL.as_nanos() as u64;
        if self
            .report_at
            .compare_exchange(0, at, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        self.wake_before(at);
    }

    /// The driver sleeps past `at` (ns of engine time): bring its timer forward from
    /// this thread ([`driver::set_timer_at`]), or wake it if it has no timer. Nothing
    /// to do while it is awake: it looks at the deadlines before it sleeps again.
    fn wake_before(&self, at: u64) {
        let mut sleeping = self.sleep_until.load(Ordering::SeqCst);
        let Some(fd) = &self.timer else {
            if sleeping != 0 && at < sleeping {
                let _ = self.waker.wake();
            }
            return;
        };
        loop {
            if sleeping == 0 || at >= sleeping {
                return;
            }
            match self.sleep_until.compare_exchange_weak(
                sleeping,
                at,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(now) => sleeping = now,
            }
        }
        driver::set_timer_at(self, fd, at);
    }

    /// When the periodic reports are due (ns), if any source wants them.
    pub(crate) fn report_due(&self) -> Option<u64> {
        match self.report_at.load(Ordering::Acquire) {
            0 => None,
            t => Some(t),
        }
    }

    /// Run the sources' reports if they are due by `now` (ns); the driver calls this
    /// with no lock held.
    pub(crate) fn run_reports(&self, now: u64) {
        let due = self.report_at.load(Ordering::Acquire);
        if due == 0 || due > now {
            return;
        }
        if self
            .report_at
            .compare_exchange(due, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let sources: Vec<Arc<dyn Source>> = self
            .sources
            .lock()
            .values()
            .filter_map(|w| w.upgrade())
            .collect();
        let mut again = false;
        for s in sources {
            again |= s.report();
        }
        if again {
            self.want_reports();
        }
    }

    /// A connection wants `handle_timeout` at `deadline` (ns). A heap entry is added
    /// only when the deadline is earlier than the one already armed (a later one is
    /// found when the earlier entry fires), and the driver is woken only if it would
    /// otherwise sleep past it.
    pub(crate) fn arm(&self, conn: &Conn, deadline: u64) {
        if !conn.arm_earlier(deadline) {
            return;
        }
        self.timers.lock().push(Reverse((deadline, conn.token)));
        self.wake_before(deadline);
    }

    /// Hand the driver deferred transmit work for a connection.
    pub(crate) fn defer(&self, conn: &Conn) {
        let mut sched = self.sched.lock();
        sched.schedule(conn.token, conn.level, conn.weight);
        self.mirror(&sched);
        drop(sched);
        let _ = self.waker.wake();
    }

    /// Record which levels have waiting tasks (call with the scheduler locked).
    pub(crate) fn mirror(&self, sched: &Scheduler<usize>) {
        let lens = sched.lengths();
        let top = lens.iter().position(|&n| n > 0).map_or(0, |i| 3 - i);
        self.busy_levels.store(top, Ordering::Release);
    }

    /// Whether higher-priority work than `level` waits in the scheduler.
    pub(crate) fn pending_above(&self, level: crate::sched::Level) -> bool {
        // `busy_levels` = 3 - index of the highest non-empty level.
        let top = self.busy_levels.load(Ordering::Acquire);
        top > 0 && 3 - top < level as usize
    }

    pub(crate) fn take_buffer(&self) -> RecvBatch {
        self.buffers
            .lock()
            .pop()
            .unwrap_or_else(UdpLink::recv_batch)
    }

    pub(crate) fn give_buffer(&self, b: RecvBatch) {
        let mut v = self.buffers.lock();
        if v.len() < MAX_POOLED_BATCHES {
            v.push(b);
        }
    }

    /// The connection with this token, if it is still open.
    pub(crate) fn conn(&self, token: usize) -> Option<Arc<Conn>> {
        self.conns.lock().get(&token).cloned()
    }

    /// A guaranteed VC opened: give the driver its priority (once per engine).
    fn raise_driver(&self) {
        let Some(n) = self.cfg.driver_nice else {
            return;
        };
        if self.driver_raised.swap(true, Ordering::AcqRel) {
            return;
        }
        let tid = *self.driver_tid.lock();
        // Linux: a thread id names one thread for PRIO_PROCESS. Refused without
        // CAP_SYS_NICE: the driver then keeps the default priority.
        let _ = tid.map(|t| rustix::process::setpriority_process(Some(t), n));
    }

    pub(crate) fn add_conn(&self, conn: Arc<Conn>) -> io::Result<()> {
        if conn.level == crate::sched::Level::Guaranteed {
            self.raise_driver();
        }
        conn.link.watch(self, conn.token)?;
        self.conns.lock().insert(conn.token, conn);
        Ok(())
    }

    /// Forget a finished connection.
    /// Keep the engine alive while it still has connections, though the application
    /// dropped its last handle: a connection dropped right after `send`/`close` still
    /// has to get its CLOSE out (it leaves once the data is acknowledged, and may need
    /// retransmitting), as TCP's kernel finishes a connection after close(2). The
    /// engine holds itself until [`Engine::remove_conn`] takes out the last
    /// connection; each finishes within the transport's own timeouts. Called when a
    /// connection is dropped.
    pub(crate) fn linger(self: &Arc<Self>) {
        let conns = self.conns.lock();
        if !conns.is_empty() {
            // Under the connections' lock, so `remove_conn` cannot empty the map in
            // between and leave the engine holding itself for ever.
            *self.keep.lock() = Some(self.clone());
        }
    }

    /// No connection is open or still being forgotten (its release to sigd sent).
    pub(crate) fn is_idle(&self) -> bool {
        let conns = self.conns.lock();
        conns.is_empty() && self.forgetting.load(Ordering::Acquire) == 0
    }

    pub(crate) fn remove_conn(&self, token: usize) {
        let (c, keep) = {
            let mut conns = self.conns.lock();
            let c = conns.remove(&token);
            if c.is_some() {
                // Under the map's lock: `is_idle` never sees the map empty while
                // this connection's release is still to be sent.
                self.forgetting.fetch_add(1, Ordering::AcqRel);
            }
            let keep = if conns.is_empty() {
                self.keep.lock().take()
            } else {
                None
            };
            (c, keep)
        };
        if let Some(c) = c {
            let _ = c.link.unwatch(self);
            {
                let mut sched = self.sched.lock();
                sched.remove(token);
                self.mirror(&sched);
            }
            let gone = c.on_gone.lock().take();
            if let Some(f) = gone {
                (f.0)();
            }
            c.forget();
            self.forgetting.fetch_sub(1, Ordering::AcqRel);
        }
        // The last connection is gone: let the engine go with the last handle (this
        // may be the engine's last reference only if the caller holds another).
        drop(keep);
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The driver holds only a weak reference; wake it so it sees the engine gone.
        let _ = self.waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::Level;

    /// Waits up to 5 s for the driver to sleep with nothing due for 30 s (a thread of
    /// an earlier round may have brought its wake-up forward to a minute away).
    fn driver_asleep(eng: &Engine) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let far = |eng: &Engine| {
            let s = eng.sleep_until.load(Ordering::SeqCst);
            s != 0 && s > eng.clock.now().as_nanos() + 30_000_000_000
        };
        while !far(eng) {
            if std::time::Instant::now() > until {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    #[test]
    fn a_late_setting_of_the_drivers_timer_leaves_the_earlier_deadline() {
        // A thread lowered the driver's wake-up to `soon` and has not set the timer
        // yet; one that lowered it to `late` before sets its timer now. What is left
        // set is `soon`: the driver's wake-up is never moved later than a deadline.
        let eng = Engine::start(EngineConfig::default()).unwrap();
        let fd = eng.timer.as_ref().expect("a timerfd");
        assert!(driver_asleep(&eng));
        let now = eng.clock.now().as_nanos();
        let soon = now + 2_000_000_000;
        eng.sleep_until.store(soon, Ordering::SeqCst);
        driver::set_timer_at(&eng, fd, now + 60_000_000_000);
        let left = rustix::time::timerfd_gettime(fd).unwrap().it_value;
        let left = Duration::new(left.tv_sec as u64, left.tv_nsec as u32);
        assert!(
            !left.is_zero() && left <= Duration::from_secs(2),
            "the timer is {left:?} away"
        );
    }

    #[test]
    fn deadlines_brought_forward_by_many_threads_at_once_all_wake_the_driver() {
        // Each round the driver sleeps with nothing due; four threads bring its
        // wake-up forward at once, one to 1 ms from now (when a report is due), the
        // others to later times. The driver must wake for the earliest: a later
        // setting that won would leave it asleep past the test's 5 s.
        let eng = Engine::start(EngineConfig::default()).unwrap();
        for round in 0..200u64 {
            assert!(driver_asleep(&eng), "round {round}: the driver never slept");
            let now = eng.clock.now().as_nanos();
            let due = now + 1_000_000;
            eng.report_at.store(due, Ordering::SeqCst);
            std::thread::scope(|s| {
                for i in 0..4u64 {
                    let eng = &eng;
                    s.spawn(move || {
                        // The earliest goes first, last or between, by round.
                        let at = if i == round % 4 {
                            due
                        } else {
                            now + (i + 1) * 60_000_000_000
                        };
                        eng.wake_before(at);
                    });
                }
            });
            let until = std::time::Instant::now() + Duration::from_secs(5);
            while eng.report_due().is_some() {
                assert!(
                    std::time::Instant::now() < until,
                    "round {round}: the driver slept past the earliest deadline"
                );
                std::thread::yield_now();
            }
        }
    }

    #[test]
    fn pending_above_mirrors_the_scheduler_without_its_lock() {
        let eng = Engine::start(EngineConfig::default()).unwrap();
        let mut sched = Scheduler::new();
        eng.mirror(&sched);
        assert!(!eng.pending_above(Level::BestEffort));
        sched.schedule(7, Level::Reliable, 1);
        eng.mirror(&sched);
        assert!(!eng.pending_above(Level::Guaranteed));
        assert!(!eng.pending_above(Level::Reliable));
        assert!(eng.pending_above(Level::BestEffort));
        sched.schedule(8, Level::Guaranteed, 1);
        eng.mirror(&sched);
        assert!(eng.pending_above(Level::Reliable));
        assert!(!eng.pending_above(Level::Guaranteed));
    }
}

#[cfg(test)]
mod watermark_tests {
    use super::Watermarks;

    const DEFAULT: Watermarks = Watermarks {
        high: 512 << 10,
        low: 128 << 10,
    };

    #[test]
    fn a_large_buffer_keeps_the_configured_watermarks() {
        assert_eq!(DEFAULT.for_buffer(1 << 20), DEFAULT);
        assert_eq!(DEFAULT.for_buffer(64 << 20), DEFAULT);
    }

    #[test]
    fn a_small_buffer_pulls_both_watermarks_under_it_in_proportion() {
        // tpdu=1024 × window 256: the VC's buffer is 256 KiB, under the default high.
        let w = DEFAULT.for_buffer(256 << 10);
        assert_eq!(w.high, 128 << 10);
        assert_eq!(w.low, 32 << 10);
        assert!(w.high < 256 << 10, "must engage before the PSB drops");
    }

    #[test]
    fn degenerate_buffers_stay_ordered() {
        for buf in [0, 1, 2, 3, 4096] {
            let w = DEFAULT.for_buffer(buf);
            assert!(w.low <= w.high && w.high >= 1, "{buf}: {w:?}");
        }
        let w = Watermarks {
            high: usize::MAX,
            low: usize::MAX - 1,
        }
        .for_buffer(1 << 20);
        assert_eq!(w.high, 1 << 19);
        assert!(w.low <= w.high);
    }
}
