//! A guaranteed natm VC with `flow=none` through this switch's policer (issue 34):
//! natm-proto's sender keeps the contract the call was admitted with, so the policer
//! the switch sets up for that call drops nothing. Virtual time: every frame the PSB
//! emits (data and SYNC probes) is fed to the switch at the instant it left.

use crate::common::*;
use bytes::Bytes;
use natm_proto::flow;
use natm_proto::sig::call::traffic_descriptor;
use natm_proto::time::Instant;
use natm_proto::transport::{Psb, SendError, TransportConfig};
use natm_proto::wire::qos::Qos;
use natm_proto::wire::vcframe;
use natm_switch::control::{call_contract, DEFAULT_CDVT};
use natm_switch::{Contract, CrossConnect, PortConfig, PortId, PortUnit, Switch, VcAddr};

/// OC-3's line rate.
const LINE: u64 = 155_520_000;

/// Offer `total` bytes as fast as the sender takes them; every frame the sender
/// emitted, with its time.
fn emitted(cfg: TransportConfig, total: usize) -> Vec<(Instant, Bytes)> {
    let mut now = Instant::from_nanos(1_000_000_000);
    let f = flow::build(cfg.flow, &cfg);
    let mut psb = Psb::established_sender(cfg, f, now);
    let chunk = vec![7u8; 16 * 1024];
    let (mut offered, mut out) = (0, Vec::new());
    loop {
        while offered < total {
            match psb.send(&chunk, true) {
                Ok(n) => offered += n,
                Err(SendError::WindowFull | SendError::OverRate) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        while let Some(t) = psb.poll_transmit(now) {
            out.push((now, Bytes::from(t.to_vec())));
        }
        if offered >= total && psb.send_buffered() == 0 {
            return out;
        }
        let next = psb
            .poll_timeout()
            .expect("a shaped sender waits for a timer");
        now = now.max(next);
        psb.handle_timeout(now);
    }
}

/// Frames out and cells the policer dropped, through a switch whose input VC has
/// `contract`.
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
    h.feed(sent.iter().map(|(t, f)| {
        (
            *t,
            PortId(0),
            Input::Frame(vcframe::Repr::data(0, 32), f.clone()),
        )
    }));
    h.drain();
    let c = h.sw.stat().vcs[0].counters;
    (c.frames_out, c.dropped.policing)
}

/// `natm call --qos cbr:pcr=20Mbps,flow=none` (the command, at 20 Mbit/s):
/// 4 MB through the policer of the call, nothing dropped, at the PCR; the same VC
/// without its contract (what the host did before) is cut by the same policer.
#[test]
fn a_cbr_vc_with_flow_none_passes_its_calls_policer() {
    let q: Qos = "cbr:pcr=20Mbps,flow=none".parse().unwrap();
    let cfg = TransportConfig::from_qos(&q, false).unwrap();
    let td = traffic_descriptor(&q, u32::try_from(LINE / 424).unwrap());
    let contract = call_contract(&td, cfg.tpdu_size, true, DEFAULT_CDVT);
    let total = 4 << 20;
    let sent = emitted(cfg.clone(), total);
    let (frames, dropped) = through_switch(contract, &sent);
    assert_eq!((frames, dropped), (sent.len() as u64, 0));
    let span = (sent[sent.len() - 1].0 - sent[0].0).as_secs_f64();
    let bps = total as f64 * 8.0 / span;
    assert!(bps < 20e6 * 1.02, "{bps} bit/s");
    assert!(bps > 20e6 * 0.95, "{bps} bit/s");
    let uncontracted = emitted(
        TransportConfig {
            contract: None,
            ..cfg
        },
        total,
    );
    let (frames, dropped) = through_switch(contract, &uncontracted);
    eprintln!(
        "contract kept: {} frames, 0 policed, {bps:.0} bit/s; without it: {frames} of {} \
         frames out, {dropped} cells policed",
        sent.len(),
        uncontracted.len()
    );
    assert!(
        dropped > 0 && frames < uncontracted.len() as u64 / 2,
        "{frames} of {} frames out, {dropped} cells policed",
        uncontracted.len()
    );
}
