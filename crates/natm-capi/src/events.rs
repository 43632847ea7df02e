//! QoS changes, seed 003's status flags and status events in C: `natm_set_qos`,
//! `natm_try_set_qos`, `natm_recv_status`, `natm_next_event` (and its descriptor,
//! `natm_conn_fd(c, NATM_FD_EVENT)`).

use natm_rs::ulib::Wait;
use std::ffi::{c_char, c_int, c_void};
use std::task::{Context, Poll};
use std::time::Duration;

use natm_rs::ulib::{AbortReason, ConnEvent, ConnStatus, QosOutcome};

use super::{fail, guard, handle, on_conn, recv_into, text, to_int, Code, Failure, NatmConn};

/// `struct natm_flags`'s bits (natm.h's `NATM_F_…`).
pub(crate) mod bit {
    pub(crate) const MSG_START: u32 = 1 << 0;
    pub(crate) const MSG_END: u32 = 1 << 1;
    pub(crate) const PEER_CLOSED: u32 = 1 << 2;
    pub(crate) const CLOSED: u32 = 1 << 3;
    pub(crate) const ABORTED: u32 = 1 << 4;
    pub(crate) const WINDOW_FULL: u32 = 1 << 5;
    pub(crate) const OVER_RATE: u32 = 1 << 6;
    pub(crate) const QOS_PENDING: u32 = 1 << 7;
    pub(crate) const QOS_CHANGED: u32 = 1 << 8;
    pub(crate) const QOS_REFUSED: u32 = 1 << 9;
    pub(crate) const PEER_QOS_CHANGED: u32 = 1 << 10;
    pub(crate) const PEER_QOS_REFUSED: u32 = 1 << 11;
    pub(crate) const RELEASED: u32 = 1 << 12;
}

/// seed 003's status flags of a connection (natm.h's `struct natm_flags`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct NatmFlags {
    /// `NATM_F_…` bits.
    pub bits: u32,
    /// Why the connection was aborted (`NATM_ABORT_…`), 0 if it was not.
    pub abort_reason: c_int,
    /// The sending VC's rate in force, payload bit/s (0: none).
    pub tx_rate_bps: u64,
    /// The receiving VC's rate as the peer last set it, payload bit/s (0: none).
    pub rx_rate_bps: u64,
    /// The rate of this end's last QoS change: the one now in force
    /// (`NATM_F_QOS_CHANGED`) or the one refused (`NATM_F_QOS_REFUSED`); 0: none.
    pub qos_rate_bps: u64,
    /// The same for the peer's last change of the receiving VC.
    pub peer_qos_rate_bps: u64,
}

/// `NATM_ABORT_…` of an abort reason.
fn abort_code(r: AbortReason) -> c_int {
    match r {
        AbortReason::Local => 1,
        AbortReason::Peer => 2,
        AbortReason::Timeout => 3,
        AbortReason::Refused => 4,
        AbortReason::NoListener => 5,
    }
}

/// The bits and rate of a QoS outcome: (changed bit, refused bit) chooses which.
fn outcome(o: Option<QosOutcome>, changed: u32, refused: u32) -> (u32, u64) {
    match o {
        Some(QosOutcome::Changed { rate }) => (changed, rate),
        Some(QosOutcome::Refused { rate }) => (refused, rate),
        None => (0, 0),
    }
}

/// The C flags of a status; `released`: sigd has ended the call.
pub(crate) fn flags(s: &ConnStatus, released: bool) -> NatmFlags {
    let on = |b: bool, v: u32| if b { v } else { 0 };
    let (q, qos_rate_bps) = outcome(s.qos, bit::QOS_CHANGED, bit::QOS_REFUSED);
    let (p, peer_qos_rate_bps) = outcome(s.peer_qos, bit::PEER_QOS_CHANGED, bit::PEER_QOS_REFUSED);
    NatmFlags {
        bits: on(s.message_start, bit::MSG_START)
            | on(s.message_end, bit::MSG_END)
            | on(s.peer_closed, bit::PEER_CLOSED)
            | on(s.closed, bit::CLOSED)
            | on(s.aborted.is_some(), bit::ABORTED)
            | on(s.window_full, bit::WINDOW_FULL)
            | on(s.over_rate, bit::OVER_RATE)
            | on(s.qos_pending, bit::QOS_PENDING)
            | on(released, bit::RELEASED)
            | q
            | p,
        abort_reason: s.aborted.map_or(0, abort_code),
        tx_rate_bps: s.tx_rate_bps,
        rx_rate_bps: s.rx_rate_bps,
        qos_rate_bps,
        peer_qos_rate_bps,
    }
}

/// Copy `flags` to `out` if it is not null.
///
/// # Safety
/// `out` is null or valid for a write of `struct natm_flags`.
unsafe fn put_flags(out: *mut NatmFlags, f: NatmFlags) {
    if !out.is_null() {
        // SAFETY: non-null and writable by the caller's promise.
        unsafe { out.write(f) };
    }
}

