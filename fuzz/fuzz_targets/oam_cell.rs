//! Fuzzes the OAM loopback payload parser (and the unpadding of a path MTU probe):
//! no panic, and what parses emits back to
//! the same fields and answers to a parseable reply. On a sealed call (issue 31,
//! `wire::oam_auth`) no input is taken as the peer's unless the peer signed it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::cell::PAYLOAD_LEN;
use natm_proto::wire::oam::{answer, unpad, Loopback};
use natm_proto::wire::oam_auth::OamKeys;
use natm_proto::wire::seal::PathKeys;

fuzz_target!(|data: &[u8]| {
    // A path MTU probe's padding comes off only when it is all zeros.
    let cell = unpad(data);
    if cell.len() != data.len() {
        assert_eq!(cell.len(), PAYLOAD_LEN);
        assert!(data[PAYLOAD_LEN..].iter().all(|&b| b == 0));
        assert_eq!(Loopback::parse(cell).ok(), Loopback::parse(&data[..PAYLOAD_LEN]).ok());
    }
    match Loopback::parse(data) {
        Ok(l) => {
            assert_eq!(Loopback::parse(&l.to_bytes()), Ok(l), "emit/parse identity");
            let p: &[u8; 48] = data.try_into().expect("parsed, so 48 octets");
            let a = Loopback::parse(&answer(p)).expect("an answer parses");
            assert_eq!((a.request, a.tag, a.location), (false, l.tag, l.location));
            // The fuzzer does not know the keys: it never forges the peer's signature,
            // and what the peer signs always verifies.
            let keys = PathKeys {
                tx: [7; 32],
                rx: [9; 32],
            };
            let (mine, theirs) = (OamKeys::new(&keys), OamKeys::new(&keys.reversed()));
            assert!(!mine.verify(&l), "an input verified without the peer's key");
            assert!(mine.verify(&theirs.sign(l)));
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
