//! Where the time goes along the stack (issue #7, `natm-lab perf latency --stages`).
//!
//! Hooks at the application's send call, the scheduler's dispatch (the inline send
//! decision or the driver's task), the adaptor hand-off (just before and after the
//! `sendmsg`/GSO batch), the receiving thread's read of a datagram, the transport's
//! delivery (the PSB made data readable) and the application's `recv` return each
//! [`record`] one timestamp of `CLOCK_MONOTONIC` into a process-wide ring of fixed
//! size, preallocated in static memory: no allocation, no lock, four relaxed atomic
//! operations. With the `stages` feature off every hook compiles to nothing; with it
//! on but recording off (the default) a hook costs one relaxed load.
//!
//! [`round_trips`] matches the records of one-message-in-flight echo traffic between
//! two connections of one process into per-round-trip stage times: by the message's
//! id (its first 8 bytes, little endian, the latency client's sequence number) at the
//! application hooks, and by order within the round trip at the internal ones.
//! seed 000 §6-7 break their kernel's round trip down the same way.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// A point along the stack that records a timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Stage {
    /// The application called `send`.
    SendCall = 0,
    /// The transmit work was dispatched: inline on the sender's thread, or by the
    /// driver's scheduler task.
    Sched = 1,
    /// A batch of frames is handed to the adaptor (just before `sendmsg`).
    TxStart = 2,
    /// The adaptor's `sendmsg` returned.
    TxDone = 3,
    /// The receiving thread read a datagram (after `recvmmsg`, before the PSB).
    RxRead = 4,
    /// The PSB handed data up: the receive end has something readable.
    Deliver = 5,
    /// The application's `recv` returned the message.
    AppRecv = 6,
}

impl Stage {
    /// Every stage, in the order a message passes them.
    pub const ALL: [Stage; 7] = [
        Stage::SendCall,
        Stage::Sched,
        Stage::TxStart,
        Stage::TxDone,
        Stage::RxRead,
        Stage::Deliver,
        Stage::AppRecv,
    ];

    fn from_u8(v: u8) -> Option<Stage> {
        Stage::ALL.get(v as usize).copied()
    }
}

/// One timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// `CLOCK_MONOTONIC`, nanoseconds.
    pub t_ns: u64,
    /// Which hook.
    pub stage: Stage,
    /// Which connection recorded it (an address, unique while the connection lives).
    pub conn: u64,
    /// The message id at the application hooks (its first 8 bytes), else 0.
    pub msg: u64,
}

/// Slots in the ring (24 B each, 6 MiB of zeroed static memory): at 13-15 records
/// per round trip, the last ~18,000 round trips.
pub const RING_LEN: usize = 1 << 18;

struct Slot {
    t_ns: AtomicU64,
    conn: AtomicU64,
    /// `stage + 1` in the top byte (0: empty), the message id's low 56 bits below.
    meta: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    t_ns: AtomicU64::new(0),
    conn: AtomicU64::new(0),
    meta: AtomicU64::new(0),
};

static RING: [Slot; RING_LEN] = [EMPTY; RING_LEN];
static NEXT: AtomicUsize = AtomicUsize::new(0);
static ON: AtomicBool = AtomicBool::new(false);

const MSG_MASK: u64 = (1 << 56) - 1;

/// Whether the hooks were compiled in (the `stages` feature).
pub const COMPILED: bool = cfg!(feature = "stages");

/// Now on `CLOCK_MONOTONIC`, nanoseconds (the clock every record uses).
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Clear the ring and start recording.
pub fn start() {
    for s in RING.iter() {
        s.meta.store(0, Ordering::Relaxed);
    }
    NEXT.store(0, Ordering::Relaxed);
    ON.store(true, Ordering::Release);
}

