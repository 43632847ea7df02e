//! The transport protocol data unit (TPDU) header.
//!
//! seed 000 §5.3.1: "each TPDU corresponds to a single AAL 5 frame"; the header is
//! 32 bytes, like the paper's. Every TPDU of a VC, data or control, starts with it.
//! A simplex transport VC runs on one ATM VCC: DATA flows forward, ACK and the
//! handshake replies flow on the backward direction of the same VCC.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +-------+-------+---------------+-------------------------------+
//! |  ver  | type  |     flags     |            window             |  0
//! +-------+-------+---------------+-------------------------------+
//! |                            cookie                             |  4
//! +---------------------------------------------------------------+
//! |               seq (DATA)  /  caused-by S (ACK)                |  8
//! +---------------------------------------------------------------+
//! |                   cumulative ack C (ACK)                      | 12
//! +---------------------------------------------------------------+
//! |                       message number                          | 16
//! +---------------------------------------------------------------+
//! |                  tsval: sender's clock, µs                    | 20
//! +---------------------------------------------------------------+
//! |                 tsecr: echoed tsval, µs                       | 24
//! +---------------------------------------------------------------+
//! |      aux: message offset (DATA) / free receive bytes (ACK)    | 28
//! +---------------------------------------------------------------+
//! ```
//! All fields are big-endian. `ver` is 1, so the first octet is 0x1T: never 0x4X/0x6X,
//! `00` or `AA`, which Wireshark's AAL5 heuristics would take for IP, bridged Ethernet
//! or LLC (specs.md §6.2). There is no data checksum: the AAL5 CRC (cell mode) or the
//! UDP checksum covers corruption (seed 000 §3, fourth principle).

use core::fmt;

use thiserror::Error;

/// Length of the TPDU header in bytes.
pub const HEADER_LEN: usize = 32;
/// The only version this code speaks.
pub const VERSION: u8 = 1;
/// Largest TPDU (header included) one AAL5 CPCS-SDU can carry.
pub const MAX_TPDU_LEN: usize = 65_535;
/// Largest payload one TPDU can carry.
pub const MAX_PAYLOAD: usize = MAX_TPDU_LEN - HEADER_LEN;

mod field {
    use core::ops::Range;
    pub(super) const VER_TYPE: usize = 0;
    pub(super) const FLAGS: usize = 1;
    pub(super) const WINDOW: Range<usize> = 2..4;
    pub(super) const COOKIE: Range<usize> = 4..8;
    pub(super) const SEQ: Range<usize> = 8..12;
    pub(super) const ACK: Range<usize> = 12..16;
    pub(super) const MSG: Range<usize> = 16..20;
    pub(super) const TSVAL: Range<usize> = 20..24;
    pub(super) const TSECR: Range<usize> = 24..28;
    pub(super) const AUX: Range<usize> = 28..32;
    pub(super) const PAYLOAD: usize = 32;
}

/// What a TPDU is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TpduType {
    /// Application data (forward direction).
    Data,
    /// SMART acknowledgement: (cumulative ack, sequence number that caused it).
    Ack,
    /// First leg of the three-way handshake; payload is [`ConnParams`].
    ConnRequest,
    /// Second leg: the receiver's answer with the negotiated [`ConnParams`].
    ConnAccept,
    /// Third leg: the sender confirms; data may follow at once.
    ConnConfirm,
    /// Orderly close: no data after sequence number `seq - 1`.
    Close,
    /// The receiver has every TPDU before the close.
    CloseAck,
    /// The connection is aborted; nothing more will be delivered.
    Abort,
    /// An RTT probe from the sender of a VC that carries no ACKs (seed 003's SYNC):
    /// `seq` is the probe's number, `tsval` the sender's clock.
    Sync,
    /// The receiver's answer to a SYNC: `seq` and `tsecr` echo the probe's.
    SyncEcho,
    /// A QoS change the sender asks for within the bounds agreed at setup (seed 003
    /// `setqos`): `seq` is the change's number, `ack` and `aux` the new rate in
    /// payload bit/s (high and low 32 bits).
    Qos,
    /// The receiver's answer to a QOS: `seq` and the rate echoed, `window` 1 if the
    /// change is accepted, 0 if refused.
    QosAck,
}

