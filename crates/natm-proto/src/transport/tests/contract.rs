//! A VC with a reservation keeps its traffic contract whatever flow control the
//! application picked (issue 34), measured from the TPDUs the sender emitted on a path
//! far faster than the contract.

use super::*;
use crate::flow::{build, LeakyBucket};
use crate::wire::qos::Qos;

/// The largest excess, in payload bytes, of what the sender emitted in any interval
/// [t_i, t_j] over `rate_bps · (t_j − t_i)`: the burst the emission needed at that
/// rate. A sender that keeps a token bucket of depth D at the rate needs at most D.
/// Checked over every pair of emissions, independently of the shaper's arithmetic.
fn burst_needed(sent: &[(Instant, usize)], rate_bps: u64) -> u64 {
    let mut worst = 0u128;
    for i in 0..sent.len() {
        let mut bytes = 0u128;
        for &(t, b) in &sent[i..] {
            bytes += b as u128;
            // bytes − rate·Δ/8, in nano-bytes·8 to stay in integers.
            let allowed = u128::from(rate_bps) * (t - sent[i].0).as_nanos();
            let have = bytes * 8 * 1_000_000_000;
            if have > allowed {
                worst = worst.max((have - allowed).div_ceil(8 * 1_000_000_000));
            }
        }
    }
    u64::try_from(worst).unwrap_or(u64::MAX)
}

/// Payload bit/s from the first emission to the last, counting all but the last.
fn long_run_bps(sent: &[(Instant, usize)]) -> f64 {
    let (t0, t1) = (sent[0].0, sent[sent.len() - 1].0);
    let bytes: usize = sent[..sent.len() - 1].iter().map(|s| s.1).sum();
    bytes as f64 * 8.0 / (t1 - t0).as_secs_f64()
}

/// Send 1 MiB of 32 KiB messages on `cfg` through a path with no rate limit (500 µs
/// each way) and return what the sender emitted; with `whole`, every message must
/// arrive.
fn emitted_with(cfg: &TransportConfig, whole: bool) -> Vec<(Instant, usize)> {
    let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, cfg));
    let m = msgs(&[32 * 1024; 32]);
    p.transfer(&m, Duration::from_secs(30));
    if whole {
        assert!(p.messages() == m, "{:?}: messages lost", cfg.flow);
    }
    p.sent
}

fn emitted(cfg: &TransportConfig) -> Vec<(Instant, usize)> {
    emitted_with(cfg, true)
}

fn flows() -> [FlowKind; 4] {
    [
        FlowKind::None,
        FlowKind::Window,
        FlowKind::PacketPair,
        FlowKind::LeakyBucket,
    ]
}

/// `cbr:pcr=2Mbps` with every flow control: no interval of the emission needs more
/// burst than the default bucket (4 TPDUs) at the PCR, and the whole transfer runs
/// at the PCR (within 1 %) — where, without the contract, `flow=none` sends the
/// megabyte at once and the window and packet-pair well above 2 Mbit/s.
#[test]
fn a_cbr_vc_never_exceeds_its_pcr_whatever_its_flow_control() {
    const PCR: u64 = 2_000_000;
    let depth = LeakyBucket::default_depth(PCR, 1024);
    assert_eq!(depth, 4096);
    for flow in flows() {
        let mut cfg = small(TransportConfig::guaranteed(PCR));
        cfg.flow = flow;
        let sent = emitted(&cfg);
        let burst = burst_needed(&sent, PCR);
        assert!(burst <= depth, "{flow:?}: a burst of {burst} B at the PCR");
        let bps = long_run_bps(&sent);
        assert!(
            (bps - PCR as f64).abs() / (PCR as f64) < 0.01,
            "{flow:?}: {bps} bit/s"
        );
        if flow == FlowKind::LeakyBucket {
            continue;
        }
        // The same VC without its contract: what the host sent before issue 34 (so
        // fast that, without error control, the receiver's buffer overflows).
        cfg.contract = None;
        let bps = long_run_bps(&emitted_with(&cfg, false));
        assert!(bps > 2.0 * PCR as f64, "{flow:?} uncontracted: {bps} bit/s");
    }
}

/// The QoS text maps onto the contract: `cbr:pcr=…,flow=none` (the command)
/// is shaped too, with the default burst.
#[test]
fn a_cbr_qos_with_flow_none_is_shaped_to_its_pcr() {
    let q: Qos = "cbr:pcr=8Mbps,flow=none".parse().unwrap();
    let mut cfg = TransportConfig::from_qos(&q, false).unwrap();
    cfg.tpdu_size = 1024;
    assert_eq!(cfg.flow, FlowKind::None);
    assert_eq!(cfg.contract, Some(crate::flow::Contract::cbr(8_000_000)));
    let sent = emitted(&cfg);
    let burst = burst_needed(&sent, 8_000_000);
    assert!(burst <= 4096, "a burst of {burst} B at the PCR");
    let bps = long_run_bps(&sent);
    assert!((bps - 8e6).abs() / 8e6 < 0.01, "{bps} bit/s");
}

/// `vbr:pcr=8Mbps,scr=2Mbps,mbs=200` (9,600 B of burst) with no feedback and with the
/// window: every interval of the emission stays within the SCR plus the MBS and
/// within the PCR plus the peak bucket, the first burst does go at the PCR, and the
/// long run is the SCR within 1 %.
#[test]
fn a_vbr_vc_keeps_scr_over_long_windows_and_pcr_within_its_burst() {
    const PCR: u64 = 8_000_000;
    const SCR: u64 = 2_000_000;
    const MBS: u64 = 200 * 48;
    for flow in [FlowKind::None, FlowKind::Window, FlowKind::LeakyBucket] {
        let q: Qos = format!("vbr:pcr=8Mbps,scr=2Mbps,mbs=200,flow={}", flow_text(flow))
            .parse()
            .unwrap();
        let mut cfg = TransportConfig::from_qos(&q, false).unwrap();
        cfg.tpdu_size = 1024;
        assert_eq!(
            cfg.contract,
            Some(crate::flow::Contract::vbr(PCR, SCR, MBS)),
            "{q}"
        );
        let sent = emitted(&cfg);
        let at_scr = burst_needed(&sent, SCR);
        assert!(at_scr <= MBS, "{flow:?}: {at_scr} B beyond the SCR");
        let at_pcr = burst_needed(&sent, PCR);
        let peak_depth = LeakyBucket::default_depth(PCR, 1024);
        assert!(at_pcr <= peak_depth, "{flow:?}: {at_pcr} B beyond the PCR");
        let bps = long_run_bps(&sent);
        assert!(
            (bps - SCR as f64).abs() / (SCR as f64) < 0.01,
            "{flow:?}: {bps} bit/s"
        );
        // The burst is used: the first MBS worth leaves faster than the SCR.
        let mut bytes = 0;
        let k = sent
            .iter()
            .position(|s| {
                bytes += s.1;
                bytes as u64 >= MBS
            })
            .expect("more than MBS sent");
        let first = (sent[k].0 - sent[0].0).as_secs_f64();
        assert!(
            first < MBS as f64 * 8.0 / SCR as f64 / 2.0,
            "{flow:?}: the first MBS took {first} s"
        );
    }
}

fn flow_text(f: FlowKind) -> &'static str {
    match f {
        FlowKind::None => "none",
        FlowKind::Window => "window",
        FlowKind::PacketPair => "packet-pair",
        FlowKind::LeakyBucket => "leaky-bucket",
        FlowKind::Abr => "abr",
    }
}
