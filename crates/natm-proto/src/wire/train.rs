//! The cell mode's datagram: a train of whole 53-octet cells behind one octet
//! (seed 004's "fat cells": several cells per datagram for speed).
//!
//! ```text
//! +--------+----------------+----------------+-----
//! |  0xD1  |  cell 1 (53)   |  cell 2 (53)   | ...   N ≥ 1 cells, N·53 + 1 octets
//! +--------+----------------+----------------+-----
//! ```
//! The first octet, 0xD1 (kind "cell train", version 1), is never the first octet of
//! the frame mode's VC header (0xC0–0xCF), so a port mixed up with a frame-mode peer
//! refuses the datagram instead of reading VC headers as cells.
//!
//! [`parse`], [`start`], [`push`] and [`cells`] are the codec (`natm switch` builds
//! its trains cell by cell with them); [`TrainPacker`] is AAL5 segmentation into
//! trains: it cuts VC frames (`wire::vcframe`) into the cells of their CPCS-PDUs
//! (I.363.5) and packs them into trains of at most N cells, one frame after another,
//! so that every train but the last is full (one UDP GSO run). Reassembly is
//! [`super::sar`].

use super::aal5::Segmenter;
use super::cell::{HeaderRepr, Pti, CELL_LEN, HEADER_LEN, PAYLOAD_LEN};
use super::sar::SarError;
use super::vcframe;

/// The first octet of a cell train.
pub const TRAIN_MAGIC: u8 = 0xD1;
/// The most cells in one train: 1 + 1,235 × 53 = 65,456 octets fit a 65,507-octet UDP
/// payload (1,236 would not).
pub const MAX_TRAIN_CELLS: usize = (65_507 - 1) / CELL_LEN;

/// Why a datagram is not a cell train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TrainError {
    /// The first octet is not [`TRAIN_MAGIC`].
    #[error("first octet {0:#04x} is not a cell train's 0xd1")]
    Magic(u8),
    /// The length is not one octet plus a positive multiple of 53.
    #[error("{0} octets is not 1 + N·53")]
    Length(usize),
}

/// The cells of a train, if the datagram is one.
pub fn parse(datagram: &[u8]) -> Result<core::slice::ChunksExact<'_, u8>, TrainError> {
    let (&magic, cells) = datagram.split_first().ok_or(TrainError::Length(0))?;
    if magic != TRAIN_MAGIC {
        return Err(TrainError::Magic(magic));
    }
    if cells.is_empty() || cells.len() % CELL_LEN != 0 {
        return Err(TrainError::Length(datagram.len()));
    }
    Ok(cells.chunks_exact(CELL_LEN))
}

/// Starts a train in `out` (cleared first); push cells with [`push`].
pub fn start(out: &mut Vec<u8>) {
    out.clear();
    out.push(TRAIN_MAGIC);
}

/// Appends one cell to the train in `out`.
pub fn push(out: &mut Vec<u8>, cell: &[u8; CELL_LEN]) {
    out.extend_from_slice(cell);
}

/// Cells in the train being built in `out`.
pub fn cells(out: &[u8]) -> usize {
    out.len().saturating_sub(1) / CELL_LEN
}

/// Octets of a train of `cells` cells.
pub const fn train_len(cells: usize) -> usize {
    1 + cells * CELL_LEN
}

/// VC frames cut into cells and packed into trains of at most `max_cells` cells,
/// back to back in one buffer: every train but the last is full, so the buffer is one
/// run of equal-sized datagrams (the last may be shorter), as a UDP GSO send takes it.
/// Reuse it: [`TrainPacker::clear`] keeps the memory.
#[derive(Debug, Clone)]
pub struct TrainPacker {
    buf: Vec<u8>,
    max_cells: usize,
    /// Cells in the last train.
    in_train: usize,
    trains: usize,
}

impl TrainPacker {
    /// A packer of trains of at most `max_cells` cells (1..=[`MAX_TRAIN_CELLS`]).
    pub fn new(max_cells: usize) -> Result<TrainPacker, SarError> {
        if !(1..=MAX_TRAIN_CELLS).contains(&max_cells) {
            return Err(SarError::TrainSize(max_cells));
        }
        Ok(TrainPacker {
            buf: Vec::new(),
            max_cells,
            in_train: 0,
            trains: 0,
        })
    }

    /// The most cells per train.
    pub fn max_cells(&self) -> usize {
        self.max_cells
    }

    /// Octets of a full train: the datagram size of every train but perhaps the last.
    pub fn train_len(&self) -> usize {
        train_len(self.max_cells)
    }

    /// Trains packed.
    pub fn trains(&self) -> usize {
        self.trains
    }

    /// Whether nothing is packed.
    pub fn is_empty(&self) -> bool {
        self.trains == 0
    }

