use super::*;
use proptest::prelude::*;

/// A line of 100,000 cells/s (42.4 Mbit/s): the interval is 500 cell times, 5 ms.
fn erica() -> Erica {
    Erica::new(100_000, Duration::from_micros(10))
}

fn ms(t: f64) -> Instant {
    Instant::from_nanos((t * 1e6) as u64)
}

fn frm(er: f64, ccr: f64) -> [u8; 48] {
    RmCell::forward(Rate::from_cells(er), Rate::from_cells(ccr), Rate::ZERO).to_bytes()
}

fn er_of(p: &[u8]) -> f64 {
    RmCell::parse(p).unwrap().er.cells()
}

/// Offers `rates` (cells/s, one per VC) for `[from, to)` ms, each VC sending an FRM
/// (ER = PCR, CCR = its rate) every 32 of its cells; returns the ER each VC's FRMs
/// left with last.
fn offer(e: &mut Erica, vcs: &mut [Option<AbrVc>], rates: &[f64], from: f64, to: f64) -> Vec<f64> {
    let mut last = vec![f64::NAN; rates.len()];
    // Events in time order: (time, vc).
    let mut events: Vec<(u64, usize)> = Vec::new();
    for (i, r) in rates.iter().enumerate() {
        let gap = 1e9 / r;
        let mut t = from * 1e6;
        while t < to * 1e6 {
            events.push((t as u64, i));
            t += gap;
        }
    }
    events.sort();
    let mut sent = vec![0u64; rates.len()];
    for (t, i) in events {
        let now = Instant::from_nanos(t);
        if sent[i].is_multiple_of(32) {
            let mut p = frm(1e6, rates[i]);
            e.rm(now, &mut vcs[i], 0, &mut p);
            last[i] = er_of(&p);
        } else if let Some(a) = vcs[i].as_mut() {
            e.data(now, a, 1);
        }
        sent[i] += 1;
    }
    last
}

#[test]
fn the_interval_is_500_line_cells_and_at_least_a_millisecond() {
    assert_eq!(erica().interval(), Duration::from_millis(5));
    // 155.52 Mbit/s: 500 × 2.726 µs = 1.363 ms.
    let oc3 = Erica::new(366_792, Duration::from_nanos(2726));
    assert_eq!(oc3.interval(), Duration::from_nanos(1_363_000));
    let fast = Erica::new(10_000_000, Duration::from_nanos(100));
    assert_eq!(fast.interval(), MIN_AVERAGING);
}

#[test]
fn a_vc_whose_frames_miss_an_interval_is_still_active_and_counted() {
    // Two VCs, each a 683-cell frame (a 32 KiB TPDU) every other 5 ms interval, in
    // turn: no interval holds both, the two-interval window does. Each offers
    // 683 / 10 ms = 68,300 cells/s, 1.52 × the target between them.
    let mut e = erica();
    let mut vcs = [None, None];
    for k in 0..20u32 {
        let t = 5.0 * f64::from(k) + 0.1;
        let i = (k % 2) as usize;
        let mut p = frm(1e6, 68_300.0);
        e.rm(ms(t), &mut vcs[i], 0, &mut p);
        let a = vcs[i].as_mut().expect("made ABR by its FRM");
        e.data(ms(t), a, 682);
    }
    let m = e.stats().interval.expect("measured");
    assert_eq!(m.active_vcs, 2, "{m:?}");
    assert!((m.fair_share - 45_000.0).abs() < 1.0, "{m:?}");
    // The input over the two intervals: two frames in ~10 ms.
    assert!((m.input_rate - 136_600.0).abs() < 136_600.0 * 0.05, "{m:?}");
    let mut p = frm(1e6, 68_300.0);
    e.rm(ms(100.2), &mut vcs[0], 0, &mut p);
    assert!(
        er_of(&p) <= 45_000.0 * 1.02,
        "held to its share: {}",
        er_of(&p)
    );
}

