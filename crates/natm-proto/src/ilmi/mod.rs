//! ILMI, the Integrated Local Management Interface (ATM Forum ILMI 4.0, af-ilmi-0065):
//! SNMPv1 messages (RFC 1157) in AAL5 SDUs on VPI 0 / VCI 16 of a UNI, by which the
//! network side (a switch) hands the user side its network prefix and takes the user's
//! address registrations (the address-registration MIB: `atmfNetPrefixTable` on the
//! user, `atmfAddressTable` on the network). [`network::NetworkSide`] is a switch port's
//! end and [`user::UserSide`] a host's, both sans-IO.
//!
//! Departures: only address registration and the objects a user reads while it starts
//! (Linux-ATM's `ilmid` reads the system group, the port's identity and the ATM layer
//! group); no service registry (LECS addresses), no SNMP beyond ILMI. Messages use the
//! community "ILMI" and are refused over [`MAX_MESSAGE`] octets (ilmid's largest SDU).
//! The BER codec is `rasn-snmp`'s.

pub mod network;
pub mod user;

use rasn::types::{Integer, ObjectIdentifier, OctetString};
use rasn_smi::v1::{ApplicationSyntax, IpAddress, NetworkAddress, ObjectSyntax, SimpleSyntax};
use rasn_snmp::v1::Message;

/// SNMPv1's messages (RFC 1157), as ILMI carries them.
pub use rasn_smi::v1::TimeTicks;
pub use rasn_snmp::v1::{
    GetNextRequest, GetRequest, GetResponse, Pdu, Pdus, SetRequest, Trap, VarBind,
};

/// ILMI's VCI (on VPI 0).
pub const ILMI_VCI: u16 = crate::wire::vcframe::ILMI_VCI;
/// The SNMP community every ILMI message carries.
pub const COMMUNITY: &[u8] = b"ILMI";
/// Largest ILMI message taken or sent, octets: Linux's `ilmid` opens VCI 16 with this
/// largest SDU (SNMP's 484-octet minimum).
pub const MAX_MESSAGE: usize = 484;
/// A network prefix: the first 13 octets of an ATM End System Address (AESA).
pub const PREFIX_LEN: usize = 13;
/// An AESA: prefix, 6-octet end system identifier, selector.
pub const ADDRESS_LEN: usize = 20;

/// SNMPv1 error-status values (RFC 1157 §4.1.1).
pub mod status {
    /// noError.
    pub const NO_ERROR: i64 = 0;
    /// noSuchName: an object the agent does not have (or may not write).
    pub const NO_SUCH_NAME: i64 = 2;
    /// badValue: a value the agent does not take.
    pub const BAD_VALUE: i64 = 3;
    /// readOnly.
    pub const READ_ONLY: i64 = 4;
}

/// Object identifiers (instances, with their `.0` or table index).
pub mod oid {
    /// `sysDescr.0` … `sysServices.0` are `SYSTEM` + `[n, 0]`, n = 1..=7.
    pub const SYSTEM: &[u32] = &[1, 3, 6, 1, 2, 1, 1];
    /// `sysUpTime.0`.
    pub const SYS_UP_TIME: &[u32] = &[1, 3, 6, 1, 2, 1, 1, 3, 0];
    /// The ATM Forum's enterprise arc, `atmForum.atmForumNetworkManagement`.
    pub const ATMF: &[u32] = &[1, 3, 6, 1, 4, 1, 353, 2];
    /// `atmfPortMyIfName.0`.
    pub const PORT_MY_IF_NAME: &[u32] = &[1, 3, 6, 1, 4, 1, 353, 2, 1, 1, 1, 7, 0];
    /// `atmfPortMyIdentifier.0`.
    pub const PORT_MY_IDENTIFIER: &[u32] = &[1, 3, 6, 1, 4, 1, 353, 2, 1, 1, 1, 8, 0];
    /// `atmfMyIpNmAddress.0`.
    pub const MY_IP_NM_ADDRESS: &[u32] = &[1, 3, 6, 1, 4, 1, 353, 2, 1, 2, 0];
    /// `atmfMySystemIdentifier.0`.
    pub const MY_SYSTEM_IDENTIFIER: &[u32] = &[1, 3, 6, 1, 4, 1, 353, 2, 1, 4, 0];
    /// `atmfAtmLayerTable` columns are `ATM_LAYER` + `[column, 0]` (port 0: this one).
    pub const ATM_LAYER: &[u32] = &[1, 3, 6, 1, 4, 1, 353, 2, 2, 1, 1];
    /// `atmfAddressStatus`: the network side's address table, indexed by port, then
    /// the address as a length and its octets.
    pub const ADDRESS_STATUS: &[u32] = &[1, 3, 6, 1, 4, 1, 353, 2, 6, 1, 1, 3];
    /// `atmfNetPrefixStatus`: the user side's prefix table, indexed by port, then the
    /// prefix as a length and its octets.
    pub const NET_PREFIX_STATUS: &[u32] = &[1, 3, 6, 1, 4, 1, 353, 2, 7, 1, 1, 3];
    /// `atmfAddressRegistrationAdminStatus.0`.
    pub const ADDRESS_REGISTRATION_ADMIN_STATUS: &[u32] =
        &[1, 3, 6, 1, 4, 1, 353, 2, 11, 1, 1, 2, 0];
    /// The enterprise a coldStart trap names (as Linux's `ilmid` sends it).
    pub const TRAP_ENTERPRISE: &[u32] = &[1, 3, 6, 1, 4, 1, 3, 1, 1];
}

