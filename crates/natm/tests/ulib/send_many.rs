//! `Connection::send_many` (issue 17): a burst of messages handed over in one call is
//! still that many messages — each whole, in order, each its own TPDU(s) and counted
//! once if lost — while its TPDUs leave in a few GSO system calls instead of one each.

use natm::ulib::Wait;
use std::time::Duration;

use crate::support::assert_no_retransmissions;
use natm::ulib::{Connection, Error, Host};

pub(crate) fn pair_on(host: &Host, qos: &str) -> (Connection, Connection) {
    let l = host.bind("127.0.0.1:0", qos).unwrap();
    let addr = l.local_addr().unwrap();
    let h2 = host.clone();
    let q = qos.to_string();
    let t = std::thread::spawn(move || h2.connect(addr, &q).unwrap());
    let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
    (t.join().unwrap(), server)
}

fn pair(qos: &str) -> (Host, Connection, Connection) {
    let host = Host::open(crate::support::host_config()).unwrap();
    let (c, s) = pair_on(&host, qos);
    (host, c, s)
}

/// Message `i` of a burst: `len` octets, its number first, then a pattern of it.
pub(crate) fn message(i: usize, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len).map(|k| (i * 31 + k * 7) as u8).collect();
    m[..4].copy_from_slice(&(i as u32).to_le_bytes());
    m
}

fn send_calls(c: &Connection) -> u64 {
    c.stats().port.map_or(0, |p| p.send_calls)
}

#[test]
fn a_best_effort_burst_arrives_as_that_many_messages_in_order_in_few_system_calls() {
    let (_h, c, s) = pair("best-effort");
    const N: usize = 256;
    let burst: Vec<Vec<u8>> = (0..N).map(|i| message(i, 64)).collect();
    let calls0 = send_calls(&c);
    let tpdus0 = c.stats().tx.tpdus_sent;
    c.send_many(&burst, Wait::Block).unwrap();
    let calls = send_calls(&c) - calls0;
    for (i, want) in burst.iter().enumerate() {
        let got = s.recv(Wait::For(Duration::from_secs(5))).unwrap();
        assert_eq!(got.as_ref(), Some(want), "message {i}");
    }
    // Each message its own TPDU, none merged or split.
    assert_eq!(c.stats().tx.tpdus_sent - tpdus0, N as u64);
    assert_eq!(s.stats().rx.messages_delivered, N as u64);
    assert_eq!(s.stats().rx.messages_lost, 0);
    // One send per message would be 256 calls; GSO takes up to 64 equal datagrams each.
    assert!(
        calls <= (N / 16) as u64,
        "{N} messages took {calls} send system calls"
    );
}

/// A best-effort VC's socket starts without GRO: requests and replies are read with
/// a plain `recv(2)` each (issue 30). The first sign of bulk turns GRO on, so bursts
/// then arrive as runs, a few to a receive call, and every message stays whole and
/// in order before and after.
#[test]
fn a_best_effort_receiver_reads_bursts_as_runs_once_bulk_has_come() {
    let (_h, c, s) = pair("best-effort");
    const N: usize = 64;
    let (mut before, mut after) = (None, None);
    for round in 0..4 {
        let burst: Vec<Vec<u8>> = (0..N).map(|i| message(round * N + i, 1_000)).collect();
        if round == 0 {
            before = s.stats().port;
        }
        c.send_many(&burst, Wait::Block).unwrap();
        for (i, want) in burst.iter().enumerate() {
            let got = s.recv(Wait::For(Duration::from_secs(5))).unwrap();
            assert_eq!(got.as_ref(), Some(want), "round {round}, message {i}");
        }
        after = s.stats().port;
    }
    assert_eq!(s.stats().rx.messages_lost, 0);
    match (before, after) {
        (Some(before), Some(after)) => {
            assert_eq!(before.gro_coalesced, 0, "{before:?}");
            assert!(after.gro_coalesced > 0, "{after:?}");
            assert!(
                after.recv_calls - before.recv_calls < 4 * N as u64,
                "{after:?}"
            );
        }
        // On the host's shared port (`ulib_host`), which has GRO on for all its VCs.
        (None, None) => {}
        other => panic!("the VC's socket came or went: {other:?}"),
    }
}

