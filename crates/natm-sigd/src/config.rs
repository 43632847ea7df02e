//! sigd's configuration: a TOML file (see `docs/sigd.example.toml`) that flags override.
//! Every mistake is reported with the key it is in and what to write instead.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use super::directory::Prefix;
use crate::access::{self, Access, AccessRule, Accounts, Who};
use natm_proto::wire::addr::{AtmAddr, HostsFile};

/// Where sigd listens for applications unless told otherwise.
pub use natm_proto::wire::ipc::DEFAULT_SOCKET;
/// sigd's UDP signalling port unless told otherwise (SSCOP on VPI 0/VCI 5 inside).
pub const DEFAULT_SIGNALLING: &str = "127.0.0.1:2905";

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// This host's ATM addresses (NSAP, E.164 or names from the hosts file).
    #[serde(default)]
    pub addresses: Vec<String>,
    /// The Unix-domain socket applications talk to.
    pub socket: Option<PathBuf>,
    /// The UDP endpoint peers' sigds send signalling to.
    pub signalling: Option<String>,
    /// The IP address applications' data sockets are reached at (default: the
    /// signalling endpoint's).
    pub data_ip: Option<String>,
    /// A Linux-ATM hosts file for names (`/etc/hosts.atm` format).
    pub hosts: Option<PathBuf>,
    /// Capacity and CPU accounting.
    #[serde(default)]
    pub link: LinkSection,
    /// Bounds on what applications may hold.
    #[serde(default)]
    pub limits: LimitsSection,
    /// Q.2931 and sigd timers.
    #[serde(default)]
    pub timers: TimersSection,
    /// ATM address prefix → peer sigd.
    #[serde(default)]
    pub directory: Vec<RouteSection>,
    /// Allow/reject rules by address prefix, first match wins (atmsigd's policy).
    #[serde(default)]
    pub policy: Vec<PolicySection>,
    /// Who may open a signalling link, and what one peer may hold.
    #[serde(default)]
    pub peers: PeersSection,
    /// Peers by signalling endpoint: the callers each may claim, its key.
    #[serde(default)]
    pub peer: Vec<PeerSection>,
    /// Calls across a sigd crash and restart.
    #[serde(default)]
    pub restart: RestartSection,
    /// The application socket's permission bits, octal text [default "0666"].
    pub socket_mode: Option<String>,
    /// The group the application socket is given (a name or gid) [default: sigd's].
    pub socket_group: Option<String>,
    /// What each local user may do through the socket, first match wins.
    #[serde(default)]
    pub access: Vec<AccessSection>,
    /// SAPs of root services, which only root (or sigd's own user) may bind
    /// [default `["ip", "atmarp", "blli.llc"]`, `natm ip`'s].
    pub root_saps: Option<Vec<String>>,
    /// Serve the counters in the Prometheus text format at `http://ADDR/metrics`
    /// (`IP:PORT`, host explicit) [default: not served]. Beyond loopback, anyone who
    /// reaches the address reads them.
    pub metrics: Option<String>,
}

/// Where sigd keeps state that must outlive a reboot (its Noise key, pinned peer
/// keys): beside a socket of the operator's choosing, or in [`STATE_DIR`] beside
/// the default socket, whose /run directory a reboot empties (a new key there
/// would be refused by every peer that pinned the old one).
pub fn state_file(socket: &Path, ext: &str) -> PathBuf {
    if socket == Path::new(DEFAULT_SOCKET) {
        Path::new(STATE_DIR).join(format!("sigd.{ext}"))
    } else {
        socket.with_extension(ext)
    }
}

/// sigd's persistent state directory when it uses the default socket.
pub const STATE_DIR: &str = "/var/lib/natm";

/// `[peers]`: admission of signalling peers (docs/SECURITY.md "Signalling peers").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeersSection {
    /// Admit a peer that no `[[directory]]` route or `[[peer]]` names, once it has
    /// echoed a cookie [default true].
    pub accept_unknown: Option<bool>,
    /// A link that has held no call for this long is released and forgotten, ms
    /// [default 60000; switch links are kept].
    pub idle_ms: Option<u64>,
    /// Most links to peers nobody configured [default 64]; beyond it the longest-idle
    /// one without calls is released.
    pub max_unknown: Option<usize>,
    /// Most links to unconfigured peers from one IP address [default 8].
    pub max_unknown_per_ip: Option<usize>,
    /// Most links to unconfigured peers from one network: the same /24 (IPv4) or /64
    /// (IPv6) [default 16], so that one attacker's many addresses share a bound.
    pub max_unknown_per_prefix: Option<usize>,
    /// Most calls one peer's link may hold [default three quarters of
    /// `[limits] calls`; switch links may hold all].
    pub calls_per_peer: Option<usize>,
    /// Most calls the links of unconfigured peers in one network (the same /24 or
    /// /64) hold together [default a quarter of `[limits] calls`].
    pub calls_per_unknown_prefix: Option<usize>,
    /// Most calls the links of all unconfigured peers hold together [default half
    /// of `[limits] calls`]: the rest stays for configured peers and this host.
    pub calls_unknown: Option<usize>,
    /// Guaranteed bandwidth one configured peer's calls may hold while they wait
    /// for the called application's answer, e.g. "50Mbps" [default `[link]
    /// capacity`].
    pub half_open: Option<String>,
    /// The same for the peers nobody configured in one network (the same /24 or
    /// /64), together [default a quarter of `[link] capacity`].
    pub half_open_unknown: Option<String>,
    /// Guaranteed bandwidth the calls of unconfigured peers in one network (the
    /// same /24 or /64) may hold together, answered or not [default a quarter of
    /// `[link] capacity`].
    pub bandwidth_per_unknown_prefix: Option<String>,
    /// The same for all unconfigured peers together [default half of `[link]
    /// capacity`]: the rest stays for configured peers and this host.
    pub bandwidth_unknown: Option<String>,
    /// Log lines about remote events, per second and kind [default 10].
    pub log_per_s: Option<u32>,
    /// This sigd's Noise static key (private, mode 0600) [default the socket path
    /// with extension `noise-key`].
    pub key_file: Option<PathBuf>,
    /// Peers' Noise public keys pinned on first use, one `address key` a line
    /// [default the socket path with extension `known-peers`].
    pub known_peers_file: Option<PathBuf>,
}

