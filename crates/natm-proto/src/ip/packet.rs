//! What IP over natm reads from an IP packet (its flow, for the policy and the route)
//! and the packets it makes itself: ICMP "fragmentation needed" and ICMPv6 "packet
//! too big" (RFC 1191, RFC 8201), and IPv4 fragments (RFC 791) for a VC whose MTU is
//! below the interface's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;

/// The fields of an IP packet the policy and the route look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IPv4 protocol or IPv6 next header (after hop-by-hop, routing, destination
    /// options and fragment headers).
    pub proto: u8,
    /// TCP/UDP source port (none for other protocols and non-first fragments).
    pub sport: Option<u16>,
    /// TCP/UDP destination port.
    pub dport: Option<u16>,
    /// The packet's length, from its header.
    pub len: usize,
    /// IPv4's "don't fragment" bit (IPv6 packets are never fragmented on the way).
    pub dont_fragment: bool,
}

/// Why bytes are not an IP packet natm carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PacketError {
    /// Empty, or shorter than its header says.
    #[error("IP packet truncated ({0} bytes)")]
    Truncated(usize),
    /// Version nibble neither 4 nor 6.
    #[error("IP version {0} (only 4 and 6)")]
    Version(u8),
    /// IPv4 header length below 20 bytes or a total length below it.
    #[error("bad IPv4 header length")]
    HeaderLength,
}

const IPV6_HEADER: usize = 40;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_ICMP: u8 = 1;
const PROTO_ICMPV6: u8 = 58;

impl Flow {
    /// Reads an IPv4 or IPv6 packet's flow.
    pub fn parse(p: &[u8]) -> Result<Flow, PacketError> {
        let first = *p.first().ok_or(PacketError::Truncated(0))?;
        match first >> 4 {
            4 => {
                if p.len() < 20 {
                    return Err(PacketError::Truncated(p.len()));
                }
                let ihl = usize::from(first & 0x0F) * 4;
                let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
                if ihl < 20 || total < ihl {
                    return Err(PacketError::HeaderLength);
                }
                if p.len() < total {
                    return Err(PacketError::Truncated(p.len()));
                }
                let frag = u16::from_be_bytes([p[6], p[7]]);
                let proto = p[9];
                let ports = if frag & 0x1FFF == 0 {
                    ports(proto, &p[ihl..total])
                } else {
                    None
                };
                Ok(Flow {
                    src: IpAddr::V4(Ipv4Addr::new(p[12], p[13], p[14], p[15])),
                    dst: IpAddr::V4(Ipv4Addr::new(p[16], p[17], p[18], p[19])),
                    proto,
                    sport: ports.map(|x| x.0),
                    dport: ports.map(|x| x.1),
                    len: total,
                    dont_fragment: frag & 0x4000 != 0,
                })
            }
            6 => {
                if p.len() < IPV6_HEADER {
                    return Err(PacketError::Truncated(p.len()));
                }
                let total = IPV6_HEADER + usize::from(u16::from_be_bytes([p[4], p[5]]));
                if p.len() < total {
                    return Err(PacketError::Truncated(p.len()));
                }
                let addr = |at: usize| {
                    let mut a = [0; 16];
                    a.copy_from_slice(&p[at..at + 16]);
                    IpAddr::V6(Ipv6Addr::from(a))
                };
                // Walk the extension headers that may come before the transport's.
                let (mut next, mut at, mut first_fragment) = (p[6], IPV6_HEADER, true);
                for _ in 0..8 {
                    match next {
                        0 | 43 | 60 if at + 8 <= total => {
                            next = p[at];
                            at += (usize::from(p[at + 1]) + 1) * 8;
                        }
                        44 if at + 8 <= total => {
                            next = p[at];
                            first_fragment = u16::from_be_bytes([p[at + 2], p[at + 3]]) >> 3 == 0;
                            at += 8;
                        }
                        _ => break,
                    }
                }
                let ports = match (first_fragment, p.get(at..total)) {
                    (true, Some(rest)) => ports(next, rest),
                    _ => None,
                };
                Ok(Flow {
                    src: addr(8),
                    dst: addr(24),
                    proto: next,
                    sport: ports.map(|x| x.0),
                    dport: ports.map(|x| x.1),
                    len: total,
                    dont_fragment: true,
                })
            }
            v => Err(PacketError::Version(v)),
        }
    }
}

fn ports(proto: u8, l4: &[u8]) -> Option<(u16, u16)> {
    if proto != PROTO_TCP && proto != PROTO_UDP {
        return None;
    }
    let h = l4.get(..4)?;
    Some((
        u16::from_be_bytes([h[0], h[1]]),
        u16::from_be_bytes([h[2], h[3]]),
    ))
}

/// The Internet checksum (RFC 1071) of `data`, starting from `sum`.
fn checksum(mut sum: u32, data: &[u8]) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// Whether an ICMP error may be sent about a packet from `src` (RFC 1122 §3.2.2,
/// RFC 4443 §2.4: never to an unspecified, multicast or broadcast source).
fn may_answer(src: IpAddr) -> bool {
    match src {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    }
}

