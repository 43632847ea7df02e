//! The batch paths: `Switch::handle_cells` must do what `Switch::handle_cell` does
//! cell by cell, and `Switch::poll_cells_by`, which takes a run of one VC's cells in
//! one step, must give exactly what `Switch::poll_transmit_by` gives unit by unit — the same cells in the same order, the same frames, and the same
//! queues, scheduler state, line time and counters afterwards — under every
//! scheduler, with frames, control units, drops and released VCs mixed in, and
//! point-to-multipoint VCs whose branches share the output port.

use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use natm_proto::time::Instant;
use natm_proto::wire::cell::{Pti, CELL_LEN};
use natm_proto::wire::vcframe;
use natm_switch::{
    ConnId, Contract, CrossConnect, PortConfig, PortId, SchedulerKind, Switch, Transmit, VcAddr,
};
use proptest::prelude::*;

/// 42.4 Mbit/s: a cell every 10 µs.
const LINE: u64 = 42_400_000;

/// What happens next, to both switches alike except for how the output is drained.
#[derive(Debug, Clone)]
enum Step {
    /// A cell of VC `vc` (end of frame if `eof`, CLP if `clp`).
    Cell { vc: usize, eof: bool, clp: bool },
    /// A train of `n` cells of VCs `vc`, `vc + 1`, ... in turn, one every `us` µs:
    /// `handle_cell` one by one into the first switch, `handle_cells` into the second.
    Train { vc: usize, n: usize, us: u64 },
    /// A frame-mode frame of `len` octets on VC `vc`.
    Frame { vc: usize, len: usize },
    /// The control plane sends a cell (or a frame) out of the output port.
    Control { frame: bool },
    /// Time passes.
    Wait { us: u64 },
    /// The output port is drained: up to `max` cells, the line free by `ahead` µs from
    /// now, missed slots taken back as far as `behind` µs.
    Drain { max: usize, ahead: u64, behind: u64 },
    /// Connection `vc` (modulo those made so far, branches included) is released,
    /// given `within` µs to drain.
    Release { vc: usize, within: u64 },
    /// A point-to-multipoint branch is added to connection `vc` (modulo those made
    /// so far), on the next free label of the output port.
    Branch { vc: usize, buffer: u32 },
}

fn step(vcs: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..vcs, proptest::bool::weighted(0.2), proptest::bool::weighted(0.1))
            .prop_map(|(vc, eof, clp)| Step::Cell { vc, eof, clp }),
        2 => (0..vcs, 0usize..70, 0u64..20).prop_map(|(vc, n, us)| Step::Train { vc, n, us }),
        1 => (0..vcs, 0usize..200).prop_map(|(vc, len)| Step::Frame { vc, len }),
        1 => any::<bool>().prop_map(|frame| Step::Control { frame }),
        2 => (0u64..400).prop_map(|us| Step::Wait { us }),
        3 => (1usize..80, 0u64..400, 0u64..100)
            .prop_map(|(max, ahead, behind)| Step::Drain { max, ahead, behind }),
        1 => (0..2 * vcs, 0u64..300).prop_map(|(vc, within)| Step::Release { vc, within }),
        1 => (0..2 * vcs, 1u32..60).prop_map(|(vc, buffer)| Step::Branch { vc, buffer }),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    kind: SchedulerKind,
    /// Per VC: its buffer (cells), reserved rate (cells/s, for `wrr`) and contract
    /// (0: best effort; 1: best effort with EPD/PPD; 2: policed at 50,000 cells/s,
    /// tagging; 3: the same, discarding).
    vcs: Vec<(u32, u64, u8)>,
    port_buffer: u32,
    steps: Vec<Step>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            Just(SchedulerKind::Fifo),
            Just(SchedulerKind::RoundRobin),
            Just(SchedulerKind::WeightedRoundRobin)
        ],
        proptest::collection::vec((1u32..60, 0u64..60_000, 0u8..4), 1..5),
        20u32..200,
    )
        .prop_flat_map(|(kind, vcs, port_buffer)| {
            let n = vcs.len();
            proptest::collection::vec(step(n), 1..300).prop_map(move |steps| Case {
                kind,
                vcs: vcs.clone(),
                port_buffer,
                steps,
            })
        })
}

