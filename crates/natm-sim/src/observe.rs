//! Watching a run: periodic samples in virtual time, and a ready-made trace of a link's
//! queue and per-VC rates for the flow-control plots.

use std::time::Duration;

use super::endpoint::{Endpoint, VcId};
use super::simulator::Sim;
use super::topology::LinkId;
use natm_proto::time::Instant;

impl<E: Endpoint> Sim<E> {
    /// Runs until `deadline`, calling `sample` at now, now + `interval`, … up to
    /// `deadline`; each call sees the state after every event due at that instant.
    ///
    /// The closure may borrow local state, so it can push into a series the caller owns.
    /// An `interval` of zero is taken as one nanosecond.
    pub fn sample_until(
        &mut self,
        deadline: Instant,
        interval: Duration,
        mut sample: impl FnMut(&Self),
    ) {
        let interval = interval.max(Duration::from_nanos(1));
        let mut t = self.now();
        while t <= deadline {
            self.run_until(t);
            sample(self);
            let next = t + interval;
            if next == t {
                // The clock saturated at its end; nothing later can be sampled.
                break;
            }
            t = next;
        }
        self.run_until(deadline);
    }
}

/// One VC at one sample of a [`LinkTrace`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VcSample {
    /// The VC.
    pub vc: VcId,
    /// Frames of this VC waiting at the sample time.
    pub queue_frames: u64,
    /// Bytes of this VC waiting at the sample time.
    pub queue_bytes: u64,
    /// This VC's output rate over the interval that ended at the sample, bit/s of frame
    /// bytes (0 at the first sample).
    pub rate_bps: f64,
}

/// One sample of a [`LinkTrace`].
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSample {
    /// When it was taken.
    pub at: Instant,
    /// Frames waiting in the whole queue.
    pub queue_frames: u64,
    /// Bytes waiting in the whole queue.
    pub queue_bytes: u64,
    /// The link's output rate over the interval that ended here, bit/s of frame bytes.
    pub rate_bps: f64,
    /// Each VC on the link, in the order routes were added.
    pub vcs: Vec<VcSample>,
}

/// A time series of one link's queue depth and output rates, total and per VC.
///
/// Call [`LinkTrace::record`] from [`Sim::sample_until`]; rates are the difference of the
/// link's byte counters between consecutive records.
#[derive(Debug, Clone)]
pub struct LinkTrace {
    link: LinkId,
    /// Time and byte counters (total, then per VC) at the previous record.
    last: Option<(Instant, u64, Vec<u64>)>,
    samples: Vec<LinkSample>,
}

impl LinkTrace {
    /// An empty trace of `link`.
    pub fn new(link: LinkId) -> Self {
        LinkTrace {
            link,
            last: None,
            samples: Vec::new(),
        }
    }

    /// The link traced.
    pub fn link(&self) -> LinkId {
        self.link
    }

    /// The samples so far, oldest first.
    pub fn samples(&self) -> &[LinkSample] {
        &self.samples
    }

    /// Takes a sample of the link now.
    pub fn record<E: Endpoint>(&mut self, sim: &Sim<E>) {
        let link = sim.link(self.link);
        let now = sim.now();
        let stats = link.stats();
        let per_vc: Vec<u64> = link.vcs().map(|(_, v)| v.bytes_out).collect();
        let rate = |now_bytes: u64, then_bytes: u64, since: Instant| {
            let secs = (now - since).as_secs_f64();
            if secs > 0.0 {
                (now_bytes - then_bytes) as f64 * 8.0 / secs
            } else {
                0.0
            }
        };
        let (rate_bps, vcs) = match &self.last {
            Some((then, total, vcs_then)) => (
                rate(stats.bytes_out, *total, *then),
                link.vcs()
                    .enumerate()
                    .map(|(i, (vc, v))| VcSample {
                        vc,
                        queue_frames: v.queue_frames,
                        queue_bytes: v.queue_bytes,
                        // A VC that appeared since the last record started from zero.
                        rate_bps: rate(v.bytes_out, vcs_then.get(i).copied().unwrap_or(0), *then),
                    })
                    .collect(),
            ),
            None => (
                0.0,
                link.vcs()
                    .map(|(vc, v)| VcSample {
                        vc,
                        queue_frames: v.queue_frames,
                        queue_bytes: v.queue_bytes,
                        rate_bps: 0.0,
                    })
                    .collect(),
            ),
        };
        self.samples.push(LinkSample {
            at: now,
            queue_frames: stats.queue_frames,
            queue_bytes: stats.queue_bytes,
            rate_bps,
            vcs,
        });
        self.last = Some((now, stats.bytes_out, per_vc));
    }
}
