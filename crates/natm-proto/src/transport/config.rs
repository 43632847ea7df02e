//! What configures one simplex VC's transport, and how a QoS maps onto it.

use thiserror::Error;

use super::{FlowKind, RttConfig, Semantics};
use crate::wire::qos::{Aal, Qos, Rate};
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
    /// Payload bytes per TPDU (seed 000 §5.3.1: 4 KiB default).
    pub tpdu_size: u32,
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
    /// the paper's rule exactly).
    pub detect_lost_retx: bool,
    /// CONN-REQ attempts before the connection fails.
    pub connect_attempts: u32,
    /// CLOSE attempts before the close is abandoned.
    pub close_attempts: u32,
    /// Consecutive retransmission timeouts before the VC is aborted (peer dead).
    pub max_timeouts: u32,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig::reliable()
    }
}

impl TransportConfig {
    const DEFAULT_TPDU: u32 = 4096;
    const DEFAULT_WINDOW: u32 = 256;

    fn base() -> Self {
        let window = Self::DEFAULT_WINDOW;
        let buf = (window * Self::DEFAULT_TPDU) as usize;
        TransportConfig {
            error_control: false,
            flow: FlowKind::None,
            semantics: Semantics::Message,
            tpdu_size: Self::DEFAULT_TPDU,
            window,
            snd_buf: 2 * buf,
            rcv_buf: buf,
            max_msg: u64::MAX,
            outstanding: u32::MAX,
            rate: 0,
            bucket: None,
            min_rate: 0,
            cookie: None,
            isn: 0,
            rtt: RttConfig::default(),
            reorder_threshold: 1,
            detect_lost_retx: false,
            connect_attempts: 6,
            close_attempts: 6,
            max_timeouts: 10,
        }
    }

    /// Reliable service: SMART and feedback flow control (seed 000 §2).
    pub fn reliable() -> Self {
        TransportConfig {
            error_control: true,
            flow: FlowKind::PacketPair,
            ..Self::base()
        }
    }

    /// Guaranteed service: leaky-bucket shaping at `rate` payload bit/s, no
    /// retransmission.
    pub fn guaranteed(rate: u64) -> Self {
        TransportConfig {
            flow: FlowKind::LeakyBucket,
            rate,
            min_rate: rate,
            ..Self::base()
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
    /// A direction marked unused: natm's connections carry data both ways (bare
    /// AAL5 VCs excepted).
    #[error(
        "{0}:none (a one-way VC) is not supported: natm's connections carry data both ways; \
         drop {0}:none, or give that direction its own traffic, e.g. {0}:pcr=1Mbps"
    )]
    OneWay(&'static str),
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
        // A bare AAL5 VC may well be one way (Linux's svc_recv sends nothing back).
        if !q.rx().is_used() && !q.is_bare() {
            return Err(ConfigError::OneWay("rx"));
        }
        if !q.tx().is_used() && !q.is_bare() {
            return Err(ConfigError::OneWay("tx"));
        }
        let t = q.resolved_transport(round_robin_network);
        let tx = q.tx();
        let bps = |r: Option<Rate>| r.and_then(|r| r.bits_per_sec());
        // VBR sustains the SCR and bursts up to MBS cells (a token bucket of that depth).
        let rate = bps(tx.scr).or(bps(tx.pcr)).or(bps(tx.max_pcr)).unwrap_or(0);
        let mbs_bytes = tx
            .mbs
            .map(|cells| cells.saturating_mul(crate::wire::cell::PAYLOAD_LEN as u32));
        let base = TransportConfig::best_effort();
        let window = t.window.unwrap_or(base.window);
        let buf = window as usize * t.tpdu_size as usize;
        let cfg = TransportConfig {
            error_control: t.error_control,
            flow: t.flow,
            semantics: t.semantics,
            tpdu_size: t.tpdu_size,
            window,
            snd_buf: 2 * buf,
            rcv_buf: buf,
            max_msg: t.max_msg.unwrap_or(u64::MAX),
            outstanding: t.outstanding.unwrap_or(u32::MAX),
            rate,
            bucket: t.bucket.or(mbs_bytes),
            min_rate: bps(tx.min_pcr).unwrap_or(if t.flow == FlowKind::LeakyBucket {
                rate
            } else {
                0
            }),
            ..base
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl From<&TransportConfig> for crate::flow::FlowParams {
    fn from(c: &TransportConfig) -> Self {
        crate::flow::FlowParams {
            rate: c.rate,
            min_rate: c.min_rate,
            bucket: c.bucket,
            tpdu_size: c.tpdu_size,
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
    fn aal0_and_one_way_qos_are_refused_clearly() {
        let cfg = |t: &str| TransportConfig::from_qos(&t.parse::<Qos>().unwrap(), true);
        let e = cfg("cbr:tx:pcr=10Mbps,rx:none").unwrap_err().to_string();
        assert!(e.contains("rx:none") && e.contains("not supported"), "{e}");
        let e = cfg("ubr:tx:none,rx:pcr=1Mbps").unwrap_err().to_string();
        assert!(e.contains("tx:none"), "{e}");
        let e = cfg("ubr,aal0").unwrap_err().to_string();
        assert!(e.contains("aal0") && e.contains("AAL5"), "{e}");
        assert!(cfg("cbr:tx:pcr=10Mbps,rx:pcr=1Mbps").is_ok());
        assert!(cfg("reliable").is_ok());
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
