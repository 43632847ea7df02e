//! `natm sigd` (the signalling daemon) and the multi-process tests' helper.

use anyhow::Context as _;
use natm::ulib::Wait;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{outln, CliResult};
use natm_sigd::config::{ConfigFile, RouteSection};
use natm_sigd::Daemon;

/// `natm sigd`: one per host. Applications reach it over a Unix socket; peers' sigds
/// over UDP.
#[derive(Debug, Args)]
#[command(after_long_help = SIGD_HELP)]
pub struct SigdArgs {
    /// TOML configuration file; flags override it. Every key: docs/sigd.example.toml,
    /// installed as /usr/share/doc/natm/examples/sigd.example.toml.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// This host's ATM address (NSAP like 47.0005.80ffe1000000f21a26d8.0020ea000ee0.00,
    /// E.164 like +4420123456, or a name from --hosts). Repeat for several.
    #[arg(long = "address", short = 'a')]
    addresses: Vec<String>,
    /// Unix-domain socket for applications [default: /run/natm/sigd.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// UDP endpoint for signalling with peer sigds [default: 127.0.0.1:2905].
    #[arg(long)]
    signalling: Option<String>,
    /// IP address applications' data sockets are reached at [default: the
    /// signalling endpoint's].
    #[arg(long)]
    data_ip: Option<String>,
    /// Linux-ATM hosts file for names (/etc/hosts.atm format).
    #[arg(long)]
    hosts: Option<PathBuf>,
    /// Route: ATM address prefix = peer sigd endpoint, e.g. 47.0005=192.0.2.7:2905 or
    /// '*=192.0.2.7:2905'. Repeat for several; they add to the file's.
    #[arg(long = "route", value_name = "PREFIX=PEER")]
    routes: Vec<String>,
    /// Attach to an ATM switch at this UDP endpoint (its port for this host): every
    /// address no --route names is called through it (repeatable; a route `*`).
    #[arg(long = "switch", value_name = "IP:PORT")]
    switches: Vec<String>,
    /// Link rate each way for admission control, e.g. 100Mbps [default: 1Gbps].
    #[arg(long)]
    capacity: Option<String>,
    /// Cost of one TPDU in ns instead of measuring it at start.
    #[arg(long)]
    tpdu_cost_ns: Option<u64>,
    /// Serve the counters in the Prometheus text format at http://IP:PORT/metrics
    /// (the host always given, e.g. 127.0.0.1:9464; beyond loopback anyone who
    /// reaches it reads them); overrides the file's `metrics` [default: not served].
    #[arg(long, value_name = "IP:PORT")]
    metrics: Option<String>,
    /// More log detail (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    /// Print this host's Noise public key for signalling links (base64, for a
    /// peer's `[[peer]] public_key`), creating the key file if there is none, and exit.
    #[arg(long)]
    show_key: bool,
    #[command(flatten)]
    confine: ConfineArgs,
}

/// What a daemon gives up once it has bound its sockets and read its keys (issue 31,
/// `natm_sigd::confine`); `natm sigd` and `natm switch` both take these.
#[derive(Debug, Args)]
pub(super) struct ConfineArgs {
    /// Run as USER once the sockets are bound and the keys read; `root` keeps root
    /// [default, when started as root: user natm if it may write the daemon's
    /// directories, else uid 0 without any capability].
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// Do not enforce the Landlock sandbox (file-system access beyond the daemon's
    /// own directories, signals and abstract sockets outside it).
    #[arg(long)]
    no_sandbox: bool,
}

impl ConfineArgs {
    /// Drops what `daemon` no longer needs; `needs` are the directories it writes.
    pub(super) fn apply(&self, daemon: &str, needs: &natm_sigd::confine::Needs) -> CliResult {
        use natm_sigd::confine::{confine, UserChoice};
        let user = self
            .user
            .clone()
            .map_or(UserChoice::Default, UserChoice::Named);
        confine(&user, !self.no_sandbox, needs)
            .with_context(|| format!("{daemon}: least privilege"))?
            .log(daemon);
        Ok(())
    }
}

const SIGD_HELP: &str = "\
How it fits together:
  Each host runs one sigd. Applications (ulib) connect to its Unix socket; sigd
  answers every request at once, sets calls up with the called host's sigd (UNI
  signalling, Q.2931 over SSCOP, carried in UDP), reserves bandwidth and CPU for
  guaranteed VCs, and hands both applications the other's data endpoint, the VCIs
  and a cookie. Data never passes through sigd.

Examples:
  natm sigd --address +4420001 --signalling 192.0.2.1:2905 \\
            --route '+4420002=192.0.2.2:2905' --capacity 100Mbps
  natm sigd --config /etc/natm/sigd.toml -v
  natm stat                      # calls, VCIs, reservations, free capacity

Stop with SIGTERM or Ctrl-C: every call is released and the socket removed.
Logs go to stderr; RUST_LOG=natm=debug for more.";

/// The log filter: RUST_LOG's `level` and `target=level` directives
/// (`natm=debug,warn`) when it is set and parses, else the level `-v` asks for. (`Targets`, not
/// `EnvFilter`: no span or field filters, and no regex engine in the operator
/// binary's build.)
fn log_filter(rust_log: Option<&str>, verbose: u8) -> tracing_subscriber::filter::Targets {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    let default = match verbose {
        0 => LevelFilter::INFO,
        1 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    rust_log
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(default))
}

pub(super) fn init_logs(verbose: u8) {
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref(), verbose);
    // Colours only for a person at a terminal: a log file or journald gets plain text.
    // A log line stderr cannot take (its pipe closed) is dropped: by default the
    // subscriber reports that with eprintln!, which panics on the same closed pipe
    // and would take the daemon down with it.
    use std::io::IsTerminal as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false);
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(filter)
        .try_init();
}

