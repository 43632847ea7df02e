//! SSCOP PDUs (ITU-T Q.2110; specs.md §5.2): the codec only, not the state machine
//! (specs.md §5.3 is the next layer up).
//!
//! On VPI 0/VCI 5 each AAL5 CPCS-SDU is one SSCOP PDU (SSCF-UNI adds no header,
//! specs.md §5.1), and a Q.2931 message is the information field of an SD PDU.
//! SSCOP puts its header at the **end**, in 32-bit big-endian words; the last is
//!
//! ```text
//! bits 31-30  PL: pad octets (0-3) after the information/UU field
//! bit  29     reserved
//! bit  28     S: END only, 1 = released by SSCOP itself, 0 = by the user
//! bits 27-24  PDU type
//! bits 23-0   N(S), N(MR) or N(R) (24 bits), or 0
//! ```
//!
//! | PDU | layout, up to the end |
//! |---|---|
//! | BGN, RS | [UU + pad] · `00 00 00 N(SQ)` · `PL type N(MR)` |
//! | BGAK | [UU + pad] · `00000000` · `PL 2 N(MR)` |
//! | BGREJ, END | [UU + pad] · `00000000` · `PL [S] type 000000` |
//! | ENDAK | `00000000` · `04 000000` |
//! | RSAK, ERAK | `00000000` · `type N(MR)` |
//! | ER | `00 00 00 N(SQ)` · `09 N(MR)` |
//! | SD | info + pad · `PL 8 N(S)` |
//! | POLL | `N(PS)` · `0A N(S)` |
//! | STAT | list N(S)… · `N(PS)` · `N(MR)` · `0B N(R)` |
//! | USTAT | `LE1` · `LE2` · `N(MR)` · `0C N(R)` |
//! | UD, MD | info + pad · `PL type 000000` |
//!
//! Receivers ignore reserved bits, pad contents and the S bit of PDUs other than END;
//! emitters write them as 0. Every PDU is a whole number of words, and the fixed-size
//! PDUs must have exactly their size.

use core::fmt;

use thiserror::Error;

/// Octets in an SSCOP word; every PDU is a whole number of them.
pub const WORD: usize = 4;

/// A 24-bit SSCOP sequence number (N(S), N(R), N(MR), N(PS)); arithmetic is modulo
/// 2^24 (Q.2110 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct SeqNum(u32);

impl SeqNum {
    /// The modulus, 2^24.
    pub const MODULUS: u32 = 1 << 24;
    /// The largest value.
    pub const MAX: SeqNum = SeqNum(Self::MODULUS - 1);

    /// The number, if it fits 24 bits.
    pub const fn new(v: u32) -> Option<SeqNum> {
        if v < Self::MODULUS {
            Some(SeqNum(v))
        } else {
            None
        }
    }

    /// The number `v` modulo 2^24.
    pub const fn wrapping(v: u32) -> SeqNum {
        SeqNum(v & (Self::MODULUS - 1))
    }

