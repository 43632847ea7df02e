//! `natm listen SAP --qos Q`: answer calls through sigd; write what arrives to stdout
//! or a file, count and discard it, or echo it back.

use natm::ulib::Wait;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use clap::Args;
use natm::ulib::{Connection, Error, IntoTarget, Listener, Target};
use natm::wire::qos::{Qos, Rate, Service, TrafficParams};

use super::{
    describe_grant, ended, open_host, parse_duration, parse_pvc, Progress, Summary, PVC_QOS,
};

/// `natm listen`: netcat/ttcp-style listener.
#[derive(Debug, Args)]
#[command(after_long_help = LISTEN_HELP)]
pub(crate) struct ListenArgs {
    /// The SAP to listen on (`ttcp`), optionally at one of this host's addresses
    /// (`+4420002:ttcp`), or an IP socket address (direct mode, without sigd). Not
    /// with --pvc.
    #[arg(required_unless_present = "pvc", conflicts_with = "pvc")]
    sap: Option<String>,
    /// Receive on a bare AAL5 PVC, VPI.VCI (e.g. 0.100), instead of answering calls: no
    /// signalling; frames come to --bind (and echoes go to --via). The data ends after
    /// --idle without an SDU, counted from the first one.
    #[arg(long, value_name = "VPI.VCI", value_parser = parse_pvc, requires_all = ["bind", "via"])]
    pvc: Option<(u8, u16)>,
    /// With --pvc: the local UDP address the PVC's frames come to (a `natm switch`
    /// port's `peer`, or what the far `natm call --pvc` sends --via).
    #[arg(long, value_name = "ADDR", requires = "pvc")]
    bind: Option<std::net::SocketAddr>,
    /// With --pvc: where this end's frames go (a `natm switch` port, or the far host's
    /// --bind).
    #[arg(long, value_name = "ADDR", requires = "pvc")]
    via: Option<std::net::SocketAddr>,
    /// Take only calls with this QoS: the same service and transport (`transport=none`:
    /// bare AAL5 SDUs), and for guaranteed service no direction's rate above this
    /// one's. Others are rejected with cause 73. With --pvc, the PVC's QoS.
    /// [default: take any QoS; with --pvc, ubr:transport=none]
    #[arg(long, short = 'q')]
    qos: Option<String>,
    /// Answer a guaranteed call at this rate in each direction it uses, not the
    /// offered one: a counter-offer (issue 33). The rate is kept between the
    /// caller's minimum and the offer. A call whose minimum is above it is rejected
    /// with cause 73.
    #[arg(long, value_name = "RATE", value_parser = super::parse_rate)]
    at: Option<u64>,
    /// Write what arrives to this file instead of stdout (every call's data, in turn).
    #[arg(long, short = 'o', conflicts_with_all = ["discard", "echo"])]
    out: Option<PathBuf>,
    /// Count and discard what arrives (what a load test wants).
    #[arg(long, short = 'd', conflicts_with = "echo")]
    discard: bool,
    /// Send every message back as it arrives (for `natm ping`, or a round-trip test).
    #[arg(long, short = 'e')]
    echo: bool,
    /// Take calls one after another until killed, instead of exiting after the first.
    #[arg(long, short = 'k')]
    keep: bool,
    /// End a call that carries nothing for this long (0: wait for ever); on a PVC,
    /// which has no end of its own, the end of its data (counted from the first SDU).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    idle: Duration,
    /// Each call's summary as one JSON line (on stdout unless stdout carries data).
    #[arg(long)]
    json: bool,
    /// No progress line and no "call from" lines.
    #[arg(long)]
    quiet: bool,
    /// Print each call's status events as they happen (seed 003's flags as they
    /// change: the caller's QoS changes, its close, an abort, sigd's release).
    #[arg(long)]
    events: bool,
    #[command(flatten)]
    host: super::HostOpts,
}

const LISTEN_HELP: &str = "\
Each call is shown before it is answered (caller and QoS, on stderr), accepted if its
QoS fits --qos, and then carries data one way (or both, with --echo) until the caller
closes. A summary follows each call: bytes, duration, Mbit/s, losses.

Examples:
  natm listen ttcp --out copy.iso                 # one call, written to a file
  natm listen ttcp --discard --keep --json        # a load sink, call after call
  natm listen ttcp --qos cbr:pcr=50Mbps --discard # guaranteed calls up to 50 Mbit/s
  natm listen echo --echo --keep                  # what `natm ping` talks to
  natm listen --pvc 0.100 --bind 127.0.0.1:9100 --via 127.0.0.1:9101 --idle 2s --out f.bin

