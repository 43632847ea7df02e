//! Fuzzes the link/IP/UDP parser of `natm capture` (`wire::pcap::link`) with both
//! framings, and the VC header parser behind it as the capture chains them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::pcap::link::{udp_datagram, Framing, UDP_HEADER_LEN};
use natm_proto::wire::vcframe::Repr;

fuzz_target!(|data: &[u8]| {
    for framing in [Framing::Ethernet, Framing::RawIp] {
        match udp_datagram(framing, data) {
            Ok(d) => {
                assert!(d.payload.len() + UDP_HEADER_LEN <= data.len());
                let _ = Repr::parse_bytes(d.payload);
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
});
