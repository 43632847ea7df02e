//! The mem adaptor: in-process links between ports of one [`MemNetwork`] (issue #5,
//! DESIGN §2), so that two hosts — or a whole test network — run in one process
//! without sockets.
//!
//! A [`MemPort`] behaves like the UDP port it stands in for, on purpose:
//! - it has an address, a [`SocketAddr`] in the network's own space (nothing is bound
//!   on the machine), so the engine and ulib name mem peers exactly as UDP peers, and
//!   the listener's handshake, per-connection ports and cookies work unchanged;
//! - each port's receive queue is bounded in octets like a socket's receive buffer
//!   (each frame is charged its length plus [`FRAME_OVERHEAD`], as the kernel charges
//!   an skb's truesize, so a flood of tiny frames is bounded too); a frame that does not
//!   fit is dropped at once and counted, before any work is spent on it (seed 000
//!   §6.2.2), and a reader that stops reading (the engine's watermarks) makes the
//!   queue fill and drop, as the kernel does;
//! - a connected port takes frames only from its peer; others are dropped and counted;
//! - frames are whole: a send copies each frame into the destination's queue and a
//!   receive copies it out into a [`RecvBatch`], one frame per datagram, so a message
//!   split in frames is delivered frame by frame, never merged or cut.
//!
//! Readiness for the engine's driver is an eventfd per port (registered with epoll
//! like a socket), written on every arrival so that each is an edge, as on a socket.
//! Application threads wait on the port's condition variable.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rustix::event::{eventfd, EventfdFlags};

use super::batch::{RecvBatch, SendBatch};
use crate::sync::{Condvar, Level, OrderedMutex as Mutex, OrderedRwLock as RwLock};

/// Octets each queued frame is charged beyond its length (the kernel charges a UDP
/// datagram's skb about this much).
pub const FRAME_OVERHEAD: usize = 256;

/// First port handed out for port 0 (Linux's ephemeral range starts here too).
const FIRST_EPHEMERAL: u16 = 32768;

/// An in-process network: the ports bound on it reach each other by address. Clone it
/// to give it to several hosts; clones are the same network.
#[derive(Debug, Clone, Default)]
pub struct MemNetwork {
    inner: Arc<NetInner>,
}

#[derive(Debug)]
struct NetInner {
    ports: RwLock<HashMap<SocketAddr, Weak<PortInner>>>,
    next_port: Mutex<u16>,
    /// Frames sent to an address where no port is bound.
    unroutable: AtomicU64,
}

impl Default for NetInner {
    fn default() -> Self {
        NetInner {
            ports: RwLock::new(Level::MemPorts, HashMap::new()),
            next_port: Mutex::new(Level::Leaf, 0),
            unroutable: AtomicU64::new(0),
        }
    }
}

impl PartialEq for MemNetwork {
    /// The same network (clones of one [`MemNetwork::new`]).
    fn eq(&self, other: &MemNetwork) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for MemNetwork {}

impl MemNetwork {
    /// A new, empty network.
    pub fn new() -> MemNetwork {
        MemNetwork::default()
    }

    /// Bind a port at `addr` with a receive queue of `queue_bytes` octets. An
    /// unspecified IP (`0.0.0.0`, `::`) becomes 127.0.0.1; port 0 picks a free one.
    /// `AddrInUse` if a live port has the address already.
    pub fn bind(&self, addr: SocketAddr, queue_bytes: usize) -> io::Result<MemPort> {
        let mut addr = addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        let mut ports = self.inner.ports.write();
        ports.retain(|_, p| p.strong_count() > 0);
        if addr.port() == 0 {
            let mut next = self.inner.next_port.lock();
            let free = (0..=u16::MAX).find_map(|_| {
                let p = (*next).max(FIRST_EPHEMERAL);
                *next = if p == u16::MAX {
                    FIRST_EPHEMERAL
                } else {
                    p + 1
                };
                let a = SocketAddr::new(addr.ip(), p);
                (!ports.contains_key(&a)).then_some(a)
            });
            addr = free.ok_or_else(|| io::Error::from(io::ErrorKind::AddrInUse))?;
        } else if ports.contains_key(&addr) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("mem address {addr} is bound already: pick another or port 0"),
            ));
        }
        let inner = Arc::new(PortInner {
            addr,
            peer: RwLock::new(Level::Leaf, None),
            queue: Mutex::new(Level::MemQueue, Queue::default()),
            cv: Condvar::new(),
            limit: queue_bytes.max(1),
            ready: eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?,
            counters: Counters::default(),
        });
        ports.insert(addr, Arc::downgrade(&inner));
        Ok(MemPort {
            net: self.clone(),
            inner,
        })
    }

    /// Frames sent to addresses where no port was bound.
    pub fn unroutable(&self) -> u64 {
        self.inner.unroutable.load(Relaxed)
    }

    fn port(&self, addr: SocketAddr) -> Option<Arc<PortInner>> {
        self.inner.ports.read().get(&addr).and_then(Weak::upgrade)
    }
}

