//! Capture files Wireshark reads: the classic pcap format with SunATM and ERF records
//! (specs.md §6).
//!
//! - [`LINKTYPE_SUNATM`] (123): a 4-octet pseudo-header (flags, VPI, VCI) and the
//!   reassembled AAL5 CPCS-**SDU** only; Wireshark dissects VPI 0/VCI 5 (or traffic type
//!   6) as `atm:sscop:q2931` (specs.md §6.1-6.2). Appending an AAL5 trailer would make
//!   SSCOP read the CRC as its own trailer.
//! - [`LINKTYPE_ERF`] (197): Endace records; type 4 carries a whole CPCS-PDU (first
//!   cell's header without HEC, SDU, pad, trailer) so Wireshark checks the AAL5 CRC,
//!   type 3 one cell without its HEC.
//!
//! The pcap format is written here rather than through the `pcap-file` crate: the
//! format is a 24-octet file header and a 16-octet record header, the crate's stable
//! release (2.0) pulls in a second `thiserror` major and a derive crate, its successor
//! is still a release candidate, and neither builds SunATM or ERF records, which are
//! the part that needs care. [`PcapWriter`] writes little-endian files with
//! microsecond or nanosecond timestamps; [`parse_file`] reads either byte order back
//! (tests, replaying captures) and never panics. [`link`] finds the UDP datagram in a
//! frame captured on a Linux interface (`natm capture`).

use std::io::{self, Write};
use std::time::Duration;

use thiserror::Error;

use super::aal5::{self, Aal5Error};
use super::cell::{HeaderRepr, Pti, CELL_LEN, HEADER_LEN};

pub mod link;

/// LINKTYPE_SUNATM: SunATM pseudo-header + AAL5 SDU.
pub const LINKTYPE_SUNATM: u32 = 123;
/// LINKTYPE_USER0: raw 53-octet cells, dissected through tshark's `user_dlts` table.
pub const LINKTYPE_USER0: u32 = 147;
/// LINKTYPE_ERF: Endace ERF records.
pub const LINKTYPE_ERF: u32 = 197;
/// File magic for microsecond timestamps.
pub const MAGIC_MICROS: u32 = 0xA1B2_C3D4;
/// File magic for nanosecond timestamps.
pub const MAGIC_NANOS: u32 = 0xA1B2_3C4D;
/// Snapshot length written in the file header.
pub const SNAPLEN: u32 = 65_535;
/// Octets in the pcap file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Octets in a pcap record header.
pub const RECORD_HEADER_LEN: usize = 16;
/// Octets in an ERF record header.
pub const ERF_HEADER_LEN: usize = 16;
/// ERF record type of one ATM cell (header without HEC + payload).
pub const ERF_TYPE_ATM: u8 = 3;
/// ERF record type of one AAL5 CPCS-PDU (first cell's header without HEC + PDU).
pub const ERF_TYPE_AAL5: u8 = 4;