/// One input port (cells and frames as they come) and one output port of `kind`.
fn build(c: &Case) -> (Switch, PortId, PortId, Vec<ConnId>) {
    let mut sw = Switch::new();
    let inp = sw.add_port(PortConfig::new(622_080_000)).unwrap();
    let out = sw
        .add_port(
            PortConfig::new(LINE)
                .scheduler(c.kind)
                .buffer(c.port_buffer),
        )
        .unwrap();
    let ids = c
        .vcs
        .iter()
        .enumerate()
        .map(|(i, &(buffer, reserved, kind))| {
            let i = i as u16;
            let contract = match kind {
                0 | 1 => Contract::best_effort(),
                2 => Contract::cbr(50_000).tagging(),
                _ => Contract::cbr(50_000),
            };
            sw.connect(
                CrossConnect::vc(VcAddr::new(inp, 0, 32 + i), VcAddr::new(out, 1, 40 + i)),
                contract
                    .with_buffer(buffer)
                    .with_reserved(reserved)
                    .with_frame_discard(kind == 1),
            )
            .unwrap()
        })
        .collect();
    (sw, inp, out, ids)
}

/// What one drain gave: the cells back to back, and the frame that stopped it.
type Drained = (Vec<u8>, Option<Transmit>);

/// The reference: `poll_transmit_by` unit by unit, until nothing more, a frame, or
/// `max` cells.
fn drain_units(
    sw: &mut Switch,
    earliest: Instant,
    horizon: Instant,
    port: PortId,
    max: usize,
) -> Drained {
    let mut cells = Vec::new();
    while cells.len() < max * CELL_LEN {
        match sw.poll_transmit_by(earliest, horizon, port) {
            None => return (cells, None),
            Some(Transmit::Cell(c)) => cells.extend_from_slice(&c),
            Some(frame) => return (cells, Some(frame)),
        }
    }
    (cells, None)
}

