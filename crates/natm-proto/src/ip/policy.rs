//! The QoS policy of IP over natm: which VC class an IP packet rides.
//!
//! A policy is a list of rules, first match wins, and a default. A rule is a
//! match, an arrow (`->`, `=>` or `→`) and a QoS in natm's text syntax:
//!
//! ```text
//! udp dport 5004 -> cbr:pcr=20Mbps
//! tcp dport 22 to 10.0.0.0/24 -> reliable
//! icmp -> best-effort
//! ```
//!
//! Match words: `tcp`, `udp`, `icmp` (ICMP or ICMPv6), `proto N`, `dport N[-M]`,
//! `sport N[-M]`, `to PREFIX` (destination address or prefix, IPv4 or IPv6), `any`.
//! A port match never matches a packet without ports (not TCP/UDP, or a non-first
//! IPv4 fragment). Each distinct class gets its own VC to a destination, so a
//! guaranteed video flow and a bulk transfer to the same peer never share one.

use std::net::IpAddr;

use thiserror::Error;

use super::packet::Flow;

/// Longest policy text taken (a config file's rules, joined).
pub const MAX_POLICY_LEN: usize = 64 * 1024;
/// Most rules in one policy.
pub const MAX_RULES: usize = 256;

/// IP protocol numbers the match words name.
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_ICMP: u8 = 1;
const PROTO_ICMPV6: u8 = 58;

/// One rule: what it matches and the QoS text of its class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The protocols matched (empty: any).
    pub protos: Vec<u8>,
    /// Destination ports, inclusive.
    pub dport: Option<(u16, u16)>,
    /// Source ports, inclusive.
    pub sport: Option<(u16, u16)>,
    /// Destination prefix.
    pub to: Option<(IpAddr, u8)>,
    /// The QoS of the class (natm QoS text, checked by the caller).
    pub qos: String,
}

/// Why a policy does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PolicyError {
    /// Longer than [`MAX_POLICY_LEN`] or more than [`MAX_RULES`] rules.
    #[error("policy too long (at most {MAX_RULES} rules of {MAX_POLICY_LEN} bytes in all)")]
    TooLong,
    /// A rule without an arrow and a QoS.
    #[error("rule {0}: no `-> QOS` (e.g. `udp dport 5004 -> cbr:pcr=20Mbps`)")]
    NoArrow(usize),
    /// A word the match does not know, or a bad value after one.
    #[error("rule {rule}: bad match `{word}` (tcp, udp, icmp, proto N, dport N[-M], sport N[-M], to PREFIX, any)")]
    Match {
        /// The rule's number, from 1.
        rule: usize,
        /// The word.
        word: String,
    },
}

/// A parsed policy: rules in order, then the default class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
    default_qos: String,
}

impl Policy {
    /// A policy from rule text (one rule per line or `;`-separated; `#` comments) and
    /// the default QoS of packets no rule matches.
    pub fn parse(text: &str, default_qos: &str) -> Result<Policy, PolicyError> {
        if text.len() > MAX_POLICY_LEN {
            return Err(PolicyError::TooLong);
        }
        let mut rules = Vec::new();
        for line in text.split(['\n', ';']) {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            if rules.len() == MAX_RULES {
                return Err(PolicyError::TooLong);
            }
            rules.push(parse_rule(line, rules.len() + 1)?);
        }
        Ok(Policy {
            rules,
            default_qos: default_qos.trim().to_owned(),
        })
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Number of classes: one per rule, and the default (the last).
    pub fn classes(&self) -> usize {
        self.rules.len() + 1
    }

    /// The QoS text of class `class` (the default for any index past the rules).
    pub fn qos(&self, class: usize) -> &str {
        self.rules.get(class).map_or(&self.default_qos, |r| &r.qos)
    }

    /// The class of a packet: the first rule that matches, else the default.
    pub fn classify(&self, flow: &Flow) -> usize {
        self.rules
            .iter()
            .position(|r| r.matches(flow))
            .unwrap_or(self.rules.len())
    }
}

impl Rule {
    /// Whether `flow` matches every part of the rule.
    pub fn matches(&self, flow: &Flow) -> bool {
        let in_range = |p: Option<u16>, r: Option<(u16, u16)>| match r {
            None => true,
            Some((lo, hi)) => p.is_some_and(|p| (lo..=hi).contains(&p)),
        };
        (self.protos.is_empty() || self.protos.contains(&flow.proto))
            && in_range(flow.dport, self.dport)
            && in_range(flow.sport, self.sport)
            && self
                .to
                .is_none_or(|(net, len)| prefix_contains(net, len, flow.dst))
    }
}

/// Whether `addr` lies in `net/len` (never across address families).
pub fn prefix_contains(net: IpAddr, len: u8, addr: IpAddr) -> bool {
    let (a, b, bits) = match (net, addr) {
        (IpAddr::V4(n), IpAddr::V4(a)) => (
            u128::from(u32::from(n)) << 96,
            u128::from(u32::from(a)) << 96,
            32,
        ),
        (IpAddr::V6(n), IpAddr::V6(a)) => (u128::from(n), u128::from(a), 128),
        _ => return false,
    };
    let len = u32::from(len).min(bits);
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    a & mask == b & mask
}

/// `ADDR[/LEN]`, the length defaulting to the whole address.
pub fn parse_prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (a, l) = s.split_once('/').map_or((s, None), |(a, l)| (a, Some(l)));
    let addr: IpAddr = a.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        None => max,
        Some(l) => l.parse::<u8>().ok().filter(|&l| l <= max)?,
    };
    Some((addr, len))
}

