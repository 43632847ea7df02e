//! What a call asks for and what its answer grants, and how both map onto Q.2931 IEs
//! (specs.md §4.4–4.5).
//!
//! Decisions (docs/sigd.md, "Signalling core"):
//! - The SAP travels in the B-HLI IE as user-specific information (type 1, at most 8
//!   octets): it names the service at the called host as a port names one in IP, and
//!   the called party number stays the host's address alone.
//! - The QoS maps onto the ATM traffic descriptor as the *target*: forward = the
//!   caller's `tx`, backward = its `rx`; the peak cell rate CLP=0+1 is `pcr`, else
//!   `max_pcr`, else `min_pcr`, in cells on the wire with each frame's overhead
//!   (`Qos::wire_cells`, what a natm switch polices; `max` becomes the link cell
//!   rate); VBR adds SCR and
//!   MBS; UBR, ABR and `any` set the best-effort indicator. UNI 3.1 has no IE for the
//!   *minimum* (UNI 4.0's minimum acceptable traffic descriptor is not in the subset),
//!   so the whole QoS, minimum included, also travels as text in `NatmParams.qos`,
//!   which natm peers read first; a foreign peer sees a valid UNI 3.1 contract.

use thiserror::Error;

use crate::wire::q2931::{
    AalParams, BearerCapability, Bhli, BhliType, Blli, CalledNumber, CallingNumber, CellRates,
    ConnectionId, Dtl, Ie, IeAction, IeContent as _, Message, NatmParams, PartyAddress, QosParams,
    TrafficDescriptor, TrafficType, TypeOfNumber, UserPlane,
};
use crate::wire::qos::{
    wire_cells, Aal, Qos, Rate, TrafficClass, TrafficParams, TransportKind, TransportParams,
};

/// AAL5 CPCS-SDU size signalled when the QoS does not set `max_sdu` (specs.md §4.5).
pub const DEFAULT_AAL5_SDU: u16 = 9188;

/// A service access point: which service at the called host, carried in the B-HLI IE
/// or, for a SETUP without one, the B-LLI IE.
///
/// natm's own SAPs are B-HLI *user-specific* information (1 to 8 octets, written as
/// text: `echo`). A *vendor-specific application identifier* (an OUI and a 32-bit
/// application id) is what some foreign programs use instead — Linux's `ttcp_atm`
/// sends FORE's `00-60-d7` with 0x01000003 — written `@0060d7.01000003`, so a natm
/// program can answer or call them. A service named only by its lower layers is a
/// B-LLI SAP: Classical IP over ATM (RFC 2225; Linux's `atmarpd`) calls with layer 2
/// = ISO 8802/2 LLC and no B-HLI, written `blli.llc`; any other B-LLI is written
/// `blli.` and its IE's octets in hex (`blli.cc` is `blli.llc`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sap {
    kind: SapKind,
    /// The B-HLI information octets, or the B-LLI IE's content.
    info: Vec<u8>,
}

/// Which IE carries a [`Sap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum SapKind {
    /// B-HLI, of this type.
    Hli(BhliType),
    /// B-LLI.
    Lli,
}

/// The text of a B-LLI SAP starts so.
const BLLI_PREFIX: &str = "blli.";

/// A SAP that does not fit the B-HLI IE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error(
    "SAP of {len} octets: a SAP has 1 to {max} octets (B-HLI user information), \
     or is @OUI.APPID in hex (a vendor-specific application, e.g. @0060d7.01000003)",
    max = Bhli::MAX_INFO
)]
pub struct SapError {
    /// Octets given.
    pub len: usize,
}

impl Sap {
    /// A user-specific SAP of 1 to 8 octets.
    pub fn new(bytes: &[u8]) -> Result<Sap, SapError> {
        if bytes.is_empty() || bytes.len() > Bhli::MAX_INFO {
            Err(SapError { len: bytes.len() })
        } else {
            Ok(Sap {
                kind: SapKind::Hli(BhliType::UserSpecific),
                info: bytes.to_vec(),
            })
        }
    }

    /// A vendor-specific application: `oui` and its application id.
    pub fn vendor(oui: [u8; 3], app: u32) -> Sap {
        let mut info = oui.to_vec();
        info.extend_from_slice(&app.to_be_bytes());
        Sap {
            kind: SapKind::Hli(BhliType::VendorSpecific),
            info,
        }
    }

