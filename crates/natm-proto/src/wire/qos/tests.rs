//! Unit tests: the Linux examples, the extensions, every error kind with its position.

use super::*;

fn qos(s: &str) -> Qos {
    s.parse()
        .unwrap_or_else(|e: QosParseError| panic!("{s:?}: {}", e.render(s)))
}

fn err(s: &str) -> QosParseError {
    match s.parse::<Qos>() {
        Ok(q) => panic!("{s:?} parsed as {q:?}"),
        Err(e) => e,
    }
}

/// Asserts `s` fails with `kind` at byte `pos` on `token`.
fn assert_err(s: &str, kind: QosErrorKind, pos: usize, token: &str) {
    let e = err(s);
    assert_eq!(
        (&e.kind, e.pos, e.token.as_str()),
        (&kind, pos, token),
        "{s:?}: {e}"
    );
}

fn assert_conflict(s: &str, pos: usize, token: &str) -> QosConflict {
    let e = err(s);
    assert_eq!((e.pos, e.token.as_str()), (pos, token), "{s:?}: {e}");
    match &e.kind {
        QosErrorKind::Conflict(c) => c.clone(),
        other => panic!("{s:?}: expected a conflict, got {other:?}: {e}"),
    }
}

/// Parses, checks the canonical print, and that the print parses back to the same.
fn canonical(s: &str, printed: &str) -> Qos {
    let q = qos(s);
    assert_eq!(q.to_string(), printed, "print of {s:?}");
    assert_eq!(qos(printed), q, "reparse of {printed:?}");
    q
}

const MBPS: u64 = 1_000_000;

#[test]
fn plain_ubr() {
    let q = canonical("ubr", "ubr");
    assert_eq!(q.aal(), Aal::Aal5);
    assert_eq!(q.class(), TrafficClass::Ubr);
    assert_eq!(*q.tx(), TrafficParams::new(TrafficClass::Ubr));
    assert_eq!(q.tx(), q.rx());
    assert_eq!(*q.transport(), TransportParams::default());
    assert_eq!(q.service(), Service::BestEffort);
}

#[test]
fn linux_man_page_example() {
    let q = canonical(
        "cbr:max_pcr=11Mbps,min_pcr=10mbps,sdu=8192",
        "cbr:max_pcr=11Mbps,min_pcr=10Mbps,max_sdu=8192",
    );
    for tp in [q.tx(), q.rx()] {
        assert_eq!(tp.class, TrafficClass::Cbr);
        assert_eq!(tp.max_pcr, Some(Rate::Bps(11 * MBPS)));
        assert_eq!(tp.min_pcr, Some(Rate::Bps(10 * MBPS)));
        assert_eq!(tp.pcr, None);
        assert_eq!(tp.max_sdu, Some(8192));
    }
}

#[test]
fn tx_only_in_cells_per_second() {
    let q = canonical("cbr:tx:pcr=30000,rx:none", "cbr:pcr=11520kbps,rx:none");
    assert_eq!(q.tx().pcr, Some(Rate::Bps(30_000 * 384)));
    assert_eq!(q.tx().pcr.and_then(Rate::cells_per_sec), Some(30_000));
    assert_eq!(*q.rx(), TrafficParams::UNUSED);
    assert_eq!(q.class(), TrafficClass::Cbr);
}

#[test]
fn aal_before_or_after_the_class() {
    let a = canonical("aal5,ubr:sdu=9180", "ubr:max_sdu=9180");
    assert_eq!(a, qos("ubr,aal5:sdu=9180"));
    let raw = canonical("aal0,cbr:pcr=1000", "cbr,aal0:pcr=384kbps");
    assert_eq!(raw.aal(), Aal::Aal0);
}

#[test]
fn pcr_max_is_the_link_rate() {
    let q = canonical("cbr:pcr=max", "cbr:pcr=max");
    assert_eq!(q.tx().pcr, Some(Rate::Max));
    assert_eq!(Rate::Max.cells_per_sec(), None);
    assert!(Rate::Max > Rate::Bps(u64::MAX));
}

#[test]
fn keywords_are_case_insensitive_units_are_not() {
    assert_eq!(qos("CBR:PCR=10Mbps"), qos("cbr:pcr=10Mbps"));
    assert_eq!(qos("Cbr:Max_Pcr=MAX"), qos("cbr:max_pcr=max"));
    assert_err("cbr:pcr=10MBPS", QosErrorKind::BadUnit, 8, "10MBPS");
}

