//! Sequence numbers: 64-bit inside the PSB, the low 32 bits on the wire.
//!
//! A window is far smaller than 2^31 TPDUs, so a 32-bit wire value expands to the
//! unique 64-bit value closest to what the receiver expects (as QUIC does for packet
//! numbers); a 1 GiB message of 4 KiB TPDUs never comes near a wrap, but a long-lived
//! VC can wrap many times.

/// The low 32 bits of `seq`, as carried in the TPDU header.
pub(crate) const fn to_wire(seq: u64) -> u32 {
    seq as u32
}

/// The 64-bit sequence number whose low 32 bits are `wire` and that is closest to
/// `expected`.
pub(crate) fn expand(wire: u32, expected: u64) -> u64 {
    const SPAN: u64 = 1 << 32;
    let candidate = (expected & !(SPAN - 1)) | u64::from(wire);
    if candidate + SPAN / 2 <= expected && candidate <= u64::MAX - SPAN {
        candidate + SPAN
    } else if candidate > expected + SPAN / 2 && candidate >= SPAN {
        candidate - SPAN
    } else {
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn expands_across_a_wrap() {
        assert_eq!(expand(5, 3), 5);
        assert_eq!(expand(0xFFFF_FFFE, 1 << 32), 0xFFFF_FFFE);
        assert_eq!(expand(2, 0xFFFF_FFFE), (1 << 32) + 2);
        assert_eq!(expand(0, 0), 0);
    }

    proptest! {
        #[test]
        fn expand_inverts_to_wire(expected in 0u64..(1 << 40), delta in -(1i64 << 30)..(1i64 << 30)) {
            let actual = (expected as i64 + delta).max(0) as u64;
            prop_assert_eq!(expand(to_wire(actual), expected), actual);
        }
    }
}
