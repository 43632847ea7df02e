//! Property tests for the app↔sigd IPC codec: every message round-trips, any stream
//! split is reassembled, and no input makes the decoder panic or over-read.

use std::net::SocketAddr;

use natm_proto::wire::ipc::{DataPath, Decoder, Message, VcCounters};
use proptest::prelude::*;

use crate::strategies::any_qos;

fn endpoint() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(a, p)| SocketAddr::from((a, p))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(a, p)| SocketAddr::from((a, p))),
    ]
}

fn data_path() -> impl Strategy<Value = DataPath> {
    (
        endpoint(),
        any::<u32>(),
        any::<u16>(),
        any::<u16>(),
        any::<u64>(),
        any_qos(),
        text(),
        proptest::option::of(any::<([u8; 32], [u8; 32])>()),
        any::<bool>(),
    )
        .prop_map(
            |(peer, cookie, tx_vci, rx_vci, granted_bps, qos, resume, keys, multipoint)| DataPath {
                peer,
                cookie,
                tx_vci,
                rx_vci,
                granted_bps,
                qos,
                resume,
                keys: keys.map(|(tx, rx)| natm_proto::wire::seal::PathKeys { tx, rx }),
                multipoint,
            },
        )
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,40}", "[a-z0-9.:+]{0,60}"]
        .prop_map(|s: String| natm_proto::wire::ipc::clip(&s).to_owned())
}

fn message() -> impl Strategy<Value = Message> {
    let u = any::<u64>;
    prop_oneof![
        (u(), text(), any_qos(), endpoint()).prop_map(|(req, called, qos, data)| {
            Message::Connect {
                req,
                called,
                qos,
                data,
            }
        }),
        (u(), text(), any_qos()).prop_map(|(req, sap, qos)| Message::Bind { req, sap, qos }),
        (u(), u()).prop_map(|(req, listener)| Message::Unbind { req, listener }),
        (u(), u(), endpoint()).prop_map(|(req, call, data)| Message::Accept { req, call, data }),
        (u(), u(), endpoint(), u(), u()).prop_map(|(req, call, data, tx_bps, rx_bps)| {
            Message::AcceptAt {
                req,
                call,
                data,
                tx_bps,
                rx_bps,
            }
        }),
        (u(), u(), any::<u8>()).prop_map(|(req, call, cause)| Message::Reject { req, call, cause }),
        (u(), u(), any::<u8>()).prop_map(|(req, call, cause)| Message::Release {
            req,
            call,
            cause
        }),
        (u(), text()).prop_map(|(req, address)| Message::Register { req, address }),
        u().prop_map(|req| Message::Stat { req }),
        (u(), u(), any_qos()).prop_map(|(req, call, qos)| Message::Modify { req, call, qos }),
        (u(), any_qos(), text()).prop_map(|(call, qos, resume)| Message::QosChanged {
            call,
            qos,
            resume
        }),
        (u(), text(), any_qos(), endpoint()).prop_map(|(req, called, qos, data)| {
            Message::ConnectMultipoint {
                req,
                called,
                qos,
                data,
            }
        }),
        (u(), u(), text()).prop_map(|(req, call, called)| Message::AddParty { req, call, called }),
        (u(), u(), any::<u16>(), any::<u8>()).prop_map(|(req, call, party, cause)| {
            Message::DropParty {
                req,
                call,
                party,
                cause,
            }
        }),
        (u(), any::<u16>()).prop_map(|(call, party)| Message::PartyAdded { call, party }),
        (u(), any::<u16>(), any::<u8>(), text()).prop_map(|(call, party, cause, detail)| {
            Message::PartyRejected {
                call,
                party,
                cause,
                detail,
            }
        }),
        (u(), any::<u16>(), any::<u8>(), any::<bool>(), text()).prop_map(
            |(call, party, cause, left, detail)| Message::PartyDropped {
                call,
                party,
                cause,
                left,
                detail,
            }
        ),
        (u(), u()).prop_map(|(req, id)| Message::Ack { req, id }),
        (u(), any::<u8>(), text()).prop_map(|(req, cause, detail)| Message::Refused {
            req,
            cause,
            detail
        }),
        (u(), data_path()).prop_map(|(call, path)| Message::Connected { call, path }),
        (u(), u(), text(), any_qos()).prop_map(|(listener, call, caller, qos)| Message::Incoming {
            listener,
            call,
            caller,
            qos
        }),
        (u(), any::<u8>(), text()).prop_map(|(call, cause, detail)| Message::Released {
            call,
            cause,
            detail
        }),
        (u(), text()).prop_map(|(req, json)| Message::StatReply { req, json }),
        (any::<u8>(), text()).prop_map(|(cause, detail)| Message::Error { cause, detail }),
        (u(), text(), any_qos(), endpoints()).prop_map(|(req, sap, qos, data)| Message::BindAuto {
            req,
            sap,
            qos,
            data
        }),
        (u(), u(), endpoints()).prop_map(|(req, listener, data)| Message::Endpoints {
            req,
            listener,
            data
        }),
        (u(), u(), endpoint(), text(), data_path()).prop_map(
            |(listener, call, data, caller, path)| Message::Accepted {
                listener,
                call,
                data,
                caller,
                path,
            }
        ),
        (u(), u(), counters()).prop_map(|(req, call, c)| Message::Counters {
            req,
            call,
            counters: Box::new(c)
        }),
        (u(), u(), endpoint(), data_path()).prop_map(|(req, call, data, path)| {
            Message::Reclaim {
                req,
                call,
                data,
                path,
            }
        }),
        (u(), u(), any::<u8>()).prop_map(|(req, call, cause)| Message::AdminRelease {
            req,
            call,
            cause
        }),
    ]
}

