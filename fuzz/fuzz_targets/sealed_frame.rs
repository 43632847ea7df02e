//! Fuzzes the sealed-TPDU opener (issue 16) with arbitrary frames: nothing panics,
//! nothing opens without the key (a random frame never carries a valid tag), an
//! error leaves the replay window as it was (a frame sealed afterwards still opens),
//! and a frame sealed from the input's TPDU opens to exactly that TPDU once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::seal::{packet_number, OpenError, Opener, Sealer, OVERHEAD, SEALED};
use natm_proto::wire::tpdu::HEADER_LEN;

const KEY: [u8; 32] = [0x42; 32];

fuzz_target!(|data: &[u8]| {
    let mut opener = Opener::new(&KEY);
    // The input as a received frame: never opens (no tag can be guessed), never
    // panics; what the packet number check says agrees with `packet_number`.
    let mut frame = data.to_vec();
    match opener.open(&mut frame) {
        Ok(_) => panic!("a frame opened without being sealed with the key"),
        Err(OpenError::Truncated(n)) => assert!(n < HEADER_LEN + OVERHEAD),
        Err(OpenError::NotSealed) => assert_eq!(data[1] & SEALED, 0),
        Err(OpenError::Replayed(_)) => panic!("nothing was accepted yet"),
        Err(OpenError::BadTag) => assert!(packet_number(data).is_ok()),
    }
    assert!(opener.open_detached(data).is_err());

    // The input as a clear TPDU, sealed and opened: the same bytes come back, once.
    if data.len() < HEADER_LEN {
        return;
    }
    let sealer = Sealer::new(&KEY);
    let mut sealed = data.to_vec();
    sealed.extend_from_slice(&[0; OVERHEAD]);
    sealer.seal(&mut sealed).unwrap();
    let (head, payload) = opener.open_detached(&sealed).unwrap();
    assert_eq!(head[1], data[1] & !SEALED);
    assert_eq!(&head[..1], &data[..1]);
    assert_eq!(&head[2..], &data[2..HEADER_LEN]);
    assert_eq!(payload, &data[HEADER_LEN..]);
    assert_eq!(
        opener.open_detached(&sealed).unwrap_err(),
        OpenError::Replayed(0)
    );
});
