//! The tools a user reaches for to move bytes through sigd (issue 14): `natm call`
//! and `natm listen` (netcat/ttcp-style: stdin/stdout, a file or generated load, an
//! echo mode, a live progress line and a summary), and `natm ping` (round trips on a
//! best-effort VC to an echo listener); and `natm capture`, which shows their traffic to
//! Wireshark as ATM. What they share lives here: opening the host,
//! turning a refusal into its cause and what to do, the summary, progress and pacing.

pub(crate) mod call;
pub(crate) mod capture;
pub(crate) mod events;
pub(crate) mod listen;
pub(crate) mod ping;
mod rawsock;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use natm::transport::PsbStats;
use natm::ulib::{ConnStats, Error, Granted, Host, HostConfig, LinkMode, Ports, Release};
use natm::wire::q2931::CauseValue;
use serde::Serialize;

use super::units;

/// Byte sizes for clap (`100MB`, `64KiB`).
fn parse_bytes(s: &str) -> Result<u64, String> {
    units::bytes(s).map_err(|e| e.to_string())
}

/// Rates for clap (`50Mbps`).
fn parse_rate(s: &str) -> Result<u64, String> {
    units::rate(s).map_err(|e| e.to_string())
}

/// A PVC's `VPI.VCI` for clap (`0.100`, `2.200`): VPI 0..=255, VCI 32..=65535 (0..=31
/// are reserved for signalling, OAM and ILMI).
fn parse_pvc(s: &str) -> Result<(u8, u16), String> {
    let (vpi, vci) = s
        .split_once('.')
        .ok_or_else(|| format!("\"{s}\": expected VPI.VCI, e.g. 0.100"))?;
    let vpi: u8 = vpi
        .parse()
        .map_err(|_| format!("\"{vpi}\": a VPI is 0..=255"))?;
    let vci: u16 = vci
        .parse()
        .map_err(|_| format!("\"{vci}\": a VCI is 32..=65535"))?;
    if natm::wire::cell::is_reserved_vci(vci) {
        return Err(format!(
            "VCI {vci} is reserved (0..=31: signalling, OAM, ILMI); a PVC takes 32..=65535"
        ));
    }
    Ok((vpi, vci))
}

/// The QoS of a PVC when `--qos` is not given: bare AAL5 SDUs, best effort.
const PVC_QOS: &str = "ubr:transport=none";

/// Durations for clap (`200ms`, `2s`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    units::duration(s).map_err(|e| e.to_string())
}

/// How a tool's host reaches sigd and the network (`natm call`, `listen`, `ping`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HostOpts {
    /// The host's sigd socket [default: $NATM_SIGD, else /run/natm/sigd.sock].
    #[arg(long)]
    sigd: Option<PathBuf>,
    /// How the UDP link carries frames: `frame` (one per datagram) or `cell[:N]`
    /// (AAL5 cells in trains of N, default 32) [default: $NATM_LINK, else frame]. Both
    /// ends, or the switch port each attaches to, must use the same mode.
    #[arg(long, value_name = "cell[:N]|frame")]
    link: Option<LinkMode>,
    /// UDP sockets: `vc`, one per connection end, or `host`, one for every VC of the
    /// host, told apart by VCI and cookie [default: $NATM_PORTS, else vc; a cell-mode
    /// link keeps vc]. The peer need not use the same.
    #[arg(long, value_name = "vc|host")]
    ports: Option<Ports>,
}

/// A host whose calls go through the sigd `o.sigd` names (default: the library's,
/// `$NATM_SIGD` else /run/natm/sigd.sock), its links in `o.link`'s mode (else
/// `$NATM_LINK`, else frame mode), on `o.ports`' sockets (else `$NATM_PORTS`, else a
/// socket per connection end).
fn open_host(o: &HostOpts) -> anyhow::Result<Host> {
    let mut cfg = HostConfig::default();
    if let Some(p) = &o.sigd {
        cfg.sigd_socket = Some(p.clone());
    }
    cfg.engine.link_mode = match o.link {
        Some(m) => m,
        None => match std::env::var("NATM_LINK") {
            Ok(v) => v.parse().map_err(|e| anyhow!("$NATM_LINK: {e}"))?,
            Err(_) => LinkMode::Frame,
        },
    };
    cfg.engine.ports = ports_or_env(o.ports)?;
    Host::open(cfg).map_err(|e| anyhow!("cannot start natm's engine: {e}"))
}

