//! The IE header, the walk over a message's IEs, and the typed IE (specs.md §4.3).
//!
//! ```text
//! octet 1    IE identifier
//! octet 2    1 | coding standard (2) | IE flag | pass-along (spare in UNI 3.1) | action (3)
//! octets 3-4 length of the contents, big-endian
//! ```

use core::fmt;

use super::{
    open_enum, AalParams, BearerCapability, Bhli, Blli, CallState, CalledNumber, CalledSubaddress,
    CallingNumber, CallingSubaddress, Cause, ConnectionId, Crankback, Dtl, EndpointRef,
    EndpointState, IeError, IeId, IeProblem, NatmParams, QosParams, RestartIndicator,
    SendingComplete, TrafficDescriptor, TransitNetwork, IE_HEADER_LEN, MAX_LEN,
};

/// Who defined the coding of an IE's contents (octet 2, bits 7-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CodingStandard {
    /// 00: ITU-T standardized coding (the only one Wireshark decodes).
    #[default]
    Itu,
    /// 01: ISO/IEC standard.
    Iso,
    /// 10: national standard.
    National,
    /// 11: standard defined for the network (ATM Forum codings, e.g. UNI 3.1 QoS
    /// classes 1-4, and natm's private IE).
    Network,
}

impl CodingStandard {
    /// The 2-bit value.
    pub const fn bits(self) -> u8 {
        match self {
            CodingStandard::Itu => 0,
            CodingStandard::Iso => 1,
            CodingStandard::National => 2,
            CodingStandard::Network => 3,
        }
    }

    /// The coding standard of a 2-bit value (higher bits ignored).
    pub const fn from_bits(bits: u8) -> Self {
        match bits & 3 {
            0 => CodingStandard::Itu,
            1 => CodingStandard::Iso,
            2 => CodingStandard::National,
            _ => CodingStandard::Network,
        }
    }
}

open_enum! {
    /// What a receiver does with an IE it cannot handle, if the IE flag says to follow
    /// explicit instructions (octet 2, bits 3-1).
    pub enum IeAction: 3 {
        /// 0.
        ClearCall = 0 => "clear call",
        /// 1.
        DiscardIe = 1 => "discard information element and proceed",
        /// 2.
        DiscardIeReport = 2 => "discard information element, proceed, and report status",
        /// 5.
        DiscardMessage = 5 => "discard message, and ignore",
        /// 6.
        DiscardMessageReport = 6 => "discard message, and report status",
    }
}

/// The IE instruction octet (octet 2). `IeFlags::default()` is 0x80: ITU-T coding,
/// regular error handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IeFlags {
    /// Coding standard of the contents.
    pub coding: CodingStandard,
    /// IE flag (bit 5): follow the explicit action below instead of the regular
    /// error handling procedures.
    pub explicit: bool,
    /// Bit 4: pass-along request (UNI 4.0; spare in UNI 3.1).
    pub pass_along: bool,
    /// Action indicator (bits 3-1), meaningful when `explicit` is set.
    pub action: IeAction,
}

impl Default for IeFlags {
    fn default() -> Self {
        IeFlags::new(CodingStandard::Itu)
    }
}

impl IeFlags {
    /// Regular error handling with the given coding standard.
    pub const fn new(coding: CodingStandard) -> IeFlags {
        IeFlags {
            coding,
            explicit: false,
            pass_along: false,
            action: IeAction::ClearCall,
        }
    }

    /// The flags of an instruction octet (its extension bit is ignored).
    pub const fn from_octet(octet: u8) -> IeFlags {
        IeFlags {
            coding: CodingStandard::from_bits(octet >> 5),
            explicit: octet & 0x10 != 0,
            pass_along: octet & 0x08 != 0,
            action: IeAction::from_raw(octet & 0x07),
        }
    }

    /// The instruction octet, extension bit set.
    pub fn to_octet(self) -> Result<u8, IeProblem> {
        let action = self.action.checked("IE action indicator")?;
        Ok(0x80
            | self.coding.bits() << 5
            | u8::from(self.explicit) << 4
            | u8::from(self.pass_along) << 3
            | action)
    }
}

/// One IE as it is on the wire, undecoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawIe<'a> {
    /// The identifier.
    pub id: u8,
    /// The instruction octet.
    pub flags: IeFlags,
    /// The contents (after the 4-octet header).
    pub data: &'a [u8],
    /// Offset of the IE header in the buffer walked.
    pub offset: usize,
}

