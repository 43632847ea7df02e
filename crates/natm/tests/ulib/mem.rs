//! Two hosts in one process over the mem adaptor: what an application sees, with the
//! same queueing, limits, watermarks and drop counters as over UDP.

use natm::ulib::Wait;
use std::time::{Duration, Instant};

use crate::support::assert_no_retransmissions;
use natm::ulib::{Connection, Error, Host, HostConfig, MemNetwork, Network, Watermarks};

/// Two hosts on one in-process network: `a` connects to a listener of `b`.
fn hosts(net: &MemNetwork, tweak: impl Fn(&mut HostConfig)) -> (Host, Host) {
    let mut cfg = crate::support::host_config();
    cfg.engine.network = Network::Mem(net.clone());
    tweak(&mut cfg);
    (Host::open(cfg.clone()).unwrap(), Host::open(cfg).unwrap())
}

fn connect(a: &Host, b: &Host, at: &str, qos: &str) -> (Connection, Connection) {
    let l = b.bind(at, qos).unwrap();
    let addr = l.local_addr().unwrap();
    let (a, q) = (a.clone(), qos.to_string());
    let t = std::thread::spawn(move || a.connect(addr, &q).unwrap());
    let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
    (t.join().unwrap(), server)
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

#[test]
fn reliable_transfer_between_two_hosts_is_byte_exact() {
    let net = MemNetwork::new();
    let (a, b) = hosts(&net, |_| {});
    let (c, s) = connect(&a, &b, "10.0.0.2:7000", "reliable");
    assert_eq!(s.local_addr().unwrap().ip().to_string(), "10.0.0.2");
    let data: Vec<u8> = (0..6_000_000).map(pattern).collect();
    let d2 = data.clone();
    let sender = std::thread::spawn(move || {
        // Uneven message sizes: short last TPDUs, messages across TPDU boundaries.
        let mut at = 0;
        let mut i = 0usize;
        while at < d2.len() {
            let n = (i * 7919 % 90_000 + 1).min(d2.len() - at);
            c.send(&d2[at..at + n], Wait::Block).unwrap();
            at += n;
            i += 1;
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
    let st = c.stats();
    assert!(st.tx.tpdus_sent >= 6_000_000 / 4096);
    assert_eq!(net.unroutable(), 0);
    assert_no_retransmissions("reliable", &st, &s.stats());
}

#[test]
fn unreliable_vcs_deliver_whole_messages_only() {
    let net = MemNetwork::new();
    // A small queue (256 KiB, ten messages), so that a flood of 20-TPDU messages
    // loses frames.
    let (a, b) = hosts(&net, |c| c.engine.socket_rcvbuf = 256 << 10);
    let (c, s) = connect(&a, &b, "127.0.0.1:0", "best-effort:tpdu=1024");
    let sender = std::thread::spawn(move || {
        for i in 0..400u32 {
            let mut m = vec![(i % 251) as u8; 20 * 1024];
            m[..4].copy_from_slice(&i.to_be_bytes());
            let _ = c.send(&m, Wait::No);
        }
        c.close();
        c
    });
    let mut got = 0;
    let mut last = None;
    while let Ok(Some(m)) = s.recv(Wait::For(Duration::from_secs(2))) {
        assert_eq!(m.len(), 20 * 1024, "only whole messages");
        let i = u32::from_be_bytes(m[..4].try_into().unwrap());
        assert!(m[4..].iter().all(|&x| x == (i % 251) as u8), "not mixed");
        assert!(last.is_none_or(|l| i > l), "in order, no duplicates");
        last = Some(i);
        got += 1;
    }
    let _c = sender.join().unwrap();
    let st = s.stats();
    assert!(got > 0, "some messages arrive");
    if got < 400 {
        // Whatever was lost was lost whole: dropped frames are counted somewhere.
        assert!(
            st.queue_drops.unwrap() > 0 || st.rx.partial_messages_dropped > 0,
            "{got} of 400 arrived but no drop was counted: {st:?}"
        );
    }
}

/// Send `msg` with `Wait::No` for `time` (at most 20,000 messages) while the receiving
/// application reads nothing, then let the engines settle; returns the messages sent.
fn flood(c: &Connection, msg: &[u8], time: Duration) -> u64 {
    let until = Instant::now() + time;
    let mut sent = 0u64;
    while Instant::now() < until && sent < 20_000 {
        match c.send(msg, Wait::No) {
            Ok(()) => sent += 1,
            Err(Error::WouldBlock(_)) => std::thread::yield_now(),
            Err(e) => panic!("send: {e}"),
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    sent
}

#[test]
fn a_flood_fills_the_bounded_queue_which_drops_and_counts() {
    let net = MemNetwork::new();
    let (a, b) = hosts(&net, |c| {
        c.engine.socket_rcvbuf = 256 << 10;
        c.engine.watermarks = Some(Watermarks {
            high: 128 << 10,
            low: 32 << 10,
        });
    });
    let (c, s) = connect(&a, &b, "127.0.0.1:0", "best-effort");
    // The receiving application reads nothing while the flood lasts: its engine stops
    // reading above the high watermark, the port's queue fills, and the rest is
    // dropped at the queue, counted, with memory bounded by the limits.
    let flood_msg = vec![0x5a; 8192];
    let sent = flood(&c, &flood_msg, Duration::from_millis(500));
    let st = s.stats();
    let dropped = st.queue_drops.unwrap();
    assert!(dropped > 0, "the queue dropped: {st:?}");
    assert!(st.watermark_holds > 0, "the watermarks engaged: {st:?}");
    // Held data stays under the high watermark plus one batch; the queue is bounded.
    assert!(st.rx.max_rcv_buffered <= (128 << 10) + (64 << 10), "{st:?}");
    // Everything sent is accounted for: buffered, delivered later, or dropped.
    let mut delivered = 0u64;
    while let Ok(Some(m)) = s.recv(Wait::No) {
        assert_eq!(m, flood_msg);
        delivered += 1;
    }
    assert!(delivered > 0);
    // A lost message lost at least one of its (at most three) frames.
    assert!(
        delivered + dropped / 3 <= sent,
        "{delivered} + {dropped} vs {sent}"
    );
}

#[test]
fn default_watermarks_engage_before_a_small_tpdu_vcs_buffer_drops() {
    // tpdu=1024 × window 256 gives the VC a 256 KiB receive buffer, under the default
    // 512 KiB high watermark: the engine scales the watermarks to the buffer, so it
    // stops reading (the queue sheds the flood) instead of reading and reassembling
    // messages the PSB then drops for want of buffer.
    let net = MemNetwork::new();
    let (a, b) = hosts(&net, |_| {});
    let (c, s) = connect(&a, &b, "127.0.0.1:0", "best-effort:tpdu=1024");
    let msg = vec![0xa5; 8192];
    let sent = flood(&c, &msg, Duration::from_millis(400));
    let st = s.stats();
    assert!(st.watermark_holds > 0, "the watermarks engaged: {st:?}");
    assert_eq!(
        st.rx.drop_rcv_buf, 0,
        "nothing read was thrown away: {st:?}"
    );
    assert!(st.rx.max_rcv_buffered < 256 << 10, "{st:?}");
    let mut delivered = 0u64;
    while let Ok(Some(m)) = s.recv(Wait::No) {
        assert_eq!(m, msg);
        delivered += 1;
    }
    assert!(delivered > 0 && delivered < sent, "{delivered} of {sent}");
}

#[test]
fn a_message_received_by_chunks_is_byte_exact_and_ends_with_end_of_message() {
    let net = MemNetwork::new();
    let (a, b) = hosts(&net, |_| {});
    let (c, s) = connect(&a, &b, "10.0.0.2:7001", "reliable");
    // Several TPDUs (4 KiB each by default), then a one-TPDU message after it.
    let big: Vec<u8> = (0..50_000).map(pattern).collect();
    c.send(&big, Wait::Block).unwrap();
    c.send(b"next", Wait::Block).unwrap();
    let mut got = Vec::new();
    let mut chunks = 0;
    loop {
        let ch = s
            .recv_chunk(Wait::For(Duration::from_secs(5)))
            .unwrap()
            .expect("not the end yet");
        got.extend_from_slice(&ch.data);
        chunks += 1;
        if ch.end_of_message {
            break;
        }
    }
    assert!(got == big, "byte-exact");
    assert!(chunks > 1, "a multi-TPDU message comes in pieces: {chunks}");
    let next = s
        .recv_chunk(Wait::Block)
        .unwrap()
        .expect("the second message");
    assert_eq!(&next.data[..], b"next");
    assert!(next.end_of_message);
    c.close();
    assert_eq!(
        s.recv_chunk(Wait::For(Duration::from_secs(5))).unwrap(),
        None
    );
    assert!(matches!(s.recv_chunk(Wait::No), Ok(None)));
    c.flush(Duration::from_secs(5)).unwrap();
    assert_no_retransmissions("reliable", &c.stats(), &s.stats());
}

#[test]
fn chunks_arrive_through_the_async_variant_too() {
    let net = MemNetwork::new();
    let (a, b) = hosts(&net, |_| {});
    let (c, s) = connect(&a, &b, "10.0.0.2:7002", "reliable");
    let big: Vec<u8> = (0..20_000).map(pattern).collect();
    c.send(&big, Wait::Block).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let got = rt.block_on(async {
        let mut got = Vec::new();
        loop {
            let ch = s.recv_chunk_async().await.unwrap().expect("data");
            got.extend_from_slice(&ch.data);
            if ch.end_of_message {
                return got;
            }
        }
    });
    assert!(got == big, "byte-exact");
}

#[test]
fn recv_into_reuses_the_callers_buffer_and_keeps_every_message_exact() {
    let net = MemNetwork::new();
    let (a, b) = hosts(&net, |_| {});
    let (c, s) = connect(&a, &b, "127.0.0.1:0", "reliable");
    // Messages of several 4 KiB TPDUs (up to 64 KiB), then one of one TPDU, an empty
    // one, and a last large one.
    let sizes: Vec<usize> = (0..30)
        .map(|i| 65_536 - (i * 4097) % 50_000)
        .chain([100, 0, 64 << 10])
        .collect();
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| (0..n).map(|i| pattern(i + k)).collect())
        .collect();
    let to_send = msgs.clone();
    let sender = std::thread::spawn(move || {
        for m in &to_send {
            c.send(m, Wait::Block).unwrap();
        }
        c.close();
        c.flush(Duration::from_secs(30)).unwrap();
        c
    });
    let mut buf = Vec::with_capacity(64 << 10);
    let mine = buf.as_ptr();
    for (k, want) in msgs.iter().enumerate() {
        assert!(
            s.recv_into(&mut buf, Some(Duration::from_secs(30)))
                .unwrap(),
            "message {k}"
        );
        assert!(buf == *want, "message {k} ({} octets) exact", want.len());
        if k < 30 {
            // Gathered into the caller's own allocation: not a new one, not grown.
            assert_eq!(buf.as_ptr(), mine, "message {k} is in the caller's buffer");
        }
    }
    assert!(
        !s.recv_into(&mut buf, Some(Duration::from_secs(30)))
            .unwrap(),
        "the peer closed"
    );
    let c = sender.join().unwrap();
    assert_no_retransmissions("reliable", &c.stats(), &s.stats());
}

#[test]
fn recv_into_without_waiting_reuses_the_callers_buffer_too() {
    let net = MemNetwork::new();
    let (a, b) = hosts(&net, |_| {});
    let (c, s) = connect(&a, &b, "127.0.0.1:0", "reliable");
    // Messages of several 4 KiB TPDUs, all acknowledged before the first read, so a
    // receive that does not wait finds each (as `natm ip`'s reader drains a VC).
    let msgs: Vec<Vec<u8>> = (0..20)
        .map(|k| (0..40_000 - k * 1_000).map(|i| pattern(i + k)).collect())
        .collect();
    for m in &msgs {
        c.send(m, Wait::Block).unwrap();
    }
    c.close();
    c.flush(Duration::from_secs(30)).unwrap();
    let mut buf = Vec::with_capacity(64 << 10);
    let mine = buf.as_ptr();
    for (k, want) in msgs.iter().enumerate() {
        assert!(s.recv_into(&mut buf, Wait::No).unwrap(), "message {k}");
        assert!(buf == *want, "message {k} ({} octets) exact", want.len());
        assert_eq!(buf.as_ptr(), mine, "message {k} is in the caller's buffer");
    }
    // `flush` waited for the data's ACKs, not for the CLOSE behind them: the end of the
    // stream may still be on its way (one run in a loaded suite read before it came).
    assert!(
        !s.recv_into(&mut buf, Some(Duration::from_secs(30)))
            .unwrap(),
        "the peer closed"
    );
}

#[test]
fn an_abr_source_over_mem_links() {
    let net = MemNetwork::new();
    let mut cfg = crate::support::host_config();
    cfg.engine.network = Network::Mem(net.clone());
    let (a, b) = (Host::open(cfg.clone()).unwrap(), Host::open(cfg).unwrap());
    let (c, s) = crate::abr::connect(&a, &b, "10.0.0.2:7000", "abr:pcr=200Mbps,ec=on");
    crate::abr::climbs_to_pcr(&c, &s);
}

#[test]
fn end_to_end_probes_are_answered_by_the_far_end_over_mem_links() {
    let net = MemNetwork::new();
    let mut cfg = crate::support::host_config();
    cfg.engine.network = Network::Mem(net.clone());
    let (a, b) = (Host::open(cfg.clone()).unwrap(), Host::open(cfg).unwrap());
    let (c, s) = crate::oam_loopback::connect(&a, &b, "10.0.0.2:7000", "best-effort");
    crate::oam_loopback::check_pair(&c, &s);
}

#[test]
fn a_burst_over_a_full_receive_queue_loses_whole_messages_and_counts_each_once() {
    // The mem adaptor's queue holds what the receive buffer says: 16 KiB here, while
    // the burst is 200 messages of 512 octets (~110 KiB of frames) sent at once.
    let net = MemNetwork::new();
    let mut cfg = crate::support::host_config();
    cfg.engine.network = Network::Mem(net.clone());
    cfg.engine.socket_rcvbuf = 16 << 10;
    let host = Host::open(cfg).unwrap();
    let (c, s) = crate::send_many::pair_on(&host, "best-effort");
    const N: usize = 200;
    let burst: Vec<Vec<u8>> = (0..N).map(|i| crate::send_many::message(i, 512)).collect();
    c.send_many(&burst, Wait::Block).unwrap();
    let mut got: Vec<Vec<u8>> = Vec::new();
    while let Ok(Some(m)) = s.recv(Wait::For(Duration::from_millis(300))) {
        got.push(m);
    }
    // A last message after the burst shows the receiver any loss at its tail.
    let last = crate::send_many::message(N, 512);
    c.send(&last, Wait::Block).unwrap();
    loop {
        match s.recv(Wait::For(Duration::from_secs(5))) {
            Ok(Some(m)) if m == last => break,
            Ok(Some(m)) => got.push(m),
            r => panic!("the last message did not come: {r:?}"),
        }
    }
    assert!(got.len() < N, "a 16 KiB queue took all of a 110 KiB burst");
    assert!(!got.is_empty());
    // Whole messages of the burst, in order, none twice.
    let mut prev = None;
    for m in &got {
        let i = u32::from_le_bytes(m[..4].try_into().unwrap()) as usize;
        assert_eq!(m, &burst[i], "message {i} arrived altered");
        assert!(prev.is_none_or(|p| i > p), "message {i} after {prev:?}");
        prev = Some(i);
    }
    let rx = s.stats().rx;
    assert_eq!(rx.messages_delivered, got.len() as u64 + 1);
    assert_eq!(rx.messages_lost, (N - got.len()) as u64, "each lost once");
}
