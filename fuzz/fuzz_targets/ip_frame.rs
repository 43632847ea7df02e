//! Fuzzes what `natm ip` takes from the network and the interface: an LLC/SNAP frame
//! with an ATMARP packet (parse, and what parses re-emits to the same packet), an
//! IP packet's flow, its ICMP too-big answer and IPv4 fragments, and the policy text;
//! then feeds the bytes to a node and an ATMARP server as a hostile peer would.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::ip::arp::{ArpServer, SERVER_AGE};
use natm_proto::ip::atmarp::Repr;
use natm_proto::ip::node::{Node, NodeConfig};
use natm_proto::ip::packet::{fragment_v4, too_big, Flow};
use natm_proto::ip::policy::Policy;
use natm_proto::ip::{llc, packet};
use natm_proto::time::Instant;

fuzz_target!(|data: &[u8]| {
    if let Ok((_, body)) = llc::parse(data) {
        if let Ok(r) = Repr::parse(body) {
            let bytes = r.to_bytes().expect("a parsed packet re-emits");
            assert_eq!(Repr::parse(&bytes), Ok(r), "emit/parse round trip");
            let mut s = ArpServer::new(8, SERVER_AGE);
            let caller = "+4420001".parse().expect("address");
            let _ = s.handle(Instant::ZERO, caller, &r);
        }
    }
    if let Ok(flow) = Flow::parse(data) {
        assert!(flow.len <= data.len());
        let _ = too_big(data, 1280, flow.dst);
        if let Some(frags) = fragment_v4(data, 576) {
            assert!(frags.iter().all(|f| f.len() <= 576 && Flow::parse(f).is_ok()));
        }
    }
    let _ = packet::PacketError::Truncated(0);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Policy::parse(text, "best-effort");
    }
    let mut cfg = NodeConfig::new("+4420002".parse().expect("address"));
    cfg.ipv4 = Some("10.0.0.2".parse().expect("ip"));
    let mut node = Node::new(cfg, Policy::parse("", "ubr").expect("empty policy"), Instant::ZERO);
    node.handle_server_frame(Instant::ZERO, data);
    let vc = node.add_pvc(Instant::ZERO, "0.0.100".parse().expect("pvc"), 9180);
    let _ = node.handle_frame(Instant::ZERO, vc, data);
    node.handle_outbound(Instant::ZERO, data.to_vec());
    while node.poll_action().is_some() {}
});
