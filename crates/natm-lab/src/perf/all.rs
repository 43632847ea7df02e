//! `natm-lab perf all --out DIR`: the whole suite, the paper's Section 6 for this machine.
//!
//! Each experiment runs as a child process of this binary with the exact command line
//! the report prints (`natm-lab perf <experiment> … --save DIR/<name>.json --figure
//! DIR/<name>.svg`), so what the report shows is what anyone can re-run. Each child has
//! a time limit and is stopped by its process id past it (SIGTERM, then SIGKILL). The
//! report, `DIR/report.md`, holds per experiment: what it measures, the command, the
//! table it printed, the figure, and what limits the numbers; first, the headline
//! ratios of the issue, computed from the JSON of this one run.

use anyhow::Context as _;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::results;

/// `natm-lab perf all`.
#[derive(Debug, clap::Args)]
pub(crate) struct AllArgs {
    /// Directory for report.md, the JSON documents and the figures (created).
    #[arg(long)]
    out: PathBuf,
    /// Shorter runs and fewer repetitions: the whole suite in about five minutes
    /// instead of about twenty-five.
    #[arg(long)]
    quick: bool,
    /// Experiments to leave out, comma-separated (latency, latency-same, latency-split,
    /// stages, throughput, guaranteed, cost, overhead, livelock, calls, calls-16,
    /// calls-256, isolation, loss, scale, counts).
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
}

/// One experiment of the suite, as `perf all` runs it.
struct Planned {
    /// The experiment's `natm-lab perf` subcommand, or the subcommand and a variant after a
    /// dash ([`Planned::command`]). It names the files the run writes and is what
    /// `--skip` takes.
    name: &'static str,
    title: &'static str,
    /// The paper's figure or claim it reproduces.
    paper: &'static str,
    /// Arguments after `natm-lab perf <command>` ([`Planned::command`]): quick, full.
    args: (&'static str, &'static str),
    /// What limits its numbers on this machine.
    limits: &'static str,
}

