//! Flow control, separate from error control (seed 000 §3, second principle; §5.3.3).
//!
//! A [`FlowController`] decides *when* the next TPDU of a VC may go; SMART decides
//! *which* TPDUs go. The PSB asks [`FlowController::poll_send`] before every
//! transmission, tells it what was sent and what the ACKs said, and never lets a loss
//! reach the controller except through [`FlowController::on_loss`], which the
//! rate-based controllers ignore (packet-pair: "losses do not cut the rate").
//!
//! One algorithm per file: [`leaky_bucket`] (open loop, guaranteed VCs, seed 000
//! §5.3.4), [`packet_pair`] with its [`estimator`] (feedback on round-robin networks,
//! §5.3.3), [`window`] (feedback on FIFO networks), and [`gcra`], the cell-rate
//! policing and shaping arithmetic a switch uses too, and [`cell_pacer`], which
//! spaces a VC's cells one by one (seed 001 §7's cell-level smoothing). [`build`] makes the one a
//! [`FlowKind`] names; [`contract`] holds any of them to a guaranteed VC's traffic
//! contract (the PSB wraps every sender's controller in it).

use std::time::Duration;

use crate::time::Instant;
pub use crate::wire::qos::FlowKind;
use crate::wire::rm::RmCell;

pub mod abr;
pub mod aggregation;
pub mod cell_pacer;
pub mod contract;
pub mod delivery;
pub mod estimator;
pub mod gcra;
pub mod leaky_bucket;
pub mod packet_pair;
pub mod window;

pub use abr::{Abr, AbrConfig, AbrStats};
pub use cell_pacer::{CellPacer, PacerStats};
pub use contract::{Contract, Contracted};
pub use estimator::{FuzzyEstimator, MedianFilter};
pub use gcra::{Conformance, DualGcra, Gcra, GcraBucket};
pub use leaky_bucket::LeakyBucket;
pub use packet_pair::{PacketPair, PacketPairConfig};
pub use window::{DynamicWindow, WindowConfig};

/// What [`build`] and [`default_kind`] need to know of a VC: the part of the transport's
/// configuration that concerns flow control (`TransportConfig` converts into it), so
/// that flow control depends on the wire formats only and the transport on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowParams {
    /// Reserved or capped rate, payload bits per second (0: none).
    pub rate: u64,
    /// Floor for feedback control, payload bits per second (0: none).
    pub min_rate: u64,
    /// Leaky bucket depth in bytes, when the QoS set one.
    pub bucket: Option<u32>,
    /// TPDU payload size in bytes.
    pub tpdu_size: u32,
    /// Error-control window in TPDUs.
    pub window: u32,
    /// Whether the VC retransmits (SMART).
    pub error_control: bool,
}

/// The flow controller of `kind` for a VC configured by `cfg`, with these defaults:
///
/// * [`FlowKind::LeakyBucket`] — rate `cfg.rate`, depth
///   [`leaky_bucket::DEFAULT_DEPTH_TPDUS`] TPDUs of `cfg.tpdu_size` or
///   [`leaky_bucket::TIMER_SLACK`] of the rate, whichever is more
///   ([`LeakyBucket::for_tpdu`]);
/// * [`FlowKind::PacketPair`] — [`PacketPairConfig::for_tpdu`] of `cfg.tpdu_size`
///   (α = 0.5, B = 4 TPDUs), λ capped at `cfg.rate` and floored at `cfg.min_rate` when
///   they are set;
/// * [`FlowKind::Window`] — [`WindowConfig::for_window`] of `cfg.window` (start at 1
///   TPDU, ssthresh half the window);
/// * [`FlowKind::Abr`] — [`Abr`] with TM 4.0's defaults ([`AbrConfig::new`]), PCR
///   `cfg.rate` and MCR `cfg.min_rate`, converted to the cells of `cfg.tpdu_size`
///   TPDUs; with no rate, PCR [`abr::DEFAULT_PCR`] and ICR [`abr::DEFAULT_ICR_BPS`];
/// * [`FlowKind::None`] — [`NoFlow`].
///
/// For other parameters construct the controller directly and hand it to
/// [`crate::transport::Psb::connect`].
pub fn build(kind: FlowKind, cfg: impl Into<FlowParams>) -> Box<dyn FlowController> {
    let cfg = cfg.into();
    match kind {
        FlowKind::None => Box::new(NoFlow),
        FlowKind::LeakyBucket => match cfg.bucket {
            Some(depth) => Box::new(LeakyBucket::new(cfg.rate, u64::from(depth))),
            None => Box::new(LeakyBucket::for_tpdu(cfg.rate, cfg.tpdu_size)),
        },
        FlowKind::PacketPair => {
            let mut pp = PacketPairConfig::for_tpdu(cfg.tpdu_size);
            pp.max_rate_bps = cfg.rate;
            if cfg.min_rate > 0 {
                pp.min_rate_bps = cfg.min_rate;
            }
            Box::new(PacketPair::new(pp))
        }
        FlowKind::Window => Box::new(DynamicWindow::new(WindowConfig::for_window(cfg.window))),
        FlowKind::Abr => {
            let cells = |bps: u64| abr::cells_per_s(bps, cfg.tpdu_size);
            let mut c = if cfg.rate > 0 {
                AbrConfig::new(cells(cfg.rate), cells(cfg.min_rate))
            } else {
                // No PCR asked: PCR/16 would be 625 Mbit/s, far above most ports for
                // the round trip before the first BRM; one BRM lifts ACR to the ER.
                let mut c = AbrConfig::new(abr::DEFAULT_PCR, cells(cfg.min_rate));
                c.icr = cells(abr::DEFAULT_ICR_BPS).max(c.mcr);
                c
            };
            c.icr = c.icr.min(c.pcr);
            Box::new(Abr::new(c, cfg.tpdu_size))
        }
    }
}

