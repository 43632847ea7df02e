//! ABR resource management (RM) cells (ATM Forum TM 4.0 §5.10.3.1, the ABR subset),
//! in their cell form (PTI 110) and their frame form (`FrameKind::Rm`).
//!
//! ```text
//! payload octet 1      protocol ID (1: ABR)
//! octet 2              DIR | BN | CI | NI | RA | 3 reserved bits
//! octets 3-4           ER, explicit rate          (TM 4.0 rate format, below)
//! octets 5-6           CCR, current cell rate
//! octets 7-8           MCR, minimum cell rate
//! octets 9-12          QL, queue length           (not used by ABR sources)
//! octets 13-16         SN, sequence number        (not used by ABR sources)
//! octets 17-46         reserved (0x6A), then 6 reserved bits; a natm end puts its
//!                      call's cookie in 39-42 (`endpoint::host::CALL_MARK`)
//! octets 47-48         ... | CRC-10, as OAM cells (`wire::crc`)
//! ```
//!
//! A rate is 16 bits: `0 | nz | e (5 bits) | m (9 bits)`, meaning
//! `nz · 2^e · (1 + m/512)` cells per second; `nz = 0` is the rate 0. Encoding rounds
//! down, so a rate read back is never more than the rate written (an explicit rate
//! must never grant more than the switch computed).
//!
//! **The frame form.** In frame mode (`wire::vcframe`) an RM cell travels as a frame
//! of kind RM (kind 3) whose SDU is the cell's 48-octet payload, on the VC it
//! controls; the frame header's `C` bit is unused (0). A switch converting between
//! frame and cell ports maps one RM frame to one PTI 110 cell and back.
//!
//! Not implemented: BN = 1 (backward-explicit congestion notification cells a switch
//! generates itself), VS/VD segments, QL and SN (carried, not interpreted).

use thiserror::Error;

use super::cell::PAYLOAD_LEN;
use super::crc::{crc10_field, crc10_oam, fill_crc10};

/// Protocol ID of ABR RM cells.
pub const PROTOCOL_ABR: u8 = 1;
/// What reserved octets of an RM cell hold.
pub const UNUSED: u8 = 0x6A;

mod field {
    pub(super) const PROTOCOL: usize = 0;
    pub(super) const FLAGS: usize = 1;
    pub(super) const ER: core::ops::Range<usize> = 2..4;
    pub(super) const CCR: core::ops::Range<usize> = 4..6;
    pub(super) const MCR: core::ops::Range<usize> = 6..8;
    pub(super) const QL: core::ops::Range<usize> = 8..12;
    pub(super) const SN: core::ops::Range<usize> = 12..16;
    pub(super) const RESERVED: core::ops::Range<usize> = 16..46;
}

const DIR: u8 = 0x80;
const BN: u8 = 0x40;
const CI: u8 = 0x20;
const NI: u8 = 0x10;
const RA: u8 = 0x08;

/// The largest rate the format holds: 2^31 · (1 + 511/512) cells/s.
pub const MAX_RATE: f64 = 4_290_772_992.0;

/// A cell rate in TM 4.0's 16-bit floating-point format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rate(u16);

impl Rate {
    /// The rate 0.
    pub const ZERO: Rate = Rate(0);

    /// The encoding of `cells_per_s`, rounded down to the nearest rate the format holds
    /// (saturating at [`MAX_RATE`]; negative, NaN and below 1 cell/s are 0).
    pub fn from_cells(cells_per_s: f64) -> Rate {
        if cells_per_s.is_nan() || cells_per_s < 1.0 {
            return Rate::ZERO;
        }
        let r = cells_per_s.min(MAX_RATE);
        // 2^e ≤ r < 2^(e+1); e ≤ 31 since r ≤ MAX_RATE < 2^32.
        let e = (r.log2().floor() as i32).clamp(0, 31);
        let base = f64::from(2u32.pow(e as u32));
        let m = ((r / base - 1.0) * 512.0).floor() as i32;
        // Guard the floor against the last ulp of log2.
        let (e, m) = if m >= 512 {
            (e + 1, 0)
        } else if m < 0 {
            (e - 1, 511)
        } else {
            (e, m)
        };
        let (e, m) = (e.clamp(0, 31) as u16, m.clamp(0, 511) as u16);
        Rate(0x4000 | (e << 9) | m)
    }

    /// The rate in cells per second.
    pub fn cells(self) -> f64 {
        if self.0 & 0x4000 == 0 {
            return 0.0;
        }
        let e = (self.0 >> 9) & 0x1F;
        let m = self.0 & 0x1FF;
        f64::from(1u32 << e) * (1.0 + f64::from(m) / 512.0)
    }

    /// The 16 bits on the wire.
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// The rate of the 16 bits on the wire; the reserved top bit is dropped.
    pub const fn from_bits(bits: u16) -> Rate {
        Rate(bits & 0x7FFF)
    }
}

/// Which way an RM cell travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// DIR = 0: from the source, towards the destination (a forward RM cell, FRM).
    Forward,
    /// DIR = 1: turned around by the destination, back to the source (BRM).
    Backward,
}

/// Why a payload is not an ABR RM cell natm reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RmError {
    /// An RM cell payload is 48 octets.
    #[error("RM payload of {0} octets is not the {PAYLOAD_LEN} of a cell")]
    Length(usize),
    /// Another protocol ID than ABR's.
    #[error("RM protocol ID {0} is not ABR's ({PROTOCOL_ABR})")]
    Protocol(u8),
    /// The CRC-10 does not match the payload.
    #[error("RM CRC-10 {field:#05x} does not match the payload's {computed:#05x}")]
    Crc {
        /// The CRC-10 field.
        field: u16,
        /// The CRC-10 of the payload.
        computed: u16,
    },
}

