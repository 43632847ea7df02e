//! The host's send buffer pool (seed 001 §6, issue 34): all of a host's sending VCs
//! together queue at most `EngineConfig::send_pool` octets, each still at most its own
//! send buffer; a send the pool cannot take hears `WouldBlock::SendPool` (or waits),
//! and is woken when another VC's octets are acknowledged. Nothing is lost or
//! reordered by it.

use natm::ulib::Wait;
use std::time::{Duration, Instant};

use crate::support::assert_no_retransmissions;
use natm::ulib::{Connection, Error, Host, WouldBlock};

const VCS: usize = 4;
const MSG: usize = 64 << 10;
const POOL: usize = 512 << 10;

/// Message `seq` of VC `vc`: its numbers first, then a pattern of them.
fn message(vc: usize, seq: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..MSG)
        .map(|k| (vc * 131 + seq * 31 + k * 7) as u8)
        .collect();
    m[..4].copy_from_slice(&(vc as u32).to_le_bytes());
    m[4..8].copy_from_slice(&(seq as u32).to_le_bytes());
    m
}

#[test]
fn vcs_together_queue_no_more_than_the_hosts_pool_and_all_their_data_arrives() {
    let mut cfg = crate::support::host_config();
    cfg.engine.send_pool = POOL;
    let tx_host = Host::open(cfg).unwrap();
    let rx_host = Host::open(crate::support::host_config()).unwrap();
    let l = rx_host.bind("127.0.0.1:0", "reliable").unwrap();
    let addr = l.local_addr().unwrap();
    let mut senders: Vec<Connection> = Vec::new();
    let mut receivers: Vec<Connection> = Vec::new();
    for _ in 0..VCS {
        let h = tx_host.clone();
        let t = std::thread::spawn(move || h.connect(addr, "reliable").unwrap());
        receivers.push(l.accept(Wait::For(Duration::from_secs(10))).unwrap());
        senders.push(t.join().unwrap());
    }
    // Nobody reads: the receivers' buffers fill, their ACKs stop, and what the senders
    // queue stays queued. Each VC's own buffer (2 MiB) could hold four times the pool.
    let mut sent = [0usize; VCS];
    let mut pool_refusals = 0;
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        for (i, c) in senders.iter().enumerate() {
            match c.send(message(i, sent[i]), Wait::No) {
                Ok(()) => sent[i] += 1,
                Err(Error::WouldBlock(WouldBlock::SendPool)) => {
                    pool_refusals += 1;
                    // The VC itself had room: the pool, not its buffer, held it back.
                    assert!(c.stats().send_queued + (MSG as u64) <= 2 << 20);
                }
                Err(Error::WouldBlock(_)) => {}
                Err(e) => panic!("vc {i}: {e}"),
            }
        }
        let p = tx_host.send_pool();
        assert!(p.used <= p.limit && p.peak <= p.limit, "{p:?}");
        let queued: u64 = senders.iter().map(|c| c.stats().send_queued).sum();
        assert!(queued <= POOL as u64, "the VCs queue {queued} octets");
        if pool_refusals > 0 && p.used + MSG as u64 > p.limit {
            break;
        }
        assert!(
            Instant::now() < until,
            "never spent the pool: {p:?}, sent {sent:?}"
        );
        std::thread::yield_now();
    }
    let p = tx_host.send_pool();
    assert_eq!(p.limit, POOL as u64);
    assert!(p.held_back > 0, "{p:?}");
    // Each connection's stats show the host's pool too (what `natm stat` reports).
    assert_eq!(senders[0].stats().send_pool.limit, POOL as u64);

    // Now the receivers read, and each sender blocks for 8 more messages: the pool,
    // freed by any VC's acknowledgements, wakes them, and everything arrives whole.
    let readers: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let want = sent[i] + 8;
            std::thread::spawn(move || {
                for seq in 0..want {
                    let m = r.recv(Wait::For(Duration::from_secs(30))).unwrap();
                    assert_eq!(
                        m.as_deref(),
                        Some(&message(i, seq)[..]),
                        "vc {i} message {seq}"
                    );
                }
                r
            })
        })
        .collect();
    let writers: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let from = sent[i];
            std::thread::spawn(move || {
                for seq in from..from + 8 {
                    c.send(message(i, seq), Wait::Block).unwrap();
                }
                c.flush(Duration::from_secs(30)).unwrap();
                c
            })
        })
        .collect();
    let senders: Vec<Connection> = writers.into_iter().map(|t| t.join().unwrap()).collect();
    let receivers: Vec<Connection> = readers.into_iter().map(|t| t.join().unwrap()).collect();
    let p = tx_host.send_pool();
    assert_eq!(p.used, 0, "all acknowledged, all given back: {p:?}");
    assert!(p.peak <= POOL as u64);
    // Held back by the pool and by receivers that did not read, but never lost.
    for (i, (c, r)) in senders.iter().zip(&receivers).enumerate() {
        assert_no_retransmissions(&format!("vc {i}"), &c.stats(), &r.stats());
    }
}

