//! The sending half of a PSB: the send message queue, segmentation into TPDUs, and
//! SMART error control (seed 000 §5.3.1–5.3.2, specs.md §7.2).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::coalesce::{Coalescer, Decision};
use super::seq;
use super::stats::PsbStats;
use super::window_lost::HeadOut;
use super::{CopyBuffers, RetxKind, Semantics};
use crate::flow::{AckSample, FlowController, Permit};
use crate::time::Instant;
use crate::wire::tpdu::{Flags, Header};

/// One TPDU in the send queue (seed 000 Figure 3: a message is a list of TPDUs).
#[derive(Debug)]
struct Slot {
    payload: Bytes,
    /// Stream VCs coalesce small writes into the last TPDU while it is unsent.
    tail: Option<BytesMut>,
    msg: u32,
    msg_off: u32,
    first: bool,
    last: bool,
    /// The SMART bitmap: the peer reported this TPDU received.
    acked: bool,
    /// Retransmitted since the flags were last cleared ("not already retransmitted").
    retx: bool,
    /// Waiting in the retransmission queue.
    queued: bool,
    /// Transmission counter at the last (re)transmission.
    tx_order: u64,
    /// When it last left.
    sent_at: Instant,
    pair_first: bool,
    pair_second: bool,
    last_retx_was: bool,
    /// Which mechanism queued the pending retransmission.
    kind: RetxKind,
}

impl Slot {
    fn new(payload: Bytes, msg: u32, msg_off: u32, first: bool, last: bool) -> Slot {
        Slot {
            payload,
            tail: None,
            msg,
            msg_off,
            first,
            last,
            acked: false,
            retx: false,
            queued: false,
            tx_order: 0,
            sent_at: Instant::ZERO,
            pair_first: false,
            pair_second: false,
            last_retx_was: false,
            kind: RetxKind::Fast,
        }
    }

    fn len(&self) -> usize {
        self.payload.len() + self.tail.as_ref().map_or(0, |t| t.len())
    }

    /// Marked for retransmission by `kind` (the caller queues its number).
    fn mark_for(&mut self, kind: RetxKind) {
        self.queued = true;
        self.retx = true;
        self.last_retx_was = true;
        self.kind = kind;
    }
    fn freeze(&mut self) {
        if let Some(t) = self.tail.take() {
            if self.payload.is_empty() {
                self.payload = t.freeze();
            } else {
                let mut b = BytesMut::with_capacity(self.payload.len() + t.len());
                b.extend_from_slice(&self.payload);
                b.extend_from_slice(&t);
                self.payload = b.freeze();
            }
        }
    }
}

/// After a retransmission timeout: whether the first ACK since is still to say if the
/// TPDUs that had a whole RTO were lost (RFC 5682, F-RTO, adapted to SMART's ACKs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterTimeout {
    /// No firing waits for an ACK.
    Settled,
    /// The firing at `fired` resent the head of the window only; the others that had
    /// a whole `rto` by then wait for the first ACK. One caused by a TPDU sent before
    /// the firing shows the path delivering and the ACKs late (a receiver kept off its
    /// CPU): SMART's holes then say what was lost, and nothing else is resent. One
    /// caused by the head's retransmission, or anything sent after the firing, shows
    /// them lost: they are resent then, one round trip after the firing.
    Probing { fired: Instant, rto: Duration },
}

/// What a sending VC's retransmission timeouts say about its path (RFC 8899 §4.3: data
/// that stops getting through while the path still answers is the sign of a path that
/// shrank without a word).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stall {
    /// Retransmission timeouts since the cumulative ACK last advanced.
    pub timeouts: u32,
    /// A first timeout resent the head of the window, and the ACK that moves the
    /// cumulative ACK past it is still to say whether the window behind it was lost
    /// whole (`transport::window_lost`).
    pub head_out: bool,
    /// Windows lost whole so far ([`PsbStats::windows_lost`]): the head's
    /// retransmission arrived and none of the TPDUs as long as it sent before the
    /// firing did.
    pub windows_lost: u64,
}

/// A TPDU chosen for transmission by the send half.
#[derive(Debug, Clone)]
pub(crate) struct OutData {
    pub(crate) header: Header,
    pub(crate) payload: Bytes,
    pub(crate) retx: Option<RetxKind>,
}

/// Limits the send half works within.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendLimits {
    pub(crate) error_control: bool,
    pub(crate) acks_expected: bool,
    pub(crate) semantics: Semantics,
    pub(crate) tpdu_size: usize,
    pub(crate) window: u32,
    pub(crate) snd_buf: usize,
    pub(crate) max_msg: u64,
    pub(crate) outstanding: u32,
    pub(crate) reorder_threshold: u32,
    pub(crate) detect_lost_retx: bool,
    /// Small new TPDUs wait briefly for company while the application streams
    /// (`transport::coalesce`): a paced VC (a leaky bucket, or a reservation's
    /// contract).
    pub(crate) coalesce: bool,
}

/// Why the send half would not take data now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    Buffer,
    Messages,
}

