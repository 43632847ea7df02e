//! Fuzzes the atmtcp stream decoder of `natm switch`'s atmtcp ports: any byte
//! stream, cut anywhere, gives the same messages or the same error, buffers at most
//! one message, and every data message re-emits to the octets it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_switchd::atmtcp::{emit_data, Decoder, Message, HEADER_LEN, MAX_LEN, MAX_VPI};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let whole = Decoder::new().handle_all(stream);
    let cut = usize::from(cut).min(stream.len());
    let mut d = Decoder::new();
    let split = d.handle_all(&stream[..cut]).and_then(|mut first| {
        assert!(d.buffered() <= HEADER_LEN + MAX_LEN);
        first.extend(d.handle_all(&stream[cut..])?);
        Ok(first)
    });
    assert_eq!(whole, split, "a cut in the stream changes nothing");
    assert!(d.buffered() <= HEADER_LEN + MAX_LEN);
    if let Ok(msgs) = whole {
        let mut again = Vec::new();
        for m in &msgs {
            if let Message::Data { vpi, vci, sdu } = m {
                assert!(u16::from(*vpi) <= MAX_VPI && (*vpi, *vci) != (0, 0));
                emit_data(u16::from(*vpi), *vci, sdu, &mut again).expect("it was read");
            }
        }
        let back = Decoder::new().handle_all(&again).expect("emitted, so valid");
        let data: Vec<_> = msgs
            .into_iter()
            .filter(|m| matches!(m, Message::Data { .. }))
            .collect();
        assert_eq!(back, data);
    }
});
