//! Fuzzes what a UDP link makes of cell trains (issue 30: a frame-mode link takes
//! trains among its frames when its peer resends a frame that no longer fits the
//! path): datagrams through `train::parse`, their cells through one
//! `sar::CellReassembly` with a frame link's tight limits, across two peers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::cell::{HeaderFormat, CELL_LEN};
use natm_proto::wire::sar::{CellReassembly, ReassemblyLimits};
use natm_proto::wire::{train, vcframe};
use std::time::Duration;

const MAX_VCS: usize = 4;
const MAX_SDU: usize = 4_096;

fuzz_target!(|data: &[u8]| {
    let mut sar = CellReassembly::new(
        HeaderFormat::Uni,
        ReassemblyLimits {
            max_sdu: MAX_SDU,
            max_vcs: MAX_VCS,
            timeout: Some(Duration::from_millis(50)),
        },
    );
    // Records: a peer and time-step octet, a 2-octet length, the datagram.
    let mut rest = data;
    let mut now = Duration::ZERO;
    while let [step, a, b, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*a, *b])).min(tail.len());
        let (datagram, next) = tail.split_at(len);
        rest = next;
        let peer = step & 1;
        now += Duration::from_millis(u64::from(step >> 1));
        let Ok(cells) = train::parse(datagram) else {
            assert!(
                datagram.first() != Some(&train::TRAIN_MAGIC)
                    || datagram.len() % CELL_LEN != 1
                    || datagram.len() == 1
            );
            continue;
        };
        assert_eq!(datagram.len() % CELL_LEN, 1);
        for c in cells {
            let mut cell: [u8; CELL_LEN] = c.try_into().expect("whole cells");
            if let Ok(Some(f)) = sar.push(now, peer, &mut cell) {
                assert!(f.sdu.len() <= MAX_SDU.max(CELL_LEN));
                if let Some(h) = f.vc_header() {
                    let frame = [&h.to_bytes()[..], f.sdu].concat();
                    let (back, sdu) = vcframe::Repr::parse_bytes(&frame).expect("a frame");
                    assert_eq!((back, sdu), (h, f.sdu));
                }
            }
            assert!(sar.vcs() <= MAX_VCS, "reassembly state unbounded");
            assert!(
                sar.buffered_cells() <= MAX_VCS * MAX_SDU.div_ceil(48) + MAX_VCS,
                "partial frames unbounded"
            );
        }
    }
});
