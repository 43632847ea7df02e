//! `natm capture -i IFACE`: natm's UDP traffic as ATM, for Wireshark (issue 14).
//!
//! A raw packet socket ([`super::rawsock`]) sees every frame of the interface; the
//! UDP datagrams whose payload is a natm VC frame or a cell train (`docs/wire.md`) are
//! written as pcap records Wireshark dissects natively ([`output`]), or printed one
//! line per frame. Everything else is counted as skipped.
//!
//! Decisions (docs/tools.md, "`natm capture`: design decisions"): one link type per file, SunATM
//! by default because tshark then decodes signalling as `atm:sscop:q2931` and data as
//! AAL5 with no preference set; ERF on request, for the AAL5 CRC check. Timestamps
//! are the receive time in nanoseconds. The SunATM direction bit (and the ERF
//! interface) says which end sent: DTE→DCE is the end with the lower UDP port.

mod output;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use natm_proto::wire::cell::CELL_LEN;
use natm_proto::wire::pcap::link::udp_datagram;
use natm_proto::wire::vcframe;
use natm_switchd::train;

use super::rawsock::RawSocket;
use output::{Output, Stats};

/// Record format of a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// LINKTYPE_SUNATM: signalling decodes as SSCOP/Q.2931 and data as AAL5 with no
    /// Wireshark preference; cell trains are reassembled into AAL5 frames.
    Sunatm,
    /// LINKTYPE_ERF: AAL5 records with the whole CPCS-PDU (Wireshark checks the CRC),
    /// one cell record per cell of a train. Data VCs need
    /// `-o erf.aal5_type:unspecified` in Wireshark (it guesses LANE otherwise).
    Erf,
}

/// `natm capture`: natm frames seen on an interface, to a pcap file or stdout.
#[derive(Debug, Args)]
#[command(after_long_help = CAPTURE_HELP)]
pub(crate) struct CaptureArgs {
    /// The interface to capture on (`lo`, a veth, ...).
    #[arg(long, short = 'i')]
    interface: String,
    /// Write the natm frames to this pcap file instead of printing a line for each.
    #[arg(long, short = 'w')]
    write: Option<PathBuf>,
    /// Record format of the file.
    #[arg(long, value_enum, default_value_t = Format::Sunatm)]
    format: Format,
    /// Keep only datagrams from or to this UDP port (repeat for more ports).
    #[arg(long = "port", short = 'p')]
    ports: Vec<u16>,
    /// Stop after this many natm datagrams.
    #[arg(long, short = 'c')]
    count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    seconds: Option<f64>,
}

const CAPTURE_HELP: &str = "\
natm capture reads every frame of the interface through a raw packet socket (run it
as root) and keeps the UDP datagrams, over IPv4 or IPv6, that carry a natm VC frame
(first octet 0xC0-0xCF) or a cell train (0xD1). Signalling frames become SSCOP PDUs
on VPI 0/VCI 5, data frames AAL5 frames on their VC:
  natm capture -i lo -w call.pcap --seconds 10
  tshark -r call.pcap -V
