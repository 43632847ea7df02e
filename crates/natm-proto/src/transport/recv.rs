//! The receiving half of a PSB: reordering, reassembly into messages, delivery to the
//! application, and the ACKs (seed 000 §5.3.2, §5.4 step 6; specs.md §7.3): one per data
//! TPDU, except that in-order ones queued together merge ([`merges`]).

use std::collections::VecDeque;

use bytes::Bytes;

use super::stats::PsbStats;
use super::{ec_window, seq};
use super::{Chunk, Semantics};
use crate::time::Instant;
use crate::wire::tpdu::{Flags, Header, TpduType};

/// Limits the receive half works within.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvLimits {
    pub(crate) error_control: bool,
    pub(crate) send_acks: bool,
    /// Whether an in-order ACK may stand for the in-order ACKs queued before it
    /// ([`merges`]): not when the sender times packet pairs and trains, which needs
    /// each member's own ACK and arrival stamp (seed 000 §5.3.3).
    pub(crate) merge_acks: bool,
    pub(crate) semantics: Semantics,
    pub(crate) tpdu_size: usize,
    pub(crate) window: u32,
    pub(crate) rcv_buf: usize,
    pub(crate) max_msg: u64,
    /// A leaf of a point-to-multipoint VC (`TransportConfig::one_way`), which may
    /// be added while the root sends: the stream starts at the first TPDU that
    /// arrives (the first whole message's head, with message semantics), not at the
    /// initial sequence number. Only without error control.
    pub(crate) join: bool,
}

/// Whether ACK `later` may replace ACK `queued`, both still waiting to leave: both
/// say only "everything below C arrived" (S = C − 1, the TPDU that moved C), so the
/// later one says all the earlier one did, and neither echoes a pair.
///
/// seed 000 §5.3.2 sends one ACK per TPDU, and so did natm (244 ACK datagrams per MB
/// at 4 KiB TPDUs against TCP's ~5, docs/PERFORMANCE.md). Departure (issue 30): the
/// ACKs of the in-order TPDUs of one receive batch leave as the last one. An ACK with
/// S above C — the news SMART's fast retransmission works from — is never merged
/// away, nor merged into, so every hole is reported as soon as the batch ends.
pub(crate) fn merges(queued: &Header, later: &Header) -> bool {
    let plain = |h: &Header| {
        h.ty == TpduType::Ack
            && h.seq.wrapping_add(1) == h.ack
            && !h.flags.contains(Flags::PAIR_ECHO)
    };
    plain(queued) && plain(later) && queued.cookie == later.cookie
}

/// An ACK's arrival stamp for a TPDU that arrived at `t` ([`RecvHalf::ack_for`]).
pub(crate) fn arrival_stamp(t: Instant) -> u32 {
    (t.as_nanos() as u32).max(1)
}

#[derive(Debug)]
struct Held {
    payload: Bytes,
    msg: u32,
    offset: u32,
    first: bool,
    last: bool,
}

/// What the receive half did with a data TPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// New data became readable.
    Readable,
    /// Stored, nothing new to read yet.
    Held,
    /// Dropped (a counter says why).
    Dropped,
}

/// The receiver.
#[derive(Debug)]
pub(crate) struct RecvHalf {
    lim: RecvLimits,
    /// Next sequence number expected in order.
    nxt: u64,
    /// Out-of-order TPDUs, index = seq − nxt (error control only).
    ooo: VecDeque<Option<Held>>,
    ooo_bytes: usize,
    ready: VecDeque<Chunk>,
    ready_bytes: usize,
    /// Unreliable message VCs: the message being assembled, delivered only whole.
    asm: Vec<Chunk>,
    asm_bytes: u64,
    asm_msg: Option<u32>,
    /// Unreliable message VCs: the newest message number seen, and whether that
    /// message is settled (delivered, or counted lost) — the exact loss count.
    msg_cur: Option<u32>,
    msg_settled: bool,
    close_seq: Option<u64>,
    window_was_shut: bool,
    /// Whether the stream's start was found (always, unless `RecvLimits::join`).
    joined: bool,
    /// The sender's error-control window in the TPDUs it sends now, from the newest
    /// data TPDU's window field (`ec_window`): the agreed window unless the path cuts
    /// its TPDUs smaller.
    sender_window: u32,
    /// The largest window the sender ever said: TPDUs it sent under it may still
    /// arrive after it shrank, and are in the window it had.
    accept_window: u32,
}

impl RecvHalf {
    pub(crate) fn new(lim: RecvLimits, isn: u32) -> Self {
        RecvHalf {
            lim,
            nxt: u64::from(isn),
            ooo: VecDeque::new(),
            ooo_bytes: 0,
            ready: VecDeque::new(),
            ready_bytes: 0,
            asm: Vec::new(),
            asm_bytes: 0,
            asm_msg: None,
            msg_cur: None,
            msg_settled: false,
            close_seq: None,
            window_was_shut: false,
            joined: !lim.join || lim.error_control,
            sender_window: lim.window,
            accept_window: lim.window,
        }
    }

