//! The simulated network, end to end: timing, scheduling, limits, impairments,
//! determinism, observation and cost, with the small endpoints of `natm_sim::testing`.

use std::time::Duration;

use natm_proto::time::Instant;
use natm_sim::testing::{Arrival, Blaster, Echo, Sink, TestHost};
use natm_sim::{
    FrameOverhead, GilbertElliott, HostConfig, HostId, Impairments, LinkConfig, LinkId, LinkStats,
    LinkTrace, QueueLimit, Sim, SimError, VcId,
};
use proptest::prelude::*;

const MBPS: u64 = 1_000_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn t_ms(n: u64) -> Instant {
    Instant::ZERO + ms(n)
}

fn t_us(n: u64) -> Instant {
    Instant::ZERO + Duration::from_micros(n)
}

fn sink(sim: &Sim<TestHost>, h: HostId) -> &Sink {
    sim.host(h).as_sink().expect("a sink")
}

fn blaster(sim: &Sim<TestHost>, h: HostId) -> &Blaster {
    sim.host(h).as_blaster().expect("a blaster")
}

/// One sender, one receiver, one link; returns (sim, sender, receiver, link).
fn one_link(seed: u64, tx: Blaster, cfg: LinkConfig) -> (Sim<TestHost>, HostId, HostId, LinkId) {
    let mut sim = Sim::new(seed);
    let a = sim.add_host(tx.into());
    let b = sim.add_host(Sink::new().into());
    let l = sim.add_link(cfg).unwrap();
    sim.add_route(a, VcId(1), b, &[l]).unwrap();
    (sim, a, b, l)
}

/// Runs until nothing is left to do.
fn drain(sim: &mut Sim<TestHost>) {
    assert!(!sim.run_while(|_| true), "a test scenario should go idle");
}

/// Lengths of the runs of missing sequence numbers in `0..sent` among `arrivals`.
fn loss_runs(arrivals: &[Arrival], sent: u64) -> Vec<u64> {
    let mut runs = Vec::new();
    let mut expect = 0;
    for seq in arrivals.iter().map(|a| a.seq).chain([sent]) {
        if seq > expect {
            runs.push(seq - expect);
        }
        expect = seq + 1;
    }
    runs
}

/// Frame conservation on a link that has gone idle.
fn assert_conserved(s: &LinkStats) {
    assert_eq!(
        s.frames_in,
        s.frames_out + s.dropped_queue_full + s.queue_frames
    );
    assert_eq!(
        s.frames_out + s.duplicated,
        s.frames_delivered + s.dropped_random + s.dropped_burst + s.dropped_corrupt
    );
    assert_eq!(
        s.corrupted, s.dropped_corrupt,
        "every corrupted copy is caught"
    );
}

#[test]
fn serialization_plus_propagation_is_exact() {
    // 1000 bytes at 8 Mbit/s take 1 ms to send, then 1 ms to propagate.
    let (mut sim, _, rx, _) = one_link(
        1,
        Blaster::new(VcId(1), 2, 1000),
        LinkConfig::new(8 * MBPS, ms(1)),
    );
    drain(&mut sim);
    let at: Vec<_> = sink(&sim, rx).arrivals().iter().map(|a| a.at).collect();
    // The second frame waits for the first to leave the transmitter.
    assert_eq!(at, [t_ms(2), t_ms(3)]);
}

#[test]
fn cell_tax_and_store_and_forward_add_up() {
    let mut sim: Sim<TestHost> = Sim::new(1);
    let a = sim.add_host(Blaster::new(VcId(1), 1, 1000).into());
    let b = sim.add_host(Sink::new().into());
    let access = sim
        .add_link(LinkConfig::new(8 * MBPS, ms(1)).overhead(FrameOverhead::Cells))
        .unwrap();
    let trunk = sim.add_link(LinkConfig::new(4 * MBPS, ms(2))).unwrap();
    sim.add_route(a, VcId(1), b, &[access, trunk]).unwrap();
    drain(&mut sim);
    // ceil(1008 / 48) = 21 cells = 1113 bytes: 1.113 ms, + 1 ms; then 2 ms + 2 ms.
    assert_eq!(sink(&sim, b).arrivals()[0].at, t_us(1_113 + 1_000 + 4_000));
    assert_eq!(sim.link(access).stats().wire_bytes_out, 1113);
}

