//! The IEs that describe the connection: AAL parameters, ATM traffic descriptor,
//! broadband bearer capability, B-LLI and connection identifier (specs.md §4.4).
//!
//! Wireshark 4.0 defect (specs.md §6.3, 1): its AAL parameters and traffic descriptor
//! loops read one octet past the IE, so every correct SETUP shows the warnings "Unknown
//! AAL parameter" / "Unknown ATM traffic descriptor element", and either IE as the last
//! of a message shows as "Malformed". The encodings here are the standard's; keep these
//! IEs away from the end of a message instead (see [`super::Message::sort_ies`]).

use super::{ext_last, fit, from_body, open_enum, IeContent, IeId, IeProblem, Reader};

open_enum! {
    /// SSCS type of AAL 3/4 and AAL 5 (AAL parameters subfield 0x84).
    pub enum SscsType: 8 {
        /// 0: null SSCS.
        Null = 0 => "null",
        /// 1: SSCOP, assured operation.
        SscopAssured = 1 => "data SSCS based on SSCOP (assured operation)",
        /// 2: SSCOP, non-assured operation.
        SscopNonAssured = 2 => "data SSCS based on SSCOP (non-assured operation)",
        /// 4: frame relay SSCS.
        FrameRelay = 4 => "frame relay SSCS",
    }
}

/// AAL 5 parameters. Subfields are sent in the order fwd SDU, bwd SDU, mode, SSCS.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Aal5Params {
    /// Forward maximum CPCS-SDU size, octets (subfield 0x8C).
    pub fwd_max_sdu: Option<u16>,
    /// Backward maximum CPCS-SDU size, octets (subfield 0x81).
    pub bwd_max_sdu: Option<u16>,
    /// Mode, 1 message / 2 streaming (subfield 0x83): UNI 3.0 only, omit for UNI 3.1.
    pub mode: Option<u8>,
    /// SSCS type (subfield 0x84).
    pub sscs: Option<SscsType>,
    /// Octets from the first subfield this module does not know to the end, kept
    /// verbatim (its length is unknown, so nothing after it can be decoded).
    pub rest: Vec<u8>,
}

/// The AAL parameters IE (0x58).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AalParams {
    /// AAL type 5.
    Aal5(Aal5Params),
    /// Any other AAL type (0 voice, 1, 2, 3/4, 0x10 user-defined), contents raw.
    Other {
        /// The AAL type octet (not 5).
        aal_type: u8,
        /// The octets after it.
        data: Vec<u8>,
    },
}

impl AalParams {
    /// AAL type octet of AAL 5.
    pub const AAL5: u8 = 0x05;
    /// Subfield identifier: forward maximum CPCS-SDU size.
    pub const FWD_MAX_SDU: u8 = 0x8C;
    /// Subfield identifier: backward maximum CPCS-SDU size.
    pub const BWD_MAX_SDU: u8 = 0x81;
    /// Subfield identifier: mode (UNI 3.0).
    pub const MODE: u8 = 0x83;
    /// Subfield identifier: SSCS type.
    pub const SSCS: u8 = 0x84;

    /// AAL 5 with both maximum SDU sizes and the null SSCS, as UNI 3.1 data calls use.
    pub fn aal5(fwd_max_sdu: u16, bwd_max_sdu: u16) -> AalParams {
        AalParams::Aal5(Aal5Params {
            fwd_max_sdu: Some(fwd_max_sdu),
            bwd_max_sdu: Some(bwd_max_sdu),
            mode: None,
            sscs: Some(SscsType::Null),
            rest: Vec::new(),
        })
    }
}

/// Stores `value` in `slot` unless the subfield was already seen.
fn once<T>(slot: &mut Option<T>, value: T, field: &'static str) -> Result<(), IeProblem> {
    if slot.is_some() {
        return Err(IeProblem::Duplicate { field });
    }
    *slot = Some(value);
    Ok(())
}