    /// The B-LLI SAP of Classical IP over ATM: layer 2 = ISO 8802/2 LLC, nothing else
    /// (`blli.llc`).
    pub fn llc() -> Sap {
        Sap::of_blli(&Blli::llc())
    }

    /// Whether the SAP is carried in the B-LLI IE.
    pub fn is_blli(&self) -> bool {
        self.kind == SapKind::Lli
    }

    fn of_blli(b: &Blli) -> Sap {
        let mut info = Vec::new();
        // Emitting a parsed B-LLI cannot fail: its layer 2 protocol fits 5 bits.
        let _ = b.emit_content(&mut info);
        Sap {
            kind: SapKind::Lli,
            info,
        }
    }

    /// The B-LLI SAP of a text after [`BLLI_PREFIX`]: `llc`, or 1 to
    /// 2 · [`Bhli::MAX_INFO`] octets of IE content in hex.
    fn parse_blli(rest: &str, err: SapError) -> Result<Sap, SapError> {
        if rest == "llc" {
            return Ok(Sap::llc());
        }
        if rest.is_empty() || !rest.len().is_multiple_of(2) || rest.len() > 4 * Bhli::MAX_INFO {
            return Err(err);
        }
        let octets = (0..rest.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(rest.get(i..i + 2).ok_or(err)?, 16).map_err(|_| err))
            .collect::<Result<Vec<u8>, SapError>>()?;
        let blli = Blli::parse_content(&octets).map_err(|_| err)?;
        Ok(Sap::of_blli(&blli))
    }

    /// A SAP from its text: `@OUI.APPID` (6 and 8 hex digits) for a vendor-specific
    /// application, anything else the octets of a user-specific one.
    pub fn parse(text: &str) -> Result<Sap, SapError> {
        let err = SapError { len: text.len() };
        if let Some(rest) = text.strip_prefix(BLLI_PREFIX) {
            return Sap::parse_blli(rest, err);
        }
        let Some(v) = text.strip_prefix('@') else {
            return Sap::new(text.as_bytes());
        };
        let (oui, app) = v.split_once('.').ok_or(err)?;
        let hex = |s: &str, n: usize| {
            (s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(s, 16).ok())
                .flatten()
        };
        let (oui, app) = (hex(oui, 6).ok_or(err)?, hex(app, 8).ok_or(err)?);
        let o = oui.to_be_bytes();
        Ok(Sap::vendor([o[1], o[2], o[3]], app))
    }

    /// The B-HLI information octets (a B-LLI SAP: the B-LLI IE's content).
    pub fn as_bytes(&self) -> &[u8] {
        &self.info
    }

    /// The IE that carries the SAP in a SETUP.
    pub(crate) fn to_ie(&self) -> Ie {
        match self.kind {
            SapKind::Hli(kind) => Ie::from(Bhli {
                kind,
                info: self.info.clone(),
            }),
            SapKind::Lli => Ie::from(Blli::parse_content(&self.info).unwrap_or_default()),
        }
    }

    pub(crate) fn from_bhli(b: &Bhli) -> Option<Sap> {
        match b.kind {
            BhliType::UserSpecific => Sap::new(&b.info).ok(),
            BhliType::VendorSpecific if b.info.len() == 7 => Some(Sap {
                kind: SapKind::Hli(b.kind),
                info: b.info.clone(),
            }),
            _ => None,
        }
    }

    /// The SAP of a SETUP: its B-HLI, or else its first B-LLI (a SETUP may offer
    /// several after a repeat indicator; the first is the caller's preference).
    pub(crate) fn of_setup(msg: &Message) -> Option<Sap> {
        match msg.find::<Bhli>() {
            Some(b) => Sap::from_bhli(b),
            None => msg.find::<Blli>().map(Sap::of_blli),
        }
    }
}

