//! The frames of one send, gathered rather than copied (issue 17, round four).
//!
//! A clear TPDU on a frame-mode UDP link is its VC header and TPDU header (36 octets,
//! written here) followed by its payload, which stays where the PSB's send queue holds
//! it (a `Bytes` slice, seed 000 §5.4 step 1's one copy). The link sends a run of them
//! with one vectored GSO `sendmsg` ([`crate::adaptor::UdpPort::send_gathered`]), so
//! the payload is not copied into a contiguous batch first; the kernel copies it once
//! from the iovec, as it copied the batch. Sealed TPDUs (sealed in place), bare SDUs
//! and cell-mode links keep the contiguous [`crate::adaptor::SendBatch`].

use bytes::Bytes;

use super::link::VC_HEADER_LEN;
use crate::wire::tpdu::{Header, HEADER_LEN};

/// Octets written per frame: the VC header and the TPDU header.
const HEAD: usize = VC_HEADER_LEN + HEADER_LEN;

/// Frames held at most before a send (a GSO run carries at most 64 on Linux).
pub(crate) const MAX_FRAMES: usize = 64;

/// A run of frames for one GSO send: equal lengths, the last possibly shorter.
#[derive(Debug, Default)]
pub(crate) struct GatherBatch {
    heads: Vec<u8>,
    payloads: Vec<Bytes>,
    segment_size: usize,
    /// A shorter frame ended the run.
    sealed: bool,
}

impl GatherBatch {
    /// Whether a frame of `len` octets (headers included) may join the run.
    pub(crate) fn fits(&self, len: usize) -> bool {
        self.payloads.is_empty()
            || (!self.sealed && len <= self.segment_size && self.payloads.len() < MAX_FRAMES)
    }

    /// Append a frame; the caller checked [`GatherBatch::fits`].
    pub(crate) fn push(
        &mut self,
        vc_header: &[u8; VC_HEADER_LEN],
        header: &Header,
        payload: Bytes,
    ) {
        let len = HEAD + payload.len();
        debug_assert!(self.fits(len));
        if self.payloads.is_empty() {
            self.segment_size = len;
        } else if len < self.segment_size {
            self.sealed = true;
        }
        self.heads.extend_from_slice(vc_header);
        self.heads.extend_from_slice(&header.to_bytes());
        self.payloads.push(payload);
    }

    /// Forget the frames (and release their payloads), keep the memory.
    pub(crate) fn clear(&mut self) {
        self.heads.clear();
        self.payloads.clear();
        self.segment_size = 0;
        self.sealed = false;
    }

    pub(crate) fn len(&self) -> usize {
        self.payloads.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.payloads.is_empty()
    }

    /// The GSO segment size: the first frame's length.
    pub(crate) fn segment_size(&self) -> usize {
        self.segment_size
    }

    /// Each frame's two parts: its headers, its payload.
    pub(crate) fn frames(&self) -> impl Iterator<Item = [&[u8]; 2]> + '_ {
        self.heads
            .chunks_exact(HEAD)
            .zip(&self.payloads)
            .map(|(h, p)| [h, &p[..]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tpdu::TpduType;

    #[test]
    fn frames_are_headers_then_payload_and_a_shorter_frame_ends_the_run() {
        let mut b = GatherBatch::default();
        let h = Header::new(TpduType::Data);
        b.push(&[1, 2, 3, 4], &h, Bytes::from_static(b"abcdef"));
        assert!(b.fits(HEAD + 6) && !b.fits(HEAD + 7), "one segment size");
        b.push(&[1, 2, 3, 4], &h, Bytes::from_static(b"ab"));
        assert!(!b.fits(HEAD + 1), "the shorter frame was the last");
        let frames: Vec<Vec<u8>> = b.frames().map(|[a, p]| [a, p].concat()).collect();
        let mut want = vec![1, 2, 3, 4];
        want.extend_from_slice(&h.to_bytes());
        assert_eq!(frames[0], [&want[..], b"abcdef"].concat());
        assert_eq!(frames[1], [&want[..], b"ab"].concat());
        assert_eq!((b.len(), b.segment_size()), (2, HEAD + 6));
        b.clear();
        assert!(b.is_empty() && b.fits(10_000));
    }
}
