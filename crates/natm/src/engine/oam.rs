//! OAM F5 loopback at a connection's end point (ITU-T I.610 §10.2.4, the subset of
//! `wire::oam`): what the engine does with an OAM frame on one of a connection's
//! VCs, and the probes an application has outstanding. Sans-IO: the connection
//! (`conn.rs`) reads the frames, sends the answers and keeps the clock.
//!
//! An end point of a connection
//! * answers an **end-to-end** loopback request addressed to the end point (location
//!   all ones) on the same VC, back where it came from, indication cleared;
//! * does not answer a **segment** request: a host is not configured as a segment end
//!   point, and the first switch answers those (through a switch, none reaches the
//!   host; in direct mode nobody answers, which `natm ping --oam segment` says);
//! * hands an answer (indication clear) whose correlation tag it sent to the probe
//!   that waits for it; any other answer is counted and dropped;
//! * counts a malformed OAM frame (under 48 octets, longer with padding that is not
//!   zeros, not a loopback, a bad CRC-10) and drops it — never an error for the
//!   connection;
//! * takes a request padded with zero octets past its 48 as the request itself, and
//!   answers with the 48-octet cell: a sending VC's path MTU probe
//!   (`engine::path_probe`, RFC 8899).
//!
//! On a sealed call (issue 31, `wire::oam_auth`) end-to-end loopback is
//! authenticated: a request is answered only if its source ID is the peer's
//! authenticator and its correlation tag newer than the last one answered (a replay
//! gets nothing), the answer is signed by this end, and an answer is matched only if
//! the peer signed it. Segment answers come from the first switch, which holds no
//! call keys: they are matched unauthenticated.
//!
//! Departures from I.610: the padding (an ATM cell cannot be longer, a UDP frame
//! can); the request names no source ID (all ones) and the end point
//! has no location ID of its own, so only "the end point" (all ones) is answered.

use std::time::Duration;

use natm_proto::flow::gcra::{Conformance as _, Gcra};

use crate::time::Instant;
use crate::wire::cell::PAYLOAD_LEN;
use crate::wire::oam::{self, Loopback, Scope, END_POINT};
use crate::wire::oam_auth::OamKeys;

/// Probes a connection keeps waiting for an answer at once: a prober that loses
/// answers cannot grow the table (`OamError::TooManyProbes` past it).
pub(crate) const MAX_OUTSTANDING: usize = 16;

/// Loopback requests a connection answers a second, sustained (issue 31: "answers
/// are rate-limited per VC"): each answer is a datagram sent on a request anyone
/// who reaches the socket can make. Far above what a prober needs (`natm ping --oam`
/// sends one a second).
pub(crate) const ANSWERS_PER_S: u64 = 100;
/// Requests answered back to back before the rate applies.
pub(crate) const ANSWER_BURST: u32 = 16;
/// Path MTU probes (padded requests, `engine::path_probe`) a connection answers a
/// second, sustained, on a budget of their own: a flood of pings cannot keep the
/// peer's path MTU search at base, nor a flood of probes the pings unanswered. A
/// search sends one probe per round trip, a dozen at most.
pub(crate) const PATH_ANSWERS_PER_S: u64 = 10;
/// Path MTU probes answered back to back before their rate applies.
pub(crate) const PATH_ANSWER_BURST: u32 = 16;

/// What to do with an OAM frame received on one of a connection's VCs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send this payload back on the same VC, in an OAM frame of the same flow, if
    /// the budget allows ([`Probes::may_answer`]; the request's tag).
    Answer([u8; PAYLOAD_LEN], u32),
    /// An answer to one of our probes (or to one given up on): its tag.
    Answered(u32),
    /// A request this end point does not answer (a segment flow, another location).
    Ignored,
    /// Not a loopback cell natm reads.
    Malformed,
    /// On a sealed call, an end-to-end request or answer the peer did not sign.
    Unauthenticated,
}

