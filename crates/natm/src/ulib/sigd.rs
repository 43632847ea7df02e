//! ulib's side of the IPC with the host's sigd (`crate::wire::ipc`): one Unix stream
//! per host, answers and events filed per request and call, and callers that wait
//! for them with a timeout. No call can block forever: every wait is bounded, and if
//! sigd goes away every waiter fails at once with [`Error::SigdGone`].
//!
//! Who reads the stream: as in the engine's data path, whichever thread needs
//! progress takes the session's read role — the application thread waiting in
//! `connect`, `accept` or `next_call` reads sigd's answer itself, so an IPC message
//! costs no thread hand-off on the call's critical path. The host's engine driver
//! reads when no application thread waits (an offer nobody is waiting for yet, a
//! `Released` for an established call): the stream is in the driver's epoll set under
//! its own token ([`Engine::watch`]) while no application thread holds the role, so
//! the host has one reactor thread, not one for data and one for sigd. The driver
//! never takes the role from a waiting application thread (`try_lock`).
//!
//! A thread that waits without the read role parks itself (`std::thread::park`) under
//! the key of what it waits for, and the reader unparks only the threads waiting for
//! what it filed: an answer wakes its requester alone, not every waiting thread.
//!
//! Whoever reads also watches established calls: a `Released` from sigd (the peer
//! application died or released, an administrator released the call, sigd stopped)
//! is recorded on the connection (`Connection::released`) and ends its VCs at once —
//! aborted, or for causes 16 and 31 (normal clearing) closed in order from this side — so the
//! application learns of it without waiting for a transport timeout.
//!
//! If sigd dies, established calls go on: their data path never touches sigd (seed
//! 004 §4). The session that lost sigd hands its established calls to a background
//! thread, which reconnects with a bounded backoff and reclaims each call that is
//! still open from the new sigd (`Message::Reclaim` with the data path sigd gave,
//! docs/sigd.md "sigd restart"); the new session then carries the calls, and
//! a connection's release goes to it. A call the new sigd refuses to take over ends
//! as a released one does. New calls while sigd is down fail at once
//! ([`Error::NoSigd`]).
//!
//! Listeners come back too: each listener bound through sigd keeps what bound it
//! ([`Binding`]: the SAP, the QoS, a pre-authorised listener's data sockets), and the
//! same background thread binds it again on the new session, as the same user with a
//! plain `Bind`, so a server goes on taking calls after the restart. A thread waiting
//! in `accept` when sigd dies still fails at once ([`Error::SigdGone`]); a later
//! `accept` waits for the new binding. If the restarted sigd refuses it (someone
//! else bound the SAP meanwhile), or no sigd comes back, the listener reports that
//! from then on.
//!
//! The session also reports each established call's counters to sigd (`natm stat`):
//! the engine's driver runs [`Source::report`] once per
//! [`REPORT_INTERVAL`](crate::engine::REPORT_INTERVAL) while the session holds
//! calls, and a call's counters go out only when they changed since its last report.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::listener::AutoLinks;
use super::stats::conn_stats;
use super::{ConnStats, Error};
use crate::adaptor::UdpDrops;
use crate::engine::{Conn, Engine, Source};
use crate::sync::{Condvar, Level, MutexGuard, OrderedMutex as Mutex};
use crate::transport::AbortReason;
use crate::wire::ipc::{DataPath, Decoder, Message, VcCounters};
use crate::wire::qos::Qos;

/// How long sigd has to answer a request (it answers at once unless it is hung).
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// After sigd dies, the first wait before connecting again, doubled after each
/// failure up to [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(50);
/// The longest wait between two attempts to reach a restarted sigd.
const RECONNECT_MAX: Duration = Duration::from_secs(1);
/// How long established calls wait for a sigd to come back before the session
/// stops trying (the peer's sigd keeps them `[restart] preserve_ms`, 300 s).
const RECONNECT_FOR: Duration = Duration::from_secs(600);

/// What sigd said about a call after the immediate answer.
#[derive(Debug, Clone)]
pub(crate) enum CallEvent {
    Connected(Box<DataPath>),
    Released { cause: u8, detail: String },
}

/// What sigd said about a party of a point-to-multipoint call this application is
/// the root of (`AddParty`, `DropParty`, and leaves that left by themselves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PartyNote {
    /// ADD PARTY ACKNOWLEDGE: the network sends the leaf the call's data.
    Added(u16),
    /// ADD PARTY REJECT (or no answer in T399), with the cause and what happened.
    Rejected(u16, u8, String),
    /// The party is gone: dropped as asked (`left` false) or by its side.
    Dropped {
        party: u16,
        cause: u8,
        left: bool,
        detail: String,
    },
}

impl PartyNote {
    fn party(&self) -> u16 {
        match self {
            PartyNote::Added(p) | PartyNote::Rejected(p, ..) => *p,
            PartyNote::Dropped { party, .. } => *party,
        }
    }
}

/// An incoming call as sigd offered it.
#[derive(Debug, Clone)]
pub(crate) struct Offer {
    pub(crate) call: u64,
    pub(crate) caller: String,
    pub(crate) qos: Qos,
}

/// A pre-authorised listener's call that sigd already answered on the listener's
/// data endpoint `data`.
#[derive(Debug, Clone)]
pub(crate) struct PreAccepted {
    pub(crate) call: u64,
    pub(crate) data: SocketAddr,
    /// Always [`CallEvent::Connected`].
    pub(crate) connected: CallEvent,
}

/// What a listener gets next: a call already answered, or one to answer.
#[derive(Debug)]
pub(crate) enum NextCall {
    Accepted(PreAccepted),
    Offered(Box<Offer>),
}

/// The read role: the stream's read side and what was read of a partial message.
struct Reader {
    stream: UnixStream,
    dec: Decoder,
    buf: Box<[u8]>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").finish_non_exhaustive()
    }
}

/// Longest a waiting application thread blocks in one read before it looks at its
/// deadline and at what other readers filed again.
const READ_SLICE: Duration = Duration::from_millis(100);

