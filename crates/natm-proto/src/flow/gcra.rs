//! The Generic Cell Rate Algorithm, GCRA(I, L), for policing and shaping (specs §3,
//! ITU-T I.371 / ATM Forum TM 4.0).
//!
//! Two equivalent policing forms ([`Gcra`], the virtual-scheduling algorithm, and
//! [`GcraBucket`], the continuous-state leaky bucket), the dual GCRA of a VBR contract
//! ([`DualGcra`]: PCR/CDVT and SCR/MBS), and the shaper form that delays a cell
//! instead of dropping it (specs §3.4). A switch polices with `conforms`; a sender
//! shapes with `shape`.
//!
//! Times are [`Instant`]s and [`Duration`]s, kept internally as integer nanoseconds so
//! that both forms agree exactly (no float rounding). [`cell_interval`] rounds 1/PCR to
//! the nearest nanosecond; at 155 Mbit/s (≈ 2.7 µs per cell) that is a relative error
//! below 2·10⁻⁴, well inside any CDVT.

use std::time::Duration;

use crate::time::Instant;

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The cell interval 1/`cells_per_sec`, rounded to the nearest nanosecond (specs
/// §3.1: T = 1/PCR, T_s = 1/SCR). Zero cells per second gives the longest interval.
pub fn cell_interval(cells_per_sec: u64) -> Duration {
    if cells_per_sec == 0 {
        return Duration::from_nanos(u64::MAX);
    }
    Duration::from_nanos((1_000_000_000 + cells_per_sec / 2) / cells_per_sec)
}

/// Burst tolerance from the maximum burst size: BT = (MBS − 1)·(T_s − T) (specs §3.1).
pub fn burst_tolerance(mbs: u32, t_scr: Duration, t_pcr: Duration) -> Duration {
    t_scr
        .saturating_sub(t_pcr)
        .saturating_mul(mbs.saturating_sub(1))
}

/// Maximum burst size from the burst tolerance: MBS = 1 + ⌊BT/(T_s − T)⌋ (specs §3.1).
pub fn max_burst_size(bt: Duration, t_scr: Duration, t_pcr: Duration) -> u32 {
    let gap = ns(t_scr.saturating_sub(t_pcr));
    if gap == 0 {
        return u32::MAX;
    }
    u32::try_from(ns(bt) / gap).map_or(u32::MAX, |k| k.saturating_add(1))
}

/// A conformance test on cell arrival times (both GCRA forms implement it).
pub trait Conformance {
    /// Whether a cell arriving at `t` would conform; the state is not changed.
    fn check(&self, t: Instant) -> bool;
    /// Police a cell arriving at `t`: the verdict, with the state updated only for a
    /// conforming cell (specs §3.2: "do NOT update TAT").
    fn conforms(&mut self, t: Instant) -> bool;
}

/// GCRA(I, L) in virtual-scheduling form: the state is the theoretical arrival time
/// (TAT) of the next cell (specs §3.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gcra {
    increment: u64,
    limit: u64,
    tat: Option<u64>,
}

impl Gcra {
    /// GCRA with increment `increment` (I, e.g. T = 1/PCR) and limit `limit` (L, e.g.
    /// the CDVT τ). No cell has been seen yet.
    pub fn new(increment: Duration, limit: Duration) -> Self {
        Gcra {
            increment: ns(increment),
            limit: ns(limit),
            tat: None,
        }
    }

    /// The increment I.
    pub fn increment(&self) -> Duration {
        Duration::from_nanos(self.increment)
    }

    /// The limit L.
    pub fn limit(&self) -> Duration {
        Duration::from_nanos(self.limit)
    }

    /// The theoretical arrival time of the next cell, once a cell has conformed.
    pub fn tat(&self) -> Option<Instant> {
        self.tat.map(Instant::from_nanos)
    }

    /// TAT as seen by a cell at `t`: "on first cell TAT = t_a"; "if TAT < t_a: TAT =
    /// t_a" (the line was idle).
    fn tat_at(&self, t: u64) -> u64 {
        self.tat.map_or(t, |tat| tat.max(t))
    }

