//! ATMARP and InATMARP packets, RFC 2225 §8.7, parse and emit.
//!
//! ```text
//!  ar$hrd 16  hardware type, 0x0013 (ATM Forum)
//!  ar$pro 16  protocol type, 0x0800 (IPv4; 0x86DD for IPv6, see below)
//!  ar$shtl 8  type & length of the source ATM number (q)
//!  ar$sstl 8  type & length of the source ATM subaddress (r)
//!  ar$op  16  operation: 1 request, 2 reply, 8 InARP request, 9 InARP reply, 10 NAK
//!  ar$spln 8  length of the source protocol address (s)
//!  ar$thtl 8  type & length of the target ATM number (x)
//!  ar$tstl 8  type & length of the target ATM subaddress (y)
//!  ar$tpln 8  length of the target protocol address (z)
//!  ar$sha q, ar$ssa r, ar$spa s, ar$tha x, ar$tsa y, ar$tpa z
//! ```
//!
//! A type & length octet has bit 0x40 set for an E.164 number (its digits in IA5) and
//! clear for an ATM Forum NSAP-format address (AESA, 20 octets); bit 0x80 is reserved
//! (zero) and the low six bits are the length. Lengths of zero mean "absent" (an
//! ARP_REQUEST's target ATM address, an InARP_REQUEST's target protocol address).
//!
//! Departure: RFC 2225 resolves IPv4 only. natm resolves IPv6 addresses with the same
//! packet, `ar$pro` = 0x86DD and 16-octet protocol addresses (the shape RFC 2225's
//! variable-length fields allow), instead of RFC 2492's neighbour discovery over ATM.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;

use crate::wire::addr::{Aesa, AtmAddr, E164};

/// ar$hrd of ATM Forum addresses.
pub const HRD_ATM_FORUM: u16 = 0x0013;
/// Length of the fixed part before the addresses.
pub const FIXED_LEN: usize = 12;
/// Bit of a type & length octet saying "E.164 number".
const TL_E164: u8 = 0x40;
/// The reserved bit of a type & length octet.
const TL_RESERVED: u8 = 0x80;
/// The length bits of a type & length octet.
const TL_LEN: u8 = 0x3F;

/// ar$op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// ARP_REQUEST (1): resolve the target protocol address; a client's request for
    /// itself also registers it with the server (RFC 2225 §8.4.1).
    Request,
    /// ARP_REPLY (2).
    Reply,
    /// InARP_REQUEST (8): "who are you" on a VC (RFC 2390, RFC 2225 §8.3).
    InRequest,
    /// InARP_REPLY (9).
    InReply,
    /// ARP_NAK (10): the server knows no such address.
    Nak,
}

impl Op {
    /// The wire value.
    pub const fn code(self) -> u16 {
        match self {
            Op::Request => 1,
            Op::Reply => 2,
            Op::InRequest => 8,
            Op::InReply => 9,
            Op::Nak => 10,
        }
    }

    fn from_code(code: u16) -> Option<Op> {
        Some(match code {
            1 => Op::Request,
            2 => Op::Reply,
            8 => Op::InRequest,
            9 => Op::InReply,
            10 => Op::Nak,
            _ => return None,
        })
    }
}

/// Why bytes are not an ATMARP packet natm accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ArpError {
    /// Shorter than the fixed part or than the lengths it declares.
    #[error("ATMARP packet of {got} bytes, {need} needed")]
    Truncated {
        /// Bytes present.
        got: usize,
        /// Bytes the header declares.
        need: usize,
    },
    /// ar$hrd is not ATM Forum (0x0013).
    #[error("ar$hrd {0:#06x} is not ATM Forum (0x0013)")]
    Hardware(u16),
    /// ar$pro is neither IPv4 nor IPv6.
    #[error("ar$pro {0:#06x} is neither IPv4 nor IPv6")]
    Protocol(u16),
    /// An ar$op natm does not know.
    #[error("ar$op {0} is not request, reply, InARP or NAK")]
    Op(u16),
    /// A protocol address whose length is neither 0 nor the protocol's (4 or 16).
    #[error("protocol address of {0} octets for this ar$pro")]
    ProtocolLength(u8),
    /// An ATM address field that is no AESA or E.164 number (or the reserved bit set).
    #[error("ATM address field (type & length {0:#04x}) is not a 20-octet AESA or a 1-15 digit E.164 number")]
    AtmAddress(u8),
    /// An ATM address natm cannot put on the wire (a PVC has none).
    #[error("{0} is a PVC, which has no ATM address to put in ATMARP")]
    Unencodable(AtmAddr),
}

