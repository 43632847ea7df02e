//! Single-connection throughput: a sender thread sends messages of one size back to
//! back for as long as it is let; the receiver counts the bytes delivered and takes the
//! rate over the interval it saw them arrive in, after a warm-up. Bytes that were sent
//! but never delivered (UDP drops them when the receiver falls behind) do not count.

use anyhow::Context as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::stack::{is_timeout, Endpoint, Marks, NoMarks, Params, Stack};

/// Longest wait for the first delivery.
const FIRST_DATA_TIMEOUT: Duration = Duration::from_secs(5);
/// After measuring, the receiver keeps draining until the sender has stopped, at most
/// this long (a blocked TCP sender needs its data read to notice the stop).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// How long one throughput run lasts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ThroughputConfig {
    /// Message size in bytes.
    pub(crate) size: usize,
    /// Deliveries during this time after the first one are not counted.
    pub(crate) warmup: Duration,
    /// Length of the measured interval, as the receiver sees it.
    pub(crate) time: Duration,
    /// Messages the sender hands over per call ([`Endpoint::send_batch`]); 1: one
    /// `send` per message.
    pub(crate) batch: usize,
}

/// What one run measured.
#[derive(Debug)]
pub(crate) struct Rate {
    /// Delivered bits per second over the measured interval.
    pub(crate) bps: f64,
    /// Bytes delivered in the measured interval.
    pub(crate) bytes: u64,
    /// Deliveries in the measured interval (messages, or datagrams on UDP).
    pub(crate) deliveries: u64,
    /// Length of the measured interval, seconds.
    pub(crate) seconds: f64,
    /// Bytes the sender's stack accepted over the whole run.
    pub(crate) sent_bytes: u64,
    /// CPU time of the sending thread over the whole run, seconds (its system calls
    /// included, and on loopback the kernel's delivery into the receiving socket).
    pub(crate) sender_cpu_s: f64,
    /// Bytes delivered over the whole run (warm-up and drain included).
    pub(crate) recv_bytes: u64,
    /// The connection's settings as granted.
    pub(crate) params: Params,
    /// ACKs the receiver sent in the measured interval, if its stack counts them.
    pub(crate) acks: Option<u64>,
}

/// Measure the delivered rate over a fresh connection of `stack`: the sender on its
/// own thread, the receiver on the calling thread. Bounded by the first-delivery
/// timeout, `warmup + time`, and the drain timeout.
pub(crate) fn run(stack: &dyn Stack, cfg: &ThroughputConfig) -> anyhow::Result<Rate> {
    run_marked(stack, cfg, &NoMarks)
}

/// As [`run`], telling `marks` when the measured interval starts and ends (the
/// receiver's thread, at the deliveries that bound it).
pub(crate) fn run_marked(
    stack: &dyn Stack,
    cfg: &ThroughputConfig,
    marks: &dyn Marks,
) -> anyhow::Result<Rate> {
    let pair = stack.connect(cfg.size).context("cannot connect")?;
    let mut client = pair.client;
    let mut server = pair.server;
    let stop_flag = AtomicBool::new(false);
    let done_flag = AtomicBool::new(false);
    let (stop, done) = (&stop_flag, &done_flag);
    let start = Instant::now();
    let sender_deadline = start + FIRST_DATA_TIMEOUT + cfg.warmup + cfg.time + 2 * DRAIN_TIMEOUT;

    thread::scope(|s| {
        let sender = s.spawn(move || -> anyhow::Result<(u64, f64)> {
            let cpu0 = thread_cpu_s();
            // One buffer for every message, as each stack's own; an owned-buffer
            // stack is handed a reference-counted view of it (`send_owned`).
            let msg = bytes::Bytes::from(vec![0xa5_u8; cfg.size]);
            let mut sent: u64 = 0;
            let result = loop {
                if stop.load(Ordering::Relaxed) || Instant::now() >= sender_deadline {
                    break Ok(sent);
                }
                let took = if cfg.batch > 1 {
                    client.send_batch(&msg, cfg.batch)
                } else {
                    client.send_owned(&msg).map(|()| 1)
                };
                match took {
                    Ok(n) => sent += (n * msg.len()) as u64,
                    Err(e) if is_timeout(&e) => {}
                    // The receiver may close first once it has measured.
                    Err(_) if stop.load(Ordering::Relaxed) => break Ok(sent),
                    Err(e) => break Err(anyhow::anyhow!("send: {e}")),
                }
            };
            done.store(true, Ordering::Relaxed);
            result.map(|sent| (sent, thread_cpu_s() - cpu0))
        });

        let measured = receive(&mut *server, cfg, start, done, marks);
        stop.store(true, Ordering::Relaxed);
        let drained = drain(&mut *server, done);
        drop(server);
        let sent = sender
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("sender thread panicked")));
        let mut rate = measured?;
        rate.recv_bytes += drained;
        (rate.sent_bytes, rate.sender_cpu_s) = sent?;
        rate.params = pair.params;
        if cfg.batch > 1 {
            rate.params.insert("batch".into(), cfg.batch.into());
        }
        Ok(rate)
    })
}

