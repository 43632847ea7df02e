//! From a frame captured on a Linux interface down to the UDP datagram it carries:
//! the link header, IPv4 or IPv6, then UDP. `natm capture` keeps the datagrams whose
//! payload is a natm VC frame or cell train (`docs/wire.md`).
//!
//! - Link: [`Framing::Ethernet`] for Ethernet-like devices, which include Linux's
//!   loopback (`lo` has ARPHRD_LOOPBACK but an AF_PACKET raw socket sees a 14-octet
//!   Ethernet header with zero MACs there) and veth; IEEE 802.1Q/802.1ad tags are
//!   skipped. [`Framing::RawIp`] for devices without a link header (tun, ARPHRD_NONE):
//!   the version nibble says IPv4 or IPv6.
//! - IPv4 (RFC 791): the total length trims Ethernet padding; fragments are refused
//!   (a later fragment has no UDP header, a first one not the whole datagram).
//! - IPv6 (RFC 8200 §4): hop-by-hop, routing and destination options headers are
//!   walked to the UDP header; a fragment header is refused as above.
//! - UDP (RFC 768): its length field must fit what the IP layer carries.
//!
//! Every function here returns an error, never panics, on any input.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use thiserror::Error;

/// Octets of an Ethernet header.
pub const ETHERNET_HEADER_LEN: usize = 14;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// EtherType of an IEEE 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of an IEEE 802.1ad service tag.
pub const ETHERTYPE_QINQ: u16 = 0x88A8;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// Octets of a UDP header.
pub const UDP_HEADER_LEN: usize = 8;

const IPV4_MIN_HEADER: usize = 20;
const IPV6_HEADER: usize = 40;
/// IPv6 extension headers with the generic (next header, length in 8 octets − 1)
/// layout that may precede UDP: hop-by-hop options, routing, destination options.
const IPV6_EXT_HEADERS: [u8; 3] = [0, 43, 60];
const IPV6_FRAGMENT: u8 = 44;

/// What comes before the IP header in a captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Framing {
    /// An Ethernet header (Ethernet, veth, and Linux loopback as AF_PACKET sees it).
    Ethernet,
    /// No link header: the frame starts with the IP header.
    RawIp,
}

/// A protocol layer, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The link header.
    Link,
    /// The IPv4 header.
    Ipv4,
    /// The IPv6 header or its extension headers.
    Ipv6,
    /// The UDP header.
    Udp,
}

impl core::fmt::Display for Layer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Layer::Link => "link",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Udp => "UDP",
        })
    }
}

/// Why a captured frame is not a whole UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum LinkError {
    /// The frame ends inside a header, or a length field points past its end.
    #[error("frame cut off in the {0} header")]
    Truncated(Layer),
    /// A link frame of another protocol (ARP, ...).
    #[error("EtherType {0:#06x} is neither IPv4 nor IPv6")]
    NotIp(u16),
    /// An IP version other than 4 or 6 (or one the EtherType does not name).
    #[error("IP version {0} where 4 or 6 was expected")]
    IpVersion(u8),
    /// An IP packet of another protocol (TCP, ICMP, ...).
    #[error("IP protocol {0} is not UDP")]
    NotUdp(u8),
    /// An IP fragment: the UDP datagram is not whole in this frame.
    #[error("IP fragment: the datagram is not whole")]
    Fragment,
    /// A length field smaller than its own header.
    #[error("{0} length field is shorter than its header")]
    BadLength(Layer),
}

/// A UDP datagram found in a captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// The UDP payload (without Ethernet padding).
    pub payload: &'a [u8],
}

/// The UDP datagram in `frame`, a frame captured with link header `framing`.
pub fn udp_datagram(framing: Framing, frame: &[u8]) -> Result<Datagram<'_>, LinkError> {
    let (ethertype, ip) = match framing {
        Framing::Ethernet => ethernet_payload(frame)?,
        Framing::RawIp => match frame.first().map(|b| b >> 4) {
            Some(4) => (ETHERTYPE_IPV4, frame),
            Some(6) => (ETHERTYPE_IPV6, frame),
            Some(v) => return Err(LinkError::IpVersion(v)),
            None => return Err(LinkError::Truncated(Layer::Link)),
        },
    };
    let (src, dst, udp) = match ethertype {
        ETHERTYPE_IPV4 => ipv4_payload(ip)?,
        ETHERTYPE_IPV6 => ipv6_payload(ip)?,
        other => return Err(LinkError::NotIp(other)),
    };
    let (sport, dport, payload) = udp_payload(udp)?;
    Ok(Datagram {
        src: SocketAddr::new(src, sport),
        dst: SocketAddr::new(dst, dport),
        payload,
    })
}

