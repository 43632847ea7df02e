//! Small sends on a paced VC coalesced into runs (issue 34).
//!
//! A guaranteed VC's leaky bucket (seed 000 §5.3.3) releases a TPDU as soon as the
//! bucket holds its tokens. With large messages the application's `send` is cheap
//! against the interval between TPDUs and the bucket sets the rate. With small
//! messages sent one per `send` it is the other way round: every message left at once,
//! alone, in a system call of its own (and a receive of its own at the far end), and a
//! 64-byte CBR VC delivered 0.48 of 100 Mbit/s — seed 001 §8 saw the same below 4–8 K
//! and left it there ("the per-message cost, not the bucket, sets the rate").
//!
//! So while the application streams — a new TPDU is queued within [`STREAM_GAP`] of
//! the last run leaving — small new TPDUs wait up to [`HOLD`] for company, and leave
//! together as one run (one GSO `sendmsg` in the engine, one GRO receive at the far
//! end) once the hold ends or [`MAX_RUN`] are queued. A message after a pause goes at
//! once, and so does one that answers the peer: the engine counts what the
//! connection's other direction delivered ([`crate::transport::Psb::note_reverse`]),
//! and a send after a delivery is a reply, never held, however short the round trip,
//! so a request/response exchange on a CBR VC keeps its latency. The bucket still decides what
//! conforms: a run leaves no faster than the contract, and the hold is well inside the
//! bucket's own timer slack ([`crate::flow::TIMER_SLACK`]), which the default depth
//! already absorbs, so the hold costs no rate.
//!
//! When the bucket itself holds the queue back (the application sends faster than the
//! contract), nothing is held on top: the queue goes as the bucket allows, and the
//! engine's timer, which wakes late by tens of microseconds, releases what conformed
//! meanwhile together. (Waiting on for a whole run's tokens cost 1,500-byte messages
//! at 10 Mbit/s a third of their rate through the engine's timers: measured, dropped.)
//!
//! Departure from the seeds: seed 000 sends each TPDU when the bucket allows it; a
//! kernel driver could afford that per TPDU, a user-space stack on UDP cannot.

use std::time::Duration;

use crate::time::Instant;

/// Longest a small TPDU waits for company while the application streams.
pub const HOLD: Duration = Duration::from_micros(100);

/// A new TPDU queued within this of the last run leaving means the application is
/// streaming: a hold. (20 µs, about one send's cost, left a 256-byte stream at
/// 100 Mbit/s, one message per 20 µs, sending each alone; replies are told apart by
/// the other direction's deliveries, not by the gap.)
pub const STREAM_GAP: Duration = HOLD;

/// TPDUs that end a hold at once: a full run (UDP GSO takes at most 64 segments).
pub const MAX_RUN: u64 = 32;

/// TPDUs of this many octets or more are never held: the per-TPDU cost is small
/// against their bytes. (At 2,048, 1,500-byte messages at 10 Mbit/s delivered 0.63
/// of their rate through the engine, whose timers wake up to a millisecond late:
/// measured, not yet explained; below 512 octets no rate lost, measured.)
pub const SMALL_TPDU: usize = 512;

/// What the coalescer says of the next new TPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// It may go now (as far as the flow controller allows).
    Go,
    /// Hold it (and the ones behind it) until [`Coalescer::deadline`].
    Hold,
}

/// The coalescing state of one send half.
#[derive(Debug, Clone, Default)]
pub(crate) struct Coalescer {
    /// When the last run of new data was released.
    last_release: Option<Instant>,
    /// When the hold of the oldest held TPDU ends.
    hold_until: Option<Instant>,
    /// New TPDUs below this sequence number belong to a released run and go without
    /// holding (the flow controller may still pace them).
    release_to: u64,
    /// Receives the other direction had delivered: now, and at the last release.
    reverse: u64,
    reverse_at_release: u64,
}

impl Coalescer {
    /// The next new TPDU is `next` (of `len` octets) and `end` is one past the last
    /// queued: may it go at `now`?
    pub(crate) fn poll(&mut self, now: Instant, next: u64, end: u64, len: usize) -> Decision {
        if next < self.release_to || len >= SMALL_TPDU {
            return Decision::Go;
        }
        let full = end - next >= MAX_RUN;
        let hold = match self.hold_until {
            // A hold under way lasts until it ends or the run is full.
            Some(t) => now < t && !full,
            // Otherwise one starts while the application streams.
            None => {
                let streaming = self.reverse == self.reverse_at_release
                    && self
                        .last_release
                        .is_some_and(|t| now.saturating_duration_since(t) < STREAM_GAP);
                if streaming && !full {
                    self.hold_until = Some(now + HOLD);
                }
                streaming && !full
            }
        };
        if hold {
            return Decision::Hold;
        }
        self.release(now, end);
        Decision::Go
    }

