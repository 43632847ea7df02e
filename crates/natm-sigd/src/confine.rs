//! Least privilege for the daemons (issue 31): once `natm sigd` or `natm switch` has
//! bound its sockets and read its keys, it gives up what it no longer needs.
//!
//! - **Identity.** Started as root, a daemon becomes an unprivileged user: the one
//!   `--user` names, else `natm` (the package's system user) when it may write every
//!   directory the daemon writes while it runs. Where no such user fits, it stays uid 0
//!   but drops every capability (effective, permitted, inheritable, ambient and the
//!   bounding set), so root's powers beyond owning root's files are gone. `--user root`
//!   keeps root, loudly.
//! - **Sandbox.** Landlock (where the kernel has it) then denies every file-system
//!   access but reading and writing beneath those directories and opening `/dev/null`,
//!   connecting to abstract Unix sockets made outside the daemon, and signalling other
//!   processes. `no_new_privs` is set, so nothing it could exec regains privileges.
//!   Landlock's network rules are not used: the daemons' job is the network.
//!
//! Order matters: the Landlock ruleset is built (its directories opened) while the
//! process is still privileged, the identity dropped, and the ruleset enforced last.
//! Every thread the daemon will run must start afterwards: capabilities and
//! Landlock domains are per thread (libc changes uids on every thread).

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use nix::unistd::{Gid, Uid, User};
use tracing::{info, warn};

/// The system user the package makes, taken by default when started as root.
pub const DEFAULT_USER: &str = "natm";

/// Which user to run as (`--user`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum UserChoice {
    /// Root: [`DEFAULT_USER`] if it may write what the daemon writes, else uid 0
    /// without capabilities. Anyone else: unchanged.
    #[default]
    Default,
    /// This user (`root` keeps root and its capabilities).
    Named(String),
}

/// What the daemon still touches in the file system once it runs.
#[derive(Debug, Clone, Default)]
pub struct Needs {
    /// Directories it creates, writes, renames or removes files in (the socket's,
    /// the known-peers file's, the stat file's...).
    pub write_dirs: Vec<PathBuf>,
}

impl Needs {
    /// Adds the directory `file` is in.
    pub fn file(&mut self, file: &Path) {
        let dir = match file.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !self.write_dirs.contains(&dir) {
            self.write_dirs.push(dir);
        }
    }
}

/// Who the daemon runs as after [`confine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// Not started as root: kept as it was.
    Unchanged {
        /// Its uid.
        uid: u32,
    },
    /// Became this user and its group (supplementary groups: that group only).
    Dropped {
        /// The user's name.
        user: String,
        /// Its uid.
        uid: u32,
        /// Its group.
        gid: u32,
    },
    /// Still uid 0, with no capability left; why no user was taken.
    RootWithoutCapabilities {
        /// Why no user was taken.
        reason: String,
    },
    /// `--user root`: root with every capability.
    RootKept,
}

/// What Landlock enforces after [`confine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sandbox {
    /// Every restriction asked for is enforced.
    Full,
    /// The kernel's Landlock is older than ABI 6: what it has is enforced.
    Partial,
    /// Not enforced: switched off (`--no-sandbox`) or the kernel refused (why).
    Off {
        /// Why.
        reason: String,
    },
}

/// What [`confine`] did, for the start-up log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confined {
    /// Who the daemon runs as.
    pub identity: Identity,
    /// What Landlock enforces.
    pub sandbox: Sandbox,
}

/// Why the daemon could not take the identity it was told to.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// `--user` names no user.
    #[error("--user {0}: no such user")]
    UnknownUser(String),
    /// Only root can change its user.
    #[error("--user {user}: only root can become another user (this is uid {uid})")]
    NotRoot {
        /// The user asked for.
        user: String,
        /// Who the daemon is.
        uid: u32,
    },
    /// The user may not write a directory the daemon writes.
    #[error(
        "--user {user}: it may not write {dir}, which the daemon writes while it runs; \
         give it the directory (chown {user} {dir}) or choose other paths"
    )]
    NotWritable {
        /// The user asked for.
        user: String,
        /// The directory it may not write.
        dir: PathBuf,
    },
    /// The kernel refused the change of identity.
    #[error("cannot become {user}: {source}")]
    Drop {
        /// The user asked for.
        user: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// The kernel refused to drop capabilities.
    #[error("cannot drop capabilities: {0}")]
    Capabilities(io::Error),
}

