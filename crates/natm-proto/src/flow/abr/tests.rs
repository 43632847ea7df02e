use super::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

/// PCR 100,000 cells/s, MCR 1,000: ICR is 6,250.
fn source() -> Abr {
    Abr::new(AbrConfig::new(100_000.0, 1_000.0), 1024)
}

fn brm(er: f64, ci: bool, ni: bool) -> RmCell {
    RmCell {
        ci,
        ni,
        ..RmCell::forward(Rate::from_cells(er), Rate::ZERO, Rate::ZERO).turned_around(false)
    }
}

/// Sends `n` TPDUs of `bytes` as soon as the source allows from `start`; every FRM
/// due on the way is taken. The time after the last one, and the FRMs.
fn backlog(s: &mut Abr, start: u64, n: usize, bytes: usize) -> (u64, Vec<RmCell>) {
    let mut now = start;
    let mut frms = Vec::new();
    let mut sent = 0;
    while sent < n {
        if let Some(f) = s.poll_rm(at(now)) {
            frms.push(f);
        }
        match s.poll_send(at(now), 0, bytes) {
            Permit::Now => {
                s.on_sent(at(now), bytes, false);
                sent += 1;
            }
            Permit::At(t) => now = t.as_nanos(),
            Permit::Blocked => panic!("ABR never waits for ACKs"),
        }
    }
    (now, frms)
}

#[test]
fn the_first_cell_is_a_forward_rm_cell_with_pcr_as_er() {
    let mut s = source();
    assert_eq!(s.acr(), 6_250.0, "ICR = PCR/16");
    let f = s.poll_rm(at(0)).expect("rule 3: the first cell is an FRM");
    assert_eq!(f.dir, Direction::Forward);
    assert_eq!(
        (f.er, f.ccr, f.mcr),
        (
            Rate::from_cells(100_000.0),
            Rate::from_cells(6_250.0),
            Rate::from_cells(1_000.0)
        )
    );
    assert!(!f.ci && !f.ni);
    assert_eq!(s.poll_rm(at(0)), None, "one FRM, then Nrm cells first");
}

#[test]
fn a_forward_rm_cell_follows_every_nrm_cells() {
    let mut s = source();
    // A 1 KiB TPDU is 23 cells: 100 of them are 2,300 cells, an FRM per 32 of
    // them, at most one per TPDU: every second TPDU crosses 32 cells.
    assert_eq!(tpdu_cells(1024), 23);
    let (_, frms) = backlog(&mut s, 0, 100, 1024);
    // The first, then one before TPDUs 3, 5, …, 99.
    assert_eq!(frms.len(), 1 + 49, "{}", frms.len());
    assert_eq!(s.stats().frm_sent, 50);
}

#[test]
fn a_slow_source_still_sends_one_every_trm() {
    let mut s = source();
    s.poll_rm(at(0));
    // Three cells' worth (≥ Mrm), then quiet: nothing until Trm has passed.
    s.on_sent(at(0), 100, false);
    assert_eq!(s.poll_rm(at(99 * MS)), None);
    assert!(s.poll_rm(at(100 * MS)).is_some());
    // Fewer than Mrm cells since: none even after Trm.
    assert_eq!(s.poll_rm(at(300 * MS)), None);
}

#[test]
fn backward_rm_cells_move_acr_between_mcr_and_the_explicit_rate() {
    let mut s = source();
    s.poll_rm(at(0));
    // No CI, no NI: up by RIF·PCR = 6,250.
    s.on_backward_rm(at(MS), &brm(100_000.0, false, false));
    assert_eq!(s.acr(), 12_500.0);
    // NI: hold.
    s.on_backward_rm(at(MS), &brm(100_000.0, false, true));
    assert_eq!(s.acr(), 12_500.0);
    // CI: down by ACR·RDF.
    s.on_backward_rm(at(MS), &brm(100_000.0, true, false));
    assert_eq!(s.acr(), 12_500.0 * 15.0 / 16.0);
    // ER below ACR: ACR = ER (the encoding rounds ER down, never up).
    s.on_backward_rm(at(MS), &brm(5_000.0, false, false));
    assert_eq!(s.acr(), Rate::from_cells(5_000.0).cells());
    // ER below MCR: MCR.
    s.on_backward_rm(at(MS), &brm(10.0, false, false));
    assert_eq!(s.acr(), 1_000.0);
    // Never above PCR.
    for _ in 0..40 {
        s.on_backward_rm(at(MS), &brm(1e9, false, false));
    }
    assert_eq!(s.acr(), 100_000.0);
    let st = s.stats();
    assert_eq!((st.brm_taken, st.brm_ci), (45, 1));
    // A forward cell (not turned around) is not feedback.
    s.on_backward_rm(
        at(MS),
        &RmCell::forward(Rate::from_cells(10.0), Rate::ZERO, Rate::ZERO),
    );
    assert_eq!((s.acr(), s.stats().brm_taken), (100_000.0, 45));
}

#[test]
fn lost_feedback_slows_the_source_and_an_idle_source_restarts_at_icr() {
    let mut s = source();
    for _ in 0..40 {
        s.on_backward_rm(at(0), &brm(1e9, false, false));
    }
    assert_eq!(s.acr(), 100_000.0);
    // CRM (16) FRMs without a BRM: the 17th is preceded by a cut of ACR·CDF.
    let (_, frms) = backlog(&mut s, 0, 40, 1024);
    assert!(frms.len() > 17);
    assert!(s.acr() < 100_000.0, "{}", s.acr());
    assert!(s.stats().missing_feedback > 0);
    let cut = s.acr();
    // A BRM resets the count.
    s.on_backward_rm(at(0), &brm(cut, false, true));
    let before = s.stats().missing_feedback;
    // Idle for ADTF: back to ICR at the next FRM.
    for _ in 0..40 {
        s.on_backward_rm(at(0), &brm(1e9, false, false));
    }
    let last = s.last_sent.unwrap().as_nanos();
    s.on_sent(at(last), 1024, false);
    s.on_sent(at(last), 1024, false);
    assert!(s.poll_rm(at(last + 600 * MS)).is_some());
    assert_eq!(s.acr(), 6_250.0);
    assert_eq!(s.stats().missing_feedback, before);
}