/// Why text is not a SAP as natm's API and tools write one: 1 to 8 ASCII letters,
/// digits, `-` or `_`, or `@OUI.APPID` in hex ([`Sap::from_text`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SapTextError {
    /// Nothing after the colon (or nothing at all).
    #[error("empty SAP: a SAP is 1 to 8 letters, digits, - or _ (e.g. echo)")]
    Empty,
    /// More than 8 characters.
    #[error(
        "SAP of {0} characters: a SAP is 1 to 8 letters, digits, - or _ \
         (B-HLI user information carries 8 octets)"
    )]
    TooLong(usize),
    /// A character outside ASCII letters, digits, `-` and `_`.
    #[error("SAP {sap:?}: {ch:?} is not allowed; a SAP is 1 to 8 ASCII letters, digits, - or _")]
    BadCharacter {
        /// The SAP given.
        sap: String,
        /// The first character not allowed.
        ch: char,
    },
    /// `@` not followed by 6 and 8 hex digits.
    #[error(
        "SAP {0:?}: a vendor application is @OUI.APPID, 6 and 8 hex digits (e.g. @0060d7.01000003)"
    )]
    BadVendor(String),
    /// `blli.` not followed by `llc` or B-LLI octets in hex.
    #[error(
        "SAP {0:?}: a B-LLI SAP is blli.llc (layer 2 LLC, Classical IP) or blli. and the \
         IE's octets in hex (e.g. blli.cc)"
    )]
    BadBlli(String),
}

impl Sap {
    /// A SAP as natm's API and tools take one: 1 to 8 ASCII letters, digits, `-` or
    /// `_` (`echo`), or `@OUI.APPID` in hex. Stricter than [`Sap::parse`], which takes
    /// any octets a foreign SETUP may carry.
    pub fn from_text(text: &str) -> Result<Sap, SapTextError> {
        if text.starts_with('@') {
            return Sap::parse(text).map_err(|_| SapTextError::BadVendor(text.to_owned()));
        }
        if text.starts_with(BLLI_PREFIX) {
            return Sap::parse(text).map_err(|_| SapTextError::BadBlli(text.to_owned()));
        }
        if text.is_empty() {
            return Err(SapTextError::Empty);
        }
        let chars = text.chars().count();
        if chars > Bhli::MAX_INFO {
            return Err(SapTextError::TooLong(chars));
        }
        if let Some(ch) = text
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Err(SapTextError::BadCharacter {
                sap: text.to_owned(),
                ch,
            });
        }
        // ASCII from here: as many octets as characters, 1 to 8.
        Sap::new(text.as_bytes()).map_err(|_| SapTextError::TooLong(chars))
    }

    /// The SAP of a listener's text, `SAP` or `address:SAP` (the SAP after the last
    /// colon), checked with [`Sap::from_text`].
    pub fn of_listener(text: &str) -> Result<Sap, SapTextError> {
        Sap::from_text(text.rsplit_once(':').map_or(text, |(_, sap)| sap))
    }

    /// Check the SAP of a called party's text, `address[:SAP]`. An address may hold
    /// colons itself (an AESA written `e164:hex`, an E.164 number with a
    /// subaddress), so what follows the last colon is a SAP unless the whole text is
    /// an address `is_address` accepts; then there is no SAP (`Ok(None)`).
    pub fn of_called(
        text: &str,
        is_address: impl FnOnce(&str) -> bool,
    ) -> Result<Option<Sap>, SapTextError> {
        match text.rsplit_once(':') {
            None => Ok(None),
            Some((_, sap)) => match Sap::from_text(sap) {
                Ok(s) => Ok(Some(s)),
                Err(_) if is_address(text) => Ok(None),
                Err(e) => Err(e),
            },
        }
    }
}

impl std::str::FromStr for Sap {
    type Err = SapTextError;
    /// [`Sap::from_text`].
    fn from_str(text: &str) -> Result<Sap, SapTextError> {
        Sap::from_text(text)
    }
}

/// The text form [`Sap::parse`] reads: a user-specific SAP's octets (lossy UTF-8),
/// `@OUI.APPID` for a vendor-specific one.
impl std::fmt::Display for Sap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kind == SapKind::Lli {
            if *self == Sap::llc() {
                return write!(f, "{BLLI_PREFIX}llc");
            }
            f.write_str(BLLI_PREFIX)?;
            return self.info.iter().try_for_each(|b| write!(f, "{b:02x}"));
        }
        if self.kind == SapKind::Hli(BhliType::VendorSpecific) {
            let i = &self.info;
            write!(f, "@{:02x}{:02x}{:02x}.", i[0], i[1], i[2])?;
            i[3..].iter().try_for_each(|b| write!(f, "{b:02x}"))
        } else {
            f.write_str(&String::from_utf8_lossy(&self.info))
        }
    }
}

