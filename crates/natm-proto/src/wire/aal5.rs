//! AAL5: the CPCS-PDU, segmentation into cells and per-VC reassembly (specs.md §2,
//! ITU-T I.363.5).
//!
//! ```text
//! | CPCS-SDU (1..65535) | PAD (0..47 zeros) | UU | CPI | Length (2) | CRC-32 (4) |
//!  \___________________ total = a multiple of 48 octets ______________________/
//! ```
//! [`Aal5Pdu`] wraps a whole CPCS-PDU in one buffer and [`Aal5Repr`] is its validated
//! trailer; [`Segmenter`] cuts an SDU into cells without allocating; [`Reassembler`]
//! rebuilds SDUs from the cells of one VC and names the check that failed.

use core::cmp::min;
use core::iter::FusedIterator;

use thiserror::Error;

use super::cell::{CellError, HeaderRepr, Pti, CELL_LEN, HEADER_LEN, PAYLOAD_LEN};
use super::crc::{crc32_aal5, hec, Crc32Aal5};

/// Octets in the CPCS-PDU trailer (UU, CPI, Length, CRC-32).
pub const TRAILER_LEN: usize = 8;
/// Largest CPCS-SDU the 16-bit Length field can describe, and the default maximum.
pub const MAX_SDU_LEN: usize = 65_535;
/// Largest pad a well-formed PDU has.
pub const MAX_PAD_LEN: usize = PAYLOAD_LEN - 1;

/// Zeros to feed the CRC for the pad without building it.
const ZEROS: [u8; MAX_PAD_LEN] = [0; MAX_PAD_LEN];

/// Pad octets after an SDU of `sdu_len` octets: `(-(sdu_len + 8)) mod 48`.
pub const fn pad_len(sdu_len: usize) -> usize {
    (PAYLOAD_LEN - (sdu_len + TRAILER_LEN) % PAYLOAD_LEN) % PAYLOAD_LEN
}

/// Octets in the CPCS-PDU that carries an SDU of `sdu_len` octets.
pub const fn pdu_len(sdu_len: usize) -> usize {
    sdu_len + pad_len(sdu_len) + TRAILER_LEN
}

/// Cells that carry an SDU of `sdu_len` octets.
pub const fn cell_count(sdu_len: usize) -> usize {
    pdu_len(sdu_len) / PAYLOAD_LEN
}

/// Errors from AAL5 encoding, segmentation and reassembly; each names the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Aal5Error {
    /// An SDU of zero octets cannot be sent (Length 0 means abort).
    #[error("an AAL5 SDU must have at least one octet")]
    EmptySdu,
    /// The SDU is larger than the configured maximum (or than 65,535 when sending).
    #[error("SDU of {len} octets exceeds the maximum of {max}")]
    SduTooLarge {
        /// SDU length (from the Length field when receiving).
        len: usize,
        /// Largest SDU allowed.
        max: usize,
    },
    /// A whole-PDU buffer is empty or not a multiple of 48 octets.
    #[error("CPCS-PDU of {len} octets is not a positive multiple of 48")]
    BadPduLength {
        /// Length of the buffer.
        len: usize,
    },
    /// The Length field is 0: the sender aborted the PDU.
    #[error("CPCS-PDU aborted (Length field 0)")]
    Abort,
    /// The CRC-32 in the trailer does not match the PDU (usually a lost or errored cell).
    #[error("AAL5 CRC mismatch: trailer {expected:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC carried in the trailer.
        expected: u32,
        /// CRC computed over the received PDU.
        computed: u32,
    },
    /// The common part indicator is not 0.
    #[error("CPI is {cpi:#04x}, must be 0")]
    NonZeroCpi {
        /// CPI octet received.
        cpi: u8,
    },
    /// The Length field asks for more octets than the PDU has before its trailer.
    #[error("Length field {length} exceeds the {available} octets before the trailer")]
    LengthTooLong {
        /// Length field.
        length: u16,
        /// Octets in the PDU before the trailer.
        available: usize,
    },
    /// The Length field leaves more than 47 octets of pad: too many cells for it.
    #[error("Length field {length} leaves {pad} octets of pad, at most 47 allowed")]
    PadTooLong {
        /// Length field.
        length: u16,
        /// Pad the PDU would have.
        pad: usize,
    },
    /// More cells arrived without an end-of-SDU mark than the maximum SDU needs; the
    /// partial PDU was dropped and the rest of the frame will be discarded.
    #[error("more than {max_cells} cells without an end-of-SDU mark")]
    TooManyCells {
        /// Cells the maximum SDU needs.
        max_cells: usize,
    },
    /// The cell is OAM, RM or reserved, not AAL5 user data; the frame is undisturbed.
    #[error("cell with PTI {pti:?} is not user data")]
    NotUserData {
        /// PTI of the cell.
        pti: Pti,
    },
    /// The header template for segmentation does not fit its format.
    #[error("bad cell header: {0}")]
    Header(#[from] CellError),
}