const SUITE: &[Planned] = &[
    Planned {
        name: "latency",
        title: "Round-trip latency, 32-byte messages",
        paper: "seed 000 Fig. 5; seed 001 §8 (1.3 ms round trip on a 1996 PC)",
        args: (
            "--stacks udp,udp-busy,tcp,quic,natm-be,natm-be-busy,natm-reliable --time 1s --runs 2",
            "--stacks udp,udp-busy,tcp,quic,natm-be,natm-be-busy,natm-reliable --time 3s --runs 3",
        ),
        limits: "One message in flight, so every round trip pays the full path twice: on the \
blocking stacks two wake-ups of a sleeping thread (about 30 µs each across cores in this VM, \
shared/NETLAB.md) and four system calls; the `-busy` stacks poll instead of sleeping and show \
what is left without wake-ups. natm best effort adds its engine's lock and PSB bookkeeping to \
UDP's path (inline sends: no scheduler hop); natm reliable adds SMART's acknowledgements. QUIC \
pays a hop from the calling thread into quinn's tokio driver task on each side, and TLS \
encryption of every packet. p99 and p99.9 are dominated by scheduling noise of the shared \
2-vCPU machine (other builds run at the same time); only medians are comparable across runs.",
    },
    Planned {
        name: "latency-same",
        title: "Round-trip latency, 32-byte messages, every thread on one CPU",
        paper: "issue 17 (natm best effort within 1.2× raw UDP in the same wait mode and placement)",
        args: (
            "--stacks udp,natm-be --pin same --time 1s --runs 2",
            "--stacks udp,natm-be --pin same --time 3s --runs 3",
        ),
        limits: "`--pin same`: the client, the echo server and natm's engine driver share one \
CPU, so each wake-up is a context switch on that CPU rather than an inter-processor interrupt; \
what is left is system calls and the scheduler. Busy-polling stacks are left out: two spinning \
threads on one CPU measure the scheduler's time slice, not the stack.",
    },
    Planned {
        name: "latency-split",
        title: "Round-trip latency, 32-byte messages, client and server on different CPUs",
        paper: "issue 17 (natm best effort within 1.2× raw UDP in the same wait mode and placement)",
        args: (
            "--stacks udp,natm-be,udp-busy,natm-be-busy --pin different --time 1s --runs 2",
            "--stacks udp,natm-be,udp-busy,natm-be-busy --pin different --time 3s --runs 3",
        ),
        limits: "`--pin different`: the client on one CPU, the echo server and natm's engine \
driver on the other, the same for every stack. Each blocking round trip pays two cross-CPU \
wake-ups; the busy-polling pair pays none, and shows the stacks' own cost. The machine's two \
vCPUs are shared with other work, which a spinning thread competes with.",
    },
    Planned {
        name: "stages",
        title: "Where the round trip goes along the natm stack",
        paper: "seed 000 §6–7 (their kernel's round trip broken down by layer)",
        args: (
            "--time 1s --runs 1",
            "--time 2s --runs 2",
        ),
        limits: "Timestamps (CLOCK_MONOTONIC, one clock: both hosts in one process) at the send call, the dispatch (inline on the caller's thread, or the driver's scheduler task for `-sched`), the adaptor hand-off, the receiving thread's read, the PSB's delivery and the `recv` return. The user-space segments are each well under a microsecond: a lock, PSB bookkeeping and one copy. The round trip is spent in the kernel: `sendmsg → read` is the system call, loopback delivery, the wake-up of the sleeping reader (which on loopback happens inside the sender's `sendmsg`, so that call's duration is shown apart, not summed) and its `recvmmsg`. `-sched` adds the driver's wake-up to each send (`send call → dispatch`). Reliable VCs add SMART's acknowledgement: the receiver sends it before returning the message, so `delivery → app recv` holds one more `sendmsg`, and the ACK competes with the data for the peer's reader.",
    },
    Planned {
        name: "throughput",
        title: "Throughput against message size",
        paper: "seed 000 Fig. 6; seed 001 Figs. 3–4 and its two-part fit (half-power ~2200 B)",
        args: (
            "--stacks udp,tcp-cubic,quic,natm-be,natm-reliable,natm-reliable-32k,natm-reliable-zc,natm-reliable-32k-zc,tcp-tls,natm-reliable-enc,natm-reliable-enc-zc --time 300ms --warmup 100ms --runs 1",
            "--stacks udp,tcp-cubic,quic,natm-be,natm-reliable,natm-reliable-32k,natm-reliable-zc,natm-reliable-32k-zc,tcp-tls,natm-reliable-enc,natm-reliable-enc-zc --time 1s --warmup 200ms --runs 3",
        ),
        limits: "Small messages are bound by per-message cost: a system call per message for \
UDP (one datagram each) and natm best effort (one TPDU each; natm reliable also runs SMART per \
TPDU), while TCP coalesces many small writes into large segments and reads many messages per \
call. Large messages are bound by copies: TCP (CUBIC, the reference) and UDP copy once each \
way in the kernel; natm copies the message into its PSB and sends 4 KiB TPDUs (32 KiB for \
`-32k`) in GSO batches, and its receiver gathers them into the caller's buffer; the `-zc` \
stacks hand the message over as a `Bytes` (`send_bytes`) and take it as slices of the receive \
areas (`recv_chunk`), so their only copies are the kernel's, as TCP's; QUIC encrypts every ~1.2–1.5 KB packet in user \
space, which caps it far below the kernel stacks on loopback. `natm-reliable-enc` is a call \
through two sigds with every TPDU sealed (AES-256-GCM), against TLS 1.3 (rustls, AES-256-GCM) \
over TCP cubic (`tcp-tls`): both encrypt in user space, TLS in 16 KiB records on one \
thread each way, natm per 4 KiB TPDU at transmission (the sender's driver seals what \
ACKs let out) and opens in place as it reads; `natm-reliable-enc-zc` is the same call \
with owned buffers, so the seal reads the application's message and the receiver takes \
opened TPDUs as slices. UDP above 65,507 B is sent as \
several datagrams and counts only what arrived. The fit's per-message cost `a` and per-byte \
cost `b` are in the table; throughput tends to 1/b.",
    },
    Planned {
        name: "guaranteed",
        title: "Guaranteed service against its reservation",
        paper: "seed 001 Fig. 5 (rate as requested from 4–8 KB messages)",
        args: (
            "--time 300ms --warmup 100ms --runs 1",
            "--time 1s --warmup 300ms --runs 2",
        ),
        limits: "Where the ratio is below 1, the sender cannot produce messages as fast as the \
bucket would let it: the per-message cost of the send path (see `cost`) limits small messages \
at high rates. At 1 Gbit/s the VC delivers about the rate that `cost` measures for sends \
through the driver's scheduler (`natm-be-sched` wall time: about 1.7 ms per 64 KiB here, \
300 Mbit/s): a VC over its rate leaves its TPDUs to the driver, which sends them when its \
timer fires, so the driver's path, not the bucket, \
is the limit (an observation from the two experiments, not a profile). Each point is \
measured over at least four message times, so at 1 Mbit/s a 64 KiB point takes over two seconds.",
    },
    Planned {
        name: "cost",
        title: "Cost of the send path",
        paper: "seed 000 Figs. 9–10 (95 µs per message, 35 µs per TPDU on a 66 MHz 486)",
        args: ("--time 100ms --warmup 30ms --runs 1", "--time 300ms --warmup 100ms --runs 3"),
        limits: "CPU time of the sending thread only (CLOCK_THREAD_CPUTIME_ID, user + system), \
so time blocked on a full queue and the driver's and receiver's work are not counted. With \
inline sends (`natm-be`) the thread runs the whole path down to `sendmsg`, so the per-TPDU \
cost includes a system call or a GSO segment; through the scheduler (`natm-be-sched`) it runs \
only the interface routine (copy into the PSB, queue, wake the driver), the paper's `t_send`. \
The fit is by least squares with relative weights; on a noisy shared machine single points \
can be off by 20 %.",
    },
    Planned {
        name: "overhead",
        title: "Per-layer overhead: bytes and CPU each layer adds",
        paper: "seed 002 Table 1 (bandwidth left after each layer, 140 Mbit/s TAXI)",
        args: (
            "--runs 1 --bytes 2MiB --bench-time 10ms",
            "--runs 3 --bytes 4MiB --bench-time 30ms",
        ),
        limits: "Bytes are counts, not estimates: the PSBs' TPDUs and ACKs, the cell \
reassembly's cells, the UDP sockets' datagrams and octets, and the loopback device of a network \
namespace made for each transfer (UDP segmentation offload off there, so every datagram is a \
packet with its own headers, as on a wire). They are exact and do not vary with load. The CPU \
columns do: each layer's figure is a microbenchmark of the codec the engine uses (the sending \
thread's CPU clock), the UDP/IP one `send(2)` per datagram where the engine batches up to 64 \
with GSO, and the whole-stack figure is the transfer's process CPU at both ends, which also \
holds the engine, the PSBs, receives and wake-ups the layer rows leave out.",
    },
    Planned {
        name: "livelock",
        title: "Receive livelock",
        paper: "seed 000 Figs. 7–8",
        args: (
            "--time 500ms --warmup 200ms --runs 1",
            "--time 2s --warmup 500ms --runs 3",
        ),
        limits: "The receiving application burns a fixed CPU time per message \
(CLOCK_THREAD_CPUTIME_ID, so time the CPU spends elsewhere does not count), which sets its \
capacity C; above C, what it is delivered depends on whether the engine stops reading the \
socket at the high watermark (on) or keeps reading and reassembling messages it will drop \
(off). The receiving host (driver and application) is pinned to one CPU and the sender to \
the other, as on the paper's one-CPU hosts; on loopback the kernel's share of receiving runs \
on the sender's CPU, so only natm's own wasted work competes with the application. Anything \
else running on the receiver's CPU lowers both settings.",
    },
    Planned {
        name: "calls",
        title: "Call setup and release through two sigds",
        paper: "seed 004 §7 (call setup in tens of milliseconds); issue 6's goal: median setup \
≤ 200 µs, ≥ 5,000 setups/s",
        args: (
            "--calls 200 --runs 1 --preauthorised",
            "--calls 1000 --runs 3 --preauthorised",
        ),
        limits: "Two `natm sigd` processes on loopback and both applications in the perf \
process, one caller calling and releasing in a loop (the rate with several callers: \
`--parallel 4`, docs/PERFORMANCE.md). A setup crosses process hand-offs of ~30 µs each on \
this VM: six with explicit accept (app → sigd A → sigd B → listener → sigd B → sigd A → app), \
four when the listener pre-authorised its calls, two in direct mode (the transport handshake \
alone, no sigd). The per-call CPU columns come from /proc and include both hosts' engines.",
    },
    Planned {
        name: "calls-16",
        title: "Call setup and release through two sigds, 16 callers",
        paper: "issue 17: setups/s does not fall as callers grow from 1 to 256; ≥ 20,000 \
setups/s with 16 callers",
        args: (
            "--calls 1000 --runs 1 --parallel 16 --preauthorised",
            "--calls 4000 --runs 3 --parallel 16 --preauthorised",
        ),
        limits: "As `calls`, with 16 application threads calling and releasing in a loop at \
once. All of them, both sigds and both hosts' engines share the machine's two vCPUs, so \
setups per second are bound by the CPU a call costs (the CPU/call columns) divided into two \
CPUs, less whatever else runs.",
    },
    Planned {
        name: "calls-256",
        title: "Call setup and release through two sigds, 256 callers",
        paper: "issue 17: setups/s does not fall as callers grow from 1 to 256",
        args: (
            "--calls 1024 --runs 1 --parallel 256 --preauthorised --backlog 256",
            "--calls 4096 --runs 3 --parallel 256 --preauthorised --backlog 256",
        ),
        limits: "As `calls-16`, with 256 calling threads: each waits for its own answer, so \
what grows with the callers is the scheduler's work and the sigds' tables, not the wake-ups.",
    },
    Planned {
        name: "isolation",
        title: "Isolation of a guaranteed VC",
        paper: "seed 000 §2, §5.1",
        args: (
            "--time 1s --warmup 300ms --runs 1",
            "--time 2s --warmup 500ms --runs 3",
        ),
        limits: "All VCs share one engine per host and the machine's two vCPUs: the flooding \
best-effort and bulk reliable VCs compete for CPU, not only for the link, so the guaranteed \
VC's rate depends on the scheduler's priority as much as on the bucket. Delays are one clock \
(one process), measured from `send` to delivery.",
    },
    Planned {
        name: "loss",
        title: "Goodput against random loss between two namespaces",
        paper: "seed 000 §5.3.3 (packet-pair and SMART keep a transfer going under loss)",
        args: (
            "--losses 0,1,5,10 --rtt 0,20ms --loss-unit packet --time 1s --warmup 300ms --runs 1",
            "--losses 0,1,5,10 --rtt 0,20ms --loss-unit packet --time 3s --warmup 500ms --runs 2",
        ),
        limits: "A 100 Mbit/s tbf link through a delay line in a third namespace: every frame \
is copied by a user-space program (AF_PACKET sockets), at once for the short path and after \
10 ms each way for the 20 ms one, so the short RTT is that program's forwarding time (ping's \
figure is in the table). Loss-based congestion control recovers quickly on the short path and \
collapses at 20 ms (CUBIC); BBR and natm's packet-pair do not back off on random loss. \
pp/(1-p)C is natm-pp's goodput over the loss-free share of the link. The nftables rule drops \
link packets, as a real link loses them (`--loss-unit packet`): natm cuts its TPDUs to the \
path MTU, so a TPDU is one link packet and sees the nominal loss, as a TCP segment does. Only \
the data direction loses packets; acknowledgements are never dropped.",
    },
    Planned {
        name: "scale",
        title: "Many connections in one process",
        paper: "issue 17: 10,000 concurrent VCs in one process, the per-VC cost flat",
        args: (
            "--counts 100,1000 --time 500ms --warmup 200ms",
            "--counts 100,1000,10000 --time 2s --warmup 500ms",
        ),
        limits: "The two ends of every connection are in two processes (a host each, direct \
mode on loopback); the memory and descriptors per connection are those of both ends. One \
thread sends round robin while one receives for all of them, each through its host's one \
driver thread: the aggregate is bound by those threads, not by the count. Each VC end has its \
own UDP socket, so a connection costs two descriptors and two kernel sockets; setups per \
second are the direct-mode handshake's with several callers. Each count runs again over kernel \
TCP (`tcp`: the same processes, sender and cap, an epoll loop receiving), whose ACKs stay in \
the kernel where each of natm's crosses user space at both ends; TCP's socket buffers are the \
kernel's, in neither process's memory.",
    },
    Planned {
        name: "counts",
        title: "The work behind the ratios: system calls, wake-ups and ACKs",
        paper: "issue 30 (the paper's §7: waking on events, not polling, took the round trip \
from 120 ms to 1.44 ms)",
        args: ("--runs 1 --time 1s", "--runs 3 --time 2s"),
        limits: "Counted by the kernel for every thread of the process over each run's \
measured interval (the raw_syscalls:sys_enter tracepoint, voluntary context switches), one \
stack in the process at a time; needs root. Counts per MB vary little with load, the rates \
beside them do; preemptions are the other CPU's load as much as the stack's.",
    },
];

