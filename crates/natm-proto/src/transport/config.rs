//! What configures one simplex VC's transport, and how a QoS maps onto it.

use std::time::Duration;

use thiserror::Error;

use super::{FlowKind, RttConfig, Semantics};
use crate::wire::qos::{Aal, Qos, Rate, TrafficClass};
use crate::wire::tpdu::MAX_PAYLOAD;

/// Everything that configures one simplex VC's transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// SMART error control on or off.
    pub error_control: bool,
    /// Flow-control algorithm (the sender's choice; the receiver learns it).
    pub flow: FlowKind,
    /// Message or stream semantics.
    pub semantics: Semantics,
    /// Payload bytes per TPDU (seed 000 §5.3.1: 4 KiB default); with
    /// [`TransportConfig::tpdu_adapt`], the largest the sender may choose (what the
    /// handshake offers and the receiver accepts).
    pub tpdu_size: u32,
    /// Adaptive TPDU size (issue 17): the sender picks each new TPDU's size between
    /// the floor and `tpdu_size` from the loss it measures ([`super::tpdu_size`]).
    /// `None`: every TPDU is `tpdu_size`. Only a VC with error control adapts.
    pub tpdu_adapt: Option<super::tpdu_size::TpduSizeConfig>,
    /// Error-control window in TPDUs; the receiver buffers at least this many.
    pub window: u32,
    /// Send buffer, bytes (seed 001 §6: the page pool writers sleep on).
    pub snd_buf: usize,
    /// Receive buffer, bytes.
    pub rcv_buf: usize,
    /// Largest message, bytes.
    pub max_msg: u64,
    /// Most messages outstanding in the send queue.
    pub outstanding: u32,
    /// Target rate, payload bit/s (0: none).
    pub rate: u64,
    /// Leaky-bucket depth in bytes (`None`: a few TPDUs).
    pub bucket: Option<u32>,
    /// The traffic contract the VC was admitted with (CBR, VBR), which the sender
    /// keeps whatever `flow` is ([`crate::flow::contract`], issue 34); `None`: no
    /// reservation.
    pub contract: Option<crate::flow::Contract>,
    /// Minimum acceptable rate, payload bit/s.
    pub min_rate: u64,
    /// The capability both ends hold; `None` on a listener adopts the caller's.
    pub cookie: Option<u32>,
    /// Initial sequence number.
    pub isn: u32,
    /// RTT estimator bounds.
    pub rtt: RttConfig,
    /// Holes are inferred lost only when S ≥ hole + threshold. 1 on ATM, which never
    /// reorders; 3 over UDP/IP (specs.md §7.2).
    pub reorder_threshold: u32,
    /// Detect lost retransmissions from ACK order (specs.md §7.2 refinement; off =
    /// the paper's rule exactly, which leaves a lost retransmission to the two-RTT
    /// head check). On by default.
    pub detect_lost_retx: bool,
    /// CONN-REQ attempts before the connection fails.
    pub connect_attempts: u32,
    /// CLOSE attempts before the close is abandoned.
    pub close_attempts: u32,
    /// Consecutive retransmission timeouts before the VC is aborted (peer dead).
    pub max_timeouts: u32,
    /// How often the sender of a VC that carries no ACKs (guaranteed, best effort)
    /// probes the round trip with a SYNC (seed 003); `None`: never. At least
    /// [`TransportConfig::MIN_SYNC_INTERVAL`].
    pub sync_interval: Option<Duration>,
    /// A point-to-multipoint VC (seed 000's multicast VCs, Q.2971): nothing travels
    /// back from its receivers, so neither end waits for an answer. The sender sends
    /// no SYNC, completes its close once the CLOSE is sent (no CLOSE-ACK can come) and
    /// refuses in-band QoS changes; a receiver sends nothing (no SYNC-ECHO, CLOSE-ACK,
    /// QOS-ACK or ABORT) and joins the stream where it finds it — a leaf added while
    /// the root sends takes the first TPDU it sees as the start, and the first whole
    /// message as its first. Only for VCs without acknowledgements (best effort,
    /// guaranteed).
    pub one_way: bool,
}