/// Checks an SDU length for sending.
const fn check_sdu_len(len: usize) -> Result<(), Aal5Error> {
    if len == 0 {
        Err(Aal5Error::EmptySdu)
    } else if len > MAX_SDU_LEN {
        Err(Aal5Error::SduTooLarge {
            len,
            max: MAX_SDU_LEN,
        })
    } else {
        Ok(())
    }
}

/// The first four trailer octets (UU, CPI 0, Length) for an SDU of `sdu_len` octets.
const fn trailer_head(sdu_len: usize, uu: u8) -> [u8; 4] {
    let len = (sdu_len as u16).to_be_bytes();
    [uu, 0, len[0], len[1]]
}

/// A read/write wrapper around one whole CPCS-PDU; the trailer is its last 8 octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aal5Pdu<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Aal5Pdu<T> {
    /// Wraps a buffer without checks; accessors then panic on one shorter than 8.
    pub const fn new_unchecked(buffer: T) -> Aal5Pdu<T> {
        Aal5Pdu { buffer }
    }

    /// Wraps a buffer after checking it is a positive multiple of 48 octets.
    pub fn new_checked(buffer: T) -> Result<Aal5Pdu<T>, Aal5Error> {
        let pdu = Self::new_unchecked(buffer);
        pdu.check_len()?;
        Ok(pdu)
    }

    /// Checks the buffer is a positive multiple of 48 octets; after this no accessor
    /// panics (the trailer's values are checked by [`Aal5Repr::parse`]).
    pub fn check_len(&self) -> Result<(), Aal5Error> {
        let len = self.buffer.as_ref().len();
        if len == 0 || len % PAYLOAD_LEN != 0 {
            Err(Aal5Error::BadPduLength { len })
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn trailer(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[b.len() - TRAILER_LEN..]
    }

    /// The CPCS user-to-user octet.
    pub fn uu(&self) -> u8 {
        self.trailer()[0]
    }

    /// The common part indicator (0 in a valid PDU).
    pub fn cpi(&self) -> u8 {
        self.trailer()[1]
    }

    /// The Length field: SDU octets, 0 for an aborted PDU.
    pub fn length(&self) -> u16 {
        let t = self.trailer();
        u16::from_be_bytes([t[2], t[3]])
    }

    /// The CRC-32 carried in the trailer.
    pub fn crc(&self) -> u32 {
        let t = self.trailer();
        u32::from_be_bytes([t[4], t[5], t[6], t[7]])
    }

    /// Everything the CRC covers: the PDU less its last four octets.
    pub fn crc_covered(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..b.len() - 4]
    }

    /// The CRC-32 computed over the PDU as it is.
    pub fn computed_crc(&self) -> u32 {
        crc32_aal5(self.crc_covered())
    }

    /// The SDU as the Length field places it, clamped to the octets before the
    /// trailer; trust it only after [`Aal5Repr::parse`] succeeded.
    pub fn sdu(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let n = min(usize::from(self.length()), b.len() - TRAILER_LEN);
        &b[..n]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aal5Pdu<T> {
    fn trailer_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let at = b.len() - TRAILER_LEN;
        &mut b[at..]
    }

    /// Sets the user-to-user octet (the CRC is not recomputed).
    pub fn set_uu(&mut self, uu: u8) {
        self.trailer_mut()[0] = uu;
    }

    /// Sets the common part indicator (the CRC is not recomputed).
    pub fn set_cpi(&mut self, cpi: u8) {
        self.trailer_mut()[1] = cpi;
    }

    /// Sets the Length field (the CRC is not recomputed).
    pub fn set_length(&mut self, length: u16) {
        self.trailer_mut()[2..4].copy_from_slice(&length.to_be_bytes());
    }

    /// Sets the CRC field.
    pub fn set_crc(&mut self, crc: u32) {
        self.trailer_mut()[4..].copy_from_slice(&crc.to_be_bytes());
    }

    /// Computes the CRC-32 over the PDU and writes it into the trailer.
    pub fn fill_crc(&mut self) {
        let crc = self.computed_crc();
        self.set_crc(crc);
    }

    /// The octets before the trailer (SDU and pad), writable: copy the SDU to the
    /// front, then [`Aal5Repr::emit`].
    pub fn body_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let at = b.len() - TRAILER_LEN;
        &mut b[..at]
    }
}

