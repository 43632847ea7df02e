//! Fuzzes the QoS text parser: no input panics, an error's token sits at its position,
//! and anything that parses prints to text that parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::qos::Qos;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match text.parse::<Qos>() {
        Err(e) => {
            assert_eq!(
                text.get(e.pos..e.pos + e.token.len()),
                Some(e.token.as_str()),
                "error token not at its position"
            );
            let _ = (e.to_string(), e.render(text));
        }
        Ok(qos) => {
            let printed = qos.to_string();
            let again: Qos = printed.parse().expect("printed QoS must parse");
            assert_eq!(again, qos, "{text:?} printed as {printed:?}");
            assert_eq!(again.to_string(), printed, "printing is not a fixed point");
            let _ = (qos.service(), qos.resolved_transport(true));
        }
    }
});
