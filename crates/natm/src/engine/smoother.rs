//! Cell-level smoothing of one sending VC on a cell-mode link (`smooth=cell`, seed 001
//! §7): the frames the transport releases are cut into cells, each cell becomes a
//! train of one (its own datagram), and a [`CellPacer`] lets each leave in its slot
//! of the VC's peak cell rate, from the connection's timer, instead of all of a
//! frame's cells leaving back to back as GSO runs of full trains.
//!
//! seed 001 §7 does this in the adaptor's SAR hardware; here the engine's driver is
//! the cell clock, so a cell leaves when the driver wakes for it (timerfd, some tens of
//! µs late under load: the pacer counts those as late, and they leave together).

use natm_proto::flow::{CellPacer, PacerStats};
use natm_proto::time::Instant;
use natm_proto::wire::train::{self, TrainPacker};
use natm_proto::wire::vcframe;

use crate::adaptor::SendBatch;

/// Cells a VC may have waiting for their slots: 16 frames of the default 4 KiB TPDU.
const MAX_CELLS: usize = 16 * 87;

/// A sending VC's cell pacer and the packer that cuts its frames.
#[derive(Debug)]
pub(crate) struct CellSmoother {
    pacer: CellPacer,
    packer: TrainPacker,
    /// The units due now, back to back (reused).
    due: Vec<u8>,
}

impl CellSmoother {
    /// Spacing cells at `cells_per_sec`.
    pub(crate) fn new(cells_per_sec: u64) -> CellSmoother {
        let packer = TrainPacker::new(1).expect("a train of one cell is valid");
        CellSmoother {
            pacer: CellPacer::new(
                cells_per_sec,
                std::time::Duration::ZERO,
                packer.train_len(),
                MAX_CELLS,
            ),
            packer,
            due: Vec::new(),
        }
    }

    /// Queue every frame of `batch`, ready at `now`.
    pub(crate) fn push(&mut self, now: Instant, batch: &SendBatch) {
        for frame in batch.frames() {
            self.packer.clear();
            let cut = vcframe::Repr::parse_bytes(frame)
                .map_err(|_| ())
                .and_then(|(h, sdu)| self.packer.push_frame(&h, sdu).map_err(|_| ()));
            // A frame with no cell form (an OAM probe: the cell codec refuses those
            // too) is not sent.
            if cut.is_err() {
                continue;
            }
            // A frame that would overflow the queue is shed whole (counted).
            let _ = self.pacer.push_frame(now, self.packer.as_bytes());
        }
    }

    /// The one-cell trains due at `now`, back to back, and the length of each.
    pub(crate) fn due(&mut self, now: Instant) -> (&[u8], usize) {
        self.due.clear();
        self.pacer.poll(now, &mut self.due);
        (&self.due, train::train_len(1))
    }

    /// When the next cell is due.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.pacer.poll_timeout()
    }

    /// Drop the cells still waiting (the VC was aborted).
    pub(crate) fn clear(&mut self) {
        self.pacer.clear();
    }

    /// The pacer's counters.
    pub(crate) fn stats(&self) -> PacerStats {
        self.pacer.stats()
    }
}
