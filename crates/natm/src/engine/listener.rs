//! A listening socket in direct mode: connection requests from any peer arrive here
//! and natm-proto's [`Endpoint`] decides what they are (a new call, a repeated
//! request of one in progress, a refusal); each accepted connection gets its own
//! socket, connected to the caller (so the kernel demultiplexes its VCs from then
//! on), from which the answer goes back.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;

use super::conn::Conn;
use super::link::Link;
use super::Engine;
use crate::adaptor::RecvBatch;
use crate::sched::Level;
use crate::sync::{self, Condvar, OrderedMutex as Mutex};
use crate::transport::TransportConfig;
use natm_proto::endpoint::{
    ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, EndpointEvent, ServerConfig,
};

/// Most connections waiting to be accepted; requests beyond are dropped (a SYN flood
/// must not grow memory without bound).
pub(crate) const BACKLOG: usize = 256;

/// Counters of a listener.
#[derive(Debug, Default)]
pub(crate) struct ListenerCounters {
    pub(crate) requests: AtomicU64,
    pub(crate) not_requests: AtomicU64,
    pub(crate) backlog_full: AtomicU64,
}

/// Established connections a sweep of them is never due under (see `Demux`).
const MIN_ESTABLISHED_SWEEP: usize = 64;

/// The listener's endpoint and the connections it accepted, weakly (a listener never
/// keeps a finished connection's socket open): those still in their handshake, looked
/// at on every request (the endpoint's backlog bounds them, and it must hear at once
/// that one came up or failed), and established ones, which only wait to be forgotten
/// once the application lets them go. Those are swept when their number has doubled
/// since the last sweep, so a request costs amortised O(1), not a walk of every
/// connection the listener ever accepted: with thousands of calls alive or closing,
/// walking them all on every datagram took the driver's CPU (29 % of it in
/// `HashMap::retain` under 16 parallel direct-mode callers) until the driver fell
/// behind every socket it reads — the listener's requests and the calls' ABORTs alike
/// went unread, and each finished call kept its socket open.
#[derive(Debug)]
struct Demux {
    endpoint: Endpoint,
    handshaking: HashMap<ConnectionHandle, Weak<Conn>>,
    established: HashMap<ConnectionHandle, Weak<Conn>>,
    /// How many established connections the last sweep of them left.
    swept_to: usize,
}

/// The shared state of a listener.
#[derive(Debug)]
pub(crate) struct ListenerShared {
    pub(crate) token: usize,
    pub(crate) link: Link,
    pub(crate) level: Level,
    pub(crate) weight: u32,
    demux: Mutex<Demux>,
    pub(crate) queue: Mutex<VecDeque<Arc<Conn>>>,
    pub(crate) queue_cv: Condvar,
    pub(crate) counters: ListenerCounters,
    /// The application closed the listener: nothing is queued any more.
    closed: AtomicBool,
}

