//! A host whose application dropped everything: connections still finishing keep its
//! engine (and driver thread) alive until their end reaches the peer, and then the
//! engine goes — neither the end is lost nor the engine leaked. Its own test binary,
//! so that the thread count is this test's alone.

use natm::ulib::Wait;
use std::time::{Duration, Instant};

use natm::ulib::{Host, HostConfig};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

#[test]
fn dropped_hosts_finish_their_connections_then_their_engines_go() {
    let server = Host::open(HostConfig::default()).unwrap();
    let l = server.bind("127.0.0.1:0", "reliable").unwrap();
    let addr = l.local_addr().unwrap();
    let before = threads();
    for round in 0..10 {
        let t = std::thread::spawn(move || {
            // The client's host handle dies with this thread: the connection is the
            // engine's last handle, and it is dropped right after sending.
            let client = Host::open(HostConfig::default()).unwrap();
            let c = client.connect(addr, "reliable").unwrap();
            c.send(b"bye", Wait::Block).unwrap();
        });
        let s = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
        t.join().unwrap();
        assert_eq!(
            s.recv(Wait::For(Duration::from_secs(5)))
                .unwrap()
                .as_deref(),
            Some(&b"bye"[..]),
            "round {round}"
        );
        assert_eq!(
            s.recv(Wait::For(Duration::from_secs(5))).unwrap(),
            None,
            "round {round}: the end of data"
        );
    }
    // Every client engine finished its connection and went, its driver thread with it.
    let until = Instant::now() + Duration::from_secs(10);
    while threads() > before {
        assert!(
            Instant::now() < until,
            "{} threads, {before} before the clients",
            threads()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
