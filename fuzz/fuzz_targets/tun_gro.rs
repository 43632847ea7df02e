//! Fuzzes the receive offload `natm ip` runs on what a peer sent over a VC: tun-rs's
//! GRO (`GROTable`, the coalescing `src/cli/ip/tun.rs` asks of `send_multiple`), fed
//! one batch of packets queued as the TUN writer queues them (room for a virtio-net
//! header, then the packet, in a buffer of 64 KiB capacity).
//!
//! Input: records of 4 octets and a body. Octet 0 picks the packet's kind: raw (the
//! body as it is), or a TCP/IPv4 or UDP/IPv4 segment of one of two flows built from
//! the record (sequence number, flags, payload length, a checksum that may be wrong),
//! so that coalescing is reached, not only the parser's refusals.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tun_rs::{GROTable, VIRTIO_NET_HDR_LEN};

/// What one written packet's buffer holds at most: a segment of 64 KiB.
const SEGMENT_ROOM: usize = 2 * VIRTIO_NET_HDR_LEN + 65_535;

fn sum(data: &[u8], mut acc: u32) -> u32 {
    for pair in data.chunks(2) {
        acc += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// An IPv4 packet of protocol `proto` from flow `flow` carrying `l4` (its header
/// first, checksum field zero), both checksums right unless `bad`.
fn ipv4(flow: u8, proto: u8, mut l4: Vec<u8>, csum_at: usize, bad: bool) -> Vec<u8> {
    let src = [10, 0, 0, 1 + flow % 2];
    let dst = [10, 0, 0, 9];
    let total = 20 + l4.len();
    let mut p = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 1, 0x40, 0, 64, proto, 0, 0];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = fold(sum(&p, 0));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, proto, (l4.len() >> 8) as u8, l4.len() as u8]);
    let c = fold(sum(&l4, sum(&pseudo, 0))) ^ u16::from(bad);
    l4[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&l4);
    p
}

fn packet(kind: u8, a: u8, b: u8, body: &[u8]) -> Vec<u8> {
    let flow = kind >> 4;
    let bad = kind & 0x08 != 0;
    match kind % 4 {
        // A TCP segment: sequence from `a` in steps of the body's length (so
        // neighbours follow each other), flags from `b` (mostly ACK, ACK+PSH).
        1 | 2 => {
            let seq = u32::from(a).wrapping_mul(body.len().max(1) as u32);
            let flags = match b % 8 {
                0..=4 => 0x10,
                5 | 6 => 0x18,
                _ => b,
            };
            let mut l4 = vec![0x03, 0xe8, 0x07, 0xd0];
            l4.extend_from_slice(&seq.to_be_bytes());
            l4.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
            l4.extend_from_slice(body);
            ipv4(flow, 6, l4, 16, bad)
        }
        // A UDP datagram of the flow.
        3 => {
            let len = 8 + body.len();
            let mut l4 = vec![0x13, 0x8c, 0x13, 0x8c, (len >> 8) as u8, len as u8, 0, 0];
            l4.extend_from_slice(body);
            let _ = (a, b);
            ipv4(flow, 17, l4, 6, bad)
        }
        _ => body.to_vec(),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut bufs: Vec<Vec<u8>> = Vec::new();
    let mut rest = data;
    while rest.len() >= 4 && bufs.len() < 128 {
        let (kind, a, b, len) = (rest[0], rest[1], rest[2], usize::from(rest[3]) * 8);
        rest = &rest[4..];
        let (body, tail) = rest.split_at(len.min(rest.len()));
        rest = tail;
        let mut buf = Vec::with_capacity(SEGMENT_ROOM);
        buf.resize(VIRTIO_NET_HDR_LEN, 0);
        buf.extend_from_slice(&packet(kind, a, b, body));
        bufs.push(buf);
    }
    let mut gro = GROTable::default();
    for udp in [false, true] {
        let mut batch = bufs.clone();
        // A refusal is an error for the whole batch (written one by one then); what
        // matters is that nothing panics and no segment outgrows its buffer.
        let _ = gro.apply_gro(&mut batch, VIRTIO_NET_HDR_LEN, udp);
        for b in &batch {
            assert!(b.len() <= SEGMENT_ROOM, "a segment outgrew its buffer");
        }
    }
});
