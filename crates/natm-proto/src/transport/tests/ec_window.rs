//! The error-control window kept in bytes when the path cuts TPDUs (issue 30,
//! `transport::ec_window`), through real PSBs in virtual time.

use super::*;
use crate::transport::ec_window;
use crate::wire::tpdu::Packet;

/// 8 MiB of 64 KiB messages through a 100 Mbit/s link with a 50 ms round trip, the
/// sender's TPDUs cut to 1,436 octets by the path, `loss` of the data TPDUs lost;
/// the VC agreed TPDUs of `agreed` octets, 256 of them a window. The pair after the
/// close, and the goodput in Mbit/s.
fn through_a_long_path(loss: f64, agreed: u32) -> (Pair, f64) {
    let cfg = TransportConfig {
        tpdu_size: agreed,
        window: 256,
        rcv_buf: 256 * agreed as usize,
        ..TransportConfig::reliable()
    };
    let mut p = Pair::new(cfg.clone(), cfg);
    p.delay = Duration::from_millis(25);
    p.per_byte = Duration::from_nanos(80);
    let mut rng = Rng(0x0b17_e5e0_3000_0001);
    p.fate = Box::new(move |t, fwd| {
        u8::from(!(fwd && t.header.ty == TpduType::Data && rng.chance(loss)))
    });
    p.drive(Duration::from_millis(200));
    p.tx.set_path_cap(1436);
    let data = msgs(&[64 * 1024; 128]);
    let start = p.now;
    p.transfer(&data, Duration::from_secs(30));
    assert_eq!(p.messages(), data, "not byte-exact");
    let secs = p.now.saturating_duration_since(start).as_secs_f64();
    let mbps = (data.len() * 64 * 1024) as f64 * 8.0 / secs / 1e6;
    (p, mbps)
}

#[test]
fn a_path_that_cuts_tpdus_keeps_the_windows_bytes_in_flight() {
    // Agreed 4 KiB × 256 (1 MiB): 730 TPDUs of 1,436 octets may be in flight, 168
    // Mbit/s a round trip of 50 ms, so the link (100 Mbit/s less the headers) bounds
    // the transfer. Agreed at 1,436 octets, the window is 256 of them: 58.8 Mbit/s.
    let (p, bytes) = through_a_long_path(0.0, 4096);
    let (_, tpdus) = through_a_long_path(0.0, 1436);
    assert!(bytes > 80.0, "{bytes:.1} Mbit/s");
    assert!(
        tpdus < 60.0 && bytes > 1.35 * tpdus,
        "{bytes:.1} vs {tpdus:.1} Mbit/s"
    );
    let rx = p.rx.stats();
    assert_eq!(
        rx.drop_out_of_window, 0,
        "the receiver refused what the sender sent"
    );
    assert_eq!(rx.drop_rcv_buf, 0);
}

#[test]
fn under_loss_the_scaled_window_recovers_every_hole_and_goes_faster() {
    let (p, bytes) = through_a_long_path(0.02, 4096);
    let (_, tpdus) = through_a_long_path(0.02, 1436);
    assert!(bytes > 1.2 * tpdus, "{bytes:.1} vs {tpdus:.1} Mbit/s");
    assert!(p.tx.stats().retx_fast > 0);
    assert_eq!(p.rx.stats().drop_out_of_window, 0);
}

#[test]
fn a_receiver_bounds_whatever_window_a_sender_claims() {
    // A data TPDU's window field says the sender's window in its TPDUs; a hostile
    // or broken sender may write anything there. The receiver's reorder range stays
    // within its agreed bytes at the smallest TPDU it scales for (2,048 TPDUs of 512
    // octets for 1 MiB), and what it advertises within its free buffer.
    let cfg = TransportConfig {
        window: 256,
        rcv_buf: 1 << 20,
        snd_buf: 2 << 20,
        ..TransportConfig::reliable()
    };
    let cap = ec_window::window_tpdus_cap(cfg.window, cfg.tpdu_size as usize);
    assert_eq!(cap, 2048);
    let mut p = signalled_pair(cfg.clone());
    let isn = cfg.isn;
    let data = |seq: u32, window: u16| {
        let h = Header {
            window,
            cookie: cfg.cookie.unwrap_or(0),
            seq,
            ..Header::new(TpduType::Data)
        };
        let mut buf = vec![0u8; crate::wire::tpdu::HEADER_LEN + 600];
        h.emit(&mut Packet::new_unchecked(&mut buf[..]));
        Bytes::from(buf)
    };
    let now = p.now;
    // Beyond the agreed 256 with no claim: refused.
    p.rx.handle_frame(now, data(isn + 300, 256));
    assert_eq!(p.rx.stats().drop_out_of_window, 1);
    // A claim of 65,535 TPDUs opens the range only to the cap.
    p.rx.handle_frame(now, data(isn + 1, u16::MAX));
    p.rx.handle_frame(now, data(isn + 2047, u16::MAX));
    assert_eq!(p.rx.stats().drop_out_of_window, 1);
    p.rx.handle_frame(now, data(isn + 2049, u16::MAX));
    assert_eq!(p.rx.stats().drop_out_of_window, 2);
    // What it advertises is its free buffer in TPDUs of the smallest size.
    let mut acks = Vec::new();
    while let Some(t) = p.rx.poll_transmit(now) {
        acks.push(t.header.window);
    }
    assert!(!acks.is_empty());
    assert!(
        acks.iter().all(|&w| usize::from(w) < cfg.rcv_buf / 512),
        "{acks:?}"
    );
}
