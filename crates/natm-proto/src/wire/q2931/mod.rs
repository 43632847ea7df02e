//! UNI 3.1 / Q.2931 signalling messages and information elements (specs.md §4).
//!
//! A message is a 9-octet header (protocol discriminator 0x09, a 3-octet call
//! reference with its flag, the message type, the type extension with its flag and
//! action indicator, the length of what follows) and a list of information elements
//! (IEs), each a 4-octet header (identifier, instruction octet, length) and contents.
//!
//! - [`Message`] is the typed message: [`Message::parse`] takes received bytes (an SSCOP
//!   SD payload) and [`Message::to_bytes`] builds them back, byte for byte.
//! - [`Ie`] is one IE: its instruction octet ([`IeFlags`]) and typed contents
//!   ([`IeBody`]); an IE this module does not know is kept as [`IeBody::Unknown`] and
//!   re-emitted verbatim.
//! - [`Packet`] and [`HeaderRepr`] are the smoltcp-style view of the header alone;
//!   [`RawIes`] walks the IEs of a buffer without decoding them.
//! - Errors name the IE and the problem ([`IeError`], [`IeProblem`]) and map to the
//!   cause a Q.2931 entity answers with ([`Q2931Error::cause`]).
//!
//! IE order is the caller's: Q.2931 does not make it significant, and messages built
//! here keep the order they are given. Send the order of the UNI 3.1 message tables
//! (the SETUP of specs.md §4.5: AAL, traffic descriptor, bearer capability, B-LLI,
//! called, calling, QoS); [`Message::sort_ies`] puts IEs into that order. Besides
//! interoperability this keeps the AAL parameters and traffic descriptor IEs away from
//! the end of a message, where Wireshark 4.0's dissector would report a false
//! "Malformed" (specs.md §6.3, defect 1). The encoding is never bent to suit that
//! dissector.
//!
//! # Strictness
//! Lengths are checked everywhere: the message length must equal the octets after the
//! header (else [`Q2931Error::MessageLength`], cause 104), each IE must fit the message,
//! and each typed IE must have exactly the octets its fields need. Extension bits that
//! change the layout (e.g. octet 5a of the calling party number) are honoured and
//! checked; spare bits are ignored on receipt and sent as 0, so a typed value re-emits
//! to the bytes received except for spare bits. [`Message::parse_lenient`] drops IEs
//! with bad contents instead of failing, and lists them, for the error procedures of
//! Q.2931 §5.6 (which act on each IE's action indicator).

use thiserror::Error;

mod cause;
mod conn;
mod ie;
mod misc;
mod msg;
mod party;
mod pnni;
#[cfg(test)]
pub(crate) mod tests;

pub use cause::{Cause, CauseValue, Location, NetworkRefusal};
pub use conn::{
    Aal5Params, AalParams, BearerCapability, BearerClass, BearerTraffic, Blli, CellRates, Clipping,
    ConnectionId, PrefExcl, SscsType, Timing, TrafficDescriptor, TrafficType, UserPlane, VpAssoc,
};
pub use ie::{CodingStandard, Ie, IeAction, IeBody, IeContent, IeFlags, RawIe, RawIes};
pub use misc::{
    Bhli, BhliType, CallState, EndpointRef, EndpointState, NatmParams, QosParams, RestartClass,
    RestartIndicator, SendingComplete,
};
pub use msg::{CallRef, HeaderRepr, Message, MessageType, MsgAction, MsgHandling, Packet};
pub use party::{
    CalledNumber, CalledSubaddress, CallingNumber, CallingSubaddress, NumberingPlan, PartyAddress,
    PresScreen, Presentation, Screening, Subaddress, SubaddressType, TransitNetwork, TypeOfNumber,
};
pub use pnni::{
    Blocked, Crankback, Dtl, DtlHop, NodeId, DTL_ENTRY_LEN, MAX_DTL_ENTRIES, NODE_ID_LEN,
    PEER_GROUP_LEVEL,
};

