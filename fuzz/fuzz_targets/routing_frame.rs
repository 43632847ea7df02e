//! Fuzzes the switch's routing-channel frame parser (hello, PTSE, ack on VPI 0/VCI 18,
//! issue 33): whatever parses emits to the same octets, and a router fed the frame
//! on a trunk neither panics nor stops answering.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::time::Instant;
use natm_proto::wire::q2931::NodeId;
use natm_switch::routing::{Frame, Router, RoutingConfig};
use natm_switch::PortId;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Frame::parse(data) {
        assert_eq!(Frame::parse(&f.emit()), Ok(f));
    }
    let mut r = Router::new(RoutingConfig::lab(NodeId(1)));
    let t = Instant::from_nanos(1);
    r.add_trunk(t, PortId(1));
    r.handle_frame(t, PortId(1), data);
    r.handle_timeout(t);
    while r.poll_transmit().is_some() {}
    let _ = r.database();
});