fn be16(b: &[u8], at: usize, layer: Layer) -> Result<u16, LinkError> {
    b.get(at..at + 2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or(LinkError::Truncated(layer))
}

/// The EtherType and payload after the Ethernet header and any VLAN tags.
fn ethernet_payload(frame: &[u8]) -> Result<(u16, &[u8]), LinkError> {
    let mut at = ETHERNET_HEADER_LEN - 2;
    let mut ethertype = be16(frame, at, Layer::Link)?;
    while ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        at += 4;
        ethertype = be16(frame, at, Layer::Link)?;
    }
    Ok((ethertype, &frame[at + 2..]))
}

/// Addresses and UDP segment of an IPv4 packet.
fn ipv4_payload(ip: &[u8]) -> Result<(IpAddr, IpAddr, &[u8]), LinkError> {
    let header: &[u8; IPV4_MIN_HEADER] =
        ip.first_chunk().ok_or(LinkError::Truncated(Layer::Ipv4))?;
    if header[0] >> 4 != 4 {
        return Err(LinkError::IpVersion(header[0] >> 4));
    }
    let ihl = usize::from(header[0] & 0x0F) * 4;
    let total = usize::from(u16::from_be_bytes([header[2], header[3]]));
    if ihl < IPV4_MIN_HEADER || total < ihl {
        return Err(LinkError::BadLength(Layer::Ipv4));
    }
    // Flags and fragment offset: MF set or a non-zero offset is a fragment.
    if u16::from_be_bytes([header[6], header[7]]) & 0x3FFF != 0 {
        return Err(LinkError::Fragment);
    }
    if header[9] != IPPROTO_UDP {
        return Err(LinkError::NotUdp(header[9]));
    }
    let packet = ip.get(..total).ok_or(LinkError::Truncated(Layer::Ipv4))?;
    let addr = |at: usize| IpAddr::V4(Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]));
    Ok((addr(12), addr(16), &packet[ihl..]))
}

/// Addresses and UDP segment of an IPv6 packet, after its extension headers.
fn ipv6_payload(ip: &[u8]) -> Result<(IpAddr, IpAddr, &[u8]), LinkError> {
    let header: &[u8; IPV6_HEADER] = ip.first_chunk().ok_or(LinkError::Truncated(Layer::Ipv6))?;
    if header[0] >> 4 != 6 {
        return Err(LinkError::IpVersion(header[0] >> 4));
    }
    let payload_len = usize::from(u16::from_be_bytes([header[4], header[5]]));
    let packet = ip
        .get(..IPV6_HEADER + payload_len)
        .ok_or(LinkError::Truncated(Layer::Ipv6))?;
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&header[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(a))
    };
    let mut next = header[6];
    let mut at = IPV6_HEADER;
    while IPV6_EXT_HEADERS.contains(&next) {
        let ext = packet
            .get(at..at + 2)
            .ok_or(LinkError::Truncated(Layer::Ipv6))?;
        next = ext[0];
        at += (usize::from(ext[1]) + 1) * 8;
    }
    if next == IPV6_FRAGMENT {
        return Err(LinkError::Fragment);
    }
    if next != IPPROTO_UDP {
        return Err(LinkError::NotUdp(next));
    }
    let udp = packet.get(at..).ok_or(LinkError::Truncated(Layer::Ipv6))?;
    Ok((addr(8), addr(24), udp))
}

