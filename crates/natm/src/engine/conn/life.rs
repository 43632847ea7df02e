//! A connection's life in the engine (docs/decisions/0005-dropped-connections-finish.md):
//!
//! | from | transition | to | by |
//! |---|---|---|---|
//! | `Open` | `drop_handle` | `Dropped` | the application dropped its last handle (or a connect failed): the close goes on without it |
//! | `Dropped` | `forget` | `Forgotten` | both VCs finished: the engine removed it and ran its `on_gone` (a signalled call's release) |
//!
//! No transition goes back, and none skips `Dropped`: the engine forgets only what
//! no application holds.

use std::sync::atomic::{AtomicU8, Ordering};

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Life {
    /// An application handle holds it.
    Open = 0,
    /// No handle holds it; the engine finishes its close.
    Dropped = 1,
    /// The engine has forgotten it and run its `on_gone`: for a signalled call, its
    /// release is with sigd.
    Forgotten = 2,
}

/// A [`Life`] that several threads read and move on.
#[derive(Debug)]
pub(crate) struct LifeCell(AtomicU8);

impl Default for LifeCell {
    fn default() -> Self {
        LifeCell(AtomicU8::new(Life::Open as u8))
    }
}

impl LifeCell {
    pub(crate) fn get(&self) -> Life {
        match self.0.load(Ordering::SeqCst) {
            0 => Life::Open,
            1 => Life::Dropped,
            _ => Life::Forgotten,
        }
    }

    fn step(&self, from: Life, to: Life) -> bool {
        self.0
            .compare_exchange(from as u8, to as u8, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// `Open` → `Dropped`; false if it was not open.
    pub(crate) fn drop_handle(&self) -> bool {
        self.step(Life::Open, Life::Dropped)
    }

    /// `Dropped` → `Forgotten`; false if it was not dropped.
    pub(crate) fn forget(&self) -> bool {
        self.step(Life::Dropped, Life::Forgotten)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_dropped_then_forgotten_and_never_goes_back() {
        let l = LifeCell::default();
        assert_eq!(l.get(), Life::Open);
        assert!(!l.forget(), "an open connection is not forgotten");
        assert_eq!(l.get(), Life::Open);
        assert!(l.drop_handle());
        assert!(!l.drop_handle(), "dropped once");
        assert_eq!(l.get(), Life::Dropped);
        assert!(l.forget());
        assert_eq!(l.get(), Life::Forgotten);
        assert!(!l.forget() && !l.drop_handle());
        assert_eq!(l.get(), Life::Forgotten);
    }
}
