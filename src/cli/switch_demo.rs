//! `natm demo --switch`: an ATM network of real processes on loopback — one
//! `natm switch` and three hosts' `natm sigd`s ([`crate::cli::loopnet`]) — with a
//! reliable, a guaranteed (CBR) and a best-effort VC calling the same host through one
//! congested weighted round-robin port. A live line per half second shows each VC's
//! delivered rate, then a summary. Ctrl-C ends it early; the processes and their
//! temporary files go either way.

use natm::ulib::Wait;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use natm::ulib::{Connection, Error};

use super::loopnet::{address, LoopNet, Topology};
use super::traffic::{recv_loop, send_loop};
use super::{outln, CliResult};

/// Line rate of the congested port (towards host 3).
const BOTTLENECK: u64 = 100_000_000;
/// How often the live view prints.
const TICK: Duration = Duration::from_millis(500);
/// Message size of every VC: one TPDU.
const MSG: usize = 4096;

/// One VC of the demo.
struct Vc {
    class: &'static str,
    from: usize,
    qos: String,
    /// Offered rate if paced here (the best-effort flood).
    offered: Option<u64>,
}

/// A VC while it runs.
struct Running {
    conn: Arc<Connection>,
    delivered: Arc<AtomicU64>,
    threads: Vec<thread::JoinHandle<()>>,
}

fn call(net: &LoopNet, vc: &Vc, sap: &str, stop: &Arc<AtomicBool>) -> anyhow::Result<Running> {
    let err = |e: Error| anyhow::anyhow!("{}: {e}", vc.class);
    let sink = net.host(2)?;
    let l = sink.bind(sap, &vc.qos).map_err(err)?;
    let from = net.host(vc.from)?;
    let target = format!("{}:{sap}", address(2));
    let q = vc.qos.clone();
    let caller = thread::spawn(move || from.connect(target.as_str(), &q));
    let callee = l.accept(Wait::For(Duration::from_secs(5))).map_err(err)?;
    let conn = Arc::new(
        caller
            .join()
            .map_err(|_| anyhow::anyhow!("the caller panicked"))?
            .map_err(err)?,
    );
    let delivered = Arc::new(AtomicU64::new(0));
    let (c, st, offered) = (conn.clone(), stop.clone(), vc.offered);
    let tx = thread::spawn(move || send_loop(&c, MSG, offered, &st));
    let (d, st) = (delivered.clone(), stop.clone());
    let rx = thread::spawn(move || recv_loop(&callee, &d, &st));
    Ok(Running {
        conn,
        delivered,
        threads: vec![tx, rx],
    })
}

/// Runs the demo for `time` (or until Ctrl-C); `guaranteed` is the CBR VC's rate.
pub(crate) fn run(time: Duration, guaranteed: u64) -> CliResult {
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone()).context("cannot catch signals")?;
    }
    let g_qos = {
        let text = format!("cbr:pcr={guaranteed}bps");
        text.parse::<natm::wire::qos::Qos>()
            .map_or(text, |q| q.to_string())
    };
    let vcs = [
        // The dynamic window, ulib's default: through `natm switch` it is fairer and
        // retransmits far less than packet-pair (docs/PERFORMANCE.md, "Through the
        // switch processes").
        Vc {
            class: "reliable",
            from: 0,
            qos: "reliable".into(),
            offered: None,
        },
        Vc {
            class: "guaranteed",
            from: 0,
            qos: g_qos,
            offered: None,
        },
        Vc {
            class: "best-effort",
            from: 1,
            qos: "best-effort".into(),
            offered: Some(BOTTLENECK),
        },
    ];
    outln!(
        "natm demo --switch: a natm switch and three hosts' sigds on loopback; h1 and h2 call h3 through its {} Mbit/s wrr port",
        BOTTLENECK / 1_000_000
    );
    let net = LoopNet::start(&Topology {
        hosts: 3,
        line_rate: BOTTLENECK,
        scheduler: "wrr".into(),
        buffer: 16_384,
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut running = Vec::new();
    for (i, vc) in vcs.iter().enumerate() {
        match call(&net, vc, &format!("demo{i}"), &stop) {
            Ok(r) => running.push(r),
            Err(e) => {
                stop.store(true, Ordering::SeqCst);
                return Err(e);
            }
        }
        outln!("  {:<11} h{} → h3  {}", vc.class, vc.from + 1, vc.qos);
    }
    outln!(
        "{:>6}  {:>12} {:>12} {:>12}   (Mbit/s delivered)",
        "time",
        vcs[0].class,
        vcs[1].class,
        vcs[2].class
    );
    let start = Instant::now();
    let mut last = vec![0u64; running.len()];
    let mut last_at = start;
    while start.elapsed() < time && !interrupted.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(50));
        if last_at.elapsed() < TICK {
            continue;
        }
        // Over the time that really passed: a late wake-up would inflate the rate.
        let now = Instant::now();
        let span = now.duration_since(last_at).as_secs_f64();
        last_at = now;
        let rates: Vec<String> = running
            .iter()
            .zip(&mut last)
            .map(|(r, last)| {
                let d = r.delivered.load(Ordering::Relaxed);
                let rate = (d - *last) as f64 * 8.0 / span / 1e6;
                *last = d;
                format!("{rate:>12.1}")
            })
            .collect();
        outln!(
            "{:>5.1}s  {}",
            start.elapsed().as_secs_f64(),
            rates.join(" ")
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let mut t = crate::cli::table::new(["VC", "QoS", "mean Mbit/s", "retransmits", "path"], 2);
    for (vc, r) in vcs.iter().zip(running) {
        let st = r.conn.stats();
        r.conn.abort();
        for h in r.threads {
            let _ = h.join();
        }
        let mean = r.delivered.load(Ordering::Relaxed) as f64 * 8.0 / elapsed / 1e6;
        t.add_row(vec![
            vc.class.to_string(),
            vc.qos.clone(),
            format!("{mean:.2}"),
            st.tx.retransmissions().to_string(),
            format!("h{} → h3, wrr", vc.from + 1),
        ]);
    }
    outln!();
    outln!("{}", crate::cli::table::render(&t).trim_end());
    if interrupted.load(Ordering::Relaxed) {
        outln!("(interrupted after {elapsed:.1} s)");
    }
    drop(net);
    Ok(())
}
