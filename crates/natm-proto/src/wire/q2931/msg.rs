//! The message header and the whole message (specs.md §4.1, §4.2).
//!
//! ```text
//! octet 1   protocol discriminator 0x09
//! octet 2   0000 | call reference length (3)
//! octet 3   flag | call reference value bits 23-17
//! octets 4-5 call reference value bits 16-1
//! octet 6   message type
//! octet 7   1 | spare (2) | flag | spare (2) | action indicator (2)
//! octets 8-9 message length: octets after octet 9
//! ```

use core::fmt;
use core::ops::Range;

use super::{
    fit, open_enum, Cause, Ie, IeContent, IeError, IeId, IeProblem, Q2931Error, RawIes,
    CALL_REF_LEN, HEADER_LEN, MAX_LEN, PROTOCOL_DISCRIMINATOR,
};

mod field {
    use core::ops::Range;
    pub(super) const PD: usize = 0;
    pub(super) const CR_LEN: usize = 1;
    pub(super) const CR: Range<usize> = 2..5;
    pub(super) const TYPE: usize = 5;
    pub(super) const TYPE_EXT: usize = 6;
    pub(super) const LENGTH: Range<usize> = 7..9;
}

/// A call reference: a 23-bit value and the flag that says which side allocated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CallRef {
    /// The value, 0..=0x7FFFFF.
    pub value: u32,
    /// false: sent by the side that allocated the value; true: sent to it (so the
    /// called side and the network answer with the flag set).
    pub flag: bool,
}

impl CallRef {
    /// Largest value (23 bits); also the "dummy" value of libunimsg.
    pub const MAX: u32 = 0x7F_FFFF;
    /// The global call reference (RESTART, RESTART ACKNOWLEDGE).
    pub const GLOBAL: CallRef = CallRef {
        value: 0,
        flag: false,
    };

    /// A call reference sent by the side that allocated `value`.
    pub const fn new(value: u32) -> CallRef {
        CallRef { value, flag: false }
    }

    /// The call reference the other side uses for the same call (flag toggled).
    #[must_use]
    pub const fn reply(self) -> CallRef {
        CallRef {
            value: self.value,
            flag: !self.flag,
        }
    }

    /// Whether this is the global call reference (value 0).
    pub const fn is_global(self) -> bool {
        self.value == 0
    }
}

impl fmt::Display for CallRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.value, u8::from(self.flag))
    }
}

open_enum! {
    /// Message types (specs.md §4.2).
    pub enum MessageType: 8 {
        /// 0x01 (optional in UNI 3.1).
        Alerting = 0x01 => "ALERTING",
        /// 0x02.
        CallProceeding = 0x02 => "CALL PROCEEDING",
        /// 0x05.
        Setup = 0x05 => "SETUP",
        /// 0x07.
        Connect = 0x07 => "CONNECT",
        /// 0x0F.
        ConnectAck = 0x0F => "CONNECT ACKNOWLEDGE",
        /// 0x46.
        Restart = 0x46 => "RESTART",
        /// 0x4D.
        Release = 0x4D => "RELEASE",
        /// 0x4E.
        RestartAck = 0x4E => "RESTART ACKNOWLEDGE",
        /// 0x5A.
        ReleaseComplete = 0x5A => "RELEASE COMPLETE",
        /// 0x6E (optional in UNI 3.1).
        Notify = 0x6E => "NOTIFY",
        /// 0x75.
        StatusEnquiry = 0x75 => "STATUS ENQUIRY",
        /// 0x7D.
        Status = 0x7D => "STATUS",
        /// 0x80.
        AddParty = 0x80 => "ADD PARTY",
        /// 0x81.
        AddPartyAck = 0x81 => "ADD PARTY ACKNOWLEDGE",
        /// 0x82.
        AddPartyReject = 0x82 => "ADD PARTY REJECT",
        /// 0x83.
        DropParty = 0x83 => "DROP PARTY",
        /// 0x84.
        DropPartyAck = 0x84 => "DROP PARTY ACKNOWLEDGE",
        /// 0x85 (UNI 4.0).
        PartyAlerting = 0x85 => "PARTY ALERTING",
        /// 0x88 (Q.2963.1): ask to change an active call's traffic descriptor.
        ModifyRequest = 0x88 => "MODIFY REQUEST",
        /// 0x89 (Q.2963.1): the change is made.
        ModifyAck = 0x89 => "MODIFY ACKNOWLEDGE",
        /// 0x8A (Q.2963.1): the change is refused; the old traffic descriptor stays.
        ModifyReject = 0x8A => "MODIFY REJECT",
        /// 0x8B (Q.2963.1): the new traffic descriptor is in force at the other end
        /// (sent only when MODIFY ACKNOWLEDGE asked for it; natm does not ask).
        ConnectionAvailable = 0x8B => "CONNECTION AVAILABLE",
    }
}