/// Stop recording and return what the ring holds, oldest first (at most
/// [`RING_LEN`]; older records were overwritten). Call once the recording threads
/// are done.
pub fn stop() -> Vec<Record> {
    ON.store(false, Ordering::Release);
    let n = NEXT.load(Ordering::Acquire);
    let first = n.saturating_sub(RING_LEN);
    let mut out = Vec::with_capacity(n - first);
    for i in first..n {
        let s = &RING[i % RING_LEN];
        let meta = s.meta.load(Ordering::Relaxed);
        let Some(stage) = (meta >> 56)
            .checked_sub(1)
            .and_then(|v| Stage::from_u8(v as u8))
        else {
            continue;
        };
        out.push(Record {
            t_ns: s.t_ns.load(Ordering::Relaxed),
            stage,
            conn: s.conn.load(Ordering::Relaxed),
            msg: meta & MSG_MASK,
        });
    }
    out.sort_by_key(|r| r.t_ns);
    out
}

/// Record `stage` for connection `conn` if recording is on.
#[inline(always)]
pub fn record(stage: Stage, conn: u64) {
    if COMPILED && ON.load(Ordering::Relaxed) {
        put(stage, conn, 0);
    }
}

/// Record an application hook with the message's id (its first 8 bytes).
#[inline(always)]
pub fn record_msg(stage: Stage, conn: u64, msg: &[u8]) {
    if COMPILED && ON.load(Ordering::Relaxed) {
        let mut id = [0u8; 8];
        let n = msg.len().min(8);
        id[..n].copy_from_slice(&msg[..n]);
        put(stage, conn, u64::from_le_bytes(id));
    }
}

#[cold]
fn put(stage: Stage, conn: u64, msg: u64) {
    let t = now_ns();
    let i = NEXT.fetch_add(1, Ordering::Relaxed) % RING_LEN;
    let s = &RING[i];
    s.t_ns.store(t, Ordering::Relaxed);
    s.conn.store(conn, Ordering::Relaxed);
    s.meta.store(
        ((stage as u64 + 1) << 56) | (msg & MSG_MASK),
        Ordering::Relaxed,
    );
}

/// The segments of a round trip, in order; each is the time between two records,
/// and together they are the round trip. The adaptor's `sendmsg` is not a segment of
/// its own: on loopback the kernel carries the datagram to the receiving socket and
/// wakes its reader inside the sender's `sendmsg`, so the receiver often reads before
/// the sender's call returns ([`RoundTrip::sendmsg_ns`] gives the call's duration).
pub const SEGMENTS: [&str; 11] = [
    "client send call → dispatch",
    "client dispatch → adaptor",
    "client sendmsg → server read",
    "server read → PSB delivery",
    "server delivery → app recv",
    "server app (echo turnaround)",
    "server send call → dispatch",
    "server dispatch → adaptor",
    "server sendmsg → client read",
    "client read → PSB delivery",
    "client delivery → app recv",
];

/// One matched round trip: [`SEGMENTS`] in nanoseconds; they sum to `rtt_ns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundTrip {
    /// The message id.
    pub msg: u64,
    /// When the client's send call was (`CLOCK_MONOTONIC`, ns).
    pub start_ns: u64,
    /// Client send call to client `recv` return.
    pub rtt_ns: u64,
    /// Each segment's time.
    pub segments: [u64; 11],
    /// How long the client's and the server's `sendmsg` calls took (overlapping the
    /// segment after the adaptor hand-off).
    pub sendmsg_ns: [u64; 2],
}

/// How far past a round trip's window the return of its last `sendmsg` is looked for.
const TX_DONE_REACH: usize = 64;

