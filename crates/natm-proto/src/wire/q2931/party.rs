//! Party numbers, subaddresses and transit network selection (specs.md §4.4).
//!
//! ```text
//! called  o5   1 | type of number (3) | numbering plan (4)          then the address
//! calling o5   E | type of number (3) | numbering plan (4)
//!         o5a  1 | presentation (2) | 000 | screening (2)    (only if E = 0)
//! subaddr o5   1 | type (3) | odd/even | 000                        then the subaddress
//! ```
//! The address is a 20-octet AESA (plan 2, "ISO NSAP") or E.164 digits in IA5
//! (plan 1); [`PartyAddress`] holds either as the types of [`crate::wire::addr`].

use super::{ext_last, fit, from_body, open_enum, IeContent, IeId, IeProblem, Reader};
use crate::wire::addr::{Aesa, E164};

open_enum! {
    /// Type of number (octet 5, bits 7-5).
    pub enum TypeOfNumber: 3 {
        /// 0.
        Unknown = 0 => "unknown",
        /// 1.
        International = 1 => "international number",
        /// 2.
        National = 2 => "national number",
        /// 3.
        NetworkSpecific = 3 => "network specific number",
        /// 4.
        Subscriber = 4 => "subscriber number",
        /// 6.
        Abbreviated = 6 => "abbreviated number",
    }
}

open_enum! {
    /// Numbering plan (octet 5, bits 4-1).
    pub enum NumberingPlan: 4 {
        /// 0.
        Unknown = 0 => "unknown",
        /// 1: E.164 digits in IA5.
        E164 = 1 => "ISDN/telephony numbering plan (E.164)",
        /// 2: a 20-octet ATM end system address.
        Aesa = 2 => "ISO NSAP addressing (ATM end system address)",
        /// 9.
        Private = 9 => "private numbering plan",
    }
}

/// The address of a party number IE.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PartyAddress {
    /// Plan 2: an AESA.
    Aesa(Aesa),
    /// Plan 1: an E.164 number.
    E164(E164),
    /// Any other plan (not 1 or 2), address octets raw.
    Other {
        /// The numbering plan.
        plan: NumberingPlan,
        /// The address octets.
        digits: Vec<u8>,
    },
}

impl PartyAddress {
    /// The numbering plan.
    pub fn plan(&self) -> NumberingPlan {
        match self {
            PartyAddress::Aesa(_) => NumberingPlan::Aesa,
            PartyAddress::E164(_) => NumberingPlan::E164,
            PartyAddress::Other { plan, .. } => *plan,
        }
    }

    fn parse(plan: NumberingPlan, digits: &[u8]) -> Result<PartyAddress, IeProblem> {
        match plan {
            NumberingPlan::Aesa => <[u8; Aesa::LEN]>::try_from(digits)
                .ok()
                .and_then(Aesa::new)
                .map(PartyAddress::Aesa)
                .ok_or(IeProblem::Invalid {
                    field: "AESA (20 octets, AFI not 0) of length",
                    value: digits.len() as u32,
                }),
            NumberingPlan::E164 => core::str::from_utf8(digits)
                .ok()
                .and_then(E164::new)
                .map(PartyAddress::E164)
                .ok_or(IeProblem::Invalid {
                    field: "E.164 number (1-15 IA5 digits) of length",
                    value: digits.len() as u32,
                }),
            _ => Ok(PartyAddress::Other {
                plan,
                digits: digits.to_vec(),
            }),
        }
    }

    fn emit(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        match self {
            PartyAddress::Aesa(a) => out.extend_from_slice(a.as_bytes()),
            PartyAddress::E164(e) => out.extend_from_slice(e.as_str().as_bytes()),
            PartyAddress::Other { plan, digits } => {
                if matches!(plan, NumberingPlan::Aesa | NumberingPlan::E164) {
                    return Err(IeProblem::Invalid {
                        field: "PartyAddress::Other numbering plan",
                        value: u32::from(plan.raw()),
                    });
                }
                out.extend_from_slice(digits);
            }
        }
        Ok(())
    }
}

