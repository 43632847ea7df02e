//! The C API of natm (issue 19): `include/natm.h` over [`natm_rs::ulib`], built as
//! `libnatm.so` and `libnatm.a`.
//!
//! Handles are opaque boxes handed to C (`natm_host`, `natm_listener`, `natm_conn`);
//! every call returns a non-negative result or a negative `NATM_E…` code, with the
//! detail (sigd's cause and reason included) in a per-thread message
//! (`natm_last_error`). No panic crosses into C ([`error::guard`]). docs/capi.md is
//! the reference.

mod error;
pub mod events;
pub mod fore;
pub mod multipoint;
mod ready;

use natm_rs::ulib::Wait;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use natm_rs::ulib::{Bytes, Chunk, Connection, Error, Host, HostConfig, Listener};

use error::{guard, Code, Failure};
use ready::Readiness;

/// `natm_send`/`natm_recv`/`natm_accept` flag: return `NATM_EAGAIN` instead of
/// waiting.
pub const NATM_NONBLOCK: c_int = 1;

/// A host: one natm engine in this process (`natm_open`).
#[derive(Debug)]
pub struct NatmHost {
    host: Host,
}

/// A listener and the connections its accepting thread has taken ahead of
/// `natm_accept` (at most its backlog).
#[derive(Debug)]
pub struct NatmListener {
    shared: Arc<Backlog>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Debug)]
struct Backlog {
    queue: Mutex<Accepted>,
    cv: Condvar,
    stop: AtomicBool,
    limit: usize,
    ready: Arc<Readiness>,
    /// The listener's socket address (direct mode).
    addr: Option<std::net::SocketAddr>,
}

#[derive(Debug, Default)]
struct Accepted {
    conns: VecDeque<Connection>,
    /// Why the listener takes no more calls (it was unbound for good).
    fatal: Option<String>,
}

/// A duplex connection, with the rest of a message `natm_recv` did not fit into the
/// caller's buffer.
#[derive(Debug)]
pub struct NatmConn {
    conn: Connection,
    rest: Mutex<Option<Chunk>>,
    /// Readiness to receive and to send.
    rx: Arc<Readiness>,
    tx: Arc<Readiness>,
    rx_waker: Waker,
    tx_waker: Waker,
    /// Readiness of `natm_next_event` (a status event queued).
    ev: Arc<Readiness>,
    ev_waker: Waker,
    /// The next bytes `natm_recv` returns start a message.
    at_start: AtomicBool,
}

/// What `natm_status` reports (natm.h's `struct natm_status`, field for field).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct NatmStatus {
    /// Payload bytes sent (first transmissions).
    pub bytes_sent: u64,
    /// Payload bytes retransmitted.
    pub bytes_retransmitted: u64,
    /// Data TPDUs sent (first transmissions).
    pub tpdus_sent: u64,
    /// Retransmissions of every kind.
    pub retransmissions: u64,
    /// Payload bytes delivered to this application.
    pub bytes_received: u64,
    /// Messages delivered whole.
    pub messages_received: u64,
    /// Bytes queued on the sending VC (unsent or unacknowledged).
    pub send_queued: u64,
    /// Bytes held on the receiving VC (out of order or unread).
    pub recv_queued: u64,
    /// Smoothed round-trip time, microseconds (0: no sample yet).
    pub srtt_us: u64,
    /// Flow controller's rate on the sending VC, bit/s (0: it sets none).
    pub rate_bps: u64,
    /// Flow controller's window, TPDUs (0: it keeps none).
    pub window: u64,
    /// Rate reserved for this side's sending, payload bit/s (0: none).
    pub granted_tx_bps: u64,
    /// 1: set up through sigd; 0: direct mode.
    pub signalled: c_int,
    /// 1: sigd has ended the call (see `release_cause`, `natm_release_detail`).
    pub released: c_int,
    /// The UNI cause of the release (16: normal clearing), 0 while the call lives.
    pub release_cause: c_int,
    /// 1: the sending VC carries a byte stream; 0: messages.
    pub is_stream: c_int,
    /// seed 003's status flags as they are now (`natm_recv_status` gives them with
    /// each piece of a message).
    pub flags: events::NatmFlags,
    /// Status events dropped because they were not taken (`natm_next_event`).
    pub events_dropped: u64,
}