/// Walks the IEs of a message body; yields an error (and then stops) where an IE
/// header is cut off or an IE runs past the end.
#[derive(Debug, Clone)]
pub struct RawIes<'a> {
    body: &'a [u8],
    at: usize,
    base: usize,
    failed: bool,
}

impl<'a> RawIes<'a> {
    /// The IEs of `body`, whose first octet is at `base` in the message (for offsets
    /// in errors; [`super::HEADER_LEN`] for a body cut from a whole message).
    pub fn new(body: &'a [u8], base: usize) -> RawIes<'a> {
        RawIes {
            body,
            at: 0,
            base,
            failed: false,
        }
    }
}

impl<'a> Iterator for RawIes<'a> {
    type Item = Result<RawIe<'a>, IeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.body.len() {
            return None;
        }
        let rest = self.body.get(self.at..).unwrap_or_default();
        let offset = self.base + self.at;
        let id = rest.first().copied().unwrap_or_default();
        let fail = |flags, problem| IeError {
            id: IeId::from_raw(id),
            flags,
            offset,
            problem,
        };
        let Some(&[_, octet2, l0, l1]) = rest.first_chunk::<IE_HEADER_LEN>() else {
            self.failed = true;
            let problem = IeProblem::HeaderTruncated {
                available: rest.len(),
            };
            return Some(Err(fail(None, problem)));
        };
        let flags = IeFlags::from_octet(octet2);
        let length = usize::from(u16::from_be_bytes([l0, l1]));
        let available = rest.len() - IE_HEADER_LEN;
        let Some(data) = rest.get(IE_HEADER_LEN..IE_HEADER_LEN + length) else {
            self.failed = true;
            let problem = IeProblem::LengthOverrun { length, available };
            return Some(Err(fail(Some(flags), problem)));
        };
        self.at += IE_HEADER_LEN + length;
        Some(Ok(RawIe {
            id,
            flags,
            data,
            offset,
        }))
    }
}

/// The contents of one kind of IE: parse and emit, and where it sits in [`IeBody`].
pub trait IeContent: Sized {
    /// The IE identifier.
    const ID: IeId;

    /// Decodes the contents (the octets after the IE header).
    fn parse_content(data: &[u8]) -> Result<Self, IeProblem>;

    /// Appends the contents (without the IE header).
    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem>;

    /// The coding standard this IE is sent with by default.
    fn default_coding(&self) -> CodingStandard {
        CodingStandard::Itu
    }

    /// Whether contents under `coding` are decoded as this type (else the IE is kept
    /// as [`IeBody::Unknown`]). Only ITU-T coding by default.
    fn decodes(coding: CodingStandard) -> bool {
        coding == CodingStandard::Itu
    }

    /// This IE, if `body` holds one.
    fn from_body(body: &IeBody) -> Option<&Self>;
}

