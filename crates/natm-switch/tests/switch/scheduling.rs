//! The port schedulers under overload: `rr` shares a congested port equally (seed
//! 000 §5.3.3's assumption for packet-pair), `fifo` in proportion to what each VC
//! sends, and `wrr` keeps a guaranteed VC at its reserved rate while best effort
//! floods the same port.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;
use natm_switch::{Contract, CrossConnect, PortConfig, PortId, SchedulerKind, Switch, VcAddr};

/// 42.4 Mbit/s: 100,000 cells/s, a cell every 10 µs.
const LINE: u64 = 42_400_000;
const LINE_CELLS: f64 = 100_000.0;
const CELL: Duration = Duration::from_micros(10);
const START: f64 = 0.1;
const END: f64 = 0.6;

/// Three input ports, one output port with `kind`; VC i enters on port i as 1/32+i
/// and leaves as 1/40+i with `contract(i)`.
fn switch(kind: SchedulerKind, contract: impl Fn(u16) -> Contract, vcs: u16) -> (Switch, PortId) {
    let mut sw = Switch::new();
    let inputs: Vec<PortId> = (0..vcs)
        .map(|_| sw.add_port(PortConfig::new(622_080_000)).unwrap())
        .collect();
    let out = sw.add_port(PortConfig::new(LINE).scheduler(kind)).unwrap();
    for (i, &p) in inputs.iter().enumerate() {
        let i = i as u16;
        sw.connect(
            CrossConnect::vc(VcAddr::new(p, 1, 32 + i), VcAddr::new(out, 1, 40 + i)),
            contract(i),
        )
        .unwrap();
    }
    (sw, out)
}

/// Runs VC i at `load[i]` times the line rate for `END` seconds; returns each VC's
/// share of the cells the port sent in [START, END).
fn run(kind: SchedulerKind, contract: impl Fn(u16) -> Contract, load: &[f64]) -> Vec<f64> {
    let policed: Vec<bool> = (0..load.len() as u16)
        .map(|i| contract(i).pcr.is_some())
        .collect();
    let (sw, out) = switch(kind, contract, load.len() as u16);
    let mut h = Harness::new(sw);
    for (i, &l) in load.iter().enumerate() {
        let interval = CELL.div_f64(l);
        let count = (END / interval.as_secs_f64()) as u64;
        let cells = cbr(
            PortId(i as u16),
            1,
            32 + i as u16,
            secs(0.0),
            interval,
            count,
        );
        // A policed VC sends conforming (shaped) cells; best effort jitters.
        if policed[i] {
            h.feed(cells);
        } else {
            h.feed(jittered(cells, interval, i as u64 + 1));
        }
    }
    h.run_until(secs(END));
    let got = h.cells_by_vci(out, secs(START), secs(END));
    let window = (END - START) * LINE_CELLS;
    (0..load.len())
        .map(|i| got.get(&(40 + i as u16)).copied().unwrap_or(0) as f64 / window)
        .collect()
}

/// Each VC may fill the whole port buffer. The cells are not AAL5 frames, so no
/// frame discard.
fn shared(_: u16) -> Contract {
    Contract::best_effort()
        .with_buffer(4096)
        .with_frame_discard(false)
}

/// Each VC has a queue of its own 256 cells.
fn per_vc(_: u16) -> Contract {
    Contract::best_effort().with_frame_discard(false)
}

#[test]
fn rr_gives_three_overloading_vcs_a_third_each() {
    let share = run(SchedulerKind::RoundRobin, per_vc, &[0.5, 1.0, 1.5]);
    eprintln!("rr shares: {share:?}");
    for s in &share {
        assert!((s - 1.0 / 3.0).abs() < 0.01, "{share:?}");
    }
    assert!(share.iter().sum::<f64>() > 0.999, "the port is kept busy");
}

#[test]
fn fifo_gives_the_heaviest_sender_the_most() {
    let share = run(SchedulerKind::Fifo, shared, &[0.5, 1.0, 1.5]);
    eprintln!("fifo shares: {share:?}");
    // Roughly in proportion to the load offered: 1/6, 1/3, 1/2.
    for (s, want) in share.iter().zip([1.0 / 6.0, 1.0 / 3.0, 0.5]) {
        assert!((s - want).abs() < 0.04, "{share:?}");
    }
    assert!(share[2] > share[1] && share[1] > share[0]);
}

#[test]
fn per_vc_buffer_limits_make_even_fifo_fairer() {
    // With each VC held to its own 64 cells, a flood fills only its own share.
    let share = run(
        SchedulerKind::Fifo,
        |_| Contract::best_effort().with_buffer(64),
        &[0.5, 1.0, 1.5],
    );
    eprintln!("fifo, 64-cell VC buffers: {share:?}");
    assert!(share[2] < 0.4, "{share:?}");
}

/// VC 0 reserves 30 % of the port and sends exactly that; VCs 1-3 are best effort
/// and each offers the whole line rate.
fn guaranteed(kind: SchedulerKind) -> Vec<f64> {
    let contract = |i: u16| {
        if i == 0 {
            Contract::cbr(30_000)
                .with_cdvt(Duration::from_micros(20))
                .with_buffer(1024)
        } else {
            Contract::best_effort().with_buffer(1024)
        }
    };
    run(kind, contract, &[0.3, 1.0, 1.0, 1.0])
}

#[test]
fn wrr_keeps_a_guaranteed_vc_at_its_reserved_rate_under_a_flood() {
    let share = guaranteed(SchedulerKind::WeightedRoundRobin);
    eprintln!("wrr shares: {share:?}");
    assert!((share[0] / 0.3 - 1.0).abs() < 0.01, "{share:?}");
    // Best effort splits the rest equally.
    for s in &share[1..] {
        assert!((s - 0.7 / 3.0).abs() < 0.01, "{share:?}");
    }
}

#[test]
fn rr_and_fifo_do_not_keep_the_reservation() {
    let rr = guaranteed(SchedulerKind::RoundRobin);
    let fifo = guaranteed(SchedulerKind::Fifo);
    eprintln!("guaranteed VC, rr: {rr:?}, fifo: {fifo:?}");
    assert!(rr[0] < 0.26, "rr gives a quarter: {rr:?}");
    assert!(fifo[0] < 0.29, "{fifo:?}");
}

#[test]
fn rr_shares_cells_not_frames_in_frame_mode() {
    // VC 0 sends 20-cell frames, VC 1 one-cell frames; both overload the port.
    let (sw, out) = switch(
        SchedulerKind::RoundRobin,
        |_| Contract::best_effort().with_buffer(1024),
        2,
    );
    let mut h = Harness::new(sw);
    let t = secs(0.0);
    // 952 octets and the 8-octet trailer fill 20 cells.
    h.feed(frames(PortId(0), 1, 32, t, CELL * 20, 30_000, 952));
    h.feed(frames(PortId(1), 1, 33, t, CELL, 60_000, 20));
    h.run_until(secs(END));
    let got: HashMap<u16, u64> = h.cells_by_vci(out, secs(START), secs(END));
    let (a, b) = (got[&40] as f64, got[&41] as f64);
    eprintln!("frame-mode rr: {a} cells of 20-cell frames, {b} of 1-cell frames");
    assert!((a / b - 1.0).abs() < 0.02);
}
