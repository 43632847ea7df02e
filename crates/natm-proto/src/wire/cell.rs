//! The 53-octet ATM cell and its 5-octet header (specs.md §1, ITU-T I.361, I.432.1).
//!
//! ```text
//!         bit 8 7 6 5 4 3 2 1
//! octet 1     |  GFC  |VPI 7-4|   UNI (NNI: octet 1 = VPI 11-4, no GFC)
//! octet 2     |VPI 3-0|VCI15-12|
//! octet 3     |   VCI 11-4     |
//! octet 4     |VCI 3-0| PTI |CLP|
//! octet 5     |      HEC       |
//! ```
//! [`Packet`] wraps a cell buffer, [`HeaderRepr`] is the parsed header, [`Pti`] names
//! the payload types and [`HecReceiver`] is the I.432.1 receiver that corrects single-bit
//! header errors.

use thiserror::Error;

use super::crc::hec;

/// Octets in a cell.
pub const CELL_LEN: usize = 53;
/// Octets in a cell header, HEC included.
pub const HEADER_LEN: usize = 5;
/// Octets in a cell payload.
pub const PAYLOAD_LEN: usize = 48;

/// Largest VPI in the UNI header format (8 bits).
pub const MAX_VPI_UNI: u16 = 0xFF;
/// Largest VPI in the NNI header format (12 bits).
pub const MAX_VPI_NNI: u16 = 0x0FFF;
/// Largest GFC (4 bits, UNI only).
pub const MAX_GFC: u8 = 0x0F;

/// VCI 0: unassigned and idle cells.
pub const VCI_UNASSIGNED: u16 = 0;
/// VCI 1: meta-signalling.
pub const VCI_META_SIGNALLING: u16 = 1;
/// VCI 2: general broadcast signalling.
pub const VCI_BROADCAST_SIGNALLING: u16 = 2;
/// VCI 3: segment OAM F4 flow (on any VPI).
pub const VCI_SEGMENT_OAM_F4: u16 = 3;
/// VCI 4: end-to-end OAM F4 flow (on any VPI).
pub const VCI_END_TO_END_OAM_F4: u16 = 4;
/// VCI 5: point-to-point signalling, the SAAL channel (VPI 0 by default).
pub const VCI_SIGNALLING: u16 = 5;
/// VCI 6: VP resource management.
pub const VCI_VP_RM: u16 = 6;
/// VCI 16: ILMI (VPI 0 by default).
pub const VCI_ILMI: u16 = 16;
/// VCI 17: LANE configuration server (LECS).
pub const VCI_LANE_LECS: u16 = 17;
/// VCI 18: PNNI routing channel.
pub const VCI_PNNI: u16 = 18;
/// The first VCI free for user VCs; 0..=31 are reserved.
pub const VCI_FIRST_USER: u16 = 32;

/// Whether `vci` is in the reserved range 0..=31 (I.361).
pub const fn is_reserved_vci(vci: u16) -> bool {
    vci < VCI_FIRST_USER
}

/// Errors from cell and header parsing and from building a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CellError {
    /// The buffer is not exactly one cell (53 octets) long.
    #[error("cell buffer is {len} octets, a cell is 53")]
    BadLength {
        /// Length of the buffer offered.
        len: usize,
    },
    /// The HEC octet does not match the header (use [`HecReceiver`] to correct).
    #[error("header error control mismatch: received {received:#04x}, computed {computed:#04x}")]
    HecMismatch {
        /// HEC octet in the header.
        received: u8,
        /// HEC computed over octets 1-4.
        computed: u8,
    },
    /// The VPI does not fit the header format (8 bits UNI, 12 bits NNI).
    #[error("VPI {vpi} does not fit the {format:?} header")]
    VpiOutOfRange {
        /// VPI asked for.
        vpi: u16,
        /// Header format it was asked for.
        format: HeaderFormat,
    },
    /// The GFC does not fit 4 bits, or is non-zero in an NNI header.
    #[error("GFC {gfc} does not fit the {format:?} header")]
    GfcOutOfRange {
        /// GFC asked for.
        gfc: u8,
        /// Header format it was asked for.
        format: HeaderFormat,
    },
}

