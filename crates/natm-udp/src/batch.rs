//! Reusable frame batches: what a port sends in one call and receives in one call.
//!
//! A [`SendBatch`] holds frames back to back in one buffer, all of one size but the
//! last, which is exactly what one UDP GSO `sendmsg` takes. A [`RecvBatch`] holds the
//! buffers one `recvmmsg` fills, each of which may carry several datagrams of one size
//! (GRO), and yields the datagrams one by one. Both keep their memory between calls:
//! nothing is allocated per frame.

use core::fmt;
use std::time::Duration;

use thiserror::Error;

/// Largest datagram a [`SendBatch`] takes: the largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;

/// Why a frame cannot join a [`SendBatch`]; send the batch, clear it and push again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PushError {
    /// An empty frame (a GSO batch cannot carry one) or one over [`MAX_DATAGRAM`].
    #[error("a frame of {0} octets cannot be a datagram (1..={MAX_DATAGRAM})")]
    BadLength(usize),
    /// Larger than the batch's segment size: only the last frame may differ, and only
    /// by being shorter.
    #[error("a frame of {len} octets does not fit a batch of {segment_size}-octet segments")]
    SizeMismatch {
        /// The frame offered.
        len: usize,
        /// The batch's segment size.
        segment_size: usize,
    },
    /// The batch already ends with a short frame, so nothing may follow it.
    #[error("the batch ends with a short frame; send it before pushing more")]
    Sealed,
}

/// Frames to send in one call: back to back, all of one size but the last, which may
/// be shorter (the GSO rule). Reuse it: [`SendBatch::clear`] keeps the buffer.
#[derive(Clone, Default)]
pub struct SendBatch {
    /// The frames are `buf[..used]`. `buf` only grows: octets past `used` are left
    /// from earlier batches, so a reused batch writes each frame once instead of
    /// zeroing its room first (a second pass over every octet sent).
    buf: Vec<u8>,
    used: usize,
    segment_size: usize,
    frames: usize,
    sealed: bool,
}

impl SendBatch {
    /// An empty batch.
    pub fn new() -> SendBatch {
        SendBatch::default()
    }

    /// An empty batch with room for `bytes` octets of frames before it reallocates.
    pub fn with_capacity(bytes: usize) -> SendBatch {
        SendBatch {
            buf: Vec::with_capacity(bytes),
            ..SendBatch::default()
        }
    }

    /// Make room for `bytes` octets of frames in all, once: nothing if there is.
    pub fn reserve_total(&mut self, bytes: usize) {
        self.buf.reserve(bytes.saturating_sub(self.buf.len()));
    }

    /// Forget the frames, keep the memory.
    pub fn clear(&mut self) {
        self.used = 0;
        self.segment_size = 0;
        self.frames = 0;
        self.sealed = false;
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames
    }

    /// Whether there is no frame.
    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// The size of every frame but the last (`None` when empty).
    pub fn segment_size(&self) -> Option<usize> {
        (self.frames > 0).then_some(self.segment_size)
    }

