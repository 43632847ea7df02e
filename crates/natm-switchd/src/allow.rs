//! Which sources may connect to a listening port: a list of IP prefixes
//! (`10.0.0.0/8`, `192.0.2.7`, `fd00::/8`), loopback only unless the configuration
//! says otherwise (issue 31: an atmtcp port took the first connection from anyone,
//! and that one connection held the port).

use std::fmt;
use std::net::IpAddr;

/// Source prefixes a listening port accepts connections from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allow(Vec<Prefix>);

/// One prefix: an address and how many leading bits must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Allow {
    /// The default: loopback only (`127.0.0.0/8`, `::1`).
    pub fn loopback() -> Allow {
        Allow(vec![
            Prefix {
                addr: IpAddr::from([127, 0, 0, 0]),
                len: 8,
            },
            Prefix {
                addr: IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
                len: 128,
            },
        ])
    }

    /// Parse `IP` or `IP/LEN` entries; an error names the entry and why.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Allow, String> {
        entries
            .iter()
            .map(|e| Prefix::parse(e.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map(Allow)
    }

    /// Whether `ip` is inside one of the prefixes (an IPv4 address mapped into IPv6,
    /// as a dual-stack listener sees it, is matched as the IPv4 address).
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|p| p.contains(ip))
    }
}

impl Prefix {
    fn parse(s: &str) -> Result<Prefix, String> {
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an IP address or IP/PREFIX"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => match l.trim().parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("`{s}`: the prefix length is 0..={max}")),
            },
        };
        Ok(Prefix {
            addr: addr.to_canonical(),
            len,
        })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let bits = |ip: IpAddr| -> (u128, u32) {
            match ip {
                IpAddr::V4(v) => (u128::from(u32::from(v)), 32),
                IpAddr::V6(v) => (u128::from(v), 128),
            }
        };
        let ((want, w), (got, g)) = (bits(self.addr), bits(ip));
        if w != g {
            return false;
        }
        let shift = w - u32::from(self.len);
        shift >= w || (want >> shift) == (got >> shift)
    }
}

impl fmt::Display for Allow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}/{}", p.addr, p.len)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn prefixes_match_their_addresses_and_no_others() {
        let a = Allow::parse(&["10.1.0.0/16", "192.0.2.7", "fd00::/8"]).unwrap();
        assert!(a.permits(ip("10.1.200.3")));
        assert!(!a.permits(ip("10.2.0.1")));
        assert!(a.permits(ip("192.0.2.7")));
        assert!(!a.permits(ip("192.0.2.8")));
        assert!(a.permits(ip("fd12::1")));
        assert!(!a.permits(ip("fe80::1")));
        assert!(a.permits(ip("::ffff:10.1.2.3")), "v4-mapped is v4");
        assert!(!a.permits(ip("127.0.0.1")));
        let any = Allow::parse(&["0.0.0.0/0"]).unwrap();
        assert!(any.permits(ip("203.0.113.9")));
        assert!(!any.permits(ip("::2")), "a v4 prefix matches no v6 address");
    }

    #[test]
    fn the_default_is_loopback_only() {
        let a = Allow::loopback();
        assert!(a.permits(ip("127.0.0.1")));
        assert!(a.permits(ip("127.9.9.9")));
        assert!(a.permits(ip("::1")));
        assert!(!a.permits(ip("10.0.0.1")));
        assert_eq!(a.to_string(), "127.0.0.0/8, ::1/128");
    }

    #[test]
    fn bad_entries_are_refused_with_what_is_wrong() {
        let e = Allow::parse(&["10.0.0.0/33"]).unwrap_err();
        assert!(e.contains("0..=32"), "{e}");
        let e = Allow::parse(&["example.org"]).unwrap_err();
        assert!(e.contains("not an IP"), "{e}");
        let e = Allow::parse(&["::/129"]).unwrap_err();
        assert!(e.contains("0..=128"), "{e}");
    }
}
