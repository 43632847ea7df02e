//! The switch's configuration: ports (UDP endpoints in cell or frame mode, or atmtcp
//! links over TCP) and permanent cross-connects with their traffic contracts, read from TOML
//! (`docs/switch.example.toml` shows every key).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use natm_proto::wire::addr::{HostsFile, Prefix};
use natm_switch::{Contract, PortConfig, PortUnit, SchedulerKind, Violation};
use serde::Deserialize;

use crate::allow::Allow;
use crate::train::MAX_TRAIN_CELLS;

/// A port's link mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkMode {
    /// Datagrams carry trains of 53-octet cells (`crate::train`).
    Cell,
    /// One AAL5 frame per datagram behind the VC header (`wire::vcframe`).
    Frame,
    /// AAL5 SDUs over a TCP connection in Linux's atmtcp format (`crate::atmtcp`),
    /// to or from `atmtcp virtual` on a Linux host.
    Atmtcp,
}

/// Why a configuration is refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML does not parse or has an unknown key.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// A value is out of range or inconsistent.
    #[error("{0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The switch's name in the refusals it sends and logs [default: "switch at"
    /// its first port's address].
    pub name: Option<String>,
    /// A JSON snapshot of every counter, rewritten every `stat_interval_ms` and at exit
    /// (what `natm stat --switch` reads).
    pub stat_json: Option<PathBuf>,
    /// Serve the counters in the Prometheus text format at `http://ADDR/metrics`
    /// (`IP:PORT`, host explicit) [default: not served]. Beyond loopback, anyone who
    /// reaches the address reads them.
    pub metrics: Option<String>,
    /// How often the snapshot is rewritten [default 500 ms].
    #[serde(default = "default_stat_interval")]
    pub stat_interval_ms: u64,
    /// Seed of the loss generators [default 1].
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Ports, given ids in order from 0.
    #[serde(default, rename = "port")]
    pub ports: Vec<PortSection>,
    /// Permanent cross-connects.
    #[serde(default, rename = "pvc")]
    pub pvcs: Vec<PvcSection>,
    /// Cell delay variation tolerated by each call's policer beyond its host's leaky
    /// bucket, µs [default 20,000: user-space hosts and switches on a loaded machine].
    pub svc_cdvt_us: Option<u64>,
    /// How long a released call's VCs go on sending what is queued for them before
    /// the rest is flushed, ms [default 1,000; 0 flushes at once]. The RELEASE to
    /// the side they go to waits for them.
    pub svc_drain_ms: Option<u64>,
    /// How long the active calls of a `signalling = "host"` port outlive the loss of
    /// its signalling link, ms [default 300,000, as sigd's `[restart] preserve_ms`;
    /// 0 clears them at once]: the host's sigd may be restarting, and its
    /// applications reclaim their calls from the new one (docs/sigd.md "sigd
    /// restart"). Trunks and `uni` ports clear at once unless the port sets
    /// `preserve_ms`.
    pub svc_preserve_ms: Option<u64>,
    /// Routes for calls: ATM address prefix → port (the longest match wins).
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteSection>,
    /// Routing between switches (issue 33): hellos on every `signalling = "switch"`
    /// port, the flooded topology, calls source-routed with crankback. Absent: static
    /// routes only.
    pub routing: Option<RoutingSection>,
    /// The switch's Noise static key for its signalling links (private;
    /// made on first start, mode 0600, refused if others may read it; `natm switch
    /// --show-key` prints the public key) [default: the configuration file's path
    /// with extension `noise-key`].
    pub key_file: Option<PathBuf>,
    /// Host sigds' Noise public keys pinned on first use, one `ADDRESS KEY` a line
    /// (remove a line to accept a host's new key) [default: the configuration
    /// file's path with extension `known-peers`].
    pub known_peers_file: Option<PathBuf>,
    /// The file this was read from (`Config::from_file`): the default key and
    /// known-peers files lie beside it.
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

/// `[routing]`: this switch's node number and the protocol's timers (PNNI's, scaled
/// down for a lab).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingSection {
    /// This switch's node number, unique in the network, not 0.
    pub node: u32,
    /// Hello interval on each trunk, ms [default 100].
    pub hello_ms: Option<u64>,
    /// A neighbour not heard for this long is down, ms [default 400].
    pub dead_ms: Option<u64>,
    /// The own topology element is re-originated at least this often, ms [default
    /// 1,000]; its lifetime is four times this.
    pub refresh_ms: Option<u64>,
    /// An unacknowledged topology element is sent again after this long, ms
    /// [default 50].
    pub retransmit_ms: Option<u64>,
}

impl RoutingSection {
    /// The router's configuration.
    pub fn config(&self) -> natm_switch::routing::RoutingConfig {
        let mut c =
            natm_switch::routing::RoutingConfig::lab(natm_proto::wire::q2931::NodeId(self.node));
        let ms = std::time::Duration::from_millis;
        if let Some(v) = self.hello_ms {
            c.hello = ms(v);
        }
        if let Some(v) = self.dead_ms {
            c.dead = ms(v);
        }
        if let Some(v) = self.refresh_ms {
            c.refresh = ms(v);
            c.lifetime = ms(v.saturating_mul(4));
        }
        if let Some(v) = self.retransmit_ms {
            c.retransmit = ms(v);
        }
        c
    }
}

/// A port's `gilbert = { ... }`: the two-state burst-loss channel, stepped once per
/// datagram sent.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GilbertSection {
    /// Probability of going from the good to the bad state after a datagram.
    pub p_good_to_bad: f64,
    /// Probability of going back; a bad run lasts 1/p_bad_to_good datagrams.
    pub p_bad_to_good: f64,
    /// Loss probability in the good state [default 0].
    #[serde(default)]
    pub loss_in_good: f64,
    /// Loss probability in the bad state [default 1].
    #[serde(default = "one")]
    pub loss_in_bad: f64,
}

