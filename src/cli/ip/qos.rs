//! A policy class's QoS with the VC's MTU in it, and an incoming call's QoS back to
//! a class and an MTU.

use anyhow::anyhow;
use natm::wire::qos::Qos;
use natm_proto::ip::llc::HEADER_LEN;
use natm_proto::ip::policy::Policy;

/// `qos` offering `mtu`: the largest message (`msg=`, natm transport) or AAL5 SDU
/// (`max_sdu=`, bare AAL5) is the MTU and the LLC/SNAP header, as RFC 2225 §5.1 puts
/// the MTU in the AAL5 maximum SDU size of the SETUP.
pub(crate) fn with_mtu(qos: &str, mtu: u32) -> anyhow::Result<String> {
    let q: Qos = qos
        .parse()
        .map_err(|e: natm::wire::qos::QosParseError| anyhow!("{}", e.render(qos)))?;
    let sdu = mtu + HEADER_LEN as u32;
    let (aal, mut tx, mut rx, mut tp) = q.into_parts();
    if tp.kind == natm::wire::qos::TransportKind::Bare {
        tx.max_sdu = Some(sdu);
        rx.max_sdu = Some(sdu);
    } else {
        tp.max_msg = Some(u64::from(sdu));
    }
    let q = Qos::new(aal, tx, rx, tp).map_err(|e| anyhow!("{e}"))?;
    Ok(q.to_string())
}

/// The MTU an incoming call offers (none: RFC 2225's default applies) and its policy
/// class (none: a QoS this host's policy lacks; the VC only receives).
pub(crate) fn classify_call(policy: &Policy, q: &Qos) -> (Option<usize>, Option<u32>) {
    let (aal, mut tx, mut rx, mut tp) = q.into_parts();
    let offered = if tp.kind == natm::wire::qos::TransportKind::Bare {
        tx.max_sdu.or(rx.max_sdu)
    } else {
        tp.max_msg.and_then(|m| u32::try_from(m).ok())
    }
    .and_then(|s| s.checked_sub(HEADER_LEN as u32));
    tx.max_sdu = None;
    rx.max_sdu = None;
    tp.max_msg = None;
    let bare = Qos::new(aal, tx, rx, tp).ok().map(|q| q.to_string());
    let class = (0..policy.classes())
        .find(|&c| policy.qos(c).parse::<Qos>().ok().map(|q| q.to_string()) == bare);
    (class, offered)
}
