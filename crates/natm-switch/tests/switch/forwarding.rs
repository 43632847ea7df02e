//! Cells and frames through the table: VC and VP translation, HEC correction,
//! unknown VCs, idle cells, line-rate pacing, connect/disconnect errors, counters.

use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use natm_proto::time::Instant;
use natm_proto::wire::cell::{HeaderFormat, HeaderRepr, Pti};
use natm_proto::wire::vcframe;
use natm_switch::{
    Contract, CrossConnect, DropCause, Endpoint, PortConfig, PortId, Switch, SwitchError, Transmit,
    VcAddr, Verdict, VpAddr,
};

const OC3: u64 = 155_520_000;

fn two_ports() -> (Switch, PortId, PortId) {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(OC3)).unwrap();
    let b = sw.add_port(PortConfig::new(OC3)).unwrap();
    (sw, a, b)
}

fn sent_cell(sw: &mut Switch, port: PortId) -> [u8; 53] {
    match sw.poll_transmit(Instant::from_nanos(u64::MAX / 4), port) {
        Some(Transmit::Cell(c)) => c,
        other => panic!("expected a cell, got {other:?}"),
    }
}

#[test]
fn vc_switching_translates_vpi_and_vci_and_keeps_the_rest() {
    let (mut sw, a, b) = two_ports();
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 7, 100)),
        Contract::best_effort(),
    )
    .unwrap();
    for pti in [Pti::UserData, Pti::UserDataEnd, Pti::UserDataCongested] {
        let mut c = cell(1, 32, pti, 0x5A);
        c[..5].copy_from_slice(
            &HeaderRepr {
                clp: true,
                ..HeaderRepr::uni(1, 32, pti)
            }
            .to_bytes(),
        );
        assert_eq!(sw.handle_cell(Instant::ZERO, a, c), Ok(Verdict::Queued));
        let out = sent_cell(&mut sw, b);
        let want = HeaderRepr {
            clp: true,
            ..HeaderRepr::uni(7, 100, pti)
        };
        assert_eq!(
            &out[..5],
            &want.to_bytes(),
            "HEC recomputed, PTI and CLP kept"
        );
        assert_eq!(&out[5..], &c[5..], "payload untouched");
    }
    // The reverse direction is not connected: a one-way cross-connect.
    assert_eq!(
        sw.handle_cell(Instant::ZERO, b, cell(7, 100, Pti::UserData, 0)),
        Ok(Verdict::Dropped(DropCause::UnknownVc))
    );
}

#[test]
fn vp_switching_translates_the_vpi_and_keeps_every_vci() {
    let (mut sw, a, b) = two_ports();
    sw.connect(
        CrossConnect::vp(VpAddr::new(a, 3), VpAddr::new(b, 9)),
        Contract::best_effort(),
    )
    .unwrap();
    for vci in [32u16, 33, 1000, 65535] {
        assert_eq!(
            sw.handle_cell(Instant::ZERO, a, cell(3, vci, Pti::UserDataEnd, 1)),
            Ok(Verdict::Queued)
        );
        let out = sent_cell(&mut sw, b);
        assert_eq!((vpi_of(&out), vci_of(&out)), (9, vci));
        assert_eq!(
            &out[..5],
            &HeaderRepr::uni(9, vci, Pti::UserDataEnd).to_bytes()
        );
    }
    assert_eq!(sw.lookup(a, 3, 77), sw.lookup(a, 3, 78));
    assert_eq!(sw.lookup(a, 4, 77), None);
}

#[test]
fn nni_port_carries_a_twelve_bit_vpi() {
    let mut sw = Switch::new();
    let uni = sw.add_port(PortConfig::new(OC3)).unwrap();
    let nni = sw
        .add_port(PortConfig::new(OC3).format(HeaderFormat::Nni))
        .unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(uni, 1, 32), VcAddr::new(nni, 0xABC, 40)),
        Contract::best_effort(),
    )
    .unwrap();
    sw.handle_cell(Instant::ZERO, uni, cell(1, 32, Pti::UserData, 0))
        .unwrap();
    let out = sent_cell(&mut sw, nni);
    let h: [u8; 5] = out[..5].try_into().unwrap();
    assert_eq!(
        HeaderRepr::parse_header(&h, HeaderFormat::Nni),
        HeaderRepr::nni(0xABC, 40, Pti::UserData)
    );
    // 0xABC does not fit a UNI port.
    assert_eq!(
        sw.connect(
            CrossConnect::vc(VcAddr::new(nni, 0xABC, 41), VcAddr::new(uni, 0x1AB, 41)),
            Contract::best_effort(),
        ),
        Err(SwitchError::VpiOutOfRange {
            port: uni,
            vpi: 0x1AB,
            format: HeaderFormat::Uni
        })
    );
}