/// What a parked thread waits for: the answer to a request, or what comes for an id
/// sigd assigned (a call's events, a listener's offers and calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Req(u64),
    Id(u64),
}

/// An established call's data path and this side's data endpoint.
type KeptPath = (DataPath, SocketAddr);

#[derive(Debug, Default)]
struct State {
    /// Application threads parked (not reading), by what they wait for.
    parked: HashMap<Key, Vec<Thread>>,
    waiting: HashSet<u64>,
    /// Requests whose `Ack` names no call or listener of this session (a party's
    /// endpoint reference, a modified call): no slot is made for its id.
    slotless: HashSet<u64>,
    answers: HashMap<u64, Message>,
    /// What sigd said about the parties of each point-to-multipoint call this session
    /// roots, oldest first, until the application reads it.
    parties: HashMap<u64, VecDeque<PartyNote>>,
    /// Ids sigd assigned to this session (calls and listeners), each with what came
    /// for it; created when the `Ack` arrives, so nothing that follows it is lost.
    slots: HashMap<u64, Slot>,
    /// Established calls: the engine connection to abort on `Released`.
    live: HashMap<u64, Weak<Conn>>,
    /// Each established call's data path and this side's data endpoint, as a
    /// restarted sigd is asked to take the call over with them (`Reclaim`).
    paths: HashMap<u64, KeptPath>,
    /// Each established call's counters as last reported to sigd (`sampled_ms` 0):
    /// unchanged counters are not sent again.
    reported: HashMap<u64, VcCounters>,
    /// Listeners bound on this session, to bind again on a restarted sigd.
    listeners: HashMap<u64, Weak<Binding>>,
    gone: Option<String>,
    /// sigd closed the session itself, with this cause and reason (a limit, an idle
    /// close, a protocol error): what waiters are told instead of `SigdGone`.
    closed_by_sigd: Option<(u8, String)>,
    /// sigd has sent this session something. A session that ends before it heard
    /// anything never reached a serving sigd: one opened in the instant a dying
    /// sigd's listening socket still took connections (its process exits, closing
    /// the session of an established call before that socket), which no sigd ever
    /// accepted.
    heard: bool,
    /// The socket path the session was opened on (for [`Error::NoSigd`]).
    path: PathBuf,
}

impl State {
    /// The error a waiter gets once the session is gone.
    fn gone_error(&self) -> Error {
        match &self.closed_by_sigd {
            Some((cause, detail)) => Error::SigdClosed {
                cause: *cause,
                detail: detail.clone(),
            },
            None if !self.heard => Error::NoSigd {
                path: self.path.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "sigd closed the connection before it answered",
                ),
            },
            None => Error::SigdGone,
        }
    }
}

#[derive(Debug, Default)]
struct Slot {
    events: VecDeque<CallEvent>,
    offers: VecDeque<Offer>,
    accepted: VecDeque<PreAccepted>,
}

/// One IPC session with sigd.
#[derive(Debug)]
pub(crate) struct Session {
    writer: Mutex<UnixStream>,
    next_req: AtomicU64,
    state: Mutex<State>,
    /// The read role (see the module doc).
    reader: Mutex<Reader>,
    /// The stream's descriptor (the reader's, which lives as long as the session).
    fd: RawFd,
    /// The stream's token in the engine driver's epoll set. The stream is in the set
    /// only while no application thread holds the read role, so a message an
    /// application thread reads wakes no one else.
    token: usize,
    /// Weak both ways: the engine watches the session weakly too, so neither keeps
    /// the other alive (a dropped host's driver ends; a dropped session's stream
    /// closes, and sigd releases what it held).
    eng: Weak<Engine>,
    /// The host's client, which opens the session that follows this one.
    client: Weak<SigdClient>,
    /// The session that took over this one's calls after sigd died (module doc).
    successor: std::sync::OnceLock<Arc<Session>>,
    /// This session's own `Arc`, for the reclaim thread.
    me: Weak<Session>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(eng) = self.eng.upgrade() {
            eng.unwatch(self.fd, self.token);
        }
        // sigd releases whatever this session still held.
        let _ = self.writer.lock().shutdown(std::net::Shutdown::Both);
    }
}

impl Source for Session {
    /// The driver saw the stream readable: no application thread held the read role
    /// when the edge came (the holder takes the stream out of the set). Read what is
    /// queued, unless a thread took the role since — it reads it then.
    fn on_readable(&self) {
        if self.is_gone() {
            return;
        }
        if let Some(mut rd) = self.reader.try_lock() {
            self.read_some(&mut rd, None);
        }
    }

    /// Send sigd the counters of every established call that changed since its last
    /// report; another report is wanted while calls are established.
    fn report(&self) -> bool {
        let Some(eng) = self.eng.upgrade() else {
            return false;
        };
        let live: Vec<(u64, Arc<Conn>)> = {
            let st = self.state.lock();
            if st.gone.is_some() {
                return false;
            }
            st.live
                .iter()
                .filter_map(|(id, w)| w.upgrade().map(|c| (*id, c)))
                .collect()
        };
        if live.is_empty() {
            return false;
        }
        let sampled_ms = eng.clock.now().as_nanos() / 1_000_000;
        // The kernel's drop counts of every socket, read once for all the calls.
        let tables = UdpDrops::read();
        let fresh: Vec<(u64, VcCounters)> = live
            .iter()
            .map(|(call, conn)| {
                let s = conn_stats(conn, Some(&tables));
                (*call, vc_counters(&s, sampled_ms))
            })
            .collect();
        let (mut frames, mut sent) = (Vec::new(), Vec::new());
        {
            let mut st = self.state.lock();
            for (call, c) in fresh {
                let key = VcCounters { sampled_ms: 0, ..c };
                if st.reported.get(&call) == Some(&key) || !st.live.contains_key(&call) {
                    continue;
                }
                st.reported.insert(call, key);
                sent.push(call);
                Message::Counters {
                    req: 0,
                    call,
                    counters: Box::new(c),
                }
                .encode(&mut frames);
            }
        }
        if !frames.is_empty() && !self.send_report(&frames) {
            // Not sent: these calls go out with the next report even if unchanged.
            let mut st = self.state.lock();
            for call in sent {
                st.reported.remove(&call);
            }
        }
        true
    }
}

