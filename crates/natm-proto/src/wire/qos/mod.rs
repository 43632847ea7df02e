//! Quality of service as text: the Linux-ATM `text2qos`/`qos2text` syntax (see `qos(7)`),
//! extended with VBR and with the transport's own services.
//!
//! A [`Qos`] describes one duplex connection: the AAL, the traffic contract of each
//! direction ([`TrafficParams`], `tx` and `rx`) and the transport services the VC pair
//! gets ([`TransportParams`]: seed 000 §2's orthogonal choices of error control, flow
//! control, message size and semantics). `FromStr` parses the text form, `Display`
//! prints a canonical form, and `parse(print(q)) == q` holds for every `Qos` value: the
//! only way to build one ([`Qos::new`], the presets, or parsing) validates it.
//!
//! ```
//! use natm_proto::wire::qos::{Qos, Rate, Service};
//! let q: Qos = "cbr:max_pcr=11Mbps,min_pcr=10mbps,sdu=8192".parse().unwrap();
//! assert_eq!(q.tx().max_pcr, Some(Rate::Bps(11_000_000)));
//! assert_eq!(q.service(), Service::Guaranteed);
//! assert_eq!(q.to_string(), "cbr:max_pcr=11Mbps,min_pcr=10Mbps,max_sdu=8192");
//! ```
//!
//! # Rates are application payload bits per second
//! A project decision: every rate means *payload* bits per second, the rate the
//! application sees. A rate written in cells per second (a plain number, as in Linux, or
//! with the `cps` unit) is converted at 48 payload bytes per cell, so `1cps` is 384 bit/s
//! (Linux does the same conversion, the other way round). Rates are stored as
//! [`Rate::Bps`]; [`Rate::cells_per_sec`] rounds up for the signalling layer, whose
//! traffic descriptors count cells. Cell headers and AAL5 padding and trailers are not
//! included: the signalling layer adds them when it sizes a reservation.
//!
//! # Grammar
//! Keywords, parameter names and multipliers are case-insensitive; the units `bps` and
//! `cps` are not (so that `MBps` cannot be misread as megabytes per second).
//! ```text
//! qos        = head [ ":" body ] ;
//! head       = head-item [ "," head-item ] ;          (* one class, at most one AAL *)
//! head-item  = class | "aal0" | "aal5" ;
//! class      = "ubr" | "cbr" | "vbr" | "abr" | "any"
//!            | "guaranteed" | "reliable" | "best-effort" ;
//! body       = param { "," param } [ "," groups ] | groups ;
//! groups     = group [ "," group ] ;                  (* tx and rx, once each, any order *)
//! group      = ( "tx" | "rx" ) ":" ( "none" | traffic { "," traffic } ) ;
//! param      = traffic | transport ;
//! traffic    = ( "max_pcr" | "pcr" | "min_pcr" | "scr" ) "=" rate
//!            | "mbs" "=" integer                       (* cells *)
//!            | "max_cdv" "=" number [ "us" | "ms" | "s" ]  (* default µs *)
//!            | ( "max_sdu" | "sdu" ) "=" bytes ;
//! transport  = "transport" "=" ( "natm" | "none" )     (* none: bare AAL5 SDUs *)
//!            | "flow" "=" ( "none" | "leaky-bucket" | "packet-pair" | "window" | "abr" )
//!            | ( "ec" | "encrypt" ) "=" ( "on" | "off" )
//!            | "mode" "=" ( "message" | "stream" )
//!            | "tpdu" "=" ( bytes | "auto" )              (* auto: adaptive *)
//!            | ( "msg" | "bucket" ) "=" bytes
//!            | ( "window" | "outstanding" | "prio" ) "=" integer
//!            | "delay" "=" number [ "us" | "ms" | "s" ]     (* default µs *)
//!            | "smooth" "=" ( "frame" | "cell" ) ;       (* seed 001 §7 *)
//! rate       = "max" | number [ [ multiplier ] ( "bps" | "cps" ) ] ;  (* bare: cells/s *)
//! bytes      = number [ multiplier [ "i" ] ] [ "B" ] ;  (* k = 1000, ki = 1024 *)
//! multiplier = "k" | "K" | "m" | "M" | "g" | "G" ;    (* 10^3, 10^6, 10^9; m is mega *)
//! number     = digit { digit } [ "." digit { digit } ] ;  (* must come out whole *)
//! ```
//! Parameters before the groups apply to every direction in use; a group's parameters
//! override them for its direction; `tx:none`/`rx:none` mark a direction unused.
//! Transport parameters apply to the connection and may only appear before the groups.
//!
//! # Bare AAL5 VCs
//! `transport=none` says the VC carries bare AAL5 SDUs, as a Linux-ATM socket sends
//! them: no natm TPDU header, handshake, acknowledgement or retransmission; one message
//! is one SDU, bounded per direction by `max_sdu` (default [`DEFAULT_MAX_SDU`]). It
//! excludes every other transport parameter but `smooth` (the adaptor's, see
//! [`Smoothing`]) and the named services (which are natm transport services): `cbr:pcr=10Mbps,transport=none` is a bare CBR VC, and
//! `reliable:transport=none` is a [`QosConflict::ServiceOnBare`]. It needs AAL5.
//! `transport=natm` is the default and is never printed.
//!
//! # Where this departs from Linux, and why
//! - Extensions: the `vbr` class with `scr` and `mbs` (Linux parses `vbr` but rejects it);
//!   `max_cdv`; the class `any` (Linux's `ATM_ANYCLASS`, which its text form lacks); the
//!   presets `guaranteed`, `reliable`, `best-effort`; the transport parameters (among
//!   them `transport=none`, which asks for what Linux always does); byte
//!   units; `tx` and `rx` groups in either order.
//! - Stricter: Linux matches keywords by prefix (`ubrfoo` is `ubr` followed by junk) and
//!   lets a repeated class, AAL or parameter silently override the earlier one; natm
//!   rejects both. Linux truncates fractions (`1.5` cells/s becomes 1); natm accepts a
//!   fraction only if the result is a whole number of bits per second, bytes or µs.
//!   Linux rejects `min_pcr=max`; so does natm, and `scr=max` as well. Linux reads a
//!   zero rate as "unspecified"; natm leaves the parameter out for that and rejects a
//!   zero `pcr`, `max_pcr` or `scr` (a zero `min_pcr` is a real lower bound).
//! - `pcr`, `max_pcr` and `min_pcr` are three separate fields, as in `text2qos` and the
//!   kernel's `atm_trafprm` (the `qos(7)` page calls `pcr` a synonym of `max_pcr`; the
//!   code never did).
//! - Printing: rates in bits per second with the largest exact unit (`10Mbps`, `384bps`)
//!   where `qos2text` prints bare cells per second; the AAL is printed only when it is
//!   `aal0`, since natm's default is AAL5; `max_sdu` rather than `sdu`.

