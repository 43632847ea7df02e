//! Early and partial packet discard for AAL5 VCs in cell mode: a port overloaded 2×
//! by 20-cell frames from four VCs, whole frames counted at the receiver (every cell
//! there and the AAL5 CRC good, `wire::aal5`), with EPD on and off. The classic
//! result (Romanow & Floyd 1994): without frame discard the goodput of whole frames
//! collapses, since the cells lost are spread over many frames and the cells of
//! those frames that do get through are wasted line time.

use std::time::Duration;

use crate::common::*;
use natm_proto::time::Instant;
use natm_proto::wire::cell::Pti;
use natm_switch::{
    Contract, CrossConnect, DropCause, PortConfig, PortId, SchedulerKind, Switch, VcAddr, Verdict,
};

/// 42.4 Mbit/s: 100,000 cells/s.
const LINE: u64 = 42_400_000;
const VCS: u16 = 4;
/// 952 octets and the AAL5 trailer: 20 cells.
const SDU: usize = 952;
const FRAMES: u32 = 2500;

struct Outcome {
    good: u64,
    bad: u64,
    epd: u64,
    ppd: u64,
    queue_full: u64,
    cells_out: u64,
}

fn run(kind: SchedulerKind, epd: bool, ppd: bool) -> Outcome {
    let mut sw = Switch::new();
    let out_cfg = PortConfig::new(LINE).scheduler(kind).buffer(200).ppd(ppd);
    let out_cfg = if epd { out_cfg } else { out_cfg.epd(None) };
    let inputs: Vec<PortId> = (0..VCS)
        .map(|_| sw.add_port(PortConfig::new(622_080_000)).unwrap())
        .collect();
    let out = sw.add_port(out_cfg).unwrap();
    for (i, &p) in inputs.iter().enumerate() {
        let i = i as u16;
        sw.connect(
            CrossConnect::vc(VcAddr::new(p, 1, 32 + i), VcAddr::new(out, 1, 40 + i)),
            Contract::best_effort().with_buffer(200),
        )
        .unwrap();
    }
    let mut h = Harness::new(sw);
    // Each VC offers half the line: a cell every 20 µs; 2× overload in all.
    let interval = Duration::from_micros(20);
    for (i, &p) in inputs.iter().enumerate() {
        let cells = aal5_cells(p, 1, 32 + i as u16, Instant::ZERO, interval, FRAMES, SDU);
        h.feed(jittered(cells, interval, 11 + i as u64));
    }
    h.drain();
    let per_vc = reassemble(&h.cells(out), SDU);
    let stat = h.sw.port_stats(out).unwrap();
    Outcome {
        good: per_vc.values().map(|v| v.0).sum(),
        bad: per_vc.values().map(|v| v.1).sum(),
        epd: stat.counters.dropped.epd,
        ppd: stat.counters.dropped.ppd,
        queue_full: stat.counters.dropped.queue_full,
        cells_out: stat.counters.cells_out,
    }
}

fn report(name: &str, o: &Outcome) {
    let offered = u64::from(FRAMES) * u64::from(VCS);
    eprintln!(
        "{name}: {} whole frames of {offered} offered ({:.1} % of the line's cells in whole \
         frames), {} broken; drops: EPD {}, PPD {}, queue full {}; cells out {}",
        o.good,
        100.0 * (o.good * 20) as f64 / o.cells_out as f64,
        o.bad,
        o.epd,
        o.ppd,
        o.queue_full,
        o.cells_out
    );
}

#[test]
fn epd_delivers_far_more_whole_frames_than_tail_drop() {
    let off = run(SchedulerKind::Fifo, false, false);
    let ppd = run(SchedulerKind::Fifo, false, true);
    let on = run(SchedulerKind::Fifo, true, true);
    report("fifo, tail drop", &off);
    report("fifo, PPD only", &ppd);
    report("fifo, EPD + PPD", &on);
    // The line can carry 5,000 frames in the second the sources run.
    assert!(on.good > 4_500, "EPD keeps the goodput near the line rate");
    assert!(on.good > 2 * off.good, "and far above tail drop's");
    assert!(ppd.good > off.good, "PPD alone helps some");
    assert!(on.epd > 0 && off.epd == 0 && off.ppd == 0);
}

