//! Proptest strategies for QoS values, shared by the property tests of the text
//! formats (`props/text.rs`) and of the IPC codec that carries them (`props/ipc.rs`).

use natm_proto::wire::qos::{
    Aal, FlowKind, Qos, Rate, Semantics, Service, Smoothing, TrafficClass, TrafficParams,
    TransportKind, TransportParams,
};
use proptest::option;
use proptest::prelude::*;

fn rate() -> impl Strategy<Value = Rate> {
    prop_oneof![
        4 => (1u64..10_000, 0u32..4).prop_map(|(n, e)| Rate::Bps(n * 10u64.pow(3 * e))),
        1 => Just(Rate::Bps(0)),
        2 => (0u64..1_000_000).prop_map(|cells| Rate::Bps(cells * 384)),
        1 => any::<u64>().prop_map(Rate::Bps),
        1 => Just(Rate::Max),
    ]
}

/// Traffic parameters whose rates are mostly in a valid order (the rest exercise the
/// validation and are filtered out by `Qos::new`).
fn traffic(class: TrafficClass) -> impl Strategy<Value = TrafficParams> {
    (
        prop::collection::vec(rate(), 4),
        any::<[bool; 4]>(),
        option::weighted(0.3, 1u32..100_000),
        option::weighted(0.3, prop_oneof![0u32..5_000, any::<u32>()]),
        option::weighted(0.5, prop_oneof![1u32..=65_535, Just(9180)]),
    )
        .prop_map(move |(mut rates, set, mbs, max_cdv, max_sdu)| {
            rates.sort();
            let vbr = class == TrafficClass::Vbr;
            let pick = |i: usize| set[i].then_some(rates[i]);
            TrafficParams {
                class,
                scr: pick(0).filter(|_| vbr),
                min_pcr: pick(1),
                pcr: pick(2),
                max_pcr: pick(3),
                mbs: mbs.filter(|_| vbr),
                max_cdv,
                max_sdu,
            }
        })
}

fn transport() -> impl Strategy<Value = TransportParams> {
    let flow = prop_oneof![
        Just(FlowKind::None),
        Just(FlowKind::LeakyBucket),
        Just(FlowKind::PacketPair),
        Just(FlowKind::Window),
    ];
    let service = prop_oneof![
        Just(Service::Guaranteed),
        Just(Service::Reliable),
        Just(Service::BestEffort),
    ];
    let semantics = prop_oneof![Just(Semantics::Message), Just(Semantics::Stream)];
    let bytes = prop_oneof![
        1u64..100_000,
        (1u64..1000).prop_map(|n| n << 20),
        any::<u64>()
    ];
    (
        (
            option::weighted(0.3, service),
            option::weighted(0.3, any::<bool>()),
            option::weighted(0.3, flow),
            option::weighted(0.3, semantics),
            option::weighted(0.3, prop_oneof![64u32..=65_000, Just(4096)]),
        ),
        (
            option::weighted(0.2, 1u32..10_000),
            option::weighted(0.2, bytes),
            option::weighted(0.2, 1u32..1_000),
            option::weighted(0.2, any::<u8>()),
            option::weighted(0.2, prop_oneof![65_000u32..1 << 24, Just(64 * 1024)]),
            option::weighted(0.3, any::<bool>()),
            option::weighted(0.2, prop_oneof![1u32..=10_000_000, Just(20_000)]),
            option::weighted(
                0.2,
                prop_oneof![Just(Smoothing::Frame), Just(Smoothing::Cell)],
            ),
        ),
    )
        .prop_map(
            |((service, error_control, flow, semantics, tpdu_size), rest)| {
                let (window, max_msg, outstanding, priority, bucket, encrypt, delay, smoothing) =
                    rest;
                TransportParams {
                    kind: TransportKind::Natm,
                    service,
                    error_control,
                    flow,
                    semantics,
                    tpdu_auto: tpdu_size.is_none() && priority.is_some_and(|p| p % 2 == 1),
                    tpdu_size,
                    window,
                    max_msg,
                    outstanding,
                    priority,
                    bucket,
                    delay,
                    encrypt,
                    smoothing,
                }
            },
        )
}

/// Any valid `Qos`: parts drawn freely, kept if `Qos::new` accepts them.
pub(crate) fn any_qos() -> BoxedStrategy<Qos> {
    let class = prop_oneof![
        Just(TrafficClass::Ubr),
        Just(TrafficClass::Cbr),
        Just(TrafficClass::Vbr),
        Just(TrafficClass::Abr),
        Just(TrafficClass::Any),
    ];
    (
        class,
        0u8..4,
        prop_oneof![4 => Just(Aal::Aal5), 1 => Just(Aal::Aal0)],
    )
        .prop_flat_map(|(class, shape, aal)| {
            // One in five is a bare AAL5 VC, which takes no other transport setting.
            let transport = prop_oneof![
                4 => transport(),
                1 => Just(TransportParams {
                    kind: TransportKind::Bare,
                    ..TransportParams::default()
                }),
            ];
            (
                traffic(class),
                traffic(class),
                transport,
                Just((shape, aal)),
            )
        })
        .prop_filter_map("inconsistent QoS", |(tx, rx, transport, (shape, aal))| {
            let (tx, rx) = match shape {
                0 => (tx, tx),
                1 => (tx, rx),
                2 => (tx, TrafficParams::UNUSED),
                _ => (TrafficParams::UNUSED, rx),
            };
            let transport = if aal == Aal::Aal0 {
                TransportParams::default()
            } else {
                transport
            };
            Qos::new(aal, tx, rx, transport).ok()
        })
        .boxed()
}
