//! How long a call may wait: the one argument every waiting call of ulib takes
//! ([`Wait`]), and what a send takes its message as ([`Outgoing`]).
//!
//! seed 003 gives each user interface call a blocking and a non-blocking form; ulib
//! folds both, and the timed form, into one argument instead of a method each
//! (decision 0032-wait). Futures and `poll_*` calls are the async forms.

use std::time::{Duration, Instant};

use bytes::Bytes;

/// How long a call may wait for the connection (or the listener, or the network) to
/// make progress.
///
/// `Duration`s convert into [`Wait::For`], and `Option<Duration>` into `For` or, for
/// `None`, [`Wait::Block`]: `conn.recv(Duration::from_secs(1))` is
/// `conn.recv(Wait::For(Duration::from_secs(1)))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Until the call can complete, or the connection ends.
    #[default]
    Block,
    /// At most this long; then [`Error::TimedOut`](super::Error::TimedOut) with
    /// nothing taken.
    For(Duration),
    /// Until this instant; then [`Error::TimedOut`](super::Error::TimedOut).
    Until(Instant),
    /// Not at all: what can be done now, else
    /// [`Error::WouldBlock`](super::Error::WouldBlock) with why (seed 003's "window
    /// full", "over rate", "empty") and nothing taken.
    No,
}

impl From<Duration> for Wait {
    fn from(d: Duration) -> Wait {
        Wait::For(d)
    }
}

impl From<Option<Duration>> for Wait {
    /// `None`: no limit ([`Wait::Block`]).
    fn from(d: Option<Duration>) -> Wait {
        d.map_or(Wait::Block, Wait::For)
    }
}

impl From<Instant> for Wait {
    fn from(t: Instant) -> Wait {
        Wait::Until(t)
    }
}

/// What a [`Wait`] leaves the engine to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// Try once, now.
    Now,
    /// Wait, at most this long (`None`: no limit).
    Within(Option<Duration>),
}

impl Wait {
    /// The engine's form of the wait, its deadline taken now.
    pub(crate) fn limit(self) -> Limit {
        match self {
            Wait::Block => Limit::Within(None),
            Wait::For(d) => Limit::Within(Some(d)),
            Wait::Until(t) => Limit::Within(Some(t.saturating_duration_since(Instant::now()))),
            Wait::No => Limit::Now,
        }
    }

    /// The longest the call may wait (`None`: no limit; zero for [`Wait::No`]), for
    /// calls whose only non-waiting answer is "not yet".
    pub(crate) fn timeout(self) -> Option<Duration> {
        match self.limit() {
            Limit::Now => Some(Duration::ZERO),
            Limit::Within(t) => t,
        }
    }
}

/// A message to send: borrowed octets, copied into the sending VC's queue, or a
/// [`Bytes`] the queue holds as it is, without a copy — its TPDU payloads are slices
/// of it (retransmissions re-send the same slices), and the only copy of its octets
/// is the kernel's into the socket (seed 000 §5.4). The buffer is released when the
/// last of its TPDUs is acknowledged; the send buffer's bound counts its octets as it
/// counts copied ones. A `Vec<u8>` given by value becomes a `Bytes` without a copy.
#[derive(Debug, Clone)]
pub enum Outgoing<'a> {
    /// Copied into the send queue.
    Borrowed(&'a [u8]),
    /// Held by the send queue without a copy.
    Shared(Bytes),
}

impl Outgoing<'_> {
    /// The message's octets.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Outgoing::Borrowed(b) => b,
            Outgoing::Shared(b) => b,
        }
    }
}

impl<'a> From<&'a [u8]> for Outgoing<'a> {
    fn from(b: &'a [u8]) -> Self {
        Outgoing::Borrowed(b)
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for Outgoing<'a> {
    fn from(b: &'a [u8; N]) -> Self {
        Outgoing::Borrowed(b)
    }
}

impl<'a> From<&'a Vec<u8>> for Outgoing<'a> {
    fn from(b: &'a Vec<u8>) -> Self {
        Outgoing::Borrowed(b)
    }
}

impl<'a> From<&'a str> for Outgoing<'a> {
    fn from(s: &'a str) -> Self {
        Outgoing::Borrowed(s.as_bytes())
    }
}

impl From<Bytes> for Outgoing<'_> {
    fn from(b: Bytes) -> Self {
        Outgoing::Shared(b)
    }
}

impl From<Vec<u8>> for Outgoing<'_> {
    fn from(b: Vec<u8>) -> Self {
        Outgoing::Shared(Bytes::from(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_in_the_past_waits_zero_and_an_option_none_blocks() {
        let past = Instant::now() - Duration::from_secs(1);
        assert_eq!(
            Wait::Until(past).limit(),
            Limit::Within(Some(Duration::ZERO))
        );
        assert_eq!(Wait::from(None::<Duration>), Wait::Block);
        assert_eq!(
            Wait::from(Some(Duration::from_millis(5))).timeout(),
            Some(Duration::from_millis(5))
        );
        assert_eq!(Wait::No.timeout(), Some(Duration::ZERO));
        assert_eq!(Wait::Block.timeout(), None);
    }

    #[test]
    fn a_vec_given_by_value_is_shared_not_copied() {
        let v = vec![1u8, 2, 3];
        let p = v.as_ptr();
        match Outgoing::from(v) {
            Outgoing::Shared(b) => assert_eq!(b.as_ptr(), p),
            Outgoing::Borrowed(_) => panic!("copied"),
        }
    }
}