impl TpduType {
    fn from_nibble(n: u8) -> Option<Self> {
        Some(match n {
            0 => Self::Data,
            1 => Self::Ack,
            2 => Self::ConnRequest,
            3 => Self::ConnAccept,
            4 => Self::ConnConfirm,
            5 => Self::Close,
            6 => Self::CloseAck,
            7 => Self::Abort,
            8 => Self::Sync,
            9 => Self::SyncEcho,
            10 => Self::Qos,
            11 => Self::QosAck,
            _ => return None,
        })
    }

    /// Whether TPDUs of this type may carry a payload (DATA and the handshake's
    /// parameters); every other type must carry none.
    pub const fn carries_payload(self) -> bool {
        matches!(self, Self::Data | Self::ConnRequest | Self::ConnAccept)
    }

    pub(crate) fn nibble(self) -> u8 {
        match self {
            Self::Data => 0,
            Self::Ack => 1,
            Self::ConnRequest => 2,
            Self::ConnAccept => 3,
            Self::ConnConfirm => 4,
            Self::Close => 5,
            Self::CloseAck => 6,
            Self::Abort => 7,
            Self::Sync => 8,
            Self::SyncEcho => 9,
            Self::Qos => 10,
            Self::QosAck => 11,
        }
    }
}

impl fmt::Display for TpduType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Data => "DATA",
            Self::Ack => "ACK",
            Self::ConnRequest => "CONN-REQ",
            Self::ConnAccept => "CONN-ACCEPT",
            Self::ConnConfirm => "CONN-CONFIRM",
            Self::Close => "CLOSE",
            Self::CloseAck => "CLOSE-ACK",
            Self::Abort => "ABORT",
            Self::Sync => "SYNC",
            Self::SyncEcho => "SYNC-ECHO",
            Self::Qos => "QOS",
            Self::QosAck => "QOS-ACK",
        })
    }
}

/// Header flags (octet 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    /// First TPDU of a message (seed 000 Figure 3: a message is a list of TPDUs).
    pub const FIRST: Flags = Flags(0x01);
    /// Last TPDU of a message.
    pub const LAST: Flags = Flags(0x02);
    /// A retransmission (seed 003: the receiver may favour them).
    pub const RETX: Flags = Flags(0x04);
    /// First member of a packet pair (seed 000 §5.3.3).
    pub const PAIR_FIRST: Flags = Flags(0x08);
    /// Second member of a packet pair.
    pub const PAIR_SECOND: Flags = Flags(0x10);
    /// ACK: the receiver's buffer is full; the sender should hold new data.
    pub const WINDOW_FULL: Flags = Flags(0x20);
    /// ACK: generated by a pair's second member (lets the sender time the pair).
    pub const PAIR_ECHO: Flags = Flags(0x40);
    /// Every defined bit.
    pub const ALL: Flags = Flags(0x7f);

    /// No flag set.
    pub const fn empty() -> Self {
        Flags(0)
    }
    /// The raw octet.
    pub const fn bits(self) -> u8 {
        self.0
    }
    /// Flags from a raw octet, or `None` if an undefined bit is set.
    pub const fn from_bits(bits: u8) -> Option<Self> {
        if bits & !Self::ALL.0 == 0 {
            Some(Flags(bits))
        } else {
            None
        }
    }
    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Both sets of flags.
    #[must_use]
    pub const fn union(self, other: Flags) -> Self {
        Flags(self.0 | other.0)
    }
    /// Set or clear `other`.
    pub fn set(&mut self, other: Flags, on: bool) {
        if on {
            self.0 |= other.0
        } else {
            self.0 &= !other.0
        }
    }
}

impl core::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        self.union(rhs)
    }
}

impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(Flags, &str); 7] = [
            (Flags::FIRST, "FIRST"),
            (Flags::LAST, "LAST"),
            (Flags::RETX, "RETX"),
            (Flags::PAIR_FIRST, "PAIR1"),
            (Flags::PAIR_SECOND, "PAIR2"),
            (Flags::WINDOW_FULL, "WFULL"),
            (Flags::PAIR_ECHO, "PECHO"),
        ];
        let mut first = true;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// Why a byte string is not a TPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TpduError {
    /// Fewer bytes than a header; the frame was truncated or is not a TPDU.
    #[error("TPDU of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    Truncated(usize),
    /// Longer than one AAL5 SDU can be.
    #[error("TPDU of {0} bytes exceeds the AAL5 limit of {MAX_TPDU_LEN}")]
    TooLong(usize),
    /// A version this code does not speak; the peer runs another natm release.
    #[error("TPDU version {0} is not supported (this natm speaks version {VERSION})")]
    Version(u8),
    /// An undefined TPDU type.
    #[error("unknown TPDU type {0}")]
    Type(u8),
    /// An undefined flag bit is set.
    #[error("undefined TPDU flag bits {0:#04x}")]
    Flags(u8),
    /// A control TPDU that must not carry data does.
    #[error("{0} TPDU carries {1} payload bytes; it must carry none")]
    UnexpectedPayload(TpduType, usize),
    /// The handshake parameters are malformed.
    #[error("connection parameters: {0}")]
    Params(&'static str),
}

