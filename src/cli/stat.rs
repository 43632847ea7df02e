//! `natm stat`: what the host's sigd holds — calls, listeners, reservations, free
//! capacity — and each call's traffic as its application last reported it; once, or
//! redrawn in place (`--watch`) with rates from successive samples.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use natm::wire::ipc::Message;
use serde_json::Value;

use super::{ipc, outln, table, units, CliResult};

/// `natm stat`: ask the host's sigd what it holds.
#[derive(Debug, Args)]
#[command(after_long_help = STAT_HELP)]
pub struct StatArgs {
    /// sigd's socket [default: $NATM_SIGD, else /run/natm/sigd.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Print sigd's JSON document instead of tables (one per sample with --watch).
    #[arg(long)]
    json: bool,
    /// Redraw the view in place every --interval until Ctrl-C (or --count samples),
    /// with each call's current rates.
    #[arg(long, conflicts_with = "switch")]
    watch: bool,
    /// Time between samples with --watch.
    #[arg(long, default_value = "1s", value_parser = parse_duration, requires = "watch")]
    interval: Duration,
    /// Stop after this many samples (with --watch).
    #[arg(long, requires = "watch")]
    count: Option<u64>,
    /// Show a switch instead: the stat file `natm switch --stat-json FILE` rewrites.
    #[arg(long, value_name = "FILE", conflicts_with = "socket")]
    switch: Option<PathBuf>,
}

const STAT_HELP: &str = "\
Traffic: sigd carries no data, so each call's counters are what its application's
engine last reported (about once a second while the call moves data; `age` says how
old). tx is the VC this side sends on, rx the one it receives on. retx: fast (SMART's
ACKs revealed a hole) / timeout / head (the two-RTT check). drops: wrong cookie /
beyond the window / no receive buffer / duplicate / late / other / socket queue (the
kernel's count). With --watch, `now` rates are the bytes between two reports over the
time between them on the application's clock.

Examples:
  natm stat
  natm stat --json | jq '.calls[].traffic'
  natm stat --watch --interval 2s";

fn parse_duration(s: &str) -> Result<Duration, String> {
    units::duration(s).map_err(|e| e.to_string())
}

/// Most pages one `natm stat` reads: sigd's calls and listeners are bounded by its
/// limits, so this is only a guard against a sigd whose `next` never ends.
const MAX_PAGES: u64 = 100_000;

/// sigd's document: the first page, with the calls and listeners of every later
/// page (`StatPage` from each reply's `next`) added to it. sigd pages its reply so
/// that no frame exceeds the IPC limit however many calls it holds.
fn ask_stat(path: &std::path::Path) -> anyhow::Result<String> {
    let page = |offset: u64| -> anyhow::Result<Value> {
        let m = if offset == 0 {
            Message::Stat { req: 1 }
        } else {
            Message::StatPage { req: 1, offset }
        };
        match ipc::ask(path, &m)? {
            Message::StatReply { json, .. } => Ok(serde_json::from_str(&json)?),
            other => Err(anyhow::anyhow!("sigd answered {other:?}")),
        }
    };
    let mut doc = page(0)?;
    for _ in 0..MAX_PAGES {
        let Some(next) = doc.get("next").and_then(Value::as_u64) else {
            break;
        };
        let more = page(next)?;
        for key in ["calls", "listeners"] {
            if let (Some(all), Some(rows)) = (
                doc.get_mut(key).and_then(Value::as_array_mut),
                more.get(key).and_then(Value::as_array),
            ) {
                all.extend(rows.iter().cloned());
            }
        }
        match more.get("next") {
            // Each page must move on, or the loop would never end.
            Some(n) if n.as_u64().is_some_and(|n| n > next) => doc["next"] = n.clone(),
            _ => {
                if let Some(o) = doc.as_object_mut() {
                    o.remove("next");
                }
            }
        }
    }
    Ok(serde_json::to_string(&doc)?)
}

fn rate(bps: u64) -> String {
    format!("{:.1} Mbit/s", bps as f64 / 1e6)
}

/// "12.3 MB" for a byte count.
fn bytes(b: u64) -> String {
    let f = b as f64;
    if f >= 1e9 {
        format!("{:.2} GB", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.1} MB", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.1} kB", f / 1e3)
    } else {
        format!("{b} B")
    }
}

/// One call's last report as `--watch` keeps it, to rate the next one against.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    sampled_ms: u64,
    tx_bytes: u64,
    rx_bytes: u64,
    /// The rates computed at this sample, bit/s (kept while reports do not change).
    tx_bps: Option<f64>,
    rx_bps: Option<f64>,
}

