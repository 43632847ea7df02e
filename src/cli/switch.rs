//! `natm switch` (one switch process: ports over UDP, permanent cross-connects) and
//! `natm stat --switch` (its counters, read from the JSON file it rewrites).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use serde::Deserialize;

use super::{outln, CliResult};
use natm_switchd::{Config, SwitchDaemon};

/// `natm switch`: one ATM switch; each port a UDP link to a host or another switch.
#[derive(Debug, Args)]
#[command(after_long_help = SWITCH_HELP)]
pub struct SwitchArgs {
    /// TOML configuration. Every key: docs/switch.example.toml, installed as
    /// /usr/share/doc/natm/examples/switch.example.toml.
    #[arg(long, short = 'c')]
    config: PathBuf,
    /// Rewrite the counters to this JSON file (for `natm stat --switch FILE`);
    /// overrides the file's `stat_json`.
    #[arg(long)]
    stat_json: Option<PathBuf>,
    /// Serve the counters in the Prometheus text format at http://IP:PORT/metrics
    /// (the host always given, e.g. 127.0.0.1:9465; beyond loopback anyone who
    /// reaches it reads them); overrides the file's `metrics` [default: not served].
    #[arg(long, value_name = "IP:PORT")]
    metrics: Option<String>,
    /// Seed of the ports' random loss; overrides the file's `seed`.
    #[arg(long)]
    seed: Option<u64>,
    /// More log detail (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    /// Print the switch's Noise public key for its signalling links (base64, for
    /// a host sigd's `[[peer]] public_key` or another switch's `[[port]]
    /// public_key`), made first if there is none, and exit.
    #[arg(long)]
    show_key: bool,
    #[command(flatten)]
    confine: super::sigd::ConfineArgs,
}

