//! The two directions tied together: natm-proto's rule (`natm_proto::endpoint::coupling`)
//! run by an engine that locks each direction on its own.
//!
//! When a half that was up reports its abort (`Conn::after`), the rule says whether
//! the other half ends too. The other half's lock cannot always be taken there: the
//! lock order is Tx before Rx, and the receive path holds Rx. So the abort is posted
//! to the other half's mailbox here and the driver's timer, which runs with no end
//! locked, delivers it (`Conn::on_timer`): one driver round later, whichever half
//! aborted first.
//!
//! Before a half is up the engine's setup paths decide (a connect or an accept that
//! fails aborts both): a caller that sent and hung up at once may abort the accepting
//! side's sending VC before that VC's handshake answer came, and its data must still
//! be read (`app::setup_error`).
//!
//! | mailbox | transition | to | by |
//! |---|---|---|---|
//! | empty | `post(reason)` | holds `reason` | `Conn::after`, the other half aborted |
//! | holds `reason` | `post(other)` | holds `reason` | the first abort wins |
//! | holds `reason` | `take` | empty | `Conn::on_timer`, which aborts the half |

use std::sync::atomic::{AtomicU8, Ordering};

use natm_proto::endpoint::coupling::{self, Phase};
use natm_proto::endpoint::Half;

use super::{Conn, End, Which};
use crate::engine::Engine;
use crate::sync::Condvar;
use crate::time::Instant;
use crate::transport::AbortReason;

/// An abort waiting for one half: empty, or its reason.
#[derive(Debug, Default)]
pub(crate) struct Mailbox(AtomicU8);

impl Mailbox {
    fn code(r: AbortReason) -> u8 {
        match r {
            AbortReason::Local => 1,
            AbortReason::Peer => 2,
            AbortReason::Timeout => 3,
            AbortReason::Refused => 4,
            AbortReason::NoListener => 5,
        }
    }

    /// Post `reason`, unless an abort is waiting already.
    pub(crate) fn post(&self, reason: AbortReason) {
        let _ = self
            .0
            .compare_exchange(0, Self::code(reason), Ordering::AcqRel, Ordering::Relaxed);
    }

    /// The waiting abort, if any; the mailbox is empty after.
    pub(crate) fn take(&self) -> Option<AbortReason> {
        match self.0.swap(0, Ordering::AcqRel) {
            0 => None,
            1 => Some(AbortReason::Local),
            2 => Some(AbortReason::Peer),
            3 => Some(AbortReason::Timeout),
            4 => Some(AbortReason::Refused),
            _ => Some(AbortReason::NoListener),
        }
    }
}

/// One mailbox per half.
#[derive(Debug, Default)]
pub(crate) struct Coupled {
    tx: Mailbox,
    rx: Mailbox,
}

impl Coupled {
    /// Whether an abort waits for either half.
    pub(crate) fn pending(&self) -> bool {
        self.tx.0.load(Ordering::Acquire) != 0 || self.rx.0.load(Ordering::Acquire) != 0
    }

    pub(crate) fn of(&self, which: Which) -> &Mailbox {
        match which {
            Which::Tx => &self.tx,
            Which::Rx => &self.rx,
        }
    }
}

impl Which {
    fn half(self) -> Half {
        match self {
            Which::Tx => Half::Tx,
            Which::Rx => Half::Rx,
        }
    }

    fn other(self) -> Which {
        match self {
            Which::Tx => Which::Rx,
            Which::Rx => Which::Tx,
        }
    }
}

impl Conn {
    /// Half `which`, up, aborted for `reason`: post the other half the abort the rule
    /// gives it, and have the driver deliver it. Called with `which`'s end locked.
    pub(super) fn couple(&self, eng: &Engine, which: Which, reason: AbortReason) {
        if let Some(o) = coupling::abort_other(which.half(), reason, Phase::Up) {
            self.coupled.of(which.other()).post(o);
            eng.arm(self, 0);
        }
    }

    /// End one half for `reason` (a coupled abort, or both ends'): its queue goes,
    /// every waiter and waker sees it. An end already finished stays as it ended.
    pub(super) fn abort_end<H: natm_proto::endpoint::Simplex + super::transmit::Progress>(
        &self,
        eng: &Engine,
        which: Which,
        e: &mut End<H>,
        cv: &Condvar,
        reason: AbortReason,
        now: Instant,
    ) -> bool {
        if e.finished() {
            return false;
        }
        // Cells still waiting for their slots go with the rest of the queue.
        if let Some(s) = e.smoother.as_mut() {
            s.clear();
        }
        e.half.abort(reason);
        self.after(eng, which, e, cv, now, usize::MAX);
        cv.notify_all();
        if let Some(wk) = e.waker.take() {
            wk.wake();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mailbox_holds_the_first_abort_until_it_is_taken() {
        let m = Mailbox::default();
        assert_eq!(m.take(), None);
        m.post(AbortReason::Timeout);
        m.post(AbortReason::Peer);
        assert_eq!(m.take(), Some(AbortReason::Timeout));
        assert_eq!(m.take(), None);
        for r in [
            AbortReason::Local,
            AbortReason::Peer,
            AbortReason::Timeout,
            AbortReason::Refused,
            AbortReason::NoListener,
        ] {
            m.post(r);
            assert_eq!(m.take(), Some(r));
        }
    }
}