/// An ATMARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// ar$op.
    pub op: Op,
    /// Whether the protocol addresses are IPv6 (ar$pro 0x86DD) rather than IPv4.
    pub ipv6: bool,
    /// The sender's ATM address (ar$sha and ar$ssa), if given.
    pub source_atm: Option<AtmAddr>,
    /// The sender's protocol address (ar$spa), if given.
    pub source_ip: Option<IpAddr>,
    /// The target's ATM address (ar$tha and ar$tsa), if given.
    pub target_atm: Option<AtmAddr>,
    /// The target's protocol address (ar$tpa), if given.
    pub target_ip: Option<IpAddr>,
}

/// An ATM number field: its type bit and its octets.
type NumberField<'a> = Option<(u8, &'a [u8])>;

/// An ATM address as the (number, subaddress) fields carry it.
fn atm_fields(a: Option<&AtmAddr>) -> Result<(NumberField<'_>, Option<&[u8]>), ArpError> {
    match a {
        None => Ok((None, None)),
        Some(AtmAddr::Aesa(aesa)) => Ok((Some((0, aesa.as_bytes())), None)),
        Some(AtmAddr::E164 { number, subaddress }) => Ok((
            Some((TL_E164, number.as_str().as_bytes())),
            subaddress.as_ref().map(|s| &s.as_bytes()[..]),
        )),
        Some(pvc @ AtmAddr::Pvc(_)) => Err(ArpError::Unencodable(*pvc)),
    }
}

fn tl(f: NumberField<'_>) -> u8 {
    // Lengths are at most 20: an AESA, or 15 E.164 digits.
    f.map_or(0, |(ty, b)| ty | (b.len() as u8 & TL_LEN))
}

fn ip_bytes(ip: &Option<IpAddr>) -> Vec<u8> {
    match ip {
        None => Vec::new(),
        Some(IpAddr::V4(a)) => a.octets().to_vec(),
        Some(IpAddr::V6(a)) => a.octets().to_vec(),
    }
}

impl Repr {
    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> Result<usize, ArpError> {
        Ok(self.to_bytes()?.len())
    }

    /// The packet's bytes (without the LLC/SNAP header).
    pub fn to_bytes(&self) -> Result<Vec<u8>, ArpError> {
        let (sha, ssa) = atm_fields(self.source_atm.as_ref())?;
        let (tha, tsa) = atm_fields(self.target_atm.as_ref())?;
        let spa = ip_bytes(&self.source_ip);
        let tpa = ip_bytes(&self.target_ip);
        let pro = if self.ipv6 { 0x86DDu16 } else { 0x0800 };
        let mut out = Vec::with_capacity(FIXED_LEN + 2 * 40 + spa.len() + tpa.len());
        out.extend_from_slice(&HRD_ATM_FORUM.to_be_bytes());
        out.extend_from_slice(&pro.to_be_bytes());
        out.push(tl(sha));
        out.push(ssa.map_or(0, |s| s.len() as u8));
        out.extend_from_slice(&self.op.code().to_be_bytes());
        out.push(spa.len() as u8);
        out.push(tl(tha));
        out.push(tsa.map_or(0, |s| s.len() as u8));
        out.push(tpa.len() as u8);
        for part in [
            sha.map_or(&[][..], |(_, b)| b),
            ssa.unwrap_or_default(),
            &spa,
            tha.map_or(&[][..], |(_, b)| b),
            tsa.unwrap_or_default(),
            &tpa,
        ] {
            out.extend_from_slice(part);
        }
        Ok(out)
    }