    /// The value, 0..2^24.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> SeqNum {
        SeqNum::wrapping(self.0.wrapping_add(n))
    }

    /// How far `self` is after `base`, modulo 2^24 (for comparisons relative to a base
    /// such as VR(R) or VT(A), as Q.2110 compares sequence numbers).
    pub const fn since(self, base: SeqNum) -> u32 {
        self.0.wrapping_sub(base.0) & (Self::MODULUS - 1)
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The PDU type nibble.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PduType {
    /// 0x1 begin.
    Bgn,
    /// 0x2 begin acknowledge.
    Bgak,
    /// 0x3 end.
    End,
    /// 0x4 end acknowledge.
    Endak,
    /// 0x5 resynchronization.
    Rs,
    /// 0x6 resynchronization acknowledge.
    Rsak,
    /// 0x7 begin reject.
    Bgrej,
    /// 0x8 sequenced data.
    Sd,
    /// 0x9 error recovery.
    Er,
    /// 0xA poll.
    Poll,
    /// 0xB solicited status.
    Stat,
    /// 0xC unsolicited status.
    Ustat,
    /// 0xD unnumbered data.
    Ud,
    /// 0xE management data.
    Md,
    /// 0xF error recovery acknowledge.
    Erak,
}

impl PduType {
    /// The type of a nibble; 0 is not a PDU type.
    pub const fn from_nibble(n: u8) -> Option<PduType> {
        Some(match n & 0x0F {
            0x1 => PduType::Bgn,
            0x2 => PduType::Bgak,
            0x3 => PduType::End,
            0x4 => PduType::Endak,
            0x5 => PduType::Rs,
            0x6 => PduType::Rsak,
            0x7 => PduType::Bgrej,
            0x8 => PduType::Sd,
            0x9 => PduType::Er,
            0xA => PduType::Poll,
            0xB => PduType::Stat,
            0xC => PduType::Ustat,
            0xD => PduType::Ud,
            0xE => PduType::Md,
            0xF => PduType::Erak,
            _ => return None,
        })
    }

    /// The nibble.
    pub const fn nibble(self) -> u8 {
        match self {
            PduType::Bgn => 0x1,
            PduType::Bgak => 0x2,
            PduType::End => 0x3,
            PduType::Endak => 0x4,
            PduType::Rs => 0x5,
            PduType::Rsak => 0x6,
            PduType::Bgrej => 0x7,
            PduType::Sd => 0x8,
            PduType::Er => 0x9,
            PduType::Poll => 0xA,
            PduType::Stat => 0xB,
            PduType::Ustat => 0xC,
            PduType::Ud => 0xD,
            PduType::Md => 0xE,
            PduType::Erak => 0xF,
        }
    }
}

impl fmt::Display for PduType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PduType::Bgn => "BGN",
            PduType::Bgak => "BGAK",
            PduType::End => "END",
            PduType::Endak => "ENDAK",
            PduType::Rs => "RS",
            PduType::Rsak => "RSAK",
            PduType::Bgrej => "BGREJ",
            PduType::Sd => "SD",
            PduType::Er => "ER",
            PduType::Poll => "POLL",
            PduType::Stat => "STAT",
            PduType::Ustat => "USTAT",
            PduType::Ud => "UD",
            PduType::Md => "MD",
            PduType::Erak => "ERAK",
        })
    }
}

/// Why bytes are not an SSCOP PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SscopError {
    /// Shorter than the one-word trailer.
    #[error("SSCOP PDU of {len} octets is shorter than its 4-octet trailer")]
    Truncated {
        /// Octets received.
        len: usize,
    },
    /// Not a whole number of 32-bit words.
    #[error("SSCOP PDU of {len} octets is not a multiple of 4")]
    NotWordAligned {
        /// Octets received.
        len: usize,
    },
    /// The type nibble is 0.
    #[error("SSCOP PDU type {nibble:#x} does not exist")]
    UnknownType {
        /// The nibble.
        nibble: u8,
    },
    /// A fixed-size PDU has another size.
    #[error("{pdu} PDU of {len} octets, must be {expected}")]
    WrongLength {
        /// The PDU type.
        pdu: PduType,
        /// Octets received.
        len: usize,
        /// Octets the PDU has.
        expected: usize,
    },
    /// A variable-size PDU is shorter than its fixed words.
    #[error("{pdu} PDU of {len} octets, needs at least {min}")]
    TooShort {
        /// The PDU type.
        pdu: PduType,
        /// Octets received.
        len: usize,
        /// Fewest octets the PDU has.
        min: usize,
    },
    /// PL names more pad octets than the information/UU field has.
    #[error("{pdu} PDU pad length {pad} exceeds its {field}-octet information/UU field")]
    PadTooLong {
        /// The PDU type.
        pdu: PduType,
        /// The PL field.
        pad: u8,
        /// Octets before the fixed words (field and pad).
        field: usize,
    },
}

