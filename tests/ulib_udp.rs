//! The API over UDP on loopback: what an application sees.

use std::time::Duration;

use natm::ulib::{Error, Host, HostConfig};

fn pair(qos: &str) -> (Host, natm::ulib::Connection, natm::ulib::Connection) {
    let host = Host::open(HostConfig::default()).unwrap();
    let l = host.bind("127.0.0.1:0", qos).unwrap();
    let addr = l.local_addr().unwrap();
    let h2 = host.clone();
    let q = qos.to_string();
    let t = std::thread::spawn(move || h2.connect(addr, &q).unwrap());
    let server = l.accept_timeout(Some(Duration::from_secs(5))).unwrap();
    let client = t.join().unwrap();
    (host, client, server)
}

#[test]
fn reliable_messages_round_trip() {
    let (_h, c, s) = pair("reliable");
    for i in 0..100u32 {
        let msg = vec![i as u8; (i as usize * 977) % 70_000 + 1];
        c.send(&msg).unwrap();
        assert_eq!(
            s.recv_timeout(Duration::from_secs(5)).unwrap(),
            Some(msg.clone())
        );
        s.send(&msg[..10.min(msg.len())]).unwrap();
        assert_eq!(
            c.recv_timeout(Duration::from_secs(5)).unwrap().as_deref(),
            Some(&msg[..10.min(msg.len())])
        );
    }
    c.close();
    assert_eq!(
        s.recv_timeout(Duration::from_secs(5)).unwrap(),
        None,
        "end of data after close"
    );
}

#[test]
fn ten_megabytes_reliable_arrive_byte_exact() {
    let (_h, c, s) = pair("reliable");
    let data: Vec<u8> = (0..10_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let d2 = data.clone();
    let sender = std::thread::spawn(move || {
        for chunk in d2.chunks(65536) {
            c.send(chunk).unwrap();
        }
        c.close();
        c.flush(Duration::from_secs(30)).unwrap();
        c
    });
    let mut got = Vec::with_capacity(data.len());
    while let Some(m) = s.recv_timeout(Duration::from_secs(30)).unwrap() {
        got.extend_from_slice(&m);
    }
    let c = sender.join().unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "byte-exact");
    let st = c.stats();
    assert!(st.tx.tpdus_sent >= 10_000_000 / 4096);
}

#[test]
fn connect_to_nothing_fails_clearly() {
    let host = Host::open(HostConfig {
        connect_timeout: Duration::from_millis(300),
        ..HostConfig::default()
    })
    .unwrap();
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    match host.connect(addr, "reliable") {
        Err(Error::Unreachable(a)) => assert_eq!(a, addr),
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

#[test]
fn bad_qos_is_refused_with_the_offending_token() {
    let host = Host::open(HostConfig::default()).unwrap();
    match host.bind("127.0.0.1:0", "cbr:pcr=fast") {
        Err(Error::Qos(msg)) => assert!(msg.contains("fast"), "{msg}"),
        other => panic!("{other:?}"),
    }
}