#[test]
fn epd_under_round_robin_too() {
    let off = run(SchedulerKind::RoundRobin, false, false);
    let on = run(SchedulerKind::RoundRobin, true, true);
    report("rr, tail drop", &off);
    report("rr, EPD + PPD", &on);
    assert!(on.good > 4_500 && on.good > 2 * off.good);
}

#[test]
fn ppd_keeps_the_last_cell_so_frames_never_merge() {
    // One VC, a 2-cell buffer, PPD on, EPD off: cells 0-1 of a 5-cell frame queue,
    // cell 2 finds the buffer full and the rest but the last are discarded.
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(LINE)).unwrap();
    let b = sw
        .add_port(PortConfig::new(LINE).buffer(3).epd(None))
        .unwrap();
    let id = sw
        .connect(
            CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 1, 40)),
            Contract::best_effort().with_buffer(2),
        )
        .unwrap();
    let t = Instant::ZERO;
    let mut verdicts = Vec::new();
    for k in 0..5u8 {
        let pti = if k == 4 {
            Pti::UserDataEnd
        } else {
            Pti::UserData
        };
        if k == 4 {
            // The line has sent a cell by the time the last one comes.
            assert!(sw.poll_transmit(t, b).is_some());
        }
        verdicts.push(sw.handle_cell(t, a, cell(1, 32, pti, k)).unwrap());
    }
    assert_eq!(
        verdicts,
        [
            Verdict::Queued,
            Verdict::Queued,
            Verdict::Dropped(DropCause::QueueFull),
            Verdict::Dropped(DropCause::Ppd),
            Verdict::Queued,
        ]
    );
    let v = sw.vc_stats(id).unwrap().counters;
    assert_eq!((v.dropped.queue_full, v.dropped.ppd), (1, 1));
}

#[test]
fn epd_refuses_whole_frames_above_the_threshold() {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(LINE)).unwrap();
    let b = sw
        .add_port(PortConfig::new(LINE).buffer(100).epd(Some(10)))
        .unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 1, 40)),
        Contract::best_effort().with_buffer(100),
    )
    .unwrap();
    let t = Instant::ZERO;
    let frame = |sw: &mut Switch| -> Vec<Verdict> {
        (0..6)
            .map(|k| {
                let pti = if k == 5 {
                    Pti::UserDataEnd
                } else {
                    Pti::UserData
                };
                sw.handle_cell(t, a, cell(1, 32, pti, k)).unwrap()
            })
            .collect()
    };
    // Frames 1 and 2 start below 10 cells queued (0, 6): accepted whole, even past
    // the threshold. Frame 3 starts at 12: refused whole, last cell included.
    assert!(frame(&mut sw).iter().all(|v| *v == Verdict::Queued));
    assert!(frame(&mut sw).iter().all(|v| *v == Verdict::Queued));
    assert!(frame(&mut sw)
        .iter()
        .all(|v| *v == Verdict::Dropped(DropCause::Epd)));
    assert_eq!(sw.queue_cells(b), Some(12));
    let s = sw.port_stats(b).unwrap();
    assert_eq!((s.counters.dropped.epd, s.counters.dropped.ppd), (6, 0));
}

#[test]
fn frame_mode_drops_whole_frames_when_the_buffer_is_full() {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(LINE)).unwrap();
    let b = sw.add_port(PortConfig::new(LINE).buffer(50)).unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 1, 40)),
        Contract::best_effort().with_buffer(50),
    )
    .unwrap();
    let mut h = Harness::new(sw);
    // 20-cell frames every 100 µs: 2× the line.
    h.feed(frames(
        a,
        1,
        32,
        Instant::ZERO,
        Duration::from_micros(100),
        1000,
        SDU,
    ));
    h.drain();
    let s = h.sw.port_stats(b).unwrap();
    let frames_out = s.counters.frames_out;
    assert!(frames_out > 490 && frames_out < 520, "{frames_out}");
    assert_eq!(s.counters.dropped.queue_full, (1000 - frames_out) * 20);
    // Each frame that left is whole: frame mode never cuts one.
    assert_eq!(s.counters.cells_out, frames_out * 20);
}
