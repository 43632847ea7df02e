//! The cause IE (0x08): where a call was cleared and why (specs.md §4.4, Q.2931 §4.5.15,
//! Q.2610).
//!
//! ```text
//! octet 5   1 | spare 000 | location (4)
//! octet 6   1 | cause value (7)
//! octet 7.. diagnostics (depends on the cause value)
//! ```
//!
//! Wireshark 4.0 defect (specs.md §6.3, 2): its loop over the diagnostics of cause 37
//! reads one octet past the IE, so a message that ends with cause 37 and diagnostics
//! (the RELEASE COMPLETE of specs.md §4.5) shows as "Malformed". The encoding is right.

use core::fmt;

use super::{ext_last, from_body, open_enum, IeContent, IeId, IeProblem, Reader};

open_enum! {
    /// Where the cause was generated (octet 5, low nibble).
    pub enum Location: 4 {
        /// The user.
        User = 0 => "user",
        /// Private network serving the local user.
        PrivateLocal = 1 => "private network serving the local user",
        /// Public network serving the local user.
        PublicLocal = 2 => "public network serving the local user",
        /// Transit network.
        Transit = 3 => "transit network",
        /// Public network serving the remote user.
        PublicRemote = 4 => "public network serving the remote user",
        /// Private network serving the remote user.
        PrivateRemote = 5 => "private network serving the remote user",
        /// International network.
        International = 7 => "international network",
        /// Network beyond the interworking point.
        BeyondInterworking = 10 => "network beyond interworking point",
    }
}

open_enum! {
    /// Cause values (octet 6 less its extension bit; specs.md §4.4 table, Q.2610).
    pub enum CauseValue: 7 {
        /// 1.
        UnallocatedNumber = 1 => "unallocated (unassigned) number",
        /// 3.
        NoRouteToDestination = 3 => "no route to destination",
        /// 16.
        NormalCallClearing = 16 => "normal call clearing",
        /// 17.
        UserBusy = 17 => "user busy",
        /// 18.
        NoUserResponding = 18 => "no user responding",
        /// 21: diagnostics carry the rejection reason.
        CallRejected = 21 => "call rejected",
        /// 22.
        NumberChanged = 22 => "number changed",
        /// 27.
        DestinationOutOfOrder = 27 => "destination out of order",
        /// 28.
        InvalidNumberFormat = 28 => "invalid number format (address incomplete)",
        /// 30.
        ResponseToStatusEnquiry = 30 => "response to STATUS ENQUIRY",
        /// 31.
        NormalUnspecified = 31 => "normal, unspecified",
        /// 35.
        VpciVciUnavailable = 35 => "requested VPCI/VCI not available",
        /// 36.
        VpciVciAssignmentFailure = 36 => "VPCI/VCI assignment failure",
        /// 37: diagnostics carry the traffic descriptor subfield identifiers.
        UserCellRateUnavailable = 37 => "user cell rate not available",
        /// 38.
        NetworkOutOfOrder = 38 => "network out of order",
        /// 41.
        TemporaryFailure = 41 => "temporary failure",
        /// 43.
        AccessInfoDiscarded = 43 => "access information discarded",
        /// 45.
        NoVpciVciAvailable = 45 => "no VPCI/VCI available",
        /// 47.
        ResourcesUnavailable = 47 => "resources unavailable, unspecified",
        /// 49.
        QosUnavailable = 49 => "quality of service unavailable",
        /// 57.
        BearerCapNotAuthorized = 57 => "bearer capability not authorized",
        /// 58.
        BearerCapNotAvailable = 58 => "bearer capability not presently available",
        /// 63.
        ServiceUnavailable = 63 => "service or option not available, unspecified",
        /// 65.
        BearerCapNotImplemented = 65 => "bearer capability not implemented",
        /// 73.
        UnsupportedTrafficParams = 73 => "unsupported combination of traffic parameters",
        /// 78.
        AalParamsUnsupported = 78 => "AAL parameters cannot be supported",
        /// 81.
        InvalidCallRef = 81 => "invalid call reference value",
        /// 82: diagnostics may carry the connection identifier.
        ChannelDoesNotExist = 82 => "identified channel does not exist",
        /// 88.
        IncompatibleDestination = 88 => "incompatible destination",
        /// 89.
        InvalidEndpointRef = 89 => "invalid endpoint reference",
        /// 91.
        InvalidTransitNetwork = 91 => "invalid transit network selection",
        /// 92.
        TooManyAddParty = 92 => "too many pending add party requests",
        /// 96: diagnostics carry the missing IE identifiers.
        MandatoryIeMissing = 96 => "mandatory information element is missing",
        /// 97.
        MessageTypeNonExistent = 97 => "message type non-existent or not implemented",
        /// 99: diagnostics carry the IE identifiers.
        IeNonExistent = 99 => "information element non-existent or not implemented",
        /// 100: diagnostics carry the IE identifiers.
        InvalidIeContents = 100 => "invalid information element contents",
        /// 101.
        MessageIncompatibleWithState = 101 => "message not compatible with call state",
        /// 102: diagnostics carry the timer number as 3 IA5 digits.
        RecoveryOnTimerExpiry = 102 => "recovery on timer expiry",
        /// 104.
        IncorrectMessageLength = 104 => "incorrect message length",
        /// 111.
        ProtocolError = 111 => "protocol error, unspecified",
    }
}

/// The cause IE.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cause {
    /// Where the cause was generated.
    pub location: Location,
    /// Why.
    pub value: CauseValue,
    /// Diagnostics, as the cause value defines them (raw octets).
    pub diagnostics: Vec<u8>,
    /// The crankback IE (0xE1) that travels beside this cause in a RELEASE or
    /// RELEASE COMPLETE between natm switches (issue 33): not part of the cause IE's
    /// contents, emitted and read by [`super::Message::with_cause`] and
    /// [`super::Message::cause_with_crankback`].
    pub crankback: Option<super::Crankback>,
}