#[test]
fn paced_sender_and_echo_use_timers_and_the_reverse_route() {
    let mut sim: Sim<TestHost> = Sim::new(1);
    let a = sim.add_host(
        Blaster::new(VcId(9), 5, 125)
            .paced(ms(10))
            .starting_at(t_ms(3))
            .into(),
    );
    let e = sim.add_host(Echo::new().into());
    let fwd = sim.add_link(LinkConfig::new(MBPS, ms(1))).unwrap();
    let rev = sim.add_link(LinkConfig::new(MBPS, ms(1))).unwrap();
    sim.add_duplex_route(a, VcId(9), e, &[fwd], &[rev]).unwrap();
    drain(&mut sim);
    assert_eq!(blaster(&sim, a).received(), 5);
    assert_eq!(sim.host(e).as_echo().unwrap().echoed(), 5);
    // Last frame leaves at 43 ms; 125 bytes at 1 Mbit/s is 1 ms; two hops of 2 ms.
    assert_eq!(sim.now(), t_ms(47));
    assert_eq!(sim.host_stats(a).timeouts, 5);
}

/// Two senders into one 10 Mbit/s bottleneck: VC 1 offers 8 Mbit/s, VC 2 floods at
/// 100 Mbit/s. Returns the rate each VC got, in Mbit/s, over the last second of two.
fn contend(rr: bool) -> (f64, f64) {
    let mut sim: Sim<TestHost> = Sim::new(3);
    let polite = sim.add_host(Blaster::new(VcId(1), 10_000, 1000).paced(ms(1)).into());
    let flood = sim.add_host(Blaster::new(VcId(2), 1_000_000, 1000).into());
    let rx = sim.add_host(Sink::counting().into());
    let acc1 = sim.add_link(LinkConfig::new(100 * MBPS, ms(0))).unwrap();
    let acc2 = sim.add_link(LinkConfig::new(100 * MBPS, ms(0))).unwrap();
    let mut cfg = LinkConfig::new(10 * MBPS, ms(1)).queue_limit(QueueLimit::frames(50));
    if rr {
        cfg = cfg.round_robin(QueueLimit::frames(25));
    }
    let bn = sim.add_link(cfg).unwrap();
    sim.add_route(polite, VcId(1), rx, &[acc1, bn]).unwrap();
    sim.add_route(flood, VcId(2), rx, &[acc2, bn]).unwrap();
    let mut trace = LinkTrace::new(bn);
    sim.sample_until(t_ms(2000), ms(1000), |s| trace.record(s));
    let last = trace.samples().last().unwrap();
    assert_eq!(last.vcs.len(), 2);
    let mbps = |i: usize| last.vcs[i].rate_bps / 1e6;
    (mbps(0), mbps(1))
}

#[test]
fn round_robin_shares_a_bottleneck_fairly_and_fifo_does_not() {
    let (polite, flood) = contend(true);
    assert!(
        (polite - 5.0).abs() < 0.1,
        "RR polite VC got {polite} Mbit/s"
    );
    assert!(
        (flood - 5.0).abs() < 0.1,
        "RR flooding VC got {flood} Mbit/s"
    );

    let (polite, flood) = contend(false);
    // Drop-tail hands the buffer to whoever arrives most often: the flood.
    assert!(polite < 2.5, "FIFO polite VC got {polite} Mbit/s");
    assert!(flood > 7.5, "FIFO flooding VC got {flood} Mbit/s");
    assert!((polite + flood - 10.0).abs() < 0.1);
}