#[test]
fn rate_units() {
    let pcr = |v: &str| qos(&format!("cbr:pcr={v}")).tx().pcr.unwrap();
    assert_eq!(pcr("1"), Rate::Bps(384));
    assert_eq!(pcr("1cps"), Rate::Bps(384));
    assert_eq!(pcr("1.5cps"), Rate::Bps(576));
    assert_eq!(pcr("2kcps"), Rate::Bps(768_000));
    assert_eq!(pcr("384bps"), Rate::Bps(384));
    assert_eq!(pcr("10kbps"), Rate::Bps(10_000));
    assert_eq!(pcr("10Kbps"), Rate::Bps(10_000));
    assert_eq!(pcr("1.5Mbps"), Rate::Bps(1_500_000));
    assert_eq!(pcr("2Gbps"), Rate::Bps(2_000_000_000));
    assert_eq!(Rate::Bps(384).to_string(), "384bps");
    assert_eq!(Rate::Bps(1_000).to_string(), "1kbps");
    assert_eq!(Rate::Bps(10 * MBPS).to_string(), "10Mbps");
    assert_eq!(Rate::Bps(1_500_000).to_string(), "1500kbps");
    assert_eq!(Rate::Bps(0).to_string(), "0bps");
}

#[test]
fn cells_per_second_rounds_up() {
    assert_eq!(Rate::Bps(0).cells_per_sec(), Some(0));
    assert_eq!(Rate::Bps(384).cells_per_sec(), Some(1));
    assert_eq!(Rate::Bps(385).cells_per_sec(), Some(2));
    assert_eq!(Rate::Bps(10 * MBPS).cells_per_sec(), Some(26_042));
    assert_eq!(
        Rate::from_cells_per_sec(353_207),
        Some(Rate::Bps(135_631_488))
    );
    assert_eq!(Rate::from_cells_per_sec(u64::MAX), None);
    assert_eq!(Rate::Bps(7).bits_per_sec(), Some(7));
}

#[test]
fn vbr_extension() {
    let q = canonical(
        "vbr:pcr=10Mbps,scr=4Mbps,mbs=100,max_cdv=2ms",
        "vbr:pcr=10Mbps,scr=4Mbps,mbs=100,max_cdv=2ms",
    );
    assert_eq!(q.tx().scr, Some(Rate::Bps(4 * MBPS)));
    assert_eq!(q.tx().mbs, Some(100));
    assert_eq!(q.tx().max_cdv, Some(2_000));
    assert_eq!(q.service(), Service::Guaranteed);
    assert_eq!(qos("vbr:max_cdv=1500").tx().max_cdv, Some(1_500));
    assert_eq!(qos("vbr:max_cdv=1.5ms").to_string(), "vbr:max_cdv=1500us");
    assert_eq!(qos("vbr:max_cdv=1s").to_string(), "vbr:max_cdv=1s");
}

#[test]
fn transport_keys_after_a_class() {
    let q = canonical(
        "cbr:pcr=20Mbps,flow=leaky-bucket,ec=off",
        "cbr:pcr=20Mbps,flow=leaky-bucket,ec=off",
    );
    assert_eq!(q.transport().flow, Some(FlowKind::LeakyBucket));
    assert_eq!(q.transport().error_control, Some(false));
    let all = canonical(
        "ubr:prio=3,mode=stream,window=64,ec=on,msg=1M,outstanding=8,tpdu=8192,flow=packet_pair",
        "ubr:flow=packet-pair,ec=on,mode=stream,tpdu=8192,window=64,msg=1M,outstanding=8,prio=3",
    );
    let t = all.transport();
    assert_eq!(t.semantics, Some(Semantics::Stream));
    assert_eq!(
        (t.window, t.outstanding, t.priority),
        (Some(64), Some(8), Some(3))
    );
    assert_eq!((t.tpdu_size, t.max_msg), (Some(8192), Some(1_000_000)));
}

#[test]
fn byte_units() {
    let msg = |v: &str| qos(&format!("ubr:msg={v}")).transport().max_msg.unwrap();
    assert_eq!(msg("1M"), 1_000_000);
    assert_eq!(msg("1MB"), 1_000_000);
    assert_eq!(msg("1Mi"), 1 << 20);
    assert_eq!(msg("1MiB"), 1 << 20);
    assert_eq!(msg("64k"), 64_000);
    assert_eq!(msg("64Ki"), 65_536);
    assert_eq!(msg("1.5k"), 1_500);
    assert_eq!(msg("2G"), 2_000_000_000);
    assert_eq!(msg("100"), 100);
    assert_eq!(qos("ubr:msg=1048576").to_string(), "ubr:msg=1Mi");
    assert_eq!(qos("ubr:msg=1500").to_string(), "ubr:msg=1500");
    assert_eq!(qos("ubr:msg=3000").to_string(), "ubr:msg=3k");
    assert_eq!(qos("ubr:sdu=9k").to_string(), "ubr:max_sdu=9000");
    assert_eq!(qos("ubr:tpdu=4Ki").transport().tpdu_size, Some(4096));
    assert_eq!(
        qos("guaranteed:pcr=1Mbps,bucket=64Ki").to_string(),
        "guaranteed:pcr=1Mbps,bucket=64Ki"
    );
}