/// Errors from writing or reading a capture.
#[derive(Debug, Error)]
pub enum CaptureError {
    /// Writing to the output failed.
    #[error("writing the capture: {0}")]
    Io(#[from] io::Error),
    /// A record is longer than its length field or the snapshot length allows.
    #[error("record of {len} octets exceeds the maximum of {max}")]
    RecordTooLong {
        /// Octets in the record.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// A record of another link type was written to this file.
    #[error("a LINKTYPE {record} record cannot go into a LINKTYPE {file} file")]
    WrongLinkType {
        /// The file's link type.
        file: u32,
        /// The record's.
        record: u32,
    },
    /// A timestamp does not fit the 32-bit seconds field.
    #[error("timestamp of {secs} s does not fit 32 bits")]
    Timestamp {
        /// Seconds since the epoch.
        secs: u64,
    },
    /// The SDU cannot be AAL5-encoded.
    #[error("AAL5: {0}")]
    Aal5(#[from] Aal5Error),
    /// The file does not start with a pcap magic number.
    #[error("not a pcap file (magic {magic:#010x})")]
    BadMagic {
        /// The first four octets, little-endian.
        magic: u32,
    },
    /// The file ends inside a header or a record.
    #[error("capture cut off at octet {offset}")]
    Truncated {
        /// Where the missing header or data starts.
        offset: usize,
    },
}

/// Timestamp resolution of a pcap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TsPrecision {
    /// Microseconds (magic 0xA1B2C3D4), what tcpdump writes.
    #[default]
    Micros,
    /// Nanoseconds (magic 0xA1B23C4D).
    Nanos,
}

/// The SunATM pseudo-header (specs.md §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SunAtmHeader {
    /// Direction: true if transmitted by the capturing host (Wireshark "DTE->DCE").
    pub tx: bool,
    /// Traffic type (low nibble of the flags): see the `TYPE_*` constants. Wireshark
    /// takes 0 on VPI 0/VCI 5 as signalling, 6 as signalling on any VC.
    pub traffic: u8,
    /// VPI.
    pub vpi: u8,
    /// VCI.
    pub vci: u16,
}

impl SunAtmHeader {
    /// Octets in the pseudo-header.
    pub const LEN: usize = 4;
    /// Traffic type: raw / unknown.
    pub const TYPE_RAW: u8 = 0;
    /// Traffic type: LANE.
    pub const TYPE_LANE: u8 = 1;
    /// Traffic type: LLC-encapsulated.
    pub const TYPE_LLC: u8 = 2;
    /// Traffic type: MARS.
    pub const TYPE_MARS: u8 = 3;
    /// Traffic type: IFMP.
    pub const TYPE_IFMP: u8 = 4;
    /// Traffic type: ILMI.
    pub const TYPE_ILMI: u8 = 5;
    /// Traffic type: Q.2931 (signalling AAL).
    pub const TYPE_Q2931: u8 = 6;

    /// The header of a raw-typed frame on a VC.
    pub const fn new(tx: bool, vpi: u8, vci: u16) -> SunAtmHeader {
        SunAtmHeader {
            tx,
            traffic: Self::TYPE_RAW,
            vpi,
            vci,
        }
    }

    /// The four octets; traffic types above 15 are masked to the nibble.
    pub const fn to_bytes(&self) -> [u8; Self::LEN] {
        let flags = (self.tx as u8) << 7 | (self.traffic & 0x0F);
        let vci = self.vci.to_be_bytes();
        [flags, self.vpi, vci[0], vci[1]]
    }

