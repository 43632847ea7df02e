//! The resume ticket of a call (`DataPath::resume` in the app↔sigd IPC,
//! docs/wire.md): what a restarted sigd needs to take over a call from the
//! application that held it (docs/sigd.md "sigd restart"). sigd writes it
//! and seals it with a MAC under its host's ticket key; the application keeps it and
//! gives it back unread in `Reclaim`; sigd checks the MAC, reads it back, and
//! refuses what it did not write or cannot read.
//!
//! A ticket names the sigd instance that issued it (a random id per start), so a
//! sigd can tell a reclaim after its predecessor died from a replay against
//! itself, and the data path it resumes (the peer's data endpoint, the cookie, the
//! VCIs and a digest of the QoS text), so that it resumes that call and no other
//! (docs/decisions/0031-resume-tickets.md).

use std::fmt;
use std::net::SocketAddr;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::ipc::DataPath;
use super::qos::Qos;

type HmacSha256 = Hmac<Sha256>;

/// Where the other end of a ticket's call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A peer sigd (directly or through a switch), over the signalling link to `link`.
    Peer {
        /// The peer's (or switch's) signalling endpoint.
        link: SocketAddr,
        /// The Q.2931 call reference value.
        cref: u32,
        /// Whether this side allocated the call reference.
        ours: bool,
    },
    /// Another application of this host: `pair` is the other half's call id.
    Local {
        /// The call id of the other half.
        pair: u64,
    },
}

/// What a restarted sigd needs to take a call over, carried in the call's data path
/// as text (`DataPath::resume`, docs/wire.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeTicket {
    /// The call's id (the one the application reclaims it under).
    pub call: u64,
    /// Where its other end is.
    pub via: Via,
    /// Whether this side placed the call.
    pub outgoing: bool,
    /// This side's ATM address.
    pub local: String,
    /// The other side's.
    pub remote: String,
    /// The SAP called.
    pub sap: String,
    /// The uid of the application the call was given to (SO_PEERCRED).
    pub uid: u32,
    /// The sigd instance that issued the ticket (random, new at every start).
    pub instance: u64,
    /// The other end's data endpoint.
    pub peer: SocketAddr,
    /// The call's cookie.
    pub cookie: u32,
    /// The VCI this side sends on.
    pub tx_vci: u16,
    /// The VCI this side receives on.
    pub rx_vci: u16,
    /// The first 8 octets of SHA-256 of the call's QoS ([`qos_digest`]).
    pub qos: [u8; 8],
}

/// The digest of a QoS a ticket carries: the first 8 octets of the SHA-256 of its
/// text form (canonical: one text per [`Qos`]).
pub fn qos_digest(qos: &Qos) -> [u8; 8] {
    let d = Sha256::digest(qos.to_string().as_bytes());
    let mut out = [0u8; 8];
    out.copy_from_slice(&d[..8]);
    out
}

/// Why a sealed ticket is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketError {
    /// Not a ticket of this format.
    Unreadable(String),
    /// Well formed, but its MAC does not verify under the key: not written by this
    /// host's sigd (forged or altered), or written under another key.
    Forged,
}

impl fmt::Display for TicketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TicketError::Unreadable(why) => f.write_str(why),
            TicketError::Forged => f.write_str(
                "the resume ticket's MAC does not verify: this host's sigd did not write it (altered, forged, or written under another ticket key)",
            ),
        }
    }
}

const MAGIC: &str = "natm-resume/3";
/// Octets of HMAC-SHA-256 kept in a ticket (all of them).
const MAC_LEN: usize = 32;

/// A ticket's text field: no spaces or `=`, printable, and short.
fn field_ok(s: &str) -> bool {
    s.len() <= 64 && s.chars().all(|c| c.is_ascii_graphic() && c != '=')
}

fn mac_of(key: &[u8; 32], body: &str) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(body.as_bytes());
    m
}

