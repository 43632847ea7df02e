//! Property tests for the signalling codecs: Q.2931 messages and SSCOP PDUs emit and
//! parse back to the same typed values, and no input makes a parser panic. Also
//! replays the committed fuzz seeds of `q2931_message` and `sscop_pdu`.

use natm_proto::wire::addr::{Aesa, E164};
use natm_proto::wire::q2931::*;
use natm_proto::wire::sscop::{Pdu, SeqNum};
use natm_proto::wire::tpdu::ConnParams;
use proptest::collection::vec;
use proptest::prelude::*;
use std::net::{IpAddr, SocketAddr};

fn bits(max: u8) -> impl Strategy<Value = u8> {
    0..=max
}

fn blob(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=max)
}

/// Raw octets that do not start with one of `known` (a "rest" a parser keeps as is).
fn rest_not_starting_with(known: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(vec![]),
        (any::<u8>(), blob(6))
            .prop_filter("unknown first octet", |(b, _)| !known.contains(b))
            .prop_map(|(b, mut r)| {
                r.insert(0, b);
                r
            })
    ]
}

fn seq24() -> impl Strategy<Value = SeqNum> {
    (0u32..1 << 24).prop_map(|v| SeqNum::new(v).unwrap())
}

fn opt24() -> impl Strategy<Value = Option<u32>> {
    prop::option::of(0u32..1 << 24)
}

fn cell_rates() -> impl Strategy<Value = CellRates> {
    (
        opt24(),
        opt24(),
        opt24(),
        opt24(),
        opt24(),
        opt24(),
        opt24(),
    )
        .prop_map(|(pcr0, pcr01, scr0, scr01, mcr, mbs0, mbs01)| CellRates {
            pcr0,
            pcr01,
            scr0,
            scr01,
            mcr,
            mbs0,
            mbs01,
        })
}

const TD_IDS: &[u8] = &[
    0x82, 0x83, 0x84, 0x85, 0x88, 0x89, 0x90, 0x91, 0x92, 0x93, 0xA0, 0xA1, 0xB0, 0xB1, 0xBE, 0xBF,
];

fn traffic() -> impl Strategy<Value = TrafficDescriptor> {
    (
        cell_rates(),
        cell_rates(),
        any::<bool>(),
        prop::option::of(any::<u8>()),
        rest_not_starting_with(TD_IDS),
    )
        .prop_map(|(fwd, bwd, best_effort, options, rest)| TrafficDescriptor {
            fwd,
            bwd,
            best_effort,
            options,
            rest,
        })
}

fn aal() -> impl Strategy<Value = AalParams> {
    let aal5 = (
        prop::option::of(any::<u16>()),
        prop::option::of(any::<u16>()),
        prop::option::of(any::<u8>()),
        prop::option::of(any::<u8>().prop_map(SscsType::from_raw)),
        rest_not_starting_with(&[0x8C, 0x81, 0x83, 0x84]),
    )
        .prop_map(|(fwd_max_sdu, bwd_max_sdu, mode, sscs, rest)| {
            AalParams::Aal5(Aal5Params {
                fwd_max_sdu,
                bwd_max_sdu,
                mode,
                sscs,
                rest,
            })
        });
    let other = (any::<u8>().prop_filter("not AAL5", |&t| t != 5), blob(8))
        .prop_map(|(aal_type, data)| AalParams::Other { aal_type, data });
    prop_oneof![aal5, other]
}

fn aesa() -> impl Strategy<Value = Aesa> {
    any::<[u8; 20]>().prop_filter_map("AFI 0", Aesa::new)
}

fn address() -> impl Strategy<Value = PartyAddress> {
    prop_oneof![
        aesa().prop_map(PartyAddress::Aesa),
        "[0-9]{1,15}".prop_map(|d| PartyAddress::E164(E164::new(&d).unwrap())),
        (
            bits(15).prop_filter("not 1 or 2", |p| !matches!(p, 1 | 2)),
            blob(20)
        )
            .prop_map(|(plan, digits)| PartyAddress::Other {
                plan: NumberingPlan::from_raw(plan),
                digits
            }),
    ]
}

fn subaddress() -> impl Strategy<Value = Subaddress> {
    (bits(7), any::<bool>(), blob(20)).prop_map(|(kind, odd, address)| Subaddress {
        kind: SubaddressType::from_raw(kind),
        odd,
        address,
    })
}