/// Which of the two header layouts a link uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HeaderFormat {
    /// User-network interface: 4-bit GFC, 8-bit VPI.
    #[default]
    Uni,
    /// Network-node interface: no GFC, 12-bit VPI.
    Nni,
}

impl HeaderFormat {
    /// The largest VPI this format carries.
    pub const fn max_vpi(self) -> u16 {
        match self {
            HeaderFormat::Uni => MAX_VPI_UNI,
            HeaderFormat::Nni => MAX_VPI_NNI,
        }
    }
}

/// Payload type indicator, the 3 bits after the VCI (specs.md §1.4, I.361).
///
/// Bit 3 (MSB) separates user data (0) from management (1); for user data bit 2 is
/// EFCI (congestion experienced) and bit 1 the ATM-user-to-ATM-user indication that
/// AAL5 uses to mark the last cell of a CPCS-PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Pti {
    /// 000: user data, no congestion, AUU = 0 (not the last cell).
    UserData = 0,
    /// 001: user data, no congestion, AUU = 1 (last cell of an AAL5 frame).
    UserDataEnd = 1,
    /// 010: user data, congestion experienced, AUU = 0.
    UserDataCongested = 2,
    /// 011: user data, congestion experienced, AUU = 1.
    UserDataCongestedEnd = 3,
    /// 100: segment OAM F5 flow cell.
    SegmentOamF5 = 4,
    /// 101: end-to-end OAM F5 flow cell.
    EndToEndOamF5 = 5,
    /// 110: resource management cell (ABR).
    ResourceManagement = 6,
    /// 111: reserved for future use.
    Reserved = 7,
}

impl Pti {
    /// The PTI of the low three bits of `bits` (higher bits are ignored).
    pub const fn from_bits(bits: u8) -> Pti {
        match bits & 0b111 {
            0 => Pti::UserData,
            1 => Pti::UserDataEnd,
            2 => Pti::UserDataCongested,
            3 => Pti::UserDataCongestedEnd,
            4 => Pti::SegmentOamF5,
            5 => Pti::EndToEndOamF5,
            6 => Pti::ResourceManagement,
            _ => Pti::Reserved,
        }
    }

    /// The user-data PTI with the given EFCI and AUU bits.
    pub const fn user_data(congested: bool, end_of_sdu: bool) -> Pti {
        Pti::from_bits(((congested as u8) << 1) | end_of_sdu as u8)
    }

    /// The three PTI bits.
    pub const fn bits(self) -> u8 {
        self as u8
    }

    /// Whether this is a user-data cell (PTI 0xx), as opposed to OAM, RM or reserved.
    pub const fn is_user_data(self) -> bool {
        self.bits() & 0b100 == 0
    }

    /// Whether a user-data cell carries the EFCI mark; false for every other type.
    pub const fn congestion_experienced(self) -> bool {
        self.is_user_data() && self.bits() & 0b010 != 0
    }

    /// Whether a user-data cell has AUU = 1, the AAL5 end of a CPCS-PDU; false for every
    /// other type (the low bit of an OAM/RM PTI is not an AUU bit).
    pub const fn is_end_of_sdu(self) -> bool {
        self.is_user_data() && self.bits() & 0b001 != 0
    }

    /// Whether this is an F5 OAM cell (segment or end-to-end).
    pub const fn is_oam_f5(self) -> bool {
        matches!(self, Pti::SegmentOamF5 | Pti::EndToEndOamF5)
    }

    /// Whether this is a resource management cell.
    pub const fn is_resource_management(self) -> bool {
        matches!(self, Pti::ResourceManagement)
    }

    /// The same user-data PTI with EFCI set, as a congested switch rewrites it; other
    /// types are returned unchanged.
    pub const fn with_congestion(self) -> Pti {
        if self.is_user_data() {
            Pti::from_bits(self.bits() | 0b010)
        } else {
            self
        }
    }
}