/// Gives up privileges: see the module's documentation. Call it once the daemon has
/// bound its sockets and read its keys, before its loop and any thread start.
pub fn confine(user: &UserChoice, sandbox: bool, needs: &Needs) -> Result<Confined, ConfineError> {
    let ruleset = if sandbox { Some(ruleset(needs)) } else { None };
    let identity = take_identity(user, needs)?;
    let sandbox = match ruleset {
        None => Sandbox::Off {
            reason: "--no-sandbox".into(),
        },
        Some(Err(reason)) => Sandbox::Off { reason },
        Some(Ok(r)) => enforce(r),
    };
    if !matches!(identity, Identity::RootKept) {
        // Also set by Landlock; here for the case without it.
        rustix::thread::set_no_new_privs(true).map_err(|e| ConfineError::Capabilities(e.into()))?;
    }
    Ok(Confined { identity, sandbox })
}

impl Confined {
    /// One line in the daemon's log saying what it runs as; a warning if root kept
    /// its capabilities or the sandbox is off.
    pub fn log(&self, daemon: &str) {
        match &self.identity {
            Identity::Dropped { user, uid, gid } => {
                info!(daemon, user = %user, uid, gid, "running as an unprivileged user");
            }
            Identity::Unchanged { uid } => {
                info!(daemon, uid, "running as the user that started it")
            }
            Identity::RootWithoutCapabilities { reason } => {
                info!(daemon, why = %reason, "running as uid 0 without capabilities");
            }
            Identity::RootKept => {
                warn!(daemon, "--user root: running as root with every capability")
            }
        }
        match &self.sandbox {
            Sandbox::Full => info!(daemon, "Landlock sandbox enforced"),
            Sandbox::Partial => {
                info!(
                    daemon,
                    "Landlock sandbox partly enforced (the kernel's ABI is older)"
                );
            }
            Sandbox::Off { reason } => warn!(daemon, why = %reason, "no Landlock sandbox"),
        }
    }
}

/// The newest Landlock ABI natm asks for; an older kernel enforces what it has.
const ABI_WANTED: ABI = ABI::V6;

/// The ruleset, built while still privileged: everything handled, the write
/// directories and `/dev/null` (the descriptor sigd keeps in reserve) allowed.
fn ruleset(needs: &Needs) -> Result<RulesetCreated, String> {
    let build = || -> Result<RulesetCreated, landlock::RulesetError> {
        let mut r = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(ABI_WANTED))?
            .scope(Scope::from_all(ABI_WANTED))?
            .create()?;
        for dir in &needs.write_dirs {
            // A directory that does not exist holds nothing the daemon writes.
            if let Ok(fd) = landlock::PathFd::new(dir) {
                r = r.add_rule(landlock::PathBeneath::new(
                    fd,
                    AccessFs::from_all(ABI_WANTED),
                ))?;
            }
        }
        if let Ok(fd) = landlock::PathFd::new("/dev/null") {
            r = r.add_rule(landlock::PathBeneath::new(
                fd,
                AccessFs::ReadFile | AccessFs::WriteFile,
            ))?;
        }
        Ok(r)
    };
    build().map_err(|e| e.to_string())
}

fn enforce(r: RulesetCreated) -> Sandbox {
    match r.restrict_self() {
        Ok(s) => match s.ruleset {
            RulesetStatus::FullyEnforced => Sandbox::Full,
            RulesetStatus::PartiallyEnforced => Sandbox::Partial,
            RulesetStatus::NotEnforced => Sandbox::Off {
                reason: "the kernel has no Landlock".into(),
            },
        },
        Err(e) => Sandbox::Off {
            reason: e.to_string(),
        },
    }
}