fn number_octet(ton: TypeOfNumber, addr: &PartyAddress, ext: bool) -> Result<u8, IeProblem> {
    let t = ton.checked("type of number")?;
    let p = addr.plan().checked("numbering plan")?;
    Ok(u8::from(ext) << 7 | t << 4 | p)
}

/// The called party number IE (0x70).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CalledNumber {
    /// Type of number.
    pub ton: TypeOfNumber,
    /// The address (and with it the numbering plan).
    pub address: PartyAddress,
}

impl CalledNumber {
    /// An AESA of unknown type of number, as in specs.md §4.5.
    pub fn aesa(aesa: Aesa) -> CalledNumber {
        CalledNumber {
            ton: TypeOfNumber::Unknown,
            address: PartyAddress::Aesa(aesa),
        }
    }
}

impl IeContent for CalledNumber {
    const ID: IeId = IeId::CalledNumber;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let o5 = ext_last("octet 5 extension bit", r.u8("type of number / plan")?)?;
        let plan = NumberingPlan::from_raw(o5 & 0x0F);
        Ok(CalledNumber {
            ton: TypeOfNumber::from_raw(o5 >> 4 & 0x07),
            address: PartyAddress::parse(plan, r.rest())?,
        })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        out.push(number_octet(self.ton, &self.address, true)?);
        self.address.emit(out)
    }

    from_body!(CalledNumber);
}

open_enum! {
    /// Presentation indicator (calling number octet 5a, bits 7-6).
    pub enum Presentation: 2 {
        /// 0.
        Allowed = 0 => "presentation allowed",
        /// 1.
        Restricted = 1 => "presentation restricted",
        /// 2.
        NotAvailable = 2 => "number not available",
    }
}

open_enum! {
    /// Screening indicator (calling number octet 5a, bits 2-1).
    pub enum Screening: 2 {
        /// 0.
        NotScreened = 0 => "user-provided, not screened",
        /// 1.
        VerifiedPassed = 1 => "user-provided, verified and passed",
        /// 2.
        VerifiedFailed = 2 => "user-provided, verified and failed",
        /// 3.
        Network = 3 => "network provided",
    }
}

/// Octet 5a of the calling party number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PresScreen {
    /// Presentation indicator.
    pub presentation: Presentation,
    /// Screening indicator.
    pub screening: Screening,
}

/// The calling party number IE (0x6C).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallingNumber {
    /// Type of number.
    pub ton: TypeOfNumber,
    /// Octet 5a, present iff octet 5's extension bit is 0.
    pub pres: Option<PresScreen>,
    /// The address (and with it the numbering plan).
    pub address: PartyAddress,
}

impl CallingNumber {
    /// An AESA of unknown type of number, presentation allowed, not screened (the
    /// SETUP of specs.md §4.5).
    pub fn aesa(aesa: Aesa) -> CallingNumber {
        CallingNumber {
            ton: TypeOfNumber::Unknown,
            pres: Some(PresScreen {
                presentation: Presentation::Allowed,
                screening: Screening::NotScreened,
            }),
            address: PartyAddress::Aesa(aesa),
        }
    }
}

impl IeContent for CallingNumber {
    const ID: IeId = IeId::CallingNumber;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let o5 = r.u8("type of number / plan")?;
        let pres = if o5 & 0x80 == 0 {
            let o5a = ext_last("octet 5a extension bit", r.u8("presentation / screening")?)?;
            Some(PresScreen {
                presentation: Presentation::from_raw(o5a >> 5 & 0x03),
                screening: Screening::from_raw(o5a & 0x03),
            })
        } else {
            None
        };
        let plan = NumberingPlan::from_raw(o5 & 0x0F);
        Ok(CallingNumber {
            ton: TypeOfNumber::from_raw(o5 >> 4 & 0x07),
            pres,
            address: PartyAddress::parse(plan, r.rest())?,
        })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        out.push(number_octet(self.ton, &self.address, self.pres.is_none())?);
        if let Some(ps) = self.pres {
            let p = ps.presentation.checked("presentation indicator")?;
            let s = ps.screening.checked("screening indicator")?;
            out.push(0x80 | p << 5 | s);
        }
        self.address.emit(out)
    }

    from_body!(CallingNumber);
}

