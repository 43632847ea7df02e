//! `natm perf switch`: forwarding speed of one `natm switch` process beside a
//! minimal UDP relay (issue 13's goal: frame mode ≥ 0.8× the relay, cell mode ≥ 10 M
//! cells/s per core). Both are separate processes on loopback, one thread each, left
//! where the kernel puts them; both read and write one datagram per system call
//! (`recv_from`/`send_to`), so the ratio is the cost of the switch's data plane.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};

use super::experiment::{Experiment, OutputArgs};
use crate::cli::table;

/// `natm perf switch`.
#[derive(Debug, clap::Args)]
pub(crate) struct SwitchArgs {
    /// Seconds each of the four measurements runs.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Cells per datagram in cell mode (a train).
    #[arg(long, default_value_t = 32)]
    train: usize,
    /// SDU octets of each frame in frame mode.
    #[arg(long, default_value_t = 1500)]
    frame: usize,
    #[command(flatten)]
    to: OutputArgs,
}

/// One forwarder in one link mode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Rate {
    /// Datagrams the receiving host got per second.
    pub(crate) datagrams_per_s: f64,
    /// Cells per second (cells in trains, or AAL5 cells of the frames).
    pub(crate) cells_per_s: f64,
    /// Datagrams the sending host offered per second.
    pub(crate) offered_per_s: f64,
    /// CPU seconds the forwarder process used per second of the run (user + system,
    /// from /proc; 1.0 is one core busy).
    pub(crate) cpu_per_s: f64,
}

/// What `natm perf switch` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SwitchResult {
    /// Seconds per measurement.
    pub(crate) seconds: f64,
    /// Cells per train.
    pub(crate) train: usize,
    /// SDU octets per frame.
    pub(crate) frame: usize,
    /// Logical CPUs of the machine.
    pub(crate) cpus: usize,
    /// The switch, cell mode.
    pub(crate) switch_cell: Rate,
    /// The relay, the same trains.
    pub(crate) relay_cell: Rate,
    /// The switch, frame mode.
    pub(crate) switch_frame: Rate,
    /// The relay, the same frames.
    pub(crate) relay_frame: Rate,
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// User + system CPU seconds process `pid` has used, from /proc/PID/stat (clock
/// ticks of 1/100 s, Linux's USER_HZ).
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').context("odd /proc stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> anyhow::Result<f64> {
        Ok(f.get(i).context("short /proc stat")?.parse::<f64>()? / 100.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Ok(tick(11)? + tick(12)?)
}

/// Lines the child prints, until `want` of them start with `prefix`.
fn read_lines(child: &mut Child, prefix: &str, want: usize) -> anyhow::Result<Vec<String>> {
    let out = child.stdout.take().context("child stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    let prefix = prefix.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.starts_with(&prefix) && tx.send(line).is_err() {
                break;
            }
        }
    });
    (0..want)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(10))
                .context("the forwarder did not start within 10 s")
        })
        .collect()
}

fn addr_of(line: &str) -> anyhow::Result<SocketAddr> {
    line.rsplit(' ')
        .next()
        .context("no address")?
        .parse()
        .context("bad address")
}

/// Starts a switch with two ports, `a` from `src` and `b` to `dst`, and one PVC; the
/// address to send to.
fn start_switch(
    mode: &str,
    src: SocketAddr,
    dst: SocketAddr,
    train: usize,
) -> anyhow::Result<(Proc, SocketAddr)> {
    let dir = std::env::temp_dir().join(format!("natm-perf-switch-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = dir.join(format!("{mode}.toml"));
    // A line far above loopback's rate and deep buffers: the measure is the
    // forwarding loop, not pacing or drops.
    let port = |name: &str, peer: SocketAddr| {
        format!(
            "[[port]]\nname = \"{name}\"\nbind = \"127.0.0.1:0\"\npeer = \"{peer}\"\nmode = \"{mode}\"\nline_rate = 1000000000000\nbuffer = 1000000\ntrain = {train}\n"
        )
    };
    let toml = port("a", src)
        + &port("b", dst)
        + "[[pvc]]\nfrom = \"a:0.32\"\nto = \"b:1.40\"\nbuffer = 1000000\nframe_discard = false\n";
    std::fs::write(&cfg, toml)?;
    let child = Command::new(std::env::current_exe()?)
        .args(["switch", "--config"])
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start natm switch")?;
    let mut child = Proc(child);
    // The switch has read its config once it names its ports (or failed to start).
    let lines = read_lines(&mut child.0, "port a ", 1);
    let _ = std::fs::remove_dir_all(&dir);
    let lines = lines?;
    Ok((child, addr_of(&lines[0])?))
}

/// Starts `natm perf relay` from `src` to `dst`; the address to send to.
fn start_relay(src: SocketAddr, dst: SocketAddr) -> anyhow::Result<(Proc, SocketAddr)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["perf", "relay", "--from"])
        .arg(src.to_string())
        .arg("--to")
        .arg(dst.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start natm perf relay")?;
    let lines = read_lines(&mut child, "relay ", 1)?;
    Ok((Proc(child), addr_of(&lines[0])?))
}

/// What one measurement sends.
struct Load<'a> {
    datagram: &'a [u8],
    /// Cells per frame (frame mode).
    cells_per: f64,
    cell_mode: bool,
    secs: f64,
}