    /// The header at the start of a record, if it has four octets.
    pub fn parse(record: &[u8]) -> Option<SunAtmHeader> {
        let &[flags, vpi, v0, v1] = record.first_chunk::<{ Self::LEN }>()?;
        Some(SunAtmHeader {
            tx: flags & 0x80 != 0,
            traffic: flags & 0x0F,
            vpi,
            vci: u16::from_be_bytes([v0, v1]),
        })
    }
}

/// A LINKTYPE_SUNATM record: pseudo-header and the AAL5 SDU (no pad, no trailer).
pub fn sunatm_record(header: &SunAtmHeader, sdu: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(SunAtmHeader::LEN + sdu.len());
    r.extend_from_slice(&header.to_bytes());
    r.extend_from_slice(sdu);
    r
}

/// An ERF timestamp: 32.32 fixed point seconds, little-endian (rounded to nearest).
fn erf_timestamp(ts: Duration) -> Result<u64, CaptureError> {
    let secs =
        u32::try_from(ts.as_secs()).map_err(|_| CaptureError::Timestamp { secs: ts.as_secs() })?;
    let frac = ((u64::from(ts.subsec_nanos()) << 32) + 500_000_000) / 1_000_000_000;
    Ok((u64::from(secs) << 32) + frac)
}

/// An ERF record: timestamp, type, flags (interface in bits 1-0), record length,
/// loss counter 0, wire length, then `payload` (no padding, as `atmspec.py` writes).
pub fn erf_record(
    erf_type: u8,
    ts: Duration,
    iface: u8,
    payload: &[u8],
) -> Result<Vec<u8>, CaptureError> {
    let max = usize::from(u16::MAX) - ERF_HEADER_LEN;
    if payload.len() > max {
        return Err(CaptureError::RecordTooLong {
            len: payload.len(),
            max,
        });
    }
    let mut r = Vec::with_capacity(ERF_HEADER_LEN + payload.len());
    r.extend_from_slice(&erf_timestamp(ts)?.to_le_bytes());
    r.extend_from_slice(&[erf_type, iface & 0x03]);
    r.extend_from_slice(&((ERF_HEADER_LEN + payload.len()) as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0]);
    r.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    r.extend_from_slice(payload);
    Ok(r)
}

/// An ERF type-4 record of a whole CPCS-PDU on VPI/VCI (UNI header, PTI 0, CLP 0).
pub fn erf_aal5_record(
    ts: Duration,
    iface: u8,
    vpi: u8,
    vci: u16,
    cpcs_pdu: &[u8],
) -> Result<Vec<u8>, CaptureError> {
    let header = HeaderRepr::uni(vpi, vci, Pti::user_data(false, false)).to_bytes();
    let mut payload = Vec::with_capacity(4 + cpcs_pdu.len());
    payload.extend_from_slice(&header[..4]);
    payload.extend_from_slice(cpcs_pdu);
    erf_record(ERF_TYPE_AAL5, ts, iface, &payload)
}

/// An ERF type-3 record of one cell (its HEC left out).
pub fn erf_cell_record(
    ts: Duration,
    iface: u8,
    cell: &[u8; CELL_LEN],
) -> Result<Vec<u8>, CaptureError> {
    let mut payload = [0u8; CELL_LEN - 1];
    payload[..4].copy_from_slice(&cell[..4]);
    payload[4..].copy_from_slice(&cell[HEADER_LEN..]);
    erf_record(ERF_TYPE_ATM, ts, iface, &payload)
}

/// Writes a little-endian pcap file of one link type.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    linktype: u32,
    precision: TsPrecision,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header (version 2.4, snaplen 65535) and returns the writer.
    pub fn new(mut out: W, linktype: u32, precision: TsPrecision) -> io::Result<PcapWriter<W>> {
        let magic = match precision {
            TsPrecision::Micros => MAGIC_MICROS,
            TsPrecision::Nanos => MAGIC_NANOS,
        };
        let mut h = [0u8; FILE_HEADER_LEN];
        h[0..4].copy_from_slice(&magic.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&linktype.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter {
            out,
            linktype,
            precision,
        })
    }

    /// The file's link type.
    pub fn linktype(&self) -> u32 {
        self.linktype
    }

