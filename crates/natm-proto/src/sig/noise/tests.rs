//! Two ends of a link in virtual time: the handshake, replays, forgeries, a man in
//! the middle, pinning and a restart.

use super::*;

fn t(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

fn key(b: u8) -> [u8; KEY_LEN] {
    [b; KEY_LEN]
}

/// A's and B's links, each trusting on first use.
fn pair() -> (NoiseLink, NoiseLink) {
    (
        NoiseLink::new(key(1), Trust::FirstUse, None),
        NoiseLink::new(key(2), Trust::FirstUse, None),
    )
}

/// Delivers `datagrams` to `to`: the PDUs it opened and what it sends back.
fn carry(from: Vec<Vec<u8>>, to: &mut NoiseLink, now: Instant) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (mut pdus, mut back) = (Vec::new(), Vec::new());
    // Fresh indices, as the caller's random ones are.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(101);
    for d in from {
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match to.receive(now, &d, || next) {
            Ok(Received::Pdu(p)) => pdus.push(p),
            Ok(Received::Send(v)) => back.extend(v),
            Err(_) => {}
        }
    }
    (pdus, back)
}

/// Runs the handshake with `pdu` from A: what B opened.
fn handshake(a: &mut NoiseLink, b: &mut NoiseLink, pdu: &[u8], now: Instant) -> Vec<Vec<u8>> {
    let init = a.seal(now, pdu, || 7);
    let (none, resp) = carry(init, b, now);
    assert!(none.is_empty());
    let (none, fin_and_data) = carry(resp, a, now);
    assert!(none.is_empty() && a.has_keys());
    let (pdus, _) = carry(fin_and_data, b, now);
    pdus
}

#[test]
fn a_handshake_agrees_keys_and_pdus_pass_once() {
    let (mut a, mut b) = pair();
    assert_eq!(
        handshake(&mut a, &mut b, b"BGN", t(1)),
        vec![b"BGN".to_vec()]
    );
    assert!(b.has_keys());
    // Each end proved its static key, and both hold the same transcript hash.
    assert_eq!(a.peer_key(), Some(public_key(&key(2))));
    assert_eq!(b.peer_key(), Some(public_key(&key(1))));
    assert_eq!(a.handshake_hash(), b.handshake_hash());
    assert_eq!(a.take_new_pin(), Some(public_key(&key(2))));
    // B answers under the same session.
    let back = b.seal(t(2), b"BGAK", || unreachable!());
    let (pdus, _) = carry(back, &mut a, t(2));
    assert_eq!(pdus, vec![b"BGAK".to_vec()]);
}

#[test]
fn a_replayed_frame_is_refused() {
    let (mut a, mut b) = pair();
    handshake(&mut a, &mut b, b"BGN", t(1));
    let sd = a.seal(t(2), b"SD 1", || unreachable!());
    let (pdus, _) = carry(sd.clone(), &mut b, t(2));
    assert_eq!(pdus.len(), 1);
    for d in &sd {
        assert_eq!(b.receive(t(3), d, || 0), Err(NoiseError::Replay));
    }
}

#[test]
fn a_forged_or_changed_frame_is_refused() {
    let (mut a, mut b) = pair();
    handshake(&mut a, &mut b, b"BGN", t(1));
    let mut sd = a.seal(t(2), b"END", || unreachable!()).remove(0);
    let n = sd.len();
    sd[n - 1] ^= 1;
    assert_eq!(b.receive(t(2), &sd, || 0), Err(NoiseError::BadTag));
    // A frame made up by someone without the keys, naming the session.
    let Ok(Control::NoiseData { receiver, .. }) = Control::parse(&sd) else {
        panic!("a data frame");
    };
    let forged = Control::NoiseData {
        receiver,
        counter: 1_000,
        ciphertext: &[0u8; 40],
    }
    .to_bytes();
    assert_eq!(b.receive(t(2), &forged, || 0), Err(NoiseError::BadTag));
    // The real frame still passes after the forgeries (the window took nothing).
    sd[n - 1] ^= 1;
    assert!(matches!(b.receive(t(2), &sd, || 0), Ok(Received::Pdu(_))));
}

