//! The host's resume-ticket key (docs/sigd.md "sigd restart"): 32 random
//! octets sigd seals every call's resume ticket with, kept in a file of its own
//! (`[restart] ticket_key_file`) so that a restarted sigd opens the tickets its
//! predecessor wrote. Created on first start with mode 0600 (written to a temporary
//! name, then linked into place, so a crash never leaves half a key), reused after;
//! a key file another user could read or write is refused, as is a symlink.
//! The host's Noise static key (`[peers] key_file`) is kept the same way
//! ([`load_or_create_named`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Octets of key.
const KEY_LEN: usize = 32;

/// The key in `path`, created first if there is none.
pub(super) fn load_or_create(path: &Path) -> io::Result<[u8; KEY_LEN]> {
    load_or_create_named(path, "ticket key")
}

/// The 32-octet key `what` (in error messages) in `path`, created first if there
/// is none.
pub(super) fn load_or_create_named(path: &Path, what: &str) -> io::Result<[u8; KEY_LEN]> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            fs::create_dir_all(dir).map_err(|e| {
                with_path(
                    e,
                    &format!("cannot create the {what} file's directory"),
                    dir,
                )
            })?;
        }
    }
    // Two tries: if another process links its key in between, read that one.
    for _ in 0..2 {
        match read(path, what) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        match create(path, what) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            other => return other,
        }
    }
    read(path, what)
}

fn read(path: &Path, what: &str) -> io::Result<[u8; KEY_LEN]> {
    let meta = fs::symlink_metadata(path)?;
    let bad = |why: String| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{what} file {}: {why}", path.display()),
        )
    };
    if !meta.file_type().is_file() {
        return Err(bad("not a regular file (a symlink?)".into()));
    }
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(bad(format!(
            "owned by uid {}, not by sigd's uid {euid}",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(bad(format!(
            "mode {:04o} lets other users read or write it: chmod 600 it (or remove it: sigd makes a new key, and what the old one sealed or proved is lost)",
            meta.mode() & 0o7777
        )));
    }
    let f = File::open(path)?;
    let opened = f.metadata()?;
    if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return Err(bad("replaced while it was opened".into()));
    }
    let mut text = String::new();
    f.take(256).read_to_string(&mut text)?;
    let mut key = [0u8; KEY_LEN];
    hex::decode_to_slice(text.trim_end(), &mut key).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{what} file {} does not hold 64 hex digits: remove it and sigd makes a new key",
                path.display()
            ),
        )
    })?;
    Ok(key)
}

fn create(path: &Path, what: &str) -> io::Result<[u8; KEY_LEN]> {
    let mut key = [0u8; KEY_LEN];
    rustix::rand::getrandom(&mut key, rustix::rand::GetRandomFlags::empty())
        .map_err(|e| io::Error::other(format!("no randomness for the {what}: {e}")))?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(format!("{}\n", hex::encode(key)).as_bytes())?;
        f.sync_all()?;
        fs::hard_link(&tmp, path)
    })();
    let _ = fs::remove_file(&tmp);
    match written {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(e),
        Err(e) => Err(with_path(
            e,
            &format!("cannot create the {what} file"),
            path,
        )),
    }
}

fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "natm-ticket-key-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn the_key_is_made_once_with_mode_0600_and_read_back_after() {
        let d = dir();
        let path = d.join("sub").join("sigd.ticket-key");
        let first = load_or_create(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_or_create(&path).unwrap(), first);
        assert_ne!(first, [0; KEY_LEN]);
        // Nothing else was left in the directory.
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_key_file_others_may_read_or_a_symlink_or_garbage_is_refused() {
        let d = dir();
        fs::create_dir_all(&d).unwrap();
        let path = d.join("k");
        load_or_create(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_or_create(&path).unwrap_err();
        assert!(e.to_string().contains("chmod 600"), "{e}");
        let link = d.join("l");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = load_or_create(&link).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let junk = d.join("j");
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&junk)
            .unwrap()
            .write_all(b"not a key\n")
            .unwrap();
        let e = load_or_create(&junk).unwrap_err();
        assert!(e.to_string().contains("64 hex digits"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