    pub(crate) fn set_limits(&mut self, lim: RecvLimits, isn: u32) {
        self.lim = lim;
        self.nxt = u64::from(isn);
        self.joined = !lim.join || lim.error_control;
        self.sender_window = lim.window;
        self.accept_window = lim.window;
    }

    /// Take a data TPDU's window field: the sender's window in its current TPDUs,
    /// bounded by what the agreed bytes allow at [`ec_window::MIN_SCALED_TPDU`]
    /// (whatever a sender writes there, the reorder range stays bounded). A field
    /// below the agreed window (an older sender, or none) means the agreed window.
    fn note_sender_window(&mut self, field: u16) {
        let cap = ec_window::window_tpdus_cap(self.lim.window, self.lim.tpdu_size);
        let w = u32::from(field).max(self.lim.window).min(cap);
        self.sender_window = w;
        self.accept_window = self.accept_window.max(w);
    }

    pub(crate) fn limits(&self) -> &RecvLimits {
        &self.lim
    }

    fn used(&self) -> usize {
        self.ooo_bytes + self.ready_bytes + self.asm_bytes as usize
    }

    /// Free receive buffer in bytes.
    pub(crate) fn free_bytes(&self) -> usize {
        self.lim.rcv_buf.saturating_sub(self.used())
    }

    /// The window to advertise, in TPDUs beyond the cumulative ack: the free buffer
    /// in TPDUs of the size the sender is cutting to, at most the sender's window in
    /// those TPDUs (issue 30: the window is kept in bytes).
    pub(crate) fn window(&self) -> u16 {
        let cut = ec_window::implied_cut(self.lim.window, self.lim.tpdu_size, self.sender_window);
        let by_bytes = self.free_bytes() / cut.max(1);
        let w = by_bytes.min(self.sender_window as usize);
        w.min(u16::MAX as usize) as u16
    }

    /// Bytes buffered for the application.
    pub(crate) fn readable(&self) -> usize {
        self.ready_bytes
    }

    /// Bytes held in any buffer of this half.
    pub(crate) fn buffered(&self) -> usize {
        self.used()
    }

    /// Every TPDU before the CLOSE has arrived (or the VC keeps no order).
    pub(crate) fn close_complete(&self) -> bool {
        match self.close_seq {
            Some(c) => !self.lim.error_control || self.nxt >= c,
            None => false,
        }
    }

    /// The peer's CLOSE: its sequence number, and (its `msg` field) how many messages
    /// the peer started. On a VC without error control the VC ends here, so what has
    /// not arrived is lost: the TPDUs before the CLOSE and the messages up to its
    /// count are counted once, at the first CLOSE (a repeated one changes nothing).
    pub(crate) fn set_close(&mut self, wire_seq: u32, messages: u32, stats: &mut PsbStats) {
        let c = seq::expand(wire_seq, self.nxt);
        // A leaf that joined nothing yet lost nothing: what went before it was
        // never its stream.
        if self.close_seq.is_none() && !self.lim.error_control && self.joined {
            if c > self.nxt {
                stats.gaps += 1;
                stats.tpdus_lost += c - self.nxt;
            }
            if self.lim.semantics == Semantics::Message {
                self.settle_up_to(messages, stats);
            }
        }
        self.close_seq = Some(c);
    }

    /// Counts as lost the message in progress if unsettled and every message before
    /// number `m` not yet seen; `m` becomes the message in progress. Message numbers
    /// start at 0 and count up by one per message (`send`), so the numbers skipped
    /// are messages of which no TPDU arrived. A number older than the current one
    /// changes nothing (it cannot follow the sequence check; a CLOSE from an older
    /// sender that sends 0 is ignored this way).
    fn settle_up_to(&mut self, m: u32, stats: &mut PsbStats) {
        let skipped = match self.msg_cur {
            None => u64::from(m),
            Some(c) => {
                let d = m.wrapping_sub(c);
                if d == 0 || d >= 1 << 31 {
                    return;
                }
                self.lose_message(stats);
                u64::from(d - 1)
            }
        };
        stats.messages_lost += skipped;
        self.msg_cur = Some(m);
        self.msg_settled = false;
    }

    /// The message in progress will not be delivered: counted lost, once.
    fn lose_message(&mut self, stats: &mut PsbStats) {
        if !self.msg_settled && self.msg_cur.is_some() {
            stats.messages_lost += 1;
        }
        self.msg_settled = true;
    }

