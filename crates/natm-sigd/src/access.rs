//! Who may do what through sigd's application socket: the `[[access]]` rules of the
//! configuration, applied to the uid and gid SO_PEERCRED gave for each connection
//! (docs/SECURITY.md "Local users").
//!
//! root, and the user sigd itself runs as, may do anything. Any other user may
//! register only addresses a rule gives it (by default none beyond the host's
//! configured ones: registering a remote address would hijack the calls this host's
//! applications place to it), bind the SAPs a rule gives it (by default any SAP no
//! other user holds; the core keeps SAPs per uid), and ask for guaranteed rates up to
//! the rule's `max_rate` (by default any). The first rule that matches the user wins.
//!
//! Linux-ATM's atmsigd has no such policy: its socket is the kernel's, open to any
//! process with CAP_NET_ADMIN for signalling and to everyone for calls. natm's sigd is
//! a user-space daemon reached over a Unix socket, so it is the daemon that must keep
//! users apart.

use std::path::Path;

use natm_proto::wire::addr::{AtmAddr, HostsFile, Prefix};

use crate::core::Creds;

/// Whom a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    /// One user.
    Uid(u32),
    /// The members of a group: its gid (a process's primary group) and the uids
    /// `/etc/group` lists as members.
    Group {
        /// The group's gid.
        gid: u32,
        /// Its listed members' uids.
        members: Vec<u32>,
    },
    /// Everyone not matched by an earlier rule.
    Anyone,
}

/// One checked `[[access]]` rule.
#[derive(Debug, Clone)]
pub struct AccessRule {
    /// Whom it applies to.
    pub who: Who,
    /// Address prefixes the user may register (beyond the configured addresses,
    /// which every user may "register", as that changes nothing).
    pub register: Vec<Prefix>,
    /// SAPs the user may bind (`None`: any SAP no other user holds).
    pub bind: Option<Vec<String>>,
    /// The highest guaranteed rate, bit/s, the user may ask for each way of a call or
    /// bind a listener for (`None`: no bound beyond admission control's).
    pub max_rate_bps: Option<u64>,
}

impl Who {
    fn matches(&self, c: &Creds) -> bool {
        match self {
            Who::Uid(u) => c.uid == *u,
            Who::Group { gid, members } => c.gid == *gid || members.contains(&c.uid),
            Who::Anyone => true,
        }
    }
}

/// The access policy.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Rules in file order.
    pub rules: Vec<AccessRule>,
    /// The uid sigd runs as: it may do anything, as root may.
    pub admin_uid: u32,
    /// SAPs of root services (`root_saps`): only root and sigd's own user bind them.
    pub root_saps: Vec<String>,
}

/// A refusal's words.
pub type Denied = String;

impl Access {
    /// Whether `c` may do anything (root or sigd's own user). Unknown credentials
    /// never are.
    pub fn privileged(&self, c: Option<Creds>) -> bool {
        c.is_some_and(|c| c.uid == 0 || c.uid == self.admin_uid)
    }

    fn rule(&self, c: &Creds) -> Option<&AccessRule> {
        self.rules.iter().find(|r| r.who.matches(c))
    }

    /// May `c` register `a`? `configured`: the host's configured addresses.
    pub fn may_register(
        &self,
        c: Option<Creds>,
        a: &AtmAddr,
        configured: &[AtmAddr],
    ) -> Result<(), Denied> {
        if self.privileged(c) || configured.contains(a) {
            return Ok(());
        }
        let uid = c.map_or("unknown".to_owned(), |c| c.uid.to_string());
        let allowed = c
            .as_ref()
            .and_then(|c| self.rule(c))
            .is_some_and(|r| r.register.iter().any(|p| p.matches(a)));
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "permission denied: uid {uid} may not register {a}; only root may register an \
                 address that is not this host's, unless an [[access]] rule's register lists it"
            ))
        }
    }

    /// May `c` bind `sap` (ownership between users is the core's)?
    pub fn may_bind(&self, c: Option<Creds>, sap: &str) -> Result<(), Denied> {
        if self.privileged(c) {
            return Ok(());
        }
        let canonical =
            |s: &str| natm_proto::sig::Sap::from_text(s).map_or(s.to_owned(), |x| x.to_string());
        let sap_c = canonical(sap);
        if self.root_saps.iter().any(|s| canonical(s) == sap_c) {
            return Err(format!(
                "permission denied: SAP \"{sap}\" belongs to a root service (root_saps); \
                 only root may bind it, so no user can take the calls meant for it"
            ));
        }
        let Some(list) = c
            .as_ref()
            .and_then(|c| self.rule(c))
            .and_then(|r| r.bind.as_ref())
        else {
            return Ok(());
        };
        if list.iter().any(|s| s == "*" || s == sap) {
            Ok(())
        } else {
            Err(format!(
                "permission denied: SAP \"{sap}\" is not among those an [[access]] rule lets \
                 uid {} bind ({})",
                c.map_or(0, |c| c.uid),
                list.join(", ")
            ))
        }
    }

    /// The highest guaranteed rate `c` may ask for, bit/s (`None`: no bound).
    pub fn max_rate(&self, c: Option<Creds>) -> Option<u64> {
        if self.privileged(c) {
            return None;
        }
        c.as_ref()
            .and_then(|c| self.rule(c))
            .and_then(|r| r.max_rate_bps)
    }
}