#[test]
fn weighted_round_robin_splits_by_weight_among_many_senders() {
    let mut sim: Sim<TestHost> = Sim::new(4);
    let rx = sim.add_host(Sink::counting().into());
    let bn = sim
        .add_link(LinkConfig::new(12 * MBPS, ms(1)).round_robin(QueueLimit::frames(8)))
        .unwrap();
    for vc in 1..=3 {
        let tx = sim.add_host(Blaster::new(VcId(vc), 1_000_000, 500).into());
        let access = sim.add_link(LinkConfig::new(100 * MBPS, ms(0))).unwrap();
        sim.add_route(tx, VcId(vc), rx, &[access, bn]).unwrap();
    }
    sim.set_vc_weight(bn, VcId(3), 2).unwrap();
    sim.run_until(t_ms(1000));
    let out: Vec<u64> = sim.link(bn).vcs().map(|(_, v)| v.bytes_out).collect();
    let total: u64 = out.iter().sum();
    // Weights 1:1:2 of 12 Mbit/s.
    for (got, share) in out.iter().zip([0.25, 0.25, 0.5]) {
        let frac = *got as f64 / total as f64;
        assert!((frac - share).abs() < 0.01, "{out:?}");
    }
}

#[test]
fn tail_drop_at_a_full_queue_is_counted() {
    let mut sim: Sim<TestHost> = Sim::new(1);
    let a = sim.add_host(Blaster::new(VcId(1), 200, 1000).into());
    let b = sim.add_host(Sink::new().into());
    let access = sim.add_link(LinkConfig::new(100 * MBPS, ms(0))).unwrap();
    let bn = sim
        .add_link(
            LinkConfig::new(10 * MBPS, ms(1)).queue_limit(QueueLimit::frames(10).and_bytes(8_000)),
        )
        .unwrap();
    sim.add_route(a, VcId(1), b, &[access, bn]).unwrap();
    drain(&mut sim);
    let s = sim.link(bn).stats();
    assert!(s.dropped_queue_full > 100, "{s:?}");
    // The byte limit (8 frames) binds before the frame limit.
    assert_eq!(s.max_queue_frames, 8);
    assert_eq!(s.max_queue_bytes, 8_000);
    assert_eq!(sink(&sim, b).frames() + s.dropped_queue_full, 200);
    assert_eq!(sim.link(access).stats().dropped(), 0);
    assert_eq!(sim.host_stats(a).frames_sent, 200);
    assert_conserved(s);
    assert_eq!(s.queue_frames, 0);
    let vc = sim.link(bn).vc_stats(VcId(1)).unwrap();
    assert_eq!(vc.dropped_queue_full, s.dropped_queue_full);
    assert_eq!(vc.max_queue_frames, 8);
}

#[test]
fn transmit_ring_backpressures_the_host_instead_of_dropping() {
    // A ring no larger than the first queue plus the frame in service never overflows it.
    let run = |ring: usize| {
        let mut sim: Sim<TestHost> = Sim::new(1);
        let a = sim.add_host_with(
            Blaster::new(VcId(1), 100, 1000).into(),
            HostConfig { tx_ring: ring },
        );
        let b = sim.add_host(Sink::counting().into());
        let access = sim
            .add_link(LinkConfig::new(MBPS, ms(0)).queue_limit(QueueLimit::frames(3)))
            .unwrap();
        sim.add_route(a, VcId(1), b, &[access]).unwrap();
        drain(&mut sim);
        sim.link(access).stats().clone()
    };
    let fits = run(4);
    assert_eq!(fits.dropped_queue_full, 0);
    assert_eq!(fits.max_queue_frames, 3);
    assert_eq!(fits.frames_delivered, 100);
    let overflows = run(6);
    assert!(overflows.dropped_queue_full > 0);
}

#[test]
fn random_loss_rate_is_within_statistical_bounds() {
    let n = 100_000;
    let (mut sim, _, rx, l) = one_link(
        11,
        Blaster::new(VcId(1), n, 64),
        LinkConfig::new(1_000 * MBPS, ms(1)).loss(0.05),
    );
    drain(&mut sim);
    let lost = sim.link(l).stats().dropped_random;
    // Binomial(100k, 0.05): mean 5000, sd 69; allow five sd.
    assert!((lost as f64 - 5000.0).abs() < 5.0 * 69.0, "lost {lost}");
    assert_eq!(sink(&sim, rx).frames() + lost, n);
    assert_conserved(sim.link(l).stats());
}