fn one() -> f64 {
    1.0
}

impl GilbertSection {
    /// The model.
    pub fn model(&self) -> natm_sim::GilbertElliott {
        natm_sim::GilbertElliott::new(self.p_good_to_bad, self.p_bad_to_good)
            .with_losses(self.loss_in_good, self.loss_in_bad)
    }
}

/// One `[[route]]`: calls to addresses starting with `prefix` leave on `port`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// An NSAP prefix (`47.0005.80`), an E.164 prefix (`+4420`) or `*`.
    pub prefix: String,
    /// The port's name.
    pub port: String,
}

/// What a port's peer is, for signalling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SignallingRole {
    /// A host's sigd: its applications' data sockets send and receive each VC.
    Host,
    /// Another switch: every VC's data is exchanged with the peer.
    Switch,
    /// A standard UNI user that is not natm, such as Linux's `atmsigd` over an atmtcp
    /// port: plain UNI 3.1 signalling, one bidirectional VCC per call, bare AAL5.
    Uni,
}

fn default_stat_interval() -> u64 {
    500
}
fn default_seed() -> u64 {
    1
}

/// How long a listening atmtcp port's connection may receive nothing before a new
/// allowed peer may take the port over (`idle_ms`).
pub const DEFAULT_ATMTCP_IDLE: Duration = Duration::from_secs(30);

/// One `[[port]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSection {
    /// Its name in cross-connects and `natm stat`.
    pub name: String,
    /// The local UDP endpoint (cell and frame mode).
    pub bind: Option<SocketAddr>,
    /// The peer's UDP endpoint: datagrams go there, and only its are accepted (cell
    /// and frame mode).
    pub peer: Option<SocketAddr>,
    /// `cell`, `frame` or `atmtcp`.
    pub mode: LinkMode,
    /// atmtcp mode: listen on this TCP address (`IP:PORT`, or `IP` for port 2812)
    /// and accept one connection at a time, like `atmtcp virtual listen`.
    pub listen: Option<String>,
    /// atmtcp mode: connect to this TCP address (`IP:PORT` or `IP`), and again
    /// with backoff whenever the connection fails or ends, like `atmtcp virtual connect`.
    pub connect: Option<String>,
    /// A host or UNI port: refuse (cause 21) a SETUP whose calling number the routes
    /// do not send to this port, so that no host claims another's number [default
    /// true]. Off only for a host whose calling numbers no route names.
    #[serde(default = "default_true")]
    pub screen_calling: bool,
    /// A port to a user (`signalling = "host"`, or an atmtcp `uni` port): run ILMI's
    /// network side on VPI 0/VCI 16 (issue 33) and hand the port's user this network
    /// prefix, 13 octets in hex
    /// (`47.0005.80ffe1000000f21a26d8`); the user's address registrations under it
    /// become routes to the port and calling numbers it may use [default: no ILMI].
    pub ilmi_prefix: Option<String>,
    /// atmtcp `listen`: the sources that may connect, each `IP` or `IP/PREFIX`
    /// [default loopback only: `127.0.0.0/8`, `::1`]. Anyone else is closed at once.
    pub allow: Option<Vec<String>>,
    /// atmtcp `listen`: a connection that has received nothing for this many
    /// milliseconds gives the port up to a new allowed peer [default 30000], so an
    /// idle or abandoned connection cannot hold the port.
    pub idle_ms: Option<u64>,
    /// Line rate, bits per second [default 155,520,000].
    #[serde(default = "default_line_rate")]
    pub line_rate: u64,
    /// `fifo`, `rr` or `wrr` [default rr].
    #[serde(default = "default_scheduler")]
    pub scheduler: String,
    /// Output buffer, cells [default 4096].
    pub buffer: Option<u32>,
    /// Early packet discard threshold, cells (off if absent).
    pub epd: Option<u32>,
    /// EFCI: data leaving with more than this many cells queued is marked congested
    /// (ABR destinations read it); 0 turns marking off [default half the buffer].
    pub efci: Option<u32>,
    /// Partial packet discard [default true].
    #[serde(default = "default_true")]
    pub ppd: bool,
    /// Most cells per train sent (cell mode), and how far ahead of its line slot a
    /// unit may leave, in cells [default 32].
    #[serde(default = "default_train")]
    pub train: usize,
    /// Probability that a datagram sent is lost, 0..1 [default 0].
    #[serde(default)]
    pub loss: f64,
    /// Burst loss of datagrams sent, by the Gilbert–Elliott model (the simulator's):
    /// `{ p_good_to_bad, p_bad_to_good, loss_in_good = 0, loss_in_bad = 1 }`; on top
    /// of `loss`.
    pub gilbert: Option<GilbertSection>,
    /// One-way delay added to every datagram sent, µs [default 0].
    #[serde(default)]
    pub delay_us: u64,
    /// Run UNI signalling with the peer, a `host` (its sigd) or a `switch`; absent:
    /// the port carries permanent VCs only.
    pub signalling: Option<SignallingRole>,
    /// Pre-shared key (hex, at least 16 octets) authenticating every signalling
    /// frame with the peer (the same key as its sigd's `[[peer]] key`;
    /// docs/wire.md "Peer control frames"). Cell and frame ports only.
    pub key: Option<String>,
    /// A `host` port's sigd's Noise public key (base64, `natm sigd --show-key` on
    /// the host), or a `switch` port's peer switch's (`natm switch --show-key`):
    /// its link's handshake must prove it. Without it the key seen first is pinned
    /// (`known_peers_file`).
    pub public_key: Option<String>,
    /// A `host` or `switch` port's signalling (and a trunk's routing) runs clear,
    /// unauthenticated (the peer must say so too: its sigd's `[[peer]]` for the
    /// switch, or the other switch's port) [default false: Noise].
    #[serde(default)]
    pub clear: bool,
    /// This signalling port's own `svc_preserve_ms` (any role) [default: the global
    /// one on a host port, 0 on a trunk or `uni` port].
    pub preserve_ms: Option<u64>,
    /// This signalling port's SSCOP Timer_NO_RESPONSE, ms: how long the link may go
    /// without a STAT answering its POLLs before it is declared failed and its calls
    /// released (cause 27) [default 400 on `switch` ports, natm's network timers;
    /// 2,000 on `host` ports, as the host's sigd waits; 7,000 on `uni` ports,
    /// Q.2110's]. Longer for a peer that is starved of CPU at times (an emulated
    /// guest on a loaded host); shorter detects a dead peer sooner. At least 200 (a
    /// natm link polls every 100 ms).
    pub sscop_no_response_ms: Option<u64>,
}