/// Whether an IPv4 packet is itself an ICMP error (never answered with another).
fn is_icmp_error_v4(p: &[u8], ihl: usize) -> bool {
    p[9] == PROTO_ICMP
        && p.get(ihl)
            .is_some_and(|&t| matches!(t, 3 | 4 | 5 | 11 | 12))
}

/// The ICMP error telling the sender of `packet` that it is over `mtu`: IPv4
/// destination unreachable / fragmentation needed (type 3 code 4, RFC 1191 §4) or
/// ICMPv6 packet too big (type 2, RFC 4443 §3.2), from `from` (this interface's
/// address of that family). `None` where RFC 1122/4443 forbid an answer.
pub fn too_big(packet: &[u8], mtu: u32, from: IpAddr) -> Option<Vec<u8>> {
    let flow = Flow::parse(packet).ok()?;
    if !may_answer(flow.src) {
        return None;
    }
    match (flow.src, from) {
        (IpAddr::V4(dst), IpAddr::V4(src)) => {
            let ihl = usize::from(packet[0] & 0x0F) * 4;
            if is_icmp_error_v4(packet, ihl)
                || u16::from_be_bytes([packet[6], packet[7]]) & 0x1FFF != 0
            {
                return None;
            }
            // RFC 792: the original header and its first 8 data bytes.
            let quoted = &packet[..(ihl + 8).min(flow.len)];
            let mut icmp = vec![3, 4, 0, 0, 0, 0];
            icmp.extend_from_slice(&u16::try_from(mtu).unwrap_or(u16::MAX).to_be_bytes());
            icmp.extend_from_slice(quoted);
            let c = checksum(0, &icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            Some(ipv4(src, dst, PROTO_ICMP, &icmp))
        }
        (IpAddr::V6(dst), IpAddr::V6(src)) => {
            if flow.proto == PROTO_ICMPV6 {
                let at = IPV6_HEADER;
                if packet.get(at).is_some_and(|&t| t < 128) {
                    return None;
                }
            }
            // RFC 4443 §2.4(c): as much of the packet as fits in the minimum MTU.
            let quoted = &packet[..flow.len.min(1280 - IPV6_HEADER - 8)];
            let mut icmp = vec![2, 0, 0, 0];
            icmp.extend_from_slice(&mtu.to_be_bytes());
            icmp.extend_from_slice(quoted);
            let mut pseudo = 0u32;
            for a in [src.octets(), dst.octets()] {
                for c in a.chunks_exact(2) {
                    pseudo += u32::from(u16::from_be_bytes([c[0], c[1]]));
                }
            }
            pseudo += icmp.len() as u32 + u32::from(PROTO_ICMPV6);
            let c = checksum(pseudo, &icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            let mut out = vec![0x60, 0, 0, 0];
            out.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
            out.extend_from_slice(&[PROTO_ICMPV6, 64]);
            out.extend_from_slice(&src.octets());
            out.extend_from_slice(&dst.octets());
            out.extend_from_slice(&icmp);
            Some(out)
        }
        _ => None,
    }
}

/// An IPv4 packet with a 20-byte header around `payload`.
fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let c = checksum(0, &h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

/// Splits an IPv4 packet without DF into fragments of at most `mtu` bytes (RFC 791
/// §3.2; options are copied into every fragment, a simplification RFC 791 allows for
/// the options that have the copy bit and natm applies to all). `None` if the packet
/// has DF set, is not IPv4, or `mtu` leaves no room for 8 data bytes.
pub fn fragment_v4(packet: &[u8], mtu: usize) -> Option<Vec<Vec<u8>>> {
    let flow = Flow::parse(packet).ok()?;
    if !flow.src.is_ipv4() || flow.dont_fragment {
        return None;
    }
    let ihl = usize::from(packet[0] & 0x0F) * 4;
    let step = mtu.checked_sub(ihl)? & !7;
    if step == 0 {
        return None;
    }
    let field = u16::from_be_bytes([packet[6], packet[7]]);
    let (base, more) = (usize::from(field & 0x1FFF) * 8, field & 0x2000 != 0);
    let data = &packet[ihl..flow.len];
    let mut out = Vec::with_capacity(data.len().div_ceil(step));
    for (i, chunk) in data.chunks(step).enumerate() {
        let last = (i + 1) * step >= data.len();
        let mut f = Vec::with_capacity(ihl + chunk.len());
        f.extend_from_slice(&packet[..ihl]);
        f.extend_from_slice(chunk);
        let total = u16::try_from(f.len()).ok()?;
        f[2..4].copy_from_slice(&total.to_be_bytes());
        let off = u16::try_from((base + i * step) / 8).ok()?;
        let mf = if last && !more { 0 } else { 0x2000 };
        f[6..8].copy_from_slice(&(off | mf).to_be_bytes());
        f[10..12].copy_from_slice(&[0, 0]);
        let c = checksum(0, &f[..ihl]);
        f[10..12].copy_from_slice(&c.to_be_bytes());
        out.push(f);
    }
    Some(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A UDP/IPv4 packet of `total` bytes from 10.0.0.1:40000 to 10.0.0.2:`dport`.
    pub(crate) fn udp4(total: usize, dport: u16, df: bool) -> Vec<u8> {
        let mut udp = vec![0x9c, 0x40];
        udp.extend_from_slice(&dport.to_be_bytes());
        udp.extend_from_slice(&((total - 20) as u16).to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.resize(total - 20, 0xAB);
        let mut p = ipv4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            PROTO_UDP,
            &udp,
        );
        if df {
            p[6] = 0x40;
            p[10..12].copy_from_slice(&[0, 0]);
            let c = checksum(0, &p[..20]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
        }
        p
    }

    /// A TCP/IPv6 packet from fd00::1 to fd00::2, `payload` bytes after the header.
    pub(crate) fn tcp6(payload: usize, dport: u16) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(payload as u16).to_be_bytes());
        p.extend_from_slice(&[PROTO_TCP, 64]);
        p.extend_from_slice(&"fd00::1".parse::<Ipv6Addr>().expect("ip").octets());
        p.extend_from_slice(&"fd00::2".parse::<Ipv6Addr>().expect("ip").octets());
        let mut tcp = vec![0x9c, 0x40];
        tcp.extend_from_slice(&dport.to_be_bytes());
        tcp.resize(payload, 0);
        p.extend_from_slice(&tcp);
        p
    }

    #[test]
    fn flows_of_v4_and_v6() {
        let f = Flow::parse(&udp4(100, 5004, true)).expect("v4");
        assert_eq!(
            (f.proto, f.sport, f.dport, f.len, f.dont_fragment),
            (17, Some(40000), Some(5004), 100, true)
        );
        let f = Flow::parse(&tcp6(60, 80)).expect("v6");
        assert_eq!((f.proto, f.dport, f.len), (6, Some(80), 100));
        assert_eq!(f.dst, "fd00::2".parse::<IpAddr>().expect("ip"));
    }

    #[test]
    fn bad_packets_are_typed_errors() {
        assert_eq!(Flow::parse(&[]), Err(PacketError::Truncated(0)));
        assert_eq!(Flow::parse(&[0x50; 40]), Err(PacketError::Version(5)));
        let p = udp4(100, 1, false);
        assert_eq!(Flow::parse(&p[..99]), Err(PacketError::Truncated(99)));
        let mut p = udp4(100, 1, false);
        p[0] = 0x44;
        assert_eq!(Flow::parse(&p), Err(PacketError::HeaderLength));
    }

    #[test]
    fn icmp_fragmentation_needed_quotes_the_packet_with_good_checksums() {
        let p = udp4(1400, 9, true);
        let e = too_big(&p, 1000, "10.0.0.2".parse().expect("ip")).expect("an ICMP error");
        assert_eq!(checksum(0, &e[..20]), 0, "IP header checksum");
        assert_eq!(checksum(0, &e[20..]), 0, "ICMP checksum");
        assert_eq!((e[20], e[21]), (3, 4));
        assert_eq!(u16::from_be_bytes([e[26], e[27]]), 1000);
        assert_eq!(&e[28..], &p[..28]);
        assert_eq!(&e[16..20], &[10, 0, 0, 1], "back to the sender");
        // Never an error about an error.
        assert_eq!(too_big(&e, 500, "10.0.0.1".parse().expect("ip")), None);
    }

    #[test]
    fn icmpv6_packet_too_big_has_a_valid_checksum() {
        let p = tcp6(2000, 80);
        let e = too_big(&p, 1500, "fd00::2".parse().expect("ip")).expect("an ICMPv6 error");
        assert_eq!(e.len(), 1280);
        assert_eq!((e[40], e[41]), (2, 0));
        assert_eq!(u32::from_be_bytes([e[44], e[45], e[46], e[47]]), 1500);
        let mut pseudo = 0u32;
        for c in e[8..40].chunks_exact(2) {
            pseudo += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        pseudo += (e.len() - 40) as u32 + 58;
        assert_eq!(checksum(pseudo, &e[40..]), 0);
    }

    #[test]
    fn fragments_reassemble_to_the_original() {
        let p = udp4(3000, 9, false);
        let frags = fragment_v4(&p, 1280).expect("fragmentable");
        assert_eq!(frags.len(), 3);
        let mut data = Vec::new();
        for (i, f) in frags.iter().enumerate() {
            assert!(f.len() <= 1280);
            assert_eq!(checksum(0, &f[..20]), 0);
            let field = u16::from_be_bytes([f[6], f[7]]);
            assert_eq!(usize::from(field & 0x1FFF) * 8, data.len());
            assert_eq!(field & 0x2000 != 0, i < 2);
            data.extend_from_slice(&f[20..]);
        }
        assert_eq!(data, &p[20..]);
        assert_eq!(fragment_v4(&udp4(3000, 9, true), 1280), None);
    }
}
