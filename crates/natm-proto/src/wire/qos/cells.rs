//! A QoS's rates in cells on the wire: the one conversion natm's signalling puts in a
//! traffic descriptor and a natm switch polices and reserves (issue 33: the two used
//! to differ by the frames' overhead, 2 % at 4 KiB TPDUs).
//!
//! A QoS rate counts payload bits ([`super::BITS_PER_CELL`] per cell of payload); on
//! the wire each frame of payload — a TPDU, or a bare VC's SDU — also carries
//! [`FRAME_OVERHEAD`] octets and is padded to whole cells. Frames are taken at their
//! largest (the TPDU size, a bare VC's `max_sdu`), so a sender at its payload rate
//! sends at most [`wire_cells`] of it.

use super::Qos;

/// What natm counts on top of each frame's payload: a TPDU's 32-octet header and the
/// AAL5 trailer (8). A bare VC's SDU, which has no TPDU header, is counted the same
/// (32 octets of slack per SDU, 0.35 % at the default 9,188).
pub const FRAME_OVERHEAD: u32 = 32 + 8;

/// The cells one frame of `payload` octets takes on the wire.
pub fn frame_cells(payload: u32) -> u64 {
    (u64::from(payload.max(1)) + u64::from(FRAME_OVERHEAD)).div_ceil(48)
}

/// The cells/s on the wire that carry `payload_cells` cells/s of payload in frames of
/// `frame` octets, rounded up.
pub fn wire_cells(payload_cells: u64, frame: u32) -> u64 {
    let frame_len = u64::from(frame.max(1));
    let cells = u128::from(payload_cells) * u128::from(frame_cells(frame) * 48);
    cells
        .div_ceil(u128::from(frame_len))
        .try_into()
        .unwrap_or(u64::MAX)
}

/// The most payload cells/s whose [`wire_cells`] fit `cells`: its inverse, so that
/// `payload_cells(wire_cells(r, f), f) == r`.
pub fn payload_cells(cells: u64, frame: u32) -> u64 {
    let frame_len = u128::from(frame.max(1));
    (u128::from(cells) * frame_len / u128::from(frame_cells(frame) * 48))
        .try_into()
        .unwrap_or(u64::MAX)
}

impl Qos {
    /// The octets of payload in each of this QoS's frames at most: the TPDU size, a
    /// bare VC's largest SDU.
    pub fn frame_payload(&self) -> u32 {
        self.resolved_transport(false).tpdu_size
    }

    /// [`wire_cells`] in this QoS's frames.
    pub fn wire_cells(&self, payload_cells: u64) -> u64 {
        wire_cells(payload_cells, self.frame_payload())
    }

    /// [`payload_cells`] in this QoS's frames.
    pub fn payload_cells(&self, cells: u64) -> u64 {
        payload_cells(cells, self.frame_payload())
    }

    /// The cell rate a `smooth=cell` sender spaces its cells at: its peak rate
    /// (`pcr`, else `max_pcr`, else `min_pcr`) in cells on the wire, what a switch
    /// polices it at; `None` unless it asked for cell-level smoothing.
    pub fn smoothing_cells(&self) -> Option<u64> {
        if self.resolved_transport(false).smoothing != super::Smoothing::Cell {
            return None;
        }
        let tx = self.tx();
        let rate = tx.pcr.or(tx.max_pcr).or(tx.min_pcr)?;
        Some(self.wire_cells(rate.cells_per_sec()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_smoothed_sender_spaces_cells_at_its_policed_rate() {
        let q: Qos = "cbr:pcr=4Mbps,smooth=cell".parse().unwrap();
        assert_eq!(q.smoothing_cells(), Some(10_621));
        let q: Qos = "cbr:pcr=4Mbps".parse().unwrap();
        assert_eq!(q.smoothing_cells(), None);
    }

    #[test]
    fn wire_cells_count_the_frames_overhead_and_come_back() {
        // The call: 4 Mbit/s of payload in 4 KiB TPDUs (87 cells each).
        let q: Qos = "cbr:pcr=4Mbps".parse().unwrap();
        assert_eq!(q.wire_cells(10_417), 10_621);
        for r in [0, 1, 10_417, 260_416, 1 << 40] {
            for f in [1, 48, 4096, 9188, 65_535] {
                assert_eq!(
                    payload_cells(wire_cells(r, f), f),
                    r,
                    "{r} in frames of {f}"
                );
            }
        }
    }
}
