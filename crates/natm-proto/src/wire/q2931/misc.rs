//! Small IEs: call state, endpoint reference and state, QoS parameter, restart
//! indicator, sending complete, B-HLI, and natm's private transport-parameters IE (specs.md §4.4).

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{
    ext_last, fit, from_body, open_enum, CodingStandard, IeContent, IeId, IeProblem, Reader,
};
use crate::wire::tpdu::{ConnParams, PARAMS_LEN};

/// Parses a 1-octet IE whose value is the low 6 bits (bits 8-7 spare).
fn six_bits(data: &[u8], field: &'static str) -> Result<u8, IeProblem> {
    let mut r = Reader::new(data);
    let v = r.u8(field)? & 0x3F;
    r.finish()?;
    Ok(v)
}

/// The call state IE (0x14): a 6-bit state number (Q.2931 §2; user side U0-U12,
/// network side N0-N12 use the same numbers; REST1/REST2 for the global call reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallState(pub u8);

impl CallState {
    /// U0/N0 null.
    pub const NULL: CallState = CallState(0);
    /// U1/N1 call initiated.
    pub const CALL_INITIATED: CallState = CallState(1);
    /// U3/N3 outgoing call proceeding.
    pub const OUTGOING_CALL_PROCEEDING: CallState = CallState(3);
    /// U6/N6 call present.
    pub const CALL_PRESENT: CallState = CallState(6);
    /// U8/N8 connect request.
    pub const CONNECT_REQUEST: CallState = CallState(8);
    /// U9/N9 incoming call proceeding.
    pub const INCOMING_CALL_PROCEEDING: CallState = CallState(9);
    /// U10/N10 active (Wireshark 4.0 mislabels it "Incoming call proceeding").
    pub const ACTIVE: CallState = CallState(10);
    /// U11/N11 release request.
    pub const RELEASE_REQUEST: CallState = CallState(11);
    /// U12/N12 release indication.
    pub const RELEASE_INDICATION: CallState = CallState(12);
    /// REST1 restart request (global call reference).
    pub const RESTART_REQUEST: CallState = CallState(0x3D);
    /// REST2 restart (global call reference).
    pub const RESTART: CallState = CallState(0x3E);
}

impl fmt::Display for CallState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            Self::NULL => "null",
            Self::CALL_INITIATED => "call initiated",
            Self::OUTGOING_CALL_PROCEEDING => "outgoing call proceeding",
            Self::CALL_PRESENT => "call present",
            Self::CONNECT_REQUEST => "connect request",
            Self::INCOMING_CALL_PROCEEDING => "incoming call proceeding",
            Self::ACTIVE => "active",
            Self::RELEASE_REQUEST => "release request",
            Self::RELEASE_INDICATION => "release indication",
            Self::RESTART_REQUEST => "restart request",
            Self::RESTART => "restart",
            _ => "unassigned",
        };
        write!(f, "{name} ({})", self.0)
    }
}

impl IeContent for CallState {
    const ID: IeId = IeId::CallState;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        six_bits(data, "call state").map(CallState)
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        fit("call state", u64::from(self.0), 0x3F)?;
        out.push(self.0);
        Ok(())
    }

    from_body!(CallState);
}

/// The endpoint reference IE (0x54): which party of a point-to-multipoint call.
/// Value 0 is the first party (the one in the SETUP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndpointRef {
    /// Flag: false from the side that allocated the value, true towards it.
    pub flag: bool,
    /// The 15-bit endpoint reference value.
    pub value: u16,
}

impl EndpointRef {
    /// Largest value (15 bits).
    pub const MAX: u16 = 0x7FFF;
}

impl IeContent for EndpointRef {
    const ID: IeId = IeId::EndpointRef;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let ty = r.u8("endpoint reference type")?;
        if ty != 0 {
            return Err(IeProblem::Invalid {
                field: "endpoint reference type",
                value: u32::from(ty),
            });
        }
        let v = r.u16("endpoint reference value")?;
        r.finish()?;
        Ok(EndpointRef {
            flag: v & 0x8000 != 0,
            value: v & Self::MAX,
        })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        fit(
            "endpoint reference value",
            u64::from(self.value),
            u64::from(Self::MAX),
        )?;
        out.push(0);
        out.extend_from_slice(&(u16::from(self.flag) << 15 | self.value).to_be_bytes());
        Ok(())
    }

    from_body!(EndpointRef);
}

/// The endpoint state IE (0x55): the state of one party (6 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndpointState(pub u8);