/// Octets in the message header at the UNI (3-octet call reference).
pub const HEADER_LEN: usize = 9;
/// Octets in an IE header (identifier, instruction octet, 2-octet length).
pub const IE_HEADER_LEN: usize = 4;
/// The protocol discriminator of Q.2931 / UNI signalling messages.
pub const PROTOCOL_DISCRIMINATOR: u8 = 0x09;
/// The call reference length at the UNI.
pub const CALL_REF_LEN: u8 = 3;
/// Largest IE contents or message body the 16-bit length fields describe.
pub const MAX_LEN: usize = 0xFFFF;

/// Declares a field whose values have names but whose other values are kept too.
///
/// `Other` holds only values without a name: `from_raw` never builds `Other(named)`,
/// so two equal fields compare equal. Emitters reject values wider than the field.
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $bits:literal {
            $( $(#[$vmeta:meta])* $var:ident = $val:literal => $text:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $var, )*
            /// A value without a name here, kept as received.
            Other(u8),
        }

        impl $name {
            /// Largest value the field holds.
            pub const MAX: u8 = ((1u16 << $bits) - 1) as u8;

            /// The field for a raw value; values without a name become `Other`.
            pub const fn from_raw(v: u8) -> Self {
                match v {
                    $( $val => Self::$var, )*
                    _ => Self::Other(v),
                }
            }

            /// The raw value.
            pub const fn raw(self) -> u8 {
                match self {
                    $( Self::$var => $val, )*
                    Self::Other(v) => v,
                }
            }

            /// What the value means, as the standard names it.
            pub const fn meaning(self) -> &'static str {
                match self {
                    $( Self::$var => $text, )*
                    Self::Other(_) => "unassigned",
                }
            }

            /// The raw value if it fits the field, for an emitter.
            #[allow(dead_code)]
            pub(crate) fn checked(
                self,
                field: &'static str,
            ) -> Result<u8, $crate::wire::q2931::IeProblem> {
                let v = self.raw();
                if v > Self::MAX {
                    Err($crate::wire::q2931::IeProblem::OutOfRange {
                        field,
                        value: u64::from(v),
                        max: u64::from(Self::MAX),
                    })
                } else {
                    Ok(v)
                }
            }
        }

        impl From<u8> for $name {
            fn from(v: u8) -> Self {
                Self::from_raw(v)
            }
        }

        impl From<$name> for u8 {
            fn from(v: $name) -> u8 {
                v.raw()
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                match self {
                    Self::Other(v) => write!(f, "unassigned ({v:#04x})"),
                    _ => f.write_str(self.meaning()),
                }
            }
        }
    };
}
pub(crate) use open_enum;

/// Implements [`IeContent::from_body`] for the `IeBody` variant named.
macro_rules! from_body {
    ($var:ident) => {
        fn from_body(body: &$crate::wire::q2931::IeBody) -> Option<&Self> {
            match body {
                $crate::wire::q2931::IeBody::$var(b) => Some(b),
                _ => None,
            }
        }
    };
}
pub(crate) use from_body;

