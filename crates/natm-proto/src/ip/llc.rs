//! RFC 2684 §4.1 LLC/SNAP encapsulation of routed PDUs: the 8-byte header in front of
//! every IP packet and ATMARP packet on a VC (RFC 2225 §5 makes it the default for
//! Classical IP over ATM, and Linux CLIP sends and expects it).
//!
//! ```text
//! AA AA 03 | 00 00 00 | EtherType (2)
//!  LLC       OUI        PID
//! ```

use thiserror::Error;

/// The header's length in bytes.
pub const HEADER_LEN: usize = 8;

/// The LLC (DSAP, SSAP, control) and OUI every routed non-ISO PDU carries.
const PREFIX: [u8; 6] = [0xAA, 0xAA, 0x03, 0x00, 0x00, 0x00];

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// EtherType of ARP, which ATMARP and InATMARP use (RFC 2225 §8.7).
pub const ETHERTYPE_ARP: u16 = 0x0806;

/// What an LLC/SNAP-encapsulated PDU carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payload {
    /// An IPv4 packet.
    Ipv4,
    /// An IPv6 packet.
    Ipv6,
    /// An ATMARP or InATMARP packet.
    Arp,
}

impl Payload {
    /// The EtherType in the SNAP PID.
    pub const fn ethertype(self) -> u16 {
        match self {
            Payload::Ipv4 => ETHERTYPE_IPV4,
            Payload::Ipv6 => ETHERTYPE_IPV6,
            Payload::Arp => ETHERTYPE_ARP,
        }
    }

    /// The header for this payload.
    pub fn header(self) -> [u8; HEADER_LEN] {
        let mut h = [0; HEADER_LEN];
        emit(self, &mut h);
        h
    }
}

/// Why a frame is not an LLC/SNAP PDU natm carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum LlcError {
    /// Shorter than the 8-byte header.
    #[error("frame of {0} bytes is shorter than the 8-byte LLC/SNAP header")]
    Truncated(usize),
    /// The LLC or OUI is not AA-AA-03 00-00-00 (e.g. an ISO PDU, or VC-multiplexed data).
    #[error("not an LLC/SNAP routed PDU (header {0:02x?})")]
    NotSnap([u8; 6]),
    /// An EtherType other than IPv4, IPv6 and ARP.
    #[error("EtherType {0:#06x} is not carried (only IPv4, IPv6 and ATMARP)")]
    EtherType(u16),
}

/// Splits `frame` into what it carries and the payload after the header.
pub fn parse(frame: &[u8]) -> Result<(Payload, &[u8]), LlcError> {
    let (head, rest) = frame
        .split_first_chunk::<HEADER_LEN>()
        .ok_or(LlcError::Truncated(frame.len()))?;
    let (prefix, pid) = head.split_at(6);
    if prefix != PREFIX {
        let mut p = [0; 6];
        p.copy_from_slice(prefix);
        return Err(LlcError::NotSnap(p));
    }
    let ethertype = u16::from_be_bytes([pid[0], pid[1]]);
    let payload = match ethertype {
        ETHERTYPE_IPV4 => Payload::Ipv4,
        ETHERTYPE_IPV6 => Payload::Ipv6,
        ETHERTYPE_ARP => Payload::Arp,
        other => return Err(LlcError::EtherType(other)),
    };
    Ok((payload, rest))
}

/// Writes the header for `payload` into the first 8 bytes of `buf`.
///
/// # Panics
/// If `buf` is shorter than [`HEADER_LEN`] (a caller bug).
pub fn emit(payload: Payload, buf: &mut [u8]) {
    buf[..6].copy_from_slice(&PREFIX);
    buf[6..HEADER_LEN].copy_from_slice(&payload.ethertype().to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 2684 §4.1's header for an IPv4 PDU, byte for byte.
    const IPV4_HEADER: [u8; 8] = [0xAA, 0xAA, 0x03, 0x00, 0x00, 0x00, 0x08, 0x00];

    #[test]
    fn golden_ipv4_header_round_trips() {
        assert_eq!(Payload::Ipv4.header(), IPV4_HEADER);
        let mut frame = IPV4_HEADER.to_vec();
        frame.extend_from_slice(&[0x45, 0]);
        assert_eq!(parse(&frame), Ok((Payload::Ipv4, &[0x45, 0][..])));
    }

    #[test]
    fn every_payload_round_trips() {
        for p in [Payload::Ipv4, Payload::Ipv6, Payload::Arp] {
            assert_eq!(parse(&p.header()), Ok((p, &[][..])));
        }
    }

    #[test]
    fn bad_frames_are_typed_errors() {
        assert_eq!(parse(&IPV4_HEADER[..7]), Err(LlcError::Truncated(7)));
        let mut iso = IPV4_HEADER;
        iso[0] = 0xFE;
        assert!(matches!(parse(&iso), Err(LlcError::NotSnap(_))));
        let mut other = IPV4_HEADER;
        other[6..].copy_from_slice(&0x8137u16.to_be_bytes());
        assert_eq!(parse(&other), Err(LlcError::EtherType(0x8137)));
    }
}