fn parse_ports(s: &str) -> Option<(u16, u16)> {
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let (lo, hi) = (lo.parse().ok()?, hi.parse().ok()?);
    (lo <= hi).then_some((lo, hi))
}

fn parse_rule(line: &str, n: usize) -> Result<Rule, PolicyError> {
    let (lhs, qos) = ["->", "=>", "→"]
        .iter()
        .find_map(|arrow| line.split_once(arrow))
        .ok_or(PolicyError::NoArrow(n))?;
    let qos = qos.trim();
    if qos.is_empty() {
        return Err(PolicyError::NoArrow(n));
    }
    let mut rule = Rule {
        protos: Vec::new(),
        dport: None,
        sport: None,
        to: None,
        qos: qos.to_owned(),
    };
    let bad = |word: &str| PolicyError::Match {
        rule: n,
        word: word.to_owned(),
    };
    let mut words = lhs.split_whitespace();
    while let Some(w) = words.next() {
        match w {
            "any" | "*" => {}
            "tcp" => rule.protos.push(PROTO_TCP),
            "udp" => rule.protos.push(PROTO_UDP),
            "icmp" => rule.protos.extend([PROTO_ICMP, PROTO_ICMPV6]),
            "proto" | "dport" | "sport" | "to" | "dst" => {
                let v = words.next().ok_or_else(|| bad(w))?;
                match w {
                    "proto" => rule.protos.push(v.parse().map_err(|_| bad(v))?),
                    "dport" => rule.dport = Some(parse_ports(v).ok_or_else(|| bad(v))?),
                    "sport" => rule.sport = Some(parse_ports(v).ok_or_else(|| bad(v))?),
                    _ => rule.to = Some(parse_prefix(v).ok_or_else(|| bad(v))?),
                }
            }
            other => return Err(bad(other)),
        }
    }
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(proto: u8, dst: &str, dport: Option<u16>) -> Flow {
        Flow {
            src: "10.0.0.1".parse().expect("ip"),
            dst: dst.parse().expect("ip"),
            proto,
            sport: dport.map(|_| 40000),
            dport,
            len: 100,
            dont_fragment: false,
        }
    }

    #[test]
    fn first_match_wins_and_the_rest_is_default() {
        let p = Policy::parse(
            "udp dport 5004 -> cbr:pcr=20Mbps\n# bulk\ntcp dport 5000-5010 to 10.0.0.0/24 => reliable; icmp → ubr",
            "best-effort",
        )
        .expect("parses");
        assert_eq!(p.classes(), 4);
        assert_eq!(p.classify(&flow(17, "10.0.0.2", Some(5004))), 0);
        assert_eq!(p.qos(0), "cbr:pcr=20Mbps");
        assert_eq!(p.classify(&flow(17, "10.0.0.2", Some(5005))), 3);
        assert_eq!(p.classify(&flow(6, "10.0.0.2", Some(5003))), 1);
        assert_eq!(p.classify(&flow(6, "10.0.1.2", Some(5003))), 3);
        assert_eq!(p.classify(&flow(1, "10.0.1.2", None)), 2);
        assert_eq!(p.classify(&flow(58, "fd00::2", None)), 2);
        assert_eq!(p.qos(3), "best-effort");
    }

    #[test]
    fn port_rules_never_match_portless_packets() {
        let p = Policy::parse("dport 0-65535 -> reliable", "ubr").expect("parses");
        assert_eq!(p.classify(&flow(17, "10.0.0.2", None)), 1);
        assert_eq!(p.classify(&flow(17, "10.0.0.2", Some(9))), 0);
    }

    #[test]
    fn prefixes_stay_in_their_family() {
        let (net, len) = parse_prefix("fd00::/64").expect("prefix");
        assert!(prefix_contains(net, len, "fd00::9".parse().expect("ip")));
        assert!(!prefix_contains(net, len, "10.0.0.1".parse().expect("ip")));
        assert!(prefix_contains(
            "0.0.0.0".parse().expect("ip"),
            0,
            "1.2.3.4".parse().expect("ip")
        ));
        assert_eq!(parse_prefix("10.0.0.0/33"), None);
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        assert_eq!(
            Policy::parse("udp dport 5004", "ubr"),
            Err(PolicyError::NoArrow(1))
        );
        assert_eq!(
            Policy::parse("udp; dport 70000 -> ubr", "ubr"),
            Err(PolicyError::NoArrow(1))
        );
        assert!(matches!(
            Policy::parse("dport 70000 -> ubr", "ubr"),
            Err(PolicyError::Match { rule: 1, .. })
        ));
        assert!(matches!(
            Policy::parse("sctp -> ubr", "ubr"),
            Err(PolicyError::Match { .. })
        ));
        assert_eq!(
            Policy::parse(&"any -> ubr\n".repeat(MAX_RULES + 1), "ubr"),
            Err(PolicyError::TooLong)
        );
    }
}
