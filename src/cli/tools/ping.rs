//! `natm ping ADDR[:SAP]`: round-trip probes on a best-effort VC to an echo listener
//! (`natm listen echo --echo`), aping-style; with `--oam segment|end-to-end`, OAM F5
//! loopback probes (ITU-T I.610) on the call's VC instead, answered by the first
//! switch or by the far end's engine.

use natm::ulib::Wait;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use clap::Args;
use natm::ulib::{Connection, Error, IntoTarget, Target};
use natm::wire::oam::Scope;
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
    /// Send OAM F5 loopback cells (I.610) on the call's VC instead of echoed
    /// messages: `segment` is answered by the first switch, `end-to-end` (or `e2e`) by
    /// the far end's engine. --size does not apply (a cell payload is 48 octets).
    #[arg(long, value_name = "segment|end-to-end")]
    oam: Option<OamFlow>,
    /// The summary as one JSON line on stdout (no per-probe lines).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: super::HostOpts,
}

const PING_HELP: &str = "\
natm ping calls the target (a best-effort VC by default), sends --count probes of
--size bytes --interval apart, and times each one's echo. The far end runs
  natm listen echo --echo --keep
A probe not echoed within --timeout is lost; an echo arriving later is reported as
late and not counted. The summary: sent, received, loss, and rtt min/avg/max/mdev.
The time includes both engines and the loopback or network path, not sigd: the call
is set up once, before the first probe (its setup time is shown).

With --oam, the call is set up the same way, and each probe is an OAM F5 loopback
cell (I.610) on its VC with a fresh correlation tag, timed until its answer:
  --oam segment      answered by the first switch on the path (natm switch);
                     a direct call has no switch, so nobody answers
  --oam end-to-end   answered by the far end's engine (any natm end point),
                     through every switch on the path
Any listener answers end-to-end probes; the echo SAP is the default target as
before. The summary: sent, answered, loss, and rtt min/median/max.

Exit status: 0 if any probe came back, 1 otherwise.";

/// Which F5 flow `--oam` probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OamFlow {
    /// PTI 100: the first switch answers.
    Segment,
    /// PTI 101: the far end answers.
    #[value(alias = "e2e")]
    EndToEnd,
}

impl OamFlow {
    fn scope(self) -> Scope {
        match self {
            OamFlow::Segment => Scope::Segment,
            OamFlow::EndToEnd => Scope::EndToEnd,
        }
    }
}

/// What `natm ping --json` prints.
#[derive(Debug, Serialize)]
struct PingSummary {
    target: String,
    /// `echo`, or the OAM flow probed (`segment`, `end-to-end`).
    probe: String,
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
    median_ms: Option<f64>,
    rtts_ms: Vec<f64>,
}

pub(crate) fn run(a: PingArgs) -> super::super::CliResult {
    ping(a)
}

