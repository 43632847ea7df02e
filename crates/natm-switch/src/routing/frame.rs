//! The routing channel's frames (VPI 0/VCI 18 on a trunk, one per AAL5 SDU): hello,
//! PTSE and acknowledgement, in natm's own compact layout rather than PNNI 1.0's
//! packet and IG formats (one peer group, one kind of topology element; see
//! docs/decisions/0033-routing-pnni-in-spirit.md).
//!
//! ```text
//! octet 0  version (1)
//! octet 1  type: 1 hello, 2 PTSE, 3 ack
//! hello    node u32 | port u32 | remote node u32 (0: none heard) | remote port u32
//! PTSE     origin u32 | sequence u32 | remaining lifetime ms u32 | links u8 |
//!          per link: port u32 | neighbour node u32 | neighbour port u32 |
//!                    max cell rate u32 | available CBR u32 | available VBR u32 |
//!                    administrative weight u32                         (28 octets)
//!          prefixes u8 | per prefix: length u8 | digits (prefix key, ASCII)
//! ack      count u8 | per PTSE: origin u32 | sequence u32
//! ```
//! All integers big-endian. Parsing never panics: a short or malformed frame is an
//! error, and trailing octets are refused.

use natm_proto::wire::addr::Prefix;
use natm_proto::wire::q2931::NodeId;
use thiserror::Error;

/// The layout version.
pub const VERSION: u8 = 1;
/// Octets of one link in a PTSE.
pub const LINK_LEN: usize = 28;

/// Why octets are not a routing frame.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The frame ends before a field.
    #[error("routing frame cut off at {0}")]
    Truncated(&'static str),
    /// A version this switch does not speak.
    #[error("routing frame version {0}, expected 1")]
    Version(u8),
    /// An unknown frame type.
    #[error("routing frame type {0} is unknown")]
    Type(u8),
    /// A field with a value it may not have.
    #[error("routing frame field {0} is invalid")]
    Invalid(&'static str),
    /// Octets after the last field.
    #[error("{0} octets after the routing frame")]
    Trailing(usize),
}

/// A hello: who sends it on which port, and whom it has heard on that link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The sender.
    pub node: NodeId,
    /// The sender's port on this link.
    pub port: u32,
    /// The node the sender hears on this link (`NodeId(0)`: none yet).
    pub remote_node: NodeId,
    /// That node's port.
    pub remote_port: u32,
}

/// One link as its origin advertises it: the origin's output towards `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkAd {
    /// The origin's port.
    pub port: u32,
    /// The node at the other end.
    pub to: NodeId,
    /// Its port.
    pub to_port: u32,
    /// The line's cell rate, cells/s.
    pub max_cells: u32,
    /// Cells/s a CBR call may still reserve on the origin's output.
    pub avail_cbr: u32,
    /// Cells/s a VBR call may still reserve (natm's admission pools CBR and VBR, so
    /// the two are equal today).
    pub avail_vbr: u32,
    /// Administrative weight (PNNI's default 5040).
    pub weight: u32,
}

/// A PNNI topology state element, natm's one kind: a node's links and the address
/// prefixes it reaches (its hosts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ptse {
    /// The node that originated it.
    pub origin: NodeId,
    /// Newer instances have larger numbers.
    pub seq: u32,
    /// How much longer it is valid, ms.
    pub lifetime_ms: u32,
    /// The origin's links to its neighbours.
    pub links: Vec<LinkAd>,
    /// The address prefixes the origin reaches.
    pub prefixes: Vec<Prefix>,
}

