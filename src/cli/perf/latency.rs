//! Round-trip latency: one message in flight at a time. The client sends a message,
//! the server echoes it, and the client times each round trip with
//! [`std::time::Instant`], from just before `send` to just after the echo's `recv`.

use anyhow::Context as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::stack::{is_timeout, Endpoint, Params, Stack};

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
/// `warmup + time` (plus at most one loss timeout) and by `count` samples.
pub(crate) fn run(stack: &dyn Stack, cfg: &LatencyConfig) -> anyhow::Result<Samples> {
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
        let echo = s.spawn(move || -> anyhow::Result<()> {
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
        let result = client_loop(&mut *client, cfg);
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
        Ok(Samples {
            rtt_ns,
            lost,
            params: pair.params,
            stages,
        })
    })
}

/// Send, wait for the echo, time it; until the time or the count runs out.
fn client_loop(client: &mut dyn Endpoint, cfg: &LatencyConfig) -> anyhow::Result<(Vec<u64>, u64)> {
    let start = Instant::now();
    let measure_from = start + cfg.warmup;
    let end = measure_from + cfg.time;
    let mut msg = vec![0x5a_u8; cfg.size];
    let tag_len = cfg.size.min(8);
    let mut rtt_ns = Vec::with_capacity(cfg.count.min(1 << 20));
    let mut lost = 0;
    let mut seq: u64 = 0;
    while rtt_ns.len() < cfg.count {
        let now = Instant::now();
        if now >= end {
            break;
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
    Ok((rtt_ns, lost))
}