/// A read/write view of a TPDU in a buffer (smoltcp style).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checks; accessors may panic until [`Packet::check_len`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer after checking it can hold a header.
    pub fn new_checked(buffer: T) -> Result<Self, TpduError> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Check the buffer is long enough for the header and short enough for AAL5.
    pub fn check_len(&self) -> Result<(), TpduError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            Err(TpduError::Truncated(len))
        } else if len > MAX_TPDU_LEN {
            Err(TpduError::TooLong(len))
        } else {
            Ok(())
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u32_at(&self, r: core::ops::Range<usize>) -> u32 {
        let b = &self.buffer.as_ref()[r];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Protocol version (high nibble of octet 0).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TYPE] >> 4
    }
    /// Raw type nibble.
    pub fn type_nibble(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TYPE] & 0x0f
    }
    /// Raw flags octet.
    pub fn flags_raw(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Window, in TPDUs.
    pub fn window(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::WINDOW];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// Connection cookie: the capability sigd gave both ends.
    pub fn cookie(&self) -> u32 {
        self.u32_at(field::COOKIE)
    }
    /// DATA: sequence number; ACK: the sequence number that caused this ack.
    pub fn seq(&self) -> u32 {
        self.u32_at(field::SEQ)
    }
    /// ACK: cumulative acknowledgement (every TPDU before it has arrived).
    pub fn ack(&self) -> u32 {
        self.u32_at(field::ACK)
    }
    /// Message number.
    pub fn msg(&self) -> u32 {
        self.u32_at(field::MSG)
    }
    /// Sender's timestamp, microseconds (wrapping).
    pub fn tsval(&self) -> u32 {
        self.u32_at(field::TSVAL)
    }
    /// Echo of the peer's timestamp.
    pub fn tsecr(&self) -> u32 {
        self.u32_at(field::TSECR)
    }
    /// Auxiliary word.
    pub fn aux(&self) -> u32 {
        self.u32_at(field::AUX)
    }
    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u32(&mut self, r: core::ops::Range<usize>, v: u32) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }
    /// Set version and type.
    pub fn set_version_type(&mut self, version: u8, ty: TpduType) {
        self.buffer.as_mut()[field::VER_TYPE] = (version << 4) | ty.nibble();
    }
    /// Set the flags octet.
    pub fn set_flags(&mut self, flags: Flags) {
        self.buffer.as_mut()[field::FLAGS] = flags.bits();
    }
    /// Set the window.
    pub fn set_window(&mut self, w: u16) {
        self.buffer.as_mut()[field::WINDOW].copy_from_slice(&w.to_be_bytes());
    }
    /// Set the cookie.
    pub fn set_cookie(&mut self, v: u32) {
        self.set_u32(field::COOKIE, v)
    }
    /// Set the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        self.set_u32(field::SEQ, v)
    }
    /// Set the cumulative ack.
    pub fn set_ack(&mut self, v: u32) {
        self.set_u32(field::ACK, v)
    }
    /// Set the message number.
    pub fn set_msg(&mut self, v: u32) {
        self.set_u32(field::MSG, v)
    }
    /// Set the timestamp.
    pub fn set_tsval(&mut self, v: u32) {
        self.set_u32(field::TSVAL, v)
    }
    /// Set the echoed timestamp.
    pub fn set_tsecr(&mut self, v: u32) {
        self.set_u32(field::TSECR, v)
    }
    /// Set the auxiliary word.
    pub fn set_aux(&mut self, v: u32) {
        self.set_u32(field::AUX, v)
    }
    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// A parsed TPDU header: a small `Copy` value (the payload stays in the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// What the TPDU is for.
    pub ty: TpduType,
    /// Header flags.
    pub flags: Flags,
    /// Window in TPDUs: the receiver's free buffer (ACK) or offered window (handshake).
    pub window: u16,
    /// Connection cookie (seed 001 §4.2: a capability bound to the VC).
    pub cookie: u32,
    /// DATA: this TPDU's sequence number. ACK: the sequence number that caused it (S).
    pub seq: u32,
    /// ACK: cumulative ack C = next expected sequence number. Zero in DATA.
    pub ack: u32,
    /// Message number the TPDU belongs to (DATA); echoed in ACK.
    pub msg: u32,
    /// Sender's clock in microseconds, wrapping.
    pub tsval: u32,
    /// The `tsval` of the TPDU this one answers (RTT samples without Karn's rule).
    pub tsecr: u32,
    /// DATA: byte offset of the payload within its message (mod 2^32).
    /// ACK: free receive-buffer bytes (saturating).
    pub aux: u32,
}