    /// Parses a packet (the bytes after the LLC/SNAP header). Bytes past the declared
    /// fields are ignored, as RFC 826 receivers do with Ethernet padding.
    pub fn parse(b: &[u8]) -> Result<Repr, ArpError> {
        let fixed = b.get(..FIXED_LEN).ok_or(ArpError::Truncated {
            got: b.len(),
            need: FIXED_LEN,
        })?;
        let hrd = u16::from_be_bytes([fixed[0], fixed[1]]);
        if hrd != HRD_ATM_FORUM {
            return Err(ArpError::Hardware(hrd));
        }
        let pro = u16::from_be_bytes([fixed[2], fixed[3]]);
        let (ipv6, plen) = match pro {
            0x0800 => (false, 4u8),
            0x86DD => (true, 16u8),
            other => return Err(ArpError::Protocol(other)),
        };
        let (shtl, sstl) = (fixed[4], fixed[5]);
        let opcode = u16::from_be_bytes([fixed[6], fixed[7]]);
        let op = Op::from_code(opcode).ok_or(ArpError::Op(opcode))?;
        let (spln, thtl, tstl, tpln) = (fixed[8], fixed[9], fixed[10], fixed[11]);
        for l in [spln, tpln] {
            if l != 0 && l != plen {
                return Err(ArpError::ProtocolLength(l));
            }
        }
        for t in [shtl, sstl, thtl, tstl] {
            if t & TL_RESERVED != 0 {
                return Err(ArpError::AtmAddress(t));
            }
        }
        let lens = [
            shtl & TL_LEN,
            sstl & TL_LEN,
            spln,
            thtl & TL_LEN,
            tstl & TL_LEN,
            tpln,
        ];
        let need = FIXED_LEN + lens.iter().map(|&l| usize::from(l)).sum::<usize>();
        if b.len() < need {
            return Err(ArpError::Truncated { got: b.len(), need });
        }
        let mut at = FIXED_LEN;
        let mut fields: [&[u8]; 6] = [&[]; 6];
        for (f, &l) in fields.iter_mut().zip(&lens) {
            let end = at + usize::from(l);
            *f = &b[at..end];
            at = end;
        }
        let ip = |f: &[u8]| -> Option<IpAddr> {
            if let Ok(a) = <[u8; 4]>::try_from(f) {
                Some(IpAddr::V4(Ipv4Addr::from(a)))
            } else if let Ok(a) = <[u8; 16]>::try_from(f) {
                Some(IpAddr::V6(Ipv6Addr::from(a)))
            } else {
                None
            }
        };
        Ok(Repr {
            op,
            ipv6,
            source_atm: atm_addr(shtl, fields[0], sstl, fields[1])?,
            source_ip: ip(fields[2]),
            target_atm: atm_addr(thtl, fields[3], tstl, fields[4])?,
            target_ip: ip(fields[5]),
        })
    }
}

/// An ATM address from its number and subaddress fields.
fn atm_addr(ntl: u8, number: &[u8], stl: u8, sub: &[u8]) -> Result<Option<AtmAddr>, ArpError> {
    let subaddress = match sub.len() {
        0 => None,
        _ if stl & TL_E164 != 0 => return Err(ArpError::AtmAddress(stl)),
        _ => Some(aesa(sub).ok_or(ArpError::AtmAddress(stl))?),
    };
    if number.is_empty() {
        return match subaddress {
            None => Ok(None),
            Some(_) => Err(ArpError::AtmAddress(stl)),
        };
    }
    if ntl & TL_E164 != 0 {
        let digits = std::str::from_utf8(number).map_err(|_| ArpError::AtmAddress(ntl))?;
        let number = E164::new(digits).ok_or(ArpError::AtmAddress(ntl))?;
        Ok(Some(AtmAddr::E164 { number, subaddress }))
    } else if subaddress.is_some() {
        // An AESA has no subaddress in natm's model of addresses.
        Err(ArpError::AtmAddress(stl))
    } else {
        Ok(Some(AtmAddr::Aesa(
            aesa(number).ok_or(ArpError::AtmAddress(ntl))?,
        )))
    }
}