/// The SMART sender.
#[derive(Debug)]
pub(crate) struct SendHalf {
    lim: SendLimits,
    slots: VecDeque<Slot>,
    /// Sequence number of `slots[0]`: everything below is acknowledged (or, without
    /// error control, sent).
    una: u64,
    /// Next sequence number never sent.
    nxt: u64,
    bytes: usize,
    sacked: u32,
    retx_queue: VecDeque<u64>,
    scan_from: u64,
    tx_counter: u64,
    /// Highest cumulative ack and the window the receiver advertised with it.
    peer_cum: u64,
    peer_edge: u64,
    next_msg: u32,
    open_msg: Option<(u32, u64)>,
    msgs_queued: u32,
    last_advance: Instant,
    head_backoff: u32,
    /// The RTT of the latest ACK that showed a head or timeout retransmission
    /// spurious (the original had arrived; its ACK came late), halved by each such
    /// retransmission that was needed: the head check and the retransmission timer
    /// wait at least two of these.
    late_rtt: Duration,
    /// The late ACKs other VCs on the same path have seen (RFC 9040: connections to
    /// one host share what they learnt of it): the timers wait at least two of it.
    shared_late_rtt: Duration,
    /// The retransmission timer: armed when a TPDU leaves and none is armed,
    /// re-armed when the cumulative ACK advances, and left unarmed by a firing until
    /// its first retransmission leaves (seed 000 §5.3.2, RFC 6298 §5.1–5.6).
    rto_deadline: Option<Instant>,
    /// What the last retransmission timeout still waits to learn.
    after_timeout: AfterTimeout,
    /// A first timeout's head is out: the ACK past it judges whether the window
    /// behind it was lost whole (RFC 8899 §4.3).
    head_out: Option<HeadOut>,
    /// Retransmission timeouts since the cumulative ACK last advanced (RFC 8899
    /// §4.3: data that stops getting through while the path still answers is the
    /// sign of a path that shrank without a word).
    timeouts_in_a_row: u32,
    /// A timer queued the head for retransmission: `last_advance` is set again when
    /// it leaves.
    head_at_tx: bool,
    /// Members of the current packet train (a pair, or longer) still to go back to
    /// back after its first ([`FlowController::train_len`]).
    train_left: u32,
    probe_at: Option<Instant>,
    probe_armed: bool,
    /// The size new TPDUs are cut to: the least of `lim.tpdu_size` (the agreed
    /// ceiling), `want` and `path_cap`.
    cut: usize,
    /// The size the VC asks for: the agreed one, or what an adaptive sizer chose.
    want: usize,
    /// The most payload one TPDU may carry on the path without IP fragmentation
    /// (the adaptor's path MTU less the headers; `usize::MAX` until it is known).
    path_cap: usize,
    /// Small sends held into runs (used when `lim.coalesce`).
    coalescer: Coalescer,
    /// Buffers lent for the copies sends make (`Psb::lend_copy_buffers`); a plain
    /// allocation each without.
    copies: Option<Arc<dyn CopyBuffers>>,
}

impl SendHalf {
    pub(crate) fn new(lim: SendLimits, isn: u32) -> Self {
        let isn = u64::from(isn);
        SendHalf {
            lim,
            slots: VecDeque::new(),
            una: isn,
            nxt: isn,
            bytes: 0,
            sacked: 0,
            retx_queue: VecDeque::new(),
            scan_from: isn,
            tx_counter: 0,
            peer_cum: isn,
            peer_edge: isn + u64::from(lim.window),
            next_msg: 0,
            open_msg: None,
            msgs_queued: 0,
            last_advance: Instant::ZERO,
            head_backoff: 1,
            late_rtt: Duration::ZERO,
            shared_late_rtt: Duration::ZERO,
            rto_deadline: None,
            after_timeout: AfterTimeout::Settled,
            head_out: None,
            timeouts_in_a_row: 0,
            head_at_tx: false,
            train_left: 0,
            probe_at: None,
            probe_armed: false,
            cut: lim.tpdu_size,
            want: lim.tpdu_size,
            path_cap: usize::MAX,
            coalescer: Coalescer::default(),
            copies: None,
        }
    }

    /// Apply what the handshake agreed.
    pub(crate) fn renegotiate(&mut self, window: u32, tpdu_size: usize, max_msg: u64) {
        self.lim.window = window;
        self.lim.tpdu_size = tpdu_size;
        self.want = self.want.min(tpdu_size);
        self.cut = self.cut.min(tpdu_size);
        self.lim.max_msg = max_msg;
        self.peer_edge = self.peer_cum + u64::from(window);
    }

    pub(crate) fn limits(&self) -> &SendLimits {
        &self.lim
    }

    /// The size new TPDUs are cut to.
    pub(crate) fn tpdu_size(&self) -> usize {
        self.cut
    }

    /// The error-control window in TPDUs of the size new TPDUs are cut to: the
    /// window's bytes at the size the VC asks for (`window` TPDUs of the agreed, or
    /// the adaptive sizer's, size) over the cut, so a path that cuts TPDUs smaller
    /// does not shrink what may be in flight (issue 30: 256 TPDUs cut to 1,436 octets
    /// were 0.37 MB, below a 20 ms path's need). At least the agreed window, at most
    /// [`super::ec_window::window_tpdus_cap`].
    pub(crate) fn ec_window(&self) -> u32 {
        let asked = self.want.min(self.lim.tpdu_size);
        super::ec_window::scaled_window(self.lim.window, asked, self.cut)
    }

    /// Cut new TPDUs to `size` bytes (at most the agreed size, and at most what the
    /// path carries unfragmented). TPDUs already sent keep their size, so a
    /// retransmission is the TPDU as first sent and sequence numbers stay per TPDU;
    /// queued TPDUs not yet sent that are larger are split (slices, no copy), so a
    /// shrink takes effect at once rather than after the send buffer drains. A growth
    /// applies to data queued from now on.
    pub(crate) fn set_tpdu_size(&mut self, size: usize) {
        self.want = size.clamp(1, self.lim.tpdu_size.max(1));
        self.apply_cut(false);
    }

    /// The path carries at most `cap` payload octets per TPDU without IP
    /// fragmentation (issue 30: the adaptor's path MTU less the UDP/IP, VC and TPDU
    /// headers). New TPDUs are cut to fit and queued unsent ones split; a larger cap
    /// lets new TPDUs grow back to the size the VC asks for, and queued unsent ones
    /// are cut again to it ([`SendHalf::recut_unsent`]).
    /// See [`super::Psb::note_reverse`].
    pub(crate) fn note_reverse(&mut self, epoch: u64) {
        self.coalescer.note_reverse(epoch);
    }

    pub(crate) fn set_path_cap(&mut self, cap: usize) {
        self.path_cap = cap.max(1);
        self.apply_cut(true);
    }

    /// The largest TPDU payload this sender may cut (agreed, or the adaptive
    /// sizer's ceiling), whatever the path.
    pub(crate) fn tpdu_limit(&self) -> usize {
        self.lim.tpdu_size
    }

