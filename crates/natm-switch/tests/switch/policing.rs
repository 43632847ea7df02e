//! Usage parameter control at the input port (specs.md §3, I.371): a VC sending at
//! twice its PCR is tagged or cut to its contract, a conforming VC is untouched, and
//! tagged cells are the first dropped when the output port congests.

use std::time::Duration;

use crate::common::*;
use natm_proto::time::Instant;
use natm_proto::wire::cell::Pti;
use natm_switch::{
    Contract, CrossConnect, DropCause, PortConfig, PortId, SchedulerKind, Switch, VcAddr, Verdict,
};

/// 42.4 Mbit/s: 100,000 cells/s.
const LINE: u64 = 42_400_000;
const US: Duration = Duration::from_micros(1);

/// Two VCs from two input ports to one output port: `bad` on 1/32 → 1/40, `good` on
/// 1/33 → 1/41.
fn switch(out_cfg: PortConfig, bad: Contract, good: Contract) -> Switch {
    let mut sw = Switch::new();
    let p0 = sw.add_port(PortConfig::new(LINE)).unwrap();
    let p1 = sw.add_port(PortConfig::new(LINE)).unwrap();
    let out = sw.add_port(out_cfg).unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(p0, 1, 32), VcAddr::new(out, 1, 40)),
        bad,
    )
    .unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(p1, 1, 33), VcAddr::new(out, 1, 41)),
        good,
    )
    .unwrap();
    sw
}

/// PCR 2,000 cells/s (T = 500 µs); the bad VC sends every 250 µs (2× PCR), the good
/// one every 600 µs; one second of each.
fn run(violation_tags: bool) -> Harness {
    let bad = if violation_tags {
        Contract::cbr(2000).tagging()
    } else {
        Contract::cbr(2000)
    };
    let sw = switch(PortConfig::new(LINE), bad, Contract::cbr(2000));
    let mut h = Harness::new(sw);
    h.feed(cbr(PortId(0), 1, 32, Instant::ZERO, US * 250, 4000));
    h.feed(cbr(PortId(1), 1, 33, Instant::ZERO, US * 600, 1667));
    h.drain();
    h
}

#[test]
fn gcra_tags_every_other_cell_of_a_vc_at_twice_its_pcr() {
    let h = run(true);
    let stat = h.sw.stat();
    let (bad, good) = (&stat.vcs[0].counters, &stat.vcs[1].counters);
    eprintln!("tagging: bad VC {bad:?}\n good VC {good:?}");
    // GCRA(500 µs, 0): cells at 0, 500, 1000 … conform, those in between do not.
    assert_eq!(
        (bad.cells_in, bad.tagged, bad.cells_out),
        (4000, 2000, 4000)
    );
    assert_eq!(bad.dropped.total(), 0);
    let cells = h.cells(PortId(2));
    let tagged_out = cells
        .iter()
        .filter(|c| vci_of(c) == 40 && clp_of(c))
        .count();
    assert_eq!(tagged_out, 2000);
    assert_eq!(
        (good.tagged, good.dropped.total(), good.cells_out),
        (0, 0, 1667)
    );
    assert!(cells.iter().filter(|c| vci_of(c) == 41).all(|c| !clp_of(c)));
    assert_eq!(stat.ports[0].counters.tagged, 2000);
}

#[test]
fn gcra_discards_down_to_the_contract_and_leaves_a_conforming_vc_alone() {
    let h = run(false);
    let stat = h.sw.stat();
    let (bad, good) = (&stat.vcs[0].counters, &stat.vcs[1].counters);
    assert_eq!(
        (bad.dropped.policing, bad.cells_out, bad.tagged),
        (2000, 2000, 0)
    );
    // What passed is the contract's rate: 2,000 cells in one second.
    let got = h.cells_by_vci(PortId(2), Instant::ZERO, secs(1.0));
    assert_eq!(got[&40], 2000);
    assert_eq!((good.dropped.total(), good.cells_out), (0, 1667));
    assert_eq!(stat.ports[0].counters.dropped.policing, 2000);
    assert_eq!(
        h.verdicts
            .iter()
            .filter(|v| **v == Verdict::Dropped(DropCause::Policing))
            .count(),
        2000
    );
}

#[test]
fn cdvt_absorbs_jitter_up_to_the_tolerance() {
    // Cells at exactly PCR but each one 100 µs late or early alternately: with a CDVT
    // of 100 µs every cell conforms, with none half of them do not.
    let mut sw = switch(
        PortConfig::new(LINE),
        Contract::cbr(2000).with_cdvt(US * 100),
        Contract::cbr(2000),
    );
    for k in 0..100u64 {
        let t = Instant::from_nanos(k * 500_000 + if k % 2 == 0 { 100_000 } else { 0 });
        sw.handle_cell(t, PortId(0), cell(1, 32, Pti::UserDataEnd, 0))
            .unwrap();
        sw.handle_cell(t, PortId(1), cell(1, 33, Pti::UserDataEnd, 0))
            .unwrap();
    }
    let stat = sw.stat();
    assert_eq!(stat.vcs[0].counters.dropped.policing, 0);
    assert!(stat.vcs[1].counters.dropped.policing >= 45);
}