impl EndpointState {
    /// P0 null.
    pub const NULL: EndpointState = EndpointState(0);
    /// P1 add party initiated.
    pub const ADD_PARTY_INITIATED: EndpointState = EndpointState(1);
    /// P6 add party received.
    pub const ADD_PARTY_RECEIVED: EndpointState = EndpointState(6);
    /// P7 party active.
    pub const ACTIVE: EndpointState = EndpointState(0x0A);
    /// P11 drop party initiated.
    pub const DROP_PARTY_INITIATED: EndpointState = EndpointState(0x0B);
    /// P12 drop party received.
    pub const DROP_PARTY_RECEIVED: EndpointState = EndpointState(0x0C);
}

impl IeContent for EndpointState {
    const ID: IeId = IeId::EndpointState;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        six_bits(data, "endpoint state").map(EndpointState)
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        fit("endpoint state", u64::from(self.0), 0x3F)?;
        out.push(self.0);
        Ok(())
    }

    from_body!(EndpointState);
}

/// The QoS parameter IE (0x5C): a QoS class per direction. Class 0 (unspecified) is
/// ITU-T coded; UNI 3.1 classes 1-4 need coding standard 11, which is this IE's
/// default coding whenever a class is not 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QosParams {
    /// Forward QoS class.
    pub fwd: u8,
    /// Backward QoS class.
    pub bwd: u8,
}

impl IeContent for QosParams {
    const ID: IeId = IeId::Qos;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let fwd = r.u8("forward QoS class")?;
        let bwd = r.u8("backward QoS class")?;
        r.finish()?;
        Ok(QosParams { fwd, bwd })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        out.extend_from_slice(&[self.fwd, self.bwd]);
        Ok(())
    }

    fn default_coding(&self) -> CodingStandard {
        if self.fwd == 0 && self.bwd == 0 {
            CodingStandard::Itu
        } else {
            CodingStandard::Network
        }
    }

    fn decodes(coding: CodingStandard) -> bool {
        matches!(coding, CodingStandard::Itu | CodingStandard::Network)
    }

    from_body!(Qos);
}

open_enum! {
    /// What a RESTART restarts (restart indicator octet 5, bits 3-1).
    pub enum RestartClass: 3 {
        /// 0: the VC in the connection identifier.
        IndicatedVc = 0 => "indicated virtual channel",
        /// 1: all VCs in the indicated VPC.
        AllVcsInVpc = 1 => "all virtual channels in the indicated VPC",
        /// 2: all VCs of the interface.
        AllVcs = 2 => "all virtual channels",
    }
}

/// The restart indicator IE (0x79).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RestartIndicator(pub RestartClass);

impl IeContent for RestartIndicator {
    const ID: IeId = IeId::Restart;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let o = ext_last("octet 5 extension bit", r.u8("restart class")?)?;
        r.finish()?;
        Ok(RestartIndicator(RestartClass::from_raw(o & 0x07)))
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        out.push(0x80 | self.0.checked("restart class")?);
        Ok(())
    }

    from_body!(Restart);
}

/// The broadband sending complete IE (0x62): the called number is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendingComplete;

impl IeContent for SendingComplete {
    const ID: IeId = IeId::SendingComplete;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let o = r.u8("sending complete indication")?;
        if o != 0xA1 {
            return Err(IeProblem::Invalid {
                field: "sending complete indication",
                value: u32::from(o),
            });
        }
        r.finish()?;
        Ok(SendingComplete)
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        out.push(0xA1);
        Ok(())
    }

    from_body!(SendingComplete);
}

open_enum! {
    /// High layer information type (B-HLI octet 5, bits 7-1).
    pub enum BhliType: 7 {
        /// 0: ISO.
        Iso = 0 => "ISO",
        /// 1: user-specific.
        UserSpecific = 1 => "user specific",
        /// 2: high layer profile (UNI 3.0 only).
        Profile = 2 => "high layer profile",
        /// 3: vendor-specific application identifier (OUI + application id).
        VendorSpecific = 3 => "vendor-specific application identifier",
    }
}

/// The broadband high-layer information IE (0x5D).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bhli {
    /// Type of the information.
    pub kind: BhliType,
    /// The information, at most 8 octets.
    pub info: Vec<u8>,
}

impl Bhli {
    /// Most octets of high layer information.
    pub const MAX_INFO: usize = 8;
}

