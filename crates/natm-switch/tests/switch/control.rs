//! What the control plane gets from the data plane: its own VCs (signalling on VPI
//! 0/VCI 5) terminated in the switch, and a way to send out of a port.

use crate::common::*;
use bytes::Bytes;
use natm_proto::time::Instant;
use natm_proto::wire::cell::Pti;
use natm_proto::wire::vcframe::{self, FrameKind};
use natm_switch::{
    Contract, CrossConnect, DropCause, Endpoint, PortConfig, Switch, SwitchError, Transmit, VcAddr,
    Verdict,
};

const OC3: u64 = 155_520_000;

#[test]
fn signalling_vcs_terminate_in_the_switch() {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(OC3)).unwrap();
    let b = sw.add_port(PortConfig::new(OC3)).unwrap();
    let sig_a = VcAddr::new(a, 0, 5);
    sw.terminate(sig_a).unwrap();
    assert_eq!(
        sw.terminate(sig_a),
        Err(SwitchError::EntryExists(Endpoint::Vc(sig_a)))
    );
    assert_eq!(
        sw.connect(
            CrossConnect::vc(sig_a, VcAddr::new(b, 0, 40)),
            Contract::best_effort()
        ),
        Err(SwitchError::EntryExists(Endpoint::Vc(sig_a)))
    );
    // A cell with a single-bit header error: corrected, then kept for the control
    // plane with its header as sent.
    let sent = cell(0, 5, Pti::UserDataEnd, 0x11);
    let mut errored = sent;
    errored[2] ^= 0x01;
    assert_eq!(
        sw.handle_cell(Instant::ZERO, a, errored),
        Ok(Verdict::Local)
    );
    assert_eq!(sw.poll_local(), Some((a, Transmit::Cell(sent))));
    // Frame mode: a signalling frame.
    let h = vcframe::Repr::new(FrameKind::Signalling, 0, 5);
    let sdu = Bytes::from_static(b"SETUP");
    assert_eq!(
        sw.handle_frame(Instant::ZERO, a, h, sdu.clone()),
        Ok(Verdict::Local)
    );
    assert_eq!(
        sw.poll_local(),
        Some((a, Transmit::Frame { header: h, sdu }))
    );
    assert_eq!(sw.poll_local(), None);
    // Not terminated on port b.
    assert_eq!(
        sw.handle_cell(Instant::ZERO, b, cell(0, 5, Pti::UserData, 0)),
        Ok(Verdict::Dropped(DropCause::UnknownVc))
    );
    sw.unterminate(sig_a).unwrap();
    assert_eq!(
        sw.unterminate(sig_a),
        Err(SwitchError::NotLocal(Endpoint::Vc(sig_a)))
    );
    let s = sw.port_stats(a).unwrap();
    assert_eq!((s.local_in, s.counters.cells_in), (2, 2));
}

#[test]
fn the_control_plane_sends_ahead_of_the_vcs_at_line_rate() {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(OC3)).unwrap();
    let b = sw.add_port(PortConfig::new(42_400_000)).unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 1, 40)),
        Contract::best_effort(),
    )
    .unwrap();
    for k in 0..3 {
        sw.handle_cell(Instant::ZERO, a, cell(1, 32, Pti::UserData, k))
            .unwrap();
    }
    let frame = Transmit::Frame {
        header: vcframe::Repr::new(FrameKind::Signalling, 0, 5),
        sdu: Bytes::from(vec![0u8; 100]),
    };
    sw.send(b, frame.clone()).unwrap();
    let mut h = Harness::new(sw);
    h.drain();
    let out = &h.out[b.index()];
    assert_eq!(out.len(), 4);
    assert_eq!(out[0].1, frame);
    // 100 octets are 3 cells at 10 µs each: the first VC cell leaves at 30 µs.
    assert_eq!(out[1].0, at_us(30));
    assert_eq!(h.sw.port_stats(b).unwrap().local_out, 1);
}