    /// Shaper (specs §3.4): the earliest departure for a cell ready at `now`,
    /// `max(now, TAT − L)`. A cell sent then conforms to this GCRA.
    pub fn earliest(&self, now: Instant) -> Instant {
        let t = now.as_nanos();
        match self.tat {
            Some(tat) => Instant::from_nanos(t.max(tat.saturating_sub(self.limit))),
            None => now,
        }
    }

    /// Shaper: send one cell ready at `now`; returns its departure time and charges
    /// the bucket (`TAT = max(TAT, depart) + I`).
    pub fn shape(&mut self, now: Instant) -> Instant {
        self.shape_n(now, 1)
    }

    /// Shaper for a frame of `cells` cells sent at once (specs §3.4: a frame-at-a-time
    /// sender charges n·I and holds the next frame until `TAT − L ≤ now`). Conforming at
    /// cell level only if the adaptor paces the cells of a frame at ≤ 1/I.
    pub fn shape_n(&mut self, now: Instant, cells: u32) -> Instant {
        let depart = self.earliest(now);
        let d = depart.as_nanos();
        let charge = self.increment.saturating_mul(u64::from(cells));
        self.tat = Some(self.tat_at(d).saturating_add(charge));
        depart
    }
}

impl Conformance for Gcra {
    fn check(&self, t: Instant) -> bool {
        let t = t.as_nanos();
        self.tat_at(t) <= t.saturating_add(self.limit)
    }

    fn conforms(&mut self, t: Instant) -> bool {
        let ok = self.check(t);
        if ok {
            let t = t.as_nanos();
            self.tat = Some(self.tat_at(t).saturating_add(self.increment));
        }
        ok
    }
}

/// GCRA(I, L) in continuous-state leaky-bucket form: bucket content X, drained at one
/// unit per unit time, and the last conformance time LCT (specs §3.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcraBucket {
    increment: u64,
    limit: u64,
    x: u64,
    lct: Option<u64>,
}

impl GcraBucket {
    /// Leaky bucket with increment `increment` (I) and limit `limit` (L), empty.
    pub fn new(increment: Duration, limit: Duration) -> Self {
        GcraBucket {
            increment: ns(increment),
            limit: ns(limit),
            x: 0,
            lct: None,
        }
    }

    /// X' — the content the bucket would have drained to at `t`,
    /// `max(0, X − (t − LCT))`, before the cell at `t` is added.
    pub fn content_at(&self, t: Instant) -> Duration {
        let t = t.as_nanos();
        Duration::from_nanos(match self.lct {
            Some(lct) => self.x.saturating_sub(t.saturating_sub(lct)),
            None => 0,
        })
    }
}

impl Conformance for GcraBucket {
    fn check(&self, t: Instant) -> bool {
        ns(self.content_at(t)) <= self.limit
    }

    fn conforms(&mut self, t: Instant) -> bool {
        let x = ns(self.content_at(t));
        let ok = x <= self.limit;
        if ok {
            self.x = x.saturating_add(self.increment);
            self.lct = Some(t.as_nanos());
        }
        ok
    }
}

/// The dual GCRA of a VBR contract (specs §3.1–3.2): GCRA(T, τ) on the peak cell rate
/// and GCRA(T_s, BT + τ_s) on the sustainable rate. A cell conforms only if it
/// conforms to both, and a non-conforming cell updates neither.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DualGcra<G = Gcra> {
    peak: G,
    sustained: G,
}

impl DualGcra<Gcra> {
    /// Dual GCRA in virtual-scheduling form (the one that can also shape).
    pub fn new(
        t_pcr: Duration,
        cdvt: Duration,
        t_scr: Duration,
        mbs: u32,
        cdvt_scr: Option<Duration>,
    ) -> Self {
        let (ip, lp, is, ls) = dual_params(t_pcr, cdvt, t_scr, mbs, cdvt_scr);
        DualGcra {
            peak: Gcra::new(ip, lp),
            sustained: Gcra::new(is, ls),
        }
    }

    /// Shaper (specs §3.4): earliest departure `max(now, TAT_p − τ_p, TAT_s − τ_s)`.
    pub fn earliest(&self, now: Instant) -> Instant {
        self.peak.earliest(now).max(self.sustained.earliest(now))
    }