mod cells;
mod grant;
mod parse;
mod print;
#[cfg(test)]
mod tests;

pub use cells::{frame_cells, payload_cells, wire_cells, FRAME_OVERHEAD};
pub use grant::{grant, Want};
pub use parse::{QosErrorKind, QosParseError};

/// Payload bits carried by one cell: 48 bytes (the project's rate convention).
pub const BITS_PER_CELL: u64 = 48 * 8;

/// AAL5 SDU size when the QoS does not set `max_sdu`: 9188 bytes, the value natm's
/// signalling puts in the AAL parameters IE (RFC 1626's default IP-over-ATM MTU plus the
/// 8-byte LLC/SNAP header).
pub const DEFAULT_MAX_SDU: u32 = 9188;

/// TPDU size when the QoS does not set one: 4 KiB (DESIGN §3, item 4).
pub const DEFAULT_TPDU_SIZE: u32 = 4096;

/// The largest TPDU a `tpdu=auto` VC sends, and the size its handshake offers: 32 KiB.
pub const AUTO_TPDU_CEILING: u32 = 32 * 1024;

/// The ATM adaptation layer of a VC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Aal {
    /// Raw cells, no adaptation layer (`aal0`); the transport cannot run on it.
    Aal0,
    /// AAL5 frames (`aal5`), natm's default: the transport's TPDUs ride in AAL5 SDUs.
    #[default]
    Aal5,
}

/// The ATM traffic class of one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrafficClass {
    /// This direction is unused (`tx:none` / `rx:none`).
    None,
    /// Unspecified bit rate.
    Ubr,
    /// Constant bit rate.
    Cbr,
    /// Variable bit rate (PCR, SCR, MBS) — a natm extension.
    Vbr,
    /// Available bit rate.
    Abr,
    /// Any class: accept whatever the caller offers (for listeners).
    Any,
}

/// A rate in application payload bits per second (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rate {
    /// This many payload bits per second.
    Bps(u64),
    /// The link rate, whatever it is (`max`); compares above every `Bps`.
    Max,
}

impl Rate {
    /// The rate of `cells` cells per second, or `None` if it overflows `u64`.
    pub fn from_cells_per_sec(cells: u64) -> Option<Rate> {
        cells.checked_mul(BITS_PER_CELL).map(Rate::Bps)
    }

    /// Bits per second, or `None` for [`Rate::Max`] (the link decides).
    pub fn bits_per_sec(self) -> Option<u64> {
        match self {
            Rate::Bps(bps) => Some(bps),
            Rate::Max => None,
        }
    }

    /// Cells per second needed to carry this rate, rounded up; `None` for [`Rate::Max`],
    /// which the signalling layer replaces with the link's cell rate.
    pub fn cells_per_sec(self) -> Option<u64> {
        self.bits_per_sec().map(|bps| bps.div_ceil(BITS_PER_CELL))
    }
}

/// The traffic contract of one direction (Linux's `atm_trafprm`, plus VBR and CDV).
/// `None` fields are unspecified: the network or the peer chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TrafficParams {
    /// The traffic class; [`TrafficClass::None`] marks the direction unused.
    pub class: TrafficClass,
    /// Upper bound for the peak rate (`max_pcr`).
    pub max_pcr: Option<Rate>,
    /// The desired peak rate (`pcr`).
    pub pcr: Option<Rate>,
    /// Lower bound for the peak rate (`min_pcr`): the least the caller accepts.
    pub min_pcr: Option<Rate>,
    /// Sustainable rate, VBR only (`scr`).
    pub scr: Option<Rate>,
    /// Maximum burst size in cells, VBR only (`mbs`).
    pub mbs: Option<u32>,
    /// Maximum cell delay variation in microseconds (`max_cdv`).
    pub max_cdv: Option<u32>,
    /// Largest AAL SDU in bytes (`max_sdu`, alias `sdu`).
    pub max_sdu: Option<u32>,
}