/// A connection's counters as the IPC carries them to sigd.
fn vc_counters(s: &ConnStats, sampled_ms: u64) -> VcCounters {
    let (tx, rx) = (&s.tx, &s.rx);
    VcCounters {
        sampled_ms,
        tx_bytes: tx.bytes_sent,
        tx_tpdus: tx.tpdus_sent,
        rx_bytes: rx.bytes_delivered,
        rx_tpdus: rx.tpdus_received,
        retx_fast: tx.retx_fast,
        retx_timeout: tx.retx_timeout,
        retx_head: tx.retx_head,
        retx_bytes: tx.bytes_retransmitted,
        // The sending VC receives ACKs: its drops count too.
        drop_bad_cookie: tx.drop_bad_cookie
            + rx.drop_bad_cookie
            + s.seal.map_or(0, |x| x.bad_cookie),
        drop_out_of_window: rx.drop_out_of_window,
        drop_rcv_buf: rx.drop_rcv_buf,
        drop_duplicate: rx.dup_tpdus,
        drop_late: rx.drop_late,
        drop_other: rx.drop_oversize + rx.drop_headless + rx.drop_malformed + tx.drop_malformed,
        queue_drops: s.queue_drops,
        srtt_us: s.srtt.map(|d| d.as_micros() as u64),
        rate_bps: s.rate_bps,
        send_queued: s.send_queued,
        recv_queued: s.recv_queued,
        gaps: rx.gaps,
        lost_tpdus: rx.tpdus_lost,
        lost_messages: rx.messages_lost,
        drop_bad_tag: s.seal.map_or(0, |x| x.bad_tag),
        drop_replayed: s.seal.map_or(0, |x| x.replayed),
        send_pool_used: s.send_pool.used,
        send_pool_limit: s.send_pool.limit,
    }
}

/// sigd ended the call `conn` carries: record why, then end the VCs — in order from
/// this side for normal clearing (the peer's data still arrives, and a peer that
/// closed first finishes its close), at once for any other cause.
fn end_released(conn: &Conn, eng: &Engine, cause: u8, detail: String) {
    if conn.released.set((cause, detail.clone())).is_ok() {
        conn.events
            .push(crate::engine::ConnEvent::Released { cause, detail });
    }
    // Q.2931's normal class: 16 normal clearing, and 31 normal, unspecified, which is
    // what Linux's atmsigd clears an ordinary close with in UNI 3.0 mode.
    if cause == 16 || cause == 31 {
        // Orderly: what arrived is read, then the end (a switch on the path has torn
        // the VCs down with the RELEASE, so a close still in flight may never come),
        // and this side's sending VC closes in order.
        conn.peer_released(eng);
        conn.close_tx(eng);
    } else {
        conn.abort_both(eng, AbortReason::Peer);
    }
}

impl Session {
    /// Unpark the threads waiting for `key` (after the state's lock is dropped).
    fn wake(mut st: MutexGuard<'_, State>, key: Key) {
        let woken = st.parked.remove(&key);
        drop(st);
        woken.into_iter().flatten().for_each(|t| t.unpark());
    }

    /// Unpark every waiting thread (sigd went away).
    fn wake_all(mut st: MutexGuard<'_, State>) {
        let woken = std::mem::take(&mut st.parked);
        drop(st);
        woken.into_values().flatten().for_each(|t| t.unpark());
    }

    fn open(
        path: &Path,
        eng: Weak<Engine>,
        client: Weak<SigdClient>,
    ) -> Result<Arc<Session>, Error> {
        let s = UnixStream::connect(path).map_err(|e| Error::NoSigd {
            path: path.to_owned(),
            source: e,
        })?;
        let reader = s.try_clone().map_err(Error::Io)?;
        let engine = eng
            .upgrade()
            .ok_or_else(|| Error::Io(std::io::Error::other("the host's engine is gone")))?;
        let fd = reader.as_raw_fd();
        let token = engine.token();
        let session = Arc::new_cyclic(|me| Session {
            writer: Mutex::new(Level::Leaf, s),
            // 0 is the tag of requests nobody waits for (`notify`).
            next_req: AtomicU64::new(1),
            state: Mutex::new(
                Level::Leaf,
                State {
                    path: path.to_owned(),
                    ..State::default()
                },
            ),
            reader: Mutex::new(
                Level::SigdReader,
                Reader {
                    stream: reader,
                    dec: Decoder::new(),
                    buf: vec![0u8; 16 * 1024].into_boxed_slice(),
                },
            ),
            fd,
            token,
            eng,
            client,
            successor: std::sync::OnceLock::new(),
            me: me.clone(),
        });
        let weak: Weak<Session> = Arc::downgrade(&session);
        engine.watch(fd, token, weak).map_err(Error::Io)?;
        Ok(session)
    }