impl Sample {
    /// This report, rated against the previous one of the same call: bytes over the
    /// time between the two samples on the application's clock (not the interval
    /// `--watch` asked for: reports come about once a second, on their own clock).
    fn rate(t: &Value, prev: Option<&Sample>) -> Sample {
        let u = |k: &str| t[k].as_u64().unwrap_or(0);
        let mut s = Sample {
            sampled_ms: u("sampled_ms"),
            tx_bytes: u("tx_bytes"),
            rx_bytes: u("rx_bytes"),
            tx_bps: None,
            rx_bps: None,
        };
        if let Some(p) = prev {
            if s.sampled_ms > p.sampled_ms {
                let secs = (s.sampled_ms - p.sampled_ms) as f64 / 1e3;
                s.tx_bps = Some(s.tx_bytes.saturating_sub(p.tx_bytes) as f64 * 8.0 / secs);
                s.rx_bps = Some(s.rx_bytes.saturating_sub(p.rx_bytes) as f64 * 8.0 / secs);
            } else {
                (s.tx_bps, s.rx_bps) = (p.tx_bps, p.rx_bps);
            }
        }
        s
    }
}

/// Runs `natm stat`: prints what the host's sigd or a switch holds.
pub fn stat(a: StatArgs) -> CliResult {
    if let Some(path) = &a.switch {
        return super::switch::stat(path, a.json);
    }
    let path = ipc::socket_path(a.socket.clone());
    if !a.watch {
        let json = ask_stat(&path)?;
        if a.json {
            outln!("{json}");
            return Ok(());
        }
        outln!(
            "{}",
            render(&serde_json::from_str(&json)?, &HashMap::new()).trim_end()
        );
        return Ok(());
    }
    watch(&a, &path)
}

/// Sample every `--interval`, drawing each frame over the last (clear screen, cursor
/// home) when stdout is a terminal.
fn watch(a: &StatArgs, path: &std::path::Path) -> CliResult {
    let clear = std::io::stdout().is_terminal() && !a.json;
    let mut prev: HashMap<String, Sample> = HashMap::new();
    let (start, mut last) = (Instant::now(), None::<Instant>);
    let mut frame = 0u64;
    loop {
        let at = Instant::now();
        let json = ask_stat(path)?;
        frame += 1;
        if a.json {
            outln!("{json}");
        } else {
            let v: Value = serde_json::from_str(&json)?;
            let mut next = HashMap::new();
            for c in v["calls"].as_array().into_iter().flatten() {
                let (Some(id), Some(t)) = (c["id"].as_str(), c.get("traffic")) else {
                    continue;
                };
                if !t.is_null() {
                    next.insert(id.to_owned(), Sample::rate(t, prev.get(id)));
                }
            }
            let mut out = String::new();
            if clear {
                out.push_str("\x1b[H\x1b[2J");
            }
            let since = last.map_or(String::new(), |l| {
                format!(
                    ", {:.2} s since the last",
                    at.duration_since(l).as_secs_f64()
                )
            });
            out.push_str(&format!(
                "natm stat --watch: sample {frame} at {:.1} s{since}; Ctrl-C ends\n\n",
                at.duration_since(start).as_secs_f64()
            ));
            out.push_str(&render(&v, &next));
            let mut o = std::io::stdout().lock();
            if o.write_all(out.as_bytes())
                .and_then(|()| o.flush())
                .is_err()
            {
                return Ok(());
            }
            prev = next;
        }
        last = Some(at);
        if a.count.is_some_and(|n| frame >= n) {
            return Ok(());
        }
        std::thread::sleep((at + a.interval).saturating_duration_since(Instant::now()));
    }
}