impl TrafficParams {
    /// An unused direction: class [`TrafficClass::None`], nothing set.
    pub const UNUSED: TrafficParams = TrafficParams::new(TrafficClass::None);

    /// A direction of class `class` with no parameters set.
    pub const fn new(class: TrafficClass) -> TrafficParams {
        TrafficParams {
            class,
            max_pcr: None,
            pcr: None,
            min_pcr: None,
            scr: None,
            mbs: None,
            max_cdv: None,
            max_sdu: None,
        }
    }

    /// Whether this direction carries traffic (its class is not `None`).
    pub fn is_used(&self) -> bool {
        self.class != TrafficClass::None
    }

    /// Whether no parameter is set (the class is not looked at).
    pub fn has_no_params(&self) -> bool {
        *self == TrafficParams::new(self.class)
    }
}

/// The transport's named service combinations (seed 000 §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Service {
    /// Leaky-bucket shaping, a reservation and top scheduling priority; no
    /// retransmission. Runs on CBR.
    Guaranteed,
    /// SMART error control and feedback flow control. Runs on UBR.
    Reliable,
    /// Neither error nor flow control; scheduled only when nothing else waits. UBR.
    BestEffort,
}

/// Flow control of a VC (seed 000 §5.3.3, §5.3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum FlowKind {
    /// No flow control.
    #[default]
    None,
    /// Open-loop leaky-bucket shaping at the sender.
    LeakyBucket,
    /// Feedback rate control by packet-pair probing (round-robin networks).
    PacketPair,
    /// Feedback by a Reno-like dynamic window (networks that are not round-robin).
    Window,
    /// ABR: rate feedback from the network's RM cells (ATM Forum TM 4.0,
    /// `flow::abr`); the default of the `abr` class.
    Abr,
}

/// Delivery semantics (seed 000 §2, item 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Semantics {
    /// Message boundaries are preserved; unreliable VCs deliver only whole messages.
    #[default]
    Message,
    /// A byte stream.
    Stream,
}

/// How the host adaptor spaces a VC's cells (`smooth=`, seed 001 §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Smoothing {
    /// Packet-level smoothing (`smooth=frame`, the default): the VC's frames are
    /// spaced at its rate, and each frame's cells leave back to back.
    #[default]
    Frame,
    /// Cell-level smoothing (`smooth=cell`): every cell leaves in its own slot of the
    /// VC's peak cell rate. Only a cell-mode link has cells to space; on a frame-mode
    /// link the VC is smoothed per frame.
    Cell,
}

/// What runs on the VC above AAL5 (`transport=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TransportKind {
    /// natm's transport (`transport=natm`, the default, never printed): TPDU headers,
    /// the connection handshake, error and flow control.
    #[default]
    Natm,
    /// Bare AAL5 SDUs (`transport=none`), as Linux-ATM sockets send them: one message
    /// is one SDU of at most `max_sdu` bytes; no header, handshake, ACK or
    /// retransmission. None of the other transport parameters applies.
    Bare,
}

/// The transport services asked for; `None` fields take the service's default (see
/// [`Qos::resolved_transport`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TransportParams {
    /// natm's transport or bare AAL5 SDUs (`transport=natm|none`).
    pub kind: TransportKind,
    /// The named service; set by the class names `guaranteed`, `reliable`, `best-effort`.
    pub service: Option<Service>,
    /// SMART error control on or off (`ec=on|off`).
    pub error_control: Option<bool>,
    /// Flow control (`flow=`).
    pub flow: Option<FlowKind>,
    /// Message or byte-stream semantics (`mode=`).
    pub semantics: Option<Semantics>,
    /// TPDU payload size in bytes, 64..=65000 (`tpdu=`).
    pub tpdu_size: Option<u32>,
    /// `tpdu=auto`: the sender picks each TPDU's size from the loss it measures, up
    /// to [`AUTO_TPDU_CEILING`] (issue 17); `tpdu_size` is then unset.
    pub tpdu_auto: bool,
    /// Error-control window in TPDUs (`window=`).
    pub window: Option<u32>,
    /// Largest message in bytes (`msg=`); unset means unlimited.
    pub max_msg: Option<u64>,
    /// Most messages outstanding (`outstanding=`), which sizes the window (seed 003).
    pub outstanding: Option<u32>,
    /// Scheduling priority among the application's own VCs (`prio=`); the transport
    /// defines the scale, larger is more urgent.
    pub priority: Option<u8>,
    /// Leaky-bucket depth in bytes (`bucket=`).
    pub bucket: Option<u32>,
    /// A leaky-bucket VC's send queue beyond the bucket, as time at the VC's rate,
    /// in microseconds (`delay=`): the queue holds `bucket + rate × delay` bytes, so a
    /// sender waits at most that long behind it. Unset: the transport's default.
    pub delay: Option<u32>,
    /// Authenticated encryption of every TPDU (`encrypt=on|off`, issue 16); unset:
    /// on where the peer is on another host (docs/decisions/0016-sealed-tpdus.md).
    pub encrypt: Option<bool>,
    /// Cell-level or packet-level smoothing (`smooth=cell|frame`); unset: per frame.
    /// A setting of the adaptor, not of natm's transport: a bare VC may have it too.
    pub smoothing: Option<Smoothing>,
}