impl IeContent for AalParams {
    const ID: IeId = IeId::Aal;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let aal_type = r.u8("AAL type")?;
        if aal_type != Self::AAL5 {
            return Ok(AalParams::Other {
                aal_type,
                data: r.rest().to_vec(),
            });
        }
        let mut p = Aal5Params::default();
        while let Some(id) = r.peek() {
            match id {
                Self::FWD_MAX_SDU | Self::BWD_MAX_SDU | Self::MODE | Self::SSCS => {
                    r.u8("subfield identifier")?;
                }
                _ => {
                    p.rest = r.rest().to_vec();
                    break;
                }
            }
            match id {
                Self::FWD_MAX_SDU => {
                    let v = r.u16("forward maximum CPCS-SDU size")?;
                    once(&mut p.fwd_max_sdu, v, "forward maximum CPCS-SDU size")?;
                }
                Self::BWD_MAX_SDU => {
                    let v = r.u16("backward maximum CPCS-SDU size")?;
                    once(&mut p.bwd_max_sdu, v, "backward maximum CPCS-SDU size")?;
                }
                Self::MODE => once(&mut p.mode, r.u8("mode")?, "mode")?,
                _ => once(&mut p.sscs, r.u8("SSCS type")?.into(), "SSCS type")?,
            }
        }
        Ok(AalParams::Aal5(p))
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        match self {
            AalParams::Other { aal_type, data } => {
                out.push(*aal_type);
                out.extend_from_slice(data);
            }
            AalParams::Aal5(p) => {
                out.push(Self::AAL5);
                if let Some(v) = p.fwd_max_sdu {
                    out.push(Self::FWD_MAX_SDU);
                    out.extend_from_slice(&v.to_be_bytes());
                }
                if let Some(v) = p.bwd_max_sdu {
                    out.push(Self::BWD_MAX_SDU);
                    out.extend_from_slice(&v.to_be_bytes());
                }
                if let Some(v) = p.mode {
                    out.extend_from_slice(&[Self::MODE, v]);
                }
                if let Some(v) = p.sscs {
                    out.extend_from_slice(&[Self::SSCS, v.raw()]);
                }
                out.extend_from_slice(&p.rest);
            }
        }
        Ok(())
    }

    from_body!(Aal);
}

/// The cell rates of one direction of a traffic descriptor, each a 24-bit value in
/// cells/s (MBS in cells). `None` leaves the subfield out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CellRates {
    /// Peak cell rate, CLP = 0.
    pub pcr0: Option<u32>,
    /// Peak cell rate, CLP = 0+1.
    pub pcr01: Option<u32>,
    /// Sustainable cell rate, CLP = 0.
    pub scr0: Option<u32>,
    /// Sustainable cell rate, CLP = 0+1.
    pub scr01: Option<u32>,
    /// ABR minimum cell rate (UNI 4.0).
    pub mcr: Option<u32>,
    /// Maximum burst size, CLP = 0.
    pub mbs0: Option<u32>,
    /// Maximum burst size, CLP = 0+1.
    pub mbs01: Option<u32>,
}

/// The ATM traffic descriptor IE (0x59): per-direction cell rates, the best-effort
/// indicator and the traffic management options.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TrafficDescriptor {
    /// Forward direction (calling to called).
    pub fwd: CellRates,
    /// Backward direction.
    pub bwd: CellRates,
    /// Best-effort indicator (0xBE, no value): UBR.
    pub best_effort: bool,
    /// Traffic management options octet (0xBF): [`Self::TAG_FWD`], [`Self::TAG_BWD`],
    /// and the UNI 4.0 frame discard bits.
    pub options: Option<u8>,
    /// Octets from the first subfield this module does not know to the end, verbatim.
    pub rest: Vec<u8>,
}

/// Which rate of a direction a subfield identifier names.
#[derive(Clone, Copy)]
enum Rate {
    Pcr0,
    Pcr01,
    Scr0,
    Scr01,
    Mcr,
    Mbs0,
    Mbs01,
}

