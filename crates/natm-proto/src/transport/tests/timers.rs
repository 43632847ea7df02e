//! The retransmission timers count from transmission (issue 17): a retransmission
//! that waits in the sender's queue — behind pacing or the host's scheduler — runs no
//! timer of its own, and the backed-off RTO applies from the first retransmission.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Poll every frame the sender has for the wire now, and drop them (a dead path).
fn drain(p: &mut Pair) -> usize {
    let mut n = 0;
    while p.tx.poll_transmit(p.now).is_some() {
        n += 1;
    }
    n
}

fn at(p: &mut Pair, t: Instant) {
    p.now = t;
    if p.tx.poll_timeout().is_some_and(|d| d <= t) {
        p.tx.handle_timeout(t);
    }
}

#[test]
fn a_retransmission_waiting_in_the_queue_runs_no_timer_and_the_backoff_applies_at_once() {
    // No RTT sample yet: RTO = the initial 50 ms, no head check.
    let mut p = signalled_pair(small(TransportConfig::reliable()));
    let t0 = p.now;
    p.tx.send(&[1u8; 2048], true).unwrap();
    assert_eq!(drain(&mut p), 2);
    assert_eq!(p.tx.poll_timeout(), Some(t0 + ms(50)));
    let t1 = t0 + ms(50);
    at(&mut p, t1);
    assert_eq!(p.tx.stats().timeouts, 1);
    // The host does not get round to this VC for 90 ms (more than the RTO before the
    // backoff): its retransmissions wait, and no timer runs on them meanwhile.
    at(&mut p, t1 + ms(90));
    assert_eq!(p.tx.stats().timeouts, 1, "a timeout counted queueing time");
    let t2 = t1 + ms(90);
    // RFC 5682: the first firing resends the head alone (the first ACK after it says
    // whether the rest were lost).
    assert_eq!(drain(&mut p), 1);
    assert_eq!(p.tx.stats().retx_timeout, 1);
    // RFC 6298 §5.5–5.6: the timer restarts with the doubled RTO, from the time the
    // retransmission left.
    assert_eq!(p.tx.poll_timeout(), Some(t2 + ms(100)));
    at(&mut p, t2 + ms(99));
    assert_eq!(p.tx.stats().timeouts, 1);
    at(&mut p, t2 + ms(100));
    assert_eq!(p.tx.stats().timeouts, 2);
    let t3 = t2 + ms(100);
    // No ACK came since the first firing (a dead path): the second resends both.
    assert_eq!(drain(&mut p), 2);
    assert_eq!(p.tx.poll_timeout(), Some(t3 + ms(200)));
}

#[test]
fn the_head_check_counts_two_rtts_from_the_head_retransmission_leaving() {
    let mut p = signalled_pair(small(TransportConfig::reliable()));
    // One message through a clean path: RTT samples (1 ms), so the head check is on.
    p.tx.send(&[2u8; 1024], true).unwrap();
    p.drive(ms(20));
    assert_eq!(p.messages().len(), 1);
    let srtt = p.tx.rtt().srtt();
    assert!(srtt < ms(5), "srtt {srtt:?}");
    // Now the path is dead. One TPDU leaves at t0.
    p.now += ms(100);
    let t0 = p.now;
    p.tx.send(&[3u8; 1024], true).unwrap();
    assert_eq!(drain(&mut p), 1);
    let head = t0 + srtt * 2;
    assert!(p.tx.poll_timeout().is_some_and(|t| t <= head));
    at(&mut p, head);
    assert_eq!(p.tx.stats().head_checks, 1);
    // The head retransmission waits 5 · srtt in the sender's queue: the next check
    // (backed off to 4 · srtt) would have fired meanwhile if it counted from the first.
    let t1 = head + srtt * 5;
    at(&mut p, t1);
    assert_eq!(
        p.tx.stats().head_checks,
        1,
        "a head check counted queueing time"
    );
    assert_eq!(drain(&mut p), 1);
    assert_eq!(p.tx.stats().retx_head, 1);
    assert_eq!(p.tx.poll_timeout(), Some(t1 + srtt * 4));
    at(&mut p, t1 + srtt * 4);
    assert_eq!(p.tx.stats().head_checks, 2);
}

