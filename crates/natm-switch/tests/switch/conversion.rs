//! Conversion between a frame port and a cell port (issue 13), in virtual time:
//! frames in on a frame port leave a cell port as the right AAL5 cells, cells in on a
//! cell port leave a frame port as the frames they carry, a lost cell costs exactly
//! one frame, EPD/PPD still act on the cell side, and a stale partial frame is
//! dropped at the reassembly timeout.

use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use natm_proto::time::Instant;
use natm_proto::wire::aal5::{segment, Segmenter};
use natm_proto::wire::cell::{HeaderRepr, Pti, CELL_LEN};
use natm_proto::wire::oam::Scope;
use natm_proto::wire::vcframe::{self, FrameKind};
use natm_switch::{
    Contract, CrossConnect, PortConfig, PortId, PortUnit, SchedulerKind, Switch, SwitchError,
    Transmit, VcAddr, VpAddr,
};

const LINE: u64 = 155_520_000;

/// A switch with a frame port 0 and a cell port 1, and a duplex PVC between them:
/// 0:0.40 ↔ 1:1.50.
fn frame_and_cell() -> (Switch, PortId, PortId) {
    let mut sw = Switch::new();
    let f = sw
        .add_port(PortConfig::new(LINE).unit(PortUnit::Frames))
        .unwrap();
    let c = sw
        .add_port(PortConfig::new(LINE).unit(PortUnit::Cells))
        .unwrap();
    let (a, b) = (VcAddr::new(f, 0, 40), VcAddr::new(c, 1, 50));
    for xc in [CrossConnect::vc(a, b), CrossConnect::vc(b, a)] {
        sw.connect(xc, Contract::best_effort()).unwrap();
    }
    (sw, f, c)
}

fn frames_out(h: &Harness, port: PortId) -> Vec<(vcframe::Repr, Bytes)> {
    h.out[port.index()]
        .iter()
        .filter_map(|(_, u)| match u {
            Transmit::Frame { header, sdu } => Some((*header, sdu.clone())),
            Transmit::Cell(_) => None,
        })
        .collect()
}

#[test]
fn a_frame_leaves_a_cell_port_as_its_aal5_cells() {
    let (sw, f, c) = frame_and_cell();
    let mut h = Harness::new(sw);
    let data = sdu(40, 7, 1000);
    let header = vcframe::Repr {
        ci: true,
        clp: true,
        ..vcframe::Repr::data(0, 40)
    };
    h.feed([(
        Instant::ZERO,
        f,
        Input::Frame(header, Bytes::from(data.clone())),
    )]);
    h.drain();
    let got = h.cells(c);
    let want: Vec<[u8; CELL_LEN]> = Segmenter::new(
        &data,
        HeaderRepr {
            clp: true,
            ..HeaderRepr::uni(1, 50, Pti::UserData)
        },
    )
    .unwrap()
    .congested()
    .collect();
    assert_eq!(got.len(), 21);
    assert_eq!(got, want);
    let st = h.sw.port_stats(c).unwrap();
    assert_eq!((st.counters.cells_out, st.counters.frames_out), (21, 1));
    assert_eq!(h.sw.port_stats(f).unwrap().counters.frames_in, 1);
}

#[test]
fn cells_leave_a_frame_port_as_their_frames() {
    let (sw, f, c) = frame_and_cell();
    let mut h = Harness::new(sw);
    h.feed(aal5_cells(
        c,
        1,
        50,
        Instant::ZERO,
        Duration::from_micros(3),
        5,
        3000,
    ));
    h.drain();
    let got = frames_out(&h, f);
    assert_eq!(got.len(), 5);
    for (seq, (header, body)) in got.iter().enumerate() {
        assert_eq!(*header, vcframe::Repr::data(0, 40));
        assert_eq!(&body[..], &sdu(50, seq as u32, 3000)[..]);
    }
    let st = h.sw.port_stats(f).unwrap();
    // A frame counts its AAL5 cells: 3000 octets take 63.
    assert_eq!((st.counters.frames_out, st.counters.cells_out), (5, 5 * 63));
    assert_eq!(h.sw.port_stats(c).unwrap().counters.cells_in, 5 * 63);
}

