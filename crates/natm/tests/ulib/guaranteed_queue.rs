//! A guaranteed VC's send queue is bounded in time (issue 17): it holds the bucket plus
//! `delay=` at the VC's rate, so a sender over its reservation finds it full at once —
//! a send with `Wait::No` says so, a blocking `send` waits — instead of queueing seconds of data
//! (a 2 MiB queue held 16.8 s at 1 Mbit/s). Checked in bytes, never in time.

use natm::ulib::Wait;
use std::time::Duration;

use natm::ulib::{Error, Host};

const MSG: usize = 1024;

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

/// The queue's bound for `cbr:pcr=1Mbps,bucket=8Ki,delay=50ms`: 8 KiB + 1 Mbit/s × 50 ms.
const BOUND: u64 = 8192 + 1_000_000 / 8 * 50 / 1000;

#[test]
fn a_slow_guaranteed_vc_never_queues_more_than_its_delay() {
    let (_h, c, s) = pair("cbr:pcr=1Mbps,bucket=8Ki,delay=50ms");
    let reader = std::thread::spawn(move || {
        let mut n = 0usize;
        while let Ok(Some(m)) = s.recv(Wait::For(Duration::from_secs(10))) {
            n += m.len();
        }
        n
    });
    // Over the rate: a send with Wait::No fills the queue and is then refused at once. What it took
    // is the queue plus what left meanwhile — the first bucketful, and the rate's worth
    // of the time the loop took (far under the 2 MiB a byte-sized queue took).
    let msg = vec![7u8; MSG];
    let mut taken = 0u64;
    loop {
        match c.send(&msg, Wait::No) {
            Ok(()) => taken += MSG as u64,
            Err(Error::WouldBlock(_)) => break,
            Err(e) => panic!("try_send: {e}"),
        }
        assert!(
            taken <= 4 * BOUND,
            "try_send took {taken} bytes and still had room: the queue is not bounded by delay="
        );
        assert!(c.stats().send_queued <= BOUND);
    }
    assert!(
        taken >= BOUND - MSG as u64,
        "the queue took only {taken} bytes"
    );
    // A blocking sender: each send returns once its message fits, and the queue never
    // holds more than the bound.
    for _ in 0..24 {
        c.send(&msg, Wait::Block).unwrap();
        let q = c.stats().send_queued;
        assert!(q <= BOUND, "{q} bytes queued, bound {BOUND}");
    }
    let sent = taken + 24 * MSG as u64;
    c.close();
    c.flush(Duration::from_secs(30)).unwrap();
    drop(c);
    assert_eq!(
        reader.join().unwrap() as u64,
        sent,
        "every message delivered"
    );
}

#[test]
fn the_default_delay_bounds_a_fast_guaranteed_vc_too() {
    // 20 Mbit/s, default bucket (4 TPDUs of 4 KiB) and default delay (20 ms):
    // 16 KiB + 50 kB — not 2 MiB (842 ms at this rate).
    let bound = 4 * 4096 + 20_000_000 / 8 * 20 / 1000;
    let (_h, c, s) = pair("cbr:pcr=20Mbps");
    let msg = vec![1u8; 8192];
    let mut taken = 0u64;
    loop {
        match c.send(&msg, Wait::No) {
            Ok(()) => taken += msg.len() as u64,
            Err(Error::WouldBlock(_)) => break,
            Err(e) => panic!("try_send: {e}"),
        }
        assert!(
            taken <= 8 * bound,
            "try_send took {taken} bytes and still had room"
        );
        assert!(c.stats().send_queued <= bound);
    }
    drop(s);
}