/// The 24-bit subfields in the order they are sent (libunimsg's, ascending).
const RATE_IDS: [(u8, bool, Rate, &str); 14] = [
    (0x82, true, Rate::Pcr0, "forward PCR (CLP=0)"),
    (0x83, false, Rate::Pcr0, "backward PCR (CLP=0)"),
    (0x84, true, Rate::Pcr01, "forward PCR (CLP=0+1)"),
    (0x85, false, Rate::Pcr01, "backward PCR (CLP=0+1)"),
    (0x88, true, Rate::Scr0, "forward SCR (CLP=0)"),
    (0x89, false, Rate::Scr0, "backward SCR (CLP=0)"),
    (0x90, true, Rate::Scr01, "forward SCR (CLP=0+1)"),
    (0x91, false, Rate::Scr01, "backward SCR (CLP=0+1)"),
    (0x92, true, Rate::Mcr, "forward ABR MCR"),
    (0x93, false, Rate::Mcr, "backward ABR MCR"),
    (0xA0, true, Rate::Mbs0, "forward MBS (CLP=0)"),
    (0xA1, false, Rate::Mbs0, "backward MBS (CLP=0)"),
    (0xB0, true, Rate::Mbs01, "forward MBS (CLP=0+1)"),
    (0xB1, false, Rate::Mbs01, "backward MBS (CLP=0+1)"),
];

impl CellRates {
    fn get(&self, rate: Rate) -> Option<u32> {
        match rate {
            Rate::Pcr0 => self.pcr0,
            Rate::Pcr01 => self.pcr01,
            Rate::Scr0 => self.scr0,
            Rate::Scr01 => self.scr01,
            Rate::Mcr => self.mcr,
            Rate::Mbs0 => self.mbs0,
            Rate::Mbs01 => self.mbs01,
        }
    }

    fn slot(&mut self, rate: Rate) -> &mut Option<u32> {
        match rate {
            Rate::Pcr0 => &mut self.pcr0,
            Rate::Pcr01 => &mut self.pcr01,
            Rate::Scr0 => &mut self.scr0,
            Rate::Scr01 => &mut self.scr01,
            Rate::Mcr => &mut self.mcr,
            Rate::Mbs0 => &mut self.mbs0,
            Rate::Mbs01 => &mut self.mbs01,
        }
    }
}

impl TrafficDescriptor {
    /// Subfield identifier: forward PCR, CLP=0.
    pub const FWD_PCR_0: u8 = 0x82;
    /// Subfield identifier: backward PCR, CLP=0.
    pub const BWD_PCR_0: u8 = 0x83;
    /// Subfield identifier: forward PCR, CLP=0+1.
    pub const FWD_PCR_01: u8 = 0x84;
    /// Subfield identifier: backward PCR, CLP=0+1.
    pub const BWD_PCR_01: u8 = 0x85;
    /// Subfield identifier: forward SCR, CLP=0.
    pub const FWD_SCR_0: u8 = 0x88;
    /// Subfield identifier: backward SCR, CLP=0.
    pub const BWD_SCR_0: u8 = 0x89;
    /// Subfield identifier: forward SCR, CLP=0+1.
    pub const FWD_SCR_01: u8 = 0x90;
    /// Subfield identifier: backward SCR, CLP=0+1.
    pub const BWD_SCR_01: u8 = 0x91;
    /// Subfield identifier: forward ABR MCR (UNI 4.0).
    pub const FWD_MCR: u8 = 0x92;
    /// Subfield identifier: backward ABR MCR (UNI 4.0).
    pub const BWD_MCR: u8 = 0x93;
    /// Subfield identifier: forward MBS, CLP=0.
    pub const FWD_MBS_0: u8 = 0xA0;
    /// Subfield identifier: backward MBS, CLP=0.
    pub const BWD_MBS_0: u8 = 0xA1;
    /// Subfield identifier: forward MBS, CLP=0+1.
    pub const FWD_MBS_01: u8 = 0xB0;
    /// Subfield identifier: backward MBS, CLP=0+1.
    pub const BWD_MBS_01: u8 = 0xB1;
    /// Subfield identifier: best-effort indicator (no value).
    pub const BEST_EFFORT: u8 = 0xBE;
    /// Subfield identifier: traffic management options (1 octet).
    pub const OPTIONS: u8 = 0xBF;
    /// Options bit: tagging requested in the forward direction.
    pub const TAG_FWD: u8 = 0x01;
    /// Options bit: tagging requested in the backward direction.
    pub const TAG_BWD: u8 = 0x02;
    /// Options bit: frame discard allowed forward (UNI 4.0).
    pub const FRAME_DISCARD_FWD: u8 = 0x80;
    /// Options bit: frame discard allowed backward (UNI 4.0).
    pub const FRAME_DISCARD_BWD: u8 = 0x40;
    /// Largest rate or burst size (24 bits).
    pub const MAX_VALUE: u32 = 0xFF_FFFF;

