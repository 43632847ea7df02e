//! The API over UDP on loopback: what an application sees.

use natm::ulib::Wait;
use std::time::Duration;

use crate::support::assert_no_retransmissions;
use natm::ulib::{ConnStats, Connection, Error, Host, HostConfig};

fn pair(qos: &str) -> (Host, natm::ulib::Connection, natm::ulib::Connection) {
    let host = Host::open(crate::support::host_config()).unwrap();
    let l = host.bind("127.0.0.1:0", qos).unwrap();
    let addr = l.local_addr().unwrap();
    let h2 = host.clone();
    let q = qos.to_string();
    let t = std::thread::spawn(move || h2.connect(addr, &q).unwrap());
    let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
    let client = t.join().unwrap();
    (host, client, server)
}

/// As [`pair`], with the two ends on two hosts (two engines).
fn pair2(qos: &str) -> (Host, natm::ulib::Connection, natm::ulib::Connection) {
    let a = Host::open(crate::support::host_config()).unwrap();
    let b = Host::open(crate::support::host_config()).unwrap();
    let l = b.bind("127.0.0.1:0", qos).unwrap();
    let addr = l.local_addr().unwrap();
    let q = qos.to_string();
    let t = std::thread::spawn(move || a.connect(addr, &q).unwrap());
    let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
    let client = t.join().unwrap();
    (b, client, server)
}

#[test]
fn reliable_messages_round_trip() {
    let (_h, c, s) = pair("reliable");
    for i in 0..100u32 {
        let msg = vec![i as u8; (i as usize * 977) % 70_000 + 1];
        c.send(&msg, Wait::Block).unwrap();
        assert_eq!(
            s.recv(Wait::For(Duration::from_secs(5))).unwrap(),
            Some(msg.clone())
        );
        s.send(&msg[..10.min(msg.len())], Wait::Block).unwrap();
        assert_eq!(
            c.recv(Wait::For(Duration::from_secs(5)))
                .unwrap()
                .as_deref(),
            Some(&msg[..10.min(msg.len())])
        );
    }
    c.close();
    assert_eq!(
        s.recv(Wait::For(Duration::from_secs(5))).unwrap(),
        None,
        "end of data after close"
    );
    c.flush(Duration::from_secs(5)).unwrap();
    s.close();
    s.flush(Duration::from_secs(5)).unwrap();
    let (cs, ss) = (c.stats(), s.stats());
    assert_no_retransmissions("the caller's messages", &cs, &ss);
    assert_no_retransmissions("the echoes", &ss, &cs);
}

/// `total` octets in 64 KiB messages from `c` to `s`, closed and flushed: they must
/// arrive byte-exact. The sender's counters and the receiver's.
fn transfer(c: Connection, s: &Connection, total: u32) -> (ConnStats, ConnStats) {
    let data: Vec<u8> = (0..total)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let d2 = data.clone();
    let sender = std::thread::spawn(move || {
        for chunk in d2.chunks(65536) {
            c.send(chunk, Wait::Block).unwrap();
        }
        c.close();
        c.flush(Duration::from_secs(30)).unwrap();
        c
    });
    let mut got = Vec::with_capacity(data.len());
    while let Some(m) = s.recv(Wait::For(Duration::from_secs(30))).unwrap() {
        got.extend_from_slice(&m);
    }
    let c = sender.join().unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "byte-exact");
    (c.stats(), s.stats())
}

#[test]
fn ten_megabytes_reliable_arrive_byte_exact() {
    let (_h, c, s) = pair("reliable");
    let (st, theirs) = transfer(c, &s, 10_000_000);
    assert!(st.tx.tpdus_sent >= 10_000_000 / 4096);
    assert_no_retransmissions("reliable", &st, &theirs);
}

/// Issue 34: the flow controls and services that pace or probe, each on two hosts
/// over loopback, which loses nothing: no TPDU is sent twice. `reliable` on a direct
/// connection is the window (above); packet-pair is what it is through a round-robin
/// network; the paced ones have an SRTT of the bare path, tens of µs, which a late
/// ACK on a shared CPU outlasts (the head check's floor, decision 0034-head-check-floor).
#[test]
fn a_packet_pair_vc_moves_ten_megabytes_without_retransmitting() {
    let (_h, c, s) = pair2("reliable:flow=packet-pair");
    let (st, theirs) = transfer(c, &s, 10_000_000);
    assert_no_retransmissions("reliable:flow=packet-pair", &st, &theirs);
}