/// `/etc/passwd` and `/etc/group`, as far as sigd needs them (names to ids).
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    users: Vec<(String, u32)>,
    groups: Vec<(String, u32, Vec<String>)>,
}

impl Accounts {
    /// Read the system's files (missing files: no names).
    pub fn system() -> Accounts {
        let read = |p: &str| std::fs::read_to_string(Path::new(p)).unwrap_or_default();
        Accounts::parse(&read("/etc/passwd"), &read("/etc/group"))
    }

    /// From the text of a passwd and a group file.
    pub fn parse(passwd: &str, group: &str) -> Accounts {
        let fields = |l: &str| l.split(':').map(str::to_owned).collect::<Vec<_>>();
        let users = passwd
            .lines()
            .map(fields)
            .filter(|f| f.len() >= 3)
            .filter_map(|f| Some((f[0].clone(), f[2].parse().ok()?)))
            .collect();
        let groups = group
            .lines()
            .map(fields)
            .filter(|f| f.len() >= 3)
            .filter_map(|f| {
                let members = f
                    .get(3)
                    .map(|m| {
                        m.split(',')
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                Some((f[0].clone(), f[2].parse().ok()?, members))
            })
            .collect();
        Accounts { users, groups }
    }

    /// A user's uid: a name, or a number.
    pub fn uid(&self, name: &str) -> Option<u32> {
        name.parse()
            .ok()
            .or_else(|| self.users.iter().find(|(n, _)| n == name).map(|(_, u)| *u))
    }

    /// A group's gid and its listed members' uids: a name, or a number.
    pub fn group(&self, name: &str) -> Option<(u32, Vec<u32>)> {
        let g = match name.parse::<u32>() {
            Ok(gid) => self.groups.iter().find(|g| g.1 == gid),
            Err(_) => self.groups.iter().find(|g| g.0 == name),
        };
        match (g, name.parse::<u32>()) {
            (Some((_, gid, m)), _) => Some((*gid, m.iter().filter_map(|n| self.uid(n)).collect())),
            (None, Ok(gid)) => Some((gid, Vec::new())),
            (None, Err(_)) => None,
        }
    }
}

/// A prefix list entry of a rule, checked (`hosts` for names).
pub(crate) fn prefix(text: &str, hosts: &HostsFile) -> Result<Prefix, String> {
    Prefix::parse(text, hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(uid: u32, gid: u32) -> Option<Creds> {
        Some(Creds { pid: 1, uid, gid })
    }

    #[test]
    fn names_resolve_from_passwd_and_group() {
        let a = Accounts::parse(
            "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n",
            "root:x:0:\nnatm:x:120:alice,ghost\n",
        );
        assert_eq!(a.uid("alice"), Some(1000));
        assert_eq!(a.uid("4242"), Some(4242));
        assert_eq!(a.uid("bob"), None);
        assert_eq!(a.group("natm"), Some((120, vec![1000])));
        assert_eq!(a.group("77"), Some((77, vec![])));
        assert_eq!(a.group("nogroup"), None);
    }

    #[test]
    fn users_register_only_what_a_rule_gives_and_root_anything() {
        let hosts = HostsFile::default();
        let acc = Access {
            rules: vec![AccessRule {
                who: Who::Group {
                    gid: 120,
                    members: vec![1001],
                },
                register: vec![prefix("+4420009", &hosts).unwrap()],
                bind: Some(vec!["echo".into()]),
                max_rate_bps: Some(10_000_000),
            }],
            admin_uid: 0,
            root_saps: vec!["ip".into()],
        };
        let mine: AtmAddr = "+4420001".parse().unwrap();
        let remote: AtmAddr = "+4420002".parse().unwrap();
        let given: AtmAddr = "+44200091".parse().unwrap();
        let conf = [mine];
        assert!(acc.may_register(c(0, 0), &remote, &conf).is_ok());
        assert!(acc.may_register(c(1000, 1000), &mine, &conf).is_ok());
        let e = acc.may_register(c(1000, 1000), &remote, &conf).unwrap_err();
        assert!(e.starts_with("permission denied: uid 1000"), "{e}");
        assert!(acc.may_register(c(1000, 120), &given, &conf).is_ok());
        assert!(acc.may_register(c(1001, 1001), &given, &conf).is_ok());
        assert!(acc.may_register(None, &remote, &conf).is_err());
        assert!(acc.may_bind(c(1000, 120), "echo").is_ok());
        assert!(acc.may_bind(c(1000, 120), "ftp").is_err());
        assert!(acc.may_bind(c(1000, 1000), "ftp").is_ok());
        // A root service's SAP: root only, whatever a rule says.
        assert!(acc.may_bind(c(0, 0), "ip").is_ok());
        let e = acc.may_bind(c(1000, 1000), "ip").unwrap_err();
        assert!(e.contains("root service"), "{e}");
        assert_eq!(acc.max_rate(c(1000, 120)), Some(10_000_000));
        assert_eq!(acc.max_rate(c(0, 120)), None);
    }
}
