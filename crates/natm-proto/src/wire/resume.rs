//! The resume ticket of a call (`DataPath::resume` in the app↔sigd IPC,
//! docs/wire.md): what a restarted sigd needs to take over a call to a peer sigd
//! from the application that held it (docs/ARCHITECTURE.md "sigd restart"). sigd
//! writes it; the application keeps it and gives it back unread in `Reclaim`; sigd
//! reads it back, and refuses what it cannot read.

use std::net::SocketAddr;

/// What a restarted sigd needs to take a call to a peer sigd over, carried in the
/// call's data path as text (`DataPath::resume`, docs/wire.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeTicket {
    /// The peer sigd's signalling endpoint.
    pub link: SocketAddr,
    /// The Q.2931 call reference value.
    pub cref: u32,
    /// Whether this side allocated the call reference.
    pub ours: bool,
    /// Whether this side placed the call.
    pub outgoing: bool,
    /// This side's ATM address.
    pub local: String,
    /// The other side's.
    pub remote: String,
    /// The SAP called.
    pub sap: String,
}

const MAGIC: &str = "natm-resume/1";

/// A ticket's text field: no spaces or `=`, printable, and short.
fn field_ok(s: &str) -> bool {
    s.len() <= 64 && s.chars().all(|c| c.is_ascii_graphic() && c != '=')
}

impl ResumeTicket {
    /// The ticket's text (docs/wire.md); `None` if a field cannot be written in it
    /// (a SAP of "-", which stands for none, is one).
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
        Some(format!(
            "{MAGIC} link={} cref={} ours={} out={} local={} remote={} sap={sap}",
            self.link, self.cref, self.ours as u8, self.outgoing as u8, self.local, self.remote
        ))
    }

    /// Read a ticket; what is wrong with it otherwise.
    pub fn parse(text: &str) -> Result<ResumeTicket, String> {
        let mut words = text.split(' ');
        if words.next() != Some(MAGIC) {
            return Err(format!("the resume ticket does not start with \"{MAGIC}\""));
        }
        let (mut link, mut cref, mut ours, mut out) = (None, None, None, None);
        let (mut local, mut remote, mut sap) = (None, None, None);
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
            let slot_taken = match k {
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
        match (link, cref, ours, out, local, remote, sap) {
            (
                Some(link),
                Some(cref),
                Some(ours),
                Some(outgoing),
                Some(local),
                Some(remote),
                Some(sap),
            ) => Ok(ResumeTicket {
                link,
                cref,
                ours,
                outgoing,
                local,
                remote,
                sap,
            }),
            _ => Err("the resume ticket lacks a field".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket() -> ResumeTicket {
        ResumeTicket {
            link: "127.0.0.1:2905".parse().unwrap(),
            cref: 12,
            ours: true,
            outgoing: false,
            local: "+4420001".into(),
            remote: "47.0005.80ffe1000000f21a26d8.0020481a26d8.00".into(),
            sap: String::new(),
        }
    }

    #[test]
    fn a_ticket_reads_back_as_written() {
        let t = ticket();
        let text = t.encode().unwrap();
        assert_eq!(ResumeTicket::parse(&text), Ok(t));
    }

    #[test]
    fn a_bad_ticket_is_refused_with_a_reason() {
        let good = ticket().encode().unwrap();
        for bad in [
            String::new(),
            "natm-resume/2 link=1.2.3.4:5".to_string(),
            good.replace("cref=12", "cref=x"),
            good.replace("ours=1", "ours=2"),
            good.replace(" sap=-", ""),
            format!("{good} cref=13"),
            format!("{good} extra=1"),
            good.replace("link=127.0.0.1:2905", "link=nowhere"),
        ] {
            assert!(ResumeTicket::parse(&bad).is_err(), "{bad}");
        }
        let mut spaced = ticket();
        spaced.remote = "a b".into();
        assert_eq!(spaced.encode(), None);
    }
}