/// The whole view as text: sigd's resources, calls, each call's traffic, listeners,
/// counters. `rates`: each call's current rates (`--watch`), by call id.
fn render(v: &Value, rates: &HashMap<String, Sample>) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    let u = |k: &str| v[k].as_u64().unwrap_or(0);
    line(format!(
        "sigd {}  addresses {}",
        v["signalling"].as_str().unwrap_or("?"),
        v["addresses"]
    ));
    line(format!(
        "link {} each way: free out {}, free in {}",
        rate(u("capacity_bps")),
        rate(u("free_out_bps")),
        rate(u("free_in_bps"))
    ));
    line(format!(
        "cpu: {} ns per TPDU, {:.0}% of a core free of {:.0}% for guaranteed VCs",
        u("tpdu_cost_ns"),
        u("cpu_free_ns_per_s") as f64 / 1e7,
        u("cpu_budget_ns_per_s") as f64 / 1e7
    ));
    line(format!(
        "applications {}  VCIs in use {}",
        u("applications"),
        u("vcis_in_use")
    ));
    line(String::new());
    line(table::render(&calls_table(v)).trim_end().to_owned());
    line(String::new());
    let calls: Vec<&Value> = v["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c.get("traffic").is_some_and(|t| !t.is_null()))
        .collect();
    if !calls.is_empty() {
        line(
            table::render(&traffic_table(&calls, rates))
                .trim_end()
                .to_owned(),
        );
        line(String::new());
        line(table::render(&health_table(&calls)).trim_end().to_owned());
        for p in send_pools(&calls) {
            line(p);
        }
        line(String::new());
    }
    line(table::render(&listeners_table(v)).trim_end().to_owned());
    line(String::new());
    if v["peers"].as_array().is_some_and(|p| !p.is_empty()) {
        line(table::render(&links_table(v)).trim_end().to_owned());
        line(String::new());
    }
    line(format!("counters {}", v["counters"]));
    out
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_owned()
}

fn calls_table(v: &Value) -> comfy_table::Table {
    let mut calls = table::new(
        [
            "call", "state", "dir", "txvci", "rxvci", "res out", "res in", "pid", "remote", "sap",
            "qos", "enc",
        ],
        3,
    );
    // The remote is the other side's address alone: the SAP is the called side's (this
    // side's on an incoming call), so it has its own column.
    for c in v["calls"].as_array().into_iter().flatten() {
        calls.add_row(vec![
            text(&c["id"]),
            text(&c["state"]),
            text(&c["direction"]),
            c["tx_vci"].to_string(),
            c["rx_vci"].to_string(),
            rate(c["reserved_out_bps"].as_u64().unwrap_or(0)),
            rate(c["reserved_in_bps"].as_u64().unwrap_or(0)),
            c["pid"].as_i64().map_or("-".into(), |p| p.to_string()),
            text(&c["remote"]),
            text(&c["sap"]),
            text(&c["qos"]),
            // Every TPDU sealed with the call's keys (issue 16), or clear.
            if c["encrypted"].as_bool().unwrap_or(false) {
                "aead".into()
            } else {
                "-".into()
            },
        ]);
    }
    // Only the numeric columns are right-aligned; remote, sap, qos and enc are text.
    for i in [8, 9, 10, 11] {
        if let Some(col) = calls.column_mut(i) {
            col.set_cell_alignment(comfy_table::CellAlignment::Left);
        }
    }
    whole_ids(&mut calls);
    // Nor the remote address: a user copies it whole too.
    if let Some(col) = calls.column_mut(8) {
        col.set_constraint(comfy_table::ColumnConstraint::ContentWidth);
    }
    calls
}

/// Never wrap the first column, the id: it is what `natm release` takes, and a user
/// copies it whole (other columns wrap instead when the table is too wide).
fn whole_ids(t: &mut comfy_table::Table) {
    if let Some(col) = t.column_mut(0) {
        col.set_constraint(comfy_table::ColumnConstraint::ContentWidth);
    }
}

/// Bytes and TPDUs each way, and the current rates under `--watch`.
fn traffic_table(calls: &[&Value], rates: &HashMap<String, Sample>) -> comfy_table::Table {
    let mut t = table::new(
        [
            "call", "tx bytes", "tx TPDUs", "tx now", "rx bytes", "rx TPDUs", "rx now", "srtt",
        ],
        1,
    );
    whole_ids(&mut t);
    let now = |bps: Option<f64>| bps.map_or("-".to_owned(), |b| rate(b as u64));
    for c in calls {
        let tr = &c["traffic"];
        let n = |k: &str| tr[k].as_u64().unwrap_or(0);
        let r = rates.get(c["id"].as_str().unwrap_or(""));
        t.add_row(vec![
            text(&c["id"]),
            bytes(n("tx_bytes")),
            n("tx_tpdus").to_string(),
            now(r.and_then(|r| r.tx_bps)),
            bytes(n("rx_bytes")),
            n("rx_tpdus").to_string(),
            now(r.and_then(|r| r.rx_bps)),
            tr["srtt_us"]
                .as_u64()
                .map_or("-".into(), |us| format!("{:.3} ms", us as f64 / 1e3)),
        ]);
    }
    t
}