/// Transport settings with every default filled in: what the transport runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResolvedTransport {
    /// The service, explicit or inferred ([`Qos::service`]).
    pub service: Service,
    /// Whether SMART error control runs.
    pub error_control: bool,
    /// The flow control.
    pub flow: FlowKind,
    /// Message or stream.
    pub semantics: Semantics,
    /// TPDU payload size in bytes; for an adaptive VC the largest it sends.
    pub tpdu_size: u32,
    /// The sender adapts its TPDU size below `tpdu_size` (`tpdu=auto`).
    pub tpdu_adaptive: bool,
    /// Error-control window in TPDUs; `None` lets the transport size it.
    pub window: Option<u32>,
    /// Largest message in bytes; `None` is unlimited.
    pub max_msg: Option<u64>,
    /// Most messages outstanding; `None` is no limit of its own.
    pub outstanding: Option<u32>,
    /// Scheduling priority, 0 unless set.
    pub priority: u8,
    /// Leaky-bucket depth in bytes; `None` lets the transport choose.
    pub bucket: Option<u32>,
    /// Send-queue delay beyond the bucket, µs; `None` lets the transport choose.
    pub delay: Option<u32>,
    /// How the adaptor spaces the VC's cells.
    pub smoothing: Smoothing,
}

/// A direction of a duplex connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Transmit, from this end.
    Tx,
    /// Receive, towards this end.
    Rx,
}

/// A parameter name of the text form, used by errors to say which one is at fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each variant is the parameter of the same name
pub enum QosKey {
    MaxPcr,
    Pcr,
    MinPcr,
    Scr,
    Mbs,
    MaxCdv,
    MaxSdu,
    Flow,
    Ec,
    Mode,
    Tpdu,
    Window,
    Msg,
    Outstanding,
    Prio,
    Bucket,
    Delay,
    Transport,
    Encrypt,
    Smooth,
}

impl QosKey {
    /// Traffic parameters in canonical print order.
    pub const TRAFFIC: [QosKey; 7] = [
        QosKey::MaxPcr,
        QosKey::Pcr,
        QosKey::MinPcr,
        QosKey::Scr,
        QosKey::Mbs,
        QosKey::MaxCdv,
        QosKey::MaxSdu,
    ];

    /// Transport parameters in canonical print order.
    pub const TRANSPORT: [QosKey; 13] = [
        QosKey::Transport,
        QosKey::Flow,
        QosKey::Ec,
        QosKey::Mode,
        QosKey::Tpdu,
        QosKey::Window,
        QosKey::Msg,
        QosKey::Outstanding,
        QosKey::Prio,
        QosKey::Bucket,
        QosKey::Delay,
        QosKey::Encrypt,
        QosKey::Smooth,
    ];

    /// The name as written in the text form.
    pub fn name(self) -> &'static str {
        match self {
            QosKey::MaxPcr => "max_pcr",
            QosKey::Pcr => "pcr",
            QosKey::MinPcr => "min_pcr",
            QosKey::Scr => "scr",
            QosKey::Mbs => "mbs",
            QosKey::MaxCdv => "max_cdv",
            QosKey::MaxSdu => "max_sdu",
            QosKey::Flow => "flow",
            QosKey::Ec => "ec",
            QosKey::Mode => "mode",
            QosKey::Tpdu => "tpdu",
            QosKey::Window => "window",
            QosKey::Msg => "msg",
            QosKey::Outstanding => "outstanding",
            QosKey::Prio => "prio",
            QosKey::Bucket => "bucket",
            QosKey::Delay => "delay",
            QosKey::Transport => "transport",
            QosKey::Encrypt => "encrypt",
            QosKey::Smooth => "smooth",
        }
    }

    /// Whether this is a transport (per-connection) parameter rather than a traffic one.
    pub fn is_transport(self) -> bool {
        QosKey::TRANSPORT.contains(&self)
    }

    /// The accepted range of a numeric parameter, for error messages.
    fn range(self) -> Option<(u64, u64, &'static str)> {
        Some(match self {
            QosKey::MaxSdu => (1, 65_535, "bytes (the AAL5 SDU limit)"),
            QosKey::Mbs => (1, 0xFF_FFFF, "cells (24 bits in UNI signalling)"),
            QosKey::Tpdu => (64, 65_000, "bytes (an AAL5 SDU less header room)"),
            QosKey::Window => (1, 65_535, "TPDUs (16 bits in the TPDU header)"),
            QosKey::Msg => (1, u64::MAX, "bytes"),
            QosKey::Outstanding => (1, u64::from(u32::MAX), "messages"),
            QosKey::Prio => (0, 255, ""),
            QosKey::Bucket => (1, u64::from(u32::MAX), "bytes"),
            QosKey::MaxCdv => (0, u64::from(u32::MAX), "µs"),
            QosKey::Delay => (1, 10_000_000, "µs (at most 10 s)"),
            _ => return None,
        })
    }

    /// `1..=65535 bytes (…)`: the range as a sentence fragment.
    pub(crate) fn range_text(self) -> String {
        if matches!(self, QosKey::MaxPcr | QosKey::Pcr | QosKey::Scr) {
            return format!(
                "a rate above 0 or max (a zero rate leaves no bandwidth; leave {self} out \
                 to leave it open)"
            );
        }
        match self.range() {
            Some((lo, hi, "")) => format!("{lo}..={hi}"),
            Some((lo, hi, unit)) => format!("{lo}..={hi} {unit}"),
            None => "a rate".to_string(),
        }
    }

    /// Peak and sustainable rates must not be zero (`min_pcr` may): unlike Linux, where
    /// 0 means unspecified, natm says unspecified by leaving the field out.
    pub(crate) fn check_rate(
        self,
        dir: Option<Direction>,
        rate: Option<Rate>,
    ) -> Result<(), QosConflict> {
        match (self, rate) {
            (QosKey::MaxPcr | QosKey::Pcr | QosKey::Scr, Some(Rate::Bps(0))) => {
                Err(QosConflict::OutOfRange {
                    dir,
                    key: self,
                    value: 0,
                })
            }
            _ => Ok(()),
        }
    }

    fn check(self, dir: Option<Direction>, value: Option<u64>) -> Result<(), QosConflict> {
        match (value, self.range()) {
            (Some(v), Some((lo, hi, _))) if v < lo || v > hi => Err(QosConflict::OutOfRange {
                dir,
                key: self,
                value: v,
            }),
            _ => Ok(()),
        }
    }
}

