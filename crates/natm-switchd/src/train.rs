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

use natm_proto::wire::cell::CELL_LEN;

/// The first octet of a cell train.
pub const TRAIN_MAGIC: u8 = 0xD1;
/// The most cells in one train: 1,236 cells fit a 65,507-octet UDP payload.
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

#[cfg(test)]
mod tests {
    use super::*;

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