/// The ports `--ports` asked for, else `$NATM_PORTS`'s, else the library's default
/// (a socket per connection end).
pub(crate) fn ports_or_env(asked: Option<Ports>) -> anyhow::Result<Ports> {
    Ok(match asked {
        Some(p) => p,
        None => match std::env::var("NATM_PORTS") {
            Ok(v) => v.parse().map_err(|e| anyhow!("$NATM_PORTS: {e}"))?,
            Err(_) => Ports::default(),
        },
    })
}

/// A refused or failed call as its UNI cause, what it means here and what to do.
/// `target` is what was called ("address[:SAP]").
fn explain(e: Error, target: &str) -> anyhow::Error {
    let (cause, detail) = match e {
        Error::Refused { cause, detail } => (cause, detail),
        Error::NoSigd { path, source } => {
            let todo = if source.kind() == std::io::ErrorKind::PermissionDenied {
                "you may not use that socket: run as its owner (or root), or give --sigd PATH \
                 of a sigd you may use (or set $NATM_SIGD)"
            } else {
                "start `natm sigd`, or give --sigd PATH (or set $NATM_SIGD)"
            };
            return anyhow!("cannot reach sigd at {}: {source}; {todo}", path.display());
        }
        e => return anyhow!("calling {target}: {e}"),
    };
    let meaning = CauseValue::from_raw(cause).meaning();
    // A peer's release already names its cause; it is said once, below.
    let detail = match detail.find(&format!(" (cause {cause}")) {
        Some(i) => detail[..i].to_owned(),
        None => detail,
    };
    // A switch on the way refused the call (issue 33): sigd's sentence names the
    // switch, the link and the figures, and the cause's usual reading here (the
    // callee's SAP, the peer sigd, this host's admission) would mislead.
    if detail.starts_with("refused by the network") {
        let todo = match cause {
            37 => "lower pcr in --qos, or add min_pcr=… to take what the network has",
            88 => "the callee is not natm: ask for transport=none in --qos",
            _ => "see that switch's log and `natm stat --switch` there",
        };
        return anyhow!("{detail} (cause {cause}, {meaning}) — {todo}");
    }
    let (addr, sap) = target.rsplit_once(':').unwrap_or((target, ""));
    let (what, todo): (String, String) = match cause {
        88 => (
            format!("nobody listens on SAP \"{sap}\" at {addr}"),
            format!("start `natm listen {sap}` on that host, or check the SAP"),
        ),
        37 => (
            format!("admission refused: {detail}"),
            "lower pcr in --qos to at most what is free, or add min_pcr=… to take less".into(),
        ),
        47 => (
            format!("admission refused (CPU): {detail}"),
            "lower pcr, or raise tpdu= so that each TPDU carries more".into(),
        ),
        // sigd's sentence says which route to add.
        3 => (format!("no route: {detail}"), String::new()),
        1 => (
            format!("no such address: {detail}"),
            "check the address: the called sigd does not own it".into(),
        ),
        17 => (
            format!("the listener is busy: {detail}"),
            "its backlog is full: retry shortly".into(),
        ),
        21 => (
            format!("call rejected: {detail}"),
            "the called application or a sigd's [[policy]] refused it".into(),
        ),
        27 => (
            format!("the peer sigd is unreachable: {detail}"),
            "is it running, at the endpoint the [[directory]] route names?".into(),
        ),
        41 => (
            format!("temporary failure: {detail}"),
            "retry; if it persists, look at both sigds' logs".into(),
        ),
        73 => (
            format!("QoS not accepted by the listener: {detail}"),
            "call with a QoS the listener takes (its `natm listen --qos`)".into(),
        ),
        102 => (
            format!("no answer in time: {detail}"),
            "the called application did not answer: is it alive?".into(),
        ),
        _ => (
            format!("call refused: {detail}"),
            "see the sigd logs at both ends".into(),
        ),
    };
    let what = what.trim_end_matches([':', ' ']);
    if todo.is_empty() {
        anyhow!("{what} (cause {cause}, {meaning})")
    } else {
        anyhow!("{what} (cause {cause}, {meaning}) — {todo}")
    }
}