/// Why a combination of QoS settings is invalid. [`Qos::new`] returns it; the parser
/// wraps it in [`QosErrorKind::Conflict`] and points at the setting that caused it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QosConflict {
    /// Both directions are `none`.
    #[error("both directions are unused (none): a connection needs tx or rx")]
    NoDirection,
    /// The two directions use different classes.
    #[error("tx uses {tx} but rx uses {rx}: one traffic class applies to both directions")]
    ClassMismatch {
        /// Class of tx.
        tx: TrafficClass,
        /// Class of rx.
        rx: TrafficClass,
    },
    /// An unused direction has traffic parameters.
    #[error("{dir} is unused (none) but has traffic parameters")]
    UnusedDirectionHasParams {
        /// The direction.
        dir: Direction,
    },
    /// A value outside its parameter's range.
    #[error("{key}={value} is out of range: {key} takes {}", key.range_text())]
    OutOfRange {
        /// The direction, for traffic parameters.
        dir: Option<Direction>,
        /// The parameter.
        key: QosKey,
        /// The value given.
        value: u64,
    },
    /// `min_pcr=max` or `scr=max`.
    #[error("{key}=max is not allowed: a minimum or sustainable rate must be a number")]
    MaxNotAllowed {
        /// The direction.
        dir: Direction,
        /// The parameter.
        key: QosKey,
    },
    /// `scr` or `mbs` on a class other than VBR.
    #[error("{key} applies only to vbr, not to {class}")]
    VbrOnly {
        /// The direction.
        dir: Direction,
        /// The parameter.
        key: QosKey,
        /// The class in use.
        class: TrafficClass,
    },
    /// Two rates in the wrong order, e.g. `min_pcr` above `max_pcr`.
    #[error("{low} ({low_rate}) is above {high} ({high_rate}) in {dir}")]
    RateOrder {
        /// The direction.
        dir: Direction,
        /// The parameter that should be the smaller.
        low: QosKey,
        /// Its value.
        low_rate: Rate,
        /// The parameter that should be the larger.
        high: QosKey,
        /// Its value.
        high_rate: Rate,
    },
    /// `guaranteed` without a rate to reserve.
    #[error("guaranteed needs a rate to reserve in {dir}: give pcr, e.g. guaranteed:pcr=10Mbps")]
    GuaranteedWithoutRate {
        /// The direction without a rate.
        dir: Direction,
    },
    /// A named service on a class it does not run on.
    #[error("{service} runs on {}, not on {class}", preset_class(*service))]
    PresetClass {
        /// The service.
        service: Service,
        /// The class given.
        class: TrafficClass,
    },
    /// A setting that contradicts the named service, e.g. `ec=on` with `best-effort`.
    #[error("{}", preset_override_text(*service, *key))]
    PresetOverride {
        /// The service.
        service: Service,
        /// The contradicting parameter.
        key: QosKey,
    },
    /// `bucket` on a VC whose flow control is not the leaky bucket.
    #[error("bucket sets the leaky-bucket depth, but this VC's flow control is not leaky-bucket: add flow=leaky-bucket")]
    BucketWithoutLeakyBucket,
    /// `delay` on a VC whose flow control is not the leaky bucket (only a shaped VC's
    /// send queue drains at a known rate).
    #[error("delay bounds a leaky-bucket VC's send queue in time, but this VC's flow control is not leaky-bucket: add flow=leaky-bucket or drop delay")]
    DelayWithoutLeakyBucket,
    /// `smooth=cell` on a VC that sends at no set peak rate (no cell rate to space
    /// its cells at).
    #[error(
        "smooth=cell spaces cells at the VC's peak rate, but tx sets none: add pcr= (or max_pcr=)"
    )]
    SmoothingWithoutRate,
    /// A leaky bucket too shallow to ever let a TPDU through.
    #[error(
        "bucket={bucket} is smaller than one TPDU ({tpdu} bytes), so nothing could ever be sent"
    )]
    BucketBelowTpdu {
        /// Bucket depth in bytes.
        bucket: u32,
        /// TPDU size in bytes.
        tpdu: u32,
    },
    /// Transport settings on an AAL0 VC.
    #[error(
        "{key} is a transport setting, and the transport runs over aal5; aal0 carries raw cells"
    )]
    TransportOnAal0 {
        /// The first transport parameter set (or `flow` for a named service).
        key: QosKey,
    },
    /// A setting of natm's transport on a VC that carries bare AAL5 SDUs.
    #[error(
        "{key} is a setting of natm's transport, and transport=none carries bare AAL5 SDUs \
         without it: leave {key} out, or drop transport=none"
    )]
    TransportOnBare {
        /// The first transport parameter set.
        key: QosKey,
    },
    /// A named transport service on a VC that carries bare AAL5 SDUs.
    #[error(
        "{service} names a service of natm's transport, and transport=none carries bare \
         AAL5 SDUs without it: use the class {} instead", preset_class(*service)
    )]
    ServiceOnBare {
        /// The service.
        service: Service,
    },
}