#[test]
fn gilbert_elliott_losses_come_in_bursts_of_the_right_mean_length() {
    let n = 100_000;
    let ge = GilbertElliott::new(0.01, 0.2);
    let (mut sim, _, rx, l) = one_link(
        12,
        Blaster::new(VcId(1), n, 64),
        LinkConfig::new(1_000 * MBPS, ms(1)).burst_loss(ge),
    );
    drain(&mut sim);
    let runs = loss_runs(sink(&sim, rx).arrivals(), n);
    let lost: u64 = runs.iter().sum();
    assert_eq!(lost, sim.link(l).stats().dropped_burst);
    let mean_run = lost as f64 / runs.len() as f64;
    // Stays in the bad state last 1 / p(bad→good) = 5 frames on average.
    assert!(
        (mean_run - ge.mean_bad_run()).abs() < 0.15 * ge.mean_bad_run(),
        "{mean_run}"
    );
    let rate = lost as f64 / n as f64;
    assert!(
        (rate - ge.mean_loss()).abs() < 0.2 * ge.mean_loss(),
        "{rate}"
    );

    // The same loss rate drawn independently has runs of about one frame.
    let (mut sim, _, rx, _) = one_link(
        12,
        Blaster::new(VcId(1), n, 64),
        LinkConfig::new(1_000 * MBPS, ms(1)).loss(ge.mean_loss()),
    );
    drain(&mut sim);
    let runs = loss_runs(sink(&sim, rx).arrivals(), n);
    let mean_run = runs.iter().sum::<u64>() as f64 / runs.len() as f64;
    assert!(mean_run < 1.2, "{mean_run}");
}

#[test]
fn duplication_delivers_each_duplicate_right_after_its_original() {
    let n = 10_000;
    let (mut sim, _, rx, l) = one_link(
        13,
        Blaster::new(VcId(1), n, 100),
        LinkConfig::new(100 * MBPS, ms(1)).duplicate(0.1),
    );
    drain(&mut sim);
    let dups = sim.link(l).stats().duplicated;
    assert!((dups as f64 - 1000.0).abs() < 5.0 * 30.0, "{dups}");
    let arrivals = sink(&sim, rx).arrivals();
    assert_eq!(arrivals.len() as u64, n + dups);
    let twins = arrivals.windows(2).filter(|w| w[0] == w[1]).count() as u64;
    assert_eq!(twins, dups);
    assert_eq!(sink(&sim, rx).damaged(), 0);
}

#[test]
fn corruption_is_always_caught_by_the_crc() {
    let n = 20_000;
    let mut sim: Sim<TestHost> = Sim::new(14);
    let a = sim.add_host(Blaster::new(VcId(1), n, 300).into());
    let b = sim.add_host(Sink::new().into());
    let hop1 = sim
        .add_link(
            LinkConfig::new(100 * MBPS, ms(1))
                .corrupt(0.05)
                .duplicate(0.05),
        )
        .unwrap();
    let hop2 = sim
        .add_link(
            LinkConfig::new(50 * MBPS, ms(1))
                .corrupt(0.1)
                .overhead(FrameOverhead::Cells),
        )
        .unwrap();
    sim.add_route(a, VcId(1), b, &[hop1, hop2]).unwrap();
    drain(&mut sim);
    let s1 = sim.link(hop1).stats();
    let s2 = sim.link(hop2).stats();
    assert_conserved(s1);
    assert_conserved(s2);
    assert!(s1.corrupted > 500 && s2.corrupted > 1000, "{s1:?} {s2:?}");
    let rx = sink(&sim, b);
    assert_eq!(rx.damaged(), 0, "a corrupted frame was delivered");
    assert_eq!(
        rx.frames(),
        n + s1.duplicated - s1.dropped_corrupt - s2.dropped_corrupt
    );
}

#[test]
fn fully_corrupting_link_delivers_nothing() {
    let (mut sim, _, rx, l) = one_link(
        15,
        Blaster::new(VcId(1), 1000, 1),
        LinkConfig::new(10 * MBPS, ms(1)).corrupt(1.0),
    );
    drain(&mut sim);
    assert_eq!(sink(&sim, rx).frames(), 0);
    assert_eq!(sim.link(l).stats().dropped_corrupt, 1000);
}

