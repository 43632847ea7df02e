//! A VC end's share of its host port: the sub's routes' frames queue here, bounded
//! in octets like a socket's receive buffer, whole port batches or runs of copied
//! frames (`Queue`), and its reader waits on the sub's condition variable, leads the
//! port's reads when nobody else does, or is woken by whoever delivered.

use super::*;
use crate::engine::link::{CellFit, PeerPath};

/// A sub's frames, in arrival order: port batches that were all the sub's, queued as
/// they are (see [`HostPort::read`]) and taken whole by a reader, which gives its own
/// batch for them (no copy in or out); and runs of frames copied in from batches the
/// sub shared with others, copied out into the reader's batch.
#[derive(Debug, Default)]
pub(super) struct Queue {
    runs: VecDeque<Run>,
    /// Octets charged against the sub's limit.
    pub(super) charged: usize,
}

impl Queue {
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

#[derive(Debug)]
enum Run {
    Whole(RecvBatch),
    Copied(Copied),
}

/// Frames copied in, back to back, up to [`COPIED_RUN`] octets a run (a run is freed
/// once read, so an idle sub keeps nothing).
#[derive(Debug, Default)]
struct Copied {
    data: Vec<u8>,
    frames: VecDeque<(SocketAddr, usize)>,
    /// Where the front frame starts in `data`.
    at: usize,
}

/// The octets one run of copied frames holds at most (one frame may be larger).
const COPIED_RUN: usize = 64 << 10;

/// What a queued batch is charged: its octets and a frame's overhead for each.
pub(super) fn charge(batch: &RecvBatch) -> usize {
    natm_udp::areas::received(batch) + batch.len() * FRAME_OVERHEAD
}

/// Where a sub's frames come from and go, and the path's payload there.
#[derive(Debug, Default, Clone, Copy)]
struct Peer {
    pub(super) addr: Option<SocketAddr>,
    /// The largest datagram payload the path to `addr` carries unfragmented, once
    /// read (again after the kernel refused a datagram as too large).
    payload: Option<usize>,
}

#[derive(Debug)]
pub(super) struct SubInner {
    peer: RwLock<Peer>,
    pub(super) queue: Mutex<Queue>,
    pub(super) cv: Condvar,
    pub(super) limit: usize,
    /// The driver drains this sub when frames come (its owner is in the driver's set).
    pub(super) watched: AtomicBool,
    /// In the list of subs a read is filling.
    pub(super) touched: AtomicBool,
    /// The owner's token with the driver (a connection's or a listener's).
    pub(super) token: AtomicUsize,
    pub(super) shut: AtomicBool,
    dropped_full: AtomicU64,
    dropped_source: AtomicU64,
    /// Datagrams this sub's sends put out in IP fragments (the path shrank under
    /// TPDUs already cut).
    fragmented: AtomicU64,
    /// The sending VC's PLPMTU (0: none searched): longer frames leave as cells
    /// (`UdpLink::cells_above`, for the port's socket shared by every VC).
    cells_above: AtomicUsize,
    /// Frames this sub sent as cell trains.
    frames_as_cells: AtomicU64,
}

impl SubInner {
    /// Whether frames from `from` are this end's: its peer's, or any before it has one.
    pub(super) fn takes_from(&self, from: SocketAddr) -> bool {
        self.peer.read().addr.is_none_or(|p| p == from)
    }

    /// Queue one frame; whether it was taken.
    pub(super) fn deliver(&self, from: SocketAddr, frame: &[u8]) -> bool {
        if !self.takes_from(from) {
            self.dropped_source.fetch_add(1, Relaxed);
            return false;
        }
        let cost = frame.len() + FRAME_OVERHEAD;
        let mut q = self.queue.lock();
        if q.charged + cost > self.limit {
            self.dropped_full.fetch_add(1, Relaxed);
            return false;
        }
        let fits = |c: &Copied| c.data.len() + frame.len() <= COPIED_RUN;
        let run = match q.runs.back_mut() {
            Some(Run::Copied(c)) if fits(c) => c,
            _ => {
                q.runs.push_back(Run::Copied(Copied {
                    data: Vec::with_capacity(frame.len().max(4096)),
                    ..Copied::default()
                }));
                let Some(Run::Copied(c)) = q.runs.back_mut() else {
                    unreachable!("a copied run was just queued")
                };
                c
            }
        };
        run.data.extend_from_slice(frame);
        run.frames.push_back((from, frame.len()));
        q.charged += cost;
        true
    }

