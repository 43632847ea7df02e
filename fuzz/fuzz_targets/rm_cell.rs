//! Fuzzes the ABR RM cell parser and the in-place edits a switch makes: no panic;
//! what parses emits back to the same fields; lowering ER never raises it and keeps
//! every other field; an input that does not parse is never changed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::rm::{lower_er, set_ci, Rate, RmCell};

fuzz_target!(|data: &[u8]| {
    let Some((&er_bits, cell)) = data.split_first() else {
        return;
    };
    let er = Rate::from_bits(u16::from(er_bits) << 7);
    let mut edited = cell.to_vec();
    match RmCell::parse(cell) {
        Ok(c) => {
            assert_eq!(RmCell::parse(&c.to_bytes()), Ok(c), "emit/parse identity");
            assert!(lower_er(&mut edited, er));
            let low = RmCell::parse(&edited).expect("an edited cell parses");
            assert!(low.er.cells() <= c.er.cells(), "ER raised");
            assert!(low.er == c.er || low.er == er, "ER is neither kept nor the new one");
            assert_eq!(RmCell { er: c.er, ..low }, c, "only ER changed");
            assert!(set_ci(&mut edited));
            assert!(RmCell::parse(&edited).expect("parses").ci);
        }
        Err(e) => {
            let _ = e.to_string();
            assert!(!lower_er(&mut edited, er));
            assert!(!set_ci(&mut edited));
            assert_eq!(edited, cell, "a cell that does not parse is left alone");
        }
    }
});
