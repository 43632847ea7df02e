//! Sends that take the application's buffer (`Psb::send_bytes`, issue 17): the PSB's
//! send queue holds slices of it, TPDUs are cut and retransmitted as those slices, and
//! the send buffer's bound is the same as for copied sends. In virtual time on the
//! `Pair` harness.

use std::cell::RefCell;
use std::rc::Rc;

use super::*;

/// Where a payload lies in memory: (first octet's address, length).
fn span(b: &[u8]) -> (usize, usize) {
    (b.as_ptr() as usize, b.len())
}

/// Whether `part` lies inside `whole`'s memory (a slice of it, not a copy).
fn inside(part: &[u8], whole: &[u8]) -> bool {
    let (p, n) = span(part);
    let (w, m) = span(whole);
    p >= w && p + n <= w + m
}

impl Pair {
    /// As `Pair::transfer`, handing each message over as a `Bytes` with
    /// `Psb::send_bytes` (the rest of a message cut by a full buffer as a slice).
    fn transfer_owned(&mut self, msgs: &[Bytes], limit: Duration) {
        self.transfer_with(msgs, limit, |tx, m, off| {
            tx.send_bytes(&m.slice(off..), true)
        });
    }
}

fn owned(sizes: &[usize]) -> Vec<Bytes> {
    msgs(sizes).into_iter().map(Bytes::from).collect()
}

#[test]
fn tpdus_of_an_owned_message_are_slices_of_the_callers_buffer() {
    let m = owned(&[10_000]);
    let mut p = Pair::new(
        small(TransportConfig::reliable()),
        small(TransportConfig::reliable()),
    );
    let buf = m[0].clone();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let log = seen.clone();
    p.fate = Box::new(move |t, fwd| {
        if fwd && t.header.ty == TpduType::Data && !t.payload.is_empty() {
            log.borrow_mut().push(inside(&t.payload, &buf));
        }
        1
    });
    p.transfer_owned(&m, Duration::from_secs(5));
    assert_eq!(p.messages(), vec![m[0].to_vec()]);
    let seen = seen.borrow();
    // 10,000 octets at 1 KiB TPDUs: ten data TPDUs, every payload inside the buffer.
    assert_eq!(seen.len(), 10);
    assert!(seen.iter().all(|&s| s), "a payload was copied: {seen:?}");
}

#[test]
fn a_lost_tpdu_of_an_owned_message_is_resent_from_the_same_slice() {
    let m = owned(&[8 * 1024, 3000]);
    let mut p = Pair::new(
        small(TransportConfig::reliable()),
        small(TransportConfig::reliable()),
    );
    // Every transmission of each sequence number: where its payload lay.
    let sent = Rc::new(RefCell::new(std::collections::HashMap::<
        u32,
        Vec<(usize, usize)>,
    >::new()));
    let first_seq = Rc::new(RefCell::new(None::<u32>));
    let (log, first) = (sent.clone(), first_seq.clone());
    p.fate = Box::new(move |t, fwd| {
        if !fwd || t.header.ty != TpduType::Data {
            return 1;
        }
        let s0 = *first.borrow_mut().get_or_insert(t.header.seq);
        let mut log = log.borrow_mut();
        let tries = log.entry(t.header.seq).or_default();
        tries.push(span(&t.payload));
        // Lose the first transmission of the third TPDU and of the second message's
        // first (the first message is eight TPDUs of 1 KiB).
        let k = t.header.seq.wrapping_sub(s0);
        u8::from(!(matches!(k, 2 | 8) && tries.len() == 1))
    });
    p.transfer_owned(&m, Duration::from_secs(5));
    assert_eq!(
        p.messages(),
        m.iter().map(|b| b.to_vec()).collect::<Vec<_>>()
    );
    assert!(p.tx.stats().retransmissions() >= 2);
    let sent = sent.borrow();
    let s0 = first_seq.borrow().expect("data was sent");
    for seq in [s0 + 2, s0 + 8] {
        let tries = &sent[&seq];
        assert!(tries.len() >= 2, "{seq} was not resent");
        assert!(
            tries.iter().all(|s| s == &tries[0]),
            "{seq} resent from other memory: {tries:?}"
        );
    }
    let (first, second) = (span(&m[0]), span(&m[1]));
    assert_eq!(sent[&(s0 + 2)][0], (first.0 + 2 * 1024, 1024));
    assert_eq!(sent[&(s0 + 8)][0], (second.0, 1024));
}

#[test]
fn owned_sends_are_bounded_by_the_send_buffer_like_copied_ones() {
    // 64 KiB send buffer (`small`); a 100,000-octet message is taken in part.
    let big = owned(&[100_000]).remove(0);
    let mut owned_pair = Pair::new(
        small(TransportConfig::reliable()),
        small(TransportConfig::reliable()),
    );
    let mut copied_pair = Pair::new(
        small(TransportConfig::reliable()),
        small(TransportConfig::reliable()),
    );
    // Establish both, then offer the same message each way.
    owned_pair.drive(Duration::from_millis(10));
    copied_pair.drive(Duration::from_millis(10));
    let a = owned_pair.tx.send_bytes(&big, true).expect("room");
    let b = copied_pair.tx.send(&big, true).expect("room");
    assert_eq!(a, b, "the same prefix is taken");
    assert_eq!(a, 64 * 1024);
    assert_eq!(owned_pair.tx.send_capacity(), 0);
    assert!(matches!(
        owned_pair.tx.send_bytes(&big.slice(a..), true),
        Err(SendError::WindowFull)
    ));
    assert_eq!(
        owned_pair.tx.send_capacity(),
        copied_pair.tx.send_capacity()
    );
}

#[test]
fn owned_messages_arrive_exact_under_random_loss_both_ways() {
    let m = owned(&[1, 1023, 1024, 1025, 5000, 0, 70_000, 200_000, 4096]);
    let mut p = Pair::new(
        small(TransportConfig::reliable()),
        small(TransportConfig::reliable()),
    );
    let mut rng = Rng(0x5eed_0017);
    p.fate = Box::new(move |_, _| u8::from(!rng.chance(0.05)));
    p.transfer_owned(&m, Duration::from_secs(60));
    assert_eq!(
        p.messages(),
        m.iter().map(|b| b.to_vec()).collect::<Vec<_>>()
    );
    assert!(p.tx.stats().retransmissions() > 0, "the loss was recovered");
    assert!(p.tx.status().closed && p.rx.status().peer_closed);
}
