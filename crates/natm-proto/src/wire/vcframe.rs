//! The UDP adaptor's VC header: one AAL5 frame (a TPDU) per UDP datagram.
//!
//! Over UDP, each datagram carries exactly one AAL5 CPCS-SDU — for a transport VC, one
//! TPDU (seed 000 §5.3.1: "each TPDU corresponds to a single AAL 5 frame") — behind a
//! 4-octet header that names the VC, as the cell header does in cell mode. The end of
//! the SDU is the end of the datagram (the AAL5 AUU bit is implicit), and the UDP
//! checksum stands in for the AAL5 CRC-32 (seed 000 §5.3.2's note: no transport
//! checksum).
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +-------+---+-+-+---------------+-------------------------------+
//! | magic |knd|C|L|      VPI      |              VCI              |  0
//! +-------+---+-+-+---------------+-------------------------------+
//! |        AAL5 SDU: a TPDU, a signalling PDU or a probe ...      |  4
//! ```
//! Bits are numbered from the most significant. `magic` is 0xC (this header, version 1),
//! so the first octet is 0xC0–0xCF: never a TPDU's 0x1T, an IP header's 0x4X/0x6X,
//! `00` or LLC's `AA` (specs.md §6.2). `knd` (kind) says what the SDU is ([`FrameKind`]);
//! `C` is congestion indication (the cell header's EFCI bit, set by a congested
//! switch) and `L` is cell loss priority (CLP: drop this frame first). VPI and VCI are
//! the UNI cell header's (8 and 16 bits) so that a switch can move a frame between UDP
//! mode and cell mode without a table. All fields are big-endian.
//!
//! Four octets, not the five that one octet per field would take: the magic/version and
//! the kind/flags each fit a nibble, and a 4-octet header keeps the TPDU header that
//! follows on a 4-octet boundary of the datagram.

use core::fmt;

use thiserror::Error;

/// Length of the VC header in octets.
pub const HEADER_LEN: usize = 4;
/// The high nibble of octet 0: this header, version 1.
pub const MAGIC: u8 = 0xC;
/// Largest AAL5 CPCS-SDU (I.363.5), hence the largest frame payload.
pub const MAX_SDU_LEN: usize = 65_535;
/// Largest frame: the header and the largest SDU.
pub const MAX_FRAME_LEN: usize = HEADER_LEN + MAX_SDU_LEN;
/// Largest UDP payload over IPv4 (65,535 − 20 − 8); IPv6 allows 20 octets more.
pub const MAX_UDP_PAYLOAD_V4: usize = 65_507;
/// Largest SDU one IPv4 UDP datagram can carry behind the VC header: a VC whose TPDUs
/// are larger cannot run over the UDP adaptor.
pub const MAX_SDU_OVER_UDP_V4: usize = MAX_UDP_PAYLOAD_V4 - HEADER_LEN;

/// The signalling VC's VCI (ITU-T I.361: VPI 0/VCI 5).
pub const SIGNALLING_VCI: u16 = 5;

/// A datagram carrying one SSCOP PDU as a signalling frame on VPI 0/VCI 5 (how sigds
/// and switches exchange UNI signalling, in either link mode).
pub fn signalling_frame(pdu: &[u8]) -> Vec<u8> {
    control_frame(SIGNALLING_VCI, pdu)
}

/// The SSCOP PDU in a datagram, if it is a signalling frame on VPI 0/VCI 5.
pub fn signalling_pdu(d: &[u8]) -> Option<&[u8]> {
    control_pdu(d, SIGNALLING_VCI)
}

/// The routing channel's VCI on a trunk between natm switches (issue 33): PNNI's
/// routing control channel, VPI 0/VCI 18.
pub const ROUTING_VCI: u16 = 18;

/// A datagram carrying one routing frame (hello, PTSE, ack) on VPI 0/VCI 18, framed as
/// signalling frames are.
pub fn routing_frame(pdu: &[u8]) -> Vec<u8> {
    control_frame(ROUTING_VCI, pdu)
}

/// The routing frame in a datagram, if it is one on VPI 0/VCI 18.
pub fn routing_pdu(d: &[u8]) -> Option<&[u8]> {
    control_pdu(d, ROUTING_VCI)
}