/// A frame of the routing channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Hello (neighbour discovery and liveness).
    Hello(Hello),
    /// A topology state element being flooded.
    Ptse(Ptse),
    /// PTSEs received: (origin, sequence).
    Ack(Vec<(NodeId, u32)>),
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u8(&mut self, f: &'static str) -> Result<u8, FrameError> {
        let (&b, rest) = self.0.split_first().ok_or(FrameError::Truncated(f))?;
        self.0 = rest;
        Ok(b)
    }

    fn u32(&mut self, f: &'static str) -> Result<u32, FrameError> {
        let (b, rest) = self
            .0
            .split_first_chunk::<4>()
            .ok_or(FrameError::Truncated(f))?;
        self.0 = rest;
        Ok(u32::from_be_bytes(*b))
    }

    fn take(&mut self, n: usize, f: &'static str) -> Result<&[u8], FrameError> {
        if self.0.len() < n {
            return Err(FrameError::Truncated(f));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
}

impl Frame {
    /// Parses one frame.
    pub fn parse(data: &[u8]) -> Result<Frame, FrameError> {
        let mut r = Reader(data);
        let v = r.u8("version")?;
        if v != VERSION {
            return Err(FrameError::Version(v));
        }
        let f = match r.u8("type")? {
            1 => Frame::Hello(Hello {
                node: NodeId(r.u32("node")?),
                port: r.u32("port")?,
                remote_node: NodeId(r.u32("remote node")?),
                remote_port: r.u32("remote port")?,
            }),
            2 => {
                let origin = NodeId(r.u32("origin")?);
                let seq = r.u32("sequence")?;
                let lifetime_ms = r.u32("lifetime")?;
                let n = r.u8("links")?;
                let mut links = Vec::with_capacity(usize::from(n));
                for _ in 0..n {
                    links.push(LinkAd {
                        port: r.u32("link port")?,
                        to: NodeId(r.u32("link node")?),
                        to_port: r.u32("link remote port")?,
                        max_cells: r.u32("max cell rate")?,
                        avail_cbr: r.u32("available CBR")?,
                        avail_vbr: r.u32("available VBR")?,
                        weight: r.u32("weight")?,
                    });
                }
                let n = r.u8("prefixes")?;
                let mut prefixes = Vec::with_capacity(usize::from(n));
                for _ in 0..n {
                    let len = usize::from(r.u8("prefix length")?);
                    let k = r.take(len, "prefix")?;
                    let p = std::str::from_utf8(k)
                        .ok()
                        .and_then(Prefix::from_key)
                        .ok_or(FrameError::Invalid("prefix"))?;
                    prefixes.push(p);
                }
                if origin.0 == 0 {
                    return Err(FrameError::Invalid("origin"));
                }
                Frame::Ptse(Ptse {
                    origin,
                    seq,
                    lifetime_ms,
                    links,
                    prefixes,
                })
            }
            3 => {
                let n = r.u8("ack count")?;
                let mut v = Vec::with_capacity(usize::from(n));
                for _ in 0..n {
                    v.push((NodeId(r.u32("ack origin")?), r.u32("ack sequence")?));
                }
                Frame::Ack(v)
            }
            t => return Err(FrameError::Type(t)),
        };
        if !r.0.is_empty() {
            return Err(FrameError::Trailing(r.0.len()));
        }
        Ok(f)
    }

    /// The frame's octets; lists longer than 255 entries are cut at 255 (a switch has
    /// far fewer ports and prefixes).
    pub fn emit(&self) -> Vec<u8> {
        let mut o = vec![VERSION];
        match self {
            Frame::Hello(h) => {
                o.push(1);
                for v in [h.node.0, h.port, h.remote_node.0, h.remote_port] {
                    o.extend_from_slice(&v.to_be_bytes());
                }
            }
            Frame::Ptse(p) => {
                o.push(2);
                for v in [p.origin.0, p.seq, p.lifetime_ms] {
                    o.extend_from_slice(&v.to_be_bytes());
                }
                let links = &p.links[..p.links.len().min(255)];
                o.push(links.len() as u8);
                for l in links {
                    for v in [
                        l.port,
                        l.to.0,
                        l.to_port,
                        l.max_cells,
                        l.avail_cbr,
                        l.avail_vbr,
                        l.weight,
                    ] {
                        o.extend_from_slice(&v.to_be_bytes());
                    }
                }
                let prefixes: Vec<&Prefix> = p
                    .prefixes
                    .iter()
                    .filter(|p| p.as_key().len() <= 255)
                    .take(255)
                    .collect();
                o.push(prefixes.len() as u8);
                for p in prefixes {
                    o.push(p.as_key().len() as u8);
                    o.extend_from_slice(p.as_key().as_bytes());
                }
            }
            Frame::Ack(v) => {
                o.push(3);
                let v = &v[..v.len().min(255)];
                o.push(v.len() as u8);
                for (n, s) in v {
                    o.extend_from_slice(&n.0.to_be_bytes());
                    o.extend_from_slice(&s.to_be_bytes());
                }
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use natm_proto::wire::addr::HostsFile;
    use proptest::prelude::*;

    #[test]
    fn hello_golden_bytes() {
        let h = Frame::Hello(Hello {
            node: NodeId(1),
            port: 2,
            remote_node: NodeId(3),
            remote_port: 4,
        });
        let b = h.emit();
        assert_eq!(
            b,
            [1, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4].to_vec()
        );
        assert_eq!(Frame::parse(&b).unwrap(), h);
    }

    #[test]
    fn malformed_frames_are_errors() {
        assert_eq!(Frame::parse(&[]), Err(FrameError::Truncated("version")));
        assert_eq!(Frame::parse(&[2, 1]), Err(FrameError::Version(2)));
        assert_eq!(Frame::parse(&[1, 9]), Err(FrameError::Type(9)));
        assert_eq!(Frame::parse(&[1, 3, 0, 7]), Err(FrameError::Trailing(1)));
        assert!(
            Frame::parse(&[1, 2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 2, b'x', b'y']).is_err()
        );
    }

    fn prefix() -> impl Strategy<Value = Prefix> {
        prop_oneof![
            Just(Prefix::parse("*", &HostsFile::default()).unwrap()),
            "[0-9]{1,15}".prop_map(|d| Prefix::from_key(&format!("+{d}")).unwrap()),
            "[0-9a-f]{1,40}".prop_map(|d| Prefix::from_key(&d).unwrap()),
        ]
    }

    fn frame() -> impl Strategy<Value = Frame> {
        let hello = (any::<[u32; 4]>()).prop_map(|v| {
            Frame::Hello(Hello {
                node: NodeId(v[0]),
                port: v[1],
                remote_node: NodeId(v[2]),
                remote_port: v[3],
            })
        });
        let link = any::<[u32; 7]>().prop_map(|v| LinkAd {
            port: v[0],
            to: NodeId(v[1]),
            to_port: v[2],
            max_cells: v[3],
            avail_cbr: v[4],
            avail_vbr: v[5],
            weight: v[6],
        });
        let ptse = (
            1u32..,
            any::<u32>(),
            any::<u32>(),
            proptest::collection::vec(link, 0..6),
            proptest::collection::vec(prefix(), 0..4),
        )
            .prop_map(|(o, seq, lifetime_ms, links, prefixes)| {
                Frame::Ptse(Ptse {
                    origin: NodeId(o),
                    seq,
                    lifetime_ms,
                    links,
                    prefixes,
                })
            });
        let ack = proptest::collection::vec((any::<u32>(), any::<u32>()), 0..8)
            .prop_map(|v| Frame::Ack(v.into_iter().map(|(n, s)| (NodeId(n), s)).collect()));
        prop_oneof![hello, ptse, ack]
    }

    proptest! {
        #[test]
        fn frames_round_trip(f in frame()) {
            prop_assert_eq!(Frame::parse(&f.emit()).unwrap(), f);
        }

        #[test]
        fn any_octets_parse_or_fail_without_panic(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Frame::parse(&b);
        }
    }
}
