//! A window lost whole behind a timeout's head: the sign of a path that shrank under a
//! running VC (RFC 8899 §4.3), one round trip after the first timeout instead of at
//! the second.
//!
//! A first timeout resends the head of the window; on a VC that searches its path the
//! engine sends it as cells that fit the base PLPMTU (`engine::path_probe`), which
//! cross any path. On a path that delivers in order, every TPDU sent before the firing
//! that arrived was acknowledged before the head's retransmission was, or by the same
//! cumulative ACK. So when the ACK that moves the cumulative ACK past the head was
//! caused by a TPDU sent after the firing and shows none of the TPDUs as long as the
//! head that left before the firing arrived (two or more), they were all lost: the
//! path no longer carries TPDUs of that size. Random loss shows this only when every
//! one of them is lost. Shorter TPDUs (a message's tail) may cross a shrunk path, and
//! are not counted either way.

use std::time::Duration;

use crate::time::Instant;

/// The fewest TPDUs lost behind the head that make a window lost whole.
pub(crate) const MIN_LOST: u32 = 2;

/// A first timeout's head is out: the ACK that moves the cumulative ACK past it judges
/// the window sent before the firing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeadOut {
    /// When the timeout fired.
    pub(crate) fired: Instant,
    /// The head's payload length: TPDUs this long or longer are judged.
    pub(crate) len: usize,
}

impl HeadOut {
    /// Whether a TPDU sent at `sent_at` with `len` octets of payload is of the window
    /// judged.
    pub(crate) fn judges(&self, sent_at: Instant, len: usize) -> bool {
        sent_at < self.fired && len >= self.len
    }

    /// The ACK that moves the cumulative ACK past the head, caused by a TPDU that left
    /// `rtt` before `now` (its echoed stamp): `behind` is each TPDU after the head
    /// still unacknowledged before it, as (sent at, payload length, arrived: SACKed
    /// or below the new cumulative ACK). Whether the window was lost whole.
    pub(crate) fn lost_whole(
        &self,
        now: Instant,
        rtt: Option<Duration>,
        behind: impl Iterator<Item = (Instant, usize, bool)>,
    ) -> bool {
        // An ACK caused by a TPDU sent before the firing: the path delivers, the
        // ACKs were late. Without an echoed stamp the cause is unknown.
        if rtt.is_none_or(|r| now < self.fired + r) {
            return false;
        }
        behind
            .filter(|&(at, len, _)| self.judges(at, len))
            .try_fold(0u32, |n, (_, _, arrived)| (!arrived).then_some(n + 1))
            .is_some_and(|n| n >= MIN_LOST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(n * 1_000_000)
    }

    const FIRED: u64 = 50;

    fn head() -> HeadOut {
        HeadOut {
            fired: ms(FIRED),
            len: 1_400,
        }
    }

    #[test]
    fn nothing_heard_of_two_full_tpdus_is_a_window_lost_whole() {
        let behind = [(ms(10), 1_400, false), (ms(30), 1_400, false)];
        let rtt = Some(Duration::from_millis(1));
        assert!(head().lost_whole(ms(FIRED + 2), rtt, behind.into_iter()));
        assert!(
            !head().lost_whole(ms(FIRED + 2), rtt, behind[..1].iter().copied()),
            "one lost with the head is a loss"
        );
    }

    #[test]
    fn one_full_tpdu_heard_or_a_late_ack_is_not() {
        let rtt = Some(Duration::from_millis(1));
        let heard = [
            (ms(10), 1_400, false),
            (ms(20), 1_400, true),
            (ms(30), 1_400, false),
        ];
        assert!(!head().lost_whole(ms(FIRED + 2), rtt, heard.into_iter()));
        let lost = [(ms(10), 1_400, false), (ms(30), 1_400, false)];
        assert!(
            !head().lost_whole(
                ms(FIRED + 2),
                Some(Duration::from_millis(10)),
                lost.into_iter()
            ),
            "caused by a TPDU sent before the firing"
        );
        assert!(!head().lost_whole(ms(FIRED + 2), None, lost.into_iter()));
    }

    #[test]
    fn short_tpdus_and_those_sent_after_the_firing_are_not_judged() {
        let rtt = Some(Duration::from_millis(1));
        let behind = [
            (ms(10), 1_400, false),
            (ms(15), 300, true),
            (ms(30), 1_400, false),
            (ms(FIRED + 1), 1_400, true),
        ];
        assert!(head().lost_whole(ms(FIRED + 2), rtt, behind.into_iter()));
    }
}