/// A read-only view of a PDU's trailer words (smoltcp style), for dispatching on the
/// type without decoding.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checks; accessors panic on one shorter than 4 octets.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking it is at least one word and word-aligned.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, SscopError> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer is one or more whole words; after this no accessor panics.
    pub fn check_len(&self) -> Result<(), SscopError> {
        let len = self.buffer.as_ref().len();
        if len < WORD {
            Err(SscopError::Truncated { len })
        } else if len % WORD != 0 {
            Err(SscopError::NotWordAligned { len })
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The word `n` words before the end (0 = the trailer); 0 past the start.
    pub fn word_from_end(&self, n: usize) -> u32 {
        let b = self.buffer.as_ref();
        let at = b.len().checked_sub(WORD * (n + 1));
        at.and_then(|at| b.get(at..at + WORD))
            .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    }

    /// The type nibble of the trailer.
    pub fn type_nibble(&self) -> u8 {
        (self.word_from_end(0) >> 24) as u8 & 0x0F
    }

    /// The PDU type, if the nibble is one.
    pub fn pdu_type(&self) -> Option<PduType> {
        PduType::from_nibble(self.type_nibble())
    }

    /// PL: pad octets after the information/UU field.
    pub fn pad_len(&self) -> u8 {
        (self.word_from_end(0) >> 30) as u8
    }

    /// The S bit (meaningful in END only).
    pub fn source_sscop(&self) -> bool {
        self.word_from_end(0) & 1 << 28 != 0
    }

    /// The 24-bit number of the trailer.
    pub fn trailer_seq(&self) -> SeqNum {
        SeqNum::wrapping(self.word_from_end(0))
    }
}

/// An SSCOP PDU (specs.md §5.2 table).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pdu {
    /// Begin: request to establish the connection.
    Bgn {
        /// N(SQ), the 8-bit connection sequence value.
        nsq: u8,
        /// N(MR): the window granted to the peer.
        nmr: SeqNum,
        /// SSCOP-UU.
        uu: Vec<u8>,
    },
    /// Begin acknowledge.
    Bgak {
        /// N(MR).
        nmr: SeqNum,
        /// SSCOP-UU.
        uu: Vec<u8>,
    },
    /// Begin reject.
    Bgrej {
        /// SSCOP-UU.
        uu: Vec<u8>,
    },
    /// End: release the connection.
    End {
        /// S bit: released by SSCOP itself (true) or by its user (false).
        source_sscop: bool,
        /// SSCOP-UU.
        uu: Vec<u8>,
    },
    /// End acknowledge.
    Endak,
    /// Resynchronization.
    Rs {
        /// N(SQ).
        nsq: u8,
        /// N(MR).
        nmr: SeqNum,
        /// SSCOP-UU.
        uu: Vec<u8>,
    },
    /// Resynchronization acknowledge.
    Rsak {
        /// N(MR).
        nmr: SeqNum,
    },
    /// Error recovery.
    Er {
        /// N(SQ).
        nsq: u8,
        /// N(MR).
        nmr: SeqNum,
    },
    /// Error recovery acknowledge.
    Erak {
        /// N(MR).
        nmr: SeqNum,
    },
    /// Sequenced data: carries a Q.2931 message.
    Sd {
        /// N(S).
        ns: SeqNum,
        /// The information field.
        info: Vec<u8>,
    },
    /// Poll: asks for a STAT.
    Poll {
        /// N(PS).
        nps: SeqNum,
        /// N(S): the next SD the sender will send.
        ns: SeqNum,
    },
    /// Solicited status, the answer to a POLL.
    Stat {
        /// N(PS) echoed from the POLL.
        nps: SeqNum,
        /// N(MR).
        nmr: SeqNum,
        /// N(R): the next in-order SD expected.
        nr: SeqNum,
        /// The list elements: pairs [start of gap, end of gap), in order.
        list: Vec<SeqNum>,
    },
    /// Unsolicited status: reports one new gap.
    Ustat {
        /// N(MR).
        nmr: SeqNum,
        /// N(R).
        nr: SeqNum,
        /// List elements 1 and 2: the gap.
        list: [SeqNum; 2],
    },
    /// Unnumbered data.
    Ud {
        /// The information field.
        info: Vec<u8>,
    },
    /// Management data.
    Md {
        /// The information field.
        info: Vec<u8>,
    },
}

/// Pad octets after a field of `len` octets.
const fn pad_for(len: usize) -> usize {
    (WORD - len % WORD) % WORD
}

impl Pdu {
    /// The PDU type.
    pub fn pdu_type(&self) -> PduType {
        match self {
            Pdu::Bgn { .. } => PduType::Bgn,
            Pdu::Bgak { .. } => PduType::Bgak,
            Pdu::Bgrej { .. } => PduType::Bgrej,
            Pdu::End { .. } => PduType::End,
            Pdu::Endak => PduType::Endak,
            Pdu::Rs { .. } => PduType::Rs,
            Pdu::Rsak { .. } => PduType::Rsak,
            Pdu::Er { .. } => PduType::Er,
            Pdu::Erak { .. } => PduType::Erak,
            Pdu::Sd { .. } => PduType::Sd,
            Pdu::Poll { .. } => PduType::Poll,
            Pdu::Stat { .. } => PduType::Stat,
            Pdu::Ustat { .. } => PduType::Ustat,
            Pdu::Ud { .. } => PduType::Ud,
            Pdu::Md { .. } => PduType::Md,
        }
    }