/// A reliable call from a host opened with `tx_cfg` to another: the sending host, the
/// caller's connection and the accepted one.
fn reliable_call(tx_cfg: natm::ulib::HostConfig) -> (Host, Connection, Connection) {
    let tx_host = Host::open(tx_cfg).unwrap();
    let rx_host = Host::open(crate::support::host_config()).unwrap();
    let l = rx_host.bind("127.0.0.1:0", "reliable").unwrap();
    let addr = l.local_addr().unwrap();
    let h = tx_host.clone();
    let t = std::thread::spawn(move || h.connect(addr, "reliable").unwrap());
    let r = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
    (tx_host, t.join().unwrap(), r)
}

#[test]
fn a_pool_smaller_than_a_message_still_carries_it_in_pieces() {
    // A blocking send takes what the pool has and waits for the rest: a 1 MiB message
    // through a 96 KiB pool arrives whole.
    let mut cfg = crate::support::host_config();
    cfg.engine.send_pool = 96 << 10;
    let (tx_host, c, r) = reliable_call(cfg);
    let big: Vec<u8> = (0..1 << 20)
        .map(|k: usize| (k * 13 + k / 4096) as u8)
        .collect();
    let want = big.clone();
    let w = std::thread::spawn(move || {
        c.send(&big, Wait::Block).unwrap();
        c.flush(Duration::from_secs(30)).unwrap();
        c
    });
    let got = r.recv(Wait::For(Duration::from_secs(30))).unwrap();
    assert_eq!(got.as_deref(), Some(&want[..]));
    let c = w.join().unwrap();
    let p = tx_host.send_pool();
    assert!(p.peak <= 96 << 10, "{p:?}");
    assert_eq!(p.used, 0);
    assert_no_retransmissions("reliable", &c.stats(), &r.stats());
}

#[test]
fn large_sends_copy_into_buffers_the_host_keeps_and_arrive_byte_exact() {
    // A megabyte message is copied into one buffer its TPDUs share; once they are
    // acknowledged the host keeps it for the next large send instead of freeing it
    // (freed, its pages go back to the kernel and the next send faults them in
    // again). Each message differs, so a buffer reused too early would show.
    let (tx_host, c, r) = reliable_call(crate::support::host_config());
    const BIG: usize = 1 << 20;
    const SENDS: usize = 16;
    let big = |seq: usize| -> Vec<u8> {
        (0..BIG)
            .map(|k| (k * 7 + seq * 101 + k / 4096) as u8)
            .collect()
    };
    let w = std::thread::spawn(move || {
        for seq in 0..SENDS {
            // Borrowed, so copied (a `Vec` given by value would be held as it is).
            let m = big(seq);
            c.send(m.as_slice(), Wait::Block).unwrap();
            // Acknowledged before the next: its buffer is free to be kept.
            c.flush(Duration::from_secs(30)).unwrap();
        }
        c
    });
    for seq in 0..SENDS {
        let got = r.recv(Wait::For(Duration::from_secs(30))).unwrap();
        assert!(got.as_deref() == Some(&big(seq)[..]), "message {seq} whole");
    }
    let c = w.join().unwrap();
    let p = tx_host.send_pool();
    // One buffer serves them all; a fresh allocation each time would reuse none.
    assert!(p.reused >= (SENDS / 2) as u64, "{p:?}");
    assert!(p.spare >= BIG as u64 && p.spare <= 8 << 20, "{p:?}");
    assert_eq!(p.used, 0);
    // Small sends are plain allocations: nothing more is kept or reused for them.
    c.send(&[9u8; 1000], Wait::Block).unwrap();
    c.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(tx_host.send_pool().reused, p.reused);
    assert_no_retransmissions("reliable", &c.stats(), &r.stats());
}
