//! Point-to-multipoint VCs in the data plane (issue 19): every cell or frame of the
//! root's input leaves on every branch with that branch's label, in cell mode, in
//! frame mode and across the two; a branch that is full, released or disconnected
//! takes only its own copies with it.

use std::time::Duration;

use crate::common::*;
use natm_proto::time::Instant;
use natm_proto::wire::cell::{HeaderRepr, Pti};
use natm_proto::wire::vcframe;
use natm_switch::{
    Contract, CrossConnect, DropCause, PortConfig, PortId, PortUnit, Switch, SwitchError, Transmit,
    VcAddr, Verdict, VpAddr,
};

/// 42.4 Mbit/s: a cell every 10 µs.
const LINE: u64 = 42_400_000;

fn vc(p: PortId, vpi: u16, vci: u16) -> VcAddr {
    VcAddr::new(p, vpi, vci)
}

/// A root VC from port 0 to port 1 with branches to ports 2 and 3, all cell lines.
fn tree(unit: [PortUnit; 4]) -> (Switch, [PortId; 4], Vec<natm_switch::ConnId>) {
    let mut sw = Switch::new();
    let p: Vec<PortId> = unit
        .iter()
        .map(|u| sw.add_port(PortConfig::new(LINE).unit(*u)).unwrap())
        .collect();
    let p = [p[0], p[1], p[2], p[3]];
    let root = sw
        .connect(
            CrossConnect::vc(vc(p[0], 0, 32), vc(p[1], 1, 40)),
            Contract::best_effort(),
        )
        .unwrap();
    let b2 = sw
        .add_branch(root, vc(p[2], 2, 50), Contract::best_effort())
        .unwrap();
    let b3 = sw
        .add_branch(root, vc(p[3], 3, 60), Contract::best_effort())
        .unwrap();
    (sw, p, vec![root, b2, b3])
}

#[test]
fn every_cell_leaves_on_every_branch_with_its_label() {
    let (sw, p, ids) = tree([PortUnit::Any; 4]);
    assert_eq!(sw.branches(ids[2]), ids);
    let mut h = Harness::new(sw);
    h.feed(cbr(p[0], 0, 32, at_us(0), Duration::from_micros(20), 100));
    h.drain();
    for (port, vpi, vci) in [(p[1], 1, 40), (p[2], 2, 50), (p[3], 3, 60)] {
        let cells = h.cells(port);
        assert_eq!(cells.len(), 100, "port {port}");
        for (i, c) in cells.iter().enumerate() {
            assert_eq!((vpi_of(c), vci_of(c)), (vpi, vci));
            // The payload is the input's, in order.
            assert_eq!(c[5], i as u8);
            assert_eq!(
                &c[..5],
                &HeaderRepr::uni(vpi as u8, vci, Pti::UserDataEnd).to_bytes()
            );
        }
    }
    // The input port saw each cell once; each output sent it once.
    let st = h.sw.stat();
    assert_eq!(st.ports[0].counters.cells_in, 100);
    for port in &p[1..] {
        assert_eq!(st.ports[port.index()].counters.cells_out, 100);
    }
    for id in &ids {
        let v = h.sw.vc_stats(*id).unwrap();
        assert_eq!((v.counters.cells_in, v.counters.cells_out), (100, 100));
    }
    assert!(h.verdicts.iter().all(|v| *v == Verdict::Queued));
}