impl ListenerShared {
    pub(crate) fn new(
        token: usize,
        link: Link,
        rx_cfg: TransportConfig,
        tx_cfg: TransportConfig,
        level: Level,
        weight: u32,
        seed: u64,
    ) -> Self {
        let endpoint = Endpoint::new(EndpointConfig {
            seed,
            server: Some(ServerConfig {
                rx: rx_cfg,
                tx: tx_cfg,
                backlog: BACKLOG,
            }),
            ..EndpointConfig::default()
        });
        ListenerShared {
            token,
            link,
            level,
            weight,
            demux: Mutex::new(
                sync::Level::Handshaking,
                Demux {
                    endpoint,
                    handshaking: HashMap::new(),
                    established: HashMap::new(),
                    swept_to: 0,
                },
            ),
            queue: Mutex::new(sync::Level::Leaf, VecDeque::new()),
            queue_cv: Condvar::new(),
            counters: ListenerCounters::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// Read every queued request (the driver calls this when the socket is readable).
    pub(crate) fn drain(&self, eng: &Engine, batch: &mut RecvBatch) {
        while self.link.recv_now(batch).is_ok() {
            for (from, d) in batch.iter() {
                self.on_datagram(eng, d, from);
            }
        }
    }

    /// Tell the endpoint which of its connections came up or went away. Connections
    /// in their handshake are looked at every time (their ends locked); an established
    /// one is forgotten once the application has let it go, found by a sweep when
    /// their number has doubled (`Demux`) — until then a late request of its caller
    /// still reaches it (its transport answers).
    fn sweep(demux: &mut Demux) {
        let Demux {
            endpoint,
            handshaking,
            established,
            swept_to,
        } = demux;
        handshaking.retain(|&h, w| {
            let Some(c) = w.upgrade() else {
                endpoint.forget(h);
                return false;
            };
            let (tx, rx) = (c.status(super::Which::Tx), c.status(super::Which::Rx));
            if tx.connected && rx.connected {
                endpoint.handle_event(h, EndpointEvent::Established);
                established.insert(h, w.clone());
                return false;
            }
            if c.tx().0.finished() || c.rx().0.finished() {
                // The handshake failed: the endpoint's backlog has room again.
                endpoint.forget(h);
                return false;
            }
            true
        });
        if established.len() >= (2 * *swept_to).max(MIN_ESTABLISHED_SWEEP) {
            established.retain(|&h, w| {
                if w.strong_count() == 0 {
                    endpoint.forget(h);
                    return false;
                }
                true
            });
            *swept_to = established.len();
        }
    }

    fn on_datagram(&self, eng: &Engine, d: &[u8], from: SocketAddr) {
        let now = eng.clock.now();
        let mut demux = self.demux.lock();
        Self::sweep(&mut demux);
        let before = demux.endpoint.stats();
        let ev = demux.endpoint.handle(now, from, Bytes::copy_from_slice(d));
        let after = demux.endpoint.stats();
        match ev {
            Some(DatagramEvent::ConnectionEvent(h, ev)) => {
                self.counters.requests.fetch_add(1, Ordering::Relaxed);
                // A repeated request: its connection answers again.
                let c = demux
                    .handshaking
                    .get(&h)
                    .or_else(|| demux.established.get(&h))
                    .and_then(Weak::upgrade);
                if c.is_none() {
                    // Its connection is gone and no sweep has seen it yet.
                    demux.handshaking.remove(&h);
                    demux.established.remove(&h);
                    demux.endpoint.forget(h);
                }
                drop(demux);
                if let Some(c) = c {
                    c.on_routed(eng, ev.half, ev.tpdu);
                }
            }
            Some(DatagramEvent::NewConnection(h, conn)) => {
                self.counters.requests.fetch_add(1, Ordering::Relaxed);
                let queued = self.queue.lock().len();
                if queued >= BACKLOG {
                    demux.endpoint.forget(h);
                    self.counters.backlog_full.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                let c = match self.open(eng, *conn) {
                    Ok(c) => c,
                    Err(_) => {
                        // Refused at once, not left to time out at the caller.
                        let answer = demux.endpoint.refuse(h);
                        drop(demux);
                        if let Some(DatagramEvent::Response {
                            destination,
                            datagram,
                        }) = answer
                        {
                            self.respond(destination, &datagram);
                        }
                        return;
                    }
                };
                demux.handshaking.insert(h, Arc::downgrade(&c));
                drop(demux);
                let mut q = self.queue.lock();
                if self.closed.load(Ordering::Acquire) {
                    // The application closed the listener while this call was being
                    // answered: nobody will ever take it.
                    drop(q);
                    Self::end_unaccepted(eng, vec![c]);
                    return;
                }
                q.push_back(c);
                drop(q);
                self.queue_cv.notify_all();
            }
            Some(DatagramEvent::Response {
                destination,
                datagram,
            }) => {
                drop(demux);
                if after.refused > before.refused {
                    self.counters.requests.fetch_add(1, Ordering::Relaxed);
                    self.counters.backlog_full.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.counters.not_requests.fetch_add(1, Ordering::Relaxed);
                }
                self.respond(destination, &datagram);
            }
            None => {
                self.counters.not_requests.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The application closed the listener: end the connections the endpoint
    /// answered and nobody accepted, now and any whose answer is under way (each is
    /// queued under the queue's lock, which `closed` is set under).
    pub(crate) fn close(&self, eng: &Arc<Engine>) {
        let queued: Vec<_> = {
            let mut q = self.queue.lock();
            self.closed.store(true, Ordering::Release);
            q.drain(..).collect()
        };
        Self::end_unaccepted(eng, queued);
        // Any still sending its ABORT keeps the engine until it has.
        Engine::linger(eng);
    }

    /// Abort connections nobody will accept (a TCP listen queue's are reset), and let
    /// the engine forget them once the ABORT is out. Never dropped by an application,
    /// they would otherwise never be collected, and each would keep its socket open.
    fn end_unaccepted(eng: &Engine, conns: Vec<Arc<Conn>>) {
        for c in conns {
            c.abort_both(eng, crate::transport::AbortReason::Local);
            c.mark_dropped(eng);
        }
    }

    /// An accepted connection's own socket, connected to the caller.
    fn open(
        &self,
        eng: &Engine,
        conn: natm_proto::endpoint::Connection,
    ) -> std::io::Result<Arc<Conn>> {
        let link = self.link.bind_beside(eng)?;
        Conn::open(eng, link, conn, self.level, self.weight, None)
    }

    /// Send the endpoint's answer (an ABORT) from the listening socket.
    fn respond(&self, to: SocketAddr, datagram: &[u8]) {
        let mut batch = crate::adaptor::SendBatch::with_capacity(datagram.len());
        if batch
            .push_with(datagram.len(), |out| out.copy_from_slice(datagram))
            .is_ok()
        {
            let _ = self.link.send_batch(&batch, Some(to));
        }
    }
}