/// A validated CPCS-PDU trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Aal5Repr {
    /// SDU octets (1..=65535).
    pub sdu_len: usize,
    /// CPCS user-to-user octet, passed transparently.
    pub uu: u8,
}

impl Aal5Repr {
    /// The trailer for sending an SDU of `sdu_len` octets.
    pub const fn new(sdu_len: usize, uu: u8) -> Result<Aal5Repr, Aal5Error> {
        match check_sdu_len(sdu_len) {
            Ok(()) => Ok(Aal5Repr { sdu_len, uu }),
            Err(e) => Err(e),
        }
    }

    /// Validates a whole PDU, in this order: Length 0 (abort), CRC, CPI, Length against
    /// the PDU size (too long, or pad over 47), and Length against `max_sdu`.
    pub fn parse<T: AsRef<[u8]>>(pdu: &Aal5Pdu<T>, max_sdu: usize) -> Result<Aal5Repr, Aal5Error> {
        pdu.check_len()?;
        let length = pdu.length();
        if length == 0 {
            return Err(Aal5Error::Abort);
        }
        let (expected, computed) = (pdu.crc(), pdu.computed_crc());
        if expected != computed {
            return Err(Aal5Error::CrcMismatch { expected, computed });
        }
        if pdu.cpi() != 0 {
            return Err(Aal5Error::NonZeroCpi { cpi: pdu.cpi() });
        }
        let available = pdu.buffer.as_ref().len() - TRAILER_LEN;
        let sdu_len = usize::from(length);
        if sdu_len > available {
            return Err(Aal5Error::LengthTooLong { length, available });
        }
        let pad = available - sdu_len;
        if pad > MAX_PAD_LEN {
            return Err(Aal5Error::PadTooLong { length, pad });
        }
        if sdu_len > max_sdu {
            return Err(Aal5Error::SduTooLarge {
                len: sdu_len,
                max: max_sdu,
            });
        }
        Ok(Aal5Repr {
            sdu_len,
            uu: pdu.uu(),
        })
    }

    /// Octets of the CPCS-PDU.
    pub const fn buffer_len(&self) -> usize {
        pdu_len(self.sdu_len)
    }

    /// Writes pad, trailer and CRC into a PDU buffer of exactly `buffer_len()` octets
    /// whose first `sdu_len` octets already hold the SDU.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, pdu: &mut Aal5Pdu<T>) {
        debug_assert_eq!(
            pdu.buffer.as_ref().len(),
            self.buffer_len(),
            "PDU buffer size"
        );
        let body = pdu.body_mut();
        body[self.sdu_len..].fill(0);
        pdu.trailer_mut()[..4].copy_from_slice(&trailer_head(self.sdu_len, self.uu));
        pdu.fill_crc();
    }
}

/// Encodes an SDU as a CPCS-PDU (CPI 0): SDU, zero pad, UU, CPI, Length, CRC-32.
pub fn encode(sdu: &[u8], uu: u8) -> Result<Vec<u8>, Aal5Error> {
    let repr = Aal5Repr::new(sdu.len(), uu)?;
    let mut buf = vec![0u8; repr.buffer_len()];
    buf[..sdu.len()].copy_from_slice(sdu);
    repr.emit(&mut Aal5Pdu::new_unchecked(&mut buf[..]));
    Ok(buf)
}

/// Validates a whole CPCS-PDU in one buffer (the frame path) and returns its SDU.
pub fn decode(pdu: &[u8], max_sdu: usize) -> Result<(&[u8], Aal5Repr), Aal5Error> {
    let pdu = Aal5Pdu::new_checked(pdu)?;
    let repr = Aal5Repr::parse(&pdu, max_sdu)?;
    Ok((&pdu.into_inner()[..repr.sdu_len], repr))
}

/// Cuts one SDU into the cells of its CPCS-PDU on one VC, writing each into a buffer
/// the caller provides. The CRC is run once over the SDU when the segmenter is made;
/// each cell then costs two copies.
///
/// Every cell is user data with EFCI 0; the last has AUU = 1 (specs.md §2.1).
#[derive(Debug, Clone)]
pub struct Segmenter<'a> {
    sdu: &'a [u8],
    header: [u8; HEADER_LEN],
    last_header: [u8; HEADER_LEN],
    trailer: [u8; TRAILER_LEN],
    next: usize,
    cells: usize,
}