    /// The frames, back to back.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.used]
    }

    /// The frames one by one.
    pub fn frames(&self) -> core::slice::Chunks<'_, u8> {
        // A zero chunk size would panic; an empty batch has an empty buffer anyway.
        self.as_bytes().chunks(self.segment_size.max(1))
    }

    /// Whether a frame of `len` octets may join the batch now.
    pub fn check(&self, len: usize) -> Result<(), PushError> {
        if len == 0 || len > MAX_DATAGRAM {
            Err(PushError::BadLength(len))
        } else if self.frames == 0 {
            Ok(())
        } else if self.sealed {
            Err(PushError::Sealed)
        } else if len > self.segment_size {
            Err(PushError::SizeMismatch {
                len,
                segment_size: self.segment_size,
            })
        } else {
            Ok(())
        }
    }

    /// Append one frame of `len` octets and let `write` fill it in place (e.g. emit the
    /// VC and TPDU headers and copy the payload straight into the batch). `write` must
    /// write every octet it is given: the room is not zeroed first, and on a reused
    /// batch it holds octets of earlier frames.
    pub fn push_with(
        &mut self,
        len: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<(), PushError> {
        self.try_push_with(len, |out| {
            write(out);
            true
        })
        .map(|_| ())
    }

    /// As [`SendBatch::push_with`], for a writer that can fail (sealing the frame in
    /// place): when `write` returns `false` the frame is not added and the batch is as
    /// it was, so half-written octets (a TPDU whose seal failed, its payload still
    /// clear) never leave. Returns what `write` returned.
    pub fn try_push_with(
        &mut self,
        len: usize,
        write: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<bool, PushError> {
        self.check(len)?;
        let start = self.used;
        let end = start + len;
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        if !write(&mut self.buf[start..end]) {
            return Ok(false);
        }
        self.used = end;
        if self.frames == 0 {
            self.segment_size = len;
        } else if len < self.segment_size {
            self.sealed = true;
        }
        self.frames += 1;
        Ok(true)
    }

    /// Append one frame gathered from `parts` (e.g. VC header, TPDU header, payload).
    pub fn push(&mut self, parts: &[&[u8]]) -> Result<(), PushError> {
        let len = parts.iter().map(|p| p.len()).sum();
        self.push_with(len, |out| {
            let mut at = 0;
            for p in parts {
                out[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
        })
    }
}

impl fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendBatch")
            .field("frames", &self.frames)
            .field("segment_size", &self.segment_size)
            .field("bytes", &self.used)
            .finish()
    }
}

/// One filled receive buffer: who sent it, how long it is, how far apart its
/// datagrams are (GRO).
#[derive(Debug, Clone, Copy)]
struct Filled<A> {
    addr: A,
    /// Offset of its first octet in the buffer area.
    start: usize,
    len: usize,
    stride: usize,
    /// When the kernel received it (`SO_TIMESTAMPNS`: the realtime clock since the
    /// Unix epoch), if the socket stamps; every datagram of a GRO run has its stamp.
    stamp: Option<Duration>,
}

impl<A> Filled<A> {
    fn datagrams(&self) -> usize {
        if self.len == 0 || self.stride == 0 {
            1
        } else {
            self.len.div_ceil(self.stride)
        }
    }
}

/// Buffers for one receive call, reused from call to call.
///
/// It has `slots` buffers of `slot_len` octets; a port fills some of them (each with
/// one datagram, or several of one size with GRO) and [`RecvBatch::iter`] yields the
/// datagrams with their source. A buffer that comes back completely full may have been
/// truncated, so ports drop it (and count it): make `slot_len` at least one octet more
/// than the largest datagram — 65,536 when GRO may coalesce (it stops at 64 KiB).
#[derive(Clone)]
pub struct RecvBatch<A = std::net::SocketAddr> {
    buf: Vec<u8>,
    slot_len: usize,
    filled: Vec<Filled<A>>,
    next_slot: usize,
    datagrams: usize,
    /// Where the next packed datagram goes ([`RecvBatch::push_packed`]).
    packed_end: usize,
    /// The port read something it has not handed over whole (the cell adaptor's
    /// partial frames, or frames left for the next call): read again.
    more: bool,
    /// The area was exchanged since the last receive ([`RecvBatch::swap_area`]): the
    /// records describe the area given away.
    swapped: bool,
    /// The datagrams were packed ([`RecvBatch::push_packed`]), not received slot by
    /// slot.
    packed: bool,
}

impl<A: Copy> RecvBatch<A> {
    /// `slots` buffers of `slot_len` octets each (both at least 1).
    pub fn new(slots: usize, slot_len: usize) -> RecvBatch<A> {
        let (slots, slot_len) = (slots.max(1), slot_len.max(1));
        RecvBatch {
            buf: vec![0; slots * slot_len],
            slot_len,
            filled: Vec::with_capacity(slots),
            next_slot: 0,
            datagrams: 0,
            packed_end: 0,
            more: false,
            swapped: false,
            packed: false,
        }
    }

    /// Number of buffers.
    pub fn slots(&self) -> usize {
        self.buf.len() / self.slot_len
    }

    /// Octets per buffer.
    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// Number of datagrams received (GRO buffers split).
    pub fn len(&self) -> usize {
        self.datagrams
    }

    /// Whether no datagram was received.
    pub fn is_empty(&self) -> bool {
        self.datagrams == 0
    }

    /// Number of buffers filled.
    pub fn buffers_filled(&self) -> usize {
        self.filled.len()
    }

    /// Forget the datagrams, keep the memory.
    pub fn clear(&mut self) {
        self.filled.clear();
        self.next_slot = 0;
        self.datagrams = 0;
        self.packed_end = 0;
        self.more = false;
        self.swapped = false;
        self.packed = false;
    }

    /// Whether more datagrams may be packed after these ([`RecvBatch::push_packed`]):
    /// none was received slot by slot.
    pub fn is_packed(&self) -> bool {
        self.packed || self.filled.is_empty()
    }

    /// Whether the port may hold more to read: every buffer was used, or the port
    /// said so ([`RecvBatch::set_more`]). A batch short of that emptied the port.
    pub fn may_have_more(&self) -> bool {
        self.more || self.filled.len() >= self.slots()
    }

    /// Marks the batch as not the last of what the port holds.
    pub fn set_more(&mut self) {
        self.more = true;
    }

    /// Whether the port marked the batch with [`RecvBatch::set_more`].
    pub fn marked_more(&self) -> bool {
        self.more
    }

    /// Copy one datagram gathered from `parts` right after the previous packed one,
    /// whatever the slots (the cell adaptor's reassembled frames, of any sizes, share
    /// the area). Returns `false`, copying nothing, when it does not fit, or when the
    /// batch holds datagrams received slot by slot (the two do not mix).
    pub fn push_packed(&mut self, addr: A, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let start = self.packed_end;
        if self.swapped || !self.is_packed() || start + len > self.buf.len() {
            return false;
        }
        let mut at = start;
        for p in parts {
            self.buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        self.filled.push(Filled {
            addr,
            start,
            len,
            stride: len,
            stamp: None,
        });
        self.packed_end = at;
        self.packed = true;
        self.next_slot = self.slots();
        self.datagrams += 1;
        true
    }

    /// The datagrams received, in order, with their source.
    pub fn iter(&self) -> Datagrams<'_, A> {
        let mut spans = self.spans();
        if self.swapped {
            spans.filled = &[];
        }
        Datagrams {
            spans,
            area: &self.buf,
        }
    }

    /// Where each datagram received lies in the buffer area, in order, with its
    /// source: what [`RecvBatch::iter`] yields, as ranges. With
    /// [`RecvBatch::swap_area`] they locate the datagrams in the area given back.
    pub fn spans(&self) -> Spans<'_, A> {
        Spans {
            filled: &self.filled,
            next: 0,
            offset: 0,
        }
    }

    /// Calls `f` on each datagram received, in order, with where it lies and its
    /// octets to change in place (a sealed frame opened where it arrived, before the
    /// area is lent). Nothing after a [`RecvBatch::swap_area`].
    pub fn for_each_mut(&mut self, mut f: impl FnMut(core::ops::Range<usize>, &mut [u8])) {
        if self.swapped {
            return;
        }
        let spans = Spans {
            filled: &self.filled,
            next: 0,
            offset: 0,
        };
        for (_, r) in spans {
            f(r.clone(), &mut self.buf[r]);
        }
    }

    /// [`RecvBatch::spans`] with each datagram's kernel receive stamp (the realtime
    /// clock since the Unix epoch), where the port had one.
    pub fn stamped_spans(&self) -> StampedSpans<'_, A> {
        StampedSpans(self.spans())
    }

    /// [`RecvBatch::iter`] with each datagram's kernel receive stamp (see
    /// [`RecvBatch::stamped_spans`]).
    pub fn stamped_iter(&self) -> impl Iterator<Item = (A, &[u8], Option<Duration>)> {
        let mut spans = self.stamped_spans();
        if self.swapped {
            spans.0.filled = &[];
        }
        spans.map(|(a, r, stamp)| (a, &self.buf[r], stamp))
    }

    /// Length of the buffer area (every slot).
    pub fn area_len(&self) -> usize {
        self.buf.len()
    }

    /// Exchanges the buffer area for `area`, which must be as long (else it comes
    /// back as the error and nothing changes), and returns the area received into:
    /// so a caller can keep what arrived without copying it (e.g. as `Bytes` sliced
    /// per datagram at [`RecvBatch::spans`]) and the next receive fills `area`.
    /// The record of what was received stays; [`RecvBatch::iter`] yields nothing
    /// until the batch is cleared or receives again (its octets are in the area
    /// returned), and nothing may be pushed before that.
    pub fn swap_area(&mut self, area: Vec<u8>) -> Result<Vec<u8>, Vec<u8>> {
        if area.len() != self.buf.len() {
            return Err(area);
        }
        self.swapped = true;
        Ok(std::mem::replace(&mut self.buf, area))
    }

    /// Copy one datagram into the next free buffer (for in-memory ports and tests).
    /// Returns `false`, copying nothing, when every buffer is used or it does not fit
    /// with the one octet of headroom that tells a full buffer from a truncated one.
    pub fn push(&mut self, addr: A, datagram: &[u8]) -> bool {
        let slot = self.next_slot;
        if self.swapped || slot == self.slots() || datagram.len() >= self.slot_len {
            return false;
        }
        let start = slot * self.slot_len;
        self.buf[start..start + datagram.len()].copy_from_slice(datagram);
        self.record(addr, datagram.len(), datagram.len());
        true
    }

    /// The buffer area, where [`RecvBatch::spans`] locate the datagrams (unless the
    /// area was swapped away).
    pub fn area(&self) -> &[u8] {
        &self.buf
    }

    /// The whole buffer area, for a port to receive into slot by slot.
    pub(crate) fn area_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Note that the next free buffer now holds `len` octets from `addr`, split every
    /// `stride` octets. Returns the number of datagrams it carries.
    pub(crate) fn record(&mut self, addr: A, len: usize, stride: usize) -> usize {
        self.record_stamped(addr, len, stride, None)
    }

    /// [`RecvBatch::record`] with the kernel's receive stamp.
    pub(crate) fn record_stamped(
        &mut self,
        addr: A,
        len: usize,
        stride: usize,
        stamp: Option<Duration>,
    ) -> usize {
        let f = Filled {
            addr,
            start: self.next_slot * self.slot_len,
            len,
            stride,
            stamp,
        };
        let n = f.datagrams();
        self.filled.push(f);
        self.next_slot += 1;
        self.datagrams += n;
        n
    }

    /// Skip the next free buffer (its content was dropped).
    pub(crate) fn skip(&mut self) {
        self.next_slot += 1;
    }
}