#[test]
fn a_paced_packet_pair_vc_moves_data_without_retransmitting() {
    let qos = "reliable:flow=packet-pair,pcr=40Mbps";
    let (_h, c, s) = pair2(qos);
    let (st, theirs) = transfer(c, &s, 4_000_000);
    assert_no_retransmissions(qos, &st, &theirs);
}

#[test]
fn a_cbr_vc_with_error_control_moves_data_without_retransmitting() {
    let qos = "cbr:pcr=40Mbps,ec=on";
    let (_h, c, s) = pair2(qos);
    let (st, theirs) = transfer(c, &s, 4_000_000);
    assert_eq!(st.rate_bps, Some(40_000_000), "paced: {st:?}");
    assert_no_retransmissions(qos, &st, &theirs);
}

/// A direct call to a port where nothing listens: with a socket per VC the ICMP port
/// unreachable that answers the CONN-REQ refuses it (cause 88, as TCP's "connection
/// refused"), long before the connect timeout; on one port per host, whose shared
/// socket cannot tell which call an ICMP error answers, it times out as unreachable.
#[test]
fn connect_to_nothing_fails_clearly() {
    let per_vc = crate::PORTS == natm::ulib::Ports::PerVc;
    let host = Host::open(HostConfig {
        // Long enough that a timeout cannot pass for the refusal.
        connect_timeout: Duration::from_millis(if per_vc { 60_000 } else { 300 }),
        ..crate::support::host_config()
    })
    .unwrap();
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    match host.connect(addr, "reliable") {
        Err(e @ Error::Refused { cause: 88, .. }) if per_vc => {
            assert_eq!(
                std::io::Error::from(e).kind(),
                std::io::ErrorKind::ConnectionRefused
            );
        }
        Err(Error::Unreachable(a)) if !per_vc => assert_eq!(a, addr),
        other => panic!("expected a refusal (per VC) or Unreachable (per host), got {other:?}"),
    }
    // The refused call left nothing behind: a listener bound there now takes a call.
    let l = host.bind(addr, "reliable").unwrap();
    let c = host.connect(addr, "reliable").unwrap();
    let s = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
    c.send(&b"after the refusal"[..], Wait::Block).unwrap();
    let got = s.recv(Wait::For(Duration::from_secs(10))).unwrap();
    assert_eq!(got.as_deref(), Some(&b"after the refusal"[..]));
}

/// A peer that is there but never answers (a socket that reads nothing) sends no
/// ICMP: the call is unreachable, in either port mode, whether the connect timeout
/// ends the wait (300 ms) or the handshake's attempts run out first (~12.6 s of
/// CONN-REQs under a 60 s timeout: not a refusal of the call's parameters).
#[test]
fn connect_to_a_silent_peer_is_unreachable() {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let tries: Vec<_> = [300, 60_000]
        .map(|ms| {
            std::thread::spawn(move || {
                let host = Host::open(HostConfig {
                    connect_timeout: Duration::from_millis(ms),
                    ..crate::support::host_config()
                })
                .unwrap();
                host.connect(addr, "reliable").map(|_| ())
            })
        })
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    for r in tries {
        match r {
            Err(Error::Unreachable(a)) => assert_eq!(a, addr),
            other => panic!("expected Unreachable, got {other:?}"),
        }
    }
}