    /// A port batch every frame of which is this sub's, from its peer: queued as it
    /// is, the port given an emptied batch to receive into next. `None` (the batch
    /// left to be copied frame by frame, each charged and limited alone) if it is
    /// not from the sub's peer, or would go over the sub's limit.
    pub(super) fn deliver_whole(
        &self,
        port: &HostPort,
        batch: &mut RecvBatch,
        from: SocketAddr,
    ) -> Option<()> {
        if !self.takes_from(from) {
            return None;
        }
        let cost = charge(batch);
        let mut q = self.queue.lock();
        if q.charged + cost > self.limit {
            return None;
        }
        q.charged += cost;
        let fresh = port.fresh();
        let full = std::mem::replace(batch, fresh);
        q.runs.push_back(Run::Whole(full));
        Some(())
    }

    /// Frames came: the driver drains a watched sub at once; a waiting reader wakes.
    pub(super) fn signal(&self, eng: &Arc<Engine>, buf: &mut RecvBatch) {
        if self.watched.load(Relaxed) {
            crate::engine::driver::dispatch(eng, self.token.load(Relaxed), buf);
        } else {
            let _q = self.queue.lock();
            self.cv.notify_all();
        }
    }
}

/// A VC end's share of a [`HostPort`].
#[derive(Debug)]
pub(crate) struct HostSub {
    pub(super) port: Arc<HostPort>,
    id: usize,
    pub(super) inner: Arc<SubInner>,
}

impl HostSub {
    pub(super) fn new(port: Arc<HostPort>, limit: usize) -> HostSub {
        let inner = Arc::new(SubInner {
            peer: RwLock::new(Level::Leaf, Peer::default()),
            queue: Mutex::new(Level::MemQueue, Queue::default()),
            cv: Condvar::new(),
            limit,
            watched: AtomicBool::new(false),
            touched: AtomicBool::new(false),
            token: AtomicUsize::new(usize::MAX),
            shut: AtomicBool::new(false),
            dropped_full: AtomicU64::new(0),
            dropped_source: AtomicU64::new(0),
            fragmented: AtomicU64::new(0),
            cells_above: AtomicUsize::new(0),
            frames_as_cells: AtomicU64::new(0),
        });
        let id = port.next_sub.fetch_add(1, Relaxed);
        port.table.write().subs.insert(id, Arc::downgrade(&inner));
        HostSub { port, id, inner }
    }

    /// Another sub of the same port (an accepted connection beside its listener).
    pub(crate) fn beside(&self) -> HostSub {
        HostSub::new(self.port.clone(), self.inner.limit)
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.port.addr
    }

    /// Take frames only from `peer`, and send there by default.
    pub(crate) fn connect(&self, peer: SocketAddr) {
        *self.inner.peer.write() = Peer {
            addr: Some(peer),
            payload: None,
        };
    }

    pub(super) fn peer(&self) -> Option<SocketAddr> {
        self.inner.peer.read().addr
    }

    /// Route a connection's frames here; `AddrInUse` if another VC end of the port
    /// has one of its routes.
    /// Frames of the route that came before it are queued now, in order.
    pub(crate) fn route(&self, route: Route, bare: bool) -> io::Result<()> {
        let keys = HostKey::of(route, bare);
        let routes = {
            let mut table = self.port.table.write();
            table
                .routes
                .insert(&keys, self.id)
                .map_err(|e| io::Error::new(io::ErrorKind::AddrInUse, e))?;
            // Taken under the routes' write lock: a reader routing a frame now either
            // finished before (its frame is held) or waits and routes it here.
            let vcis = [route.rx_vci, route.tx_vci];
            self.port
                .held
                .lock()
                .take_for(&table.routes, self.id, &vcis)
        };
        if routes.is_empty() {
            return Ok(());
        }
        for (from, f) in &routes {
            self.inner.deliver(*from, f);
        }
        if self.inner.watched.load(Relaxed) {
            self.port.held.lock().ready.push(self.inner.clone());
            self.port.wake_driver();
        } else {
            let _q = self.inner.queue.lock();
            self.inner.cv.notify_all();
        }
        Ok(())
    }

    /// Take the CONN-REQs no connection's route takes (a direct-mode listener).
    pub(super) fn accept_calls(&self) -> io::Result<()> {
        self.port
            .table
            .write()
            .routes
            .set_acceptor(self.id)
            .map_err(|e| io::Error::new(io::ErrorKind::AddrInUse, e))
    }