fn default_line_rate() -> u64 {
    155_520_000
}
fn default_scheduler() -> String {
    "rr".into()
}
fn default_true() -> bool {
    true
}
fn default_train() -> usize {
    32
}

/// How a port's signalling frames are authenticated ([`PortSection::signalling_auth`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortAuth {
    /// Not at all (or no signalling).
    Clear,
    /// By Noise (issue 31), proving `public_key` if configured, else the pinned one,
    /// with the port's pre-shared `key` mixed in if it has one (`XXpsk3`).
    Noise {
        /// The key the peer must prove.
        public_key: Option<natm_proto::sig::noise::PublicKey>,
        /// The Noise psk made from the port's `key`.
        psk: Option<[u8; natm_proto::sig::noise::KEY_LEN]>,
    },
}

/// One `[[pvc]]`: a one-way cross-connect (add `duplex = true` for the reverse too).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PvcSection {
    /// Input: `PORT:VPI.VCI` (a VC) or `PORT:VPI` (a VP).
    pub from: String,
    /// Output, the same form as `from`.
    pub to: String,
    /// The contract as Linux-ATM QoS text (`cbr:pcr=10Mbps`,
    /// `vbr:pcr=…,scr=…,mbs=…`; `natm qos parse` shows the forms), its transmit side
    /// read as this direction's rates against the input port's line; instead of
    /// `pcr`/`scr`/`mbs`.
    pub qos: Option<String>,
    /// Peak cell rate, cells/s (unpoliced if absent).
    pub pcr: Option<u64>,
    /// Sustainable cell rate, cells/s (needs `mbs`).
    pub scr: Option<u64>,
    /// Maximum burst size, cells.
    pub mbs: Option<u32>,
    /// Cell delay variation tolerance, µs [default 0].
    #[serde(default)]
    pub cdvt_us: u64,
    /// Tag (CLP = 1) instead of discarding non-conforming cells [default false, or
    /// as the `qos` text's descriptor says].
    pub tag: Option<bool>,
    /// EPD/PPD on this VC [default true, or as the `qos` text's descriptor says].
    pub frame_discard: Option<bool>,
    /// Its queue's limit, cells.
    pub buffer: Option<u32>,
    /// Reserved rate for `wrr`, cells/s [default: SCR, else PCR].
    pub reserved: Option<u64>,
    /// Also install the reverse direction with the same contract.
    #[serde(default)]
    pub duplex: bool,
}

/// One end of a PVC as written: a port name, a VPI and, for a VC, a VCI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvcEnd {
    /// The port's name.
    pub port: String,
    /// VPI.
    pub vpi: u16,
    /// VCI; `None` for a VP.
    pub vci: Option<u16>,
}

impl PvcEnd {
    /// Parses `PORT:VPI.VCI` or `PORT:VPI`.
    pub fn parse(s: &str) -> Result<PvcEnd, ConfigError> {
        let (port, rest) = s
            .rsplit_once(':')
            .ok_or_else(|| invalid(format!("`{s}`: expected PORT:VPI.VCI or PORT:VPI")))?;
        let num = |t: &str| {
            t.parse::<u16>()
                .map_err(|_| invalid(format!("`{s}`: `{t}` is not a number 0-65535")))
        };
        let (vpi, vci) = match rest.split_once('.') {
            Some((p, c)) => (num(p)?, Some(num(c)?)),
            None => (num(rest)?, None),
        };
        Ok(PvcEnd {
            port: port.to_string(),
            vpi,
            vci,
        })
    }
}

impl PortSection {
    /// The data plane's view of this port.
    pub fn port_config(&self) -> Result<PortConfig, ConfigError> {
        let kind = match self.scheduler.as_str() {
            "fifo" => SchedulerKind::Fifo,
            "rr" => SchedulerKind::RoundRobin,
            "wrr" => SchedulerKind::WeightedRoundRobin,
            other => {
                return Err(invalid(format!(
                    "port {}: scheduler `{other}`: expected fifo, rr or wrr",
                    self.name
                )))
            }
        };
        // What the line carries: a PVC from a port of the other mode converts to it.
        let unit = self.unit();
        let mut cfg = PortConfig::new(self.line_rate)
            .scheduler(kind)
            .ppd(self.ppd)
            .unit(unit);
        // The buffer first: it moves the thresholds to its fractions, which the
        // keys that name a threshold then override.
        if let Some(b) = self.buffer {
            cfg = cfg.buffer(b);
        }
        cfg = cfg.epd(self.epd);
        if let Some(t) = self.efci {
            cfg = cfg.efci((t > 0).then_some(t));
        }
        Ok(cfg)
    }