impl core::fmt::Display for Pti {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Pti::UserData => "user data",
            Pti::UserDataEnd => "user data, end of AAL5 frame (AUU=1)",
            Pti::UserDataCongested => "user data, congestion experienced",
            Pti::UserDataCongestedEnd => "user data, congestion experienced, end of AAL5 frame",
            Pti::SegmentOamF5 => "segment OAM F5",
            Pti::EndToEndOamF5 => "end-to-end OAM F5",
            Pti::ResourceManagement => "resource management",
            Pti::Reserved => "reserved",
        })
    }
}

/// Byte ranges of the cell fields; the header fields share octets, so most are read as
/// the big-endian word over octets 1-4.
mod field {
    /// Octets 1-4: GFC/VPI, VCI, PTI, CLP as one big-endian word.
    pub(super) const WORD: core::ops::Range<usize> = 0..4;
    /// Octet 5: header error control.
    pub(super) const HEC: usize = 4;
    /// The whole header.
    pub(super) const HEADER: core::ops::Range<usize> = 0..super::HEADER_LEN;
    /// Octets 6-53: payload.
    pub(super) const PAYLOAD: core::ops::Range<usize> = super::HEADER_LEN..super::CELL_LEN;
}

/// Bit layout of the header word `w` over octets 1-4 (specs.md §1.1).
const GFC_SHIFT: u32 = 28;
const VPI_SHIFT: u32 = 20;
const VCI_SHIFT: u32 = 4;
const PTI_SHIFT: u32 = 1;

/// A read/write wrapper around a buffer holding exactly one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length; accessors then panic on a short
    /// buffer. Prefer [`Packet::new_checked`] for anything received.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it is exactly [`CELL_LEN`] octets.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, CellError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer is exactly one cell; after this no accessor panics.
    pub fn check_len(&self) -> Result<(), CellError> {
        let len = self.buffer.as_ref().len();
        if len == CELL_LEN {
            Ok(())
        } else {
            Err(CellError::BadLength { len })
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The header octets 1-4 as a big-endian word.
    #[inline]
    fn word(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::WORD];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The five header octets, HEC included.
    #[inline]
    pub fn header(&self) -> [u8; HEADER_LEN] {
        let b = &self.buffer.as_ref()[field::HEADER];
        [b[0], b[1], b[2], b[3], b[4]]
    }

    /// The generic flow control field (UNI format only).
    #[inline]
    pub fn gfc(&self) -> u8 {
        (self.word() >> GFC_SHIFT) as u8
    }

    /// The VPI as read in the given header format (8 bits UNI, 12 bits NNI).
    #[inline]
    pub fn vpi(&self, format: HeaderFormat) -> u16 {
        ((self.word() >> VPI_SHIFT) as u16) & format.max_vpi()
    }

    /// The virtual channel identifier.
    #[inline]
    pub fn vci(&self) -> u16 {
        (self.word() >> VCI_SHIFT) as u16
    }

    /// The payload type indicator.
    #[inline]
    pub fn pti(&self) -> Pti {
        Pti::from_bits((self.word() >> PTI_SHIFT) as u8)
    }

    /// The cell loss priority bit (true = discard-eligible).
    #[inline]
    pub fn clp(&self) -> bool {
        self.word() & 1 != 0
    }

    /// The HEC octet as received.
    #[inline]
    pub fn hec(&self) -> u8 {
        self.buffer.as_ref()[field::HEC]
    }

    /// Whether the HEC octet matches header octets 1-4.
    #[inline]
    pub fn hec_ok(&self) -> bool {
        hec(&self.word().to_be_bytes()) == self.hec()
    }

    /// The 48-octet payload.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    fn set_word(&mut self, w: u32) {
        self.buffer.as_mut()[field::WORD].copy_from_slice(&w.to_be_bytes());
    }

    /// Writes the five header octets as given (the HEC is not recomputed).
    #[inline]
    pub fn set_header(&mut self, header: &[u8; HEADER_LEN]) {
        self.buffer.as_mut()[field::HEADER].copy_from_slice(header);
    }

    /// Sets the GFC (low 4 bits of `gfc`; UNI format only).
    pub fn set_gfc(&mut self, gfc: u8) {
        let w = self.word() & !(0xF << GFC_SHIFT);
        self.set_word(w | (u32::from(gfc & MAX_GFC) << GFC_SHIFT));
    }

    /// Sets the VPI in the given format (masked to 8 or 12 bits).
    pub fn set_vpi(&mut self, format: HeaderFormat, vpi: u16) {
        let mask = u32::from(format.max_vpi()) << VPI_SHIFT;
        let w = self.word() & !mask;
        self.set_word(w | ((u32::from(vpi) << VPI_SHIFT) & mask));
    }

    /// Sets the VCI.
    pub fn set_vci(&mut self, vci: u16) {
        let w = self.word() & !(0xFFFF << VCI_SHIFT);
        self.set_word(w | (u32::from(vci) << VCI_SHIFT));
    }

    /// Sets the payload type.
    pub fn set_pti(&mut self, pti: Pti) {
        let w = self.word() & !(0b111 << PTI_SHIFT);
        self.set_word(w | (u32::from(pti.bits()) << PTI_SHIFT));
    }

    /// Sets the cell loss priority bit.
    pub fn set_clp(&mut self, clp: bool) {
        self.set_word((self.word() & !1) | u32::from(clp));
    }

    /// Computes the HEC over octets 1-4 and writes it; call after changing the header.
    pub fn fill_hec(&mut self) {
        let h = hec(&self.word().to_be_bytes());
        self.buffer.as_mut()[field::HEC] = h;
    }

    /// The 48-octet payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// A parsed cell header: everything but the HEC, which [`HeaderRepr::emit`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeaderRepr {
    /// Header layout (UNI or NNI).
    pub format: HeaderFormat,
    /// Generic flow control (UNI only, 0..=15; must be 0 for NNI).
    pub gfc: u8,
    /// Virtual path identifier (0..=255 UNI, 0..=4095 NNI).
    pub vpi: u16,
    /// Virtual channel identifier.
    pub vci: u16,
    /// Payload type.
    pub pti: Pti,
    /// Cell loss priority (true = discard-eligible).
    pub clp: bool,
}