/// How long one experiment may run before it is killed.
fn limit(quick: bool) -> Duration {
    Duration::from_secs(if quick { 300 } else { 1200 })
}

/// Stop a child we started: SIGTERM first, so that `loss` removes its namespaces,
/// then SIGKILL if it is still there after a few seconds; reap it.
fn stop(child: &mut std::process::Child) {
    use rustix::process::{kill_process, Pid, Signal};
    let _ = kill_process(Pid::from_child(child), Signal::TERM);
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// What one child run produced.
struct Outcome {
    command: String,
    table: String,
    error: Option<String>,
    seconds: f64,
}

impl Planned {
    /// The `natm-lab perf` subcommand: the name before any `-` (`latency-same` is
    /// `natm-lab perf latency`, `calls-16` is `natm-lab perf calls`, with their own arguments
    /// and their own documents).
    fn command(&self) -> &'static str {
        self.name.split('-').next().unwrap_or(self.name)
    }
}

fn run_one(exe: &Path, out: &Path, e: &Planned, quick: bool) -> Outcome {
    let args = if quick { e.args.0 } else { e.args.1 };
    let json = out.join(format!("{}.json", e.name));
    let svg = out.join(format!("{}.svg", e.name));
    let mut argv: Vec<String> = vec!["perf".into(), e.command().into()];
    argv.extend(args.split_whitespace().map(String::from));
    argv.extend([
        "--save".into(),
        json.display().to_string(),
        "--figure".into(),
        svg.display().to_string(),
    ]);
    let shown: Vec<String> = argv
        .iter()
        .map(|a| {
            a.replace(&json.display().to_string(), &format!("{}.json", e.name))
                .replace(&svg.display().to_string(), &format!("{}.svg", e.name))
        })
        .collect();
    let command = format!("natm-lab {}", shown.join(" "));
    let start = Instant::now();
    let fail = |error: String, table: String| Outcome {
        command: command.clone(),
        table,
        error: Some(error),
        seconds: start.elapsed().as_secs_f64(),
    };
    let mut child = match Command::new(exe)
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot start: {e}"), String::new()),
    };
    let mut so = child.stdout.take();
    let mut se = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let (mut o, mut e) = (String::new(), String::new());
        if let Some(s) = so.as_mut() {
            let _ = s.read_to_string(&mut o);
        }
        if let Some(s) = se.as_mut() {
            let _ = s.read_to_string(&mut e);
        }
        (o, e)
    });
    let deadline = start + limit(quick);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) if Instant::now() >= deadline => {
                stop(&mut child);
                break Err(anyhow::anyhow!(
                    "stopped after {} s",
                    limit(quick).as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => break Err(anyhow::anyhow!("wait: {e}")),
        }
    };
    let (table, stderr) = reader.join().unwrap_or_default();
    match status {
        Ok(s) if s.success() => Outcome {
            command,
            table,
            error: None,
            seconds: start.elapsed().as_secs_f64(),
        },
        Ok(_) => fail(
            stderr
                .lines()
                .last()
                .unwrap_or("failed")
                .trim_start_matches("natm: ")
                .to_string(),
            table,
        ),
        Err(e) => fail(format!("{e:#}"), table),
    }
}

