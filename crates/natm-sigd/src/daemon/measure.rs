//! The cost of one TPDU on the send path, measured when sigd starts: the number
//! admission control spends CPU at (docs/sigd.md "Admission"). It reads the
//! clock and uses a socket, so it lives with the daemon, not in the sans-IO core;
//! the PSB is here only to be timed.

use std::net::UdpSocket;
use std::time::Instant;

use bytes::Bytes;

use natm_proto::transport::{Psb, TransportConfig};
use natm_proto::wire::vcframe;

/// Time the PSB send path — `send`, `poll_transmit`, the VC header and the TPDU
/// header written into a datagram, one `send` on a loopback UDP socket — for 4 KiB
/// TPDUs; returns the median per TPDU over a few rounds, in nanoseconds.
pub(super) fn tpdu_cost() -> std::io::Result<u64> {
    const TPDU: usize = 4096;
    const PER_ROUND: usize = 256;
    let sink = UdpSocket::bind("127.0.0.1:0")?;
    let out = UdpSocket::bind("127.0.0.1:0")?;
    out.connect(sink.local_addr()?)?;
    out.set_nonblocking(true)?;
    let mut cfg = TransportConfig::best_effort();
    cfg.tpdu_size = TPDU as u32;
    cfg.cookie = Some(1);
    let t0 = natm_proto::time::Instant::from_nanos(1);
    let mut tx = Psb::connect(cfg.clone(), natm_proto::flow::build(cfg.flow, &cfg), t0);
    let mut rx = Psb::listen(cfg);
    // The three-way handshake in memory.
    for _ in 0..8 {
        while let Some(t) = tx.poll_transmit(t0) {
            rx.handle_frame(t0, Bytes::from(t.to_vec()));
        }
        while let Some(t) = rx.poll_transmit(t0) {
            tx.handle_frame(t0, Bytes::from(t.to_vec()));
        }
        if tx.status().connected {
            break;
        }
    }
    if !tx.status().connected {
        return Err(std::io::Error::other(
            "the in-memory handshake did not finish",
        ));
    }
    let payload = vec![0x5au8; TPDU];
    let mut dgram = vec![0u8; vcframe::HEADER_LEN + natm_proto::wire::tpdu::HEADER_LEN + TPDU];
    let vc = vcframe::Repr::data(0, 32).to_bytes();
    let mut rounds = Vec::new();
    for _ in 0..9 {
        let start = Instant::now();
        let mut sent = 0usize;
        while sent < PER_ROUND {
            if tx.send(&payload, true).is_err() {
                break;
            }
            while let Some(t) = tx.poll_transmit(t0) {
                dgram[..vcframe::HEADER_LEN].copy_from_slice(&vc);
                t.header.emit_into(&mut dgram[vcframe::HEADER_LEN..]);
                let off = vcframe::HEADER_LEN + natm_proto::wire::tpdu::HEADER_LEN;
                dgram[off..off + t.payload.len()].copy_from_slice(&t.payload);
                let _ = out.send(&dgram[..off + t.payload.len()]);
                sent += 1;
            }
        }
        let per = start.elapsed().as_nanos() as u64 / sent.max(1) as u64;
        rounds.push(per);
        // Keep the sink from filling (drops are fine; this only costs the reads).
        let mut b = [0u8; 16];
        sink.set_nonblocking(true)?;
        while sink.recv(&mut b).is_ok() {}
    }
    rounds.sort_unstable();
    Ok(rounds[rounds.len() / 2].max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measuring_the_send_path_gives_a_plausible_cost() {
        let ns = tpdu_cost().unwrap();
        assert!(ns > 0 && ns < 10_000_000, "{ns} ns per TPDU");
    }
}