impl HeaderRepr {
    /// A UNI header with GFC 0 and CLP 0 on `vpi`/`vci`.
    pub const fn uni(vpi: u8, vci: u16, pti: Pti) -> HeaderRepr {
        HeaderRepr {
            format: HeaderFormat::Uni,
            gfc: 0,
            vpi: vpi as u16,
            vci,
            pti,
            clp: false,
        }
    }

    /// An NNI header with CLP 0, if `vpi` fits 12 bits.
    pub const fn nni(vpi: u16, vci: u16, pti: Pti) -> Result<HeaderRepr, CellError> {
        let repr = HeaderRepr {
            format: HeaderFormat::Nni,
            gfc: 0,
            vpi,
            vci,
            pti,
            clp: false,
        };
        match repr.validate() {
            Ok(()) => Ok(repr),
            Err(e) => Err(e),
        }
    }

    /// Checks that every field fits its width in this format.
    pub const fn validate(&self) -> Result<(), CellError> {
        if self.vpi > self.format.max_vpi() {
            return Err(CellError::VpiOutOfRange {
                vpi: self.vpi,
                format: self.format,
            });
        }
        let max_gfc = match self.format {
            HeaderFormat::Uni => MAX_GFC,
            HeaderFormat::Nni => 0,
        };
        if self.gfc > max_gfc {
            return Err(CellError::GfcOutOfRange {
                gfc: self.gfc,
                format: self.format,
            });
        }
        Ok(())
    }