impl Header {
    /// A header of type `ty` with every other field zero.
    pub const fn new(ty: TpduType) -> Self {
        Header {
            ty,
            flags: Flags::empty(),
            window: 0,
            cookie: 0,
            seq: 0,
            ack: 0,
            msg: 0,
            tsval: 0,
            tsecr: 0,
            aux: 0,
        }
    }

    /// The type and cookie of a TPDU, clear or sealed, and nothing else checked: what
    /// a host port needs to route it (`endpoint::HostRoutes`). A sealed TPDU's flags
    /// and payload are for its connection to check once its key has opened it.
    pub fn route_fields(bytes: &[u8]) -> Option<(TpduType, u32)> {
        let p = Packet::new_checked(bytes).ok()?;
        if p.version() != VERSION {
            return None;
        }
        Some((TpduType::from_nibble(p.type_nibble())?, p.cookie()))
    }

    /// Parse a header and check the payload is allowed for its type.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Header, TpduError> {
        packet.check_len()?;
        if packet.version() != VERSION {
            return Err(TpduError::Version(packet.version()));
        }
        let ty = TpduType::from_nibble(packet.type_nibble())
            .ok_or(TpduError::Type(packet.type_nibble()))?;
        let flags =
            Flags::from_bits(packet.flags_raw()).ok_or(TpduError::Flags(packet.flags_raw()))?;
        let payload = packet.payload().len();
        match ty {
            TpduType::Data | TpduType::ConnRequest | TpduType::ConnAccept => {}
            _ if payload != 0 => return Err(TpduError::UnexpectedPayload(ty, payload)),
            _ => {}
        }
        Ok(Header {
            ty,
            flags,
            window: packet.window(),
            cookie: packet.cookie(),
            seq: packet.seq(),
            ack: packet.ack(),
            msg: packet.msg(),
            tsval: packet.tsval(),
            tsecr: packet.tsecr(),
            aux: packet.aux(),
        })
    }

    /// Parse a whole TPDU: the header and a borrow of its payload.
    pub fn parse_bytes(bytes: &[u8]) -> Result<(Header, &[u8]), TpduError> {
        let p = Packet::new_checked(bytes)?;
        let h = Header::parse(&p)?;
        Ok((h, &bytes[HEADER_LEN..]))
    }

    /// Bytes the header occupies.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header into the first [`HEADER_LEN`] bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_version_type(VERSION, self.ty);
        packet.set_flags(self.flags);
        packet.set_window(self.window);
        packet.set_cookie(self.cookie);
        packet.set_seq(self.seq);
        packet.set_ack(self.ack);
        packet.set_msg(self.msg);
        packet.set_tsval(self.tsval);
        packet.set_tsecr(self.tsecr);
        packet.set_aux(self.aux);
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

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{}] seq={} ack={} msg={} win={} ts={}/{} aux={} cookie={:#010x}",
            self.ty,
            self.flags,
            self.seq,
            self.ack,
            self.msg,
            self.window,
            self.tsval,
            self.tsecr,
            self.aux,
            self.cookie
        )
    }
}

/// Length of the [`ConnParams`] payload of a handshake TPDU.
pub const PARAMS_LEN: usize = 48;