#[test]
fn messages_of_several_tpdus_in_one_batch_stay_whole_and_in_order() {
    let (_h, c, s) = pair("reliable");
    // 10,000 octets: three 4 KiB TPDUs, the last one short, per message; sizes vary.
    let burst: Vec<Vec<u8>> = (0..40).map(|i| message(i, 10_000 + i * 13)).collect();
    let sender = std::thread::spawn(move || {
        c.send_many(&burst, Wait::Block).unwrap();
        c.flush(Duration::from_secs(10)).unwrap();
        (c, burst)
    });
    let mut got = Vec::new();
    while got.len() < 40 {
        match s.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            Some(m) => got.push(m),
            None => break,
        }
    }
    let (c, burst) = sender.join().unwrap();
    assert_eq!(got, burst);
    assert_no_retransmissions("reliable", &c.stats(), &s.stats());
}

#[test]
fn try_send_many_takes_what_fits_of_a_guaranteed_queue_and_then_says_so() {
    // The queue of `cbr:pcr=1Mbps,bucket=8Ki,delay=50ms` holds 8 KiB + 6,250 B: far
    // fewer than the 100 KiB offered.
    let (_h, c, s) = pair("cbr:pcr=1Mbps,bucket=8Ki,delay=50ms");
    let burst: Vec<Vec<u8>> = (0..100).map(|i| message(i, 1024)).collect();
    let taken = c.send_many(&burst, Wait::No).unwrap();
    assert!(
        (1..100).contains(&taken),
        "took {taken} of 100 KiB into a 14 KiB queue"
    );
    match c.send_many(&burst[taken..], Wait::No) {
        Err(Error::WouldBlock(_)) => {}
        Ok(n) => assert!(n < 100 - taken, "a full queue took {n} more"),
        Err(e) => panic!("try_send_many: {e}"),
    }
    // What was taken arrives whole and in order, paced by the bucket.
    for (i, want) in burst.iter().take(taken).enumerate() {
        let got = s.recv(Wait::For(Duration::from_secs(5))).unwrap();
        assert_eq!(got.as_ref(), Some(want), "message {i}");
    }
}

/// `send_many_bytes`: the same batches, each message a `Bytes` the VC's queue holds
/// as it is; a batch larger than the window leaves a piece of a message at a time as
/// room comes, and what arrives is every message whole and in order.
#[test]
fn owned_messages_larger_than_the_window_in_one_batch_stay_whole_and_in_order() {
    let (_h, c, s) = pair("reliable");
    // 300 messages of 30,000-odd octets: 9 MB, more than the window, so the blocking
    // batch queues pieces of messages as the window opens.
    let burst: Vec<bytes::Bytes> = (0..300)
        .map(|i| bytes::Bytes::from(message(i, 30_000 + i * 13)))
        .collect();
    let sender = std::thread::spawn(move || {
        // What fits now, then the rest waiting for room.
        let taken = c.send_many_bytes(&burst, Wait::No).unwrap();
        assert!(
            taken > 0 && taken < burst.len(),
            "{taken} taken without waiting"
        );
        assert_eq!(
            c.send_many_bytes(&burst[taken..], Wait::Block).unwrap(),
            burst.len() - taken
        );
        c.flush(Duration::from_secs(20)).unwrap();
        (c, burst)
    });
    let mut got = Vec::new();
    while got.len() < 300 {
        match s.recv(Wait::For(Duration::from_secs(20))).unwrap() {
            Some(m) => got.push(m),
            None => break,
        }
    }
    let (c, burst) = sender.join().unwrap();
    assert_eq!(got.len(), burst.len());
    for (i, (g, want)) in got.iter().zip(&burst).enumerate() {
        assert!(g[..] == want[..], "message {i}");
    }
    assert_no_retransmissions("reliable", &c.stats(), &s.stats());
}