const SWITCH_HELP: &str = "\
How it fits together:
  Each port is a UDP endpoint joined to one peer (a host or another switch), in
  cell mode (datagrams carry trains of 53-octet cells: 0xD1 then N cells) or frame
  mode (one AAL5 frame per datagram behind natm's 4-octet VC header). Permanent
  cross-connects ([[pvc]]) translate VPI/VCI and police each VC against its
  contract; each output port queues per VC, schedules fifo/rr/wrr at its line rate,
  and applies EPD/PPD. Ports with `signalling = host` or `switch` run the
  network side of UNI signalling (Q.2931 over SSCOP): calls are routed by address
  prefix ([[route]]), admitted against the outgoing line, given a VCI on each link
  and cross-connected while they last; host sigds attach with
  `natm sigd --switch IP:PORT`.

Examples:
  natm switch --config docs/switch.example.toml
  natm stat --switch /tmp/natm-switch.json

Stop with SIGTERM or Ctrl-C; the stat file is written a last time.";

/// Runs `natm switch` until it is stopped.
pub fn run(a: SwitchArgs) -> CliResult {
    super::sigd::init_logs(a.verbose);
    let mut cfg = Config::from_file(&a.config)?;
    if a.show_key {
        outln!(
            "{}",
            natm_switchd::show_key(&cfg).context("switch: Noise key")?
        );
        return Ok(());
    }
    if a.stat_json.is_some() {
        cfg.stat_json = a.stat_json;
    }
    if let Some(s) = a.seed {
        cfg.seed = s;
    }
    if a.metrics.is_some() {
        cfg.metrics = a.metrics;
        cfg.check()?;
    }
    let mut d = SwitchDaemon::bind(cfg).context("switch")?;
    d.handle_signals().context("switch: signals")?;
    a.confine.apply("switch", d.needs())?;
    for (name, addr) in d.endpoints() {
        outln!("port {name} {addr}");
    }
    d.run().context("switch")
}

/// The part of the stat file `natm stat --switch` prints.
#[derive(Debug, Deserialize)]
struct Snapshot {
    uptime_s: f64,
    ports: Vec<PortRow>,
    vcs: Vec<VcRow>,
    #[serde(default)]
    signalling: Vec<SigLinkRow>,
    #[serde(default)]
    calls: Vec<CallRow>,
    #[serde(default)]
    calls_refused: u64,
    #[serde(default)]
    routing: Option<RoutingView>,
}

/// The routing's part of the stat file (issue 33).
#[derive(Debug, Deserialize)]
struct RoutingView {
    node: u32,
    neighbours: Vec<(u16, u32)>,
    database: Vec<DbView>,
    #[serde(default)]
    routes: Vec<(u32, Vec<u32>)>,
    crankbacks: u64,
    counters: serde_json::Value,
}

#[derive(Debug, Deserialize)]
struct DbView {
    origin: u32,
    seq: u32,
    expires_in_ms: u64,
    links: Vec<String>,
    prefixes: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct SigLinkRow {
    port: u16,
    role: String,
    up: bool,
    calls: usize,
    reserved_cells: u64,
    #[serde(default)]
    refused: u64,
}

#[derive(Debug, Deserialize)]
struct CallRow {
    id: u64,
    called: String,
    qos: String,
    a: (u16, Option<u16>, Option<u16>),
    b: (u16, Option<u16>, Option<u16>),
    active: bool,
    /// A point-to-multipoint call's branches (empty: point-to-point).
    #[serde(default)]
    branches: Vec<BranchRow>,
}

#[derive(Debug, Deserialize)]
struct BranchRow {
    port: u16,
    vci_in: u16,
    vci_out: Option<u16>,
    connected: bool,
    parties: Vec<u16>,
}

#[derive(Debug, Deserialize)]
struct PortRow {
    name: String,
    /// How its signalling is authenticated (issue 31).
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    peer_key: Option<String>,
    peer: String,
    mode: String,
    link: LinkRow,
    stats: PortStats,
}

#[derive(Debug, Deserialize)]
struct LinkRow {
    bad_datagrams: u64,
    lost: u64,
}

#[derive(Debug, Deserialize)]
struct PortStats {
    line_rate: u64,
    scheduler: String,
    counters: Counters,
    queue_cells: u32,
    max_queue_cells: u32,
    /// ABR: ERICA and EFCI (absent in a stat file from before them).
    #[serde(default)]
    abr: AbrStats,
}

#[derive(Debug, Default, Deserialize)]
struct AbrStats {
    interval: Option<AbrInterval>,
    rm_forward: u64,
    rm_backward: u64,
    rm_marked: u64,
    rm_invalid: u64,
    efci_marked: u64,
}

#[derive(Debug, Deserialize)]
struct AbrInterval {
    input_rate: f64,
    target: f64,
    load: f64,
    fair_share: f64,
    active_vcs: u32,
}

#[derive(Debug, Deserialize)]
struct Counters {
    cells_in: u64,
    cells_out: u64,
    frames_in: u64,
    frames_out: u64,
    tagged: u64,
    dropped: HashMap<String, u64>,
}

#[derive(Debug, Deserialize)]
struct VcRow {
    conn: u64,
    xc: HashMap<String, Ends>,
    contract: Contract,
    counters: Counters,
    queue_cells: u32,
}

#[derive(Debug, Deserialize)]
struct Ends {
    from: End,
    to: End,
}

#[derive(Debug, Deserialize)]
struct End {
    port: u16,
    vpi: u16,
    vci: Option<u16>,
}

#[derive(Debug, Deserialize)]
struct Contract {
    pcr: Option<u64>,
    scr: Option<(u64, u32)>,
}

/// Drops by cause, the non-zero ones, e.g. `policing 120, unknown_vc 3`.
fn drops(d: &HashMap<String, u64>) -> String {
    let mut v: Vec<_> = d.iter().filter(|(_, n)| **n > 0).collect();
    v.sort();
    if v.is_empty() {
        return "-".into();
    }
    v.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn end(e: &End, ports: &[PortRow]) -> String {
    let name = ports
        .get(usize::from(e.port))
        .map_or_else(|| e.port.to_string(), |p| p.name.clone());
    match e.vci {
        Some(vci) => format!("{name}:{}.{vci}", e.vpi),
        None => format!("{name}:{}", e.vpi),
    }
}

/// `natm stat --switch FILE`: the ports and VCs of a switch process.
pub(crate) fn stat(path: &Path, json: bool) -> CliResult {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read {}; is `natm switch` running with --stat-json {0}?",
            path.display()
        )
    })?;
    if json {
        outln!("{}", text.trim_end());
        return Ok(());
    }
    let s: Snapshot = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a switch stat file", path.display()))?;
    outln!("switch up {:.1} s", s.uptime_s);
    let mut ports = crate::cli::table::new(
        [
            "port",
            "link",
            "peer",
            "sched",
            "cells in",
            "cells out",
            "frames in",
            "frames out",
            "queue",
            "bad",
        ],
        4,
    );
    for p in &s.ports {
        let c = &p.stats.counters;
        let sched = match p.stats.scheduler.as_str() {
            "Fifo" => "fifo",
            "RoundRobin" => "rr",
            "WeightedRoundRobin" => "wrr",
            other => other,
        };
        ports.add_row(vec![
            p.name.clone(),
            format!("{} {:.0}M", p.mode, p.stats.line_rate as f64 / 1e6),
            p.peer.clone(),
            sched.to_string(),
            c.cells_in.to_string(),
            c.cells_out.to_string(),
            c.frames_in.to_string(),
            c.frames_out.to_string(),
            format!("{}/{}", p.stats.queue_cells, p.stats.max_queue_cells),
            format!("{}+{}", p.link.bad_datagrams, p.link.lost),
        ]);
    }
    outln!("{}", crate::cli::table::render(&ports).trim_end());
    outln!("");
    outln!("(queue: now/most cells; bad: refused datagrams + lost by the configured loss)");
    outln!("");
    abr(&s);
    let mut vcs = crate::cli::table::new(
        [
            "vc",
            "from",
            "to",
            "pcr",
            "scr",
            "cells in",
            "cells out",
            "frames out",
            "tagged",
            "queue",
        ],
        3,
    );
    for v in &s.vcs {
        let (from, to) = v.xc.values().next().map_or(("?".into(), "?".into()), |e| {
            (end(&e.from, &s.ports), end(&e.to, &s.ports))
        });
        let c = &v.counters;
        vcs.add_row(vec![
            format!("#{}", v.conn),
            from,
            to,
            v.contract.pcr.map_or("-".into(), |r| r.to_string()),
            v.contract
                .scr
                .map_or("-".into(), |(r, m)| format!("{r}/{m}")),
            c.cells_in.to_string(),
            c.cells_out.to_string(),
            c.frames_out.to_string(),
            c.tagged.to_string(),
            v.queue_cells.to_string(),
        ]);
    }
    outln!("{}", crate::cli::table::render(&vcs).trim_end());
    outln!("");
    outln!("cells dropped, by cause:");
    for p in &s.ports {
        outln!("  port {}: {}", p.name, drops(&p.stats.counters.dropped));
    }
    for v in &s.vcs {
        outln!("  vc #{}: {}", v.conn, drops(&v.counters.dropped));
    }
    if !s.signalling.is_empty() {
        signalling(&s);
    }
    if let Some(r) = &s.routing {
        routing(&s, r);
    }
    Ok(())
}

