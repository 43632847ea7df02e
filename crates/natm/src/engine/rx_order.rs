//! The order in which a receive batch's datagrams go to their PSBs: seed 003's two
//! receive queues (`natm_proto::transport::RxPriority`) — ACKs, NACKs and
//! retransmissions first, then data, SYNCs and the rest, each in arrival order.
//!
//! A batch is what one receive call brought: one GRO run in frame mode (a GSO run of
//! the peer's, where retransmissions and new DATA of one size travel together), or
//! the frames a cell train completed (ACKs and DATA of several VCs). A lone datagram
//! is taken as it is, without a second look at its header.

use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use natm_proto::transport::RxPriority;

use super::link::VC_HEADER_LEN;
use crate::adaptor::RecvBatch;

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
/// bytes (its own area, or the area it lent).
pub(crate) fn in_priority_order<'a>(
    batch: &'a RecvBatch,
    area: &'a [u8],
) -> impl Iterator<Item = Next> + 'a {
    let two = batch.len() > 1;
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
                let tpdu = area.get(span.clone()).and_then(|d| d.get(VC_HEADER_LEN..));
                let p = RxPriority::of_tpdu(tpdu.unwrap_or_default());
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
        let mut batch = RecvBatch::new(frames.len(), 256);
        let from: SocketAddr = ([127, 0, 0, 1], 9).into();
        for f in frames {
            assert!(batch.push(from, f));
        }
        let area = batch.area();
        in_priority_order(&batch, area)
            .map(|n| {
                let (h, _) = Header::parse_bytes(&area[n.span][VC_HEADER_LEN..]).unwrap();
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
        let spans: Vec<_> = in_priority_order(&batch, batch.area())
            .map(|n| (n.span.len(), n.jumped))
            .collect();
        assert_eq!(spans, [(36, true), (3, false)]);
    }
}