open_enum! {
    /// Type of subaddress (octet 5, bits 7-5).
    pub enum SubaddressType: 3 {
        /// 0: NSAP (X.213 / ISO 8348).
        Nsap = 0 => "NSAP (X.213/ISO 8348)",
        /// 1: ATM end system address.
        Aesa = 1 => "ATM end system address",
        /// 2: user-specified.
        UserSpecified = 2 => "user-specified",
    }
}

/// A party subaddress, as both subaddress IEs carry it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Subaddress {
    /// Type of subaddress.
    pub kind: SubaddressType,
    /// Odd/even indicator (for BCD user-specified subaddresses).
    pub odd: bool,
    /// The subaddress octets.
    pub address: Vec<u8>,
}

impl Subaddress {
    /// An AESA subaddress (the private address behind an E.164 number).
    pub fn aesa(aesa: &Aesa) -> Subaddress {
        Subaddress {
            kind: SubaddressType::Aesa,
            odd: false,
            address: aesa.as_bytes().to_vec(),
        }
    }

    fn parse(data: &[u8]) -> Result<Subaddress, IeProblem> {
        let mut r = Reader::new(data);
        let o5 = ext_last("octet 5 extension bit", r.u8("type of subaddress")?)?;
        Ok(Subaddress {
            kind: SubaddressType::from_raw(o5 >> 4 & 0x07),
            odd: o5 & 0x08 != 0,
            address: r.rest().to_vec(),
        })
    }

    fn emit(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        let t = self.kind.checked("type of subaddress")?;
        out.push(0x80 | t << 4 | u8::from(self.odd) << 3);
        out.extend_from_slice(&self.address);
        Ok(())
    }
}

/// The called party subaddress IE (0x71).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CalledSubaddress(pub Subaddress);

/// The calling party subaddress IE (0x6D).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallingSubaddress(pub Subaddress);

impl IeContent for CalledSubaddress {
    const ID: IeId = IeId::CalledSubaddr;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        Subaddress::parse(data).map(CalledSubaddress)
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        self.0.emit(out)
    }

    from_body!(CalledSubaddr);
}

impl IeContent for CallingSubaddress {
    const ID: IeId = IeId::CallingSubaddr;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        Subaddress::parse(data).map(CallingSubaddress)
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        self.0.emit(out)
    }

    from_body!(CallingSubaddr);
}

/// The transit network selection IE (0x78).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TransitNetwork {
    /// Type of network identification (3 bits; 2 = national network identification).
    pub id_type: u8,
    /// Network identification plan (4 bits; 1 = carrier identification code).
    pub plan: u8,
    /// The network identification, IA5 characters.
    pub network: Vec<u8>,
}

impl IeContent for TransitNetwork {
    const ID: IeId = IeId::TransitNet;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let o5 = ext_last(
            "octet 5 extension bit",
            r.u8("network identification type")?,
        )?;
        Ok(TransitNetwork {
            id_type: o5 >> 4 & 0x07,
            plan: o5 & 0x0F,
            network: r.rest().to_vec(),
        })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        fit("network identification type", u64::from(self.id_type), 7)?;
        fit("network identification plan", u64::from(self.plan), 15)?;
        out.push(0x80 | self.id_type << 4 | self.plan);
        out.extend_from_slice(&self.network);
        Ok(())
    }

    from_body!(TransitNet);
}