/// The error that ended a transfer, explained by sigd's release of the call when
/// there was one (the peer, an administrator with `natm release`, or sigd stopping):
/// its sentence and cause. `released` is asked again for a moment after an abort by
/// the peer: the peer's ABORT takes the data path, one hop, and can arrive before the
/// `Released` that says why, which crosses both sigds.
fn ended(e: &Error, released: impl Fn() -> Option<Release>, doing: &str) -> Option<anyhow::Error> {
    let mut r = released();
    if r.is_none() && matches!(e, Error::Aborted(natm::transport::AbortReason::Peer)) {
        let until = Instant::now() + Duration::from_millis(500);
        while r.is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
            r = released();
        }
    }
    let r = r?;
    let meaning = CauseValue::from_raw(r.cause).meaning();
    // A peer's release already names its cause; it is said once, here.
    let detail = match r.detail.find(&format!(" (cause {}", r.cause)) {
        Some(i) => &r.detail[..i],
        None => &r.detail,
    };
    Some(anyhow!(
        "the call was released while {doing}: {detail} (cause {}, {meaning})",
        r.cause
    ))
}

/// "cbr:pcr=10Mbps (10.0 Mbit/s reserved out)" or the asked QoS in direct mode.
fn describe_grant(g: Option<&Granted>, asked: &str) -> String {
    match g {
        Some(g) if g.tx_bps > 0 => {
            format!("granted {} ({} reserved out)", g.qos, mbit(g.tx_bps as f64))
        }
        Some(g) => format!("granted {} (nothing reserved)", g.qos),
        None => format!("direct mode, {asked} (no sigd, nothing reserved)"),
    }
}

fn mbit(bps: f64) -> String {
    format!("{:.1} Mbit/s", bps / 1e6)
}

/// "12.3 MB" for a byte count.
fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b} B")
    }
}