/// The end point's answer to an OAM payload of flow `scope`; `keys` are a sealed
/// call's loopback keys.
pub(crate) fn on_frame(scope: Scope, payload: &[u8], keys: Option<&OamKeys>) -> Action {
    // A path MTU probe (`engine::path_probe`) is a loopback request padded with zeros:
    // the cell is its first 48 octets, and the answer is the cell alone.
    let payload = oam::unpad(payload);
    let Ok(l) = Loopback::parse(payload) else {
        return Action::Malformed;
    };
    let signed = |l: &Loopback| match keys {
        Some(k) if scope == Scope::EndToEnd => k.verify(l),
        _ => true,
    };
    if !l.request {
        return if signed(&l) {
            Action::Answered(l.tag)
        } else {
            Action::Unauthenticated
        };
    }
    match (scope, <&[u8; PAYLOAD_LEN]>::try_from(payload)) {
        (Scope::EndToEnd, Ok(p)) if l.location == END_POINT => match keys {
            None => Action::Answer(oam::answer(p), l.tag),
            Some(k) if k.verify(&l) => {
                let back = k.sign(Loopback {
                    request: false,
                    ..l
                });
                Action::Answer(back.to_bytes(), l.tag)
            }
            Some(_) => Action::Unauthenticated,
        },
        _ => Action::Ignored,
    }
}

/// Why an end-to-end request was not answered ([`Probes::may_answer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// Over the answer budget.
    RateLimited,
    /// On a sealed call, a tag not newer than the last answered: a replay.
    Replayed,
}

/// Why a probe could not be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManyProbes;

/// One probe waiting for its answer.
#[derive(Debug, Clone, Copy)]
struct Probe {
    tag: u32,
    sent: Instant,
    answered: Option<Instant>,
}

/// The probes of one connection waiting for answers, at most [`MAX_OUTSTANDING`],
/// and the budget of the answers it gives ([`ANSWERS_PER_S`], [`ANSWER_BURST`]).
#[derive(Debug)]
pub(crate) struct Probes {
    next_tag: u32,
    pending: Vec<Probe>,
    answers: Gcra,
    path_answers: Gcra,
    /// The newest tag answered on a sealed call (replays of it or older are not).
    last_answered: Option<u32>,
}

impl Probes {
    /// No probe yet; tags start at `first` (random per connection, so an answer to an
    /// earlier connection's probe on a reused VC is not taken for ours).
    pub(crate) fn new(first: u32) -> Probes {
        let interval = Duration::from_nanos(1_000_000_000 / ANSWERS_PER_S);
        Probes {
            next_tag: first,
            pending: Vec::new(),
            // GCRA(T, (B − 1)·T): B requests at once, then one per T.
            answers: Gcra::new(interval, interval * (ANSWER_BURST - 1)),
            path_answers: {
                let t = Duration::from_nanos(1_000_000_000 / PATH_ANSWERS_PER_S);
                Gcra::new(t, t * (PATH_ANSWER_BURST - 1))
            },
            last_answered: None,
        }
    }

    /// Whether a loopback request with `tag` that arrived at `now` may be answered
    /// (then it is counted against the budget); a refused one is dropped and counted.
    /// `sealed`: the request was authenticated, and only a tag newer than the last
    /// answered is (serial-number order, RFC 1982, over 2^31). `path`: a padded
    /// request, a path MTU probe, on its own budget.
    pub(crate) fn may_answer(
        &mut self,
        now: Instant,
        tag: u32,
        sealed: bool,
        path: bool,
    ) -> Result<(), Unanswered> {
        if sealed {
            if let Some(last) = self.last_answered {
                if tag.wrapping_sub(last).wrapping_sub(1) >= 1 << 31 {
                    return Err(Unanswered::Replayed);
                }
            }
        }
        let budget = if path {
            &mut self.path_answers
        } else {
            &mut self.answers
        };
        if !budget.conforms(now) {
            return Err(Unanswered::RateLimited);
        }
        if sealed {
            self.last_answered = Some(tag);
        }
        Ok(())
    }

    /// A new probe sent at `now`: its correlation tag.
    pub(crate) fn start(&mut self, now: Instant) -> Result<u32, TooManyProbes> {
        if self.pending.len() >= MAX_OUTSTANDING {
            return Err(TooManyProbes);
        }
        let tag = self.next_tag;
        self.next_tag = self.next_tag.wrapping_add(1);
        self.pending.push(Probe {
            tag,
            sent: now,
            answered: None,
        });
        Ok(tag)
    }

    /// The answer to `tag` arrived at `now`; false if no probe waits for it (unknown,
    /// given up on, or answered already).
    pub(crate) fn answered(&mut self, tag: u32, now: Instant) -> bool {
        match self
            .pending
            .iter_mut()
            .find(|p| p.tag == tag && p.answered.is_none())
        {
            Some(p) => {
                p.answered = Some(now);
                true
            }
            None => false,
        }
    }