    /// Shaper: send one cell ready at `now`, charging both buckets; returns the
    /// departure time.
    pub fn shape(&mut self, now: Instant) -> Instant {
        self.shape_n(now, 1)
    }

    /// Shaper for a frame of `cells` cells (see [`Gcra::shape_n`]).
    pub fn shape_n(&mut self, now: Instant, cells: u32) -> Instant {
        let depart = self.earliest(now);
        self.peak.shape_n(depart, cells);
        self.sustained.shape_n(depart, cells);
        depart
    }
}

impl DualGcra<GcraBucket> {
    /// Dual GCRA in continuous-state leaky-bucket form (policing only).
    pub fn new_bucket(
        t_pcr: Duration,
        cdvt: Duration,
        t_scr: Duration,
        mbs: u32,
        cdvt_scr: Option<Duration>,
    ) -> Self {
        let (ip, lp, is, ls) = dual_params(t_pcr, cdvt, t_scr, mbs, cdvt_scr);
        DualGcra {
            peak: GcraBucket::new(ip, lp),
            sustained: GcraBucket::new(is, ls),
        }
    }
}

/// (I, L) of both tests of a dual GCRA: τ_s = BT + CDVT_scr, with CDVT_scr = CDVT if
/// not given (specs §3.1).
fn dual_params(
    t_pcr: Duration,
    cdvt: Duration,
    t_scr: Duration,
    mbs: u32,
    cdvt_scr: Option<Duration>,
) -> (Duration, Duration, Duration, Duration) {
    let bt = burst_tolerance(mbs, t_scr, t_pcr);
    let ls = bt.saturating_add(cdvt_scr.unwrap_or(cdvt));
    (t_pcr, cdvt, t_scr, ls)
}

impl<G> DualGcra<G> {
    /// The peak-rate test.
    pub fn peak(&self) -> &G {
        &self.peak
    }

    /// The sustainable-rate test.
    pub fn sustained(&self) -> &G {
        &self.sustained
    }
}

impl<G: Conformance> Conformance for DualGcra<G> {
    fn check(&self, t: Instant) -> bool {
        self.peak.check(t) && self.sustained.check(t)
    }