/// One `[[peer]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSection {
    /// The peer's signalling endpoint.
    pub address: String,
    /// Calling-number prefixes it may claim, besides the `[[directory]]` prefixes
    /// routed to it.
    #[serde(default)]
    pub callers: Vec<String>,
    /// Pre-shared key (hex, at least 16 octets), mixed into the link's Noise
    /// handshake (XXpsk3; to a switch: the PSK frames of docs/wire.md "Peer control
    /// frames").
    pub key: Option<String>,
    /// The peer's Noise public key (base64, `natm sigd --show-key` on the peer): the
    /// handshake must prove it, else the link is refused. Without it the key seen
    /// first is pinned (`[peers] known_peers_file`).
    pub public_key: Option<String>,
    /// Signalling to this peer runs clear, unauthenticated (both ends must say so).
    #[serde(default)]
    pub clear: bool,
}

/// `[restart]`, in milliseconds (docs/sigd.md "sigd restart").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartSection {
    /// How long an active call to a peer sigd is kept after the signalling link to
    /// it is lost (T309 on links to peer sigds) [default 300000].
    pub preserve_ms: Option<u64>,
    /// How long after start sigd leaves a peer's STATUS ENQUIRY about a call it
    /// does not know unanswered, while its applications reclaim their calls
    /// [default 3000; at most 7000, under the peer's 3 × T322].
    pub reclaim_window_ms: Option<u64>,
    /// How long after start sigd takes resume tickets at all [default
    /// `reclaim_window_ms` + 2000: the window, and a peer's next enquiry after it].
    pub ticket_expiry_ms: Option<u64>,
    /// The file holding the key resume tickets are sealed with, created 0600 on
    /// first start [default: the socket's path with the extension `ticket-key`,
    /// `/run/natm/sigd.ticket-key`].
    pub ticket_key_file: Option<PathBuf>,
}

/// One `[[access]]` rule: exactly one of `user`, `group` or `anyone = true`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessSection {
    /// A user name or uid.
    pub user: Option<String>,
    /// A group name or gid (a process's primary group, or a listed member).
    pub group: Option<String>,
    /// Every user no earlier rule matched.
    #[serde(default)]
    pub anyone: bool,
    /// Address prefixes the user may register [default: none beyond the host's].
    #[serde(default)]
    pub register: Vec<String>,
    /// SAPs the user may bind ("*": any) [default: any no other user holds].
    pub bind: Option<Vec<String>>,
    /// The highest guaranteed rate per call and direction, e.g. "10Mbps".
    pub max_rate: Option<String>,
}

/// `[link]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSection {
    /// The host's link rate each way, e.g. "100Mbps".
    pub capacity: Option<String>,
    /// Cost of one TPDU in nanoseconds; unset: measured at start.
    pub tpdu_cost_ns: Option<u64>,
    /// Share of the CPUs guaranteed VCs may reserve, 0 < share ≤ 1.
    pub cpu_share: Option<f64>,
}

/// `[limits]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Most application connections at once.
    pub connections: Option<usize>,
    /// Most calls at once.
    pub calls: Option<usize>,
    /// Most application connections one non-root user holds at once.
    pub connections_per_user: Option<usize>,
    /// Connections only root (and sigd's own user) may take: other users are
    /// refused once `connections - root_reserve` are open.
    pub root_reserve: Option<usize>,
    /// Most calls one non-root user's applications hold at once.
    pub calls_per_user: Option<usize>,
    /// Most guaranteed bandwidth one non-root user's calls hold together, each
    /// way, e.g. "25Mbps" [default a quarter of `[link] capacity`].
    pub bandwidth_per_user: Option<String>,
    /// Most listeners one connection holds.
    pub listeners_per_connection: Option<usize>,
    /// Most listeners one non-root user holds.
    pub listeners_per_user: Option<usize>,
    /// Most addresses one connection registers.
    pub registrations_per_connection: Option<usize>,
    /// A connection holding no call, listener or registration, and silent this
    /// long, is closed (ms; 0: never).
    pub idle_close_ms: Option<u64>,
}

/// `[timers]`, in milliseconds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimersSection {
    /// T303: SETUP sent, no answer.
    pub t303_ms: Option<u64>,
    /// T308: RELEASE sent, no answer.
    pub t308_ms: Option<u64>,
    /// T310: CALL PROCEEDING received, no CONNECT.
    pub t310_ms: Option<u64>,
    /// T313: CONNECT sent, no CONNECT ACKNOWLEDGE.
    pub t313_ms: Option<u64>,
    /// How long a listening application has to accept or reject a call.
    pub accept_ms: Option<u64>,
    /// How long an unanswered incoming call may hold a guaranteed reservation.
    pub reserve_ms: Option<u64>,
}

/// One `[[directory]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// Address prefix ("47.0005.80", "+4420", a name, or "*").
    pub prefix: String,
    /// The peer sigd's UDP signalling endpoint, or the switch port's.
    pub peer: String,
    /// The peer is an ATM switch (`natm switch`), not a sigd: the link to it is
    /// brought up at start and kept up, with the network's timers
    /// (`SaalConfig::network`) [default false].
    #[serde(default)]
    pub switch: bool,
}

/// One `[[policy]]` rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// "allow" or "reject".
    pub action: String,
    /// Address prefix the rule matches (the remote party's address).
    pub prefix: String,
    /// "incoming", "outgoing" or "both" (default).
    pub direction: Option<String>,
}

/// What a policy rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Let the call through.
    Allow,
    /// Refuse it (cause 21, call rejected).
    Reject,
}

/// Which calls a policy rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallDirection {
    /// Calls from peers.
    Incoming,
    /// Calls from local applications.
    Outgoing,
    /// Both.
    Both,
}

/// A checked policy rule.
#[derive(Debug, Clone)]
pub struct PolicyRule {
    /// Allow or reject.
    pub action: Action,
    /// Remote address prefix.
    pub prefix: Prefix,
    /// Which calls.
    pub direction: CallDirection,
}