impl IeContent for Bhli {
    const ID: IeId = IeId::Bhli;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let o = ext_last(
            "octet 5 extension bit",
            r.u8("high layer information type")?,
        )?;
        let info = r.rest();
        fit(
            "high layer information length",
            info.len() as u64,
            Self::MAX_INFO as u64,
        )?;
        Ok(Bhli {
            kind: BhliType::from_raw(o & 0x7F),
            info: info.to_vec(),
        })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        fit(
            "high layer information length",
            self.info.len() as u64,
            Self::MAX_INFO as u64,
        )?;
        out.push(0x80 | self.kind.checked("high layer information type")?);
        out.extend_from_slice(&self.info);
        Ok(())
    }

    from_body!(Bhli);
}

/// natm's private IE (identifier 0xF8, coding standard 11 "network specific"): the
/// transport's parameters, carried end to end in SETUP and CONNECT so that both ends
/// agree on them before the VC opens.
///
/// 0xF8 is outside every identifier Q.2931, UNI 3.1/4.0 and Wireshark 4.0 name; with
/// coding standard 11 Wireshark shows the contents as raw data, and a UNI 3.1 switch
/// that does not know it handles it as an unrecognized IE (Q.2931 §5.6.8.1), so send it
/// with the action "discard IE and proceed" ([`super::Ie::with_action`]).
///
/// ```text
/// octet 5      version (1)
/// then fields  tag (1) | length (2, big-endian) | value
///              tag 1: transport parameters, the 48 octets of `tpdu::ConnParams`
///              tag 2: QoS text (UTF-8, the `wire::qos` syntax)
///              tag 3: data endpoint, the sender's UDP endpoint for the VC's data path:
///                     family (1: 4 = IPv4, 6 = IPv6) | address (4 or 16) | port (2)
///              tag 4: cookie (4, big-endian): the capability the TPDU header carries
///                     (`TransportConfig::cookie`; seed 001 §4.2)
///              other tags: kept as they are, for later versions
/// ```
/// Tags 3 and 4 were added after version 1 was in use; an older decoder keeps them
/// in `extra`, so the version octet stays 1.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NatmParams {
    /// The TPDU handshake parameters.
    pub transport: Option<ConnParams>,
    /// The QoS text.
    pub qos: Option<String>,
    /// The data endpoint (UDP address and port) of the side that sends this IE.
    pub data_endpoint: Option<SocketAddr>,
    /// The data path cookie.
    pub cookie: Option<u32>,
    /// Fields with other tags (not 1 to 4), in order.
    pub extra: Vec<(u8, Vec<u8>)>,
}

impl NatmParams {
    /// The version octet this code writes and reads.
    pub const VERSION: u8 = 1;
    /// Tag of the transport parameters.
    pub const TAG_TRANSPORT: u8 = 1;
    /// Tag of the QoS text.
    pub const TAG_QOS: u8 = 2;
    /// Tag of the data endpoint.
    pub const TAG_ENDPOINT: u8 = 3;
    /// Tag of the cookie.
    pub const TAG_COOKIE: u8 = 4;

    /// Tag of the sender's ephemeral X25519 key share (32 octets, issue 16): in SETUP
    /// the caller's, in CONNECT the callee's. Kept in [`NatmParams::extra`], read and
    /// written with [`NatmParams::key_share`] and [`NatmParams::set_key_share`]: a
    /// peer that does not know the tag carries it on as any other.
    pub const TAG_KEY_SHARE: u8 = 5;

    /// The sender's X25519 key share, if it sent exactly one of 32 octets.
    pub fn key_share(&self) -> Option<[u8; crate::wire::seal::SHARE_LEN]> {
        let mut shares = self.extra.iter().filter(|(t, _)| *t == Self::TAG_KEY_SHARE);
        match (shares.next(), shares.next()) {
            (Some((_, v)), None) => v.as_slice().try_into().ok(),
            _ => None,
        }
    }

    /// Put this side's key share in the IE (replacing any).
    pub fn set_key_share(&mut self, share: [u8; crate::wire::seal::SHARE_LEN]) {
        self.extra.retain(|(t, _)| *t != Self::TAG_KEY_SHARE);
        self.extra.push((Self::TAG_KEY_SHARE, share.to_vec()));
    }

    fn is_typed_tag(tag: u8) -> bool {
        matches!(
            tag,
            Self::TAG_TRANSPORT | Self::TAG_QOS | Self::TAG_ENDPOINT | Self::TAG_COOKIE
        )
    }
}