#[test]
fn a_man_in_the_middle_with_its_own_keys_fails() {
    // A and B have met: each pinned the other's key.
    let mut a = NoiseLink::new(key(1), Trust::Pinned(public_key(&key(2))), None);
    let mut b = NoiseLink::new(key(2), Trust::Pinned(public_key(&key(1))), None);
    // M answers A as B would, with its own static and ephemeral keys.
    let mut m_as_b = NoiseLink::new(key(9), Trust::FirstUse, None);
    let init = a.seal(t(1), b"BGN", || 7);
    let (_, resp) = carry(init.clone(), &mut m_as_b, t(1));
    let err = a.receive(t(1), &resp[0], || 0);
    assert!(matches!(err, Err(NoiseError::WrongKey { .. })), "{err:?}");
    assert!(!a.has_keys());
    // M relays A's first message but substitutes its own ephemeral key in B's
    // answer: the answer no longer decrypts at A.
    let init = a.seal(t(400), b"BGN", || 8);
    let (_, resp) = carry(init, &mut b, t(400));
    let Ok(Control::NoiseResp {
        sender,
        receiver,
        msg,
    }) = Control::parse(&resp[0])
    else {
        panic!("an answer");
    };
    let mut tampered = msg.to_vec();
    tampered[..KEY_LEN].copy_from_slice(&public_key(&key(9)));
    let d = Control::NoiseResp {
        sender,
        receiver,
        msg: &tampered,
    }
    .to_bytes();
    assert_eq!(a.receive(t(400), &d, || 0), Err(NoiseError::BadTag));
    // And B, answering someone who claims to be A with another static key, refuses
    // at the third message.
    let mut m_as_a = NoiseLink::new(key(9), Trust::FirstUse, None);
    let init = m_as_a.seal(t(500), b"BGN", || 11);
    let (_, resp) = carry(init, &mut b, t(500));
    let (_, fin) = carry(resp, &mut m_as_a, t(500));
    let err = b.receive(t(500), &fin[0], || 0);
    assert!(matches!(err, Err(NoiseError::WrongKey { .. })), "{err:?}");
    assert!(!b.has_keys());
    // The real A still gets through.
    let init = a.seal(t(800), b"BGN", || 12);
    let (_, resp) = carry(init, &mut b, t(800));
    let (_, fin) = carry(resp, &mut a, t(800));
    let (pdus, _) = carry(fin, &mut b, t(800));
    assert!(!pdus.is_empty());
}

#[test]
fn a_different_psk_fails_the_handshake() {
    let mut a = NoiseLink::new(key(1), Trust::FirstUse, Some([5; KEY_LEN]));
    let mut b = NoiseLink::new(key(2), Trust::FirstUse, Some([6; KEY_LEN]));
    let init = a.seal(t(1), b"BGN", || 7);
    let (_, resp) = carry(init, &mut b, t(1));
    let (_, fin) = carry(resp, &mut a, t(1));
    let err = b.receive(t(1), &fin[0], || 0);
    assert_eq!(err, Err(NoiseError::BadTag));
    assert!(!b.has_keys());
    // With the same key the handshake (XXpsk3) completes.
    let mut b = NoiseLink::new(key(2), Trust::FirstUse, Some([5; KEY_LEN]));
    let mut a = NoiseLink::new(key(1), Trust::FirstUse, Some([5; KEY_LEN]));
    assert_eq!(handshake(&mut a, &mut b, b"BGN", t(2)).len(), 1);
}