#[test]
fn connect_refuses_with_typed_errors() {
    let (mut sw, a, b) = two_ports();
    let x = VcAddr::new(a, 1, 32);
    let y = VcAddr::new(b, 1, 32);
    let id = sw
        .connect(CrossConnect::vc(x, y), Contract::best_effort())
        .unwrap();
    let cases = [
        (
            CrossConnect::vc(x, VcAddr::new(b, 1, 33)),
            Contract::best_effort(),
            SwitchError::EntryExists(Endpoint::Vc(x)),
        ),
        (
            CrossConnect::vc(VcAddr::new(a, 1, 34), y),
            Contract::best_effort(),
            SwitchError::OutputInUse(Endpoint::Vc(y)),
        ),
        (
            CrossConnect::vc(VcAddr::new(PortId(9), 1, 32), y),
            Contract::best_effort(),
            SwitchError::UnknownPort(PortId(9)),
        ),
        (
            CrossConnect::vc(VcAddr::new(a, 1, 0), VcAddr::new(b, 1, 40)),
            Contract::best_effort(),
            SwitchError::UnassignedVci(Endpoint::Vc(VcAddr::new(a, 1, 0))),
        ),
        (
            CrossConnect::vp(VpAddr::new(a, 1), VpAddr::new(b, 5)),
            Contract::best_effort(),
            SwitchError::VpiConflict(Endpoint::Vp(VpAddr::new(a, 1))),
        ),
        (
            CrossConnect::vc(VcAddr::new(a, 2, 32), VcAddr::new(b, 2, 32)),
            Contract::cbr(0),
            SwitchError::BadContract("PCR of 0 cells/s"),
        ),
    ];
    for (xc, contract, err) in cases {
        assert_eq!(sw.connect(xc, contract), Err(err), "{xc:?}");
        assert!(!err.to_string().is_empty());
    }
    sw.disconnect(id).unwrap();
    assert_eq!(sw.disconnect(id), Err(SwitchError::UnknownConnection(id)));
    // Both sides are free again, and ids are not reused.
    let again = sw
        .connect(CrossConnect::vc(x, y), Contract::best_effort())
        .unwrap();
    assert_ne!(again, id);
    assert_eq!(
        sw.add_port(PortConfig::new(10)),
        Err(SwitchError::BadPortConfig(
            "line rate below one cell per second"
        ))
    );
}

#[test]
fn hec_single_bit_errors_are_corrected_multi_bit_errors_dropped() {
    let (mut sw, a, b) = two_ports();
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
        Contract::best_effort(),
    )
    .unwrap();
    let good = cell(1, 32, Pti::UserDataEnd, 9);
    let flip = |bits: &[u8]| {
        let mut c = good;
        for &bit in bits {
            c[usize::from(bit / 8)] ^= 0x80 >> (bit % 8);
        }
        c
    };
    // Bit 21 is in the VCI: uncorrected it would name VCI 96, an unknown VC.
    let t = Instant::ZERO;
    assert_eq!(sw.handle_cell(t, a, flip(&[21])), Ok(Verdict::Queued));
    assert_eq!(vci_of(&sent_cell(&mut sw, b)), 40);
    // I.432.1: right after a corrected header the receiver is in detection mode.
    assert_eq!(
        sw.handle_cell(t, a, flip(&[3])),
        Ok(Verdict::Dropped(DropCause::Hec))
    );
    assert_eq!(sw.handle_cell(t, a, good), Ok(Verdict::Queued));
    assert_eq!(
        sw.handle_cell(t, a, flip(&[0, 1])),
        Ok(Verdict::Dropped(DropCause::Hec))
    );
    assert_eq!(sw.handle_cell(t, a, good), Ok(Verdict::Queued));
    // An error in the HEC octet itself is corrected too.
    assert_eq!(sw.handle_cell(t, a, flip(&[39])), Ok(Verdict::Queued));
    let s = sw.port_stats(a).unwrap();
    assert_eq!(s.hec_corrected, 2);
    assert_eq!(s.counters.dropped.hec, 2);
    assert_eq!(s.counters.cells_in, 6);
}

