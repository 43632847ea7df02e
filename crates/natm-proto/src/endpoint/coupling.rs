//! What ties a duplex connection's two simplex VCs together: one rule, for every
//! I/O layer (issue 30).
//!
//! seed 000 §5.3: a duplex connection is two simplex VCs, each with its own PSB. The
//! application sees one connection, so an abort of one VC must say what becomes of
//! the other. [`Connection`](super::Connection) applies this rule to the halves it
//! owns; an I/O layer that locks the halves apart (natm's engine) asks the same
//! function after either half reports its abort, and aborts the other half when it
//! says so.
//!
//! The rule:
//!
//! | phase | half aborted | reason | the other half |
//! |---|---|---|---|
//! | setup | either | `Peer` | aborted, `Refused`: the peer refused the call |
//! | setup | either | any other | aborted, same reason |
//! | up | receiving | `Local` | goes on: this application stopped reading, and its sending closes in order |
//! | up | sending | `Peer` | goes on: the peer stopped reading, and what it sends still arrives |
//! | up | either | any other | aborted, same reason: the peer or the path is gone |
//!
//! The two "goes on" rows are one event seen from its two ends: an application that
//! hangs up after sending aborts its receiving VC (a receiver that leaves early cannot
//! take the rest) and closes its sending VC in order; its peer reads to the end.
//! Everything else — a retransmission timeout, a peer that aborted its sending, the
//! application's own abort of both — ends the connection at both ends, so a thread
//! blocked receiving on a connection whose sending VC timed out is woken.

use super::half::Half;
use crate::transport::AbortReason;

/// Where a connection is when one of its halves aborts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The connection is not up yet: the abort fails the whole call.
    Setup,
    /// The aborted half was up.
    Up,
}

/// The abort the other half takes when `half` aborted for `reason` in `phase`;
/// `None` if the other half goes on (module doc).
pub fn abort_other(half: Half, reason: AbortReason, phase: Phase) -> Option<AbortReason> {
    match phase {
        // An ABORT answering our handshake is a refusal (seed 000 §5.3: the receiver
        // may refuse the parameters; a listener refuses when its backlog is full).
        Phase::Setup if reason == AbortReason::Peer => Some(AbortReason::Refused),
        Phase::Setup => Some(reason),
        Phase::Up => match (half, reason) {
            (Half::Rx, AbortReason::Local) | (Half::Tx, AbortReason::Peer) => None,
            _ => Some(reason),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REASONS: [AbortReason; 4] = [
        AbortReason::Local,
        AbortReason::Peer,
        AbortReason::Timeout,
        AbortReason::Refused,
    ];

    #[test]
    fn a_receiver_that_leaves_early_and_its_peer_seeing_it_end_one_direction_only() {
        assert_eq!(abort_other(Half::Rx, AbortReason::Local, Phase::Up), None);
        assert_eq!(abort_other(Half::Tx, AbortReason::Peer, Phase::Up), None);
    }

    #[test]
    fn every_other_abort_of_an_up_half_ends_the_other_for_the_same_reason() {
        for half in [Half::Tx, Half::Rx] {
            for r in REASONS {
                let goes_on = matches!(
                    (half, r),
                    (Half::Rx, AbortReason::Local) | (Half::Tx, AbortReason::Peer)
                );
                let want = (!goes_on).then_some(r);
                assert_eq!(abort_other(half, r, Phase::Up), want, "{half:?} {r:?}");
            }
        }
        // The cases a user meets: a timed-out sender ends receiving too, and a peer
        // that aborted its sending ends ours.
        assert_eq!(
            abort_other(Half::Tx, AbortReason::Timeout, Phase::Up),
            Some(AbortReason::Timeout)
        );
        assert_eq!(
            abort_other(Half::Rx, AbortReason::Peer, Phase::Up),
            Some(AbortReason::Peer)
        );
    }

    #[test]
    fn any_abort_during_setup_fails_both_and_a_peers_abort_is_a_refusal() {
        for half in [Half::Tx, Half::Rx] {
            for r in REASONS {
                let want = if r == AbortReason::Peer {
                    AbortReason::Refused
                } else {
                    r
                };
                assert_eq!(abort_other(half, r, Phase::Setup), Some(want));
            }
        }
    }
}
