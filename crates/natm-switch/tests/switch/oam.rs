//! OAM F5 loopback (I.610) through the switch, on cell and frame ports alike, and the
//! counter snapshot.

use crate::common::*;
use bytes::Bytes;
use natm_proto::time::Instant;
use natm_proto::wire::cell::{HeaderRepr, Pti, CELL_LEN};
use natm_proto::wire::crc::{crc10_field, crc10_oam as crc10};
use natm_proto::wire::oam::Loopback;
use natm_switch::oam::{loopback_payload, Scope, END_POINT};
use natm_switch::{
    Contract, CrossConnect, DropCause, PortConfig, PortId, Switch, Transmit, VcAddr, Verdict,
};

const OC3: u64 = 155_520_000;

fn oam_cell(vpi: u8, vci: u16, pti: Pti, location: &[u8; 16]) -> [u8; CELL_LEN] {
    let mut c = [0u8; CELL_LEN];
    c[..5].copy_from_slice(&HeaderRepr::uni(vpi, vci, pti).to_bytes());
    c[5..].copy_from_slice(&loopback_payload(0xC0FF_EE00, location));
    c
}

fn switch() -> (Switch, PortId, PortId) {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(OC3)).unwrap();
    let b = sw.add_port(PortConfig::new(OC3)).unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
        Contract::best_effort(),
    )
    .unwrap();
    (sw, a, b)
}

#[test]
fn segment_loopback_is_answered_on_the_same_vc_out_of_the_input_port() {
    {
        let pti = Pti::SegmentOamF5;
        let (mut sw, a, b) = switch();
        let ping = oam_cell(1, 32, pti, &END_POINT);
        assert_eq!(
            sw.handle_cell(Instant::ZERO, a, ping),
            Ok(Verdict::LoopedBack)
        );
        assert_eq!(sw.poll_transmit(Instant::ZERO, b), None, "not switched on");
        let Some(Transmit::Cell(pong)) = sw.poll_transmit(Instant::ZERO, a) else {
            panic!("the answer leaves the port the ping came in on")
        };
        assert_eq!(&pong[..5], &ping[..5], "same VC, same PTI");
        let payload: &[u8; 48] = pong[5..].try_into().unwrap();
        assert_eq!(payload[1], 0, "loopback indication cleared");
        assert_eq!(crc10(payload), crc10_field(payload));
        assert_eq!(
            &pong[7..11],
            &0xC0FF_EE00u32.to_be_bytes(),
            "correlation tag kept"
        );
        let s = sw.port_stats(a).unwrap();
        assert_eq!((s.oam_looped, s.counters.cells_out), (1, 1));
    }
}

#[test]
fn end_to_end_loopback_travels_along_the_vc_for_the_far_end() {
    let (mut sw, a, b) = switch();
    let ping = oam_cell(1, 32, Pti::EndToEndOamF5, &END_POINT);
    assert_eq!(sw.handle_cell(Instant::ZERO, a, ping), Ok(Verdict::Queued));
    assert_eq!(
        sw.poll_transmit(Instant::ZERO, a),
        None,
        "not answered here"
    );
    let Some(Transmit::Cell(c)) = sw.poll_transmit(Instant::ZERO, b) else {
        panic!("switched on towards the far end")
    };
    assert_eq!((vpi_of(&c), vci_of(&c)), (2, 40));
    assert_eq!(&c[5..], &ping[5..], "payload untouched");
    let v = &sw.stat().vcs[0];
    assert_eq!((v.oam_looped, v.oam_forwarded), (0, 1));
}

/// A switch with two frame-mode ports and a PVC 0/32 ↔ 0/40 both ways.
fn frame_switch() -> (Switch, PortId, PortId) {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(OC3)).unwrap();
    let b = sw.add_port(PortConfig::new(OC3)).unwrap();
    let (x, y) = (VcAddr::new(a, 0, 32), VcAddr::new(b, 0, 40));
    for xc in [CrossConnect::vc(x, y), CrossConnect::vc(y, x)] {
        sw.connect(xc, Contract::best_effort()).unwrap();
    }
    (sw, a, b)
}