impl<'a> Segmenter<'a> {
    /// A segmenter for `sdu` (UU 0) on the VC of `header`, whose PTI is ignored.
    pub fn new(sdu: &'a [u8], header: HeaderRepr) -> Result<Segmenter<'a>, Aal5Error> {
        Self::with_uu(sdu, header, 0)
    }

    /// A segmenter for `sdu` with the given CPCS-UU octet.
    pub fn with_uu(sdu: &'a [u8], header: HeaderRepr, uu: u8) -> Result<Segmenter<'a>, Aal5Error> {
        check_sdu_len(sdu.len())?;
        header.validate()?;
        let head = trailer_head(sdu.len(), uu);
        let mut crc = Crc32Aal5::new();
        crc.update(sdu);
        crc.update(&ZEROS[..pad_len(sdu.len())]);
        crc.update(&head);
        let c = crc.finalize().to_be_bytes();
        let mut trailer = [0u8; TRAILER_LEN];
        trailer[..4].copy_from_slice(&head);
        trailer[4..].copy_from_slice(&c);
        let template = |end| {
            HeaderRepr {
                pti: Pti::user_data(false, end),
                ..header
            }
            .to_bytes()
        };
        Ok(Segmenter {
            sdu,
            header: template(false),
            last_header: template(true),
            trailer,
            next: 0,
            cells: cell_count(sdu.len()),
        })
    }

    /// The same segmenter with EFCI set on every cell (congestion experienced,
    /// I.361): a switch carrying the frame mode's `C` flag over into cells.
    #[must_use]
    pub fn congested(mut self) -> Segmenter<'a> {
        for h in [&mut self.header, &mut self.last_header] {
            // Octet 4 is VCI 3-0 | PTI | CLP; for user data the PTI's middle bit is EFCI.
            h[3] |= 0b0100;
            h[4] = hec(&[h[0], h[1], h[2], h[3]]);
        }
        self
    }

    /// Cells this SDU takes in all.
    pub fn cell_count(&self) -> usize {
        self.cells
    }

    /// Cells not yet written.
    pub fn remaining(&self) -> usize {
        self.cells - self.next
    }

    /// Writes the next cell into `out`; false (and `out` untouched) when all are out.
    #[inline]
    pub fn next_cell(&mut self, out: &mut [u8; CELL_LEN]) -> bool {
        if self.next >= self.cells {
            return false;
        }
        let last = self.next + 1 == self.cells;
        let start = min(self.next * PAYLOAD_LEN, self.sdu.len());
        if !last {
            // Fixed-size copies compile to a few vector moves; the general path below
            // calls memcpy and memset (measured about twice as slow per cell).
            if let Some(full) = self.sdu[start..].first_chunk::<PAYLOAD_LEN>() {
                out[..HEADER_LEN].copy_from_slice(&self.header);
                out[HEADER_LEN..].copy_from_slice(full);
                self.next += 1;
                return true;
            }
        }
        let (header, payload) = out.split_at_mut(HEADER_LEN);
        header.copy_from_slice(if last {
            &self.last_header
        } else {
            &self.header
        });
        let end = min(start + PAYLOAD_LEN, self.sdu.len());
        let (data, rest) = payload.split_at_mut(end - start);
        data.copy_from_slice(&self.sdu[start..end]);
        rest.fill(0);
        if last {
            // The SDU always ends at least 8 octets before the end of the last cell.
            payload[PAYLOAD_LEN - TRAILER_LEN..].copy_from_slice(&self.trailer);
        }
        self.next += 1;
        true
    }
}

impl Iterator for Segmenter<'_> {
    type Item = [u8; CELL_LEN];

    fn next(&mut self) -> Option<[u8; CELL_LEN]> {
        let mut cell = [0u8; CELL_LEN];
        self.next_cell(&mut cell).then_some(cell)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining(), Some(self.remaining()))
    }
}

impl ExactSizeIterator for Segmenter<'_> {}
impl FusedIterator for Segmenter<'_> {}

/// Segments `sdu` into cells on UNI `vpi`/`vci` (GFC 0, CLP 0, UU 0).
pub fn segment(sdu: &[u8], vpi: u8, vci: u16) -> Result<Vec<[u8; CELL_LEN]>, Aal5Error> {
    Ok(Segmenter::new(sdu, HeaderRepr::uni(vpi, vci, Pti::UserData))?.collect())
}

/// Rebuilds the SDUs of one VC from its cells, in order.
///
/// Memory for a partial PDU grows with the cells received and never passes what the
/// configured maximum SDU needs; a frame that would go past it is dropped and the rest
/// of it, up to its end-of-SDU cell, discarded. A returned SDU borrows the
/// reassembler's buffer until the next cell is pushed.
#[derive(Debug, Clone)]
pub struct Reassembler {
    buf: Vec<u8>,
    max_sdu: usize,
    max_cells: usize,
    /// The buffer holds a finished PDU to drop before the next cell.
    finished: bool,
    /// Dropping the rest of an oversized frame, up to its end-of-SDU cell.
    discarding: bool,
    last_uu: u8,
}