#[test]
fn frames_replicate_and_convert_per_branch() {
    // Frames in; branch 1 a frame line, branch 2 a cell line (segmented), branch 3
    // whatever comes.
    let (sw, p, _) = tree([
        PortUnit::Frames,
        PortUnit::Frames,
        PortUnit::Cells,
        PortUnit::Any,
    ]);
    let mut h = Harness::new(sw);
    h.feed(frames(
        p[0],
        0,
        32,
        at_us(0),
        Duration::from_micros(500),
        20,
        300,
    ));
    h.drain();
    for port in [p[1], p[3]] {
        let got: Vec<_> = h.out[port.index()]
            .iter()
            .map(|(_, u)| match u {
                Transmit::Frame { header, sdu } => (header.vci, sdu.clone()),
                Transmit::Cell(_) => panic!("a frame line sent a cell"),
            })
            .collect();
        assert_eq!(got.len(), 20);
        for (seq, (vci, s)) in got.iter().enumerate() {
            assert_eq!(*vci, if port == p[1] { 40 } else { 60 });
            assert_eq!(s.as_ref(), sdu(32, seq as u32, 300).as_slice());
        }
    }
    let r = reassemble(&h.cells(p[2]), 300);
    assert_eq!(r.get(&50), Some(&(20, 0)));
}

#[test]
fn cells_reassemble_on_a_frame_branch_and_stay_cells_on_the_others() {
    let (sw, p, _) = tree([
        PortUnit::Cells,
        PortUnit::Cells,
        PortUnit::Frames,
        PortUnit::Cells,
    ]);
    let mut h = Harness::new(sw);
    h.feed(aal5_cells(
        p[0],
        0,
        32,
        at_us(0),
        Duration::from_micros(20),
        10,
        200,
    ));
    h.drain();
    assert_eq!(reassemble(&h.cells(p[1]), 200).get(&40), Some(&(10, 0)));
    assert_eq!(reassemble(&h.cells(p[3]), 200).get(&60), Some(&(10, 0)));
    let frames: Vec<_> = h.out[p[2].index()]
        .iter()
        .filter_map(|(_, u)| match u {
            Transmit::Frame { header, sdu } => Some((header.vci, sdu.clone())),
            Transmit::Cell(_) => None,
        })
        .collect();
    assert_eq!(frames.len(), 10);
    for (seq, (vci, s)) in frames.iter().enumerate() {
        assert_eq!(*vci, 50);
        assert_eq!(s.as_ref(), sdu(32, seq as u32, 200).as_slice());
    }
}

#[test]
fn a_full_branch_drops_only_its_own_copies() {
    let mut sw = Switch::new();
    let inp = sw.add_port(PortConfig::new(622_080_000)).unwrap();
    let fast = sw.add_port(PortConfig::new(LINE)).unwrap();
    // A line a tenth as fast, with a small buffer.
    let slow = sw.add_port(PortConfig::new(LINE / 10).buffer(20)).unwrap();
    let root = sw
        .connect(
            CrossConnect::vc(vc(inp, 0, 32), vc(fast, 0, 40)),
            Contract::best_effort(),
        )
        .unwrap();
    let b = sw
        .add_branch(
            root,
            vc(slow, 0, 50),
            Contract::best_effort().with_buffer(20),
        )
        .unwrap();
    let mut h = Harness::new(sw);
    // A cell every 10 µs: the fast line keeps up, the slow one cannot.
    h.feed(cbr(inp, 0, 32, at_us(0), Duration::from_micros(10), 500));
    h.drain();
    assert_eq!(h.cells(fast).len(), 500);
    let slow_cells = h.cells(slow).len() as u64;
    assert!(slow_cells < 100, "{slow_cells}");
    let v = h.sw.vc_stats(b).unwrap();
    assert_eq!(v.counters.cells_out, slow_cells);
    assert_eq!(v.counters.dropped.total(), 500 - slow_cells);
    assert_eq!(h.sw.vc_stats(root).unwrap().counters.dropped.total(), 0);
    // One branch queued it: the cell is not reported dropped.
    assert!(h.verdicts.iter().all(|v| *v == Verdict::Queued));
}

