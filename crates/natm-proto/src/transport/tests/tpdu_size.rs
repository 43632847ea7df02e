//! Adaptive TPDU size through real PSBs (issue 17): the sender's sizes follow the
//! loss, the receiver takes every size up to the agreed one, retransmissions keep
//! their first size, and every byte arrives.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use super::*;
use crate::transport::tpdu_size::TpduSizeConfig;
use crate::wire::tpdu::Flags;

fn adaptive(cfg: TransportConfig) -> TransportConfig {
    TransportConfig {
        tpdu_size: 32 * 1024,
        tpdu_adapt: Some(TpduSizeConfig::default()),
        window: 64,
        snd_buf: 4 << 20,
        rcv_buf: 2 << 20,
        flow: FlowKind::None,
        rtt: RttConfig {
            initial_rto: Duration::from_millis(50),
            min_rto: Duration::from_millis(20),
            ..RttConfig::default()
        },
        ..cfg
    }
}

/// What the forward link saw of each data TPDU.
#[derive(Default)]
struct Seen {
    /// Payload length of each sequence number's first transmission.
    first_len: HashMap<u32, usize>,
    /// Every new TPDU's payload length, in order.
    new_sizes: Vec<usize>,
    /// Retransmissions whose length differed from the first transmission's.
    retx_resized: u32,
    retx: u32,
}

/// Loses each data TPDU as a path losing `q` of its 1472-byte fragments would.
fn fragment_loss(q: Rc<Cell<f64>>, seen: Rc<RefCell<Seen>>) -> Fate {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    Box::new(move |t, fwd| {
        if !fwd || t.header.ty != TpduType::Data {
            return 1;
        }
        let len = t.payload.len();
        let mut s = seen.borrow_mut();
        if t.header.flags.contains(Flags::RETX) {
            s.retx += 1;
            if s.first_len.get(&t.header.seq) != Some(&len) {
                s.retx_resized += 1;
            }
        } else {
            s.first_len.insert(t.header.seq, len);
            s.new_sizes.push(len);
        }
        let p = 1.0 - (1.0 - q.get()).powf(len.div_ceil(1472) as f64);
        u8::from(!rng.chance(p))
    })
}

/// Queue `msgs` (feeding as the buffer drains) without closing, then let everything
/// be acknowledged.
fn send_phase(p: &mut Pair, msgs: &[Vec<u8>]) {
    let end = p.now + Duration::from_secs(60);
    let (mut i, mut off) = (0, 0);
    while i < msgs.len() && p.now < end {
        match p.tx.send(&msgs[i][off..], true) {
            Ok(n) if off + n == msgs[i].len() => {
                i += 1;
                off = 0;
                continue;
            }
            Ok(n) => off += n,
            Err(SendError::WindowFull | SendError::OverRate) => {}
            Err(e) => panic!("send: {e}"),
        }
        assert!(p.step(), "stalled");
    }
    assert_eq!(i, msgs.len(), "not all queued in time");
    p.drive(Duration::from_secs(5));
}

#[test]
fn tpdu_size_follows_loss_and_every_byte_arrives() {
    let q = Rc::new(Cell::new(0.0));
    let seen = Rc::new(RefCell::new(Seen::default()));
    let mut p = Pair::new(
        adaptive(TransportConfig::reliable()),
        TransportConfig {
            tpdu_adapt: None,
            ..adaptive(TransportConfig::reliable())
        },
    );
    p.per_byte = Duration::from_nanos(80); // 100 Mbit/s
    p.fate = fragment_loss(q.clone(), seen.clone());
    p.drive(Duration::from_millis(10));
    assert_eq!(p.tx.params().map(|a| a.tpdu_size), Some(32 * 1024));
    assert_eq!(p.tx.tpdu_size(), 4096, "an adaptive VC starts at its floor");

    // No loss: grows to the agreed 32 KiB.
    let clean = msgs(&[64 * 1024; 80]);
    send_phase(&mut p, &clean);
    assert_eq!(p.tx.tpdu_size(), 32 * 1024);
    assert_eq!(seen.borrow().new_sizes.iter().max(), Some(&(32 * 1024)));

    // 3 % of link packets lost: a 32 KiB TPDU (23 fragments) is lost half the time;
    // the sender shrinks to the floor.
    q.set(0.03);
    let mark = seen.borrow().new_sizes.len();
    let lossy = msgs(&[64 * 1024; 160]);
    send_phase(&mut p, &lossy);
    assert_eq!(p.tx.tpdu_size(), 4096);
    let tail: Vec<usize> = seen.borrow().new_sizes[mark..].to_vec();
    assert!(
        tail[tail.len() - 100..].iter().all(|&n| n <= 4096),
        "the last TPDUs under loss are at the floor"
    );

    // Loss gone: back up (the smoothed loss decays by a quarter per decision).
    q.set(0.0);
    send_phase(&mut p, &msgs(&[64 * 1024; 400]));
    assert_eq!(p.tx.tpdu_size(), 32 * 1024);

    // Every message arrived whole and in order, nothing was refused as oversize,
    // and each retransmission carried its TPDU as first sent.
    let mut all = clean;
    all.extend(lossy);
    all.extend(msgs(&[64 * 1024; 400]));
    assert_eq!(p.messages(), all);
    assert_eq!(p.rx.stats().drop_oversize, 0);
    let s = seen.borrow();
    assert!(
        s.retx > 50,
        "loss was exercised: {} retransmissions",
        s.retx
    );
    assert_eq!(s.retx_resized, 0);
    assert!(p.tx.tpdu_sizer().is_some_and(|z| z.changes() >= 2));
}