/// Count deliveries: the warm-up from the first one, then the measured interval from
/// the first delivery after the warm-up to the first one at least `time` later.
fn receive(
    server: &mut dyn Endpoint,
    cfg: &ThroughputConfig,
    start: Instant,
    sender_done: &AtomicBool,
    marks: &dyn Marks,
) -> anyhow::Result<Rate> {
    let mut total: u64 = 0;
    let mut deliveries: u64 = 0;
    let mut warm_end: Option<Instant> = None;
    // (instant, total bytes, deliveries) at the start of the measured interval.
    let mut from: Option<(Instant, u64, u64)> = None;
    // The last delivery seen, to close the interval if the data stops early.
    let mut last = start;
    let mut acks0 = None;
    loop {
        let got = server.recv_len().context("recv")?;
        let now = Instant::now();
        if let Some(len) = got {
            total += len as u64;
            deliveries += 1;
            last = now;
            match (warm_end, from) {
                (None, _) => warm_end = Some(now + cfg.warmup),
                (Some(w), None) if now >= w => {
                    from = Some((now, total, deliveries));
                    acks0 = server.acks_sent();
                    marks.start();
                }
                (_, Some((t0, _, _))) if now - t0 >= cfg.time => break,
                _ => {}
            }
            continue;
        }
        let stalled = match (warm_end, from) {
            (None, _) => now - start >= FIRST_DATA_TIMEOUT,
            (Some(w), None) => now >= w + cfg.time || sender_done.load(Ordering::Relaxed),
            (_, Some((t0, _, _))) => now - t0 >= cfg.time || sender_done.load(Ordering::Relaxed),
        };
        if stalled {
            break;
        }
    }
    if from.is_some() {
        marks.end();
    }
    let acks = server.acks_sent().zip(acks0).map(|(a1, a0)| a1 - a0);
    let Some((t0, bytes0, deliveries0)) = from else {
        return Err(match warm_end {
            None => anyhow::anyhow!("nothing arrived within {} s", FIRST_DATA_TIMEOUT.as_secs()),
            Some(_) => anyhow::anyhow!("deliveries stopped during the warm-up"),
        });
    };
    let seconds = (last - t0).as_secs_f64();
    let bytes = total - bytes0;
    if bytes == 0 || seconds <= 0.0 {
        anyhow::bail!("nothing arrived after the warm-up");
    }
    Ok(Rate {
        bps: bytes as f64 * 8.0 / seconds,
        bytes,
        deliveries: deliveries - deliveries0,
        seconds,
        sent_bytes: 0,
        sender_cpu_s: 0.0,
        recv_bytes: total,
        params: Params::new(),
        acks,
    })
}

/// Read what is still on its way until the sender has stopped and one poll interval
/// passes with nothing delivered, or for [`DRAIN_TIMEOUT`]; the bytes read. Counting
/// them makes "delivered" mean what the stack lost, not what was in flight at the end.
fn drain(server: &mut dyn Endpoint, sender_done: &AtomicBool) -> u64 {
    let until = Instant::now() + DRAIN_TIMEOUT;
    let mut bytes = 0;
    while Instant::now() < until {
        match server.recv_len() {
            Ok(Some(len)) => bytes += len as u64,
            Ok(None) if sender_done.load(Ordering::Relaxed) => break,
            Ok(None) => {}
            Err(_) => break,
        }
    }
    bytes
}

/// CPU time the calling thread has used, seconds.
fn thread_cpu_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}