fn fail(code: Code, msg: impl Into<String>) -> Failure {
    Failure::new(code, msg)
}

/// A C string argument as UTF-8 text.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid for `'a`.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(fail(Code::Inval, format!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string living for 'a.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| fail(Code::Inval, format!("{what} is not UTF-8 text")))
}

/// A handle argument.
///
/// # Safety
/// `p` is null or a live handle of type `T` from this library.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller promises a live handle (a Box this library leaked) or null.
    unsafe { p.as_ref() }.ok_or_else(|| fail(Code::Inval, format!("{what} is NULL")))
}

/// Store a new handle in `*out`.
///
/// # Safety
/// `out` is null or valid for a pointer write.
unsafe fn give<T>(out: *mut *mut T, v: T) -> Result<isize, Failure> {
    if out.is_null() {
        return Err(fail(Code::Inval, "the out pointer is NULL"));
    }
    // SAFETY: non-null and writable by the caller's promise.
    unsafe { out.write(Box::into_raw(Box::new(v))) };
    Ok(0)
}

/// Copy `s` into a C buffer, snprintf-style: the full length is returned.
///
/// # Safety
/// `buf` is null (with `len` 0) or valid for `len` bytes of writes.
unsafe fn copy_text(s: &str, buf: *mut c_char, len: usize) -> Result<isize, Failure> {
    if len > 0 {
        if buf.is_null() {
            return Err(fail(Code::Inval, "buf is NULL"));
        }
        let n = s.len().min(len - 1);
        // SAFETY: buf holds len bytes and n + 1 <= len; s and buf cannot overlap (s is
        // Rust-owned).
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
    }
    Ok(s.len() as isize)
}

fn to_int(r: isize) -> c_int {
    c_int::try_from(r).unwrap_or(c_int::MAX)
}

/// Run `f` on a connection for a call that returns 0 on success (the shape of
/// shutdown, flush, abort and set_rate).
///
/// # Safety
/// `c` is null or a live connection.
unsafe fn on_conn(c: *const NatmConn, f: impl FnOnce(&NatmConn) -> Result<(), Failure>) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller promises a live connection (null is refused).
        let c = unsafe { handle(c, "conn") }?;
        f(c)?;
        Ok(0)
    }))
}

// ---------------------------------------------------------------------------------
// Errors

/// The text of a `NATM_E…` code (a static string).
#[no_mangle]
pub extern "C" fn natm_strerror(code: c_int) -> *const c_char {
    error::describe(code).as_ptr().cast()
}

/// This thread's last failure in full: what happened and what to do, with sigd's cause
/// and reason for refused or released calls. Valid until this thread's next failing
/// natm call; empty before any.
#[no_mangle]
pub extern "C" fn natm_last_error() -> *const c_char {
    error::last_message()
}

/// The UNI cause (Q.2931) of this thread's last failure: 0 if it had none.
#[no_mangle]
pub extern "C" fn natm_last_cause() -> c_int {
    error::last_cause()
}

/// The library's version, e.g. "0.1.0".
#[no_mangle]
pub extern "C" fn natm_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

// ---------------------------------------------------------------------------------
// Hosts

/// Start a host (an engine). `sigd_socket`: the sigd to call through; NULL means
/// `$NATM_SIGD`, else /run/natm/sigd.sock; "" means none (direct mode only).
///
/// # Safety
/// `sigd_socket` is null or a NUL-terminated string; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn natm_open(sigd_socket: *const c_char, out: *mut *mut NatmHost) -> c_int {
    to_int(guard(|| {
        let mut cfg = HostConfig::default();
        if !sigd_socket.is_null() {
            // SAFETY: non-null; the caller promises a NUL-terminated string.
            let s = unsafe { text(sigd_socket, "sigd_socket") }?;
            cfg.sigd_socket = (!s.is_empty()).then(|| PathBuf::from(s));
        }
        let host = Host::open(cfg).map_err(Failure::from)?;
        // SAFETY: the caller promises `out` is writable.
        unsafe { give(out, NatmHost { host }) }
    }))
}

