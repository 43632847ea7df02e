//! Who is connected to what: hosts, links, and the route each VC takes.
//!
//! Links are simplex and need not name their ends: a route is a sending host, an ordered
//! list of links, and a receiving host, and between two consecutive links of a route
//! sits an implicit store-and-forward switch with no switching delay. A link shared by
//! several routes is a shared queue (a bottleneck); the reverse direction of a VC is
//! another route on the same VC id over other links.

use core::fmt;
use std::collections::HashMap;

use super::endpoint::VcId;
use super::queue::SlotIdx;
use super::stats::HostStats;
use natm_proto::time::Instant;

/// A host in one simulation (handed out by [`Sim::add_host`](super::Sim::add_host)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostId(pub(crate) u32);

impl HostId {
    /// Position in the order hosts were added, from 0.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host{}", self.0)
    }
}

/// One direction of a link in one simulation (from [`Sim::add_link`](super::Sim::add_link)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId(pub(crate) u32);

impl LinkId {
    /// Position in the order links were added, from 0.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for LinkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "link{}", self.0)
    }
}

/// Index of a route in the simulation's route table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RouteIdx(pub(crate) u32);

/// One link of a route, with the VC's slot in that link's queue looked up once at
/// configuration time so that forwarding a frame never hashes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hop {
    pub(crate) link: LinkId,
    pub(crate) slot: SlotIdx,
}

/// The path one direction of a VC takes.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub(crate) src: HostId,
    pub(crate) dst: HostId,
    pub(crate) vc: VcId,
    pub(crate) hops: Vec<Hop>,
}

/// Per-host settings of the simulated network interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostConfig {
    /// Frames the host may have in its first link (queued or being serialized) before
    /// the simulator stops polling it: the NIC transmit ring. Must be at least 1.
    pub tx_ring: usize,
}

impl HostConfig {
    /// The default ring: a few frames, enough to keep an access link busy without
    /// hiding the host's own pacing.
    pub const DEFAULT_TX_RING: usize = 4;
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            tx_ring: Self::DEFAULT_TX_RING,
        }
    }
}

/// A host during a run: its endpoint and the simulator's bookkeeping for it.
#[derive(Debug)]
pub(crate) struct Host<E> {
    pub(crate) endpoint: E,
    pub(crate) cfg: HostConfig,
    /// Frames of this host now in their first link.
    pub(crate) ring_used: usize,
    /// The deadline the host last asked for and that has a Timer event pending.
    pub(crate) timer: Option<Instant>,
    pub(crate) routes: HashMap<VcId, RouteIdx>,
    pub(crate) stats: HostStats,
}
