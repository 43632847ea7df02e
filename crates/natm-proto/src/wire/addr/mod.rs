//! ATM addresses as text: the Linux-ATM `text2atm`/`atm2text` syntax.
//!
//! Three kinds of address (Linux's `sockaddr_atmpvc` and `sockaddr_atmsvc`):
//! - a PVC, `[itf.]vpi.vci` — `0.5` is interface 0, VPI 0, VCI 5; any part may be `*`
//!   (any) and the VPI and VCI may be `?` (unspecified), as Linux accepts when binding;
//! - an AESA (the 20-byte NSAP-format ATM end system address), 40 hex digits with dots
//!   wherever the writer likes, e.g. `47.0005.80FFE1000000F21A26D8.0020481A26D8.00`; or,
//!   for the E.164 AESA format (AFI 45), the E.164 number, a colon and the 22 hex digits
//!   that follow it, e.g. `4122123456:0000.0020481A26D8.00`;
//! - an E.164 number, `+` and up to 15 digits (dots allowed between digits), optionally
//!   followed by `+` and an AESA subaddress.
//!
//! Names are resolved through an explicit [`HostsFile`] (the format of `/etc/hosts.atm`)
//! by [`AtmAddr::parse_with_hosts`]; `FromStr` never reads a file.
//!
//! ```
//! use natm_proto::wire::addr::{AtmAddr, HostsFile};
//! let a: AtmAddr = "47.0005.80ffe1000000f21a26d8.0020481a26d8.00".parse().unwrap();
//! assert_eq!(a.to_string(), "47.0005.80FFE1000000F21A26D8.0020481A26D8.00");
//! let hosts: HostsFile = "0.0.42  switch-mgmt  # the switch\n".parse().unwrap();
//! let pvc = AtmAddr::parse_with_hosts("switch-mgmt", &hosts).unwrap();
//! assert_eq!(pvc.to_string(), "0.0.42");
//! ```
//!
//! # Grammar
//! ```text
//! address  = pvc | aesa | e164 | name ;
//! pvc      = [ part "." ] part "." part ;      (* itf.vpi.vci, itf 0 if omitted *)
//! part     = "0" | nonzero { digit } | "*" | "?" ;  (* no leading zeros; itf not "?" *)
//! aesa     = hexdots                            (* exactly 40 hex digits, AFI not 00 *)
//!          | e164-digits ":" hexdots ;          (* 22 hex digits after the colon *)
//! hexdots  = hex { [ "." ] hex } ;              (* a dot only between two hex digits *)
//! e164     = "+" digits [ "+" aesa ] ;          (* 1..=15 digits *)
//! digits   = digit { [ "." ] digit } ;
//! ```
//! Ranges: itf 0..=32767, VPI 0..=255 (UNI), VCI 0..=65535.
//!
//! # Printing
//! As `atm2text` with `A2T_PRETTY`: PVCs always with three parts; AESAs in upper-case
//! hex, grouped by format — DCC and ICD (AFI 39, 47, BD, C5) as 1.2.10.6.1 bytes, local
//! (49, C7) as 1.12.6.1, E.164 (45) as `number:` then 4.6.1, any other AFI as 40 bare
//! digits; E.164 numbers as `+` and the digits.
//!
//! # Where this departs from Linux, and why
//! - An E.164 number needs its `+`. Linux also takes bare digits (`1234`) and dotted
//!   digits, after trying PVC and AESA forms, so `1.2.3.4` is E.164 `1234` there but
//!   `1.2.3` a PVC; natm reports a malformed PVC instead of guessing.
//! - E.164 numbers may have 15 digits (ITU-T E.164); Linux's buffer holds 12.
//! - A malformed PVC or AESA is an error that says what is wrong; Linux falls through
//!   to the next form and, at the end, to a name lookup, and reports only failure.
//! - E.164-format AESAs whose digits cannot be printed in the `number:` form (not
//!   binary-coded decimal, or the group AFI C3, which the colon form cannot express)
//!   print as 40 bare digits; Linux's pretty printer fails on the first and prints the
//!   second in a form that parses back as AFI 45.
//! - Not supported: the `/length` prefix wildcard for AESAs, and the NNI VPI range.
//!   A `:SAP` suffix is not part of an address here either; natm's API carries the SAP
//!   separately.

mod hosts;
mod parse;
mod prefix;
#[cfg(test)]
mod tests;

pub use hosts::{HostsEntry, HostsError, HostsFile, HostsLineError};
pub use parse::{AddrErrorKind, AddrParseError};
pub use prefix::{from_party, key, party, Prefix};