    /// The round trip of `tag` if its answer came (the probe is then forgotten).
    pub(crate) fn take_answer(&mut self, tag: u32) -> Option<Duration> {
        let i = self.pending.iter().position(|p| p.tag == tag)?;
        let at = self.pending[i].answered?;
        let p = self.pending.swap_remove(i);
        Some(at.saturating_duration_since(p.sent))
    }

    /// Give up on `tag` (its wait timed out): a late answer is then unmatched.
    pub(crate) fn forget(&mut self, tag: u32) {
        self.pending.retain(|p| p.tag != tag);
    }

    /// Probes waiting now.
    #[cfg(test)]
    pub(crate) fn outstanding(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(n * 1_000_000)
    }

    #[test]
    fn an_end_point_answers_end_to_end_requests_only() {
        let req = Loopback::request(9).to_bytes();
        let Action::Answer(a, 9) = on_frame(Scope::EndToEnd, &req, None) else {
            panic!("an end-to-end request to the end point is answered")
        };
        let back = Loopback::parse(&a).unwrap();
        assert_eq!((back.request, back.tag), (false, 9));
        assert_eq!(on_frame(Scope::Segment, &req, None), Action::Ignored);
        let elsewhere = Loopback {
            location: [7; 16],
            ..Loopback::request(9)
        };
        assert_eq!(
            on_frame(Scope::EndToEnd, &elsewhere.to_bytes(), None),
            Action::Ignored
        );
        // The answer itself is delivered, not answered again.
        assert_eq!(on_frame(Scope::EndToEnd, &a, None), Action::Answered(9));
        assert_eq!(on_frame(Scope::Segment, &a, None), Action::Answered(9));
        // A request padded with zeros (a path MTU probe) is answered with the cell.
        let mut padded = req.to_vec();
        padded.resize(1_400, 0);
        assert_eq!(
            on_frame(Scope::EndToEnd, &padded, None),
            Action::Answer(a, 9)
        );
        padded[1_000] = 1;
        assert_eq!(on_frame(Scope::EndToEnd, &padded, None), Action::Malformed);
        let mut bad = req;
        bad[9] ^= 4;
        assert_eq!(on_frame(Scope::EndToEnd, &bad, None), Action::Malformed);
        assert_eq!(
            on_frame(Scope::EndToEnd, &req[..40], None),
            Action::Malformed
        );
    }

    #[test]
    fn probes_match_answers_by_tag_in_virtual_time() {
        let mut p = Probes::new(u32::MAX);
        let a = p.start(ms(10)).unwrap();
        let b = p.start(ms(11)).unwrap();
        assert_eq!((a, b), (u32::MAX, 0), "tags wrap");
        assert_eq!(p.take_answer(a), None, "not answered yet");
        assert!(p.answered(b, ms(14)));
        assert!(!p.answered(b, ms(15)), "a duplicate answer is not matched");
        assert!(!p.answered(77, ms(15)), "nor a foreign one");
        assert_eq!(p.take_answer(b), Some(Duration::from_millis(3)));
        assert_eq!(p.take_answer(b), None, "taken once");
        p.forget(a);
        assert!(!p.answered(a, ms(40)), "late: given up on");
        assert_eq!(p.outstanding(), 0);
    }

    #[test]
    fn answers_are_limited_to_a_burst_then_a_rate_in_virtual_time() {
        let mut p = Probes::new(1);
        let answered = (0..1_000)
            .filter(|_| p.may_answer(ms(5), 0, false, false).is_ok())
            .count();
        assert_eq!(answered, ANSWER_BURST as usize, "a flood at one instant");
        let period = 1_000 / ANSWERS_PER_S;
        assert!(p.may_answer(ms(5 + period / 2), 0, false, false).is_err());
        assert!(
            p.may_answer(ms(5 + period), 0, false, false).is_ok(),
            "one more per interval"
        );
        // A flood of 10,000 requests over 10 s gets the rate, not more.
        let mut p = Probes::new(1);
        let n = (0..10_000_u64)
            .filter(|i| {
                p.may_answer(Instant::from_nanos(i * 1_000_000), 0, false, false)
                    .is_ok()
            })
            .count() as u64;
        assert!(n <= ANSWERS_PER_S * 10 + u64::from(ANSWER_BURST), "{n}");
        assert!(n >= ANSWERS_PER_S * 10, "{n}");
        // A prober's one a second is always answered.
        let mut p = Probes::new(1);
        assert!((0..60).all(|s| p.may_answer(ms(s * 1_000), 0, false, false).is_ok()));
    }