/// How long a leaky-bucket VC's send queue holds beyond its bucket, at the VC's rate,
/// unless the QoS says otherwise (`delay=`): what a blocking sender on a guaranteed VC
/// waits behind its own queue, at any rate.
pub const DEFAULT_SEND_DELAY: Duration = Duration::from_millis(20);

/// The send buffer of a leaky-bucket VC of `rate_bps` payload bit/s, bucket depth
/// `bucket` bytes and TPDUs of `tpdu_size` bytes: the bucket plus `delay` at the rate,
/// and at least one TPDU. A queue bounded in bytes alone would be bounded in time only
/// at one rate (seed 000 §2's guaranteed service promises a delay, not a buffer).
///
/// Departure from seed 001 §6, which sizes every VC's send buffer the same: a
/// guaranteed VC's queue drains at its reservation and no faster, so a fixed size
/// (2 × window × TPDU, 2 MiB) held 842 ms at 20 Mbit/s and 16.8 s at 1 Mbit/s. A
/// sender over its rate finds the queue full at once and blocks (or `try_send` says
/// so) instead of queueing seconds of data.
pub fn shaped_send_buffer(rate_bps: u64, bucket: u64, delay: Duration, tpdu_size: u32) -> usize {
    let in_flight = u128::from(rate_bps) * delay.as_nanos() / (8 * 1_000_000_000);
    let bytes = u128::from(bucket)
        .saturating_add(in_flight)
        .max(u128::from(tpdu_size));
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig::reliable()
    }
}

impl TransportConfig {
    const DEFAULT_TPDU: u32 = 4096;
    /// The SYNC probe interval of a VC without ACKs unless configured otherwise.
    pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(1);
    /// The shortest SYNC interval: a probe costs one TPDU each way, so at most 100
    /// round trips a second per VC (the receiver answers no faster either).
    pub const MIN_SYNC_INTERVAL: Duration = Duration::from_millis(10);
    /// Every VC's window but a reliable one's, unless its QoS names one (`window=`).
    pub const DEFAULT_WINDOW: u32 = 256;
    /// A reliable VC's window of 4 KiB TPDUs unless its QoS names one: 4 MiB (kept in
    /// bytes when the path cuts TPDUs smaller; [`TransportConfig::reliable_window`]
    /// for other sizes), what keeps a 20 ms path with 5 % loss at the link's rate: a
    /// hole at the head holds the window until it is repaired, and a retransmission
    /// lost there is found only once TPDUs sent after it are acknowledged (1 MiB: 0.91
    /// of TCP-BBR at 20 ms and 5 %; 4 MiB: 1.03, docs/PERFORMANCE.md, issue 30). It
    /// was 256 TPDUs while 4 KiB TPDUs were IP fragments on 1,500-octet paths: a
    /// window of datagrams cut short filled the receiving kernel's reassembly memory
    /// (4 MiB) for 30 s; TPDUs now fit the path
    /// (docs/decisions/0030-tpdus-fit-the-path.md).
    pub const RELIABLE_WINDOW: u32 = 1024;

    /// A reliable VC's window in TPDUs of `tpdu_size` unless its QoS names one:
    /// [`TransportConfig::RELIABLE_WINDOW`] TPDUs of 4 KiB in bytes, and never fewer
    /// than [`TransportConfig::DEFAULT_WINDOW`] TPDUs.
    pub fn reliable_window(tpdu_size: u32) -> u32 {
        let bytes = Self::RELIABLE_WINDOW * Self::DEFAULT_TPDU;
        (bytes / tpdu_size.max(1)).clamp(Self::DEFAULT_WINDOW, u32::from(u16::MAX))
    }