    /// Throw away everything (abort).
    pub(crate) fn discard(&mut self) {
        self.ooo.clear();
        self.ooo_bytes = 0;
        self.ready.clear();
        self.ready_bytes = 0;
        self.asm.clear();
        self.asm_bytes = 0;
        self.asm_msg = None;
    }

    /// The ACK for data TPDU `h` (C = next expected, S = its sequence number), which
    /// reached the host at `arrived`: the ACK's `tsval` says when, in nanoseconds of
    /// this host's clock modulo 2³² (never 0, which says "not stamped"), so the sender
    /// can time a packet pair by the spacing the path gave it, not by when its ACKs
    /// were read (seed 000 §5.3.3 measures "the inter-acknowledgment spacing"; behind
    /// batched receives and a busy return path ACKs come bunched).
    pub(crate) fn ack_for(&self, h: &Header, cookie: u32, arrived: Instant) -> Header {
        let window = self.window();
        let mut flags = Flags::empty();
        flags.set(Flags::WINDOW_FULL, window == 0);
        flags.set(Flags::PAIR_ECHO, h.flags.contains(Flags::PAIR_SECOND));
        Header {
            flags,
            window,
            cookie,
            seq: h.seq,
            ack: seq::to_wire(self.nxt),
            msg: h.msg,
            tsval: arrival_stamp(arrived),
            tsecr: h.tsval,
            aux: u32::try_from(self.free_bytes()).unwrap_or(u32::MAX),
            ..Header::new(TpduType::Ack)
        }
    }

    /// A window update after the application freed a shut window: C unchanged, S the
    /// TPDU just below it (already acknowledged, so the sender learns nothing else).
    pub(crate) fn window_update(&mut self, cookie: u32) -> Option<Header> {
        if !self.window_was_shut || !self.lim.send_acks || self.window() == 0 {
            return None;
        }
        self.window_was_shut = false;
        let c = seq::to_wire(self.nxt);
        Some(Header {
            window: self.window(),
            cookie,
            seq: c.wrapping_sub(1),
            ack: c,
            aux: u32::try_from(self.free_bytes()).unwrap_or(u32::MAX),
            ..Header::new(TpduType::Ack)
        })
    }

    /// A DATA TPDU arrived.
    pub(crate) fn on_data(&mut self, h: &Header, payload: Bytes, stats: &mut PsbStats) -> Taken {
        stats.tpdus_received += 1;
        let s = seq::expand(h.seq, self.nxt);
        if self.lim.error_control && s >= self.nxt {
            self.note_sender_window(h.window);
        }
        if !self.joined {
            if let Some(dropped) = self.join_at(s, h, stats) {
                return dropped;
            }
        }
        let taken = if self.lim.error_control {
            self.on_reliable(s, h, payload, stats)
        } else {
            self.on_unreliable(s, h, payload, stats)
        };
        if self.window() == 0 {
            self.window_was_shut = true;
        }
        taken
    }

    /// A leaf's first TPDUs (`RecvLimits::join`): the stream starts at `s`, and
    /// with message semantics at the first message whose head arrives — the TPDUs of
    /// a message already under way are dropped (`drop_headless`), not counted lost.
    fn join_at(&mut self, s: u64, h: &Header, stats: &mut PsbStats) -> Option<Taken> {
        self.nxt = s;
        if self.lim.semantics == Semantics::Message && !h.flags.contains(Flags::FIRST) {
            self.nxt = s + 1;
            stats.drop_headless += 1;
            return Some(Taken::Dropped);
        }
        self.joined = true;
        self.msg_cur = Some(h.msg);
        self.msg_settled = false;
        None
    }

    fn on_reliable(&mut self, s: u64, h: &Header, payload: Bytes, stats: &mut PsbStats) -> Taken {
        if s < self.nxt {
            stats.dup_tpdus += 1;
            return Taken::Dropped;
        }
        let idx = (s - self.nxt) as usize;
        if idx >= self.accept_window as usize {
            stats.drop_out_of_window += 1;
            return Taken::Dropped;
        }
        if payload.len() > self.lim.tpdu_size {
            stats.drop_oversize += 1;
            return Taken::Dropped;
        }
        if self.ooo.get(idx).is_some_and(|x| x.is_some()) {
            stats.dup_tpdus += 1;
            return Taken::Dropped;
        }
        // The in-order TPDU is always taken (it frees reorder space as it is
        // delivered); others only while the buffer has room.
        if idx > 0 && self.used() + payload.len() > self.lim.rcv_buf {
            stats.drop_rcv_buf += 1;
            return Taken::Dropped;
        }
        if self.ooo.len() <= idx {
            self.ooo.resize_with(idx + 1, || None);
        }
        self.ooo_bytes += payload.len();
        self.ooo[idx] = Some(Held {
            payload,
            msg: h.msg,
            offset: h.aux,
            first: h.flags.contains(Flags::FIRST),
            last: h.flags.contains(Flags::LAST),
        });
        if idx > 0 {
            stats.ooo_tpdus += 1;
            stats.max_ooo_bytes = stats.max_ooo_bytes.max(self.ooo_bytes as u64);
            return Taken::Held;
        }
        let mut any = false;
        while let Some(Some(_)) = self.ooo.front() {
            let Some(Some(held)) = self.ooo.pop_front() else {
                break;
            };
            self.ooo_bytes -= held.payload.len();
            self.nxt += 1;
            any = true;
            self.push_ready(Chunk {
                data: held.payload,
                msg: held.msg,
                offset: held.offset,
                start: held.first,
                end: held.last,
            });
        }
        stats.max_rcv_buffered = stats.max_rcv_buffered.max(self.used() as u64);
        if any {
            Taken::Readable
        } else {
            Taken::Held
        }
    }

