//! `natm demo`: a whole natm network in one process. Two hosts on UDP loopback (or, with
//! `--mem`, on the in-process mem adaptor) open a
//! guaranteed, a reliable and a best-effort connection at once; each VC gets its own
//! QoS, error control, flow control and scheduler priority. A live table shows each
//! VC's delivered rate, RTT and losses, then a summary. `--sim` runs the same three
//! services through the simulator's round-robin bottleneck instead, `--switch` through
//! a real `natm switch` process (`switch_demo`).

use natm::ulib::Wait;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

use super::units;
use super::{outln, CliResult};
use natm::transport::TransportConfig;
use natm::ulib::{Connection, Error, Host, HostConfig, MemNetwork, Network, WouldBlock};
use natm_sim::scenario::{run_observed, Scenario, VcSpec};

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Rate reserved by the guaranteed VC.
    #[arg(long, default_value = "20Mbps", value_parser = units::rate)]
    guaranteed: u64,
    /// How long to run [default: 4 s, 10 s with --switch].
    #[arg(long, visible_alias = "seconds", value_parser = units::duration)]
    time: Option<Duration>,
    /// Run on the deterministic simulator (100 Mbit/s round-robin bottleneck, 1% loss)
    /// instead of real sockets.
    #[arg(long)]
    sim: bool,
    /// Link the two hosts with the in-process mem adaptor instead of UDP loopback.
    #[arg(long, conflicts_with = "sim")]
    mem: bool,
    /// Run a network of real processes on loopback instead: a `natm switch` and three
    /// hosts' sigds, a reliable, a guaranteed and a best-effort VC through one
    /// congested wrr switch port.
    #[arg(long, conflicts_with_all = ["sim", "mem"])]
    switch: bool,
    /// The two hosts' UDP sockets: `vc`, one per connection end, or `host`, one for
    /// every VC of a host [default: $NATM_PORTS, else vc].
    #[arg(long, value_name = "vc|host", conflicts_with_all = ["sim", "mem", "switch"])]
    ports: Option<natm::ulib::Ports>,
}

impl DemoArgs {
    fn time(&self) -> Duration {
        self.time
            .unwrap_or(Duration::from_secs(if self.switch { 10 } else { 4 }))
    }
}

struct Vc {
    label: &'static str,
    qos: String,
    msg: usize,
    delivered: Arc<AtomicU64>,
    lost: Arc<AtomicU64>,
}