#[test]
fn bad_qos_is_refused_with_the_offending_token() {
    let host = Host::open(crate::support::host_config()).unwrap();
    match host.bind("127.0.0.1:0", "cbr:pcr=fast") {
        Err(Error::Qos(msg)) => assert!(msg.contains("fast"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn async_send_and_recv_on_a_runtime() {
    let (_h, c, s) = pair("reliable");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        for i in 0..50u8 {
            let msg = vec![i; 5000 + i as usize];
            c.send_async(&msg).await.unwrap();
            assert_eq!(s.recv_async().await.unwrap(), Some(msg));
        }
        c.close();
        assert_eq!(s.recv_async().await.unwrap(), None);
    });
    c.flush(Duration::from_secs(5)).unwrap();
    assert_no_retransmissions("reliable", &c.stats(), &s.stats());
}

#[test]
fn best_effort_delivers_only_whole_messages() {
    let (_h, c, s) = pair("best-effort:tpdu=1024");
    // 20 KiB messages of 20 TPDUs each, faster than the receiver reads: some are lost
    // whole, none arrives partial.
    let sender = std::thread::spawn(move || {
        for i in 0..400u32 {
            let _ = c.send(vec![(i % 251) as u8; 20 * 1024], Wait::No);
        }
        c.close();
        c
    });
    let mut got = 0;
    while let Ok(Some(m)) = s.recv(Wait::For(Duration::from_secs(2))) {
        assert_eq!(m.len(), 20 * 1024, "only whole messages");
        assert!(m.iter().all(|&b| b == m[0]), "not mixed");
        got += 1;
    }
    let _c = sender.join().unwrap();
    assert!(got > 0);
}

#[cfg(feature = "tokio")]
#[test]
fn tokio_async_read_and_write_carry_a_stream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_h, mut c, mut s) = pair("reliable:mode=stream");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (c, s) = rt.block_on(async {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let d2 = data.clone();
        let w = async move {
            c.write_all(&d2).await.unwrap();
            c.shutdown().await.unwrap();
            c
        };
        let r = async move {
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            (s, got)
        };
        let (c, (s, got)) = tokio::join!(w, r);
        assert_eq!(got, data);
        (c, s)
    });
    c.flush(Duration::from_secs(5)).unwrap();
    assert_no_retransmissions("reliable:mode=stream", &c.stats(), &s.stats());
}

#[test]
fn split_halves_work_from_different_threads() {
    let (_h, c, s) = pair("reliable");
    let (tx, _rx) = c.split();
    let (stx, srx) = s.split();
    let t = std::thread::spawn(move || {
        for i in 0..200u32 {
            tx.send(&i.to_be_bytes(), Wait::Block).unwrap();
        }
        tx.close();
        tx.flush(Duration::from_secs(5)).unwrap();
        tx
    });
    for i in 0..200u32 {
        assert_eq!(
            srx.recv(Wait::Block).unwrap(),
            Some(i.to_be_bytes().to_vec())
        );
    }
    assert_eq!(srx.recv(Wait::Block).unwrap(), None);
    let tx = t.join().unwrap();
    assert_no_retransmissions("reliable", &tx.stats(), &srx.stats());
    drop(stx);
}

