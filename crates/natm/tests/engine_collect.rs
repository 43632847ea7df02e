//! Connections the application dropped after an orderly close are forgotten by the
//! engine, and their sockets closed, once both VCs have finished — also when the last
//! frame (a CLOSE-ACK) arrives after the drop and no timer is left to notice. (Its
//! own test binary: it counts this process's open file descriptors.)

use natm::ulib::Wait;
use std::time::{Duration, Instant};

use natm::ulib::{Host, HostConfig};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[test]
fn closed_and_dropped_connections_release_their_sockets() {
    let host = Host::open(HostConfig::default()).unwrap();
    let l = host.bind("127.0.0.1:0", "reliable").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        for _ in 0..300 {
            let c = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
            // Until the caller's close, then drop: this side's CLOSE comes second.
            while c.recv(Wait::For(Duration::from_secs(5))).unwrap().is_some() {}
        }
    });
    // Warm up (the engine's own descriptors, the GRO socket held per process).
    let before = open_fds();
    for _ in 0..300 {
        let c = host.connect(addr, "reliable").unwrap();
        c.send(b"x", Wait::Block).unwrap();
        c.close();
        drop(c);
    }
    server.join().unwrap();
    // 300 calls opened 600 sockets; the few still closing may take a retransmission
    // timeout or two.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let now = open_fds();
        if now <= before + 20 {
            break;
        }
        assert!(
            Instant::now() < until,
            "{} descriptors still open 5 s after 300 closed calls (started with {before})",
            now
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