    /// The path's cap on a TPDU's payload (`usize::MAX` until the adaptor knows it).
    pub(crate) fn path_cap(&self) -> usize {
        self.path_cap
    }

    /// Cut new TPDUs to the least of the sizes; `regrow`: a growth re-cuts the queued
    /// unsent TPDUs too (a path found larger, not an adaptive sizer's step, which
    /// moves both ways often).
    fn apply_cut(&mut self, regrow: bool) {
        let size = self
            .want
            .min(self.path_cap)
            .clamp(1, self.lim.tpdu_size.max(1));
        if size == self.cut {
            return;
        }
        let shrink = size < self.cut;
        self.cut = size;
        if shrink {
            self.split_unsent();
        } else if regrow && !self.lim.coalesce {
            self.recut_unsent();
        }
    }

    /// Cut the queued unsent TPDUs again to a larger cut size: each run of them that
    /// continues one message is copied into one buffer and sliced at the new size.
    /// Issue 30: a VC's first window is queued at RFC 8899's base size before its
    /// first probe confirms the path (docs/decisions/0030-path-mtu-probing.md); on a
    /// 9,000-octet link that was 7.5× the TPDUs, seals and headers the path needs
    /// until the window drained. Unsent TPDUs are numbered but never seen by the
    /// peer, so the numbers after the first re-cut one are given again in order. A
    /// VC that coalesces small TPDUs (paced, never probed) is left alone: its
    /// coalescer holds a sequence number among the unsent ones.
    fn recut_unsent(&mut self) {
        let sent = usize::try_from(self.nxt - self.una).unwrap_or(usize::MAX);
        if sent >= self.slots.len() {
            return;
        }
        // Anything to gain: a TPDU short of the cut that a neighbour of its message
        // continues.
        let joins = |a: &Slot, b: &Slot| {
            a.msg == b.msg && !a.last && !b.first && a.msg_off + a.len() as u32 == b.msg_off
        };
        let gains = self
            .slots
            .range(sent..)
            .zip(self.slots.range(sent + 1..))
            .any(|(a, b)| a.len() < self.cut && joins(a, b));
        if !gains {
            return;
        }
        let unsent: Vec<Slot> = self.slots.drain(sent..).collect();
        let mut run: Vec<Slot> = Vec::new();
        for slot in unsent {
            if run.last().is_some_and(|prev| !joins(prev, &slot)) {
                self.push_recut(std::mem::take(&mut run));
            }
            run.push(slot);
        }
        self.push_recut(run);
    }

    /// Queue one run of unsent TPDUs of one message, cut to the cut size (a run of
    /// one as it was).
    fn push_recut(&mut self, mut run: Vec<Slot>) {
        if run.len() < 2 {
            self.slots.extend(run);
            return;
        }
        let (msg, off, first, last) = (run[0].msg, run[0].msg_off, run[0].first, {
            run[run.len() - 1].last
        });
        let n: usize = run.iter().map(Slot::len).sum();
        let mut all = BytesMut::with_capacity(n);
        for slot in &mut run {
            slot.freeze();
            all.extend_from_slice(&slot.payload);
        }
        let all = all.freeze();
        let mut from = 0;
        while from < n {
            let to = (from + self.cut).min(n);
            self.slots.push_back(Slot::new(
                all.slice(from..to),
                msg,
                off + from as u32,
                first && from == 0,
                last && to == n,
            ));
            from = to;
        }
    }

    /// Split every unsent TPDU larger than the cut size.
    fn split_unsent(&mut self) {
        let sent = usize::try_from(self.nxt - self.una).unwrap_or(usize::MAX);
        if !self.slots.iter().skip(sent).any(|s| s.len() > self.cut) {
            return;
        }
        let unsent: Vec<Slot> = self.slots.drain(sent.min(self.slots.len())..).collect();
        for mut slot in unsent {
            if slot.len() <= self.cut {
                self.slots.push_back(slot);
                continue;
            }
            slot.freeze();
            let n = slot.payload.len();
            let mut from = 0;
            while from < n {
                let to = (from + self.cut).min(n);
                let mut piece = Slot::new(
                    slot.payload.slice(from..to),
                    slot.msg,
                    slot.msg_off + from as u32,
                    slot.first && from == 0,
                    slot.last && to == n,
                );
                piece.kind = slot.kind;
                self.slots.push_back(piece);
                from = to;
            }
        }
    }

    /// Resize the send buffer (a shaped VC whose rate changed); bytes already queued
    /// beyond the new size stay and drain, and no more are taken until they have.
    pub(crate) fn set_snd_buf(&mut self, bytes: usize) {
        self.lim.snd_buf = bytes;
    }

    /// Free bytes in the send buffer.
    pub(crate) fn capacity(&self) -> usize {
        self.lim.snd_buf.saturating_sub(self.bytes)
    }

    /// TPDUs sent and not known to be received.
    pub(crate) fn in_flight(&self) -> u32 {
        if self.lim.error_control {
            (self.nxt - self.una) as u32 - self.sacked
        } else if self.lim.acks_expected {
            self.nxt.saturating_sub(self.peer_cum) as u32
        } else {
            0
        }
    }

    /// Bytes queued (unsent or unacknowledged).
    pub(crate) fn buffered(&self) -> usize {
        self.bytes
    }

    /// Nothing left to send or to have acknowledged.
    pub(crate) fn is_drained(&self) -> bool {
        self.slots.is_empty()
    }

    /// Messages started so far: the next message's number (the CLOSE carries it).
    pub(crate) fn messages_started(&self) -> u32 {
        self.next_msg
    }

    /// Sequence number after the last TPDU ever queued (the CLOSE carries it).
    pub(crate) fn end_seq(&self) -> u64 {
        self.una + self.slots.len() as u64
    }

