//! `natm ping ADDR[:SAP]`: round-trip probes on a best-effort VC to an echo listener
//! (`natm listen echo --echo`), aping-style.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use clap::Args;
use natm::ulib::{Error, IntoTarget, Target};
use serde::Serialize;

use super::{describe_grant, explain, open_host, parse_duration};

/// `natm ping`: round trips through a call to an echo listener.
#[derive(Debug, Args)]
#[command(after_long_help = PING_HELP)]
pub(crate) struct PingArgs {
    /// Who to ping: an ATM address or name, with the SAP of an echo listener
    /// [default SAP: echo]; or an IP socket address (direct mode).
    target: String,
    /// Probes to send.
    #[arg(long, short = 'c', default_value_t = 5)]
    count: u32,
    /// Time between probes.
    #[arg(long, short = 'i', default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Probe size in bytes (at least 8: the sequence number).
    #[arg(long, short = 's', default_value_t = 56)]
    size: usize,
    /// How long to wait for each reply.
    #[arg(long, short = 'W', default_value = "1s", value_parser = parse_duration)]
    timeout: Duration,
    /// QoS of the probe call.
    #[arg(long, short = 'q', default_value = "ubr")]
    qos: String,
    /// The summary as one JSON line on stdout (no per-probe lines).
    #[arg(long)]
    json: bool,
    /// The host's sigd socket [default: $NATM_SIGD, else /run/natm/sigd.sock].
    #[arg(long)]
    sigd: Option<PathBuf>,
    /// How the UDP link carries frames: `frame` (one per datagram) or `cell[:N]`
    /// (AAL5 cells in trains of N, default 32) [default: $NATM_LINK, else frame]. Both
    /// ends, or the switch port each attaches to, must use the same mode.
    #[arg(long, value_name = "cell[:N]|frame")]
    link: Option<natm::ulib::LinkMode>,
}

const PING_HELP: &str = "\
natm ping calls the target (a best-effort VC by default), sends --count probes of
--size bytes --interval apart, and times each one's echo. The far end runs
  natm listen echo --echo --keep
A probe not echoed within --timeout is lost; an echo arriving later is reported as
late and not counted. The summary: sent, received, loss, and rtt min/avg/max/mdev.
The time includes both engines and the loopback or network path, not sigd: the call
is set up once, before the first probe (its setup time is shown).

Not here yet: OAM F5 loopback cells (I.610). They need a cell path through an ATM
switch; natm-switch's data plane answers them, but no switch process runs yet.

Exit status: 0 if any probe came back, 1 otherwise.";

/// What `natm ping --json` prints.
#[derive(Debug, Serialize)]
struct PingSummary {
    target: String,
    qos: String,
    setup_ms: f64,
    size: usize,
    sent: u32,
    received: u32,
    late: u32,
    loss_pct: f64,
    min_ms: Option<f64>,
    avg_ms: Option<f64>,
    max_ms: Option<f64>,
    mdev_ms: Option<f64>,
    rtts_ms: Vec<f64>,
}

pub(crate) fn run(a: PingArgs) -> super::super::CliResult {
    ping(a)
}