fn parse_endpoint(value: &[u8]) -> Result<SocketAddr, IeProblem> {
    let mut r = Reader::new(value);
    let family = r.u8("data endpoint family")?;
    let ip = match family {
        4 => {
            let b = r.take(4, "data endpoint IPv4 address")?;
            IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
        }
        6 => {
            let b = r.take(16, "data endpoint IPv6 address")?;
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            IpAddr::V6(Ipv6Addr::from(a))
        }
        _ => {
            return Err(IeProblem::Invalid {
                field: "data endpoint family (4 or 6)",
                value: u32::from(family),
            })
        }
    };
    let port = r.u16("data endpoint port")?;
    r.finish()?;
    Ok(SocketAddr::new(ip, port))
}

fn emit_endpoint(addr: &SocketAddr) -> Vec<u8> {
    let mut v = Vec::with_capacity(19);
    match addr.ip() {
        IpAddr::V4(a) => {
            v.push(4);
            v.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            v.push(6);
            v.extend_from_slice(&a.octets());
        }
    }
    v.extend_from_slice(&addr.port().to_be_bytes());
    v
}

fn put_field(out: &mut Vec<u8>, tag: u8, value: &[u8]) -> Result<(), IeProblem> {
    fit("natm field length", value.len() as u64, u64::from(u16::MAX))?;
    out.push(tag);
    out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    out.extend_from_slice(value);
    Ok(())
}

impl IeContent for NatmParams {
    const ID: IeId = IeId::Natm;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let version = r.u8("natm IE version")?;
        if version != Self::VERSION {
            return Err(IeProblem::Invalid {
                field: "natm IE version",
                value: u32::from(version),
            });
        }
        let mut p = NatmParams::default();
        while !r.is_empty() {
            let tag = r.u8("natm field tag")?;
            let len = usize::from(r.u16("natm field length")?);
            let value = r.take(len, "natm field value")?;
            match tag {
                Self::TAG_TRANSPORT => {
                    if p.transport.is_some() {
                        return Err(IeProblem::Duplicate {
                            field: "transport parameters",
                        });
                    }
                    let cp = ConnParams::parse(value).map_err(|_| IeProblem::Invalid {
                        field: "transport parameters",
                        value: len as u32,
                    })?;
                    p.transport = Some(cp);
                }
                Self::TAG_QOS => {
                    if p.qos.is_some() {
                        return Err(IeProblem::Duplicate { field: "QoS text" });
                    }
                    let text = core::str::from_utf8(value).map_err(|e| IeProblem::Invalid {
                        field: "QoS text (UTF-8) at octet",
                        value: e.valid_up_to() as u32,
                    })?;
                    p.qos = Some(text.to_owned());
                }
                Self::TAG_ENDPOINT => {
                    if p.data_endpoint.is_some() {
                        return Err(IeProblem::Duplicate {
                            field: "data endpoint",
                        });
                    }
                    p.data_endpoint = Some(parse_endpoint(value)?);
                }
                Self::TAG_COOKIE => {
                    if p.cookie.is_some() {
                        return Err(IeProblem::Duplicate { field: "cookie" });
                    }
                    let b = <[u8; 4]>::try_from(value).map_err(|_| IeProblem::Invalid {
                        field: "cookie length (4)",
                        value: len as u32,
                    })?;
                    p.cookie = Some(u32::from_be_bytes(b));
                }
                _ => p.extra.push((tag, value.to_vec())),
            }
        }
        Ok(p)
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        out.push(Self::VERSION);
        if let Some(cp) = &self.transport {
            let mut b = [0u8; PARAMS_LEN];
            cp.emit(&mut b);
            put_field(out, Self::TAG_TRANSPORT, &b)?;
        }
        if let Some(q) = &self.qos {
            put_field(out, Self::TAG_QOS, q.as_bytes())?;
        }
        if let Some(a) = &self.data_endpoint {
            put_field(out, Self::TAG_ENDPOINT, &emit_endpoint(a))?;
        }
        if let Some(c) = self.cookie {
            put_field(out, Self::TAG_COOKIE, &c.to_be_bytes())?;
        }
        for (tag, value) in &self.extra {
            if Self::is_typed_tag(*tag) {
                return Err(IeProblem::Invalid {
                    field: "natm extra field tag",
                    value: u32::from(*tag),
                });
            }
            put_field(out, *tag, value)?;
        }
        Ok(())
    }

    fn default_coding(&self) -> CodingStandard {
        CodingStandard::Network
    }

    fn decodes(coding: CodingStandard) -> bool {
        coding == CodingStandard::Network
    }

    from_body!(Natm);
}
