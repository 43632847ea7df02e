//! A frame on the simulated wire: the bytes an endpoint sent plus an AAL5-style CRC-32.
//!
//! The CRC is computed once where the frame enters the network (the sending adaptor
//! fills in the AAL5 trailer) and checked at the far end of every link (each hop is a
//! store-and-forward frame switch), so corruption is detected by arithmetic, never by a
//! flag: a flipped bit that the CRC missed would be delivered, exactly as on a real wire.

use rand::RngExt;

use super::loss::SimRng;
use super::topology::RouteIdx;

/// The AAL5 CRC-32 of `bytes` (CRC-32/BZIP2, ITU-T I.363.5): the wire module's
/// implementation, chosen by measurement (docs/PERFORMANCE.md), since every hop checks
/// every frame and the CRC is the simulator's hottest loop.
pub(crate) fn aal5_crc(bytes: &[u8]) -> u32 {
    natm_proto::wire::crc::crc32_aal5(bytes)
}

/// What a link's transmitter adds to every frame, so that serialization time reflects
/// the real cost of a frame on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FrameOverhead {
    /// The frame's own bytes only (an idealised link; the CRC costs no time).
    #[default]
    None,
    /// A fixed number of extra bytes per frame (e.g. 28 for UDP/IPv4 headers).
    PerFrame(u32),
    /// AAL5 CPCS-PDU: 8-byte trailer, padded up to a multiple of 48 bytes.
    Aal5Trailer,
    /// AAL5 in ATM cells: the padded CPCS-PDU carried in 53-byte cells (the cell tax).
    Cells,
}

impl FrameOverhead {
    /// Bytes that occupy the wire when a frame of `len` bytes is sent.
    pub fn wire_bytes(self, len: usize) -> u64 {
        let len = len as u64;
        let cells = (len + 8).div_ceil(48);
        match self {
            FrameOverhead::None => len,
            FrameOverhead::PerFrame(extra) => len + u64::from(extra),
            FrameOverhead::Aal5Trailer => cells * 48,
            FrameOverhead::Cells => cells * 53,
        }
    }
}

/// A frame in flight: its bytes, its trailer CRC, and where it is on its route.
#[derive(Debug)]
pub(crate) struct Packet {
    /// The route this frame follows.
    pub(crate) route: RouteIdx,
    /// Index into the route's hops of the link the frame is on or queued for.
    pub(crate) hop: u32,
    /// The frame as the endpoint sent it (possibly corrupted on the way).
    pub(crate) bytes: Vec<u8>,
    /// The CRC-32 trailer as it travels on the wire (possibly corrupted on the way).
    pub(crate) trailer: u32,
}

impl Packet {
    /// A frame entering the network on `route`: the sender computes its trailer.
    pub(crate) fn new(route: RouteIdx, bytes: Vec<u8>) -> Self {
        let trailer = aal5_crc(&bytes);
        Packet {
            route,
            hop: 0,
            bytes,
            trailer,
        }
    }

    /// A copy of this frame in `buf` (reused to avoid allocating for duplicates).
    pub(crate) fn duplicate(&self, mut buf: Vec<u8>) -> Self {
        buf.clear();
        buf.extend_from_slice(&self.bytes);
        Packet {
            route: self.route,
            hop: self.hop,
            bytes: buf,
            trailer: self.trailer,
        }
    }

    /// Flips one uniformly chosen bit of the frame or its trailer.
    pub(crate) fn corrupt(&mut self, rng: &mut SimRng) {
        let bits = (self.bytes.len() as u64 + 4) * 8;
        let bit = rng.random_range(0..bits);
        let byte = (bit / 8) as usize;
        let mask = 1u8 << (bit % 8);
        match self.bytes.get_mut(byte) {
            Some(b) => *b ^= mask,
            None => self.trailer ^= u32::from(mask) << (8 * (byte - self.bytes.len())),
        }
    }

    /// Whether the receiving side's CRC check passes.
    pub(crate) fn crc_ok(&self) -> bool {
        aal5_crc(&self.bytes) == self.trailer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    #[test]
    fn crc_is_crc32_bzip2() {
        // The catalogue check value for CRC-32/BZIP2.
        assert_eq!(aal5_crc(b"123456789"), 0xFC89_1918);
    }

    #[test]
    fn overhead_matches_aal5_and_cell_tax() {
        use FrameOverhead::*;
        assert_eq!(None.wire_bytes(1000), 1000);
        assert_eq!(PerFrame(28).wire_bytes(1000), 1028);
        // 40 + 8 fits one cell exactly; 41 + 8 needs two.
        assert_eq!(Aal5Trailer.wire_bytes(40), 48);
        assert_eq!(Aal5Trailer.wire_bytes(41), 96);
        assert_eq!(Cells.wire_bytes(40), 53);
        assert_eq!(Cells.wire_bytes(41), 106);
        assert_eq!(Cells.wire_bytes(0), 53);
        // A 4 KiB TPDU: ceil(4104 / 48) = 86 cells.
        assert_eq!(Cells.wire_bytes(4096), 86 * 53);
    }

    proptest! {
        #[test]
        fn cells_are_padded_pdu_times_53_over_48(len in 0usize..70_000) {
            let pdu = FrameOverhead::Aal5Trailer.wire_bytes(len);
            prop_assert_eq!(pdu % 48, 0);
            prop_assert!(pdu >= len as u64 + 8 && pdu < len as u64 + 8 + 48);
            prop_assert_eq!(FrameOverhead::Cells.wire_bytes(len), pdu / 48 * 53);
        }

        #[test]
        fn any_single_bit_flip_is_caught(
            bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            seed in any::<u64>(),
        ) {
            let mut p = Packet::new(RouteIdx(0), bytes.clone());
            prop_assert!(p.crc_ok());
            p.corrupt(&mut SimRng::seed_from_u64(seed));
            prop_assert!(!p.crc_ok());
            let d = p.duplicate(Vec::new());
            prop_assert_eq!(&d.bytes, &p.bytes);
            prop_assert!(!d.crc_ok());
        }
    }
}
