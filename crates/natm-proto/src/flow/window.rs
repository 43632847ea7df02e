//! Feedback flow control for FIFO networks: a Reno-like dynamic window (seed 001 §4.6,
//! specs §9.1).
//!
//! seed 000 §5.3.3: "If the network does not support round-robin scheduling, the
//! transport layer is forced to use a dynamic-window flow control scheme similar to
//! TCP flow control ... unlike TCP, we use the SMART retransmission strategy". Flow and
//! error control are coupled here (a loss halves the window) — the price of a FIFO
//! network; SMART reports each hole exactly, so Reno's three-duplicate-ack inflation
//! is not needed (specs §9.1).

use super::{AckSample, FlowController, Permit};
use crate::time::Instant;

/// Knobs of [`DynamicWindow`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowConfig {
    /// Initial window, TPDUs. seed 001 §4.6: "The flow-control window size starts at
    /// 1" (default 1; RFC 5681 would allow 2–4).
    pub initial_window: f64,
    /// Initial slow-start threshold, TPDUs. seed 001 §4.6: "initialized to half the
    /// largest allowed window size" (default `max_window / 2`).
    pub initial_ssthresh: f64,
    /// Largest window, TPDUs: the error-control window (the PSB bounds in-flight by it
    /// too; the cap stops the window growing while the application is idle).
    pub max_window: f64,
}

impl WindowConfig {
    /// seed 001 §4.6 defaults for an error-control window of `max_window` TPDUs.
    pub fn for_window(max_window: u32) -> Self {
        let max = f64::from(max_window.max(1));
        WindowConfig {
            initial_window: 1.0,
            initial_ssthresh: (max / 2.0).max(2.0),
            max_window: max,
        }
    }
}

impl Default for WindowConfig {
    /// [`WindowConfig::for_window`] of the transport's default window, 256 TPDUs.
    fn default() -> Self {
        WindowConfig::for_window(256)
    }
}

/// Reno-like congestion window in TPDUs, with NewReno's recovery point.
#[derive(Debug, Clone)]
pub struct DynamicWindow {
    cfg: WindowConfig,
    cwnd: f64,
    ssthresh: f64,
    /// In recovery until the cumulative ack reaches this (the first sequence number
    /// not sent when the loss was found): one reduction per window of data.
    recover: Option<u64>,
}

impl DynamicWindow {
    /// A window in slow start from `cfg.initial_window`.
    pub fn new(cfg: WindowConfig) -> Self {
        let max = cfg.max_window.max(1.0);
        DynamicWindow {
            cwnd: cfg.initial_window.clamp(1.0, max),
            ssthresh: cfg.initial_ssthresh.max(2.0),
            recover: None,
            cfg,
        }
    }

    /// The congestion window, TPDUs (fractional in congestion avoidance).
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    /// The slow-start threshold, TPDUs.
    pub fn ssthresh(&self) -> f64 {
        self.ssthresh
    }

    /// Whether a loss is being recovered (further holes do not shrink the window).
    pub fn in_recovery(&self) -> bool {
        self.recover.is_some()
    }

    /// TPDUs that may be in flight: ⌊cwnd⌋, at least one.
    pub fn allowed(&self) -> u32 {
        self.cwnd.floor().max(1.0) as u32
    }
}

impl FlowController for DynamicWindow {
    /// specs §9.1: "send allowed iff (next_seq − cum − 1) < min(cwnd, W)"; the PSB
    /// applies W, the in-flight count excludes TPDUs SMART reported received.
    fn poll_send(&mut self, _now: Instant, in_flight: u32, _bytes: usize) -> Permit {
        if in_flight < self.allowed() {
            Permit::Now
        } else {
            Permit::Blocked
        }
    }

    fn on_sent(&mut self, _now: Instant, _bytes: usize, _retransmission: bool) {}

    fn on_ack(&mut self, s: &AckSample) {
        if let Some(recover) = self.recover {
            // specs §9.1: "cum ack > recover: leave recovery (cwnd stays ssthresh)";
            // the ACK that ends recovery does not also grow the window.
            if s.cum_ack >= recover {
                self.recover = None;
                self.cwnd = self.ssthresh;
            }
            return;
        }
        for _ in 0..s.newly_acked {
            if self.cwnd < self.ssthresh {
                // Slow start: +1 per TPDU acked, so the window doubles every RTT.
                self.cwnd += 1.0;
            } else {
                // Congestion avoidance: +1/cwnd per TPDU, about +1 per RTT.
                self.cwnd += 1.0 / self.cwnd;
            }
        }
        self.cwnd = self.cwnd.min(self.cfg.max_window.max(1.0));
    }

    /// seed 001 §4.6: "In case of a loss, the window size and the slow-start threshold
    /// are halved" — halved from the flight, once per window (specs §9.1).
    fn on_loss(&mut self, _now: Instant, in_flight: u32, next_seq: u64) {
        if self.recover.is_some() {
            return;
        }
        self.ssthresh = (f64::from(in_flight) / 2.0).max(2.0);
        self.cwnd = self.ssthresh;
        self.recover = Some(next_seq);
    }

    /// specs §9.1 (Reno): ssthresh = max(flight/2, 2), window back to one TPDU. This
    /// departs from seed 001 §4.6 ("the window size is also halved on the occurrence of
    /// a timeout"): a timeout means the ACK clock is lost, and with SMART it is rare.
    fn on_timeout(&mut self, _now: Instant, in_flight: u32) {
        self.ssthresh = (f64::from(in_flight) / 2.0).max(2.0);
        self.cwnd = 1.0;
        self.recover = None;
    }