fn conn_params() -> impl Strategy<Value = ConnParams> {
    (
        (1u32.., 1u32..=65_503, any::<u64>(), any::<u32>()),
        (any::<bool>(), any::<bool>(), 0u32..=3),
        (any::<u64>(), any::<u64>(), any::<u32>(), any::<u32>()),
    )
        .prop_map(
            |(
                (window, tpdu_size, max_msg, outstanding),
                (ec, stream, flow),
                (rate, m, rcv_buf, isn),
            )| {
                let mut p = ConnParams {
                    window,
                    tpdu_size,
                    max_msg,
                    outstanding,
                    options: (u32::from(ec) * ConnParams::OPT_ERROR_CONTROL)
                        | (u32::from(stream) * ConnParams::OPT_STREAM),
                    rate,
                    min_rate: if rate == 0 { 0 } else { m % rate },
                    rcv_buf,
                    isn,
                };
                p.set_flow_code(flow);
                p
            },
        )
}

fn natm() -> impl Strategy<Value = NatmParams> {
    (
        prop::option::of(conn_params()),
        prop::option::of("[ -~]{0,40}"),
        prop::option::of((any::<IpAddr>(), any::<u16>()).prop_map(SocketAddr::from)),
        prop::option::of(any::<u32>()),
        vec((5u8.., blob(10)), 0..3),
    )
        .prop_map(
            |(transport, qos, data_endpoint, cookie, extra)| NatmParams {
                transport,
                qos,
                data_endpoint,
                cookie,
                extra,
            },
        )
}

fn node() -> impl Strategy<Value = NodeId> {
    any::<u32>().prop_map(NodeId)
}

/// PNNI's designated transit list (issue 33): 1 to 8 hops, the pointer on one.
fn dtl() -> impl Strategy<Value = Dtl> {
    vec((node(), any::<u32>()), 1..8).prop_flat_map(|hops| {
        let n = hops.len();
        (0..n).prop_map(move |current| Dtl {
            current,
            hops: hops
                .iter()
                .map(|&(node, port)| DtlHop { node, port })
                .collect(),
        })
    })
}

fn crankback() -> impl Strategy<Value = Crankback> {
    let blocked = prop_oneof![
        node().prop_map(Blocked::Node),
        (node(), any::<u32>(), node()).prop_map(|(from, port, to)| Blocked::Link {
            from,
            port,
            to
        }),
    ];
    (any::<u8>(), blocked, bits(127)).prop_map(|(level, blocked, cause)| Crankback {
        level,
        blocked,
        cause,
    })
}