#[test]
fn before_the_first_full_interval_rm_cells_get_the_fair_share_of_the_vcs_seen() {
    let mut e = erica();
    let mut vc = None;
    let mut p = frm(1e6, 1e6);
    assert_eq!(
        e.rm(ms(0.0), &mut vc, 0, &mut p),
        RmSeen::Forward { marked: true }
    );
    assert!(vc.is_some(), "a forward RM cell makes the VC ABR");
    assert_eq!(e.stats().interval, None, "no load measured yet");
    // One VC: the whole target (0.9 of 100,000 cells/s).
    assert_eq!(er_of(&p), Rate::from_cells(90_000.0).cells());
    // A second VC in the same interval: half of it, for both.
    let mut other = None;
    let mut q = frm(1e6, 1e6);
    e.rm(ms(1.0), &mut other, 0, &mut q);
    assert_eq!(er_of(&q), Rate::from_cells(45_000.0).cells());
    let mut p = frm(1e6, 1e6);
    e.rm(ms(4.9), &mut vc, 0, &mut p);
    assert_eq!(er_of(&p), Rate::from_cells(45_000.0).cells());
    // Never raised: a cell that carries less keeps it.
    let mut low = frm(10_000.0, 1e6);
    e.rm(ms(4.95), &mut vc, 0, &mut low);
    assert_eq!(er_of(&low), Rate::from_cells(10_000.0).cells());
    let mut e = erica();
    let mut vc = None;
    e.rm(ms(0.0), &mut vc, 0, &mut frm(1e6, 1e6));
    e.rm(ms(4.9), &mut vc, 0, &mut frm(1e6, 1e6));
    // The first interval ends at the first arrival 5 ms after it began.
    let mut p = frm(1e6, 1e6);
    assert_eq!(
        e.rm(ms(5.0), &mut vc, 0, &mut p),
        RmSeen::Forward { marked: true }
    );
    let i = e.stats().interval.unwrap();
    assert_eq!(i.active_vcs, 1);
    assert!(
        (i.input_rate - 400.0).abs() < 1e-6,
        "2 cells in 5 ms: {}",
        i.input_rate
    );
    assert!((i.target - 90_000.0).abs() < 1e-6);
    // A lone, lightly loaded VC gets the whole target.
    assert_eq!(er_of(&p), Rate::from_cells(90_000.0).cells());
}

#[test]
fn two_vcs_over_the_line_get_half_the_target_a_lone_one_all_of_it() {
    let mut e = erica();
    let mut vcs = [None, None];
    // 80,000 cells/s each: 1.78 × the target.
    let got = offer(&mut e, &mut vcs, &[80_000.0, 80_000.0], 0.0, 20.0);
    let i = e.stats().interval.unwrap();
    assert_eq!(i.active_vcs, 2);
    assert!((i.load - 160_000.0 / 90_000.0).abs() < 0.01, "z {}", i.load);
    assert!((i.fair_share - 45_000.0).abs() < 1e-6);
    for er in got {
        // VC share 80,000 / 1.78 = 45,000: both ≈ target / 2, rounded down by the
        // rate format (at most 1/512).
        assert!(er <= 45_000.0 && er > 45_000.0 * 0.99, "ER {er}");
    }
    // Alone (the other VC stopped), at the same rate: the whole target.
    let got = offer(&mut e, &mut vcs[..1], &[80_000.0], 20.0, 40.0);
    assert_eq!(e.stats().interval.unwrap().active_vcs, 1);
    assert!(
        got[0] <= 90_000.0 && got[0] > 90_000.0 * 0.99,
        "ER {}",
        got[0]
    );
    let s = e.stats();
    assert!(s.rm_forward > 0 && s.rm_marked > 0 && s.rm_backward == 0);
}

#[test]
fn a_vc_below_its_fair_share_may_keep_a_larger_vc_share_and_er_is_never_raised() {
    let mut e = erica();
    let mut vcs = [None, None];
    // Underload (z = 0.5): VC share = 2 × CCR, the fair share is the floor.
    offer(&mut e, &mut vcs, &[40_000.0, 5_000.0], 0.0, 10.0);
    let mut p = frm(1e6, 40_000.0);
    e.rm(ms(10.5), &mut vcs[0], 0, &mut p);
    let i = e.stats().interval.unwrap();
    assert!(i.load < 0.6, "z {}", i.load);
    let want = 40_000.0 / i.load;
    assert!(want > i.fair_share && want < i.target);
    assert!(
        (er_of(&p) - want).abs() / want < 0.01,
        "{} {want}",
        er_of(&p)
    );
    // An FRM that carries a lower ER than the port's keeps it.
    let mut p = frm(1_000.0, 40_000.0);
    assert_eq!(
        e.rm(ms(10.6), &mut vcs[0], 0, &mut p),
        RmSeen::Forward { marked: false }
    );
    assert_eq!(p, frm(1_000.0, 40_000.0));
}