    /// The trains, back to back.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The trains one by one.
    pub fn datagrams(&self) -> core::slice::Chunks<'_, u8> {
        self.buf.chunks(self.train_len())
    }

    /// Forgets the trains, keeps the memory.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.in_train = 0;
        self.trains = 0;
    }

    /// Room for one more cell: a new train if the last is full. Returns its offset.
    #[inline]
    fn next_slot(&mut self) -> usize {
        if self.trains == 0 || self.in_train == self.max_cells {
            self.buf.push(TRAIN_MAGIC);
            self.trains += 1;
            self.in_train = 0;
        }
        self.in_train += 1;
        let at = self.buf.len();
        self.buf.resize(at + CELL_LEN, 0);
        at
    }

    /// Appends one whole cell.
    pub fn push_cell(&mut self, cell: &[u8; CELL_LEN]) {
        let at = self.next_slot();
        self.buf[at..at + CELL_LEN].copy_from_slice(cell);
    }

    /// Segments one VC frame into the cells of its AAL5 CPCS-PDU (I.363.5: SDU, pad,
    /// UU 0, CPI 0, Length, CRC-32) on UNI VPI/VCI of `header`, CLP from its `L` flag
    /// and EFCI from its `C` flag, and appends them. Data and signalling frames are
    /// AAL5; an OAM frame is one OAM cell (PTI 100 or 101 from its `C` bit,
    /// `wire::oam`) and an RM frame one PTI 110 cell (`wire::rm`), whose payload is the
    /// 48-octet SDU — another length has no cell form ([`SarError::OamFrame`]) — and
    /// an empty SDU is refused too.
    /// Returns the cells appended.
    pub fn push_frame(&mut self, header: &vcframe::Repr, sdu: &[u8]) -> Result<usize, SarError> {
        if let Some(pti) = header.single_cell_pti() {
            let payload: &[u8; PAYLOAD_LEN] = sdu.try_into().map_err(|_| SarError::OamFrame)?;
            let mut cell = [0u8; CELL_LEN];
            let h = HeaderRepr {
                clp: header.clp,
                ..HeaderRepr::uni(header.vpi, header.vci, pti)
            };
            cell[..HEADER_LEN].copy_from_slice(&h.to_bytes());
            cell[HEADER_LEN..].copy_from_slice(payload);
            self.push_cell(&cell);
            return Ok(1);
        }
        let cell_header = HeaderRepr {
            clp: header.clp,
            ..HeaderRepr::uni(header.vpi, header.vci, Pti::UserData)
        };
        let mut seg = Segmenter::new(sdu, cell_header)?;
        if header.ci {
            seg = seg.congested();
        }
        let n = seg.cell_count();
        self.buf.reserve(n * CELL_LEN + n / self.max_cells + 1);
        for _ in 0..n {
            let at = self.next_slot();
            let cell: &mut [u8; CELL_LEN] = (&mut self.buf[at..at + CELL_LEN])
                .try_into()
                .expect("next_slot made room for one cell");
            seg.next_cell(cell);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_frames_into_full_trains() {
        let mut p = TrainPacker::new(32).unwrap();
        // 86 cells (a 4 KiB TPDU) then 1 cell: 87 cells, trains of 32, 32, 23.
        assert_eq!(
            p.push_frame(&vcframe::Repr::data(0, 33), &[5u8; 4096]),
            Ok(86)
        );
        assert_eq!(p.push_frame(&vcframe::Repr::data(0, 34), b"ack"), Ok(1));
        assert_eq!(p.trains(), 3);
        let lens: Vec<usize> = p.datagrams().map(<[u8]>::len).collect();
        assert_eq!(lens, [train_len(32), train_len(32), train_len(23)]);
        for d in p.datagrams() {
            assert!(parse(d).is_ok());
        }
        assert_eq!(
            p.push_frame(
                &vcframe::Repr::new(vcframe::FrameKind::Oam, 0, 33),
                b"probe"
            ),
            Err(SarError::OamFrame)
        );
        assert_eq!(TrainPacker::new(0).err(), Some(SarError::TrainSize(0)));
        assert!(TrainPacker::new(MAX_TRAIN_CELLS + 1).is_err());
        p.clear();
        assert!(p.is_empty());
    }

    #[test]
    fn round_trip() {
        let mut out = Vec::new();
        start(&mut out);
        push(&mut out, &[7u8; CELL_LEN]);
        push(&mut out, &[9u8; CELL_LEN]);
        assert_eq!(cells(&out), 2);
        let got: Vec<&[u8]> = parse(&out).expect("a train").collect();
        assert_eq!(got, vec![&[7u8; CELL_LEN][..], &[9u8; CELL_LEN][..]]);
    }

    #[test]
    fn refuses() {
        assert_eq!(parse(&[]).err(), Some(TrainError::Length(0)));
        assert_eq!(parse(&[0xC0; 54]).err(), Some(TrainError::Magic(0xC0)));
        assert_eq!(parse(&[TRAIN_MAGIC]).err(), Some(TrainError::Length(1)));
        assert_eq!(
            parse(&[TRAIN_MAGIC; 55]).err(),
            Some(TrainError::Length(55))
        );
    }
}