    /// UBR: best effort with a peak cell rate (CLP=0+1) in both directions.
    pub fn best_effort(fwd_pcr: u32, bwd_pcr: u32) -> TrafficDescriptor {
        TrafficDescriptor {
            fwd: CellRates {
                pcr01: Some(fwd_pcr),
                ..CellRates::default()
            },
            bwd: CellRates {
                pcr01: Some(bwd_pcr),
                ..CellRates::default()
            },
            best_effort: true,
            ..TrafficDescriptor::default()
        }
    }

    /// The name of a subfield identifier (for cause 37 diagnostics), if known.
    pub fn subfield_name(id: u8) -> Option<&'static str> {
        match id {
            Self::BEST_EFFORT => Some("best-effort indicator"),
            Self::OPTIONS => Some("traffic management options"),
            _ => RATE_IDS.iter().find(|s| s.0 == id).map(|s| s.3),
        }
    }

    fn dir(&mut self, fwd: bool) -> &mut CellRates {
        if fwd {
            &mut self.fwd
        } else {
            &mut self.bwd
        }
    }
}

impl IeContent for TrafficDescriptor {
    const ID: IeId = IeId::Traffic;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let mut td = TrafficDescriptor::default();
        while let Some(id) = r.peek() {
            if let Some(&(_, fwd, rate, name)) = RATE_IDS.iter().find(|s| s.0 == id) {
                r.u8("subfield identifier")?;
                let v = r.u24(name)?;
                once(td.dir(fwd).slot(rate), v, name)?;
            } else if id == Self::BEST_EFFORT {
                r.u8("subfield identifier")?;
                if td.best_effort {
                    return Err(IeProblem::Duplicate {
                        field: "best-effort indicator",
                    });
                }
                td.best_effort = true;
            } else if id == Self::OPTIONS {
                r.u8("subfield identifier")?;
                let v = r.u8("traffic management options")?;
                once(&mut td.options, v, "traffic management options")?;
            } else {
                td.rest = r.rest().to_vec();
            }
        }
        Ok(td)
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        for &(id, fwd, rate, name) in &RATE_IDS {
            let dir = if fwd { &self.fwd } else { &self.bwd };
            if let Some(v) = dir.get(rate) {
                fit(name, u64::from(v), u64::from(Self::MAX_VALUE))?;
                out.push(id);
                out.extend_from_slice(&v.to_be_bytes()[1..]);
            }
        }
        if self.best_effort {
            out.push(Self::BEST_EFFORT);
        }
        if let Some(v) = self.options {
            out.extend_from_slice(&[Self::OPTIONS, v]);
        }
        out.extend_from_slice(&self.rest);
        Ok(())
    }

    from_body!(Traffic);
}

open_enum! {
    /// Bearer class (bearer capability octet 5, bits 5-1).
    pub enum BearerClass: 5 {
        /// 0x01: BCOB-A (constant bit rate, timing).
        BcobA = 0x01 => "BCOB-A",
        /// 0x03: BCOB-C (variable bit rate, connection-oriented).
        BcobC = 0x03 => "BCOB-C",
        /// 0x10: BCOB-X (transport only; octet 5a says the traffic type).
        BcobX = 0x10 => "BCOB-X",
        /// 0x18: transparent VP service (UNI 4.0).
        TransparentVp = 0x18 => "transparent VP service",
    }
}

open_enum! {
    /// Traffic type (octet 5a, bits 5-3, UNI 3.1).
    pub enum TrafficType: 3 {
        /// 0.
        NoIndication = 0 => "no indication",
        /// 1.
        Cbr = 1 => "constant bit rate",
        /// 2.
        Vbr = 2 => "variable bit rate",
    }
}