#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<(SocketAddr, Vec<u8>)>,
    charged: usize,
}

#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    dropped_full: AtomicU64,
    dropped_source: AtomicU64,
    sent: AtomicU64,
}

#[derive(Debug)]
struct PortInner {
    addr: SocketAddr,
    peer: RwLock<Option<SocketAddr>>,
    queue: Mutex<Queue>,
    cv: Condvar,
    limit: usize,
    ready: OwnedFd,
    counters: Counters,
}

impl PortInner {
    /// Queue one frame from `from`, or drop and count it.
    fn deliver(&self, from: SocketAddr, frame: &[u8]) {
        let peer = *self.peer.read();
        if peer.is_some_and(|p| p != from) {
            self.counters.dropped_source.fetch_add(1, Relaxed);
            return;
        }
        let cost = frame.len() + FRAME_OVERHEAD;
        let mut q = self.queue.lock();
        if q.charged + cost > self.limit {
            self.counters.dropped_full.fetch_add(1, Relaxed);
            return;
        }
        q.charged += cost;
        q.frames.push_back((from, frame.to_vec()));
        // Every arrival is a readiness edge for an edge-triggered poller, as a socket's
        // is; a waiting thread waits only on an empty queue.
        let _ = rustix::io::write(&self.ready, &1u64.to_ne_bytes());
        if q.frames.len() == 1 {
            self.cv.notify_all();
        }
    }
}

/// A snapshot of a [`MemPort`]'s counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemPortStats {
    /// Frames this port sent into the network.
    pub sent: u64,
    /// Frames taken off the queue by a receive.
    pub received: u64,
    /// Frames dropped because the queue was full.
    pub dropped_queue_full: u64,
    /// Frames dropped because they came from another address than the connected peer.
    pub dropped_wrong_source: u64,
    /// Octets queued now (with [`FRAME_OVERHEAD`] per frame).
    pub queued_bytes: usize,
}

/// One port of a [`MemNetwork`]: the in-process counterpart of a UDP socket.
#[derive(Debug)]
pub struct MemPort {
    net: MemNetwork,
    inner: Arc<PortInner>,
}

impl MemPort {
    /// The port's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// Take frames only from `peer`, and send there by default.
    pub fn connect(&self, peer: SocketAddr) {
        *self.inner.peer.write() = Some(peer);
    }

    /// The receive queue's limit, octets.
    pub fn queue_limit(&self) -> usize {
        self.inner.limit
    }

    /// Send each frame of `batch` to `dst` (or the connected peer). Frames for an
    /// address where nothing is bound are counted in [`MemNetwork::unroutable`] and
    /// count as sent, as UDP would; a full queue drops at the receiver.
    pub fn send_batch(&self, dst: Option<SocketAddr>, batch: &SendBatch) -> io::Result<usize> {
        let dst = match dst {
            Some(d) => d,
            None => (*self.inner.peer.read())
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?,
        };
        let n = batch.len();
        match self.net.port(dst) {
            Some(port) => {
                for f in batch.frames() {
                    port.deliver(self.inner.addr, f);
                }
            }
            None => {
                self.net.inner.unroutable.fetch_add(n as u64, Relaxed);
            }
        }
        self.inner.counters.sent.fetch_add(n as u64, Relaxed);
        Ok(n)
    }

    /// Move up to the batch's slots of queued frames into `batch` (cleared first);
    /// `WouldBlock` if none is queued.
    pub fn recv_now(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        let mut q = self.inner.queue.lock();
        self.take(&mut q, batch)
    }

    /// As [`MemPort::recv_now`], waiting up to `timeout` for a frame first.
    pub fn recv_wait(&self, batch: &mut RecvBatch, timeout: Duration) -> io::Result<usize> {
        let mut q = self.inner.queue.lock();
        self.inner
            .cv
            .wait_while_for(&mut q, |q| q.frames.is_empty(), timeout);
        self.take(&mut q, batch)
    }