open_enum! {
    /// Information element identifiers (specs.md §4.4, Q.2931 §4.5).
    pub enum IeId: 8 {
        /// Cause.
        Cause = 0x08 => "cause",
        /// Call state.
        CallState = 0x14 => "call state",
        /// Endpoint reference (point-to-multipoint).
        EndpointRef = 0x54 => "endpoint reference",
        /// Endpoint state (point-to-multipoint).
        EndpointState = 0x55 => "endpoint state",
        /// ATM adaptation layer parameters.
        Aal = 0x58 => "AAL parameters",
        /// ATM traffic descriptor (Wireshark: "ATM user cell rate").
        Traffic = 0x59 => "ATM traffic descriptor",
        /// Connection identifier (VPCI/VCI).
        ConnId = 0x5A => "connection identifier",
        /// Quality of service parameter.
        Qos = 0x5C => "QoS parameter",
        /// Broadband high-layer information.
        Bhli = 0x5D => "broadband high-layer information",
        /// Broadband bearer capability.
        Bearer = 0x5E => "broadband bearer capability",
        /// Broadband low-layer information.
        Blli = 0x5F => "broadband low-layer information",
        /// Broadband locking shift (not decoded here).
        LockingShift = 0x60 => "broadband locking shift",
        /// Broadband non-locking shift (not decoded here).
        NonLockingShift = 0x61 => "broadband non-locking shift",
        /// Broadband sending complete.
        SendingComplete = 0x62 => "broadband sending complete",
        /// Broadband repeat indicator (not decoded here).
        Repeat = 0x63 => "broadband repeat indicator",
        /// Calling party number.
        CallingNumber = 0x6C => "calling party number",
        /// Calling party subaddress.
        CallingSubaddr = 0x6D => "calling party subaddress",
        /// Called party number.
        CalledNumber = 0x70 => "called party number",
        /// Called party subaddress.
        CalledSubaddr = 0x71 => "called party subaddress",
        /// Transit network selection.
        TransitNet = 0x78 => "transit network selection",
        /// Restart indicator.
        Restart = 0x79 => "restart indicator",
        /// PNNI designated transit list ([`Dtl`], issue 33).
        Dtl = 0xD1 => "designated transit list",
        /// PNNI crankback ([`Crankback`], issue 33).
        Crankback = 0xE1 => "crankback",
        /// natm's private IE for the transport's parameters ([`NatmParams`]).
        Natm = 0xF8 => "natm transport parameters (private)",
    }
}

/// What is wrong with one IE, or with one field of it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IeProblem {
    /// Fewer than 4 octets are left for the IE header.
    #[error("the 4-octet IE header is cut off ({available} octets left)")]
    HeaderTruncated {
        /// Octets left in the message.
        available: usize,
    },
    /// The IE length runs past the end of the message.
    #[error("length {length} runs past the end of the message ({available} octets left)")]
    LengthOverrun {
        /// IE length field.
        length: usize,
        /// Octets left after the IE header.
        available: usize,
    },
    /// The contents end before a field they must have.
    #[error("{field} is missing (contents end early)")]
    Missing {
        /// The field.
        field: &'static str,
    },
    /// Octets are left after the last field.
    #[error("{extra} octets after the last field")]
    Trailing {
        /// Octets left over.
        extra: usize,
    },
    /// A field has a value the IE does not allow.
    #[error("{field} has the invalid value {value:#x}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// The value received (or given).
        value: u32,
    },
    /// A subfield that may appear once appears twice.
    #[error("{field} appears twice")]
    Duplicate {
        /// The subfield.
        field: &'static str,
    },
    /// A value to emit does not fit its field.
    #[error("{field} is {value}, above the maximum {max}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The largest value the field holds.
        max: u64,
    },
}

/// An IE that could not be parsed or emitted: which IE, where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{} at octet {offset}: {problem}", ie_label(.id))]
pub struct IeError {
    /// The IE identifier.
    pub id: IeId,
    /// The IE's instruction octet, when its header was complete.
    pub flags: Option<IeFlags>,
    /// Offset of the IE header in the message (0 when emitting).
    pub offset: usize,
    /// What is wrong.
    pub problem: IeProblem,
}

/// "cause IE (0x08)", or "unknown IE (0x99)" for an identifier without a name.
fn ie_label(id: &IeId) -> String {
    match id {
        IeId::Other(v) => format!("unknown IE ({v:#04x})"),
        _ => format!("{id} IE ({:#04x})", id.raw()),
    }
}