fn preset_class(service: Service) -> TrafficClass {
    match service {
        Service::Guaranteed => TrafficClass::Cbr,
        Service::Reliable | Service::BestEffort => TrafficClass::Ubr,
    }
}

fn preset_override_text(service: Service, key: QosKey) -> &'static str {
    match (service, key) {
        (Service::Guaranteed, QosKey::Ec) => {
            "guaranteed means no retransmission; for a reserved, error-controlled VC use cbr:pcr=…,ec=on"
        }
        (Service::Guaranteed, _) => {
            "guaranteed means leaky-bucket flow control; for other flow control use cbr:pcr=…,flow=…"
        }
        (Service::Reliable, QosKey::Ec) => {
            "reliable means error control; for feedback flow control alone use ubr:flow=packet-pair"
        }
        (Service::Reliable, _) => {
            "reliable means feedback flow control (packet-pair, window or abr); otherwise use ubr:ec=on,flow=…"
        }
        (Service::BestEffort, QosKey::Ec) => {
            "best-effort means no error control; use reliable, or ubr:ec=on"
        }
        (Service::BestEffort, _) => "best-effort means no flow control; use ubr:flow=… instead",
    }
}

/// The QoS of a duplex connection: AAL, per-direction traffic and transport services.
/// Every value is valid (see [`Qos::new`]) and round-trips through its text form.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Qos {
    aal: Aal,
    tx: TrafficParams,
    rx: TrafficParams,
    transport: TransportParams,
}

impl Qos {
    /// A QoS from its parts, if they are consistent (the rules the parser applies).
    pub fn new(
        aal: Aal,
        tx: TrafficParams,
        rx: TrafficParams,
        transport: TransportParams,
    ) -> Result<Qos, QosConflict> {
        let qos = Qos {
            aal,
            tx,
            rx,
            transport,
        };
        qos.validate()?;
        Ok(qos)
    }

    /// The guaranteed service at `rate` both ways: CBR, leaky bucket, no retransmission.
    pub fn guaranteed(rate: Rate) -> Qos {
        let mut tp = TrafficParams::new(TrafficClass::Cbr);
        tp.pcr = Some(rate);
        Qos::preset(Service::Guaranteed, tp)
    }

    /// The reliable service: UBR, SMART error control, feedback flow control.
    pub fn reliable() -> Qos {
        Qos::preset(Service::Reliable, TrafficParams::new(TrafficClass::Ubr))
    }

    /// The best-effort service: UBR, neither error nor flow control.
    pub fn best_effort() -> Qos {
        Qos::preset(Service::BestEffort, TrafficParams::new(TrafficClass::Ubr))
    }

    fn preset(service: Service, tp: TrafficParams) -> Qos {
        Qos {
            aal: Aal::Aal5,
            tx: tp,
            rx: tp,
            transport: TransportParams {
                service: Some(service),
                ..TransportParams::default()
            },
        }
    }

    /// The AAL.
    pub fn aal(&self) -> Aal {
        self.aal
    }

    /// The transmit direction's traffic contract.
    pub fn tx(&self) -> &TrafficParams {
        &self.tx
    }

    /// The receive direction's traffic contract.
    pub fn rx(&self) -> &TrafficParams {
        &self.rx
    }

    /// The transport services as given (unset fields are defaults).
    pub fn transport(&self) -> &TransportParams {
        &self.transport
    }

    /// Whether the VC carries bare AAL5 SDUs (`transport=none`) rather than natm's
    /// transport.
    pub fn is_bare(&self) -> bool {
        self.transport.kind == TransportKind::Bare
    }

    /// The largest AAL5 SDU of direction `dir`: its `max_sdu`, else
    /// [`DEFAULT_MAX_SDU`]. On a bare VC this bounds a message.
    pub fn max_sdu(&self, dir: Direction) -> u32 {
        let tp = match dir {
            Direction::Tx => &self.tx,
            Direction::Rx => &self.rx,
        };
        tp.max_sdu.unwrap_or(DEFAULT_MAX_SDU)
    }

    /// The traffic class of the connection (that of every direction in use).
    pub fn class(&self) -> TrafficClass {
        if self.tx.is_used() {
            self.tx.class
        } else {
            self.rx.class
        }
    }