/// ABR per port (docs/switch.md "ABR"): ERICA's last averaging interval and what the
/// port did to RM cells and data; only when some port has seen ABR or marked EFCI.
fn abr(s: &Snapshot) {
    let busy = |a: &AbrStats| {
        a.interval.is_some() || a.rm_forward + a.rm_backward + a.rm_invalid + a.efci_marked > 0
    };
    if !s.ports.iter().any(|p| busy(&p.stats.abr)) {
        return;
    }
    let mut t = crate::cli::table::new(
        [
            "port",
            "abr in c/s",
            "target",
            "z",
            "fair share",
            "active",
            "rm fwd/bwd",
            "er marked",
            "rm bad",
            "efci",
        ],
        1,
    );
    for p in s.ports.iter().filter(|p| busy(&p.stats.abr)) {
        let a = &p.stats.abr;
        let (input, target, z, fair, active) = match &a.interval {
            Some(i) => (
                format!("{:.0}", i.input_rate),
                format!("{:.0}", i.target),
                format!("{:.2}", i.load),
                format!("{:.0}", i.fair_share),
                i.active_vcs.to_string(),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
        };
        t.add_row(vec![
            p.name.clone(),
            input,
            target,
            z,
            fair,
            active,
            format!("{}/{}", a.rm_forward, a.rm_backward),
            a.rm_marked.to_string(),
            a.rm_invalid.to_string(),
            a.efci_marked.to_string(),
        ]);
    }
    outln!("{}", crate::cli::table::render(&t).trim_end());
    outln!("");
    outln!(
        "(ABR, ERICA per output port: the last averaging interval's input, target, load z and fair share, cells/s; \
         er marked: forward RM cells whose ER was lowered; efci: data cells marked)"
    );
    outln!("");
}

/// Routing between switches: neighbours and the topology database, from which calls
/// entering here are routed.
fn routing(s: &Snapshot, r: &RoutingView) {
    let name = |p: u16| {
        s.ports
            .get(usize::from(p))
            .map_or_else(|| p.to_string(), |r| r.name.clone())
    };
    outln!("");
    let neighbours: Vec<String> = r
        .neighbours
        .iter()
        .map(|(p, n)| format!("{} → node {n}", name(*p)))
        .collect();
    outln!(
        "routing: node {}, neighbours: {}; {} crankbacks",
        r.node,
        if neighbours.is_empty() {
            "none".to_string()
        } else {
            neighbours.join(", ")
        },
        r.crankbacks
    );
    let mut db = crate::cli::table::new(
        [
            "node",
            "seq",
            "expires",
            "links (port→node:port free/line)",
            "reaches",
        ],
        5,
    );
    for d in &r.database {
        let links = if d.links.is_empty() {
            "-".to_string()
        } else {
            d.links.join("; ")
        };
        db.add_row(vec![
            d.origin.to_string(),
            d.seq.to_string(),
            format!("{:.1} s", d.expires_in_ms as f64 / 1e3),
            links,
            d.prefixes.join(" "),
        ]);
    }
    outln!("{}", crate::cli::table::render(&db).trim_end());
    let routes: Vec<String> = r
        .routes
        .iter()
        .map(|(n, path)| {
            if path.is_empty() {
                format!("node {n} unreachable")
            } else {
                let p: Vec<String> = path.iter().map(u32::to_string).collect();
                format!("node {n} via {}", p.join("→"))
            }
        })
        .collect();
    outln!("routes now (best effort): {}", routes.join("; "));
    outln!("(routing counters: {})", r.counters);
}

/// The control plane's part: signalling links and the calls through the switch.
fn signalling(s: &Snapshot) {
    let name = |p: u16| {
        s.ports
            .get(usize::from(p))
            .map_or_else(|| p.to_string(), |r| r.name.clone())
    };
    outln!("");
    let mut links = crate::cli::table::new(
        [
            "port",
            "peer is",
            "link",
            "calls",
            "reserved cells/s",
            "refused",
            "auth",
            "peer key",
        ],
        1,
    );
    for l in &s.signalling {
        let port = s.ports.get(usize::from(l.port));
        links.add_row(vec![
            name(l.port),
            l.role.clone(),
            if l.up { "up" } else { "down" }.to_string(),
            l.calls.to_string(),
            l.reserved_cells.to_string(),
            l.refused.to_string(),
            port.and_then(|p| p.auth.clone())
                .unwrap_or_else(|| "-".into()),
            // The first 8 octets' base64, as sigd's links table abbreviates keys.
            port.and_then(|p| p.peer_key.as_deref())
                .map_or_else(|| "-".into(), |k| k.chars().take(11).collect()),
        ]);
    }
    outln!("{}", crate::cli::table::render(&links).trim_end());
    outln!("");
    let label = |v: Option<u16>| v.map_or("-".into(), |v| v.to_string());
    let mut calls = crate::cli::table::new(
        [
            "call",
            "called",
            "qos",
            "caller side",
            "callee side",
            "state",
        ],
        1,
    );
    for c in &s.calls {
        let state = if c.active { "active" } else { "setting up" }.to_string();
        if c.branches.is_empty() {
            calls.add_row(vec![
                c.id.to_string(),
                c.called.clone(),
                c.qos.clone(),
                format!("{} in {} out {}", name(c.a.0), label(c.a.1), label(c.a.2)),
                format!("{} in {} out {}", name(c.b.0), label(c.b.1), label(c.b.2)),
                state,
            ]);
            continue;
        }
        // Point-to-multipoint: the root's side, then a row per branch with the
        // root's parties it carries.
        calls.add_row(vec![
            c.id.to_string(),
            c.called.clone(),
            c.qos.clone(),
            format!("{} in {} (root)", name(c.a.0), label(c.a.1)),
            format!("{} branches", c.branches.len()),
            state,
        ]);
        for b in &c.branches {
            let parties: Vec<String> = b.parties.iter().map(u16::to_string).collect();
            calls.add_row(vec![
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                format!(
                    "{} in {} out {} parties {}",
                    name(b.port),
                    b.vci_in,
                    label(b.vci_out),
                    parties.join(",")
                ),
                if b.connected { "branch" } else { "setting up" }.to_string(),
            ]);
        }
    }
    outln!("{}", crate::cli::table::render(&calls).trim_end());
    outln!("");
    outln!(
        "(in/out: the VCI the switch receives on / sends with on that port; a multicast's \
         parties are the root's endpoint references; {} calls refused)",
        s.calls_refused
    );
}