    fn window(&self) -> Option<f64> {
        Some(self.cwnd)
    }

    /// The cap follows the error-control window in TPDUs of the current size; a
    /// smaller cap trims the window at once.
    fn set_window_limit(&mut self, tpdus: u32) {
        self.cfg.max_window = f64::from(tpdus.max(1));
        self.cwnd = self.cwnd.min(self.cfg.max_window);
    }

    fn name(&self) -> &'static str {
        "window"
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cap_follows_the_error_control_window() {
        let mut w = DynamicWindow::new(WindowConfig::for_window(256));
        for _ in 0..200_000 {
            w.on_ack(&ack(1, 0));
        }
        assert_eq!(w.allowed(), 256);
        // The path cut TPDUs to 1,436 octets: 730 of them are the window's bytes.
        w.set_window_limit(730);
        for _ in 0..200_000 {
            w.on_ack(&ack(1, 0));
        }
        assert!(w.allowed() > 256 && w.allowed() <= 730, "{}", w.allowed());
        w.set_window_limit(100);
        assert_eq!(w.allowed(), 100);
    }

    use super::*;
    use std::time::Duration;

    fn ack(newly_acked: u32, cum_ack: u64) -> AckSample {
        AckSample {
            now: Instant::ZERO,
            rtt: Duration::from_millis(10),
            min_rtt: Duration::from_millis(10),
            newly_acked,
            newly_acked_bytes: u64::from(newly_acked) * 1000,
            seq: cum_ack.saturating_sub(1),
            cum_ack,
            pair_first: false,
            pair_second: false,
            retransmission: false,
            in_flight: 0,
            bytes: 1000,
            arrived: None,
        }
    }

    /// specs §9.1 trace (transport_ref.py): IW 2, ssthresh 16.
    #[test]
    fn reproduces_the_reno_trace() {
        let mut w = DynamicWindow::new(WindowConfig {
            initial_window: 2.0,
            initial_ssthresh: 16.0,
            max_window: 256.0,
        });
        let t = Instant::ZERO;
        assert_eq!((w.cwnd(), w.ssthresh()), (2.0, 16.0));
        for k in 0..14 {
            w.on_ack(&ack(1, k + 1));
        }
        assert_eq!((w.cwnd(), w.ssthresh()), (16.0, 16.0));
        w.on_ack(&ack(1, 15));
        assert_eq!(w.cwnd(), 16.0625);
        // SMART finds a hole with 16 in flight; highest sent 40 (next_seq 41).
        w.on_loss(t, 16, 41);
        assert_eq!((w.cwnd(), w.ssthresh()), (8.0, 8.0));
        assert!(w.in_recovery());
        // A second hole in the same window: no second reduction.
        w.on_loss(t, 16, 42);
        assert_eq!((w.cwnd(), w.ssthresh()), (8.0, 8.0));
        // ACKs below the recovery point neither grow nor end recovery.
        w.on_ack(&ack(3, 30));
        assert_eq!(w.cwnd(), 8.0);
        assert!(w.in_recovery());
        // The cumulative ack passes the recovery point (everything ≤ 40 received).
        w.on_ack(&ack(11, 41));
        assert!(!w.in_recovery());
        assert_eq!((w.cwnd(), w.ssthresh()), (8.0, 8.0));
        w.on_timeout(t, 8);
        assert_eq!((w.cwnd(), w.ssthresh()), (1.0, 4.0));
    }

    /// seed 001 §4.6: start at 1, double every RTT below ssthresh, then +1 per RTT.
    #[test]
    fn slow_start_doubles_per_rtt_then_grows_by_one() {
        let mut w = DynamicWindow::new(WindowConfig {
            initial_window: 1.0,
            initial_ssthresh: 8.0,
            max_window: 64.0,
        });
        let mut per_rtt = Vec::new();
        let mut cum = 0;
        for _rtt in 0..9 {
            // One RTT: send a window, every TPDU is acked.
            let n = w.allowed();
            per_rtt.push(n);
            for _ in 0..n {
                cum += 1;
                w.on_ack(&ack(1, cum));
            }
        }
        // Σ 1/cwnd over a window is a little under 1, so ⌊cwnd⌋ stays at 8 once.
        assert_eq!(per_rtt, [1, 2, 4, 8, 8, 9, 10, 11, 12]);
    }

    #[test]
    fn poll_send_blocks_at_the_window_and_losses_halve_the_flight() {
        let mut w = DynamicWindow::new(WindowConfig::for_window(32));
        assert_eq!(w.ssthresh(), 16.0);
        let t = Instant::ZERO;
        assert_eq!(w.poll_send(t, 0, 1000), Permit::Now);
        assert_eq!(w.poll_send(t, 1, 1000), Permit::Blocked);
        for k in 1..=1000 {
            w.on_ack(&ack(1, k));
        }
        // Grows no further than the error-control window.
        assert_eq!(w.cwnd(), 32.0);
        assert_eq!(w.poll_send(t, 31, 1000), Permit::Now);
        assert_eq!(w.poll_send(t, 32, 1000), Permit::Blocked);
        // A small flight: ssthresh never below 2.
        w.on_loss(t, 3, 100);
        assert_eq!((w.cwnd(), w.ssthresh()), (2.0, 2.0));
        assert_eq!(w.window(), Some(2.0));
    }
}