/// Stop using a host: wait up to `linger_ms` for its closed connections to finish
/// delivering, then free it. Returns 1 if all finished, 0 if time ran out.
/// Connections and listeners still open keep the engine running until closed.
///
/// # Safety
/// `host` is null or a host from `natm_open` not yet closed; it is not used after.
#[no_mangle]
pub unsafe extern "C" fn natm_host_close(host: *mut NatmHost, linger_ms: u32) -> c_int {
    if host.is_null() {
        return 0;
    }
    // SAFETY: a live host from natm_open, given back once (the caller's promise).
    let h = unsafe { Box::from_raw(host) };
    to_int(guard(|| {
        let done = h.host.linger(Duration::from_millis(u64::from(linger_ms)));
        drop(h);
        Ok(isize::from(done))
    }))
}

// ---------------------------------------------------------------------------------
// Listeners

/// Listen on `addr` with `qos` (e.g. "reliable", "cbr:pcr=10Mbps"). Through sigd
/// `addr` is a SAP ("ttcp") or "ATM address:SAP"; an IP socket address
/// ("127.0.0.1:0") listens in direct mode. Up to `backlog` (1..=1024) calls are
/// accepted ahead of `natm_accept`, as a TCP listen queue holds them.
///
/// # Safety
/// `host` is a live host; `addr` and `qos` are NUL-terminated strings; `out` is
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn natm_listen(
    host: *const NatmHost,
    addr: *const c_char,
    qos: *const c_char,
    backlog: c_int,
    out: *mut *mut NatmListener,
) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller's promises above.
        let (h, addr, qos) = unsafe {
            (
                handle(host, "host")?,
                text(addr, "addr")?,
                text(qos, "qos")?,
            )
        };
        if !(1..=1024).contains(&backlog) {
            return Err(fail(
                Code::Inval,
                format!("backlog {backlog} outside 1..=1024"),
            ));
        }
        if out.is_null() {
            return Err(fail(Code::Inval, "the out pointer is NULL"));
        }
        let listener = h.host.bind(addr, qos).map_err(Failure::from)?;
        let ready = Readiness::new().map_err(|e| fail(Code::Io, format!("eventfd: {e}")))?;
        // No call has come yet: the descriptor waits for the first.
        ready.clear();
        let shared = Arc::new(Backlog {
            queue: Mutex::new(Accepted::default()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            limit: backlog as usize,
            ready,
            addr: listener.local_addr().ok(),
        });
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name("natm-accept".into())
            .spawn(move || accept_loop(listener, &s2))
            .map_err(|e| fail(Code::Io, format!("cannot start the accepting thread: {e}")))?;
        // SAFETY: checked non-null above; the caller promises it is writable.
        unsafe {
            give(
                out,
                NatmListener {
                    shared,
                    thread: Some(thread),
                },
            )
        }
    }))
}

/// How long the accepting thread waits in one `accept` before it looks at its stop
/// flag again: the bound on `natm_listener_close`'s wait.
const ACCEPT_SLICE: Duration = Duration::from_millis(100);

/// The listener's accepting thread: takes calls while the backlog has room, until the
/// handle is closed or the listener is unbound for good.
fn accept_loop(listener: Listener, b: &Backlog) {
    while !b.stop.load(Ordering::Acquire) {
        {
            let q = b.queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.conns.len() >= b.limit {
                // Full: callers wait at sigd (or retry in direct mode) until
                // natm_accept takes one.
                let _ = b.cv.wait_timeout(q, ACCEPT_SLICE);
                continue;
            }
        }
        match listener.accept(Wait::For(ACCEPT_SLICE)) {
            Ok(c) => {
                let mut q = b.queue.lock().unwrap_or_else(|p| p.into_inner());
                q.conns.push_back(c);
                b.cv.notify_all();
                b.ready.set();
            }
            Err(Error::TimedOut | Error::WouldBlock(_)) => {}
            Err(e) if listener.is_unbound() => {
                let mut q = b.queue.lock().unwrap_or_else(|p| p.into_inner());
                q.fatal = Some(e.to_string());
                b.cv.notify_all();
                b.ready.set();
                return;
            }
            // One call failing (its caller gave up, sigd restarting) ends nothing
            // else; sigd being away is waited out without spinning.
            Err(_) => std::thread::sleep(ACCEPT_SLICE),
        }
    }
}

