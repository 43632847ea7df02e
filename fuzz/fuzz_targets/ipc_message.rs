//! Fuzzes the app↔sigd IPC decoder: whole frames and a stream fed in pieces.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::ipc::{Decoder, Message};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((m, used))) = Message::decode(data) {
        assert!(used <= data.len());
        // QoS text is read into a typed `Qos` and written back canonical, so the
        // value round-trips, not always the bytes.
        let again = m.to_bytes();
        assert_eq!(
            Message::decode(&again).unwrap(),
            Some((m, again.len())),
            "decode/encode/decode identity"
        );
    }
    let mut d = Decoder::new();
    for chunk in data.chunks(7) {
        d.push(chunk);
        loop {
            match d.next_message() {
                Ok(Some(m)) => {
                    let _ = m.to_bytes();
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = (e.to_string(), e.cause());
                    return;
                }
            }
        }
    }
});