/// The flow control seed 000 gives each service (§2, §5.3.3–5.3.4): error-controlled
/// (reliable) VCs get feedback control — packet-pair where every switch on the path
/// serves VCs round-robin, else the dynamic window; a VC with a reserved rate and no
/// retransmission (guaranteed) is shaped by a leaky bucket; anything else (best effort)
/// gets none.
pub fn default_kind(cfg: impl Into<FlowParams>, round_robin_network: bool) -> FlowKind {
    let cfg = cfg.into();
    if cfg.error_control {
        if round_robin_network {
            FlowKind::PacketPair
        } else {
            FlowKind::Window
        }
    } else if cfg.rate > 0 {
        FlowKind::LeakyBucket
    } else {
        FlowKind::None
    }
}

/// The answer to "may a TPDU go now?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// Send now.
    Now,
    /// Not before this instant (shaping or pacing); the PSB arms a timer.
    At(Instant),
    /// Not until an ACK opens the window.
    Blocked,
}

/// What one ACK told the sender, for the flow controller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AckSample {
    /// When the ACK arrived.
    pub now: Instant,
    /// RTT measured from the echoed timestamp.
    pub rtt: Duration,
    /// Smallest RTT seen on the VC.
    pub min_rtt: Duration,
    /// TPDUs newly covered by the cumulative ack.
    pub newly_acked: u32,
    /// Payload bytes newly covered by the cumulative ack or the SMART bitmap.
    pub newly_acked_bytes: u64,
    /// Sequence number that caused the ACK.
    pub seq: u64,
    /// Cumulative ack after this ACK: every TPDU with a sequence number below it has
    /// been received. Same number space as `seq` (NewReno's recovery test, specs §9.1).
    pub cum_ack: u64,
    /// The TPDU that caused the ACK was the first member of a packet pair.
    pub pair_first: bool,
    /// The TPDU that caused the ACK was the second member of a packet pair.
    pub pair_second: bool,
    /// The TPDU that caused the ACK was a retransmission.
    pub retransmission: bool,
    /// TPDUs sent and not yet acknowledged, after this ACK.
    pub in_flight: u32,
    /// Payload bytes of the TPDU that caused the ACK.
    pub bytes: u32,
    /// When that TPDU reached the receiver, in nanoseconds of the receiver's clock
    /// modulo 2³² (the ACK's `tsval`); `None` from a receiver that does not say. Only
    /// differences between two stamps mean anything.
    pub arrived: Option<u32>,
}

