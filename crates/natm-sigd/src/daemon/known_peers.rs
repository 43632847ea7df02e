//! Peers' Noise public keys pinned on first use (`[peers] known_peers_file`), as
//! OpenSSH's known_hosts: one `ADDRESS KEY` line per peer signalling endpoint, the
//! key in base64. sigd appends a line when it pins a key; an operator removes one to
//! accept a peer's new key. Written mode 0600; lines it cannot read are skipped
//! with a warning.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use natm_proto::sig::noise::{key_from_text, key_to_text, PublicKey};
use tracing::warn;

/// The pins in `path` (none if it does not exist).
pub(super) fn load(path: &Path) -> io::Result<HashMap<SocketAddr, PublicKey>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("known peers file {}: {e}", path.display()),
            ))
        }
    };
    Ok(parse(&text, path))
}

fn parse(text: &str, path: &Path) -> HashMap<SocketAddr, PublicKey> {
    let mut pins = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.split_whitespace();
        let (Some(addr), Some(key), None) = (f.next(), f.next(), f.next()) else {
            warn!(file = %path.display(), line = i + 1, "not `ADDRESS KEY`: skipped");
            continue;
        };
        match (addr.parse(), key_from_text(key)) {
            (Ok(a), Some(k)) => {
                // The first pin stands, as the file is appended to.
                pins.entry(a).or_insert(k);
            }
            _ => {
                warn!(file = %path.display(), line = i + 1, "not an address and a base64 key: skipped")
            }
        }
    }
    pins
}

/// Appends `pins` to `path`.
pub(super) fn append(path: &Path, pins: &[(SocketAddr, PublicKey)]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let mut text = String::new();
    for (a, k) in pins {
        text.push_str(&format!("{a} {}\n", key_to_text(k)));
    }
    f.write_all(text.as_bytes())?;
    f.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_appended_and_read_back_and_junk_is_skipped() {
        let path = std::env::temp_dir().join(format!("natm-known-peers-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        assert!(load(&path).unwrap().is_empty());
        let a: SocketAddr = "10.0.0.1:2900".parse().unwrap();
        append(&path, &[(a, [7; 32])]).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"# comment\njunk\n10.0.0.1:2900 AAAA\n")
            .unwrap();
        append(&path, &[(a, [8; 32])]).unwrap();
        assert_eq!(load(&path).unwrap().get(&a), Some(&[7; 32]));
        std::fs::remove_file(&path).unwrap();
    }
}
