//! The `ulib` binary's tests (`tests/ulib/`) again, with every host on one UDP socket
//! per local address (`Ports::PerHost`, issue 30): the same behaviour whichever way a
//! host's VCs meet the kernel. The mem adaptor's tests (`ulib/mem.rs`) have no UDP
//! port and run in `ulib` only. `cargo test -p natm --test ulib_host -- udp::`.

/// One UDP socket per host.
const PORTS: natm::ulib::Ports = natm::ulib::Ports::PerHost;

#[path = "ulib/abr.rs"]
mod abr;
#[path = "ulib/cell_mode.rs"]
mod cell_mode;
#[path = "ulib/coupling.rs"]
mod coupling;
#[path = "ulib/guaranteed_queue.rs"]
mod guaranteed_queue;
#[path = "ulib/oam_loopback.rs"]
mod oam_loopback;
#[path = "ulib/owned_buffers.rs"]
mod owned_buffers;
#[path = "ulib/refusals.rs"]
mod refusals;
#[path = "ulib/send_many.rs"]
mod send_many;
#[path = "ulib/send_pool.rs"]
mod send_pool;
#[path = "ulib/simplex.rs"]
mod simplex;
#[path = "ulib/support.rs"]
mod support;
#[path = "ulib/udp.rs"]
mod udp;
#[path = "ulib/udp_adaptor.rs"]
mod udp_adaptor;

use std::time::{Duration, Instant};

use natm::ulib::{Host, Wait};

/// Any UDP sender may aim at a host's one port (issue 30's threat model): 64 sources
/// at once send frames of calls the port does not know — natm VC headers, TPDU headers
/// with random cookies — while a reliable connection on the same port moves 8 MiB.
/// The strays are held only within the port's bound and dropped; the transfer is
/// byte-exact.
#[test]
fn strays_from_many_sources_leave_a_transfer_on_the_same_port_exact() {
    let server = Host::open(support::host_config()).unwrap();
    let client = Host::open(support::host_config()).unwrap();
    let l = server.bind("127.0.0.1:0", "reliable").unwrap();
    let port = l.local_addr().unwrap();
    let c = client.connect(port, "reliable").unwrap();
    let s = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let strays = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let flood = {
        let stop = stop.clone();
        let strays = strays.clone();
        std::thread::spawn(move || {
            let socks: Vec<_> = (0..64)
                .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
                .collect();
            let until = Instant::now() + Duration::from_secs(20);
            let mut sent = 0u64;
            let mut x = 0x9E37_79B9u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until {
                for (i, sock) in socks.iter().enumerate() {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    // VC header (data, VPI 0, VCI 32 or 33), then a DATA TPDU header
                    // with a cookie no call has.
                    let mut d = vec![0xC0, 0, 0, 32 + (i % 2) as u8, 0x10, 0, 0, 0];
                    d.extend_from_slice(&x.to_be_bytes());
                    d.resize(1200, 0);
                    if sock.send_to(&d, port).is_ok() {
                        sent += 1;
                        strays.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
            sent
        })
    };
    // The flood is under way before the transfer starts.
    let until = Instant::now() + Duration::from_secs(10);
    while strays.load(std::sync::atomic::Ordering::Relaxed) < 5_000 {
        assert!(Instant::now() < until, "the flood did not start");
        std::thread::yield_now();
    }
    let body: Vec<u8> = (0..8u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    let sender = {
        let body = body.clone();
        std::thread::spawn(move || {
            for m in body.chunks(64 << 10) {
                c.send(m, Wait::Block).unwrap();
            }
            c.close();
            c.flush(Duration::from_secs(60)).unwrap();
        })
    };
    let mut got = Vec::with_capacity(body.len());
    while let Some(m) = s.recv(Wait::For(Duration::from_secs(30))).unwrap() {
        got.extend_from_slice(&m);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let strays = flood.join().unwrap();
    sender.join().unwrap();
    assert!(strays >= 5_000, "the flood sent {strays}");
    assert_eq!(got.len(), body.len());
    assert!(got == body, "byte-exact");
    // The operator's view: one port, every stray counted there, read or dropped by
    // the kernel (the driver may still be reading the last ones: wait for them), and
    // all but the held few dropped.
    let until = Instant::now() + Duration::from_secs(20);
    let p = loop {
        let ports = server.ports();
        assert_eq!(ports.len(), 1, "{ports:?}");
        let p = ports.into_iter().next().unwrap();
        let kernel = p.kernel_drops.expect("the kernel's drops are listed");
        if p.unrouted + kernel >= strays || Instant::now() >= until {
            break p;
        }
        std::thread::yield_now();
    };
    assert_eq!(p.local, port);
    let kernel = p.kernel_drops.unwrap();
    assert!(p.unrouted + kernel >= strays, "{p:?}, {strays} strays");
    assert!(p.held <= 256, "{p:?}");
    assert!(p.held_dropped + p.held as u64 >= p.unrouted, "{p:?}");
    assert!(p.datagrams >= p.unrouted + (8 << 20) / 65_536, "{p:?}");
    assert!(p.vc_ends >= 2, "the listener and the connection: {p:?}");
}

/// A busy-polling reader leads its port's reads and, between its round trips, leaves
/// the port out of the driver's epoll set (`host_port::PORT_PARK_NS`). Once it stops,
/// the driver takes the port back: another connection on the same port, which no
/// application thread reads, still has its data received and acknowledged, so its
/// sender's flush completes, and the data is there, exact, when read.
#[test]
fn a_busy_pollers_port_goes_back_to_the_driver_when_it_stops() {
    let mut cfg = support::host_config();
    cfg.engine.busy_poll = true;
    let server = Host::open(cfg).unwrap();
    let client = Host::open(support::host_config()).unwrap();
    let l = server.bind("127.0.0.1:0", "reliable").unwrap();
    let port = l.local_addr().unwrap();
    let wait = Wait::For(Duration::from_secs(10));
    let a = client.connect(port, "best-effort").unwrap();
    let sa = l.accept(wait).unwrap();
    let b = client.connect(port, "reliable").unwrap();
    let sb = l.accept(wait).unwrap();
    // Round trips on A, the server spinning for each.
    for i in 0..500u32 {
        a.send(&i.to_be_bytes(), Wait::Block).unwrap();
        let m = sa.recv(wait).unwrap().expect("a message");
        assert_eq!(m[..], i.to_be_bytes());
    }
    // Nobody on the server reads now; B's data must still be taken in and ACKed.
    let body: Vec<u8> = (0..256u32 << 10)
        .map(|i| (i * 13 + i / 999) as u8)
        .collect();
    for m in body.chunks(16 << 10) {
        b.send(m, Wait::Block).unwrap();
    }
    b.flush(Duration::from_secs(20))
        .expect("B's data acknowledged");
    let mut got = Vec::with_capacity(body.len());
    while got.len() < body.len() {
        let m = sb.recv(wait).unwrap().expect("B's data");
        got.extend_from_slice(&m);
    }
    assert!(got == body, "byte-exact");
    assert_eq!(
        server.ports().len(),
        1,
        "one port for the listener and both calls"
    );
}