#[test]
fn a_lost_cell_drops_exactly_one_reassembled_frame() {
    let (sw, f, c) = frame_and_cell();
    let mut h = Harness::new(sw);
    let mut cells = aal5_cells(c, 1, 50, Instant::ZERO, Duration::from_micros(3), 4, 500);
    // 500 octets: 11 cells a frame; lose the 3rd cell of frame 1.
    cells.remove(11 + 2);
    h.feed(cells);
    h.drain();
    let seqs: Vec<u32> = frames_out(&h, f)
        .iter()
        .map(|(_, s)| u32::from_be_bytes(s[..4].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, [0, 2, 3]);
    let d = h.sw.port_stats(f).unwrap().counters.dropped;
    assert_eq!(d.reassembly, 10, "the broken frame's 10 cells that arrived");
    assert_eq!(d.total(), 10);
}

#[test]
fn oam_and_signalling_kinds_map_both_ways() {
    let (sw, f, c) = frame_and_cell();
    let mut h = Harness::new(sw);
    // Not loopback requests: switched along the VC, whatever their flow.
    let probe = Bytes::from(vec![0x6A; 48]);
    let oam = Scope::EndToEnd.frame_header(0, 40);
    let segment = Scope::Segment.frame_header(0, 40);
    assert_eq!(oam.kind, FrameKind::Oam);
    h.feed([
        (Instant::ZERO, f, Input::Frame(oam, probe.clone())),
        (at_us(3), f, Input::Frame(segment, probe.clone())),
        // No cell form: an empty frame and an OAM frame that is not one payload.
        (
            at_us(1),
            f,
            Input::Frame(vcframe::Repr::data(0, 40), Bytes::new()),
        ),
        (at_us(2), f, Input::Frame(oam, Bytes::from_static(b"short"))),
    ]);
    h.drain();
    let cells = h.cells(c);
    assert_eq!(cells.len(), 2, "one OAM frame is one OAM cell");
    assert_eq!(
        &cells[0][..5],
        &HeaderRepr::uni(1, 50, Pti::EndToEndOamF5).to_bytes()
    );
    assert_eq!(
        &cells[1][..5],
        &HeaderRepr::uni(1, 50, Pti::SegmentOamF5).to_bytes(),
        "the C bit of an OAM frame is the PTI's last bit"
    );
    assert_eq!(&cells[0][5..], &probe[..]);
    assert_eq!(
        h.sw.port_stats(f).unwrap().counters.dropped.unconvertible,
        2
    );
    // And back: an F5 cell that is not a loopback for the switch becomes an OAM frame.
    let mut h2 = Harness::new(frame_and_cell().0);
    h2.feed([
        (Instant::ZERO, c, Input::Cell(cells[0])),
        (at_us(1), c, Input::Cell(cells[1])),
    ]);
    h2.drain();
    assert_eq!(
        frames_out(&h2, f),
        vec![(oam, probe.clone()), (segment, probe)],
        "the 48-octet payload is the SDU, the flow the C bit"
    );
    let vc = h2
        .sw
        .stat()
        .vcs
        .into_iter()
        .find(|v| v.counters.cells_in > 0);
    assert_eq!(vc.map(|v| (v.oam_forwarded, v.oam_looped)), Some((2, 0)));
}

#[test]
fn a_padded_path_mtu_probe_leaves_a_cell_port_as_its_one_cell() {
    // A host's RFC 8899 probe: an OAM request padded with zeros to the size probed.
    // Cells have no MTU to probe: the probe goes on as its cell, not dropped as
    // unconvertible; padding that is not zeros is not a probe, and is.
    let (sw, f, c) = frame_and_cell();
    let mut h = Harness::new(sw);
    let oam = Scope::EndToEnd.frame_header(0, 40);
    let cell = vec![0x6A; 48];
    let mut padded = cell.clone();
    padded.resize(4_000, 0);
    let mut dirty = padded.clone();
    dirty[3_000] = 1;
    h.feed([
        (Instant::ZERO, f, Input::Frame(oam, Bytes::from(padded))),
        (at_us(1), f, Input::Frame(oam, Bytes::from(dirty))),
    ]);
    h.drain();
    let cells = h.cells(c);
    assert_eq!(cells.len(), 1, "the probe is one OAM cell");
    assert_eq!(
        &cells[0][..5],
        &HeaderRepr::uni(1, 50, Pti::EndToEndOamF5).to_bytes()
    );
    assert_eq!(&cells[0][5..], &cell[..]);
    // Drops count cells: the dirty frame's 84 (4,000 octets of AAL5).
    assert_eq!(
        h.sw.port_stats(f).unwrap().counters.dropped.unconvertible,
        84
    );
}

#[test]
fn epd_and_ppd_act_on_the_cell_side_of_a_conversion() {
    // Two cell-port VCs at 1.5× a slow frame port each: the frame port's queue fills,
    // EPD refuses whole frames at their first cell, and every frame that leaves is
    // whole (the reassembly never sees a frame with a hole).
    let mut sw = Switch::new();
    let slow = 4_240_000; // 10,000 cells/s
    let inp = sw
        .add_port(PortConfig::new(LINE).unit(PortUnit::Cells))
        .unwrap();
    let out = sw
        .add_port(PortConfig::new(slow).unit(PortUnit::Frames).buffer(200))
        .unwrap();
    for vc in 0..2u16 {
        sw.connect(
            CrossConnect::vc(VcAddr::new(inp, 1, 50 + vc), VcAddr::new(out, 0, 40 + vc)),
            Contract::best_effort().with_buffer(200),
        )
        .unwrap();
    }
    let mut h = Harness::new(sw);
    for vc in 0..2u16 {
        // 20-cell frames, a cell every 66 µs: 15,000 cells/s per VC.
        h.feed(aal5_cells(
            inp,
            1,
            50 + vc,
            Instant::ZERO,
            Duration::from_micros(66),
            300,
            952,
        ));
    }
    h.drain();
    let got = frames_out(&h, out);
    for (header, body) in &got {
        let seq = u32::from_be_bytes(body[..4].try_into().unwrap());
        let vci = u16::from_be_bytes(body[4..6].try_into().unwrap());
        assert_eq!(header.vci, vci - 10);
        assert_eq!(&body[..], &sdu(vci, seq, 952)[..]);
    }
    let d = h.sw.port_stats(out).unwrap().counters.dropped;
    assert!(d.epd > 0, "EPD refused frames: {d:?}");
    assert_eq!(d.epd % 20, 0, "whole frames: {d:?}");
    assert_eq!(
        (d.reassembly, d.ppd),
        (0, 0),
        "no frame reached reassembly with a hole, none was cut short"
    );
    let delivered = got.len() as u64;
    assert_eq!(
        delivered * 20 + d.total(),
        2 * 300 * 20,
        "every cell accounted for"
    );

    // PPD: policing drops a cell mid-frame; the rest of that frame (its last cell
    // too, which PPD keeps for a cell port) is dropped, and the next frame is whole.
    let mut sw = Switch::new();
    let inp = sw
        .add_port(PortConfig::new(LINE).unit(PortUnit::Cells))
        .unwrap();
    let out = sw
        .add_port(PortConfig::new(LINE).unit(PortUnit::Frames))
        .unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(inp, 1, 50), VcAddr::new(out, 0, 40)),
        // 10,000 cells/s peak, no tolerance: cells 3 µs apart violate it.
        Contract::cbr(10_000).with_cdvt(Duration::ZERO),
    )
    .unwrap();
    let mut h = Harness::new(sw);
    let mut cells = aal5_cells(
        inp,
        1,
        50,
        Instant::ZERO,
        Duration::from_micros(100),
        3,
        500,
    );
    // Frame 1's 5th cell arrives right after its 4th: non-conforming, discarded.
    let t = cells[11 + 3].0 + Duration::from_micros(1);
    cells[11 + 4].0 = t;
    h.feed(cells);
    h.drain();
    let seqs: Vec<u32> = frames_out(&h, out)
        .iter()
        .map(|(_, s)| u32::from_be_bytes(s[..4].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, [0, 2]);
    let d =
        h.sw.vc_stats(h.sw.lookup(inp, 1, 50).unwrap())
            .unwrap()
            .counters
            .dropped;
    assert_eq!((d.policing, d.ppd, d.reassembly), (1 + 4, 6, 0));
}