/// Each application's send buffer pool (seed 001 §6: all of its host's sending VCs
/// draw on it), once per application, from its calls' latest reports.
fn send_pools(calls: &[&Value]) -> Vec<String> {
    let mut seen = std::collections::BTreeMap::new();
    for c in calls {
        let t = &c["traffic"];
        let n = |k: &str| t[k].as_u64().unwrap_or(0);
        if n("send_pool_limit") > 0 {
            seen.entry(c["pid"].as_u64().unwrap_or(0))
                .or_insert((n("send_pool_used"), n("send_pool_limit")));
        }
    }
    seen.into_iter()
        .map(|(pid, (used, limit))| {
            format!(
                "send pool of pid {pid}: {} of {} queued",
                bytes(used),
                bytes(limit)
            )
        })
        .collect()
}

/// Retransmissions and drops by cause, the flow controller's rate, queue depths, and
/// how old the report is.
fn health_table(calls: &[&Value]) -> comfy_table::Table {
    let mut t = table::new(
        [
            "call",
            "retx f/t/h",
            "drops c/w/b/d/l/o/q",
            "forged tag/replay",
            "lost tpdu/msg",
            "flow rate",
            "send q",
            "recv q",
            "age",
        ],
        1,
    );
    whole_ids(&mut t);
    for c in calls {
        let tr = &c["traffic"];
        let n = |k: &str| tr[k].as_u64().unwrap_or(0);
        let q = tr["queue_drops"]
            .as_u64()
            .map_or("-".to_owned(), |q| q.to_string());
        t.add_row(vec![
            text(&c["id"]),
            format!(
                "{}/{}/{}",
                n("retx_fast"),
                n("retx_timeout"),
                n("retx_head")
            ),
            format!(
                "{}/{}/{}/{}/{}/{}/{q}",
                n("drop_bad_cookie"),
                n("drop_out_of_window"),
                n("drop_rcv_buf"),
                n("drop_duplicate"),
                n("drop_late"),
                n("drop_other"),
            ),
            format!("{}/{}", n("drop_bad_tag"), n("drop_replayed")),
            format!("{}/{}", n("lost_tpdus"), n("lost_messages")),
            tr["rate_bps"].as_u64().map_or("-".into(), rate),
            bytes(n("send_queued")),
            bytes(n("recv_queued")),
            format!("{:.1} s", n("age_ms") as f64 / 1e3),
        ]);
    }
    t
}

/// The signalling links: each one's state and how it is authenticated — Noise with
/// the peer's key fingerprint (its first 11 base64 characters, as WireGuard's tools
/// abbreviate keys), a switch's PSK, or clear — and a switch link's ILMI (the address
/// the switch took).
fn links_table(v: &Value) -> comfy_table::Table {
    let mut links = table::new(["link", "state", "calls", "auth", "peer key", "ilmi"], 6);
    for l in v["peers"].as_array().into_iter().flatten() {
        let key = l["peer_key"]
            .as_str()
            .map_or("-".into(), |k| k.chars().take(11).collect::<String>());
        links.add_row(vec![
            text(&l["peer"]),
            if l["up"] == true { "up" } else { "down" }.to_owned(),
            l["calls"].as_u64().unwrap_or(0).to_string(),
            l["auth"].as_str().unwrap_or("?").to_owned(),
            key,
            l["ilmi"].as_str().unwrap_or("-").to_owned(),
        ]);
    }
    if let Some(col) = links.column_mut(2) {
        col.set_cell_alignment(comfy_table::CellAlignment::Right);
    }
    links
}

fn listeners_table(v: &Value) -> comfy_table::Table {
    let mut listeners = table::new(["listener", "sap", "pid", "qos"], 2);
    for l in v["listeners"].as_array().into_iter().flatten() {
        listeners.add_row(vec![
            text(&l["id"]),
            text(&l["sap"]),
            l["pid"].as_i64().map_or("-".into(), |p| p.to_string()),
            text(&l["qos"]),
        ]);
    }
    if let Some(col) = listeners.column_mut(3) {
        col.set_cell_alignment(comfy_table::CellAlignment::Left);
    }
    listeners
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_use_the_time_between_the_samples_not_the_interval() {
        let t1 = serde_json::json!({"sampled_ms": 1000, "tx_bytes": 0, "rx_bytes": 0});
        let a = Sample::rate(&t1, None);
        assert_eq!(a.tx_bps, None);
        // 1.25 MB in 2.5 s of the application's clock: 4 Mbit/s.
        let t2 = serde_json::json!({"sampled_ms": 3500, "tx_bytes": 1_250_000, "rx_bytes": 0});
        let b = Sample::rate(&t2, Some(&a));
        assert_eq!(b.tx_bps, Some(4e6));
        assert_eq!(b.rx_bps, Some(0.0));
        // The same report seen again keeps its rate.
        let c = Sample::rate(&t2, Some(&b));
        assert_eq!(c.tx_bps, Some(4e6));
    }
}