/// Timers, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    /// T303.
    pub t303: Duration,
    /// T308.
    pub t308: Duration,
    /// T310.
    pub t310: Duration,
    /// T313.
    pub t313: Duration,
    /// How long an `Incoming` waits for `Accept`/`Reject`.
    pub accept: Duration,
    /// How long an `Incoming` holding a guaranteed reservation waits.
    pub reserve: Duration,
}

impl Default for Timers {
    fn default() -> Self {
        // Q.2931 defaults (§ 9 table 9-1) and a generous accept window.
        Timers {
            t303: Duration::from_secs(4),
            t308: Duration::from_secs(30),
            t310: Duration::from_secs(10),
            t313: Duration::from_secs(4),
            accept: Duration::from_secs(10),
            reserve: Duration::from_secs(2),
        }
    }
}

/// sigd's checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// This host's addresses.
    pub addresses: Vec<AtmAddr>,
    /// The application socket.
    pub socket: PathBuf,
    /// The signalling endpoint.
    pub signalling: SocketAddr,
    /// The IP applications' data sockets are reached at.
    pub data_ip: IpAddr,
    /// Names.
    pub hosts: HostsFile,
    /// Link rate each way, bit/s.
    pub capacity_bps: u64,
    /// TPDU cost, ns (`None`: measure at start).
    pub tpdu_cost_ns: Option<u64>,
    /// Share of the CPUs for guaranteed VCs.
    pub cpu_share: f64,
    /// Most application connections.
    pub max_connections: usize,
    /// Most calls.
    pub max_calls: usize,
    /// Timers.
    pub timers: Timers,
    /// Directory routes, in file order.
    pub routes: Vec<(Prefix, SocketAddr)>,
    /// The peers that are switches (each also in `routes`).
    pub switches: Vec<SocketAddr>,
    /// Policy, first match wins; no match allows.
    pub policy: Vec<PolicyRule>,
    /// Signalling peers: admission, limits, keys.
    pub peers: PeerRules,
    /// Calls across a sigd restart.
    pub restart: Restart,
    /// The host's resume-ticket key file (`[restart] ticket_key_file`).
    pub ticket_key_file: PathBuf,
    /// This sigd's Noise static key file (`[peers] key_file`).
    pub noise_key_file: PathBuf,
    /// Peers' pinned Noise keys (`[peers] known_peers_file`).
    pub known_peers_file: PathBuf,
    /// The SSCOP N(SQ) of the last BGN sent on each configured link, so that a
    /// restarted sigd's first BGN is not taken for its previous instance's
    /// (`daemon::sscop_sq`).
    pub sscop_sq_file: PathBuf,
    /// The application socket's permission bits.
    pub socket_mode: u32,
    /// The group given the application socket (`None`: left as created).
    pub socket_group: Option<u32>,
    /// What each local user may do.
    pub access: Access,
    /// Per-user and per-connection bounds.
    pub user_limits: UserLimits,
    /// The guaranteed bit/s one non-root user's calls may hold together
    /// (`[limits] bandwidth_per_user`).
    pub bandwidth_per_user_bps: u64,
    /// Where `/metrics` is served (`metrics`; `None`: not served).
    pub metrics: Option<SocketAddr>,
}

/// `[peers]` and `[[peer]]`, checked.
#[derive(Debug, Clone)]
pub struct PeerRules {
    /// Admit unconfigured peers after a cookie echo.
    pub accept_unknown: bool,
    /// Idle links are released after this.
    pub idle: Duration,
    /// Most links to unconfigured peers.
    pub max_unknown: usize,
    /// Most links to unconfigured peers from one IP.
    pub max_unknown_per_ip: usize,
    /// Most links to unconfigured peers from one /24 or /64.
    pub max_unknown_per_prefix: usize,
    /// Most calls on one (non-switch) link.
    pub calls_per_peer: usize,
    /// Most calls on the links of unconfigured peers of one /24 or /64, together.
    pub calls_per_unknown_prefix: usize,
    /// Most calls on the links of all unconfigured peers, together.
    pub calls_unknown: usize,
    /// Guaranteed bit/s one configured peer's unanswered calls may hold.
    pub half_open_bps: u64,
    /// The same for the unconfigured peers of one /24 or /64, together.
    pub half_open_unknown_bps: u64,
    /// Guaranteed bit/s the calls of unconfigured peers of one /24 or /64 hold.
    pub bandwidth_per_unknown_prefix_bps: u64,
    /// Guaranteed bit/s the calls of all unconfigured peers hold.
    pub bandwidth_unknown_bps: u64,
    /// Remote-event log lines per second and kind.
    pub log_per_s: u32,
    /// `[[peer]]` entries.
    pub list: Vec<PeerEntry>,
}

/// One `[[peer]]`, checked.
#[derive(Debug, Clone)]
pub struct PeerEntry {
    /// Its signalling endpoint.
    pub addr: SocketAddr,
    /// Calling-number prefixes it may claim.
    pub callers: Vec<Prefix>,
    /// Its pre-shared key.
    pub key: Option<Key>,
    /// The Noise public key it must prove.
    pub public_key: Option<natm_proto::sig::noise::PublicKey>,
    /// Signalling to it runs clear.
    pub clear: bool,
}

/// A pre-shared key; `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(pub Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({} octets)", self.0.len())
    }
}

impl PeerRules {
    /// The `[[peer]]` entry for `addr`.
    pub fn entry(&self, addr: &SocketAddr) -> Option<&PeerEntry> {
        self.list.iter().find(|p| p.addr == *addr)
    }
}

/// What `[restart]` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restart {
    /// T309 on links to peer sigds: how long an active call outlives its link.
    pub preserve: Duration,
    /// How long after start a STATUS ENQUIRY for an unknown call waits for a reclaim.
    pub reclaim_window: Duration,
    /// How long after start a resume ticket is taken (then refused as expired).
    pub ticket_expiry: Duration,
}

impl Default for Restart {
    fn default() -> Self {
        Restart {
            preserve: Duration::from_secs(300),
            reclaim_window: Duration::from_secs(3),
            ticket_expiry: Duration::from_secs(5),
        }
    }
}