/// A flow-control algorithm for one VC (sans-IO: time is an argument).
pub trait FlowController: std::fmt::Debug + Send {
    /// May a TPDU of `bytes` payload go now, with `in_flight` TPDUs unacknowledged?
    fn poll_send(&mut self, now: Instant, in_flight: u32, bytes: usize) -> Permit;
    /// A TPDU of `bytes` payload went on the wire.
    fn on_sent(&mut self, now: Instant, bytes: usize, retransmission: bool);
    /// An ACK arrived.
    fn on_ack(&mut self, sample: &AckSample);
    /// SMART found a hole (a TPDU lost); `in_flight` TPDUs are outstanding and
    /// `next_seq` is the first sequence number never sent (so `next_seq - 1` is the
    /// highest sent, NewReno's recovery point, specs §9.1). Called while the ACK that
    /// revealed the hole is processed, before that ACK's [`FlowController::on_ack`].
    fn on_loss(&mut self, now: Instant, in_flight: u32, next_seq: u64);
    /// The retransmission timer expired.
    fn on_timeout(&mut self, now: Instant, in_flight: u32);
    /// Whether the next two new TPDUs should go back to back as a packet pair.
    fn wants_pair(&self) -> bool {
        false
    }
    /// How many new TPDUs go back to back as one packet train, its first and last
    /// marked (a pair is a train of two); 1: no trains.
    fn train_len(&self) -> u32 {
        if self.wants_pair() {
            2
        } else {
            1
        }
    }
    /// Congestion window in TPDUs, if the algorithm keeps one.
    fn window(&self) -> Option<f64> {
        None
    }
    /// Current sending rate (payload bit/s), if the algorithm sets one.
    fn rate_bps(&self) -> Option<f64> {
        None
    }
    /// Whether the application is sending faster than its contract (seed 003 "over rate").
    fn over_rate(&self) -> bool {
        false
    }
    /// Change the rate within the bounds agreed at setup (seed 003 `set_qos`).
    fn set_rate(&mut self, _bps: u64) {}
    /// The error-control window is now `tpdus` TPDUs (the path cut TPDUs smaller and
    /// the window keeps its bytes, `transport::ec_window`): an algorithm that caps
    /// its own window by it takes the new cap.
    fn set_window_limit(&mut self, _tpdus: u32) {}
    /// A forward RM cell due now, for an algorithm that sends them (ABR, TM 4.0
    /// source rule 3); the sender puts it on the VC as an RM frame.
    fn poll_rm(&mut self, _now: Instant) -> Option<RmCell> {
        None
    }
    /// A backward RM cell of this VC came back (ABR source rule 8).
    fn on_backward_rm(&mut self, _now: Instant, _cell: &RmCell) {}
    /// A short name for reports.
    fn name(&self) -> &'static str;
}

/// No flow control: TPDUs go as fast as the error-control window allows.
#[derive(Debug, Clone, Default)]
pub struct NoFlow;

impl FlowController for NoFlow {
    fn poll_send(&mut self, _now: Instant, _in_flight: u32, _bytes: usize) -> Permit {
        Permit::Now
    }
    fn on_sent(&mut self, _now: Instant, _bytes: usize, _retransmission: bool) {}
    fn on_ack(&mut self, _sample: &AckSample) {}
    fn on_loss(&mut self, _now: Instant, _in_flight: u32, _next_seq: u64) {}
    fn on_timeout(&mut self, _now: Instant, _in_flight: u32) {}
    fn name(&self) -> &'static str {
        "none"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The transport's presets are the realistic inputs (tests may look upward).
    use crate::transport::TransportConfig;

    #[test]
    fn build_picks_the_algorithm_with_its_defaults() {
        let g = TransportConfig::guaranteed(2_000_000);
        let lb = build(FlowKind::LeakyBucket, &g);
        assert_eq!(lb.name(), "leaky-bucket");
        assert_eq!(lb.rate_bps(), Some(2e6));
        let mut r = TransportConfig::reliable();
        r.rate = 50_000_000;
        let mut pp = build(FlowKind::PacketPair, &r);
        assert!(pp.wants_pair());
        assert_eq!(pp.poll_send(Instant::ZERO, 0, 4096), Permit::Now);
        let w = build(FlowKind::Window, &r);
        assert_eq!(w.window(), Some(1.0));
        assert_eq!(build(FlowKind::None, &r).name(), "none");
    }

    #[test]
    fn default_kind_follows_the_service() {
        let r = TransportConfig::reliable();
        assert_eq!(default_kind(&r, true), FlowKind::PacketPair);
        assert_eq!(default_kind(&r, false), FlowKind::Window);
        let g = TransportConfig::guaranteed(1_000_000);
        assert_eq!(default_kind(&g, true), FlowKind::LeakyBucket);
        assert_eq!(default_kind(&g, false), FlowKind::LeakyBucket);
        let b = TransportConfig::best_effort();
        assert_eq!(default_kind(&b, true), FlowKind::None);
    }
}