/// Take the next connection: waits for a caller, or with `NATM_NONBLOCK` returns
/// `NATM_EAGAIN` when none is waiting (then poll `natm_listener_fd`).
///
/// # Safety
/// `l` is a live listener; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn natm_accept(
    l: *const NatmListener,
    flags: c_int,
    out: *mut *mut NatmConn,
) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller promises a live listener.
        let l = unsafe { handle(l, "listener") }?;
        if out.is_null() {
            return Err(fail(Code::Inval, "the out pointer is NULL"));
        }
        let b = &l.shared;
        let nonblock = flags & NATM_NONBLOCK != 0;
        if nonblock {
            b.ready.clear();
        }
        let mut q = b.queue.lock().unwrap_or_else(|p| p.into_inner());
        let conn = loop {
            if let Some(c) = q.conns.pop_front() {
                break c;
            }
            if let Some(why) = &q.fatal {
                b.ready.set();
                return Err(fail(Code::Unbound, why.clone()));
            }
            if nonblock {
                return Err(fail(Code::Again, "no call waiting"));
            }
            q = b.cv.wait(q).unwrap_or_else(|p| p.into_inner());
        };
        if !q.conns.is_empty() || q.fatal.is_some() {
            b.ready.set();
        }
        b.cv.notify_all();
        drop(q);
        let c = wrap(conn)?;
        // SAFETY: checked non-null; the caller promises it is writable.
        unsafe { give(out, c) }
    }))
}

/// The descriptor to poll (POLLIN) for a call waiting on `l`; owned by the listener.
///
/// # Safety
/// `l` is a live listener.
#[no_mangle]
pub unsafe extern "C" fn natm_listener_fd(l: *const NatmListener) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller promises a live listener.
        let l = unsafe { handle(l, "listener") }?;
        Ok(l.shared.ready.raw_fd() as isize)
    }))
}

/// The listener's socket address as text ("127.0.0.1:40123"), snprintf-style into
/// `buf`; a direct-mode listener only (through sigd: `NATM_ENOSIGD`, callers use the
/// host's ATM address and the SAP).
///
/// # Safety
/// `l` is a live listener; `buf` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn natm_listener_addr(
    l: *const NatmListener,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller promises a live listener.
        let l = unsafe { handle(l, "listener") }?;
        let a = l.shared.addr.ok_or_else(|| {
            fail(
                Code::NoSigd,
                "a listener through sigd has no socket address: callers use the host's ATM address and the SAP",
            )
        })?;
        // SAFETY: the caller promises buf holds len bytes.
        unsafe { copy_text(&a.to_string(), buf, len) }
    }))
}

/// Stop listening and free the listener; calls accepted but not yet taken are closed.
///
/// # Safety
/// `l` is null or a live listener; it is not used after.
#[no_mangle]
pub unsafe extern "C" fn natm_listener_close(l: *mut NatmListener) {
    if l.is_null() {
        return;
    }
    // SAFETY: a live listener from natm_listen, given back once.
    let mut l = unsafe { Box::from_raw(l) };
    let _ = guard(|| {
        l.shared.stop.store(true, Ordering::Release);
        l.shared.cv.notify_all();
        if let Some(t) = l.thread.take() {
            let _ = t.join();
        }
        Ok(0)
    });
}

// ---------------------------------------------------------------------------------
// Connections

fn wrap(conn: Connection) -> Result<NatmConn, Failure> {
    let fd = || Readiness::new().map_err(|e| fail(Code::Io, format!("eventfd: {e}")));
    let (rx, tx, ev) = (fd()?, fd()?, fd()?);
    Ok(NatmConn {
        conn,
        rest: Mutex::new(None),
        rx_waker: rx.waker(),
        tx_waker: tx.waker(),
        ev_waker: ev.waker(),
        rx,
        tx,
        ev,
        at_start: AtomicBool::new(true),
    })
}