/// Why bytes are not a Q.2931 message, or a message cannot be emitted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Q2931Error {
    /// Fewer octets than the 9-octet header.
    #[error("message of {len} octets is shorter than the 9-octet header")]
    Truncated {
        /// Octets received.
        len: usize,
    },
    /// Not a Q.2931 message (Q.2931 §5.6.1: ignore it).
    #[error("protocol discriminator {pd:#04x} is not Q.2931 (0x09)")]
    ProtocolDiscriminator {
        /// Octet 1 received.
        pd: u8,
    },
    /// The call reference is not 3 octets long (Q.2931 §5.6.3.1: ignore the message).
    #[error("call reference length {len}, the UNI uses 3")]
    CallRefLength {
        /// Low nibble of octet 2 (or the whole octet if its high nibble is not 0).
        len: u8,
    },
    /// The message length field disagrees with the octets after the header (cause 104).
    #[error("message length field {field} does not match the {actual} octets after the header")]
    MessageLength {
        /// Octets 8-9.
        field: u16,
        /// Octets actually after the header.
        actual: usize,
    },
    /// The IEs add up to more than the 16-bit message length describes.
    #[error("message body of {len} octets exceeds the 65535-octet limit")]
    BodyTooLong {
        /// Body length.
        len: usize,
    },
    /// A header field to emit does not fit (call reference above 23 bits, action above 3).
    #[error("message header: {0}")]
    Header(IeProblem),
    /// One IE is malformed or cannot be emitted.
    #[error(transparent)]
    Ie(#[from] IeError),
}

impl Q2931Error {
    /// The cause a Q.2931 entity reports for this error in STATUS or RELEASE COMPLETE
    /// (Q.2931 §5.6), or `None` where it ignores the message instead.
    pub fn cause(&self) -> Option<Cause> {
        let (value, diagnostics) = match self {
            Q2931Error::MessageLength { .. } => (CauseValue::IncorrectMessageLength, vec![]),
            Q2931Error::Ie(e) => match e.problem {
                IeProblem::HeaderTruncated { .. } | IeProblem::LengthOverrun { .. } => {
                    (CauseValue::IncorrectMessageLength, vec![])
                }
                _ => (CauseValue::InvalidIeContents, vec![e.id.raw()]),
            },
            _ => return None,
        };
        Some(Cause {
            location: Location::User,
            value,
            diagnostics,
            crankback: None,
        })
    }
}

/// A cursor over IE contents that names the field that is missing.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Reader { data, at: 0 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.at >= self.data.len()
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.data.get(self.at).copied()
    }

    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], IeProblem> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len());
        match end.and_then(|e| self.data.get(self.at..e)) {
            Some(s) => {
                self.at += n;
                Ok(s)
            }
            None => Err(IeProblem::Missing { field }),
        }
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, IeProblem> {
        Ok(self.take(1, field)?[0])
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, IeProblem> {
        let b = self.take(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u24(&mut self, field: &'static str) -> Result<u32, IeProblem> {
        let b = self.take(3, field)?;
        Ok(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let r = self.data.get(self.at..).unwrap_or_default();
        self.at = self.data.len();
        r
    }

    pub(crate) fn finish(&self) -> Result<(), IeProblem> {
        match self.data.len().saturating_sub(self.at) {
            0 => Ok(()),
            extra => Err(IeProblem::Trailing { extra }),
        }
    }
}

/// Checks that `value` fits in `max` for an emitter.
pub(crate) fn fit(field: &'static str, value: u64, max: u64) -> Result<(), IeProblem> {
    if value > max {
        Err(IeProblem::OutOfRange { field, value, max })
    } else {
        Ok(())
    }
}

/// Checks an octet's extension bit (bit 8) is 1: the octet is the last of its group.
pub(crate) fn ext_last(field: &'static str, octet: u8) -> Result<u8, IeProblem> {
    if octet & 0x80 == 0 {
        Err(IeProblem::Invalid {
            field,
            value: u32::from(octet),
        })
    } else {
        Ok(octet)
    }
}