    fn take(&self, q: &mut Queue, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.clear();
        while let Some((from, f)) = q.frames.front() {
            if !batch.push(*from, f) {
                if batch.is_empty() {
                    // Larger than a slot: it can never be received whole. Drop it.
                    q.charged -= f.len() + FRAME_OVERHEAD;
                    q.frames.pop_front();
                    self.inner.counters.dropped_full.fetch_add(1, Relaxed);
                    continue;
                }
                break;
            }
            q.charged -= f.len() + FRAME_OVERHEAD;
            q.frames.pop_front();
        }
        if q.frames.is_empty() {
            // Consume the readiness count so that the next frame signals afresh.
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&self.inner.ready, &mut b);
        }
        self.inner
            .counters
            .received
            .fetch_add(batch.len() as u64, Relaxed);
        if batch.is_empty() {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(batch.len())
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> MemPortStats {
        let c = &self.inner.counters;
        MemPortStats {
            sent: c.sent.load(Relaxed),
            received: c.received.load(Relaxed),
            dropped_queue_full: c.dropped_full.load(Relaxed),
            dropped_wrong_source: c.dropped_source.load(Relaxed),
            queued_bytes: self.inner.queue.lock().charged,
        }
    }
}

impl Drop for MemPort {
    fn drop(&mut self) {
        let mut ports = self.net.inner.ports.write();
        if ports
            .get(&self.inner.addr)
            .is_some_and(|w| w.as_ptr() == Arc::as_ptr(&self.inner))
        {
            ports.remove(&self.inner.addr);
        }
    }
}

/// The port's readiness eventfd: readable while frames are queued (epoll it like a
/// socket).
impl AsFd for MemPort {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.ready.as_fd()
    }
}

impl AsRawFd for MemPort {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.ready.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(sizes: &[usize], fill: u8) -> SendBatch {
        let mut b = SendBatch::new();
        for &n in sizes {
            b.push_with(n, |o| o.fill(fill)).unwrap();
        }
        b
    }

    #[test]
    fn frames_cross_whole_and_in_order() {
        let net = MemNetwork::new();
        let a = net.bind("0.0.0.0:0".parse().unwrap(), 1 << 20).unwrap();
        let b = net
            .bind("127.0.0.1:7000".parse().unwrap(), 1 << 20)
            .unwrap();
        assert_eq!(a.local_addr().ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(
            a.send_batch(Some(b.local_addr()), &frames(&[5, 5, 3], 9))
                .unwrap(),
            3
        );
        let mut r = RecvBatch::new(8, 64);
        assert_eq!(b.recv_now(&mut r).unwrap(), 3);
        let got: Vec<_> = r.iter().map(|(f, d)| (f, d.to_vec())).collect();
        assert_eq!(
            got,
            [
                (a.local_addr(), vec![9; 5]),
                (a.local_addr(), vec![9; 5]),
                (a.local_addr(), vec![9; 3])
            ]
        );
        assert_eq!(
            b.recv_now(&mut r).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert!(net.bind(b.local_addr(), 10).is_err(), "address in use");
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_a_connected_port_filters() {
        let net = MemNetwork::new();
        let a = net.bind("127.0.0.1:0".parse().unwrap(), 1 << 20).unwrap();
        let c = net.bind("127.0.0.1:0".parse().unwrap(), 1 << 20).unwrap();
        // Room for exactly two frames of 100 octets.
        let b = net
            .bind("127.0.0.1:0".parse().unwrap(), 2 * (100 + FRAME_OVERHEAD))
            .unwrap();
        b.connect(a.local_addr());
        a.send_batch(Some(b.local_addr()), &frames(&[100; 5], 1))
            .unwrap();
        c.send_batch(Some(b.local_addr()), &frames(&[100], 2))
            .unwrap();
        let s = b.stats();
        assert_eq!((s.dropped_queue_full, s.dropped_wrong_source), (3, 1));
        let mut r = RecvBatch::new(8, 128);
        assert_eq!(b.recv_wait(&mut r, Duration::from_millis(10)).unwrap(), 2);
        assert!(r.iter().all(|(f, d)| f == a.local_addr() && d == [1; 100]));
        assert_eq!(b.stats().queued_bytes, 0);
        drop(b);
        a.send_batch(Some(c.local_addr()), &frames(&[1], 0))
            .unwrap();
        let gone: SocketAddr = "127.0.0.1:1".parse().unwrap();
        a.send_batch(Some(gone), &frames(&[1], 0)).unwrap();
        assert_eq!(net.unroutable(), 1);
    }
}