#[test]
fn a_timeout_resends_what_had_a_whole_rto_not_what_just_left() {
    // No RTT sample yet: RTO = the initial 50 ms. The path is dead.
    let mut p = signalled_pair(small(TransportConfig::reliable()));
    let t0 = p.now;
    p.tx.send(&[1u8; 1024], true).unwrap();
    assert_eq!(drain(&mut p), 1);
    at(&mut p, t0 + ms(30));
    p.tx.send(&[2u8; 1024], true).unwrap();
    assert_eq!(drain(&mut p), 1);
    // The RTO armed by the first TPDU fires: the second left 20 ms ago and may be on
    // its way, so only the first is resent (seed 000 §5.3.2: "only packets not
    // correctly received").
    at(&mut p, t0 + ms(50));
    assert_eq!(p.tx.stats().timeouts, 1);
    assert_eq!(drain(&mut p), 1, "a TPDU younger than the RTO was resent");
    assert_eq!(p.tx.stats().retx_timeout, 1);
    // The backed-off RTO (100 ms) runs from that retransmission; when it fires, both
    // have had a whole RTO: the head is resent alone (RFC 5682), and with still no
    // ACK the next firing (200 ms later) resends both.
    at(&mut p, t0 + ms(150));
    assert_eq!(p.tx.stats().timeouts, 2);
    assert_eq!(drain(&mut p), 1);
    at(&mut p, t0 + ms(350));
    assert_eq!(p.tx.stats().timeouts, 3);
    assert_eq!(drain(&mut p), 2);
}

/// Carry every frame the sender has for the wire now to the receiver, and the
/// receiver's answers back, at `now` (a path with no delay); returns the data TPDUs
/// carried.
fn carry(p: &mut Pair) -> usize {
    let now = p.now;
    let mut n = 0;
    while let Some(t) = p.tx.poll_transmit(now) {
        n += usize::from(t.header.ty == TpduType::Data);
        p.rx.handle_frame(now, Bytes::from(t.to_vec()));
    }
    while let Some(t) = p.rx.poll_transmit(now) {
        p.tx.handle_frame(now, Bytes::from(t.to_vec()));
    }
    n
}

/// RFC 5682 (F-RTO) on a path that lost a whole window: the timeout resends the head
/// alone, and the ACK its arrival causes (stamped after the firing) shows the rest
/// lost too: they are resent then, without another timeout.
#[test]
fn after_a_timeout_the_heads_ack_resends_the_rest_when_they_were_lost() {
    let mut p = signalled_pair(small(TransportConfig::reliable()));
    let t0 = p.now;
    p.tx.send(&[1u8; 4096], true).unwrap();
    assert_eq!(drain(&mut p), 4, "a window lost");
    at(&mut p, t0 + ms(50));
    assert_eq!(p.tx.stats().timeouts, 1);
    let waiting = Stall {
        timeouts: 1,
        head_out: true,
        windows_lost: 0,
    };
    assert_eq!(p.tx.stall(), waiting, "the first ACK is to judge the rest");
    at(&mut p, t0 + ms(51));
    assert_eq!(carry(&mut p), 1, "the head alone");
    // RFC 8899 §4.3: the head crossed and the three sent before the firing did not —
    // what a path that shrank shows when only the head was sent small enough.
    let judged = Stall {
        timeouts: 0,
        head_out: false,
        windows_lost: 1,
    };
    assert_eq!(p.tx.stall(), judged);
    at(&mut p, t0 + ms(52));
    assert_eq!(carry(&mut p), 3, "the head's ACK resent the rest");
    let s = p.tx.stats();
    assert_eq!((s.timeouts, s.retx_timeout, s.timeout_marked), (1, 4, 4));
    assert_eq!(s.windows_lost, 1);
    carry(&mut p);
    assert_eq!(p.tx.in_flight(), 0, "everything acknowledged");
}

/// A path that shrank under a paced window: when the timeout fires, only the head has
/// had a whole RTO, so it is resent alone and nothing waits on F-RTO's verdict. Its
/// ACK shows none of the TPDUs sent before the firing arrived — a window lost whole
/// (RFC 8899 §4.3) — and they are resent at once, not each at its own timeout.
#[test]
fn a_window_lost_whole_behind_the_head_is_resent_on_its_ack() {
    let mut p = signalled_pair(small(TransportConfig::reliable()));
    let t0 = p.now;
    p.tx.send(&[1u8; 1024], true).unwrap();
    assert_eq!(drain(&mut p), 1);
    p.now = t0 + ms(30);
    p.tx.send(&[2u8; 2048], true).unwrap();
    assert_eq!(drain(&mut p), 2);
    at(&mut p, t0 + ms(50));
    assert_eq!(p.tx.stats().timeouts, 1);
    assert!(p.tx.stall().head_out);
    at(&mut p, t0 + ms(51));
    assert_eq!(carry(&mut p), 1, "the head alone");
    assert_eq!(p.tx.stall().windows_lost, 1);
    at(&mut p, t0 + ms(52));
    assert_eq!(
        carry(&mut p),
        2,
        "the window behind the head, 28 ms before its RTO"
    );
    carry(&mut p);
    assert_eq!(p.tx.in_flight(), 0, "everything acknowledged");
    assert_eq!(p.tx.stats().timeouts, 1);
}

