//! Duplex connections: two simplex VCs, the calls held for them through sigd, and
//! the ways to send, receive and wait on them.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Chunk;

use super::sigd::Session;
use super::stats::{conn_stats, conn_status};
use super::wait::{Limit, Outgoing, Wait};
use super::{ConnStats, ConnStatus};
use super::{Error, IntoQos, Resolved};
use crate::adaptor::UdpDrops;
use crate::engine::{copy_piece, hold_piece, Conn, ConnEvent, Engine, PushPiece};
use crate::wire::qos::Qos;

/// What the network granted a connection set up through sigd (the FORE API's
/// returned QoS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// Reserved rate this side sends at, payload bit/s (0: nothing reserved — not a
    /// guaranteed VC).
    pub tx_bps: u64,
    /// The QoS in force, from this side (tx = what this side sends).
    pub qos: Qos,
}

/// A call held through sigd.
#[derive(Debug)]
struct SigCall {
    session: Arc<Session>,
    call: u64,
    granted: Granted,
    /// The sending rate the network holds for the call now, payload bit/s (the
    /// grant, then each confirmed change through the network).
    reserved: std::sync::atomic::AtomicU64,
    /// A change through the network is under way.
    modifying: std::sync::atomic::AtomicBool,
}

/// A QoS change the peer accepted ([`Connection::set_qos`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QosChange {
    /// The sending rate now in force, payload bit/s.
    pub rate_bps: u64,
    /// From the request to the peer's acceptance (the new rate applies from then).
    pub took: Duration,
}

/// The new sending rate a `set_qos` text asks for.
/// The bounds a guaranteed call's sending rate may be renegotiated within, from the
/// QoS granted at setup (this side's view): `min_pcr` (0 without) up to `max_pcr`
/// (without it, the rate granted).
fn setup_bounds(granted_qos: &Qos, granted_bps: u64) -> (u64, u64) {
    let p = granted_qos.tx();
    let min = p.min_pcr.and_then(|r| r.bits_per_sec()).unwrap_or(0);
    let max = match p.max_pcr {
        Some(r) => r.bits_per_sec().unwrap_or(u64::MAX),
        None => granted_bps,
    };
    (min, max.max(granted_bps))
}

fn qos_rate(q: &Qos) -> Result<u64, Error> {
    let cfg = crate::transport::TransportConfig::from_qos(q, false).map_err(Error::Config)?;
    if cfg.rate == 0 {
        return Err(Error::QosNotNegotiable(format!(
            "\"{q}\" gives no transmit rate: a QoS change names the new rate (pcr, or scr for VBR)"
        )));
    }
    Ok(cfg.rate)
}

/// Why sigd ended a call: the UNI cause and sigd's sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// UNI cause value (16: normal clearing).
    pub cause: u8,
    /// What happened, e.g. "released by an administrator (uid 0, pid 4242)".
    pub detail: String,
}

/// A duplex connection: two simplex VCs.
#[derive(Debug)]
pub struct Connection {
    pub(super) eng: Arc<Engine>,
    pub(super) conn: Arc<Conn>,
    /// Boxed: the grant holds a typed `Qos`; a `Connection` stays three pointers.
    sig: Option<Box<SigCall>>,
}

impl Connection {
    /// The sigd session and call id behind a connection set up through sigd.
    pub(super) fn sig_call(&self) -> Option<(Arc<Session>, u64)> {
        self.sig.as_ref().map(|s| (s.session.clone(), s.call))
    }

    pub(super) fn from_conn(eng: Arc<Engine>, conn: Arc<Conn>) -> Connection {
        Connection {
            eng,
            conn,
            sig: None,
        }
    }

    /// A connection sigd set up: wait until both VCs are up.
    pub(super) fn signalled(
        eng: Arc<Engine>,
        conn: Arc<Conn>,
        session: Arc<Session>,
        call: u64,
        granted: Granted,
        timeout: Duration,
    ) -> Result<Connection, Error> {
        conn.wait_up(&eng, timeout)?;
        Ok(Connection {
            eng,
            conn,
            sig: Some(Box::new(SigCall {
                session,
                call,
                reserved: std::sync::atomic::AtomicU64::new(granted.tx_bps),
                modifying: std::sync::atomic::AtomicBool::new(false),
                granted,
            })),
        })
    }

    /// What sigd granted (`None` in direct mode, where nothing is reserved).
    pub fn granted(&self) -> Option<&Granted> {
        self.sig.as_ref().map(|s| &s.granted)
    }

    pub(super) fn connect(
        eng: Arc<Engine>,
        addrs: (Option<SocketAddr>, SocketAddr),
        r: Resolved,
        timeout: Duration,
    ) -> Result<Connection, Error> {
        Self::connect_drawing(eng, addrs, r, timeout, || {
            (random_cookie(), random_cookie())
        })
    }

    /// As [`Connection::connect`], the call's cookie and initial sequence number from
    /// `draw`. On one port per host every direct call of the port rides VCIs 32 and
    /// 33, told apart by its cookie alone, so a cookie another call of the port holds
    /// is drawn again (a random 32-bit cookie among 100,000 calls repeats with
    /// probability ~2/3: the birthday bound).
    fn connect_drawing(
        eng: Arc<Engine>,
        (local, addr): (Option<SocketAddr>, SocketAddr),
        r: Resolved,
        timeout: Duration,
        mut draw: impl FnMut() -> (u32, u32),
    ) -> Result<Connection, Error> {
        const DRAWS: usize = 8;
        let mut drawn = 0;
        let conn = loop {
            drawn += 1;
            match Conn::connect(
                &eng,
                (local, addr),
                r.cfg.clone(),
                (r.level, r.weight),
                draw(),
                timeout,
            ) {
                Err(Error::Io(e)) if drawn < DRAWS && route_taken(&e) => continue,
                other => break other?,
            }
        };
        conn.smooth_cells(&eng, r.cell_rate);
        conn.set_unused(r.unused);
        Ok(Connection::from_conn(eng, conn))
    }