/// The ATM layer group's columns ([`oid::ATM_LAYER`]).
pub mod atm_layer {
    /// `atmfAtmLayerMaxVpiBits`.
    pub const MAX_VPI_BITS: u32 = 6;
    /// `atmfAtmLayerMaxVciBits`.
    pub const MAX_VCI_BITS: u32 = 7;
    /// `atmfAtmLayerUniType`: public(1), private(2).
    pub const UNI_TYPE: u32 = 8;
    /// `atmfAtmLayerUniVersion`: 3.0(2), 3.1(3), 4.0(4).
    pub const UNI_VERSION: u32 = 9;
    /// `atmfAtmLayerDeviceType`: user(1), node(2).
    pub const DEVICE_TYPE: u32 = 10;
    /// `atmfAtmLayerIlmiVersion`: 4.0(2).
    pub const ILMI_VERSION: u32 = 11;
    /// `atmfAtmLayerNniSigVersion`: unsupported(1).
    pub const NNI_SIG_VERSION: u32 = 12;
}

/// An ILMI message that cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IlmiError {
    /// Longer than [`MAX_MESSAGE`] octets.
    #[error("ILMI message of {0} octets, over {MAX_MESSAGE}")]
    TooLong(usize),
    /// Not a BER-encoded SNMPv1 message.
    #[error("not an SNMPv1 message")]
    Malformed,
    /// Another SNMP version (ILMI is SNMPv1, version field 0).
    #[error("SNMP version {0}, ILMI is version 1 (0)")]
    Version(i64),
    /// Another community than "ILMI".
    #[error("SNMP community is not \"ILMI\"")]
    Community,
}

/// A decoded ILMI message.
pub type IlmiMessage = Message<Pdus>;

/// Decode one ILMI message (an AAL5 SDU on VCI 16).
pub fn decode(sdu: &[u8]) -> Result<IlmiMessage, IlmiError> {
    if sdu.len() > MAX_MESSAGE {
        return Err(IlmiError::TooLong(sdu.len()));
    }
    let m: IlmiMessage = rasn::ber::decode(sdu).map_err(|_| IlmiError::Malformed)?;
    match int(&m.version) {
        Some(0) => {}
        v => return Err(IlmiError::Version(v.unwrap_or(-1))),
    }
    if m.community.as_ref() != COMMUNITY {
        return Err(IlmiError::Community);
    }
    Ok(m)
}

/// Encode `pdus` as an ILMI message; `None` if it would be over [`MAX_MESSAGE`].
pub fn encode(pdus: Pdus) -> Option<Vec<u8>> {
    let m = Message {
        version: Integer::from(0),
        community: OctetString::from_static(COMMUNITY),
        data: pdus,
    };
    rasn::ber::encode(&m)
        .ok()
        .filter(|b| b.len() <= MAX_MESSAGE)
}

/// An integer's value, if it fits an `i64`.
pub fn int(i: &Integer) -> Option<i64> {
    i64::try_from(i).ok()
}

/// An object identifier from its arcs (ILMI's all start 1.3, so they are valid).
pub fn oid(arcs: &[u32]) -> ObjectIdentifier {
    ObjectIdentifier::new(arcs.to_vec())
        .unwrap_or_else(|| ObjectIdentifier::new(vec![0, 0]).expect("0.0 is an object identifier"))
}

/// `name` = INTEGER `v`.
pub fn integer(v: i64) -> ObjectSyntax {
    ObjectSyntax::Simple(SimpleSyntax::Number(Integer::from(v)))
}

