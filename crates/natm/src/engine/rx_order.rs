//! The order in which a receive batch's datagrams go to their PSBs: seed 003's two
//! receive queues (`natm_proto::transport::RxPriority`) — ACKs, NACKs and
//! retransmissions first, then data, SYNCs and the rest, each in arrival order.
//!
//! A batch is what one receive call brought: one GRO run in frame mode (a GSO run of
//! the peer's, where retransmissions and new DATA of one size travel together), or
//! the frames a cell train completed (ACKs and DATA of several VCs). A lone datagram
//! is taken as it is, without a second look at its header. Only data frames of VCs
//! that carry TPDUs are looked at: a bare AAL5 VC's SDUs (`transport=none`) have no
//! TPDU header, whatever their first octets look like, and keep their order, as do
//! OAM cells.

use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use natm_proto::transport::RxPriority;

use crate::adaptor::RecvBatch;
use natm_proto::wire::vcframe;

/// One datagram of a batch, in the order it is to be handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Next {
    pub(crate) from: SocketAddr,
    /// Where it is in the batch's area.
    pub(crate) span: Range<usize>,
    /// The kernel's receive stamp.
    pub(crate) stamp: Option<Duration>,
    /// A high-priority datagram handled before a normal one that came ahead of it.
    pub(crate) jumped: bool,
}

/// `batch`'s datagrams in the order their PSBs get them; `area` is the batch's
/// bytes (its own area, or the area it lent). `tpdus`: the connection's VCs carry
/// TPDUs (false for bare AAL5 VCs: arrival order, always).
pub(crate) fn in_priority_order<'a>(
    batch: &'a RecvBatch,
    area: &'a [u8],
    tpdus: bool,
) -> impl Iterator<Item = Next> + 'a {
    let two = tpdus && batch.len() > 1;
    let first = pass(batch, area, two.then_some(RxPriority::High));
    let second = two
        .then(|| pass(batch, area, Some(RxPriority::Normal)))
        .into_iter()
        .flatten();
    first.chain(second)
}

/// The datagrams of one priority (all of them for `None`), in arrival order.
fn pass<'a>(
    batch: &'a RecvBatch,
    area: &'a [u8],
    want: Option<RxPriority>,
) -> impl Iterator<Item = Next> + 'a {
    let mut normal_before = false;
    batch
        .stamped_spans()
        .filter_map(move |(from, span, stamp)| {
            let mut jumped = false;
            if let Some(want) = want {
                let p = area.get(span.clone()).map_or(RxPriority::Normal, priority);
                if p != want {
                    normal_before |= p == RxPriority::Normal;
                    return None;
                }
                jumped = p == RxPriority::High && normal_before;
            }
            Some(Next {
                from,
                span,
                stamp,
                jumped,
            })
        })
}

/// The queue of one datagram: a data frame's TPDU's, else normal (OAM, anything
/// that is not a natm frame).
fn priority(d: &[u8]) -> RxPriority {
    match vcframe::Repr::parse_bytes(d) {
        Ok((h, tpdu)) if h.kind == vcframe::FrameKind::Data => RxPriority::of_tpdu(tpdu),
        _ => RxPriority::Normal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use natm_proto::wire::tpdu::{Flags, Header, TpduType};

    fn datagram(ty: TpduType, flags: Flags, seq: u32) -> Vec<u8> {
        let h = Header {
            ty,
            flags,
            window: 0,
            cookie: 9,
            seq,
            ack: 0,
            msg: 0,
            tsval: 0,
            tsecr: 0,
            aux: 0,
        };
        let mut d = super::super::link::vc_header_on(0, 40).to_vec();
        d.extend_from_slice(&h.to_bytes());
        d
    }

    fn order(frames: &[Vec<u8>]) -> Vec<(u32, bool)> {
        order_of(frames, true)
    }

    fn order_of(frames: &[Vec<u8>], tpdus: bool) -> Vec<(u32, bool)> {
        let mut batch = RecvBatch::new(frames.len(), 256);
        let from: SocketAddr = ([127, 0, 0, 1], 9).into();
        for f in frames {
            assert!(batch.push(from, f));
        }
        let area = batch.area();
        in_priority_order(&batch, area, tpdus)
            .map(|n| {
                let (h, _) = Header::parse_bytes(&area[n.span][vcframe::HEADER_LEN..]).unwrap();
                (h.seq, n.jumped)
            })
            .collect()
    }

    #[test]
    fn acks_and_retransmissions_are_handled_before_the_data_ahead_of_them() {
        let none = Flags::default();
        let frames = [
            datagram(TpduType::Data, Flags::FIRST, 1),
            datagram(TpduType::Ack, none, 2),
            datagram(TpduType::Sync, none, 3),
            datagram(TpduType::Data, Flags::RETX | Flags::LAST, 4),
            datagram(TpduType::Data, none, 5),
        ];
        assert_eq!(
            order(&frames),
            [(2, true), (4, true), (1, false), (3, false), (5, false)]
        );
    }

    #[test]
    fn what_came_first_jumps_nothing_and_a_lone_datagram_is_taken_as_it_is() {
        let none = Flags::default();
        let frames = [
            datagram(TpduType::Ack, none, 1),
            datagram(TpduType::Data, Flags::RETX, 2),
            datagram(TpduType::Data, none, 3),
        ];
        assert_eq!(order(&frames), [(1, false), (2, false), (3, false)]);
        assert_eq!(order(&frames[2..]), [(3, false)]);
        // Not a TPDU at all (too short): kept in arrival order with the data.
        let frames = [vec![0u8; 3], datagram(TpduType::Ack, none, 7)];
        let mut batch = RecvBatch::new(2, 256);
        let from: SocketAddr = ([127, 0, 0, 1], 9).into();
        for f in &frames {
            assert!(batch.push(from, f));
        }
        let spans: Vec<_> = in_priority_order(&batch, batch.area(), true)
            .map(|n| (n.span.len(), n.jumped))
            .collect();
        assert_eq!(spans, [(36, true), (3, false)]);
    }

    #[test]
    fn a_bare_vcs_sdus_and_oam_cells_keep_their_order_whatever_they_hold() {
        let none = Flags::default();
        // SDUs of a bare AAL5 VC whose octets happen to read as an ACK or a RETX.
        let frames = [
            datagram(TpduType::Data, none, 1),
            datagram(TpduType::Ack, none, 2),
            datagram(TpduType::Data, Flags::RETX, 3),
        ];
        assert_eq!(
            order_of(&frames, false),
            [(1, false), (2, false), (3, false)]
        );
        // An OAM cell whose payload reads as an ACK stays where it came.
        let mut oam = vcframe::Repr::new(vcframe::FrameKind::Oam, 0, 40)
            .to_bytes()
            .to_vec();
        oam.extend_from_slice(&frames[1][vcframe::HEADER_LEN..]);
        let frames = [datagram(TpduType::Data, none, 1), oam];
        assert_eq!(order_of(&frames, true), [(1, false), (2, false)]);
    }
}
