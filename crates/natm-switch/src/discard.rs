//! Early and partial packet discard for AAL5 VCs in cell mode (Romanow & Floyd,
//! "Dynamics of TCP traffic over ATM networks", SIGCOMM 1994; ATMF TM 4.0 frame
//! discard).
//!
//! A cell lost from an AAL5 frame makes the whole frame useless (its CRC fails at the
//! receiver), yet its other cells still take queue space and line time. PPD: once a
//! cell of a frame is dropped, drop the rest of it but keep the last cell (AUU = 1),
//! so that the receiver still sees where the broken frame ends and the next frame is
//! not merged into it. EPD: when the queue is above a threshold as a frame's first
//! cell arrives, drop the whole frame, last cell included, so that the buffer left is
//! spent on frames that can complete.

/// Why a cell of an AAL5 VC was dropped by frame discard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameDrop {
    /// Early packet discard: the frame was refused at its first cell.
    Epd,
    /// Partial packet discard: an earlier cell of the frame was dropped.
    Ppd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// The next cell starts a frame.
    #[default]
    FrameStart,
    /// Inside a frame whose cells are being passed.
    InFrame,
    /// Dropping the rest of a frame refused at its first cell, last cell included.
    Early,
    /// Dropping the rest of a frame that lost a cell, up to (not including) its last.
    Partial,
}

/// The frame-discard state of one VC.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FrameDiscard {
    state: State,
}

impl FrameDiscard {
    /// Decides on a user-data cell before queue admission: `Err` drops it; `Ok`
    /// passes it on to admission, whose outcome goes to [`Self::admitted`] or
    /// [`Self::dropped`]. `over_threshold` is asked only at a frame's first cell and
    /// only if `epd` is on.
    #[inline]
    pub(crate) fn before(
        &mut self,
        end_of_frame: bool,
        epd: bool,
        over_threshold: impl FnOnce() -> bool,
    ) -> Result<(), FrameDrop> {
        match self.state {
            State::InFrame => Ok(()),
            State::FrameStart => {
                if epd && over_threshold() {
                    if !end_of_frame {
                        self.state = State::Early;
                    }
                    Err(FrameDrop::Epd)
                } else {
                    Ok(())
                }
            }
            State::Early => {
                if end_of_frame {
                    self.state = State::FrameStart;
                }
                Err(FrameDrop::Epd)
            }
            State::Partial => {
                if end_of_frame {
                    // Keep the end-of-frame marker: it goes to admission.
                    Ok(())
                } else {
                    Err(FrameDrop::Ppd)
                }
            }
        }
    }

    /// The cell was queued.
    #[inline]
    pub(crate) fn admitted(&mut self, end_of_frame: bool) {
        self.state = if end_of_frame {
            State::FrameStart
        } else {
            State::InFrame
        };
    }

    /// The cell was dropped after [`Self::before`] passed it (queue full, policing);
    /// with `ppd` the rest of its frame will be dropped.
    #[inline]
    pub(crate) fn dropped(&mut self, end_of_frame: bool, ppd: bool) {
        self.state = if end_of_frame {
            State::FrameStart
        } else if ppd {
            State::Partial
        } else {
            State::InFrame
        };
    }

    /// Forgets the frame in progress (the VC's queue was flushed).
    pub(crate) fn reset(&mut self) {
        self.state = State::FrameStart;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a frame of `n` cells; `fail` says which cells admission refuses.
    fn frame(d: &mut FrameDiscard, n: usize, epd: bool, over: bool, fail: &[usize]) -> String {
        (0..n)
            .map(|i| {
                let eof = i + 1 == n;
                match d.before(eof, epd, || over) {
                    Err(FrameDrop::Epd) => 'E',
                    Err(FrameDrop::Ppd) => 'P',
                    Ok(()) if fail.contains(&i) => {
                        d.dropped(eof, true);
                        'x'
                    }
                    Ok(()) => {
                        d.admitted(eof);
                        '.'
                    }
                }
            })
            .collect()
    }

    #[test]
    fn epd_drops_whole_frames_ppd_keeps_the_last_cell() {
        let mut d = FrameDiscard::default();
        assert_eq!(frame(&mut d, 5, true, false, &[]), ".....");
        assert_eq!(frame(&mut d, 5, true, true, &[]), "EEEEE");
        assert_eq!(frame(&mut d, 5, true, false, &[1]), ".xPP.");
        assert_eq!(frame(&mut d, 1, true, true, &[]), "E");
        // A refused last cell ends the frame: the next one starts clean.
        assert_eq!(frame(&mut d, 3, false, false, &[2]), "..x");
        assert_eq!(frame(&mut d, 3, false, true, &[]), "...");
    }
}