use std::fmt;
use std::str::FromStr;

/// One part of a PVC address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PvcPart {
    /// This interface, VPI or VCI.
    Num(u16),
    /// Any value (`*`, Linux's `ATM_*_ANY`).
    Any,
    /// Not yet specified (`?`, Linux's `ATM_*_UNSPEC`); not allowed for the interface.
    Unspec,
}

/// A permanent virtual circuit: interface, VPI, VCI, each possibly a wildcard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pvc {
    itf: PvcPart,
    vpi: PvcPart,
    vci: PvcPart,
}

impl Pvc {
    /// Largest interface number (Linux's `short`).
    pub const MAX_ITF: u16 = 32_767;
    /// Largest VPI at the UNI (8 bits).
    pub const MAX_VPI: u16 = 255;
    /// Largest VCI (16 bits).
    pub const MAX_VCI: u16 = u16::MAX;

    /// A PVC, if every number is in range and the interface is not [`PvcPart::Unspec`].
    pub fn new(itf: PvcPart, vpi: PvcPart, vci: PvcPart) -> Option<Pvc> {
        let fits = |part: PvcPart, max: u16| !matches!(part, PvcPart::Num(n) if n > max);
        (itf != PvcPart::Unspec && fits(itf, Pvc::MAX_ITF) && fits(vpi, Pvc::MAX_VPI))
            .then_some(Pvc { itf, vpi, vci })
    }

    /// A PVC without wildcards, if `itf` is at most [`Pvc::MAX_ITF`].
    pub fn exact(itf: u16, vpi: u8, vci: u16) -> Option<Pvc> {
        Pvc::new(
            PvcPart::Num(itf),
            PvcPart::Num(u16::from(vpi)),
            PvcPart::Num(vci),
        )
    }

    /// The interface.
    pub fn itf(&self) -> PvcPart {
        self.itf
    }

    /// The VPI.
    pub fn vpi(&self) -> PvcPart {
        self.vpi
    }

    /// The VCI.
    pub fn vci(&self) -> PvcPart {
        self.vci
    }

    /// Whether any part is `*` or `?`.
    pub fn is_wildcard(&self) -> bool {
        [self.itf, self.vpi, self.vci]
            .iter()
            .any(|p| !matches!(p, PvcPart::Num(_)))
    }
}

/// An ATM end system address: 20 bytes in NSAP format (AFI, IDI, HO-DSP, ESI, SEL).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Aesa([u8; Aesa::LEN]);

impl Aesa {
    /// Length in bytes.
    pub const LEN: usize = 20;
    /// AFI of the DCC format.
    pub const AFI_DCC: u8 = 0x39;
    /// AFI of the ICD format.
    pub const AFI_ICD: u8 = 0x47;
    /// AFI of the E.164 format.
    pub const AFI_E164: u8 = 0x45;
    /// AFI of the local format.
    pub const AFI_LOCAL: u8 = 0x49;
    /// AFI of the DCC group format.
    pub const AFI_DCC_GROUP: u8 = 0xBD;
    /// AFI of the ICD group format.
    pub const AFI_ICD_GROUP: u8 = 0xC5;
    /// AFI of the E.164 group format.
    pub const AFI_E164_GROUP: u8 = 0xC3;
    /// AFI of the local group format.
    pub const AFI_LOCAL_GROUP: u8 = 0xC7;

    /// The address with these bytes, unless the AFI (first byte) is 0, which no
    /// address format uses and which Linux refuses too.
    pub fn new(bytes: [u8; Aesa::LEN]) -> Option<Aesa> {
        (bytes[0] != 0).then_some(Aesa(bytes))
    }

    /// The 20 bytes, as carried in a called/calling party number IE.
    pub fn as_bytes(&self) -> &[u8; Aesa::LEN] {
        &self.0
    }

    /// The authority and format identifier (first byte).
    pub fn afi(&self) -> u8 {
        self.0[0]
    }

    /// The end system identifier (bytes 13..19), usually a MAC address.
    pub fn esi(&self) -> [u8; 6] {
        let mut esi = [0; 6];
        esi.copy_from_slice(&self.0[13..19]);
        esi
    }

    /// The selector (last byte), which the ATM network does not route on.
    pub fn selector(&self) -> u8 {
        self.0[19]
    }