/// Change the QoS of the sending VC (seed 003 `setqos`) and wait up to `timeout_ms`
/// for the peer's answer. `qos` is QoS text as at connect ("cbr:pcr=4Mbps"); its rate
/// must lie within the bounds agreed at setup (`NATM_EQOSBOUNDS` if not, nothing
/// sent). Returns 0 once the peer accepted, the new rate in `*rate_bps` (if not
/// NULL); `NATM_EQOSREFUSED` if it refused or never answered (the rate stays);
/// `NATM_EQOSPENDING` if another change still waits; `NATM_ETIMEDOUT` if the answer
/// has not come yet (the change stays pending: its event and flags tell the end).
///
/// # Safety
/// `c` is a live connection; `qos` a NUL-terminated string; `rate_bps` null or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn natm_set_qos(
    c: *const NatmConn,
    qos: *const c_char,
    timeout_ms: u32,
    rate_bps: *mut u64,
) -> c_int {
    let set = |c: &NatmConn| {
        // SAFETY: the caller promises a NUL-terminated string.
        let qos = unsafe { text(qos, "qos") }?;
        let ch = c
            .conn
            .set_qos(qos, Duration::from_millis(u64::from(timeout_ms)))
            .map_err(Failure::from)?;
        if !rate_bps.is_null() {
            // SAFETY: non-null and writable by the caller's promise.
            unsafe { rate_bps.write(ch.rate_bps) };
        }
        Ok(())
    };
    // SAFETY: the caller promises a live connection.
    unsafe { on_conn(c, set) }
}

/// As `natm_set_qos` without waiting: returns 0 once the request is sent. The end
/// comes as an event (`NATM_EV_QOS_CHANGED` or `NATM_EV_QOS_REFUSED`, readiness on
/// `natm_conn_fd(c, NATM_FD_EVENT)`) and in the flags (`NATM_F_QOS_PENDING` until
/// then).
///
/// # Safety
/// `c` is a live connection; `qos` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn natm_try_set_qos(c: *const NatmConn, qos: *const c_char) -> c_int {
    let start = |c: &NatmConn| {
        // SAFETY: the caller promises a NUL-terminated string.
        let qos = unsafe { text(qos, "qos") }?;
        c.conn.try_set_qos(qos).map_err(Failure::from)
    };
    // SAFETY: the caller promises a live connection.
    unsafe { on_conn(c, start) }
}

/// As `natm_recv`, with seed 003's status flags as they were just after the bytes
/// were taken: `NATM_F_MSG_START` if they start their message, `NATM_F_MSG_END` if
/// they end it, the connection's flags and rates. A return of 0 without
/// `NATM_F_MSG_END` is the end of data. `out` may be NULL.
///
/// # Safety
/// `c` is a live connection; `buf` valid for `len` bytes of writes; `out` null or
/// valid for a write of `struct natm_flags`.
#[no_mangle]
pub unsafe extern "C" fn natm_recv_status(
    c: *const NatmConn,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    out: *mut NatmFlags,
) -> isize {
    guard(|| {
        // SAFETY: the caller promises a live connection.
        let c = unsafe { handle(c, "conn") }?;
        // SAFETY: the caller promises buf is writable for len bytes.
        let (n, start, end) = unsafe { recv_into(c, buf, len, flags) }?;
        let mut f = self::flags(&c.conn.status(), c.conn.released().is_some());
        if start && n > 0 {
            f.bits |= bit::MSG_START;
        }
        if end {
            f.bits |= bit::MSG_END;
        }
        // SAFETY: the caller promises out is null or writable.
        unsafe { put_flags(out, f) };
        Ok(n as isize)
    })
}

/// Longest `detail` of a `struct natm_event`, NUL included.
pub const NATM_EVENT_DETAIL: usize = 128;

/// A status event (natm.h's `struct natm_event`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NatmEvent {
    /// `NATM_EV_…`.
    pub kind: c_int,
    /// `NATM_EV_RELEASED`: the UNI cause; `NATM_EV_ABORTED`: `NATM_ABORT_…`;
    /// `NATM_EV_PATH_MTU`: the size confirmed, octets; else 0.
    pub cause: c_int,
    /// The QoS events' rate, payload bit/s; else 0.
    pub rate_bps: u64,
    /// `NATM_EV_RELEASED`: sigd's sentence (cut to fit); `NATM_EV_PATH_MTU`:
    /// "searching" or "complete"; NUL-terminated; else "".
    pub detail: [c_char; NATM_EVENT_DETAIL],
}