#[test]
fn named_services() {
    let g = canonical("guaranteed:pcr=10Mbps", "guaranteed:pcr=10Mbps");
    assert_eq!(g, Qos::guaranteed(Rate::Bps(10 * MBPS)));
    assert_eq!(g.class(), TrafficClass::Cbr);
    assert_eq!(g.service(), Service::Guaranteed);
    assert_eq!(canonical("reliable", "reliable"), Qos::reliable());
    assert_eq!(canonical("best-effort", "best-effort"), Qos::best_effort());
    assert_eq!(qos("best_effort"), Qos::best_effort());
    let r = canonical(
        "reliable:flow=window,tpdu=8192",
        "reliable:flow=window,tpdu=8192",
    );
    assert_eq!(r.class(), TrafficClass::Ubr);
    assert_eq!(r.resolved_transport(true).flow, FlowKind::Window);
    assert_eq!(Qos::guaranteed(Rate::Max).to_string(), "guaranteed:pcr=max");
}

#[test]
fn service_inference_and_defaults() {
    let r = qos("cbr:pcr=1Mbps").resolved_transport(true);
    assert_eq!(r.service, Service::Guaranteed);
    assert_eq!((r.error_control, r.flow), (false, FlowKind::LeakyBucket));
    assert_eq!(
        (r.tpdu_size, r.semantics, r.priority),
        (4096, Semantics::Message, 0)
    );

    let b = qos("ubr").resolved_transport(true);
    assert_eq!(
        (b.service, b.error_control, b.flow),
        (Service::BestEffort, false, FlowKind::None)
    );

    let rel = qos("ubr:ec=on");
    assert_eq!(rel.service(), Service::Reliable);
    assert_eq!(rel.resolved_transport(true).flow, FlowKind::PacketPair);
    assert_eq!(rel.resolved_transport(false).flow, FlowKind::Window);
    assert!(rel.resolved_transport(false).error_control);
    assert!(Qos::reliable().resolved_transport(true).error_control);

    // Feedback flow control without error control (seed 000 §8) stays best-effort.
    let ff = qos("ubr:flow=packet-pair,ec=off").resolved_transport(false);
    assert_eq!(
        (ff.service, ff.flow, ff.error_control),
        (Service::BestEffort, FlowKind::PacketPair, false)
    );
    // CBR keeps its reservation even with error control on.
    let cec = qos("cbr:pcr=1Mbps,ec=on").resolved_transport(true);
    assert_eq!(
        (cec.service, cec.error_control),
        (Service::Guaranteed, true)
    );
    assert_eq!(qos("abr").service(), Service::BestEffort);
    // The abr class brings its own flow control; with ec=on it is reliable too, and
    // any service may ask for it.
    let abr = qos("abr:pcr=100Mbps,min_pcr=10Mbps").resolved_transport(true);
    assert_eq!(
        (abr.service, abr.flow),
        (Service::BestEffort, FlowKind::Abr)
    );
    let rabr = qos("abr:ec=on").resolved_transport(false);
    assert_eq!(
        (rabr.service, rabr.flow),
        (Service::Reliable, FlowKind::Abr)
    );
    assert_eq!(
        qos("reliable:flow=abr").resolved_transport(true).flow,
        FlowKind::Abr
    );
    assert_eq!(qos("ubr:flow=abr").to_string(), "ubr:flow=abr");
    assert_eq!(
        qos("abr:transport=none").resolved_transport(true).flow,
        FlowKind::None
    );
    let b = qos("guaranteed:pcr=2Mbps,bucket=8Ki,msg=1M").resolved_transport(true);
    assert_eq!(
        (b.bucket, b.max_msg, b.window),
        (Some(8192), Some(1_000_000), None)
    );
}

#[test]
fn groups_override_the_shared_list() {
    let q = canonical(
        "cbr:pcr=1Mbps,sdu=9180,tx:pcr=2Mbps",
        "cbr:max_sdu=9180,tx:pcr=2Mbps,rx:pcr=1Mbps",
    );
    assert_eq!(q.tx().pcr, Some(Rate::Bps(2 * MBPS)));
    assert_eq!(q.rx().pcr, Some(Rate::Bps(MBPS)));
    assert_eq!(q.rx().max_sdu, Some(9180));
    // Either group order is accepted; tx prints first.
    assert_eq!(qos("cbr:max_sdu=9180,rx:pcr=1Mbps,tx:pcr=2Mbps"), q);
    assert_eq!(
        canonical("ubr:rx:none", "ubr:rx:none").rx().class,
        TrafficClass::None
    );
    assert_eq!(
        canonical("ubr:tx:none,rx:pcr=1Mbps", "ubr:pcr=1Mbps,tx:none")
            .rx()
            .pcr,
        Some(Rate::Bps(MBPS))
    );
    assert_eq!(
        canonical("ubr:tx:pcr=1Mbps", "ubr:tx:pcr=1Mbps").rx().pcr,
        None
    );
    // Shared parameters do not stick to an unused direction.
    assert_eq!(*qos("cbr:pcr=1Mbps,rx:none").rx(), TrafficParams::UNUSED);
}