impl Cause {
    /// A cause without diagnostics.
    pub fn new(location: Location, value: CauseValue) -> Cause {
        Cause {
            location,
            value,
            diagnostics: Vec::new(),
            crankback: None,
        }
    }

    /// Cause 102, recovery on timer expiry, with the timer's number as diagnostics
    /// (e.g. 303 → `"303"` in IA5).
    pub fn timer_expiry(location: Location, timer: u16) -> Cause {
        Cause {
            location,
            value: CauseValue::RecoveryOnTimerExpiry,
            diagnostics: format!("{:03}", timer % 1000).into_bytes(),
            crankback: None,
        }
    }

    /// Cause 37, user cell rate not available, naming the traffic descriptor subfields
    /// (e.g. [`super::TrafficDescriptor::FWD_PCR_01`]) that could not be granted.
    pub fn cell_rate_unavailable(location: Location, subfields: &[u8]) -> Cause {
        Cause {
            location,
            value: CauseValue::UserCellRateUnavailable,
            diagnostics: subfields.to_vec(),
            crankback: None,
        }
    }
}

/// Where and why the network refused a call (issue 33): natm's switches put it in the
/// cause IE's diagnostics, after the octets Q.2931 defines for the cause value (for
/// cause 37, the traffic descriptor subfields), as the IA5 marker `natm:` and three
/// fields separated by 0x1F (unit separator): the switch, the link and the reason.
/// Q.2610's subfield identifiers are all 0x80 and above, so the marker cannot be one
/// of them. A natm switch sends it only towards natm peers (see [`Cause::plain`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NetworkRefusal {
    /// The switch that refused (its configured name).
    pub switch: String,
    /// The link (port) the call could not take, by name.
    pub link: String,
    /// What did not fit, with the figures: "200 Mbit/s asked (at least 150), 100 free".
    pub reason: String,
}

impl NetworkRefusal {
    const MARKER: &'static [u8] = b"natm:";
    const SEPARATOR: u8 = 0x1F;
    /// The most octets the three fields take together; longer reasons are cut.
    pub const MAX_LEN: usize = 240;
}

impl fmt::Display for NetworkRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "refused by the network at switch {}, link {}: {}",
            self.switch, self.link, self.reason
        )
    }
}

impl Cause {
    /// This cause with `r` after its standard diagnostics (replacing any earlier
    /// one). Fields are cut to [`NetworkRefusal::MAX_LEN`] octets together, at a
    /// character boundary, and lose any separator octet.
    pub fn with_refusal(mut self, r: &NetworkRefusal) -> Cause {
        self = self.plain();
        self.diagnostics.extend_from_slice(NetworkRefusal::MARKER);
        let mut left = NetworkRefusal::MAX_LEN;
        for (i, field) in [&r.switch, &r.link, &r.reason].into_iter().enumerate() {
            if i > 0 {
                self.diagnostics.push(NetworkRefusal::SEPARATOR);
            }
            for ch in field
                .chars()
                .filter(|&c| c != char::from(NetworkRefusal::SEPARATOR))
            {
                if ch.len_utf8() > left {
                    break;
                }
                left -= ch.len_utf8();
                let mut buf = [0; 4];
                self.diagnostics
                    .extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
            }
        }
        self
    }

    /// The network's refusal this cause carries, if a natm switch put one in.
    pub fn refusal(&self) -> Option<NetworkRefusal> {
        let at = self
            .diagnostics
            .windows(NetworkRefusal::MARKER.len())
            .position(|w| w == NetworkRefusal::MARKER)?;
        let rest = &self.diagnostics[at + NetworkRefusal::MARKER.len()..];
        let mut fields = rest
            .split(|&b| b == NetworkRefusal::SEPARATOR)
            .map(|f| String::from_utf8_lossy(f).into_owned());
        let (switch, link, reason) = (fields.next()?, fields.next()?, fields.next()?);
        Some(NetworkRefusal {
            switch,
            link,
            reason,
        })
    }

    /// This cause with only what Q.2931 defines: no [`NetworkRefusal`] (for a peer
    /// that is not natm, such as Linux's atmsigd).
    pub fn plain(mut self) -> Cause {
        if let Some(at) = self
            .diagnostics
            .windows(NetworkRefusal::MARKER.len())
            .position(|w| w == NetworkRefusal::MARKER)
        {
            self.diagnostics.truncate(at);
        }
        self
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cause {} ({}), {}",
            self.value.raw(),
            self.value,
            self.location
        )?;
        let plain = self.clone().plain();
        if !plain.diagnostics.is_empty() {
            f.write_str(", diagnostics")?;
            for b in &plain.diagnostics {
                write!(f, " {b:02X}")?;
            }
        }
        if let Some(r) = self.refusal() {
            write!(f, ", {r}")?;
        }
        Ok(())
    }
}

impl IeContent for Cause {
    const ID: IeId = IeId::Cause;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let o5 = ext_last("location octet extension bit", r.u8("location")?)?;
        let o6 = ext_last("cause value extension bit", r.u8("cause value")?)?;
        Ok(Cause {
            location: Location::from_raw(o5 & 0x0F),
            value: CauseValue::from_raw(o6 & 0x7F),
            diagnostics: r.rest().to_vec(),
            crankback: None,
        })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        let loc = self.location.checked("location")?;
        let value = self.value.checked("cause value")?;
        out.extend_from_slice(&[0x80 | loc, 0x80 | value]);
        out.extend_from_slice(&self.diagnostics);
        Ok(())
    }

    from_body!(Cause);
}