    /// Take application bytes into the queue, segmenting into TPDUs. Returns the bytes
    /// accepted (all or a prefix), or why none could be.
    pub(crate) fn push(&mut self, data: &[u8], end: bool) -> Result<usize, Full> {
        // One allocation for what fits now, sliced into TPDU payloads, rather than one
        // per TPDU (sixteen per 64 KiB message at 4 KiB). The slices share it, so it
        // is freed when the last of them is acknowledged: at most one push's worth more
        // than the send buffer stays allocated.
        // Copied on first use, so a push refused as full copies nothing.
        // A push that is one TPDU (a small message) takes the copy itself: a slice
        // of it would turn the allocation into a shared one, a second allocation and
        // its reference counts on every small send.
        let fits = data.len().min(self.capacity());
        // Taken out for the call (`push_with` holds `self`), put back after.
        let copies = self.copies.take();
        let copy_of = |d: &[u8]| match &copies {
            Some(c) => c.copy(d),
            None => Bytes::copy_from_slice(d),
        };
        let mut copy: Option<Bytes> = None;
        let r = self.push_with(data.len(), end, |from, to| {
            if copy.is_none() && from == 0 && to == fits {
                return copy_of(&data[..fits]);
            }
            copy.get_or_insert_with(|| copy_of(&data[..fits]))
                .slice(from..to)
        });
        self.copies = copies;
        r
    }

    /// Take sends' copies from `copies` from now on ([`CopyBuffers`]).
    pub(crate) fn lend_copy_buffers(&mut self, copies: Arc<dyn CopyBuffers>) {
        self.copies = Some(copies);
    }

    /// As [`SendHalf::push`], without copying: TPDU payloads are slices of `data`.
    pub(crate) fn push_bytes(&mut self, data: &Bytes, end: bool) -> Result<usize, Full> {
        self.push_with(data.len(), end, |from, to| data.slice(from..to))
    }

    fn push_with(
        &mut self,
        len: usize,
        end: bool,
        mut take: impl FnMut(usize, usize) -> Bytes,
    ) -> Result<usize, Full> {
        if self.open_msg.is_none() && self.msgs_queued >= self.lim.outstanding {
            return Err(Full::Messages);
        }
        let room = self.capacity();
        if room == 0 && len > 0 {
            return Err(Full::Buffer);
        }
        let n = len.min(room);
        let stream = self.lim.semantics == Semantics::Stream;
        let (msg, mut off) = match self.open_msg {
            Some(m) => m,
            None => {
                let m = self.next_msg;
                self.next_msg = self.next_msg.wrapping_add(1);
                self.msgs_queued += 1;
                (m, 0)
            }
        };
        let mut done = 0;
        // Continuing a message (or a stream, one endless message): top up its last
        // unsent TPDU instead of sending a runt. Without this, an application whose
        // writes are cut by a full buffer splits every message into ever smaller
        // TPDUs (silly-window syndrome).
        let continuing = self.open_msg.is_some();
        if continuing && n > 0 {
            let end_seq = self.end_seq();
            if end_seq > self.nxt {
                if let Some(last) = self.slots.back_mut() {
                    let space = self.cut.saturating_sub(last.len());
                    if space > 0 {
                        let k = space.min(n);
                        let tail = last.tail.get_or_insert_with(BytesMut::new);
                        tail.extend_from_slice(&take(0, k));
                        done = k;
                        off += k as u64;
                    }
                }
            }
        }
        while done < n {
            let k = (n - done).min(self.cut);
            let payload = take(done, done + k);
            self.slots
                .push_back(Slot::new(payload, msg, off as u32, off == 0, false));
            off += k as u64;
            done += k;
        }
        self.bytes += n;
        let whole = n == len;
        if end && whole && !stream {
            if off == 0 {
                // An empty message still needs a TPDU to carry its boundary.
                self.slots
                    .push_back(Slot::new(Bytes::new(), msg, 0, true, true));
            } else if let Some(last) = self.slots.back_mut() {
                last.last = true;
            }
            self.open_msg = None;
        } else if stream {
            // A byte stream is one endless message; its TPDUs carry no boundaries.
            self.open_msg = Some((msg, off));
            if let Some(last) = self.slots.back_mut() {
                last.first = false;
            }
        } else {
            self.open_msg = Some((msg, off));
        }
        Ok(n)
    }

    /// End the message the application is writing (on close): its last TPDU may go.
    pub(crate) fn finish_message(&mut self) {
        if self.open_msg.take().is_some() && self.lim.semantics == Semantics::Message {
            if let Some(last) = self.slots.back_mut() {
                last.last = true;
            }
        }
    }

    /// Bytes of message `msg` accepted so far, if a message is open.
    pub(crate) fn open_message_len(&self) -> Option<u64> {
        self.open_msg.map(|(_, off)| off)
    }

    fn slot(&self, seq: u64) -> Option<&Slot> {
        seq.checked_sub(self.una)
            .and_then(|i| self.slots.get(usize::try_from(i).ok()?))
    }

    fn slot_mut(&mut self, seq: u64) -> Option<&mut Slot> {
        let i = usize::try_from(seq.checked_sub(self.una)?).ok()?;
        self.slots.get_mut(i)
    }

    /// The earliest time the send half wants to be woken.
    /// `head_check` is the head check's interval before backoff
    /// ([`super::RttEstimator::head_check`]).
    pub(crate) fn poll_timeout(&self, head_check: Duration, has_rtt: bool) -> Option<Instant> {
        let mut t = self.rto_deadline;
        // While a head retransmission waits to leave, the head check is off: its two
        // RTTs count from that transmission.
        if self.lim.error_control && self.nxt > self.una && has_rtt && !self.head_at_tx {
            let head = self.last_advance + self.head_interval(head_check);
            t = Some(t.map_or(head, |x| x.min(head)));
        }
        if let Some(p) = self.probe_at {
            t = Some(t.map_or(p, |x| x.min(p)));
        }
        // Small TPDUs held for company leave when their hold ends.
        if let Some(h) = self
            .coalescer
            .deadline()
            .filter(|_| self.nxt < self.end_seq())
        {
            t = Some(t.map_or(h, |x| x.min(h)));
        }
        t
    }

