//! A released connection drains: its input label goes at once, what it had queued
//! still leaves at its output line's pace, in order, and it is removed when empty or
//! at its deadline with the rest flushed (counted). Virtual time throughout.

use std::time::Duration;

use crate::common::*;
use natm_proto::time::Instant;
use natm_proto::wire::cell::Pti;
use natm_switch::{
    Contract, CrossConnect, DropCause, PortConfig, PortId, Switch, SwitchError, Transmit, VcAddr,
    Verdict,
};

const OC3: u64 = 155_520_000;
/// A slow output line: one cell every 424 µs.
const SLOW: u64 = 1_000_000;
const CELL_TIME_NS: u64 = 424_000;

/// A fast input port `a` and a slow output port `b`, one VC a 1/32 → b 2/40 with
/// `n` cells queued at time 0 (the fill octet numbers them).
fn backlog(n: u8) -> (Switch, PortId, PortId, natm_switch::ConnId) {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(OC3)).unwrap();
    let b = sw.add_port(PortConfig::new(SLOW)).unwrap();
    let id = sw
        .connect(
            CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
            Contract::best_effort(),
        )
        .unwrap();
    for i in 0..n {
        assert_eq!(
            sw.handle_cell(Instant::ZERO, a, cell(1, 32, Pti::UserData, i)),
            Ok(Verdict::Queued)
        );
    }
    (sw, a, b, id)
}

fn fills(out: &[(Instant, Transmit)]) -> Vec<u8> {
    out.iter()
        .map(|(_, u)| match u {
            Transmit::Cell(c) => c[5],
            Transmit::Frame { .. } => panic!("a cell port sends cells"),
        })
        .collect()
}

#[test]
fn a_released_vc_sends_what_it_queued_at_line_pace_then_goes() {
    let (mut sw, a, b, id) = backlog(100);
    let t0 = Instant::ZERO;
    sw.release(t0, id, Duration::from_secs(1)).unwrap();
    // Its input label is gone at once: later cells are unknown, and the label can
    // be given to a new connection while the old one drains.
    assert_eq!(
        sw.handle_cell(t0, a, cell(1, 32, Pti::UserData, 0xEE)),
        Ok(Verdict::Dropped(DropCause::UnknownVc))
    );
    assert_eq!(sw.lookup(a, 1, 32), None);
    assert!(sw.is_draining_to(VcAddr::new(b, 2, 40)));
    assert_eq!(sw.draining(), 1);
    let mut h = Harness::new(sw);
    h.drain();
    let out = &h.out[b.index()];
    assert_eq!(fills(out), (0..100).collect::<Vec<u8>>(), "all, in order");
    // Paced by the slow line: the last leaves 99 cell times after the first.
    let span = out[99].0.as_nanos() - out[0].0.as_nanos();
    assert!(span >= 99 * CELL_TIME_NS - 99, "{span} ns");
    assert!(out
        .iter()
        .all(|(_, u)| matches!(u, Transmit::Cell(c) if vci_of(c) == 40)));
    // Then it is gone, nothing flushed, its output label free.
    assert!(h.sw.vc_stats(id).is_none());
    assert_eq!(h.sw.draining(), 0);
    assert!(!h.sw.is_draining_to(VcAddr::new(b, 2, 40)));
    let s = h.sw.stat();
    assert!(s.vcs.is_empty());
    assert_eq!(s.ports[b.index()].counters.dropped.flushed, 0);
    assert_eq!(s.ports[b.index()].counters.cells_out, 100);
    assert_eq!(h.sw.queue_cells(b), Some(0));
    assert_eq!(h.sw.poll_timeout(), None);
    assert_eq!(
        h.sw.release(h.now, id, Duration::from_secs(1)),
        Err(SwitchError::UnknownConnection(id))
    );
}

#[test]
fn a_drain_is_bounded_and_flushes_the_rest_at_its_deadline() {
    let (mut sw, _a, b, id) = backlog(200);
    // 20 ms is 47 cell times of the slow line: the rest is flushed then.
    let within = Duration::from_millis(20);
    sw.release(Instant::ZERO, id, within).unwrap();
    let deadline = Instant::ZERO + within;
    // The deadline is something to wake for even while the line is busy.
    assert!(sw.poll_transmit(Instant::ZERO, b).is_some());
    assert!(sw.poll_timeout().is_some_and(|t| t <= deadline));
    let mut h = Harness::new(sw);
    h.drain();
    let sent = 1 + h.out[b.index()].len() as u64;
    assert!(h.out[b.index()].iter().all(|(t, _)| *t <= deadline));
    assert!(
        (40..=50).contains(&sent),
        "{sent} cells in 20 ms at 1 Mbit/s"
    );
    let s = h.sw.stat();
    assert!(s.vcs.is_empty(), "removed at its deadline");
    assert_eq!(s.ports[b.index()].counters.dropped.flushed, 200 - sent);
    assert_eq!(h.sw.queue_cells(b), Some(0));
    assert_eq!(h.sw.draining(), 0);
}

#[test]
fn releasing_an_idle_vc_or_with_no_time_removes_it_at_once() {
    let (mut sw, a, b, id) = backlog(0);
    sw.release(Instant::ZERO, id, Duration::from_secs(1))
        .unwrap();
    assert!(sw.vc_stats(id).is_none());
    assert_eq!(sw.draining(), 0);
    let id = sw
        .connect(
            CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
            Contract::best_effort(),
        )
        .unwrap();
    for i in 0..5 {
        sw.handle_cell(Instant::ZERO, a, cell(1, 32, Pti::UserData, i))
            .unwrap();
    }
    sw.release(Instant::ZERO, id, Duration::ZERO).unwrap();
    assert!(sw.vc_stats(id).is_none());
    let s = sw.stat();
    assert_eq!(s.ports[b.index()].counters.dropped.flushed, 5);
    assert_eq!(sw.queue_cells(b), Some(0));
}

/// A new connection takes the released one's input label while it drains; ending
/// the old one (disconnect) or its drain leaves the new one's entry alone.
#[test]
fn the_input_label_is_reusable_while_the_old_vc_drains() {
    let (mut sw, a, b, old) = backlog(10);
    sw.release(Instant::ZERO, old, Duration::from_secs(1))
        .unwrap();
    let new = sw
        .connect(
            CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 41)),
            Contract::best_effort(),
        )
        .unwrap();
    assert_eq!(sw.lookup(a, 1, 32), Some(new));
    // Releasing it again changes nothing; disconnecting it flushes what is left.
    sw.release(Instant::ZERO, old, Duration::from_secs(1))
        .unwrap();
    let last = sw.disconnect(old).unwrap();
    assert_eq!(last.counters.dropped.flushed, 10);
    assert_eq!(sw.lookup(a, 1, 32), Some(new), "the new entry stays");
    for i in 0..3 {
        sw.handle_cell(Instant::ZERO, a, cell(1, 32, Pti::UserData, i))
            .unwrap();
    }
    let mut h = Harness::new(sw);
    h.drain();
    let got = h.cells_by_vci(b, Instant::ZERO, secs(10.0));
    assert_eq!((got.get(&40), got.get(&41)), (None, Some(&3)));
}