/// Ports and payload of a UDP segment.
fn udp_payload(udp: &[u8]) -> Result<(u16, u16, &[u8]), LinkError> {
    let header: &[u8; UDP_HEADER_LEN] =
        udp.first_chunk().ok_or(LinkError::Truncated(Layer::Udp))?;
    let len = usize::from(u16::from_be_bytes([header[4], header[5]]));
    if len < UDP_HEADER_LEN {
        return Err(LinkError::BadLength(Layer::Udp));
    }
    let payload = udp
        .get(UDP_HEADER_LEN..len)
        .ok_or(LinkError::Truncated(Layer::Udp))?;
    Ok((
        u16::from_be_bytes([header[0], header[1]]),
        u16::from_be_bytes([header[2], header[3]]),
        payload,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend_from_slice(&sport.to_be_bytes());
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&((UDP_HEADER_LEN + payload.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(payload);
        u
    }

    fn ipv4(proto: u8, frag: u16, body: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, 0];
        p.extend_from_slice(&((20 + body.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&frag.to_be_bytes());
        p.extend_from_slice(&[64, proto, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2]);
        p.extend_from_slice(body);
        p
    }

    fn ipv6(next: u8, body: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(body.len() as u16).to_be_bytes());
        p.extend_from_slice(&[next, 64]);
        p.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        p.extend_from_slice(&"fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(body);
        p
    }

    fn ethernet(ethertype: u16, body: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    const NATM: &[u8] = &[0xC4, 0, 0, 5, 1, 2, 3, 4];

    #[test]
    fn loopback_ipv4_frame_gives_the_datagram() {
        let frame = ethernet(ETHERTYPE_IPV4, &ipv4(17, 0x4000, &udp(4000, 5000, NATM)));
        let d = udp_datagram(Framing::Ethernet, &frame).unwrap();
        assert_eq!(d.src, "127.0.0.1:4000".parse().unwrap());
        assert_eq!(d.dst, "127.0.0.2:5000".parse().unwrap());
        assert_eq!(d.payload, NATM);
    }

    #[test]
    fn ethernet_padding_and_vlan_tags_are_skipped() {
        let mut tagged = vec![0x81, 0x00, 0x00, 0x07, 0x08, 0x00];
        tagged.extend_from_slice(&ipv4(17, 0, &udp(1, 2, &[0xC0, 0, 0, 0])));
        let mut frame = ethernet(ETHERTYPE_QINQ, &[0x00, 0x09]);
        frame.extend_from_slice(&tagged);
        frame.extend_from_slice(&[0xEE; 12]); // padding to the 60-octet minimum
        let d = udp_datagram(Framing::Ethernet, &frame).unwrap();
        assert_eq!(d.payload, &[0xC0, 0, 0, 0]);
    }

    #[test]
    fn ipv6_with_extension_headers_gives_the_datagram() {
        // Hop-by-hop (8 octets) then destination options (16 octets), then UDP.
        let mut body = vec![60, 0, 1, 4, 0, 0, 0, 0];
        body.extend_from_slice(&[17, 1]);
        body.extend_from_slice(&[1, 12]);
        body.extend_from_slice(&[0; 12]);
        body.extend_from_slice(&udp(7000, 7001, NATM));
        let frame = ethernet(ETHERTYPE_IPV6, &ipv6(0, &body));
        let d = udp_datagram(Framing::Ethernet, &frame).unwrap();
        assert_eq!(d.src, "[::1]:7000".parse().unwrap());
        assert_eq!(d.dst, "[fe80::1]:7001".parse().unwrap());
        assert_eq!(d.payload, NATM);
        let raw = ipv6(17, &udp(7000, 7001, NATM));
        assert_eq!(udp_datagram(Framing::RawIp, &raw).unwrap().payload, NATM);
    }

    #[test]
    fn raw_ip_frames_are_read_by_their_version() {
        let raw = ipv4(17, 0, &udp(9, 10, NATM));
        assert_eq!(udp_datagram(Framing::RawIp, &raw).unwrap().payload, NATM);
        assert_eq!(
            udp_datagram(Framing::RawIp, &[0x50; 40]),
            Err(LinkError::IpVersion(5))
        );
        assert_eq!(
            udp_datagram(Framing::RawIp, &[]),
            Err(LinkError::Truncated(Layer::Link))
        );
    }

    #[test]
    fn other_protocols_and_fragments_are_refused() {
        let arp = ethernet(0x0806, &[0; 28]);
        assert_eq!(
            udp_datagram(Framing::Ethernet, &arp),
            Err(LinkError::NotIp(0x0806))
        );
        let tcp = ethernet(ETHERTYPE_IPV4, &ipv4(6, 0, &[0; 20]));
        assert_eq!(
            udp_datagram(Framing::Ethernet, &tcp),
            Err(LinkError::NotUdp(6))
        );
        let first_fragment = ethernet(ETHERTYPE_IPV4, &ipv4(17, 0x2000, &udp(1, 2, NATM)));
        assert_eq!(
            udp_datagram(Framing::Ethernet, &first_fragment),
            Err(LinkError::Fragment)
        );
        let v6_fragment = ethernet(ETHERTYPE_IPV6, &ipv6(44, &[17, 0, 0, 1, 0, 0, 0, 1]));
        assert_eq!(
            udp_datagram(Framing::Ethernet, &v6_fragment),
            Err(LinkError::Fragment)
        );
        let icmp6 = ethernet(ETHERTYPE_IPV6, &ipv6(58, &[0; 8]));
        assert_eq!(
            udp_datagram(Framing::Ethernet, &icmp6),
            Err(LinkError::NotUdp(58))
        );
    }

    #[test]
    fn truncated_frames_name_the_layer() {
        let frame = ethernet(ETHERTYPE_IPV4, &ipv4(17, 0, &udp(1, 2, NATM)));
        let cut = |n: usize| udp_datagram(Framing::Ethernet, &frame[..n]);
        assert_eq!(cut(13), Err(LinkError::Truncated(Layer::Link)));
        assert_eq!(cut(14 + 19), Err(LinkError::Truncated(Layer::Ipv4)));
        // The IPv4 total length says more than the frame holds.
        assert_eq!(cut(frame.len() - 1), Err(LinkError::Truncated(Layer::Ipv4)));
        let frame6 = ethernet(ETHERTYPE_IPV6, &ipv6(17, &udp(1, 2, NATM)));
        assert_eq!(
            udp_datagram(Framing::Ethernet, &frame6[..14 + 39]),
            Err(LinkError::Truncated(Layer::Ipv6))
        );
        // A UDP length beyond what IP carries.
        let mut long = udp(1, 2, NATM);
        long[5] += 1;
        let frame = ethernet(ETHERTYPE_IPV4, &ipv4(17, 0, &long));
        assert_eq!(
            udp_datagram(Framing::Ethernet, &frame),
            Err(LinkError::Truncated(Layer::Udp))
        );
        let mut short = udp(1, 2, NATM);
        short[5] = 7;
        let frame = ethernet(ETHERTYPE_IPV4, &ipv4(17, 0, &short));
        assert_eq!(
            udp_datagram(Framing::Ethernet, &frame),
            Err(LinkError::BadLength(Layer::Udp))
        );
        let mut ihl = ipv4(17, 0, &udp(1, 2, NATM));
        ihl[0] = 0x44;
        assert_eq!(
            udp_datagram(Framing::RawIp, &ihl),
            Err(LinkError::BadLength(Layer::Ipv4))
        );
    }

    proptest! {
        #[test]
        fn random_frames_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            ethertype in prop_oneof![Just(ETHERTYPE_IPV4), Just(ETHERTYPE_IPV6), Just(ETHERTYPE_VLAN), any::<u16>()],
        ) {
            let _ = udp_datagram(Framing::RawIp, &bytes);
            let _ = udp_datagram(Framing::Ethernet, &bytes);
            let framed = ethernet(ethertype, &bytes);
            if let Ok(d) = udp_datagram(Framing::Ethernet, &framed) {
                prop_assert!(d.payload.len() + UDP_HEADER_LEN <= bytes.len());
            }
        }

        #[test]
        fn any_udp_payload_comes_back_whole(
            payload in proptest::collection::vec(any::<u8>(), 0..1500),
            v6 in any::<bool>(),
            sport in any::<u16>(),
            dport in any::<u16>(),
        ) {
            let segment = udp(sport, dport, &payload);
            let frame = if v6 {
                ethernet(ETHERTYPE_IPV6, &ipv6(17, &segment))
            } else {
                ethernet(ETHERTYPE_IPV4, &ipv4(17, 0, &segment))
            };
            let d = udp_datagram(Framing::Ethernet, &frame).unwrap();
            prop_assert_eq!(d.payload, &payload[..]);
            prop_assert_eq!((d.src.port(), d.dst.port()), (sport, dport));
        }
    }
}
