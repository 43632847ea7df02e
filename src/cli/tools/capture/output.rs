//! Where `natm capture` puts what it keeps: a pcap file of one link type
//! (`natm_proto::wire::pcap`, specs.md §6.1) or one line per frame on stdout.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::BufWriter;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context;
use natm_proto::wire::aal5::{Aal5Error, Reassembler};
use natm_proto::wire::cell::{self, HeaderFormat, CELL_LEN};
use natm_proto::wire::pcap::{CaptureError, PcapWriter, SunAtmHeader, TsPrecision};
use natm_proto::wire::pcap::{LINKTYPE_ERF, LINKTYPE_SUNATM};
use natm_proto::wire::q2931;
use natm_proto::wire::sscop::Pdu;
use natm_proto::wire::tpdu;
use natm_proto::wire::vcframe::FrameKind;

use super::{Format, Natm, Seen};
use crate::cli::outln;

/// The signalling VC of the UNI (Q.2931 over SSCOP on VPI 0/VCI 5).
use natm::wire::vcframe::SIGNALLING_VCI;
/// Frames in reassembly at once before all are dropped (a bound on memory).
const MAX_REASSEMBLIES: usize = 4_096;

/// What a capture counted.
#[derive(Debug, Default)]
pub(super) struct Stats {
    /// Frames the socket delivered.
    pub(super) packets: u64,
    /// natm datagrams among them (after the port filter).
    pub(super) datagrams: u64,
    /// Frames that were not natm datagrams (or not on a chosen port).
    pub(super) skipped: u64,
    /// Signalling frames kept.
    signalling: u64,
    /// Data frames kept.
    data: u64,
    /// OAM and RM frames and cells kept.
    oam: u64,
    /// Cells kept as ERF cell records.
    cells: u64,
    /// natm frames no record can hold (larger than a record's length field), and
    /// frames reassembled from cells that failed AAL5's checks.
    unwritable: u64,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} packets seen, {} natm datagrams: {} signalling, {} data, {} oam frames, \
             {} cells kept; {} skipped",
            self.packets,
            self.datagrams,
            self.signalling,
            self.data,
            self.oam,
            self.cells,
            self.skipped
        )?;
        if self.unwritable > 0 {
            write!(
                f,
                ", {} not recordable (too large, or a broken AAL5 frame)",
                self.unwritable
            )?;
        }
        Ok(())
    }
}

/// One AAL5 frame: from a VC frame, or reassembled from the cells of trains.
struct Frame<'a> {
    kind: FrameKind,
    vpi: u8,
    vci: u16,
    sdu: &'a [u8],
    from_cells: bool,
}

/// A capture's destination.
pub(super) struct Output {
    sink: Sink,
    /// Cells of trains being reassembled, per direction and VC.
    reassembly: HashMap<(SocketAddr, SocketAddr, u16, u16), Reassembler>,
}

enum Sink {
    SunAtm(PcapWriter<BufWriter<File>>),
    Erf(PcapWriter<BufWriter<File>>),
    Lines,
}

