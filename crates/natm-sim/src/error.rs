//! Configuration errors: a topology or link setting the simulator cannot run.

use thiserror::Error;

use super::endpoint::VcId;
use super::topology::{HostId, LinkId};

/// Why a link, route or setting was refused. Nothing is changed when one is returned.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SimError {
    /// A link rate of zero would never finish sending a frame.
    #[error("link rate must be at least 1 bit/s, but entry {index} of the rate schedule (0: the initial rate) is 0")]
    ZeroRate {
        /// Position in the rate schedule (0 is the initial rate).
        index: usize,
    },
    /// A probability was not in [0, 1] (or was NaN).
    #[error("{what} probability {value} is outside [0, 1]")]
    BadProbability {
        /// Which setting.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// A round-robin weight of zero would never serve the VC.
    #[error("round-robin weight must be at least 1")]
    ZeroWeight,
    /// The host id does not belong to this simulation.
    #[error("no such host: {0}")]
    UnknownHost(HostId),
    /// The link id does not belong to this simulation.
    #[error("no such link: {0}")]
    UnknownLink(LinkId),
    /// A route must cross at least one link.
    #[error("a route needs at least one link")]
    EmptyPath,
    /// A host can send on a VC along one route only.
    #[error("{host} already has a route for {vc}")]
    DuplicateRoute {
        /// The sending host.
        host: HostId,
        /// The VC.
        vc: VcId,
    },
    /// On one link, a VC id names one flow; pick another VC id or another link.
    #[error("{vc} is already used on {link} by another route")]
    VcInUse {
        /// The link where the ids collide.
        link: LinkId,
        /// The VC.
        vc: VcId,
    },
    /// A network scenario that cannot be built as given.
    #[error("scenario: {0}")]
    Scenario(String),
}