/// Run `natm-lab perf all`.
pub(crate) fn cmd(a: &AllArgs) -> natm_cli::cli::CliResult {
    for s in &a.skip {
        if !SUITE.iter().any(|e| e.name == s.trim()) {
            let names: Vec<&str> = SUITE.iter().map(|e| e.name).collect();
            return Err(anyhow::anyhow!(
                "--skip {s}: no such experiment ({})",
                names.join(", ")
            ));
        }
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let exe = std::env::current_exe().context("own executable")?;
    let chosen: Vec<&Planned> = SUITE
        .iter()
        .filter(|e| !a.skip.iter().any(|s| s.trim() == e.name))
        .collect();
    let pb = super::progress(chosen.len());
    let started = Instant::now();
    let mut outcomes = Vec::new();
    for e in &chosen {
        pb.set_message(format!("{} ({})", e.name, e.title));
        let mut o = run_one(&exe, &a.out, e, a.quick);
        if o.error.is_none() {
            if let Err(err) = check_document(&a.out, e.name, e.command()) {
                o.error = Some(format!("{err:#}"));
            }
        }
        let line = format!(
            "{:<11} {:>6.0} s  {}",
            e.name,
            o.seconds,
            o.error.as_deref().unwrap_or("ok")
        );
        // A hidden bar (stderr not a terminal) prints nothing: say it plainly then.
        if pb.is_hidden() {
            eprintln!("{line}");
        } else {
            pb.println(line);
        }
        outcomes.push(o);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let report = report(a, &chosen, &outcomes, started.elapsed());
    let path = a.out.join("report.md");
    std::fs::write(&path, report).with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}", path.display());
    let failed: Vec<&str> = chosen
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| o.error.is_some())
        .map(|(e, _)| e.name)
        .collect();
    if failed.len() == chosen.len() && !failed.is_empty() {
        return Err(anyhow::anyhow!(
            "every experiment failed ({})",
            failed.join(", ")
        ));
    }
    Ok(())
}