#[test]
fn surrounding_space_is_ignored() {
    assert_eq!(qos("  ubr \n"), qos("ubr"));
}

#[test]
fn any_class() {
    let q = canonical("any:sdu=9180", "any:max_sdu=9180");
    assert_eq!(q.class(), TrafficClass::Any);
}

// ---- errors, one kind at a time ----

#[test]
fn error_empty() {
    assert_err("", QosErrorKind::Empty, 0, "");
    assert_err("   ", QosErrorKind::Empty, 3, "");
    assert!(err("")
        .to_string()
        .starts_with("empty QoS specification: expected a traffic class"));
}

#[test]
fn error_unknown_class() {
    assert_err("cbrr", QosErrorKind::UnknownClass, 0, "cbrr");
    assert_eq!(
        err("cbrr").to_string(),
        "unknown traffic class \"cbrr\" at column 1: expected ubr, cbr, vbr, abr, any, \
         guaranteed, reliable or best-effort (optionally with aal0 or aal5)"
    );
    assert_err("aal5,ubr+", QosErrorKind::UnknownClass, 5, "ubr+");
    assert_err("none", QosErrorKind::UnknownClass, 0, "none");
    assert!(err("pcr=1")
        .detail()
        .contains("parameters follow the class and a colon"));
}

#[test]
fn error_unknown_param() {
    assert_err("cbr:foo=1", QosErrorKind::UnknownParam, 4, "foo");
    assert_err("cbr:tx:pcr=1,bar=2", QosErrorKind::UnknownParam, 13, "bar");
    assert!(err("cbr:tx:bar=2")
        .detail()
        .starts_with("expected max_pcr, pcr"));
    assert!(err("cbr:aal5").detail().contains("before the colon"));
}

#[test]
fn error_unknown_value() {
    assert_err("ubr:flow=fast", QosErrorKind::UnknownValue, 9, "fast");
    assert_eq!(
        err("ubr:flow=fast").to_string(),
        "unknown value \"fast\" at column 10: flow takes none, leaky-bucket, packet-pair, window or abr"
    );
    assert_err("ubr:ec=yes", QosErrorKind::UnknownValue, 7, "yes");
    assert_err("ubr:mode=bytes", QosErrorKind::UnknownValue, 9, "bytes");
}

#[test]
fn error_bad_number() {
    assert_err("cbr:pcr=abc", QosErrorKind::BadNumber, 8, "abc");
    assert_err("cbr:pcr=1.", QosErrorKind::BadNumber, 8, "1.");
    assert_err("cbr:pcr=0.001cps", QosErrorKind::BadNumber, 8, "0.001cps");
    assert_err("cbr:pcr=0.5bps", QosErrorKind::BadNumber, 8, "0.5bps");
    assert_err("ubr:window=1.5", QosErrorKind::BadNumber, 11, "1.5");
    assert_err("ubr:window=-1", QosErrorKind::BadNumber, 11, "-1");
    assert!(err("cbr:pcr=abc").detail().contains("10Mbps"));
}

#[test]
fn error_bad_unit() {
    assert_err("cbr:pcr=10k", QosErrorKind::BadUnit, 8, "10k");
    assert!(err("cbr:pcr=10k")
        .detail()
        .starts_with("a multiplier needs a unit"));
    assert_err("cbr:pcr=10MBps", QosErrorKind::BadUnit, 8, "10MBps");
    assert_err("cbr:pcr=10Mbit", QosErrorKind::BadUnit, 8, "10Mbit");
    assert_err("ubr:msg=1Mb", QosErrorKind::BadUnit, 8, "1Mb");
    assert_err("vbr:max_cdv=3h", QosErrorKind::BadUnit, 12, "3h");
}

