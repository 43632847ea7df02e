//! The SSCOP N(SQ) of the last BGN sent on each configured signalling link, kept
//! beside the Noise key for the next instance: sigd's (`config::state_file`,
//! `sscop-sq`, by peer endpoint) and a switch's (beside its configuration, by port).
//!
//! A peer tells a retransmitted BGN from a new connection by its N(SQ) alone
//! (Q.2110 §7.2): a restarted sigd whose first BGN carried the N(SQ) its previous
//! instance last sent would be answered BGAK with the old connection's sequence
//! numbers kept at the peer, and the link would fail a few seconds later with every
//! call on it (cause 27) — or, for a restarted switch, a host would keep its old
//! sequence numbers and drop the new link's first PDUs as duplicates, so that a SETUP
//! waited for T303. Counting on from the recorded value makes that impossible;
//! without a record (first start, unreadable file) the value is random, a 1-in-256
//! chance. One `ADDRESS SQ` line per link, rewritten whole (write and rename) when a
//! BGN with a new N(SQ) goes out, which is once per link establishment.

use std::collections::HashMap;
use std::fmt::Display;
use std::fs::OpenOptions;
use std::hash::Hash;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::str::FromStr;

use tracing::warn;

/// The record in `path`: empty if there is none or it cannot be read (a random
/// N(SQ) then, see the module's documentation); lines it cannot read are skipped.
pub fn load<K: FromStr + Eq + Hash>(path: &Path) -> HashMap<K, u8> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return HashMap::new(),
        Err(e) => {
            warn!(file = %path.display(), error = %e, "cannot read the SSCOP sequence record: links start from a random N(SQ)");
            return HashMap::new();
        }
    };
    let mut last = HashMap::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if let (Some(Ok(a)), Some(Ok(sq)), None) = (
            f.next().map(str::parse::<K>),
            f.next().map(str::parse::<u8>),
            f.next(),
        ) {
            last.insert(a, sq);
        }
    }
    last
}

/// Replaces the record in `path` with `last`.
pub fn store<K: Display>(path: &Path, last: &[(K, u8)]) -> io::Result<()> {
    let tmp = path.with_extension("sscop-sq.new");
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    let mut text = String::new();
    for (a, sq) in last {
        text.push_str(&format!("{a} {sq}\n"));
    }
    f.write_all(text.as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn the_record_is_stored_and_read_back_and_junk_is_skipped() {
        let dir = std::env::temp_dir().join(format!("natm-sscop-sq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sigd.sscop-sq");
        assert!(load::<SocketAddr>(&path).is_empty(), "no record: nothing");
        let a: SocketAddr = "127.0.0.1:2001".parse().unwrap();
        let b: SocketAddr = "[::1]:2002".parse().unwrap();
        store(&path, &[(a, 7), (b, 255)]).unwrap();
        let got = load::<SocketAddr>(&path);
        assert_eq!(got.len(), 2);
        assert_eq!(got[&a], 7);
        assert_eq!(got[&b], 255);
        store(&path, &[(a, 8)]).unwrap();
        assert_eq!(load(&path), HashMap::from([(a, 8)]), "rewritten whole");
        std::fs::write(&path, "127.0.0.1:2001 9\nnonsense\n127.0.0.1:2003 256\n").unwrap();
        assert_eq!(load(&path), HashMap::from([(a, 9)]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