/// This run's document of experiment `name`, as its type; `None` if it was not written
/// or does not parse (the headline then says "not measured").
fn load<T: serde::de::DeserializeOwned>(out: &Path, name: &str) -> Option<T> {
    let text = std::fs::read_to_string(out.join(format!("{name}.json"))).ok()?;
    serde_json::from_str(&text).ok()
}

/// Whether `name`'s document in `out` is the result type of its `command`: a child that
/// succeeded but wrote something else is reported as failed, not read as missing.
fn check_document(out: &Path, name: &str, command: &str) -> anyhow::Result<()> {
    fn parse<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str::<T>(&text)
            .map(drop)
            .with_context(|| format!("{} is not the experiment's document", path.display()))
    }
    let path = out.join(format!("{name}.json"));
    match command {
        "latency" => parse::<results::Latency>(&path),
        "stages" => parse::<results::Stages>(&path),
        "throughput" => parse::<results::Throughput>(&path),
        "guaranteed" => parse::<results::Guaranteed>(&path),
        "cost" => parse::<results::Cost>(&path),
        "overhead" => parse::<results::Overhead>(&path),
        "livelock" => parse::<results::Livelock>(&path),
        "isolation" => parse::<results::Isolation>(&path),
        "loss" => parse::<results::Loss>(&path),
        "calls" => parse::<results::Calls>(&path),
        "scale" => parse::<results::Scale>(&path),
        "counts" => parse::<super::counts::CountsResult>(&path),
        other => anyhow::bail!("no document type for experiment {other}"),
    }
}

/// A headline: what is compared, the ratio, and the two figures it comes from.
type Headline = (String, Option<f64>, String);

/// `a / b` when both were measured.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?)
}

/// A figure for the "from" column; NaN (shown as such) when not measured.
fn or_nan(x: Option<f64>) -> f64 {
    x.unwrap_or(f64::NAN)
}

/// The issue's headline ratios, from this run's JSON: (what, value, how). Only the
/// JSON of experiments that `ran` counts: a file left in `out` by an earlier run of a
/// skipped experiment is not this run's.
pub(crate) fn headlines(out: &Path, ran: &[&str]) -> Vec<Headline> {
    fn read<T: serde::de::DeserializeOwned>(out: &Path, ran: &[&str], name: &str) -> Option<T> {
        ran.contains(&name).then(|| load(out, name)).flatten()
    }
    let mut h = Vec::new();
    h.extend(latency_headlines(
        read(out, ran, "latency"),
        read(out, ran, "latency-same"),
        read(out, ran, "latency-split"),
    ));
    h.extend(throughput_headlines(read(out, ran, "throughput")));
    h.extend(loss_headlines(read(out, ran, "loss")));
    h.extend(calls_headlines(read(out, ran, "calls")));
    h.extend(callers_headlines(
        read(out, ran, "calls"),
        &[
            (16, read(out, ran, "calls-16")),
            (256, read(out, ran, "calls-256")),
        ],
    ));
    h.extend(scale_headlines(read(out, ran, "scale")));
    h.extend(livelock_headlines(read(out, ran, "livelock")));
    h.extend(counts_headlines(read(out, ran, "counts")));
    h
}

/// natm against TCP in system calls and wake-ups per MB of reliable bulk, and against
/// raw UDP in system calls per round trip (`counts`): medians of the runs.
fn counts_headlines(doc: Option<super::counts::CountsResult>) -> Vec<Headline> {
    use super::counts::CountRun;
    let per = |bulk: bool, stack: &str, what: fn(&CountRun) -> u64| {
        let d = doc.as_ref()?;
        let rows = if bulk { &d.bulk } else { &d.rtt };
        let s = rows.iter().find(|s| s.stack == stack)?;
        let v: Vec<f64> = s.runs.iter().map(|r| what(r) as f64 / r.units).collect();
        super::stats::median(&v)
    };
    let syscalls: fn(&CountRun) -> u64 = |r| r.syscalls;
    let wakeups: fn(&CountRun) -> u64 = |r| r.wakeups;
    let mut h = Vec::new();
    for (what, label, f) in [
        ("system calls", "syscalls", syscalls),
        ("wake-ups", "wake-ups", wakeups),
    ] {
        let (n, t) = (per(true, "natm-reliable", f), per(true, "tcp-cubic", f));
        h.push((
            format!("natm-reliable / TCP cubic {what} per MB, 64 KiB messages"),
            ratio(n, t),
            format!("{:.1} / {:.1} {label}/MB", or_nan(n), or_nan(t)),
        ));
    }
    let (n, u) = (per(false, "natm-be", syscalls), per(false, "udp", syscalls));
    h.push((
        "natm best effort / raw UDP system calls per 32 B round trip".into(),
        ratio(n, u),
        format!("{:.1} / {:.1}", or_nan(n), or_nan(u)),
    ));
    h
}