/// Issue 31: on a psk link trusting on first use, the initiator reads the
/// responder's key before anything proved the responder holds the psk: a responder
/// without it must not get its key pinned (it would lock the real peer out). The
/// key is pinned once the peer's first transport message opens.
#[test]
fn a_responder_without_the_psk_cannot_poison_the_pin() {
    let psk = Some([5; KEY_LEN]);
    let mut a = NoiseLink::new(key(1), Trust::FirstUse, psk);
    let mut impostor = NoiseLink::new(key(9), Trust::FirstUse, Some([6; KEY_LEN]));
    let init = a.seal(t(1), b"BGN", || 7);
    let (_, resp) = carry(init, &mut impostor, t(1));
    let (_, fin) = carry(resp, &mut a, t(1));
    assert_eq!(a.take_new_pin(), None, "pinned before the psk was proved");
    let (pdus, _) = carry(fin, &mut impostor, t(1));
    assert!(pdus.is_empty() && !impostor.has_keys());
    // The real peer, with the psk, gets through and is pinned on its first message.
    a.reset();
    let mut b = NoiseLink::new(key(2), Trust::FirstUse, psk);
    assert_eq!(handshake(&mut a, &mut b, b"BGN", t(2)).len(), 1);
    assert_eq!(
        a.take_new_pin(),
        None,
        "nothing came from b under the session yet"
    );
    let from_b = b.seal(t(3), b"BGN ACK", || 8);
    let (pdus, _) = carry(from_b, &mut a, t(3));
    assert_eq!(pdus, vec![b"BGN ACK".to_vec()]);
    assert_eq!(a.take_new_pin(), Some(public_key(&key(2))));
    // The responder pinned a's key as soon as the third message opened.
    assert_eq!(b.take_new_pin(), Some(public_key(&key(1))));
}

#[test]
fn a_restarted_peer_handshakes_again_and_old_frames_fail() {
    let (mut a, mut b) = pair();
    handshake(&mut a, &mut b, b"BGN", t(1));
    let old = a.seal(t(2), b"SD", || unreachable!());
    // B restarts: same static key, nothing else.
    let mut b = NoiseLink::new(key(2), Trust::Pinned(public_key(&key(1))), None);
    assert_eq!(
        b.receive(t(3), &old[0], || 0),
        Err(NoiseError::UnknownSession)
    );
    // B opens a new SSCOP connection: a new handshake, which A answers while it
    // still holds the old session.
    let init = b.seal(t(4), b"BGN", || 21);
    let (_, resp) = carry(init, &mut a, t(4));
    let (_, fin) = carry(resp, &mut b, t(4));
    let (pdus, _) = carry(fin, &mut a, t(4));
    assert_eq!(pdus, vec![b"BGN".to_vec()]);
    // A sends with the session B made; B opens it.
    let back = a.seal(t(5), b"BGAK", || unreachable!());
    let (pdus, _) = carry(back, &mut b, t(5));
    assert_eq!(pdus, vec![b"BGAK".to_vec()]);
}

#[test]
fn a_lost_final_message_goes_again_with_data() {
    let (mut a, mut b) = pair();
    let init = a.seal(t(1), b"BGN", || 7);
    let (_, resp) = carry(init, &mut b, t(1));
    let (_, fin_and_data) = carry(resp, &mut a, t(1));
    // The final message and the BGN are lost; SSCOP repeats the BGN later.
    drop(fin_and_data);
    let again = a.seal(t(300), b"BGN", || unreachable!());
    assert_eq!(again.len(), 2, "the final message, then the PDU");
    let (pdus, _) = carry(again, &mut b, t(300));
    assert_eq!(pdus, vec![b"BGN".to_vec()]);
    // Once B's answer arrives, A stops repeating it.
    let back = b.seal(t(301), b"BGAK", || unreachable!());
    carry(back, &mut a, t(301));
    assert_eq!(a.seal(t(900), b"SD", || unreachable!()).len(), 1);
}