#[test]
fn vbr_dual_gcra_allows_a_burst_of_mbs_cells_then_polices_the_scr() {
    // specs.md §3.3's dual example scaled to µs: T = 10, T_s = 40, MBS = 4.
    let mut sw = switch(
        PortConfig::new(LINE),
        Contract::vbr(100_000, 25_000, 4),
        Contract::best_effort(),
    );
    let at = |us: u64| Instant::from_nanos(us * 1000);
    let c = || cell(1, 32, Pti::UserDataEnd, 0);
    let verdict = |sw: &mut Switch, us| sw.handle_cell(at(us), PortId(0), c()).unwrap();
    for us in [0, 10, 20, 30] {
        assert_eq!(verdict(&mut sw, us), Verdict::Queued, "{us}");
    }
    for us in [40, 50] {
        assert_eq!(
            verdict(&mut sw, us),
            Verdict::Dropped(DropCause::Policing),
            "{us}"
        );
    }
    for us in [200, 210, 220, 230] {
        assert_eq!(verdict(&mut sw, us), Verdict::Queued, "{us}");
    }
    assert_eq!(verdict(&mut sw, 240), Verdict::Dropped(DropCause::Policing));
}

#[test]
fn tagged_cells_are_dropped_first_when_the_port_congests() {
    // The output port gets 1.2× its rate: a tagging VC at 0.6 (half of it beyond
    // its PCR of 0.3) and a best-effort VC at 0.6. Untagged load is 0.9 < 1, so
    // above the CLP threshold only tagged cells need go.
    let out = PortConfig::new(LINE)
        .scheduler(SchedulerKind::Fifo)
        .buffer(100)
        .clp_threshold(50);
    let sw = switch(
        out,
        Contract::cbr(30_000).tagging().with_frame_discard(false),
        Contract::best_effort().with_frame_discard(false),
    );
    let mut h = Harness::new(sw);
    let n = 60_000; // one second at 0.6 of the line
    h.feed(cbr(
        PortId(0),
        1,
        32,
        Instant::ZERO,
        Duration::from_nanos(16_667),
        n,
    ));
    h.feed(jittered(
        cbr(
            PortId(1),
            1,
            33,
            Instant::ZERO,
            Duration::from_nanos(16_667),
            n,
        ),
        Duration::from_nanos(16_667),
        7,
    ));
    h.drain();
    let stat = h.sw.stat();
    let (tagger, be) = (&stat.vcs[0].counters, &stat.vcs[1].counters);
    eprintln!(
        "tagger {tagger:?}\nbest effort {be:?}\nport {:?}",
        stat.ports[2]
    );
    assert!(tagger.tagged > 25_000);
    assert!(
        tagger.dropped.clp > 5_000,
        "congestion dropped tagged cells"
    );
    assert_eq!(tagger.dropped.queue_full + be.dropped.queue_full, 0);
    assert_eq!(be.dropped.total(), 0, "no untagged cell was lost");
    let untagged_out = h
        .cells(PortId(2))
        .iter()
        .filter(|c| vci_of(c) == 40 && !clp_of(c))
        .count() as u64;
    assert_eq!(untagged_out, tagger.cells_in - tagger.tagged);
    assert!(stat.ports[2].max_queue_cells <= 100);
}

#[test]
fn frame_mode_polices_a_frame_as_its_cells() {
    // PCR 10,000 cells/s (100 µs); 20-cell frames (952 octets) every 2 ms conform on
    // average but a frame is 20 cells back to back at the input line's rate, so the
    // CDVT must hold the burst: with 19 cells' worth of it they pass, with none only
    // the first cell of each would, so each frame is cut.
    let mk = |cdvt: Duration| {
        let sw = switch(
            PortConfig::new(LINE),
            Contract::cbr(10_000).with_cdvt(cdvt),
            Contract::best_effort(),
        );
        let mut h = Harness::new(sw);
        h.feed(frames(PortId(0), 1, 32, Instant::ZERO, US * 2000, 100, 952));
        h.drain();
        h.sw.stat().vcs[0].counters
    };
    let tolerant = mk(US * 1900);
    assert_eq!((tolerant.frames_out, tolerant.dropped.policing), (100, 0));
    let strict = mk(Duration::ZERO);
    assert_eq!((strict.frames_out, strict.dropped.policing), (0, 2000));
}

#[test]
fn a_cell_already_tagged_is_discarded_not_tagged_again() {
    let mut sw = switch(
        PortConfig::new(LINE),
        Contract::cbr(2000).tagging(),
        Contract::best_effort(),
    );
    let mut pre_tagged = cell(1, 32, Pti::UserDataEnd, 0);
    pre_tagged[..5].copy_from_slice(
        &natm_proto::wire::cell::HeaderRepr {
            clp: true,
            ..natm_proto::wire::cell::HeaderRepr::uni(1, 32, Pti::UserDataEnd)
        }
        .to_bytes(),
    );
    let verdicts: Vec<Verdict> = (0..4u64)
        .map(|k| {
            let t = Instant::from_nanos(k * 250_000);
            let c = if k % 2 == 0 {
                pre_tagged
            } else {
                cell(1, 32, Pti::UserDataEnd, 0)
            };
            sw.handle_cell(t, PortId(0), c).unwrap()
        })
        .collect();
    // 0 µs conforms; 250 µs (CLP 0) is tagged; 500 µs conforms; 750 µs is tagged.
    assert_eq!(
        verdicts,
        [
            Verdict::Queued,
            Verdict::Tagged,
            Verdict::Queued,
            Verdict::Tagged
        ]
    );
    // A pre-tagged cell out of contract has nothing left to lose: discarded.
    assert_eq!(
        sw.handle_cell(Instant::from_nanos(900_000), PortId(0), pre_tagged),
        Ok(Verdict::Dropped(DropCause::Policing))
    );
}