#[test]
fn oam_frames_are_looped_and_switched_as_cells_are() {
    let (mut sw, a, b) = frame_switch();
    let t = Instant::ZERO;
    let probe = Bytes::copy_from_slice(&Loopback::request(7).to_bytes());
    // Segment: answered by this switch, out of the port it came in on, same VC.
    let seg = Scope::Segment.frame_header(0, 32);
    assert_eq!(
        sw.handle_frame(t, a, seg, probe.clone()),
        Ok(Verdict::LoopedBack)
    );
    assert_eq!(sw.poll_transmit(t, b), None);
    let Some(Transmit::Frame { header, sdu }) = sw.poll_transmit(t, a) else {
        panic!("the answer leaves the input port")
    };
    assert_eq!(header, seg);
    let answer = Loopback::parse(&sdu).unwrap();
    assert_eq!((answer.request, answer.tag), (false, 7));
    // End to end: switched on, translated; the far end's answer comes back the same way.
    let e2e = Scope::EndToEnd.frame_header(0, 32);
    let t = t + std::time::Duration::from_millis(1);
    assert_eq!(
        sw.handle_frame(t, a, e2e, probe.clone()),
        Ok(Verdict::Queued)
    );
    let Some(Transmit::Frame { header, sdu }) = sw.poll_transmit(t, b) else {
        panic!("switched on")
    };
    assert_eq!(header, Scope::EndToEnd.frame_header(0, 40));
    assert_eq!(sdu, probe);
    let back = Bytes::copy_from_slice(&natm_proto::wire::oam::answer(
        probe[..].try_into().unwrap(),
    ));
    assert_eq!(
        sw.handle_frame(t, b, header, back.clone()),
        Ok(Verdict::Queued)
    );
    let t = t + std::time::Duration::from_millis(1);
    let Some(Transmit::Frame { header, sdu }) = sw.poll_transmit(t, a) else {
        panic!("the answer comes back along the VC")
    };
    assert_eq!((header, sdu), (e2e, back));
    // One cell each on the line, and the per-VC counts say what happened.
    let s = sw.stat();
    let fwd = s.vcs.iter().map(|v| (v.oam_looped, v.oam_forwarded));
    assert_eq!(fwd.collect::<Vec<_>>(), vec![(1, 1), (0, 1)]);
    assert_eq!(s.ports[a.index()].counters.cells_in, 2);
}

#[test]
fn the_answer_goes_ahead_of_queued_cells() {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(OC3)).unwrap();
    let b = sw.add_port(PortConfig::new(OC3)).unwrap();
    // A duplex call: b → a carries user cells back towards the pinging host.
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
        Contract::best_effort(),
    )
    .unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(b, 2, 40), VcAddr::new(a, 1, 32)),
        Contract::best_effort(),
    )
    .unwrap();
    for k in 0..5 {
        sw.handle_cell(Instant::ZERO, b, cell(2, 40, Pti::UserData, k))
            .unwrap();
    }
    sw.handle_cell(
        Instant::ZERO,
        a,
        oam_cell(1, 32, Pti::SegmentOamF5, &END_POINT),
    )
    .unwrap();
    let mut h = Harness::new(sw);
    h.drain();
    let cells = h.cells(a);
    assert_eq!(cells.len(), 6);
    assert_eq!(Pti::from_bits(cells[0][3] >> 1), Pti::SegmentOamF5);
}

#[test]
fn other_oam_cells_follow_the_vc_and_unknown_vcs_are_not_answered() {
    let (mut sw, a, b) = switch();
    sw.set_location([0x42; 16]);
    let t = Instant::ZERO;
    // For another location: switched along the VC, translated.
    let elsewhere = oam_cell(1, 32, Pti::SegmentOamF5, &[0x99; 16]);
    assert_eq!(sw.handle_cell(t, a, elsewhere), Ok(Verdict::Queued));
    let Some(Transmit::Cell(c)) = sw.poll_transmit(t, b) else {
        panic!("forwarded")
    };
    assert_eq!((vpi_of(&c), vci_of(&c)), (2, 40));
    assert_eq!(&c[5..], &elsewhere[5..]);
    // For this switch's own location ID: answered.
    assert_eq!(
        sw.handle_cell(t, a, oam_cell(1, 32, Pti::SegmentOamF5, &[0x42; 16])),
        Ok(Verdict::LoopedBack)
    );
    // On a VC the switch does not know: dropped as any cell would be.
    assert_eq!(
        sw.handle_cell(t, a, oam_cell(1, 99, Pti::EndToEndOamF5, &END_POINT)),
        Ok(Verdict::Dropped(DropCause::UnknownVc))
    );
}

#[test]
fn the_snapshot_accounts_for_every_cell() {
    // Overload a small port from two VCs; in = out + dropped + still queued, per VC
    // and per port.
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(OC3)).unwrap();
    let b = sw.add_port(PortConfig::new(42_400_000).buffer(64)).unwrap();
    for vci in [32u16, 33] {
        sw.connect(
            CrossConnect::vc(VcAddr::new(a, 1, vci), VcAddr::new(b, 1, vci + 8)),
            Contract::best_effort().with_buffer(48),
        )
        .unwrap();
    }
    let mut h = Harness::new(sw);
    for vci in [32u16, 33] {
        h.feed(aal5_cells(
            a,
            1,
            vci,
            Instant::ZERO,
            std::time::Duration::from_micros(7),
            300,
            400,
        ));
    }
    h.run_until(secs(0.02));
    let stat = h.sw.stat();
    let mut queued = 0;
    for v in &stat.vcs {
        let c = &v.counters;
        assert_eq!(
            c.cells_in,
            c.cells_out + c.dropped.total() + u64::from(v.queue_cells)
        );
        assert!(v.max_queue_cells <= 48);
        queued += v.queue_cells;
    }
    let out = &stat.ports[b.index()];
    assert_eq!(out.queue_cells, queued);
    assert!(out.max_queue_cells <= 64);
    let cells_in: u64 = stat.vcs.iter().map(|v| v.counters.cells_in).sum();
    assert_eq!(cells_in, stat.ports[a.index()].counters.cells_in);
    assert_eq!(
        cells_in,
        out.counters.cells_out + out.counters.dropped.total() + u64::from(out.queue_cells)
    );
    assert!(out.counters.dropped.epd + out.counters.dropped.ppd > 0);
}
