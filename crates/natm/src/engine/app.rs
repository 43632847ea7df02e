//! What the application asks of a connection — send, receive, close, abort, wait —
//! as the engine carries it out on the connection's two halves. ulib's `Connection`
//! is a handle over these calls: it never touches a PSB.
//!
//! The calls report ulib's [`Error`] directly: it is the public API's error, and
//! translating twice would only add a layer that says the same thing.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::conn::{Conn, End, Which};
use super::link::Link;
use super::Chunk;
use super::Engine;
use crate::error::{Error, WouldBlock};
use crate::sched::Level;
use crate::stages::{self, Stage};
use crate::transport::{AbortReason, QosChangeError, QosOutcome, Status, TransportConfig};
use natm_proto::endpoint::{
    BareParams, ClientConfig, ConnectError, Connection, HalfStatus, PsbStats, RecvError, RxHalf,
    SendError, SignalledParams, Simplex, TxHalf, VcCounters,
};

/// One VC's status flags ([`Conn::status_parts`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct VcStatus {
    /// The PSB's flags (all clear on a bare VC).
    pub(crate) psb: Status,
    /// What the half has come to.
    pub(crate) half: HalfStatus,
    /// The rate in force, payload bit/s.
    pub(crate) rate_bps: u64,
}

/// How long both VCs of a direct connection may take to come up, at the protocol
/// level; the application's own connect timeout is usually shorter.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

fn map_send(e: SendError) -> Error {
    match e {
        SendError::WindowFull => Error::WouldBlock(WouldBlock::WindowFull),
        SendError::OverRate => Error::WouldBlock(WouldBlock::OverRate),
        SendError::MessageTooLarge { size, max } => Error::MessageTooLarge { size, max },
        SendError::Closed | SendError::NotSender => Error::Closed,
        SendError::Empty => Error::EmptyMessage,
        SendError::Aborted(r) => Error::Aborted(r),
    }
}

/// Octets a send may queue now: the VC's own send buffer and the host's pool
/// (`engine::send_pool`), whichever has less.
fn room(tx: &End<TxHalf>) -> usize {
    let own = tx.half.capacity();
    tx.pool.as_ref().map_or(own, |p| own.min(p.pool().free()))
}

/// Queue up to `len` octets of a send, drawn from the host's pool: `push(half, n)`
/// queues the first `n` of them (ending the message only if `n == len`) and says how
/// many it took. `whole`: all `len` or nothing. `Ok(0)` with nothing queued when the
/// pool had too little; the VC's own refusals (buffer full, over rate, closed) are its
/// errors, as before.
fn push_pooled(
    tx: &mut End<TxHalf>,
    len: usize,
    whole: bool,
    push: impl FnOnce(&mut TxHalf, usize) -> Result<usize, SendError>,
) -> Result<usize, SendError> {
    let own = tx.half.capacity();
    let End { half, pool, .. } = tx;
    match pool {
        // An empty message takes no buffer, and a full VC refuses by itself.
        Some(share) if len > 0 && own > 0 && (!whole || own >= len) => {
            match share.draw(len.min(own), whole, |n| push(half, n)) {
                Some(r) => r,
                None => {
                    share.pool().note_held_back();
                    Ok(0)
                }
            }
        }
        _ => push(half, len),
    }
}

/// How a piece (`range`, ending the message if `end`) of a batch's message joins the
/// sending VC's queue: [`copy_piece`] or [`hold_piece`].
pub(crate) type PushPiece<M> =
    fn(&mut TxHalf, &M, std::ops::Range<usize>, bool) -> Result<usize, SendError>;

/// Borrowed octets, copied into the queue (seed 000 §5.4 step 1's one copy).
pub(crate) fn copy_piece<M: AsRef<[u8]>>(
    half: &mut TxHalf,
    m: &M,
    range: std::ops::Range<usize>,
    end: bool,
) -> Result<usize, SendError> {
    half.send(&m.as_ref()[range], end)
}

/// A `Bytes`, held by the queue as it is: no copy.
pub(crate) fn hold_piece(
    half: &mut TxHalf,
    m: &Bytes,
    range: std::ops::Range<usize>,
    end: bool,
) -> Result<usize, SendError> {
    half.send_bytes(&m.slice(range), end)
}

/// The pool octets a blocked partial send waits for before it tries again: enough
/// for a useful piece, not a trickle of tiny TPDUs (the pool's silly window).
const POOL_PIECE: usize = 64 << 10;

fn connect_error(e: ConnectError) -> Error {
    match e {
        ConnectError::Config(c) => Error::Config(c),
        other => Error::Qos(other.to_string()),
    }
}

/// Why an end can no longer be used, if it cannot. An ABORT answering our
/// handshake is a refusal (the listener's endpoint refuses when its backlog is full).
fn end_error<H: natm_proto::endpoint::Simplex>(e: &End<H>) -> Option<Error> {
    let s = e.status();
    if s.aborted == Some(AbortReason::Peer) && !s.connected {
        return Some(Error::Refused {
            cause: 17,
            detail: "the listener refused the connection (its backlog is full, it cannot take the parameters, or it cannot open the connection)".into(),
        });
    }
    if s.aborted == Some(AbortReason::NoListener) && !s.connected {
        return Some(Error::Refused {
            cause: 88,
            detail: "nothing listens at the called address: its host answered with ICMP port unreachable".into(),
        });
    }
    if let Some(r) = s.aborted {
        return Some(Error::Aborted(r));
    }
    if s.connect_failed {
        return Some(Error::Refused {
            cause: 21,
            detail: "the peer's transport refused the connection parameters".into(),
        });
    }
    None
}

/// Why end `e` did not come up ([`end_error`] before it was connected). An end that
/// came up and was aborted since is not a failed setup: a caller that sent and hung up
/// at once (its receiving VC aborts, which ends this sending one) is still read; the
/// abort shows when that direction is used. `accept` used to fail with "aborted by
/// the peer" whenever such a hang-up came between the data path's opening and this
/// check (a loaded machine).
fn setup_error<H: natm_proto::endpoint::Simplex>(e: &End<H>) -> Option<Error> {
    if e.status().connected {
        return None;
    }
    end_error(e)
}

/// Why the application cannot send or receive on end `e`: it is the unused
/// direction of a simplex connection, or [`end_error`].
fn use_error<H: natm_proto::endpoint::Simplex>(e: &End<H>, which: Which) -> Option<Error> {
    refuse_unused(e, which).err().or_else(|| end_error(e))
}