/// Bounds on what one user, or one connection, may hold (root and sigd's own user
/// are bound only by the per-connection ones and the totals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserLimits {
    /// Connections per user.
    pub connections_per_user: usize,
    /// Connections kept for root and sigd's own user.
    pub root_reserve: usize,
    /// Calls per user.
    pub calls_per_user: usize,
    /// Listeners per connection.
    pub listeners_per_connection: usize,
    /// Listeners per user.
    pub listeners_per_user: usize,
    /// Registered addresses per connection.
    pub registrations_per_connection: usize,
    /// Idle connections are closed after this (`None`: never).
    pub idle_close: Option<Duration>,
}

impl UserLimits {
    /// The defaults for `connections` and `calls` in total: an eighth of the
    /// connections and a quarter of the calls per user, and a sixteenth of the
    /// connections kept for root, so no set of users can lock root out
    /// (docs/decisions/0031-ipc-slots.md).
    pub fn defaults(connections: usize, calls: usize) -> UserLimits {
        UserLimits {
            connections_per_user: (connections / 8).max(1),
            root_reserve: (connections / 16).max(1).min(connections.saturating_sub(1)),
            calls_per_user: (calls / 4).max(1),
            listeners_per_connection: 1024,
            listeners_per_user: 4096,
            registrations_per_connection: 16,
            idle_close: Some(Duration::from_secs(60)),
        }
    }
}

/// A configuration mistake.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not TOML, or a key sigd does not know (the message names line and key).
    #[error("{path}: {message}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// toml's message, with line, column and the keys it expects.
        message: String,
    },
    /// A value sigd cannot use.
    #[error("{key}: {problem}; write e.g. {example}")]
    Value {
        /// The key, e.g. `directory[1].peer`.
        key: String,
        /// What is wrong with it.
        problem: String,
        /// What would be right.
        example: &'static str,
    },
}

fn bad(key: impl Into<String>, problem: impl Into<String>, example: &'static str) -> ConfigError {
    ConfigError::Value {
        key: key.into(),
        problem: problem.into(),
        example,
    }
}

/// A rate in bit/s: a number with bps, kbps, Mbps or Gbps.
pub fn parse_rate(s: &str) -> Option<u64> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let n: f64 = num.replace('_', "").parse().ok()?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "bps" => 1e0,
        "k" | "kbps" => 1e3,
        "m" | "mbps" => 1e6,
        "g" | "gbps" => 1e9,
        _ => return None,
    };
    let v = n * mult;
    (v.is_finite() && (1.0..1e15).contains(&v)).then_some(v.round() as u64)
}

