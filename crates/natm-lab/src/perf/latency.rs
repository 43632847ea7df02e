//! Round-trip latency: one message in flight at a time. The client sends a message,
//! the server echoes it, and the client times each round trip with
//! [`std::time::Instant`], from just before `send` to just after the echo's `recv`.

use anyhow::Context as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::stack::{is_timeout, Endpoint, Marks, NoMarks, Params, Stack};

/// An echo not back after this long counts as lost; the client sends the next message.
const LOSS_TIMEOUT: Duration = Duration::from_millis(500);

/// How long one latency run lasts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatencyConfig {
    /// Message size in bytes (each way).
    pub(crate) size: usize,
    /// Round trips during this time after start are discarded.
    pub(crate) warmup: Duration,
    /// Measure for at most this long after the warm-up…
    pub(crate) time: Duration,
    /// …and for at most this many round trips.
    pub(crate) count: usize,
    /// Record the stage timestamps (`natm::stages`) of the measured round trips.
    pub(crate) stages: bool,
    /// Where the client and server threads run (`--pin`); `None`: where the kernel
    /// puts them.
    pub(crate) placement: Option<Placement>,
}

/// `natm-lab perf latency --pin`: where the client and echo-server threads (and a natm
/// host's engine driver thread) run, the same for every stack in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Pin {
    /// Not pinned: the kernel places every thread.
    #[default]
    None,
    /// Every thread on one core (the first this process may use).
    Same,
    /// The client on one core; the server and natm's driver on another (`split`).
    #[value(alias = "split")]
    Different,
}

/// CPUs for each side of a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The client's thread.
    pub(crate) client: usize,
    /// The echo server's thread and a natm host's driver thread.
    pub(crate) server: usize,
}

impl Pin {
    /// The CPUs for this placement among those the process may use; an error if
    /// `different` is asked for with one CPU.
    pub(crate) fn placement(self) -> anyhow::Result<Option<Placement>> {
        if self == Pin::None {
            return Ok(None);
        }
        let cpus = natm::ulib::current_cpus().context("sched_getaffinity")?;
        let (client, server) = match (self, cpus.as_slice()) {
            (_, []) => anyhow::bail!("this process may run on no CPU"),
            (Pin::Same, [c, ..]) => (*c, *c),
            (_, [c, s, ..]) => (*c, *s),
            (_, [_]) => anyhow::bail!(
                "--pin different needs two CPUs; this process may only use CPU {}",
                cpus[0]
            ),
        };
        Ok(Some(Placement { client, server }))
    }
}

/// Pin the calling thread to `cpu` when a placement is given.
fn pin(cpu: Option<usize>) -> anyhow::Result<()> {
    if let Some(c) = cpu {
        natm::ulib::pin_current_thread(&[c]).with_context(|| format!("pin a thread to CPU {c}"))?;
    }
    Ok(())
}

/// What one run measured.
#[derive(Debug)]
pub(crate) struct Samples {
    /// Round-trip times after the warm-up, in nanoseconds, in the order measured.
    pub(crate) rtt_ns: Vec<u64>,
    /// Messages whose echo did not come back within [`LOSS_TIMEOUT`].
    pub(crate) lost: u64,
    /// The connection's settings as granted.
    pub(crate) params: Params,
    /// With [`LatencyConfig::stages`]: the round trips matched from the stage records
    /// after the warm-up (the ring keeps the last ~18,000), and how many did not match.
    pub(crate) stages: Option<(Vec<natm::stages::RoundTrip>, usize)>,
}

/// Measure round trips over a fresh connection of `stack`: the server echoes on its own
/// thread, the client sends and times on the calling thread. Bounded by
/// `warmup + time` (plus at most two loss timeouts when the interval has no round trip
/// yet) and by `count` samples.
pub(crate) fn run(stack: &dyn Stack, cfg: &LatencyConfig) -> anyhow::Result<Samples> {
    run_marked(stack, cfg, &NoMarks)
}