#[test]
fn the_input_is_policed_once_for_every_branch() {
    let mut sw = Switch::new();
    let inp = sw.add_port(PortConfig::new(622_080_000)).unwrap();
    let a = sw.add_port(PortConfig::new(LINE)).unwrap();
    let b = sw.add_port(PortConfig::new(LINE)).unwrap();
    // 10,000 cells/s allowed; cells come at 20,000/s.
    let root = sw
        .connect(
            CrossConnect::vc(vc(inp, 0, 32), vc(a, 0, 40)),
            Contract::cbr(10_000),
        )
        .unwrap();
    let br = sw
        .add_branch(root, vc(b, 0, 50), Contract::best_effort())
        .unwrap();
    let mut h = Harness::new(sw);
    h.feed(cbr(inp, 0, 32, at_us(0), Duration::from_micros(50), 200));
    h.drain();
    let (na, nb) = (h.cells(a).len(), h.cells(b).len());
    assert_eq!(na, nb);
    assert!((95..=105).contains(&na), "{na}");
    // The same cells passed on both.
    let pa: Vec<u8> = h.cells(a).iter().map(|c| c[5]).collect();
    let pb: Vec<u8> = h.cells(b).iter().map(|c| c[5]).collect();
    assert_eq!(pa, pb);
    let st = h.sw.stat();
    assert_eq!(
        st.ports[inp.index()].counters.dropped.policing,
        200 - na as u64
    );
    assert_eq!(
        h.sw.vc_stats(br).unwrap().counters.dropped.policing,
        200 - na as u64
    );
}

#[test]
fn releasing_one_branch_leaves_the_others_flowing() {
    let (sw, p, ids) = tree([PortUnit::Any; 4]);
    let mut h = Harness::new(sw);
    h.feed(cbr(p[0], 0, 32, at_us(0), Duration::from_micros(20), 50));
    h.run_until(at_us(1000));
    // The root's own branch (the one holding the input) goes: the input passes on.
    h.sw.release(h.now, ids[0], Duration::ZERO).unwrap();
    assert_eq!(h.sw.branches(ids[1]), vec![ids[1], ids[2]]);
    assert_eq!(h.sw.lookup(p[0], 0, 32), Some(ids[1]));
    h.feed(cbr(p[0], 0, 32, at_us(2000), Duration::from_micros(20), 50));
    h.run_until(at_us(4000));
    assert_eq!(h.cells(p[1]).len(), 50);
    assert_eq!(h.cells(p[2]).len(), 100);
    assert_eq!(h.cells(p[3]).len(), 100);
    // A leaf branch goes: the rest keep flowing, and its label is free again.
    h.sw.disconnect(ids[2]).unwrap();
    assert_eq!(h.sw.branches(ids[1]), vec![ids[1]]);
    h.feed(cbr(p[0], 0, 32, at_us(5000), Duration::from_micros(20), 50));
    h.run_until(at_us(7000));
    assert_eq!(h.cells(p[2]).len(), 150);
    assert_eq!(h.cells(p[3]).len(), 100);
    let again =
        h.sw.add_branch(ids[1], vc(p[3], 3, 60), Contract::best_effort())
            .unwrap();
    h.feed(cbr(p[0], 0, 32, at_us(8000), Duration::from_micros(20), 10));
    h.run_until(at_us(9000));
    assert_eq!(h.cells(p[3]).len(), 110);
    // The last branches go: the input is unknown.
    h.sw.release(h.now, ids[1], Duration::ZERO).unwrap();
    h.sw.release(h.now, again, Duration::ZERO).unwrap();
    assert_eq!(h.sw.lookup(p[0], 0, 32), None);
    let v =
        h.sw.handle_cell(h.now, p[0], cell(0, 32, Pti::UserDataEnd, 0))
            .unwrap();
    assert_eq!(v, Verdict::Dropped(DropCause::UnknownVc));
}