    /// The signalling key, checked: none, or at least 16 octets on a cell or frame
    /// port that runs signalling.
    pub fn signalling_key(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        let Some(k) = &self.key else {
            return Ok(None);
        };
        if self.signalling.is_none() || self.mode == LinkMode::Atmtcp {
            return Err(invalid(format!(
                "port {}: a key needs a cell or frame port with signalling",
                self.name
            )));
        }
        match hex::decode(k.trim()) {
            Ok(v) if v.len() >= 16 => Ok(Some(v)),
            _ => Err(invalid(format!(
                "port {}: key: not hex for at least 16 octets (e.g. `openssl rand -hex 32`)",
                self.name
            ))),
        }
    }

    /// How the port's signalling is authenticated, checked: Noise by default on a
    /// `host` or `switch` cell or frame port (proving `public_key` if given, a
    /// pre-shared `key` mixed in if given), unless it says `clear = true`; `uni` and
    /// atmtcp ports signal in clear.
    pub fn signalling_auth(&self) -> Result<PortAuth, ConfigError> {
        let public_key = match &self.public_key {
            Some(k) => Some(natm_proto::sig::noise::key_from_text(k).ok_or_else(|| {
                invalid(format!(
                    "port {}: public_key: not a base64 X25519 public key (the host's `natm sigd --show-key`)",
                    self.name
                ))
            })?),
            None => None,
        };
        let noise_port = matches!(
            self.signalling,
            Some(SignallingRole::Host | SignallingRole::Switch)
        ) && self.mode != LinkMode::Atmtcp;
        let key = self.signalling_key()?;
        if (public_key.is_some() || self.clear || key.is_some()) && !noise_port {
            return Err(invalid(format!(
                "port {}: public_key, key and clear are for a host or switch port's signalling link (cell or frame mode); uni and atmtcp ports signal in clear",
                self.name
            )));
        }
        if self.clear && (public_key.is_some() || key.is_some()) {
            return Err(invalid(format!(
                "port {}: a clear link has no key: remove clear, or key and public_key",
                self.name
            )));
        }
        if noise_port && !self.clear {
            return Ok(PortAuth::Noise {
                public_key,
                psk: key.map(|k| natm_proto::sig::noise::psk_from_key(&k)),
            });
        }
        Ok(PortAuth::Clear)
    }

    /// The one-way delay.
    pub fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_us)
    }

    /// What the port's line carries: an atmtcp link carries AAL5 SDUs, as a frame
    /// port does.
    pub fn unit(&self) -> PortUnit {
        match self.mode {
            LinkMode::Cell => PortUnit::Cells,
            LinkMode::Frame | LinkMode::Atmtcp => PortUnit::Frames,
        }
    }

    /// A cell or frame port's UDP endpoints (`bind`, `peer`).
    pub fn udp_endpoints(&self) -> Result<(SocketAddr, SocketAddr), ConfigError> {
        match (self.mode, self.bind, self.peer) {
            (LinkMode::Atmtcp, ..) => Err(invalid(format!(
                "port {}: an atmtcp port has listen or connect, not bind and peer",
                self.name
            ))),
            (_, Some(b), Some(p)) => Ok((b, p)),
            _ => Err(invalid(format!(
                "port {}: a {:?} port needs bind and peer",
                self.name, self.mode
            ))),
        }
    }

    /// An atmtcp port's end of the TCP connection: whether it listens or connects,
    /// and the address.
    pub fn atmtcp_endpoint(&self) -> Result<(crate::AtmtcpRole, SocketAddr), ConfigError> {
        let addr = |s: &str| {
            s.parse::<SocketAddr>()
                .or_else(|_| {
                    s.parse::<IpAddr>()
                        .map(|ip| SocketAddr::new(ip, crate::atmtcp::DEFAULT_PORT))
                })
                .map_err(|_| {
                    invalid(format!(
                        "port {}: `{s}` is not IP:PORT or IP (port {})",
                        self.name,
                        crate::atmtcp::DEFAULT_PORT
                    ))
                })
        };
        match (
            self.mode,
            self.listen.as_deref(),
            self.connect.as_deref(),
            self.bind.or(self.peer),
        ) {
            (LinkMode::Atmtcp, Some(l), None, None) => Ok((crate::AtmtcpRole::Listen, addr(l)?)),
            (LinkMode::Atmtcp, None, Some(c), None) => Ok((crate::AtmtcpRole::Connect, addr(c)?)),
            (LinkMode::Atmtcp, ..) => Err(invalid(format!(
                "port {}: an atmtcp port has either listen or connect (and no bind/peer)",
                self.name
            ))),
            _ => Err(invalid(format!(
                "port {}: listen and connect are for mode = \"atmtcp\"",
                self.name
            ))),
        }
    }

    /// A listening atmtcp port's sources and idle takeover time (see `allow` and
    /// `idle_ms`); an error for `allow`/`idle_ms` on any other kind of port.
    pub fn atmtcp_admission(&self) -> Result<(Allow, Duration), ConfigError> {
        let listening = matches!(self.atmtcp_endpoint(), Ok((crate::AtmtcpRole::Listen, _)));
        if !listening && (self.allow.is_some() || self.idle_ms.is_some()) {
            return Err(invalid(format!(
                "port {}: allow and idle_ms are for an atmtcp port that listens",
                self.name
            )));
        }
        let allow = match &self.allow {
            None => Allow::loopback(),
            Some(list) if list.is_empty() => {
                return Err(invalid(format!(
                    "port {}: allow lists no source (leave it out for loopback only, or \
                     say allow = [\"0.0.0.0/0\", \"::/0\"] for anyone)",
                    self.name
                )))
            }
            Some(list) => Allow::parse(list)
                .map_err(|e| invalid(format!("port {}: allow: {e}", self.name)))?,
        };
        let idle = match self.idle_ms {
            Some(0) => {
                return Err(invalid(format!(
                    "port {}: idle_ms must be at least 1",
                    self.name
                )))
            }
            Some(ms) => Duration::from_millis(ms),
            None => DEFAULT_ATMTCP_IDLE,
        };
        Ok((allow, idle))
    }

    /// The network prefix ILMI hands this port's user, if it runs ILMI.
    pub fn ilmi_prefix(&self) -> Result<Option<[u8; 13]>, ConfigError> {
        let Some(text) = &self.ilmi_prefix else {
            return Ok(None);
        };
        let user_port = match self.mode {
            LinkMode::Atmtcp => self.signalling == Some(SignallingRole::Uni),
            _ => self.signalling == Some(SignallingRole::Host),
        };
        if !user_port {
            return Err(invalid(format!(
                "port {}: ilmi_prefix is for a port to a user: signalling = \"host\", or an atmtcp port with signalling = \"uni\"",
                self.name
            )));
        }
        let hex: String = text.chars().filter(|&c| c != '.').collect();
        match hex::decode(&hex)
            .ok()
            .and_then(|v| <[u8; 13]>::try_from(v).ok())
        {
            Some(p) => Ok(Some(p)),
            None => Err(invalid(format!(
                "port {}: ilmi_prefix: not 13 octets in hex (26 digits, dots allowed)",
                self.name
            ))),
        }
    }

    /// Checks the keys that depend on the link mode.
    fn check_link(&self) -> Result<(), ConfigError> {
        self.ilmi_prefix()?;
        if self.mode != LinkMode::Atmtcp {
            if self.listen.is_some() || self.connect.is_some() {
                self.atmtcp_endpoint()?;
            }
            if self.allow.is_some() || self.idle_ms.is_some() {
                self.atmtcp_admission()?;
            }
            self.udp_endpoints()?;
            return Ok(());
        }
        self.atmtcp_endpoint()?;
        self.atmtcp_admission()?;
        // The loss and delay experiments act on datagrams; TCP would hide them.
        if self.loss != 0.0 || self.gilbert.is_some() || self.delay_us != 0 {
            return Err(invalid(format!(
                "port {}: loss, gilbert and delay_us are for UDP ports, not atmtcp",
                self.name
            )));
        }
        Ok(())
    }
}