/// Parameters negotiated by the three-way handshake (seed 000 §5.3.2, seed 003):
/// the CONN-REQ carries the sender's offer, the CONN-ACCEPT the agreed values.
///
/// ```text
///  0: error-control window, TPDUs (u32)     4: TPDU size, bytes (u32)
///  8: largest message, bytes (u64)         16: most messages outstanding (u32)
/// 20: options (u32): bit 0 error control, bit 1 stream semantics,
///     bits 8-11 flow control (0 none, 1 leaky bucket, 2 packet-pair, 3 window)
/// 24: target rate, payload bit/s (u64)     32: minimum rate, payload bit/s (u64)
/// 40: receive buffer, bytes (u32)          44: initial sequence number (u32)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ConnParams {
    /// Error-control window in TPDUs; the receiver buffers at least this many.
    pub window: u32,
    /// TPDU size (payload bytes per TPDU).
    pub tpdu_size: u32,
    /// Largest message in this direction, bytes (`u64::MAX`: unlimited).
    pub max_msg: u64,
    /// Most messages outstanding (sent, not yet delivered).
    pub outstanding: u32,
    /// Option bits, see the layout.
    pub options: u32,
    /// Target rate in payload bit/s (0: none).
    pub rate: u64,
    /// Minimum acceptable rate in payload bit/s (0: none).
    pub min_rate: u64,
    /// Receive buffer the answering side commits, bytes.
    pub rcv_buf: u32,
    /// First sequence number the sender will use.
    pub isn: u32,
}

impl ConnParams {
    /// Option bit: error control (SMART) on.
    pub const OPT_ERROR_CONTROL: u32 = 1;
    /// Option bit: byte-stream semantics (else message).
    pub const OPT_STREAM: u32 = 2;
    const FLOW_SHIFT: u32 = 8;
    const FLOW_MASK: u32 = 0xf << Self::FLOW_SHIFT;
    const KNOWN: u32 = Self::OPT_ERROR_CONTROL | Self::OPT_STREAM | Self::FLOW_MASK;

    /// Flow-control code (0 none, 1 leaky bucket, 2 packet-pair, 3 window, 4 ABR).
    pub const fn flow_code(&self) -> u32 {
        (self.options & Self::FLOW_MASK) >> Self::FLOW_SHIFT
    }

    /// Set the flow-control code.
    pub fn set_flow_code(&mut self, code: u32) {
        self.options = (self.options & !Self::FLOW_MASK) | ((code & 0xf) << Self::FLOW_SHIFT);
    }