open_enum! {
    /// Timing requirements (octet 5a, bits 2-1, UNI 3.1).
    pub enum Timing: 2 {
        /// 0.
        NoIndication = 0 => "no indication",
        /// 1.
        Required = 1 => "end-to-end timing required",
        /// 2.
        NotRequired = 2 => "end-to-end timing not required",
    }
}

open_enum! {
    /// Susceptibility to clipping (octet 6, bits 7-6).
    pub enum Clipping: 2 {
        /// 0.
        NotSusceptible = 0 => "not susceptible to clipping",
        /// 1.
        Susceptible = 1 => "susceptible to clipping",
    }
}

open_enum! {
    /// User-plane connection configuration (octet 6, bits 2-1).
    pub enum UserPlane: 2 {
        /// 0.
        PointToPoint = 0 => "point-to-point",
        /// 1.
        PointToMultipoint = 1 => "point-to-multipoint",
    }
}

/// Octet 5a of the bearer capability. UNI 4.0 reads the same octet as one "ATM transfer
/// capability" (0x05 CBR, 0x09 rt-VBR, 0x0A nrt-VBR, 0x0C ABR): see [`Self::atc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BearerTraffic {
    /// Traffic type.
    pub traffic_type: TrafficType,
    /// Timing requirements.
    pub timing: Timing,
}

impl BearerTraffic {
    /// The octet's low 5 bits, the UNI 4.0 ATM transfer capability.
    pub const fn atc(self) -> u8 {
        (self.traffic_type.raw() << 2 | self.timing.raw()) & 0x1F
    }
}

/// The broadband bearer capability IE (0x5E).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BearerCapability {
    /// Bearer class.
    pub class: BearerClass,
    /// Octet 5a, present iff octet 5's extension bit is 0 (UNI 3.1: with BCOB-X).
    pub traffic: Option<BearerTraffic>,
    /// Susceptibility to clipping.
    pub clipping: Clipping,
    /// User-plane configuration.
    pub user_plane: UserPlane,
}

impl BearerCapability {
    /// BCOB-X point-to-point, not susceptible to clipping, with the given traffic type
    /// and no timing indication (the SETUPs of specs.md §4.5).
    pub fn bcob_x(traffic_type: TrafficType) -> BearerCapability {
        BearerCapability {
            class: BearerClass::BcobX,
            traffic: Some(BearerTraffic {
                traffic_type,
                timing: Timing::NoIndication,
            }),
            clipping: Clipping::NotSusceptible,
            user_plane: UserPlane::PointToPoint,
        }
    }
}

impl IeContent for BearerCapability {
    const ID: IeId = IeId::Bearer;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let o5 = r.u8("bearer class")?;
        let traffic = if o5 & 0x80 == 0 {
            let o5a = ext_last("octet 5a extension bit", r.u8("octet 5a")?)?;
            Some(BearerTraffic {
                traffic_type: TrafficType::from_raw(o5a >> 2 & 0x07),
                timing: Timing::from_raw(o5a & 0x03),
            })
        } else {
            None
        };
        let o6 = ext_last("octet 6 extension bit", r.u8("clipping / user plane")?)?;
        r.finish()?;
        Ok(BearerCapability {
            class: BearerClass::from_raw(o5 & 0x1F),
            traffic,
            clipping: Clipping::from_raw(o6 >> 5 & 0x03),
            user_plane: UserPlane::from_raw(o6 & 0x03),
        })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        let class = self.class.checked("bearer class")?;
        match self.traffic {
            Some(t) => {
                let tt = t.traffic_type.checked("traffic type")?;
                let timing = t.timing.checked("timing requirements")?;
                out.extend_from_slice(&[class, 0x80 | tt << 2 | timing]);
            }
            None => out.push(0x80 | class),
        }
        let clip = self.clipping.checked("clipping")?;
        let up = self.user_plane.checked("user-plane configuration")?;
        out.push(0x80 | clip << 5 | up);
        Ok(())
    }

    from_body!(Bearer);
}

/// The B-LLI IE (0x5F). A lone layer-2 octet (`1 10 PPPPP`, no octet 6a) is decoded;
/// anything else (layer 1, layer-2 extension octets, layer 3) is kept raw in `rest`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Blli {
    /// User information layer 2 protocol (5 bits), when the IE starts with a layer-2
    /// octet that has no extension octets.
    pub layer2: Option<u8>,
    /// The octets after the decoded layer-2 octet (all of them if none was decoded).
    /// Must not start with a lone layer-2 octet when `layer2` is `None`.
    pub rest: Vec<u8>,
}