#[test]
fn a_released_branch_drains_what_it_holds() {
    let mut sw = Switch::new();
    let inp = sw.add_port(PortConfig::new(622_080_000)).unwrap();
    let a = sw.add_port(PortConfig::new(LINE)).unwrap();
    let b = sw.add_port(PortConfig::new(LINE)).unwrap();
    let root = sw
        .connect(
            CrossConnect::vc(vc(inp, 0, 32), vc(a, 0, 40)),
            Contract::best_effort(),
        )
        .unwrap();
    let br = sw
        .add_branch(root, vc(b, 0, 50), Contract::best_effort())
        .unwrap();
    let t = Instant::from_nanos(1);
    for i in 0..30 {
        sw.handle_cell(t, inp, cell(0, 32, Pti::UserData, i))
            .unwrap();
    }
    sw.release(t, br, Duration::from_secs(1)).unwrap();
    assert_eq!(sw.branches(root), vec![root]);
    assert_eq!(sw.draining(), 1);
    // Cells after the release reach the remaining branch only.
    sw.handle_cell(t, inp, cell(0, 32, Pti::UserData, 99))
        .unwrap();
    let mut h = Harness::new(sw);
    h.drain();
    assert_eq!(h.cells(a).len(), 31);
    assert_eq!(h.cells(b).len(), 30);
    assert_eq!(h.sw.draining(), 0);
}

#[test]
fn what_a_branch_cannot_be() {
    let mut sw = Switch::new();
    let p: Vec<PortId> = (0..3)
        .map(|_| sw.add_port(PortConfig::new(LINE)).unwrap())
        .collect();
    let root = sw
        .connect(
            CrossConnect::vc(vc(p[0], 0, 32), vc(p[1], 0, 40)),
            Contract::best_effort(),
        )
        .unwrap();
    // Another connection's output.
    assert_eq!(
        sw.add_branch(root, vc(p[1], 0, 40), Contract::best_effort()),
        Err(SwitchError::OutputInUse(natm_switch::Endpoint::Vc(vc(
            p[1], 0, 40
        ))))
    );
    assert_eq!(
        sw.add_branch(root, vc(p[2], 0, 0), Contract::best_effort()),
        Err(SwitchError::UnassignedVci(natm_switch::Endpoint::Vc(vc(
            p[2], 0, 0
        ))))
    );
    let vp = sw
        .connect(
            CrossConnect::vp(VpAddr::new(p[0], 7), VpAddr::new(p[2], 7)),
            Contract::best_effort(),
        )
        .unwrap();
    assert_eq!(
        sw.add_branch(vp, vc(p[2], 0, 50), Contract::best_effort()),
        Err(SwitchError::NotReplicable(vp))
    );
    sw.release(Instant::ZERO, root, Duration::ZERO).unwrap();
    assert_eq!(
        sw.add_branch(root, vc(p[2], 0, 50), Contract::best_effort()),
        Err(SwitchError::UnknownConnection(root))
    );
    // Nothing half-made: the failed branches left no state.
    assert_eq!(sw.stat().vcs.len(), 1);
    let _ = vcframe::Repr::data(0, 32);
}

#[test]
fn the_branch_taking_the_input_over_polices_it_as_the_root_did() {
    let mut sw = Switch::new();
    let inp = sw.add_port(PortConfig::new(622_080_000)).unwrap();
    let a = sw.add_port(PortConfig::new(LINE)).unwrap();
    let b = sw.add_port(PortConfig::new(LINE)).unwrap();
    let root = sw
        .connect(
            CrossConnect::vc(vc(inp, 0, 32), vc(a, 0, 40)),
            Contract::cbr(10_000),
        )
        .unwrap();
    let br = sw
        .add_branch(root, vc(b, 0, 50), Contract::best_effort())
        .unwrap();
    sw.release(Instant::ZERO, root, Duration::ZERO).unwrap();
    assert_eq!(sw.vc_stats(br).unwrap().contract.pcr, Some(10_000));
    let mut h = Harness::new(sw);
    // Twice the contract's rate: about half passes, on the remaining branch.
    h.feed(cbr(inp, 0, 32, at_us(0), Duration::from_micros(50), 200));
    h.drain();
    let n = h.cells(b).len();
    assert!((95..=105).contains(&n), "{n}");
    assert!(h.cells(a).is_empty());
}