    /// The E.164 number of an E.164-format AESA in the form `atm2text` prints (digits
    /// without leading zeros), if the address has that form.
    fn e164_digits(&self) -> Option<String> {
        if self.afi() != Aesa::AFI_E164 {
            return None;
        }
        let nibble = |i: usize| (self.0[i / 2] >> (4 * (1 - i % 2))) & 0xF;
        if nibble(17) != 0xF || (2..17).any(|i| nibble(i) > 9) {
            return None;
        }
        let digits: String = (2..17)
            .map(|i| char::from(b'0' + nibble(i)))
            .skip_while(|&c| c == '0')
            .collect();
        (!digits.is_empty()).then_some(digits)
    }
}

impl fmt::Debug for Aesa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Aesa({self})")
    }
}

impl fmt::Display for Aesa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (start, groups): (usize, &[usize]) = match self.afi() {
            Aesa::AFI_DCC | Aesa::AFI_ICD | Aesa::AFI_DCC_GROUP | Aesa::AFI_ICD_GROUP => {
                (0, &[1, 2, 10, 6, 1])
            }
            Aesa::AFI_LOCAL | Aesa::AFI_LOCAL_GROUP => (0, &[1, 12, 6, 1]),
            _ => match self.e164_digits() {
                Some(digits) => {
                    write!(f, "{digits}:")?;
                    (9, &[4, 6, 1])
                }
                None => (0, &[20]),
            },
        };
        let mut at = start;
        for (i, &len) in groups.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            for byte in self.0.get(at..at + len).unwrap_or_default() {
                write!(f, "{byte:02X}")?;
            }
            at += len;
        }
        Ok(())
    }
}

/// An E.164 number: 1 to 15 decimal digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct E164 {
    digits: [u8; E164::MAX_DIGITS],
    len: u8,
}

impl E164 {
    /// Most digits in an E.164 number.
    pub const MAX_DIGITS: usize = 15;

    /// The number with these digits, if there are 1 to 15 and all are `0`..=`9`.
    pub fn new(digits: &str) -> Option<E164> {
        let len = digits.len();
        if len == 0 || len > E164::MAX_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut number = E164 {
            digits: [0; E164::MAX_DIGITS],
            len: u8::try_from(len).ok()?,
        };
        number.digits[..len].copy_from_slice(digits.as_bytes());
        Some(number)
    }

    /// The digits.
    pub fn as_str(&self) -> &str {
        let digits = self.digits.get(..usize::from(self.len)).unwrap_or_default();
        std::str::from_utf8(digits).unwrap_or_default()
    }
}

impl fmt::Debug for E164 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "E164(+{})", self.as_str())
    }
}

impl fmt::Display for E164 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "+{}", self.as_str())
    }
}

/// An ATM address: a PVC, or an SVC address (an AESA, or an E.164 number with an
/// optional AESA subaddress).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtmAddr {
    /// A permanent virtual circuit.
    Pvc(Pvc),
    /// A private (NSAP-format) ATM address.
    Aesa(Aesa),
    /// A public E.164 number, optionally with a private subaddress.
    E164 {
        /// The number.
        number: E164,
        /// The AESA subaddress (called/calling party subaddress IE).
        subaddress: Option<Aesa>,
    },
}

impl AtmAddr {
    /// Parses `s`, resolving a name through `hosts` if `s` is not an address itself.
    pub fn parse_with_hosts(s: &str, hosts: &HostsFile) -> Result<AtmAddr, AddrParseError> {
        parse::parse(s, 0, s.len(), Some(hosts))
    }

    /// Whether this is a PVC address with a `*` or `?` part.
    pub fn is_wildcard(&self) -> bool {
        matches!(self, AtmAddr::Pvc(pvc) if pvc.is_wildcard())
    }
}

impl FromStr for AtmAddr {
    type Err = AddrParseError;

    /// Parses an address; names are an error here (see [`AtmAddr::parse_with_hosts`]).
    fn from_str(s: &str) -> Result<AtmAddr, AddrParseError> {
        parse::parse(s, 0, s.len(), None)
    }
}

impl fmt::Display for PvcPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PvcPart::Num(n) => write!(f, "{n}"),
            PvcPart::Any => f.write_str("*"),
            PvcPart::Unspec => f.write_str("?"),
        }
    }
}

impl fmt::Display for Pvc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.itf, self.vpi, self.vci)
    }
}

impl fmt::Display for AtmAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AtmAddr::Pvc(pvc) => write!(f, "{pvc}"),
            AtmAddr::Aesa(aesa) => write!(f, "{aesa}"),
            AtmAddr::E164 {
                number,
                subaddress: None,
            } => write!(f, "{number}"),
            AtmAddr::E164 {
                number,
                subaddress: Some(sub),
            } => write!(f, "{number}+{sub}"),
        }
    }
}