A call with `transport=none` in its QoS carries bare AAL5 SDUs (as Linux-ATM
applications send them): each SDU arrives as one message, the caller's release ends
the data, and the summary counts SDUs each way and what was dropped. `--pvc` receives
on such a VC with no call at all.";

pub(crate) fn run(a: ListenArgs) -> super::super::CliResult {
    listen(a)
}

/// Where what arrives goes.
enum Sink {
    Stdout,
    File(BufWriter<File>),
    Discard,
    Echo,
}

fn listen(a: ListenArgs) -> anyhow::Result<()> {
    let want = match &a.qos {
        Some(q) => Some(
            q.parse::<Qos>()
                .map_err(|e| anyhow!("bad --qos: {}", e.render(q)))?,
        ),
        None => None,
    };
    let mut sink = if a.echo {
        Sink::Echo
    } else if a.discard {
        Sink::Discard
    } else if let Some(p) = &a.out {
        Sink::File(BufWriter::new(
            File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        ))
    } else {
        Sink::Stdout
    };
    let data_on_stdout = matches!(sink, Sink::Stdout);
    let host = open_host(&a.host)?;
    if let (Some((vpi, vci)), Some(bind), Some(via)) = (a.pvc, a.bind, a.via) {
        let qos = a.qos.clone().unwrap_or_else(|| PVC_QOS.to_owned());
        let what = format!("pvc {vpi}.{vci}");
        let conn = host
            .open_pvc_from(bind, vpi, vci, via, &qos)
            .map_err(|e| anyhow!("opening {what} on {bind}: {e}"))?;
        if !a.quiet {
            eprintln!("natm listen: receiving on {what} at {bind} ({qos}); echoes go to {via}");
        }
        let served = serve(&a, Answered { conn, caller: what }, &mut sink, Some(qos))?;
        served.with_ports(&host).print(a.json, data_on_stdout)?;
        host.linger(LINGER);
        return Ok(());
    }
    let sap = a.sap.clone().unwrap_or_default();
    // Without --qos the listener still names one to sigd; it matters only to
    // pre-authorised listeners, which this is not.
    let bind_qos = a.qos.clone().unwrap_or_else(|| "ubr".to_owned());
    let direct = matches!(sap.as_str().into_target(), Target::Ip(_));
    let listener = host
        .bind(sap.as_str(), &bind_qos)
        .with_context(|| format!("cannot listen on {sap}"))?;
    if !a.quiet {
        eprintln!(
            "natm listen: listening on {} ({}); {}",
            sap,
            a.qos
                .as_deref()
                .map_or("any QoS".to_owned(), |q| format!("QoS {q}")),
            if a.keep {
                "taking calls until killed"
            } else {
                "exiting after one call"
            }
        );
    }
    loop {
        let served = answer(&a, &listener, direct, want.as_ref())
            .and_then(|c| serve(&a, c, &mut sink, None));
        match served {
            Ok(s) => s.with_ports(&host).print(a.json, data_on_stdout)?,
            // A listener its restarted sigd would not bind again takes no more calls.
            Err(e) if a.keep && !listener.is_unbound() => eprintln!("natm listen: {e:#}"),
            Err(e) => return Err(e),
        }
        if !a.keep {
            // The call's close finishes on the data path before its release.
            host.linger(LINGER);
            return Ok(());
        }
    }
}

/// Longest wait at exit for a dropped connection to finish closing.
const LINGER: Duration = Duration::from_secs(5);

/// A call answered: its connection, caller and setup start.
struct Answered {
    conn: Connection,
    caller: String,
}

/// The rates to answer a call offered at `offered` with, for `--at rate`: each used
/// direction at `rate`, or at the offer if that is lower; `None` if the call is not
/// guaranteed (nothing to lower), an error if the caller's minimum is above `rate`.
fn counter_offer(offered: &Qos, rate: u64) -> Result<Option<(u64, u64)>, String> {
    use natm::wire::qos::Direction;
    if offered.service() != Service::Guaranteed {
        return Ok(None);
    }
    let mut rates = [0u64; 2];
    for (slot, dir) in rates.iter_mut().zip([Direction::Tx, Direction::Rx]) {
        // `max` rates stand for the whole link: never below `rate`.
        let w = offered.want(dir, u64::MAX);
        if w.target_bps == 0 {
            continue;
        }
        if w.min_bps > rate {
            return Err(format!(
                "its minimum, {} bit/s, is above --at {rate} bit/s",
                w.min_bps
            ));
        }
        *slot = rate.min(w.target_bps);
    }
    Ok(Some((rates[0], rates[1])))
}