impl ResumeTicket {
    /// The ticket's text without its MAC (docs/wire.md); `None` if a field cannot be
    /// written in it (a SAP of "-", which stands for none, is one).
    pub fn encode(&self) -> Option<String> {
        let sap = if self.sap.is_empty() { "-" } else { &self.sap };
        if self.sap == "-" {
            return None;
        }
        if ![self.local.as_str(), self.remote.as_str(), sap]
            .iter()
            .all(|f| field_ok(f))
        {
            return None;
        }
        let via = match self.via {
            Via::Peer { link, cref, ours } => {
                format!("link={link} cref={cref} ours={}", ours as u8)
            }
            Via::Local { pair } => format!("pair={pair:016x}"),
        };
        Some(format!(
            "{MAGIC} call={:016x} inst={:016x} {via} out={} local={} remote={} sap={sap} uid={} \
             peer={} cookie={:08x} tx={} rx={} qos={}",
            self.call,
            self.instance,
            self.outgoing as u8,
            self.local,
            self.remote,
            self.uid,
            self.peer,
            self.cookie,
            self.tx_vci,
            self.rx_vci,
            hex::encode(self.qos),
        ))
    }

    /// Whether `path` is the data path this ticket resumes: the same peer data
    /// endpoint, cookie, VCIs and QoS text; what differs, if not.
    pub fn check_path(&self, path: &DataPath) -> Result<(), String> {
        let mut differ = Vec::new();
        if path.peer != self.peer {
            differ.push("peer data endpoint");
        }
        if path.cookie != self.cookie {
            differ.push("cookie");
        }
        if (path.tx_vci, path.rx_vci) != (self.tx_vci, self.rx_vci) {
            differ.push("VCIs");
        }
        if qos_digest(&path.qos) != self.qos {
            differ.push("QoS");
        }
        if differ.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the data path is not the one its resume ticket was issued for ({} differ)",
                differ.join(", ")
            ))
        }
    }

    /// The ticket's text sealed with a MAC under `key`: HMAC-SHA-256 over the text
    /// of [`ResumeTicket::encode`], appended as ` mac=` and 64 hex digits.
    pub fn seal(&self, key: &[u8; 32]) -> Option<String> {
        let body = self.encode()?;
        let tag = mac_of(key, &body).finalize().into_bytes();
        Some(format!("{body} mac={}", hex::encode(tag)))
    }

    /// Check a sealed ticket's MAC under `key` (in constant time), then read it.
    pub fn open(text: &str, key: &[u8; 32]) -> Result<ResumeTicket, TicketError> {
        let Some((body, tag)) = text.rsplit_once(" mac=") else {
            return Err(TicketError::Unreadable(
                "the resume ticket has no MAC".into(),
            ));
        };
        let mut raw = [0u8; MAC_LEN];
        // Lower-case only, as written: one ticket has one text.
        let lower = tag.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if tag.len() != 2 * MAC_LEN || !lower || hex::decode_to_slice(tag, &mut raw).is_err() {
            return Err(TicketError::Unreadable(
                "the resume ticket's MAC is not 64 lower-case hex digits".into(),
            ));
        }
        if !body.starts_with(MAGIC) {
            return Err(TicketError::Unreadable(format!(
                "the resume ticket does not start with \"{MAGIC}\""
            )));
        }
        mac_of(key, body)
            .verify_slice(&raw)
            .map_err(|_| TicketError::Forged)?;
        ResumeTicket::parse(body).map_err(TicketError::Unreadable)
    }

    /// Read a ticket's text without its MAC; what is wrong with it otherwise.
    pub fn parse(text: &str) -> Result<ResumeTicket, String> {
        let mut words = text.split(' ');
        if words.next() != Some(MAGIC) {
            return Err(format!("the resume ticket does not start with \"{MAGIC}\""));
        }
        let (mut call, mut link, mut cref, mut ours, mut pair) = (None, None, None, None, None);
        let (mut out, mut local, mut remote, mut sap, mut uid) = (None, None, None, None, None);
        let (mut inst, mut peer, mut cookie, mut tx, mut rx, mut qos) =
            (None, None, None, None, None, None);
        for w in words {
            let Some((k, v)) = w.split_once('=') else {
                return Err(format!("resume ticket field \"{w}\" is not key=value"));
            };
            if !field_ok(v) {
                return Err(format!("resume ticket field {k} has an unusable value"));
            }
            let flag = |v: &str| match v {
                "0" => Ok(false),
                "1" => Ok(true),
                _ => Err(format!("resume ticket field {k} is not 0 or 1")),
            };
            let id = |v: &str| match u64::from_str_radix(v, 16) {
                Ok(n) if v.len() == 16 => Ok(n),
                _ => Err(format!("resume ticket field {k} is not 16 hex digits")),
            };
            let slot_taken = match k {
                "call" => call.replace(id(v)?).is_some(),
                "inst" => inst.replace(id(v)?).is_some(),
                "peer" => peer
                    .replace(
                        v.parse::<SocketAddr>()
                            .map_err(|_| "resume ticket peer is not an IP endpoint".to_string())?,
                    )
                    .is_some(),
                "cookie" => cookie
                    .replace(match u32::from_str_radix(v, 16) {
                        Ok(n) if v.len() == 8 => n,
                        _ => return Err("resume ticket cookie is not 8 hex digits".into()),
                    })
                    .is_some(),
                "tx" => tx
                    .replace(
                        v.parse::<u16>()
                            .map_err(|_| "resume ticket tx is not a VCI".to_string())?,
                    )
                    .is_some(),
                "rx" => rx
                    .replace(
                        v.parse::<u16>()
                            .map_err(|_| "resume ticket rx is not a VCI".to_string())?,
                    )
                    .is_some(),
                "qos" => {
                    let mut d = [0u8; 8];
                    if v.len() != 16 || hex::decode_to_slice(v, &mut d).is_err() {
                        return Err("resume ticket qos is not 16 hex digits".into());
                    }
                    qos.replace(d).is_some()
                }
                "pair" => pair.replace(id(v)?).is_some(),
                "link" => link
                    .replace(
                        v.parse::<SocketAddr>()
                            .map_err(|_| "resume ticket link is not an IP endpoint".to_string())?,
                    )
                    .is_some(),
                "cref" => cref
                    .replace(
                        v.parse::<u32>()
                            .map_err(|_| "resume ticket cref is not a number".to_string())?,
                    )
                    .is_some(),
                "uid" => uid
                    .replace(
                        v.parse::<u32>()
                            .map_err(|_| "resume ticket uid is not a number".to_string())?,
                    )
                    .is_some(),
                "ours" => ours.replace(flag(v)?).is_some(),
                "out" => out.replace(flag(v)?).is_some(),
                "local" => local.replace(v.to_owned()).is_some(),
                "remote" => remote.replace(v.to_owned()).is_some(),
                "sap" => sap
                    .replace(if v == "-" {
                        String::new()
                    } else {
                        v.to_owned()
                    })
                    .is_some(),
                _ => return Err(format!("resume ticket field \"{k}\" is unknown")),
            };
            if slot_taken {
                return Err(format!("resume ticket field {k} given twice"));
            }
        }
        let via =
            match (link, cref, ours, pair) {
                (Some(link), Some(cref), Some(ours), None) => Via::Peer { link, cref, ours },
                (None, None, None, Some(pair)) => Via::Local { pair },
                _ => return Err(
                    "the resume ticket names neither a peer (link, cref, ours) nor a pair, or both"
                        .into(),
                ),
            };
        let path = match (inst, peer, cookie, tx, rx, qos) {
            (Some(i), Some(p), Some(c), Some(t), Some(r), Some(q)) => (i, p, c, t, r, q),
            _ => return Err("the resume ticket lacks a field".into()),
        };
        let (instance, peer, cookie, tx_vci, rx_vci, qos) = path;
        match (call, out, local, remote, sap, uid) {
            (Some(call), Some(outgoing), Some(local), Some(remote), Some(sap), Some(uid)) => {
                Ok(ResumeTicket {
                    call,
                    via,
                    outgoing,
                    local,
                    remote,
                    sap,
                    uid,
                    instance,
                    peer,
                    cookie,
                    tx_vci,
                    rx_vci,
                    qos,
                })
            }
            _ => Err("the resume ticket lacks a field".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [0x5a; 32];

    fn ticket() -> ResumeTicket {
        ResumeTicket {
            call: 0x1234_5678_9abc_def1,
            via: Via::Peer {
                link: "127.0.0.1:2905".parse().unwrap(),
                cref: 12,
                ours: true,
            },
            outgoing: false,
            local: "+4420001".into(),
            remote: "47.0005.80ffe1000000f21a26d8.0020481a26d8.00".into(),
            sap: String::new(),
            uid: 1000,
            instance: 0x0bad_cafe_0000_0001,
            peer: "[2001:db8::1]:40001".parse().unwrap(),
            cookie: 0xdead_beef,
            tx_vci: 33,
            rx_vci: 40,
            qos: qos_digest(&"cbr:pcr=10Mbps".parse().unwrap()),
        }
    }

    #[test]
    fn a_ticket_reads_back_as_written() {
        let t = ticket();
        let text = t.encode().unwrap();
        assert_eq!(ResumeTicket::parse(&text), Ok(t.clone()));
        let sealed = t.seal(&KEY).unwrap();
        assert_eq!(ResumeTicket::open(&sealed, &KEY), Ok(t.clone()));
        let local = ResumeTicket {
            via: Via::Local { pair: 7 },
            ..t
        };
        let sealed = local.seal(&KEY).unwrap();
        assert!(sealed.contains(" pair=0000000000000007 "), "{sealed}");
        assert_eq!(ResumeTicket::open(&sealed, &KEY), Ok(local));
    }

    #[test]
    fn a_bad_ticket_is_refused_with_a_reason() {
        let good = ticket().encode().unwrap();
        for bad in [
            String::new(),
            "natm-resume/1 link=1.2.3.4:5".to_string(),
            good.replace("cref=12", "cref=x"),
            good.replace("ours=1", "ours=2"),
            good.replace(" sap=-", ""),
            good.replace(" uid=1000", ""),
            good.replace("call=1234", "call=34"),
            format!("{good} cref=13"),
            format!("{good} pair=0000000000000001"),
            format!("{good} extra=1"),
            good.replace("link=127.0.0.1:2905", "link=nowhere"),
            good.replace(" inst=0badcafe00000001", ""),
            good.replace("cookie=deadbeef", "cookie=beef"),
            good.replace(" tx=33", " tx=70000"),
            good.replace(" rx=40", ""),
            good.replace("peer=[2001:db8::1]:40001", "peer=x"),
            good.replace(
                &format!(
                    "qos={}",
                    hex::encode(qos_digest(&"cbr:pcr=10Mbps".parse().unwrap()))
                ),
                "qos=12",
            ),
            good.replace("natm-resume/3", "natm-resume/2"),
        ] {
            assert!(ResumeTicket::parse(&bad).is_err(), "{bad}");
        }
        let mut spaced = ticket();
        spaced.remote = "a b".into();
        assert_eq!(spaced.encode(), None);
    }

    #[test]
    fn a_ticket_altered_or_sealed_under_another_key_is_forged() {
        let sealed = ticket().seal(&KEY).unwrap();
        // Another owner, another call reference: each a readable ticket, not ours.
        for altered in [
            sealed.replace("uid=1000", "uid=1001"),
            sealed.replace("uid=1000", "uid=0"),
            sealed.replace("cref=12", "cref=13"),
            sealed.replace("inst=0badcafe00000001", "inst=0badcafe00000002"),
            sealed.replace("cookie=deadbeef", "cookie=deadbeee"),
            sealed.replace(" tx=33", " tx=34"),
        ] {
            assert_eq!(
                ResumeTicket::open(&altered, &KEY),
                Err(TicketError::Forged),
                "{altered}"
            );
        }
        assert_eq!(
            ResumeTicket::open(&sealed, &[0x5b; 32]),
            Err(TicketError::Forged)
        );
        // Every single bit of the MAC matters.
        let at = sealed.rfind("mac=").unwrap() + 4;
        for i in at..sealed.len() {
            let mut b = sealed.clone().into_bytes();
            b[i] = if b[i] == b'0' { b'1' } else { b'0' };
            let s = String::from_utf8(b).unwrap();
            assert!(ResumeTicket::open(&s, &KEY).is_err(), "{s}");
        }
        // Without a MAC it is no ticket at all.
        let bare = ticket().encode().unwrap();
        assert!(matches!(
            ResumeTicket::open(&bare, &KEY),
            Err(TicketError::Unreadable(_))
        ));
    }

    fn path() -> DataPath {
        DataPath {
            peer: "[2001:db8::1]:40001".parse().unwrap(),
            cookie: 0xdead_beef,
            tx_vci: 33,
            rx_vci: 40,
            granted_bps: 10_000_000,
            qos: "cbr:pcr=10Mbps".parse().unwrap(),
            resume: String::new(),
            keys: None,
            multipoint: false,
        }
    }

    #[test]
    fn a_ticket_resumes_only_its_own_data_path() {
        let t = ticket();
        assert_eq!(t.check_path(&path()), Ok(()));
        let faster = DataPath {
            qos: "cbr:pcr=90Mbps".parse().unwrap(),
            ..path()
        };
        let e = t.check_path(&faster).unwrap_err();
        assert!(e.contains("QoS"), "{e}");
        let other = DataPath {
            cookie: 1,
            rx_vci: 41,
            peer: "127.0.0.1:1".parse().unwrap(),
            ..path()
        };
        let e = t.check_path(&other).unwrap_err();
        assert!(e.contains("peer data endpoint, cookie, VCIs"), "{e}");
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn field() -> impl Strategy<Value = String> {
            "[!-<>-~]{1,64}"
        }

        fn tickets() -> impl Strategy<Value = ResumeTicket> {
            (
                any::<u64>(),
                prop_oneof![
                    (any::<[u8; 4]>(), any::<u16>(), any::<u32>(), any::<bool>()).prop_map(
                        |(ip, port, cref, ours)| Via::Peer {
                            link: SocketAddr::from((ip, port)),
                            cref,
                            ours,
                        }
                    ),
                    any::<u64>().prop_map(|pair| Via::Local { pair }),
                ],
                (
                    any::<bool>(),
                    field(),
                    field(),
                    prop_oneof![Just(String::new()), "[a-z]{1,8}"],
                ),
                (any::<u32>(), any::<u64>(), any::<[u16; 8]>(), any::<u16>()),
                (any::<u32>(), any::<u16>(), any::<u16>(), any::<[u8; 8]>()),
            )
                .prop_map(|(call, via, (outgoing, local, remote, sap), a, b)| {
                    let (uid, instance, ip6, port) = a;
                    let (cookie, tx_vci, rx_vci, qos) = b;
                    ResumeTicket {
                        call,
                        via,
                        outgoing,
                        local,
                        remote,
                        sap,
                        uid,
                        instance,
                        peer: SocketAddr::from((std::net::Ipv6Addr::from(ip6), port)),
                        cookie,
                        tx_vci,
                        rx_vci,
                        qos,
                    }
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn sealed_tickets_open_to_themselves_and_only_under_their_key(t in tickets()) {
                let sealed = t.seal(&[7; 32]).expect("encodable");
                prop_assert_eq!(ResumeTicket::open(&sealed, &[7; 32]), Ok(t.clone()));
                prop_assert_eq!(ResumeTicket::open(&sealed, &[8; 32]), Err(TicketError::Forged));
            }

            #[test]
            fn any_text_is_read_or_refused_without_a_panic(s in "\\PC{0,300}") {
                let _ = ResumeTicket::parse(&s);
                prop_assert!(ResumeTicket::open(&s, &[7; 32]).is_err());
            }

            #[test]
            fn one_changed_character_of_a_sealed_ticket_is_refused(
                t in tickets(), at in any::<prop::sample::Index>(), c in "[!-~]",
            ) {
                let sealed = t.seal(&[7; 32]).expect("encodable");
                let i = at.index(sealed.len());
                let mut b = sealed.clone().into_bytes();
                let c = c.as_bytes()[0];
                prop_assume!(b[i] != c);
                b[i] = c;
                let s = String::from_utf8(b).expect("ASCII");
                prop_assert!(ResumeTicket::open(&s, &[7; 32]).is_err());
            }
        }
    }
}