impl<A> fmt::Debug for RecvBatch<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvBatch")
            .field("slot_len", &self.slot_len)
            .field("buffers_filled", &self.filled.len())
            .field("datagrams", &self.datagrams)
            .finish()
    }
}

/// The datagrams of a [`RecvBatch`], with their source.
#[derive(Debug)]
pub struct Datagrams<'a, A> {
    spans: Spans<'a, A>,
    area: &'a [u8],
}

impl<'a, A: Copy> Iterator for Datagrams<'a, A> {
    type Item = (A, &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<(A, &'a [u8])> {
        let (addr, r) = self.spans.next()?;
        Some((addr, &self.area[r]))
    }
}

/// Where the datagrams of a [`RecvBatch`] lie in its buffer area, with their source.
#[derive(Debug)]
pub struct Spans<'a, A> {
    filled: &'a [Filled<A>],
    next: usize,
    offset: usize,
}

impl<A: Copy> Iterator for Spans<'_, A> {
    type Item = (A, core::ops::Range<usize>);

    #[inline]
    fn next(&mut self) -> Option<(A, core::ops::Range<usize>)> {
        self.next_stamped().map(|(a, r, _)| (a, r))
    }
}

/// [`Spans`] with each datagram's kernel receive stamp ([`RecvBatch::stamped_spans`]).
#[derive(Debug)]
pub struct StampedSpans<'a, A>(Spans<'a, A>);