fn ping(a: PingArgs) -> anyhow::Result<()> {
    if a.size < 8 {
        bail!("--size must be at least 8 bytes (the probe's sequence number)");
    }
    // An ATM target without a SAP pings the echo SAP.
    let target = match a.target.as_str().into_target() {
        Target::Atm(t) if !t.contains(':') => format!("{t}:echo"),
        _ => a.target.clone(),
    };
    let host = open_host(a.sigd.clone(), a.link)?;
    let t0 = Instant::now();
    let conn = host
        .connect(target.as_str(), &a.qos)
        .map_err(|e| explain(e, &target))?;
    let setup = t0.elapsed();
    let qos = conn.granted().map_or(a.qos.clone(), |g| g.qos.clone());
    if !a.json {
        super::super::outln!(
            "PING {target}: {} bytes per probe; call set up in {:.2} ms, {}",
            a.size,
            setup.as_secs_f64() * 1e3,
            describe_grant(conn.granted(), &a.qos)
        );
    }
    let mut probe = vec![0u8; a.size];
    let mut rtts = Vec::with_capacity(a.count as usize);
    let mut late = 0u32;
    let start = Instant::now();
    for seq in 0..a.count {
        probe[..8].copy_from_slice(&u64::from(seq).to_be_bytes());
        let sent_at = Instant::now();
        conn.send(&probe)
            .map_err(|e| anyhow!("sending probe {seq}: {e}"))?;
        let deadline = sent_at + a.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match conn.recv_timeout(left) {
                Ok(Some(m)) => {
                    let got = m
                        .get(..8)
                        .and_then(|b| <[u8; 8]>::try_from(b).ok())
                        .map(u64::from_be_bytes);
                    if got == Some(u64::from(seq)) {
                        let rtt = sent_at.elapsed().as_secs_f64() * 1e3;
                        rtts.push(rtt);
                        if !a.json {
                            super::super::outln!(
                                "{} bytes from {target}: seq={seq} time={rtt:.3} ms",
                                m.len()
                            );
                        }
                        break;
                    }
                    late += 1;
                    if !a.json {
                        super::super::outln!(
                            "late or foreign echo ({} bytes, seq {:?}) ignored",
                            m.len(),
                            got
                        );
                    }
                }
                Ok(None) => bail!("the echo listener closed the call after {seq} probes"),
                Err(Error::TimedOut) => {
                    if !a.json {
                        super::super::outln!("seq={seq}: no echo within {:?}", a.timeout);
                    }
                    break;
                }
                Err(e) => bail!("waiting for echo {seq}: {e}"),
            }
        }
        if seq + 1 < a.count {
            let next = sent_at + a.interval;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
        }
    }
    let elapsed = start.elapsed();
    conn.close();
    let received = rtts.len() as u32;
    let s = summarise(&rtts);
    let out = PingSummary {
        target: target.clone(),
        qos,
        setup_ms: setup.as_secs_f64() * 1e3,
        size: a.size,
        sent: a.count,
        received,
        late,
        loss_pct: if a.count == 0 {
            0.0
        } else {
            f64::from(a.count - received) * 100.0 / f64::from(a.count)
        },
        min_ms: s.map(|s| s.0),
        avg_ms: s.map(|s| s.1),
        max_ms: s.map(|s| s.2),
        mdev_ms: s.map(|s| s.3),
        rtts_ms: rtts,
    };
    if a.json {
        super::super::outln!("{}", serde_json::to_string(&out)?);
    } else {
        super::super::outln!("--- {target} natm ping statistics ---");
        super::super::outln!(
            "{} probes sent, {} received, {:.0}% loss, time {} ms",
            out.sent,
            out.received,
            out.loss_pct,
            elapsed.as_millis()
        );
        if let Some((min, avg, max, mdev)) = s {
            super::super::outln!("rtt min/avg/max/mdev = {min:.3}/{avg:.3}/{max:.3}/{mdev:.3} ms");
        }
    }
    drop(conn);
    host.linger(Duration::from_secs(5));
    if received == 0 && a.count > 0 {
        bail!("no echo came back from {target}");
    }
    Ok(())
}

/// min, mean, max and mean deviation (as ping computes it: the standard deviation).
fn summarise(rtts: &[f64]) -> Option<(f64, f64, f64, f64)> {
    if rtts.is_empty() {
        return None;
    }
    let n = rtts.len() as f64;
    let min = rtts.iter().copied().fold(f64::INFINITY, f64::min);
    let max = rtts.iter().copied().fold(0.0, f64::max);
    let avg = rtts.iter().sum::<f64>() / n;
    let var = rtts.iter().map(|r| (r - avg) * (r - avg)).sum::<f64>() / n;
    Some((min, avg, max, var.sqrt()))
}

#[cfg(test)]
mod tests {
    use super::summarise;

    #[test]
    fn ping_statistics() {
        assert_eq!(summarise(&[]), None);
        let (min, avg, max, mdev) = summarise(&[1.0, 3.0]).unwrap();
        assert_eq!((min, avg, max, mdev), (1.0, 2.0, 3.0, 1.0));
    }
}