#[test]
fn a_repeated_first_message_gets_the_same_answer_and_no_new_state() {
    let (mut a, mut b) = pair();
    let init = a.seal(t(1), b"BGN", || 7);
    let (_, r1) = carry(init, &mut b, t(1));
    let again = a.seal(t(300), b"BGN", || unreachable!());
    let (_, r2) = carry(again, &mut b, t(300));
    assert_eq!(r1, r2);
    let (_, fin) = carry(r2, &mut a, t(300));
    let (pdus, _) = carry(fin, &mut b, t(300));
    assert_eq!(pdus.len(), 2, "both held BGNs");
}

#[test]
fn spoofed_first_messages_between_do_not_evict_the_real_handshake() {
    let (mut a, mut b) = pair();
    let init = a.seal(t(1), b"BGN", || 7);
    let (_, resp) = carry(init, &mut b, t(1));
    // Three first messages spoofed from A's address reach B before A's third.
    for i in 0..3u32 {
        let mut m = NoiseLink::new(key(50 + i as u8), Trust::FirstUse, None);
        let spoofed = m.seal(t(1), b"x", || 900 + i);
        carry(spoofed, &mut b, t(1));
    }
    let (_, fin) = carry(resp, &mut a, t(1));
    let (pdus, _) = carry(fin, &mut b, t(1));
    assert_eq!(pdus, vec![b"BGN".to_vec()]);
}

#[test]
fn keys_round_trip_as_text() {
    let k = public_key(&key(3));
    assert_eq!(key_from_text(&key_to_text(&k)), Some(k));
    assert_eq!(key_from_text("not base64!"), None);
    assert_eq!(key_from_text("AAAA"), None);
    assert_eq!(fingerprint(&k).len(), 11);
}

/// The handshake's cost (docs/decisions/0031-noise-signalling-links.md):
/// `cargo test -p natm-proto --release noise_handshake_cost -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement"]
fn noise_handshake_cost() {
    use std::time::Instant as Clock;
    for pattern in [
        "Noise_XX_25519_ChaChaPoly_BLAKE2s",
        "Noise_IK_25519_ChaChaPoly_BLAKE2s",
        "Noise_XX_25519_ChaChaPoly_SHA256",
        "Noise_XXpsk3_25519_ChaChaPoly_BLAKE2s",
    ] {
        let n = 2000;
        let (ka, kb) = (key(1), key(2));
        let pb = public_key(&kb);
        let psk = [7u8; 32];
        let start = Clock::now();
        let mut bytes = 0;
        for _ in 0..n {
            let p: snow::params::NoiseParams = pattern.parse().expect("a pattern");
            let mut bi = Builder::new(p.clone()).local_private_key(&ka).expect("key");
            let mut br = Builder::new(p).local_private_key(&kb).expect("key");
            if pattern.contains("IK") {
                bi = bi.remote_public_key(&pb).expect("key");
            }
            if pattern.contains("psk3") {
                bi = bi.psk(3, &psk).expect("psk");
                br = br.psk(3, &psk).expect("psk");
            }
            let mut i = bi.build_initiator().expect("initiator");
            let mut r = br.build_responder().expect("responder");
            let (mut m, mut p) = ([0u8; 256], [0u8; 256]);
            let mut turn = true;
            while !(i.is_handshake_finished() && r.is_handshake_finished()) {
                let (w, rd) = if turn {
                    (&mut i, &mut r)
                } else {
                    (&mut r, &mut i)
                };
                let len = w.write_message(&[], &mut m).expect("write");
                bytes += len;
                rd.read_message(&m[..len], &mut p).expect("read");
                turn = !turn;
            }
        }
        let per = start.elapsed() / n;
        println!(
            "{pattern}: {per:?} per handshake (both ends, one core), {} octets",
            bytes / n as usize
        );
    }
}