#[test]
fn a_backlogged_source_sends_at_acr() {
    let mut s = source();
    s.poll_rm(at(0));
    s.on_backward_rm(at(0), &brm(20_000.0, false, false));
    let acr = s.acr();
    assert_eq!(acr, Rate::from_cells(20_000.0).cells().min(12_500.0));
    // One second of 1 KiB TPDUs (23 cells each) and FRMs, each FRM answered at once
    // with NI (hold): ACR cells, within the bucket's burst and one TPDU.
    let mut now = 0;
    let mut cells = 0u64;
    while now < 1_000 * MS {
        if s.poll_rm(at(now)).is_some() {
            cells += 1;
            s.on_backward_rm(at(now), &brm(20_000.0, false, true));
        }
        match s.poll_send(at(now), 0, 1024) {
            Permit::Now => {
                s.on_sent(at(now), 1024, false);
                cells += 23;
            }
            Permit::At(t) => now = t.as_nanos(),
            Permit::Blocked => unreachable!(),
        }
    }
    let err = (cells as f64 - acr).abs() / acr;
    assert!(err < 0.03, "{cells} cells in 1 s at ACR {acr}");
    // Reported in payload bit/s: ACR / 23 TPDUs of 8,192 bits.
    assert_eq!(s.rate_bps(), Some(acr / 23.0 * 8192.0));
}

#[test]
fn a_closed_loop_with_an_explicit_rate_settles_on_it() {
    // One source against a network that answers each FRM, one round trip later, with
    // ER = 40,000 cells/s and CI while the source's CCR is above it (EFCI).
    let mut s = source();
    let rtt = 2 * MS;
    let mut pending: Vec<(u64, RmCell)> = Vec::new();
    let mut now = 0;
    let mut acrs = Vec::new();
    while now < 500 * MS {
        pending.retain(|(t, c)| {
            if *t <= now {
                s.on_backward_rm(at(now), c);
                false
            } else {
                true
            }
        });
        if let Some(f) = s.poll_rm(at(now)) {
            let congested = f.ccr.cells() > 40_000.0;
            let mut back = f.turned_around(congested);
            back.er = Rate::from_cells(40_000.0);
            pending.push((now + rtt, back));
        }
        match s.poll_send(at(now), 0, 1024) {
            Permit::Now => s.on_sent(at(now), 1024, false),
            Permit::At(t) => now = t.as_nanos().min(now + MS),
            Permit::Blocked => unreachable!(),
        }
        acrs.push(s.acr());
    }
    let er = Rate::from_cells(40_000.0).cells();
    let tail = &acrs[acrs.len() * 3 / 4..];
    assert!(tail.iter().all(|&a| a <= er), "never above ER");
    assert!(
        tail.iter().all(|&a| a >= er * 0.8),
        "settled near ER: {:?}",
        &tail[..5]
    );
}

#[test]
fn build_makes_an_abr_source_from_the_qos_rates() {
    use crate::flow::{build, FlowKind, FlowParams};
    let p = FlowParams {
        rate: 100_000_000,
        min_rate: 1_000_000,
        bucket: None,
        tpdu_size: 4096,
        window: 64,
        error_control: true,
    };
    let f = build(FlowKind::Abr, p);
    assert_eq!(f.name(), "abr");
    // 100 Mbit/s of 4 KiB TPDUs (86 cells each) starts at PCR/16.
    let r = f.rate_bps().unwrap();
    assert!((r - 100e6 / 16.0).abs() < 1.0, "{r}");
    // No PCR: 10 Gbit/s, the network's ER is the cap; ICR 10 Mbit/s, not PCR/16.
    let mut none = build(FlowKind::Abr, FlowParams { rate: 0, ..p });
    assert!((none.rate_bps().unwrap() - 10e6).abs() < 1.0);
    none.on_backward_rm(Instant::ZERO, &brm(1e9, false, false));
    assert!(
        none.rate_bps().unwrap() > 600e6,
        "one BRM: RIF·PCR, 625 Mbit/s up"
    );
    // ICR is at least MCR.
    let floor = build(
        FlowKind::Abr,
        FlowParams {
            min_rate: 10_000_000,
            ..p
        },
    );
    assert!((floor.rate_bps().unwrap() - 10e6).abs() < 100.0);
}

proptest! {
    #[test]
    fn acr_stays_within_mcr_pcr_and_the_last_explicit_rate(
        cells in proptest::collection::vec((0u16..0x8000, any::<bool>(), any::<bool>(), 0u64..50), 1..200)
    ) {
        let mut s = source();
        let mut now = 0;
        for (er_bits, ci, ni, sends) in cells {
            for _ in 0..sends {
                s.on_sent(at(now), 1024, false);
                now += MS / 10;
                let _ = s.poll_rm(at(now));
            }
            let er = Rate::from_bits(er_bits);
            let mut c = brm(1.0, ci, ni);
            c.er = er;
            s.on_backward_rm(at(now), &c);
            let acr = s.acr();
            prop_assert!((1_000.0..=100_000.0).contains(&acr), "{acr}");
            prop_assert!(acr <= er.cells().max(1_000.0), "{acr} above ER {}", er.cells());
        }
    }
}