#[test]
fn a_fixed_size_vc_never_adapts() {
    let q = Rc::new(Cell::new(0.03));
    let seen = Rc::new(RefCell::new(Seen::default()));
    let cfg = TransportConfig {
        tpdu_adapt: None,
        ..adaptive(TransportConfig::reliable())
    };
    let mut p = Pair::new(cfg.clone(), cfg);
    p.fate = fragment_loss(q, seen.clone());
    p.drive(Duration::from_millis(10));
    let m = msgs(&[64 * 1024; 40]);
    send_phase(&mut p, &m);
    assert!(p.tx.tpdu_sizer().is_none());
    assert!(seen.borrow().new_sizes.iter().all(|&n| n == 32 * 1024));
    assert_eq!(p.messages(), m);
}

#[test]
fn shrinking_splits_queued_unsent_tpdus() {
    // A sender that queued one 256 KiB message at 32 KiB learns of loss: what it has
    // not sent yet goes out at the new size.
    let seen = Rc::new(RefCell::new(Seen::default()));
    let q = Rc::new(Cell::new(0.0));
    let tx = TransportConfig {
        window: 8,
        ..adaptive(TransportConfig::reliable())
    };
    let mut p = Pair::new(tx, adaptive(TransportConfig::reliable()));
    p.fate = fragment_loss(q.clone(), seen.clone());
    p.drive(Duration::from_millis(10));
    send_phase(&mut p, &msgs(&[64 * 1024; 40]));
    assert_eq!(p.tx.tpdu_size(), 32 * 1024);
    q.set(0.05);
    let big = msgs(&[4 << 20]);
    send_phase(&mut p, &big);
    let s = seen.borrow();
    let sizes = &s.new_sizes;
    // The 4 MiB message was cut at 32 KiB when queued; the sizes seen on the wire
    // fall below that before it is done, and its bytes are intact.
    assert!(
        sizes[sizes.len() - 1] < 32 * 1024,
        "{:?}",
        &sizes[sizes.len() - 20..]
    );
    assert_eq!(p.messages().last(), big.last());
}