    /// The information or UU field, if the PDU has one.
    pub fn payload(&self) -> Option<&[u8]> {
        match self {
            Pdu::Bgn { uu, .. }
            | Pdu::Bgak { uu, .. }
            | Pdu::Bgrej { uu }
            | Pdu::End { uu, .. }
            | Pdu::Rs { uu, .. } => Some(uu),
            Pdu::Sd { info, .. } | Pdu::Ud { info } | Pdu::Md { info } => Some(info),
            _ => None,
        }
    }

    /// Parses one PDU (one AAL5 CPCS-SDU of the signalling VC).
    pub fn parse(bytes: &[u8]) -> Result<Pdu, SscopError> {
        let p = Packet::new_checked(bytes)?;
        let pdu = p.pdu_type().ok_or(SscopError::UnknownType {
            nibble: p.type_nibble(),
        })?;
        let len = bytes.len();
        let seq = |n| SeqNum::wrapping(p.word_from_end(n));
        let nsq = || p.word_from_end(1) as u8;
        let fixed = |expected: usize| {
            if len == expected {
                Ok(())
            } else {
                Err(SscopError::WrongLength { pdu, len, expected })
            }
        };
        // The information/UU field before `words` fixed words, less PL pad octets.
        let field = |words: usize| {
            let min = WORD * words;
            let padded = len
                .checked_sub(min)
                .ok_or(SscopError::TooShort { pdu, len, min })?;
            let pad = p.pad_len();
            let n = padded
                .checked_sub(usize::from(pad))
                .ok_or(SscopError::PadTooLong {
                    pdu,
                    pad,
                    field: padded,
                })?;
            Ok::<_, SscopError>(bytes[..n].to_vec())
        };
        Ok(match pdu {
            PduType::Bgn => Pdu::Bgn {
                uu: field(2)?,
                nsq: nsq(),
                nmr: seq(0),
            },
            PduType::Bgak => Pdu::Bgak {
                uu: field(2)?,
                nmr: seq(0),
            },
            PduType::Bgrej => Pdu::Bgrej { uu: field(2)? },
            PduType::End => Pdu::End {
                uu: field(2)?,
                source_sscop: p.source_sscop(),
            },
            PduType::Rs => Pdu::Rs {
                uu: field(2)?,
                nsq: nsq(),
                nmr: seq(0),
            },
            PduType::Endak => fixed(8).map(|()| Pdu::Endak)?,
            PduType::Rsak => fixed(8).map(|()| Pdu::Rsak { nmr: seq(0) })?,
            PduType::Er => fixed(8).map(|()| Pdu::Er {
                nsq: nsq(),
                nmr: seq(0),
            })?,
            PduType::Erak => fixed(8).map(|()| Pdu::Erak { nmr: seq(0) })?,
            PduType::Poll => fixed(8).map(|()| Pdu::Poll {
                nps: seq(1),
                ns: seq(0),
            })?,
            PduType::Ustat => fixed(16).map(|()| Pdu::Ustat {
                list: [seq(3), seq(2)],
                nmr: seq(1),
                nr: seq(0),
            })?,
            PduType::Stat => {
                let min = 3 * WORD;
                if len < min {
                    return Err(SscopError::TooShort { pdu, len, min });
                }
                let n = (len - min) / WORD;
                Pdu::Stat {
                    list: (0..n).map(|i| seq(n + 2 - i)).collect(),
                    nps: seq(2),
                    nmr: seq(1),
                    nr: seq(0),
                }
            }
            PduType::Sd => Pdu::Sd {
                info: field(1)?,
                ns: seq(0),
            },
            PduType::Ud => Pdu::Ud { info: field(1)? },
            PduType::Md => Pdu::Md { info: field(1)? },
        })
    }

    /// Octets of the PDU.
    pub fn buffer_len(&self) -> usize {
        let padded = |f: &[u8]| f.len() + pad_for(f.len());
        match self {
            Pdu::Bgn { uu, .. }
            | Pdu::Bgak { uu, .. }
            | Pdu::Bgrej { uu }
            | Pdu::End { uu, .. }
            | Pdu::Rs { uu, .. } => padded(uu) + 2 * WORD,
            Pdu::Sd { info, .. } | Pdu::Ud { info } | Pdu::Md { info } => padded(info) + WORD,
            Pdu::Stat { list, .. } => (list.len() + 3) * WORD,
            Pdu::Ustat { .. } => 4 * WORD,
            _ => 2 * WORD,
        }
    }