    /// The head check's interval now: two RTTs ([`super::RttEstimator::head_check`]),
    /// at least two of the late ACK that last showed a head retransmission spurious,
    /// backed off.
    fn head_interval(&self, head_check: Duration) -> Duration {
        head_check
            .max(self.waits_for().saturating_mul(2))
            .saturating_mul(self.head_backoff)
    }

    /// Timers: the retransmission timeout (retransmit every TPDU not received) and the
    /// two-RTT head check (retransmit the head of the window), seed 000 §5.3.2.
    pub(crate) fn handle_timeout(
        &mut self,
        now: Instant,
        rto: Duration,
        head_check: Duration,
        has_rtt: bool,
        stats: &mut PsbStats,
        flow: &mut dyn FlowController,
    ) -> bool {
        let rto = self.timer_rto(rto);
        let mut timed_out = false;
        // A hold that has ended releases what it held, whether or not anything can
        // leave now (a window, a partial message or pacing may still stop it): the
        // hold's deadline is spent, and is not reported again.
        self.coalescer.expire(now, self.end_seq());
        if let Some(p) = self.probe_at {
            if now >= p {
                self.probe_at = None;
                self.probe_armed = true;
            }
        }
        if !self.lim.error_control {
            // Feedback flow control without error control: TPDUs whose ACKs never came
            // are written off (nothing will resend them), so a lost TPDU cannot hold
            // the flow controller's view of the pipe forever.
            if self.rto_deadline.is_some_and(|d| now >= d) {
                let in_flight = self.in_flight();
                self.rto_deadline = None;
                if in_flight > 0 {
                    self.peer_cum = self.nxt;
                    self.peer_edge = self.peer_edge.max(self.nxt + u64::from(self.ec_window()));
                    stats.timeouts += 1;
                    flow.on_timeout(now, in_flight);
                }
            }
            return false;
        }
        if self.nxt == self.una {
            self.rto_deadline = None;
            self.head_at_tx = false;
            return false;
        }
        if self.rto_deadline.is_some_and(|d| now >= d) {
            // "During a timeout, only packets not correctly received are retransmitted."
            // A TPDU that left less than an RTO ago may be on its way: only one that
            // has had a whole RTO counts as not received (timers count from
            // transmission). Resending the whole unacknowledged window instead cost a
            // 20 ms path with 1 % loss a fifth of its goodput: each timeout (a lost
            // retransmission at the head of a full window) resent ~230 TPDUs in flight.
            //
            // RFC 5682 (F-RTO): the first firing since an ACK resends only the oldest
            // of them, and the first ACK after it says whether the rest were lost
            // (`AfterTimeout`). A firing with no ACK since the last one (a dead path,
            // or the head's retransmission lost too) resends them all.
            let probe_only = self.after_timeout == AfterTimeout::Settled;
            let mut n = 0;
            let mut left_to_ack = false;
            let mut youngest_wait: Option<Instant> = None;
            for i in 0..(self.nxt - self.una) as usize {
                let s = &mut self.slots[i];
                if s.acked || s.queued {
                    continue;
                }
                if s.sent_at + rto > now {
                    let due = s.sent_at + rto;
                    youngest_wait = Some(youngest_wait.map_or(due, |d| d.min(due)));
                    continue;
                }
                if probe_only && n == 1 {
                    left_to_ack = true;
                    continue;
                }
                s.mark_for(RetxKind::Timeout);
                self.retx_queue.push_back(self.una + i as u64);
                n += 1;
            }
            if n == 0 {
                // Everything outstanding left within the last RTO (retransmitted since
                // the timer was armed): wait for the first of them to have had one.
                self.rto_deadline = youngest_wait;
                return false;
            }
            stats.timeouts += 1;
            stats.timeout_marked += n;
            self.timeouts_in_a_row = self.timeouts_in_a_row.saturating_add(1);
            self.head_out = probe_only.then(|| HeadOut {
                fired: now,
                len: self.slots.front().map_or(0, Slot::len),
            });
            self.after_timeout = if probe_only && left_to_ack {
                AfterTimeout::Probing { fired: now, rto }
            } else {
                AfterTimeout::Settled
            };
            flow.on_timeout(now, self.in_flight());
            // The timer restarts when the first of these retransmissions leaves
            // (`poll_data`), with the RTO the caller has backed off by then (RFC 6298
            // §5.5–5.6: back off, then start the timer with the new value). Armed
            // here, at the firing, it would count the time the retransmissions wait
            // in this VC's retransmission queue, behind pacing and behind the host's
            // scheduler, and with the RTO from before the backoff (the doubling then
            // took effect only from the second firing on).
            self.rto_deadline = None;
            self.head_at_tx = true;
            self.last_advance = now;
            timed_out = true;
        }
        if has_rtt && !self.head_at_tx {
            let head = self.last_advance + self.head_interval(head_check);
            if now >= head && self.nxt > self.una {
                // "We check every two round trip times if the cumulative ack has
                // increased. If not, ... retransmit the packet at the head."
                let una = self.una;
                if let Some(s) = self.slot_mut(una) {
                    if !s.queued && !s.acked {
                        s.mark_for(RetxKind::Head);
                        self.retx_queue.push_front(una);
                    }
                }
                stats.head_checks += 1;
                // The next 2·RTT check counts from when this head retransmission
                // leaves, not from now (`poll_data`).
                self.head_at_tx = true;
                // specs.md §7.2 [REC]: back off, and clear the flags so the next ACK
                // re-triggers fast retransmission of the other holes.
                self.head_backoff = (self.head_backoff * 2).min(64);
                self.last_advance = now;
                for s in self.slots.iter_mut().take((self.nxt - self.una) as usize) {
                    if !s.queued {
                        s.retx = false;
                    }
                }
                self.scan_from = self.una;
            }
        }
        timed_out
    }