/// Copy `s` into a fixed C array, cut at a character boundary, NUL-terminated.
pub(crate) fn fixed_text(s: &str) -> [c_char; NATM_EVENT_DETAIL] {
    let mut out = [0 as c_char; NATM_EVENT_DETAIL];
    let mut n = s.len().min(NATM_EVENT_DETAIL - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    for (o, b) in out.iter_mut().zip(&s.as_bytes()[..n]) {
        *o = *b as c_char;
    }
    out
}

fn to_c(ev: ConnEvent) -> NatmEvent {
    let (kind, cause, rate_bps, detail) = match ev {
        ConnEvent::QosPending { rate } => (1, 0, rate, String::new()),
        ConnEvent::QosChanged { rate } => (2, 0, rate, String::new()),
        ConnEvent::QosRefused { rate } => (3, 0, rate, String::new()),
        ConnEvent::PeerQosChanged { rate } => (4, 0, rate, String::new()),
        ConnEvent::PeerQosRefused { rate } => (5, 0, rate, String::new()),
        ConnEvent::WindowFull => (6, 0, 0, String::new()),
        ConnEvent::OverRate => (7, 0, 0, String::new()),
        ConnEvent::PeerClosed => (8, 0, 0, String::new()),
        ConnEvent::Closed => (9, 0, 0, String::new()),
        ConnEvent::Aborted(r) => (10, abort_code(r), 0, String::new()),
        ConnEvent::Released { cause, detail } => (11, c_int::from(cause), 0, detail),
        ConnEvent::PathMtu { plpmtu, searching } => (
            12,
            c_int::try_from(plpmtu).unwrap_or(c_int::MAX),
            0,
            if searching { "searching" } else { "complete" }.to_owned(),
        ),
        // An event this library does not know yet: not passed on as something else.
        _ => (0, 0, 0, String::new()),
    };
    NatmEvent {
        kind,
        cause,
        rate_bps,
        detail: fixed_text(&detail),
    }
}

/// Take the next status event of `c` into `*out`: QoS changes asked for, accepted or
/// refused (this end's and the peer's), the peer's close, this end's close
/// completing, an abort, sigd's release, a non-blocking send held by the window or
/// the rate. `timeout_ms` 0: `NATM_EAGAIN` at once if none is queued (then poll
/// `natm_conn_fd(c, NATM_FD_EVENT)`); -1: wait for one; else `NATM_ETIMEDOUT` after
/// that long. At most 64 events wait; older ones are dropped
/// (`natm_status`'s `events_dropped`).
///
/// # Safety
/// `c` is a live connection; `out` is valid for a write of `struct natm_event`.
#[no_mangle]
pub unsafe extern "C" fn natm_next_event(
    c: *const NatmConn,
    timeout_ms: c_int,
    out: *mut NatmEvent,
) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller promises a live connection.
        let c = unsafe { handle(c, "conn") }?;
        if out.is_null() {
            return Err(fail(Code::Inval, "out is NULL"));
        }
        let ev = match timeout_ms {
            0 => {
                c.ev.clear();
                let mut cx = Context::from_waker(&c.ev_waker);
                match c.conn.poll_next_event(&mut cx) {
                    Poll::Pending => return Err(fail(Code::Again, "no status event is queued")),
                    Poll::Ready(ev) => {
                        c.ev.set();
                        ev
                    }
                }
            }
            t if t < 0 => loop {
                if let Some(ev) = c.conn.next_event(Wait::For(Duration::from_secs(3600))) {
                    break ev;
                }
            },
            t => c
                .conn
                .next_event(Wait::For(Duration::from_millis(t as u64)))
                .ok_or_else(|| fail(Code::TimedOut, "no status event came in time"))?,
        };
        // SAFETY: non-null and writable by the caller's promise.
        unsafe { out.write(to_c(ev)) };
        Ok(0)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_are_cut_at_a_character_and_terminated() {
        let long = "é".repeat(100);
        let t = fixed_text(&long);
        let n = t.iter().position(|&b| b == 0).unwrap();
        assert_eq!(n, 126, "63 two-byte characters fit in 127 bytes");
        assert_eq!(fixed_text("")[0], 0);
    }

    #[test]
    fn a_path_mtu_event_carries_the_size_and_whether_the_search_goes_on() {
        let text = |e: &NatmEvent| {
            let n = e.detail.iter().position(|&b| b == 0).unwrap();
            e.detail[..n]
                .iter()
                .map(|&b| b as u8 as char)
                .collect::<String>()
        };
        let e = to_c(ConnEvent::PathMtu {
            plpmtu: 1_285,
            searching: false,
        });
        assert_eq!((e.kind, e.cause, e.rate_bps), (12, 1_285, 0));
        assert_eq!(text(&e), "complete");
        let e = to_c(ConnEvent::PathMtu {
            plpmtu: 1_200,
            searching: true,
        });
        assert_eq!(
            (e.kind, e.cause, text(&e).as_str()),
            (12, 1_200, "searching")
        );
    }

    #[test]
    fn flags_carry_the_outcomes_and_their_rates() {
        let s = ConnStatus {
            qos: Some(QosOutcome::Refused { rate: 9 }),
            peer_qos: Some(QosOutcome::Changed { rate: 4 }),
            aborted: Some(AbortReason::Timeout),
            tx_rate_bps: 8,
            ..ConnStatus::default()
        };
        let f = flags(&s, true);
        assert_eq!(
            f.bits,
            bit::QOS_REFUSED | bit::PEER_QOS_CHANGED | bit::ABORTED | bit::RELEASED
        );
        assert_eq!((f.qos_rate_bps, f.peer_qos_rate_bps), (9, 4));
        assert_eq!((f.abort_reason, f.tx_rate_bps), (3, 8));
    }
}