/// Wait for the next call and answer it (rejecting those whose QoS does not fit).
fn answer(
    a: &ListenArgs,
    listener: &Listener,
    direct: bool,
    want: Option<&Qos>,
) -> anyhow::Result<Answered> {
    if direct {
        let conn = listener
            .accept(Wait::Block)
            .map_err(|e| anyhow!("accepting: {e}"))?;
        return Ok(Answered {
            caller: "direct".into(),
            conn,
        });
    }
    loop {
        let offer = listener
            .next_call(Wait::Block)
            .map_err(|e| anyhow!("waiting for a call: {e}"))?;
        if let Some(w) = want {
            if let Err(why) = fits(&offer.qos, w) {
                if !a.quiet {
                    eprintln!(
                        "natm listen: call from {} with {} rejected (cause 73): {why}",
                        offer.caller, offer.qos
                    );
                }
                let _ = offer.reject(73);
                continue;
            }
        }
        let caller = offer.caller.clone();
        if !a.quiet {
            eprintln!("natm listen: call from {caller} with {}", offer.qos);
        }
        let counter = match a.at.map(|r| counter_offer(&offer.qos, r)) {
            Some(Err(why)) => {
                if !a.quiet {
                    eprintln!("natm listen: call from {caller} rejected (cause 73): {why}");
                }
                let _ = offer.reject(73);
                continue;
            }
            Some(Ok(rates)) => rates,
            None => None,
        };
        let answered = match counter {
            Some((tx, rx)) => offer.accept_at(tx, rx),
            None => offer.accept(),
        };
        let conn = match answered {
            Ok(c) => c,
            Err(Error::Refused { cause, detail }) => {
                // Admission on this host refused what the caller's sigd granted.
                eprintln!("natm listen: call from {caller} not set up: cause {cause}: {detail}");
                continue;
            }
            Err(e) => return Err(anyhow!("accepting the call from {caller}: {e}")),
        };
        if !a.quiet {
            eprintln!(
                "natm listen: connected to {caller}; {}",
                describe_grant(conn.granted(), "")
            );
        }
        return Ok(Answered { conn, caller });
    }
}

/// Whether an offered QoS (from this side) fits the listener's: same service, and
/// for guaranteed service neither direction's target rate above the listener's.
fn fits(q: &Qos, want: &Qos) -> Result<(), String> {
    if q.is_bare() != want.is_bare() {
        let name = |bare| {
            if bare {
                "bare AAL5 SDUs (transport=none)"
            } else {
                "natm's transport"
            }
        };
        return Err(format!(
            "{} asked, this listener takes {}",
            name(q.is_bare()),
            name(want.is_bare())
        ));
    }
    if q.service() != want.service() {
        return Err(format!(
            "{:?} service asked, this listener takes {:?}",
            q.service(),
            want.service()
        ));
    }
    if q.service() != Service::Guaranteed {
        return Ok(());
    }
    let target = |p: &TrafficParams| -> Option<Rate> {
        if p.is_used() {
            p.scr.or(p.pcr).or(p.max_pcr)
        } else {
            None
        }
    };
    for (way, o, w) in [("out", q.tx(), want.tx()), ("in", q.rx(), want.rx())] {
        if target(o) > target(w) {
            return Err(format!(
                "the rate {way} is above what this listener takes ({})",
                want
            ));
        }
    }
    Ok(())
}