/// As [`run`], telling `marks` when the measured interval starts (the first round trip
/// after the warm-up) and ends (after the last), on the client's thread.
pub(crate) fn run_marked(
    stack: &dyn Stack,
    cfg: &LatencyConfig,
    marks: &dyn Marks,
) -> anyhow::Result<Samples> {
    if let Some(max) = stack.max_message() {
        if cfg.size > max {
            return Err(anyhow::anyhow!(
                "carries at most {max} B in one message; measure latency with --size {max} or less"
            ));
        }
    }
    let pair = stack.connect(cfg.size).context("cannot connect")?;
    let mut client = pair.client;
    let mut server = pair.server;
    let stop_flag = AtomicBool::new(false);
    let stop = &stop_flag;
    // The server stops when told, or at the latest a while after the client must have.
    let server_deadline = Instant::now() + cfg.warmup + cfg.time + 2 * LOSS_TIMEOUT;

    thread::scope(|s| {
        let server_cpu = cfg.placement.as_ref().map(|p| p.server);
        let client_cpu = cfg.placement.as_ref().map(|p| p.client);
        let echo = s.spawn(move || -> anyhow::Result<()> {
            pin(server_cpu)?;
            let mut copy = Vec::with_capacity(cfg.size);
            while !stop.load(Ordering::Relaxed) && Instant::now() < server_deadline {
                match server.recv() {
                    Ok(Some(m)) => {
                        copy.clear();
                        copy.extend_from_slice(m);
                    }
                    Ok(None) => continue,
                    Err(e) => return Err(anyhow::anyhow!("server recv: {e}")),
                }
                loop {
                    match server.send(&copy) {
                        Ok(()) => break,
                        Err(e) if is_timeout(&e) => {
                            if stop.load(Ordering::Relaxed) {
                                return Ok(());
                            }
                        }
                        Err(e) => return Err(anyhow::anyhow!("server send: {e}")),
                    }
                }
            }
            Ok(())
        });

        let from_ns = natm::stages::now_ns() + cfg.warmup.as_nanos() as u64;
        if cfg.stages {
            natm::stages::start();
        }
        // The client on a thread of its own, so pinning it leaves the caller's
        // placement alone for the next stack.
        let client = &mut *client;
        let result = s
            .spawn(move || {
                pin(client_cpu)?;
                client_loop(client, cfg, marks)
            })
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("client thread panicked")));
        stop.store(true, Ordering::Relaxed);
        let served = echo
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("server thread panicked")));
        let stages = cfg.stages.then(|| {
            let (mut trips, missed) = natm::stages::round_trips(&natm::stages::stop());
            trips.retain(|t| t.start_ns >= from_ns);
            (trips, missed)
        });
        let (rtt_ns, lost) = result?;
        served?;
        if rtt_ns.is_empty() {
            return Err(anyhow::anyhow!(
                "no round trip completed after the warm-up ({lost} lost)"
            ));
        }
        let mut params = pair.params;
        if let Some(p) = &cfg.placement {
            params.insert("client_cpu".into(), p.client.into());
            params.insert("server_cpu".into(), p.server.into());
        }
        Ok(Samples {
            rtt_ns,
            lost,
            params,
            stages,
        })
    })
}

/// Send, wait for the echo, time it; until the time or the count runs out.
fn client_loop(
    client: &mut dyn Endpoint,
    cfg: &LatencyConfig,
    marks: &dyn Marks,
) -> anyhow::Result<(Vec<u64>, u64)> {
    let start = Instant::now();
    let measure_from = start + cfg.warmup;
    let end = measure_from + cfg.time;
    let mut msg = vec![0x5a_u8; cfg.size];
    let tag_len = cfg.size.min(8);
    let mut rtt_ns = Vec::with_capacity(cfg.count.min(1 << 20));
    let mut lost = 0;
    let mut seq: u64 = 0;
    let mut marked = false;
    while rtt_ns.len() < cfg.count {
        let now = Instant::now();
        // The interval holds at least one round trip: one that began in the warm-up
        // and ended after `end` (a stalled machine) leaves time for one more, within
        // the server's deadline.
        if now >= end && (!rtt_ns.is_empty() || now >= end + LOSS_TIMEOUT) {
            break;
        }
        if !marked && now >= measure_from {
            marked = true;
            marks.start();
        }
        seq += 1;
        // Tag each message so a late echo of an earlier one is not taken for it.
        msg[..tag_len].copy_from_slice(&seq.to_le_bytes()[..tag_len]);
        let t0 = Instant::now();
        match client.send(&msg) {
            Ok(()) => {}
            Err(e) if is_timeout(&e) => continue,
            Err(e) => return Err(anyhow::anyhow!("client send: {e}")),
        }
        let rtt = loop {
            match client.recv() {
                Ok(Some(m)) => {
                    let t1 = Instant::now();
                    if m.len() == msg.len() && m[..tag_len] == msg[..tag_len] {
                        break Some(t1 - t0);
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(anyhow::anyhow!("client recv: {e}")),
            }
            if t0.elapsed() >= LOSS_TIMEOUT {
                break None;
            }
        };
        match rtt {
            Some(d) if t0 >= measure_from => rtt_ns.push(d.as_nanos() as u64),
            Some(_) => {}
            None => lost += 1,
        }
    }
    if marked {
        marks.end();
    }
    Ok((rtt_ns, lost))
}