/// The byte at `offset` of the test stream.
fn pattern(offset: u64) -> u8 {
    (offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

#[test]
fn one_gibibyte_reliable_arrives_byte_exact() {
    const TOTAL: u64 = 1 << 30;
    const MSG: usize = 1 << 20;
    let (_h, c, s) = pair("reliable");
    let sender = std::thread::spawn(move || {
        let mut buf = vec![0u8; MSG];
        let mut off = 0u64;
        while off < TOTAL {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = pattern(off + i as u64);
            }
            c.send(&buf, Wait::Block).unwrap();
            off += MSG as u64;
        }
        c.close();
        c.flush(Duration::from_secs(60)).unwrap();
        c.stats()
    });
    let mut off = 0u64;
    let mut bad = 0u64;
    while let Some(m) = s.recv(Wait::For(Duration::from_secs(60))).unwrap() {
        assert_eq!(m.len(), MSG, "whole 1 MiB messages");
        for (i, &b) in m.iter().enumerate() {
            bad += u64::from(b != pattern(off + i as u64));
        }
        off += m.len() as u64;
    }
    let stats = sender.join().unwrap();
    assert_eq!(off, TOTAL, "every byte delivered");
    assert_eq!(bad, 0, "byte-exact");
    assert_eq!(stats.tx.bytes_sent, TOTAL);
    assert_no_retransmissions("reliable", &stats, &s.stats());
}

#[test]
fn a_connection_dropped_right_after_sending_still_delivers_its_data_and_end() {
    // The sender closes and drops at once, before the peer closed its own direction
    // (as a client that sends a request and exits does): its data and its end must
    // still reach the peer, which must not wait forever.
    for (qos, two_hosts, close_first) in [
        ("reliable", false, false),
        ("reliable", true, false),
        ("reliable", true, true),
        ("best-effort", true, true),
    ] {
        let (_h, c, s) = if two_hosts { pair2(qos) } else { pair(qos) };
        c.send(b"last words", Wait::Block).unwrap();
        if close_first {
            c.close();
        }
        drop(c);
        assert_eq!(
            s.recv(Wait::For(Duration::from_secs(5)))
                .unwrap()
                .as_deref(),
            Some(&b"last words"[..]),
            "{qos}: the data"
        );
        let end = s.recv(Wait::For(Duration::from_secs(5)));
        assert!(
            matches!(end, Ok(None)),
            "{qos}, two hosts {two_hosts}, close first {close_first}: the end of data, got {end:?}; {:?}",
            s.stats()
        );
    }
}

#[test]
fn abort_wakes_a_thread_blocked_in_recv_with_aborted() {
    let (_h, c, s) = pair("reliable");
    let c = std::sync::Arc::new(c);
    let c2 = c.clone();
    let blocked = std::thread::spawn(move || {
        let r = c2.recv(Wait::For(Duration::from_secs(5)));
        (r, std::time::Instant::now())
    });
    std::thread::sleep(Duration::from_millis(100));
    let at = std::time::Instant::now();
    c.abort();
    let (r, woke) = blocked.join().unwrap();
    assert!(
        matches!(r, Err(Error::Aborted(natm::transport::AbortReason::Local))),
        "{r:?}"
    );
    eprintln!("the blocked receiver saw the abort after {:?}", woke - at);
    // The peer sees it too.
    assert!(matches!(
        s.recv(Wait::For(Duration::from_secs(5))),
        Err(Error::Aborted(_))
    ));
}

/// seed 003 `setqos` in direct mode: the bounds come from the handshake, the peer
/// confirms, the receiver learns the rate, a change outside is refused at once.
#[test]
fn a_direct_guaranteed_vc_changes_its_rate_with_the_peers_consent() {
    let (_h, c, s) = pair2("cbr:pcr=8Mbps,min_pcr=1Mbps");
    let ch = c.set_qos("cbr:pcr=2Mbps", Duration::from_secs(5)).unwrap();
    assert_eq!(ch.rate_bps, 2_000_000);
    assert_eq!(c.stats().rate_bps, Some(2_000_000));
    c.send(b"after", Wait::Block).unwrap();
    let (m, st) = s.recv_with_status(Duration::from_secs(5)).unwrap();
    assert_eq!(m.as_deref(), Some(&b"after"[..]));
    assert!(st.message_start && st.message_end);
    assert_eq!(st.rx_rate_bps, 2_000_000);
    assert_eq!(
        st.peer_qos,
        Some(natm::ulib::QosOutcome::Changed { rate: 2_000_000 })
    );
    assert!(matches!(
        c.set_qos("cbr:pcr=9Mbps", Duration::from_secs(5)),
        Err(Error::QosBounds(_))
    ));
    assert_eq!(c.status().tx_rate_bps, 2_000_000);
    // The other direction is its own VC, changed by its own sender.
    s.set_qos("cbr:pcr=4Mbps", Duration::from_secs(5)).unwrap();
    s.send(b"back", Wait::Block).unwrap();
    let (_, st) = c.recv_with_status(Duration::from_secs(5)).unwrap();
    assert_eq!((st.rx_rate_bps, st.tx_rate_bps), (4_000_000, 2_000_000));
}

/// A best-effort VC has no ACKs: its RTT comes from SYNC probes.
#[test]
fn a_best_effort_vc_gets_an_rtt_from_sync_probes() {
    let (_h, c, _s) = pair2("ubr");
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while c.stats().srtt.is_none() {
        assert!(std::time::Instant::now() < until, "{:?}", c.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let st = c.stats();
    assert_eq!(st.tx.acks_received, 0);
    assert!(st.tx.sync_echoes >= 1);
}