    /// The flow controller holds the queue back at `now`: everything queued up to
    /// `end` goes as it allows, without a hold of its own on top.
    pub(crate) fn release(&mut self, now: Instant, end: u64) {
        self.release_to = end;
        self.hold_until = None;
        self.last_release = Some(now);
        self.reverse_at_release = self.reverse;
    }

    /// The other direction has delivered `epoch` receives so far.
    pub(crate) fn note_reverse(&mut self, epoch: u64) {
        self.reverse = epoch;
    }

    /// The timer fired at `now` with `end` one past the last queued TPDU: a hold that
    /// has ended releases everything queued.
    pub(crate) fn expire(&mut self, now: Instant, end: u64) {
        if self.hold_until.is_some_and(|t| now >= t) {
            self.release_to = end;
            self.hold_until = None;
            self.last_release = Some(now);
        }
    }

    /// When the current hold ends, if TPDUs are held.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.hold_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::from_nanos(1 + us * 1_000)
    }

    #[test]
    fn a_lone_message_goes_at_once() {
        let mut c = Coalescer::default();
        assert_eq!(c.poll(at(0), 0, 1, 64), Decision::Go);
        // Long after: still at once; and more than a hold after that too.
        assert_eq!(c.poll(at(10_000), 1, 2, 64), Decision::Go);
        assert_eq!(c.poll(at(10_101), 2, 3, 64), Decision::Go);
    }

    #[test]
    fn a_stream_of_small_messages_is_held_into_runs() {
        let mut c = Coalescer::default();
        assert_eq!(c.poll(at(0), 0, 1, 64), Decision::Go);
        // The next, 5 µs later, waits for the hold to end.
        assert_eq!(c.poll(at(5), 1, 2, 64), Decision::Hold);
        assert_eq!(c.deadline(), Some(at(105)));
        // More arrive; the hold still ends where it began.
        assert_eq!(c.poll(at(50), 1, 11, 64), Decision::Hold);
        assert_eq!(c.deadline(), Some(at(105)));
        // At its end the whole run goes, and every TPDU of it without holding.
        assert_eq!(c.poll(at(105), 1, 21, 64), Decision::Go);
        assert_eq!(c.deadline(), None);
        for s in 2..21 {
            assert_eq!(c.poll(at(106), s, 21, 64), Decision::Go);
        }
        // The stream goes on: the next one is held again.
        assert_eq!(c.poll(at(110), 21, 22, 64), Decision::Hold);
        assert_eq!(c.deadline(), Some(at(210)));
    }

    #[test]
    fn a_reply_is_never_held() {
        let mut c = Coalescer::default();
        assert_eq!(c.poll(at(0), 0, 1, 64), Decision::Go);
        // The answer came back 10 µs later, and the next request goes at once.
        c.note_reverse(1);
        assert_eq!(c.poll(at(10), 1, 2, 64), Decision::Go);
        c.note_reverse(2);
        assert_eq!(c.poll(at(20), 2, 3, 64), Decision::Go);
        // Without an answer in between, it is a stream.
        assert_eq!(c.poll(at(25), 3, 4, 64), Decision::Hold);
    }

    #[test]
    fn a_full_run_ends_the_hold() {
        let mut c = Coalescer::default();
        assert_eq!(c.poll(at(0), 0, 1, 64), Decision::Go);
        assert_eq!(c.poll(at(1), 1, 2, 64), Decision::Hold);
        assert_eq!(c.poll(at(2), 1, 1 + MAX_RUN, 64), Decision::Go);
    }

    #[test]
    fn an_ended_hold_releases_what_it_held_even_if_nothing_polls() {
        let mut c = Coalescer::default();
        assert_eq!(c.poll(at(0), 0, 1, 64), Decision::Go);
        assert_eq!(c.poll(at(1), 1, 3, 64), Decision::Hold);
        c.expire(at(50), 3);
        assert_eq!(c.deadline(), Some(at(101)), "not yet");
        c.expire(at(101), 4);
        assert_eq!(c.deadline(), None, "a spent deadline is not reported again");
        // Later (a window opened): the released ones go without a new hold.
        for s in 1..4 {
            assert_eq!(c.poll(at(150), s, 4, 64), Decision::Go);
        }
    }

    #[test]
    fn large_tpdus_are_never_held() {
        let mut c = Coalescer::default();
        assert_eq!(c.poll(at(0), 0, 1, 64), Decision::Go);
        assert_eq!(c.poll(at(1), 1, 2, SMALL_TPDU), Decision::Go);
    }
}
