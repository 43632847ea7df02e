//! Receive-side priority (seed 003, "Protocol Design Decisions for A1"): "ACKs, NACKs
//! and retransmitted packets are placed on a high priority queue and are processed
//! first. Data packets and SYNCs packet are queued on the other queue and are
//! processed after the packets in the high priority queue have been dealt with."
//!
//! natm's receive queue is one batch of datagrams from one receive call; its owner
//! hands a batch's [`RxPriority::High`] TPDUs to their PSBs first, then the
//! [`RxPriority::Normal`] ones, each group in arrival order. An ACK (SMART's ACK is
//! also its NACK: the hole it names is retransmitted at once) then frees the
//! sender's buffer and opens its window before the data that came in the same batch
//! is copied, and a retransmission fills its hole before the TPDUs behind it are
//! held out of order. The classification reads two header octets and nothing else:
//! the header of a sealed TPDU is its associated data, clear on the wire, so the
//! order is chosen before any decryption.

use crate::wire::tpdu::{Flags, TpduType, HEADER_LEN};

/// Which of seed 003's two receive queues a TPDU belongs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxPriority {
    /// An ACK (NACK), or a DATA TPDU flagged as a retransmission.
    High,
    /// Everything else: new data, SYNCs, the handshake, CLOSE, anything that is not
    /// a TPDU (those are refused later, in arrival order).
    Normal,
}

impl RxPriority {
    /// The queue of a TPDU, from its first two octets (`ver|type`, `flags`).
    pub fn of_tpdu(tpdu: &[u8]) -> RxPriority {
        if tpdu.len() < HEADER_LEN {
            return RxPriority::Normal;
        }
        let ty = tpdu[0] & 0x0f;
        let flags = tpdu[1];
        if ty == TpduType::Ack.nibble()
            || (ty == TpduType::Data.nibble() && flags & Flags::RETX.bits() != 0)
        {
            RxPriority::High
        } else {
            RxPriority::Normal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tpdu::Header;

    fn tpdu(ty: TpduType, flags: Flags) -> Vec<u8> {
        Header {
            ty,
            flags,
            window: 0,
            cookie: 7,
            seq: 1,
            ack: 0,
            msg: 0,
            tsval: 0,
            tsecr: 0,
            aux: 0,
        }
        .to_bytes()
        .to_vec()
    }

    #[test]
    fn acks_and_retransmissions_go_first_and_the_rest_after() {
        assert_eq!(
            RxPriority::of_tpdu(&tpdu(TpduType::Ack, Flags::default())),
            RxPriority::High
        );
        assert_eq!(
            RxPriority::of_tpdu(&tpdu(TpduType::Ack, Flags::WINDOW_FULL)),
            RxPriority::High
        );
        assert_eq!(
            RxPriority::of_tpdu(&tpdu(TpduType::Data, Flags::RETX | Flags::FIRST)),
            RxPriority::High
        );
        for (ty, f) in [
            (TpduType::Data, Flags::FIRST | Flags::LAST),
            (TpduType::Sync, Flags::default()),
            (TpduType::SyncEcho, Flags::default()),
            (TpduType::ConnRequest, Flags::default()),
            (TpduType::Close, Flags::default()),
            // RETX means nothing on a SYNC: not a retransmitted packet.
            (TpduType::Sync, Flags::RETX),
        ] {
            assert_eq!(
                RxPriority::of_tpdu(&tpdu(ty, f)),
                RxPriority::Normal,
                "{ty}"
            );
        }
        // Too short to be a TPDU: left in arrival order, for the PSB to refuse.
        assert_eq!(RxPriority::of_tpdu(&[0x11, 0]), RxPriority::Normal);
        assert_eq!(RxPriority::of_tpdu(&[]), RxPriority::Normal);
    }
}