#[test]
fn a_stale_partial_frame_is_dropped_at_the_timeout() {
    let mut sw = Switch::new();
    let inp = sw
        .add_port(PortConfig::new(LINE).unit(PortUnit::Cells))
        .unwrap();
    let out = sw
        .add_port(
            PortConfig::new(LINE)
                .unit(PortUnit::Frames)
                .reassembly_timeout(Duration::from_millis(10)),
        )
        .unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(inp, 1, 50), VcAddr::new(out, 0, 40)),
        Contract::best_effort(),
    )
    .unwrap();
    let mut h = Harness::new(sw);
    let first = segment(&sdu(50, 0, 200), 1, 50).unwrap();
    let mut input: Vec<_> = first[..3]
        .iter()
        .map(|c| (Instant::ZERO, inp, Input::Cell(*c)))
        .collect();
    // Frame 0 loses its last cell; frame 1 starts 20 ms later.
    input.extend(aal5_cells(
        inp,
        1,
        50,
        at_us(20_000),
        Duration::from_micros(3),
        1,
        200,
    ));
    h.feed(input);
    h.drain();
    assert_eq!(frames_out(&h, out).len(), 1);
    let d = h.sw.port_stats(out).unwrap().counters.dropped;
    assert_eq!((d.reassembly_timeout, d.reassembly), (3, 0));
}

