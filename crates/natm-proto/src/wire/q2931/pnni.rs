//! PNNI 1.0's two routing IEs in natm's switch-to-switch SETUP and RELEASE (issue 33):
//! the designated transit list (0xD1, PNNI 1.0 §6.4.6.2) and crankback (0xE1,
//! §6.4.6.3), both with coding standard 11 (ATM Forum specific), as PNNI sends them.
//!
//! ```text
//! DTL (0xD1)
//! octets 5-6   current transit pointer: octets into the list, of the entry being
//!              processed (0, 27, 54, ...)
//! per entry    1 octet  logical node/port indicator (0x01)
//!              22 octets logical node identifier
//!              4 octets logical port identifier (the port the node leaves by;
//!                       0: the node is the destination and routes locally)
//!
//! Crankback (0xE1)
//! octet 5      crankback level (natm: 96, the one peer group's level)
//! octet 6      blocked transit type: 0x02 blocked node, 0x03 blocked link
//! blocked node 22 octets node identifier
//! blocked link 22 octets preceding node, 4 octets port, 22 octets succeeding node
//! last octet   crankback cause (a Q.2931 cause value)
//! ```
//!
//! Departures from PNNI 1.0: node identifiers are natm's 32-bit node numbers, carried
//! in PNNI's 22-octet field as level 96, 0xA0 and the number in the last four
//! octets; one DTL IE (one peer group, so no hierarchy of DTLs); the crankback cause
//! has no cause-specific diagnostics.

use core::fmt;

use super::{from_body, CodingStandard, IeContent, IeId, IeProblem, Reader};

/// A switch's node identifier in the one peer group (a configured number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// The level natm's one peer group sits at (PNNI levels run 0-104).
pub const PEER_GROUP_LEVEL: u8 = 96;
/// The octets of PNNI's logical node identifier.
pub const NODE_ID_LEN: usize = 22;
/// The octets of one DTL entry.
pub const DTL_ENTRY_LEN: usize = 1 + NODE_ID_LEN + 4;
/// The most entries a DTL carries (a bound on the transit pointer's work).
pub const MAX_DTL_ENTRIES: usize = 64;

impl NodeId {
    /// The 22-octet PNNI form.
    pub fn to_octets(self) -> [u8; NODE_ID_LEN] {
        let mut o = [0; NODE_ID_LEN];
        o[0] = PEER_GROUP_LEVEL;
        o[1] = 0xA0;
        o[18..].copy_from_slice(&self.0.to_be_bytes());
        o
    }

    /// A node identifier from its 22-octet PNNI form, as natm writes it.
    pub fn from_octets(o: &[u8]) -> Result<NodeId, IeProblem> {
        let bad = |value| IeProblem::Invalid {
            field: "logical node identifier",
            value,
        };
        if o.len() != NODE_ID_LEN || o[0] != PEER_GROUP_LEVEL || o[1] != 0xA0 {
            return Err(bad(u32::from(o.first().copied().unwrap_or_default())));
        }
        if o[2..18].iter().any(|&b| b != 0) {
            return Err(bad(0));
        }
        let mut n = [0; 4];
        n.copy_from_slice(&o[18..]);
        Ok(NodeId(u32::from_be_bytes(n)))
    }
}

fn read_node(r: &mut Reader<'_>) -> Result<NodeId, IeProblem> {
    NodeId::from_octets(r.take(NODE_ID_LEN, "logical node identifier")?)
}

fn read_u32(r: &mut Reader<'_>, field: &'static str) -> Result<u32, IeProblem> {
    let b = r.take(4, field)?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// One hop of a designated transit list: a node and the port it leaves by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DtlHop {
    /// The node.
    pub node: NodeId,
    /// Its outgoing port (0: the destination node, which routes by address).
    pub port: u32,
}

/// The designated transit list (IE 0xD1): the source route the ingress switch chose,
/// and how far along it the call is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Dtl {
    /// The entry being processed (an index; on the wire, octets: index × 27).
    pub current: usize,
    /// The route, ingress first.
    pub hops: Vec<DtlHop>,
}