/// What one end of a call moved, as `natm call` and `natm listen` report it
/// (text on stderr, or JSON with `--json`).
#[derive(Debug, Serialize)]
struct Summary {
    /// "call" or "listen".
    role: &'static str,
    /// Who was called, or who called.
    peer: String,
    /// The QoS in force from this side (the grant through sigd).
    qos: String,
    /// Rate reserved for this side's sending VC, bit/s (0: none).
    reserved_bps: u64,
    /// Call setup, caller's view (connect returned), ms.
    setup_ms: Option<f64>,
    /// The bytes this end moved: sent by a caller, received by a listener.
    bytes: u64,
    /// Seconds from the call's start to the end of that transfer.
    duration_s: f64,
    /// `bytes` over `duration_s`.
    mbit_per_s: f64,
    bytes_sent: u64,
    bytes_received: u64,
    messages_sent: u64,
    messages_received: u64,
    /// Smoothed RTT of the sending VC, µs (none: no ACK was ever timed).
    srtt_us: Option<u64>,
    /// Retransmitted TPDUs (SMART fast path, timeout and head check).
    retransmissions: u64,
    /// Of those, retransmissions an ACK then showed needless (the original had
    /// arrived; a head check or a timeout fired by late ACKs).
    spurious_retransmissions: u64,
    bytes_retransmitted: u64,
    /// Retransmission timeouts that fired.
    timeouts: u64,
    /// Windows lost whole behind a first timeout's head: the sign of a path that
    /// shrank under the call (RFC 8899 §4.3, `PsbStats::windows_lost`).
    windows_lost: u64,
    /// Whether the sending VC runs error control: without it the sender sees no loss
    /// (the receiver's `gaps`, drops and `queue_drops` are where losses show).
    error_control: bool,
    /// TPDUs the sender inferred lost (SMART's fast path or a timeout).
    tpdus_marked_lost: u64,
    /// Gaps in the received sequence on a VC without error control: runs of one or
    /// more missing TPDUs.
    gaps: u64,
    /// Data TPDUs that arrived on the receiving VC.
    tpdus_received: u64,
    /// TPDUs that never arrived on a VC without error control, each counted once.
    tpdus_lost: u64,
    /// Messages not delivered on a VC without error control, each counted once (a
    /// TPDU of theirs lost, lost whole, or dropped for want of buffer).
    messages_lost: u64,
    /// TPDUs the receiving VC dropped (late, headless, out of window, no buffer…).
    dropped_tpdus: u64,
    /// Messages the receiving VC discarded because a TPDU of theirs was lost.
    messages_dropped: u64,
    /// Datagrams the kernel dropped from the data socket's full queue.
    queue_drops: Option<u64>,
    /// The path MTU the data socket's peer is reached with (octets, IP header
    /// included): new TPDUs are cut to fit it unfragmented.
    path_mtu: Option<u32>,
    /// TPDUs that went out in IP fragments after the path MTU fell under them.
    fragmented: u64,
    /// TPDUs resent as AAL5 cell trains after a black hole was found under them.
    sent_as_cells: u64,
    /// The sending VC's path MTU search (RFC 8899): the largest datagram payload
    /// confirmed to cross the path, and its probes; absent where there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    plpmtud: Option<PlpmtudSummary>,
    /// Datagrams the data socket failed to send (each one a loss for SMART to mend).
    send_errors: u64,
    /// A bare AAL5 VC's (`transport=none`) counters; absent on natm's transport.
    #[serde(skip_serializing_if = "Option::is_none")]
    bare: Option<BareSummary>,
    /// The sending VC's flow-control rate at the end, bit/s (packet-pair, leaky
    /// bucket, and ABR's allowed cell rate in payload bits); absent where none.
    #[serde(skip_serializing_if = "Option::is_none")]
    flow_rate_bps: Option<u64>,
    /// ABR's RM cells (`flow=abr`); absent when the call had none.
    #[serde(skip_serializing_if = "Option::is_none")]
    rm: Option<RmSummary>,
    /// The host's UDP ports with one port per host (`--ports host`), counted over the
    /// tool's run; absent with a socket per VC.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ports: Vec<PortSummary>,
}

/// One host port (`natm::ulib::PortStats`): every VC of the host on one UDP socket,
/// so what the socket read and what no call took are counted here, not per call.
#[derive(Debug, Serialize)]
struct PortSummary {
    local: String,
    datagrams: u64,
    /// Receive batches handed to a VC whole, without a copy.
    whole_batches: u64,
    /// Datagrams no route took (a wrong cookie, an unknown VCI).
    unrouted: u64,
    /// Of those, dropped.
    held_dropped: u64,
    /// Datagrams the kernel dropped from the port's full queue.
    kernel_drops: Option<u64>,
}

/// What an ABR call's RM cells did.
#[derive(Debug, Serialize)]
struct RmSummary {
    /// Forward RM cells this end's source sent.
    frm_sent: u64,
    /// Backward RM cells it took as feedback.
    brm_taken: u64,
    /// The peer source's forward RM cells this end turned around.
    turned: u64,
}

/// The sending VC's path MTU search (RFC 8899 PLPMTUD, `natm::ConnStats::plpmtud`).
#[derive(Debug, Serialize)]
struct PlpmtudSummary {
    /// The largest datagram payload confirmed to cross the path (octets).
    plpmtu: usize,
    probes_sent: u64,
    probes_acked: u64,
    probes_lost: u64,
    /// Of the lost, those lost while the VC's data was lost too (not held against
    /// their size: congestion, not the MTU).
    probes_lost_congested: u64,
    /// Times the PLPMTU fell back to base because data stopped getting through.
    black_holes: u64,
}