    fn conforms(&mut self, t: Instant) -> bool {
        // Both verdicts first, then commit (specs §3.2).
        let ok = self.check(t);
        if ok {
            self.peak.conforms(t);
            self.sustained.conforms(t);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: u64) -> Instant {
        Instant::from_nanos(t)
    }
    fn d(t: u64) -> Duration {
        Duration::from_nanos(t)
    }

    /// specs §3.3: GCRA(T = 10, τ = 15), every row: arrival, TAT before, verdict, X'.
    #[test]
    fn worked_example_both_forms_agree_on_every_row() {
        let rows: [(u64, Option<u64>, bool, u64); 14] = [
            (0, None, true, 0),
            (10, Some(10), true, 0),
            (15, Some(20), true, 5),
            (18, Some(30), true, 12),
            (20, Some(40), false, 20),
            (30, Some(40), true, 10),
            (31, Some(50), false, 19),
            (45, Some(50), true, 5),
            (70, Some(60), true, 0),
            (71, Some(80), true, 9),
            (72, Some(90), false, 18),
            (73, Some(90), false, 17),
            (74, Some(90), false, 16),
            (100, Some(90), true, 0),
        ];
        let mut vsa = Gcra::new(d(10), d(15));
        let mut lb = GcraBucket::new(d(10), d(15));
        for (t, tat, verdict, x) in rows {
            assert_eq!(vsa.tat(), tat.map(at), "TAT before t = {t}");
            assert_eq!(lb.content_at(at(t)), d(x), "X' at t = {t}");
            // X' = max(0, TAT − t_a): the two forms hold the same state.
            let from_tat = vsa.tat().map_or(0, |x| x.as_nanos().saturating_sub(t));
            assert_eq!(from_tat, x, "X' = TAT − t at t = {t}");
            assert_eq!(vsa.check(at(t)), verdict, "VSA check at t = {t}");
            assert_eq!(vsa.conforms(at(t)), verdict, "VSA verdict at t = {t}");
            assert_eq!(lb.conforms(at(t)), verdict, "LB verdict at t = {t}");
        }
        // A non-conforming cell left the state alone: after 72..74, TAT is still 90+10.
        assert_eq!(vsa.tat(), Some(at(110)));
    }

    /// specs §3.3: T = 10, T_s = 40, MBS = 4 → BT = 90, CDVT = 0.
    #[test]
    fn dual_gcra_example_in_both_forms() {
        assert_eq!(burst_tolerance(4, d(40), d(10)), d(90));
        assert_eq!(max_burst_size(d(90), d(40), d(10)), 4);
        assert_eq!(max_burst_size(d(119), d(40), d(10)), 4);
        assert_eq!(max_burst_size(d(120), d(40), d(10)), 5);
        let cells = [
            (0, true),
            (10, true),
            (20, true),
            (30, true),
            (40, false),
            (50, false),
            (200, true),
            (210, true),
            (220, true),
            (230, true),
            (240, false),
        ];
        let mut vsa = DualGcra::new(d(10), d(0), d(40), 4, None);
        let mut lb = DualGcra::new_bucket(d(10), d(0), d(40), 4, None);
        for (t, verdict) in cells {
            assert_eq!(vsa.conforms(at(t)), verdict, "VSA at t = {t}");
            assert_eq!(lb.conforms(at(t)), verdict, "LB at t = {t}");
        }
    }

    /// A cell failing only the SCR test must not advance the PCR test's state.
    #[test]
    fn dual_gcra_commits_neither_state_on_non_conformance() {
        let mut g = DualGcra::new(d(10), d(0), d(40), 2, None);
        assert!(g.conforms(at(0)));
        assert!(g.conforms(at(10)));
        let peak_before = g.peak().clone();
        assert!(!g.conforms(at(20)), "third cell breaks MBS = 2");
        assert_eq!(g.peak(), &peak_before);
    }

    /// The shaper's departures are conforming (to a policer with the same contract)
    /// and no later than necessary.
    #[test]
    fn shaper_output_conforms_and_is_work_conserving() {
        let mut shaper = Gcra::new(d(10), d(0));
        let mut police = Gcra::new(d(10), d(0));
        // A burst of 5 cells at t = 3, then one at t = 200.
        let mut out = Vec::new();
        for t in [3, 3, 3, 3, 3, 200] {
            out.push(shaper.shape(at(t)).as_nanos());
        }
        assert_eq!(out, [3, 13, 23, 33, 43, 200]);
        for t in out {
            assert!(police.conforms(at(t)));
        }
    }

    #[test]
    fn dual_shaper_sends_mbs_at_pcr_then_scr() {
        let mut s = DualGcra::new(d(10), d(0), d(40), 4, None);
        let mut p = DualGcra::new(d(10), d(0), d(40), 4, None);
        let out: Vec<u64> = (0..7).map(|_| s.shape(at(0)).as_nanos()).collect();
        assert_eq!(out, [0, 10, 20, 30, 70, 110, 150]);
        for t in out {
            assert!(p.conforms(at(t)));
        }
    }

    #[test]
    fn frame_shaper_charges_n_increments() {
        let mut g = Gcra::new(d(10), d(5));
        assert_eq!(g.shape_n(at(0), 4), at(0));
        assert_eq!(g.tat(), Some(at(40)));
        // Held until TAT − L = 35.
        assert_eq!(g.earliest(at(1)), at(35));
        assert_eq!(g.shape_n(at(1), 1), at(35));
        assert_eq!(g.earliest(at(100)), at(100));
    }

    #[test]
    fn cell_interval_rounds_to_nearest_nanosecond() {
        assert_eq!(cell_interval(1_000_000), d(1_000));
        assert_eq!(cell_interval(353_208), d(2_831)); // 149.76 Mbit/s of cells
        assert_eq!(cell_interval(3), d(333_333_333));
        assert_eq!(cell_interval(0), d(u64::MAX));
    }
}
