//! One request to the host's sigd from a command (`natm stat`, `natm release`): a
//! short-lived IPC connection, one message out, its answer back.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use natm::wire::ipc::{Decoder, Message};
use natm_sigd::config::DEFAULT_SOCKET;

/// sigd's socket: the one given, else `$NATM_SIGD`, else the default.
pub(crate) fn socket_path(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os("NATM_SIGD").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// Send `m` to the sigd at `path` and return its first answer (an `Error` from sigd
/// becomes an error here).
pub(crate) fn ask(path: &Path, m: &Message) -> anyhow::Result<Message> {
    let mut s = UnixStream::connect(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot reach sigd at {}: {e}; is `natm sigd` running (or give --socket)?",
            path.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(&m.to_bytes()).context("writing to sigd")?;
    let mut dec = Decoder::new();
    let mut buf = [0u8; 16384];
    loop {
        if let Some(m) = dec.next_message()? {
            return match m {
                Message::Error { detail, .. } => Err(anyhow::anyhow!("sigd: {detail}")),
                m => Ok(m),
            };
        }
        let n = s.read(&mut buf).context("reading from sigd")?;
        if n == 0 {
            anyhow::bail!("sigd closed the connection");
        }
        dec.push(&buf[..n]);
    }
}