    /// Wait until `cond` gives an answer, reading the stream itself whenever no other
    /// thread is (the read role), else parked under `key`, what `cond` waits for.
    /// `None` deadline: until sigd goes away.
    fn wait_for<R>(
        &self,
        key: Key,
        until: Option<Instant>,
        mut cond: impl FnMut(&mut State) -> Option<Result<R, Error>>,
    ) -> Result<R, Error> {
        loop {
            let left = {
                let mut st = self.state.lock();
                if let Some(r) = cond(&mut st) {
                    return r;
                }
                if st.gone.is_some() {
                    return Err(st.gone_error());
                }
                match until {
                    Some(u) => {
                        let l = u.saturating_duration_since(Instant::now());
                        if l.is_zero() {
                            return Err(Error::TimedOut);
                        }
                        l.min(READ_SLICE)
                    }
                    None => READ_SLICE,
                }
            };
            if let Some(mut rd) = self.reader.try_lock() {
                // Out of the driver's set while this thread reads, so what it reads
                // wakes no one else.
                let eng = self.eng.upgrade();
                if let Some(e) = &eng {
                    let _ = e.deregister(self.fd);
                }
                self.read_some(&mut rd, Some(left));
                // Back in the driver's set: if anything came after the last read, the
                // (edge-triggered) registration reports it at once and the driver
                // reads it, so nothing is left unread when no one waits. (No engine:
                // the host is gone, and no one is left to wait.)
                if eng.is_some_and(|e| e.register(self.fd, self.token).is_err()) {
                    self.mark_gone("cannot watch the sigd socket".to_owned());
                }
                drop(rd);
                // Someone parked while this thread held the role: let them take it.
                let st = self.state.lock();
                if let Some(&k) = st.parked.keys().next() {
                    Self::wake(st, k);
                }
                continue;
            }
            let mut st = self.state.lock();
            if let Some(r) = cond(&mut st) {
                return r;
            }
            if st.gone.is_some() {
                return Err(st.gone_error());
            }
            let me = std::thread::current();
            st.parked.entry(key).or_default().push(me.clone());
            drop(st);
            // A wake-up between the unlock and here is kept by the thread's token.
            std::thread::park_timeout(left);
            let mut st = self.state.lock();
            if let Some(v) = st.parked.get_mut(&key) {
                v.retain(|t| t.id() != me.id());
                if v.is_empty() {
                    st.parked.remove(&key);
                }
            }
        }
    }