/// Call `addr` with `qos` for both directions; blocks until the connection is up,
/// refused (`NATM_EREFUSED`, cause in `natm_last_cause`) or timed out. `addr` is an
/// ATM address or name with an optional ":SAP" (through sigd) or an IP socket
/// address (direct mode).
///
/// # Safety
/// `host` is a live host; `addr` and `qos` are NUL-terminated strings; `out` is
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn natm_connect(
    host: *const NatmHost,
    addr: *const c_char,
    qos: *const c_char,
    out: *mut *mut NatmConn,
) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller's promises above.
        let (h, addr, qos) = unsafe {
            (
                handle(host, "host")?,
                text(addr, "addr")?,
                text(qos, "qos")?,
            )
        };
        if out.is_null() {
            return Err(fail(Code::Inval, "the out pointer is NULL"));
        }
        let c = wrap(h.host.connect(addr, qos).map_err(Failure::from)?)?;
        // SAFETY: checked non-null; the caller promises it is writable.
        unsafe { give(out, c) }
    }))
}

/// Send `len` bytes from `buf` as one message. Blocks while the window is full or
/// the reserved rate is exceeded; with `NATM_NONBLOCK` returns `NATM_EAGAIN`, nothing
/// taken, instead (then poll `natm_conn_fd`). Returns `len`.
///
/// # Safety
/// `c` is a live connection; `buf` is valid for `len` bytes of reads (or null with
/// `len` 0).
#[no_mangle]
pub unsafe extern "C" fn natm_send(
    c: *const NatmConn,
    buf: *const c_void,
    len: usize,
    flags: c_int,
) -> isize {
    guard(|| {
        // SAFETY: the caller promises a live connection.
        let c = unsafe { handle(c, "conn") }?;
        let msg: &[u8] = if len == 0 {
            &[]
        } else if buf.is_null() {
            return Err(fail(Code::Inval, "buf is NULL"));
        } else {
            // SAFETY: non-null and, by the caller's promise, readable for len bytes
            // that do not change during the call.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
        };
        if flags & NATM_NONBLOCK == 0 {
            c.conn.send(msg, Wait::Block).map_err(Failure::from)?;
            return Ok(len as isize);
        }
        c.tx.clear();
        let mut cx = Context::from_waker(&c.tx_waker);
        match c.conn.poll_send(&mut cx, msg) {
            Poll::Pending => Err(fail(
                Code::Again,
                "the send window is full or the reserved rate holds the data",
            )),
            Poll::Ready(r) => {
                c.tx.set();
                r.map_err(Failure::from)?;
                Ok(len as isize)
            }
        }
    })
}

/// Receive into `buf` (up to `len` bytes, `len` > 0) the next bytes of the current
/// message. Returns the number copied; `*end_of_message` (if not NULL) is set to 1
/// when they end the message, 0 when more of it follows. A return of 0 with
/// `*end_of_message` 0 means the peer has closed and everything was delivered.
/// Blocks for data; with `NATM_NONBLOCK` returns `NATM_EAGAIN` instead.
///
/// # Safety
/// `c` is a live connection; `buf` is valid for `len` bytes of writes;
/// `end_of_message` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn natm_recv(
    c: *const NatmConn,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    end_of_message: *mut c_int,
) -> isize {
    guard(|| {
        // SAFETY: the caller promises a live connection.
        let c = unsafe { handle(c, "conn") }?;
        // SAFETY: the caller promises buf is writable for len bytes.
        let (n, _, end) = unsafe { recv_into(c, buf, len, flags) }?;
        Ok(eom(end_of_message, end, n))
    })
}

