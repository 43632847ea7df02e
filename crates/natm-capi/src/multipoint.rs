//! The root of a point-to-multipoint VC in C (`natm_mp_…`, `natm_add_sink`,
//! `natm_drop_sink`) over [`natm_rs::ulib::Multipoint`].

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use std::time::Duration;

use natm_rs::ulib::{LeafEvent, LeafId, Multipoint};

use super::events::{fixed_text, NATM_EVENT_DETAIL};
use super::{fail, give, guard, handle, text, to_int, Code, Failure, NatmHost};

/// Leaf events a root holds for `natm_mp_next_event` before the oldest go.
const LEAF_EVENTS: usize = 256;

/// A multipoint root: the VC and the leaf events not yet taken. One call runs at a
/// time (a blocking `natm_mp_send` holds the others back until it returns).
#[derive(Debug)]
pub struct NatmMp {
    root: Mutex<State>,
}

#[derive(Debug)]
struct State {
    mp: Multipoint,
    events: VecDeque<LeafEvent>,
}

impl State {
    /// Take the VC's new leaf events onto the bounded queue.
    fn collect(&mut self) {
        for ev in self.mp.events() {
            if self.events.len() == LEAF_EVENTS {
                self.events.pop_front();
            }
            self.events.push_back(ev);
        }
    }
}

/// A leaf event (natm.h's `struct natm_leaf_event`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NatmLeafEvent {
    /// `NATM_LEAF_ADDED`, `NATM_LEAF_LEFT` or `NATM_LEAF_DROPPED`.
    pub kind: c_int,
    /// The leaf (as `natm_add_sink` returned it).
    pub leaf: c_int,
    /// `NATM_LEAF_LEFT`: the UNI cause; else 0.
    pub cause: c_int,
    /// `NATM_LEAF_LEFT`: what sigd said or what failed; else "".
    pub detail: [c_char; NATM_EVENT_DETAIL],
}

/// Run `f` on a root's state.
///
/// # Safety
/// `mp` is null or a live root.
unsafe fn on_root(
    mp: *const NatmMp,
    f: impl FnOnce(&mut State) -> Result<isize, Failure>,
) -> isize {
    guard(|| {
        // SAFETY: the caller promises a live root (null is refused).
        let mp = unsafe { handle(mp, "mp") }?;
        let mut st = mp.root.lock().unwrap_or_else(|p| p.into_inner());
        let r = f(&mut st);
        st.collect();
        r
    })
}

/// Open a point-to-multipoint VC with `qos` (best-effort or guaranteed; reliable is
/// `NATM_EQOS`) to `first_leaf`, an address as `natm_connect` takes; blocks until that
/// leaf has accepted. Its leaf number is 0.
///
/// # Safety
/// `host` is a live host; `first_leaf` and `qos` NUL-terminated strings; `out` valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn natm_mp_connect(
    host: *const NatmHost,
    first_leaf: *const c_char,
    qos: *const c_char,
    out: *mut *mut NatmMp,
) -> c_int {
    to_int(guard(|| {
        // SAFETY: the caller's promises above.
        let (h, leaf, qos) = unsafe {
            (
                handle(host, "host")?,
                text(first_leaf, "first_leaf")?,
                text(qos, "qos")?,
            )
        };
        if out.is_null() {
            return Err(fail(Code::Inval, "the out pointer is NULL"));
        }
        let mp = h
            .host
            .connect_multipoint(leaf, qos)
            .map_err(Failure::from)?;
        let mut st = State {
            mp,
            events: VecDeque::new(),
        };
        st.collect();
        // SAFETY: checked non-null; the caller promises it is writable.
        unsafe {
            give(
                out,
                NatmMp {
                    root: Mutex::new(st),
                },
            )
        }
    }))
}

/// Add a leaf at `addr` (its own branch, admitted on its own): blocks until it has
/// accepted; returns its leaf number (>= 0). A refusal (`NATM_EREFUSED`, the cause in
/// `natm_last_cause`: 37 no bandwidth on its branch, 88 nobody listening) leaves the
/// other leaves as they were.
///
/// # Safety
/// `mp` is a live root; `addr` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn natm_add_sink(mp: *const NatmMp, addr: *const c_char) -> c_int {
    let add = |st: &mut State| {
        // SAFETY: the caller promises a NUL-terminated string.
        let addr = unsafe { text(addr, "addr") }?;
        let leaf = st.mp.add_sink(addr).map_err(Failure::from)?;
        Ok(i32::from(leaf.0) as isize)
    };
    // SAFETY: the caller promises a live root.
    to_int(unsafe { on_root(mp, add) })
}