    /// Parses a header, checking the HEC (run [`HecReceiver::check`] first to correct
    /// single-bit errors).
    pub const fn parse_header(
        header: &[u8; HEADER_LEN],
        format: HeaderFormat,
    ) -> Result<HeaderRepr, CellError> {
        let word = [header[0], header[1], header[2], header[3]];
        let computed = hec(&word);
        if computed != header[4] {
            return Err(CellError::HecMismatch {
                received: header[4],
                computed,
            });
        }
        let w = u32::from_be_bytes(word);
        let (gfc, vpi) = match format {
            HeaderFormat::Uni => ((w >> GFC_SHIFT) as u8, ((w >> VPI_SHIFT) & 0xFF) as u16),
            HeaderFormat::Nni => (0, ((w >> VPI_SHIFT) & 0xFFF) as u16),
        };
        Ok(HeaderRepr {
            format,
            gfc,
            vpi,
            vci: (w >> VCI_SHIFT) as u16,
            pti: Pti::from_bits((w >> PTI_SHIFT) as u8),
            clp: w & 1 != 0,
        })
    }

    /// Parses the header of a checked cell.
    pub fn parse<T: AsRef<[u8]>>(
        packet: &Packet<T>,
        format: HeaderFormat,
    ) -> Result<HeaderRepr, CellError> {
        Self::parse_header(&packet.header(), format)
    }

    /// The five header octets, HEC included. Fields wider than the format allows are
    /// masked to their width (see [`HeaderRepr::validate`]).
    pub const fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let vpi_mask = self.format.max_vpi() as u32;
        let gfc = match self.format {
            HeaderFormat::Uni => (self.gfc & MAX_GFC) as u32,
            HeaderFormat::Nni => 0,
        };
        let w = (gfc << GFC_SHIFT)
            | ((self.vpi as u32 & vpi_mask) << VPI_SHIFT)
            | ((self.vci as u32) << VCI_SHIFT)
            | ((self.pti.bits() as u32) << PTI_SHIFT)
            | self.clp as u32;
        let b = w.to_be_bytes();
        [b[0], b[1], b[2], b[3], hec(&b)]
    }

    /// Octets this header occupies.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header, HEC included, into a cell; the payload is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_header(&self.to_bytes());
    }
}

/// Maps each HEC syndrome to the header bit whose flip produces it, or `NO_BIT`.
///
/// Bits are numbered as in specs.md §1.3: 0 = MSB of octet 1 … 31 = LSB of octet 4,
/// 32..=39 = HEC MSB..LSB. Built at compile time from the linearity of the CRC: a flip
/// of data bit `p` changes the syndrome by the CRC-8 of the one-bit error pattern, and
/// a flip of HEC bit `k` by `0x80 >> k`.
const SYNDROME_TO_BIT: [u8; 256] = syndrome_table();

/// Table entry for a syndrome no single-bit error produces.
const NO_BIT: u8 = 0xFF;

const fn syndrome_of_bit(bit: u8) -> u8 {
    if bit < 32 {
        let e = (1u32 << (31 - bit)).to_be_bytes();
        super::crc::crc8_i432(&e)
    } else {
        0x80 >> (bit - 32)
    }
}

const fn syndrome_table() -> [u8; 256] {
    let mut table = [NO_BIT; 256];
    let mut bit = 0u8;
    while bit < 40 {
        table[syndrome_of_bit(bit) as usize] = bit;
        bit += 1;
    }
    table
}

/// The HEC syndrome of a received header: 0 when the HEC matches octets 1-4.
#[inline]
pub const fn hec_syndrome(header: &[u8; HEADER_LEN]) -> u8 {
    hec(&[header[0], header[1], header[2], header[3]]) ^ header[4]
}

/// The header bit (0..=39, specs.md §1.3 numbering) a single-bit error with this
/// syndrome flipped, or `None` if no single-bit error gives it (or it is 0).
#[inline]
pub const fn syndrome_bit(syndrome: u8) -> Option<u8> {
    match SYNDROME_TO_BIT[syndrome as usize] {
        NO_BIT => None,
        bit => Some(bit),
    }
}

/// The two states of the I.432.1 receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HecMode {
    /// Correct single-bit errors; the state after an error-free header.
    #[default]
    Correction,
    /// Discard any errored header; the state after any detected error.
    Detection,
}

