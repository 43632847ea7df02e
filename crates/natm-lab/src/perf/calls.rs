//! `natm-lab perf calls`: call setup and release through two sigds on loopback (issue 6's
//! goal: median setup ≤ 200 µs, ≥ 5,000 setups/s; seed 004 measured tens of ms).
//!
//! Two `natm sigd` processes (hosts A and B) talk UNI signalling over UDP; an
//! application on A calls a listener on B and releases at once, over and over. A
//! setup is timed from `connect` to its return: SETUP, CALL PROCEEDING, the listener's
//! accept, CONNECT, and the transport handshake on both VCs. The reference, measured
//! in the same run and interleaved, is direct mode: the transport handshake alone
//! between the same two hosts, with no sigd.

use anyhow::Context as _;
use natm::ulib::Wait;
use natm_cli::cli::loopnet::free_port;
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::ProgressBar;

use super::experiment::{Experiment, OutputArgs};
use super::results;
use super::stats::{median, percentile};
use natm::ulib::{Accept, Error, Host, HostConfig, Listener};
use natm_cli::cli::table;

/// `natm-lab perf calls`.
#[derive(Debug, Args)]
pub(crate) struct CallsArgs {
    /// Calls per run and mode.
    #[arg(long, default_value_t = 1000)]
    calls: usize,
    /// Runs, each mode once per run (interleaved); the report gives medians of runs.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Callers at once (each sets up and releases in a loop).
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// QoS of the calls.
    #[arg(long, default_value = "reliable")]
    qos: String,
    /// Also measure a pre-authorised listener (`Accept::Auto`: sigd answers SETUP
    /// itself), in the same run as the default explicit-accept mode and direct mode.
    #[arg(long)]
    preauthorised: bool,
    /// Backlog of the pre-authorised listener (calls answered ahead of `accept`).
    #[arg(long, default_value_t = 64)]
    backlog: u16,
    /// The figure is the median setup and release per mode.
    #[command(flatten)]
    to: OutputArgs,
}

/// The two sigd processes, killed on drop.
pub(super) struct Daemons {
    children: Vec<Child>,
    dir: PathBuf,
}