fn body() -> impl Strategy<Value = IeBody> {
    prop_oneof![
        (bits(15), bits(127), blob(8)).prop_map(|(l, v, diagnostics)| IeBody::Cause(Cause {
            location: Location::from_raw(l),
            value: CauseValue::from_raw(v),
            diagnostics,
            crankback: None,
        })),
        bits(63).prop_map(|s| IeBody::CallState(CallState(s))),
        (any::<bool>(), 0u16..=0x7FFF)
            .prop_map(|(flag, value)| IeBody::EndpointRef(EndpointRef { flag, value })),
        bits(63).prop_map(|s| IeBody::EndpointState(EndpointState(s))),
        aal().prop_map(IeBody::Aal),
        traffic().prop_map(IeBody::Traffic),
        (bits(3), bits(7), any::<u16>(), any::<u16>()).prop_map(|(a, p, vpci, vci)| {
            IeBody::ConnId(ConnectionId {
                assoc: VpAssoc::from_raw(a),
                excl: PrefExcl::from_raw(p),
                vpci,
                vci,
            })
        }),
        (any::<u8>(), any::<u8>()).prop_map(|(fwd, bwd)| IeBody::Qos(QosParams { fwd, bwd })),
        (bits(127), blob(8)).prop_map(|(k, info)| IeBody::Bhli(Bhli {
            kind: BhliType::from_raw(k),
            info
        })),
        (
            bits(31),
            prop::option::of((bits(7), bits(3))),
            bits(3),
            bits(3)
        )
            .prop_map(|(class, t, clip, up)| IeBody::Bearer(BearerCapability {
                class: BearerClass::from_raw(class),
                traffic: t.map(|(tt, ti)| BearerTraffic {
                    traffic_type: TrafficType::from_raw(tt),
                    timing: Timing::from_raw(ti),
                }),
                clipping: Clipping::from_raw(clip),
                user_plane: UserPlane::from_raw(up),
            })),
        prop_oneof![
            (bits(31), blob(6)).prop_map(|(p, rest)| Blli {
                layer2: Some(p),
                rest
            }),
            blob(6)
                .prop_filter("lone layer-2 octet first", |r| r
                    .first()
                    .is_none_or(|&o| o & 0xE0 != 0xC0))
                .prop_map(|rest| Blli { layer2: None, rest }),
        ]
        .prop_map(IeBody::Blli),
        Just(IeBody::SendingComplete(SendingComplete)),
        (bits(7), prop::option::of((bits(3), bits(3))), address()).prop_map(|(t, ps, address)| {
            IeBody::CallingNumber(CallingNumber {
                ton: TypeOfNumber::from_raw(t),
                pres: ps.map(|(p, s)| PresScreen {
                    presentation: Presentation::from_raw(p),
                    screening: Screening::from_raw(s),
                }),
                address,
            })
        }),
        subaddress().prop_map(|s| IeBody::CallingSubaddr(CallingSubaddress(s))),
        (bits(7), address()).prop_map(|(t, address)| IeBody::CalledNumber(CalledNumber {
            ton: TypeOfNumber::from_raw(t),
            address
        })),
        subaddress().prop_map(|s| IeBody::CalledSubaddr(CalledSubaddress(s))),
        (bits(7), bits(15), blob(8)).prop_map(|(id_type, plan, network)| {
            IeBody::TransitNet(TransitNetwork {
                id_type,
                plan,
                network,
            })
        }),
        bits(7).prop_map(|c| IeBody::Restart(RestartIndicator(RestartClass::from_raw(c)))),
        natm().prop_map(IeBody::Natm),
        dtl().prop_map(IeBody::Dtl),
        crankback().prop_map(IeBody::Crankback),
        (
            any::<u8>().prop_filter("unknown id", |&id| matches!(
                IeId::from_raw(id),
                IeId::Other(_)
            )),
            blob(12)
        )
            .prop_map(|(id, data)| IeBody::Unknown { id, data }),
    ]
}

fn ie() -> impl Strategy<Value = Ie> {
    (body(), bits(3), any::<bool>(), any::<bool>(), bits(7)).prop_map(
        |(body, coding, explicit, pass_along, action)| {
            let coding = match body {
                IeBody::Unknown { .. } => CodingStandard::from_bits(coding),
                _ => body.default_coding(),
            };
            Ie {
                flags: IeFlags {
                    coding,
                    explicit,
                    pass_along,
                    action: IeAction::from_raw(action),
                },
                body,
            }
        },
    )
}

fn message() -> impl Strategy<Value = Message> {
    (
        0..=CallRef::MAX,
        any::<bool>(),
        any::<u8>(),
        any::<bool>(),
        bits(3),
        vec(ie(), 0..8),
    )
        .prop_map(|(value, flag, kind, explicit, action, ies)| Message {
            call_ref: CallRef { value, flag },
            kind: MessageType::from_raw(kind),
            handling: MsgHandling {
                explicit,
                action: MsgAction::from_raw(action),
            },
            ies,
        })
}

fn pdu() -> impl Strategy<Value = Pdu> {
    prop_oneof![
        (any::<u8>(), seq24(), blob(9)).prop_map(|(nsq, nmr, uu)| Pdu::Bgn { nsq, nmr, uu }),
        (seq24(), blob(9)).prop_map(|(nmr, uu)| Pdu::Bgak { nmr, uu }),
        blob(9).prop_map(|uu| Pdu::Bgrej { uu }),
        (any::<bool>(), blob(9)).prop_map(|(source_sscop, uu)| Pdu::End { source_sscop, uu }),
        Just(Pdu::Endak),
        (any::<u8>(), seq24(), blob(9)).prop_map(|(nsq, nmr, uu)| Pdu::Rs { nsq, nmr, uu }),
        seq24().prop_map(|nmr| Pdu::Rsak { nmr }),
        (any::<u8>(), seq24()).prop_map(|(nsq, nmr)| Pdu::Er { nsq, nmr }),
        seq24().prop_map(|nmr| Pdu::Erak { nmr }),
        (seq24(), blob(130)).prop_map(|(ns, info)| Pdu::Sd { ns, info }),
        (seq24(), seq24()).prop_map(|(nps, ns)| Pdu::Poll { nps, ns }),
        (seq24(), seq24(), seq24(), vec(seq24(), 0..6))
            .prop_map(|(nps, nmr, nr, list)| Pdu::Stat { nps, nmr, nr, list }),
        (seq24(), seq24(), seq24(), seq24()).prop_map(|(nmr, nr, a, b)| Pdu::Ustat {
            nmr,
            nr,
            list: [a, b]
        }),
        blob(20).prop_map(|info| Pdu::Ud { info }),
        blob(20).prop_map(|info| Pdu::Md { info }),
    ]
}