#[test]
fn error_out_of_range() {
    assert_err("ubr:tpdu=10", QosErrorKind::OutOfRange, 9, "10");
    assert_err("ubr:tpdu=65001", QosErrorKind::OutOfRange, 9, "65001");
    assert_err("ubr:sdu=70000", QosErrorKind::OutOfRange, 8, "70000");
    assert_err("ubr:sdu=0", QosErrorKind::OutOfRange, 8, "0");
    assert_err("ubr:prio=256", QosErrorKind::OutOfRange, 9, "256");
    assert_err("ubr:window=0", QosErrorKind::OutOfRange, 11, "0");
    // The TPDU header carries the window in 16 bits: refused here, not at connect.
    assert_eq!(
        qos("reliable:window=65535").to_string(),
        "reliable:window=65535"
    );
    assert_err(
        "reliable:window=65536",
        QosErrorKind::OutOfRange,
        16,
        "65536",
    );
    assert_err(
        "reliable:window=4294967295",
        QosErrorKind::OutOfRange,
        16,
        "4294967295",
    );
    assert!(err("reliable:window=65536")
        .detail()
        .contains("window takes 1..=65535 TPDUs"));
    assert_err("cbr:pcr=0", QosErrorKind::OutOfRange, 8, "0");
    assert_err("cbr:max_pcr=0bps", QosErrorKind::OutOfRange, 12, "0bps");
    assert_err("vbr:scr=0.0Mbps", QosErrorKind::OutOfRange, 8, "0.0Mbps");
    assert!(err("cbr:pcr=0")
        .detail()
        .contains("leave pcr out to leave it open"));
    assert_eq!(qos("cbr:min_pcr=0").to_string(), "cbr:min_pcr=0bps");
    assert_err(
        "cbr:pcr=99999999999999999999bps",
        QosErrorKind::OutOfRange,
        8,
        "99999999999999999999bps",
    );
    assert_eq!(
        err("ubr:tpdu=10").to_string(),
        "value out of range \"10\" at column 10: tpdu takes 64..=65000 bytes (an AAL5 SDU less header room)"
    );
}

#[test]
fn error_duplicate() {
    assert_err("cbr:pcr=1,pcr=2", QosErrorKind::DuplicateParam, 10, "pcr=2");
    assert_err(
        "cbr:pcr=1,tx:pcr=2,pcr=3",
        QosErrorKind::DuplicateParam,
        19,
        "pcr=3",
    );
    assert_err("ubr,cbr", QosErrorKind::DuplicateParam, 4, "cbr");
    assert_err("aal5,ubr,aal0", QosErrorKind::DuplicateParam, 9, "aal0");
    assert_err(
        "cbr:tx:pcr=1,tx:pcr=2",
        QosErrorKind::DuplicateParam,
        13,
        "tx",
    );
    assert_err(
        "cbr:sdu=1,max_sdu=2",
        QosErrorKind::DuplicateParam,
        10,
        "max_sdu=2",
    );
    assert!(err("cbr:pcr=1,pcr=2").detail().contains("column 5"));
}

#[test]
fn error_misplaced() {
    assert_err("cbr:tx:pcr=1,ec=on", QosErrorKind::Misplaced, 13, "ec");
    assert_err("cbr:tx:none,pcr=1", QosErrorKind::Misplaced, 12, "pcr");
    assert!(err("cbr:tx:pcr=1,ec=on")
        .detail()
        .contains("before the tx: group"));
}

#[test]
fn error_syntax() {
    assert_err("ubr:", QosErrorKind::Syntax, 4, "");
    assert_err("ubr:pcr", QosErrorKind::Syntax, 7, "");
    assert_err("ubr:pcr=", QosErrorKind::Syntax, 8, "");
    assert_err("cbr:pcr=1,", QosErrorKind::Syntax, 10, "");
    assert_err("cbr:pcr=1:", QosErrorKind::Syntax, 9, ":");
    assert_err("cbr: pcr=1", QosErrorKind::Syntax, 4, " ");
    assert_err("cbr:,", QosErrorKind::Syntax, 4, ",");
    assert_err("ubr,", QosErrorKind::Syntax, 4, "");
    assert_err("aal5", QosErrorKind::Syntax, 0, "aal5");
    assert_err("ubr=1", QosErrorKind::Syntax, 3, "=");
    assert_err("cbr:tx:", QosErrorKind::Syntax, 7, "");
    assert!(err("cbr: pcr=1")
        .detail()
        .contains("spaces are not allowed"));
    assert_eq!(
        err("ubr:").to_string(),
        "syntax error at end of text (column 5): expected a parameter"
    );
}