/// Two `natm sigd` processes on loopback, hosts A (+4420001) and B (+4420002)
/// routing to each other, their sockets in a fresh directory named for `tag`; up and
/// serving when this returns. The daemons and the directory go on drop.
pub(super) fn two_sigds(tag: &str) -> anyhow::Result<(Daemons, PathBuf, PathBuf)> {
    let exe = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("natm-perf-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (pa, pb) = (free_port()?, free_port()?);
    let (sa, sb) = (dir.join("a.sock"), dir.join("b.sock"));
    let mut d = Daemons {
        children: Vec::new(),
        dir,
    };
    d.children
        .push(spawn_sigd(&exe, &sa, pa, "+4420001", pb, "+4420002")?);
    d.children
        .push(spawn_sigd(&exe, &sb, pb, "+4420002", pa, "+4420001")?);
    wait_for(&sa)?;
    wait_for(&sb)?;
    Ok((d, sa, sb))
}

impl Daemons {
    /// The sigd processes' ids.
    pub(super) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Their directory (sockets), removed on drop.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn_sigd(
    exe: &Path,
    socket: &Path,
    me: SocketAddr,
    addr: &str,
    peer: SocketAddr,
    peer_addr: &str,
) -> anyhow::Result<Child> {
    Command::new(exe)
        .arg("sigd")
        .arg("--socket")
        .arg(socket)
        .args(["--signalling", &me.to_string(), "--address", addr])
        .args(["--route", &format!("{peer_addr}={peer}")])
        .args(["--tpdu-cost-ns", "1000"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start {} sigd", exe.display()))
}

fn wait_for(socket: &Path) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(socket).is_err() {
        if Instant::now() > until {
            return Err(anyhow::anyhow!(
                "sigd did not come up at {}",
                socket.display()
            ));
        }
        thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

pub(super) fn host(socket: &Path) -> anyhow::Result<Host> {
    Host::open(HostConfig {
        sigd_socket: Some(socket.to_owned()),
        ..super::host_config()
    })
    .with_context(|| format!("cannot open a host on sigd {}", socket.display()))
}

/// Accept every call until told to stop; each connection is dropped once the caller
/// has closed (a receiver that closes first would abort the caller's VC). A fixed pool
/// of `workers` threads waits for the closes: a thread spawned per call would cost more
/// CPU than the call (and it is the harness, not the stack, that would be measured).
pub(super) fn serve(l: Listener, stop: Arc<AtomicBool>, workers: usize) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let (tx, rx) = std::sync::mpsc::channel::<natm::ulib::Connection>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        let pool: Vec<_> = (0..workers.max(1))
            .map(|_| {
                let rx = rx.clone();
                thread::spawn(move || loop {
                    let next = rx.lock().map(|r| r.recv());
                    let Ok(Ok(c)) = next else {
                        return;
                    };
                    while let Ok(Some(_)) = c.recv(Wait::For(Duration::from_secs(5))) {}
                })
            })
            .collect();
        while !stop.load(Ordering::Relaxed) {
            if let Ok(c) = l.accept(Wait::For(Duration::from_millis(100))) {
                if tx.send(c).is_err() {
                    break;
                }
            }
        }
        drop(tx);
        for w in pool {
            let _ = w.join();
        }
    })
}

/// CPU time (ns) the sigd processes have run: `/proc/<pid>/schedstat`'s first field
/// (sigd is one thread), 0 where it cannot be read.
fn sigd_cpu_ns(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// CPU time (ns) of this process, both hosts' applications and engines, every thread
/// including those that ended: utime + stime of `/proc/self/stat` (USER_HZ = 100).
fn self_cpu_ns() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = s.rsplit_once(')').map_or("", |x| x.1);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) * 10_000_000
}

/// One measured run of one mode.
struct Run {
    /// Per-call setup times (ns), sorted.
    setups: Vec<u64>,
    /// Per-call release times on the caller (`close` and drop, ns), sorted.
    releases: Vec<u64>,
    /// Calls per second.
    rate: f64,
    /// CPU per call (ns): the two sigds, and this process (both applications).
    sigd_cpu: f64,
    app_cpu: f64,
    /// Calls refused with cause 17 (a pre-authorised listener's backlog was empty)
    /// and tried again.
    busy: u64,
}

fn measured(
    client: &Host,
    target: &str,
    qos: &str,
    calls: usize,
    parallel: usize,
    sigds: &[u32],
) -> anyhow::Result<Run> {
    let (s0, a0) = (sigd_cpu_ns(sigds), self_cpu_ns());
    let (setups, releases, rate, busy) = run_mode(client, target, qos, calls, parallel)?;
    let n = setups.len().max(1) as f64;
    Ok(Run {
        sigd_cpu: sigd_cpu_ns(sigds).saturating_sub(s0) as f64 / n,
        app_cpu: self_cpu_ns().saturating_sub(a0) as f64 / n,
        setups,
        releases,
        rate,
        busy,
    })
}

/// Busy refusals (cause 17) one caller tries again past before the run fails.
const MAX_BUSY: u64 = 10_000;

/// One run of one mode: per-call setup and release times (ns, sorted), calls per
/// second, and the calls refused busy and tried again. A pre-authorised listener whose
/// backlog ran dry refuses with cause 17 until it has given sigd more data sockets; the
/// caller then tries again, as a client of a busy server would: the attempt costs the
/// rate, and only the call that got through is timed.
fn run_mode(
    client: &Host,
    target: &str,
    qos: &str,
    calls: usize,
    parallel: usize,
) -> anyhow::Result<(Vec<u64>, Vec<u64>, f64, u64)> {
    let start = Instant::now();
    let per = calls.div_ceil(parallel.max(1));
    let workers: Vec<_> = (0..parallel.max(1))
        .map(|_| {
            let (h, t, q) = (client.clone(), target.to_owned(), qos.to_owned());
            thread::spawn(move || -> anyhow::Result<(Vec<u64>, Vec<u64>, u64)> {
                let mut v = Vec::with_capacity(per);
                let mut r = Vec::with_capacity(per);
                let mut busy = 0u64;
                for _ in 0..per {
                    let (t0, c) = loop {
                        let t0 = Instant::now();
                        match h.connect(t.as_str(), &q) {
                            Ok(c) => break (t0, c),
                            Err(Error::Refused { cause: 17, .. }) if busy < MAX_BUSY => {
                                busy += 1;
                                thread::yield_now();
                            }
                            Err(e) => return Err(anyhow::anyhow!("call to {t}: {e}")),
                        }
                    };
                    let t1 = Instant::now();
                    v.push((t1 - t0).as_nanos() as u64);
                    // Release: close in order, then drop (sigd frees the call).
                    c.close();
                    drop(c);
                    r.push(t1.elapsed().as_nanos() as u64);
                }
                Ok((v, r, busy))
            })
        })
        .collect();
    let (mut all, mut rel, mut busy) = (Vec::new(), Vec::new(), 0);
    for w in workers {
        let (v, r, b) = w
            .join()
            .map_err(|_| anyhow::anyhow!("a caller thread panicked"))??;
        all.extend(v);
        rel.extend(r);
        busy += b;
    }
    let secs = start.elapsed().as_secs_f64();
    let rate = all.len() as f64 / secs;
    all.sort_unstable();
    rel.sort_unstable();
    Ok((all, rel, rate, busy))
}

/// Measure every mode; the document of the results.
fn measure(a: &CallsArgs) -> anyhow::Result<results::Calls> {
    if a.runs == 0 || a.calls == 0 {
        anyhow::bail!("--runs and --calls must be at least 1");
    }
    let (d, sa, sb) = two_sigds("calls")?;
    let (ha, hb) = (host(&sa)?, host(&sb)?);
    let stop = Arc::new(AtomicBool::new(false));
    let via_sigd = hb.bind("perf", &a.qos)?;
    let direct = hb.bind("127.0.0.1:0", &a.qos)?;
    let direct_addr = direct.local_addr()?.to_string();
    let workers = a.parallel + 2;
    let mut servers = vec![
        serve(via_sigd, stop.clone(), workers),
        serve(direct, stop.clone(), workers),
    ];
    // The modes measured, interleaved in every run: explicit accept through two
    // sigds, optionally a pre-authorised listener, and direct mode (the reference).
    let mut targets = vec!["+4420002:perf".to_owned()];
    if a.preauthorised {
        let auto = hb.bind_with("perfauto", &a.qos, Accept::Auto { backlog: a.backlog })?;
        servers.push(serve(auto, stop.clone(), workers));
        targets.push("+4420002:perfauto".to_owned());
    }
    targets.push(direct_addr);
    // Warm up every path (the signalling link comes up on the first call).
    for t in &targets {
        run_mode(&ha, t, &a.qos, 20, 1)?;
    }
    let pids = d.pids();
    let mut runs: Vec<Vec<Run>> = Vec::new();
    for _ in 0..a.runs {
        let mut per = Vec::new();
        for t in &targets {
            per.push(measured(&ha, t, &a.qos, a.calls, a.parallel, &pids)?);
        }
        runs.push(per);
    }
    stop.store(true, Ordering::Relaxed);
    for s in servers {
        let _ = s.join();
    }
    drop(d);
    let med = |f: &dyn Fn(&Run) -> f64, i: usize| {
        median(&runs.iter().map(|r| f(&r[i])).collect::<Vec<_>>()).unwrap_or(0.0)
    };
    let summarise = |i: usize| {
        (
            med(&|r| percentile(&r.setups, 0.5).unwrap_or(0) as f64, i),
            med(&|r| percentile(&r.setups, 0.99).unwrap_or(0) as f64, i),
            med(&|r| r.rate, i),
            med(&|r| r.sigd_cpu, i),
            med(&|r| r.app_cpu, i),
            med(&|r| percentile(&r.releases, 0.5).unwrap_or(0) as f64, i),
        )
    };
    let (sm, sp, sr, sc, sa, sl) = summarise(0);
    let (dm, dp, dr, _, da, dl) = summarise(targets.len() - 1);
    let auto = a.preauthorised.then(|| summarise(1));
    let busy = a
        .preauthorised
        .then(|| runs.iter().map(|r| r[1].busy).sum::<u64>());
    let ratio = |m: f64| if dm > 0.0 { m / dm } else { 0.0 };
    Ok(results::Calls {
        calls_per_run: a.calls,
        direct: results::CallMode {
            app_cpu_us_per_call: da / 1e3,
            backlog: None,
            busy_refusals: None,
            median_release_us: dl / 1e3,
            median_setup_us: dm / 1e3,
            p99_setup_us: dp / 1e3,
            setups_per_s: dr,
            sigd_cpu_us_per_call: None,
        },
        experiment: "calls".into(),
        machine: results::Machine::now(),
        parallel: a.parallel,
        qos: a.qos.clone(),
        ratio_median_setup: ratio(sm),
        ratio_median_setup_preauthorised: auto.map(|(m, ..)| ratio(m)),
        runs: a.runs,
        sigd: results::CallMode {
            app_cpu_us_per_call: sa / 1e3,
            backlog: None,
            busy_refusals: None,
            median_release_us: sl / 1e3,
            median_setup_us: sm / 1e3,
            p99_setup_us: sp / 1e3,
            setups_per_s: sr,
            sigd_cpu_us_per_call: Some(sc / 1e3),
        },
        sigd_preauthorised: auto.map(|(m, p, r, c, ac, l)| results::CallMode {
            app_cpu_us_per_call: ac / 1e3,
            backlog: Some(usize::from(a.backlog)),
            busy_refusals: busy,
            median_release_us: l / 1e3,
            median_setup_us: m / 1e3,
            p99_setup_us: p / 1e3,
            setups_per_s: r,
            sigd_cpu_us_per_call: Some(c / 1e3),
        }),
    })
}

impl Experiment for CallsArgs {
    type Result = results::Calls;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, ())> {
        pb.set_message("calls");
        Ok((measure(self)?, ()))
    }

    fn table(r: &Self::Result) -> String {
        let mut modes = vec![("two sigds, explicit accept", &r.sigd)];
        if let Some(m) = &r.sigd_preauthorised {
            modes.push(("two sigds, pre-authorised", m));
        }
        modes.push(("direct mode (reference)", &r.direct));
        let us = |x: f64| format!("{x:.0} µs");
        let mut t = table::new(
            [
                "mode",
                "median setup",
                "p99 setup",
                "setups/s",
                "sigd CPU/call",
                "app CPU/call",
                "release",
            ],
            1,
        );
        for (name, m) in modes {
            t.add_row(vec![
                name.to_string(),
                us(m.median_setup_us),
                us(m.p99_setup_us),
                format!("{:.0}", m.setups_per_s),
                m.sigd_cpu_us_per_call.map_or("-".into(), us),
                us(m.app_cpu_us_per_call),
                us(m.median_release_us),
            ]);
        }
        let mut out = format!(
            "call setup + release, {} calls x {} runs, {} caller(s), qos {}\n{}",
            r.calls_per_run,
            r.runs,
            r.parallel,
            r.qos,
            table::render(&t)
        );
        if r.direct.median_setup_us > 0.0 {
            out += &format!(
                "median setup through sigd: {:.2}x direct mode\n",
                r.ratio_median_setup
            );
            if let Some(x) = r.ratio_median_setup_preauthorised {
                out += &format!("pre-authorised: {x:.2}x direct mode\n");
            }
        }
        if let Some(m) = &r.sigd_preauthorised {
            if let Some(b) = m.busy_refusals.filter(|&b| b > 0) {
                out += &format!(
                    "pre-authorised: {b} call(s) refused busy (cause 17, backlog {} empty) and \
                     tried again\n",
                    m.backlog.unwrap_or(0)
                );
            }
        }
        out
    }

    fn figure(r: &Self::Result, (): &(), path: &Path) -> anyhow::Result<()> {
        let mut rows = vec![(
            "two sigds, explicit accept".to_string(),
            vec![r.sigd.median_setup_us, r.sigd.median_release_us],
        )];
        if let Some(m) = &r.sigd_preauthorised {
            rows.push((
                "two sigds, pre-authorised".into(),
                vec![m.median_setup_us, m.median_release_us],
            ));
        }
        rows.push((
            "direct mode".into(),
            vec![r.direct.median_setup_us, r.direct.median_release_us],
        ));
        let title = format!(
            "Call setup and release, median of {} run(s) of {} calls, {} caller(s)",
            r.runs, r.calls_per_run, r.parallel
        );
        crate::plot::both(path, |p| {
            crate::plot::stacked_bars(
                p,
                &title,
                "µs per call (median)",
                &["setup", "release"],
                &rows,
            )
        })
    }
}