/// What a bare AAL5 VC (`transport=none`) counted: SDUs each way and what was
/// refused or dropped (there are no ACKs, so no RTT and no retransmissions).
#[derive(Debug, Serialize)]
struct BareSummary {
    sdus_sent: u64,
    sdus_received: u64,
    /// Messages refused because they were over the VC's `max_sdu` (nothing sent).
    refused_too_big: u64,
    /// SDUs the shaper held back to the contract's PCR.
    shaped: u64,
    /// Received SDUs dropped: over `max_sdu`.
    dropped_too_big: u64,
    /// Received SDUs dropped: the receive buffer was full.
    dropped_queue_full: u64,
    /// Received SDUs dropped otherwise (empty, or after the release).
    dropped_other: u64,
}

impl Summary {
    #[allow(clippy::too_many_arguments)]
    fn new(
        role: &'static str,
        peer: String,
        qos: String,
        reserved_bps: u64,
        setup: Option<Duration>,
        moved: u64,
        duration: Duration,
        messages: (u64, u64),
        bytes: (u64, u64),
        s: &ConnStats,
    ) -> Summary {
        let secs = duration.as_secs_f64();
        Summary {
            role,
            peer,
            reserved_bps,
            setup_ms: setup.map(|d| d.as_secs_f64() * 1e3),
            bytes: moved,
            duration_s: secs,
            mbit_per_s: if secs > 0.0 {
                moved as f64 * 8.0 / secs / 1e6
            } else {
                0.0
            },
            bytes_sent: bytes.0,
            bytes_received: bytes.1,
            messages_sent: messages.0,
            messages_received: messages.1,
            srtt_us: s.srtt.map(|d| d.as_micros() as u64),
            retransmissions: s.tx.retransmissions(),
            spurious_retransmissions: s.tx.retransmissions() - s.tx.losses(),
            bytes_retransmitted: s.tx.bytes_retransmitted,
            timeouts: s.tx.timeouts,
            windows_lost: s.tx.windows_lost,
            error_control: qos
                .parse::<natm::wire::qos::Qos>()
                .is_ok_and(|q| q.resolved_transport(false).error_control),
            tpdus_marked_lost: s.tx.fast_marked + s.tx.timeout_marked,
            gaps: s.rx.gaps,
            tpdus_received: s.rx.tpdus_received,
            tpdus_lost: s.rx.tpdus_lost,
            messages_lost: s.rx.messages_lost,
            dropped_tpdus: rx_drops(&s.rx),
            messages_dropped: s.rx.partial_messages_dropped,
            queue_drops: s.queue_drops,
            path_mtu: s.path_mtu,
            fragmented: s.fragmented,
            sent_as_cells: s.sent_as_cells,
            plpmtud: s.plpmtud.map(|p| PlpmtudSummary {
                plpmtu: p.plpmtu,
                probes_sent: p.probes_sent,
                probes_acked: p.probes_acked,
                probes_lost: p.probes_lost,
                probes_lost_congested: p.probes_lost_congested,
                black_holes: p.black_holes,
            }),
            send_errors: s.send_errors,
            bare: s.bare.map(|b| BareSummary {
                sdus_sent: b.tx.sdus_sent,
                sdus_received: b.rx.sdus_received,
                refused_too_big: b.tx.refused_too_big,
                shaped: b.tx.shaped,
                dropped_too_big: b.rx.dropped_too_big,
                dropped_queue_full: b.rx.dropped_queue_full,
                dropped_other: b.rx.dropped_other + b.tx.dropped_other,
            }),
            flow_rate_bps: s.rate_bps,
            rm: (s.rm.frm_sent + s.rm.turned > 0).then_some(RmSummary {
                frm_sent: s.rm.frm_sent,
                brm_taken: s.rm.brm_taken,
                turned: s.rm.turned,
            }),
            qos,
            ports: Vec::new(),
        }
    }

    /// Add the host's ports' counters (one port per host; none otherwise).
    fn with_ports(mut self, host: &natm::ulib::Host) -> Summary {
        self.ports = host
            .ports()
            .into_iter()
            .map(|p| PortSummary {
                local: p.local.to_string(),
                datagrams: p.datagrams,
                whole_batches: p.whole_batches,
                unrouted: p.unrouted,
                held_dropped: p.held_dropped,
                kernel_drops: p.kernel_drops,
            })
            .collect();
        self
    }