/// What the fuzz target `q2931_message` checks: no panic, and a parsed message
/// re-emits to bytes that parse to the same message.
fn check_q2931(data: &[u8]) {
    if let Ok(msg) = Message::parse(data) {
        let wire = msg.to_bytes().expect("a parsed message emits");
        assert_eq!(Message::parse(&wire).as_ref(), Ok(&msg));
        assert_eq!(wire.len(), data.len());
    }
    if let Ok((msg, errors)) = Message::parse_lenient(data) {
        for e in &errors {
            let _ = e.to_string();
        }
        let wire = msg.to_bytes().expect("a parsed message emits");
        assert_eq!(Message::parse(&wire).as_ref(), Ok(&msg));
    }
}

/// What the fuzz target `sscop_pdu` checks.
fn check_sscop(data: &[u8]) {
    if let Ok(pdu) = Pdu::parse(data) {
        let wire = pdu.to_bytes();
        assert_eq!(wire.len(), data.len());
        assert_eq!(Pdu::parse(&wire).as_ref(), Ok(&pdu));
        if let Pdu::Sd { info, .. } = &pdu {
            check_q2931(info);
        }
    }
}

proptest! {
    #[test]
    fn q2931_emit_then_parse_is_identity(msg in message()) {
        let wire = msg.to_bytes().unwrap();
        prop_assert_eq!(Message::parse(&wire), Ok(msg.clone()));
        let (lenient, errors) = Message::parse_lenient(&wire).unwrap();
        prop_assert_eq!(lenient, msg);
        prop_assert!(errors.is_empty());
    }

    #[test]
    fn q2931_random_bytes_never_panic(data in blob(200)) {
        check_q2931(&data);
    }

    #[test]
    fn q2931_damaged_messages_never_panic(
        msg in message(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut wire = msg.to_bytes().unwrap();
        for (at, v) in edits {
            let i = at.index(wire.len());
            wire[i] = v;
        }
        check_q2931(&wire);
        let n = cut.index(wire.len() + 1);
        check_q2931(&wire[..n]);
    }

    #[test]
    fn sscop_emit_then_parse_is_identity(pdu in pdu()) {
        let wire = pdu.to_bytes();
        prop_assert_eq!(wire.len(), pdu.buffer_len());
        prop_assert_eq!(wire.len() % 4, 0);
        prop_assert_eq!(Pdu::parse(&wire), Ok(pdu));
    }

    #[test]
    fn sscop_random_bytes_never_panic(data in blob(64)) {
        check_sscop(&data);
    }

    #[test]
    fn sd_carrying_a_message_round_trips(msg in message(), ns in seq24()) {
        let sd = Pdu::Sd { ns, info: msg.to_bytes().unwrap() };
        let Ok(Pdu::Sd { info, .. }) = Pdu::parse(&sd.to_bytes()) else {
            return Err(TestCaseError::fail("not an SD"));
        };
        prop_assert_eq!(Message::parse(&info), Ok(msg));
    }
}

/// Replays the committed fuzz seeds (`fuzz/corpus/<target>/`) through the checks the
/// fuzz targets make, so that `cargo test` covers them without cargo-fuzz.
#[test]
fn fuzz_corpus_replays() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    type Check = fn(&[u8]);
    let checks: [(&str, Check); 2] = [("q2931_message", check_q2931), ("sscop_pdu", check_sscop)];
    for (target, check) in checks {
        let dir = root.join(target);
        let mut parsed = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            check(&bytes);
            parsed += usize::from(match target {
                "q2931_message" => Message::parse(&bytes).is_ok(),
                _ => Pdu::parse(&bytes).is_ok(),
            });
        }
        assert!(parsed > 0, "no seed in {} parses", dir.display());
    }
}