    /// The driver drains this sub when frames come, as `token`'s readable socket.
    /// Frames queued meanwhile are drained in the driver's next round.
    pub(crate) fn watch(&self, eng: &Engine, token: usize) -> io::Result<()> {
        self.inner.token.store(token, Relaxed);
        if self.inner.watched.swap(true, Relaxed) {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        if !self.inner.queue.lock().is_empty() {
            self.port.held.lock().ready.push(self.inner.clone());
            eng.wake();
        }
        Ok(())
    }

    /// Stop draining from the driver; an error if it was not watched.
    pub(crate) fn unwatch(&self) -> io::Result<()> {
        if self.inner.watched.swap(false, Relaxed) {
            Ok(())
        } else {
            Err(io::ErrorKind::NotFound.into())
        }
    }

    pub(crate) fn send_batch(
        &self,
        batch: &SendBatch,
        to: Option<SocketAddr>,
    ) -> io::Result<usize> {
        let to = self.to(to)?;
        if self.port.defers(batch) {
            self.port.defer(to, batch);
            return Ok(batch.len());
        }
        self.watching_size(|| self.port.link.send_batch_fit(batch, Some(to), self.fit()))
    }

    pub(crate) fn send_gathered(
        &self,
        batch: &crate::engine::gather::GatherBatch,
        to: Option<SocketAddr>,
    ) -> io::Result<usize> {
        let to = self.to(to)?;
        if self.port.defers_gathered(batch) {
            self.port.defer_gathered(to, batch);
            return Ok(batch.len());
        }
        self.watching_size(|| {
            self.port
                .link
                .send_gathered_fit(batch, Some(to), self.fit())
        })
    }

    /// This sub's fit on the shared socket: frames longer than its VC's PLPMTU
    /// leave as cells.
    fn fit(&self) -> CellFit<'_> {
        CellFit {
            limit: match self.inner.cells_above.load(Relaxed) {
                0 => None,
                fit => Some(fit),
            },
            count: &self.inner.frames_as_cells,
            peer: Some(self),
        }
    }

    /// See [`UdpLink::cells_above`]: this sub's VC's PLPMTU.
    pub(crate) fn cells_above(&self, fit: usize) {
        if self.inner.cells_above.load(Relaxed) != fit {
            self.inner.cells_above.store(fit, Relaxed);
        }
    }

    /// Frames this sub sent as cell trains.
    pub(crate) fn frames_as_cells(&self) -> u64 {
        self.inner.frames_as_cells.load(Relaxed)
    }

    /// Send one frame as it is (a path MTU probe: DF set, never fragmented). A frame
    /// the kernel refuses as larger than the path MTU makes the sub read the MTU again.
    pub(crate) fn send_one(&self, frame: &[u8], to: Option<SocketAddr>) -> io::Result<usize> {
        let to = self.to(to)?;
        let r = self.port.link.port.send(Some(to), frame, frame.len());
        if let Err(e) = &r {
            if natm_udp::is_msg_size_err(e) {
                self.inner.peer.write().payload = None;
            }
        }
        r
    }

    /// A send on the port's socket that went out in IP fragments (the kernel refused
    /// it as larger than the path MTU, and `UdpLink`'s fallback sent it anyway) makes
    /// this sub read the path MTU again, and is counted as the sub's.
    fn watching_size(&self, send: impl FnOnce() -> io::Result<usize>) -> io::Result<usize> {
        let before = self.port.link.oversize_fallbacks();
        let r = send();
        let n = self.port.link.oversize_fallbacks().saturating_sub(before);
        if n > 0 {
            self.inner.fragmented.fetch_add(n, Relaxed);
            self.inner.peer.write().payload = None;
        }
        r
    }

    /// Datagrams this sub sent in IP fragments.
    pub(crate) fn oversize_fallbacks(&self) -> u64 {
        self.inner.fragmented.load(Relaxed)
    }

    /// The host port's socket.
    pub(crate) fn link(&self) -> &UdpLink {
        &self.port.link
    }

    /// Where a send goes: `to`, else the connected peer.
    pub(crate) fn dest(&self, to: Option<SocketAddr>) -> io::Result<SocketAddr> {
        self.to(to)
    }

    pub(super) fn to(&self, to: Option<SocketAddr>) -> io::Result<SocketAddr> {
        to.or_else(|| self.peer())
            .ok_or_else(|| io::ErrorKind::NotConnected.into())
    }

    /// The largest datagram payload the path to the peer carries unfragmented.
    pub(crate) fn path_payload(&self) -> Option<usize> {
        let peer = *self.inner.peer.read();
        if let Some(p) = peer.payload {
            return Some(p);
        }
        let payload = self.port.path_payload_to(peer.addr?)?;
        let mut now = self.inner.peer.write();
        if now.addr == peer.addr {
            now.payload = Some(payload);
        }
        Some(payload)
    }

    pub(crate) fn ip_udp_overhead(&self) -> usize {
        self.port.link.port.ip_udp_overhead()
    }

    /// Move queued frames into `batch`; `WouldBlock` if none is queued.
    pub(crate) fn recv_now(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        if self.inner.queue.lock().is_empty() && !DriverRead::active() {
            self.port.pump_for(&self.inner);
        }
        let mut q = self.inner.queue.lock();
        self.take(&mut q, batch)
    }