/// `natm_recv`'s work: copy the next bytes of the current message into `buf`.
/// Returns how many, whether they start their message and whether they end it (0,
/// false, false: the end of data).
///
/// # Safety
/// `buf` is null or valid for `len` bytes of writes.
unsafe fn recv_into(
    c: &NatmConn,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
) -> Result<(usize, bool, bool), Failure> {
    if buf.is_null() || len == 0 {
        return Err(fail(Code::Inval, "buf is NULL or len is 0"));
    }
    let mut rest = c.rest.lock().unwrap_or_else(|p| p.into_inner());
    let chunk = match rest.take() {
        Some(ch) => ch,
        None if flags & NATM_NONBLOCK == 0 => match c.conn.recv_chunk(Wait::Block) {
            Ok(Some(ch)) => ch,
            Ok(None) => return Ok((0, false, false)),
            Err(e) => return Err(e.into()),
        },
        None => {
            c.rx.clear();
            let mut cx = Context::from_waker(&c.rx_waker);
            match c.conn.poll_recv_chunk(&mut cx) {
                Poll::Pending => return Err(fail(Code::Again, "no message has arrived")),
                Poll::Ready(r) => {
                    c.rx.set();
                    match r {
                        Ok(Some(ch)) => ch,
                        Ok(None) => return Ok((0, false, false)),
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    };
    let n = chunk.data.len().min(len);
    // SAFETY: buf is writable for len >= n bytes (the caller's promise) and
    // cannot overlap the chunk, which this library owns.
    unsafe { std::ptr::copy_nonoverlapping(chunk.data.as_ptr(), buf.cast::<u8>(), n) };
    let whole = n == chunk.data.len();
    if !whole {
        *rest = Some(Chunk {
            data: Bytes::slice(&chunk.data, n..),
            start_of_message: false,
            end_of_message: chunk.end_of_message,
        });
    }
    let end = whole && chunk.end_of_message;
    // Under the `rest` lock: the pieces of one message are taken in order.
    let start = c.at_start.swap(end, Ordering::AcqRel);
    Ok((n, start, end))
}

/// Write the end-of-message flag if asked for; `n` passes through.
fn eom(p: *mut c_int, end: bool, n: usize) -> isize {
    if !p.is_null() {
        // SAFETY: non-null and writable (natm_recv's caller's promise).
        unsafe { p.write(c_int::from(end)) };
    }
    n as isize
}

/// `natm_conn_fd`'s `which`: the descriptor for `natm_recv`.
pub const NATM_FD_RECV: c_int = 0;
/// `natm_conn_fd`'s `which`: the descriptor for `natm_send`.
pub const NATM_FD_SEND: c_int = 1;
/// `natm_conn_fd`'s `which`: the descriptor for `natm_next_event`.
pub const NATM_FD_EVENT: c_int = 2;

/// A descriptor to poll (POLLIN) for `c`: with `NATM_FD_RECV`, readable while a
/// non-blocking `natm_recv` may succeed; with `NATM_FD_SEND`, while a non-blocking
/// `natm_send` may; with `NATM_FD_EVENT`, while a non-blocking `natm_next_event`
/// may. Owned by the connection.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn natm_conn_fd(c: *const NatmConn, which: c_int) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller promises a live connection.
        let c = unsafe { handle(c, "conn") }?;
        match which {
            NATM_FD_RECV => Ok(c.rx.raw_fd() as isize),
            NATM_FD_SEND => Ok(c.tx.raw_fd() as isize),
            NATM_FD_EVENT => Ok(c.ev.raw_fd() as isize),
            _ => Err(fail(
                Code::Inval,
                format!(
                    "which is {which}: NATM_FD_RECV (0), NATM_FD_SEND (1) or NATM_FD_EVENT (2)"
                ),
            )),
        }
    }))
}

/// Close the sending direction in order: everything sent is still delivered, then
/// the peer's `natm_recv` returns 0. Receiving goes on.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn natm_shutdown(c: *const NatmConn) -> c_int {
    // SAFETY: the caller promises a live connection.
    unsafe {
        on_conn(c, |c| {
            c.conn.close();
            Ok(())
        })
    }
}

/// Wait up to `timeout_ms` until the peer has everything sent before
/// `natm_shutdown`.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn natm_flush(c: *const NatmConn, timeout_ms: u32) -> c_int {
    // SAFETY: the caller promises a live connection.
    unsafe {
        on_conn(c, |c| {
            c.conn
                .flush(Duration::from_millis(u64::from(timeout_ms)))
                .map_err(Failure::from)
        })
    }
}