impl Default for Reassembler {
    fn default() -> Self {
        Self::new()
    }
}

impl Reassembler {
    /// A reassembler for SDUs of up to 65,535 octets.
    pub fn new() -> Self {
        Self::with_max_sdu(MAX_SDU_LEN)
    }

    /// A reassembler for SDUs of up to `max_sdu` octets (clamped to 1..=65535), e.g.
    /// the maximum CPCS-SDU size signalled in the AAL parameters.
    pub fn with_max_sdu(max_sdu: usize) -> Self {
        let max_sdu = max_sdu.clamp(1, MAX_SDU_LEN);
        Reassembler {
            buf: Vec::new(),
            max_sdu,
            max_cells: cell_count(max_sdu),
            finished: false,
            discarding: false,
            last_uu: 0,
        }
    }

    /// The largest SDU delivered.
    pub fn max_sdu(&self) -> usize {
        self.max_sdu
    }

    /// The most cells one frame may have.
    pub fn max_cells(&self) -> usize {
        self.max_cells
    }

    /// Cells of the frame in progress.
    pub fn buffered_cells(&self) -> usize {
        if self.finished {
            0
        } else {
            self.buf.len() / PAYLOAD_LEN
        }
    }

    /// Octets of memory held for partial frames (at most `max_cells() * 48`).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The CPCS-UU octet of the last SDU delivered.
    pub fn last_uu(&self) -> u8 {
        self.last_uu
    }

    /// Drops any partial frame (e.g. on a reassembly timeout or a VC release).
    pub fn reset(&mut self) {
        self.buf.clear();
        self.finished = false;
        self.discarding = false;
    }

    /// Consumes one cell of this VC: its HEC and VPI/VCI are the caller's business,
    /// its PTI says whether it ends the frame. OAM and RM cells are refused with
    /// [`Aal5Error::NotUserData`] and leave the frame in progress alone.
    #[inline]
    pub fn push_cell(&mut self, cell: &[u8; CELL_LEN]) -> Result<Option<&[u8]>, Aal5Error> {
        let pti = Pti::from_bits(cell[3] >> 1);
        if !pti.is_user_data() {
            return Err(Aal5Error::NotUserData { pti });
        }
        self.push(&cell[HEADER_LEN..], pti.is_end_of_sdu())
    }

    /// Consumes one cell payload; `end_of_sdu` is the cell's AUU bit. Returns the SDU on
    /// a good last cell, `None` mid-frame, or the check that failed on a bad frame
    /// (which is then dropped: the next cell starts a new frame).
    #[inline]
    pub fn push_payload(
        &mut self,
        payload: &[u8; PAYLOAD_LEN],
        end_of_sdu: bool,
    ) -> Result<Option<&[u8]>, Aal5Error> {
        self.push(payload, end_of_sdu)
    }