    /// Writes one record, `ts` after the Unix epoch, captured whole.
    pub fn write_record(&mut self, ts: Duration, data: &[u8]) -> Result<(), CaptureError> {
        let max = SNAPLEN as usize;
        if data.len() > max {
            return Err(CaptureError::RecordTooLong {
                len: data.len(),
                max,
            });
        }
        let secs = u32::try_from(ts.as_secs())
            .map_err(|_| CaptureError::Timestamp { secs: ts.as_secs() })?;
        let frac = match self.precision {
            TsPrecision::Micros => ts.subsec_micros(),
            TsPrecision::Nanos => ts.subsec_nanos(),
        };
        let len = (data.len() as u32).to_le_bytes();
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&len);
        h[12..16].copy_from_slice(&len);
        self.out.write_all(&h)?;
        self.out.write_all(data)?;
        Ok(())
    }

    fn expect(&self, record: u32) -> Result<(), CaptureError> {
        if self.linktype == record {
            Ok(())
        } else {
            Err(CaptureError::WrongLinkType {
                file: self.linktype,
                record,
            })
        }
    }

    /// Writes a SunATM record of one AAL5 SDU (LINKTYPE_SUNATM files only).
    pub fn write_sunatm(
        &mut self,
        ts: Duration,
        header: &SunAtmHeader,
        sdu: &[u8],
    ) -> Result<(), CaptureError> {
        self.expect(LINKTYPE_SUNATM)?;
        self.write_record(ts, &sunatm_record(header, sdu))
    }

    /// AAL5-encodes `sdu` (UU 0) and writes it as an ERF type-4 record (LINKTYPE_ERF
    /// files only); Wireshark then checks the CRC.
    pub fn write_erf_aal5(
        &mut self,
        ts: Duration,
        iface: u8,
        vpi: u8,
        vci: u16,
        sdu: &[u8],
    ) -> Result<(), CaptureError> {
        self.expect(LINKTYPE_ERF)?;
        let pdu = aal5::encode(sdu, 0)?;
        self.write_record(ts, &erf_aal5_record(ts, iface, vpi, vci, &pdu)?)
    }

    /// Writes one cell as an ERF type-3 record (LINKTYPE_ERF files only).
    pub fn write_erf_cell(
        &mut self,
        ts: Duration,
        iface: u8,
        cell: &[u8; CELL_LEN],
    ) -> Result<(), CaptureError> {
        self.expect(LINKTYPE_ERF)?;
        self.write_record(ts, &erf_cell_record(ts, iface, cell)?)
    }

    /// Flushes the output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the output.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// One record of a pcap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Time after the Unix epoch.
    pub ts: Duration,
    /// Length of the packet on the wire.
    pub orig_len: u32,
    /// The captured octets.
    pub data: &'a [u8],
}

/// A pcap file read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapFile<'a> {
    /// The link type.
    pub linktype: u32,
    /// The timestamp resolution.
    pub precision: TsPrecision,
    /// The records in order.
    pub records: Vec<Record<'a>>,
}

/// Reads a whole classic pcap file (either byte order, micro- or nanoseconds).
pub fn parse_file(file: &[u8]) -> Result<PcapFile<'_>, CaptureError> {
    let header = file
        .first_chunk::<FILE_HEADER_LEN>()
        .ok_or(CaptureError::Truncated { offset: 0 })?;
    let le = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let magic = le(&header[0..4]);
    let (big_endian, precision) = match magic {
        MAGIC_MICROS => (false, TsPrecision::Micros),
        MAGIC_NANOS => (false, TsPrecision::Nanos),
        m if m.swap_bytes() == MAGIC_MICROS => (true, TsPrecision::Micros),
        m if m.swap_bytes() == MAGIC_NANOS => (true, TsPrecision::Nanos),
        _ => return Err(CaptureError::BadMagic { magic }),
    };
    let word = |b: &[u8]| {
        let w = le(b);
        if big_endian {
            w.swap_bytes()
        } else {
            w
        }
    };
    let linktype = word(&header[20..24]);
    let mut records = Vec::new();
    let mut at = FILE_HEADER_LEN;
    while at < file.len() {
        let h = file
            .get(at..at + RECORD_HEADER_LEN)
            .ok_or(CaptureError::Truncated { offset: at })?;
        let (secs, frac) = (word(&h[0..4]), word(&h[4..8]));
        let incl = word(&h[8..12]) as usize;
        let start = at + RECORD_HEADER_LEN;
        let data = start
            .checked_add(incl)
            .and_then(|end| file.get(start..end))
            .ok_or(CaptureError::Truncated { offset: start })?;
        let nanos = match precision {
            TsPrecision::Micros => u64::from(frac) * 1_000,
            TsPrecision::Nanos => u64::from(frac),
        };
        records.push(Record {
            ts: Duration::from_secs(u64::from(secs)) + Duration::from_nanos(nanos),
            orig_len: word(&h[12..16]),
            data,
        });
        at = start + incl;
    }
    Ok(PcapFile {
        linktype,
        precision,
        records,
    })
}

#[cfg(test)]
mod tests;