    /// Send one message, waiting as `wait` says for room in the send buffer (the
    /// window, or the leaky bucket of a guaranteed VC).
    ///
    /// `msg` is borrowed octets, copied into the sending VC's queue, or a [`Bytes`](bytes::Bytes)
    /// (or a `Vec<u8>` by value) that the queue holds without a copy ([`Outgoing`]).
    /// [`Wait::Block`] sends a message larger than the send buffer a part at a time as
    /// room comes; [`Wait::No`] takes the message only if it fits whole now, else
    /// [`Error::WouldBlock`] (window full or over rate) with nothing taken;
    /// [`Wait::For`] waits for it to fit whole, else [`Error::TimedOut`] with nothing
    /// taken.
    pub fn send<'a>(
        &self,
        msg: impl Into<Outgoing<'a>>,
        wait: impl Into<Wait>,
    ) -> Result<(), Error> {
        let msg = msg.into();
        let (c, e) = (&self.conn, &self.eng);
        match (msg, wait.into().limit()) {
            (Outgoing::Borrowed(m), Limit::Within(None)) => c.send_message(e, m),
            (Outgoing::Shared(m), Limit::Within(None)) => c.send_message_bytes(e, &m),
            (Outgoing::Borrowed(m), Limit::Now) => c.try_send_message(e, m, None),
            (Outgoing::Shared(m), Limit::Now) => c.try_send_message_bytes(e, &m, None),
            (Outgoing::Borrowed(m), Limit::Within(Some(t))) => c.send_message_within(e, m, None, t),
            (Outgoing::Shared(m), Limit::Within(Some(t))) => {
                c.send_message_within(e, &m, Some(&m), t)
            }
        }
    }

    /// Send several messages in one call; how many were taken, from the first. Each is
    /// its own message, delivered whole and in order (its own TPDU or TPDUs; a lost
    /// one is counted as one message lost); what the batch saves is system calls: the
    /// messages that fit are queued together and their TPDUs leave in one GSO
    /// `sendmsg` per run of equal sizes (up to the kernel's GSO segment limit), where
    /// [`Connection::send`] makes one per message. A guaranteed VC's leaky bucket
    /// still paces them: a burst within the bucket's depth leaves at once, the rest at
    /// the reserved rate.
    ///
    /// [`Wait::Block`] takes them all. [`Wait::No`] takes those that fit whole now,
    /// [`Error::WouldBlock`] if not even the first does. [`Wait::For`] takes them as
    /// room comes until its time is up: those taken by then, [`Error::TimedOut`] if
    /// none.
    pub fn send_many<M: AsRef<[u8]>>(
        &self,
        msgs: &[M],
        wait: impl Into<Wait>,
    ) -> Result<usize, Error> {
        self.send_batch(msgs, wait.into(), copy_piece)
    }

    /// As [`Connection::send_many`], each message a [`Bytes`](bytes::Bytes) that the
    /// sending VC's queue holds without a copy (as [`Connection::send`] holds one).
    pub fn send_many_bytes(
        &self,
        msgs: &[bytes::Bytes],
        wait: impl Into<Wait>,
    ) -> Result<usize, Error> {
        self.send_batch(msgs, wait.into(), hold_piece)
    }

    fn send_batch<M: AsRef<[u8]>>(
        &self,
        msgs: &[M],
        wait: Wait,
        push: PushPiece<M>,
    ) -> Result<usize, Error> {
        let (c, e) = (&self.conn, &self.eng);
        match wait.limit() {
            Limit::Within(None) => c.send_messages(e, msgs, push).map(|()| msgs.len()),
            Limit::Now => c.try_send_messages(e, msgs, push),
            Limit::Within(Some(t)) => {
                let until = std::time::Instant::now() + t;
                let mut taken = 0;
                while taken < msgs.len() {
                    match c.try_send_messages(e, &msgs[taken..], push) {
                        Ok(n) => taken += n,
                        Err(Error::WouldBlock(_)) => {
                            let left = until.saturating_duration_since(std::time::Instant::now());
                            let first = msgs[taken].as_ref().len();
                            if left.is_zero() || !c.wait_send_room(e, first, left) {
                                break;
                            }
                        }
                        Err(err) if taken == 0 => return Err(err),
                        Err(_) => break,
                    }
                }
                if taken == 0 && !msgs.is_empty() {
                    return Err(Error::TimedOut);
                }
                Ok(taken)
            }
        }
    }

    /// Send one message if it fits now, as [`Connection::send`] with [`Wait::No`]; if
    /// it does not, nothing is taken and `cx`'s waker is woken once the sending VC has
    /// made room (or ended). For event loops outside Rust's async, e.g. the C API's
    /// descriptor to `poll()`: the waker is registered under the same lock as the
    /// attempt, so no wake-up falls between them. `msg` is taken as by
    /// [`Connection::send`]: a [`Bytes`](bytes::Bytes) is queued without a copy (keep
    /// a clone to try again after `Pending`).
    pub fn poll_send<'a>(
        &self,
        cx: &mut std::task::Context<'_>,
        msg: impl Into<Outgoing<'a>>,
    ) -> std::task::Poll<Result<(), Error>> {
        let (c, e, w) = (&self.conn, &self.eng, Some(cx.waker()));
        let r = match msg.into() {
            Outgoing::Borrowed(m) => c.try_send_message(e, m, w),
            Outgoing::Shared(m) => c.try_send_message_bytes(e, &m, w),
        };
        match r {
            Err(Error::WouldBlock(_)) => std::task::Poll::Pending,
            r => std::task::Poll::Ready(r),
        }
    }

    /// The next chunk of a message ([`Connection::recv_chunk`]) if one has arrived;
    /// else `cx`'s waker is woken when one does (or the connection ends). Checked and
    /// registered under the same lock, as [`Connection::poll_send`].
    pub fn poll_recv_chunk(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Option<Chunk>, Error>> {
        match self.conn.poll_recv_chunk(&self.eng, cx.waker()) {
            Some(r) => std::task::Poll::Ready(r),
            None => std::task::Poll::Pending,
        }
    }

    /// Receive the next whole message, waiting as `wait` says; `None` once the peer
    /// has closed and everything it sent has been delivered. Nothing there in time:
    /// [`Error::WouldBlock`] ([`Wait::No`]) or [`Error::TimedOut`].
    pub fn recv(&self, wait: impl Into<Wait>) -> Result<Option<Vec<u8>>, Error> {
        match wait.into().limit() {
            Limit::Now => self.conn.try_recv_message(&self.eng),
            Limit::Within(t) => self.conn.recv_message(&self.eng, t),
        }
    }

    /// As [`Connection::recv`], receiving the message into `buf`, whose memory it
    /// reuses: a message of several TPDUs is gathered into `buf`'s allocation, so a
    /// loop passing the same `Vec` neither allocates nor grows it once it has held the
    /// largest message (as a `read` into one buffer would). `Ok(true)`: `buf` is the
    /// message; `Ok(false)`: the peer has closed and everything it sent has been
    /// delivered. On an error `buf`'s contents are unspecified.
    pub fn recv_into(&self, buf: &mut Vec<u8>, wait: impl Into<Wait>) -> Result<bool, Error> {
        match wait.into().limit() {
            Limit::Now => Ok(self.conn.try_recv_message_into(&self.eng, buf)?.is_some()),
            Limit::Within(t) => Ok(self.conn.recv_message_into(&self.eng, t, buf)?.is_some()),
        }
    }

    /// Receive the next piece of a message without copying it, waiting as `wait` says
    /// (as [`Connection::recv`]); `None` once the peer has closed and everything it
    /// sent has been delivered.
    ///
    /// Each chunk is the payload of one TPDU as it was received, where
    /// [`Connection::recv`] gathers a message of several TPDUs into one `Vec` (a copy
    /// of every octet). A message is the chunks up to and including the one with
    /// [`Chunk::end_of_message`]. Use it for large messages, or to pass payloads on
    /// without copying them; use `recv` when whole messages in one buffer are what is
    /// wanted. Mixing the two within one message: a `recv` after some of its chunks
    /// returns the rest of the message, and a `recv_chunk` after a `recv` that timed
    /// out returns what `recv` had gathered as one chunk.
    pub fn recv_chunk(&self, wait: impl Into<Wait>) -> Result<Option<Chunk>, Error> {
        match wait.into().limit() {
            Limit::Now => self.conn.try_recv_chunk(&self.eng),
            Limit::Within(t) => self.conn.recv_chunk(&self.eng, t),
        }
    }

    /// Close the sending VC in order: everything sent is still delivered. Receiving
    /// continues until the peer closes too.
    pub fn close(&self) {
        self.conn.close_tx(&self.eng);
    }

    /// Abort both VCs at once; the peer sees "aborted", and so does every thread of
    /// this application still waiting on the connection.
    pub fn abort(&self) {
        self.conn.abort_local(&self.eng);
    }

    /// Wait, as `wait` says, until the peer has everything sent before `close`:
    /// [`Error::TimedOut`] if it has not by then ([`Wait::No`]: not yet).
    pub fn flush(&self, wait: impl Into<Wait>) -> Result<(), Error> {
        self.conn.flush_tx_wait(&self.eng, wait.into().timeout())
    }

    /// Close in order, let go of the connection, and wait up to `timeout` until
    /// its close has finished and its call is released (cause 16): SO_LINGER for
    /// one connection. A process that exits while a dropped connection is still
    /// finishing ends its call as a crash does (sigd releases it with cause 41, and
    /// the peer loses what it had not read); lingering first lets the peer read
    /// everything, then the end. Whether it finished in time; if not, it goes on
    /// finishing while the process lives. [`Host::linger`](super::Host::linger) waits for every dropped
    /// connection of a host.
    pub fn linger(self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        let conn = self.conn.clone();
        drop(self);
        loop {
            if conn.life() == crate::engine::Life::Forgotten {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Change this end's sending rate at once, within the bounds agreed at setup,
    /// *without telling the peer*: a local adjustment of the shaper. The peer learns
    /// nothing and nothing waits for its answer; [`Connection::set_qos`] is the
    /// change the peer is told of and confirms (seed 003 `setqos`).
    pub fn set_rate(&self, bps: u64) -> Result<(), Error> {
        self.conn.set_rate(bps)
    }

    /// Change the QoS of the sending VC within the bounds agreed at setup (seed 003
    /// `setqos`) and wait up to `timeout` for the peer's answer. `qos` is QoS text as
    /// at connect (`cbr:pcr=4Mbps`); its transmit rate (`scr`, else `pcr`, else
    /// `max_pcr`) is the new rate, which must lie between the agreed minimum
    /// (`min_pcr`) and the rate agreed at setup (sigd's grant through sigd). The peer
    /// is told with a QOS TPDU; while its answer is awaited [`ConnStatus::qos_pending`]
    /// is set and the old rate holds; once it accepts, the shaper takes the new rate
    /// and this returns it. A refusal (or no answer after the close attempts) is
    /// [`Error::QosRefused`] and the rate stays. Only the rate is renegotiated: the
    /// text's other parameters need a new call.
    ///
    /// A guaranteed call set up through sigd may go beyond its reservation, up to
    /// the `max_pcr` agreed at setup: the network is asked first (sigd's `Modify`, a
    /// Q.2963.1 MODIFY REQUEST through every switch to the peer's sigd, each
    /// re-running admission), and the peer is asked in band once every hop has
    /// reserved the rate. A decrease is made in band first, then given back to the
    /// network, so the policers never see the old rate above the new reservation.
    /// A refusal by the network is [`Error::Refused`] with its cause (37: the
    /// bandwidth is not there), and the rate stays; beyond `min_pcr`..`max_pcr`
    /// is [`Error::QosBounds`] at once, nothing asked.
    pub fn set_qos(&self, qos: impl IntoQos, timeout: Duration) -> Result<QosChange, Error> {
        let started = std::time::Instant::now();
        let qos = qos.into_qos()?;
        let bps = qos_rate(&qos)?;
        let Some(sig) = self.sig.as_ref().filter(|s| s.granted.tx_bps > 0) else {
            self.conn.start_qos(&self.eng, bps)?;
            let rate_bps = self.conn.wait_qos(&self.eng, Some(timeout))?;
            return Ok(QosChange {
                rate_bps,
                took: started.elapsed(),
            });
        };
        use std::sync::atomic::Ordering;
        if sig.modifying.swap(true, Ordering::AcqRel) {
            return Err(Error::QosPending(bps));
        }
        let r = self.set_qos_through(sig, &qos, bps, started, timeout);
        sig.modifying.store(false, Ordering::Release);
        r.map(|rate_bps| QosChange {
            rate_bps,
            took: started.elapsed(),
        })
    }

    /// [`Connection::set_qos`] of a guaranteed call through sigd.
    fn set_qos_through(
        &self,
        sig: &SigCall,
        qos: &Qos,
        bps: u64,
        started: std::time::Instant,
        timeout: Duration,
    ) -> Result<u64, Error> {
        use std::sync::atomic::Ordering;
        let (min, max) = setup_bounds(&sig.granted.qos, sig.granted.tx_bps);
        if bps < min || bps > max {
            return Err(Error::QosBounds(crate::transport::QosBoundsError {
                requested: bps,
                min,
                max,
            }));
        }
        let left = || timeout.saturating_sub(started.elapsed());
        let reserved = sig.reserved.load(Ordering::Acquire);
        if bps > reserved {
            sig.session.modify(sig.call, qos, left())?;
            sig.reserved.store(bps, Ordering::Release);
            // The peer's sigd told its application before it acknowledged; its
            // bound is normally raised long before this QOS arrives. If not, the
            // refusal is repeated a few times while the bound catches up.
            let mut tries = 0;
            loop {
                self.conn.start_qos(&self.eng, bps)?;
                match self.conn.wait_qos(&self.eng, Some(left())) {
                    Err(Error::QosRefused { .. }) if tries < 3 => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    r => return r,
                }
            }
        }
        self.conn.start_qos(&self.eng, bps)?;
        let rate = self.conn.wait_qos(&self.eng, Some(left()))?;
        if bps < reserved {
            // The rate is in force; give back what it no longer needs.
            sig.session.modify(sig.call, qos, left())?;
            sig.reserved.store(bps, Ordering::Release);
        }
        Ok(rate)
    }

    /// As [`Connection::set_qos`] without waiting: the request goes out and the change
    /// is pending; [`Connection::status`] (or [`Connection::wait_qos`]) tells how it
    /// ended.
    pub fn try_set_qos(&self, qos: impl IntoQos) -> Result<(), Error> {
        let bps = qos_rate(&qos.into_qos()?)?;
        self.conn.start_qos(&self.eng, bps)
    }

    /// Wait up to `timeout` for the pending QoS change's answer: the new rate, or
    /// [`Error::QosRefused`].
    pub fn wait_qos(&self, timeout: Duration) -> Result<u64, Error> {
        self.conn.wait_qos(&self.eng, Some(timeout))
    }

    /// The next change of the connection's status, oldest first, waiting as `wait`
    /// says — `None` if none came. seed 003's status
    /// flags as events: a QoS change asked for, accepted or refused (this end's, and
    /// the peer's of the receiving VC), the peer's close, this end's close completing,
    /// an abort, sigd's release, and a non-blocking send held by the window or the
    /// rate. At most [`EVENT_QUEUE`](crate::ulib::EVENT_QUEUE) wait: beyond that the
    /// oldest are dropped ([`Connection::events_dropped`]). One consumer at a time.
    pub fn next_event(&self, wait: impl Into<Wait>) -> Option<ConnEvent> {
        self.conn.events.next(wait.into().timeout())
    }

    /// The next status event if one is queued; else `cx`'s waker is woken when one
    /// is (checked and registered under the same lock, as [`Connection::poll_send`];
    /// the C API's event descriptor).
    pub fn poll_next_event(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<ConnEvent> {
        match self.conn.events.poll(cx.waker()) {
            Some(ev) => std::task::Poll::Ready(ev),
            None => std::task::Poll::Pending,
        }
    }

    /// Status events dropped because the application left
    /// [`EVENT_QUEUE`](crate::ulib::EVENT_QUEUE) of them untaken.
    pub fn events_dropped(&self) -> u64 {
        self.conn.events.dropped()
    }

    /// seed 003's status flags of the connection, as they are now.
    pub fn status(&self) -> ConnStatus {
        conn_status(&self.conn, None)
    }

    /// As [`Connection::recv`], with the status flags as they were just after the
    /// message was taken (seed 003: "most user interface calls have a 32-bit status
    /// field"): a whole message both starts and ends it.
    pub fn recv_with_status(
        &self,
        wait: impl Into<Wait>,
    ) -> Result<(Option<Vec<u8>>, ConnStatus), Error> {
        let m = self.recv(wait)?;
        let edge = m.as_ref().map(|_| (true, true));
        Ok((m, conn_status(&self.conn, edge)))
    }

    /// As [`Connection::recv_chunk`], with the status flags: whether the chunk starts
    /// or ends its message, and the connection's flags.
    pub fn recv_chunk_with_status(
        &self,
        wait: impl Into<Wait>,
    ) -> Result<(Option<Chunk>, ConnStatus), Error> {
        let c = self.recv_chunk(wait)?;
        let edge = c.as_ref().map(|c| (c.start_of_message, c.end_of_message));
        Ok((c, conn_status(&self.conn, edge)))
    }

    /// Counters of both VCs.
    pub fn stats(&self) -> ConnStats {
        conn_stats(&self.conn, None)
    }

    /// [`Connection::stats`] of many connections, reading the kernel's socket table
    /// (for each socket's queue drops) once for all of them rather than once each: that
    /// table is as long as the host's UDP sockets, so `stats` on each of 10,000
    /// connections reads it 10,000 times (minutes of CPU).
    pub fn stats_of(conns: &[Connection]) -> Vec<ConnStats> {
        let tables = UdpDrops::read();
        conns
            .iter()
            .map(|c| conn_stats(&c.conn, Some(&tables)))
            .collect()
    }

    /// Send one OAM F5 loopback probe (ITU-T I.610) of flow `scope` on the sending VC
    /// and wait up to `timeout` for its answer: the round trip, or `None` if no answer
    /// came — a [`Scope::Segment`](crate::wire::oam::Scope) probe is answered by the
    /// first switch on the path, an end-to-end one by the far end's engine (every
    /// natm end answers them). At most 16 probes of a connection wait at once
    /// ([`Error::TooManyProbes`]).
    pub fn oam_loopback(
        &self,
        scope: crate::wire::oam::Scope,
        timeout: Duration,
    ) -> Result<Option<Duration>, Error> {
        self.conn
            .oam_loopback(&self.eng, scope, timeout)
            .map_err(|_| Error::TooManyProbes(crate::engine::MAX_OAM_PROBES))
    }

    /// Whether sigd ended the call (the peer released it, an administrator did, or
    /// sigd stopped), with the cause: an error from `send` or `recv` after a release
    /// is explained by it. `None` in direct mode and while the call lives.
    pub fn released(&self) -> Option<Release> {
        self.conn.released.get().map(|(cause, detail)| Release {
            cause: *cause,
            detail: detail.clone(),
        })
    }

    /// This end's UDP address.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.conn.link.local_addr().map_err(Error::Io)
    }

    /// Whether the sending VC carries a byte stream.
    pub fn is_stream(&self) -> bool {
        self.conn.is_stream()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Dropping a connection closes it in order; the engine finishes the close
        // (retransmissions, CLOSE) and then forgets it.
        self.conn.close_all(&self.eng);
        if let Some(s) = self.sig.take() {
            // The VCs close in order on the data path, and sigd frees the call (cause
            // 16) once they have: a RELEASE sent now would overtake the close, and a
            // switch on the path tears the VCs down with it.
            let call = s.call;
            s.session.forget(call);
            let session = s.session.clone();
            *self.conn.on_gone.lock() = Some(crate::engine::OnGone(Box::new(move || {
                // To whichever sigd holds the call by then (one that restarted
                // took it over: `Session::current`).
                session
                    .current()
                    .notify(|req| crate::wire::ipc::Message::Release {
                        req,
                        call,
                        cause: 16,
                    });
            })));
        }
        self.conn.mark_dropped(&self.eng);
        // If it is still finishing, the engine must outlive this handle.
        crate::engine::Engine::linger(&self.eng);
    }
}

impl io::Write for &Connection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf, Wait::Block)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl io::Read for &Connection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.conn
            .read_bytes(&self.eng, buf)
            .map_err(io::Error::from)
    }
}