fn take_identity(user: &UserChoice, needs: &Needs) -> Result<Identity, ConfineError> {
    let me = Uid::effective();
    match user {
        UserChoice::Named(n) if n == "root" => {
            if me.is_root() {
                Ok(Identity::RootKept)
            } else {
                Err(ConfineError::NotRoot {
                    user: n.clone(),
                    uid: me.as_raw(),
                })
            }
        }
        UserChoice::Named(n) => {
            let u = lookup(n)?.ok_or_else(|| ConfineError::UnknownUser(n.clone()))?;
            if u.uid == me {
                return Ok(Identity::Unchanged { uid: me.as_raw() });
            }
            if !me.is_root() {
                return Err(ConfineError::NotRoot {
                    user: n.clone(),
                    uid: me.as_raw(),
                });
            }
            if let Some(dir) = unwritable(&u, needs) {
                return Err(ConfineError::NotWritable {
                    user: n.clone(),
                    dir,
                });
            }
            become_user(&u)
        }
        UserChoice::Default if !me.is_root() => Ok(Identity::Unchanged { uid: me.as_raw() }),
        UserChoice::Default => {
            let reason = match lookup(DEFAULT_USER)? {
                None => format!("no user {DEFAULT_USER} (the package makes it; or give --user)"),
                Some(u) => match unwritable(&u, needs) {
                    None => return become_user(&u),
                    Some(dir) => format!(
                        "user {DEFAULT_USER} may not write {} (give it the directory, or --user)",
                        dir.display()
                    ),
                },
            };
            drop_capabilities()?;
            Ok(Identity::RootWithoutCapabilities { reason })
        }
    }
}

fn lookup(name: &str) -> Result<Option<User>, ConfineError> {
    User::from_name(name).map_err(|e| ConfineError::Drop {
        user: name.into(),
        source: e.into(),
    })
}

/// The first directory in `needs` that `u` may not write into, if any.
fn unwritable(u: &User, needs: &Needs) -> Option<PathBuf> {
    needs
        .write_dirs
        .iter()
        .find(|d| match std::fs::metadata(d) {
            Ok(m) => !may_write(m.uid(), m.gid(), m.mode(), u.uid.as_raw(), u.gid.as_raw()),
            // Missing: nothing there to write.
            Err(_) => false,
        })
        .cloned()
}

/// Whether user `uid` (primary group `gid`, its only group once dropped) may create
/// files in a directory owned by `owner`:`group` with permission bits `mode`: the
/// write and search bits of the class the user falls in, as the kernel checks them.
pub fn may_write(owner: u32, group: u32, mode: u32, uid: u32, gid: u32) -> bool {
    let bits = if owner == uid {
        mode >> 6
    } else if group == gid {
        mode >> 3
    } else {
        mode
    };
    bits & 0o3 == 0o3
}

fn become_user(u: &User) -> Result<Identity, ConfineError> {
    let err = |e: nix::Error| ConfineError::Drop {
        user: u.name.clone(),
        source: e.into(),
    };
    nix::unistd::setgroups(&[u.gid]).map_err(err)?;
    nix::unistd::setresgid(u.gid, u.gid, u.gid).map_err(err)?;
    nix::unistd::setresuid(u.uid, u.uid, u.uid).map_err(err)?;
    // The change is for good: root cannot be taken back.
    if nix::unistd::setuid(Uid::from_raw(0)).is_ok() || Gid::effective() != u.gid {
        return Err(ConfineError::Drop {
            user: u.name.clone(),
            source: io::Error::other("root could be regained"),
        });
    }
    rustix::thread::clear_ambient_capability_set().map_err(|e| ConfineError::Drop {
        user: u.name.clone(),
        source: e.into(),
    })?;
    Ok(Identity::Dropped {
        user: u.name.clone(),
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
    })
}