/// An ABR RM cell's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmCell {
    /// DIR.
    pub dir: Direction,
    /// BN: generated by a switch or destination, not by the source.
    pub bn: bool,
    /// CI: congestion indication (decrease).
    pub ci: bool,
    /// NI: no increase.
    pub ni: bool,
    /// RA (UNI 3.x's request/acknowledge; unused by TM 4.0 sources, carried).
    pub ra: bool,
    /// ER: the explicit rate the network allows.
    pub er: Rate,
    /// CCR: the source's current cell rate (its ACR) when it sent the cell.
    pub ccr: Rate,
    /// MCR: the VC's minimum cell rate.
    pub mcr: Rate,
    /// QL (carried, not interpreted).
    pub ql: u32,
    /// SN (carried, not interpreted).
    pub sn: u32,
}

impl RmCell {
    /// A forward RM cell as a source sends it (TM 4.0 source rule 3): DIR = 0,
    /// CI = NI = 0, ER = the VC's PCR, CCR = its ACR.
    pub fn forward(pcr: Rate, acr: Rate, mcr: Rate) -> RmCell {
        RmCell {
            dir: Direction::Forward,
            bn: false,
            ci: false,
            ni: false,
            ra: false,
            er: pcr,
            ccr: acr,
            mcr,
            ql: 0,
            sn: 0,
        }
    }

    /// Reads an RM cell payload: 48 octets, ABR protocol ID, good CRC-10. Reserved
    /// bits and octets are not checked (receivers ignore them).
    pub fn parse(payload: &[u8]) -> Result<RmCell, RmError> {
        let p: &[u8; PAYLOAD_LEN] = payload
            .try_into()
            .map_err(|_| RmError::Length(payload.len()))?;
        if p[field::PROTOCOL] != PROTOCOL_ABR {
            return Err(RmError::Protocol(p[field::PROTOCOL]));
        }
        let (computed, field) = (crc10_oam(p), crc10_field(p));
        if computed != field {
            return Err(RmError::Crc { field, computed });
        }
        let f = p[field::FLAGS];
        let u16_at = |r: core::ops::Range<usize>| u16::from_be_bytes([p[r.start], p[r.start + 1]]);
        let u32_at = |r: core::ops::Range<usize>| {
            u32::from_be_bytes([p[r.start], p[r.start + 1], p[r.start + 2], p[r.start + 3]])
        };
        Ok(RmCell {
            dir: if f & DIR == 0 {
                Direction::Forward
            } else {
                Direction::Backward
            },
            bn: f & BN != 0,
            ci: f & CI != 0,
            ni: f & NI != 0,
            ra: f & RA != 0,
            er: Rate::from_bits(u16_at(field::ER)),
            ccr: Rate::from_bits(u16_at(field::CCR)),
            mcr: Rate::from_bits(u16_at(field::MCR)),
            ql: u32_at(field::QL),
            sn: u32_at(field::SN),
        })
    }

    /// The payload: reserved bits 0, reserved octets 0x6A, CRC-10 filled.
    pub fn to_bytes(&self) -> [u8; PAYLOAD_LEN] {
        let mut p = [0u8; PAYLOAD_LEN];
        p[field::PROTOCOL] = PROTOCOL_ABR;
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        p[field::FLAGS] = bit(self.dir == Direction::Backward, DIR)
            | bit(self.bn, BN)
            | bit(self.ci, CI)
            | bit(self.ni, NI)
            | bit(self.ra, RA);
        p[field::ER].copy_from_slice(&self.er.bits().to_be_bytes());
        p[field::CCR].copy_from_slice(&self.ccr.bits().to_be_bytes());
        p[field::MCR].copy_from_slice(&self.mcr.bits().to_be_bytes());
        p[field::QL].copy_from_slice(&self.ql.to_be_bytes());
        p[field::SN].copy_from_slice(&self.sn.to_be_bytes());
        p[field::RESERVED].fill(UNUSED);
        fill_crc10(&mut p);
        p
    }

    /// The backward RM cell a destination turns this forward one into (TM 4.0
    /// destination rules 1–2): DIR = 1, CI set if the VC's last data cell carried
    /// EFCI (`congested`), every other field as it came.
    pub fn turned_around(self, congested: bool) -> RmCell {
        RmCell {
            dir: Direction::Backward,
            ci: self.ci || congested,
            ..self
        }
    }
}

/// Lowers the ER field of an RM cell payload to at most `er`, in place, and
/// recomputes the CRC-10 (what a switch's explicit-rate algorithm does to the cells it
/// passes). False, and nothing changed, if `payload` is not an ABR RM cell.
pub fn lower_er(payload: &mut [u8], er: Rate) -> bool {
    let Ok(cell) = RmCell::parse(payload) else {
        return false;
    };
    if er.cells() < cell.er.cells() {
        let p: &mut [u8; PAYLOAD_LEN] = payload.try_into().expect("parsed: 48 octets");
        p[field::ER].copy_from_slice(&er.bits().to_be_bytes());
        fill_crc10(p);
    }
    true
}

/// Sets the CI bit of an RM cell payload in place and recomputes the CRC-10. False,
/// and nothing changed, if `payload` is not an ABR RM cell.
pub fn set_ci(payload: &mut [u8]) -> bool {
    if RmCell::parse(payload).is_err() {
        return false;
    }
    let p: &mut [u8; PAYLOAD_LEN] = payload.try_into().expect("parsed: 48 octets");
    p[field::FLAGS] |= CI;
    fill_crc10(p);
    true
}

#[cfg(test)]
mod tests;