    /// An ACK (C, S) arrived. Returns whether it was usable.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_ack(
        &mut self,
        now: Instant,
        h: &Header,
        rtt_sample: Option<Duration>,
        min_rtt: Duration,
        rto: Duration,
        stats: &mut PsbStats,
        flow: &mut dyn FlowController,
    ) -> bool {
        let rto = self.timer_rto(rto);
        let c = seq::expand(h.ack, self.peer_cum);
        let s = seq::expand(h.seq, self.peer_cum);
        if c > self.nxt || s >= self.nxt {
            stats.acks_invalid += 1;
            return false;
        }
        stats.acks_received += 1;
        if c > self.peer_cum {
            self.peer_cum = c;
        }
        let edge = c + u64::from(h.window);
        if c >= self.peer_cum {
            self.peer_edge = edge;
            if h.window > 0 {
                self.probe_at = None;
                self.probe_armed = false;
            }
        }
        let mut newly = 0u32;
        let mut newly_bytes = 0u64;
        let mut sample = AckSample {
            now,
            rtt: rtt_sample.unwrap_or(min_rtt),
            min_rtt,
            newly_acked: 0,
            newly_acked_bytes: 0,
            seq: s,
            cum_ack: self.peer_cum,
            pair_first: false,
            pair_second: false,
            retransmission: false,
            in_flight: 0,
            bytes: 0,
            arrived: (h.tsval != 0).then_some(h.tsval),
        };
        // A head check's retransmission that caused this ACK (RFC 8985 below).
        let head_retx = self
            .slot(s)
            .filter(|x| x.last_retx_was && x.kind == RetxKind::Head)
            .map(|x| (x.sent_at, x.tx_order));
        if let Some(slot) = self.slot(s) {
            sample.pair_first = slot.pair_first;
            sample.pair_second = slot.pair_second;
            sample.retransmission = slot.last_retx_was;
            sample.bytes = slot.len() as u32;
        }
        if !self.lim.error_control {
            self.rto_deadline = (self.in_flight() > 0).then_some(now + rto);
            sample.in_flight = self.in_flight();
            flow.on_ack(&sample);
            return true;
        }
        if c > self.una {
            let lost_whole = self.head_out.take().filter(|h| {
                let behind = self.slots.iter().zip(self.una..).skip(1);
                h.lost_whole(
                    now,
                    rtt_sample,
                    behind.map(|(x, q)| (x.sent_at, x.len(), x.acked || q < c)),
                )
            });
            while self.una < c {
                let Some(slot) = self.slots.pop_front() else {
                    break;
                };
                if slot.last_retx_was && !slot.queued {
                    self.judge_retx(&slot, now, rtt_sample, stats);
                }
                if slot.acked {
                    self.sacked -= 1;
                } else {
                    newly_bytes += slot.len() as u64;
                }
                if slot.last {
                    self.msgs_queued = self.msgs_queued.saturating_sub(1);
                }
                self.bytes -= slot.len();
                self.una += 1;
                newly += 1;
            }
            self.last_advance = now;
            self.head_at_tx = false;
            self.head_backoff = 1;
            self.timeouts_in_a_row = 0;
            self.rto_deadline = (self.nxt > self.una).then_some(now + rto);
            self.scan_from = self.scan_from.max(self.una);
            if let Some(h) = lost_whole {
                self.resend_window(h, stats);
            }
        }
        if let Some(slot) = self.slot_mut(s) {
            if !slot.acked {
                slot.acked = true;
                newly_bytes += slot.len() as u64;
                self.sacked += 1;
            }
        }
        // Holes revealed by S: fast retransmission (seed 000 §5.3.2), with a reordering
        // threshold for substrates that can reorder (specs.md §7.2; 1 = ATM order).
        let k = u64::from(self.lim.reorder_threshold.max(1));
        let limit = (s + 1).saturating_sub(k).min(self.nxt);
        let mut lost = 0;
        if s >= self.una && limit > self.una {
            let s_order = self.slot(s).map_or(0, |x| x.tx_order);
            let refine = self.lim.detect_lost_retx;
            let from = if refine {
                self.una
            } else {
                self.scan_from.max(self.una)
            };
            for i in from..limit {
                let Some(slot) = self.slot_mut(i) else { break };
                if slot.acked || slot.queued {
                    continue;
                }
                // The paper: "not correctly received and not already retransmitted".
                // With detect_lost_retx (specs.md §7.2 refinement): a hole retransmitted
                // before S was (re)sent is lost again.
                let eligible = if !slot.retx {
                    true
                } else {
                    refine && slot.tx_order < s_order
                };
                if eligible {
                    slot.mark_for(RetxKind::Fast);
                    self.retx_queue.push_back(i);
                    lost += 1;
                }
            }
            self.scan_from = self.scan_from.max(limit);
        }
        if let Some((sent_at, order)) = head_retx {
            // RFC 8985 (RACK), for what the head check leaves behind: the ACK its
            // retransmission caused (its echoed stamp is the retransmission's) shows
            // every TPDU sent before that retransmission, by more than a quarter of
            // the minimum RTT (the reordering window), lost too — a lost tail, which
            // no later TPDU's ACK reveals, is resent in one round trip rather than one
            // head check at a time.
            let caused = rtt_sample.is_some_and(|r| now >= sent_at + r);
            if self.lim.detect_lost_retx && caused {
                let window = min_rtt / 4;
                for i in 0..(self.nxt - self.una) as usize {
                    let slot = &mut self.slots[i];
                    if slot.acked || slot.queued || slot.tx_order >= order {
                        continue;
                    }
                    if slot.sent_at + window <= sent_at {
                        slot.mark_for(RetxKind::Fast);
                        self.retx_queue.push_back(self.una + i as u64);
                        lost += 1;
                    }
                }
            }
        }
        if lost > 0 {
            stats.fast_marked += lost;
            flow.on_loss(now, self.in_flight(), self.nxt);
        }
        self.settle_timeout(now, rtt_sample, stats);
        sample.newly_acked = newly;
        sample.newly_acked_bytes = newly_bytes;
        sample.in_flight = self.in_flight();
        flow.on_ack(&sample);
        true
    }

    /// The first ACK after a timeout that resent only the head ([`AfterTimeout`]):
    /// unless the TPDU that caused it left before the firing (its echoed stamp, `rtt`
    /// ago), the TPDUs that had a whole RTO by the firing and are still not received
    /// are resent now.
    fn settle_timeout(&mut self, now: Instant, rtt: Option<Duration>, stats: &mut PsbStats) {
        let AfterTimeout::Probing { fired, rto } = self.after_timeout else {
            return;
        };
        self.after_timeout = AfterTimeout::Settled;
        if rtt.is_some_and(|r| now < fired + r) {
            // An original arrived: the path delivers, the ACKs were late.
            return;
        }
        let mut n = 0;
        for i in 0..(self.nxt - self.una) as usize {
            let s = &mut self.slots[i];
            if s.acked || s.queued || s.sent_at + rto > fired {
                continue;
            }
            s.mark_for(RetxKind::Timeout);
            self.retx_queue.push_back(self.una + i as u64);
            n += 1;
        }
        stats.timeout_marked += n;
    }

    /// A window lost whole behind a timeout's head ([`HeadOut`]): every TPDU of it is
    /// resent now, not each at its own timeout.
    fn resend_window(&mut self, h: HeadOut, stats: &mut PsbStats) {
        stats.windows_lost += 1;
        let mut n = 0;
        for i in 0..(self.nxt - self.una) as usize {
            let s = &mut self.slots[i];
            if s.acked || s.queued || !h.judges(s.sent_at, s.len()) {
                continue;
            }
            s.mark_for(RetxKind::Timeout);
            self.retx_queue.push_back(self.una + i as u64);
            n += 1;
        }
        stats.timeout_marked += n;
    }

    /// A head or timeout retransmission at the head of the window was acknowledged.
    /// RFC 3522 (Eifel): an ACK that a TPDU sent before the retransmission caused
    /// shows the original arrived, and the retransmission spurious — on a shared CPU,
    /// an ACK read or sent late past the seed's two round trips, or past the RTO. The
    /// head check and the retransmission timer then wait two of that ACK's RTT
    /// ([`Self::head_interval`], [`Self::timer_rto`]); a retransmission that was
    /// needed halves that wait again (RFC 8985 §6.2 adapts RACK's reordering window
    /// the same way). Only the head is judged: the ACK that moves the cumulative ack
    /// past it is the one its arrival caused, or one after it.
    fn judge_retx(
        &mut self,
        slot: &Slot,
        now: Instant,
        rtt: Option<Duration>,
        stats: &mut PsbStats,
    ) {
        if !matches!(slot.kind, RetxKind::Head | RetxKind::Timeout) {
            return;
        }
        let Some(rtt) = rtt else { return };
        // The TPDU whose arrival caused this ACK left at `now - rtt` (its echoed
        // stamp): before the retransmission did?
        if now < slot.sent_at + rtt {
            match slot.kind {
                RetxKind::Timeout => stats.retx_timeout_spurious += 1,
                _ => stats.retx_head_spurious += 1,
            }
            self.late_rtt = self.late_rtt.max(rtt);
        } else {
            self.late_rtt /= 2;
        }
    }

    /// The retransmission timeout the timer runs on: the estimator's, and at least
    /// two of the late ACK that last showed a retransmission spurious
    /// ([`Self::judge_retx`]). The estimator's own RTO follows a late ACK only as
    /// far as one sample moves a smoothed mean; its floor is the library's 20 ms.
    fn timer_rto(&self, rto: Duration) -> Duration {
        rto.max(self.waits_for().saturating_mul(2))
    }

    /// The late ACK the timers allow for: this VC's own, or its path's.
    fn waits_for(&self) -> Duration {
        self.late_rtt.max(self.shared_late_rtt)
    }

    /// Retransmission timeouts since the cumulative ACK last advanced.
    /// What this VC's retransmission timeouts say about its path now
    /// (`windows_lost` from the caller's counters).
    pub(crate) fn stall(&self, windows_lost: u64) -> Stall {
        Stall {
            timeouts: self.timeouts_in_a_row,
            head_out: self.head_out.is_some(),
            windows_lost,
        }
    }

    /// The latest ACK this VC saw show a retransmission spurious (zero: none, or a
    /// needed retransmission since halved it away).
    pub(crate) fn late_rtt(&self) -> Duration {
        self.late_rtt
    }

    /// What the other VCs on this VC's path learnt of its late ACKs.
    pub(crate) fn share_late_rtt(&mut self, d: Duration) {
        self.shared_late_rtt = d;
    }

    /// Arm the zero-window probe when the receiver's window is shut with nothing in
    /// flight (a lost window update must not deadlock the VC).
    fn window_blocked(&mut self, now: Instant, rto: Duration) {
        if self.in_flight() == 0 && self.probe_at.is_none() && !self.probe_armed {
            self.probe_at = Some(now + rto);
        }
    }

    /// The next data TPDU to send, if flow and error control allow one now.
    /// Retransmissions go before new data (seed 003: favour them).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn poll_data(
        &mut self,
        now: Instant,
        cookie: u32,
        rto: Duration,
        stats: &mut PsbStats,
        flow: &mut dyn FlowController,
        pace: &mut Option<Instant>,
    ) -> Option<OutData> {
        let rto = self.timer_rto(rto);
        // Retransmissions.
        while let Some(&seq) = self.retx_queue.front() {
            let Some(slot) = self.slot(seq) else {
                self.retx_queue.pop_front();
                continue;
            };
            if slot.acked {
                self.retx_queue.pop_front();
                if let Some(s) = self.slot_mut(seq) {
                    s.queued = false;
                }
                continue;
            }
            let len = slot.len();
            match flow.poll_send(now, self.in_flight(), len) {
                Permit::At(t) => {
                    *pace = Some(t);
                    return None;
                }
                // Retransmissions are inside the window already.
                Permit::Now | Permit::Blocked => {}
            }
            self.retx_queue.pop_front();
            let kind = self.retx_kind(seq);
            stats.count_retx(kind, len);
            flow.on_sent(now, len, true);
            // Timers count from transmission, not from when a timer queued the
            // retransmission: the RTO a firing left unarmed starts now, and the
            // head check's two RTTs start when the head leaves again.
            if self.lim.acks_expected && self.rto_deadline.is_none() {
                self.rto_deadline = Some(now + rto);
            }
            if self.head_at_tx && seq == self.una {
                self.head_at_tx = false;
                self.last_advance = now;
            }
            return Some(self.emit(seq, now, cookie, Some(kind), false, false));
        }
        // New data.
        if self.nxt >= self.end_seq() {
            return None;
        }
        let within_ec_window =
            !self.lim.error_control || self.nxt < self.una + u64::from(self.ec_window());
        let within_peer = !self.lim.acks_expected || self.nxt < self.peer_edge || self.probe_armed;
        if !within_ec_window {
            stats.window_stalls += 1;
            return None;
        }
        if !within_peer {
            self.window_blocked(now, rto);
            stats.window_stalls += 1;
            return None;
        }
        let idx = (self.nxt - self.una) as usize;
        let len = self.slots[idx].len();
        // The partial last TPDU of a message the application is still writing waits
        // to be filled (or for the end of the message), so a writer cut short by a
        // full buffer does not send runts. A stream's partial TPDU goes at once (no
        // Nagle: interactive streams keep their latency).
        if idx + 1 == self.slots.len()
            && len < self.cut
            && self.open_msg.is_some()
            && self.lim.semantics == Semantics::Message
        {
            return None;
        }
        let in_train = self.train_left > 0;
        if !in_train {
            match flow.poll_send(now, self.in_flight(), len) {
                // The bucket would let it go: it may still wait for company. Held:
                // not a pacing deadline (`pace` stops everything until then), so
                // that a full run, checked here on every poll, ends the hold at
                // once; `poll_timeout` wakes the half when it ends.
                Permit::Now => {
                    if self.lim.coalesce
                        && self.coalescer.poll(now, self.nxt, self.end_seq(), len) == Decision::Hold
                    {
                        return None;
                    }
                }
                Permit::At(t) => {
                    // The bucket is what holds the queue back: no hold on top, what
                    // is queued goes as the bucket allows (waiting on for a run's
                    // tokens cost 1500-byte messages at 10 Mbit/s a third of their
                    // rate through the engine's timers, measured).
                    if self.lim.coalesce {
                        self.coalescer.release(now, self.end_seq());
                    }
                    *pace = Some(t);
                    return None;
                }
                Permit::Blocked => return None,
            }
        }
        // A train's members go back to back, its first and last marked (seed 000
        // §5.3.3's pair is a train of two); one starts only when all of it may go.
        let train = if in_train { 0 } else { flow.train_len() };
        let rest = u64::from(train.saturating_sub(1));
        let pair_first = train >= 2
            && self.nxt + rest < self.end_seq()
            && (!self.lim.acks_expected || self.nxt + rest < self.peer_edge);
        let pair_second = self.train_left == 1;
        self.train_left = if pair_first {
            train - 1
        } else {
            self.train_left.saturating_sub(1)
        };
        self.probe_armed = false;
        if self.nxt == self.una || self.in_flight() == 0 {
            self.last_advance = now;
        }
        let seq = self.nxt;
        self.nxt += 1;
        if self.lim.acks_expected && self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + rto);
        }
        stats.tpdus_sent += 1;
        stats.bytes_sent += len as u64;
        flow.on_sent(now, len, false);
        let out = self.emit(seq, now, cookie, None, pair_first, pair_second);
        if !self.lim.error_control {
            // Without error control a sent TPDU is forgotten at once; the one just
            // sent had its payload taken by `emit`, and counts its length.
            while self.una < self.nxt {
                if let Some(slot) = self.slots.pop_front() {
                    let taken = if self.una == seq { len } else { 0 };
                    self.bytes -= slot.len() + taken;
                    if slot.last {
                        self.msgs_queued = self.msgs_queued.saturating_sub(1);
                    }
                }
                self.una += 1;
            }
        }
        Some(out)
    }

    fn retx_kind(&self, seq: u64) -> RetxKind {
        self.slot(seq).map_or(RetxKind::Fast, |s| s.kind)
    }

    fn emit(
        &mut self,
        seq: u64,
        now: Instant,
        cookie: u32,
        retx: Option<RetxKind>,
        pair_first: bool,
        pair_second: bool,
    ) -> OutData {
        self.tx_counter += 1;
        let order = self.tx_counter;
        // The sender's window in the TPDUs it sends now: what the receiver sizes its
        // advertisement and its reorder range in (`RecvHalf::on_data`).
        let window = self.ec_window().min(u32::from(u16::MAX)) as u16;
        let error_control = self.lim.error_control;
        let slot = self
            .slot_mut(seq)
            .expect("emit of a queued sequence number");
        slot.freeze();
        slot.tx_order = order;
        slot.sent_at = now;
        slot.queued = false;
        slot.pair_first = pair_first;
        slot.pair_second = pair_second;
        if retx.is_none() {
            slot.last_retx_was = false;
        }
        let mut flags = Flags::empty();
        flags.set(Flags::FIRST, slot.first);
        flags.set(Flags::LAST, slot.last);
        flags.set(Flags::RETX, retx.is_some());
        flags.set(Flags::PAIR_FIRST, pair_first);
        flags.set(Flags::PAIR_SECOND, pair_second);
        let header = Header {
            flags,
            window,
            cookie,
            seq: seq::to_wire(seq),
            msg: slot.msg,
            tsval: now.micros_u32(),
            aux: slot.msg_off,
            ..Header::new(crate::wire::tpdu::TpduType::Data)
        };
        // Without error control the slot is forgotten as soon as it is sent
        // (`poll_data`): its payload goes out whole rather than as a clone, which
        // would turn a small send's one allocation into a shared one (a second
        // allocation and its reference counts).
        let payload = if error_control {
            slot.payload.clone()
        } else {
            std::mem::take(&mut slot.payload)
        };
        OutData {
            header,
            payload,
            retx,
        }
    }
}