/// What the receiver did with one header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HecVerdict {
    /// The HEC matched; the header is as received.
    Valid,
    /// A single-bit error was corrected in place.
    Corrected {
        /// The bit that was flipped back (0 = MSB of octet 1 … 39 = LSB of the HEC).
        bit: u8,
    },
    /// The header had an error the receiver would not correct; drop the cell.
    Discarded,
}

impl HecVerdict {
    /// Whether the cell is to be passed on (valid or corrected).
    pub const fn accepted(self) -> bool {
        !matches!(self, HecVerdict::Discarded)
    }
}

/// The I.432.1 header receiver: corrects a single-bit error only when the previous
/// header was error-free, since error bursts make a second "single-bit" syndrome
/// likely to be a miscorrection (specs.md §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HecReceiver {
    mode: HecMode,
}

impl HecReceiver {
    /// A receiver in correction mode.
    pub const fn new() -> Self {
        HecReceiver {
            mode: HecMode::Correction,
        }
    }

    /// The current mode.
    pub const fn mode(&self) -> HecMode {
        self.mode
    }

    /// Checks one header, correcting it in place when allowed, and moves the state
    /// machine on.
    pub fn check(&mut self, header: &mut [u8; HEADER_LEN]) -> HecVerdict {
        let syndrome = hec_syndrome(header);
        if syndrome == 0 {
            self.mode = HecMode::Correction;
            return HecVerdict::Valid;
        }
        let mode = self.mode;
        self.mode = HecMode::Detection;
        match (mode, syndrome_bit(syndrome)) {
            (HecMode::Correction, Some(bit)) => {
                // bit < 40, so the octet index is < 5.
                if let Some(octet) = header.get_mut(usize::from(bit / 8)) {
                    *octet ^= 0x80 >> (bit % 8);
                }
                HecVerdict::Corrected { bit }
            }
            _ => HecVerdict::Discarded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(hex: &str) -> Vec<u8> {
        hex::decode(hex.replace(' ', "")).unwrap()
    }

    fn header(hex: &str) -> [u8; 5] {
        bytes(hex).try_into().unwrap()
    }

    /// Every row of specs.md §1.2: (GFC, VPI, VCI, PTI, CLP, header octets).
    const ROWS: [(u8, u16, u16, u8, bool, &str); 14] = [
        (0, 0, 0, 0, true, "00 00 00 01 52"),
        (0, 0, 0, 0, false, "00 00 00 00 55"),
        (0, 0, 5, 0, false, "00 00 00 50 E2"),
        (0, 0, 5, 1, false, "00 00 00 52 EC"),
        (0, 0, 16, 0, false, "00 00 01 00 40"),
        (0, 1, 32, 0, false, "00 10 02 00 DD"),
        (0, 1, 32, 1, false, "00 10 02 02 D3"),
        (0, 1, 32, 1, true, "00 10 02 03 D4"),
        (0, 1, 32, 2, false, "00 10 02 04 C1"),
        (0, 0, 100, 1, false, "00 00 06 42 E2"),
        (0, 1, 32, 4, false, "00 10 02 08 E5"),
        (0, 1, 32, 5, false, "00 10 02 0A EB"),
        (0, 1, 32, 6, false, "00 10 02 0C F9"),
        (15, 255, 65535, 7, true, "FF FF FF FF 8B"),
    ];

    fn row_repr(row: &(u8, u16, u16, u8, bool, &str)) -> HeaderRepr {
        HeaderRepr {
            format: HeaderFormat::Uni,
            gfc: row.0,
            vpi: row.1,
            vci: row.2,
            pti: Pti::from_bits(row.3),
            clp: row.4,
        }
    }

    #[test]
    fn header_vectors_emit() {
        for row in &ROWS {
            assert_eq!(row_repr(row).to_bytes(), header(row.5), "{}", row.5);
        }
    }

    #[test]
    fn header_vectors_parse_and_deconstruct() {
        for row in &ROWS {
            let mut cell = [0u8; CELL_LEN];
            cell[..5].copy_from_slice(&header(row.5));
            let packet = Packet::new_checked(&cell[..]).unwrap();
            assert!(packet.hec_ok());
            assert_eq!(packet.gfc(), row.0);
            assert_eq!(packet.vpi(HeaderFormat::Uni), row.1);
            assert_eq!(packet.vci(), row.2);
            assert_eq!(packet.pti().bits(), row.3);
            assert_eq!(packet.clp(), row.4);
            assert_eq!(
                HeaderRepr::parse(&packet, HeaderFormat::Uni),
                Ok(row_repr(row))
            );
        }
    }

    #[test]
    fn packet_setters_construct_the_vectors() {
        for row in &ROWS {
            let mut cell = [0xAAu8; CELL_LEN];
            let mut packet = Packet::new_unchecked(&mut cell[..]);
            packet.set_gfc(row.0);
            packet.set_vpi(HeaderFormat::Uni, row.1);
            packet.set_vci(row.2);
            packet.set_pti(Pti::from_bits(row.3));
            packet.set_clp(row.4);
            packet.fill_hec();
            assert_eq!(packet.header(), header(row.5));
            assert!(packet.payload().iter().all(|&b| b == 0xAA));
        }
    }

    #[test]
    fn bad_hec_and_bad_length_are_errors() {
        assert_eq!(
            HeaderRepr::parse_header(&header("00 10 02 02 D4"), HeaderFormat::Uni),
            Err(CellError::HecMismatch {
                received: 0xD4,
                computed: 0xD3
            })
        );
        for len in [0, 5, 52, 54] {
            assert_eq!(
                Packet::new_checked(vec![0u8; len]).map(|_| ()),
                Err(CellError::BadLength { len })
            );
        }
    }

    #[test]
    fn nni_uses_twelve_bit_vpi_and_no_gfc() {
        let repr = HeaderRepr::nni(0xABC, 0x1234, Pti::UserDataEnd).unwrap();
        let h = repr.to_bytes();
        assert_eq!(&h[..4], &[0xAB, 0xC1, 0x23, 0x42]);
        assert_eq!(HeaderRepr::parse_header(&h, HeaderFormat::Nni), Ok(repr));
        // The same octets read as UNI split the VPI into GFC 0xA and VPI 0xBC.
        let uni = HeaderRepr::parse_header(&h, HeaderFormat::Uni).unwrap();
        assert_eq!((uni.gfc, uni.vpi), (0xA, 0xBC));
        assert_eq!(
            HeaderRepr::nni(0x1000, 1, Pti::UserData),
            Err(CellError::VpiOutOfRange {
                vpi: 0x1000,
                format: HeaderFormat::Nni
            })
        );
        let mut uni = HeaderRepr::uni(1, 32, Pti::UserData);
        uni.vpi = 256;
        assert!(matches!(
            uni.validate(),
            Err(CellError::VpiOutOfRange { vpi: 256, .. })
        ));
        uni.vpi = 1;
        uni.gfc = 16;
        assert!(matches!(
            uni.validate(),
            Err(CellError::GfcOutOfRange { gfc: 16, .. })
        ));
    }

    #[test]
    fn pti_table() {
        // (bits, user data, EFCI, AUU/end of SDU, OAM F5, RM)
        let table = [
            (0, true, false, false, false, false),
            (1, true, false, true, false, false),
            (2, true, true, false, false, false),
            (3, true, true, true, false, false),
            (4, false, false, false, true, false),
            (5, false, false, false, true, false),
            (6, false, false, false, false, true),
            (7, false, false, false, false, false),
        ];
        for (bits, user, efci, end, oam, rm) in table {
            let pti = Pti::from_bits(bits);
            assert_eq!(pti.bits(), bits);
            assert_eq!(pti.is_user_data(), user, "{pti:?}");
            assert_eq!(pti.congestion_experienced(), efci, "{pti:?}");
            assert_eq!(pti.is_end_of_sdu(), end, "{pti:?}");
            assert_eq!(pti.is_oam_f5(), oam, "{pti:?}");
            assert_eq!(pti.is_resource_management(), rm, "{pti:?}");
            if user {
                assert_eq!(Pti::user_data(efci, end), pti);
                assert_eq!(pti.with_congestion(), Pti::user_data(true, end));
            } else {
                assert_eq!(pti.with_congestion(), pti);
            }
        }
        assert_eq!(Pti::from_bits(0xF9), Pti::UserDataEnd);
    }

    #[test]
    fn reserved_vcis() {
        assert_eq!(VCI_SIGNALLING, 5);
        assert_eq!(VCI_ILMI, 16);
        assert_eq!(VCI_FIRST_USER, 32);
        assert!(is_reserved_vci(VCI_SIGNALLING));
        assert!(is_reserved_vci(31));
        assert!(!is_reserved_vci(VCI_FIRST_USER));
    }

    #[test]
    fn worked_example_bit_21() {
        let mut rx = HecReceiver::new();
        let errored = header("00 10 06 02 D3");
        assert_eq!(hec_syndrome(&errored), 0x54);

        let mut h = errored;
        assert_eq!(rx.check(&mut h), HecVerdict::Corrected { bit: 21 });
        assert_eq!(h, header("00 10 02 02 D3"));
        assert_eq!(rx.mode(), HecMode::Detection);

        let mut h = errored;
        assert_eq!(rx.check(&mut h), HecVerdict::Discarded);
        assert_eq!(h, errored, "a discarded header is left as received");
        assert_eq!(rx.mode(), HecMode::Detection);

        let mut h = header("00 10 02 02 D3");
        assert_eq!(rx.check(&mut h), HecVerdict::Valid);
        assert_eq!(rx.mode(), HecMode::Correction);
    }

    #[test]
    fn two_bit_error_is_discarded() {
        let mut rx = HecReceiver::new();
        let mut h = header("81 10 02 02 D3");
        assert_eq!(hec_syndrome(&h), 0x27);
        assert_eq!(syndrome_bit(0x27), None);
        assert_eq!(rx.check(&mut h), HecVerdict::Discarded);
        assert!(!HecVerdict::Discarded.accepted());
        assert_eq!(rx.mode(), HecMode::Detection);
    }

    #[test]
    fn detection_mode_discards_even_single_bit_errors() {
        let good = header("00 10 02 02 D3");
        let mut rx = HecReceiver::new();
        let mut h = header("00 10 02 02 D2"); // HEC LSB flipped
        assert_eq!(rx.check(&mut h), HecVerdict::Corrected { bit: 39 });
        assert_eq!(h, good);
        for bit in [0u8, 21, 39] {
            let mut h = good;
            h[usize::from(bit / 8)] ^= 0x80 >> (bit % 8);
            assert_eq!(rx.check(&mut h), HecVerdict::Discarded, "bit {bit}");
        }
        let mut h = good;
        assert_eq!(rx.check(&mut h), HecVerdict::Valid);
        assert_eq!(rx.mode(), HecMode::Correction);
    }

    #[test]
    fn all_forty_single_bit_errors_correct_with_distinct_syndromes() {
        let mut seen = std::collections::HashSet::new();
        for row in &ROWS {
            let good = header(row.5);
            for bit in 0u8..40 {
                let mut h = good;
                h[usize::from(bit / 8)] ^= 0x80 >> (bit % 8);
                let s = hec_syndrome(&h);
                assert_ne!(s, 0);
                if row.5 == ROWS[0].5 {
                    assert!(seen.insert(s), "syndrome {s:#04x} repeats");
                }
                let mut rx = HecReceiver::new();
                assert_eq!(rx.check(&mut h), HecVerdict::Corrected { bit });
                assert_eq!(h, good);
            }
        }
        assert_eq!(seen.len(), 40);
        assert_eq!(SYNDROME_TO_BIT.iter().filter(|&&b| b != NO_BIT).count(), 40);
        // Entries quoted from Wireshark's err_posn_table (specs.md §1.3).
        for (s, bit) in [(0x01, 39), (0x07, 31), (0x0B, 8), (0x15, 23), (0x31, 0)] {
            assert_eq!(syndrome_bit(s), Some(bit));
        }
        assert_eq!(syndrome_bit(0), None);
    }
}
