//! Rate limits on what remote senders can make sigd do: log lines about remote
//! events (a flood of SETUPs must not become a flood of log), and the stateless
//! answers (admission challenges, authentication ACKs) that could otherwise reflect a
//! flood at a spoofed victim.

use natm_proto::time::Instant;

/// What a remote sender caused, each with its own limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    /// A signalling link was created, expired or lost.
    Link,
    /// A call from a peer was offered.
    Offered,
    /// A call from a peer was refused.
    Refused,
    /// A datagram from a source that may not talk signalling, or failing its tag.
    Dropped,
}

const KINDS: usize = 4;

impl Event {
    fn index(self) -> usize {
        match self {
            Event::Link => 0,
            Event::Offered => 1,
            Event::Refused => 2,
            Event::Dropped => 3,
        }
    }
}

/// At most `per_s` events in each one-second window; the rest are counted.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    per_s: u32,
    start: Instant,
    used: u32,
    /// Refused since the last one allowed.
    suppressed: u64,
}

impl Window {
    pub(super) fn new(per_s: u32) -> Window {
        Window {
            per_s,
            start: Instant::ZERO,
            used: 0,
            suppressed: 0,
        }
    }

    /// `Some(n)`: go ahead, `n` were refused since the last one allowed; `None`: over
    /// the limit (counted).
    pub(super) fn allow(&mut self, now: Instant) -> Option<u64> {
        if now.saturating_duration_since(self.start).as_secs() >= 1 {
            self.start = now;
            self.used = 0;
        }
        if self.used >= self.per_s {
            self.suppressed += 1;
            return None;
        }
        self.used += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// One window per kind of remote event.
#[derive(Debug)]
pub(super) struct RateLog {
    windows: [Window; KINDS],
}

impl RateLog {
    pub(super) fn new(per_s: u32) -> RateLog {
        RateLog {
            windows: [Window::new(per_s); KINDS],
        }
    }

    /// Whether a line about `e` may be written now, and how many were suppressed
    /// before it.
    pub(super) fn allow(&mut self, e: Event, now: Instant) -> Option<u64> {
        self.windows[e.index()].allow(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_allows_its_share_and_reports_what_it_held_back() {
        let mut w = Window::new(3);
        let t = Instant::from_nanos(5_000_000_000);
        let got: Vec<_> = (0..10).map(|_| w.allow(t)).collect();
        assert_eq!(got.iter().filter(|g| g.is_some()).count(), 3);
        let later = Instant::from_nanos(6_000_000_000);
        assert_eq!(w.allow(later), Some(7));
    }
}