    #[inline]
    fn push(&mut self, payload: &[u8], end_of_sdu: bool) -> Result<Option<&[u8]>, Aal5Error> {
        if self.finished {
            self.buf.clear();
            self.finished = false;
        }
        if self.discarding {
            self.discarding = !end_of_sdu;
            return Ok(None);
        }
        let limit = self.max_cells * PAYLOAD_LEN;
        if self.buf.len() + payload.len() > limit {
            self.buf.clear();
            self.discarding = !end_of_sdu;
            return Err(Aal5Error::TooManyCells {
                max_cells: self.max_cells,
            });
        }
        if self.buf.capacity() < self.buf.len() + payload.len() {
            // Grow by doubling, but never past what the maximum SDU needs.
            let want = min(limit, (self.buf.capacity() * 2).max(4 * PAYLOAD_LEN));
            self.buf.reserve_exact(want - self.buf.len());
        }
        self.buf.extend_from_slice(payload);
        if !end_of_sdu {
            return Ok(None);
        }
        self.finished = true;
        let repr = Aal5Repr::parse(&Aal5Pdu::new_unchecked(&self.buf[..]), self.max_sdu)?;
        self.last_uu = repr.uu;
        Ok(Some(&self.buf[..repr.sdu_len]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(hex: &str) -> Vec<u8> {
        hex::decode(hex.split_whitespace().collect::<String>()).unwrap()
    }

    fn seq(n: usize) -> Vec<u8> {
        (0..n).map(|i| i as u8).collect()
    }

    /// The rows of specs.md §2.3 that can be sent: (SDU, pad, cells, trailer).
    fn rows() -> [(Vec<u8>, usize, usize, &'static str); 4] {
        [
            (b"123456789".to_vec(), 31, 1, "00 00 00 09 FB B9 71 24"),
            (seq(100), 36, 3, "00 00 00 64 40 66 06 40"),
            (seq(40), 0, 1, "00 00 00 28 A6 AE FA 48"),
            (seq(41), 47, 2, "00 00 00 29 4E B3 B0 E7"),
        ]
    }

    #[test]
    fn encode_rows_of_specs_2_3() {
        for (sdu, pad, cells, trailer) in rows() {
            assert_eq!(pad_len(sdu.len()), pad);
            assert_eq!(cell_count(sdu.len()), cells);
            let pdu = encode(&sdu, 0).unwrap();
            assert_eq!(pdu.len(), cells * 48);
            assert_eq!(&pdu[..sdu.len()], &sdu[..]);
            assert!(pdu[sdu.len()..sdu.len() + pad].iter().all(|&b| b == 0));
            assert_eq!(&pdu[pdu.len() - 8..], &bytes(trailer)[..]);
            let (got, repr) = decode(&pdu, MAX_SDU_LEN).unwrap();
            assert_eq!(got, &sdu[..]);
            assert_eq!(repr, Aal5Repr::new(sdu.len(), 0).unwrap());
        }
    }

    #[test]
    fn empty_row_is_the_abort_form() {
        let pdu = bytes(&format!("{} 00 00 00 00 38 66 24 C1", "00 ".repeat(40)));
        let p = Aal5Pdu::new_checked(&pdu[..]).unwrap();
        assert_eq!(
            (p.length(), p.crc(), p.computed_crc()),
            (0, 0x3866_24C1, 0x3866_24C1)
        );
        assert_eq!(decode(&pdu, MAX_SDU_LEN), Err(Aal5Error::Abort));
        assert_eq!(encode(&[], 0), Err(Aal5Error::EmptySdu));
        assert_eq!(
            encode(&vec![0; 65_536], 0),
            Err(Aal5Error::SduTooLarge {
                len: 65_536,
                max: 65_535
            })
        );
    }

    const PDU_123456789: &str = "31 32 33 34 35 36 37 38 39 00 00 00 00 00 00 00
        00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        00 00 00 00 00 00 00 00 00 00 00 09 FB B9 71 24";

    #[test]
    fn full_pdu_and_cell_for_123456789() {
        assert_eq!(encode(b"123456789", 0).unwrap(), bytes(PDU_123456789));
        let cells = segment(b"123456789", 1, 32).unwrap();
        assert_eq!(cells.len(), 1);
        assert_eq!(&cells[0][..5], &bytes("00 10 02 02 D3")[..]);
        assert_eq!(&cells[0][5..], &bytes(PDU_123456789)[..]);
    }

    #[test]
    fn hundred_octets_on_vpi0_vci100() {
        let cells = segment(&seq(100), 0, 100).unwrap();
        let headers: Vec<&[u8]> = cells.iter().map(|c| &c[..5]).collect();
        assert_eq!(
            headers,
            [
                &bytes("00 00 06 40 EC")[..],
                &bytes("00 00 06 40 EC")[..],
                &bytes("00 00 06 42 E2")[..]
            ]
        );
        assert_eq!(&cells[0][5..], &seq(48)[..]);
        assert_eq!(&cells[1][5..], &seq(96)[48..]);
        let mut last = bytes("60 61 62 63");
        last.extend_from_slice(&[0; 36]);
        last.extend_from_slice(&bytes("00 00 00 64 40 66 06 40"));
        assert_eq!(&cells[2][5..], &last[..]);

        let mut rx = Reassembler::new();
        assert_eq!(rx.push_cell(&cells[0]), Ok(None));
        assert_eq!(rx.push_cell(&cells[1]), Ok(None));
        assert_eq!(rx.buffered_cells(), 2);
        assert_eq!(rx.push_cell(&cells[2]), Ok(Some(&seq(100)[..])));
    }

    /// specs.md §5.2: the SETUP of §4.5 in an SSCOP SD PDU, three cells on VPI 0/VCI 5.
    const SETUP_CELLS: [&str; 3] = [
        "00 00 00 50 E2 09 03 00 00 01 05 80 00 6E 58 80 00 09 05 8C 23 E4 81 23 E4 84 00 59
         80 00 18 84 00 27 10 85 00 27 10 90 00 0F A0 91 00 0F A0 B0 00 00 64 B1 00",
        "00 00 00 50 E2 00 64 5E 80 00 03 10 88 80 5F 80 00 01 CC 70 80 00 15 82 47 00 05 80
         FF E1 00 00 00 F2 1A 26 D8 00 20 48 1A 26 D8 00 6C 80 00 16 02 80 47 00 05",
        "00 00 00 52 EC 80 FF E1 00 00 00 F2 1A 26 D8 00 20 48 0A 0B 0C 00 5C 80 00 02 00 00
         00 48 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 7C 0C C5 64 9C",
    ];

    #[test]
    fn setup_in_sscop_round_trips_byte_exact() {
        let cells: Vec<[u8; 53]> = SETUP_CELLS
            .iter()
            .map(|c| bytes(c).try_into().unwrap())
            .collect();
        let mut rx = Reassembler::new();
        assert_eq!(rx.push_cell(&cells[0]), Ok(None));
        assert_eq!(rx.push_cell(&cells[1]), Ok(None));
        let sdu = rx.push_cell(&cells[2]).unwrap().unwrap().to_vec();
        assert_eq!(sdu.len(), 124);
        assert_eq!(
            &sdu[..2],
            &[0x09, 0x03],
            "Q.2931 protocol discriminator, CR length"
        );
        assert_eq!(
            &sdu[119..],
            &bytes("00 48 00 00 00"),
            "SSCOP pad + SD trailer"
        );
        assert_eq!(segment(&sdu, 0, 5).unwrap(), cells);
    }

    /// A PDU with a correct CRC but the given trailer fields, to reach the checks
    /// behind the CRC.
    fn crafted(cells: usize, length: u16, cpi: u8) -> Vec<u8> {
        let mut buf = seq(cells * 48);
        let mut pdu = Aal5Pdu::new_unchecked(&mut buf[..]);
        pdu.set_uu(7);
        pdu.set_cpi(cpi);
        pdu.set_length(length);
        pdu.fill_crc();
        buf
    }

    #[test]
    fn each_trailer_check_is_named() {
        assert_eq!(decode(&crafted(1, 40, 0), 100).map(|r| r.1.uu), Ok(7));
        assert_eq!(
            decode(&crafted(1, 41, 0), 100),
            Err(Aal5Error::LengthTooLong {
                length: 41,
                available: 40
            })
        );
        assert_eq!(
            decode(&crafted(2, 40, 0), 100),
            Err(Aal5Error::PadTooLong {
                length: 40,
                pad: 48
            })
        );
        assert_eq!(
            decode(&crafted(2, 41, 1), 100),
            Err(Aal5Error::NonZeroCpi { cpi: 1 })
        );
        assert_eq!(
            decode(&crafted(3, 130, 0), 100),
            Err(Aal5Error::SduTooLarge { len: 130, max: 100 })
        );
        assert_eq!(decode(&crafted(1, 0, 0), 100), Err(Aal5Error::Abort));
        let mut bad = crafted(1, 40, 0);
        bad[3] ^= 1;
        assert!(matches!(
            decode(&bad, 100),
            Err(Aal5Error::CrcMismatch { .. })
        ));
        for len in [0, 47, 49, 95] {
            assert_eq!(
                decode(&vec![0; len], 100).map(|r| r.0.len()),
                Err(Aal5Error::BadPduLength { len })
            );
        }
    }

    #[test]
    fn reassembler_reports_crc_on_a_lost_cell_and_recovers() {
        let a = segment(&seq(100), 0, 100).unwrap();
        let b = segment(&seq(60), 0, 100).unwrap();
        let mut rx = Reassembler::new();
        // Middle cell of A lost.
        assert_eq!(rx.push_cell(&a[0]), Ok(None));
        let expected = u32::from_be_bytes(a[2][49..53].try_into().unwrap());
        match rx.push_cell(&a[2]) {
            Err(Aal5Error::CrcMismatch {
                expected: e,
                computed,
            }) => {
                assert_eq!(e, expected);
                assert_ne!(computed, expected);
            }
            other => panic!("{other:?}"),
        }
        for c in &b[..b.len() - 1] {
            assert_eq!(rx.push_cell(c), Ok(None));
        }
        assert_eq!(rx.push_cell(&b[b.len() - 1]), Ok(Some(&seq(60)[..])));
        // Last cell of A lost: A and B run together, the CRC catches it; C gets through.
        for c in &a[..2] {
            assert_eq!(rx.push_cell(c), Ok(None));
        }
        for c in &b[..b.len() - 1] {
            assert_eq!(rx.push_cell(c), Ok(None));
        }
        assert!(matches!(
            rx.push_cell(&b[b.len() - 1]),
            Err(Aal5Error::CrcMismatch { .. })
        ));
        assert_eq!(rx.buffered_cells(), 0);
        let c = segment(b"after", 0, 100).unwrap();
        assert_eq!(rx.push_cell(&c[0]), Ok(Some(&b"after"[..])));
    }

    #[test]
    fn too_many_cells_drops_the_frame_and_its_tail() {
        let mut rx = Reassembler::with_max_sdu(100);
        assert_eq!(rx.max_cells(), 3);
        let big = segment(&seq(200), 0, 40).unwrap();
        assert_eq!(big.len(), 5);
        for c in &big[..3] {
            assert_eq!(rx.push_cell(c), Ok(None));
        }
        assert_eq!(
            rx.push_cell(&big[3]),
            Err(Aal5Error::TooManyCells { max_cells: 3 })
        );
        assert_eq!(rx.buffered_cells(), 0);
        assert_eq!(rx.push_cell(&big[4]), Ok(None), "tail discarded quietly");
        let ok = segment(&seq(100), 0, 40).unwrap();
        let mut out = None;
        for c in &ok {
            out = rx.push_cell(c).unwrap().map(<[u8]>::to_vec);
        }
        assert_eq!(out, Some(seq(100)));
        assert!(rx.capacity() <= 3 * 48);
        // An SDU that fits the cells but not the maximum.
        let over = segment(&seq(130), 0, 40).unwrap();
        assert_eq!(over.len(), 3);
        assert_eq!(rx.push_cell(&over[0]), Ok(None));
        assert_eq!(rx.push_cell(&over[1]), Ok(None));
        assert_eq!(
            rx.push_cell(&over[2]),
            Err(Aal5Error::SduTooLarge { len: 130, max: 100 })
        );
    }

    #[test]
    fn memory_is_bounded_by_the_maximum_sdu() {
        let mut rx = Reassembler::new();
        let cells = segment(&vec![0xA5; MAX_SDU_LEN], 1, 32).unwrap();
        assert_eq!(cells.len(), rx.max_cells());
        let mut got = 0;
        for c in &cells {
            if let Some(sdu) = rx.push_cell(c).unwrap() {
                got = sdu.len();
            }
        }
        assert_eq!(got, MAX_SDU_LEN);
        assert!(rx.capacity() <= rx.max_cells() * 48, "{}", rx.capacity());
    }

    #[test]
    fn oam_cells_do_not_disturb_a_frame() {
        let cells = segment(&seq(100), 1, 32).unwrap();
        let mut oam = [0u8; 53];
        oam[..5].copy_from_slice(&bytes("00 10 02 0A EB"));
        let mut rx = Reassembler::new();
        assert_eq!(rx.push_cell(&cells[0]), Ok(None));
        assert_eq!(
            rx.push_cell(&oam),
            Err(Aal5Error::NotUserData {
                pti: Pti::EndToEndOamF5
            })
        );
        assert_eq!(rx.push_cell(&cells[1]), Ok(None));
        assert_eq!(rx.push_cell(&cells[2]), Ok(Some(&seq(100)[..])));
        rx.push_cell(&cells[0]).unwrap();
        rx.reset();
        assert_eq!(rx.buffered_cells(), 0);
    }

    #[test]
    fn segmenter_writes_into_caller_buffers_and_keeps_the_vc() {
        let header = HeaderRepr {
            clp: true,
            gfc: 3,
            ..HeaderRepr::uni(7, 1234, Pti::ResourceManagement)
        };
        let sdu = seq(41);
        let mut seg = Segmenter::with_uu(&sdu, header, 0x5A).unwrap();
        assert_eq!((seg.cell_count(), seg.len()), (2, 2));
        let mut out = [[0xEEu8; 53]; 3];
        assert!(seg.next_cell(&mut out[0]));
        assert!(seg.next_cell(&mut out[1]));
        assert!(!seg.next_cell(&mut out[2]));
        assert_eq!(out[2], [0xEE; 53], "untouched once done");
        for (i, cell) in out[..2].iter().enumerate() {
            let r = HeaderRepr::parse_header(cell[..5].try_into().unwrap(), header.format).unwrap();
            assert_eq!((r.gfc, r.vpi, r.vci, r.clp), (3, 7, 1234, true));
            assert_eq!(r.pti, Pti::user_data(false, i == 1));
        }
        let mut rx = Reassembler::new();
        rx.push_cell(&out[0]).unwrap();
        assert_eq!(rx.push_cell(&out[1]), Ok(Some(&sdu[..])));
        assert_eq!(rx.last_uu(), 0x5A);
        let bad = HeaderRepr { vpi: 300, ..header };
        assert!(matches!(
            Segmenter::new(&sdu, bad),
            Err(Aal5Error::Header(CellError::VpiOutOfRange { vpi: 300, .. }))
        ));
    }
}