impl Output {
    /// A pcap file at `path` (replaced) in `format`, nanosecond timestamps.
    pub(super) fn file(path: &Path, format: Format) -> anyhow::Result<Output> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let linktype = match format {
            Format::Sunatm => LINKTYPE_SUNATM,
            Format::Erf => LINKTYPE_ERF,
        };
        let w = PcapWriter::new(BufWriter::new(file), linktype, TsPrecision::Nanos)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(Output::new(match format {
            Format::Sunatm => Sink::SunAtm(w),
            Format::Erf => Sink::Erf(w),
        }))
    }

    /// One line per frame on stdout.
    pub(super) fn lines() -> Output {
        Output::new(Sink::Lines)
    }

    fn new(sink: Sink) -> Output {
        Output {
            sink,
            reassembly: HashMap::new(),
        }
    }

    /// Keeps one natm datagram.
    pub(super) fn datagram(
        &mut self,
        seen: &Seen,
        natm: &Natm<'_>,
        stats: &mut Stats,
    ) -> anyhow::Result<()> {
        match natm {
            Natm::Frame(h, sdu) => {
                let frame = Frame {
                    kind: h.kind,
                    vpi: h.vpi,
                    vci: h.vci,
                    sdu,
                    from_cells: false,
                };
                emit(&mut self.sink, seen, &frame, stats)
            }
            Natm::Train(cells) => {
                for c in cells {
                    self.cell(seen, c, stats)?;
                }
                Ok(())
            }
        }
    }

    /// One cell of a train: an ERF cell record, or into its VC's reassembly.
    fn cell(&mut self, seen: &Seen, c: &[u8; CELL_LEN], stats: &mut Stats) -> anyhow::Result<()> {
        if let Sink::Erf(w) = &mut self.sink {
            stats.cells += 1;
            return record(w.write_erf_cell(seen.ts, iface(seen), c), stats);
        }
        let p = cell::Packet::new_unchecked(&c[..]);
        let (vpi, vci) = (p.vpi(HeaderFormat::Uni), p.vci());
        if self.reassembly.len() >= MAX_REASSEMBLIES {
            self.reassembly.clear();
        }
        let r = self
            .reassembly
            .entry((seen.src, seen.dst, vpi, vci))
            .or_default();
        match r.push_cell(c) {
            Ok(Some(sdu)) => {
                let frame = Frame {
                    kind: if vpi == 0 && vci == SIGNALLING_VCI {
                        FrameKind::Signalling
                    } else {
                        FrameKind::Data
                    },
                    vpi: vpi as u8,
                    vci,
                    sdu,
                    from_cells: true,
                };
                emit(&mut self.sink, seen, &frame, stats)
            }
            // The frame goes on.
            Ok(None) => Ok(()),
            Err(Aal5Error::NotUserData { .. }) => {
                // OAM and RM cells: not part of any AAL5 frame.
                stats.oam += 1;
                if let Sink::Lines = self.sink {
                    outln!(
                        "{} {} > {} {vpi}/{vci} oam cell PTI {}",
                        time(seen),
                        seen.src,
                        seen.dst,
                        p.pti().bits()
                    );
                }
                Ok(())
            }
            // A broken frame (CRC, length, too many cells), dropped by the reassembler.
            Err(_) => {
                stats.unwritable += 1;
                Ok(())
            }
        }
    }

    /// Flushes the file.
    pub(super) fn finish(self) -> anyhow::Result<()> {
        match self.sink {
            Sink::SunAtm(w) | Sink::Erf(w) => {
                w.into_inner().context("flushing the capture")?;
            }
            Sink::Lines => {}
        }
        Ok(())
    }
}

/// The ERF interface a frame is recorded on: 0 from the DTE, 1 from the DCE.
fn iface(seen: &Seen) -> u8 {
    u8::from(!seen.sent_by_dte())
}

/// Writes or prints one AAL5 frame.
fn emit(sink: &mut Sink, seen: &Seen, f: &Frame<'_>, stats: &mut Stats) -> anyhow::Result<()> {
    match f.kind {
        FrameKind::Signalling => stats.signalling += 1,
        FrameKind::Data => stats.data += 1,
        FrameKind::Oam | FrameKind::Rm => stats.oam += 1,
    }
    match sink {
        Sink::SunAtm(w) => {
            let header = SunAtmHeader {
                tx: seen.sent_by_dte(),
                // Q.2931 traffic makes Wireshark hand the SDU to SSCOP on any VC;
                // raw traffic is AAL5 (specs.md §6.1).
                traffic: match f.kind {
                    FrameKind::Signalling => SunAtmHeader::TYPE_Q2931,
                    _ => SunAtmHeader::TYPE_RAW,
                },
                vpi: f.vpi,
                vci: f.vci,
            };
            record(w.write_sunatm(seen.ts, &header, f.sdu), stats)
        }
        Sink::Erf(w) => record(
            w.write_erf_aal5(seen.ts, iface(seen), f.vpi, f.vci, f.sdu),
            stats,
        ),
        Sink::Lines => {
            outln!(
                "{} {} > {} {}/{} {}{} {} {}",
                time(seen),
                seen.src,
                seen.dst,
                f.vpi,
                f.vci,
                f.kind,
                if f.from_cells { " (cells)" } else { "" },
                f.sdu.len(),
                describe(f.kind, f.sdu)
            );
            Ok(())
        }
    }
}