#[test]
fn error_conflicts() {
    let c = assert_conflict("guaranteed", 0, "guaranteed");
    assert_eq!(c, QosConflict::GuaranteedWithoutRate { dir: Direction::Tx });
    let c = assert_conflict("cbr:max_pcr=10Mbps,min_pcr=11Mbps", 19, "min_pcr=11Mbps");
    assert!(matches!(
        c,
        QosConflict::RateOrder {
            low: QosKey::MinPcr,
            high: QosKey::MaxPcr,
            ..
        }
    ));
    let c = assert_conflict("best-effort:ec=on", 12, "ec=on");
    assert_eq!(
        c,
        QosConflict::PresetOverride {
            service: Service::BestEffort,
            key: QosKey::Ec
        }
    );
    assert_eq!(
        err("best-effort:ec=on").to_string(),
        "conflicting setting \"ec=on\" at column 13: best-effort means no error control; \
         use reliable, or ubr:ec=on"
    );
    assert_eq!(
        assert_conflict("ubr:tx:none,rx:none", 15, "none"),
        QosConflict::NoDirection
    );
    assert!(matches!(
        assert_conflict("cbr:min_pcr=max", 4, "min_pcr=max"),
        QosConflict::MaxNotAllowed {
            key: QosKey::MinPcr,
            ..
        }
    ));
    assert!(matches!(
        assert_conflict("ubr:scr=1Mbps", 4, "scr=1Mbps"),
        QosConflict::VbrOnly {
            key: QosKey::Scr,
            ..
        }
    ));
    assert!(matches!(
        assert_conflict("vbr:pcr=1Mbps,tx:scr=2Mbps", 17, "scr=2Mbps"),
        QosConflict::RateOrder {
            dir: Direction::Tx,
            ..
        }
    ));
    assert_eq!(
        assert_conflict("ubr:bucket=8k", 4, "bucket=8k"),
        QosConflict::BucketWithoutLeakyBucket
    );
    assert_eq!(
        assert_conflict("guaranteed:pcr=1Mbps,bucket=1000", 21, "bucket=1000"),
        QosConflict::BucketBelowTpdu {
            bucket: 1000,
            tpdu: 4096
        }
    );
    assert!(qos("guaranteed:pcr=1Mbps,tpdu=512,bucket=1000")
        .transport()
        .bucket
        .is_some());
    // delay= bounds a shaped VC's send queue in time: only a leaky-bucket VC has one.
    assert_eq!(
        assert_conflict("reliable:delay=5ms", 9, "delay=5ms"),
        QosConflict::DelayWithoutLeakyBucket
    );
    assert_eq!(
        assert_conflict("cbr:pcr=1Mbps,flow=window,delay=5ms", 26, "delay=5ms"),
        QosConflict::DelayWithoutLeakyBucket
    );
    canonical("cbr:pcr=1Mbps,delay=20000", "cbr:pcr=1Mbps,delay=20ms");
    canonical(
        "guaranteed:pcr=2Mbps,delay=1500us",
        "guaranteed:pcr=2Mbps,delay=1500us",
    );
    canonical(
        "vbr:pcr=2Mbps,scr=1Mbps,mbs=10,delay=1s,bucket=8Ki",
        "vbr:pcr=2Mbps,scr=1Mbps,mbs=10,bucket=8Ki,delay=1s",
    );
    assert_eq!(qos("cbr:pcr=1Mbps,delay=5ms").transport().delay, Some(5000));
    assert!(matches!(
        err("cbr:pcr=1Mbps,delay=11s").kind,
        QosErrorKind::OutOfRange
    ));
    assert!(matches!(
        err("cbr:pcr=1Mbps,delay=0").kind,
        QosErrorKind::OutOfRange
    ));
    assert!(matches!(
        assert_conflict("ubr,aal0:ec=on", 9, "ec=on"),
        QosConflict::TransportOnAal0 { key: QosKey::Ec }
    ));
    assert!(matches!(
        assert_conflict("guaranteed,aal0:pcr=1Mbps", 11, "aal0"),
        QosConflict::TransportOnAal0 { .. }
    ));
    assert_conflict("reliable:ec=off", 9, "ec=off");
    assert_conflict("reliable:flow=none", 9, "flow=none");
    assert_conflict("guaranteed:pcr=1Mbps,flow=window", 21, "flow=window");
    assert_conflict("best-effort:flow=leaky-bucket", 12, "flow=leaky-bucket");
}

#[test]
fn new_rejects_what_the_parser_cannot_produce() {
    let cbr = TrafficParams::new(TrafficClass::Cbr);
    let ubr = TrafficParams::new(TrafficClass::Ubr);
    let t = TransportParams::default();
    assert_eq!(
        Qos::new(Aal::Aal5, cbr, ubr, t),
        Err(QosConflict::ClassMismatch {
            tx: TrafficClass::Cbr,
            rx: TrafficClass::Ubr
        })
    );
    let mut unused = TrafficParams::UNUSED;
    unused.max_sdu = Some(100);
    assert_eq!(
        Qos::new(Aal::Aal5, cbr, unused, t),
        Err(QosConflict::UnusedDirectionHasParams { dir: Direction::Rx })
    );
    let guaranteed = TransportParams {
        service: Some(Service::Guaranteed),
        ..t
    };
    assert_eq!(
        Qos::new(Aal::Aal5, ubr, ubr, guaranteed),
        Err(QosConflict::PresetClass {
            service: Service::Guaranteed,
            class: TrafficClass::Ubr
        })
    );
    let q = Qos::new(Aal::Aal5, cbr, TrafficParams::UNUSED, t).unwrap();
    assert_eq!(q.to_string(), "cbr:rx:none");
    let (aal, tx, rx, transport) = q.into_parts();
    assert_eq!(Qos::new(aal, tx, rx, transport), Ok(q));
    let stream = TransportParams {
        semantics: Some(Semantics::Stream),
        ..t
    };
    assert_eq!(
        q.with_transport(stream).unwrap().to_string(),
        "cbr:mode=stream,rx:none"
    );
}