/// An OCTET STRING value.
pub fn octets(v: &[u8]) -> ObjectSyntax {
    ObjectSyntax::Simple(SimpleSyntax::String(OctetString::from_slice(v)))
}

/// A TimeTicks value (hundredths of a second).
pub fn ticks(v: u32) -> ObjectSyntax {
    ObjectSyntax::ApplicationWide(ApplicationSyntax::Ticks(TimeTicks(v)))
}

/// A NULL value, as requests carry.
pub fn null() -> ObjectSyntax {
    ObjectSyntax::Simple(SimpleSyntax::Empty)
}

/// An INTEGER value's number.
pub fn as_int(v: &ObjectSyntax) -> Option<i64> {
    match v {
        ObjectSyntax::Simple(SimpleSyntax::Number(n)) => int(n),
        _ => None,
    }
}

/// A coldStart trap (generic trap 0, as Linux's `ilmid` sends it) at `uptime`
/// hundredths of a second: its sender (re)started, so what it registered is gone.
pub fn cold_start(uptime: u32) -> Pdus {
    Pdus::Trap(Trap {
        enterprise: oid(oid::TRAP_ENTERPRISE),
        agent_addr: NetworkAddress::Internet(IpAddress([0u8; 4].into())),
        generic_trap: 0.into(),
        specific_trap: 0.into(),
        time_stamp: TimeTicks(uptime),
        variable_bindings: vec![bind(oid::SYS_UP_TIME, null())],
    })
}

/// One variable binding.
pub fn bind(name: &[u32], value: ObjectSyntax) -> VarBind {
    VarBind {
        name: oid(name),
        value,
    }
}

/// A PDU with these bindings.
pub fn pdu(request_id: i64, error_status: i64, error_index: i64, binds: Vec<VarBind>) -> Pdu {
    Pdu {
        request_id: Integer::from(request_id),
        error_status: Integer::from(error_status),
        error_index: Integer::from(error_index),
        variable_bindings: binds,
    }
}

/// The index of an instance of a table column `column` in `name` (the arcs after it),
/// if `name` is one.
pub fn index_of<'a>(name: &'a [u32], column: &[u32]) -> Option<&'a [u32]> {
    name.strip_prefix(column)
}

/// An ATM address or prefix table index: `port`, then a length, then that many octets
/// (each an arc 0..=255). The octets, if `index` is one for `len` octets.
pub fn parse_octets_index(index: &[u32], len: usize) -> Option<(u32, Vec<u8>)> {
    let (&port, rest) = index.split_first()?;
    let (&n, octets) = rest.split_first()?;
    if n as usize != len || octets.len() != len {
        return None;
    }
    let bytes = octets
        .iter()
        .map(|&a| u8::try_from(a).ok())
        .collect::<Option<Vec<u8>>>()?;
    Some((port, bytes))
}

/// The instance of table column `column` for `port` and `octets` (see
/// [`parse_octets_index`]).
pub fn octets_index(column: &[u32], port: u32, octets: &[u8]) -> Vec<u32> {
    let mut arcs = column.to_vec();
    arcs.push(port);
    arcs.push(octets.len() as u32);
    arcs.extend(octets.iter().map(|&o| u32::from(o)));
    arcs
}

/// A GetRequest's answer: every value `value` gives, or noSuchName at the first
/// name it has none for.
pub(crate) fn get_reply(
    req: &Pdu,
    value: impl Fn(&[u32]) -> Option<rasn_smi::v1::ObjectSyntax>,
) -> Pdu {
    let mut binds = Vec::with_capacity(req.variable_bindings.len());
    for (i, vb) in req.variable_bindings.iter().enumerate() {
        match value(&vb.name) {
            Some(value) => binds.push(VarBind {
                name: vb.name.clone(),
                value,
            }),
            None => return error_reply(req, status::NO_SUCH_NAME, i + 1),
        }
    }
    pdu(
        int(&req.request_id).unwrap_or(0),
        status::NO_ERROR,
        0,
        binds,
    )
}

/// The answer to `req` refusing it with `status` at binding `index` (1-based), its
/// bindings echoed (RFC 1157 §4.1.2).
pub(crate) fn error_reply(req: &Pdu, error: i64, index: usize) -> Pdu {
    pdu(
        int(&req.request_id).unwrap_or(0),
        error,
        i64::try_from(index).unwrap_or(0),
        req.variable_bindings.clone(),
    )
}

#[cfg(test)]
mod tests;