open_enum! {
    /// Message action indicator (octet 7, bits 2-1).
    pub enum MsgAction: 2 {
        /// 0.
        ClearCall = 0 => "clear call",
        /// 1.
        DiscardIgnore = 1 => "discard and ignore",
        /// 2.
        DiscardReport = 2 => "discard and report status",
    }
}

/// The message type extension octet (octet 7). The default is 0x80: regular error
/// handling. (Wireshark 4.0 prints this flag's meaning inverted: cosmetic, specs.md
/// §4.1.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MsgHandling {
    /// Flag (bit 5): follow `action` instead of the regular error procedures.
    pub explicit: bool,
    /// What a receiver that does not recognise the message type does.
    pub action: MsgAction,
}

impl Default for MsgHandling {
    fn default() -> Self {
        MsgHandling {
            explicit: false,
            action: MsgAction::ClearCall,
        }
    }
}

impl MsgHandling {
    /// The handling of an octet 7 (extension and spare bits ignored).
    pub const fn from_octet(octet: u8) -> MsgHandling {
        MsgHandling {
            explicit: octet & 0x10 != 0,
            action: MsgAction::from_raw(octet & 0x03),
        }
    }

    /// Octet 7.
    pub fn to_octet(self) -> Result<u8, IeProblem> {
        Ok(
            0x80 | u8::from(self.explicit) << 4
                | self.action.checked("message action indicator")?,
        )
    }
}

/// A read/write view of a message header over a buffer (smoltcp style).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checks; accessors panic on one shorter than 9 octets.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking it holds a header.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Q2931Error> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer holds the 9-octet header; after this no accessor panics.
    pub fn check_len(&self) -> Result<(), Q2931Error> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            Err(Q2931Error::Truncated { len })
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self, r: Range<usize>) -> &[u8] {
        &self.buffer.as_ref()[r]
    }

    /// Octet 1: the protocol discriminator.
    pub fn protocol_discriminator(&self) -> u8 {
        self.buffer.as_ref()[field::PD]
    }

    /// Octet 2: the call reference length octet.
    pub fn call_ref_len(&self) -> u8 {
        self.buffer.as_ref()[field::CR_LEN]
    }

    /// Octets 3-5: the call reference.
    pub fn call_ref(&self) -> CallRef {
        let b = self.b(field::CR);
        let v = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        CallRef {
            value: v & CallRef::MAX,
            flag: v & 0x80_0000 != 0,
        }
    }

    /// Octet 6: the message type.
    pub fn message_type(&self) -> MessageType {
        MessageType::from_raw(self.buffer.as_ref()[field::TYPE])
    }

    /// Octet 7: the message type extension.
    pub fn handling(&self) -> MsgHandling {
        MsgHandling::from_octet(self.buffer.as_ref()[field::TYPE_EXT])
    }

    /// Octets 8-9: the message length field.
    pub fn message_length(&self) -> u16 {
        let b = self.b(field::LENGTH);
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The octets after the header (the IEs).
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets octets 1-2: protocol discriminator 0x09 and call reference length 3.
    pub fn set_protocol(&mut self) {
        let b = self.buffer.as_mut();
        b[field::PD] = PROTOCOL_DISCRIMINATOR;
        b[field::CR_LEN] = CALL_REF_LEN;
    }

    /// Sets the call reference; the value is masked to 23 bits.
    pub fn set_call_ref(&mut self, cr: CallRef) {
        let v = cr.value & CallRef::MAX | u32::from(cr.flag) << 23;
        self.buffer.as_mut()[field::CR].copy_from_slice(&v.to_be_bytes()[1..]);
    }

    /// Sets the message type.
    pub fn set_message_type(&mut self, kind: MessageType) {
        self.buffer.as_mut()[field::TYPE] = kind.raw();
    }

    /// Sets the message type extension octet.
    pub fn set_type_extension(&mut self, octet: u8) {
        self.buffer.as_mut()[field::TYPE_EXT] = octet;
    }

    /// Sets the message length field.
    pub fn set_message_length(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }
}