macro_rules! ie_bodies {
    ($( $(#[$vmeta:meta])* $var:ident($ty:ty), )*) => {
        /// The typed contents of an IE.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum IeBody {
            $( $(#[$vmeta])* $var($ty), )*
            /// An IE this module does not decode (an unknown identifier, or a known one
            /// under another coding standard), kept to be re-emitted verbatim.
            Unknown {
                /// The identifier.
                id: u8,
                /// The contents.
                data: Vec<u8>,
            },
        }

        impl IeBody {
            /// The IE identifier.
            pub fn id(&self) -> u8 {
                match self {
                    $( IeBody::$var(_) => <$ty as IeContent>::ID.raw(), )*
                    IeBody::Unknown { id, .. } => *id,
                }
            }

            /// The coding standard this body is sent with by default.
            pub fn default_coding(&self) -> CodingStandard {
                match self {
                    $( IeBody::$var(b) => b.default_coding(), )*
                    IeBody::Unknown { .. } => CodingStandard::Itu,
                }
            }

            /// Decodes the contents of an IE with identifier `id` under `coding`.
            pub fn parse(id: u8, coding: CodingStandard, data: &[u8]) -> Result<IeBody, IeProblem> {
                $(
                    if id == <$ty as IeContent>::ID.raw() && <$ty as IeContent>::decodes(coding) {
                        return Ok(IeBody::$var(<$ty as IeContent>::parse_content(data)?));
                    }
                )*
                Ok(IeBody::Unknown { id, data: data.to_vec() })
            }

            /// Appends the contents (without the IE header).
            pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
                match self {
                    $( IeBody::$var(b) => b.emit_content(out), )*
                    IeBody::Unknown { data, .. } => {
                        out.extend_from_slice(data);
                        Ok(())
                    }
                }
            }
        }

        $(
            impl From<$ty> for IeBody {
                fn from(b: $ty) -> IeBody {
                    IeBody::$var(b)
                }
            }

            impl From<$ty> for Ie {
                fn from(b: $ty) -> Ie {
                    Ie::new(IeBody::$var(b))
                }
            }
        )*
    };
}

ie_bodies! {
    /// Cause (0x08).
    Cause(Cause),
    /// Call state (0x14).
    CallState(CallState),
    /// Endpoint reference (0x54).
    EndpointRef(EndpointRef),
    /// Endpoint state (0x55).
    EndpointState(EndpointState),
    /// AAL parameters (0x58).
    Aal(AalParams),
    /// ATM traffic descriptor (0x59).
    Traffic(TrafficDescriptor),
    /// Connection identifier (0x5A).
    ConnId(ConnectionId),
    /// QoS parameter (0x5C).
    Qos(QosParams),
    /// Broadband high-layer information (0x5D).
    Bhli(Bhli),
    /// Broadband bearer capability (0x5E).
    Bearer(BearerCapability),
    /// Broadband low-layer information (0x5F).
    Blli(Blli),
    /// Broadband sending complete (0x62).
    SendingComplete(SendingComplete),
    /// Calling party number (0x6C).
    CallingNumber(CallingNumber),
    /// Calling party subaddress (0x6D).
    CallingSubaddr(CallingSubaddress),
    /// Called party number (0x70).
    CalledNumber(CalledNumber),
    /// Called party subaddress (0x71).
    CalledSubaddr(CalledSubaddress),
    /// Transit network selection (0x78).
    TransitNet(TransitNetwork),
    /// Restart indicator (0x79).
    Restart(RestartIndicator),
    /// PNNI designated transit list (0xD1).
    Dtl(Dtl),
    /// PNNI crankback (0xE1).
    Crankback(Crankback),
    /// natm's private transport parameters (0xF8).
    Natm(NatmParams),
}

/// One information element: its instruction octet and its contents.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ie {
    /// The instruction octet.
    pub flags: IeFlags,
    /// The contents.
    pub body: IeBody,
}

impl Ie {
    /// The IE with regular error handling and the body's usual coding standard.
    pub fn new(body: IeBody) -> Ie {
        Ie {
            flags: IeFlags::new(body.default_coding()),
            body,
        }
    }

    /// The same IE with explicit error handling: a receiver that cannot handle it
    /// follows `action` (Q.2931 §5.6.8.1).
    #[must_use]
    pub fn with_action(mut self, action: IeAction) -> Ie {
        self.flags.explicit = true;
        self.flags.action = action;
        self
    }

    /// The IE identifier.
    pub fn id(&self) -> u8 {
        self.body.id()
    }

    /// Decodes one raw IE.
    pub fn parse(raw: &RawIe<'_>) -> Result<Ie, IeError> {
        match IeBody::parse(raw.id, raw.flags.coding, raw.data) {
            Ok(body) => Ok(Ie {
                flags: raw.flags,
                body,
            }),
            Err(problem) => Err(IeError {
                id: IeId::from_raw(raw.id),
                flags: Some(raw.flags),
                offset: raw.offset,
                problem,
            }),
        }
    }

    /// Appends the IE, header included.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), IeError> {
        let fail = |problem| IeError {
            id: IeId::from_raw(self.id()),
            flags: Some(self.flags),
            offset: 0,
            problem,
        };
        let start = out.len();
        let octet2 = self.flags.to_octet().map_err(fail)?;
        out.extend_from_slice(&[self.id(), octet2, 0, 0]);
        let result = self.body.emit(out);
        let len = out.len() - start - IE_HEADER_LEN;
        let result =
            result.and_then(|()| super::fit("IE contents length", len as u64, MAX_LEN as u64));
        if let Err(problem) = result {
            out.truncate(start);
            return Err(fail(problem));
        }
        out[start + 2..start + 4].copy_from_slice(&(len as u16).to_be_bytes());
        Ok(())
    }
}

impl fmt::Display for Ie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", IeId::from_raw(self.id()))
    }
}