impl<A: Copy> Iterator for StampedSpans<'_, A> {
    type Item = (A, core::ops::Range<usize>, Option<Duration>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_stamped()
    }
}

impl<A: Copy> Spans<'_, A> {
    #[inline]
    fn next_stamped(&mut self) -> Option<(A, core::ops::Range<usize>, Option<Duration>)> {
        let f = self.filled.get(self.next)?;
        let base = f.start;
        // An empty datagram (len 0) is yielded once; stride 0 means "not coalesced".
        let step = if f.stride == 0 { f.len } else { f.stride };
        let end = (self.offset + step).min(f.len);
        let r = base + self.offset..base + end;
        if end == f.len {
            self.next += 1;
            self.offset = 0;
        } else {
            self.offset = end;
        }
        Some((f.addr, r, f.stamp))
    }
}

/// The realtime clock since the Unix epoch, what kernel receive stamps count: read
/// once per receive call, beside the caller's own clock, for [`stamp_age`].
pub fn wall_clock() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// How long before `wall` ([`wall_clock`]) a datagram the kernel stamped `stamp`
/// reached the host: `None` for an unstamped datagram or a stamp that makes no sense
/// (ahead of `wall`, or a second and more behind it: the realtime clock stepped).
/// The caller's arrival time is its own clock, read with `wall`, less this.
pub fn stamp_age(wall: Duration, stamp: Option<Duration>) -> Option<Duration> {
    stamp
        .and_then(|s| wall.checked_sub(s))
        .filter(|waited| *waited < Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_whose_writer_fails_never_joins_the_batch() {
        let mut b = SendBatch::new();
        b.push(&[b"sealed!!"]).unwrap();
        // A writer that gets halfway (a TPDU whose seal failed) and gives up.
        let got = b.try_push_with(8, |out| {
            out.copy_from_slice(b"CLEARTXT");
            false
        });
        assert_eq!(got, Ok(false));
        assert_eq!((b.len(), b.as_bytes()), (1, &b"sealed!!"[..]));
        // The next frame takes the room the failed one was written into.
        assert_eq!(
            b.try_push_with(8, |out| {
                out.copy_from_slice(b"sealed#2");
                true
            }),
            Ok(true)
        );
        assert_eq!(b.as_bytes(), b"sealed!!sealed#2");
        assert!(b.frames().all(|f| !f.starts_with(b"CLEAR")));
    }

    #[test]
    fn send_batch_keeps_the_gso_rule() {
        let mut b = SendBatch::new();
        assert_eq!(b.segment_size(), None);
        b.push(&[b"ab", b"cd"]).unwrap();
        b.push(&[b"efgh"]).unwrap();
        assert_eq!(
            b.push(&[b"ijklm"]),
            Err(PushError::SizeMismatch {
                len: 5,
                segment_size: 4
            })
        );
        b.push(&[b"ij"]).unwrap();
        assert_eq!(b.push(&[b"k"]), Err(PushError::Sealed));
        assert_eq!(b.push(&[]), Err(PushError::BadLength(0)));
        assert_eq!(b.len(), 3);
        assert_eq!(b.segment_size(), Some(4));
        assert_eq!(b.as_bytes(), b"abcdefghij");
        assert_eq!(
            b.frames().collect::<Vec<_>>(),
            [&b"abcd"[..], b"efgh", b"ij"]
        );
        b.clear();
        assert!(b.is_empty());
        b.push_with(3, |o| o.copy_from_slice(b"xyz")).unwrap();
        // The reused room held "abcdefghij": only what was written since is the batch.
        assert_eq!(b.as_bytes(), b"xyz");
        assert_eq!(b.frames().collect::<Vec<_>>(), [&b"xyz"[..]]);
        assert_eq!(b.len(), 1);
        assert_eq!(
            b.check(MAX_DATAGRAM + 1),
            Err(PushError::BadLength(MAX_DATAGRAM + 1))
        );
    }

    #[test]
    fn packed_datagrams_share_the_area() {
        let mut b: RecvBatch<u8> = RecvBatch::new(1, 16);
        assert!(b.push_packed(1, &[b"ab", b"c"]));
        assert!(b.push_packed(2, &[b"defgh"]));
        assert!(!b.push_packed(3, &[&[0; 9]]));
        let got: Vec<(u8, &[u8])> = b.iter().collect();
        assert_eq!(got, [(1, &b"abc"[..]), (2, &b"defgh"[..])]);
        assert!(b.may_have_more());
        b.clear();
        assert!(!b.may_have_more());
        b.set_more();
        assert!(b.may_have_more() && b.is_empty());
    }

    #[test]
    fn datagrams_received_slot_by_slot_take_no_packed_ones_after_them() {
        let mut b: RecvBatch<u8> = RecvBatch::new(2, 16);
        assert!(b.is_packed());
        assert!(b.push(1, b"slot"));
        assert!(!b.is_packed());
        // Packing would write over the slot's datagram at the area's start.
        assert!(!b.push_packed(2, &[b"xy"]));
        let got: Vec<(u8, &[u8])> = b.iter().collect();
        assert_eq!(got, [(1, &b"slot"[..])]);
        b.clear();
        assert!(b.push_packed(2, &[b"xy"]) && b.is_packed());
    }

    #[test]
    fn recv_batch_splits_by_stride() {
        let mut r: RecvBatch<u8> = RecvBatch::new(3, 16);
        // Slot 0: three datagrams coalesced (4, 4, 2 octets); slot 1 dropped; slot 2 empty
        // datagram.
        r.area_mut()[..10].copy_from_slice(b"aaaabbbbcc");
        assert_eq!(r.record(7, 10, 4), 3);
        r.skip();
        assert_eq!(r.record(9, 0, 0), 1);
        let got: Vec<_> = r.iter().collect();
        assert_eq!(got, [(7, &b"aaaa"[..]), (7, b"bbbb"), (7, b"cc"), (9, b"")]);
        assert_eq!((r.len(), r.buffers_filled()), (4, 2));
        r.clear();
        assert!(r.is_empty() && r.iter().next().is_none());
        assert!(r.push(1, b"hello"));
        assert!(
            !r.push(2, &[0; 16]),
            "no headroom left to detect truncation"
        );
        assert_eq!(r.iter().collect::<Vec<_>>(), [(1, &b"hello"[..])]);
    }

    #[test]
    fn swapped_area_keeps_the_datagrams_where_spans_say() {
        let mut r: RecvBatch<u8> = RecvBatch::new(2, 16);
        r.area_mut()[..10].copy_from_slice(b"aaaabbbbcc");
        r.record(7, 10, 4);
        r.area_mut()[16..19].copy_from_slice(b"xyz");
        r.record(8, 3, 3);
        assert_eq!(r.swap_area(vec![0; 5]), Err(vec![0; 5]), "wrong length");
        let old = r.swap_area(vec![0; 32]).unwrap();
        assert!(r.iter().next().is_none(), "the octets went with the area");
        let got: Vec<(u8, &[u8])> = r.spans().map(|(a, s)| (a, &old[s])).collect();
        assert_eq!(
            got,
            [(7, &b"aaaa"[..]), (7, b"bbbb"), (7, b"cc"), (8, b"xyz")]
        );
        assert!(!r.push(1, b"no"), "nothing is pushed into a swapped batch");
        r.clear();
        assert!(r.push(1, b"ok"));
        assert_eq!(r.iter().collect::<Vec<_>>(), [(1, &b"ok"[..])]);
    }

    #[test]
    fn datagrams_change_in_place_until_the_area_is_swapped() {
        let mut r: RecvBatch<u8> = RecvBatch::new(2, 16);
        r.area_mut()[..10].copy_from_slice(b"aaaabbbbcc");
        r.record(7, 10, 4);
        r.area_mut()[16..19].copy_from_slice(b"xyz");
        r.record(8, 3, 3);
        let mut seen = Vec::new();
        r.for_each_mut(|span, d| {
            seen.push(span);
            d[0] = b'#';
        });
        assert_eq!(seen, [0..4, 4..8, 8..10, 16..19]);
        let got: Vec<&[u8]> = r.iter().map(|(_, d)| d).collect();
        assert_eq!(got, [&b"#aaa"[..], b"#bbb", b"#c", b"#yz"]);
        let _old = r.swap_area(vec![0; 32]).unwrap();
        r.for_each_mut(|_, _| panic!("a swapped batch has no datagrams to change"));
    }

    #[test]
    fn a_stamp_gives_its_age_and_a_stamp_that_makes_no_sense_none() {
        let wall = Duration::from_secs(1_000);
        let ms = Duration::from_millis;
        assert_eq!(stamp_age(wall, Some(wall - ms(30))), Some(ms(30)));
        assert_eq!(stamp_age(wall, None), None, "unstamped");
        assert_eq!(
            stamp_age(wall, Some(wall + ms(1))),
            None,
            "ahead of the clock"
        );
        assert_eq!(
            stamp_age(wall, Some(wall - ms(1_000))),
            None,
            "the clock stepped"
        );
    }
}
