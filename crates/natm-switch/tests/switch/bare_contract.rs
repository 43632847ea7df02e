//! A bare (`transport=none`) VBR sender of natm-proto through this switch's policer
//! (issue 34): what `endpoint::BareTx` sends for `vbr:pcr=…,scr=…,mbs=…` conforms to
//! the contract the switch polices a signalled call with ([`call_contract`]), and to a
//! PVC's plain TM 4.0 dual GCRA whose CDVT covers one frame at the PCR. Virtual time:
//! the sender's departures are fed to the switch as frames at those instants.

use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use natm_proto::endpoint::{BareConfig, BareTx};
use natm_proto::sig::call::traffic_descriptor;
use natm_proto::time::Instant;
use natm_proto::wire::qos::{Direction, Qos};
use natm_proto::wire::vcframe;
use natm_switch::control::{call_contract, DEFAULT_CDVT};
use natm_switch::{Contract, CrossConnect, PortConfig, PortId, PortUnit, Switch, VcAddr};

/// OC-3's line rate.
const LINE: u64 = 155_520_000;

/// `n` SDUs of `len` bytes queued at once on a sender of `cfg`, driven by its own
/// timers: (departure, SDU) of each.
fn departures(cfg: BareConfig, n: usize, len: usize) -> Vec<(Instant, Bytes)> {
    let mut tx = BareTx::new(BareConfig {
        queue_bytes: n * len,
        ..cfg
    });
    for i in 0..n {
        tx.send(&sdu(32, u32::try_from(i).unwrap(), len)).unwrap();
    }
    let mut now = Instant::ZERO;
    let mut out = Vec::new();
    while out.len() < n {
        while let Some(s) = tx.poll_transmit(now) {
            out.push((now, s));
        }
        if out.len() < n {
            let t = tx.poll_timeout().expect("the shaper holds the rest");
            assert!(t > now);
            now = t;
        }
    }
    out
}

/// The frames through a switch whose input VC has `contract`: (frames out, cells the
/// policer dropped).
fn through_switch(contract: Contract, sent: &[(Instant, Bytes)]) -> (u64, u64) {
    let mut sw = Switch::new();
    let inp = sw
        .add_port(PortConfig::new(LINE).unit(PortUnit::Frames))
        .unwrap();
    let out = sw
        .add_port(PortConfig::new(LINE).unit(PortUnit::Frames))
        .unwrap();
    sw.connect(
        CrossConnect::vc(VcAddr::new(inp, 0, 32), VcAddr::new(out, 0, 40)),
        contract,
    )
    .unwrap();
    let mut h = Harness::new(sw);
    h.feed(sent.iter().map(|(t, s)| {
        (
            *t,
            PortId(0),
            Input::Frame(vcframe::Repr::data(0, 32), s.clone()),
        )
    }));
    h.drain();
    let c = h.sw.stat().vcs[0].counters;
    (c.frames_out, c.dropped.policing)
}

/// The case: a bare `vbr:pcr=4Mbps,scr=2Mbps,mbs=200` call sending 4 KiB
/// SDUs as fast as it may. The switch polices it with the signalled call's contract
/// and drops nothing; shaped at the PCR alone, as before issue 34, it ran at twice its
/// SCR and the same policer dropped most of it.
#[test]
fn a_bare_vbr_sender_passes_the_switchs_policer_untouched() {
    let q: Qos = "vbr:pcr=4Mbps,scr=2Mbps,mbs=200,transport=none"
        .parse()
        .unwrap();
    let cfg = BareConfig::from_qos(&q, Direction::Tx);
    assert_eq!(cfg.scr, Some((2_000_000, 200)));
    let td = traffic_descriptor(&q, u32::try_from(LINE / 424).unwrap());
    let tpdu = q.resolved_transport(false).tpdu_size;
    let contract = call_contract(&td, tpdu, true, DEFAULT_CDVT);
    assert!(contract.scr.is_some(), "{contract:?}");
    let n = 300; // 1.2 MB: 5 s at the SCR
    let sent = departures(cfg, n, 4096);
    let span = (sent[n - 1].0 - sent[0].0).as_secs_f64();
    let bps = (n - 1) as f64 * 4096.0 * 8.0 / span;
    assert!(bps < 2_000_000.0 * 1.01, "{bps} bit/s of payload");
    assert!(bps > 2_000_000.0 * 0.95, "{bps} bit/s of payload");
    assert_eq!(through_switch(contract, &sent), (n as u64, 0));
    // Shaped at the PCR alone: the 3.92 Mbit/s, and the policer cuts it.
    let pcr_only = departures(BareConfig { scr: None, ..cfg }, n, 4096);
    let (frames, dropped) = through_switch(contract, &pcr_only);
    assert!(
        frames < n as u64 * 3 / 4 && dropped > 1000,
        "{frames} frames out, {dropped} cells policed"
    );
}

/// A PVC's plain dual GCRA (TM 4.0, cells/s, no inflation), with the least CDVT any
/// frame-at-a-time sender needs — one frame's cells at the PCR (the SCR test gets BT
/// plus the same CDVT, as the switch's policer sets it): nothing dropped.
#[test]
fn a_bare_vbr_sender_conforms_to_a_pvcs_tight_dual_gcra() {
    let (pcr, scr, mbs) = (10_000u64, 2_500u64, 300u32); // cells/s
    let cfg = BareConfig {
        max_sdu: 9188,
        pcr_bps: Some(pcr * 384),
        scr: Some((scr * 384, mbs)),
        queue_bytes: 0,
    };
    let len = 4000; // 84 cells with the AAL5 trailer
    let cells = (len + 8u64).div_ceil(48);
    let frame_at_pcr = Duration::from_micros(100) * u32::try_from(cells - 1).unwrap();
    let contract = Contract::vbr(pcr, scr, mbs).with_cdvt(frame_at_pcr);
    let n = 200;
    let sent = departures(cfg, n, usize::try_from(len).unwrap());
    assert_eq!(through_switch(contract, &sent), (n as u64, 0));
    // The long run is the SCR: 84 cells per frame at 2,500 cells/s.
    let gap = sent[n - 1].0 - sent[n - 2].0;
    assert_eq!(gap, Duration::from_micros(400) * 84);
}