impl PvcSection {
    /// The contract this PVC is policed against; `link_cells` is the input port's
    /// line in cells/s (what a `qos` rate of `max` stands for). A `qos` text's rates
    /// are payload, policed in cells on the wire with each frame's overhead, as a
    /// call's (`Qos::wire_cells`); `pcr`/`scr` are cells on the wire as given.
    pub fn contract(&self, link_cells: u64) -> Result<Contract, ConfigError> {
        let mut c = match (&self.qos, self.pcr, self.scr, self.mbs) {
            (Some(text), None, None, None) => {
                let qos: natm_proto::wire::qos::Qos = text.parse().map_err(|e| {
                    invalid(format!(
                        "pvc {} -> {}: qos `{text}`: {e}",
                        self.from, self.to
                    ))
                })?;
                let td = natm_proto::sig::call::traffic_descriptor(
                    &qos,
                    u32::try_from(link_cells).unwrap_or(u32::MAX),
                );
                let c = Contract::from_descriptor(&td, true);
                c.with_frame_discard(self.frame_discard.unwrap_or(c.frame_discard))
            }
            (Some(_), ..) => {
                return Err(invalid(format!(
                    "pvc {} -> {}: give qos or pcr/scr/mbs, not both",
                    self.from, self.to
                )))
            }
            (None, None, None, _) => Contract::best_effort(),
            (None, Some(pcr), None, _) => Contract::cbr(pcr),
            (None, pcr, Some(scr), Some(mbs)) => {
                Contract::vbr(pcr.unwrap_or(u64::MAX / 2).max(scr), scr, mbs)
            }
            (None, _, Some(_), None) => {
                return Err(invalid(format!(
                    "pvc {} -> {}: scr needs mbs",
                    self.from, self.to
                )))
            }
        };
        if self.qos.is_none() {
            c = c.with_frame_discard(self.frame_discard.unwrap_or(true));
        }
        c = c.with_cdvt(Duration::from_micros(self.cdvt_us));
        match self.tag {
            Some(true) => c = c.tagging(),
            Some(false) => c.violation = Violation::Discard,
            None if self.qos.is_none() => c.violation = Violation::Discard,
            None => {}
        }
        if let Some(b) = self.buffer {
            c = c.with_buffer(b);
        }
        if let Some(r) = self.reserved {
            c = c.with_reserved(r);
        }
        Ok(c)
    }
}