    /// The parts, to change one and rebuild with [`Qos::new`].
    pub fn into_parts(self) -> (Aal, TrafficParams, TrafficParams, TransportParams) {
        (self.aal, self.tx, self.rx, self.transport)
    }

    /// This QoS with other transport parameters, if they are consistent with it.
    pub fn with_transport(self, transport: TransportParams) -> Result<Qos, QosConflict> {
        Qos::new(self.aal, self.tx, self.rx, transport)
    }

    /// The service: the named one if given, else inferred — CBR and VBR are
    /// guaranteed; anything else is reliable with `ec=on`, best-effort otherwise.
    pub fn service(&self) -> Service {
        if let Some(service) = self.transport.service {
            return service;
        }
        match self.class() {
            TrafficClass::Cbr | TrafficClass::Vbr => Service::Guaranteed,
            _ if self.transport.error_control == Some(true) => Service::Reliable,
            _ => Service::BestEffort,
        }
    }

    /// The transport settings with defaults filled in (for a bare VC, which has no
    /// transport, the TPDU size is its largest SDU sent): TPDU 4096 bytes, message
    /// semantics, error control only for reliable, and flow control by service —
    /// leaky bucket for guaranteed, none for best-effort, and for reliable packet-pair
    /// when `round_robin_network` (every switch on the path serves VCs round-robin),
    /// else the dynamic window (seed 000 §5.3.3).
    pub fn resolved_transport(&self, round_robin_network: bool) -> ResolvedTransport {
        let t = &self.transport;
        let service = self.service();
        ResolvedTransport {
            service,
            error_control: t.error_control.unwrap_or(service == Service::Reliable),
            flow: t.flow.unwrap_or_else(|| match self.class() {
                // The class names its own flow control: RM-cell feedback (TM 4.0).
                TrafficClass::Abr if t.kind == TransportKind::Natm => FlowKind::Abr,
                _ => default_flow(service, round_robin_network),
            }),
            semantics: t.semantics.unwrap_or(Semantics::Message),
            // A bare VC's frame is its SDU: what sizes a reservation's cell overhead
            // is the largest one it sends.
            tpdu_size: match t.kind {
                TransportKind::Bare => self.max_sdu(Direction::Tx),
                TransportKind::Natm if t.tpdu_auto => AUTO_TPDU_CEILING,
                TransportKind::Natm => t.tpdu_size.unwrap_or(DEFAULT_TPDU_SIZE),
            },
            tpdu_adaptive: t.kind == TransportKind::Natm && t.tpdu_auto,
            window: t.window,
            max_msg: t.max_msg,
            outstanding: t.outstanding,
            priority: t.priority.unwrap_or(0),
            bucket: t.bucket,
            delay: t.delay,
            smoothing: t.smoothing.unwrap_or_default(),
        }
    }

    /// Checks every rule a `Qos` value keeps; the first broken one is returned.
    fn validate(&self) -> Result<(), QosConflict> {
        let dirs = [(Direction::Tx, &self.tx), (Direction::Rx, &self.rx)];
        match (self.tx.class, self.rx.class) {
            (TrafficClass::None, TrafficClass::None) => return Err(QosConflict::NoDirection),
            (TrafficClass::None, _) | (_, TrafficClass::None) => {}
            (tx, rx) if tx != rx => return Err(QosConflict::ClassMismatch { tx, rx }),
            _ => {}
        }
        for (dir, tp) in dirs {
            if tp.is_used() {
                validate_traffic(dir, tp)?;
            } else if !tp.has_no_params() {
                return Err(QosConflict::UnusedDirectionHasParams { dir });
            }
        }
        self.validate_transport()?;
        if let Some(service) = self.transport.service {
            self.validate_preset(service)?;
        }
        Ok(())
    }

    fn validate_transport(&self) -> Result<(), QosConflict> {
        let t = &self.transport;
        QosKey::Tpdu.check(None, t.tpdu_size.map(u64::from))?;
        QosKey::Window.check(None, t.window.map(u64::from))?;
        QosKey::Msg.check(None, t.max_msg)?;
        QosKey::Outstanding.check(None, t.outstanding.map(u64::from))?;
        QosKey::Bucket.check(None, t.bucket.map(u64::from))?;
        QosKey::Delay.check(None, t.delay.map(u64::from))?;
        if self.aal == Aal::Aal0 {
            if let Some(key) = first_transport_key(t) {
                return Err(QosConflict::TransportOnAal0 { key });
            }
        }
        if t.kind == TransportKind::Bare {
            if let Some(service) = t.service {
                return Err(QosConflict::ServiceOnBare { service });
            }
            if let Some(key) = first_natm_transport_key(t) {
                return Err(QosConflict::TransportOnBare { key });
            }
        }
        if t.smoothing == Some(Smoothing::Cell)
            && self
                .tx
                .pcr
                .or(self.tx.max_pcr)
                .or(self.tx.min_pcr)
                .is_none()
        {
            return Err(QosConflict::SmoothingWithoutRate);
        }
        let leaky = match t.flow {
            Some(flow) => flow == FlowKind::LeakyBucket,
            None => self.service() == Service::Guaranteed,
        };
        if t.delay.is_some() && !leaky {
            return Err(QosConflict::DelayWithoutLeakyBucket);
        }
        if let Some(bucket) = t.bucket {
            if !leaky {
                return Err(QosConflict::BucketWithoutLeakyBucket);
            }
            let tpdu = t.tpdu_size.unwrap_or(DEFAULT_TPDU_SIZE);
            if bucket < tpdu {
                return Err(QosConflict::BucketBelowTpdu { bucket, tpdu });
            }
        }
        Ok(())
    }