    #[test]
    fn path_probes_and_pings_are_answered_on_budgets_of_their_own() {
        // A flood of pings spends the ping budget; the path MTU search's probes are
        // still answered, and the other way round.
        let mut p = Probes::new(1);
        let pings = (0..1_000)
            .filter(|_| p.may_answer(ms(5), 0, false, false).is_ok())
            .count();
        assert_eq!(pings, ANSWER_BURST as usize);
        let probes = (0..1_000)
            .filter(|_| p.may_answer(ms(5), 0, false, true).is_ok())
            .count();
        assert_eq!(probes, PATH_ANSWER_BURST as usize, "the probes' own burst");
        assert!(p.may_answer(ms(5), 0, false, true).is_err());
        let later = ms(5 + 1_000 / PATH_ANSWERS_PER_S);
        assert!(
            p.may_answer(later, 0, false, true).is_ok(),
            "then their rate"
        );
    }

    fn sealed_pair() -> (OamKeys, OamKeys) {
        let keys = crate::wire::seal::PathKeys {
            tx: [1; 32],
            rx: [2; 32],
        };
        (OamKeys::new(&keys), OamKeys::new(&keys.reversed()))
    }

    #[test]
    fn on_a_sealed_call_only_the_peers_signed_requests_and_answers_count() {
        let (a, b) = sealed_pair();
        let e2e = Scope::EndToEnd;
        // A forged (unsigned) request gets no answer; nor does one signed by the
        // end that receives it (reflected).
        let forged = Loopback::request(5).to_bytes();
        assert_eq!(on_frame(e2e, &forged, Some(&b)), Action::Unauthenticated);
        let reflected = b.sign(Loopback::request(5)).to_bytes();
        assert_eq!(on_frame(e2e, &reflected, Some(&b)), Action::Unauthenticated);
        // The peer's signed request is answered, and the answer is signed by b.
        let req = a.sign(Loopback::request(5)).to_bytes();
        let Action::Answer(ans, 5) = on_frame(e2e, &req, Some(&b)) else {
            panic!("a signed request is answered")
        };
        assert_eq!(on_frame(e2e, &ans, Some(&a)), Action::Answered(5));
        // An answer forged in b's name (the request with the indication cleared, as
        // a clear end point answers) is not taken.
        let forged_answer = oam::answer(&req);
        assert_eq!(
            on_frame(e2e, &forged_answer, Some(&a)),
            Action::Unauthenticated
        );
        // A segment answer comes from a switch without keys: matched as it is.
        let seg = Loopback {
            request: false,
            ..Loopback::request(6)
        };
        assert_eq!(
            on_frame(Scope::Segment, &seg.to_bytes(), Some(&a)),
            Action::Answered(6)
        );
    }

    #[test]
    fn a_sealed_call_answers_each_tag_once_and_never_an_older_one() {
        let mut p = Probes::new(1);
        assert_eq!(p.may_answer(ms(0), u32::MAX - 1, true, false), Ok(()));
        assert_eq!(
            p.may_answer(ms(10), u32::MAX - 1, true, false),
            Err(Unanswered::Replayed)
        );
        assert_eq!(p.may_answer(ms(20), 7, true, false), Ok(()), "tags wrap");
        assert_eq!(
            p.may_answer(ms(30), u32::MAX - 1, true, false),
            Err(Unanswered::Replayed),
            "older than the last"
        );
        // A replay costs no budget: the next fresh tag is answered.
        for t in 0..=7 {
            assert_eq!(
                p.may_answer(ms(40), t, true, false),
                Err(Unanswered::Replayed)
            );
        }
        assert_eq!(p.may_answer(ms(40), 8, true, false), Ok(()));
        // On a clear call a tag may come again (anyone can forge one anyway).
        let mut p = Probes::new(1);
        assert_eq!(p.may_answer(ms(0), 3, false, false), Ok(()));
        assert_eq!(p.may_answer(ms(10), 3, false, false), Ok(()));
    }

    #[test]
    fn outstanding_probes_are_bounded() {
        let mut p = Probes::new(1);
        for i in 0..MAX_OUTSTANDING as u64 {
            p.start(ms(i)).unwrap();
        }
        assert_eq!(p.start(ms(99)), Err(TooManyProbes));
        p.forget(1);
        assert!(p.start(ms(99)).is_ok());
        assert_eq!(p.outstanding(), MAX_OUTSTANDING);
    }
}