/// [`Error::Simplex`] if `e` is the unused direction of a simplex connection.
fn refuse_unused<H>(e: &End<H>, which: Which) -> Result<(), Error> {
    if !e.unused {
        return Ok(());
    }
    Err(Error::Simplex(match which {
        Which::Tx => "it only receives (tx:none): open it with a tx direction to send",
        Which::Rx => "it only sends (rx:none): open it with an rx direction to receive",
    }))
}

/// A snapshot of both VCs' counters and the sending VC's controller.
#[derive(Debug, Clone)]
pub(crate) struct StatsParts {
    pub(crate) tx: PsbStats,
    pub(crate) rx: PsbStats,
    pub(crate) srtt: Option<Duration>,
    pub(crate) rate_bps: Option<u64>,
    pub(crate) window: Option<u64>,
    /// Bytes queued on the sending VC (unsent or unacknowledged).
    pub(crate) send_queued: u64,
    /// Bytes held on the receiving VC (out of order or not yet read).
    pub(crate) recv_queued: u64,
    /// A bare VC pair's own counters (sending VC, receiving VC).
    pub(crate) bare: Option<(VcCounters, VcCounters)>,
    /// The host's send buffer pool the sending VC draws on.
    pub(crate) send_pool: super::SendPoolStats,
    /// The sending VC's path MTU search (`engine::path_probe`).
    pub(crate) plpmtud: Option<natm_proto::transport::plpmtud::PlpmtudStats>,
}