#[test]
fn vp_cross_connects_do_not_convert() {
    let (mut sw, f, c) = frame_and_cell();
    assert_eq!(
        sw.connect(
            CrossConnect::vp(VpAddr::new(f, 3), VpAddr::new(c, 3)),
            Contract::best_effort()
        ),
        Err(SwitchError::VpConversion(natm_switch::Endpoint::Vp(
            VpAddr::new(f, 3)
        )))
    );
}

#[test]
fn every_scheduler_sends_all_the_cells_of_a_segmented_frame() {
    for kind in [
        SchedulerKind::Fifo,
        SchedulerKind::RoundRobin,
        SchedulerKind::WeightedRoundRobin,
    ] {
        let mut sw = Switch::new();
        let f = sw
            .add_port(PortConfig::new(LINE).unit(PortUnit::Frames))
            .unwrap();
        let c = sw
            .add_port(PortConfig::new(LINE).unit(PortUnit::Cells).scheduler(kind))
            .unwrap();
        for vc in 0..2u16 {
            sw.connect(
                CrossConnect::vc(VcAddr::new(f, 0, 40 + vc), VcAddr::new(c, 1, 50 + vc)),
                Contract::best_effort(),
            )
            .unwrap();
        }
        let mut h = Harness::new(sw);
        for vc in 0..2u16 {
            h.feed(frames(
                f,
                0,
                40 + vc,
                Instant::ZERO,
                Duration::from_micros(50),
                3,
                1000,
            ));
        }
        h.drain();
        let per_vc = reassemble(&h.cells(c), 1000);
        assert_eq!(per_vc.get(&50), Some(&(3, 0)), "{kind:?}");
        assert_eq!(per_vc.get(&51), Some(&(3, 0)), "{kind:?}");
        assert_eq!(
            h.sw.queue_cells(c),
            Some(0),
            "{kind:?}: nothing left behind"
        );
    }
}
