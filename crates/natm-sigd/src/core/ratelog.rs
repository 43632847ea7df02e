//! Rate limits on what remote senders and local applications can make sigd do: log
//! lines about their events (a flood of SETUPs, or of malformed IPC, must not become
//! a flood of log), and the stateless answers (admission challenges, authentication
//! ACKs) that could otherwise reflect a flood at a spoofed victim.
//!
//! Log lines go through a token bucket per kind of event ([`Bucket`]): a burst of
//! `per_s` lines, then `per_s` a second; what is held back is counted, and the next
//! line written says how many (`suppressed=N`). Text an attacker chose goes into a
//! line only through [`untrusted`]: a bounded prefix, escaped.

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
    /// A local application sent a frame sigd cannot read.
    Malformed,
    /// A local application's request was refused.
    AppRefused,
    /// Anything else a local application makes sigd log: connections, listeners,
    /// calls, registrations, reclaims, releases.
    App,
}

const KINDS: usize = 7;

impl Event {
    fn index(self) -> usize {
        match self {
            Event::Link => 0,
            Event::Offered => 1,
            Event::Refused => 2,
            Event::Dropped => 3,
            Event::Malformed => 4,
            Event::AppRefused => 5,
            Event::App => 6,
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

/// A token bucket: holds at most `per_s` tokens, gains `per_s` a second, and each
/// line takes one; a line without a token is counted instead.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    per_s: u32,
    /// Tokens, in thousandths (so that refill needs no floating point).
    milli: u64,
    last: Option<Instant>,
    /// Refused since the last one allowed.
    suppressed: u64,
}

impl Bucket {
    /// Full: `per_s` lines may go at once.
    pub fn new(per_s: u32) -> Bucket {
        Bucket {
            per_s,
            milli: u64::from(per_s) * 1000,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)`: write the line, `n` were held back since the last one written;
    /// `None`: hold it back (counted).
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        let cap = u64::from(self.per_s) * 1000;
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last);
            // per_s tokens a second = per_s thousandths a millisecond.
            let gained = u64::try_from(dt.as_millis())
                .unwrap_or(u64::MAX)
                .saturating_mul(u64::from(self.per_s));
            self.milli = self.milli.saturating_add(gained).min(cap);
        }
        // Time is kept only to the millisecond it was counted at, so nothing is lost
        // to rounding between calls.
        self.last = Some(match self.last {
            Some(last) => {
                let ms = now.saturating_duration_since(last).as_millis();
                last + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
            }
            None => now,
        });
        if self.milli < 1000 {
            self.suppressed += 1;
            return None;
        }
        self.milli -= 1000;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// One bucket per kind of event.
#[derive(Debug)]
pub(super) struct RateLog {
    buckets: [Bucket; KINDS],
}

impl RateLog {
    pub(super) fn new(per_s: u32) -> RateLog {
        RateLog {
            buckets: [Bucket::new(per_s); KINDS],
        }
    }

    /// Whether a line about `e` may be written now, and how many were suppressed
    /// before it.
    pub(super) fn allow(&mut self, e: Event, now: Instant) -> Option<u64> {
        self.buckets[e.index()].allow(now)
    }
}

/// Most characters of attacker-chosen text a log line carries.
pub const UNTRUSTED_CHARS: usize = 64;

/// Text an attacker chose, fit for a log line: its first [`UNTRUSTED_CHARS`]
/// characters, quoted and escaped (`{:?}`: no newline, control character or ANSI
/// escape reaches the log), and how many characters were cut.
pub fn untrusted(s: &str) -> String {
    let n = s.chars().count();
    let head: String = s.chars().take(UNTRUSTED_CHARS).collect();
    if n > UNTRUSTED_CHARS {
        format!("{head:?}… ({} more chars)", n - UNTRUSTED_CHARS)
    } else {
        format!("{head:?}")
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

    #[test]
    fn a_bucket_allows_a_burst_then_its_rate_and_reports_what_it_held_back() {
        let mut b = Bucket::new(10);
        let t = Instant::from_nanos(5_000_000_000);
        let got: Vec<_> = (0..1000).map(|_| b.allow(t)).collect();
        assert_eq!(got.iter().filter(|g| g.is_some()).count(), 10, "the burst");
        // 100 ms later one token is back, and the line says what was held back.
        let t2 = t + std::time::Duration::from_millis(100);
        assert_eq!(b.allow(t2), Some(990));
        assert_eq!(b.allow(t2), None);
        // Steady 1 ms apart for 10 s: 10 a second get through, no more.
        let mut written = 0;
        for i in 1..=10_000u64 {
            if b.allow(t2 + std::time::Duration::from_millis(i)).is_some() {
                written += 1;
            }
        }
        assert!((99..=101).contains(&written), "{written}");
    }

    #[test]
    fn untrusted_text_is_bounded_and_escaped() {
        let evil = format!("a\nfake line\x1b[31m{}", "x".repeat(10_000));
        let shown = untrusted(&evil);
        assert!(shown.len() < 120, "{shown}");
        assert!(!shown.contains('\n') && !shown.contains('\x1b'), "{shown}");
        assert!(
            shown.contains("\\n") && shown.contains("more chars"),
            "{shown}"
        );
        assert_eq!(untrusted("echo"), "\"echo\"");
    }
}
