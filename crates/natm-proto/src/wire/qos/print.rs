//! The canonical text form of a [`Qos`]: what `Display` prints.
//!
//! Canonical means: lower-case keywords; the class (or the named service) first, then
//! `aal0` only when it is not the default AAL5; parameters shared by both directions
//! before the transport parameters, then `tx:`/`rx:` groups only for what differs; each
//! list in a fixed order; rates in bits per second with the largest exact unit, byte
//! counts with the largest exact unit, delays in the largest exact of `s`, `ms`, `us`.
//! Every value prints to exactly one string, so `print(parse(s))` is a fixed point.

use std::fmt;

use super::{
    Aal, Direction, FlowKind, Qos, QosKey, Rate, Semantics, Service, Smoothing, TrafficClass,
    TrafficParams, TransportKind, TransportParams,
};

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rate::Max => f.write_str("max"),
            Rate::Bps(bps) => {
                let (value, unit) =
                    largest_unit(bps, &[(1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")]);
                write!(f, "{value}{unit}bps")
            }
        }
    }
}

/// `value` as `n` × the largest of `units` (largest first) that divides it exactly.
fn largest_unit(value: u64, units: &[(u64, &'static str)]) -> (u64, &'static str) {
    if value != 0 {
        for &(scale, name) in units {
            if value.is_multiple_of(scale) {
                return (value / scale, name);
            }
        }
    }
    (value, "")
}

fn bytes(value: u64) -> String {
    let (n, unit) = largest_unit(
        value,
        &[
            (1 << 30, "Gi"),
            (1_000_000_000, "G"),
            (1 << 20, "Mi"),
            (1_000_000, "M"),
            (1 << 10, "Ki"),
            (1_000, "k"),
        ],
    );
    format!("{n}{unit}")
}

fn micros(value: u32) -> String {
    let (n, unit) = largest_unit(u64::from(value), &[(1_000_000, "s"), (1_000, "ms")]);
    if unit.is_empty() {
        format!("{n}us")
    } else {
        format!("{n}{unit}")
    }
}

/// The printed value of traffic parameter `key`, if set.
fn traffic_value(tp: &TrafficParams, key: QosKey) -> Option<String> {
    match key {
        QosKey::MaxPcr => tp.max_pcr.map(|r| r.to_string()),
        QosKey::Pcr => tp.pcr.map(|r| r.to_string()),
        QosKey::MinPcr => tp.min_pcr.map(|r| r.to_string()),
        QosKey::Scr => tp.scr.map(|r| r.to_string()),
        QosKey::Mbs => tp.mbs.map(|n| n.to_string()),
        QosKey::MaxCdv => tp.max_cdv.map(micros),
        QosKey::MaxSdu => tp.max_sdu.map(|n| n.to_string()),
        _ => None,
    }
}

/// The printed value of transport parameter `key`, if set.
fn transport_value(t: &TransportParams, key: QosKey) -> Option<String> {
    match key {
        QosKey::Flow => t.flow.map(|v| v.to_string()),
        QosKey::Ec => t
            .error_control
            .map(|on| if on { "on" } else { "off" }.to_string()),
        QosKey::Encrypt => t
            .encrypt
            .map(|on| if on { "on" } else { "off" }.to_string()),
        QosKey::Mode => t.semantics.map(|v| v.to_string()),
        QosKey::Tpdu if t.tpdu_auto => Some("auto".to_string()),
        QosKey::Tpdu => t.tpdu_size.map(|n| n.to_string()),
        QosKey::Window => t.window.map(|n| n.to_string()),
        QosKey::Msg => t.max_msg.map(bytes),
        QosKey::Outstanding => t.outstanding.map(|n| n.to_string()),
        QosKey::Prio => t.priority.map(|n| n.to_string()),
        QosKey::Bucket => t.bucket.map(|n| bytes(u64::from(n))),
        QosKey::Delay => t.delay.map(micros),
        QosKey::Smooth => t.smoothing.map(|v| v.to_string()),
        // The default, natm's transport, is never printed.
        QosKey::Transport => (t.kind == TransportKind::Bare).then(|| t.kind.to_string()),
        _ => None,
    }
}

/// A QoS shows as its canonical text (which parses back to it): a grant or an offer
/// in a log or a test's message reads as it was written, not as 30 fields.
impl fmt::Debug for Qos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Qos({self:?})", self = self.to_string())
    }
}

impl fmt::Display for Qos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.transport.service {
            Some(service) => write!(f, "{service}")?,
            None => write!(f, "{}", self.class())?,
        }
        if self.aal != Aal::default() {
            write!(f, ",{}", self.aal)?;
        }

        let mut items: Vec<String> = Vec::new();
        let both = self.tx.is_used() && self.rx.is_used();
        let used = if self.tx.is_used() {
            &self.tx
        } else {
            &self.rx
        };
        for key in QosKey::TRAFFIC {
            let value = traffic_value(used, key);
            if value.is_some() && (!both || value == traffic_value(&self.rx, key)) {
                items.extend(value.map(|v| format!("{key}={v}")));
            }
        }
        for key in QosKey::TRANSPORT {
            items.extend(transport_value(&self.transport, key).map(|v| format!("{key}={v}")));
        }
        for (prefix, this, other) in [("tx:", &self.tx, &self.rx), ("rx:", &self.rx, &self.tx)] {
            if !this.is_used() {
                items.push(format!("{prefix}none"));
            } else if both {
                let mut first = true;
                for key in QosKey::TRAFFIC {
                    let value = traffic_value(this, key);
                    if value.is_some() && value != traffic_value(other, key) {
                        let prefix = if first { prefix } else { "" };
                        first = false;
                        items.extend(value.map(|v| format!("{prefix}{key}={v}")));
                    }
                }
            }
        }
        if !items.is_empty() {
            write!(f, ":{}", items.join(","))?;
        }
        Ok(())
    }
}

impl fmt::Display for Aal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Aal::Aal0 => "aal0",
            Aal::Aal5 => "aal5",
        })
    }
}

impl fmt::Display for TrafficClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrafficClass::None => "none",
            TrafficClass::Ubr => "ubr",
            TrafficClass::Cbr => "cbr",
            TrafficClass::Vbr => "vbr",
            TrafficClass::Abr => "abr",
            TrafficClass::Any => "any",
        })
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Service::Guaranteed => "guaranteed",
            Service::Reliable => "reliable",
            Service::BestEffort => "best-effort",
        })
    }
}

impl fmt::Display for FlowKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FlowKind::None => "none",
            FlowKind::LeakyBucket => "leaky-bucket",
            FlowKind::PacketPair => "packet-pair",
            FlowKind::Window => "window",
            FlowKind::Abr => "abr",
        })
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportKind::Natm => "natm",
            TransportKind::Bare => "none",
        })
    }
}

impl fmt::Display for Smoothing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Smoothing::Frame => "frame",
            Smoothing::Cell => "cell",
        })
    }
}

impl fmt::Display for Semantics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Semantics::Message => "message",
            Semantics::Stream => "stream",
        })
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Tx => "tx",
            Direction::Rx => "rx",
        })
    }
}

impl fmt::Display for QosKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