/// Uid 0 without any capability: the bounding set emptied first (that needs
/// CAP_SETPCAP), then ambient, and the effective, permitted and inheritable sets.
fn drop_capabilities() -> Result<(), ConfineError> {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    let e = |e: rustix::io::Errno| ConfineError::Capabilities(e.into());
    for cap in CapabilitySet::all().iter() {
        match rustix::thread::remove_capability_from_bounding_set(cap) {
            // A capability newer than this kernel.
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(x) => return Err(e(x)),
        }
    }
    rustix::thread::clear_ambient_capability_set().map_err(e)?;
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_access_follows_the_class_the_user_falls_in() {
        // Owner with rwx, group and others without.
        assert!(may_write(995, 995, 0o700, 995, 995));
        assert!(!may_write(0, 0, 0o700, 995, 995));
        // Group-writable with search, as /run/natm may be.
        assert!(may_write(0, 995, 0o770, 995, 995));
        // Write without search is no use.
        assert!(!may_write(0, 995, 0o760, 995, 995));
        // The owner class is checked alone, as the kernel does: an owner without
        // write is refused even where others may write.
        assert!(!may_write(995, 0, 0o577, 995, 995));
        // World-writable (e.g. /tmp).
        assert!(may_write(0, 0, 0o1777, 995, 995));
    }

    /// Set in the child process [`the_sandbox_denies_all_but_the_daemons_directories`]
    /// starts: the directory it may write, and another it may not.
    const CHILD: &str = "NATM_CONFINE_TEST_DIRS";

    /// Runs the test binary again for [`sandboxed_child`]: Landlock binds the
    /// process for good, so it is tried in a process of its own.
    #[test]
    fn the_sandbox_denies_all_but_the_daemons_directories() {
        let base = std::env::temp_dir().join(format!("natm-confine-{}", std::process::id()));
        let (mine, other) = (base.join("mine"), base.join("other"));
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "confine::tests::sandboxed_child",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD, format!("{}\n{}", mine.display(), other.display()))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_dir_all(&base);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "the child ran no test: {text}");
    }

    #[test]
    #[ignore = "run by the_sandbox_denies_all_but_the_daemons_directories in a process of its own"]
    fn sandboxed_child() {
        let dirs = std::env::var(CHILD).expect("started by its parent test");
        let (mine, other) = dirs.split_once('\n').unwrap();
        let (mine, other) = (Path::new(mine), Path::new(other));
        let mut needs = Needs::default();
        needs.file(&mine.join("sigd.sock"));
        // Whoever runs the test: root keeps root here, so the sandbox alone is tried.
        let user = if Uid::effective().is_root() {
            UserChoice::Named("root".into())
        } else {
            UserChoice::Default
        };
        let c = confine(&user, true, &needs).unwrap();
        assert_eq!(
            c.sandbox,
            Sandbox::Full,
            "this machine's kernel has Landlock ABI 6 or later"
        );
        let denied = |r: io::Result<()>, what: &str| match r {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
            r => panic!("{what}: {r:?}, not denied"),
        };
        // Its own directory: files made, written, renamed, removed.
        std::fs::write(mine.join("pins.tmp"), b"x").unwrap();
        std::fs::rename(mine.join("pins.tmp"), mine.join("pins")).unwrap();
        assert_eq!(std::fs::read(mine.join("pins")).unwrap(), b"x");
        std::fs::remove_file(mine.join("pins")).unwrap();
        std::fs::File::open("/dev/null").unwrap();
        // Anywhere else: nothing, not even reading, even as root.
        denied(std::fs::write(other.join("x"), b"x"), "writing beside it");
        denied(
            std::fs::read("/etc/passwd").map(drop),
            "reading /etc/passwd",
        );
        denied(std::fs::read_dir("/").map(drop), "listing /");
        // No signal to a process outside the sandbox (the parent test).
        let parent = rustix::process::getppid().unwrap();
        assert_eq!(
            rustix::process::test_kill_process(parent),
            Err(rustix::io::Errno::PERM)
        );
    }

    #[test]
    fn needs_keep_each_directory_once() {
        let mut n = Needs::default();
        n.file(Path::new("/run/natm/sigd.sock"));
        n.file(Path::new("/run/natm/sigd.known_peers"));
        n.file(Path::new("sigd.sock"));
        assert_eq!(
            n.write_dirs,
            vec![PathBuf::from("/run/natm"), PathBuf::from(".")]
        );
    }
}
