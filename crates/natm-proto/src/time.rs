//! Time as the sans-IO layers see it: a plain number handed in by the caller.
//!
//! seed 000 §3: "the only support the protocol stack needs from the OS is ... a way to
//! read time". The transport never reads a clock; the engine converts the OS clock to
//! an [`Instant`], and the simulator runs a virtual one.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds since an arbitrary epoch chosen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Microseconds since the epoch, truncated to 32 bits (the TPDU timestamp clock).
    pub const fn micros_u32(self) -> u32 {
        (self.0 / 1_000) as u32
    }

    /// Time since `earlier`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Seconds since the epoch as a float (for reports and plots).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(d)))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(nanos(d)))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let t = Instant::from_nanos(1_500);
        assert_eq!((t + Duration::from_micros(1)).as_nanos(), 2_500);
        assert_eq!(t - Instant::from_nanos(2_000), Duration::ZERO);
        assert_eq!((t - Duration::from_secs(1)), Instant::ZERO);
        assert_eq!(
            Instant::from_nanos(u64::MAX) + Duration::from_secs(1),
            Instant::from_nanos(u64::MAX)
        );
        assert_eq!(Instant::from_nanos(5_000_000).micros_u32(), 5_000);
    }
}