/// A record written, or counted as too large for one; I/O errors end the capture.
fn record(r: Result<(), CaptureError>, stats: &mut Stats) -> anyhow::Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(CaptureError::RecordTooLong { .. } | CaptureError::Aal5(_)) => {
            stats.unwritable += 1;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Seconds and nanoseconds since the epoch.
fn time(seen: &Seen) -> String {
    format!("{}.{:09}", seen.ts.as_secs(), seen.ts.subsec_nanos())
}

/// What an SDU says, through natm-proto's parsers: the SSCOP PDU and Q.2931 message of
/// signalling, the TPDU header of data.
pub(super) fn describe(kind: FrameKind, sdu: &[u8]) -> String {
    match kind {
        FrameKind::Signalling => match Pdu::parse(sdu) {
            Ok(pdu) => {
                let ty = pdu.pdu_type();
                match &pdu {
                    Pdu::Sd { ns, info } => {
                        let msg = q2931::Packet::new_checked(&info[..])
                            .and_then(|p| q2931::HeaderRepr::parse(&p));
                        match msg {
                            Ok(h) => {
                                format!("SSCOP {ty} N(S)={ns} Q.2931 {} ref {}", h.kind, h.call_ref)
                            }
                            Err(e) => format!("SSCOP {ty} N(S)={ns} (Q.2931: {e})"),
                        }
                    }
                    _ => format!("SSCOP {ty}"),
                }
            }
            Err(e) => format!("(SSCOP: {e})"),
        },
        FrameKind::Data => match tpdu::Header::parse_bytes(sdu) {
            Ok((h, payload)) => format!(
                "TPDU {} seq {} ack {} msg {} payload {}",
                h.ty,
                h.seq,
                h.ack,
                h.msg,
                payload.len()
            ),
            Err(e) => format!("(TPDU: {e})"),
        },
        FrameKind::Oam => "probe".to_owned(),
        FrameKind::Rm => match natm_proto::wire::rm::RmCell::parse(sdu) {
            Ok(c) => format!(
                "RM {} ER {:.0} CCR {:.0} MCR {:.0} cells/s{}{}",
                match c.dir {
                    natm_proto::wire::rm::Direction::Forward => "forward",
                    natm_proto::wire::rm::Direction::Backward => "backward",
                },
                c.er.cells(),
                c.ccr.cells(),
                c.mcr.cells(),
                if c.ci { " CI" } else { "" },
                if c.ni { " NI" } else { "" },
            ),
            Err(e) => format!("(RM: {e})"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use natm_proto::wire::sscop::SeqNum;

    #[test]
    fn signalling_is_described_down_to_the_q2931_message() {
        // RELEASE COMPLETE, call reference 1 from the originating side, no IEs.
        let msg = vec![0x09, 0x03, 0x00, 0x00, 0x01, 0x5A, 0x80, 0x00, 0x00];
        let sd = Pdu::Sd {
            ns: SeqNum::new(7).unwrap(),
            info: msg,
        }
        .to_bytes();
        let text = describe(FrameKind::Signalling, &sd);
        assert!(
            text.starts_with("SSCOP SD N(S)=7 Q.2931 RELEASE COMPLETE"),
            "{text}"
        );
        assert!(describe(FrameKind::Signalling, &[1, 2, 3]).starts_with("(SSCOP: "));
        assert!(describe(FrameKind::Data, &[0x10; 8]).starts_with("(TPDU: "));
    }
}