    fn validate_preset(&self, service: Service) -> Result<(), QosConflict> {
        let class = self.class();
        if class != preset_class(service) {
            return Err(QosConflict::PresetClass { service, class });
        }
        let t = &self.transport;
        let ec_ok = match t.error_control {
            None => true,
            Some(on) => on == (service == Service::Reliable),
        };
        if !ec_ok {
            return Err(QosConflict::PresetOverride {
                service,
                key: QosKey::Ec,
            });
        }
        let flow_ok = match (service, t.flow) {
            (_, None) => true,
            (Service::Guaranteed, Some(f)) => f == FlowKind::LeakyBucket,
            (Service::Reliable, Some(f)) => {
                matches!(f, FlowKind::PacketPair | FlowKind::Window | FlowKind::Abr)
            }
            (Service::BestEffort, Some(f)) => f == FlowKind::None,
        };
        if !flow_ok {
            return Err(QosConflict::PresetOverride {
                service,
                key: QosKey::Flow,
            });
        }
        if service == Service::Guaranteed {
            for (dir, tp) in [(Direction::Tx, &self.tx), (Direction::Rx, &self.rx)] {
                if tp.is_used() && tp.pcr.is_none() && tp.max_pcr.is_none() && tp.min_pcr.is_none()
                {
                    return Err(QosConflict::GuaranteedWithoutRate { dir });
                }
            }
        }
        Ok(())
    }
}

fn default_flow(service: Service, round_robin_network: bool) -> FlowKind {
    match service {
        Service::Guaranteed => FlowKind::LeakyBucket,
        Service::Reliable if round_robin_network => FlowKind::PacketPair,
        Service::Reliable => FlowKind::Window,
        Service::BestEffort => FlowKind::None,
    }
}

/// The first transport setting that is present, in print order; a named service counts
/// as `flow` (it chooses the flow control).
fn first_transport_key(t: &TransportParams) -> Option<QosKey> {
    if t.kind == TransportKind::Bare {
        return Some(QosKey::Transport);
    }
    first_natm_transport_key(t)
}

/// The first setting of natm's own transport that is present, in print order; a named
/// service counts as `flow`.
fn first_natm_transport_key(t: &TransportParams) -> Option<QosKey> {
    let set = [
        (QosKey::Flow, t.flow.is_some() || t.service.is_some()),
        (QosKey::Ec, t.error_control.is_some()),
        (QosKey::Mode, t.semantics.is_some()),
        (QosKey::Tpdu, t.tpdu_size.is_some() || t.tpdu_auto),
        (QosKey::Window, t.window.is_some()),
        (QosKey::Msg, t.max_msg.is_some()),
        (QosKey::Outstanding, t.outstanding.is_some()),
        (QosKey::Prio, t.priority.is_some()),
        (QosKey::Bucket, t.bucket.is_some()),
        (QosKey::Delay, t.delay.is_some()),
        (QosKey::Encrypt, t.encrypt.is_some()),
    ];
    set.into_iter().find(|&(_, on)| on).map(|(key, _)| key)
}

fn validate_traffic(dir: Direction, tp: &TrafficParams) -> Result<(), QosConflict> {
    QosKey::MaxSdu.check(Some(dir), tp.max_sdu.map(u64::from))?;
    QosKey::Mbs.check(Some(dir), tp.mbs.map(u64::from))?;
    for (key, rate) in [
        (QosKey::MaxPcr, tp.max_pcr),
        (QosKey::Pcr, tp.pcr),
        (QosKey::Scr, tp.scr),
    ] {
        key.check_rate(Some(dir), rate)?;
    }
    for (key, rate) in [(QosKey::MinPcr, tp.min_pcr), (QosKey::Scr, tp.scr)] {
        if rate == Some(Rate::Max) {
            return Err(QosConflict::MaxNotAllowed { dir, key });
        }
    }
    if tp.class != TrafficClass::Vbr {
        for (key, set) in [
            (QosKey::Scr, tp.scr.is_some()),
            (QosKey::Mbs, tp.mbs.is_some()),
        ] {
            if set {
                return Err(QosConflict::VbrOnly {
                    dir,
                    key,
                    class: tp.class,
                });
            }
        }
    }
    let ordered = [
        (QosKey::MinPcr, tp.min_pcr, QosKey::Pcr, tp.pcr),
        (QosKey::MinPcr, tp.min_pcr, QosKey::MaxPcr, tp.max_pcr),
        (QosKey::Pcr, tp.pcr, QosKey::MaxPcr, tp.max_pcr),
        (QosKey::Scr, tp.scr, QosKey::Pcr, tp.pcr),
        (QosKey::Scr, tp.scr, QosKey::MaxPcr, tp.max_pcr),
    ];
    for (low, low_rate, high, high_rate) in ordered {
        if let (Some(low_rate), Some(high_rate)) = (low_rate, high_rate) {
            if low_rate > high_rate {
                return Err(QosConflict::RateOrder {
                    dir,
                    low,
                    low_rate,
                    high,
                    high_rate,
                });
            }
        }
    }
    Ok(())
}