impl Config {
    /// Reads and checks a TOML file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut c = Config::from_toml(&text)?;
        c.path = Some(path.to_path_buf());
        Ok(c)
    }

    /// The Noise key file: `key_file`, else beside the configuration file (`None`
    /// for a configuration read from text without either: the key is then made
    /// for this run only).
    pub fn key_path(&self) -> Option<PathBuf> {
        self.key_file
            .clone()
            .or_else(|| self.path.as_ref().map(|p| p.with_extension("noise-key")))
    }

    /// Where each signalling port's last BGN N(SQ) is kept for the next instance
    /// (`natm_sigd::sscop_sq`): beside the Noise key file, as sigd keeps its own (a
    /// directory the switch writes; the configuration's may be read-only to it).
    pub fn sscop_sq_path(&self) -> Option<PathBuf> {
        self.key_path().map(|p| p.with_extension("sscop-sq"))
    }

    /// The known-peers file: `known_peers_file`, else beside the configuration file.
    pub fn known_peers_path(&self) -> Option<PathBuf> {
        self.known_peers_file
            .clone()
            .or_else(|| self.path.as_ref().map(|p| p.with_extension("known-peers")))
    }

    /// Parses and checks TOML text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text)?;
        cfg.check()?;
        Ok(cfg)
    }

    /// The index of the port named `name`.
    pub fn port_index(&self, name: &str) -> Option<usize> {
        self.ports.iter().position(|p| p.name == name)
    }

    /// Checks what serde cannot: names, ranges, and that each PVC's ends are both VCs
    /// or both VPs. A VC PVC may join a cell port and a frame port (the data plane
    /// segments and reassembles); a VP PVC may not, as the data plane refuses it.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.ports.is_empty() {
            return Err(invalid("no [[port]]: a switch needs at least one"));
        }
        if let Some(m) = &self.metrics {
            natm_sigd::metrics::http::parse_addr(m)
                .map_err(|e| invalid(format!("metrics: {e}")))?;
        }
        if let Some(r) = &self.routing {
            if r.node == 0 {
                return Err(invalid("[routing] node must not be 0"));
            }
            if r.hello_ms == Some(0) || r.dead_ms.zip(r.hello_ms).is_some_and(|(d, h)| d <= h) {
                return Err(invalid(
                    "[routing] hello_ms must be above 0 and dead_ms above hello_ms",
                ));
            }
        }
        for (i, p) in self.ports.iter().enumerate() {
            if self.ports[..i].iter().any(|q| q.name == p.name) {
                return Err(invalid(format!("port name `{}` given twice", p.name)));
            }
            if !(0.0..=1.0).contains(&p.loss) {
                return Err(invalid(format!("port {}: loss must be in 0..1", p.name)));
            }
            if let Some(g) = &p.gilbert {
                g.model()
                    .validate()
                    .map_err(|e| invalid(format!("port {}: {e}", p.name)))?;
            }
            if p.train == 0 || p.train > MAX_TRAIN_CELLS {
                return Err(invalid(format!(
                    "port {}: train must be 1..={MAX_TRAIN_CELLS} cells",
                    p.name
                )));
            }
            p.check_link()?;
            p.port_config()?;
            p.signalling_auth()?;
            if p.sscop_no_response_ms.is_some() && p.signalling.is_none() {
                return Err(invalid(format!(
                    "port {}: sscop_no_response_ms times the signalling link: the port runs no signalling",
                    p.name
                )));
            }
            if p.sscop_no_response_ms.is_some_and(|ms| ms < 200) {
                return Err(invalid(format!(
                    "port {}: sscop_no_response_ms must be at least 200 (SSCOP polls every 100 ms)",
                    p.name
                )));
            }
            if p.preserve_ms.is_some() && p.signalling.is_none() {
                return Err(invalid(format!(
                    "port {}: preserve_ms keeps calls across a lost signalling link: the port runs no signalling",
                    p.name
                )));
            }
        }
        for v in &self.pvcs {
            let (a, b) = (PvcEnd::parse(&v.from)?, PvcEnd::parse(&v.to)?);
            let ia = self
                .port_index(&a.port)
                .ok_or_else(|| invalid(format!("pvc from `{}`: no port `{}`", v.from, a.port)))?;
            let ib = self
                .port_index(&b.port)
                .ok_or_else(|| invalid(format!("pvc to `{}`: no port `{}`", v.to, b.port)))?;
            if a.vci.is_some() != b.vci.is_some() {
                return Err(invalid(format!(
                    "pvc {} -> {}: both ends VCs (PORT:VPI.VCI) or both VPs (PORT:VPI)",
                    v.from, v.to
                )));
            }
            for (e, i) in [(&a, ia), (&b, ib)] {
                if self.ports[i].mode == LinkMode::Atmtcp && e.vpi == 0 && e.vci == Some(0) {
                    return Err(invalid(format!(
                        "pvc {} -> {}: VC 0.0 of an atmtcp port carries its control text, not data",
                        v.from, v.to
                    )));
                }
            }
            if a.vci.is_none() && self.ports[ia].unit() != self.ports[ib].unit() {
                return Err(invalid(format!(
                    "pvc {} -> {}: a VP joins ports of one link mode (cell/frame \
                     conversion is per VC)",
                    v.from, v.to
                )));
            }
            v.contract(self.ports[ia].port_config()?.cells_per_sec())?;
        }
        for r in &self.routes {
            let i = self
                .port_index(&r.port)
                .ok_or_else(|| invalid(format!("route {}: no port `{}`", r.prefix, r.port)))?;
            if self.ports[i].signalling.is_none() {
                return Err(invalid(format!(
                    "route {}: port `{}` runs no signalling (add signalling = \"host\" or \"switch\")",
                    r.prefix, r.port
                )));
            }
            self.route_prefix(r)?;
        }
        Ok(())
    }

    /// A route's prefix, parsed.
    pub fn route_prefix(&self, r: &RouteSection) -> Result<Prefix, ConfigError> {
        Prefix::parse(&r.prefix, &HostsFile::default())
            .map_err(|e| invalid(format!("route prefix {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"
        [[port]]
        name = "a"
        bind = "127.0.0.1:0"
        peer = "127.0.0.1:9"
        mode = "cell"
        [[port]]
        name = "b"
        bind = "127.0.0.1:0"
        peer = "127.0.0.1:9"
        mode = "cell"
        [[pvc]]
        from = "a:1.32"
        to = "b:2.40"
        pcr = 1000
    "#;

    #[test]
    fn parses() {
        let c = Config::from_toml(TWO).expect("valid");
        assert_eq!(c.ports.len(), 2);
        assert_eq!(c.pvcs[0].contract(1).expect("valid").pcr, Some(1000));
        let q = TWO.replace("pcr = 1000", "qos = \"cbr:pcr=384kbps\"");
        let c = Config::from_toml(&q).expect("valid");
        // Rates in bit/s count cell payload: 384 kbit/s is 1,000 cells/s of 48 octets,
        // policed as a call's are, in cells on the wire: 4 KiB TPDUs of 87 cells.
        assert_eq!(c.pvcs[0].contract(366_792).expect("valid").pcr, Some(1020));
        assert_eq!(
            PvcEnd::parse("a:1.32").expect("valid"),
            PvcEnd {
                port: "a".into(),
                vpi: 1,
                vci: Some(32)
            }
        );
    }

    #[test]
    fn a_ports_thresholds_are_its_own_whatever_its_buffer() {
        let port = |keys: &str| {
            let t = TWO.replacen("mode = \"cell\"", &format!("mode = \"cell\"\n{keys}"), 1);
            Config::from_toml(&t).expect("valid").ports[0]
                .port_config()
                .expect("valid")
        };
        // The buffer's fractions by default: EPD off unless named, EFCI at half.
        let p = port("buffer = 1000");
        assert_eq!((p.epd_threshold, p.efci_threshold), (None, Some(500)));
        // A named threshold is kept, not moved to the buffer's fraction.
        let p = port("buffer = 1000\nepd = 900\nefci = 100");
        assert_eq!((p.epd_threshold, p.efci_threshold), (Some(900), Some(100)));
        assert_eq!(port("efci = 0").efci_threshold, None, "0: no EFCI marking");
    }

    #[test]
    fn the_example_parses_with_every_kind_of_port_and_route() {
        let c = Config::from_toml(include_str!("../../../docs/switch.example.toml"))
            .expect("docs/switch.example.toml is valid");
        assert!(c
            .ports
            .iter()
            .any(|p| p.signalling == Some(SignallingRole::Host)));
        assert_eq!(c.routes.len(), 1);
        assert!(c.route_prefix(&c.routes[0]).is_ok());
        let linux = c.ports.iter().find(|p| p.mode == LinkMode::Atmtcp);
        let linux = linux.expect("an atmtcp port");
        assert_eq!(linux.unit(), PortUnit::Frames);
        assert_eq!(
            linux.atmtcp_endpoint().expect("valid"),
            (crate::AtmtcpRole::Listen, "127.0.0.1:2812".parse().unwrap())
        );
    }

    #[test]
    fn an_atmtcp_port_listens_or_connects_and_nothing_else() {
        let port = |keys: &str| {
            format!(
                "[[port]]\nname = \"l\"\nmode = \"atmtcp\"\n{keys}\n\
                 [[port]]\nname = \"u\"\nmode = \"frame\"\nbind = \"127.0.0.1:0\"\npeer = \"127.0.0.1:9\"\n"
            )
        };
        let c = Config::from_toml(&port("connect = \"10.0.0.1\"")).expect("valid");
        assert_eq!(
            c.ports[0].atmtcp_endpoint().unwrap(),
            (crate::AtmtcpRole::Connect, "10.0.0.1:2812".parse().unwrap()),
            "the default port is atmtcp's 2812"
        );
        for (keys, why) in [
            ("", "either listen or connect"),
            (
                "listen = \"127.0.0.1:1\"\nconnect = \"127.0.0.1:2\"",
                "either listen or connect",
            ),
            (
                "listen = \"127.0.0.1:1\"\nbind = \"127.0.0.1:3\"",
                "no bind/peer",
            ),
            ("listen = \"localhost:1\"", "not IP:PORT"),
            ("listen = \"127.0.0.1:1\"\nloss = 0.1", "for UDP ports"),
            ("listen = \"127.0.0.1:1\"\ndelay_us = 5", "for UDP ports"),
            (
                "connect = \"127.0.0.1:1\"\nallow = [\"10.0.0.1\"]",
                "atmtcp port that listens",
            ),
            (
                "connect = \"127.0.0.1:1\"\nidle_ms = 5",
                "atmtcp port that listens",
            ),
            ("listen = \"127.0.0.1:1\"\nallow = []", "lists no source"),
            (
                "listen = \"127.0.0.1:1\"\nallow = [\"10.0.0.0/40\"]",
                "0..=32",
            ),
            ("listen = \"127.0.0.1:1\"\nidle_ms = 0", "at least 1"),
        ] {
            let e = Config::from_toml(&port(keys)).expect_err(keys);
            assert!(e.to_string().contains(why), "{keys}: {e}");
        }
        let udp_with_listen = port("listen = \"127.0.0.1:1\"").replace(
            "mode = \"frame\"",
            "mode = \"frame\"\nlisten = \"127.0.0.1:4\"",
        );
        let (allow, idle) = Config::from_toml(&port("listen = \"0.0.0.0:1\""))
            .unwrap()
            .ports[0]
            .atmtcp_admission()
            .unwrap();
        assert_eq!(allow, Allow::loopback(), "loopback only unless told");
        assert_eq!(idle, DEFAULT_ATMTCP_IDLE);
        let udp_allow = port("listen = \"127.0.0.1:1\"").replace(
            "mode = \"frame\"",
            "mode = \"frame\"\nallow = [\"10.0.0.1\"]",
        );
        let e = Config::from_toml(&udp_allow).expect_err("allow on a UDP port");
        assert!(e.to_string().contains("atmtcp port that listens"), "{e}");
        let e = Config::from_toml(&udp_with_listen).expect_err("listen on a UDP port");
        assert!(e.to_string().contains("for mode = \"atmtcp\""), "{e}");
        let no_peer = port("listen = \"127.0.0.1:1\"").replace("peer = \"127.0.0.1:9\"\n", "");
        let e = Config::from_toml(&no_peer).expect_err("a frame port without a peer");
        assert!(e.to_string().contains("needs bind and peer"), "{e}");
        // VC 0.0 of an atmtcp link is its control channel, never a PVC's end.
        let pvc = format!(
            "{}[[pvc]]\nfrom = \"l:0.0\"\nto = \"u:0.40\"\n",
            port("listen = \"127.0.0.1:1\"")
        );
        let e = Config::from_toml(&pvc).expect_err("VC 0.0");
        assert!(e.to_string().contains("control text"), "{e}");
        Config::from_toml(&pvc.replace("l:0.0", "l:0.32")).expect("any other VC");
        // A VP may join an atmtcp port and a frame port: both carry frames.
        let vp = format!(
            "{}[[pvc]]\nfrom = \"l:1\"\nto = \"u:2\"\n",
            port("listen = \"127.0.0.1:1\"")
        );
        Config::from_toml(&vp).expect("a VP between frame-unit ports");
    }

    #[test]
    fn a_routing_section_configures_the_router() {
        let c = Config::from_toml(&format!("[routing]\nnode = 7\nhello_ms = 50\n{TWO}"))
            .expect("valid");
        let r = c.routing.as_ref().unwrap().config();
        assert_eq!(r.node.0, 7);
        assert_eq!(r.hello, Duration::from_millis(50));
        assert_eq!(r.dead, Duration::from_millis(400), "the default");
        for bad in ["node = 0", "node = 1\nhello_ms = 100\ndead_ms = 100"] {
            let e = Config::from_toml(&format!("[routing]\n{bad}\n{TWO}")).expect_err(bad);
            assert!(e.to_string().contains("[routing]"), "{e}");
        }
    }

    #[test]
    fn ilmi_prefix_is_thirteen_octets_on_a_port_to_a_user_only() {
        let linux = |extra: &str| {
            format!(
                "[[port]]\nname = \"linux\"\nmode = \"atmtcp\"\nlisten = \"127.0.0.1:0\"\n{extra}\n"
            )
        };
        let ok = linux("signalling = \"uni\"\nilmi_prefix = \"47.0005.80ffe1000000f21a26d8\"");
        let c = Config::from_toml(&ok).expect("valid");
        assert_eq!(
            c.ports[0].ilmi_prefix().expect("valid").map(|p| p[0]),
            Some(0x47)
        );
        let host = TWO.replacen(
            "mode = \"cell\"",
            "mode = \"frame\"\nsignalling = \"host\"\nilmi_prefix = \"47.0005.80ffe1000000f21a26d8\"",
            1,
        );
        let c = Config::from_toml(&host).expect("valid on a host port");
        assert!(c.ports[0].ilmi_prefix().expect("valid").is_some());
        for bad in [
            linux("signalling = \"uni\"\nilmi_prefix = \"47.0005\""),
            linux("signalling = \"uni\"\nilmi_prefix = \"zz.0005.80ffe1000000f21a26d8\""),
            linux("ilmi_prefix = \"47.0005.80ffe1000000f21a26d8\""),
            TWO.replacen(
                "mode = \"cell\"",
                "mode = \"cell\"\nsignalling = \"uni\"\nilmi_prefix = \"47.0005.80ffe1000000f21a26d8\"",
                1,
            ),
            TWO.replacen(
                "mode = \"cell\"",
                "mode = \"frame\"\nsignalling = \"switch\"\nilmi_prefix = \"47.0005.80ffe1000000f21a26d8\"",
                1,
            ),
        ] {
            let e = Config::from_toml(&bad).expect_err(&bad);
            assert!(e.to_string().contains("ilmi_prefix"), "{e}");
        }
    }

    #[test]
    fn sscop_no_response_ms_is_checked() {
        let port =
            |extra: &str| TWO.replacen("mode = \"cell\"", &format!("mode = \"cell\"\n{extra}"), 1);
        for bad in [
            "sscop_no_response_ms = 20000",
            "signalling = \"host\"\nsscop_no_response_ms = 199",
        ] {
            let e = Config::from_toml(&port(bad)).expect_err(bad);
            assert!(e.to_string().contains("sscop_no_response_ms"), "{e}");
        }
        let c = Config::from_toml(&port("signalling = \"host\"\nsscop_no_response_ms = 20000"))
            .expect("valid");
        assert_eq!(c.ports[0].sscop_no_response_ms, Some(20_000));
    }

    #[test]
    fn preserve_ms_needs_a_signalling_port() {
        let e = Config::from_toml(&TWO.replacen(
            "mode = \"cell\"",
            "mode = \"cell\"\npreserve_ms = 1000",
            1,
        ))
        .expect_err("port a runs no signalling");
        assert!(e.to_string().contains("preserve_ms"), "{e}");
        let ok = TWO.replacen(
            "mode = \"cell\"",
            "mode = \"cell\"\nsignalling = \"host\"\npreserve_ms = 0",
            1,
        );
        let c = Config::from_toml(&format!("svc_preserve_ms = 60000\n{ok}")).expect("valid");
        assert_eq!(c.svc_preserve_ms, Some(60_000));
        assert_eq!(c.ports[0].preserve_ms, Some(0));
    }

    #[test]
    fn a_route_needs_a_signalling_port() {
        let r = format!("{TWO}\n[[route]]\nprefix = \"+44\"\nport = \"a\"\n");
        let e = Config::from_toml(&r).expect_err("port a runs no signalling");
        assert!(e.to_string().contains("runs no signalling"), "{e}");
        let ok = r.replacen(
            "mode = \"cell\"",
            "mode = \"cell\"\nsignalling = \"switch\"",
            1,
        );
        Config::from_toml(&ok).expect("valid");
    }

    #[test]
    fn converts_mixed_modes_and_refuses_unknown_ports() {
        let mixed = TWO.replacen("mode = \"cell\"", "mode = \"frame\"", 1);
        let cfg = Config::from_toml(&mixed).expect("a VC PVC may join a frame and a cell port");
        assert_eq!(cfg.ports[0].port_config().unwrap().unit, PortUnit::Frames);
        assert_eq!(cfg.ports[1].port_config().unwrap().unit, PortUnit::Cells);
        let unknown = TWO.replace("to = \"b:2.40\"", "to = \"c:2.40\"");
        assert!(Config::from_toml(&unknown).is_err());
    }
}