    fn base() -> Self {
        let window = Self::DEFAULT_WINDOW;
        let buf = (window * Self::DEFAULT_TPDU) as usize;
        TransportConfig {
            error_control: false,
            flow: FlowKind::None,
            semantics: Semantics::Message,
            tpdu_size: Self::DEFAULT_TPDU,
            tpdu_adapt: None,
            window,
            snd_buf: 2 * buf,
            rcv_buf: buf,
            max_msg: u64::MAX,
            outstanding: u32::MAX,
            rate: 0,
            bucket: None,
            contract: None,
            min_rate: 0,
            cookie: None,
            isn: 0,
            rtt: RttConfig::default(),
            reorder_threshold: 1,
            detect_lost_retx: true,
            connect_attempts: 6,
            close_attempts: 6,
            max_timeouts: 10,
            sync_interval: Some(Self::DEFAULT_SYNC_INTERVAL),
            one_way: false,
        }
    }

    /// Reliable service: SMART and feedback flow control (seed 000 §2), with a window
    /// of [`TransportConfig::RELIABLE_WINDOW`] TPDUs.
    pub fn reliable() -> Self {
        let window = Self::RELIABLE_WINDOW;
        let buf = (window * Self::DEFAULT_TPDU) as usize;
        TransportConfig {
            error_control: true,
            flow: FlowKind::PacketPair,
            window,
            snd_buf: 2 * buf,
            rcv_buf: buf,
            ..Self::base()
        }
    }

    /// Guaranteed service: leaky-bucket shaping at `rate` payload bit/s, no
    /// retransmission, and a CBR contract at `rate` that holds whatever `flow` is
    /// later set to; the send queue holds the default bucket plus
    /// [`DEFAULT_SEND_DELAY`] at the rate ([`shaped_send_buffer`]).
    pub fn guaranteed(rate: u64) -> Self {
        let base = Self::base();
        let bucket = crate::flow::LeakyBucket::default_depth(rate, base.tpdu_size);
        TransportConfig {
            flow: FlowKind::LeakyBucket,
            contract: Some(crate::flow::Contract::cbr(rate)),
            rate,
            min_rate: rate,
            snd_buf: shaped_send_buffer(rate, bucket, DEFAULT_SEND_DELAY, base.tpdu_size),
            ..base
        }
    }

    /// Best-effort service: neither error nor flow control.
    pub fn best_effort() -> Self {
        Self::base()
    }

    /// Check the configuration is usable; the error says which knob to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.tpdu_size == 0 || self.tpdu_size as usize > MAX_PAYLOAD {
            return Err(ConfigError::TpduSize(self.tpdu_size));
        }
        if self.window == 0 || self.window > u32::from(u16::MAX) {
            return Err(ConfigError::Window(self.window));
        }
        if self.error_control && self.rcv_buf < self.tpdu_size as usize {
            return Err(ConfigError::RcvBuf(self.rcv_buf, self.tpdu_size));
        }
        if self.snd_buf < self.tpdu_size as usize {
            return Err(ConfigError::SndBuf(self.snd_buf, self.tpdu_size));
        }
        if self.flow == FlowKind::LeakyBucket && self.rate == 0 {
            return Err(ConfigError::NoRate);
        }
        if self.rate != 0 && self.min_rate > self.rate {
            return Err(ConfigError::MinRate(self.min_rate, self.rate));
        }
        if self.outstanding == 0 {
            return Err(ConfigError::Outstanding);
        }
        if let Some(i) = self.sync_interval {
            if i < Self::MIN_SYNC_INTERVAL {
                return Err(ConfigError::SyncInterval(i));
            }
        }
        if self.one_way && self.acks() {
            return Err(ConfigError::OneWayAcks);
        }
        Ok(())
    }

    /// Whether the receiver must send ACKs.
    pub fn acks(&self) -> bool {
        self.error_control || self.flow.is_feedback()
    }
}