#[test]
fn caret_rendering() {
    let s = "cbrr:pcr=1";
    let e = err(s);
    assert_eq!(e.caret_line(s), "^^^^");
    assert_eq!(
        e.render(s),
        "unknown traffic class \"cbrr\" at column 1: expected ubr, cbr, vbr, abr, any, \
         guaranteed, reliable or best-effort (optionally with aal0 or aal5)\n  cbrr:pcr=1\n  ^^^^"
    );
    let s = "cbr:pcr=10k";
    assert_eq!(err(s).caret_line(s), "        ^^^");
    let s = "ubr:";
    assert_eq!(err(s).caret_line(s), "    ^");
    let s = "ubr:prio=é";
    let e = err(s);
    assert_eq!((e.pos, e.column), (9, 10));
    assert_eq!(e.caret_line(s), "         ^");
}

#[test]
fn bare_transport_parses_prints_and_round_trips() {
    let q = canonical("ubr:transport=none", "ubr:transport=none");
    assert!(q.is_bare());
    assert_eq!(q.transport().kind, TransportKind::Bare);
    assert_eq!(q.max_sdu(Direction::Tx), DEFAULT_MAX_SDU);
    assert_eq!(q.max_sdu(Direction::Rx), 9188);
    // The default is natm's transport and is not printed; naming it changes nothing.
    let natm = canonical("ubr:transport=natm", "ubr");
    assert!(!natm.is_bare());
    assert_eq!(natm, qos("ubr"));
    // max_sdu bounds each direction's message; traffic parameters go with it.
    let q = canonical(
        "cbr:pcr=10Mbps,transport=NONE,tx:max_sdu=1000,rx:max_sdu=64k",
        "cbr:pcr=10Mbps,transport=none,tx:max_sdu=1000,rx:max_sdu=64000",
    );
    assert!(q.is_bare());
    assert_eq!(q.max_sdu(Direction::Tx), 1000);
    assert_eq!(q.max_sdu(Direction::Rx), 64_000);
    assert_eq!(q.tx().pcr, Some(Rate::Bps(10 * MBPS)));
    let q = canonical(
        "vbr:pcr=2Mbps,scr=1Mbps,mbs=100,transport=none,rx:none",
        "vbr:pcr=2Mbps,scr=1Mbps,mbs=100,transport=none,rx:none",
    );
    assert!(q.is_bare());
}

#[test]
fn bare_transport_conflicts_with_every_natm_transport_setting() {
    for (param, key) in [
        ("ec=off", QosKey::Ec),
        ("flow=none", QosKey::Flow),
        ("mode=message", QosKey::Mode),
        ("tpdu=4096", QosKey::Tpdu),
        ("msg=1k", QosKey::Msg),
        ("window=8", QosKey::Window),
        ("outstanding=2", QosKey::Outstanding),
        ("prio=1", QosKey::Prio),
    ] {
        // The caret marks whichever of the two was written last.
        let s = format!("ubr:transport=none,{param}");
        assert_eq!(
            assert_conflict(&s, 19, param),
            QosConflict::TransportOnBare { key },
            "{s}"
        );
        let s = format!("ubr:{param},transport=none");
        let at = 5 + param.len();
        assert_eq!(
            assert_conflict(&s, at, "transport=none"),
            QosConflict::TransportOnBare { key },
            "{s}"
        );
    }
    // On its own, bucket would be BucketWithoutLeakyBucket; transport=none is told first.
    assert_eq!(
        assert_conflict("cbr:pcr=1Mbps,transport=none,bucket=8k", 29, "bucket=8k"),
        QosConflict::TransportOnBare {
            key: QosKey::Bucket
        }
    );
    let e = assert_conflict("reliable:transport=none", 9, "transport=none");
    assert_eq!(
        e,
        QosConflict::ServiceOnBare {
            service: Service::Reliable
        }
    );
    assert!(e.to_string().contains("use the class ubr"), "{e}");
    assert_eq!(
        assert_conflict("guaranteed:pcr=1Mbps,transport=none", 21, "transport=none"),
        QosConflict::ServiceOnBare {
            service: Service::Guaranteed
        }
    );
    assert_eq!(
        assert_conflict("ubr,aal0:transport=none", 9, "transport=none"),
        QosConflict::TransportOnAal0 {
            key: QosKey::Transport
        }
    );
    assert_err(
        "ubr:transport=linux",
        QosErrorKind::UnknownValue,
        14,
        "linux",
    );
    assert_err(
        "ubr:tx:transport=none",
        QosErrorKind::Misplaced,
        7,
        "transport",
    );
    assert_err(
        "ubr:transport=none,transport=natm",
        QosErrorKind::DuplicateParam,
        19,
        "transport=natm",
    );
    let t = TransportParams {
        kind: TransportKind::Bare,
        ..TransportParams::default()
    };
    let ubr = TrafficParams::new(TrafficClass::Ubr);
    assert_eq!(
        Qos::new(
            Aal::Aal5,
            ubr,
            ubr,
            TransportParams {
                window: Some(4),
                ..t
            }
        ),
        Err(QosConflict::TransportOnBare {
            key: QosKey::Window
        })
    );
    assert!(Qos::new(Aal::Aal5, ubr, ubr, t).unwrap().is_bare());
}