/// A random 32-bit value (cookies, initial sequence numbers).
/// Whether opening a VC failed because another VC end of its host port holds one of
/// its routes (`HostSub::route`).
fn route_taken(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<natm_proto::endpoint::RouteTaken>())
}

pub(super) fn random_cookie() -> u32 {
    let mut b = [0u8; 4];
    match rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()) {
        Ok(_) => u32::from_be_bytes(b),
        // No entropy available: still unique per process and call.
        Err(_) => {
            use std::hash::{BuildHasher, RandomState};
            RandomState::new().hash_one(std::time::Instant::now()) as u32
        }
    }
}

/// Asynchronous calls: runtime-agnostic futures (the engine's driver thread wakes the
/// task when the VC can make progress), and tokio's `AsyncRead`/`AsyncWrite` behind
/// the `tokio` feature.
impl Connection {
    /// Send one message; the future completes when the whole message is queued.
    pub async fn send_async(&self, msg: &[u8]) -> Result<(), Error> {
        let mut off = 0;
        std::future::poll_fn(|cx| self.poll_send_part(cx, msg, &mut off)).await
    }

    fn poll_send_part(
        &self,
        cx: &mut std::task::Context<'_>,
        msg: &[u8],
        off: &mut usize,
    ) -> std::task::Poll<Result<(), Error>> {
        use std::task::Poll;
        match self
            .conn
            .write_some(&self.eng, &msg[*off..], true, cx.waker())
        {
            Ok(n) => *off += n,
            Err(e) => return Poll::Ready(Err(e)),
        }
        if *off == msg.len() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    /// Receive the next whole message; `None` at the end of data.
    pub async fn recv_async(&self) -> Result<Option<Vec<u8>>, Error> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Receive the next piece of a message without copying it
    /// ([`Connection::recv_chunk`]); `None` at the end of data.
    pub async fn recv_chunk_async(&self) -> Result<Option<Chunk>, Error> {
        std::future::poll_fn(
            |cx| match self.conn.poll_recv_chunk(&self.eng, cx.waker()) {
                Some(r) => std::task::Poll::Ready(r),
                None => std::task::Poll::Pending,
            },
        )
        .await
    }

    /// The next whole message ([`Connection::recv`]) if one has arrived; `None` once
    /// the peer has closed and everything is delivered; else `cx`'s waker is woken
    /// when one arrives (or the connection ends). Checked and registered under the
    /// same lock, as [`Connection::poll_recv_chunk`]: for a fixed set of threads
    /// serving many connections, woken by the connection that has work.
    pub fn poll_recv(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Option<Vec<u8>>, Error>> {
        match self.conn.poll_recv_message(&self.eng, cx.waker()) {
            Some(r) => std::task::Poll::Ready(r),
            None => std::task::Poll::Pending,
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::AbortReason;
    use crate::ulib::{Host, HostConfig, MemNetwork, Network};

    #[test]
    fn a_listener_answers_a_frame_of_no_connection_with_abort_through_its_endpoint() {
        use crate::wire::tpdu::{Header, TpduType};
        use crate::wire::vcframe;
        // A socket per VC end: the listener's socket gets only frames of no connection.
        // (One port per host holds them a while for calls not opened yet:
        // `HostRoutes::set_acceptor`.)
        let mut cfg = HostConfig::default();
        cfg.engine.ports = crate::ulib::Ports::PerVc;
        let host = Host::open(cfg).unwrap();
        let l = host.bind("127.0.0.1:0", "reliable").unwrap();
        let to = l.local_addr().unwrap();
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut d = vcframe::Repr::data(0, 77).to_bytes().to_vec();
        d.extend_from_slice(
            &Header {
                cookie: 0x5EED,
                ..Header::new(TpduType::Data)
            }
            .to_bytes(),
        );
        sock.send_to(&d, to).unwrap();
        let mut buf = [0u8; 128];
        let (n, from) = sock.recv_from(&mut buf).unwrap();
        assert_eq!(from, to);
        let (vc, tpdu) = vcframe::Repr::parse_bytes(&buf[..n]).unwrap();
        let (h, _) = Header::parse_bytes(tpdu).unwrap();
        assert_eq!((vc.vci, h.ty, h.cookie), (77, TpduType::Abort, 0x5EED));
        // Nobody was accepted for it.
        assert!(matches!(l.accept(Wait::No), Err(Error::WouldBlock(_))));
    }

    /// A host with one UDP port for all its VCs.
    fn per_host() -> Host {
        let mut cfg = HostConfig::default();
        cfg.engine.ports = crate::ulib::Ports::PerHost;
        Host::open(cfg).unwrap()
    }

    /// A direct call from `from` with the cookies `draw` gives.
    fn connect_with_cookies(
        from: &Host,
        to: SocketAddr,
        draw: impl FnMut() -> (u32, u32),
    ) -> Result<Connection, Error> {
        let r = from
            .resolve_qos(&"reliable".into_qos().unwrap())
            .unwrap()
            .not_bare()
            .unwrap();
        Connection::connect_drawing(
            from.eng.clone(),
            (None, to),
            r,
            Duration::from_secs(5),
            draw,
        )
    }

    #[test]
    fn a_caller_on_one_port_draws_again_a_cookie_another_of_its_calls_holds() {
        let (a, b) = (per_host(), per_host());
        let l = b.bind("127.0.0.1:0", "reliable").unwrap();
        let to = l.local_addr().unwrap();
        let first = connect_with_cookies(&a, to, || (0xC0FFEE, 1)).unwrap();
        let mut draws = vec![(0xBEEF, 2), (0xC0FFEE, 3)];
        let second = connect_with_cookies(&a, to, || draws.pop().unwrap()).unwrap();
        assert!(draws.is_empty(), "the held cookie was not drawn again");
        // Both calls carry their own data.
        let (s1, s2) = (
            l.accept(Wait::For(Duration::from_secs(5))).unwrap(),
            l.accept(Wait::For(Duration::from_secs(5))).unwrap(),
        );
        first.send(b"one", Wait::Block).unwrap();
        second.send(b"two", Wait::Block).unwrap();
        let mut got = [s1, s2].map(|s| s.recv(Wait::For(Duration::from_secs(5))).unwrap());
        got.sort();
        assert_eq!(got, [Some(b"one".to_vec()), Some(b"two".to_vec())]);
    }

    #[test]
    fn a_listener_refuses_at_once_a_call_whose_cookie_another_callers_call_holds() {
        // Two callers on ports of their own pick the same cookie: the listener cannot
        // tell their VCs apart, and the second caller is refused, not left to time out.
        let (a1, a2, b) = (per_host(), per_host(), per_host());
        let l = b.bind("127.0.0.1:0", "reliable").unwrap();
        let to = l.local_addr().unwrap();
        let _first = connect_with_cookies(&a1, to, || (0xC0FFEE, 1)).unwrap();
        match connect_with_cookies(&a2, to, || (0xC0FFEE, 2)) {
            Err(Error::Refused { cause: 17, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    /// Both ends of a direct-mode connection over a memory network.
    fn mem_pair(qos: &str) -> (Connection, Connection) {
        let net = MemNetwork::new();
        let mut cfg = HostConfig::default();
        cfg.engine.network = Network::Mem(net.clone());
        let (a, b) = (Host::open(cfg.clone()).unwrap(), Host::open(cfg).unwrap());
        let l = b.bind("10.0.0.2:7000", qos).unwrap();
        let addr = l.local_addr().unwrap();
        let q = qos.to_owned();
        let t = std::thread::spawn(move || a.connect(addr, &q).unwrap());
        let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
        (t.join().unwrap(), server)
    }

    fn events_until(c: &Connection, last: impl Fn(&ConnEvent) -> bool) -> Vec<ConnEvent> {
        let mut got = Vec::new();
        while let Some(e) = c.next_event(Wait::For(Duration::from_secs(10))) {
            let done = last(&e);
            got.push(e);
            if done {
                return got;
            }
        }
        panic!("no more events after {got:?}");
    }

    #[test]
    fn qos_changes_and_closes_come_as_events_on_both_ends() {
        let (client, server) = mem_pair("cbr:pcr=8Mbps,min_pcr=1Mbps");
        assert_eq!(client.next_event(Wait::No), None);
        let ch = client
            .set_qos("cbr:pcr=4Mbps", Duration::from_secs(5))
            .unwrap();
        assert_eq!(ch.rate_bps, 4_000_000);
        assert_eq!(
            events_until(&client, |e| matches!(e, ConnEvent::QosChanged { .. })),
            [
                ConnEvent::QosPending { rate: 4_000_000 },
                ConnEvent::QosChanged { rate: 4_000_000 }
            ]
        );
        assert_eq!(
            events_until(&server, |_| true),
            [ConnEvent::PeerQosChanged { rate: 4_000_000 }]
        );
        // Beyond the bounds: refused at once, nothing sent, no event.
        assert!(matches!(
            client.set_qos("cbr:pcr=16Mbps", Duration::from_secs(5)),
            Err(Error::QosBounds(_))
        ));
        assert_eq!(client.next_event(Wait::No), None);
        client.close();
        assert_eq!(
            events_until(&server, |e| *e == ConnEvent::PeerClosed),
            [ConnEvent::PeerClosed]
        );
        assert_eq!(
            events_until(&client, |e| *e == ConnEvent::Closed),
            [ConnEvent::Closed]
        );
        // This end's own abort is an event too (a thread waiting on events learns it).
        server.abort();
        assert_eq!(
            server.next_event(Wait::For(Duration::from_secs(1))),
            Some(ConnEvent::Aborted(AbortReason::Local))
        );
        assert_eq!(client.events_dropped() + server.events_dropped(), 0);
    }

    #[test]
    fn an_abort_is_an_event_on_both_ends_and_a_held_send_on_the_sender() {
        let (client, server) = mem_pair("cbr:pcr=1Mbps");
        let big = vec![1u8; 64 << 10];
        let mut held = false;
        for _ in 0..1000 {
            if matches!(client.send(&big, Wait::No), Err(Error::WouldBlock(_))) {
                held = true;
                break;
            }
        }
        assert!(held, "the 1 Mbit/s VC never held a send");
        let ev = client.next_event(Wait::No).unwrap();
        assert!(
            matches!(ev, ConnEvent::OverRate | ConnEvent::WindowFull),
            "{ev:?}"
        );
        // Further held sends are the same run: no new event.
        let _ = client.send(&big, Wait::No);
        assert_eq!(client.next_event(Wait::No), None);
        client.abort();
        assert_eq!(
            events_until(&client, |_| true),
            [ConnEvent::Aborted(AbortReason::Local)]
        );
        assert_eq!(
            events_until(&server, |e| matches!(e, ConnEvent::Aborted(_))),
            [ConnEvent::Aborted(AbortReason::Peer)]
        );
        assert_eq!(
            server.next_event(Wait::For(Duration::from_millis(200))),
            None
        );
    }

    #[test]
    fn a_sender_held_by_its_bucket_waits_for_the_driver_not_in_the_socket() {
        let net = MemNetwork::new();
        let mut cfg = HostConfig::default();
        cfg.engine.network = Network::Mem(net.clone());
        let (a, b) = (Host::open(cfg.clone()).unwrap(), Host::open(cfg).unwrap());
        let l = b.bind("10.0.0.2:7000", "cbr:pcr=1Mbps").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || a.connect(addr, "cbr:pcr=1Mbps").unwrap());
        let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
        let client = Arc::new(t.join().unwrap());
        // Far more than the send buffer holds at 1 Mbit/s: the send blocks behind the
        // bucket for many seconds.
        let c2 = client.clone();
        let sender = std::thread::spawn(move || c2.send(vec![7u8; 8 << 20], Wait::Block));
        let mut seen = None;
        for _ in 0..1000 {
            let (waiters, reading) = client.conn.waiting(crate::engine::Which::Tx);
            if waiters > 0 {
                seen = Some(reading);
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // The blocked sender sleeps on the end's condition variable, which the
        // driver's timer signals, and nobody sits in the socket's receive for it.
        assert_eq!(seen, Some(false), "the sender never waited on the condvar");
        // ...and the driver sends for it meanwhile (it may not have run yet when the
        // sender began to wait).
        let until = Instant::now() + Duration::from_secs(5);
        while client.stats().tx.tpdus_sent == 0 {
            assert!(
                Instant::now() < until,
                "the driver sent nothing for the sender"
            );
            std::thread::yield_now();
        }
        client.abort();
        assert!(sender.join().unwrap().is_err());
        drop(server);
    }

    /// A pair of best-effort connections between two hosts on loopback UDP.
    fn udp_pair() -> (Host, Host, Connection, Connection) {
        udp_pair_of("best-effort")
    }

    fn udp_pair_of(qos: &str) -> (Host, Host, Connection, Connection) {
        let (a, b) = (
            Host::open(HostConfig::default()).unwrap(),
            Host::open(HostConfig::default()).unwrap(),
        );
        let l = b.bind("127.0.0.1:0", qos).unwrap();
        let addr = l.local_addr().unwrap();
        let client = a.connect(addr, qos).unwrap();
        let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
        (a, b, client, server)
    }

    /// Wait up to 5 s, without any application thread reading, for the engine's driver
    /// to have delivered `n` TPDUs to `c`'s receiving VC.
    fn driver_delivers(c: &Connection, n: u64) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < until {
            if c.stats().rx.tpdus_received >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// A waker that counts its wakes.
    struct Woken(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn a_poll_that_empties_a_vc_held_at_its_watermark_ends_the_hold() {
        // Issue 31 (natm ip's VCs on a pool): the driver stopped reading a best-effort
        // VC at its high watermark (the socket out of its epoll set) while a pool's
        // worker, polling, could not take the read role and emptied the VC without
        // reading the socket. Nobody ended the hold: what waited in the socket was
        // read only when something else polled the VC (one iperf3 run in seven at
        // ~0.55 Gbit/s). The poll that finds nothing must end it, and be woken.
        let mut cfg = HostConfig::default();
        cfg.engine.watermarks = Some(crate::engine::Watermarks {
            high: 64 << 10,
            low: 16 << 10,
        });
        let (a, b) = (Host::open(cfg.clone()).unwrap(), Host::open(cfg).unwrap());
        let l = b.bind("127.0.0.1:0", "best-effort").unwrap();
        let addr = l.local_addr().unwrap();
        let client = a.connect(addr, "best-effort").unwrap();
        let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
        const N: usize = 64;
        for i in 0..N {
            client.send(&[i as u8; 4096], Wait::Block).unwrap();
        }
        // The driver reads past the high watermark and stops; the rest waits in the
        // socket.
        let until = Instant::now() + Duration::from_secs(5);
        while server.stats().watermark_holds == 0 || !server.conn.held_by_watermark() {
            assert!(Instant::now() < until, "the driver never held the VC");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(50));
        let read = server.stats().rx.tpdus_received;
        assert!(
            read < N as u64,
            "all {read} read: nothing waits in the socket"
        );
        let woken = Arc::new(Woken(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(woken.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let mut got = 0;
        // The worker polls while another thread (the driver, as it held the VC) has
        // the read role: it takes what was read, then finds nothing.
        server.conn.hold_read_role_unread(&server.eng, || {
            while let std::task::Poll::Ready(m) = server.poll_recv(&mut cx) {
                assert_eq!(m.unwrap().unwrap(), vec![got as u8; 4096]);
                got += 1;
            }
        });
        assert_eq!(got as u64, read, "the poll took what the driver had read");
        let until = Instant::now() + Duration::from_secs(2);
        while woken.0.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(
                Instant::now() < until,
                "the VC is still held with {} messages in its socket, and the waker was never woken",
                N - got
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // Every message arrives, each poll that finds nothing woken again.
        let until = Instant::now() + Duration::from_secs(5);
        while got < N {
            assert!(Instant::now() < until, "{got} of {N} messages arrived");
            match server.poll_recv(&mut cx) {
                std::task::Poll::Ready(m) => {
                    assert_eq!(m.unwrap().unwrap(), vec![got as u8; 4096]);
                    got += 1;
                }
                std::task::Poll::Pending => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        assert!(!server.conn.held_by_watermark());
    }

    /// Whether the socket is back in the driver's set within 5 s. A thread that
    /// ends its wait while another holds the read role (the driver, a sweep) leaves
    /// the rewatch to that holder as it lets the role go, a moment later.
    fn back_with_driver(c: &Connection) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while !c.conn.driver_watches() {
            if Instant::now() >= until {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    /// Round trips of 32 octets, the server's thread waiting in `recv` for each.
    fn round_trips(client: &Connection, server: &Connection, n: u8) {
        for i in 0..n {
            client.send(&[i; 32], Wait::Block).unwrap();
            assert_eq!(
                server.recv(Wait::For(Duration::from_secs(5))).unwrap(),
                Some(vec![i; 32])
            );
        }
    }

    /// Round trips until a `recv` has waited for its message and parked the server's
    /// socket (the driver may read a message before `recv` waits for it, and then
    /// nothing parks), for up to 5 s; whether it parked.
    fn parked_by_round_trips(client: &Connection, server: &Connection) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            round_trips(client, server, 1);
            if server.conn.parked() {
                return true;
            }
        }
        false
    }

    #[test]
    fn a_best_effort_socket_stays_parked_between_recvs_and_goes_back_when_idle() {
        // Issue 30: between `recv` calls a best-effort VC's socket stays out of the
        // driver's epoll set (no `epoll_ctl` per `recv`)...
        let (_a, _b, client, server) = udp_pair();
        assert!(parked_by_round_trips(&client, &server));
        assert!(!server.conn.driver_watches());
        // ...and once nobody has waited on it for a sweep period, the driver reads it
        // again: a datagram after the last `recv` is delivered without another.
        let before = server.stats().rx.tpdus_received;
        client.send(b"nobody waits", Wait::Block).unwrap();
        assert!(
            driver_delivers(&server, before + 1),
            "nobody read the parked socket"
        );
        assert!(!server.conn.parked());
        assert!(server.conn.driver_watches());
        assert_eq!(
            server.recv(Wait::No).unwrap(),
            Some(b"nobody waits".to_vec())
        );
    }

    #[test]
    fn a_vc_that_exchanges_acks_is_never_parked() {
        // A reliable VC's sender runs its timers on the ACKs: the driver must read
        // them as they come, so the socket goes back to it after every wait.
        let (_a, _b, client, server) = udp_pair_of("reliable");
        for _ in 0..50 {
            round_trips(&client, &server, 1);
            assert!(!server.conn.parked());
            assert!(back_with_driver(&server), "watched again after the wait");
        }
    }

    #[test]
    fn an_async_reader_takes_a_parked_socket_back_for_the_driver() {
        let (_a, _b, client, server) = udp_pair();
        assert!(parked_by_round_trips(&client, &server));
        // A poll that finds nothing waits on the driver: the socket goes back to it
        // at once, and the next message wakes the poller.
        let woken = Arc::new(Woken(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(woken.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(server.poll_recv(&mut cx).is_pending());
        assert!(!server.conn.parked());
        assert!(back_with_driver(&server));
        client.send(b"for the poller", Wait::Block).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while woken.0.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(Instant::now() < until, "the poller was never woken");
            std::thread::sleep(Duration::from_millis(1));
        }
        match server.poll_recv(&mut cx) {
            std::task::Poll::Ready(m) => assert_eq!(m.unwrap().unwrap(), b"for the poller"),
            std::task::Poll::Pending => panic!("woken with nothing to take"),
        }
    }

    /// The quickest of ten `recv`s of `timeout` with nothing to receive: each ends
    /// with `TimedOut`.
    fn quickest_timeout(c: &Connection, timeout: Duration) -> Duration {
        (0..10)
            .map(|_| {
                let t = Instant::now();
                let r = c.recv(Wait::For(timeout));
                assert!(matches!(r, Err(Error::TimedOut)), "{r:?}");
                t.elapsed()
            })
            .min()
            .unwrap()
    }

    #[test]
    fn a_recv_with_a_timeout_shorter_than_the_read_slice_returns_on_time() {
        let pairs = [
            ("best-effort, a socket per VC", udp_pair_of("best-effort")),
            ("reliable, a socket per VC", udp_pair_of("reliable")),
            ("best-effort, one port per host", {
                let (a, b) = (per_host(), per_host());
                let l = b.bind("127.0.0.1:0", "best-effort").unwrap();
                let client = a.connect(l.local_addr().unwrap(), "best-effort").unwrap();
                let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
                (a, b, client, server)
            }),
        ];
        let short = Duration::from_millis(2);
        for (what, (_a, _b, client, server)) in &pairs {
            // Once after a message, so that the application thread reads the socket.
            client.send(b"first", Wait::Block).unwrap();
            assert_eq!(
                server.recv(Wait::For(Duration::from_secs(5))).unwrap(),
                Some(b"first".to_vec())
            );
            // The socket's wait was the 50 ms read slice whatever the caller's timeout
            // (a 2 ms recv took 20-55 ms).
            let took = quickest_timeout(server, short);
            assert!(
                took < Duration::from_millis(15),
                "{what}: a 2 ms recv took {took:?}"
            );
            // A longer wait is not cut short by the shorter one before it...
            let long = Duration::from_millis(120);
            let t = Instant::now();
            assert!(matches!(server.recv(Wait::For(long)), Err(Error::TimedOut)));
            assert!(
                t.elapsed() >= long,
                "{what}: a 120 ms recv ended after {:?}",
                t.elapsed()
            );
            // ...and what comes next is still received.
            client.send(b"after", Wait::Block).unwrap();
            assert_eq!(
                server.recv(Wait::For(Duration::from_secs(5))).unwrap(),
                Some(b"after".to_vec()),
                "{what}"
            );
        }
    }

    #[test]
    fn a_datagram_after_a_reader_gave_up_is_read_by_the_driver() {
        let (_a, _b, client, server) = udp_pair();
        // Round trips while the server's application thread waits on the socket.
        for i in 0..20u8 {
            client.send(&[i; 32], Wait::Block).unwrap();
            assert_eq!(
                server.recv(Wait::For(Duration::from_secs(5))).unwrap(),
                Some(vec![i; 32])
            );
        }
        // A reader that gives up (its wait ends with nothing read) leaves the socket
        // to the driver again: a datagram after it is read without any `recv`.
        assert!(matches!(
            server.recv(Wait::For(Duration::from_millis(1))),
            Err(Error::TimedOut)
        ));
        assert!(back_with_driver(&server));
        let before = server.stats().rx.tpdus_received;
        client.send(b"after the wait", Wait::Block).unwrap();
        assert!(
            driver_delivers(&server, before + 1),
            "nobody read the socket"
        );
        assert_eq!(
            server.recv(Wait::No).unwrap(),
            Some(b"after the wait".to_vec())
        );
    }

    #[test]
    fn a_datagram_the_waiting_reader_left_unread_is_not_lost() {
        let (_a, _b, client, server) = udp_pair();
        let before = server.stats().rx.tpdus_received;
        // The datagram arrives while an application thread holds the read role (the
        // socket out of the driver's epoll set), and that thread lets the role go
        // without reading it: the driver must be told, though no datagram follows.
        let quiet = server.conn.hold_read_role_unread(&server.eng, || {
            client.send(b"while held", Wait::Block).unwrap();
            // On loopback the datagram is queued once `send` returns; let the
            // driver's (absent) wake-up have every chance to happen first.
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(server.stats().rx.tpdus_received, before, "read while held");
        });
        assert!(
            quiet,
            "the socket stayed in the driver's epoll set during the hold"
        );
        assert!(
            driver_delivers(&server, before + 1),
            "the datagram was lost"
        );
        assert_eq!(server.recv(Wait::No).unwrap(), Some(b"while held".to_vec()));
        // And the socket is watched as before: the next datagram needs no reader.
        client.send(b"next", Wait::Block).unwrap();
        assert!(driver_delivers(&server, before + 2));
        assert_eq!(server.recv(Wait::No).unwrap(), Some(b"next".to_vec()));
    }

    #[test]
    fn a_release_while_another_thread_holds_the_read_role_delivers_what_came_first() {
        let (_a, _b, client, server) = udp_pair();
        // The data arrives, then sigd's RELEASE is handled by a thread that cannot
        // take the read role (the driver or a reader holds it): the holder must feed
        // what it reads before the VC ends, not after.
        let quiet = server.conn.hold_read_role_unread(&server.eng, || {
            client.send(b"before the release", Wait::Block).unwrap();
            server.conn.peer_released(&server.eng);
        });
        assert!(quiet, "the role was never held");
        assert_eq!(
            server.recv(Wait::For(Duration::from_secs(5))).unwrap(),
            Some(b"before the release".to_vec())
        );
        assert_eq!(
            server.recv(Wait::For(Duration::from_secs(5))).unwrap(),
            None,
            "then the end of the stream"
        );
    }

    #[test]
    fn an_abort_while_a_reader_waits_leaves_the_socket_out_of_the_drivers_set() {
        // A shut socket reads as an endless run of empty datagrams: once aborted it
        // must not go back into the driver's epoll set, not even by the reader that
        // waited in it, which puts it back as its wait ends.
        let (_a, _b, _client, server) = udp_pair();
        let server = Arc::new(server);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = server.clone();
        std::thread::spawn(move || {
            let _ = tx.send(reader.recv(Wait::Block));
        });
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !server.conn.waits_in_link() {
            assert!(std::time::Instant::now() < until, "the reader never waited");
            std::thread::yield_now();
        }
        server.abort();
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(5))
                .expect("the reader still waits after the abort"),
            Err(Error::Aborted(_))
        ));
        assert!(!server.conn.driver_watches());
    }

    #[test]
    fn a_release_while_a_reader_waits_in_the_socket_ends_its_wait() {
        let (_a, _b, _client, server) = udp_pair();
        let server = Arc::new(server);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = server.clone();
        std::thread::spawn(move || {
            let _ = tx.send(reader.recv(Wait::Block));
        });
        // The reader holds the read role in the socket's receive (nothing comes)...
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !server.conn.waiting(crate::engine::Which::Rx).1 {
            assert!(std::time::Instant::now() < until, "the reader never read");
            std::thread::yield_now();
        }
        // ...when sigd's RELEASE comes: the holder ends the VC as it lets the role go,
        // within its read slice, and its `recv` sees the end of the stream.
        server.conn.peer_released(&server.eng);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5))
                .expect("the reader still waits after the release")
                .unwrap(),
            None
        );
    }
}
