//! The error-control window kept in bytes (issue 30).
//!
//! The handshake agrees a window of `window` TPDUs of `tpdu_size` octets (seed 000
//! §5.3.2: SMART's window, in TPDUs). When the path cuts TPDUs smaller than the
//! agreed size (its MTU, `SendHalf::set_path_cap`), the sender keeps the window's
//! bytes rather than its count: `window × tpdu_size / cut` TPDUs may be in flight. It
//! says so in the window field of every data TPDU, and the receiver, whose buffer is
//! sized in the same bytes, advertises and accepts in those TPDUs. Departure from the
//! paper, whose TPDUs never changed size on a VC.

/// The smallest TPDU the window scales for: below it the count stops growing (and
/// the window's bytes shrink). An IPv4 path of the minimum MTU (576 octets) still
/// carries 512 octets a TPDU behind natm's headers.
pub const MIN_SCALED_TPDU: usize = 512;

/// The most TPDUs a window may scale to: the agreed bytes in [`MIN_SCALED_TPDU`]s,
/// and what a 16-bit window field can say.
pub fn window_tpdus_cap(window: u32, tpdu_size: usize) -> u32 {
    let bytes = u64::from(window).saturating_mul(tpdu_size as u64);
    let by_floor = bytes / MIN_SCALED_TPDU as u64;
    // Never below the agreed count (which the handshake bounds by the field).
    by_floor.min(u64::from(u16::MAX)).max(u64::from(window)) as u32
}

/// The agreed window (`window` TPDUs of `tpdu_size` octets) in TPDUs of `cut`
/// octets: at least `window`, at most [`window_tpdus_cap`].
pub fn scaled_window(window: u32, tpdu_size: usize, cut: usize) -> u32 {
    if cut >= tpdu_size || cut == 0 {
        return window;
    }
    let bytes = u64::from(window).saturating_mul(tpdu_size as u64);
    let n = bytes / cut as u64;
    n.min(u64::from(window_tpdus_cap(window, tpdu_size)))
        .max(u64::from(window)) as u32
}

/// The TPDU size a sender whose data TPDUs say `sender_window` is cutting to, as the
/// receiver of an agreed `window` × `tpdu_size` works it out: the agreed bytes over
/// that count, rounded up, between [`MIN_SCALED_TPDU`] and `tpdu_size`.
pub fn implied_cut(window: u32, tpdu_size: usize, sender_window: u32) -> usize {
    if sender_window <= window {
        return tpdu_size;
    }
    let bytes = u64::from(window).saturating_mul(tpdu_size as u64);
    let cut = bytes.div_ceil(u64::from(sender_window));
    (cut as usize)
        .max(MIN_SCALED_TPDU.min(tpdu_size))
        .min(tpdu_size.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_cut_keeps_the_windows_bytes() {
        // 256 TPDUs of 4 KiB (1 MiB) on a 1,500-octet path: 730 TPDUs of 1,436.
        assert_eq!(scaled_window(256, 4096, 1436), 730);
        assert_eq!(scaled_window(256, 4096, 4096), 256);
        // Never below the agreed count, never past the floor's count.
        assert_eq!(scaled_window(256, 4096, 8192), 256);
        assert_eq!(scaled_window(256, 4096, 1), 2048);
        assert_eq!(scaled_window(60_000, 4096, 512), u32::from(u16::MAX));
    }

    #[test]
    fn the_receiver_recovers_the_cut_from_the_count() {
        for cut in [512, 1000, 1436, 2048, 4095, 4096] {
            let w = scaled_window(256, 4096, cut);
            let back = implied_cut(256, 4096, w);
            // Rounded up: the receiver never counts more TPDUs into its buffer than
            // fit.
            assert!(
                back >= cut && back - cut < cut / 100 + 2,
                "{cut} → {w} → {back}"
            );
        }
        assert_eq!(implied_cut(256, 4096, 256), 4096);
        assert_eq!(implied_cut(256, 4096, 100), 4096);
        assert_eq!(implied_cut(256, 4096, 65_535), 512);
    }

    proptest::proptest! {
        /// Whatever a (possibly hostile) sender writes in its window field, the
        /// receiver's view stays within its buffer's terms.
        #[test]
        fn implied_cut_is_bounded(window in 1u32..65_536, tpdu in 1usize..65_536, w in 0u32..65_536) {
            let c = implied_cut(window, tpdu, w);
            proptest::prop_assert!(c >= 1 && c <= tpdu.max(1));
            let s = scaled_window(window, tpdu, c);
            proptest::prop_assert!(s >= window && s <= window_tpdus_cap(window, tpdu).max(window));
        }
    }
}