pub(crate) fn run(a: DemoArgs) -> CliResult {
    if a.switch {
        return super::switch_demo::run(a.time(), a.guaranteed);
    }
    if a.sim {
        return run_sim(a);
    }
    let mut cfg = HostConfig::default();
    cfg.engine.ports = super::tools::ports_or_env(a.ports)?;
    let (link, listen_at) = if a.mem {
        cfg.engine.network = Network::Mem(MemNetwork::new());
        ("in-process mem links", "10.0.0.2:0")
    } else {
        ("UDP loopback", "127.0.0.1:0")
    };
    let host_a = Host::open(cfg.clone())?;
    let host_b = Host::open(cfg)?;
    let vcs = [
        Vc {
            label: "guaranteed",
            qos: natm::wire::qos::Qos::guaranteed(natm::wire::qos::Rate::Bps(a.guaranteed))
                .to_string(),
            msg: 8192,
            delivered: Arc::default(),
            lost: Arc::default(),
        },
        Vc {
            label: "reliable",
            qos: "reliable".into(),
            msg: 65536,
            delivered: Arc::default(),
            lost: Arc::default(),
        },
        Vc {
            label: "best-effort",
            qos: "best-effort".into(),
            msg: 1400,
            delivered: Arc::default(),
            lost: Arc::default(),
        },
    ];
    outln!(
        "natm demo: two hosts on {link}; a guaranteed ({}), a reliable and a best-effort VC at once",
        vcs[0].qos
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for vc in &vcs {
        let l = host_b.bind(listen_at, &vc.qos)?;
        let addr = l.local_addr()?;
        let c = host_a.connect(addr, &vc.qos)?;
        let s = l.accept(Wait::For(Duration::from_secs(5)))?;
        let (delivered, stop_r) = (vc.delivered.clone(), stop.clone());
        receivers.push(std::thread::spawn(move || receive(s, delivered, stop_r)));
        let (msg, stop_s) = (vc.msg, stop.clone());
        let c = Arc::new(c);
        let c2 = c.clone();
        let lost = vc.lost.clone();
        senders.push((
            c,
            std::thread::spawn(move || transmit(&c2, msg, stop_s, lost)),
        ));
    }
    outln!(
        "{:>6}  {:>20} {:>20} {:>20}   {}",
        "time",
        "guaranteed",
        "reliable",
        "best-effort",
        "(Mbit/s delivered; srtt; retransmits)"
    );
    let start = Instant::now();
    let mut last = [0u64; 3];
    let tick = Duration::from_millis(500);
    let mut last_at = start;
    while start.elapsed() < a.time() {
        std::thread::sleep(tick);
        // Over the time that really passed: a late wake-up would inflate the rate.
        let now = Instant::now();
        let span = now.duration_since(last_at).as_secs_f64();
        last_at = now;
        let mut cells = Vec::new();
        for (i, vc) in vcs.iter().enumerate() {
            let d = vc.delivered.load(Ordering::Relaxed);
            let rate = (d - last[i]) as f64 * 8.0 / span / 1e6;
            last[i] = d;
            let st = senders[i].0.stats();
            let srtt = st
                .srtt
                .map_or("    -".to_string(), |d| match d.as_micros() {
                    us @ 0..10_000 => format!("{us}µs"),
                    us => format!("{}ms", us / 1000),
                });
            cells.push(format!(
                "{rate:>7.1} {srtt:>6} {:>5}",
                st.tx.retransmissions()
            ));
        }
        outln!(
            "{:>5.1}s  {:>20} {:>20} {:>20}",
            start.elapsed().as_secs_f64(),
            cells[0],
            cells[1],
            cells[2]
        );
    }
    stop.store(true, Ordering::SeqCst);
    let elapsed = start.elapsed().as_secs_f64();
    let mut finals = Vec::new();
    for (c, t) in senders {
        let _ = t.join();
        finals.push(c.stats());
        c.close();
    }
    for r in receivers {
        let _ = r.join();
    }
    outln!();
    let mut t = crate::cli::table::new(
        [
            "VC",
            "QoS",
            "mean Mbit/s",
            "srtt",
            "retransmits",
            "msgs lost",
        ],
        1,
    );
    for (vc, st) in vcs.iter().zip(&finals) {
        let mean = vc.delivered.load(Ordering::Relaxed) as f64 * 8.0 / elapsed / 1e6;
        t.add_row(vec![
            vc.label.to_string(),
            vc.qos.split(':').next().unwrap_or("").to_string(),
            format!("{mean:.2}"),
            st.srtt
                .map_or("-".into(), |d| format!("{}µs", d.as_micros())),
            st.tx.retransmissions().to_string(),
            (st.rx.messages_lost + vc.lost.load(Ordering::Relaxed)).to_string(),
        ]);
    }
    outln!("{}", crate::cli::table::render(&t).trim_end());
    Ok(())
}

fn transmit(c: &Connection, size: usize, stop: Arc<AtomicBool>, lost: Arc<AtomicU64>) {
    let msg = vec![0x5Au8; size];
    while !stop.load(Ordering::Relaxed) {
        match c.send(&msg, Wait::No) {
            Ok(()) => {}
            Err(Error::WouldBlock(WouldBlock::WindowFull | WouldBlock::OverRate)) => {
                // Blocking send waits for the window or the bucket; use it.
                if c.send(&msg, Wait::Block).is_err() {
                    return;
                }
            }
            Err(_) => {
                lost.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

fn receive(s: Connection, delivered: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        match s.recv(Wait::For(Duration::from_millis(100))) {
            Ok(Some(m)) => {
                delivered.fetch_add(m.len() as u64, Ordering::Relaxed);
            }
            Ok(None) => return,
            Err(Error::TimedOut) => {}
            Err(_) => return,
        }
    }
}

fn run_sim(a: DemoArgs) -> CliResult {
    let bytes = u64::MAX / 4;
    let vcs = vec![
        VcSpec {
            label: "guaranteed".into(),
            config: TransportConfig::guaranteed(a.guaranteed),
            bytes,
            msg_size: 8192,
            start: Duration::ZERO,
        },
        VcSpec {
            label: "reliable".into(),
            config: TransportConfig::reliable(),
            bytes,
            msg_size: 65536,
            start: Duration::from_millis(200),
        },
        VcSpec {
            label: "best-effort".into(),
            config: TransportConfig::best_effort(),
            bytes,
            msg_size: 1500,
            start: Duration::from_millis(400),
        },
    ];
    let s = Scenario {
        loss: 0.01,
        rtt: Duration::from_millis(2),
        vcs,
        time_limit: a.time(),
        series_interval: Some(Duration::from_millis(250)),
        ..Scenario::default()
    };
    outln!("natm demo --sim: 3 VCs through a 100 Mbit/s round-robin bottleneck, 1% loss, 2 ms RTT (simulated)");
    outln!(
        "{:>7}  {:>18}  {:>18}  {:>18}  {:>6}",
        "time",
        "guaranteed Mbit/s",
        "reliable Mbit/s",
        "best-effort Mbit/s",
        "queue"
    );
    let report = run_observed(&s, |row| {
        let cell = |i: usize| row.vcs.get(i).map_or(0.0, |v| v.rate_bps / 1e6);
        outln!(
            "{:>6.2}s  {:>18.2}  {:>18.2}  {:>18.2}  {:>6}",
            row.t,
            cell(0),
            cell(1),
            cell(2),
            row.queue_frames
        );
    })?;
    outln!();
    let mut t = crate::cli::table::new(
        [
            "VC",
            "goodput Mbit/s",
            "srtt µs",
            "retransmits",
            "msgs lost",
            "data",
        ],
        1,
    );
    for v in &report.vcs {
        t.add_row(vec![
            v.label.to_string(),
            format!("{:.2}", v.goodput_bps / 1e6),
            v.srtt.map_or("-".into(), |d| d.as_micros().to_string()),
            v.sender.retransmissions().to_string(),
            v.messages_lost.to_string(),
            if v.intact { "intact" } else { "CORRUPTED" }.to_string(),
        ]);
    }
    outln!("{}", crate::cli::table::render(&t).trim_end());
    Ok(())
}