/// ILMI's VCI (issue 33): VPI 0/VCI 16.
pub const ILMI_VCI: u16 = 16;

/// A datagram carrying one ILMI message on VPI 0/VCI 16, framed as signalling frames
/// are (a host's link to its switch).
pub fn ilmi_frame(pdu: &[u8]) -> Vec<u8> {
    control_frame(ILMI_VCI, pdu)
}

/// The ILMI message in a datagram, if it is one on VPI 0/VCI 16.
pub fn ilmi_pdu(d: &[u8]) -> Option<&[u8]> {
    control_pdu(d, ILMI_VCI)
}

/// A control channel's frame (kind signalling, VPI 0/`vci`).
fn control_frame(vci: u16, pdu: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + pdu.len());
    v.extend_from_slice(&Repr::new(FrameKind::Signalling, 0, vci).to_bytes());
    v.extend_from_slice(pdu);
    v
}

/// The SDU of a control channel's frame on VPI 0/`vci`.
fn control_pdu(d: &[u8], vci: u16) -> Option<&[u8]> {
    match Repr::parse_bytes(d) {
        Ok((r, pdu)) if r.kind == FrameKind::Signalling && r.vpi == 0 && r.vci == vci => Some(pdu),
        _ => None,
    }
}

mod field {
    pub(super) const MAGIC_KIND_FLAGS: usize = 0;
    pub(super) const VPI: usize = 1;
    pub(super) const VCI: core::ops::Range<usize> = 2..4;
    pub(super) const PAYLOAD: usize = 4;
}

const KIND_SHIFT: u8 = 2;
const KIND_MASK: u8 = 0b11 << KIND_SHIFT;
const CI_BIT: u8 = 0b10;
const CLP_BIT: u8 = 0b01;

/// What the SDU in a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// A TPDU of a transport VC: user data and the transport's own control (ACKs,
    /// handshake), which the TPDU header tells apart.
    Data,
    /// A signalling PDU (UNI signalling; in cell mode it would ride VCI 5).
    Signalling,
    /// An OAM-like probe on the VC (the F5 loopback and continuity-check cells of cell
    /// mode): liveness and round-trip time without the transport.
    Oam,
    /// An ABR resource-management cell on the VC it controls (`wire::rm`; a PTI 110
    /// cell in cell mode).
    Rm,
}

impl FrameKind {
    /// The kind of the two `knd` bits (higher bits are ignored).
    const fn from_bits(bits: u8) -> FrameKind {
        match bits & 0b11 {
            0 => FrameKind::Data,
            1 => FrameKind::Signalling,
            2 => FrameKind::Oam,
            _ => FrameKind::Rm,
        }
    }

    const fn bits(self) -> u8 {
        match self {
            FrameKind::Data => 0,
            FrameKind::Signalling => 1,
            FrameKind::Oam => 2,
            FrameKind::Rm => 3,
        }
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FrameKind::Data => "data",
            FrameKind::Signalling => "signalling",
            FrameKind::Oam => "oam",
            FrameKind::Rm => "rm",
        })
    }
}

/// Why a datagram is not a VC frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum VcFrameError {
    /// Fewer octets than the header: not a natm frame, or cut short.
    #[error("datagram of {0} octets is shorter than the {HEADER_LEN}-octet VC header")]
    Truncated(usize),
    /// More than a header and one AAL5 SDU.
    #[error("frame of {0} octets exceeds the {MAX_FRAME_LEN}-octet limit (header + AAL5 SDU)")]
    TooLong(usize),
    /// The first nibble is not [`MAGIC`]: stray traffic, or another header version.
    #[error("VC header magic {0:#x} is not {MAGIC:#x}: not a natm frame, or another version")]
    Magic(u8),
}