    /// Parse from a handshake payload.
    pub fn parse(b: &[u8]) -> Result<ConnParams, TpduError> {
        if b.len() != PARAMS_LEN {
            return Err(TpduError::Params("payload must be exactly 48 bytes"));
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| (u64::from(u32_at(i)) << 32) | u64::from(u32_at(i + 4));
        let p = ConnParams {
            window: u32_at(0),
            tpdu_size: u32_at(4),
            max_msg: u64_at(8),
            outstanding: u32_at(16),
            options: u32_at(20),
            rate: u64_at(24),
            min_rate: u64_at(32),
            rcv_buf: u32_at(40),
            isn: u32_at(44),
        };
        if p.options & !Self::KNOWN != 0 {
            return Err(TpduError::Params("undefined option bits"));
        }
        if p.flow_code() > 4 {
            return Err(TpduError::Params("unknown flow-control code"));
        }
        if p.window == 0 {
            return Err(TpduError::Params("window must be at least 1"));
        }
        if p.tpdu_size == 0 || p.tpdu_size as usize > MAX_PAYLOAD {
            return Err(TpduError::Params("TPDU size must be 1..=65503"));
        }
        if p.min_rate > p.rate && p.rate != 0 {
            return Err(TpduError::Params("minimum rate above target rate"));
        }
        Ok(p)
    }

    /// Write into `out[..PARAMS_LEN]`.
    ///
    /// # Panics
    /// If `out` is shorter than [`PARAMS_LEN`].
    pub fn emit(&self, out: &mut [u8]) {
        let out = &mut out[..PARAMS_LEN];
        out[0..4].copy_from_slice(&self.window.to_be_bytes());
        out[4..8].copy_from_slice(&self.tpdu_size.to_be_bytes());
        out[8..16].copy_from_slice(&self.max_msg.to_be_bytes());
        out[16..20].copy_from_slice(&self.outstanding.to_be_bytes());
        out[20..24].copy_from_slice(&self.options.to_be_bytes());
        out[24..32].copy_from_slice(&self.rate.to_be_bytes());
        out[32..40].copy_from_slice(&self.min_rate.to_be_bytes());
        out[40..44].copy_from_slice(&self.rcv_buf.to_be_bytes());
        out[44..48].copy_from_slice(&self.isn.to_be_bytes());
    }

    /// As an array.
    pub fn to_bytes(&self) -> [u8; PARAMS_LEN] {
        let mut b = [0u8; PARAMS_LEN];
        self.emit(&mut b);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A DATA TPDU: FIRST|LAST, window 64, cookie 0xC0FFEE01, seq 7, msg 3,
    // tsval 1000, aux 0, payload "hi".
    const DATA: [u8; 34] = [
        0x10, 0x03, 0x00, 0x40, 0xC0, 0xFF, 0xEE, 0x01, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x03, 0xE8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, b'h', b'i',
    ];

    fn data_header() -> Header {
        Header {
            flags: Flags::FIRST | Flags::LAST,
            window: 64,
            cookie: 0xC0FF_EE01,
            seq: 7,
            msg: 3,
            tsval: 1000,
            ..Header::new(TpduType::Data)
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&DATA[..]).unwrap();
        assert_eq!(p.version(), 1);
        assert_eq!(p.type_nibble(), 0);
        assert_eq!(p.window(), 64);
        assert_eq!(p.cookie(), 0xC0FF_EE01);
        assert_eq!(p.seq(), 7);
        assert_eq!(p.msg(), 3);
        assert_eq!(p.tsval(), 1000);
        assert_eq!(p.payload(), b"hi");
    }

    #[test]
    fn construct_and_parse() {
        let mut buf = [0u8; 34];
        let h = data_header();
        let mut p = Packet::new_unchecked(&mut buf[..]);
        h.emit(&mut p);
        p.payload_mut().copy_from_slice(b"hi");
        assert_eq!(buf, DATA);
        let (parsed, payload) = Header::parse_bytes(&DATA).unwrap();
        assert_eq!(parsed, h);
        assert_eq!(payload, b"hi");
    }

    #[test]
    fn ack_carries_the_smart_pair() {
        let ack = Header {
            seq: 4,
            ack: 2,
            tsecr: 99,
            ..Header::new(TpduType::Ack)
        };
        let b = ack.to_bytes();
        assert_eq!(b[0], 0x11);
        assert_eq!(&b[8..16], &[0, 0, 0, 4, 0, 0, 0, 2]);
        let (h, _) = Header::parse_bytes(&b).unwrap();
        assert_eq!((h.ack, h.seq, h.tsecr), (2, 4, 99));
    }

    #[test]
    fn first_octet_avoids_wireshark_heuristics() {
        for ty in 0..8u8 {
            let first = (VERSION << 4) | ty;
            assert!(first >> 4 != 4 && first >> 4 != 6 && first != 0 && first != 0xAA);
        }
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            Header::parse_bytes(&DATA[..31]),
            Err(TpduError::Truncated(31))
        );
        let mut b = DATA;
        b[0] = 0x20;
        assert_eq!(Header::parse_bytes(&b), Err(TpduError::Version(2)));
        b[0] = 0x1F;
        assert_eq!(Header::parse_bytes(&b), Err(TpduError::Type(15)));
        b[0] = 0x10;
        b[1] = 0x80;
        assert_eq!(Header::parse_bytes(&b), Err(TpduError::Flags(0x80)));
        let mut ack = Header::new(TpduType::Ack).to_bytes().to_vec();
        ack.push(0);
        assert_eq!(
            Header::parse_bytes(&ack),
            Err(TpduError::UnexpectedPayload(TpduType::Ack, 1))
        );
        let long = vec![0x10u8; MAX_TPDU_LEN + 1];
        assert_eq!(
            Header::parse_bytes(&long),
            Err(TpduError::TooLong(MAX_TPDU_LEN + 1))
        );
    }

    #[test]
    fn params_round_trip_and_validate() {
        let mut p = ConnParams {
            window: 64,
            tpdu_size: 4096,
            max_msg: u64::MAX,
            outstanding: 16,
            options: ConnParams::OPT_ERROR_CONTROL,
            rate: 100_000_000,
            min_rate: 10_000_000,
            rcv_buf: 1 << 20,
            isn: 12345,
        };
        p.set_flow_code(2);
        assert_eq!(p.flow_code(), 2);
        let b = p.to_bytes();
        assert_eq!(ConnParams::parse(&b), Ok(p));
        assert!(ConnParams::parse(&b[..47]).is_err());
        let mut bad = p;
        bad.window = 0;
        assert!(ConnParams::parse(&bad.to_bytes()).is_err());
        let mut bad = p;
        bad.options |= 0x8000;
        assert!(ConnParams::parse(&bad.to_bytes()).is_err());
        let mut bad = p;
        bad.min_rate = bad.rate + 1;
        assert!(ConnParams::parse(&bad.to_bytes()).is_err());
    }
}