#[test]
fn a_rate_change_changes_throughput_at_that_time() {
    let (mut sim, _, _, l) = one_link(
        1,
        Blaster::new(VcId(1), 1_000_000, 1250),
        LinkConfig::new(10 * MBPS, ms(1)).rate_change(t_ms(500), 2 * MBPS),
    );
    let mut trace = LinkTrace::new(l);
    sim.sample_until(t_ms(1000), ms(100), |s| trace.record(s));
    let rates: Vec<f64> = trace.samples()[1..]
        .iter()
        .map(|s| s.rate_bps / 1e6)
        .collect();
    assert_eq!(rates.len(), 10);
    for r in &rates[..5] {
        assert!((r - 10.0).abs() < 0.2, "{rates:?}");
    }
    // The frame in service at 500 ms finishes at the old rate: skip that interval.
    for r in &rates[6..] {
        assert!((r - 2.0).abs() < 0.1, "{rates:?}");
    }
    assert_eq!(sim.link(l).rate_at(t_ms(499)), 10 * MBPS);
    assert_eq!(sim.link(l).rate_at(t_ms(500)), 2 * MBPS);
}

#[test]
fn impairments_can_change_mid_run() {
    let (mut sim, _, rx, l) = one_link(
        16,
        Blaster::new(VcId(1), 2000, 125).paced(ms(1)),
        LinkConfig::new(10 * MBPS, ms(1)),
    );
    sim.run_until(t_ms(1000));
    assert_eq!(sink(&sim, rx).frames(), 999);
    sim.set_impairments(
        l,
        Impairments {
            loss: 1.0,
            ..Impairments::NONE
        },
    )
    .unwrap();
    drain(&mut sim);
    assert_eq!(sink(&sim, rx).frames(), 1000);
    assert_eq!(sim.link(l).stats().dropped_random, 1000);
}

/// A busy, impaired scenario: two senders, a round-robin bottleneck with every
/// impairment, acks back. Returns everything observable about the run.
fn eventful_run(seed: u64) -> (Vec<Arrival>, Vec<Arrival>, Vec<LinkStats>, Instant) {
    let mut sim: Sim<TestHost> = Sim::new(seed);
    let a1 = sim.add_host(Blaster::new(VcId(1), 3000, 700).into());
    let a2 = sim.add_host(
        Blaster::new(VcId(2), 3000, 1500)
            .paced(Duration::from_micros(300))
            .into(),
    );
    let rx = sim.add_host(Sink::new().with_acks(40).into());
    let acc1 = sim
        .add_link(LinkConfig::new(100 * MBPS, ms(0)).duplicate(0.01))
        .unwrap();
    let acc2 = sim.add_link(LinkConfig::new(100 * MBPS, ms(0))).unwrap();
    let bn = sim
        .add_link(
            LinkConfig::new(20 * MBPS, ms(5))
                .round_robin(QueueLimit::frames(20))
                .loss(0.01)
                .burst_loss(GilbertElliott::new(0.005, 0.3))
                .corrupt(0.01),
        )
        .unwrap();
    let back = sim
        .add_link(LinkConfig::new(20 * MBPS, ms(5)).loss(0.02))
        .unwrap();
    sim.add_duplex_route(a1, VcId(1), rx, &[acc1, bn], &[back])
        .unwrap();
    sim.add_duplex_route(a2, VcId(2), rx, &[acc2, bn], &[back])
        .unwrap();
    drain(&mut sim);
    let arrivals = sink(&sim, rx).arrivals().to_vec();
    let acks = vec![
        Arrival {
            at: Instant::ZERO,
            vc: VcId(1),
            seq: blaster(&sim, a1).received(),
            len: 0,
        },
        Arrival {
            at: Instant::ZERO,
            vc: VcId(2),
            seq: blaster(&sim, a2).received(),
            len: 0,
        },
    ];
    let stats = sim.links().map(|(_, l)| l.stats().clone()).collect();
    (arrivals, acks, stats, sim.now())
}

