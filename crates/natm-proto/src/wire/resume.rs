//! The resume ticket of a call (`DataPath::resume` in the app↔sigd IPC,
//! docs/wire.md): what a restarted sigd needs to take over a call from the
//! application that held it (docs/ARCHITECTURE.md "sigd restart"). sigd writes it
//! and seals it with a MAC under its host's ticket key; the application keeps it and
//! gives it back unread in `Reclaim`; sigd checks the MAC, reads it back, and
//! refuses what it did not write or cannot read.

use std::fmt;
use std::net::SocketAddr;

use hmac::{Hmac, Mac};
use sha2::Sha256;

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

const MAGIC: &str = "natm-resume/2";
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
            "{MAGIC} call={:016x} {via} out={} local={} remote={} sap={sap} uid={}",
            self.call, self.outgoing as u8, self.local, self.remote, self.uid
        ))
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
        if tag.len() != 2 * MAC_LEN || hex::decode_to_slice(tag, &mut raw).is_err() {
            return Err(TicketError::Unreadable(
                "the resume ticket's MAC is not 64 hex digits".into(),
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
}