/// Runs `natm sigd` until it is stopped.
pub fn run(a: SigdArgs) -> CliResult {
    init_logs(a.verbose);
    let mut file = match &a.config {
        Some(p) => ConfigFile::load(p)?,
        None => ConfigFile::default(),
    };
    if !a.addresses.is_empty() {
        file.addresses = a.addresses;
    }
    if a.socket.is_some() {
        file.socket = a.socket;
    }
    if a.signalling.is_some() {
        file.signalling = a.signalling;
    }
    if a.data_ip.is_some() {
        file.data_ip = a.data_ip;
    }
    if a.hosts.is_some() {
        file.hosts = a.hosts;
    }
    if a.capacity.is_some() {
        file.link.capacity = a.capacity;
    }
    if a.tpdu_cost_ns.is_some() {
        file.link.tpdu_cost_ns = a.tpdu_cost_ns;
    }
    if a.metrics.is_some() {
        file.metrics = a.metrics;
    }
    if a.show_key {
        let socket = file
            .socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(natm_sigd::config::DEFAULT_SOCKET));
        let path = file
            .peers
            .key_file
            .clone()
            .unwrap_or_else(|| natm_sigd::config::state_file(&socket, "noise-key"));
        let key = Daemon::show_key(&path).context("sigd --show-key")?;
        outln!("{key}");
        return Ok(());
    }
    for r in a.routes {
        let Some((prefix, peer)) = r.split_once('=') else {
            return Err(anyhow::anyhow!(
                "--route {r}: write PREFIX=PEER, e.g. --route '47.0005=192.0.2.7:2905'"
            ));
        };
        file.directory.push(RouteSection {
            prefix: prefix.into(),
            peer: peer.into(),
            switch: false,
        });
    }
    for peer in a.switches {
        file.directory.push(RouteSection {
            prefix: "*".into(),
            peer,
            switch: true,
        });
    }
    let cfg = file.check()?;
    let mut d = Daemon::bind(cfg).context("sigd")?;
    d.handle_signals().context("sigd: signals")?;
    if let Err(e) = a.confine.apply("sigd", &d.needs()) {
        d.abandon();
        return Err(e);
    }
    d.run().context("sigd")
}

/// `natm test-helper`: a child process for the multi-process tests (hidden).
#[derive(Debug, Args)]
pub(crate) struct HelperArgs {
    /// sigd socket.
    #[arg(long)]
    socket: PathBuf,
    /// Called address[:SAP].
    #[arg(long, required_unless_present = "listen_auto")]
    connect: Option<String>,
    /// Instead of calling: bind a pre-authorised listener on this SAP, print
    /// "listening", and never take a call (to be killed with calls queued).
    #[arg(long)]
    listen_auto: Option<String>,
    /// QoS text.
    #[arg(long, default_value = "reliable")]
    qos: String,
    /// After "connected": send this many more messages ("message 0", ...), close
    /// the connection and linger until its call is released, then exit.
    #[arg(long)]
    send_and_exit: Option<u32>,
}

/// Connect through sigd, print "connected <local data endpoint>", send one message,
/// then wait (to be killed), or send more and exit (`--send-and-exit`).
pub(crate) fn helper(a: HelperArgs) -> CliResult {
    let cfg = natm::ulib::HostConfig {
        sigd_socket: Some(a.socket),
        ..natm::ulib::HostConfig::default()
    };
    let host = natm::ulib::Host::open(cfg)?;
    if let Some(sap) = &a.listen_auto {
        let _l = host.bind_with(
            sap.as_str(),
            &a.qos,
            natm::ulib::Accept::Auto { backlog: 8 },
        )?;
        outln!("listening");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let to = a.connect.unwrap_or_default();
    let c = host.connect(to.as_str(), &a.qos)?;
    c.send(b"hello from the helper", Wait::Block)?;
    let local: Option<SocketAddr> = c.local_addr().ok();
    outln!("connected {}", local.map_or("?".into(), |l| l.to_string()));
    if let Some(n) = a.send_and_exit {
        for i in 0..n {
            c.send(format!("message {i}").as_bytes(), Wait::Block)?;
        }
        let lingered = c.linger(Duration::from_secs(10));
        outln!("exiting, lingered: {lingered}");
        return Ok(());
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod log_filter_tests {
    use super::log_filter;
    use tracing::Level;

    #[test]
    fn rust_log_directives_win_and_a_bad_or_empty_one_leaves_the_default() {
        let on = |rust_log: Option<&str>, verbose, target, level| {
            log_filter(rust_log, verbose).would_enable(target, &level)
        };
        // Default: info, -v debug.
        assert!(on(None, 0, "natm_sigd::core", Level::INFO));
        assert!(!on(None, 0, "natm_sigd::core", Level::DEBUG));
        assert!(on(None, 1, "natm_sigd::core", Level::DEBUG));
        // `natm=debug`: every natm crate's debug lines, nothing of other crates.
        assert!(on(Some("natm=debug"), 0, "natm_sigd::core", Level::DEBUG));
        assert!(!on(Some("natm=debug"), 0, "snow", Level::INFO));
        assert!(on(Some("natm=debug,warn"), 0, "snow", Level::WARN));
        assert!(!on(Some("warn"), 0, "natm_sigd::core", Level::INFO));
        // Not a filter, or empty: the default.
        for bad in ["natm=loud", "", "  "] {
            assert!(on(Some(bad), 0, "natm_sigd::core", Level::INFO), "{bad:?}");
            assert!(
                !on(Some(bad), 0, "natm_sigd::core", Level::DEBUG),
                "{bad:?}"
            );
        }
    }
}
