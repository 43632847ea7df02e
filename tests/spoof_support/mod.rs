//! A sender of UDP datagrams with any source address and port (a raw IPv4 socket with
//! IP_HDRINCL; needs root): the spoofing attacker of the threat model, for the tests
//! that show what forged frames can and cannot do.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Sends UDP datagrams that claim any source.
pub(crate) struct Spoofer(Socket);

impl Spoofer {
    pub(crate) fn open() -> Spoofer {
        Spoofer(
            Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(255)))
                .expect("a raw IP socket (root)"),
        )
    }

    /// One datagram carrying `payload`, from `from` (whoever holds it) to `to`.
    pub(crate) fn send(&self, from: SocketAddr, to: SocketAddr, payload: &[u8]) {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (from.ip(), to.ip()) else {
            panic!("IPv4 only");
        };
        let total = 20 + 8 + payload.len();
        let mut p = Vec::with_capacity(total);
        p.extend_from_slice(&[0x45, 0]);
        p.extend_from_slice(&(total as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
        p.extend_from_slice(&s.octets());
        p.extend_from_slice(&d.octets());
        let csum = ipv4_checksum(&p);
        p[10..12].copy_from_slice(&csum.to_be_bytes());
        p.extend_from_slice(&from.port().to_be_bytes());
        p.extend_from_slice(&to.port().to_be_bytes());
        p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]); // no UDP checksum (IPv4 allows it)
        p.extend_from_slice(payload);
        self.0
            .send_to(&p, &SockAddr::from(to))
            .expect("spoofed send");
    }
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