    fn push_ready(&mut self, chunk: Chunk) {
        self.ready_bytes += chunk.data.len();
        self.ready.push_back(chunk);
    }

    fn drop_assembly(&mut self, stats: &mut PsbStats) {
        if self.asm_msg.is_some() {
            stats.partial_messages_dropped += 1;
        }
        self.asm.clear();
        self.asm_bytes = 0;
        self.asm_msg = None;
    }

    fn on_unreliable(&mut self, s: u64, h: &Header, payload: Bytes, stats: &mut PsbStats) -> Taken {
        if s < self.nxt {
            // Late (reordered) or duplicated: without error control it cannot be
            // placed any more; a partial message must never be delivered.
            stats.drop_late += 1;
            return Taken::Dropped;
        }
        if payload.len() > self.lim.tpdu_size {
            stats.drop_oversize += 1;
            return Taken::Dropped;
        }
        let gap = s > self.nxt;
        if gap {
            // Every missing TPDU counted once: a later one reveals them, tail losses
            // of a message included (`set_close` counts those before a CLOSE).
            stats.gaps += 1;
            stats.tpdus_lost += s - self.nxt;
            self.drop_assembly(stats);
        }
        self.nxt = s + 1;
        let first = h.flags.contains(Flags::FIRST);
        let last = h.flags.contains(Flags::LAST);
        if self.lim.semantics == Semantics::Message {
            // Exact message loss: messages skipped whole, and the one in progress if
            // a TPDU of it is missing (a gap inside it, or its head).
            let newer = self.msg_cur != Some(h.msg);
            self.settle_up_to(h.msg, stats);
            if gap && !(newer && first) {
                self.lose_message(stats);
            }
        }
        if self.lim.semantics == Semantics::Stream {
            if self.used() + payload.len() > self.lim.rcv_buf {
                stats.drop_rcv_buf += 1;
                return Taken::Dropped;
            }
            self.push_ready(Chunk {
                data: payload,
                msg: h.msg,
                offset: h.aux,
                start: false,
                end: false,
            });
            return Taken::Readable;
        }
        // seed 000 §6.2.2: unreliable message VCs deliver only complete messages.
        if first {
            self.drop_assembly(stats);
            self.asm_msg = Some(h.msg);
        } else if self.asm_msg != Some(h.msg) {
            self.drop_assembly(stats);
            stats.drop_headless += 1;
            self.lose_message(stats);
            return Taken::Dropped;
        }
        self.asm_bytes += payload.len() as u64;
        if self.asm_bytes > self.lim.max_msg || self.used() > self.lim.rcv_buf {
            self.drop_assembly(stats);
            stats.drop_rcv_buf += 1;
            self.lose_message(stats);
            return Taken::Dropped;
        }
        self.asm.push(Chunk {
            data: payload,
            msg: h.msg,
            offset: h.aux,
            start: first,
            end: last,
        });
        if !last {
            return Taken::Held;
        }
        let bytes = self.asm_bytes as usize;
        self.asm_bytes = 0;
        self.asm_msg = None;
        self.msg_settled = true;
        for c in self.asm.drain(..) {
            self.ready.push_back(c);
        }
        self.ready_bytes += bytes;
        stats.max_rcv_buffered = stats.max_rcv_buffered.max(self.used() as u64);
        Taken::Readable
    }

    /// The next chunk of data for the application.
    pub(crate) fn pop_chunk(&mut self) -> Option<Chunk> {
        let c = self.ready.pop_front()?;
        self.ready_bytes -= c.data.len();
        Some(c)
    }

    /// Copy stream bytes into `buf`, consuming them.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(front) = self.ready.front_mut() else {
                break;
            };
            let k = front.data.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&front.data[..k]);
            n += k;
            self.ready_bytes -= k;
            if k == front.data.len() {
                self.ready.pop_front();
            } else {
                let _ = front.data.split_to(k);
                front.start = false;
                front.offset = front.offset.wrapping_add(k as u32);
            }
        }
        n
    }
}