/// What a SETUP asks for; also what an incoming SETUP offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallParams {
    /// The called party (an AESA or E.164 number).
    pub called: PartyAddress,
    /// The calling party, if it is to be shown.
    pub calling: Option<PartyAddress>,
    /// The service at the called host.
    pub sap: Option<Sap>,
    /// The QoS: target and minimum (see the module docs for the mapping).
    pub qos: Qos,
    /// natm's transport parameters, data endpoint and cookie (the capability that
    /// binds the data path to this call, seed 001 §4.2).
    pub natm: NatmParams,
    /// The VPCI/VCI, when the caller assigns it.
    pub conn_id: Option<ConnectionId>,
    /// A point-to-multipoint call (Q.2971): the bearer's user-plane connection
    /// configuration says so, and the SETUP names its first party (endpoint
    /// reference 0); further parties come with ADD PARTY on the call.
    pub multipoint: bool,
    /// The designated transit list a natm switch routes the call on (PNNI IE 0xD1,
    /// issue 33): only between switches that run routing; `None` elsewhere.
    pub dtl: Option<Dtl>,
}

/// What the called side grants in CONNECT; also what the caller learns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallAccept {
    /// The granted QoS (None: as offered).
    pub qos: Option<Qos>,
    /// natm's transport parameters, data endpoint and cookie of the called side.
    pub natm: NatmParams,
    /// The VPCI/VCI, if the called side assigns or confirms it.
    pub conn_id: Option<ConnectionId>,
}

/// A rate in cells/s on the wire, in frames of `frame` octets ([`wire_cells`]: what a
/// natm switch polices, issue 33); `max` is the link's.
fn cells(rate: Option<Rate>, link_cells: u32, frame: u32) -> Option<u32> {
    rate.map(|r| {
        r.cells_per_sec()
            .map_or(link_cells, |c| {
                u32::try_from(wire_cells(c, frame)).unwrap_or(u32::MAX)
            })
            .min(TrafficDescriptor::MAX_VALUE)
    })
}

fn direction(tp: &TrafficParams, link_cells: u32, frame: u32) -> CellRates {
    // A link faster than the 24-bit field (0xFF_FFFF cells/s, ~7.1 Gbit/s) offers
    // the largest rate the field holds; unclamped, a 10 Gbit/s link's default PCR
    // could not be encoded and every SETUP without a rate failed to go out.
    let link_cells = link_cells.min(TrafficDescriptor::MAX_VALUE);
    if !tp.is_used() {
        return CellRates {
            pcr01: Some(0),
            ..CellRates::default()
        };
    }
    let pcr = cells(tp.pcr.or(tp.max_pcr).or(tp.min_pcr), link_cells, frame).unwrap_or(link_cells);
    let mut r = CellRates {
        pcr01: Some(pcr),
        ..CellRates::default()
    };
    if tp.class == TrafficClass::Vbr {
        r.scr01 = cells(tp.scr, link_cells, frame).or(Some(pcr));
        r.mbs01 = Some(tp.mbs.unwrap_or(1).min(TrafficDescriptor::MAX_VALUE));
    }
    r
}

/// The traffic descriptor for a QoS seen from the caller (forward = `tx`): its rates
/// in cells on the wire, each frame's overhead and pad included ([`Qos::wire_cells`]),
/// which is what a natm switch polices.
pub fn traffic_descriptor(qos: &Qos, link_cells: u32) -> TrafficDescriptor {
    let best_effort = matches!(
        qos.class(),
        TrafficClass::Ubr | TrafficClass::Abr | TrafficClass::Any | TrafficClass::None
    );
    TrafficDescriptor {
        fwd: direction(qos.tx(), link_cells, qos.frame_payload()),
        bwd: direction(qos.rx(), link_cells, qos.frame_payload()),
        best_effort,
        ..TrafficDescriptor::default()
    }
}

fn bearer(qos: &Qos, multipoint: bool) -> BearerCapability {
    let mut b = BearerCapability::bcob_x(match qos.class() {
        TrafficClass::Cbr => TrafficType::Cbr,
        TrafficClass::Vbr => TrafficType::Vbr,
        _ => TrafficType::NoIndication,
    });
    if multipoint {
        b.user_plane = UserPlane::PointToMultipoint;
    }
    b
}