impl ConfigFile {
    /// Read a file.
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        ConfigFile::parse(&text, path)
    }

    /// Parse TOML text (`path` is for messages).
    pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Toml {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// Check every value and fill in defaults.
    pub fn check(self) -> Result<Config, ConfigError> {
        let hosts = match &self.hosts {
            Some(p) => HostsFile::load(p).map_err(|e| {
                bad(
                    "hosts",
                    e.to_string(),
                    "hosts = \"/etc/hosts.atm\" (lines of `address name`)",
                )
            })?,
            None => HostsFile::default(),
        };
        let mut addresses = Vec::new();
        for (i, a) in self.addresses.iter().enumerate() {
            let addr = AtmAddr::parse_with_hosts(a, &hosts).map_err(|e| {
                bad(
                    format!("addresses[{i}]"),
                    e.render(a),
                    "addresses = [\"47.0005.80ffe1000000f21a26d8.0020ea000ee0.00\"]",
                )
            })?;
            if matches!(addr, AtmAddr::Pvc(_)) {
                return Err(bad(
                    format!("addresses[{i}]"),
                    format!("\"{a}\" is a PVC, not a host address"),
                    "addresses = [\"+4420123456\"]",
                ));
            }
            addresses.push(addr);
        }
        let sig_text = self.signalling.as_deref().unwrap_or(DEFAULT_SIGNALLING);
        let signalling: SocketAddr = sig_text.parse().map_err(|_| {
            bad(
                "signalling",
                format!("\"{sig_text}\" is not an IP address and UDP port"),
                "signalling = \"192.0.2.1:2905\"",
            )
        })?;
        let data_ip = match &self.data_ip {
            Some(t) => t.parse().map_err(|_| {
                bad(
                    "data_ip",
                    format!("\"{t}\" is not an IP address"),
                    "data_ip = \"192.0.2.1\"",
                )
            })?,
            None if signalling.ip().is_unspecified() => {
                return Err(bad(
                    "data_ip",
                    "the signalling endpoint is a wildcard address, so peers cannot be told where applications are",
                    "data_ip = \"192.0.2.1\"",
                ))
            }
            None => signalling.ip(),
        };
        let capacity_bps = match &self.link.capacity {
            Some(t) => parse_rate(t).ok_or_else(|| {
                bad(
                    "link.capacity",
                    format!("\"{t}\" is not a rate"),
                    "capacity = \"100Mbps\" (bps, kbps, Mbps or Gbps)",
                )
            })?,
            None => 1_000_000_000,
        };
        let cpu_share = self.link.cpu_share.unwrap_or(0.8);
        if !(cpu_share > 0.0 && cpu_share <= 1.0) {
            return Err(bad(
                "link.cpu_share",
                format!("{cpu_share} is outside (0, 1]"),
                "cpu_share = 0.8",
            ));
        }
        if self.link.tpdu_cost_ns == Some(0) {
            return Err(bad(
                "link.tpdu_cost_ns",
                "a TPDU cannot cost nothing",
                "tpdu_cost_ns = 2000, or leave it out to measure at start",
            ));
        }
        let max_connections = self.limits.connections.unwrap_or(1024);
        let max_calls = self.limits.calls.unwrap_or(16_384);
        if max_connections == 0 || max_calls == 0 {
            return Err(bad(
                "limits",
                "connections and calls must be at least 1",
                "[limits] connections = 1024, calls = 16384",
            ));
        }
        let d = Timers::default();
        let ms = |v: Option<u64>, key: &str, def: Duration| -> Result<Duration, ConfigError> {
            match v {
                Some(0) => Err(bad(
                    format!("timers.{key}"),
                    "a timer of 0 ms would fire at once",
                    "t303_ms = 4000",
                )),
                Some(v) => Ok(Duration::from_millis(v)),
                None => Ok(def),
            }
        };
        let timers = Timers {
            t303: ms(self.timers.t303_ms, "t303_ms", d.t303)?,
            t308: ms(self.timers.t308_ms, "t308_ms", d.t308)?,
            t310: ms(self.timers.t310_ms, "t310_ms", d.t310)?,
            t313: ms(self.timers.t313_ms, "t313_ms", d.t313)?,
            accept: ms(self.timers.accept_ms, "accept_ms", d.accept)?,
            reserve: ms(self.timers.reserve_ms, "reserve_ms", d.reserve)?,
        };
        let dr = Restart::default();
        let mut restart = Restart {
            preserve: ms(self.restart.preserve_ms, "preserve_ms", dr.preserve)
                .map_err(|_| bad("restart.preserve_ms", "0 ms would keep no call across a lost link", "preserve_ms = 300000"))?,
            reclaim_window: match self.restart.reclaim_window_ms {
                None => dr.reclaim_window,
                Some(v) if v <= 7000 => Duration::from_millis(v),
                Some(v) => {
                    return Err(bad(
                        "restart.reclaim_window_ms",
                        format!("{v} ms is longer than a peer asks before it gives a call up (3 STATUS ENQUIRYs, 4 s apart)"),
                        "reclaim_window_ms = 3000",
                    ))
                }
            },
            ticket_expiry: dr.ticket_expiry,
        };
        restart.ticket_expiry = match self.restart.ticket_expiry_ms {
            None => restart.reclaim_window + Duration::from_secs(2),
            Some(v) if Duration::from_millis(v) >= restart.reclaim_window => {
                Duration::from_millis(v)
            }
            Some(v) => {
                return Err(bad(
                    "restart.ticket_expiry_ms",
                    format!(
                        "{v} ms is shorter than reclaim_window_ms ({} ms): tickets would expire \
                         while sigd still waits for them",
                        restart.reclaim_window.as_millis()
                    ),
                    "ticket_expiry_ms = 5000",
                ))
            }
        };
        let mut routes = Vec::new();
        let mut switches = Vec::new();
        for (i, r) in self.directory.iter().enumerate() {
            let prefix = Prefix::parse(&r.prefix, &hosts).map_err(|p| {
                bad(
                    format!("directory[{i}].prefix"),
                    p,
                    "prefix = \"47.0005.80ffe1\", \"+4420\", a name, or \"*\"",
                )
            })?;
            let peer: SocketAddr = r.peer.parse().map_err(|_| {
                bad(
                    format!("directory[{i}].peer"),
                    format!("\"{}\" is not an IP address and UDP port", r.peer),
                    "peer = \"192.0.2.7:2905\"",
                )
            })?;
            routes.push((prefix, peer));
            if r.switch && !switches.contains(&peer) {
                switches.push(peer);
            }
        }
        let mut policy = Vec::new();
        for (i, p) in self.policy.iter().enumerate() {
            let action = match p.action.as_str() {
                "allow" => Action::Allow,
                "reject" => Action::Reject,
                other => {
                    return Err(bad(
                        format!("policy[{i}].action"),
                        format!("\"{other}\" is neither allow nor reject"),
                        "action = \"reject\"",
                    ))
                }
            };
            let direction = match p.direction.as_deref().unwrap_or("both") {
                "incoming" => CallDirection::Incoming,
                "outgoing" => CallDirection::Outgoing,
                "both" => CallDirection::Both,
                other => {
                    return Err(bad(
                        format!("policy[{i}].direction"),
                        format!("\"{other}\" is not incoming, outgoing or both"),
                        "direction = \"incoming\"",
                    ))
                }
            };
            let prefix = Prefix::parse(&p.prefix, &hosts).map_err(|e| {
                bad(
                    format!("policy[{i}].prefix"),
                    e,
                    "prefix = \"47.0005.80\" or \"*\"",
                )
            })?;
            policy.push(PolicyRule {
                action,
                prefix,
                direction,
            });
        }
        let peers = self.check_peers(&hosts, capacity_bps, max_calls)?;
        // A switch's link with a pre-shared key runs its HMAC frames, not Noise: a
        // Noise key for it would be ignored.
        if let Some((i, _)) =
            peers.list.iter().enumerate().find(|(_, e)| {
                switches.contains(&e.addr) && e.key.is_some() && e.public_key.is_some()
            })
        {
            return Err(bad(
                format!("peer[{i}].public_key"),
                "a switch's link with a key is sealed by it, not by Noise: remove key or public_key",
                "public_key = \"<the switch's natm switch --show-key>\"",
            ));
        }
        let bandwidth_per_user_bps = match &self.limits.bandwidth_per_user {
            None => capacity_bps / 4,
            Some(t) => parse_rate(t).filter(|r| *r > 0).ok_or_else(|| {
                bad(
                    "limits.bandwidth_per_user",
                    format!("\"{t}\" is not a rate above 0"),
                    "bandwidth_per_user = \"25Mbps\"",
                )
            })?,
        };
        let d = UserLimits::defaults(max_connections, max_calls);
        let l = &self.limits;
        let nonzero = |v: Option<usize>, key: &str, def: usize| -> Result<usize, ConfigError> {
            match v {
                Some(0) => Err(bad(
                    format!("limits.{key}"),
                    "a limit of 0 would refuse everyone",
                    "[limits] listeners_per_connection = 1024",
                )),
                Some(v) => Ok(v),
                None => Ok(def),
            }
        };
        let user_limits = UserLimits {
            connections_per_user: nonzero(
                l.connections_per_user,
                "connections_per_user",
                d.connections_per_user,
            )?,
            root_reserve: match l.root_reserve {
                Some(r) if r >= max_connections => {
                    return Err(bad(
                        "limits.root_reserve",
                        format!(
                        "{r} would leave none of the {max_connections} connections to other users"
                    ),
                        "[limits] root_reserve = 64",
                    ))
                }
                Some(r) => r,
                None => d.root_reserve,
            },
            calls_per_user: nonzero(l.calls_per_user, "calls_per_user", d.calls_per_user)?,
            listeners_per_connection: nonzero(
                l.listeners_per_connection,
                "listeners_per_connection",
                d.listeners_per_connection,
            )?,
            listeners_per_user: nonzero(
                l.listeners_per_user,
                "listeners_per_user",
                d.listeners_per_user,
            )?,
            registrations_per_connection: nonzero(
                l.registrations_per_connection,
                "registrations_per_connection",
                d.registrations_per_connection,
            )?,
            idle_close: match l.idle_close_ms {
                Some(0) => None,
                Some(ms) => Some(Duration::from_millis(ms)),
                None => d.idle_close,
            },
        };
        let socket_mode = match &self.socket_mode {
            Some(t) => u32::from_str_radix(t.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .ok_or_else(|| {
                    bad(
                        "socket_mode",
                        format!("\"{t}\" is not octal permission bits"),
                        "socket_mode = \"0660\"",
                    )
                })?,
            None => 0o666,
        };
        let accounts = Accounts::system();
        let socket_group = match &self.socket_group {
            Some(g) => Some(
                accounts
                    .group(g)
                    .ok_or_else(|| {
                        bad(
                            "socket_group",
                            format!("no group \"{g}\" in /etc/group"),
                            "socket_group = \"natm\" (create it with `groupadd natm`)",
                        )
                    })?
                    .0,
            ),
            None => None,
        };
        let mut rules = Vec::new();
        for (i, a) in self.access.iter().enumerate() {
            let key = |k: &str| format!("access[{i}].{k}");
            let who = match (&a.user, &a.group, a.anyone) {
                (Some(u), None, false) => Who::Uid(accounts.uid(u).ok_or_else(|| {
                    bad(
                        key("user"),
                        format!("no user \"{u}\" in /etc/passwd"),
                        "user = \"alice\" or user = \"1000\"",
                    )
                })?),
                (None, Some(g), false) => {
                    let (gid, members) = accounts.group(g).ok_or_else(|| {
                        bad(
                            key("group"),
                            format!("no group \"{g}\" in /etc/group"),
                            "group = \"natm\" or group = \"120\"",
                        )
                    })?;
                    Who::Group { gid, members }
                }
                (None, None, true) => Who::Anyone,
                _ => {
                    return Err(bad(
                        format!("access[{i}]"),
                        "give exactly one of user, group or anyone = true",
                        "user = \"alice\"",
                    ))
                }
            };
            let mut register = Vec::new();
            for (j, p) in a.register.iter().enumerate() {
                register.push(access::prefix(p, &hosts).map_err(|e| {
                    bad(
                        format!("access[{i}].register[{j}]"),
                        e,
                        "register = [\"+4420001\", \"47.0005.80ffe1\"]",
                    )
                })?);
            }
            if let Some(b) = &a.bind {
                if let Some(s) = b.iter().find(|s| s.is_empty()) {
                    return Err(bad(
                        key("bind"),
                        format!("\"{s}\" is not a SAP"),
                        "bind = [\"echo\", \"ttcp\"] or [\"*\"]",
                    ));
                }
            }
            let max_rate_bps = match &a.max_rate {
                Some(t) => Some(parse_rate(t).ok_or_else(|| {
                    bad(
                        key("max_rate"),
                        format!("\"{t}\" is not a rate"),
                        "max_rate = \"10Mbps\"",
                    )
                })?),
                None => None,
            };
            rules.push(AccessRule {
                who,
                register,
                bind: a.bind.clone(),
                max_rate_bps,
            });
        }
        let root_saps = self
            .root_saps
            .clone()
            .unwrap_or_else(|| vec!["ip".to_owned(), "atmarp".to_owned(), "blli.llc".to_owned()]);
        if let Some(s) = root_saps.iter().find(|s| s.is_empty() || s.as_str() == "*") {
            return Err(bad(
                "root_saps",
                format!("\"{s}\" is not a SAP"),
                "root_saps = [\"ip\", \"atmarp\"]",
            ));
        }
        let access = Access {
            rules,
            admin_uid: rustix::process::geteuid().as_raw(),
            root_saps,
        };
        let metrics = match &self.metrics {
            Some(t) => Some(
                crate::metrics::http::parse_addr(t)
                    .map_err(|e| bad("metrics", e, "metrics = \"127.0.0.1:9464\""))?,
            ),
            None => None,
        };
        let socket = self.socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
        let ticket_key_file = self
            .restart
            .ticket_key_file
            .clone()
            .unwrap_or_else(|| socket.with_extension("ticket-key"));
        let noise_key_file = self
            .peers
            .key_file
            .clone()
            .unwrap_or_else(|| state_file(&socket, "noise-key"));
        let known_peers_file = self
            .peers
            .known_peers_file
            .clone()
            .unwrap_or_else(|| state_file(&socket, "known-peers"));
        let sscop_sq_file = state_file(&socket, "sscop-sq");
        Ok(Config {
            addresses,
            socket,
            ticket_key_file,
            noise_key_file,
            known_peers_file,
            sscop_sq_file,
            signalling,
            data_ip,
            hosts,
            capacity_bps,
            tpdu_cost_ns: self.link.tpdu_cost_ns,
            cpu_share,
            max_connections,
            max_calls,
            timers,
            routes,
            switches,
            policy,
            peers,
            restart,
            socket_mode,
            socket_group,
            access,
            user_limits,
            bandwidth_per_user_bps,
            metrics,
        })
    }

    fn check_peers(
        &self,
        hosts: &HostsFile,
        capacity_bps: u64,
        max_calls: usize,
    ) -> Result<PeerRules, ConfigError> {
        let p = &self.peers;
        let idle_ms = p.idle_ms.unwrap_or(60_000);
        if idle_ms == 0 {
            return Err(bad(
                "peers.idle_ms",
                "links would be released as soon as they come up",
                "idle_ms = 60000",
            ));
        }
        let rate = |v: &Option<String>, key: &str, def: u64| match v {
            Some(t) => parse_rate(t).ok_or_else(|| {
                bad(
                    format!("peers.{key}"),
                    format!("\"{t}\" is not a rate"),
                    "half_open = \"25Mbps\"",
                )
            }),
            None => Ok(def),
        };
        let half_open_bps = rate(&p.half_open, "half_open", capacity_bps)?;
        let half_open_unknown_bps =
            rate(&p.half_open_unknown, "half_open_unknown", capacity_bps / 4)?;
        let bandwidth_per_unknown_prefix_bps = rate(
            &p.bandwidth_per_unknown_prefix,
            "bandwidth_per_unknown_prefix",
            capacity_bps / 4,
        )?;
        let bandwidth_unknown_bps =
            rate(&p.bandwidth_unknown, "bandwidth_unknown", capacity_bps / 2)?;
        let calls_per_peer = p.calls_per_peer.unwrap_or((max_calls * 3 / 4).max(1));
        let calls_unknown = p.calls_unknown.unwrap_or((max_calls / 2).max(1));
        let calls_per_unknown_prefix = p.calls_per_unknown_prefix.unwrap_or((max_calls / 4).max(1));
        if calls_per_peer == 0
            || calls_unknown == 0
            || calls_per_unknown_prefix == 0
            || p.max_unknown_per_ip == Some(0)
            || p.max_unknown_per_prefix == Some(0)
            || p.log_per_s == Some(0)
        {
            return Err(bad(
                "peers",
                "calls_per_peer, calls_unknown, calls_per_unknown_prefix, max_unknown_per_ip, max_unknown_per_prefix and log_per_s must be at least 1",
                "[peers] calls_per_peer = 12288",
            ));
        }
        let mut list: Vec<PeerEntry> = Vec::new();
        for (i, e) in self.peer.iter().enumerate() {
            let addr: SocketAddr = e.address.parse().map_err(|_| {
                bad(
                    format!("peer[{i}].address"),
                    format!("\"{}\" is not an IP address and UDP port", e.address),
                    "address = \"192.0.2.7:2905\"",
                )
            })?;
            if list.iter().any(|o| o.addr == addr) {
                return Err(bad(
                    format!("peer[{i}].address"),
                    format!("{addr} has an earlier [[peer]] entry"),
                    "one [[peer]] per address",
                ));
            }
            let mut callers = Vec::new();
            for (j, c) in e.callers.iter().enumerate() {
                callers.push(Prefix::parse(c, hosts).map_err(|m| {
                    bad(
                        format!("peer[{i}].callers[{j}]"),
                        m,
                        "callers = [\"+4420\", \"47.0005.80\"]",
                    )
                })?);
            }
            let key = match &e.key {
                Some(k) => {
                    let v = hex::decode(k.trim()).ok().filter(|v| v.len() >= 16);
                    Some(Key(v.ok_or_else(|| {
                        bad(
                            format!("peer[{i}].key"),
                            "not hex for at least 16 octets",
                            "key = \"<32 random octets in hex: openssl rand -hex 32>\"",
                        )
                    })?))
                }
                None => None,
            };
            let public_key = match &e.public_key {
                Some(k) => Some(natm_proto::sig::noise::key_from_text(k).ok_or_else(|| {
                    bad(
                        format!("peer[{i}].public_key"),
                        "not a base64 X25519 public key (32 octets)",
                        "public_key = \"<the peer's `natm sigd --show-key`>\"",
                    )
                })?),
                None => None,
            };
            if e.clear && (key.is_some() || public_key.is_some()) {
                return Err(bad(
                    format!("peer[{i}].clear"),
                    "a clear link has no key: remove clear, or key and public_key",
                    "clear = true",
                ));
            }
            list.push(PeerEntry {
                addr,
                callers,
                key,
                public_key,
                clear: e.clear,
            });
        }
        Ok(PeerRules {
            accept_unknown: p.accept_unknown.unwrap_or(true),
            idle: Duration::from_millis(idle_ms),
            max_unknown: p.max_unknown.unwrap_or(64),
            max_unknown_per_ip: p.max_unknown_per_ip.unwrap_or(8),
            max_unknown_per_prefix: p.max_unknown_per_prefix.unwrap_or(16),
            calls_per_peer,
            calls_per_unknown_prefix,
            calls_unknown,
            half_open_bps,
            half_open_unknown_bps,
            bandwidth_per_unknown_prefix_bps,
            bandwidth_unknown_bps,
            log_per_s: p.log_per_s.unwrap_or(10),
            list,
        })
    }
}

impl Config {
    /// The policy's verdict on an incoming call whose calling number nobody vouches
    /// for (or that has none): only rules for every address ("*") can allow it; a
    /// reject rule matching the number it claims still rejects it.
    pub fn policy_allows_unverified(&self, remote: Option<&AtmAddr>, dir: CallDirection) -> bool {
        for r in &self.policy {
            let applies = r.direction == CallDirection::Both || r.direction == dir;
            if !applies {
                continue;
            }
            if r.prefix.is_empty() {
                return r.action == Action::Allow;
            }
            if r.action == Action::Reject && remote.is_some_and(|a| r.prefix.matches(a)) {
                return false;
            }
        }
        true
    }

    /// The policy's verdict on a call with a party at `remote`.
    pub fn policy_allows(&self, remote: &AtmAddr, dir: CallDirection) -> bool {
        for r in &self.policy {
            let applies = r.direction == CallDirection::Both || r.direction == dir;
            if applies && r.prefix.matches(remote) {
                return r.action == Action::Allow;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<Config, ConfigError> {
        ConfigFile::parse(text, Path::new("t.toml"))?.check()
    }

    #[test]
    fn a_full_file_is_read() {
        let c = check(
            r#"
            addresses = ["47.0005.80ffe1000000f21a26d8.0020ea000ee0.00", "+4420"]
            socket = "/tmp/x.sock"
            signalling = "127.0.0.1:3000"
            [link]
            capacity = "100Mbps"
            tpdu_cost_ns = 1500
            [[directory]]
            prefix = "47.0005"
            peer = "127.0.0.1:3001"
            [[policy]]
            action = "reject"
            prefix = "+1"
            direction = "incoming"
            "#,
        )
        .unwrap();
        assert_eq!(c.capacity_bps, 100_000_000);
        assert_eq!(c.addresses.len(), 2);
        assert_eq!(c.routes[0].1, "127.0.0.1:3001".parse().unwrap());
        let us: AtmAddr = "+15551234".parse().unwrap();
        assert!(!c.policy_allows(&us, CallDirection::Incoming));
        assert!(c.policy_allows(&us, CallDirection::Outgoing));
    }

    #[test]
    fn a_keyed_switch_takes_no_noise_key() {
        let key = natm_proto::sig::noise::key_to_text(&[7; 32]);
        let sw = "[[directory]]\nprefix = \"*\"\npeer = \"127.0.0.1:2910\"\nswitch = true\n\
                  [[peer]]\naddress = \"127.0.0.1:2910\"\n";
        let e = check(&format!(
            "{sw}key = \"{}\"\npublic_key = \"{key}\"\n",
            "ab".repeat(16)
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("peer[0].public_key"), "{e}");
        // Either alone is taken: the switch's pinned Noise key, or its PSK frames.
        check(&format!("{sw}public_key = \"{key}\"\n")).unwrap();
        check(&format!("{sw}key = \"{}\"\n", "ab".repeat(16))).unwrap();
    }

    #[test]
    fn the_example_file_is_valid() {
        let text = include_str!("../../../docs/sigd.example.toml");
        let c = check(text).unwrap();
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.policy.len(), 2);
        assert_eq!(c.capacity_bps, 100_000_000);
        assert_eq!(c.access.rules.len(), 2);
        assert_eq!(c.access.rules[1].who, Who::Anyone);
        assert_eq!(c.access.rules[1].max_rate_bps, Some(10_000_000));
        assert_eq!(c.socket_mode, 0o666);
        assert_eq!(c.user_limits, UserLimits::defaults(1024, 16384));
        assert_eq!(c.access.root_saps, ["ip", "atmarp", "blli.llc"]);
        assert_eq!(c.bandwidth_per_user_bps, c.capacity_bps / 4);
    }

    #[test]
    fn resume_tickets_expire_after_the_reclaim_window() {
        let d = check("").unwrap();
        assert_eq!(d.restart.ticket_expiry, Duration::from_secs(5));
        let c = check("[restart]\nreclaim_window_ms = 1000\n").unwrap();
        assert_eq!(c.restart.ticket_expiry, Duration::from_secs(3));
        let c = check("[restart]\nticket_expiry_ms = 9000\n").unwrap();
        assert_eq!(c.restart.ticket_expiry, Duration::from_secs(9));
        let e = check("[restart]\nticket_expiry_ms = 2000\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ticket_expiry_ms"), "{e}");
    }

    #[test]
    fn the_root_reserve_and_root_saps_are_checked() {
        let d = check("").unwrap();
        assert_eq!(d.user_limits.connections_per_user, 128);
        assert_eq!(d.user_limits.root_reserve, 64);
        assert_eq!(d.access.root_saps, ["ip", "atmarp", "blli.llc"]);
        let c = check("root_saps = [\"ip\", \"bgp\"]\n[limits]\nroot_reserve = 8\n").unwrap();
        assert_eq!(c.user_limits.root_reserve, 8);
        assert_eq!(c.access.root_saps, ["ip", "bgp"]);
        let e = check("[limits]\nconnections = 8\nroot_reserve = 8\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("root_reserve"), "{e}");
        let e = check("root_saps = [\"\"]").unwrap_err().to_string();
        assert!(e.contains("root_saps"), "{e}");
        let c = check("[limits]\nbandwidth_per_user = \"40Mbps\"\n").unwrap();
        assert_eq!(c.bandwidth_per_user_bps, 40_000_000);
        let e = check("[limits]\nbandwidth_per_user = \"lots\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bandwidth_per_user"), "{e}");
    }

    #[test]
    fn local_user_keys_are_checked() {
        let c = check("socket_mode = \"0660\"\n[limits]\nidle_close_ms = 0\n").unwrap();
        assert_eq!(c.socket_mode, 0o660);
        assert_eq!(c.user_limits.idle_close, None);
        let e = check("socket_mode = \"rw\"").unwrap_err().to_string();
        assert!(e.contains("socket_mode") && e.contains("0660"), "{e}");
        let e = check("socket_group = \"no-such-group-here\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("socket_group") && e.contains("groupadd"), "{e}");
        let e = check("[[access]]\nuser = \"0\"\ngroup = \"0\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("access[0]") && e.contains("exactly one"), "{e}");
        let e = check("[[access]]\nanyone = true\nmax_rate = \"lots\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("access[0].max_rate"), "{e}");
        let e = check("[limits]\nlisteners_per_user = 0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("limits.listeners_per_user"), "{e}");
        let c = check("[[access]]\nuser = \"1000\"\nregister = [\"+44\"]").unwrap();
        assert_eq!(c.access.rules[0].who, Who::Uid(1000));
    }

    #[test]
    fn peers_and_their_keys_are_checked() {
        let c = check("[[peer]]\naddress = \"127.0.0.1:9\"\ncallers = [\"+44\"]\nkey = \"00112233445566778899aabbccddeeff\"").unwrap();
        let e = c.peers.entry(&"127.0.0.1:9".parse().unwrap()).unwrap();
        assert_eq!(e.key.as_ref().map(|k| k.0.len()), Some(16));
        assert!(!format!("{c:?}").contains("00112233"), "Debug shows no key");
        assert!(c.peers.accept_unknown);
        assert_eq!(c.peers.calls_per_peer, 12_288);
        let e = check("[[peer]]\naddress = \"127.0.0.1:9\"\nkey = \"abcd\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("peer[0].key") && e.contains("16 octets"), "{e}");
        let e = check("[peers]\nhalf_open = \"lots\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("peers.half_open"), "{e}");
        let e = check("[timers]\nreserve_ms = 0").unwrap_err().to_string();
        assert!(e.contains("timers.reserve_ms"), "{e}");
    }

    #[test]
    fn mistakes_name_the_key_and_the_fix() {
        let e = check("[link]\ncapacity = \"fast\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("link.capacity") && e.contains("100Mbps"), "{e}");
        let e = check("[[directory]]\nprefix = \"*\"\npeer = \"nowhere\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("directory[0].peer") && e.contains("2905"), "{e}");
        let e = check("adresses = []").unwrap_err().to_string();
        assert!(e.contains("adresses") && e.contains("addresses"), "{e}");
        let e = check("addresses = [\"zz.zz\"]").unwrap_err().to_string();
        assert!(e.contains("addresses[0]"), "{e}");
    }
}