/// natm best effort against raw UDP in the same wait mode, at each placement measured:
/// unpinned (`latency`), every thread on one CPU (`latency-same`), client and server on
/// different CPUs (`latency-split`). Each ratio's two figures come from one run.
fn latency_headlines(
    unpinned: Option<results::Latency>,
    same: Option<results::Latency>,
    split: Option<results::Latency>,
) -> Vec<Headline> {
    let rtt = |doc: &Option<results::Latency>, stack: &str| {
        doc.as_ref()?
            .results
            .iter()
            .find(|r| r.stack == stack)
            .map(|r| r.median_us)
    };
    let blocking = ("natm-be", "udp", "blocking");
    let busy = ("natm-be-busy", "udp-busy", "busy-polling");
    [
        (&unpinned, "threads unpinned", blocking),
        (&unpinned, "threads unpinned", busy),
        (&same, "every thread on one CPU", blocking),
        (&split, "client and server on different CPUs", blocking),
        (&split, "client and server on different CPUs", busy),
    ]
    .into_iter()
    .map(|(doc, placement, (natm, udp, wait))| {
        (
            format!("natm best effort / raw UDP, 32 B round trip (median), {wait}, {placement}"),
            ratio(rtt(doc, natm), rtt(doc, udp)),
            format!(
                "{:.1} µs / {:.1} µs",
                or_nan(rtt(doc, natm)),
                or_nan(rtt(doc, udp))
            ),
        )
    })
    .collect()
}

fn throughput_headlines(doc: Option<results::Throughput>) -> Vec<Headline> {
    let bps = |stack: &str, size: usize| {
        doc.as_ref()?
            .results
            .iter()
            .find(|r| r.stack == stack && r.size == size)
            .map(|r| r.bps)
    };
    // Issue 17's goal: natm reliable against TCP CUBIC (the strongest reference on
    // loopback) and QUIC, at 64 KiB and 1 MiB messages.
    let mut h = Vec::new();
    let mut push = |natm: &str, other: &str, label: &str, size: usize, at: &str| {
        h.push((
            format!("{natm} / {label} throughput, {at} messages"),
            ratio(bps(natm, size), bps(other, size)),
            format!(
                "{:.2} / {:.2} Gbit/s",
                or_nan(bps(natm, size)) / 1e9,
                or_nan(bps(other, size)) / 1e9
            ),
        ));
    };
    for (size, at) in [(64 << 10, "64 KiB"), (1 << 20, "1 MiB")] {
        for (other, label) in [("tcp-cubic", "TCP cubic"), ("quic", "QUIC")] {
            for natm in [
                "natm-reliable",
                "natm-reliable-32k",
                "natm-reliable-zc",
                "natm-reliable-32k-zc",
            ] {
                push(natm, other, label, size, at);
            }
        }
        // Issue 30: encrypted, against the strongest encrypted stream here.
        for (other, label) in [
            ("tcp-tls", "TLS 1.3 over TCP cubic"),
            ("tcp-cubic", "TCP cubic"),
        ] {
            push("natm-reliable-enc", other, label, size, at);
        }
        // The same call with owned buffers (`send` of a `Bytes`, `recv_chunk`), as the
        // plain `-zc` rows: what a sealed call costs when the seal is its only pass.
        push(
            "natm-reliable-enc-zc",
            "tcp-tls",
            "TLS 1.3 over TCP cubic",
            size,
            at,
        );
    }
    h
}

fn loss_headlines(doc: Option<results::Loss>) -> Vec<Headline> {
    let good = |stack: &str, loss: f64, rtt: f64| {
        doc.as_ref()?
            .results
            .iter()
            .find(|r| r.stack == stack && r.loss_percent == loss && r.rtt_ms == rtt)
            .map(|r| r.bps)
    };
    let rtts: Vec<f64> = doc.as_ref().map_or(vec![0.0], |d| {
        let mut v: Vec<f64> = Vec::new();
        for r in &d.results {
            if !v.contains(&r.rtt_ms) {
                v.push(r.rtt_ms);
            }
        }
        v
    });
    let mut h = Vec::new();
    for &rtt in &rtts {
        let at = if rtt > 0.0 {
            format!(", RTT + {rtt} ms")
        } else {
            String::new()
        };
        for l in [1.0, 5.0] {
            for tcp in ["tcp-cubic", "tcp-bbr"] {
                h.push((
                    format!("natm-pp / {tcp} goodput at {l} % loss{at}"),
                    ratio(good("natm-pp", l, rtt), good(tcp, l, rtt)),
                    format!(
                        "{:.1} / {:.1} Mbit/s",
                        or_nan(good("natm-pp", l, rtt)) / 1e6,
                        or_nan(good(tcp, l, rtt)) / 1e6
                    ),
                ));
            }
        }
    }
    h
}