fn sdu(v: Option<u32>) -> u16 {
    v.map_or(DEFAULT_AAL5_SDU, |s| u16::try_from(s).unwrap_or(u16::MAX))
}

/// The AAL 5 parameters: each direction's largest SDU, 0 for a direction not used
/// (as Linux signals `rx:none`).
fn aal(qos: &Qos) -> AalParams {
    let dir = |tp: &TrafficParams| if tp.is_used() { sdu(tp.max_sdu) } else { 0 };
    AalParams::aal5(dir(qos.tx()), dir(qos.rx()))
}

fn natm_ie(natm: &NatmParams, qos: Option<&Qos>) -> Ie {
    let mut n = natm.clone();
    if n.qos.is_none() {
        n.qos = qos.map(Qos::to_string);
    }
    // A switch that does not know 0xF8 drops the IE and proceeds (misc.rs docs).
    Ie::from(n).with_action(IeAction::DiscardIe)
}

impl CallParams {
    /// The QoS the call offers: the text in natm's private IE when it parses, else
    /// [`CallParams::qos`] (a received SETUP's text has already moved there; a
    /// standard UNI user's QoS comes from its traffic descriptor).
    pub fn offered_qos(&self) -> Qos {
        self.natm
            .qos
            .as_deref()
            .and_then(|t| t.parse::<Qos>().ok())
            .unwrap_or(self.qos)
    }

    /// The IEs of a SETUP, in UNI 3.1 order (specs.md §4.5), natm's IE last (if
    /// `private_ie`).
    pub(crate) fn setup_ies(&self, msg: &mut Message, link_cells: u32, private_ie: bool) {
        msg.push(aal(&self.qos));
        msg.push(traffic_descriptor(&self.qos, link_cells));
        msg.push(bearer(&self.qos, self.multipoint));
        if let Some(sap) = &self.sap {
            msg.push(sap.to_ie());
        }
        msg.push(CalledNumber {
            ton: TypeOfNumber::Unknown,
            address: self.called.clone(),
        });
        if let Some(c) = &self.calling {
            msg.push(CallingNumber {
                ton: TypeOfNumber::Unknown,
                pres: None,
                address: c.clone(),
            });
        }
        if let Some(c) = self.conn_id {
            msg.push(c);
        }
        msg.push(QosParams::default());
        if private_ie {
            if let Some(d) = &self.dtl {
                msg.push(d.clone());
            }
            msg.push(natm_ie(&self.natm, Some(&self.qos)));
        }
    }

    /// The parameters of a received SETUP whose mandatory IEs were checked.
    pub(crate) fn from_setup(msg: &Message) -> Option<CallParams> {
        let called = msg.find::<CalledNumber>()?.address.clone();
        let td = msg.find::<TrafficDescriptor>();
        let (qos, natm) = match msg.find::<NatmParams>() {
            Some(n) => {
                let mut natm = n.clone();
                (qos_of(&mut natm, td)?, natm)
            }
            // No private IE: a standard UNI user (Linux's atmsigd), whose VC carries
            // bare AAL5 SDUs.
            None => (
                bare_qos(td?, msg.find::<AalParams>())?,
                NatmParams::default(),
            ),
        };
        Some(CallParams {
            called,
            calling: msg.find::<CallingNumber>().map(|c| c.address.clone()),
            sap: Sap::of_setup(msg),
            qos,
            natm,
            conn_id: msg.find::<ConnectionId>().copied(),
            multipoint: msg
                .find::<BearerCapability>()
                .is_some_and(|b| b.user_plane == UserPlane::PointToMultipoint),
            dtl: msg.find::<Dtl>().cloned(),
        })
    }
}

/// The QoS a message conveys: natm's text if it parses, else one derived from the
/// traffic descriptor (best effort → `best-effort`; otherwise guaranteed at the
/// forward PCR). Text that parses moves out of `natm` into the result; text that
/// does not stays there for the daemon to log.
fn qos_of(natm: &mut NatmParams, td: Option<&TrafficDescriptor>) -> Option<Qos> {
    if let Some(q) = take_qos(natm) {
        return Some(q);
    }
    let td = td?;
    if td.best_effort {
        return Some(Qos::best_effort());
    }
    let pcr = td.fwd.pcr01.or(td.fwd.pcr0)?;
    Rate::from_cells_per_sec(u64::from(pcr)).map(Qos::guaranteed)
}