/// Match records into round trips: each client message `m` (the first `SendCall`
/// carrying `m`) is followed, within the time before the next one, by its dispatch
/// and adaptor hand-off on the client, the read, delivery and `recv` of `m` on the
/// server, the echo's `SendCall` there, and back. Round trips missing a record (a
/// loss, the ring wrapped) are left out. Returns the matched ones and how many were not.
pub fn round_trips(records: &[Record]) -> (Vec<RoundTrip>, usize) {
    // The client's send calls: the first SendCall of each id.
    let mut seen = std::collections::HashSet::new();
    let starts: Vec<usize> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.stage == Stage::SendCall && seen.insert(r.msg))
        .map(|(i, _)| i)
        .collect();
    let mut out = Vec::new();
    let mut missed = 0;
    for (k, &i) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(records.len());
        match match_one(records, i, end) {
            Some(rt) => out.push(rt),
            None => missed += 1,
        }
    }
    (out, missed)
}

/// One round trip from the records between its client send call (`all[i]`) and the
/// next one (`all[end]`).
fn match_one(all: &[Record], i: usize, end: usize) -> Option<RoundTrip> {
    let w = &all[..end];
    let c = w[i].conn;
    let m = w[i].msg;
    let mut ts = Vec::with_capacity(12);
    let mut sendmsg = [0u64; 2];
    ts.push(w[i].t_ns);
    let find = |from: usize, f: &dyn Fn(&Record) -> bool| -> Option<usize> {
        (from..w.len()).find(|&j| f(&w[j]))
    };
    // One leg: dispatch, adaptor, read and delivery at the peer, the peer's recv.
    let leg = |from_conn: u64,
               to: Option<u64>,
               at: &mut usize,
               ts: &mut Vec<u64>|
     -> Option<(u64, u64)> {
        let s = find(*at, &|r| r.conn == from_conn && r.stage == Stage::Sched)?;
        let tx = find(s, &|r| r.conn == from_conn && r.stage == Stage::TxStart)?;
        let other = |r: &Record| to.map_or(r.conn != from_conn, |t| r.conn == t);
        let del = find(tx, &|r| other(r) && r.stage == Stage::Deliver)?;
        let peer = w[del].conn;
        // The read that carried it: the peer's last read before the delivery.
        let rd = (tx..del)
            .rev()
            .find(|&j| w[j].conn == peer && w[j].stage == Stage::RxRead)?;
        let app = find(del, &|r| {
            r.conn == peer && r.stage == Stage::AppRecv && r.msg == m
        })?;
        // The sendmsg may return after all of this, even after the next round trip began.
        let done = (tx..all.len().min(end + TX_DONE_REACH))
            .find(|&j| all[j].conn == from_conn && all[j].stage == Stage::TxDone)?;
        for j in [s, tx, rd, del, app] {
            ts.push(w[j].t_ns);
        }
        *at = app;
        Some((peer, all[done].t_ns.saturating_sub(w[tx].t_ns)))
    };
    let mut at = i;
    let (server, out) = leg(c, None, &mut at, &mut ts)?;
    sendmsg[0] = out;
    let echo = find(at, &|r| {
        r.conn == server && r.stage == Stage::SendCall && r.msg == m
    })?;
    ts.push(w[echo].t_ns);
    at = echo;
    let (_, back) = leg(server, Some(c), &mut at, &mut ts)?;
    sendmsg[1] = back;
    let mut segments = [0u64; 11];
    for (k, s) in segments.iter_mut().enumerate() {
        *s = ts[k + 1].saturating_sub(ts[k]);
    }
    Some(RoundTrip {
        msg: m,
        start_ns: ts[0],
        rtt_ns: ts[11] - ts[0],
        segments,
        sendmsg_ns: sendmsg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t_ns: u64, stage: Stage, conn: u64, msg: u64) -> Record {
        Record {
            t_ns,
            stage,
            conn,
            msg,
        }
    }

    /// A clean round trip of message `m` from client 1 to server 2, starting at `t`,
    /// one µs per step, with a stray ACK read on the way.
    fn trip(t: u64, m: u64) -> Vec<Record> {
        use Stage::*;
        let steps = [
            (SendCall, 1, m),
            (Sched, 1, 0),
            (TxStart, 1, 0),
            (TxDone, 1, 0),
            (RxRead, 2, 0),
            (RxRead, 2, 0),
            (Deliver, 2, 0),
            (AppRecv, 2, m),
            (SendCall, 2, m),
            (Sched, 2, 0),
            (TxStart, 2, 0),
            (TxDone, 2, 0),
            (RxRead, 1, 0),
            (Deliver, 1, 0),
            (AppRecv, 1, m),
        ];
        steps
            .iter()
            .enumerate()
            .map(|(i, &(s, c, msg))| rec(t + i as u64 * 1000, s, c, msg))
            .collect()
    }

    #[test]
    fn a_round_trip_is_matched_and_its_segments_sum_to_it() {
        let (rts, missed) = round_trips(&trip(0, 7));
        assert_eq!(missed, 0);
        assert_eq!(rts.len(), 1);
        let rt = &rts[0];
        assert_eq!(rt.msg, 7);
        assert_eq!(rt.rtt_ns, 14_000);
        assert_eq!(rt.segments.iter().sum::<u64>(), rt.rtt_ns);
        // The delivered datagram is the second read, not the stray first one.
        assert_eq!(rt.segments[2], 3000);
        assert_eq!(rt.segments[3], 1000);
        assert_eq!(rt.sendmsg_ns, [1000, 1000]);
    }

    #[test]
    fn a_sendmsg_returning_after_the_next_round_trip_began_still_matches() {
        // Loopback: the echo's sendmsg returns after the client got the echo and
        // sent the next message.
        let mut r = trip(0, 1);
        let done = r.remove(11); // the server's TxDone
        r.extend(trip(20_000, 2));
        r.insert(
            16,
            Record {
                t_ns: 20_500,
                ..done
            },
        );
        let (rts, missed) = round_trips(&r);
        assert_eq!(missed, 0);
        assert_eq!(rts.len(), 2);
        assert_eq!(rts[0].sendmsg_ns[1], 20_500 - 10_000);
        assert!(rts
            .iter()
            .all(|t| t.segments.iter().sum::<u64>() == t.rtt_ns));
    }

    #[test]
    fn a_round_trip_missing_its_echo_is_left_out() {
        let mut r = trip(0, 1);
        r.truncate(8); // the server never echoed message 1
        r.extend(trip(100_000, 2));
        let (rts, missed) = round_trips(&r);
        assert_eq!(missed, 1);
        assert_eq!(rts.len(), 1);
        assert_eq!(rts[0].msg, 2);
    }

    #[test]
    fn a_recv_of_another_message_does_not_match() {
        let mut r = trip(0, 3);
        for x in r
            .iter_mut()
            .filter(|x| x.stage == Stage::AppRecv && x.conn == 2)
        {
            x.msg = 4;
        }
        assert_eq!(round_trips(&r), (Vec::new(), 1));
    }

    #[test]
    #[cfg(feature = "stages")]
    fn the_ring_keeps_the_last_records_in_time_order() {
        // The ring is process-wide: an engine test running beside this one may record
        // while it is on, so only this test's connection id is checked exactly.
        const ME: u64 = u64::MAX - 9;
        start();
        for i in 0..(RING_LEN + 10) {
            record_msg(Stage::SendCall, ME, &(i as u64).to_le_bytes());
        }
        let r = stop();
        record(Stage::Sched, ME); // off: not recorded
        assert_eq!(r.len(), RING_LEN);
        let mine: Vec<u64> = r.iter().filter(|x| x.conn == ME).map(|x| x.msg).collect();
        let others = RING_LEN - mine.len();
        assert_eq!(mine.first(), Some(&(10 + others as u64)));
        assert_eq!(mine.last(), Some(&((RING_LEN + 9) as u64)));
        assert!(mine.windows(2).all(|p| p[1] == p[0] + 1));
        assert!(r.windows(2).all(|p| p[0].t_ns <= p[1].t_ns));
        assert!(NEXT.load(Ordering::Relaxed) >= RING_LEN + 10);
    }
}