impl Dtl {
    /// The entry being processed, if the pointer is within the list.
    pub fn current_hop(&self) -> Option<DtlHop> {
        self.hops.get(self.current).copied()
    }

    /// The entry after the current one.
    pub fn next_hop(&self) -> Option<DtlHop> {
        self.hops.get(self.current + 1).copied()
    }
}

impl IeContent for Dtl {
    const ID: IeId = IeId::Dtl;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let pointer = usize::from(r.u16("current transit pointer")?);
        let list = r.rest();
        if !list.len().is_multiple_of(DTL_ENTRY_LEN) {
            return Err(IeProblem::Trailing {
                extra: list.len() % DTL_ENTRY_LEN,
            });
        }
        let n = list.len() / DTL_ENTRY_LEN;
        if n == 0 || n > MAX_DTL_ENTRIES {
            return Err(IeProblem::Invalid {
                field: "DTL entries",
                value: n as u32,
            });
        }
        if !pointer.is_multiple_of(DTL_ENTRY_LEN) || pointer / DTL_ENTRY_LEN >= n {
            return Err(IeProblem::Invalid {
                field: "current transit pointer",
                value: pointer as u32,
            });
        }
        let mut hops = Vec::with_capacity(n);
        let mut r = Reader::new(list);
        for _ in 0..n {
            let ind = r.u8("logical node/port indicator")?;
            if ind != 0x01 {
                return Err(IeProblem::Invalid {
                    field: "logical node/port indicator",
                    value: u32::from(ind),
                });
            }
            let node = read_node(&mut r)?;
            let port = read_u32(&mut r, "logical port identifier")?;
            hops.push(DtlHop { node, port });
        }
        r.finish()?;
        Ok(Dtl {
            current: pointer / DTL_ENTRY_LEN,
            hops,
        })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        let n = self.hops.len();
        if n == 0 || n > MAX_DTL_ENTRIES || self.current >= n {
            return Err(IeProblem::OutOfRange {
                field: "DTL entries",
                value: n as u64,
                max: MAX_DTL_ENTRIES as u64,
            });
        }
        out.extend_from_slice(&((self.current * DTL_ENTRY_LEN) as u16).to_be_bytes());
        for h in &self.hops {
            out.push(0x01);
            out.extend_from_slice(&h.node.to_octets());
            out.extend_from_slice(&h.port.to_be_bytes());
        }
        Ok(())
    }

    fn default_coding(&self) -> CodingStandard {
        CodingStandard::Network
    }

    fn decodes(coding: CodingStandard) -> bool {
        coding == CodingStandard::Network
    }

    from_body!(Dtl);
}

/// What a crankback says could not be passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Blocked {
    /// A whole node (type 0x02).
    Node(NodeId),
    /// The link leaving `from` by `port` towards `to` (type 0x03).
    Link {
        /// The preceding node.
        from: NodeId,
        /// Its port.
        port: u32,
        /// The succeeding node.
        to: NodeId,
    },
}

/// Crankback (IE 0xE1): where a call on a DTL was blocked and why, back to the node
/// that built the DTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Crankback {
    /// The crankback level ([`PEER_GROUP_LEVEL`]).
    pub level: u8,
    /// What was blocked.
    pub blocked: Blocked,
    /// The Q.2931 cause value of the blocking.
    pub cause: u8,
}

impl Crankback {
    /// A crankback at natm's level.
    pub fn new(blocked: Blocked, cause: u8) -> Crankback {
        Crankback {
            level: PEER_GROUP_LEVEL,
            blocked,
            cause,
        }
    }
}

impl fmt::Display for Crankback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.blocked {
            Blocked::Node(n) => write!(f, "crankback: {n} blocked")?,
            Blocked::Link { from, port, to } => {
                write!(f, "crankback: link {from} port {port} → {to} blocked")?
            }
        }
        write!(f, " (cause {})", self.cause)
    }
}