fn run(c: &Case) -> Result<(), TestCaseError> {
    let (mut a, inp, out, mut ids) = build(c);
    let mut next_branch = 0u16;
    let (mut b, ..) = build(c);
    let mut now = Instant::from_nanos(1);
    let mut seq = 0u8;
    for s in &c.steps {
        match *s {
            Step::Cell { vc, eof, clp } => {
                seq = seq.wrapping_add(1);
                let pti = if eof { Pti::UserDataEnd } else { Pti::UserData };
                let mut cell = cell(0, 32 + vc as u16, pti, seq);
                if clp {
                    cell[3] |= 1;
                    cell[4] = natm_proto::wire::crc::hec(&[cell[0], cell[1], cell[2], cell[3]]);
                }
                let va = a.handle_cell(now, inp, cell);
                let vb = b.handle_cell(now, inp, cell);
                prop_assert_eq!(va, vb);
            }
            Step::Train { vc, n, us } => {
                let spacing = Duration::from_micros(us);
                let cells: Vec<[u8; CELL_LEN]> = (0..n)
                    .map(|i| {
                        seq = seq.wrapping_add(1);
                        // Runs of four cells of a VC, the VCs in turn.
                        let v = 32 + ((vc + i / 4) % c.vcs.len()) as u16;
                        let pti = if seq.is_multiple_of(5) {
                            Pti::UserDataEnd
                        } else {
                            Pti::UserData
                        };
                        cell(0, v, pti, seq)
                    })
                    .collect();
                let mut t = now;
                for x in &cells {
                    a.handle_cell(t, inp, *x).unwrap();
                    t += spacing;
                }
                let end = b.handle_cells(now, spacing, inp, &cells).unwrap();
                prop_assert_eq!(end, t);
            }
            Step::Frame { vc, len } => {
                seq = seq.wrapping_add(1);
                let header = vcframe::Repr {
                    kind: vcframe::FrameKind::Data,
                    ci: false,
                    clp: false,
                    vpi: 0,
                    vci: 32 + vc as u16,
                };
                let sdu = Bytes::from(vec![seq; len]);
                let va = a.handle_frame(now, inp, header, sdu.clone());
                let vb = b.handle_frame(now, inp, header, sdu);
                prop_assert_eq!(va, vb);
            }
            Step::Control { frame } => {
                seq = seq.wrapping_add(1);
                let unit = if frame {
                    Transmit::Frame {
                        header: vcframe::Repr {
                            kind: vcframe::FrameKind::Signalling,
                            ci: false,
                            clp: false,
                            vpi: 0,
                            vci: 5,
                        },
                        sdu: Bytes::from(vec![seq; 20]),
                    }
                } else {
                    Transmit::Cell(cell(0, 5, Pti::UserDataEnd, seq))
                };
                let ra = a.send(out, unit.clone()).is_ok();
                let rb = b.send(out, unit).is_ok();
                prop_assert_eq!(ra, rb);
            }
            Step::Wait { us } => {
                now += Duration::from_micros(us);
                a.handle_timeout(now);
                b.handle_timeout(now);
            }
            Step::Drain { max, ahead, behind } => {
                let horizon = now + Duration::from_micros(ahead);
                let earliest =
                    Instant::from_nanos(now.as_nanos().saturating_sub(behind * 1000).max(1));
                let want = drain_units(&mut a, earliest, horizon, out, max);
                let mut got = Vec::new();
                let frame = b.poll_cells_by(earliest, horizon, out, max, &mut got);
                prop_assert_eq!(&got, &want.0);
                prop_assert_eq!(&frame, &want.1);
            }
            Step::Release { vc, within } => {
                let id = ids[vc % ids.len()];
                let ra = a.release(now, id, Duration::from_micros(within));
                let rb = b.release(now, id, Duration::from_micros(within));
                prop_assert_eq!(ra.is_ok(), rb.is_ok());
            }
            Step::Branch { vc, buffer } => {
                let id = ids[vc % ids.len()];
                let to = VcAddr::new(out, 2, 100 + next_branch);
                next_branch += 1;
                let contract = Contract::best_effort().with_buffer(buffer);
                let ra = a.add_branch(id, to, contract);
                let rb = b.add_branch(id, to, contract);
                prop_assert_eq!(ra, rb);
                if let Ok(branch) = ra {
                    ids.push(branch);
                }
            }
        }
        prop_assert_eq!(a.stat(), b.stat());
        prop_assert_eq!(a.poll_timeout(), b.poll_timeout());
    }
    // Both empty the same way to the end.
    loop {
        let horizon = now + Duration::from_millis(100);
        let want = drain_units(&mut a, now, horizon, out, 64);
        let mut got = Vec::new();
        let frame = b.poll_cells_by(now, horizon, out, 64, &mut got);
        prop_assert_eq!(&got, &want.0);
        prop_assert_eq!(&frame, &want.1);
        prop_assert_eq!(a.stat(), b.stat());
        if want.0.is_empty() && want.1.is_none() {
            break;
        }
        now = horizon;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn cell_runs_leave_as_units_do(c in case()) {
        run(&c)?;
    }
}

/// A lone VC's backlog leaves in one run as far as the line allows; the cells of
/// two VCs under `rr` alternate one by one, as unit by unit.
#[test]
fn runs_follow_the_line_and_the_round() {
    let c = Case {
        kind: SchedulerKind::RoundRobin,
        vcs: vec![(100, 0, 0), (100, 0, 0)],
        port_buffer: 200,
        steps: Vec::new(),
    };
    let (mut sw, inp, out, _) = build(&c);
    let t = Instant::from_nanos(1);
    for i in 0..10u8 {
        sw.handle_cell(t, inp, cell(0, 32, Pti::UserData, i))
            .unwrap();
    }
    // Line free at t, a cell every 10 µs: 5 start by t + 45 µs.
    let mut got = Vec::new();
    assert!(sw
        .poll_cells_by(t, t + Duration::from_micros(45), out, 64, &mut got)
        .is_none());
    assert_eq!(got.len(), 5 * CELL_LEN);
    assert_eq!(sw.queue_cells(out), Some(5));
    for i in 0..3u8 {
        sw.handle_cell(t, inp, cell(0, 33, Pti::UserData, 100 + i))
            .unwrap();
    }
    got.clear();
    let far = t + Duration::from_secs(1);
    assert!(sw.poll_cells_by(t, far, out, 64, &mut got).is_none());
    let vcis: Vec<u16> = got
        .chunks_exact(CELL_LEN)
        .map(|c| vci_of(c.try_into().unwrap()))
        .collect();
    assert_eq!(vcis, [40, 41, 40, 41, 40, 41, 40, 40]);
    let st = sw.port_stats(out).unwrap();
    assert_eq!((st.counters.cells_out, st.queue_cells), (13, 0));
}