/// Sends `datagram` through the forwarder at `to` for `secs` as fast as the socket
/// takes it, and counts what reaches `rx`.
fn blast(
    pid: u32,
    tx: &UdpSocket,
    rx: UdpSocket,
    to: SocketAddr,
    load: &Load<'_>,
) -> anyhow::Result<Rate> {
    let Load {
        datagram,
        cells_per,
        cell_mode,
        secs,
    } = *load;
    rx.set_read_timeout(Some(Duration::from_millis(200)))?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let counter = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        let (mut datagrams, mut cells) = (0u64, 0f64);
        loop {
            match rx.recv(&mut buf) {
                Ok(n) => {
                    datagrams += 1;
                    cells += if cell_mode {
                        ((n - 1) / 53) as f64
                    } else {
                        cells_per
                    };
                }
                Err(_) if stop2.load(Ordering::Relaxed) => break,
                Err(_) => {}
            }
        }
        (datagrams, cells)
    });
    let cpu0 = cpu_seconds(pid)?;
    let start = Instant::now();
    let dur = Duration::from_secs_f64(secs);
    let mut sent = 0u64;
    while start.elapsed() < dur {
        for _ in 0..64 {
            if tx.send_to(datagram, to).is_ok() {
                sent += 1;
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid)? - cpu0;
    stop.store(true, Ordering::Relaxed);
    let (datagrams, cells) = counter
        .join()
        .map_err(|_| anyhow::anyhow!("counter thread panicked"))?;
    Ok(Rate {
        datagrams_per_s: datagrams as f64 / elapsed,
        cells_per_s: cells / elapsed,
        offered_per_s: sent as f64 / elapsed,
        cpu_per_s: cpu / elapsed,
    })
}

fn measure(a: &SwitchArgs, pb: &ProgressBar) -> anyhow::Result<SwitchResult> {
    anyhow::ensure!(
        (1..=natm_switchd::train::MAX_TRAIN_CELLS).contains(&a.train),
        "--train must be 1..={}",
        natm_switchd::train::MAX_TRAIN_CELLS
    );
    anyhow::ensure!(a.frame <= 65_000, "--frame must be at most 65,000 octets");
    let mut cells = vec![natm_switchd::train::TRAIN_MAGIC];
    let hdr =
        natm::wire::cell::HeaderRepr::uni(0, 32, natm::wire::cell::Pti::UserDataEnd).to_bytes();
    for _ in 0..a.train {
        cells.extend_from_slice(&hdr);
        cells.extend_from_slice(&[0x5A; 48]);
    }
    let mut frame = natm::wire::vcframe::Repr::data(0, 32).to_bytes().to_vec();
    frame.resize(natm::wire::vcframe::HEADER_LEN + a.frame, 0x5A);
    let frame_cells = (a.frame + 8).div_ceil(48) as f64;
    pb.set_length(4);
    let run = |switch: bool, cell: bool| -> anyhow::Result<Rate> {
        let tx = UdpSocket::bind("127.0.0.1:0")?;
        let rx = UdpSocket::bind("127.0.0.1:0")?;
        let (src, dst) = (tx.local_addr()?, rx.local_addr()?);
        let mode = if cell { "cell" } else { "frame" };
        pb.set_message(format!(
            "{} {mode}",
            if switch { "switch" } else { "relay" }
        ));
        let (p, to) = if switch {
            start_switch(mode, src, dst, a.train)?
        } else {
            start_relay(src, dst)?
        };
        let d = if cell { &cells } else { &frame };
        let load = Load {
            datagram: d,
            cells_per: frame_cells,
            cell_mode: cell,
            secs: a.seconds,
        };
        let r = blast(p.0.id(), &tx, rx, to, &load);
        pb.inc(1);
        r
    };
    Ok(SwitchResult {
        seconds: a.seconds,
        train: a.train,
        frame: a.frame,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        switch_cell: run(true, true)?,
        relay_cell: run(false, true)?,
        switch_frame: run(true, false)?,
        relay_frame: run(false, false)?,
    })
}

impl Experiment for SwitchArgs {
    type Result = SwitchResult;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(SwitchResult, ())> {
        Ok((measure(self, pb)?, ()))
    }

    fn table(r: &SwitchResult) -> String {
        let mut t = table::new(
            [
                "mode",
                "forwarder",
                "offered dgrams/s",
                "dgrams/s",
                "cells/s",
                "CPU",
                "cells/CPU-s",
                "× relay",
            ],
            2,
        );
        let rows = [
            ("cell", "natm switch", &r.switch_cell, Some(&r.relay_cell)),
            ("cell", "UDP relay", &r.relay_cell, None),
            (
                "frame",
                "natm switch",
                &r.switch_frame,
                Some(&r.relay_frame),
            ),
            ("frame", "UDP relay", &r.relay_frame, None),
        ];
        for (mode, who, x, rel) in rows {
            t.add_row(vec![
                mode.to_string(),
                who.to_string(),
                format!("{:.0}", x.offered_per_s),
                format!("{:.0}", x.datagrams_per_s),
                format!("{:.0}", x.cells_per_s),
                format!("{:.0}%", x.cpu_per_s * 100.0),
                format!("{:.2}M", x.cells_per_s / x.cpu_per_s.max(1e-3) / 1e6),
                rel.map_or("1".into(), |y| {
                    format!("{:.2}", x.datagrams_per_s / y.datagrams_per_s.max(1.0))
                }),
            ]);
        }
        format!(
            "{}\n{} s each on loopback, {} cells per train, {}-octet frames, {} CPUs; one sending and one receiving host thread beside the forwarder. CPU: the forwarder process's user + system time per second of the run; × relay: datagrams/s against the relay's.\n",
            table::render(&t).trim_end(),
            r.seconds,
            r.train,
            r.frame,
            r.cpus
        )
    }

    fn figure(r: &SwitchResult, (): &(), path: &Path) -> anyhow::Result<()> {
        let rows = vec![
            (
                "switch, cell".to_string(),
                vec![r.switch_cell.datagrams_per_s / 1e3],
            ),
            (
                "relay, cell".to_string(),
                vec![r.relay_cell.datagrams_per_s / 1e3],
            ),
            (
                "switch, frame".to_string(),
                vec![r.switch_frame.datagrams_per_s / 1e3],
            ),
            (
                "relay, frame".to_string(),
                vec![r.relay_frame.datagrams_per_s / 1e3],
            ),
        ];
        crate::cli::plot::both(path, |p| {
            crate::cli::plot::stacked_bars(
                p,
                "Forwarding through natm switch and a UDP relay, loopback",
                "thousand datagrams/s",
                &["datagrams/s"],
                &rows,
            )
        })
    }
}

/// `natm perf relay` (hidden): the reference forwarder — every datagram from `--from`
/// goes to `--to`, and back, one `recv_from`/`send_to` per datagram, one thread.
#[derive(Debug, clap::Args)]
pub(crate) struct RelayArgs {
    /// The sending host's endpoint.
    #[arg(long)]
    from: SocketAddr,
    /// The receiving host's endpoint.
    #[arg(long)]
    to: SocketAddr,
}

/// Runs the relay until killed; prints `relay ADDR` once bound.
pub(crate) fn relay(a: &RelayArgs) -> crate::cli::CliResult {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    crate::cli::outln!("relay {}", s.local_addr()?);
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, peer) = s.recv_from(&mut buf)?;
        let out = if peer == a.from {
            a.to
        } else if peer == a.to {
            a.from
        } else {
            continue;
        };
        // A full socket buffer drops the datagram, as the switch's link does.
        let _ = s.send_to(&buf[..n], out);
    }
}