With --format erf the records carry the whole AAL5 CPCS-PDU, so Wireshark checks the
CRC-32 (open data VCs with -o erf.aal5_type:unspecified). Without -w each frame is
one line: time, source > destination, VPI/VCI, kind, length, and the SSCOP PDU and
Q.2931 message or the TPDU type. It stops after --count datagrams, --seconds, or at
Ctrl-C (SIGINT or SIGTERM), with the file flushed and a summary on stderr.
IP fragments (a TPDU larger than the interface's MTU) are skipped, not reassembled.
A UDP GSO run (several TPDUs handed to the kernel at once) that stays on the host
(loopback, veth) crosses it unsplit: as with tcpdump, it is one frame, and one record.";

pub(crate) fn run(a: CaptureArgs) -> super::super::CliResult {
    if let Some(s) = a.seconds {
        if !(s.is_finite() && s > 0.0) {
            bail!("--seconds must be a positive number, not {s}");
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing Ctrl-C")?;
    }
    let sock = RawSocket::open(&a.interface)?;
    let mut out = match &a.write {
        Some(path) => Output::file(path, a.format)?,
        None => Output::lines(),
    };
    // As tcpdump's "listening on": the socket is open, nothing sent from now is missed.
    eprintln!("natm capture: capturing on {}", a.interface);
    let deadline = a
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let mut stats = Stats::default();
    // The largest frame: a 64 KiB loopback MTU and its link header.
    let mut buf = vec![0u8; 1 << 17];
    let take = |frame: &[u8], stats: &mut Stats, out: &mut Output| -> anyhow::Result<()> {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        stats.packets += 1;
        let Ok(d) = udp_datagram(sock.framing(), frame) else {
            stats.skipped += 1;
            return Ok(());
        };
        let wanted = a.ports.is_empty()
            || a.ports.contains(&d.src.port())
            || a.ports.contains(&d.dst.port());
        match classify(d.payload).filter(|_| wanted) {
            Some(natm) => {
                stats.datagrams += 1;
                let seen = Seen {
                    ts,
                    src: d.src,
                    dst: d.dst,
                };
                out.datagram(&seen, &natm, stats)?;
            }
            None => stats.skipped += 1,
        }
        Ok(())
    };
    let more = |stats: &Stats| a.count.is_none_or(|c| stats.datagrams < c);
    while !stop.load(Ordering::Relaxed)
        && deadline.is_none_or(|d| Instant::now() < d)
        && more(&stats)
    {
        let Some(n) = sock.recv(&mut buf).context("reading the packet socket")? else {
            continue;
        };
        take(&buf[..n], &mut stats, &mut out)?;
    }
    // Stopped by a signal: what the kernel already queued was seen before the stop,
    // so it is kept (bounded: the socket's buffer, read without waiting).
    if stop.load(Ordering::Relaxed) {
        sock.stop_waiting()?;
        while more(&stats) {
            let Some(n) = sock.recv(&mut buf).context("reading the packet socket")? else {
                break;
            };
            take(&buf[..n], &mut stats, &mut out)?;
        }
    }
    out.finish()?;
    eprintln!("natm capture: {stats}");
    Ok(())
}

/// Where and when a natm datagram was seen.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// Receive time after the Unix epoch.
    ts: Duration,
    src: SocketAddr,
    dst: SocketAddr,
}

impl Seen {
    /// Whether the sender is the DTE: the end with the lower UDP port (then address).
    fn sent_by_dte(&self) -> bool {
        (self.src.port(), self.src.ip()) < (self.dst.port(), self.dst.ip())
    }
}

/// A UDP payload natm sent.
#[derive(Debug)]
enum Natm<'a> {
    /// A frame-mode datagram: the VC header and one AAL5 SDU.
    Frame(vcframe::Repr, &'a [u8]),
    /// A cell-mode datagram: whole 53-octet cells.
    Train(Vec<&'a [u8; CELL_LEN]>),
}

/// The natm datagram in a UDP payload, if it is one.
fn classify(payload: &[u8]) -> Option<Natm<'_>> {
    if let Ok((header, sdu)) = vcframe::Repr::parse_bytes(payload) {
        return Some(Natm::Frame(header, sdu));
    }
    let cells = train::parse(payload).ok()?;
    Some(Natm::Train(
        cells.filter_map(|c| c.try_into().ok()).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use natm_proto::wire::vcframe::FrameKind;

    #[test]
    fn vc_frames_and_cell_trains_are_natm_and_nothing_else() {
        let frame = vcframe::Repr::new(FrameKind::Signalling, 0, 5).to_bytes();
        let mut sig = frame.to_vec();
        sig.extend_from_slice(&[1, 2, 3, 4]);
        match classify(&sig) {
            Some(Natm::Frame(h, sdu)) => {
                assert_eq!((h.kind, h.vpi, h.vci), (FrameKind::Signalling, 0, 5));
                assert_eq!(sdu, &[1, 2, 3, 4]);
            }
            other => panic!("{other:?}"),
        }
        let mut cells = vec![train::TRAIN_MAGIC];
        cells.extend_from_slice(&[0u8; 2 * CELL_LEN]);
        assert!(matches!(classify(&cells), Some(Natm::Train(c)) if c.len() == 2));
        // Kind 3 is an RM frame.
        assert!(
            matches!(classify(&[0xCC, 0, 0, 40]), Some(Natm::Frame(h, _)) if h.kind == FrameKind::Rm)
        );
        // DNS, a TPDU without the header, a broken train.
        for stray in [
            &[0x12, 0x34, 0x01, 0x00][..],
            &[0x10, 0, 0, 0, 0],
            &cells[..CELL_LEN],
            &[],
        ] {
            assert!(classify(stray).is_none(), "{stray:?}");
        }
    }

    #[test]
    fn the_lower_port_is_the_dte() {
        let seen = |src: &str, dst: &str| Seen {
            ts: Duration::ZERO,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
        };
        assert!(seen("127.0.0.1:4000", "127.0.0.1:5000").sent_by_dte());
        assert!(!seen("127.0.0.1:5000", "127.0.0.1:4000").sent_by_dte());
        assert!(seen("127.0.0.1:4000", "127.0.0.2:4000").sent_by_dte());
    }
}
