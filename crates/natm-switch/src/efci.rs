//! Explicit forward congestion indication at an output port (I.371 §2.2, TM 4.0
//! §5.10.6 and §5.10.4's destination rule 2: the ABR destination sets CI in the
//! backward RM cell when the VC's last data cell came with EFCI).
//!
//! A data cell or frame that finds more than the port's `efci_threshold` cells
//! queued (`PortConfig::efci_threshold`, half the buffer by default: above the
//! queue's usual depth, below EPD's three quarters) leaves with its PTI's middle bit
//! (a frame's `C` bit) set. Only user data: never OAM, RM or signalling (VCI 5).
//! Every VC's data is marked, not only ABR VCs' (EFCI is a network element's signal
//! to whoever reads it; natm's non-ABR receivers ignore it).

use natm_proto::wire::cell::{Pti, CELL_LEN, VCI_SIGNALLING};
use natm_proto::wire::crc::hec;

/// Whether a cell of PTI `pti` on input VCI `vci` (output VCI `out_vci`) is data
/// EFCI may mark.
#[inline]
pub(crate) fn is_data(pti: Pti, vci: u16, out_vci: Option<u16>) -> bool {
    pti.is_user_data() && vci != VCI_SIGNALLING && out_vci != Some(VCI_SIGNALLING)
}

/// Sets EFCI in a user-data cell's header and recomputes the HEC; false, and nothing
/// changed, if it was set already or the cell is not user data.
#[inline]
pub(crate) fn mark_cell(cell: &mut [u8; CELL_LEN]) -> bool {
    let pti = Pti::from_bits(cell[3] >> 1);
    let marked = pti.with_congestion();
    if marked == pti {
        return false;
    }
    cell[3] = (cell[3] & !0b1110) | (marked.bits() << 1);
    cell[4] = hec(&[cell[0], cell[1], cell[2], cell[3]]);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use natm_proto::wire::cell::HeaderRepr;

    #[test]
    fn marks_user_data_only_and_keeps_the_header_valid() {
        for pti in 0..8u8 {
            let pti = Pti::from_bits(pti);
            let mut c = [0u8; CELL_LEN];
            c[..5].copy_from_slice(&HeaderRepr::uni(3, 77, pti).to_bytes());
            let before = c;
            let changed = mark_cell(&mut c);
            let want = pti.is_user_data() && !pti.congestion_experienced();
            assert_eq!(changed, want, "{pti:?}");
            if want {
                assert_eq!(
                    c[..5],
                    HeaderRepr::uni(3, 77, pti.with_congestion()).to_bytes()
                );
            } else {
                assert_eq!(c, before);
            }
        }
        assert!(!is_data(Pti::UserData, VCI_SIGNALLING, None));
        assert!(!is_data(Pti::ResourceManagement, 40, Some(41)));
        assert!(is_data(Pti::UserDataEnd, 40, Some(41)));
    }
}