/// Carry one call's data until the caller closes (or it is idle for `--idle`). `pvc`:
/// the QoS of a PVC, whose data ends when it has been idle for `--idle` after its
/// first SDU (a PVC has no end of its own), and which waits for that first SDU as
/// long as it takes.
fn serve(
    a: &ListenArgs,
    ans: Answered,
    sink: &mut Sink,
    pvc: Option<String>,
) -> anyhow::Result<Summary> {
    let Answered { conn, caller } = ans;
    let is_pvc = pvc.is_some();
    let (qos, reserved) = conn.granted().map_or(
        (
            pvc.or_else(|| a.qos.clone())
                .unwrap_or_else(|| "direct mode".into()),
            0,
        ),
        |g| (g.qos.to_string(), g.tx_bps),
    );
    let received = Arc::new(AtomicU64::new(0));
    let counted = received.clone();
    let progress = Progress::start("received", move || counted.load(Ordering::Relaxed), a.quiet);
    let mut start = Instant::now();
    let mut last = start;
    let (mut msgs_in, mut msgs_out, mut sent) = (0u64, 0u64, 0u64);
    let mut stdout = std::io::stdout();
    let idle = (!a.idle.is_zero()).then_some(a.idle);
    // seed 003's "QoS changed" status: the caller changed its rate (`natm call
    // --set-qos`); looked at no more than every 100 ms.
    let mut peer_rate = conn.status().rx_rate_bps;
    let mut looked = start;
    let next = |t| conn.next_event(Wait::For(t));
    let result = super::events::printing(a.events, "listen", next, || loop {
        let m = match idle {
            Some(_) if is_pvc && msgs_in == 0 => conn.recv(Wait::Block),
            Some(t) => conn.recv(Wait::For(t)),
            None => conn.recv(Wait::Block),
        };
        match m {
            Ok(Some(m)) => {
                last = Instant::now();
                if is_pvc && msgs_in == 0 {
                    // A PVC's transfer starts with its first SDU, not when it was opened.
                    start = last;
                }
                msgs_in += 1;
                received.fetch_add(m.len() as u64, Ordering::Relaxed);
                if last >= looked + Duration::from_millis(100) {
                    looked = last;
                    let st = conn.status();
                    if st.rx_rate_bps != peer_rate && !a.quiet {
                        eprintln!(
                            "natm listen: {caller} changed its QoS: now sending at {:.1} Mbit/s",
                            st.rx_rate_bps as f64 / 1e6
                        );
                    }
                    peer_rate = st.rx_rate_bps;
                }
                let w = match sink {
                    Sink::Stdout => stdout
                        .write_all(&m)
                        .and_then(|()| stdout.flush())
                        .context("writing to stdout"),
                    Sink::File(f) => f.write_all(&m).context("writing the --out file"),
                    Sink::Discard => Ok(()),
                    Sink::Echo => {
                        sent += m.len() as u64;
                        msgs_out += 1;
                        conn.send(&m, Wait::Block)
                            .map_err(|e| anyhow!("echoing: {e}"))
                    }
                };
                if let Err(e) = w {
                    break Err(e);
                }
            }
            Ok(None) => break Ok(()),
            Err(Error::TimedOut) if is_pvc => break Ok(()),
            Err(Error::TimedOut) => {
                break Err(anyhow!(
                    "nothing from {caller} for {:?} (--idle): giving the call up",
                    a.idle
                ))
            }
            Err(e) => {
                let doing = format!("receiving from {caller}");
                break Err(ended(&e, || conn.released(), &doing)
                    .unwrap_or_else(|| anyhow!("{doing}: {e}")));
            }
        }
    });
    progress.stop();
    if let Sink::File(f) = sink {
        f.flush().context("writing the --out file")?;
    }
    conn.close();
    if matches!(sink, Sink::Echo) {
        // The echoes reach the caller before the call is released.
        let _ = conn.flush(Duration::from_secs(5));
    }
    let stats = conn.stats();
    result?;
    let moved = received.load(Ordering::Relaxed);
    Ok(Summary::new(
        "listen",
        caller,
        qos,
        reserved,
        None,
        moved,
        last.duration_since(start),
        (msgs_out, msgs_in),
        (sent, moved),
        &stats,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Qos {
        text.parse().unwrap()
    }

    #[test]
    fn a_listener_takes_its_service_up_to_its_rate() {
        let w: Qos = "cbr:pcr=50Mbps".parse().unwrap();
        assert!(fits(&q("cbr:pcr=20Mbps"), &w).is_ok());
        assert!(fits(&q("cbr:pcr=80Mbps"), &w).is_err());
        assert!(fits(&q("reliable"), &w).is_err());
        let r: Qos = "reliable".parse().unwrap();
        assert!(fits(&q("reliable:flow=window"), &r).is_ok());
        assert!(fits(&q("ubr"), &r).is_err());
        // Bare AAL5 SDUs and natm's transport do not mix, whatever the class.
        let bare: Qos = "ubr:transport=none".parse().unwrap();
        assert!(fits(&q("ubr:transport=none"), &bare).is_ok());
        assert!(fits(&q("ubr"), &bare).is_err());
        let ubr: Qos = "ubr".parse().unwrap();
        let e = fits(&q("ubr:transport=none"), &ubr).unwrap_err();
        assert!(e.contains("bare AAL5 SDUs"), "{e}");
        let cbr: Qos = "cbr:pcr=50Mbps,transport=none".parse().unwrap();
        assert!(fits(&q("cbr:pcr=20Mbps,transport=none"), &cbr).is_ok());
        assert!(fits(&q("cbr:pcr=80Mbps,transport=none"), &cbr).is_err());
    }
}
