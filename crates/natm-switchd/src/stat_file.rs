//! The stat file (`stat_json`), written by a thread of its own.
//!
//! The forwarding loop renders a snapshot and hands it over; it never waits on the
//! file system. A write can block for hundreds of milliseconds when the machine is
//! writing back a lot (a build beside the switch): on the forwarding thread that
//! stalled every port, so cells queued in the sockets and reached the policer as a
//! burst a conforming VC was then cut for. Only the newest snapshot waits to be
//! written: one that arrives while the writer is busy replaces the one before.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use tracing::warn;

/// What the forwarding loop and the writer share.
#[derive(Debug, Default)]
struct Slot {
    /// The newest snapshot not yet written.
    newest: Option<Vec<u8>>,
    /// No more snapshots come: write what is left and stop.
    closed: bool,
}

type Shared = Arc<(Mutex<Slot>, Condvar)>;

/// The stat file's writer thread.
#[derive(Debug)]
pub(crate) struct StatFile {
    shared: Shared,
    thread: Option<JoinHandle<()>>,
}

impl StatFile {
    /// Starts the writer of `path`.
    pub(crate) fn start(path: PathBuf) -> std::io::Result<StatFile> {
        let shared: Shared = Arc::default();
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("stat-file".into())
            .spawn(move || write_loop(&path, &theirs))?;
        Ok(StatFile {
            shared,
            thread: Some(thread),
        })
    }

    /// Hands over a snapshot; returns at once.
    pub(crate) fn offer(&self, json: Vec<u8>) {
        let (slot, cv) = &*self.shared;
        slot.lock().unwrap_or_else(PoisonError::into_inner).newest = Some(json);
        cv.notify_one();
    }

    /// Hands over the last snapshot and waits until it is written.
    pub(crate) fn finish(mut self, json: Vec<u8>) {
        self.offer(json);
        self.close();
    }

    fn close(&mut self) {
        let (slot, cv) = &*self.shared;
        slot.lock().unwrap_or_else(PoisonError::into_inner).closed = true;
        cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for StatFile {
    fn drop(&mut self) {
        self.close();
    }
}

fn write_loop(path: &std::path::Path, shared: &Shared) {
    // Written beside and renamed, so a reader never sees half a file.
    let tmp = path.with_extension("json.tmp");
    let (slot, cv) = &**shared;
    loop {
        let json = {
            let mut s = slot.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                if let Some(j) = s.newest.take() {
                    break j;
                }
                if s.closed {
                    return;
                }
                s = cv.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let res = std::fs::write(&tmp, json).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = res {
            warn!(path = %path.display(), "cannot write the stat file: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_snapshot_is_written_before_finish_returns() {
        let dir = std::env::temp_dir().join(format!("natm-stat-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stat.json");
        let w = StatFile::start(path.clone()).unwrap();
        for i in 0..1000 {
            w.offer(format!("{{\"n\":{i}}}").into_bytes());
        }
        w.finish(b"{\"n\":\"last\"}".to_vec());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"n\":\"last\"}");
        assert!(
            !path.with_extension("json.tmp").exists(),
            "renamed, not left beside"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
