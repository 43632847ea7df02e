//! Names for ATM addresses, in the format of Linux's `/etc/hosts.atm`.
//!
//! One entry a line: an address, then one or more names, separated by spaces or tabs;
//! `#` starts a comment. Names match without regard to ASCII case, and the first line
//! that has a name wins (as in `text2atm`). Unlike Linux, which skips a line whose
//! address it cannot read, a bad line is an error that names the line: a typo in a
//! hosts file should not silently make a host unreachable.
//!
//! Loading a file is the one piece of I/O under `wire/`; it is explicit
//! ([`HostsFile::load`]), and the address parser never reads a file by itself.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::parse::{parse, AddrParseError};
use super::AtmAddr;

/// One line of a hosts file: an address and its names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostsEntry {
    /// The address.
    pub addr: AtmAddr,
    /// Its names, first the canonical one.
    pub names: Vec<String>,
    /// The 1-based line it was read from.
    pub line: usize,
}

/// A table of names for ATM addresses; see the module docs for the format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostsFile {
    entries: Vec<HostsEntry>,
}

/// What is wrong with one line of a hosts file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostsLineError {
    /// The address does not parse (positions are within the line).
    #[error("{0}")]
    BadAddress(AddrParseError),
    /// An address without a name.
    #[error("address {address} has no name after it")]
    NoName {
        /// The address as written.
        address: String,
    },
    /// A name that is itself an address, so a lookup could never reach it.
    #[error("{name:?} is an ATM address itself, so it cannot be a name")]
    NameIsAddress {
        /// The name as written.
        name: String,
    },
}

/// A hosts file that cannot be read or has a bad line.
#[derive(Debug)]
pub enum HostsError {
    /// The file cannot be read.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A line is bad.
    Line {
        /// The file, when read by [`HostsFile::load`].
        path: Option<PathBuf>,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        error: HostsLineError,
    },
}

impl fmt::Display for HostsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostsError::Io { path, source } => {
                write!(f, "cannot read ATM hosts file {}: {source}", path.display())
            }
            HostsError::Line {
                path: Some(path),
                line,
                error,
            } => write!(f, "{}:{line}: {error}", path.display()),
            HostsError::Line {
                path: None,
                line,
                error,
            } => write!(f, "line {line}: {error}"),
        }
    }
}

impl std::error::Error for HostsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostsError::Io { source, .. } => Some(source),
            HostsError::Line { error, .. } => Some(error),
        }
    }
}

impl HostsFile {
    /// Where Linux-ATM keeps its hosts file.
    pub const LINUX_PATH: &'static str = "/etc/hosts.atm";

    /// Reads and parses the hosts file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<HostsFile, HostsError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| HostsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        HostsFile::parse(&text).map_err(|e| match e {
            HostsError::Line { line, error, .. } => HostsError::Line {
                path: Some(path.to_path_buf()),
                line,
                error,
            },
            io @ HostsError::Io { .. } => io,
        })
    }

    /// Parses the text of a hosts file.
    pub fn parse(text: &str) -> Result<HostsFile, HostsError> {
        let mut entries = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let bad = |error| HostsError::Line {
                path: None,
                line,
                error,
            };
            let content = raw.split('#').next().unwrap_or("");
            let mut tokens = tokens(content);
            let Some((start, address)) = tokens.next() else {
                continue;
            };
            let addr = parse(raw, start, start + address.len(), None)
                .map_err(|e| bad(HostsLineError::BadAddress(e)))?;
            let mut names = Vec::new();
            for (_, name) in tokens {
                if name.parse::<AtmAddr>().is_ok() {
                    return Err(bad(HostsLineError::NameIsAddress {
                        name: name.to_string(),
                    }));
                }
                names.push(name.to_string());
            }
            if names.is_empty() {
                return Err(bad(HostsLineError::NoName {
                    address: address.to_string(),
                }));
            }
            entries.push(HostsEntry { addr, names, line });
        }
        Ok(HostsFile { entries })
    }

    /// The address of `name` (ASCII case ignored), from the first line that has it.
    pub fn lookup(&self, name: &str) -> Option<&AtmAddr> {
        self.entries
            .iter()
            .find(|e| e.names.iter().any(|n| n.eq_ignore_ascii_case(name)))
            .map(|e| &e.addr)
    }

    /// The first name of `addr`, from the first line that has it.
    pub fn name_of(&self, addr: &AtmAddr) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.addr == *addr)
            .and_then(|e| e.names.first())
            .map(String::as_str)
    }

    /// Every entry, in file order.
    pub fn entries(&self) -> &[HostsEntry] {
        &self.entries
    }
}

impl FromStr for HostsFile {
    type Err = HostsError;

    fn from_str(text: &str) -> Result<HostsFile, HostsError> {
        HostsFile::parse(text)
    }
}

/// The whitespace-separated tokens of `line` with their byte offsets.
fn tokens(line: &str) -> impl Iterator<Item = (usize, &str)> {
    line.split(|c: char| c.is_ascii_whitespace())
        .scan(0, |pos, token| {
            let start = *pos;
            *pos += token.len() + 1;
            Some((start, token))
        })
        .filter(|(_, token)| !token.is_empty())
}