fn scale_headlines(doc: Option<results::Scale>) -> Vec<Headline> {
    let Some(d) = doc else { return Vec::new() };
    let (Some(lo), Some(hi)) = (d.steps.first(), d.steps.last()) else {
        return Vec::new();
    };
    if lo.connections == hi.connections {
        return Vec::new();
    }
    // The reference's steps at the same two counts (`perf scale --stacks natm,tcp`).
    let tcp_at = |n: usize| d.tcp_steps.iter().find(|s| s.connections == n);
    let tcp = tcp_at(lo.connections).zip(tcp_at(hi.connections));
    let tcp_growth = tcp.map_or(String::new(), |(l, h)| {
        format!(
            "; kernel TCP {:.2}× ({:.2} / {:.2} ms/MB)",
            h.cpu_ms_per_mb / l.cpu_ms_per_mb,
            h.cpu_ms_per_mb,
            l.cpu_ms_per_mb
        )
    });
    let mut h = vec![
        (
            format!(
                "memory per connection, {} / {} connections (idle)",
                hi.connections, lo.connections
            ),
            Some(hi.rss_kib_per_connection_idle / lo.rss_kib_per_connection_idle),
            format!(
                "{:.1} / {:.1} KiB",
                hi.rss_kib_per_connection_idle, lo.rss_kib_per_connection_idle
            ),
        ),
        (
            format!(
                "CPU per byte, {} / {} connections",
                hi.connections, lo.connections
            ),
            Some(hi.cpu_ms_per_mb / lo.cpu_ms_per_mb),
            format!(
                "{:.2} / {:.2} ms/MB{tcp_growth}",
                hi.cpu_ms_per_mb, lo.cpu_ms_per_mb
            ),
        ),
    ];
    if let Some((_, t)) = tcp {
        h.push((
            format!(
                "CPU per byte at {} connections, natm / kernel TCP",
                hi.connections
            ),
            Some(hi.cpu_ms_per_mb / t.cpu_ms_per_mb),
            format!("{:.2} / {:.2} ms/MB", hi.cpu_ms_per_mb, t.cpu_ms_per_mb),
        ));
    }
    h
}

fn calls_headlines(doc: Option<results::Calls>) -> Vec<Headline> {
    let direct = doc.as_ref().map(|d| d.direct.median_setup_us);
    let modes = [
        (
            "explicit accept",
            doc.as_ref().map(|d| d.sigd.median_setup_us),
        ),
        (
            "pre-authorised listener",
            doc.as_ref()
                .and_then(|d| d.sigd_preauthorised.as_ref())
                .map(|m| m.median_setup_us),
        ),
    ];
    modes
        .into_iter()
        .map(|(label, setup)| {
            (
                format!("call setup through two sigds ({label}) / direct mode, median"),
                ratio(setup, direct),
                format!("{:.0} µs / {:.0} µs", or_nan(setup), or_nan(direct)),
            )
        })
        .collect()
}

/// The goal for call setup with 16 callers through two sigds, setups per second.
const SETUPS_GOAL_16: f64 = 20_000.0;

/// Setups per second through two sigds (explicit accept) with many callers, against one
/// caller's in the same suite, and with 16 callers against the issue's goal.
fn callers_headlines(
    one: Option<results::Calls>,
    many: &[(usize, Option<results::Calls>)],
) -> Vec<Headline> {
    let rate = |d: &Option<results::Calls>| d.as_ref().map(|d| d.sigd.setups_per_s);
    let base = rate(&one);
    let mut h: Vec<Headline> = many
        .iter()
        .map(|(n, d)| {
            (
                format!("setups/s through two sigds, {n} callers / 1 caller"),
                ratio(rate(d), base),
                format!("{:.0} / {:.0} per s", or_nan(rate(d)), or_nan(base)),
            )
        })
        .collect();
    if let Some((_, d)) = many.iter().find(|(n, _)| *n == 16) {
        h.push((
            format!("setups/s through two sigds, 16 callers / the goal ({SETUPS_GOAL_16:.0})"),
            rate(d).map(|r| r / SETUPS_GOAL_16),
            format!("{:.0} / {SETUPS_GOAL_16:.0} per s", or_nan(rate(d))),
        ));
    }
    h
}

fn livelock_headlines(doc: Option<results::Livelock>) -> Vec<Headline> {
    let at_10 = |on: bool| {
        doc.as_ref()?
            .results
            .iter()
            .find(|r| r.load == 10.0 && r.watermarks == on)
            .map(|r| (r.of_peak, r.delivered_bps))
    };
    [(true, "on (Fig. 8)"), (false, "off (Fig. 7)")]
        .into_iter()
        .map(|(on, label)| {
            (
                format!(
                    "livelock at 10× the receiver's capacity, watermarks {label}: delivered / peak"
                ),
                at_10(on).map(|(p, _)| p),
                format!(
                    "{:.0} Mbit/s delivered",
                    at_10(on).map_or(f64::NAN, |(_, b)| b / 1e6)
                ),
            )
        })
        .collect()
}