/// A read/write view of a VC frame in a buffer (smoltcp style).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checks; accessors may panic until [`Packet::check_len`].
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer after checking its length; accessors never panic afterwards.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, VcFrameError> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Check the buffer holds a header and at most one AAL5 SDU.
    pub fn check_len(&self) -> Result<(), VcFrameError> {
        match self.buffer.as_ref().len() {
            len if len < HEADER_LEN => Err(VcFrameError::Truncated(len)),
            len if len > MAX_FRAME_LEN => Err(VcFrameError::TooLong(len)),
            _ => Ok(()),
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The magic/version nibble.
    pub fn magic(&self) -> u8 {
        self.buffer.as_ref()[field::MAGIC_KIND_FLAGS] >> 4
    }
    /// The raw 2-bit kind.
    pub fn kind_bits(&self) -> u8 {
        (self.buffer.as_ref()[field::MAGIC_KIND_FLAGS] & KIND_MASK) >> KIND_SHIFT
    }
    /// Congestion indication (EFCI).
    pub fn ci(&self) -> bool {
        self.buffer.as_ref()[field::MAGIC_KIND_FLAGS] & CI_BIT != 0
    }
    /// Cell loss priority: drop this frame first.
    pub fn clp(&self) -> bool {
        self.buffer.as_ref()[field::MAGIC_KIND_FLAGS] & CLP_BIT != 0
    }
    /// Virtual path identifier.
    pub fn vpi(&self) -> u8 {
        self.buffer.as_ref()[field::VPI]
    }
    /// Virtual channel identifier.
    pub fn vci(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::VCI];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// The SDU after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set octet 0: magic, kind and both flags at once.
    pub fn set_magic_kind_flags(&mut self, magic: u8, kind: FrameKind, ci: bool, clp: bool) {
        self.buffer.as_mut()[field::MAGIC_KIND_FLAGS] = (magic << 4)
            | (kind.bits() << KIND_SHIFT)
            | if ci { CI_BIT } else { 0 }
            | if clp { CLP_BIT } else { 0 };
    }
    /// Set or clear the congestion indication (a switch marking a frame).
    pub fn set_ci(&mut self, ci: bool) {
        let b = &mut self.buffer.as_mut()[field::MAGIC_KIND_FLAGS];
        *b = if ci { *b | CI_BIT } else { *b & !CI_BIT };
    }
    /// Set or clear cell loss priority (a policer tagging a frame).
    pub fn set_clp(&mut self, clp: bool) {
        let b = &mut self.buffer.as_mut()[field::MAGIC_KIND_FLAGS];
        *b = if clp { *b | CLP_BIT } else { *b & !CLP_BIT };
    }
    /// Set the VPI.
    pub fn set_vpi(&mut self, vpi: u8) {
        self.buffer.as_mut()[field::VPI] = vpi;
    }
    /// Set the VCI.
    pub fn set_vci(&mut self, vci: u16) {
        self.buffer.as_mut()[field::VCI].copy_from_slice(&vci.to_be_bytes());
    }
    /// The SDU after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// A parsed VC header: a small `Copy` value (the SDU stays in the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// What the SDU is.
    pub kind: FrameKind,
    /// Congestion indication (EFCI).
    pub ci: bool,
    /// Cell loss priority.
    pub clp: bool,
    /// Virtual path identifier.
    pub vpi: u8,
    /// Virtual channel identifier.
    pub vci: u16,
}

impl Repr {
    /// A header for `kind` on VPI/VCI with both flags clear.
    pub const fn new(kind: FrameKind, vpi: u8, vci: u16) -> Repr {
        Repr {
            kind,
            ci: false,
            clp: false,
            vpi,
            vci,
        }
    }

    /// The PTI of the one cell this frame is in cell mode, for the kinds that are a
    /// single cell rather than an AAL5 SDU: OAM (PTI 100 or 101 from the `C` bit,
    /// `wire::oam`) and RM (PTI 110, `wire::rm`). `None` for data and signalling.
    pub const fn single_cell_pti(&self) -> Option<super::cell::Pti> {
        match self.kind {
            FrameKind::Oam => Some(super::oam::Scope::of_frame(self).pti()),
            FrameKind::Rm => Some(super::cell::Pti::ResourceManagement),
            FrameKind::Data | FrameKind::Signalling => None,
        }
    }

    /// A user-data (TPDU) header on VPI/VCI.
    pub const fn data(vpi: u8, vci: u16) -> Repr {
        Repr::new(FrameKind::Data, vpi, vci)
    }

    /// Parse the header of a checked or unchecked packet.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, VcFrameError> {
        packet.check_len()?;
        if packet.magic() != MAGIC {
            return Err(VcFrameError::Magic(packet.magic()));
        }
        let kind = FrameKind::from_bits(packet.kind_bits());
        Ok(Repr {
            kind,
            ci: packet.ci(),
            clp: packet.clp(),
            vpi: packet.vpi(),
            vci: packet.vci(),
        })
    }

    /// Parse a whole datagram: the header and a borrow of its SDU.
    pub fn parse_bytes(bytes: &[u8]) -> Result<(Repr, &[u8]), VcFrameError> {
        let p = Packet::new_checked(bytes)?;
        let r = Repr::parse(&p)?;
        Ok((r, &bytes[HEADER_LEN..]))
    }

    /// Octets the header occupies.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header into the first [`HEADER_LEN`] octets of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_magic_kind_flags(MAGIC, self.kind, self.ci, self.clp);
        packet.set_vpi(self.vpi);
        packet.set_vci(self.vci);
    }

    /// Write the header into `out[..HEADER_LEN]`.
    ///
    /// # Panics
    /// If `out` is shorter than [`HEADER_LEN`] (a caller bug, not bad input).
    pub fn emit_into(&self, out: &mut [u8]) {
        self.emit(&mut Packet::new_unchecked(&mut out[..HEADER_LEN]));
    }

    /// The header as an array.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.emit_into(&mut b);
        b
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.vpi, self.vci)?;
        if self.ci {
            f.write_str(" CI")?;
        }
        if self.clp {
            f.write_str(" CLP")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn signalling_frames_round_trip_and_data_frames_are_not_signalling() {
        let d = signalling_frame(b"\x00\x00\x00\x00\x10\x00\x00\x00");
        assert_eq!(
            signalling_pdu(&d),
            Some(&b"\x00\x00\x00\x00\x10\x00\x00\x00"[..])
        );
        let mut data = Repr::data(0, SIGNALLING_VCI).to_bytes().to_vec();
        data.extend_from_slice(b"x");
        assert_eq!(signalling_pdu(&data), None);
        assert_eq!(signalling_pdu(b"junk"), None);
    }

    // A data frame on 0/32 carrying "hi"; a signalling frame on 0/5; an OAM probe on
    // 255/65535 with CI and CLP set.
    const DATA: [u8; 6] = [0xC0, 0x00, 0x00, 0x20, b'h', b'i'];
    const SIG: [u8; 4] = [0xC4, 0x00, 0x00, 0x05];
    const OAM: [u8; 4] = [0xCB, 0xFF, 0xFF, 0xFF];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&DATA[..]).unwrap();
        assert_eq!(p.magic(), MAGIC);
        assert_eq!(p.kind_bits(), 0);
        assert!(!p.ci() && !p.clp());
        assert_eq!((p.vpi(), p.vci()), (0, 32));
        assert_eq!(p.payload(), b"hi");
        let p = Packet::new_checked(&OAM[..]).unwrap();
        assert_eq!(p.kind_bits(), 2);
        assert!(p.ci() && p.clp());
        assert_eq!((p.vpi(), p.vci()), (255, 65535));
        assert_eq!(p.payload(), b"");
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 6];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        Repr::data(0, 32).emit(&mut p);
        p.payload_mut().copy_from_slice(b"hi");
        assert_eq!(buf, DATA);
        let sig = Repr::new(FrameKind::Signalling, 0, 5);
        assert_eq!(sig.to_bytes(), SIG);
        let oam = Repr {
            ci: true,
            clp: true,
            ..Repr::new(FrameKind::Oam, 255, 65535)
        };
        assert_eq!(oam.to_bytes(), OAM);
    }

    #[test]
    fn parse_golden() {
        let (r, sdu) = Repr::parse_bytes(&DATA).unwrap();
        assert_eq!(r, Repr::data(0, 32));
        assert_eq!(sdu, b"hi");
        assert_eq!(r.buffer_len(), HEADER_LEN);
        assert_eq!(
            Repr::parse_bytes(&SIG).unwrap().0,
            Repr::new(FrameKind::Signalling, 0, 5)
        );
        let (oam, _) = Repr::parse_bytes(&OAM).unwrap();
        assert_eq!((oam.kind, oam.ci, oam.clp), (FrameKind::Oam, true, true));
        assert_eq!(oam.to_string(), "oam 255/65535 CI CLP");
    }

    #[test]
    fn switch_marks_in_place() {
        let mut buf = DATA;
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_ci(true);
        p.set_clp(true);
        assert_eq!(p.into_inner()[0], 0xC3);
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_ci(false);
        p.set_clp(false);
        assert_eq!(buf, DATA);
    }

    #[test]
    fn first_octet_avoids_other_formats() {
        for b in 0..16u8 {
            let first = (MAGIC << 4) | b;
            assert!(!matches!(first >> 4, 0x1 | 0x4 | 0x6) && first != 0 && first != 0xAA);
        }
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            Repr::parse_bytes(&DATA[..3]),
            Err(VcFrameError::Truncated(3))
        );
        assert_eq!(Repr::parse_bytes(&[]), Err(VcFrameError::Truncated(0)));
        let mut b = DATA;
        b[0] = 0x10; // a bare TPDU, sent without the VC header
        assert_eq!(Repr::parse_bytes(&b), Err(VcFrameError::Magic(1)));
        b[0] = 0xCC;
        assert_eq!(
            Repr::parse_bytes(&b).map(|(r, _)| r.kind),
            Ok(FrameKind::Rm)
        );
        let long = vec![0xC0u8; MAX_FRAME_LEN + 1];
        assert_eq!(
            Repr::parse_bytes(&long),
            Err(VcFrameError::TooLong(MAX_FRAME_LEN + 1))
        );
        assert!(Repr::parse_bytes(&long[..MAX_FRAME_LEN]).is_ok());
        // The unchecked path checks too: parse never panics on a short buffer.
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&DATA[..1])),
            Err(VcFrameError::Truncated(1))
        );
    }

    fn repr() -> impl Strategy<Value = Repr> {
        (
            0u8..4,
            any::<bool>(),
            any::<bool>(),
            any::<u8>(),
            any::<u16>(),
        )
            .prop_map(|(k, ci, clp, vpi, vci)| Repr {
                kind: FrameKind::from_bits(k),
                ci,
                clp,
                vpi,
                vci,
            })
    }

    /// The checks of `fuzz/fuzz_targets/vc_frame.rs`, shared with the corpus replay.
    fn check_any_bytes(data: &[u8]) {
        match Repr::parse_bytes(data) {
            Ok((r, sdu)) => {
                assert_eq!(
                    &r.to_bytes()[..],
                    &data[..HEADER_LEN],
                    "parse/emit identity"
                );
                assert_eq!(sdu, &data[HEADER_LEN..]);
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }

    proptest! {
        #[test]
        fn round_trip(r in repr(), sdu in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut buf = vec![0u8; HEADER_LEN + sdu.len()];
            let mut p = Packet::new_unchecked(&mut buf[..]);
            r.emit(&mut p);
            p.payload_mut().copy_from_slice(&sdu);
            let (parsed, payload) = Repr::parse_bytes(&buf).unwrap();
            prop_assert_eq!(parsed, r);
            prop_assert_eq!(payload, &sdu[..]);
        }

        #[test]
        fn any_bytes_parse_or_fail_cleanly(data in proptest::collection::vec(any::<u8>(), 0..16)) {
            check_any_bytes(&data);
        }
    }

    /// Replays the committed fuzz seeds so that `cargo test` covers them without
    /// cargo-fuzz.
    #[test]
    fn fuzz_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/vc_frame");
        let mut replayed = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            check_any_bytes(&std::fs::read(entry.unwrap().path()).unwrap());
            replayed += 1;
        }
        assert!(replayed > 0, "no seeds in {}", dir.display());
    }

    #[test]
    fn limits_are_consistent() {
        assert_eq!(MAX_SDU_OVER_UDP_V4, 65_503);
        const { assert!(MAX_SDU_OVER_UDP_V4 >= crate::wire::tpdu::HEADER_LEN + 4096) };
        assert_eq!(MAX_FRAME_LEN, 65_539);
    }
}