/// Abort both directions at once: undelivered data is lost, the peer sees
/// `NATM_EABORTED`.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn natm_abort(c: *const NatmConn) -> c_int {
    // SAFETY: the caller promises a live connection.
    unsafe {
        on_conn(c, |c| {
            c.conn.abort();
            Ok(())
        })
    }
}

/// Change the sending rate, bit/s, within the bounds agreed at setup (the
/// reserved rate of a guaranteed VC; `NATM_EQOSBOUNDS` outside them), without
/// telling the peer: a local adjustment (`natm_set_qos` is the confirmed change).
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn natm_set_rate(c: *const NatmConn, bps: u64) -> c_int {
    // SAFETY: the caller promises a live connection.
    unsafe { on_conn(c, |c| c.conn.set_rate(bps).map_err(Failure::from)) }
}

/// Fill `*out` with the connection's counters and call state.
///
/// # Safety
/// `c` is a live connection; `out` is valid for a write of `struct natm_status`.
#[no_mangle]
pub unsafe extern "C" fn natm_status(c: *const NatmConn, out: *mut NatmStatus) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller promises a live connection.
        let c = unsafe { handle(c, "conn") }?;
        if out.is_null() {
            return Err(fail(Code::Inval, "out is NULL"));
        }
        let s = c.conn.stats();
        let rel = c.conn.released();
        let granted = c.conn.granted();
        let st = NatmStatus {
            bytes_sent: s.tx.bytes_sent,
            bytes_retransmitted: s.tx.bytes_retransmitted,
            tpdus_sent: s.tx.tpdus_sent,
            retransmissions: s.tx.retx_fast + s.tx.retx_timeout + s.tx.retx_head,
            bytes_received: s.rx.bytes_delivered,
            messages_received: s.rx.messages_delivered,
            send_queued: s.send_queued,
            recv_queued: s.recv_queued,
            srtt_us: s.srtt.map_or(0, |d| d.as_micros() as u64),
            rate_bps: s.rate_bps.unwrap_or(0),
            window: s.window.unwrap_or(0),
            granted_tx_bps: granted.map_or(0, |g| g.tx_bps),
            signalled: c_int::from(granted.is_some()),
            released: c_int::from(rel.is_some()),
            release_cause: rel.as_ref().map_or(0, |r| c_int::from(r.cause)),
            is_stream: c_int::from(c.conn.is_stream()),
            flags: events::flags(&c.conn.status(), rel.is_some()),
            events_dropped: c.conn.events_dropped(),
        };
        // SAFETY: non-null and writable by the caller's promise.
        unsafe { out.write(st) };
        Ok(0)
    }))
}

/// sigd's sentence for the call's release, snprintf-style into `buf`; returns its
/// length (0 while the call lives or in direct mode).
///
/// # Safety
/// `c` is a live connection; `buf` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn natm_release_detail(
    c: *const NatmConn,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller promises a live connection.
        let c = unsafe { handle(c, "conn") }?;
        let d = c.conn.released().map(|r| r.detail).unwrap_or_default();
        // SAFETY: the caller promises buf holds len bytes.
        unsafe { copy_text(&d, buf, len) }
    }))
}

/// The QoS in force as sigd granted it, from this side (tx = what this side sends),
/// snprintf-style into `buf`; returns its length (0 in direct mode).
///
/// # Safety
/// `c` is a live connection; `buf` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn natm_granted_qos(
    c: *const NatmConn,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller promises a live connection.
        let c = unsafe { handle(c, "conn") }?;
        let q = c
            .conn
            .granted()
            .map(|g| g.qos.to_string())
            .unwrap_or_default();
        // SAFETY: the caller promises buf holds len bytes.
        unsafe { copy_text(&q, buf, len) }
    }))
}

/// Close the connection in order (as `natm_shutdown`, then the engine finishes
/// delivering in the background while the host lives) and free it.
///
/// # Safety
/// `c` is null or a live connection; it is not used after.
#[no_mangle]
pub unsafe extern "C" fn natm_conn_close(c: *mut NatmConn) {
    if c.is_null() {
        return;
    }
    // SAFETY: a live connection from natm_connect/natm_accept, given back once.
    let c = unsafe { Box::from_raw(c) };
    let _ = guard(|| {
        drop(c);
        Ok(0)
    });
}