    /// Appends the PDU to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let ty = self.pdu_type();
        let word = |out: &mut Vec<u8>, w: u32| out.extend_from_slice(&w.to_be_bytes());
        let seq = |out: &mut Vec<u8>, s: SeqNum| word(out, s.value());
        let field = |out: &mut Vec<u8>, f: &[u8]| {
            out.extend_from_slice(f);
            out.resize(out.len() + pad_for(f.len()), 0);
            (pad_for(f.len()) as u32) << 30
        };
        let last = |out: &mut Vec<u8>, pl: u32, n: SeqNum| {
            word(out, pl | u32::from(ty.nibble()) << 24 | n.value());
        };
        let zero = SeqNum::default();
        match self {
            Pdu::Bgn { nsq, nmr, uu } | Pdu::Rs { nsq, nmr, uu } => {
                let pl = field(out, uu);
                word(out, u32::from(*nsq));
                last(out, pl, *nmr);
            }
            Pdu::Bgak { nmr, uu } => {
                let pl = field(out, uu);
                word(out, 0);
                last(out, pl, *nmr);
            }
            Pdu::Bgrej { uu } => {
                let pl = field(out, uu);
                word(out, 0);
                last(out, pl, zero);
            }
            Pdu::End { source_sscop, uu } => {
                let pl = field(out, uu);
                word(out, 0);
                last(out, pl | u32::from(*source_sscop) << 28, zero);
            }
            Pdu::Endak => {
                word(out, 0);
                last(out, 0, zero);
            }
            Pdu::Rsak { nmr } | Pdu::Erak { nmr } => {
                word(out, 0);
                last(out, 0, *nmr);
            }
            Pdu::Er { nsq, nmr } => {
                word(out, u32::from(*nsq));
                last(out, 0, *nmr);
            }
            Pdu::Sd { ns, info } => {
                let pl = field(out, info);
                last(out, pl, *ns);
            }
            Pdu::Ud { info } | Pdu::Md { info } => {
                let pl = field(out, info);
                last(out, pl, zero);
            }
            Pdu::Poll { nps, ns } => {
                seq(out, *nps);
                last(out, 0, *ns);
            }
            Pdu::Stat { nps, nmr, nr, list } => {
                for &s in list {
                    seq(out, s);
                }
                seq(out, *nps);
                seq(out, *nmr);
                last(out, 0, *nr);
            }
            Pdu::Ustat { nmr, nr, list } => {
                seq(out, list[0]);
                seq(out, list[1]);
                seq(out, *nmr);
                last(out, 0, *nr);
            }
        }
        debug_assert_eq!(out.len() - start, self.buffer_len());
    }

    /// The PDU as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.buffer_len());
        self.emit(&mut out);
        out
    }
}

impl fmt::Display for Pdu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.pdu_type())?;
        match self {
            Pdu::Bgn { nsq, nmr, .. } | Pdu::Rs { nsq, nmr, .. } | Pdu::Er { nsq, nmr } => {
                write!(f, " N(SQ)={nsq} N(MR)={nmr}")?
            }
            Pdu::Bgak { nmr, .. } | Pdu::Rsak { nmr } | Pdu::Erak { nmr } => {
                write!(f, " N(MR)={nmr}")?
            }
            Pdu::End { source_sscop, .. } => write!(f, " S={}", u8::from(*source_sscop))?,
            Pdu::Sd { ns, .. } => write!(f, " N(S)={ns}")?,
            Pdu::Poll { nps, ns } => write!(f, " N(PS)={nps} N(S)={ns}")?,
            Pdu::Stat { nps, nmr, nr, list } => {
                write!(f, " N(PS)={nps} N(MR)={nmr} N(R)={nr} list")?;
                for s in list {
                    write!(f, " {s}")?;
                }
            }
            Pdu::Ustat { nmr, nr, list } => {
                write!(f, " N(MR)={nmr} N(R)={nr} list {} {}", list[0], list[1])?
            }
            Pdu::Bgrej { .. } | Pdu::Endak | Pdu::Ud { .. } | Pdu::Md { .. } => {}
        }
        match self.payload() {
            Some(p) if !p.is_empty() => write!(f, " ({} octets)", p.len()),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