#[test]
fn encrypt_is_a_transport_setting_that_round_trips_and_bare_vcs_refuse() {
    for text in [
        "reliable:encrypt=on",
        "best-effort:encrypt=off",
        "cbr:pcr=1Mbps,encrypt=on",
    ] {
        let q: Qos = text.parse().unwrap();
        assert_eq!(q.to_string(), text);
    }
    let q: Qos = "reliable:encrypt=on".parse().unwrap();
    assert_eq!(q.transport().encrypt, Some(true));
    assert_eq!(Qos::reliable().transport().encrypt, None);
    assert!("ubr:transport=none,encrypt=on".parse::<Qos>().is_err());
    assert!("reliable:encrypt=maybe".parse::<Qos>().is_err());
}

/// `tpdu=auto` (issue 17): the sender adapts below a 32 KiB ceiling; it prints back
/// as written.
#[test]
fn tpdu_auto_parses_prints_and_resolves() {
    let q = qos("reliable:tpdu=auto");
    assert!(q.transport().tpdu_auto);
    assert_eq!(q.transport().tpdu_size, None);
    assert_eq!(q.to_string(), "reliable:tpdu=auto");
    let r = q.resolved_transport(false);
    assert!(r.tpdu_adaptive);
    assert_eq!(r.tpdu_size, AUTO_TPDU_CEILING);
    let fixed = qos("reliable:tpdu=8192").resolved_transport(false);
    assert!(!fixed.tpdu_adaptive);
    assert_eq!(fixed.tpdu_size, 8192);
    assert!(!qos("reliable").resolved_transport(false).tpdu_adaptive);
    let cfg = crate::transport::TransportConfig::from_qos(&q, false).unwrap();
    assert_eq!(cfg.tpdu_size, AUTO_TPDU_CEILING);
    assert_eq!(cfg.tpdu_adapt.map(|a| a.floor), Some(4096));
    // Without error control nothing is retransmitted: nothing to adapt to.
    let ubr = crate::transport::TransportConfig::from_qos(&qos("ubr:tpdu=auto"), false).unwrap();
    assert_eq!(ubr.tpdu_adapt, None);
}

#[test]
fn debug_shows_the_canonical_text() {
    let q: Qos = "cbr:pcr=10Mbps".parse().unwrap();
    assert_eq!(format!("{q:?}"), format!("Qos({:?})", q.to_string()));
    assert_eq!(format!("{:?}", Qos::reliable()), "Qos(\"reliable\")");
}

#[test]
fn smooth_picks_cell_or_frame_smoothing_and_needs_a_peak_rate_for_cells() {
    use super::Smoothing;
    let q = qos("cbr:pcr=1Mbps,smooth=cell");
    assert_eq!(q.transport().smoothing, Some(Smoothing::Cell));
    assert_eq!(q.resolved_transport(false).smoothing, Smoothing::Cell);
    assert_eq!(
        qos("cbr:pcr=1Mbps").resolved_transport(false).smoothing,
        Smoothing::Frame
    );
    canonical("cbr:pcr=1Mbps,smooth=cell", "cbr:pcr=1Mbps,smooth=cell");
    canonical("ubr:smooth=frame", "ubr:smooth=frame");
    // The adaptor's setting, not the transport's: a bare VC may have it.
    canonical(
        "cbr:pcr=1Mbps,transport=none,smooth=cell",
        "cbr:pcr=1Mbps,transport=none,smooth=cell",
    );
    assert_eq!(
        assert_conflict("ubr:smooth=cell", 4, "smooth=cell"),
        QosConflict::SmoothingWithoutRate
    );
    assert_err(
        "cbr:pcr=1Mbps,smooth=cells",
        QosErrorKind::UnknownValue,
        21,
        "cells",
    );
}