impl IeContent for Crankback {
    const ID: IeId = IeId::Crankback;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let level = r.u8("crankback level")?;
        let kind = r.u8("blocked transit type")?;
        let blocked = match kind {
            0x02 => Blocked::Node(read_node(&mut r)?),
            0x03 => Blocked::Link {
                from: read_node(&mut r)?,
                port: read_u32(&mut r, "blocked link port")?,
                to: read_node(&mut r)?,
            },
            other => {
                return Err(IeProblem::Invalid {
                    field: "blocked transit type",
                    value: u32::from(other),
                })
            }
        };
        let cause = r.u8("crankback cause")?;
        if cause > 0x7F {
            return Err(IeProblem::Invalid {
                field: "crankback cause",
                value: u32::from(cause),
            });
        }
        r.finish()?;
        Ok(Crankback {
            level,
            blocked,
            cause,
        })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        super::fit("crankback cause", u64::from(self.cause), 0x7F)?;
        out.push(self.level);
        match self.blocked {
            Blocked::Node(n) => {
                out.push(0x02);
                out.extend_from_slice(&n.to_octets());
            }
            Blocked::Link { from, port, to } => {
                out.push(0x03);
                out.extend_from_slice(&from.to_octets());
                out.extend_from_slice(&port.to_be_bytes());
                out.extend_from_slice(&to.to_octets());
            }
        }
        out.push(self.cause);
        Ok(())
    }

    fn default_coding(&self) -> CodingStandard {
        CodingStandard::Network
    }

    fn decodes(coding: CodingStandard) -> bool {
        coding == CodingStandard::Network
    }

    from_body!(Crankback);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::q2931::{Ie, IeBody, RawIes};

    fn round_trip(ie: Ie) -> Vec<u8> {
        let mut out = Vec::new();
        ie.emit(&mut out).unwrap();
        let raw = RawIes::new(&out, 0).next().unwrap().unwrap();
        assert_eq!(Ie::parse(&raw).unwrap(), ie);
        out
    }

    #[test]
    fn dtl_golden_bytes() {
        let dtl = Dtl {
            current: 1,
            hops: vec![
                DtlHop {
                    node: NodeId(1),
                    port: 2,
                },
                DtlHop {
                    node: NodeId(0x0102_0304),
                    port: 0,
                },
            ],
        };
        let out = round_trip(Ie::from(dtl));
        assert_eq!(&out[..6], &[0xD1, 0xE0, 0, 56, 0, 27]);
        assert_eq!(&out[6..9], &[0x01, 96, 0xA0]);
        assert_eq!(&out[6 + 19..6 + 27], &[0, 0, 0, 1, 0, 0, 0, 2]);
        assert_eq!(&out[6 + 27 + 19..], &[1, 2, 3, 4, 0, 0, 0, 0]);
    }

    #[test]
    fn crankback_golden_bytes() {
        let cb = Crankback::new(
            Blocked::Link {
                from: NodeId(1),
                port: 3,
                to: NodeId(2),
            },
            37,
        );
        let out = round_trip(Ie::from(cb));
        assert_eq!(&out[..6], &[0xE1, 0xE0, 0, 2 + 22 + 4 + 22 + 1, 96, 0x03]);
        assert_eq!(*out.last().unwrap(), 37);
        round_trip(Ie::from(Crankback::new(Blocked::Node(NodeId(7)), 27)));
    }

    #[test]
    fn bad_contents_are_refused() {
        for data in [
            &[0u8, 0][..],                   // no entries
            &[0, 27, 1, 96, 0xA0][..],       // cut
            &[0, 5][..],                     // pointer not at an entry
            &[96, 0x09, 0, 0][..],           // crankback type
            &[96, 0x02, 96, 0xA0, 0, 0][..], // crankback cut
        ] {
            let a = IeBody::parse(0xD1, CodingStandard::Network, data);
            let b = IeBody::parse(0xE1, CodingStandard::Network, data);
            assert!(a.is_err() && b.is_err(), "{data:?}");
        }
        // Another coding standard: kept undecoded.
        assert!(matches!(
            IeBody::parse(0xD1, CodingStandard::Itu, &[0, 0]),
            Ok(IeBody::Unknown { .. })
        ));
    }
}