#[test]
fn same_seed_same_run_different_seed_different_run() {
    let first = eventful_run(42);
    let again = eventful_run(42);
    assert_eq!(first, again);
    let other = eventful_run(43);
    assert_ne!(first.0, other.0);
    assert_ne!(first.2, other.2);
}

#[test]
fn sampling_sees_the_queue_build_and_drain() {
    let mut sim: Sim<TestHost> = Sim::new(1);
    let bn = sim
        .add_link(LinkConfig::new(MBPS, ms(1)).name("bottleneck"))
        .unwrap();
    assert_eq!(sim.link_by_name("bottleneck"), Some(bn));
    let tx = sim.add_host(Blaster::new(VcId(7), 100, 1250).into());
    let rx = sim.add_host(Sink::counting().into());
    let access = sim.add_link(LinkConfig::new(10 * MBPS, ms(0))).unwrap();
    sim.add_route(tx, VcId(7), rx, &[access, bn]).unwrap();
    let mut depth = Vec::new();
    sim.sample_until(t_ms(1500), ms(100), |s| {
        depth.push((
            s.now(),
            s.link(bn).queue_frames(),
            s.link(bn).vc_stats(VcId(7)).unwrap().queue_frames,
        ))
    });
    assert_eq!(depth.len(), 16);
    assert_eq!(depth[0].0, Instant::ZERO);
    assert_eq!(depth[15].0, t_ms(1500));
    // Frames arrive one per ms (10 Mbit/s access) and leave one per 10 ms.
    let peak = depth.iter().map(|d| d.1).max().unwrap();
    assert!(peak > 80, "{depth:?}");
    assert!(depth.iter().all(|d| d.1 == d.2));
    assert_eq!(depth.last().unwrap().1, 0);
}

#[test]
fn boxed_endpoints_of_different_kinds_share_one_simulation() {
    let mut sim: Sim = Sim::new(1);
    let a = sim.add_host(Box::new(Blaster::new(VcId(3), 10, 100)));
    let b = sim.add_host(Box::new(Echo::new()));
    let fwd = sim.add_link(LinkConfig::new(MBPS, ms(1))).unwrap();
    let rev = sim.add_link(LinkConfig::new(MBPS, ms(1))).unwrap();
    sim.add_duplex_route(a, VcId(3), b, &[fwd], &[rev]).unwrap();
    assert!(!sim.run_while(|_| true));
    assert_eq!(sim.host_stats(a).frames_received, 10);
    assert_eq!(sim.host_stats(b).frames_sent, 10);
}

#[test]
fn unroutable_frames_are_counted_not_sent() {
    let mut sim: Sim<TestHost> = Sim::new(1);
    let a = sim.add_host(Blaster::new(VcId(99), 5, 10).into());
    drain(&mut sim);
    assert_eq!(sim.host_stats(a).unroutable, 5);
}

#[test]
fn bad_topologies_are_refused_with_a_reason() {
    let mut sim: Sim<TestHost> = Sim::new(1);
    let a = sim.add_host(Sink::new().into());
    let b = sim.add_host(Sink::new().into());
    let l1 = sim.add_link(LinkConfig::new(MBPS, ms(1))).unwrap();
    let l2 = sim.add_link(LinkConfig::new(MBPS, ms(1))).unwrap();
    assert_eq!(sim.add_route(a, VcId(1), b, &[]), Err(SimError::EmptyPath));
    sim.add_route(a, VcId(1), b, &[l1]).unwrap();
    assert_eq!(
        sim.add_route(a, VcId(1), b, &[l2]),
        Err(SimError::DuplicateRoute {
            host: a,
            vc: VcId(1)
        })
    );
    assert_eq!(
        sim.add_route(b, VcId(1), a, &[l2, l1]),
        Err(SimError::VcInUse {
            link: l1,
            vc: VcId(1)
        })
    );
    assert_eq!(
        sim.add_route(b, VcId(2), a, &[l2, l2]),
        Err(SimError::VcInUse {
            link: l2,
            vc: VcId(2)
        })
    );
    // A refused route leaves nothing behind: the same VC over the other link works.
    sim.add_route(b, VcId(1), a, &[l2]).unwrap();
    assert!(matches!(
        sim.add_link(LinkConfig::new(MBPS, ms(1)).loss(2.0)),
        Err(SimError::BadProbability { what: "loss", .. })
    ));
    assert_eq!(sim.set_vc_weight(l1, VcId(1), 0), Err(SimError::ZeroWeight));
    let msg = SimError::VcInUse {
        link: l1,
        vc: VcId(1),
    }
    .to_string();
    assert_eq!(msg, "vc1 is already used on link0 by another route");
}