#[test]
fn a_header_seen_before_an_error_still_puts_the_receiver_back_in_correction_mode() {
    let (mut sw, a, b) = two_ports();
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
        Contract::best_effort(),
    )
    .unwrap();
    let good = cell(1, 32, Pti::UserData, 9);
    let flip = |bits: &[u8]| {
        let mut c = good;
        for &bit in bits {
            c[usize::from(bit / 8)] ^= 0x80 >> (bit % 8);
        }
        c
    };
    let t = Instant::ZERO;
    // The same header again and again, then a two-bit error (detection mode)...
    for _ in 0..3 {
        assert_eq!(sw.handle_cell(t, a, good), Ok(Verdict::Queued));
    }
    assert_eq!(
        sw.handle_cell(t, a, flip(&[0, 1])),
        Ok(Verdict::Dropped(DropCause::Hec))
    );
    // ...then that header once more: valid, so a single-bit error after it is
    // corrected, not dropped.
    assert_eq!(sw.handle_cell(t, a, good), Ok(Verdict::Queued));
    assert_eq!(sw.handle_cell(t, a, flip(&[21])), Ok(Verdict::Queued));
    // A corrected header leaves detection mode even if the next one repeats it.
    assert_eq!(
        sw.handle_cell(t, a, flip(&[21])),
        Ok(Verdict::Dropped(DropCause::Hec))
    );
    let s = sw.port_stats(a).unwrap();
    assert_eq!((s.hec_corrected, s.counters.dropped.hec), (1, 2));
    // Every cell that passed left with the output header.
    for _ in 0..5 {
        assert_eq!(vci_of(&sent_cell(&mut sw, b)), 40);
    }
    assert_eq!(sw.queue_cells(b), Some(0));
}

#[test]
fn unknown_vcs_and_idle_cells_are_counted_not_forwarded() {
    let (mut sw, a, b) = two_ports();
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
        Contract::best_effort(),
    )
    .unwrap();
    let t = Instant::ZERO;
    for vci in [33u16, 5, 1000] {
        assert_eq!(
            sw.handle_cell(t, a, cell(1, vci, Pti::UserData, 0)),
            Ok(Verdict::Dropped(DropCause::UnknownVc))
        );
    }
    let idle = {
        let mut c = [0x6Au8; 53];
        c[..5].copy_from_slice(&[0, 0, 0, 1, 0x52]);
        c
    };
    assert_eq!(sw.handle_cell(t, a, idle), Ok(Verdict::Idle));
    assert_eq!(
        sw.handle_cell(t, PortId(7), idle),
        Err(SwitchError::UnknownPort(PortId(7)))
    );
    let s = sw.port_stats(a).unwrap();
    assert_eq!(
        (
            s.counters.dropped.unknown_vc,
            s.idle_cells,
            s.counters.cells_in
        ),
        (3, 1, 4)
    );
    assert_eq!(sw.poll_timeout(), None);
    assert_eq!(sw.poll_transmit(t, b), None);
}

#[test]
fn a_port_sends_one_cell_per_line_time() {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(OC3)).unwrap();
    // 42.4 Mbit/s: a cell takes exactly 10 µs.
    let b = sw.add_port(PortConfig::new(42_400_000)).unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
        Contract::best_effort(),
    )
    .unwrap();
    for i in 0..100 {
        sw.handle_cell(Instant::ZERO, a, cell(1, 32, Pti::UserData, i))
            .unwrap();
    }
    assert_eq!(sw.queue_cells(b), Some(100));
    let mut times = Vec::new();
    let mut now = Instant::ZERO;
    while let Some(t) = sw.poll_timeout() {
        now = now.max(t);
        if now > Instant::ZERO {
            let early = now - Duration::from_nanos(1);
            assert!(sw.poll_transmit(early, b).is_none(), "busy until {now}");
        }
        let Some(Transmit::Cell(c)) = sw.poll_transmit(now, b) else {
            panic!("the line is free at poll_timeout")
        };
        assert_eq!(c[5], times.len() as u8, "one VC's cells keep their order");
        times.push(now);
        assert!(sw.poll_transmit(now, b).is_none(), "one cell per line time");
    }
    assert_eq!(times.len(), 100);
    for (k, t) in times.iter().enumerate() {
        assert_eq!(*t, at_us(10 * k as u64));
    }
    let s = sw.port_stats(b).unwrap();
    assert_eq!(
        (s.counters.cells_out, s.max_queue_cells, s.queue_cells),
        (100, 100, 0)
    );
}