    /// With the read role: wait up to `block` for the stream to be readable (`None`:
    /// do not wait), then read and file everything queued on it.
    fn read_some(&self, rd: &mut Reader, block: Option<Duration>) {
        if let Some(b) = block {
            let ts = rustix::event::Timespec::try_from(b).unwrap_or(rustix::event::Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            });
            let mut fds = [rustix::event::PollFd::new(
                &rd.stream,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        loop {
            let n = match rustix::net::recv(
                rd.stream.as_fd(),
                &mut rd.buf[..],
                rustix::net::RecvFlags::DONTWAIT,
            ) {
                Ok((0, _)) => {
                    self.mark_gone("sigd closed the connection".to_owned());
                    return;
                }
                Ok((n, _)) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => return,
                Err(e) => {
                    self.mark_gone(format!("reading from sigd: {e}"));
                    return;
                }
            };
            rd.dec.push(&rd.buf[..n]);
            loop {
                match rd.dec.next_message() {
                    Ok(Some(m)) => self.deliver(m),
                    Ok(None) => break,
                    Err(e) => {
                        self.mark_gone(format!("sigd sent a malformed message: {e}"));
                        return;
                    }
                }
            }
            // A short read of a stream socket took everything queued: no read to
            // EAGAIN (a system call per message). Whatever comes later is a new edge
            // for the driver, or is seen when the stream goes back in its set.
            if n < rd.buf.len() {
                return;
            }
        }
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.state.lock().gone.is_some()
    }

    /// Send a request built around a fresh `req` tag; with `wait`, the caller will
    /// collect the answer with [`Session::answer`].
    fn send(&self, build: impl FnOnce(u64) -> Message, wait: bool) -> Result<u64, Error> {
        self.send_as(build, wait, false)
    }

    /// [`Session::send`]; `slotless`: the answer's id names nothing to collect
    /// events for (`State::slotless`).
    fn send_as(
        &self,
        build: impl FnOnce(u64) -> Message,
        wait: bool,
        slotless: bool,
    ) -> Result<u64, Error> {
        // Tag 0: nobody waits for the answer, and for releases sigd sends none.
        let req = if wait {
            self.next_req.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        };
        let m = build(req);
        {
            let mut st = self.state.lock();
            if st.gone.is_some() {
                return Err(st.gone_error());
            }
            if wait {
                st.waiting.insert(req);
                if slotless {
                    st.slotless.insert(req);
                }
            }
        }
        let bytes = m.to_bytes();
        let mut w = self.writer.lock();
        if w.write_all(&bytes).is_err() {
            drop(w);
            // sigd closes a session only after saying why (`Message::Error`: out of
            // descriptors, a limit), and that stays queued on the stream: read it
            // before reporting, so the caller hears sigd's reason, not a broken pipe.
            // A request (`wait`) comes from an application thread, which never holds
            // the read role: wait for whoever holds it (the driver, another waiter —
            // the stream is readable, so not for long) to file what it read, then
            // read the rest. A notification may be sent while this thread reads
            // (`deliver`), and nobody reads its error: only if the role is free.
            let rd = if wait {
                Some(self.reader.lock())
            } else {
                self.reader.try_lock()
            };
            if let Some(mut rd) = rd {
                self.read_some(&mut rd, None);
            }
            self.mark_gone("writing to sigd failed".into());
            return Err(self.state.lock().gone_error());
        }
        Ok(req)
    }

    /// Send a request whose immediate answer the caller collects later with
    /// [`Session::answer`] (doing other work meanwhile).
    pub(crate) fn send_request(&self, build: impl FnOnce(u64) -> Message) -> Result<u64, Error> {
        self.send(build, true)
    }

    /// The immediate answer to `req`: `Ok(id)` or the refusal as an error.
    pub(crate) fn answer(&self, req: u64) -> Result<u64, Error> {
        match self.answer_raw(req)? {
            Message::Ack { id, .. } => Ok(id),
            Message::Refused { cause, detail, .. } => Err(Error::Refused { cause, detail }),
            _ => Err(Error::SigdGone),
        }
    }

    /// One page of sigd's state as JSON (`natm stat --json`), from row `offset`.
    pub(crate) fn stat(&self, offset: u64) -> Result<String, Error> {
        let req = self.send(|req| Message::StatPage { req, offset }, true)?;
        match self.answer_raw(req)? {
            Message::StatReply { json, .. } => Ok(json),
            _ => Err(Error::SigdGone),
        }
    }

    fn answer_raw(&self, req: u64) -> Result<Message, Error> {
        let r = self.wait_for(Key::Req(req), Some(Instant::now() + ANSWER_TIMEOUT), |st| {
            st.answers.remove(&req).map(Ok)
        });
        let mut st = self.state.lock();
        st.waiting.remove(&req);
        st.slotless.remove(&req);
        r
    }

    /// Collect what sigd says about the parties of `call`, a point-to-multipoint
    /// call this session roots (before any party is added).
    pub(crate) fn watch_parties(&self, call: u64) {
        self.state.lock().parties.entry(call).or_default();
    }

    /// Ask sigd to add the leaf `called` to `call` (ADD PARTY): the party's endpoint
    /// reference, or sigd's refusal (63: the network cannot reach that leaf on this
    /// call).
    pub(crate) fn add_party(&self, call: u64, called: &str) -> Result<u16, Error> {
        let req = self.send_as(
            |req| Message::AddParty {
                req,
                call,
                called: called.to_owned(),
            },
            true,
            true,
        )?;
        let id = self.answer(req)?;
        u16::try_from(id).map_err(|_| Error::SigdGone)
    }

    /// Ask sigd to drop `party` of `call` (DROP PARTY, `cause`).
    pub(crate) fn drop_party(&self, call: u64, party: u16, cause: u8) -> Result<(), Error> {
        let req = self.send_as(
            |req| Message::DropParty {
                req,
                call,
                party,
                cause,
            },
            true,
            true,
        )?;
        self.answer(req).map(|_| ())
    }

    /// Wait up to `timeout` for what sigd says of `party` of `call` next.
    pub(crate) fn party_note(
        &self,
        call: u64,
        party: u16,
        timeout: Duration,
    ) -> Result<PartyNote, Error> {
        self.wait_for(Key::Id(call), Some(Instant::now() + timeout), |st| {
            let q = st.parties.get_mut(&call)?;
            let i = q.iter().position(|n| n.party() == party)?;
            q.remove(i).map(Ok)
        })
    }

    /// What sigd said about the parties of `call` since the last call, without
    /// waiting (a leaf that left by itself).
    pub(crate) fn party_notes(&self, call: u64) -> Vec<PartyNote> {
        self.state
            .lock()
            .parties
            .get_mut(&call)
            .map(|q| q.drain(..).collect())
            .unwrap_or_default()
    }

    /// Ask sigd to change `call`'s sending rate through the network to `qos`'s
    /// (`Modify`) and wait up to `timeout` for the network's answer: `Ok` once every
    /// hop reserved it (the VCs' bounds have followed, `QosChanged`), or sigd's
    /// refusal with its cause.
    pub(crate) fn modify(&self, call: u64, qos: &Qos, timeout: Duration) -> Result<(), Error> {
        let req = self.send_as(
            |req| Message::Modify {
                req,
                call,
                qos: *qos,
            },
            true,
            true,
        )?;
        let r = self.wait_for(Key::Req(req), Some(Instant::now() + timeout), |st| {
            st.answers.remove(&req).map(Ok)
        });
        {
            let mut st = self.state.lock();
            st.waiting.remove(&req);
            st.slotless.remove(&req);
        }
        match r? {
            Message::Ack { .. } => Ok(()),
            Message::Refused { cause, detail, .. } => Err(Error::Refused { cause, detail }),
            _ => Err(Error::SigdGone),
        }
    }

    /// Send a request and wait for its immediate answer.
    pub(crate) fn request(&self, build: impl FnOnce(u64) -> Message) -> Result<u64, Error> {
        let req = self.send(build, true)?;
        self.answer(req)
    }

    /// Write the driver's counters reports without waiting for room: if sigd is not
    /// reading (the socket's buffer is full) the report is dropped — the next one
    /// carries the same counters, newer — rather than hold the driver, and with it
    /// every connection's timers. A frame the kernel took only part of is finished
    /// blocking, so the stream stays whole. Whether the report went out.
    fn send_report(&self, frames: &[u8]) -> bool {
        let w = self.writer.lock();
        let mut off = 0;
        while off < frames.len() {
            match rustix::net::send(w.as_fd(), &frames[off..], rustix::net::SendFlags::DONTWAIT) {
                Ok(n) => off += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) if off == 0 => return false,
                Err(rustix::io::Errno::AGAIN) => {
                    let mut rest = &*w;
                    if rest.write_all(&frames[off..]).is_err() {
                        break;
                    }
                    return true;
                }
                Err(_) => break,
            }
        }
        if off < frames.len() {
            drop(w);
            self.mark_gone("writing to sigd failed".into());
            return false;
        }
        true
    }

    /// Send a request whose answer nobody waits for (releases from `Drop`).
    pub(crate) fn notify(&self, build: impl FnOnce(u64) -> Message) {
        let _ = self.send(build, false);
    }

    /// Wait for the next event of `call`, up to `timeout`.
    pub(crate) fn call_event(&self, call: u64, timeout: Duration) -> Result<CallEvent, Error> {
        self.wait_for(Key::Id(call), Some(Instant::now() + timeout), |st| {
            st.slots
                .get_mut(&call)
                .and_then(|q| q.events.pop_front())
                .map(Ok)
        })
    }

    /// Collect events for a call this session learnt of from an offer.
    pub(crate) fn watch_call(&self, call: u64) {
        self.state.lock().slots.entry(call).or_default();
    }

    /// Forget an id (a call that ended, a listener that closed), here and in the
    /// sessions that took over from this one.
    pub(crate) fn forget(&self, id: u64) {
        {
            let mut st = self.state.lock();
            st.slots.remove(&id);
            st.parties.remove(&id);
            st.live.remove(&id);
            st.paths.remove(&id);
            st.reported.remove(&id);
        }
        if let Some(next) = self.successor.get() {
            next.forget(id);
        }
    }

    /// The session that carries this one's calls now: this one, or the last that
    /// took over from it after sigd restarted.
    pub(crate) fn current(self: &Arc<Self>) -> Arc<Session> {
        let mut s = self.clone();
        while let Some(next) = s.successor.get().cloned() {
            s = next;
        }
        s
    }

    /// From now on, a `Released` for `call` ends `conn` (`end_released`), and sigd
    /// hears its counters; `path` and this side's data endpoint `data` are kept for
    /// a restarted sigd.
    pub(crate) fn established(
        &self,
        call: u64,
        conn: &Arc<Conn>,
        path: DataPath,
        data: SocketAddr,
    ) {
        let mut st = self.state.lock();
        // A release that raced with the setup is applied at once.
        let released = st.slots.remove(&call).and_then(|q| {
            q.events.into_iter().find_map(|e| match e {
                CallEvent::Released { cause, detail } => Some((cause, detail)),
                CallEvent::Connected(_) => None,
            })
        });
        if let Some((cause, detail)) = released {
            drop(st);
            if let Some(eng) = self.eng.upgrade() {
                end_released(conn, &eng, cause, detail);
            }
            return;
        }
        st.live.insert(call, Arc::downgrade(conn));
        st.paths.insert(call, (path, data));
        drop(st);
        // sigd hears the call's counters from now on (`natm stat`).
        if let Some(eng) = self.eng.upgrade() {
            eng.want_reports();
        }
    }

    /// The next offer to `listener`, waiting up to `timeout` (`None`: until one comes
    /// or sigd goes away).
    pub(crate) fn next_offer(
        &self,
        listener: u64,
        timeout: Option<Duration>,
    ) -> Result<Offer, Error> {
        self.wait_for(
            Key::Id(listener),
            timeout.map(|t| Instant::now() + t),
            |st| {
                st.slots
                    .get_mut(&listener)
                    .and_then(|q| q.offers.pop_front())
                    .map(Ok)
            },
        )
    }

    /// The next call for `listener`: one sigd already answered (pre-authorised
    /// listeners) before one to answer; waiting up to `timeout` (`None`: until one
    /// comes or sigd goes away).
    pub(crate) fn next_for_listener(
        &self,
        listener: u64,
        timeout: Option<Duration>,
    ) -> Result<NextCall, Error> {
        self.wait_for(
            Key::Id(listener),
            timeout.map(|t| Instant::now() + t),
            |st| {
                let q = st.slots.get_mut(&listener)?;
                if let Some(a) = q.accepted.pop_front() {
                    return Some(Ok(NextCall::Accepted(a)));
                }
                q.offers
                    .pop_front()
                    .map(|o| Ok(NextCall::Offered(Box::new(o))))
            },
        )
    }

    /// Forget a listener, returning the calls sigd answered for it that nobody took.
    pub(crate) fn close_listener(&self, listener: u64) -> Vec<u64> {
        let mut st = self.state.lock();
        let taken = st
            .slots
            .remove(&listener)
            .map(|q| q.accepted.into_iter().map(|a| a.call).collect::<Vec<_>>())
            .unwrap_or_default();
        for c in &taken {
            st.slots.remove(c);
        }
        taken
    }

    fn mark_gone(&self, why: String) {
        let mut st = self.state.lock();
        let first = st.gone.is_none();
        if first {
            st.gone = Some(why);
        }
        let calls = !st.live.is_empty() || st.listeners.values().any(|l| l.strong_count() > 0);
        Self::wake_all(st);
        if first && calls {
            self.spawn_reclaim();
        }
    }

    /// From now on, `binding`'s listener (id `listener` here) is bound again on a
    /// restarted sigd.
    fn add_listener(&self, listener: u64, binding: &Arc<Binding>) {
        self.state
            .lock()
            .listeners
            .insert(listener, Arc::downgrade(binding));
    }

    /// Why sigd closed this session itself, if it did (no restart follows).
    fn closed_by_sigd(&self) -> Option<Error> {
        let st = self.state.lock();
        st.closed_by_sigd.as_ref().map(|_| st.gone_error())
    }

    /// Listeners still open.
    fn open_listeners(&self) -> usize {
        let st = self.state.lock();
        st.listeners
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Start the thread that finds a restarted sigd for this session's established
    /// calls (module doc).
    fn spawn_reclaim(&self) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let weak = self.client.clone();
        // No thread (out of resources): the calls keep their data path, and the
        // peer's sigd releases them when no one reclaims them.
        let _ = std::thread::Builder::new()
            .name("natm-reclaim".into())
            .spawn(move || reclaim_after_restart(me, weak));
    }

    /// Established calls whose connection is still open.
    fn open_calls(&self) -> usize {
        let st = self.state.lock();
        st.live.values().filter(|w| w.strong_count() > 0).count()
    }

    /// What the reclaim thread waits for a restarted sigd for: open calls, open
    /// listeners.
    fn holds_anything(&self) -> bool {
        self.open_calls() > 0 || self.open_listeners() > 0
    }

    /// Ask this (new) session's sigd to take over `old`'s established calls; a call
    /// it refuses ends as a released one does.
    fn take_over(self: &Arc<Self>, old: &Arc<Session>) {
        use crate::wire::ipc::Message;
        let calls: Vec<(u64, Weak<Conn>, Option<KeptPath>)> = {
            let mut st = old.state.lock();
            let live = std::mem::take(&mut st.live);
            st.reported.clear();
            live.into_iter()
                .map(|(call, w)| (call, w, st.paths.remove(&call)))
                .collect()
        };
        let Some(eng) = self.eng.upgrade() else {
            return;
        };
        let mut reclaimed = false;
        for (call, weak, path) in calls {
            let (Some(conn), Some((path, data))) = (weak.upgrade(), path) else {
                continue;
            };
            // A call sigd gave no ticket (one it could not describe) cannot be taken
            // over: its data path goes on, unheld by the restarted sigd.
            if path.resume.is_empty() {
                continue;
            }
            {
                // Filed first, so a `Released` right after the `Ack` finds it.
                let mut st = self.state.lock();
                st.live.insert(call, weak.clone());
                st.paths.insert(call, (path.clone(), data));
            }
            let r = self.request(|req| Message::Reclaim {
                req,
                call,
                data,
                path,
            });
            match r {
                Ok(_) => {
                    reclaimed = true;
                    // Closed while the request was out: release it now.
                    if !self.state.lock().live.contains_key(&call) {
                        self.notify(|req| Message::Release {
                            req,
                            call,
                            cause: 16,
                        });
                    }
                }
                Err(Error::Refused { cause, detail }) => {
                    self.forget(call);
                    let why = format!("sigd restarted and did not take the call over: {detail}");
                    end_released(&conn, &eng, cause, why);
                }
                // This session died too: its own reclaim thread carries on.
                Err(_) => {}
            }
        }
        if reclaimed {
            eng.want_reports();
        }
        let listeners: Vec<Arc<Binding>> = {
            let mut st = old.state.lock();
            std::mem::take(&mut st.listeners)
                .into_values()
                .filter_map(|w| w.upgrade())
                .collect()
        };
        for b in listeners {
            b.bind_again(self);
        }
        if self.is_gone() && self.holds_anything() {
            self.spawn_reclaim();
        }
    }

    fn deliver(&self, m: Message) {
        let mut st = self.state.lock();
        st.heard = true;
        let key = match m {
            Message::Ack { req, id } if st.waiting.contains(&req) => {
                if id != 0 && !st.slotless.remove(&req) {
                    st.slots.entry(id).or_default();
                }
                st.answers.insert(req, m);
                Key::Req(req)
            }
            Message::Refused { req, .. } | Message::StatReply { req, .. }
                if st.waiting.contains(&req) =>
            {
                st.slotless.remove(&req);
                st.answers.insert(req, m);
                Key::Req(req)
            }
            Message::Connected { call, path } => {
                if let Some(q) = st.slots.get_mut(&call) {
                    q.events.push_back(CallEvent::Connected(Box::new(path)));
                }
                Key::Id(call)
            }
            Message::Released {
                call,
                cause,
                detail,
            } => {
                if let Some(conn) = st.live.remove(&call) {
                    st.reported.remove(&call);
                    drop(st);
                    if let (Some(c), Some(eng)) = (conn.upgrade(), self.eng.upgrade()) {
                        end_released(&c, &eng, cause, detail);
                    }
                    return;
                }
                if let Some(q) = st.slots.get_mut(&call) {
                    q.events.push_back(CallEvent::Released { cause, detail });
                }
                Key::Id(call)
            }
            Message::QosChanged { call, qos, resume } => {
                // The network reserved new rates for the call: the VCs' bounds follow
                // (the peer's QOS up to its new rate is accepted, this side's
                // `set_qos` may go up to its own), and a reclaim after a sigd
                // restart presents the QoS now in force.
                let (tx, rx) = qos_targets(&qos);
                if let Some((path, _)) = st.paths.get_mut(&call) {
                    path.qos = qos;
                    // A ticket binds the QoS it resumes: the new one goes with it.
                    if !resume.is_empty() {
                        path.resume = resume;
                    }
                    if tx > 0 {
                        path.granted_bps = tx;
                    }
                }
                let conn = st.live.get(&call).and_then(Weak::upgrade);
                drop(st);
                if let Some(c) = conn {
                    c.set_rate_bounds(tx, rx);
                }
                return;
            }
            Message::Incoming {
                listener,
                call,
                caller,
                qos,
            } => match st.slots.get_mut(&listener) {
                Some(q) => {
                    q.offers.push_back(Offer { call, caller, qos });
                    Key::Id(listener)
                }
                None => {
                    drop(st);
                    // Nobody listens any more: say no rather than let it time out.
                    self.notify(|req| Message::Reject {
                        req,
                        call,
                        cause: 21,
                    });
                    return;
                }
            },
            Message::Accepted {
                listener,
                call,
                data,
                path,
                ..
            } => match st.slots.get_mut(&listener) {
                Some(q) => {
                    q.accepted.push_back(PreAccepted {
                        call,
                        data,
                        connected: CallEvent::Connected(Box::new(path)),
                    });
                    // Collect what comes for the call until the application takes it.
                    st.slots.entry(call).or_default();
                    Key::Id(listener)
                }
                None => {
                    drop(st);
                    // The listener is closed: end the call sigd answered for it.
                    self.notify(|req| Message::Release {
                        req,
                        call,
                        cause: 41,
                    });
                    return;
                }
            },
            Message::PartyAdded { call, party } => {
                let Some(q) = st.parties.get_mut(&call) else {
                    return;
                };
                q.push_back(PartyNote::Added(party));
                Key::Id(call)
            }
            Message::PartyRejected {
                call,
                party,
                cause,
                detail,
            } => {
                let Some(q) = st.parties.get_mut(&call) else {
                    return;
                };
                q.push_back(PartyNote::Rejected(party, cause, detail));
                Key::Id(call)
            }
            Message::PartyDropped {
                call,
                party,
                cause,
                left,
                detail,
            } => {
                let Some(q) = st.parties.get_mut(&call) else {
                    return;
                };
                q.push_back(PartyNote::Dropped {
                    party,
                    cause,
                    left,
                    detail,
                });
                Key::Id(call)
            }
            Message::Error { cause, detail } => {
                st.gone = Some(format!("sigd closed the session: {detail} (cause {cause})"));
                st.closed_by_sigd = Some((cause, detail));
                return Self::wake_all(st);
            }
            // Nobody waits for it.
            _ => return,
        };
        Self::wake(st, key);
    }
}

/// A session whose sigd died with established calls: reconnect with a bounded
/// backoff while any of them is open, and have the new session reclaim them.
fn reclaim_after_restart(old: Arc<Session>, client: Weak<SigdClient>) {
    let started = Instant::now();
    let mut wait = RECONNECT_FIRST;
    loop {
        if !old.holds_anything() {
            return;
        }
        let Some(c) = client.upgrade() else {
            return;
        };
        if let Ok(new) = c.session() {
            drop(c);
            new.take_over(&old);
            return;
        }
        drop(c);
        if started.elapsed() >= RECONNECT_FOR {
            // The calls keep their data path; the peer's sigd has released them
            // (`[restart] preserve_ms`), and its application has seen that. The
            // listeners are bound no more.
            let listeners: Vec<Arc<Binding>> = {
                let mut st = old.state.lock();
                std::mem::take(&mut st.listeners)
                    .into_values()
                    .filter_map(|w| w.upgrade())
                    .collect()
            };
            for b in listeners {
                b.lose(None, "no sigd came back to bind the listener again".into());
            }
            return;
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(RECONNECT_MAX);
    }
}

/// The host's link to sigd: a session opened on first use and opened again after
/// sigd restarts.
#[derive(Debug)]
pub(crate) struct SigdClient {
    path: PathBuf,
    session: Mutex<Option<Arc<Session>>>,
    eng: Weak<Engine>,
    /// The client's own `Arc`, which its sessions point back to.
    me: Weak<SigdClient>,
}

impl SigdClient {
    pub(crate) fn new(path: PathBuf, eng: Weak<Engine>) -> Arc<SigdClient> {
        Arc::new_cyclic(|me| SigdClient {
            path,
            session: Mutex::new(Level::SigdClient, None),
            eng,
            me: me.clone(),
        })
    }

    /// A live session, opening one if there is none or the last one died (which
    /// then forwards to the new one: `Session::current`).
    pub(crate) fn session(&self) -> Result<Arc<Session>, Error> {
        let mut s = self.session.lock();
        if let Some(cur) = s.as_ref() {
            if !cur.is_gone() {
                return Ok(cur.clone());
            }
        }
        let new = Session::open(&self.path, self.eng.clone(), self.me.clone())?;
        if let Some(old) = s.as_ref() {
            let _ = old.successor.set(new.clone());
        }
        *s = Some(new.clone());
        Ok(new)
    }
}

/// A listener bound through sigd (module doc): what bound it, sent again to a
/// restarted sigd, and the session and id it is bound under now.
#[derive(Debug)]
pub(crate) struct Binding {
    sap: String,
    qos: Qos,
    /// A pre-authorised listener's data sockets (`None`: explicit accept).
    pub(crate) auto: Option<Arc<AutoLinks>>,
    now: Mutex<Bound>,
    changed: Condvar,
}

#[derive(Debug)]
struct Bound {
    session: Arc<Session>,
    id: u64,
    /// Bound no more: the restarted sigd's cause and reason, or why nobody bound it
    /// (no cause).
    lost: Option<(Option<u8>, String)>,
}

impl Binding {
    /// A listener sigd bound as `id` on `session`, for `Bind { sap, qos }` (or
    /// `BindAuto` with `auto`'s sockets).
    pub(crate) fn new(
        session: Arc<Session>,
        id: u64,
        sap: String,
        qos: Qos,
        auto: Option<Arc<AutoLinks>>,
    ) -> Arc<Binding> {
        let b = Arc::new(Binding {
            sap,
            qos,
            auto,
            now: Mutex::new(
                Level::ListenerBinding,
                Bound {
                    session: session.clone(),
                    id,
                    lost: None,
                },
            ),
            changed: Condvar::new(),
        });
        session.add_listener(id, &b);
        b
    }

    /// The session and id the listener is bound under. If its sigd died, waits (up
    /// to `deadline`) for the background thread to bind it again; fails if that was
    /// refused or gave up, or if sigd closed the session itself.
    pub(crate) fn current(&self, deadline: Option<Instant>) -> Result<(Arc<Session>, u64), Error> {
        let mut g = self.now.lock();
        loop {
            if let Some((cause, why)) = &g.lost {
                return Err(match cause {
                    Some(c) => Error::Refused {
                        cause: *c,
                        detail: why.clone(),
                    },
                    None => Error::SigdGone,
                });
            }
            if !g.session.is_gone() {
                return Ok((g.session.clone(), g.id));
            }
            if let Some(e) = g.session.closed_by_sigd() {
                return Err(e);
            }
            let slice = Duration::from_secs(1);
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::TimedOut);
                    }
                    left.min(slice)
                }
                None => slice,
            };
            self.changed.wait_for(&mut g, left);
        }
    }

    /// The listener's session and id as they are (for closing it).
    pub(crate) fn bound(&self) -> (Arc<Session>, u64) {
        let g = self.now.lock();
        (g.session.clone(), g.id)
    }

    /// Whether sigd binds the listener no more (module doc).
    pub(crate) fn is_lost(&self) -> bool {
        self.now.lock().lost.is_some()
    }

    /// Bind the listener again on `new`, a restarted sigd's session: a normal
    /// `Bind` (or `BindAuto`) by the same user, subject to the same access rules.
    fn bind_again(self: &Arc<Self>, new: &Arc<Session>) {
        let (sap, qos) = (self.sap.clone(), self.qos);
        let r = match &self.auto {
            None => new.request(|req| Message::Bind { req, sap, qos }),
            Some(links) => {
                let data = links.endpoints();
                new.request(|req| Message::BindAuto {
                    req,
                    sap,
                    qos,
                    data,
                })
            }
        };
        match r {
            Ok(id) => {
                new.add_listener(id, self);
                let mut g = self.now.lock();
                g.session = new.clone();
                g.id = id;
                drop(g);
                self.changed.notify_all();
            }
            Err(Error::Refused { cause, detail }) => self.lose(
                Some(cause),
                format!(
                    "sigd restarted and did not bind {} again: {detail}",
                    self.sap
                ),
            ),
            // The new session died too: its own thread binds the listener later.
            Err(_) => {
                let old_id = self.now.lock().id;
                new.add_listener(old_id, self);
            }
        }
    }

    fn lose(&self, cause: Option<u8>, why: String) {
        self.now.lock().lost = Some((cause, why));
        self.changed.notify_all();
    }
}

/// The target rate of each direction of a QoS (tx = this side sends): `scr`, else
/// `pcr`, else `max_pcr`, bit/s (0: none, or `max`).
fn qos_targets(q: &Qos) -> (u64, u64) {
    let of = |p: &crate::wire::qos::TrafficParams| {
        p.scr
            .or(p.pcr)
            .or(p.max_pcr)
            .and_then(|r| r.bits_per_sec())
            .unwrap_or(0)
    };
    (of(q.tx()), of(q.rx()))
}