/// Two ends across a path with this one-way delay, each sealing a PDU every 100 ms
/// (a trunk's hellos) from t = 0 and SSCOP's BGN with its retransmissions, both
/// starting at once (crossing handshakes), and
/// answering data under a session it does not hold with a handshake of its own (as
/// the switch does): the PDUs each end opened in `secs` seconds, and how many it
/// sent.
fn crossing_over_delay(one_way_ms: u64, secs: u64) -> ([usize; 2], [usize; 2]) {
    let mut ends = pair();
    // In flight: (due, to end, datagram).
    let mut wire: Vec<(u64, usize, Vec<u8>)> = Vec::new();
    let (mut opened, mut sent) = ([0usize; 2], [0usize; 2]);
    let mut next_index = 1000u32;
    for ms in 0..secs * 1000 {
        let now = t(ms);
        let mut due: Vec<(usize, Vec<u8>)> = Vec::new();
        wire.retain(|(at, to, d)| {
            if *at <= ms {
                due.push((*to, d.clone()));
                false
            } else {
                true
            }
        });
        for (to, d) in due {
            let end = if to == 0 { &mut ends.0 } else { &mut ends.1 };
            next_index += 1;
            let i = next_index;
            let data = matches!(Control::parse(&d), Ok(Control::NoiseData { .. }));
            let out = match end.receive(now, &d, || i) {
                Ok(Received::Pdu(_)) => {
                    opened[to] += 1;
                    Vec::new()
                }
                Ok(Received::Send(v)) => v,
                Err(NoiseError::UnknownSession) if data && !end.has_keys() => {
                    end.start(now, i).into_iter().collect()
                }
                Err(_) => Vec::new(),
            };
            for o in out {
                wire.push((ms + one_way_ms, 1 - to, o));
            }
        }
        // SSCOP's BGN, again on each backed-off Timer_CC (the same N(SQ)).
        let bgn = [0, 200, 600, 1400].contains(&ms);
        if ms % 100 == 0 || bgn {
            for (from, count) in sent.iter_mut().enumerate() {
                let end = if from == 0 { &mut ends.0 } else { &mut ends.1 };
                next_index += 1;
                let i = next_index;
                if bgn {
                    end.bgn(1);
                }
                *count += 1;
                for o in end.seal(now, b"hello", || i) {
                    wire.push((ms + one_way_ms, 1 - from, o));
                }
            }
        }
    }
    (opened, sent)
}

#[test]
fn crossing_handshakes_settle_over_a_long_path() {
    for one_way in [1, 20, 150, 300] {
        let (opened, sent) = crossing_over_delay(one_way, 10);
        eprintln!("{one_way} ms: opened {opened:?} of {sent:?}");
        for end in 0..2 {
            // All but what was in flight at the end, and the first few RTTs.
            let lost = sent[1 - end] - opened[end];
            assert!(
                lost <= 4 + (4 * one_way as usize).div_ceil(100),
                "{one_way} ms one way: end {end} opened {} of {} PDUs",
                opened[end],
                sent[1 - end]
            );
        }
    }
}

#[test]
fn a_retransmitted_bgn_keeps_the_session_and_a_new_connection_starts_new_keys() {
    let (mut a, mut b) = pair();
    a.bgn(5);
    handshake(&mut a, &mut b, b"BGN 5", t(1));
    // Timer_CC fired before the BGAK came back: the same N(SQ) again.
    a.bgn(5);
    let again = a.seal(t(200), b"BGN 5", || unreachable!());
    assert!(matches!(
        Control::parse(&again[again.len() - 1]),
        Ok(Control::NoiseData { .. })
    ));
    let (pdus, _) = carry(again, &mut b, t(200));
    assert_eq!(pdus, vec![b"BGN 5".to_vec()]);
    // A new SSCOP connection: a new handshake.
    a.bgn(6);
    assert!(!a.has_keys());
    let init = a.seal(t(300), b"BGN 6", || 8);
    assert!(matches!(
        Control::parse(&init[0]),
        Ok(Control::NoiseInit { .. })
    ));
}