    /// As [`HostSub::recv_now`], waiting up to `timeout` for a frame first.
    /// The waiting thread leads the port's reading if nobody does (see
    /// [`HostPort::lead`]); else it waits for the reader to hand it frames.
    pub(crate) fn recv_wait(&self, batch: &mut RecvBatch, timeout: Duration) -> io::Result<usize> {
        let until = std::time::Instant::now() + timeout;
        if self.idle() {
            if self.try_lead() {
                self.port.lead(&self.inner, until, false);
            } else {
                let mut q = self.inner.queue.lock();
                let shut = &self.inner.shut;
                self.inner.cv.wait_while_for(
                    &mut q,
                    |q| q.is_empty() && !shut.load(Relaxed),
                    timeout,
                );
            }
        }
        let mut q = self.inner.queue.lock();
        self.take(&mut q, batch)
    }

    /// As [`HostSub::recv_wait`], spinning instead of sleeping (busy polling): the
    /// thread leads the port's reads if nobody does, so that arrivals do not wake the
    /// driver while it spins, as a socket of its own would have been out of the
    /// driver's set; else it spins on its queue.
    pub(crate) fn recv_spin(
        &self,
        batch: &mut RecvBatch,
        until: std::time::Instant,
    ) -> io::Result<usize> {
        if self.idle() {
            if self.try_lead() {
                self.port.lead(&self.inner, until, true);
            } else {
                while self.idle() && std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
        }
        let mut q = self.inner.queue.lock();
        self.take(&mut q, batch)
    }

    /// Nothing is queued, and the sub is not shut.
    pub(super) fn idle(&self) -> bool {
        self.inner.queue.lock().is_empty() && !self.inner.shut.load(Relaxed)
    }

    /// Take the port's read role (leader/follower), if nobody holds it.
    fn try_lead(&self) -> bool {
        self.port
            .leader
            .compare_exchange(false, true, AcqRel, Relaxed)
            .is_ok()
    }

    /// Wake a thread in [`HostSub::recv_wait`] now; it waits no more.
    pub(crate) fn interrupt_reader(&self) {
        self.inner.shut.store(true, Relaxed);
        let _q = self.inner.queue.lock();
        self.inner.cv.notify_all();
    }

    pub(super) fn take(&self, q: &mut Queue, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.clear();
        let Queue { runs, charged } = q;
        loop {
            match runs.front_mut() {
                None => break,
                Some(Run::Whole(w)) => {
                    if !batch.is_empty() {
                        // A whole batch goes on alone, next time.
                        batch.set_more();
                        break;
                    }
                    *charged -= charge(w);
                    if w.slots() == batch.slots() && w.slot_len() == batch.slot_len() {
                        let Some(Run::Whole(w)) = runs.pop_front() else {
                            unreachable!("the front run is whole")
                        };
                        // The reader's batch goes to the port for a later read.
                        let old = std::mem::replace(batch, w);
                        self.port.give(old);
                        return Ok(batch.len());
                    }
                    // A reader's batch of another shape (not one the engine reads
                    // with): the frames are copied, as from a shared batch.
                    let mut c = Copied::default();
                    for (from, d) in w.iter() {
                        c.data.extend_from_slice(d);
                        c.frames.push_back((from, d.len()));
                        *charged += d.len() + FRAME_OVERHEAD;
                    }
                    runs[0] = Run::Copied(c);
                }
                Some(Run::Copied(c)) => {
                    while let Some(&(from, len)) = c.frames.front() {
                        if !batch.push_packed(from, &[&c.data[c.at..c.at + len]]) {
                            if !batch.is_empty() {
                                batch.set_more();
                                return Ok(batch.len());
                            }
                            // Larger than the batch: it can never be received whole.
                            self.inner.dropped_full.fetch_add(1, Relaxed);
                        }
                        *charged -= len + FRAME_OVERHEAD;
                        c.at += len;
                        c.frames.pop_front();
                    }
                    runs.pop_front();
                }
            }
        }
        if batch.is_empty() {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(batch.len())
        }
    }

    /// Frames dropped: the queue was full.
    pub(crate) fn queue_drops(&self) -> u64 {
        self.inner.dropped_full.load(Relaxed)
    }
}

/// The kernel refused a frame to this sub's peer as larger than the path MTU
/// (`UdpLink`'s send stops there): the path is read again and the rest of the run
/// leaves as cells that fit it, not in IP fragments.
impl PeerPath for HostSub {
    fn path_payload(&self) -> Option<usize> {
        HostSub::path_payload(self)
    }

    fn forget_path(&self) {
        self.inner.peer.write().payload = None;
    }
}

impl Drop for HostSub {
    fn drop(&mut self) {
        let mut table = self.port.table.write();
        table.routes.remove(self.id);
        table.subs.remove(&self.id);
    }
}