/// 25,000 frames of 4 KiB through access, a round-robin bottleneck with loss, and acks
/// back; returns (events run, virtual seconds).
fn hundred_megabytes() -> (u64, f64) {
    let n = 25_000;
    let mut sim: Sim<TestHost> = Sim::new(5);
    let tx = sim.add_host(Blaster::new(VcId(1), n, 4096).into());
    let rx = sim.add_host(Sink::counting().with_acks(40).into());
    let access = sim.add_link(LinkConfig::new(500 * MBPS, ms(0))).unwrap();
    let bn = sim
        .add_link(
            LinkConfig::new(622 * MBPS, ms(5))
                .overhead(FrameOverhead::Cells)
                .round_robin(QueueLimit::frames(64))
                .loss(0.001),
        )
        .unwrap();
    let back = sim.add_link(LinkConfig::new(622 * MBPS, ms(5))).unwrap();
    sim.add_duplex_route(tx, VcId(1), rx, &[access, bn], &[back])
        .unwrap();
    drain(&mut sim);
    let got = sink(&sim, rx).frames();
    assert_eq!(got + sim.link(bn).stats().dropped_random, n);
    assert_eq!(blaster(&sim, tx).received(), got);
    (sim.events_processed(), sim.now().as_secs_f64())
}

#[test]
fn hundred_megabytes_are_delivered() {
    let (events, _) = hundred_megabytes();
    assert!(events > 100_000);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the link settings, frames are conserved on every link, no corrupted
    /// frame is delivered, and the receiver gets exactly what the last link delivered.
    #[test]
    fn frames_are_conserved_under_any_settings(
        seed in any::<u64>(),
        count in 1u64..400,
        len in 1usize..3000,
        rate in 1u64..200,
        delay_us in 0u64..5000,
        limit in 1u64..40,
        rr in any::<bool>(),
        loss in 0.0..0.3f64,
        burst in proptest::option::of((0.0..0.2f64, 0.05..1.0f64)),
        dup in 0.0..0.3f64,
        corrupt in 0.0..0.3f64,
        ring in 1usize..8,
    ) {
        let mut sim: Sim<TestHost> = Sim::new(seed);
        let a = sim.add_host_with(Blaster::new(VcId(1), count, len).into(), HostConfig { tx_ring: ring });
        let b = sim.add_host(Sink::new().into());
        let access = sim.add_link(LinkConfig::new(rate * 10 * MBPS, Duration::ZERO).duplicate(dup)).unwrap();
        let mut cfg = LinkConfig::new(rate * MBPS, Duration::from_micros(delay_us))
            .queue_limit(QueueLimit::frames(limit))
            .loss(loss)
            .corrupt(corrupt);
        if let Some((p, r)) = burst {
            cfg = cfg.burst_loss(GilbertElliott::new(p, r));
        }
        if rr {
            cfg = cfg.round_robin(QueueLimit::frames(limit / 2 + 1));
        }
        let bn = sim.add_link(cfg).unwrap();
        sim.add_route(a, VcId(1), b, &[access, bn]).unwrap();
        drain(&mut sim);
        let (s1, s2) = (sim.link(access).stats(), sim.link(bn).stats());
        assert_conserved(s1);
        assert_conserved(s2);
        prop_assert_eq!(s1.frames_in, count);
        prop_assert_eq!(s1.dropped_queue_full, 0);
        prop_assert_eq!(s2.frames_in, s1.frames_delivered);
        let rx = sink(&sim, b);
        prop_assert_eq!(rx.damaged(), 0);
        prop_assert_eq!(rx.frames(), s2.frames_delivered);
        prop_assert_eq!(sim.host_stats(b).frames_received, rx.frames());
    }
}