/// The QoS of a SETUP from a standard UNI user, seen from the caller: bare AAL5
/// (`transport=none`); UBR when the best-effort indicator is set (its peak rates are
/// the line's, not a contract, and are not kept), else CBR at each direction's peak
/// cell rate (CLP=0+1, else CLP=0), VBR with a sustainable rate; a direction with a
/// zero peak rate is unused (`svc_send`'s receive side); the AAL parameters' maximum
/// SDU sizes bound each direction's messages.
fn bare_qos(td: &TrafficDescriptor, aal: Option<&AalParams>) -> Option<Qos> {
    let sdus = match aal {
        Some(AalParams::Aal5(a)) => (a.fwd_max_sdu, a.bwd_max_sdu),
        Some(AalParams::Other { .. }) => return None,
        None => (None, None),
    };
    let direction = |r: &CellRates, sdu: Option<u16>| -> Option<TrafficParams> {
        let pcr = r.pcr01.or(r.pcr0);
        if pcr == Some(0) {
            return Some(TrafficParams::UNUSED);
        }
        let mut tp = if td.best_effort {
            TrafficParams::new(TrafficClass::Ubr)
        } else if let Some(scr) = r.scr01.or(r.scr0) {
            let mut tp = TrafficParams::new(TrafficClass::Vbr);
            tp.scr = Some(Rate::from_cells_per_sec(u64::from(scr))?);
            tp.mbs = r.mbs01.or(r.mbs0);
            tp
        } else {
            TrafficParams::new(TrafficClass::Cbr)
        };
        if !td.best_effort {
            tp.pcr = Some(Rate::from_cells_per_sec(u64::from(pcr?))?);
        }
        tp.max_sdu = sdu.map(u32::from);
        Some(tp)
    };
    let tx = direction(&td.fwd, sdus.0)?;
    let rx = direction(&td.bwd, sdus.1)?;
    let bare = TransportParams {
        kind: TransportKind::Bare,
        ..TransportParams::default()
    };
    Qos::new(Aal::Aal5, tx, rx, bare).ok()
}

impl CallAccept {
    /// The IEs of a CONNECT (specs.md §4.5: AAL, connection identifier) plus natm's.
    pub(crate) fn connect_ies(&self, msg: &mut Message, offered: &Qos, private_ie: bool) {
        let q = self.qos.as_ref().unwrap_or(offered);
        // The called side's tx is the caller's rx: the AAL IE speaks for the call.
        msg.push(aal(offered));
        if let Some(c) = self.conn_id {
            msg.push(c);
        }
        if private_ie {
            msg.push(natm_ie(&self.natm, Some(q)));
        }
    }

    /// The answer a received CONNECT carries.
    pub(crate) fn from_connect(msg: &Message) -> CallAccept {
        let mut natm = msg.find::<NatmParams>().cloned().unwrap_or_default();
        CallAccept {
            qos: take_qos(&mut natm),
            conn_id: msg.find::<ConnectionId>().copied(),
            natm,
        }
    }
}

/// The QoS text of `natm` if it parses, taken out of it.
fn take_qos(natm: &mut NatmParams) -> Option<Qos> {
    let q = natm.qos.as_deref().and_then(|t| t.parse::<Qos>().ok())?;
    natm.qos = None;
    Some(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::q2931::IeContent;

    #[test]
    fn a_link_faster_than_the_24_bit_field_still_encodes_a_default_rate() {
        // 10 Gbit/s in cells of 424 bits.
        let link = 23_584_905;
        for text in ["ubr", "reliable", "cbr:pcr=20Mbps"] {
            let qos: Qos = text.parse().unwrap();
            let td = traffic_descriptor(&qos, link);
            let mut out = Vec::new();
            td.emit_content(&mut out)
                .unwrap_or_else(|e| panic!("{text}: {e:?}"));
            let pcr = td.fwd.pcr01.unwrap();
            assert!(pcr <= TrafficDescriptor::MAX_VALUE, "{text}: {pcr}");
        }
    }
}