impl Blli {
    /// Layer 2 protocol: ISO 8802/2 LLC (RFC 2684 LLC encapsulation).
    pub const L2_LLC: u8 = 0x0C;

    /// Layer 2 = LLC, nothing else: the B-LLI of specs.md §4.5 (`CC`).
    pub fn llc() -> Blli {
        Blli {
            layer2: Some(Self::L2_LLC),
            rest: Vec::new(),
        }
    }
}

impl IeContent for Blli {
    const ID: IeId = IeId::Blli;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        match data.split_first() {
            Some((&o, rest)) if o & 0xE0 == 0xC0 => Ok(Blli {
                layer2: Some(o & 0x1F),
                rest: rest.to_vec(),
            }),
            _ => Ok(Blli {
                layer2: None,
                rest: data.to_vec(),
            }),
        }
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        if let Some(p) = self.layer2 {
            fit("layer 2 protocol", u64::from(p), 0x1F)?;
            out.push(0xC0 | p);
        }
        out.extend_from_slice(&self.rest);
        Ok(())
    }

    from_body!(Blli);
}

open_enum! {
    /// VP-associated signalling (connection identifier octet 5, bits 5-4).
    pub enum VpAssoc: 2 {
        /// 0: VP-associated signalling (UNI 4.0).
        Associated = 0 => "VP-associated signalling",
        /// 1: explicit indication of VPCI (UNI 3.1).
        Explicit = 1 => "explicit indication of VPCI",
    }
}

open_enum! {
    /// Preferred/exclusive (connection identifier octet 5, bits 3-1).
    pub enum PrefExcl: 3 {
        /// 0: exclusive VPCI, exclusive VCI.
        ExclusiveVci = 0 => "exclusive VPCI; exclusive VCI",
        /// 1: exclusive VPCI, any VCI.
        AnyVci = 1 => "exclusive VPCI; any VCI",
        /// 2: exclusive VPCI, no VCI (UNI 4.0 VP connections).
        NoVci = 2 => "exclusive VPCI; no VCI",
    }
}

/// The connection identifier IE (0x5A): which VPCI/VCI the call uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionId {
    /// VP-associated signalling.
    pub assoc: VpAssoc,
    /// Whether the VCI is exclusive or any.
    pub excl: PrefExcl,
    /// Virtual path connection identifier.
    pub vpci: u16,
    /// Virtual channel identifier.
    pub vci: u16,
}

impl ConnectionId {
    /// Explicit VPCI, exclusive VPCI and VCI (the CALL PROCEEDING of specs.md §4.5).
    pub fn exclusive(vpci: u16, vci: u16) -> ConnectionId {
        ConnectionId {
            assoc: VpAssoc::Explicit,
            excl: PrefExcl::ExclusiveVci,
            vpci,
            vci,
        }
    }
}

impl IeContent for ConnectionId {
    const ID: IeId = IeId::ConnId;

    fn parse_content(data: &[u8]) -> Result<Self, IeProblem> {
        let mut r = Reader::new(data);
        let o5 = ext_last("octet 5 extension bit", r.u8("VP association")?)?;
        let vpci = r.u16("VPCI")?;
        let vci = r.u16("VCI")?;
        r.finish()?;
        Ok(ConnectionId {
            assoc: VpAssoc::from_raw(o5 >> 3 & 0x03),
            excl: PrefExcl::from_raw(o5 & 0x07),
            vpci,
            vci,
        })
    }

    fn emit_content(&self, out: &mut Vec<u8>) -> Result<(), IeProblem> {
        let a = self.assoc.checked("VP-associated signalling")?;
        let p = self.excl.checked("preferred/exclusive")?;
        out.push(0x80 | a << 3 | p);
        out.extend_from_slice(&self.vpci.to_be_bytes());
        out.extend_from_slice(&self.vci.to_be_bytes());
        Ok(())
    }

    from_body!(ConnId);
}