/// A transport configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// TPDU size out of range.
    #[error("TPDU size {0} is out of range: use 1..={MAX_PAYLOAD} bytes (4096 is the default)")]
    TpduSize(u32),
    /// Window out of range.
    #[error("error-control window {0} is out of range: use 1..=65535 TPDUs")]
    Window(u32),
    /// Receive buffer smaller than a TPDU.
    #[error("receive buffer of {0} bytes cannot hold one {1}-byte TPDU: raise rcv_buf")]
    RcvBuf(usize, u32),
    /// Send buffer smaller than a TPDU.
    #[error("send buffer of {0} bytes cannot hold one {1}-byte TPDU: raise snd_buf")]
    SndBuf(usize, u32),
    /// SYNC probes more often than the receiver answers.
    #[error("SYNC interval {0:?} is below the 10 ms minimum")]
    SyncInterval(Duration),
    /// Leaky bucket without a rate.
    #[error("leaky-bucket flow control needs a rate: give a pcr in the QoS")]
    NoRate,
    /// Minimum above target.
    #[error("minimum rate {0} bit/s is above the target rate {1} bit/s")]
    MinRate(u64, u64),
    /// Zero outstanding messages.
    #[error("most messages outstanding must be at least 1")]
    Outstanding,
    /// AAL0 (raw cells) asked for: the transport runs over AAL5 frames.
    #[error(
        "aal0 (raw cells) is not supported: natm's transport runs over AAL5 frames; drop aal0 from the QoS"
    )]
    Aal0,
    /// A point-to-multipoint VC with acknowledgements: nothing comes back from its
    /// receivers.
    #[error(
        "a point-to-multipoint VC carries no acknowledgements back: reliable service \
         (error control) and feedback flow control cannot run on it; use best-effort or \
         guaranteed"
    )]
    OneWayAcks,
}

