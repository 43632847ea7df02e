//! What the sending VCs to one host learnt of its late ACKs, shared (RFC 9040, TCP
//! control block interdependence: connections to one host share what they measured
//! of the path to it).
//!
//! A sending VC whose head check or retransmission timer fired before an ACK that was
//! only late learns that ACK's RTT and waits two of it from then on (RFC 3522's
//! response, `natm_proto::transport`'s `judge_retx`). Each VC used to learn it alone:
//! at 1,000 connections to one receiver, whose ACK delays swing with the order it
//! serves them in, every VC paid its own spurious retransmissions before it learnt.
//! Now each VC reports what it learnt to its peer's [`LatePath`] and waits for the
//! largest any VC to that host reported in the last one to two [`EPOCH_NS`].
//! What a VC learnt is its own until a needed retransmission halves it, so the shared
//! value falls once no VC holds it any more.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::sync::{Level, OrderedMutex as Mutex};

/// How long a report counts: the shared value is the largest of this epoch's and
/// the last one's.
const EPOCH_NS: u64 = 1_000_000_000;

/// The late ACKs of one host's path, shared by the sending VCs to it.
#[derive(Debug, Default)]
pub(crate) struct LatePath {
    /// The epoch (`now / EPOCH_NS`) `current` belongs to.
    epoch: AtomicU64,
    /// The largest report of this epoch and of the one before, ns.
    current: AtomicU64,
    previous: AtomicU64,
}

impl LatePath {
    /// A VC's own late RTT at `now_ns`; what the VCs to this host share now.
    pub(crate) fn report(&self, own: Duration, now_ns: u64) -> Duration {
        let epoch = now_ns / EPOCH_NS;
        let was = self.epoch.load(Relaxed);
        if epoch > was
            && self
                .epoch
                .compare_exchange(was, epoch, Relaxed, Relaxed)
                .is_ok()
        {
            // Whoever moves the epoch on moves the values: a report racing with it
            // lands in either, which only keeps it an epoch longer or shorter.
            let last = if epoch == was + 1 {
                self.current.swap(0, Relaxed)
            } else {
                self.current.store(0, Relaxed);
                0
            };
            self.previous.store(last, Relaxed);
        }
        let own = u64::try_from(own.as_nanos()).unwrap_or(u64::MAX);
        // A locked `fetch_max` only when the report may raise the value: every
        // sending `after` reports, and the value rarely moves.
        let mut current = self.current.load(Relaxed);
        if own > current {
            current = self.current.fetch_max(own, Relaxed).max(own);
        }
        Duration::from_nanos(current.max(self.previous.load(Relaxed)))
    }
}

/// The engine's [`LatePath`]s by peer host.
#[derive(Debug)]
pub(crate) struct LatePaths(Mutex<HashMap<IpAddr, Weak<LatePath>>>);

impl LatePaths {
    pub(crate) fn new() -> LatePaths {
        LatePaths(Mutex::new(Level::Leaf, HashMap::new()))
    }

    /// The path to `host`, shared with every other VC to it that is still open.
    pub(crate) fn to(&self, host: IpAddr) -> Arc<LatePath> {
        let mut m = self.0.lock();
        if let Some(p) = m.get(&host).and_then(Weak::upgrade) {
            return p;
        }
        // Forget the hosts no VC holds any more: the map stays as large as the set of
        // peers with open VCs.
        m.retain(|_, w| w.strong_count() > 0);
        let p = Arc::new(LatePath::default());
        m.insert(host, Arc::downgrade(&p));
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn vcs_to_one_host_share_the_largest_late_ack_and_forget_it_two_epochs_on() {
        let p = LatePath::default();
        assert_eq!(p.report(Duration::ZERO, 0), Duration::ZERO);
        assert_eq!(
            p.report(Duration::from_millis(30), 10 * MS),
            Duration::from_millis(30)
        );
        // Another VC, which learnt nothing yet, waits as long.
        assert_eq!(p.report(Duration::ZERO, 20 * MS), Duration::from_millis(30));
        assert_eq!(
            p.report(Duration::from_millis(10), 30 * MS),
            Duration::from_millis(30)
        );
        // The next epoch still remembers the last one's.
        assert_eq!(
            p.report(Duration::ZERO, EPOCH_NS + MS),
            Duration::from_millis(30)
        );
        // Two on, with no VC reporting it again, it is gone.
        assert_eq!(p.report(Duration::ZERO, 2 * EPOCH_NS + MS), Duration::ZERO);
        // A gap of several epochs forgets everything at once.
        p.report(Duration::from_millis(50), 3 * EPOCH_NS);
        assert_eq!(p.report(Duration::ZERO, 9 * EPOCH_NS), Duration::ZERO);
    }

    #[test]
    fn a_host_with_no_vc_left_is_forgotten() {
        let paths = LatePaths::new();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let pa = paths.to(a);
        assert!(Arc::ptr_eq(&pa, &paths.to(a)), "one record per host");
        drop(pa);
        let _pb = paths.to(b);
        assert_eq!(paths.0.lock().len(), 1, "a's record went with its last VC");
    }
}