#[test]
fn the_path_cap_cuts_new_tpdus_and_lifts_again() {
    // Issue 30: the adaptor learns the path MTU after the VC is up, and again when it
    // drops mid-transfer (EMSGSIZE). New TPDUs fit it, queued unsent ones are split,
    // retransmissions keep the size they were sent at, and a larger cap lets the VC
    // go back to its agreed size.
    let seen = Rc::new(RefCell::new(Seen::default()));
    let q = Rc::new(Cell::new(0.02));
    let cfg = TransportConfig {
        tpdu_adapt: None,
        window: 16,
        ..adaptive(TransportConfig::reliable())
    };
    let mut p = Pair::new(cfg.clone(), cfg);
    p.fate = fragment_loss(q, seen.clone());
    p.drive(Duration::from_millis(10));
    assert_eq!(p.tx.path_cap(), None);
    p.tx.set_path_cap(1436);
    assert_eq!(p.tx.path_cap(), Some(1436));
    assert_eq!(p.tx.tpdu_size(), 1436);
    let first = msgs(&[100_000; 10]);
    send_phase(&mut p, &first);
    assert!(seen.borrow().new_sizes.iter().all(|&n| n <= 1436));
    // Queue a large message at a 9,000-octet path, then drop the cap while most of
    // it waits unsent.
    p.tx.set_path_cap(8936);
    assert_eq!(p.tx.tpdu_size(), 8936);
    let big = msgs(&[2 << 20]);
    let before = seen.borrow().new_sizes.len();
    // The send buffer (4 MiB) takes the whole message at once, cut at 8,936.
    assert_eq!(p.tx.send(&big[0], true), Ok(big[0].len()));
    assert!(p.step());
    p.tx.set_path_cap(1436);
    p.drive(Duration::from_secs(5));
    let s = seen.borrow();
    let after = &s.new_sizes[before..];
    let large = after.iter().filter(|&&n| n > 1436).count();
    // At most what was sent before the cap fell went out large: the window, which
    // keeps its bytes in TPDUs of 8,936 octets (16 × 32 KiB / 8,936 = 58).
    let window = crate::transport::ec_window::scaled_window(16, 32 * 1024, 8936) as usize;
    assert_eq!(window, 58);
    assert!(large <= window, "{large} TPDUs over the cap after it fell");
    assert!(after.iter().rev().take(10).all(|&n| n <= 1436));
    assert_eq!(s.retx_resized, 0, "a retransmission changed size");
    drop(s);
    // Lifted: new TPDUs grow back to the agreed size.
    p.tx.set_path_cap(usize::MAX);
    assert_eq!(p.tx.tpdu_size(), 32 * 1024);
    let last = msgs(&[64 * 1024; 4]);
    send_phase(&mut p, &last);
    assert!(seen
        .borrow()
        .new_sizes
        .iter()
        .rev()
        .take(4)
        .all(|&n| n == 32 * 1024));
    let got = p.messages();
    assert_eq!(got.len(), first.len() + 1 + last.len());
    assert_eq!(got[first.len()], big[0]);
}

#[test]
fn a_larger_path_cap_cuts_the_queued_unsent_tpdus_again() {
    // Issue 30: a VC's first window is queued at RFC 8899's base size before its
    // first probe confirms the path. Once the path is found larger, what is still
    // unsent leaves at the new size, not only what is queued after; what was sent
    // keeps its size, and the message arrives intact.
    let seen = Rc::new(RefCell::new(Seen::default()));
    let cfg = TransportConfig {
        tpdu_adapt: None,
        window: 16,
        ..adaptive(TransportConfig::reliable())
    };
    let mut p = Pair::new(cfg.clone(), cfg);
    p.fate = fragment_loss(Rc::new(Cell::new(0.0)), seen.clone());
    p.drive(Duration::from_millis(10));
    p.tx.set_path_cap(1136);
    let big = msgs(&[2 << 20]);
    assert_eq!(p.tx.send(&big[0], true), Ok(big[0].len()));
    assert!(p.step());
    let small = seen.borrow().new_sizes.len();
    assert!(small > 0 && seen.borrow().new_sizes.iter().all(|&n| n == 1136));
    p.tx.set_path_cap(8936);
    p.drive(Duration::from_secs(5));
    let s = seen.borrow();
    let (early, late) = s.new_sizes.split_at(small);
    let left = (2 << 20) - early.iter().sum::<usize>();
    assert_eq!(late.iter().sum::<usize>(), left);
    // The rest in TPDUs of the new size (the message's last one shorter), where it
    // was 1,136 octets each before: one run re-cut, so at most one more short one.
    assert!(
        late.len() <= left.div_ceil(8936) + 1,
        "{} TPDUs for {left} octets",
        late.len()
    );
    assert!(
        late[..late.len() - 2].iter().all(|&n| n == 8936),
        "{late:?}"
    );
    assert_eq!(s.retx_resized, 0, "a retransmission changed size");
    drop(s);
    assert_eq!(p.messages(), big);
}

#[test]
fn the_path_cap_and_the_adaptive_size_take_the_smaller() {
    let q = Rc::new(Cell::new(0.0));
    let seen = Rc::new(RefCell::new(Seen::default()));
    let mut p = Pair::new(
        adaptive(TransportConfig::reliable()),
        adaptive(TransportConfig::reliable()),
    );
    p.fate = fragment_loss(q, seen.clone());
    p.drive(Duration::from_millis(10));
    let start = p.tx.tpdu_size();
    assert!(start > 1436);
    p.tx.set_path_cap(1436);
    assert_eq!(p.tx.tpdu_size(), 1436);
    send_phase(&mut p, &msgs(&[64 * 1024; 20]));
    assert!(seen.borrow().new_sizes.iter().all(|&n| n <= 1436));
    p.tx.set_path_cap(usize::MAX);
    assert!(p.tx.tpdu_size() > 1436);
}