fn report(a: &AllArgs, chosen: &[&Planned], outcomes: &[Outcome], took: Duration) -> String {
    let mut r = String::new();
    let m = results::Machine::now();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let _ = writeln!(
        r,
        "# natm-lab perf: the measurements of seed 000 §6 on this machine\n"
    );
    let _ = writeln!(
        r,
        "Machine: {} × {cpu}, Linux {}, load average {} at the end. Suite: `natm-lab perf all{}` \
         ({} mode, {:.0} s). Every experiment interleaves the stacks it compares and reports \
         medians of runs; everything is on loopback except `loss`. The machine is a shared \
         2-vCPU VM: other builds ran at the same time, so compare ratios within one table, \
         not absolute numbers across runs.\n",
        m.cpus,
        m.kernel.as_deref().unwrap_or("?"),
        m.loadavg.as_deref().unwrap_or("?"),
        if a.quick { " --quick" } else { "" },
        if a.quick { "quick" } else { "full" },
        took.as_secs_f64()
    );
    let _ = writeln!(r, "## Headline ratios (one run)\n");
    let _ = writeln!(r, "| ratio | value | from |\n|---|---:|---|");
    let ran: Vec<&str> = chosen
        .iter()
        .zip(outcomes)
        .filter(|(_, o)| o.error.is_none())
        .map(|(e, _)| e.name)
        .collect();
    for (what, v, how) in headlines(&a.out, &ran) {
        let (v, how) = match v.filter(|v| v.is_finite()) {
            Some(v) => (format!("{v:.2}"), how),
            None => ("–".to_string(), "not measured in this run".to_string()),
        };
        let _ = writeln!(r, "| {what} | {v} | {how} |");
    }
    let _ = writeln!(r);
    for (e, o) in chosen.iter().zip(outcomes) {
        let _ = writeln!(r, "## {} (`{}`)\n", e.title, e.name);
        let _ = writeln!(r, "Reproduces: {}.\n", e.paper);
        let _ = writeln!(r, "```sh\n{}\n```\n", o.command);
        if let Some(err) = &o.error {
            let _ = writeln!(r, "**Not measured:** {err}\n");
        }
        if !o.table.trim().is_empty() {
            let _ = writeln!(r, "```text\n{}\n```\n", o.table.trim_end());
        }
        if o.error.is_none() {
            let _ = writeln!(
                r,
                "![{}]({}.png)\n\n[SVG]({}.svg) · [JSON]({}.json)\n",
                e.title, e.name, e.name, e.name
            );
        }
        let _ = writeln!(r, "What limits these numbers: {}\n", e.limits);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed documents give every headline (all were measured there):
    /// the typed reading finds the rows the string keys found.
    #[test]
    fn headlines_come_from_the_committed_documents() {
        let docs = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/perf"));
        let all: Vec<&str> = SUITE.iter().map(|e| e.name).collect();
        let h = headlines(docs, &all);
        assert_eq!(h.len(), 48);
        for (what, v, _) in &h {
            assert!(v.is_some_and(f64::is_finite), "{what}: {v:?}");
        }
        for e in SUITE {
            check_document(docs, e.name, e.command()).expect("each committed document is its type");
        }
        // Nothing ran: nothing is read, even though the files are there.
        assert!(headlines(docs, &[]).iter().all(|(_, v, _)| v.is_none()));
    }

    /// Throughput's headlines compare natm with tcp-cubic and QUIC at 64 KiB and
    /// 1 MiB: the committed document, its `natm-reliable-zc` rows set to twice
    /// `natm-reliable`'s rate, gives ratios to tcp-cubic twice as large.
    #[test]
    fn counts_headlines_divide_per_mb_and_per_round_trip_medians() {
        use super::super::counts::{CountRun, CountsResult, StackCounts};
        let run = |units: f64, syscalls: u64, wakeups: u64| CountRun {
            units,
            figure: 1.0,
            syscalls,
            wakeups,
            preempted: 0,
            acks: None,
        };
        let stack = |name: &str, runs: Vec<CountRun>| StackCounts {
            stack: name.into(),
            runs,
        };
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/perf/counts.json"
        ));
        let mut doc: CountsResult =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        doc.bulk = vec![
            stack(
                "natm-reliable",
                vec![run(10.0, 800, 50), run(20.0, 1_600, 100)],
            ),
            stack("tcp-cubic", vec![run(10.0, 250, 50)]),
        ];
        doc.rtt = vec![
            stack("natm-be", vec![run(1_000.0, 8_000, 2_000)]),
            stack("udp", vec![run(500.0, 2_000, 1_000)]),
        ];
        let h = counts_headlines(Some(doc));
        let ratios: Vec<Option<f64>> = h.iter().map(|(_, r, _)| *r).collect();
        assert_eq!(
            ratios,
            vec![Some(80.0 / 25.0), Some(1.0), Some(2.0)],
            "{h:#?}"
        );
        assert!(counts_headlines(None).iter().all(|(_, r, _)| r.is_none()));
    }

    #[test]
    fn throughput_headlines_compare_with_tcp_cubic_at_64_kib_and_1_mib() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/perf/throughput.json"
        ));
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let rows = v["results"].as_array_mut().unwrap();
        let base: Vec<(u64, f64)> = rows
            .iter()
            .filter(|r| r["stack"] == "natm-reliable")
            .filter_map(|r| Some((r["size"].as_u64()?, r["bps"].as_f64()?)))
            .collect();
        let mut doubled = 0;
        for r in rows.iter_mut().filter(|r| r["stack"] == "natm-reliable-zc") {
            let size = r["size"].as_u64().unwrap();
            if let Some((_, bps)) = base.iter().find(|(s, _)| *s == size) {
                r["bps"] = (2.0 * bps).into();
                doubled += 1;
            }
        }
        assert!(doubled >= 2, "the document has natm-reliable-zc rows");
        let doc: results::Throughput = serde_json::from_value(v).unwrap();
        let h = throughput_headlines(Some(doc));
        assert_eq!(h.len(), 22);
        let get = |what: &str| {
            h.iter()
                .find(|(w, _, _)| w == what)
                .and_then(|(_, v, _)| *v)
                .unwrap_or_else(|| panic!("no {what}: {h:#?}"))
        };
        for at in ["64 KiB", "1 MiB"] {
            let base = get(&format!(
                "natm-reliable / TCP cubic throughput, {at} messages"
            ));
            let zc = get(&format!(
                "natm-reliable-zc / TCP cubic throughput, {at} messages"
            ));
            assert!(base.is_finite() && base > 0.0, "{at}: {base}");
            assert!((zc / base - 2.0).abs() < 1e-9, "{at}: {zc} vs {base}");
            let q = get(&format!(
                "natm-reliable-zc / QUIC throughput, {at} messages"
            ));
            assert!(q.is_finite() && q > 0.0);
        }
    }
}