/// A validated message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeaderRepr {
    /// Call reference.
    pub call_ref: CallRef,
    /// Message type.
    pub kind: MessageType,
    /// Message type extension.
    pub handling: MsgHandling,
    /// Octets of IEs after the header.
    pub length: u16,
}

impl HeaderRepr {
    /// Validates a header, in this order: length, protocol discriminator, call
    /// reference length, and the message length against the octets that follow.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<HeaderRepr, Q2931Error> {
        packet.check_len()?;
        let pd = packet.protocol_discriminator();
        if pd != PROTOCOL_DISCRIMINATOR {
            return Err(Q2931Error::ProtocolDiscriminator { pd });
        }
        if packet.call_ref_len() != CALL_REF_LEN {
            return Err(Q2931Error::CallRefLength {
                len: packet.call_ref_len(),
            });
        }
        let field = packet.message_length();
        let actual = packet.body().len();
        if usize::from(field) != actual {
            return Err(Q2931Error::MessageLength { field, actual });
        }
        Ok(HeaderRepr {
            call_ref: packet.call_ref(),
            kind: packet.message_type(),
            handling: packet.handling(),
            length: field,
        })
    }

    /// Octets of the header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first 9 octets of `packet`; fails if the call
    /// reference or the action indicator does not fit its field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), Q2931Error> {
        fit(
            "call reference value",
            u64::from(self.call_ref.value),
            u64::from(CallRef::MAX),
        )
        .map_err(Q2931Error::Header)?;
        let octet7 = self.handling.to_octet().map_err(Q2931Error::Header)?;
        packet.set_protocol();
        packet.set_call_ref(self.call_ref);
        packet.set_message_type(self.kind);
        packet.set_type_extension(octet7);
        packet.set_message_length(self.length);
        Ok(())
    }
}

/// A Q.2931 message: header fields and IEs in the order they are sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Message {
    /// Call reference.
    pub call_ref: CallRef,
    /// Message type.
    pub kind: MessageType,
    /// Message type extension (regular error handling by default).
    pub handling: MsgHandling,
    /// The IEs, in order.
    pub ies: Vec<Ie>,
}

/// UNI 3.1 order of the IEs in a message (the message tables; SETUP's is the order of
/// specs.md §4.5); IEs without a place go last, in the order given.
fn uni_rank(id: u8) -> u8 {
    match IeId::from_raw(id) {
        IeId::Cause => 0,
        IeId::CallState => 1,
        IeId::Aal => 2,
        IeId::Traffic => 3,
        IeId::Bearer => 4,
        IeId::Bhli => 5,
        IeId::Repeat => 6,
        IeId::Blli => 7,
        IeId::CalledNumber => 8,
        IeId::CalledSubaddr => 9,
        IeId::CallingNumber => 10,
        IeId::CallingSubaddr => 11,
        IeId::ConnId => 12,
        IeId::Qos => 13,
        IeId::SendingComplete => 14,
        IeId::TransitNet => 15,
        IeId::Restart => 16,
        IeId::EndpointRef => 17,
        IeId::EndpointState => 18,
        _ => 19,
    }
}

impl Message {
    /// A message without IEs and with regular error handling.
    pub fn new(kind: MessageType, call_ref: CallRef) -> Message {
        Message {
            call_ref,
            kind,
            handling: MsgHandling::default(),
            ies: Vec::new(),
        }
    }

    /// The message with `ie` appended.
    #[must_use]
    pub fn with(mut self, ie: impl Into<Ie>) -> Message {
        self.ies.push(ie.into());
        self
    }

    /// Appends an IE.
    pub fn push(&mut self, ie: impl Into<Ie>) {
        self.ies.push(ie.into());
    }

    /// The first IE of type `T`.
    pub fn find<T: IeContent>(&self) -> Option<&T> {
        self.ies.iter().find_map(|ie| T::from_body(&ie.body))
    }