#[test]
fn frame_mode_translates_and_counts_whole_frames() {
    let (mut sw, a, b) = two_ports();
    let id = sw
        .connect(
            CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 3, 50)),
            Contract::best_effort(),
        )
        .unwrap();
    let sdu = Bytes::from(vec![7u8; 4096]);
    let h = vcframe::Repr {
        ci: true,
        ..vcframe::Repr::data(1, 32)
    };
    assert_eq!(
        sw.handle_frame(Instant::ZERO, a, h, sdu.clone()),
        Ok(Verdict::Queued)
    );
    let Some(Transmit::Frame { header, sdu: out }) = sw.poll_transmit(Instant::ZERO, b) else {
        panic!("a frame")
    };
    assert_eq!(
        (header.vpi, header.vci, header.ci, header.kind),
        (3, 50, true, vcframe::FrameKind::Data)
    );
    assert_eq!(out, sdu);
    // 4096 octets are 86 AAL5 cells: the line is busy for 86 cell times.
    let cell_time = PortConfig::new(OC3).cell_time();
    let next = sw
        .handle_frame(Instant::ZERO, a, h, sdu)
        .map(|_| sw.poll_timeout());
    let next = next.unwrap().unwrap();
    assert!(next >= Instant::ZERO + cell_time * 86 && next <= Instant::ZERO + cell_time * 87);
    let v = sw.vc_stats(id).unwrap();
    assert_eq!(
        (
            v.counters.frames_in,
            v.counters.cells_in,
            v.counters.frames_out
        ),
        (2, 172, 1)
    );
    assert_eq!(
        sw.handle_frame(
            Instant::ZERO,
            a,
            vcframe::Repr::data(1, 33),
            Bytes::from_static(b"x")
        ),
        Ok(Verdict::Dropped(DropCause::UnknownVc))
    );
}

#[test]
fn disconnect_flushes_the_queue_and_returns_the_final_counters() {
    let (mut sw, a, b) = two_ports();
    let id = sw
        .connect(
            CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
            Contract::best_effort(),
        )
        .unwrap();
    let other = sw
        .connect(
            CrossConnect::vc(VcAddr::new(a, 1, 33), VcAddr::new(b, 2, 41)),
            Contract::best_effort(),
        )
        .unwrap();
    for i in 0..10 {
        sw.handle_cell(Instant::ZERO, a, cell(1, 32, Pti::UserData, i))
            .unwrap();
        sw.handle_cell(Instant::ZERO, a, cell(1, 33, Pti::UserData, i))
            .unwrap();
    }
    let last = sw.disconnect(id).unwrap();
    assert_eq!(
        (last.counters.cells_in, last.counters.dropped.flushed),
        (10, 10)
    );
    assert_eq!(sw.queue_cells(b), Some(10));
    let mut h = Harness::new(sw);
    h.drain();
    let got = h.cells_by_vci(b, Instant::ZERO, secs(1.0));
    assert_eq!((got.get(&40), got.get(&41)), (None, Some(&10)));
    let stat = h.sw.stat();
    assert_eq!(stat.vcs.len(), 1);
    assert_eq!(stat.vcs[0].conn, other);
    assert_eq!(stat.ports[b.index()].counters.dropped.flushed, 10);
    assert_eq!(stat.ports[a.index()].counters.cells_in, 20);
}

#[test]
fn a_batched_drain_sends_what_the_line_frees_for_by_the_horizon() {
    // 424,000 bit/s: one cell per millisecond on the output line.
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(OC3)).unwrap();
    let b = sw.add_port(PortConfig::new(424_000)).unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
        Contract::best_effort(),
    )
    .unwrap();
    for k in 0..5 {
        let t = Instant::from_nanos(1 + k);
        assert_eq!(
            sw.handle_cell(t, a, cell(1, 32, Pti::UserData, k as u8)),
            Ok(Verdict::Queued)
        );
    }
    let ms = |m: u64| Instant::from_nanos(m * 1_000_000);
    // Slots at 0, 1 and 2 ms start by 2.5 ms; the one at 3 ms does not.
    let mut sent = 0;
    while sw
        .poll_transmit_by(ms(0), ms(2) + Duration::from_micros(500), b)
        .is_some()
    {
        sent += 1;
    }
    assert_eq!(sent, 3);
    assert_eq!(sw.port_timeout(b), Some(ms(3)));
    // Slots before `earliest` are lost: the next cell takes the line at 10 ms, and
    // the one after it is due at 11 ms, past a horizon of 10 ms.
    assert!(sw.poll_transmit_by(ms(10), ms(10), b).is_some());
    assert!(sw.poll_transmit_by(ms(10), ms(10), b).is_none());
    assert_eq!(sw.port_timeout(b), Some(ms(11)));
    assert_eq!(sw.queue_cells(b), Some(1));
}