fn aesa(b: &[u8]) -> Option<Aesa> {
    Aesa::new(<[u8; Aesa::LEN]>::try_from(b).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e164(s: &str) -> AtmAddr {
        s.parse().expect("test address")
    }

    /// An ARP_REQUEST from +4420001 (10.0.0.1) for 10.0.0.2, by hand from RFC 2225 §8.7.
    const GOLDEN_REQUEST: [u8; 12 + 7 + 4 + 4] = [
        0x00, 0x13, 0x08, 0x00, // hrd, pro
        0x47, 0x00, // shtl: E.164, 7 digits; sstl
        0x00, 0x01, // op: request
        0x04, 0x00, 0x00, 0x04, // spln, thtl, tstl, tpln
        b'4', b'4', b'2', b'0', b'0', b'0', b'1', // sha
        10, 0, 0, 1, // spa
        10, 0, 0, 2, // tpa
    ];

    fn request() -> Repr {
        Repr {
            op: Op::Request,
            ipv6: false,
            source_atm: Some(e164("+4420001")),
            source_ip: Some("10.0.0.1".parse().expect("ip")),
            target_atm: None,
            target_ip: Some("10.0.0.2".parse().expect("ip")),
        }
    }

    #[test]
    fn golden_request_parses_and_emits() {
        assert_eq!(Repr::parse(&GOLDEN_REQUEST), Ok(request()));
        assert_eq!(request().to_bytes().as_deref(), Ok(&GOLDEN_REQUEST[..]));
        assert_eq!(request().buffer_len(), Ok(GOLDEN_REQUEST.len()));
    }

    #[test]
    fn every_op_and_address_kind_round_trips() {
        let aesa: AtmAddr = "47.0005.80ffe1000000f21a3313.0020481a3313.00"
            .parse()
            .expect("aesa");
        let sub = match aesa {
            AtmAddr::Aesa(a) => a,
            _ => unreachable!("parsed as an AESA"),
        };
        let with_sub = match e164("+4420002") {
            AtmAddr::E164 { number, .. } => AtmAddr::E164 {
                number,
                subaddress: Some(sub),
            },
            _ => unreachable!("parsed as E.164"),
        };
        for op in [Op::Request, Op::Reply, Op::InRequest, Op::InReply, Op::Nak] {
            for (ipv6, s, t) in [
                (false, "10.0.0.1", "10.0.0.2"),
                (true, "fd00::1", "fd00::2"),
            ] {
                let r = Repr {
                    op,
                    ipv6,
                    source_atm: Some(aesa),
                    source_ip: Some(s.parse().expect("ip")),
                    target_atm: Some(with_sub),
                    target_ip: Some(t.parse().expect("ip")),
                };
                let bytes = r.to_bytes().expect("encodable");
                assert_eq!(Repr::parse(&bytes), Ok(r));
            }
        }
    }

    #[test]
    fn bad_packets_are_typed_errors() {
        assert!(matches!(
            Repr::parse(&GOLDEN_REQUEST[..11]),
            Err(ArpError::Truncated { .. })
        ));
        assert_eq!(
            Repr::parse(&GOLDEN_REQUEST[..GOLDEN_REQUEST.len() - 1]),
            Err(ArpError::Truncated {
                got: GOLDEN_REQUEST.len() - 1,
                need: GOLDEN_REQUEST.len()
            })
        );
        let mut b = GOLDEN_REQUEST;
        b[1] = 0x01;
        assert_eq!(Repr::parse(&b), Err(ArpError::Hardware(1)));
        let mut b = GOLDEN_REQUEST;
        b[7] = 3;
        assert_eq!(Repr::parse(&b), Err(ArpError::Op(3)));
        let mut b = GOLDEN_REQUEST;
        b[8] = 5;
        assert_eq!(Repr::parse(&b), Err(ArpError::ProtocolLength(5)));
        let mut b = GOLDEN_REQUEST;
        b[12] = b'x';
        assert_eq!(Repr::parse(&b), Err(ArpError::AtmAddress(0x47)));
        let mut b = GOLDEN_REQUEST;
        b[4] = 0x07; // an "AESA" of 7 octets
        assert_eq!(Repr::parse(&b), Err(ArpError::AtmAddress(0x07)));
        let pvc: AtmAddr = "0.0.100".parse().expect("pvc");
        let r = Repr {
            source_atm: Some(pvc),
            ..request()
        };
        assert_eq!(r.to_bytes(), Err(ArpError::Unencodable(pvc)));
    }
}