    /// Every IE of type `T` (e.g. the B-LLIs after a repeat indicator).
    pub fn find_all<'a, T: IeContent + 'a>(&'a self) -> impl Iterator<Item = &'a T> + 'a {
        self.ies.iter().filter_map(|ie| T::from_body(&ie.body))
    }

    /// The cause, if the message carries one.
    pub fn cause(&self) -> Option<&Cause> {
        self.find::<Cause>()
    }

    /// Appends `cause`, and after it the crankback IE it carries, if any (issue 33).
    #[must_use]
    pub fn with_cause(mut self, mut cause: Cause) -> Message {
        let crankback = cause.crankback.take();
        self.ies.push(cause.into());
        if let Some(cb) = crankback {
            self.ies.push(cb.into());
        }
        self
    }

    /// The cause with the message's crankback IE in it, if it carries one.
    pub fn cause_with_crankback(&self) -> Option<Cause> {
        let mut c = self.cause()?.clone();
        c.crankback = self.find::<super::Crankback>().copied();
        Some(c)
    }

    /// Puts the IEs into UNI 3.1 message-table order (stable; unknown IEs last), which
    /// also keeps the AAL and traffic descriptor IEs off the end (specs.md §6.3).
    pub fn sort_ies(&mut self) {
        self.ies.sort_by_key(|ie| uni_rank(ie.id()));
    }

    /// Parses a whole message (an SSCOP SD payload), failing on the first bad IE.
    pub fn parse(bytes: &[u8]) -> Result<Message, Q2931Error> {
        let (msg, mut errors) = Self::parse_inner(bytes, true)?;
        match errors.pop() {
            Some(e) => Err(Q2931Error::Ie(e)),
            None => Ok(msg),
        }
    }

    /// Parses a message but leaves out IEs whose contents are bad, listing them with
    /// their instruction octets so the caller can apply Q.2931 §5.6.7-5.6.8 (mandatory
    /// IE missing or bad: cause 96/100; otherwise follow the IE's action indicator).
    /// Header and framing errors still fail.
    pub fn parse_lenient(bytes: &[u8]) -> Result<(Message, Vec<IeError>), Q2931Error> {
        Self::parse_inner(bytes, false)
    }

    fn parse_inner(bytes: &[u8], strict: bool) -> Result<(Message, Vec<IeError>), Q2931Error> {
        let packet = Packet::new_checked(bytes)?;
        let header = HeaderRepr::parse(&packet)?;
        let mut msg = Message {
            call_ref: header.call_ref,
            kind: header.kind,
            handling: header.handling,
            ies: Vec::new(),
        };
        let mut errors = Vec::new();
        for raw in RawIes::new(packet.body(), HEADER_LEN) {
            match Ie::parse(&raw?) {
                Ok(ie) => msg.ies.push(ie),
                Err(e) => {
                    errors.push(e);
                    if strict {
                        break;
                    }
                }
            }
        }
        Ok((msg, errors))
    }

    /// Appends the message to `out`. On error `out` is left as it was.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), Q2931Error> {
        let start = out.len();
        out.resize(start + HEADER_LEN, 0);
        let result = self.emit_body(out, start);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn emit_body(&self, out: &mut Vec<u8>, start: usize) -> Result<(), Q2931Error> {
        for ie in &self.ies {
            ie.emit(out)?;
        }
        let len = out.len() - start - HEADER_LEN;
        let length = u16::try_from(len)
            .ok()
            .filter(|_| len <= MAX_LEN)
            .ok_or(Q2931Error::BodyTooLong { len })?;
        let header = HeaderRepr {
            call_ref: self.call_ref,
            kind: self.kind,
            handling: self.handling,
            length,
        };
        header.emit(&mut Packet::new_unchecked(
            &mut out[start..start + HEADER_LEN],
        ))
    }

    /// The message as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, Q2931Error> {
        let mut out = Vec::new();
        self.emit(&mut out)?;
        Ok(out)
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (call ref {})", self.kind, self.call_ref)?;
        for (i, ie) in self.ies.iter().enumerate() {
            f.write_str(if i == 0 { ": " } else { ", " })?;
            match &ie.body {
                super::IeBody::Cause(c) => write!(f, "{c}")?,
                _ => write!(f, "{ie}")?,
            }
        }
        Ok(())
    }
}