/// Random loss, not a shrunk path: of the window the timeout's head belonged to, one
/// TPDU arrived. The first ACK after the timeout judges no window lost whole (RFC 8899
/// §4.3).
#[test]
fn a_window_with_one_tpdu_heard_is_not_lost_whole() {
    let mut p = signalled_pair(small(TransportConfig::reliable()));
    let t0 = p.now;
    p.tx.send(&[1u8; 4096], true).unwrap();
    let mut n = 0;
    while let Some(t) = p.tx.poll_transmit(t0) {
        if n == 1 {
            p.rx.handle_frame(t0, Bytes::from(t.to_vec()));
        }
        n += 1;
    }
    assert_eq!(n, 4);
    while let Some(t) = p.rx.poll_transmit(t0) {
        p.tx.handle_frame(t0, Bytes::from(t.to_vec()));
    }
    at(&mut p, t0 + ms(50));
    assert_eq!(p.tx.stats().timeouts, 1);
    assert!(p.tx.stall().head_out);
    at(&mut p, t0 + ms(51));
    carry(&mut p);
    assert_eq!(
        p.tx.stall(),
        Stall {
            timeouts: 0,
            head_out: false,
            windows_lost: 0,
        }
    );
    at(&mut p, t0 + ms(52));
    carry(&mut p);
    carry(&mut p);
    assert_eq!(p.tx.in_flight(), 0, "everything acknowledged");
}

/// Timeouts are counted in a row until the cumulative ACK advances: two with no
/// progress between them are the path MTU search's sign of a black hole (RFC 8899
/// §4.3, `Psb::stall`).
#[test]
fn timeouts_in_a_row_count_until_the_cumulative_ack_moves() {
    let mut p = signalled_pair(small(TransportConfig::reliable()));
    let t0 = p.now;
    p.tx.send(&[1u8; 4096], true).unwrap();
    assert_eq!(drain(&mut p), 4, "a window lost");
    assert_eq!(p.tx.stall().timeouts, 0);
    at(&mut p, t0 + ms(50));
    assert_eq!(p.tx.stall().timeouts, 1);
    assert_eq!(drain(&mut p), 1, "the head alone, lost too");
    // The backed-off timer (100 ms from the head's retransmission) fires again.
    at(&mut p, t0 + ms(160));
    assert_eq!(p.tx.stall().timeouts, 2, "no ACK between the two");
    carry(&mut p);
    assert_eq!(p.tx.stall().timeouts, 0, "the head's ACK moved the window");
    carry(&mut p);
    assert_eq!(p.tx.in_flight(), 0, "everything acknowledged");
    assert_eq!(p.rx.stall().timeouts, 0, "a receiving VC times out nothing");
}

/// The same timeout when only the ACKs were late: the originals' ACKs, stamped before
/// the firing, come after the head's retransmission left, and nothing more is resent.
#[test]
fn after_a_timeout_late_acks_of_the_originals_resend_nothing() {
    let mut p = signalled_pair(small(TransportConfig::reliable()));
    let t0 = p.now;
    p.tx.send(&[1u8; 4096], true).unwrap();
    // The originals arrive; their ACKs are held (a receiver kept off its CPU).
    let mut acks = Vec::new();
    while let Some(t) = p.tx.poll_transmit(t0) {
        p.rx.handle_frame(t0, Bytes::from(t.to_vec()));
    }
    while let Some(t) = p.rx.poll_transmit(t0) {
        acks.push(Bytes::from(t.to_vec()));
    }
    assert!(!acks.is_empty());
    at(&mut p, t0 + ms(50));
    assert_eq!(p.tx.stats().timeouts, 1);
    assert_eq!(drain(&mut p), 1, "the head alone");
    p.now = t0 + ms(60);
    for a in acks {
        p.tx.handle_frame(p.now, a);
    }
    assert_eq!(drain(&mut p), 0, "nothing more: the originals arrived");
    let s = p.tx.stats();
    assert_eq!((s.timeouts, s.retx_timeout, s.timeout_marked), (1, 1, 1));
    assert_eq!(s.windows_lost, 0, "none lost: not a sign of a shrunk path");
    assert!(!p.tx.stall().head_out);
    assert_eq!(p.tx.in_flight(), 0);
}