fn ping(a: PingArgs) -> anyhow::Result<()> {
    if a.size < 8 && a.oam.is_none() {
        bail!("--size must be at least 8 bytes (the probe's sequence number)");
    }
    let direct = matches!(a.target.as_str().into_target(), Target::Ip(_));
    // An ATM target without a SAP pings the echo SAP.
    let target = match a.target.as_str().into_target() {
        Target::Atm(t) if !t.contains(':') => format!("{t}:echo"),
        _ => a.target.clone(),
    };
    let host = open_host(&a.host)?;
    let t0 = Instant::now();
    let conn = host
        .connect(target.as_str(), &a.qos)
        .map_err(|e| explain(e, &target))?;
    let setup = t0.elapsed();
    let qos = conn.granted().map_or(a.qos.clone(), |g| g.qos.to_string());
    let size = if a.oam.is_some() { 48 } else { a.size };
    if !a.json {
        let what = match a.oam {
            None => format!("{size} bytes per probe"),
            Some(f) => format!("OAM F5 {} loopback", f.scope()),
        };
        super::super::outln!(
            "PING {target}: {what}; call set up in {:.2} ms, {}",
            setup.as_secs_f64() * 1e3,
            describe_grant(conn.granted(), &a.qos)
        );
        if a.oam == Some(OamFlow::Segment) && direct {
            super::super::outln!(
                "note: a direct call has no switch on its path, and only a switch ends \
                 a segment: expect no answer (try --oam end-to-end)"
            );
        }
    }
    let start = Instant::now();
    let (rtts, late) = match a.oam {
        Some(flow) => (oam_probes(&a, &conn, &target, flow.scope())?, 0),
        None => echo_probes(&a, &conn, &target)?,
    };
    let elapsed = start.elapsed();
    conn.close();
    let received = rtts.len() as u32;
    let s = summarise(&rtts);
    let out = PingSummary {
        target: target.clone(),
        probe: a.oam.map_or("echo".to_owned(), |f| f.scope().to_string()),
        qos,
        setup_ms: setup.as_secs_f64() * 1e3,
        size,
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
        median_ms: median(&rtts),
        rtts_ms: rtts.clone(),
    };
    if a.json {
        super::super::outln!("{}", serde_json::to_string(&out)?);
    } else {
        super::super::outln!("--- {target} natm ping statistics ---");
        super::super::outln!(
            "{} probes sent, {} {}, {:.0}% loss, time {} ms",
            out.sent,
            out.received,
            if a.oam.is_some() {
                "answered"
            } else {
                "received"
            },
            out.loss_pct,
            elapsed.as_millis()
        );
        match (a.oam, s, out.median_ms) {
            (Some(_), Some((min, _, max, _)), Some(med)) => {
                super::super::outln!("rtt min/median/max = {min:.3}/{med:.3}/{max:.3} ms")
            }
            (None, Some((min, avg, max, mdev)), _) => super::super::outln!(
                "rtt min/avg/max/mdev = {min:.3}/{avg:.3}/{max:.3}/{mdev:.3} ms"
            ),
            _ => {}
        }
    }
    drop(conn);
    host.linger(Duration::from_secs(5));
    if received == 0 && a.count > 0 {
        match a.oam {
            None => bail!("no echo came back from {target}"),
            Some(OamFlow::Segment) if direct => bail!(
                "nobody looped the segment probes back: a direct call has no switch, and \
                 only the first switch on the path answers a segment loopback; \
                 --oam end-to-end is answered by the far end"
            ),
            Some(OamFlow::Segment) => bail!(
                "nobody looped the segment probes back: the first switch on the path \
                 answers them — is this host attached to a natm switch (sigd --switch)?"
            ),
            Some(OamFlow::EndToEnd) => bail!(
                "nobody looped the end-to-end probes back: the far end's engine answers \
                 them, so the VC lost them or the far end is not a natm end point"
            ),
        }
    }
    Ok(())
}

/// OAM F5 loopback probes of flow `scope` on the call's VC, one per interval; the
/// round trips of those answered within the timeout, in ms.
fn oam_probes(
    a: &PingArgs,
    conn: &Connection,
    target: &str,
    scope: Scope,
) -> anyhow::Result<Vec<f64>> {
    let mut rtts = Vec::with_capacity(a.count as usize);
    for seq in 0..a.count {
        let sent_at = Instant::now();
        match conn
            .oam_loopback(scope, a.timeout)
            .map_err(|e| anyhow!("OAM probe {seq}: {e}"))?
        {
            Some(rtt) => {
                let ms = rtt.as_secs_f64() * 1e3;
                rtts.push(ms);
                if !a.json {
                    super::super::outln!(
                        "48 bytes OAM F5 {scope} loopback from {target}: seq={seq} time={ms:.3} ms"
                    );
                }
            }
            None => {
                if !a.json {
                    super::super::outln!(
                        "seq={seq}: no {scope} loopback answer within {:?}",
                        a.timeout
                    );
                }
            }
        }
        pause(a, seq, sent_at);
    }
    Ok(rtts)
}

/// Sleeps until the next probe is due.
fn pause(a: &PingArgs, seq: u32, sent_at: Instant) {
    if seq + 1 < a.count {
        let next = sent_at + a.interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
    }
}

/// Probes echoed by the far end's listener: the round trips (ms) of those echoed in
/// time, and how many echoes came late.
fn echo_probes(a: &PingArgs, conn: &Connection, target: &str) -> anyhow::Result<(Vec<f64>, u32)> {
    let mut probe = vec![0u8; a.size];
    let mut rtts = Vec::with_capacity(a.count as usize);
    let mut late = 0u32;
    for seq in 0..a.count {
        probe[..8].copy_from_slice(&u64::from(seq).to_be_bytes());
        let sent_at = Instant::now();
        conn.send(&probe, Wait::Block)
            .map_err(|e| anyhow!("sending probe {seq}: {e}"))?;
        let deadline = sent_at + a.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match conn.recv(Wait::For(left)) {
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
        pause(a, seq, sent_at);
    }
    Ok((rtts, late))
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(s[n / 2]),
        _ => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
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
    use super::{median, summarise};

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn ping_statistics() {
        assert_eq!(summarise(&[]), None);
        let (min, avg, max, mdev) = summarise(&[1.0, 3.0]).unwrap();
        assert_eq!((min, avg, max, mdev), (1.0, 2.0, 3.0, 1.0));
    }
}