/// Drop leaf `leaf`: its branch closes in order (what was sent before still reaches
/// it, waiting up to `timeout_ms`) and is released; the others go on. `NATM_EINVAL`
/// for a leaf that is not receiving.
///
/// # Safety
/// `mp` is a live root.
#[no_mangle]
pub unsafe extern "C" fn natm_drop_sink(mp: *const NatmMp, leaf: c_int, timeout_ms: u32) -> c_int {
    // SAFETY: the caller promises a live root.
    to_int(unsafe {
        on_root(mp, |st| {
            let id = u16::try_from(leaf)
                .ok()
                .filter(|id| st.mp.leaves().iter().any(|(l, _)| l.0 == *id))
                .ok_or_else(|| fail(Code::Inval, format!("leaf {leaf} is not receiving")))?;
            st.mp
                .drop_sink(LeafId(id), Duration::from_millis(u64::from(timeout_ms)))
                .map_err(Failure::from)?;
            Ok(0)
        })
    })
}

/// Send `len` bytes from `buf` as one message to every leaf, blocking while any
/// branch's rate or window holds it. A leaf whose branch failed is dropped (a
/// `NATM_LEAF_LEFT` event) and the others still get the message. Returns how many
/// leaves it went to; `NATM_ECLOSED` once no leaf is left.
///
/// # Safety
/// `mp` is a live root; `buf` is valid for `len` bytes of reads (or null with `len`
/// 0).
#[no_mangle]
pub unsafe extern "C" fn natm_mp_send(mp: *const NatmMp, buf: *const c_void, len: usize) -> isize {
    let msg: &[u8] = if len == 0 || buf.is_null() {
        &[]
    } else {
        // SAFETY: non-null and, by the caller's promise, readable for len bytes that
        // do not change during the call.
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
    };
    if len > 0 && buf.is_null() {
        return guard(|| Err(fail(Code::Inval, "buf is NULL")));
    }
    // SAFETY: the caller promises a live root.
    unsafe {
        on_root(
            mp,
            |st| Ok(st.mp.send(msg).map_err(Failure::from)? as isize),
        )
    }
}

/// The leaves receiving now: up to `n` leaf numbers into `ids` (may be NULL with `n`
/// 0); returns how many there are (more than `n` if `ids` was too short).
///
/// # Safety
/// `mp` is a live root; `ids` is valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn natm_mp_leaves(mp: *const NatmMp, ids: *mut c_int, n: usize) -> c_int {
    let list = |st: &mut State| {
        st.mp.poll();
        let leaves = st.mp.leaves();
        if n > 0 && ids.is_null() {
            return Err(fail(Code::Inval, "ids is NULL"));
        }
        for (i, (l, _)) in leaves.iter().take(n).enumerate() {
            // SAFETY: i < n, and ids holds n ints by the caller's promise.
            unsafe { ids.add(i).write(c_int::from(l.0)) };
        }
        Ok(leaves.len() as isize)
    };
    // SAFETY: the caller promises a live root.
    to_int(unsafe { on_root(mp, list) })
}

/// Take the oldest leaf event into `*out` without waiting: a leaf added, dropped, or
/// one that left by itself (its application or host went away; checked now, not
/// only at the next send). `NATM_EAGAIN` if none. At most 256 wait; older ones go.
///
/// # Safety
/// `mp` is a live root; `out` is valid for a write of `struct natm_leaf_event`.
#[no_mangle]
pub unsafe extern "C" fn natm_mp_next_event(mp: *const NatmMp, out: *mut NatmLeafEvent) -> c_int {
    let next = |st: &mut State| {
        if out.is_null() {
            return Err(fail(Code::Inval, "out is NULL"));
        }
        st.mp.poll();
        st.collect();
        let ev = st
            .events
            .pop_front()
            .ok_or_else(|| fail(Code::Again, "no leaf event is queued"))?;
        let (kind, leaf, cause, detail) = match ev {
            LeafEvent::Added(l) => (1, l, 0, String::new()),
            LeafEvent::Left {
                leaf,
                cause,
                detail,
            } => (2, leaf, c_int::from(cause), detail),
            LeafEvent::Dropped(l) => (3, l, 0, String::new()),
        };
        // SAFETY: non-null and writable by the caller's promise.
        unsafe {
            out.write(NatmLeafEvent {
                kind,
                leaf: c_int::from(leaf.0),
                cause,
                detail: fixed_text(&detail),
            })
        };
        Ok(0)
    };
    // SAFETY: the caller promises a live root.
    to_int(unsafe { on_root(mp, next) })
}

/// Close every branch in order, wait up to `timeout_ms` for all of them, and free
/// the root. Returns 0, or `NATM_ETIMEDOUT` if some branch had not finished (it is
/// released anyway).
///
/// # Safety
/// `mp` is null or a live root; it is not used after.
#[no_mangle]
pub unsafe extern "C" fn natm_mp_close(mp: *mut NatmMp, timeout_ms: u32) -> c_int {
    if mp.is_null() {
        return 0;
    }
    // SAFETY: a live root from natm_mp_connect, given back once.
    let mp = unsafe { Box::from_raw(mp) };
    to_int(guard(|| {
        let st = mp.root.into_inner().unwrap_or_else(|p| p.into_inner());
        st.mp
            .close(Duration::from_millis(u64::from(timeout_ms)))
            .map_err(Failure::from)?;
        Ok(0)
    }))
}