impl TransportConfig {
    /// The transport configuration a QoS asks for (seed 003's per-connection
    /// parameters). `round_robin_network` picks packet-pair over the dynamic window
    /// for feedback flow control when the QoS does not name one. The target rate is
    /// the transmit PCR (or SCR for VBR), the minimum the transmit `min_pcr`.
    pub fn from_qos(q: &Qos, round_robin_network: bool) -> Result<TransportConfig, ConfigError> {
        // Refused here, where every connect and listen resolves its QoS, rather than
        // parsed and then silently ignored.
        if q.aal() == Aal::Aal0 {
            return Err(ConfigError::Aal0);
        }
        // seed 000 §5.3: the transport's VCs are simplex, and a direction marked
        // `none` carries no data (ulib refuses sends or receives on it). Its VC still
        // carries the transport's control TPDUs back (handshake, ACKs, CLOSE), as a
        // point-to-point ATM call always has a backward channel.
        let t = q.resolved_transport(round_robin_network);
        // A receive-only connection's VC is described by the direction it receives
        // (its flow control, window and buffers are the sender's); it has no contract
        // of its own to keep.
        let tx = if q.tx().is_used() { q.tx() } else { q.rx() };
        let bps = |r: Option<Rate>| r.and_then(|r| r.bits_per_sec());
        // VBR sustains the SCR and bursts up to MBS cells (a token bucket of that depth).
        let rate = bps(tx.scr).or(bps(tx.pcr)).or(bps(tx.max_pcr)).unwrap_or(0);
        let mbs_bytes = tx
            .mbs
            .map(|cells| cells.saturating_mul(crate::wire::cell::PAYLOAD_LEN as u32));
        // What sigd reserves (CBR, VBR) is a contract the sender keeps whatever its
        // flow control (issue 34); a rate of `max` is the link's and is not shaped.
        let pcr = bps(tx.pcr).or(bps(tx.max_pcr));
        let contract = match tx.class {
            TrafficClass::Cbr => pcr.map(|pcr| crate::flow::Contract {
                burst: t.bucket.map(u64::from),
                ..crate::flow::Contract::cbr(pcr)
            }),
            TrafficClass::Vbr => Some(crate::flow::Contract {
                pcr,
                scr: bps(tx.scr),
                burst: mbs_bytes.or(t.bucket).map(u64::from),
            })
            .filter(|c| c.reserved().is_some()),
            _ => None,
        }
        .filter(|_| q.tx().is_used());
        let window = t.window.unwrap_or(if t.error_control {
            TransportConfig::reliable_window(t.tpdu_size)
        } else {
            TransportConfig::DEFAULT_WINDOW
        });
        let buf = window as usize * t.tpdu_size as usize;
        let bucket = t.bucket.or(mbs_bytes);
        // A shaped VC's queue is bounded in time at its rate; any other VC's in bytes.
        let snd_buf = if t.flow == FlowKind::LeakyBucket && rate > 0 {
            let depth = bucket.map_or_else(
                || crate::flow::LeakyBucket::default_depth(rate, t.tpdu_size),
                u64::from,
            );
            let delay = t.delay.map_or(DEFAULT_SEND_DELAY, |us| {
                Duration::from_micros(u64::from(us))
            });
            shaped_send_buffer(rate, depth, delay, t.tpdu_size)
        } else {
            2 * buf
        };
        let cfg = TransportConfig {
            error_control: t.error_control,
            flow: t.flow,
            semantics: t.semantics,
            tpdu_size: t.tpdu_size,
            tpdu_adapt: (t.tpdu_adaptive && t.error_control).then(|| {
                super::tpdu_size::TpduSizeConfig {
                    floor: AUTO_TPDU_FLOOR.min(t.tpdu_size),
                    ..Default::default()
                }
            }),
            window,
            snd_buf,
            rcv_buf: buf,
            max_msg: t.max_msg.unwrap_or(u64::MAX),
            outstanding: t.outstanding.unwrap_or(u32::MAX),
            rate,
            bucket,
            contract,
            min_rate: bps(tx.min_pcr).unwrap_or(if t.flow == FlowKind::LeakyBucket {
                rate
            } else {
                0
            }),
            ..TransportConfig::best_effort()
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// The smallest TPDU an adaptive VC sends (`tpdu=auto`): seed 000 §5.3.1's 4 KiB.
pub const AUTO_TPDU_FLOOR: u32 = 4096;

impl From<&TransportConfig> for crate::flow::FlowParams {
    fn from(c: &TransportConfig) -> Self {
        crate::flow::FlowParams {
            rate: c.rate,
            min_rate: c.min_rate,
            bucket: c.bucket,
            // An adaptive VC's flow controller is sized for its floor: packet-pair's
            // queue setpoint is in TPDUs, and the smallest keeps the bottleneck queue
            // that of a fixed 4 KiB VC whatever the size.
            tpdu_size: c
                .tpdu_adapt
                .map_or(c.tpdu_size, |a| a.floor.min(c.tpdu_size)),
            window: c.window,
            error_control: c.error_control,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What parses but natm cannot carry is refused with what to change, not ignored.
    #[test]
    fn aal0_is_refused_clearly_and_simplex_qos_is_a_simplex_vc() {
        let cfg = |t: &str| TransportConfig::from_qos(&t.parse::<Qos>().unwrap(), true);
        // seed 000 §5.3: simplex VCs, each with its own QoS.
        let c = cfg("cbr:tx:pcr=10Mbps,rx:none").unwrap();
        assert_eq!(c.rate, 10_000_000);
        assert!(c.contract.is_some());
        // A receive-only end takes its VC's description from what it receives.
        let c = cfg("cbr:tx:none,rx:pcr=1Mbps").unwrap();
        assert_eq!((c.rate, c.contract), (1_000_000, None));
        let e = cfg("ubr,aal0").unwrap_err().to_string();
        assert!(e.contains("aal0") && e.contains("AAL5"), "{e}");
        assert!(cfg("cbr:tx:pcr=10Mbps,rx:pcr=1Mbps").is_ok());
        assert!(cfg("reliable").is_ok());
    }

    /// A guaranteed VC's send queue is its bucket plus the delay at its rate: the same
    /// time at every rate, not the same bytes (issue 17: 2 MiB held 16.8 s at 1 Mbit/s).
    #[test]
    fn a_shaped_send_queue_is_bounded_in_time_at_any_rate() {
        let cfg = |t: &str| TransportConfig::from_qos(&t.parse::<Qos>().unwrap(), true).unwrap();
        let drain = |c: &TransportConfig| c.snd_buf as f64 * 8.0 / c.rate as f64;
        // The default 20 ms beyond a bucket given in the QoS, at 1, 20 and 500 Mbit/s.
        for (rate, mbps) in [(1_000_000u64, 1), (20_000_000, 20), (500_000_000, 500)] {
            let c = cfg(&format!("cbr:pcr={mbps}Mbps,bucket=8Ki"));
            assert_eq!(
                c.snd_buf as u64,
                8192 + rate / 8 * 20 / 1000,
                "{mbps} Mbit/s"
            );
            let beyond_bucket = drain(&c) - 8192.0 * 8.0 / rate as f64;
            assert!(
                (beyond_bucket - 0.020).abs() < 1e-6,
                "{mbps}: {beyond_bucket}"
            );
        }
        // delay= sets it; the default bucket (4 TPDUs, or 2 ms of the rate) counts.
        let c = cfg("cbr:pcr=20Mbps,delay=5ms");
        assert_eq!(c.snd_buf, 4 * 4096 + 12_500);
        let c = cfg("cbr:pcr=1Gbps,delay=1ms");
        assert_eq!(c.snd_buf, 250_000 + 125_000);
        // VBR: the bucket is MBS cells, the rate the SCR.
        let c = cfg("vbr:pcr=20Mbps,scr=5Mbps,mbs=100,delay=10ms");
        assert_eq!(c.snd_buf, 4800 + 6250);
        // Never less than one TPDU, however slow the VC.
        let c = cfg("cbr:pcr=1kbps,tpdu=1024,bucket=1024,delay=1us");
        assert_eq!(c.snd_buf, 1024);
        c.validate().unwrap();
        // Other VCs keep a buffer in bytes.
        assert_eq!(cfg("reliable").snd_buf, 2 * 1024 * 4096);
        assert_eq!(cfg("ubr").snd_buf, 2 * 256 * 4096);
        // A reliable VC's window is 4 MiB unless its QoS names one (what a 20 ms path
        // with 5 % loss needs); the preset constructor agrees.
        let r = cfg("reliable");
        assert_eq!((r.window, r.rcv_buf), (1024, 4 << 20));
        assert_eq!(
            r,
            TransportConfig {
                cookie: None,
                ..TransportConfig::reliable()
            }
        );
        // In bytes whatever the TPDU, but never fewer than 256 TPDUs.
        assert_eq!(cfg("reliable:tpdu=1024").window, 4096);
        assert_eq!(cfg("reliable:tpdu=32768").window, 256);
        assert_eq!(cfg("reliable:window=1024").rcv_buf, 4 << 20);
        assert_eq!(cfg("reliable:window=64").window, 64);
        assert_eq!(cfg("ubr").window, 256);
        // The preset constructor agrees with the QoS text.
        assert_eq!(
            TransportConfig::guaranteed(20_000_000).snd_buf,
            cfg("cbr:pcr=20Mbps").snd_buf
        );
    }

    #[test]
    fn qos_text_maps_onto_the_transport() {
        let q: Qos = "cbr:pcr=20Mbps".parse().unwrap();
        let c = TransportConfig::from_qos(&q, true).unwrap();
        assert_eq!(
            (c.flow, c.error_control, c.rate),
            (FlowKind::LeakyBucket, false, 20_000_000)
        );
        let q: Qos = "reliable:flow=window,tpdu=8192".parse().unwrap();
        let c = TransportConfig::from_qos(&q, true).unwrap();
        assert_eq!(
            (c.flow, c.error_control, c.tpdu_size),
            (FlowKind::Window, true, 8192)
        );
        let q: Qos = "reliable".parse().unwrap();
        assert_eq!(
            TransportConfig::from_qos(&q, true).unwrap().flow,
            FlowKind::PacketPair
        );
        assert_eq!(
            TransportConfig::from_qos(&q, false).unwrap().flow,
            FlowKind::Window
        );
        let q: Qos = "vbr:pcr=20Mbps,scr=5Mbps,mbs=100".parse().unwrap();
        let c = TransportConfig::from_qos(&q, true).unwrap();
        assert_eq!((c.rate, c.bucket), (5_000_000, Some(4800)));
        let q: Qos = "ubr".parse().unwrap();
        let c = TransportConfig::from_qos(&q, true).unwrap();
        assert_eq!((c.flow, c.error_control), (FlowKind::None, false));
    }
}