    /// The summary on stderr, or as one JSON line: on stdout unless stdout carries
    /// data (`data_on_stdout`), then on stderr.
    fn print(&self, json: bool, data_on_stdout: bool) -> anyhow::Result<()> {
        if json {
            let line = serde_json::to_string(self)?;
            if data_on_stdout {
                eprintln!("{line}");
            } else {
                super::outln!("{line}");
            }
            return Ok(());
        }
        let srtt = self.srtt_us.map_or("no RTT sample".to_owned(), |u| {
            format!("srtt {:.3} ms", u as f64 / 1e3)
        });
        let setup = self
            .setup_ms
            .map_or(String::new(), |m| format!(", set up in {m:.2} ms"));
        eprintln!(
            "--- natm {} {} ({}{}) ---",
            self.role, self.peer, self.qos, setup
        );
        let verb = if self.role == "call" {
            "sent"
        } else {
            "received"
        };
        eprintln!(
            "{verb} {} ({} bytes) in {:.3} s: {:.1} Mbit/s",
            human_bytes(self.bytes),
            self.bytes,
            self.duration_s,
            self.mbit_per_s
        );
        if let Some(b) = &self.bare {
            eprintln!(
                "bare AAL5 VC (transport=none): SDUs {} sent, {} received; bytes {} sent, {} received",
                b.sdus_sent, b.sdus_received, self.bytes_sent, self.bytes_received
            );
            eprintln!(
                "drops: {} messages refused over max_sdu, {} SDUs dropped over max_sdu, {} with the receive buffer full, {} otherwise{}; no ACKs, so no RTT or retransmissions",
                b.refused_too_big,
                b.dropped_too_big,
                b.dropped_queue_full,
                b.dropped_other,
                self.queue_drops
                    .map_or(String::new(), |q| format!(", {q} datagrams dropped by the socket queue"))
            );
            return Ok(());
        }
        eprintln!(
            "messages {} sent, {} received; bytes {} sent, {} received",
            self.messages_sent, self.messages_received, self.bytes_sent, self.bytes_received
        );
        // Each direction's counters only where that direction carried something.
        if self.messages_sent > 0 {
            if self.error_control {
                eprintln!(
                    "sending: {srtt}; {} retransmissions ({} bytes, {} timeouts, {} needless), {} TPDUs marked lost",
                    self.retransmissions, self.bytes_retransmitted, self.timeouts, self.spurious_retransmissions, self.tpdus_marked_lost,
                );
            } else {
                eprintln!("sending: no error control, so no loss is seen here: the receiver's summary counts it");
            }
            if let (Some(rm), Some(acr)) = (&self.rm, self.flow_rate_bps) {
                eprintln!(
                    "ABR: allowed rate {:.1} Mbit/s at the end; {} forward RM cells sent, {} came back",
                    acr as f64 / 1e6,
                    rm.frm_sent,
                    rm.brm_taken
                );
            }
            if let Some(mtu) = self.path_mtu {
                eprintln!(
                    "path MTU {mtu}: TPDUs cut to fit; {} sent in IP fragments and {} as cells after the path shrank",
                    self.fragmented, self.sent_as_cells
                );
            }
            if let Some(p) = &self.plpmtud {
                eprintln!(
                    "path probed: {} octets per datagram confirmed ({} probes, {} lost)",
                    p.plpmtu, p.probes_sent, p.probes_lost
                );
            }
        }
        if self.messages_received > 0 || self.role == "listen" {
            eprintln!(
                "receiving: {} messages lost, {} TPDUs lost ({} gaps), {} TPDUs dropped, {} partial messages dropped{}",
                self.messages_lost,
                self.tpdus_lost,
                self.gaps,
                self.dropped_tpdus,
                self.messages_dropped,
                self.queue_drops
                    .map_or(String::new(), |q| format!(", {q} datagrams dropped by the socket queue"))
            );
        }
        for p in &self.ports {
            eprintln!(
                "host port {}: {} datagrams read ({} batches whole), {} no call took ({} dropped){}",
                p.local,
                p.datagrams,
                p.whole_batches,
                p.unrouted,
                p.held_dropped,
                p.kernel_drops
                    .map_or(String::new(), |k| format!(", {k} dropped by the kernel"))
            );
        }
        Ok(())
    }
}

