//! A listening socket in direct mode: connection requests from any peer arrive here;
//! each accepted connection gets its own socket, connected to the caller (so the
//! kernel demultiplexes its VCs from then on), from which the answer goes back.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::conn::{Conn, End, VCI_BACKWARD, VCI_FORWARD};
use super::link::{vc_of, Link, VC_HEADER_LEN};
use super::Engine;
use crate::adaptor::RecvBatch;
use crate::flow;
use crate::sched::Level;
use crate::sync::{self, Condvar, OrderedMutex as Mutex};
use crate::transport::{Psb, TransportConfig};
use crate::wire::tpdu::{Header, TpduType};

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

/// The shared state of a listener.
#[derive(Debug)]
pub(crate) struct ListenerShared {
    pub(crate) token: usize,
    pub(crate) link: Link,
    /// Configuration of the VC towards us (its receiving end) and back (sending end).
    pub(crate) rx_cfg: TransportConfig,
    pub(crate) tx_cfg: TransportConfig,
    pub(crate) level: Level,
    pub(crate) weight: u32,
    handshaking: Mutex<HashMap<SocketAddr, Arc<Conn>>>,
    pub(crate) queue: Mutex<VecDeque<Arc<Conn>>>,
    pub(crate) queue_cv: Condvar,
    pub(crate) counters: ListenerCounters,
}

impl ListenerShared {
    pub(crate) fn new(
        token: usize,
        link: Link,
        rx_cfg: TransportConfig,
        tx_cfg: TransportConfig,
        level: Level,
        weight: u32,
    ) -> Self {
        ListenerShared {
            token,
            link,
            rx_cfg,
            tx_cfg,
            level,
            weight,
            handshaking: Mutex::new(sync::Level::Handshaking, HashMap::new()),
            queue: Mutex::new(sync::Level::AcceptQueue, VecDeque::new()),
            queue_cv: Condvar::new(),
            counters: ListenerCounters::default(),
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

    fn on_datagram(&self, eng: &Engine, d: &[u8], from: SocketAddr) {
        let is_request = vc_of(d) == Some(VCI_FORWARD)
            && Header::parse_bytes(&d[VC_HEADER_LEN..])
                .is_ok_and(|(h, _)| h.ty == TpduType::ConnRequest);
        if !is_request {
            self.counters.not_requests.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let mut hs = self.handshaking.lock();
        // Forget callers whose handshake finished or failed.
        hs.retain(|_, c| {
            let rx = c.rx.lock();
            !(rx.connected || rx.finished())
        });
        if let Some(c) = hs.get(&from) {
            // A retransmitted request: its connection answers again.
            c.on_datagram(eng, d, Some(from));
            return;
        }
        if hs.len() + self.queue.lock().len() >= BACKLOG {
            self.counters.backlog_full.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Ok(c) = self.new_conn(eng, d, from) else {
            return;
        };
        hs.insert(from, c.clone());
        drop(hs);
        c.on_datagram(eng, d, Some(from));
        // The accepting side opens the VC back at once, on the same socket.
        {
            let now = eng.clock.now();
            let (mut tx, cv) = c.end(super::conn::Which::Tx);
            c.after(eng, super::conn::Which::Tx, &mut tx, cv, now, usize::MAX);
        }
        self.queue.lock().push_back(c);
        self.queue_cv.notify_all();
    }

    fn new_conn(&self, eng: &Engine, d: &[u8], from: SocketAddr) -> std::io::Result<Arc<Conn>> {
        let (req, _) = Header::parse_bytes(&d[VC_HEADER_LEN..])
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let mut local = self.link.local_addr()?;
        local.set_port(0);
        let link = Link::bind(&eng.cfg, local)?;
        link.connect(from)?;
        let rx_cfg = TransportConfig {
            cookie: Some(req.cookie),
            ..self.rx_cfg.clone()
        };
        let tx_cfg = TransportConfig {
            cookie: Some(req.cookie),
            ..self.tx_cfg.clone()
        };
        let now = eng.clock.now();
        let tx = Psb::connect(tx_cfg.clone(), flow::build(tx_cfg.flow, &tx_cfg), now);
        let rx = Psb::listen(rx_cfg);
        let conn = Arc::new(Conn::new(
            eng.token(),
            link,
            None,
            End::new(tx, VCI_BACKWARD),
            End::new(rx, VCI_FORWARD),
            self.level,
            self.weight,
        ));
        eng.add_conn(conn.clone())?;
        Ok(conn)
    }
}
