//! Address prefixes, for routing calls by the longest match (sigd's directory and a
//! switch's routes): addresses compare as digit strings, an AESA as its 40 hex digits,
//! an E.164 number as `+` and its digits; a prefix is written the way the address is
//! (`47.0005.80`, `+4420`), dots ignored.

use super::{AtmAddr, HostsFile};
use crate::wire::q2931::PartyAddress;

/// The digit string an address is matched on.
pub fn key(a: &AtmAddr) -> String {
    match a {
        AtmAddr::Aesa(x) => hex::encode(x.as_bytes()),
        AtmAddr::E164 { number, .. } => format!("+{}", number.as_str()),
        AtmAddr::Pvc(p) => format!("pvc:{p}"),
    }
}

/// An address prefix (`*` matches everything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefix(String);

impl Prefix {
    /// Parse `47.0005.80`, `+4420`, a host name (its whole address) or `*`.
    pub fn parse(s: &str, hosts: &HostsFile) -> Result<Prefix, String> {
        let t = s.trim();
        if t == "*" {
            return Ok(Prefix(String::new()));
        }
        if let Some(digits) = t.strip_prefix('+') {
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                return Ok(Prefix(t.to_owned()));
            }
            return Err(format!("\"{s}\": an E.164 prefix is + and digits"));
        }
        let hex: String = t.chars().filter(|&c| c != '.').collect();
        if !hex.is_empty() && hex.len() <= 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(Prefix(hex.to_ascii_lowercase()));
        }
        match hosts.lookup(t) {
            Some(a) => Ok(Prefix(key(a))),
            None => Err(format!(
                "\"{s}\" is neither hex digits of an NSAP address, + and E.164 digits, a name in the hosts file, nor *"
            )),
        }
    }

    /// Whether `a` starts with this prefix.
    pub fn matches(&self, a: &AtmAddr) -> bool {
        key(a).starts_with(&self.0)
    }

    /// Digits in the prefix (longer is more specific).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether this is `*`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The digit string this prefix matches on ([`key`]'s form; empty for `*`): how a
    /// switch advertises it to the others (issue 33).
    pub fn as_key(&self) -> &str {
        &self.0
    }

    /// A prefix from its digit string ([`Prefix::as_key`]), if it is one.
    pub fn from_key(k: &str) -> Option<Prefix> {
        let ok = match k.strip_prefix('+') {
            Some(d) => !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()),
            None => {
                k.len() <= 40
                    && k.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            }
        };
        ok.then(|| Prefix(k.to_owned()))
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("*")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// An ATM address as a Q.2931 party number (`None` for a PVC, which no SETUP names).
pub fn party(a: &AtmAddr) -> Option<PartyAddress> {
    match a {
        AtmAddr::Aesa(x) => Some(PartyAddress::Aesa(*x)),
        AtmAddr::E164 { number, .. } => Some(PartyAddress::E164(*number)),
        AtmAddr::Pvc(_) => None,
    }
}

/// A Q.2931 party number as an ATM address, if it is one natm can route.
pub fn from_party(p: &PartyAddress) -> Option<AtmAddr> {
    match p {
        PartyAddress::Aesa(x) => Some(AtmAddr::Aesa(*x)),
        PartyAddress::E164(n) => Some(AtmAddr::E164 {
            number: *n,
            subaddress: None,
        }),
        PartyAddress::Other { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_digits_and_star() {
        let h = HostsFile::default();
        let a: AtmAddr = "47.0005.80ffe1000000f21a26d8.0020ea000ee0.00"
            .parse()
            .unwrap();
        assert!(Prefix::parse("47.0005", &h).unwrap().matches(&a));
        assert!(!Prefix::parse("47.0006", &h).unwrap().matches(&a));
        assert!(Prefix::parse("*", &h).unwrap().is_empty());
        assert_eq!(Prefix::parse("47.00.05", &h).unwrap().len(), 6);
        let e: AtmAddr = "+4420001".parse().unwrap();
        assert!(Prefix::parse("+442", &h).unwrap().matches(&e));
        assert!(Prefix::parse("+4x", &h).is_err());
        assert_eq!(from_party(&party(&e).unwrap()), Some(e));
    }
}