fn rx_drops(s: &PsbStats) -> u64 {
    s.drop_out_of_window
        + s.drop_rcv_buf
        + s.drop_oversize
        + s.drop_late
        + s.drop_headless
        + s.drop_bad_cookie
        + s.drop_malformed
}

/// A live "bytes, Mbit/s" line on stderr while data moves, only when stderr is a
/// terminal. Rates use the real time between two updates, not an assumed tick.
struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    fn start(
        label: &'static str,
        bytes: impl Fn() -> u64 + Send + 'static,
        quiet: bool,
    ) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        if quiet || !std::io::stderr().is_terminal() {
            return Progress { stop, thread: None };
        }
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            let (mut last_t, mut last_b) = (start, 0u64);
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(500));
                let (now, b) = (Instant::now(), bytes());
                let dt = now.duration_since(last_t).as_secs_f64();
                let total = now.duration_since(start).as_secs_f64();
                let mut e = std::io::stderr().lock();
                let _ = write!(
                    e,
                    "\r\x1b[K{label} {}  now {}  average {}",
                    human_bytes(b),
                    mbit((b - last_b) as f64 * 8.0 / dt.max(1e-9)),
                    mbit(b as f64 * 8.0 / total.max(1e-9))
                );
                let _ = e.flush();
                (last_t, last_b) = (now, b);
            }
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        });
        Progress {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Paces sends to a rate (`--rate`) by sleeping until each byte is due.
struct Pacer {
    rate_bps: Option<u64>,
    start: Instant,
    bytes: u64,
}

impl Pacer {
    fn new(rate_bps: Option<u64>) -> Pacer {
        Pacer {
            rate_bps,
            start: Instant::now(),
            bytes: 0,
        }
    }

    /// Wait until `n` more bytes may go.
    fn wait(&mut self, n: usize) {
        let Some(r) = self.rate_bps.filter(|r| *r > 0) else {
            return;
        };
        let due = self.start + Duration::from_secs_f64(self.bytes as f64 * 8.0 / r as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        self.bytes += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_cause_and_what_to_do() {
        let e = explain(
            Error::Refused {
                cause: 88,
                detail: "nobody listens on that SAP".into(),
            },
            "+4420002:ttcp",
        )
        .to_string();
        assert!(
            e.starts_with("nobody listens on SAP \"ttcp\" at +4420002 (cause 88"),
            "{e}"
        );
        let e = explain(
            Error::Refused {
                cause: 37,
                detail: "80 Mbit/s requested (at least 80 Mbit/s), 35 Mbit/s free".into(),
            },
            "+4420002:ttcp",
        )
        .to_string();
        assert!(e.contains("admission refused: 80 Mbit/s"), "{e}");
        assert!(e.contains("35 Mbit/s free"), "{e}");
        assert!(e.contains("lower pcr"), "{e}");
        // A switch's refusal is the network's, whatever the cause usually means.
        let e = explain(
            Error::Refused {
                cause: 88,
                detail: "refused by the network at switch sw1, link atm0: the callee is a \
                         standard UNI user: ask for transport=none (cause 88: incompatible \
                         destination)"
                    .into(),
            },
            "+4420002:atmarp",
        )
        .to_string();
        assert_eq!(
            e,
            "refused by the network at switch sw1, link atm0: the callee is a standard UNI \
             user: ask for transport=none (cause 88, incompatible destination) — the callee \
             is not natm: ask for transport=none in --qos"
        );
    }

    #[test]
    fn the_pacer_holds_a_rate() {
        let mut p = Pacer::new(Some(8_000_000));
        let t = Instant::now();
        for _ in 0..11 {
            p.wait(10_000);
        }
        // 100 kB at 1 MB/s: the 11th send is due at 0.1 s.
        let e = t.elapsed();
        assert!(e >= Duration::from_millis(95), "{e:?}");
    }
}