/// Counters as an engine reports them: an unknown value is `None`, never
/// `Some(u64::MAX)` (the wire's "unknown").
fn counters() -> impl Strategy<Value = VcCounters> {
    let known = || proptest::option::of(0..u64::MAX);
    (
        proptest::array::uniform16(any::<u64>()),
        (known(), known(), known()),
        any::<[u64; 4]>(),
    )
        .prop_map(|(f, (queue_drops, srtt_us, rate_bps), q)| VcCounters {
            sampled_ms: f[0],
            tx_bytes: f[1],
            tx_tpdus: f[2],
            rx_bytes: f[3],
            rx_tpdus: f[4],
            retx_fast: f[5],
            retx_timeout: f[6],
            retx_head: f[7],
            retx_bytes: f[8],
            drop_bad_cookie: f[9],
            drop_out_of_window: f[10],
            drop_rcv_buf: f[11],
            drop_duplicate: f[12],
            drop_late: f[13],
            drop_other: f[14],
            queue_drops,
            srtt_us,
            rate_bps,
            send_queued: q[0],
            recv_queued: q[1],
            gaps: f[15],
            lost_tpdus: q[0] ^ f[0],
            lost_messages: q[1] ^ f[1],
            drop_bad_tag: q[0] ^ f[2],
            drop_replayed: q[1] ^ f[3],
            send_pool_used: q[2],
            send_pool_limit: q[3],
        })
}

fn endpoints() -> impl Strategy<Value = Vec<SocketAddr>> {
    proptest::collection::vec(endpoint(), 0..6)
}

proptest! {
    #[test]
    fn every_message_round_trips(m in message()) {
        let b = m.to_bytes();
        let (back, used) = Message::decode(&b).unwrap().unwrap();
        prop_assert_eq!(used, b.len());
        prop_assert_eq!(back, m);
    }

    #[test]
    fn a_stream_cut_anywhere_yields_the_same_messages(
        ms in proptest::collection::vec(message(), 1..8),
        cuts in proptest::collection::vec(1usize..50, 1..20),
    ) {
        let mut stream = Vec::new();
        for m in &ms {
            m.encode(&mut stream);
        }
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let mut off = 0;
        let mut i = 0;
        while off < stream.len() {
            let n = cuts[i % cuts.len()].min(stream.len() - off);
            d.push(&stream[off..off + n]);
            off += n;
            i += 1;
            while let Some(m) = d.next_message().unwrap() {
                out.push(m);
            }
        }
        prop_assert_eq!(out, ms);
        prop_assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(Some((m, used))) = Message::decode(&b) {
            prop_assert!(used <= b.len());
            // Whatever decodes re-encodes to the same bytes.
            prop_assert_eq!(m.to_bytes(), b[..used].to_vec());
        }
    }

    #[test]
    fn a_truncated_frame_is_never_a_message(m in message(), at in any::<prop::sample::Index>()) {
        let b = m.to_bytes();
        let cut = at.index(b.len());
        prop_assert_eq!(Message::decode(&b[..cut]), Ok(None));
    }
}