#[test]
fn backward_and_malformed_rm_cells_are_never_edited() {
    let mut e = erica();
    let mut vcs = [None, None];
    offer(&mut e, &mut vcs, &[80_000.0, 80_000.0], 0.0, 10.0);
    let back = RmCell::forward(Rate::from_cells(1e6), Rate::from_cells(1e6), Rate::ZERO)
        .turned_around(false)
        .to_bytes();
    let mut p = back;
    assert_eq!(e.rm(ms(10.1), &mut vcs[0], 0, &mut p), RmSeen::Backward);
    assert_eq!(p, back);
    // A connection carrying only backward RM cells does not become ABR.
    let mut reverse = None;
    e.rm(ms(10.2), &mut reverse, 0, &mut p);
    assert_eq!(reverse, None);
    let mut bad = frm(1e6, 1e6);
    bad[3] ^= 1;
    let before = bad;
    assert_eq!(e.rm(ms(10.3), &mut vcs[0], 0, &mut bad), RmSeen::Invalid);
    assert_eq!(bad, before);
    assert_eq!(e.rm(ms(10.3), &mut vcs[0], 0, &mut []), RmSeen::Invalid);
    let s = e.stats();
    assert_eq!((s.rm_backward, s.rm_invalid), (2, 2));
}

#[test]
fn reservations_of_other_connections_come_off_the_target() {
    let mut e = erica();
    e.reserve(30_000);
    // An ABR VC's own reservation (say its MCR) is not taken off.
    let mut vc = None;
    let mut p = frm(1e6, 1e6);
    e.reserve(10_000);
    e.rm(ms(0.0), &mut vc, 10_000, &mut p);
    e.rm(ms(6.0), &mut vc, 10_000, &mut p);
    let i = e.stats().interval.unwrap();
    assert!((i.target - 0.9 * 70_000.0).abs() < 1e-6, "{}", i.target);
    // The ABR VC goes: its reservation with it.
    e.release(10_000, vc);
    e.rereserve(30_000, 100_000, None);
    e.rm(ms(12.0), &mut None, 0, &mut frm(1e6, 1e6));
    let mut p = frm(1e6, 1e6);
    e.rm(ms(12.1), &mut None, 0, &mut p);
    assert_eq!(e.stats().interval.unwrap().target, 0.0);
    assert_eq!(er_of(&p), 0.0, "nothing left for ABR: ER 0");
}

proptest! {
    /// Whatever arrives, in any order and at any time, a forward RM cell never
    /// leaves with a higher ER than it came with, never above the target, and
    /// anything else is never edited.
    #[test]
    fn er_is_never_raised(
        arrivals in proptest::collection::vec(
            (0u64..50_000_000, 0usize..4, 0u8..4, any::<u16>(), any::<u16>()),
            1..400,
        ),
        reserved in 0u64..200_000,
    ) {
        let mut e = erica();
        e.reserve(reserved);
        let mut vcs = [None; 4];
        let mut arrivals = arrivals;
        arrivals.sort_by_key(|a| a.0);
        for (t, i, kind, er, ccr) in arrivals {
            let now = Instant::from_nanos(t);
            let cell = RmCell {
                er: Rate::from_bits(er),
                ccr: Rate::from_bits(ccr),
                ..RmCell::forward(Rate::ZERO, Rate::ZERO, Rate::ZERO)
            };
            match kind {
                0 => {
                    if let Some(a) = vcs[i].as_mut() {
                        e.data(now, a, 1);
                    }
                }
                1 => {
                    let mut p = cell.to_bytes();
                    e.rm(now, &mut vcs[i], 0, &mut p);
                    let got = RmCell::parse(&p).unwrap();
                    prop_assert!(got.er.cells() <= cell.er.cells());
                    if let Some(m) = e.stats().interval {
                        prop_assert!(got.er.cells() <= m.target);
                    }
                    prop_assert_eq!(RmCell { er: got.er, ..cell }, got);
                }
                2 => {
                    let back = cell.turned_around(false).to_bytes();
                    let mut p = back;
                    e.rm(now, &mut vcs[i], 0, &mut p);
                    prop_assert_eq!(p, back);
                }
                _ => {
                    let mut p = cell.to_bytes();
                    p[10] ^= 0x40;
                    let before = p;
                    e.rm(now, &mut vcs[i], 0, &mut p);
                    prop_assert_eq!(p, before);
                }
            }
            let s = e.stats();
            if let Some(m) = s.interval {
                prop_assert!(m.input_rate.is_finite() && m.load.is_finite());
                prop_assert!(m.fair_share <= m.target);
            }
        }
    }
}