impl Conn {
    /// Call `addr` directly on a socket of its own (bound at `local`, else an
    /// ephemeral port) and wait up to `timeout` for both VCs (seed 000 §5.3's
    /// handshake on each). The connection is scheduled at `(level, weight)`;
    /// `(cookie, isn)` come from the OS's randomness.
    pub(crate) fn connect(
        eng: &Arc<Engine>,
        (local, addr): (Option<std::net::SocketAddr>, std::net::SocketAddr),
        cfg: TransportConfig,
        (level, weight): (Level, u32),
        (cookie, isn): (u32, u32),
        timeout: Duration,
    ) -> Result<Arc<Conn>, Error> {
        let local: std::net::SocketAddr = match local {
            Some(l) => l,
            None if addr.is_ipv4() => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
            None => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let link = Link::bind(eng, local).map_err(Error::Io)?;
        // An ICMP port unreachable answering the CONN-REQ ends the wait at once.
        link.watch_icmp_errors();
        let now = eng.clock.now();
        let proto = Connection::connect(
            now,
            addr,
            ClientConfig::new(cfg),
            cookie,
            isn,
            HANDSHAKE_TIMEOUT.max(timeout),
        )
        .map_err(connect_error)?;
        let conn = Conn::open(eng, link, proto, level, weight, None).map_err(Error::Io)?;
        // A connection that did not come up is the engine's to forget at once: no
        // application handle will ever drop it, and an end refused or aborted by the
        // peer arms no timer, so it (and its socket) would stay for the life of the
        // process — `natm-lab perf scale` found one socket left per connect refused busy.
        let fail = |e: Error| {
            conn.abort_local(eng);
            conn.mark_dropped(eng);
            Err(e)
        };
        // Both VCs up: ours (the accept) and the one the peer opens back.
        let up = conn.wait_tx(eng, Some(timeout), |e| {
            let s = e.status();
            (s.connected || s.connect_failed || s.aborted.is_some()).then_some(())
        });
        if up.is_none() {
            return fail(Error::Unreachable(addr));
        }
        // The end's lock is let go before `fail` takes it again. An end whose
        // handshake ran out of attempts had no answer at all: nobody is there (not a
        // refusal of its parameters).
        let refused = {
            let tx = conn.tx().0;
            if tx.status().connect_failed {
                Some(Error::Unreachable(addr))
            } else {
                end_error(&tx)
            }
        };
        if let Some(e) = refused {
            return fail(e);
        }
        let back = conn.wait_rx(eng, Some(timeout), |e| {
            let s = e.status();
            (s.connected || s.aborted.is_some()).then_some(())
        });
        if back.is_none() {
            return fail(Error::Unreachable(addr));
        }
        Ok(conn)
    }

    /// Open the data path of a call sigd set up on `link`: the peer's data endpoint,
    /// the cookie and the VCIs come from signalling, the transport configuration from
    /// the call's QoS (both directions; the callee's is the caller's reversed).
    pub(crate) fn open_signalled(
        eng: &Engine,
        link: Link,
        (peer, cookie, tx_vci, rx_vci, caller): (std::net::SocketAddr, u32, u16, u16, bool),
        cfg: TransportConfig,
        (level, weight): (Level, u32),
        keys: Option<&crate::wire::seal::PathKeys>,
    ) -> Result<Arc<Conn>, Error> {
        let proto = Connection::signalled(
            eng.clock.now(),
            SignalledParams {
                peer,
                tx_vci,
                rx_vci,
                cookie,
                caller,
                tx: cfg.clone(),
                rx: cfg,
            },
        )
        .map_err(connect_error)?;
        Conn::open(eng, link, proto, level, weight, keys).map_err(Error::Io)
    }

    /// Open a bare AAL5 VC pair (`transport=none`) on `link`, from a call's data path
    /// or a PVC's configuration: up at once, no handshake, no cookie.
    pub(crate) fn open_bare(
        eng: &Engine,
        link: Link,
        params: BareParams,
        (level, weight): (Level, u32),
    ) -> Result<Arc<Conn>, Error> {
        Conn::open(eng, link, Connection::bare(params), level, weight, None).map_err(Error::Io)
    }

    /// Wait until both VCs of a connection are up (or failed).
    pub(crate) fn wait_up(&self, eng: &Engine, timeout: Duration) -> Result<(), Error> {
        let up = |s: natm_proto::endpoint::HalfStatus| {
            (s.connected || s.connect_failed || s.aborted.is_some()).then_some(())
        };
        if self
            .wait_tx(eng, Some(timeout), |e| up(e.status()))
            .is_none()
        {
            return Err(Error::TimedOut);
        }
        if let Some(e) = setup_error(&self.tx().0) {
            return Err(e);
        }
        if self
            .wait_rx(eng, Some(timeout), |e| up(e.status()))
            .is_none()
        {
            return Err(Error::TimedOut);
        }
        setup_error(&self.rx().0).map_or(Ok(()), Err)
    }

    /// Send what the end holds inline, or return `true` if the scheduler must do it:
    /// then the caller drops the end's lock and calls [`Conn::defer_if`] (the lock
    /// order, `crate::sync`).
    #[must_use]
    fn flush_tx(&self, eng: &Engine, end: &mut End<TxHalf>, cv: &crate::sync::Condvar) -> bool {
        // What the application sends after the other direction delivered something
        // is a reply: the sending VC does not hold it to coalesce.
        end.half
            .note_reverse(self.rx_epoch.load(std::sync::atomic::Ordering::Relaxed));
        // Inline from the application's thread unless higher-priority work waits for
        // the scheduler (seed 000 §5.1's priorities kept, the scheduler's hop saved).
        if !eng.cfg.inline_send || eng.pending_above(self.level) {
            true
        } else {
            stages::record(Stage::Sched, self.stage_key());
            let now = eng.clock.now();
            self.after(eng, Which::Tx, end, cv, now, usize::MAX);
            false
        }
    }

    /// Hand the transmit work to the scheduler if [`Conn::flush_tx`] said so; call
    /// with no end locked.
    fn defer_if(&self, eng: &Engine, needed: bool) {
        if needed {
            eng.defer(self);
        }
    }

    /// Send one message, blocking while the window is full or the rate is exceeded.
    pub(crate) fn send_message(&self, eng: &Engine, msg: &[u8]) -> Result<(), Error> {
        self.send_message_with(eng, msg, |half, off, n| {
            half.send(&msg[off..off + n], off + n == msg.len())
        })
    }

    /// As [`Conn::send_message`], taking the application's buffer: the PSB's send
    /// queue holds slices of `msg` as its TPDU payloads, so no octet is copied in user
    /// space (seed 000 §5.4's one copy is the kernel's, from the gathered `sendmsg`).
    /// The send buffer bound counts the slices' octets as it counts copied ones.
    pub(crate) fn send_message_bytes(&self, eng: &Engine, msg: &Bytes) -> Result<(), Error> {
        self.send_message_with(eng, msg, |half, off, n| {
            half.send_bytes(&msg.slice(off..off + n), off + n == msg.len())
        })
    }

    /// The blocking send loop: `push(half, off, n)` queues what fits of the message's
    /// `n` octets from octet `off` and says how much it took.
    fn send_message_with(
        &self,
        eng: &Engine,
        msg: &[u8],
        mut push: impl FnMut(&mut TxHalf, usize, usize) -> Result<usize, SendError>,
    ) -> Result<(), Error> {
        stages::record_msg(Stage::SendCall, self.stage_key(), msg);
        let mut off = 0;
        loop {
            let deferred = {
                let (mut tx, cv) = self.tx();
                if let Some(e) = use_error(&tx, Which::Tx) {
                    return Err(e);
                }
                match push_pooled(&mut tx, msg.len() - off, false, |h, n| push(h, off, n)) {
                    Ok(n) => off += n,
                    Err(SendError::WindowFull | SendError::OverRate) => {}
                    Err(e) => return Err(map_send(e)),
                }
                self.flush_tx(eng, &mut tx, cv)
            };
            self.defer_if(eng, deferred);
            if off == msg.len() {
                return Ok(());
            }
            self.wait_room(eng, (msg.len() - off).min(POOL_PIECE), 1, None);
        }
    }

    /// Wait until a send of `need` octets may go — the VC's buffer with `own` free
    /// (1: any room) and the host's pool with `need` free — or the VC has ended, or
    /// `timeout` passed; whether it may (or ended). The VC's own room is waited for
    /// as before ([`Conn::wait_tx`]); the pool's on the pool, which any VC's
    /// acknowledgement wakes.
    fn wait_room(&self, eng: &Engine, need: usize, own: usize, timeout: Option<Duration>) -> bool {
        let until = timeout.map(|t| std::time::Instant::now() + t);
        let mut counted = false;
        loop {
            let left = until.map(|u| u.saturating_duration_since(std::time::Instant::now()));
            let ended = self.wait_tx(eng, left, |e| {
                (e.half.capacity() >= own || e.finished()).then(|| e.finished())
            });
            match ended {
                None => return false,
                Some(true) => return true,
                Some(false) => {}
            }
            let pool = &eng.send_pool;
            if pool.free() >= need.min(pool.limit()) {
                return true;
            }
            // A slice at a time, so that the VC's own end (an abort) is seen too.
            let slice = left.map_or(super::link::READ_SLICE, |l| l.min(super::link::READ_SLICE));
            if slice.is_zero() {
                return false;
            }
            if !counted {
                pool.note_held_back();
                counted = true;
            }
            if pool.wait_free(need, slice) {
                return true;
            }
        }
    }

    /// Send one message once it fits whole in the send buffer, waiting up to `timeout`
    /// for the room; [`Error::TimedOut`] with nothing taken if it never did. `bytes`:
    /// the send queue holds slices of it rather than a copy
    /// ([`Conn::send_message_bytes`]).
    pub(crate) fn send_message_within(
        &self,
        eng: &Engine,
        msg: &[u8],
        bytes: Option<&Bytes>,
        timeout: Duration,
    ) -> Result<(), Error> {
        let until = std::time::Instant::now() + timeout;
        loop {
            let deferred = {
                let (mut tx, cv) = self.tx();
                if let Some(e) = use_error(&tx, Which::Tx) {
                    return Err(e);
                }
                let took = if room(&tx) >= msg.len() {
                    push_pooled(&mut tx, msg.len(), true, |h, _| match bytes {
                        Some(b) => h.send_bytes(b, true),
                        None => h.send(msg, true),
                    })
                    .map_err(map_send)?
                } else {
                    0
                };
                if took == msg.len() {
                    stages::record_msg(Stage::SendCall, self.stage_key(), msg);
                    Some(self.flush_tx(eng, &mut tx, cv))
                } else {
                    None
                }
            };
            if let Some(d) = deferred {
                self.events.send_went();
                self.defer_if(eng, d);
                return Ok(());
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || !self.wait_send_room(eng, msg.len(), left) {
                return Err(Error::TimedOut);
            }
        }
    }

    /// Wait up to `timeout` until the send buffer has room for `len` octets or the
    /// sending VC has ended; whether it did.
    pub(crate) fn wait_send_room(&self, eng: &Engine, len: usize, timeout: Duration) -> bool {
        self.wait_room(eng, len, len, Some(timeout))
    }

    /// Send several messages, blocking while the window is full or the rate is
    /// exceeded. Each message is still its own message (its own TPDU or TPDUs, its own
    /// loss accounting); what batching changes is when they leave: all that fit are
    /// queued under one lock and the end is flushed once, so their TPDUs go out in as
    /// few system calls as the link allows (one GSO `sendmsg` per run of equal sizes,
    /// [`Conn::after`]) instead of one `sendmsg` per message. The flow controller
    /// still decides what leaves: a guaranteed VC's leaky bucket releases at most its
    /// depth at once and paces the rest from the driver's timer.
    pub(crate) fn send_messages<M: AsRef<[u8]>>(
        &self,
        eng: &Engine,
        msgs: &[M],
        push: PushPiece<M>,
    ) -> Result<(), Error> {
        let (mut i, mut off) = (0, 0);
        let mut failed = None;
        loop {
            let deferred = {
                let (mut tx, cv) = self.tx();
                if let Some(e) = use_error(&tx, Which::Tx) {
                    return Err(e);
                }
                while let Some(msg) = msgs.get(i) {
                    let m = msg.as_ref();
                    if off == 0 {
                        stages::record_msg(Stage::SendCall, self.stage_key(), m);
                    }
                    let rest = m.len() - off;
                    let pushed = push_pooled(&mut tx, rest, false, |h, n| {
                        push(h, msg, off..off + n, n == rest)
                    });
                    match pushed {
                        Ok(n) if off + n == m.len() => (i, off) = (i + 1, 0),
                        Ok(n) => {
                            off += n;
                            break;
                        }
                        Err(SendError::WindowFull | SendError::OverRate) => break,
                        // Those queued before it still leave now.
                        Err(e) => {
                            failed = Some(map_send(e));
                            break;
                        }
                    }
                }
                self.flush_tx(eng, &mut tx, cv)
            };
            self.defer_if(eng, deferred);
            if let Some(e) = failed.take() {
                return Err(e);
            }
            if i == msgs.len() {
                return Ok(());
            }
            let rest = msgs[i].as_ref().len() - off;
            self.wait_room(eng, rest.clamp(1, POOL_PIECE), 1, None);
        }
    }

    /// Send as many of `msgs`, from the first, as fit whole now, with one flush for
    /// all of them ([`Conn::send_messages`]); how many were taken. None fitting is
    /// `WouldBlock`, as [`Conn::try_send_message`], with nothing taken.
    pub(crate) fn try_send_messages<M: AsRef<[u8]>>(
        &self,
        eng: &Engine,
        msgs: &[M],
        push: PushPiece<M>,
    ) -> Result<usize, Error> {
        let Some(first) = msgs.first() else {
            return Ok(0);
        };
        let (mut tx, cv) = self.tx();
        if let Some(e) = use_error(&tx, Which::Tx) {
            return Err(e);
        }
        let mut taken = 0;
        for msg in msgs {
            let m = msg.as_ref();
            if room(&tx) < m.len() {
                break;
            }
            stages::record_msg(Stage::SendCall, self.stage_key(), m);
            match push_pooled(&mut tx, m.len(), true, |h, _| {
                push(h, msg, 0..m.len(), true)
            }) {
                Ok(0) if !m.is_empty() => break,
                Ok(_) => taken += 1,
                Err(e) if taken == 0 => return Err(map_send(e)),
                // The next call hears of it; those taken leave now.
                Err(_) => break,
            }
        }
        if taken == 0 {
            drop(tx);
            // Nothing taken: the single-message path reports why, and counts the
            // event, the same way.
            let m = first.as_ref();
            return self
                .try_send_message_with(eng, m, None, |h| push(h, first, 0..m.len(), true))
                .map(|()| 1);
        }
        let deferred = self.flush_tx(eng, &mut tx, cv);
        drop(tx);
        self.events.send_went();
        self.defer_if(eng, deferred);
        Ok(taken)
    }

    /// Send one message if it fits now, else `WouldBlock` with nothing taken; then
    /// `waker`, if given, is registered under the same lock as the attempt, so the
    /// driver cannot make room in between without seeing it.
    pub(crate) fn try_send_message(
        &self,
        eng: &Engine,
        msg: &[u8],
        waker: Option<&std::task::Waker>,
    ) -> Result<(), Error> {
        self.try_send_message_with(eng, msg, waker, |half| half.send(msg, true))
    }

    /// As [`Conn::try_send_message`], taking the application's buffer without a copy
    /// ([`Conn::send_message_bytes`]).
    pub(crate) fn try_send_message_bytes(
        &self,
        eng: &Engine,
        msg: &Bytes,
        waker: Option<&std::task::Waker>,
    ) -> Result<(), Error> {
        self.try_send_message_with(eng, msg, waker, |half| half.send_bytes(msg, true))
    }

    fn try_send_message_with(
        &self,
        eng: &Engine,
        msg: &[u8],
        waker: Option<&std::task::Waker>,
        push: impl FnOnce(&mut TxHalf) -> Result<usize, SendError>,
    ) -> Result<(), Error> {
        let (mut tx, cv) = self.tx();
        if let Some(e) = use_error(&tx, Which::Tx) {
            return Err(e);
        }
        let took = if room(&tx) >= msg.len() {
            push_pooled(&mut tx, msg.len(), true, |h, _| push(h)).map_err(map_send)?
        } else {
            0
        };
        if took < msg.len() {
            let why = if tx.half.capacity() >= msg.len().max(1) {
                // The VC had room; the host's pool did not.
                eng.send_pool.note_held_back();
                WouldBlock::SendPool
            } else if tx.half.over_rate() {
                WouldBlock::OverRate
            } else {
                WouldBlock::WindowFull
            };
            if let Some(w) = waker {
                if why == WouldBlock::SendPool {
                    // Woken by whichever VC gives octets back; at once if some came
                    // back since the attempt.
                    if eng.send_pool.wake_on_free(msg.len(), w) {
                        w.wake_by_ref();
                    }
                } else {
                    tx.waker = Some(w.clone());
                }
            }
            drop(tx);
            self.events.send_held(match why {
                WouldBlock::OverRate => super::events::ConnEvent::OverRate,
                // A spent pool reads as a full send buffer: the host's, not the VC's.
                _ => super::events::ConnEvent::WindowFull,
            });
            return Err(Error::WouldBlock(why));
        }
        let deferred = self.flush_tx(eng, &mut tx, cv);
        drop(tx);
        self.events.send_went();
        self.defer_if(eng, deferred);
        Ok(())
    }

    /// Send as much of `buf` as fits now (`end` ends the message); if not all of it
    /// fitted, `waker` is registered under the same lock as the attempt, so the driver
    /// cannot make room in between without seeing it.
    pub(crate) fn write_some(
        &self,
        eng: &Engine,
        buf: &[u8],
        end: bool,
        waker: &std::task::Waker,
    ) -> Result<usize, Error> {
        let (mut tx, cv) = self.tx();
        if let Some(e) = use_error(&tx, Which::Tx) {
            return Err(e);
        }
        let pushed = push_pooled(&mut tx, buf.len(), false, |h, n| {
            h.send(&buf[..n], end && n == buf.len())
        });
        let n = match pushed {
            Ok(n) => n,
            Err(SendError::WindowFull | SendError::OverRate) => 0,
            Err(e) => return Err(map_send(e)),
        };
        let deferred = self.flush_tx(eng, &mut tx, cv);
        if n < buf.len() {
            tx.waker = Some(waker.clone());
            if tx.half.capacity() > 0 && eng.send_pool.wake_on_free(1, waker) {
                waker.wake_by_ref();
            }
        }
        drop(tx);
        self.defer_if(eng, deferred);
        Ok(n)
    }

    /// Take the next whole message out of the receive end, if one is complete. A
    /// message that came in one TPDU is handed over as the allocation its payload was
    /// received into (no copy); longer ones are gathered once.
    fn take_message(e: &mut End<RxHalf>) -> Result<Option<Vec<u8>>, Error> {
        refuse_unused(e, Which::Rx)?;
        let stream = e.half.is_stream();
        loop {
            match e.half.recv() {
                Ok(Some(c)) => {
                    if c.start {
                        e.partial.clear();
                    }
                    let whole = c.end || stream;
                    if whole && e.partial.is_empty() {
                        return Ok(Some(Vec::from(c.data)));
                    }
                    e.partial.extend_from_slice(&c.data);
                    if whole {
                        return Ok(Some(std::mem::take(&mut e.partial)));
                    }
                }
                Ok(None) => return Ok(None),
                // natm-proto reports the end's own record of who ended it (sigd's
                // release: the peer, though the PSB was stopped from this side).
                Err(RecvError::Aborted(r)) => return Err(Error::Aborted(r)),
                Err(RecvError::NotReceiver) => return Err(Error::Closed),
            }
        }
    }

    /// Take the next received chunk out of the receive end, as the `Bytes` of the
    /// TPDU payload it arrived in (no copy), with whether it starts or ends its
    /// message (seed 003's status flags). A message `recv` began gathering is handed
    /// out first, as it was gathered.
    fn take_chunk(e: &mut End<RxHalf>) -> Result<Option<Chunk>, Error> {
        refuse_unused(e, Which::Rx)?;
        if !e.partial.is_empty() {
            // What `recv` gathered begins at its message's start.
            let data = bytes::Bytes::from(std::mem::take(&mut e.partial));
            return Ok(Some(Chunk {
                data,
                start_of_message: true,
                end_of_message: false,
            }));
        }
        let stream = e.half.is_stream();
        match e.half.recv() {
            // A stream has no boundaries: each chunk stands alone, as in `recv`.
            Ok(Some(c)) => Ok(Some(Chunk {
                data: c.data,
                start_of_message: c.start || stream,
                end_of_message: c.end || stream,
            })),
            Ok(None) => Ok(None),
            Err(RecvError::Aborted(r)) => Err(Error::Aborted(r)),
            Err(RecvError::NotReceiver) => Err(Error::Closed),
        }
    }

    /// What a receive that found nothing reports: the end of data, an error, or
    /// nothing yet (`None`).
    fn no_message<T>(e: &End<RxHalf>) -> Option<Result<Option<T>, Error>> {
        if e.status().peer_closed && e.half.readable() == 0 {
            return Some(Ok(None));
        }
        end_error(e).map(Err)
    }

    /// Receive what `take` takes (a whole message, a chunk), waiting up to `timeout`
    /// (`None`: forever); `Ok(None)` at the end of data.
    fn recv_with<T>(
        &self,
        eng: &Engine,
        timeout: Option<Duration>,
        mut take: impl FnMut(&mut End<RxHalf>) -> Result<Option<T>, Error>,
    ) -> Result<Option<T>, Error> {
        let r = self.wait_rx(eng, timeout, |e| match take(e) {
            Ok(Some(m)) => Some(Ok(Some(m))),
            Err(err) => Some(Err(err)),
            Ok(None) => Self::no_message(e),
        });
        r.unwrap_or(Err(Error::TimedOut))
    }

    /// Receive the next whole message, waiting up to `timeout` (`None`: forever);
    /// `Ok(None)` at the end of data.
    pub(crate) fn recv_message(
        &self,
        eng: &Engine,
        timeout: Option<Duration>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let r = self.recv_with(eng, timeout, Self::take_message);
        if let Ok(Some(m)) = &r {
            stages::record_msg(Stage::AppRecv, self.stage_key(), m);
        }
        r
    }

    /// As [`Conn::recv_message`], gathering a message of several TPDUs into `buf`'s
    /// memory: a caller that passes the same `Vec` each time gathers without
    /// allocating or growing it once it is as large as its messages. `buf` holds the
    /// message on `Ok(Some(()))`; otherwise its contents are unspecified.
    pub(crate) fn recv_message_into(
        &self,
        eng: &Engine,
        timeout: Option<Duration>,
        buf: &mut Vec<u8>,
    ) -> Result<Option<()>, Error> {
        // Lend the caller's memory to the gathering buffer, unless a message is half
        // gathered there already (a `recv` that timed out part way): at the first look
        // under the end's lock, not under a lock of its own (one lock per `recv`
        // fewer on the round trip's path).
        let mut first = true;
        let r = self.recv_with(eng, timeout, |e| {
            if std::mem::take(&mut first) {
                Self::lend(e, buf);
            }
            Self::take_message(e)
        });
        match r? {
            Some(m) => {
                stages::record_msg(Stage::AppRecv, self.stage_key(), &m);
                *buf = m;
                Ok(Some(()))
            }
            None => Ok(None),
        }
    }

    /// Receive the next chunk, waiting up to `timeout` (`None`: forever); `Ok(None)` at
    /// the end of data.
    pub(crate) fn recv_chunk(
        &self,
        eng: &Engine,
        timeout: Option<Duration>,
    ) -> Result<Option<Chunk>, Error> {
        self.recv_with(eng, timeout, Self::take_chunk)
    }

    /// What `take` takes if it is there now (after reading what is queued).
    ///
    /// What the end holds already is taken without a read of the socket: a reader
    /// woken for data the driver delivered (or draining a backlog) found the socket
    /// empty on every such read, one system call per message for nothing (`natm-lab
    /// perf scale`: 6 empty `recvmmsg` per message at 10,000 connections).
    fn try_recv_with<T>(
        &self,
        eng: &Engine,
        mut take: impl FnMut(&mut End<RxHalf>) -> Result<Option<T>, Error>,
    ) -> Result<Option<T>, Error> {
        let mut read = false;
        loop {
            let (mut rx, _) = self.rx();
            let taken = take(&mut rx);
            self.send_read_control(eng, &mut rx);
            match taken? {
                Some(m) => return Ok(Some(m)),
                None if rx.status().peer_closed => return Ok(None),
                None if !std::mem::replace(&mut read, true) => {
                    drop(rx);
                    let mut buf = eng.take_buffer();
                    self.read_now(eng, &mut buf);
                    eng.give_buffer(buf);
                }
                None => {
                    return Err(
                        use_error(&rx, Which::Rx).unwrap_or(Error::WouldBlock(WouldBlock::Empty))
                    )
                }
            }
        }
    }

    /// The next whole message if one is complete now (after reading what is queued).
    pub(crate) fn try_recv_message(&self, eng: &Engine) -> Result<Option<Vec<u8>>, Error> {
        self.try_recv_with(eng, Self::take_message)
    }

    /// As [`Conn::try_recv_message`], gathering into `buf`'s memory as
    /// [`Conn::recv_message_into`] does: a reader that drains a VC without waiting
    /// (`natm ip`'s) neither allocates nor grows a buffer per message.
    pub(crate) fn try_recv_message_into(
        &self,
        eng: &Engine,
        buf: &mut Vec<u8>,
    ) -> Result<Option<()>, Error> {
        let m = self.try_recv_with(eng, |e| {
            Self::lend(e, buf);
            Self::take_message(e)
        })?;
        Ok(m.map(|m| *buf = m))
    }

    /// Lend `buf`'s memory to the end's gathering buffer, unless a message is half
    /// gathered there already (a `recv` that timed out part way) or it has more.
    fn lend(e: &mut End<RxHalf>, buf: &mut Vec<u8>) {
        if e.partial.is_empty() && e.partial.capacity() < buf.capacity() {
            buf.clear();
            std::mem::swap(&mut e.partial, buf);
        }
    }

    /// The next chunk if one is there now (after reading what is queued).
    pub(crate) fn try_recv_chunk(&self, eng: &Engine) -> Result<Option<Chunk>, Error> {
        self.try_recv_with(eng, Self::take_chunk)
    }

    /// As [`Conn::try_recv_with`], registering `waker` if nothing is there; `None`
    /// means pending.
    ///
    /// A poll that finds nothing while the watermarks hold the VC's reading off reads
    /// once more before it registers: the hold ends only with a drain that finds the
    /// backlog under the low watermark, and the drain before this poll's take could
    /// not (the backlog was still there, or another thread held the read role and
    /// drained before the take). Without it the socket stayed out of the driver's
    /// epoll set with nobody to read it, and the waker was woken only by whatever
    /// else polled the VC (`natm ip`'s pool: its sends).
    fn poll_recv_with<T>(
        &self,
        eng: &Engine,
        waker: &std::task::Waker,
        take: fn(&mut End<RxHalf>) -> Result<Option<T>, Error>,
    ) -> Option<Result<Option<T>, Error>> {
        let mut buf = eng.take_buffer();
        // What the end holds is taken first, with no read (as `try_recv_with`); then
        // the socket is read once, and once more while the watermarks hold the VC,
        // before the waker is registered — unless the driver reads the socket: it
        // delivers what comes and wakes the waker, and a read here found the socket
        // empty after nearly every message a woken reader took (`natm-lab perf scale`
        // at 10,000 connections: one empty read per message).
        let mut reads = 0;
        let r = loop {
            let (mut rx, _) = self.rx();
            let taken = take(&mut rx);
            self.send_read_control(eng, &mut rx);
            match taken {
                Ok(Some(m)) => break Some(Ok(Some(m))),
                Err(e) => break Some(Err(e)),
                Ok(None) => {
                    if let Some(r) = Self::no_message(&rx) {
                        break Some(r);
                    }
                    let first = reads == 0 && !self.driver_reads();
                    if first || (reads == 1 && self.held_by_watermark()) {
                        reads += 1;
                        drop(rx);
                        self.read_now(eng, &mut buf);
                        continue;
                    }
                    // Checked and registered under the same lock: the driver cannot
                    // deliver in between without seeing the waker.
                    rx.waker = Some(waker.clone());
                    break None;
                }
            }
        };
        eng.give_buffer(buf);
        if r.is_none() {
            // The waker waits on the driver: it must watch the socket.
            self.unpark(eng);
        }
        r
    }

    /// The next whole message, or `None` (pending) with `waker` registered.
    pub(crate) fn poll_recv_message(
        &self,
        eng: &Engine,
        waker: &std::task::Waker,
    ) -> Option<Result<Option<Vec<u8>>, Error>> {
        self.poll_recv_with(eng, waker, Self::take_message)
    }

    /// The next chunk, or `None` (pending) with `waker` registered.
    pub(crate) fn poll_recv_chunk(
        &self,
        eng: &Engine,
        waker: &std::task::Waker,
    ) -> Option<Result<Option<Chunk>, Error>> {
        self.poll_recv_with(eng, waker, Self::take_chunk)
    }

    /// Copy received stream bytes into `buf`, waiting for some; `Ok(0)` at the end.
    pub(crate) fn read_bytes(&self, eng: &Engine, buf: &mut [u8]) -> Result<usize, Error> {
        let n = self.wait_rx(eng, None, |e| {
            if e.unused {
                Some(refuse_unused(e, Which::Rx).map(|()| 0))
            } else if e.half.readable() > 0 {
                Some(e.half.read(buf).map_err(|_| Error::Closed))
            } else if e.status().peer_closed {
                Some(Ok(0))
            } else {
                end_error(e).map(Err)
            }
        });
        n.unwrap_or(Ok(0))
    }

    /// As [`Conn::read_bytes`] without waiting; `None` (with `waker` registered) if
    /// nothing is there yet.
    #[cfg(feature = "tokio")]
    pub(crate) fn poll_read_bytes(
        &self,
        eng: &Engine,
        buf: &mut [u8],
        waker: &std::task::Waker,
    ) -> Option<Result<usize, Error>> {
        let mut scratch = eng.take_buffer();
        self.read_now(eng, &mut scratch);
        // As `poll_recv_with`: nothing found while held, read once more.
        if self.held_by_watermark() && self.rx().0.half.readable() == 0 {
            self.read_now(eng, &mut scratch);
        }
        eng.give_buffer(scratch);
        let (mut rx, _) = self.rx();
        if let Err(e) = refuse_unused(&rx, Which::Rx) {
            return Some(Err(e));
        }
        if rx.half.readable() > 0 {
            let n = rx.half.read(buf).map_err(|_| Error::Closed);
            self.send_read_control(eng, &mut rx);
            return Some(n);
        }
        if rx.status().peer_closed {
            return Some(Ok(0));
        }
        if let Some(e) = use_error(&rx, Which::Rx) {
            return Some(Err(e));
        }
        rx.waker = Some(waker.clone());
        drop(rx);
        self.unpark(eng);
        None
    }

    /// Close the sending VC in order.
    pub(crate) fn close_tx(&self, eng: &Engine) {
        // The close's answer must be read as it comes.
        self.unpark(eng);
        let (mut tx, cv) = self.tx();
        tx.half.close();
        let now = eng.clock.now();
        self.after(eng, Which::Tx, &mut tx, cv, now, usize::MAX);
    }

    /// The application let go: close what is still open (our VC in order; the VC
    /// towards us aborts unless the peer already closed it).
    pub(crate) fn close_all(&self, eng: &Engine) {
        if self.tx().0.finished() && self.rx().0.finished() {
            return;
        }
        self.close_tx(eng);
        let now = eng.clock.now();
        let (mut rx, cv) = self.rx();
        if !rx.status().peer_closed {
            rx.half.close();
            self.after(eng, Which::Rx, &mut rx, cv, now, usize::MAX);
        }
    }

    /// Wait until the peer has everything sent (or `timeout`).
    pub(crate) fn flush_tx_wait(
        &self,
        eng: &Engine,
        timeout: Option<Duration>,
    ) -> Result<(), Error> {
        let done = self.wait_tx(eng, timeout, |e| {
            (e.half.buffered() == 0 || e.status().closed || e.finished()).then_some(())
        });
        match done {
            Some(()) => end_error(&self.tx().0).map_or(Ok(()), Err),
            None => Err(Error::TimedOut),
        }
    }

    /// Change the sending rate at once within the agreed bounds, without telling the
    /// peer (local only; [`Conn::start_qos`] is the confirmed change).
    pub(crate) fn set_rate(&self, bps: u64) -> Result<(), Error> {
        self.tx().0.half.set_rate(bps)?;
        Ok(())
    }

    /// The network reserved new rates for the call (sigd's `QosChanged`): each VC's
    /// bound follows, `tx` for the one this side sends on, `rx` for the other (0:
    /// unchanged).
    pub(crate) fn set_rate_bounds(&self, tx: u64, rx: u64) {
        if tx > 0 {
            self.tx().0.half.set_rate_bound(tx);
        }
        if rx > 0 {
            self.rx().0.half.set_rate_bound(rx);
        }
    }

    /// Ask the peer for a new sending rate within the agreed bounds (seed 003
    /// `setqos`): the QOS TPDU goes out now; the rate changes when the peer accepts.
    pub(crate) fn start_qos(&self, eng: &Engine, bps: u64) -> Result<(), Error> {
        let now = eng.clock.now();
        let (mut tx, cv) = self.tx();
        if let Some(e) = use_error(&tx, Which::Tx) {
            return Err(e);
        }
        tx.half.set_qos(now, bps).map_err(|e| match e {
            QosChangeError::OutOfBounds(b) => Error::QosBounds(b),
            QosChangeError::Pending(rate) => Error::QosPending(rate),
            QosChangeError::NotEstablished | QosChangeError::NotSender => Error::Closed,
            e @ QosChangeError::OneWay => Error::QosNotNegotiable(e.to_string()),
        })?;
        // Queued before the request leaves: once it has, the driver may take the
        // peer's answer and queue QosChanged before this thread got here (seen as
        // [QosChanged, QosPending] on a loaded machine).
        self.events
            .push(super::events::ConnEvent::QosPending { rate: bps });
        self.after(eng, Which::Tx, &mut tx, cv, now, usize::MAX);
        Ok(())
    }

    /// Wait (up to `timeout`) for the pending QoS change's answer: the new rate, or
    /// why not.
    pub(crate) fn wait_qos(&self, eng: &Engine, timeout: Option<Duration>) -> Result<u64, Error> {
        let r = self.wait_tx(eng, timeout, |e| {
            (!e.half.qos_pending() || e.finished()).then(|| (e.status().qos, end_error(e)))
        });
        match r {
            None => Err(Error::TimedOut),
            Some((_, Some(e))) => Err(e),
            Some((Some(QosOutcome::Changed { rate }), None)) => Ok(rate),
            Some((Some(QosOutcome::Refused { rate }), None)) => Err(Error::QosRefused { rate }),
            Some((None, None)) => Err(Error::Closed),
        }
    }

    /// seed 003's status flags of both VCs, as they are now: (sending, receiving).
    pub(crate) fn status_parts(&self) -> (VcStatus, VcStatus) {
        fn of<H: Simplex>(e: &End<H>, psb: Option<&natm_proto::transport::Psb>) -> VcStatus {
            VcStatus {
                psb: psb.map(|p| p.status()).unwrap_or_default(),
                half: e.status(),
                rate_bps: psb.map_or(0, |p| p.qos_rate()),
            }
        }
        let t = {
            let (tx, _) = self.tx();
            of(&tx, tx.half.psb())
        };
        let (rx, _) = self.rx();
        (t, of(&rx, rx.half.psb()))
    }

    /// Counters of both VCs.
    pub(crate) fn stats_parts(&self) -> StatsParts {
        let (tx, _) = self.tx();
        let rtt = tx.half.psb().map(|p| p.rtt());
        let flow = tx.half.flow();
        let (txs, srtt, rate_bps, window, send_queued, tx_bare) = (
            tx.half.stats(),
            rtt.filter(|r| r.has_sample()).map(|r| r.srtt()),
            flow.and_then(|f| f.rate_bps()).map(|r| r as u64),
            flow.and_then(|f| f.window()).map(|w| w as u64),
            tx.half.buffered() as u64,
            tx.half.bare_counters(),
        );
        let send_pool = tx
            .pool
            .as_ref()
            .map(|p| p.pool().stats())
            .unwrap_or_default();
        let plpmtud = tx.path.as_ref().map(|p| p.stats());
        drop(tx);
        let (rx, _) = self.rx();
        let recv_queued = match rx.half.psb() {
            Some(p) => p.recv_buffered(),
            None => rx.half.readable(),
        } as u64;
        let (rxs, rx_bare) = (rx.half.stats(), rx.half.bare_counters());
        drop(rx);
        StatsParts {
            plpmtud,
            tx: txs,
            rx: rxs,
            srtt,
            rate_bps,
            window,
            send_queued,
            recv_queued,
            bare: tx_bare.zip(rx_bare),
            send_pool,
        }
    }

    /// Whether the sending VC carries a byte stream.
    pub(crate) fn is_stream(&self) -> bool {
        self.tx().0.half.is_stream()
    }

    /// The application's abort of both VCs.
    pub(crate) fn abort_local(&self, eng: &Engine) {
        self.abort_both(eng, AbortReason::Local);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Instant;
    use crate::wire::tpdu::Header;

    fn params(tx_vci: u16, rx_vci: u16) -> SignalledParams {
        SignalledParams {
            peer: ([127, 0, 0, 1], 7000).into(),
            tx_vci,
            rx_vci,
            cookie: 3,
            caller: tx_vci < rx_vci,
            tx: TransportConfig::reliable(),
            rx: TransportConfig::reliable(),
        }
    }

    #[test]
    fn a_one_tpdu_messages_chunk_is_the_payloads_own_allocation() {
        let now = Instant::ZERO;
        let mut a = Connection::signalled(now, params(60, 61)).expect("valid");
        let b = Connection::signalled(now, params(61, 60)).expect("valid");
        let msg: Vec<u8> = (0..2000u32).map(|i| (i * 7) as u8).collect();
        a.send(&msg, true).expect("room");
        let mut buf = Vec::new();
        a.poll_transmit(now, &mut buf).expect("the data");
        let (h, payload) = Header::parse_bytes(&buf[natm_proto::wire::vcframe::HEADER_LEN..])
            .expect("a TPDU from the sender");
        // What the engine's receive does: the payload copied once, on its own.
        let own = bytes::Bytes::from(payload.to_vec());
        let at = own.as_ptr();
        let (_, _, _, mut rx) = b.into_parts();
        rx.handle_tpdu(now, h, own);
        let mut end = End::new(rx);
        let chunk = Conn::take_chunk(&mut end).expect("fine").expect("a chunk");
        assert!(chunk.end_of_message);
        assert_eq!(chunk.data, msg);
        assert_eq!(
            chunk.data.as_ptr(),
            at,
            "the chunk is the payload, not a copy"
        );
        assert!(Conn::take_chunk(&mut end).expect("fine").is_none());
    }

    /// A hostile (or merely lossy) peer sends a flood of small TPDUs out of order, each
    /// in a receive of its own, so that the PSB holds one small payload from every
    /// receive area: the areas lent to the connection never exceed its receive
    /// buffer's worth, the rest are copied, every message still arrives intact once
    /// the gap is filled, and every area comes home when the messages are consumed.
    #[test]
    fn a_flood_of_small_out_of_order_tpdus_pins_no_more_than_the_receive_buffer() {
        use super::super::conn::feed;
        use crate::adaptor::RecvBatch;
        use natm_proto::wire::vcframe::HEADER_LEN as VC;
        use natm_udp::areas::{AreaAccount, AreaPool, MAX_HOME};

        let now = Instant::ZERO;
        let mut a = Connection::signalled(now, params(60, 61)).expect("valid");
        let b = Connection::signalled(now, params(61, 60)).expect("valid");
        let (_, _, _, rx) = b.into_parts();
        let rcv_buf = rx.rcv_buf();
        let mut end = End::new(rx);
        // A first message from the real sender, as the template of a flood of small
        // one-TPDU messages that follow it (a peer may send any of them; the PSB
        // accepts what lies inside its window).
        let first = vec![0xa5u8; 64];
        a.send(&first, true).expect("room");
        let mut tmpl = Vec::new();
        a.poll_transmit(now, &mut tmpl).expect("the data");
        let (h0, _) = Header::parse_bytes(&tmpl[VC..]).expect("a TPDU from the sender");
        let mut msgs = vec![first];
        let mut frames = vec![tmpl.clone()];
        for i in 1..255u32 {
            let m = vec![i as u8; 64 + (i % 7) as usize];
            let h = Header {
                seq: h0.seq.wrapping_add(i),
                msg: h0.msg.wrapping_add(i),
                ..h0
            };
            let mut f = tmpl[..VC].to_vec();
            f.extend_from_slice(&h.to_bytes());
            f.extend_from_slice(&m);
            frames.push(f);
            msgs.push(m);
        }
        let area_len = 65_536;
        let budget = rcv_buf / area_len;
        assert!(
            frames.len() > budget + 16,
            "the flood must outnumber the areas: {} frames, {budget} areas",
            frames.len()
        );

        let home = AreaPool::new(MAX_HOME, usize::MAX);
        let areas = AreaAccount::default();
        let mut batch: RecvBatch = RecvBatch::new(1, area_len);
        let from: std::net::SocketAddr = ([127, 0, 0, 1], 7000).into();
        // What `Conn::take_batch` does with each receive: lend its area if the budget
        // allows, else copy.
        let mut take = |end: &mut End<RxHalf>, frame: &[u8]| {
            batch.clear();
            assert!(batch.push(from, frame));
            match home.lend(&areas, &mut batch, rcv_buf) {
                Some(area) => {
                    for (_, r) in batch.spans() {
                        let d = &area[r];
                        feed(&mut end.half, now, now, &d[VC..], false, Some(&area));
                    }
                }
                None => {
                    for (_, d) in batch.iter() {
                        feed(&mut end.half, now, now, &d[VC..], false, None);
                    }
                }
            }
        };
        // Everything but the first TPDU: a gap the PSB must hold the rest behind.
        for f in &frames[1..] {
            take(&mut end, f);
            assert!(
                areas.lent() <= budget,
                "{} areas of {area_len} octets pinned by a receive buffer of {rcv_buf}",
                areas.lent()
            );
        }
        assert_eq!(end.half.readable(), 0, "nothing deliverable behind the gap");
        let (lends, declined) = areas.counts();
        assert_eq!(areas.lent(), budget, "every area is pinned by a held TPDU");
        assert_eq!(lends as usize, budget);
        assert_eq!(
            declined as usize,
            frames.len() - 1 - budget,
            "the rest were copied"
        );

        // The gap fills: every message arrives, in order, intact.
        take(&mut end, &frames[0]);
        let mut got = Vec::new();
        while let Some(c) = Conn::take_chunk(&mut end).expect("fine") {
            assert!(c.end_of_message);
            got.push(c.data.to_vec());
        }
        assert_eq!(got, msgs[..frames.len()].to_vec());
        assert_eq!(
            areas.lent(),
            0,
            "every area came home once its TPDUs were read"
        );
        assert_eq!(home.home(), budget.min(MAX_HOME));
    }
}
