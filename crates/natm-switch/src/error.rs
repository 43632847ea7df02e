//! The switch's typed errors: what `connect`, `disconnect` and the `handle_*` calls
//! refuse, one variant per reason.

use natm_proto::wire::cell::HeaderFormat;
use thiserror::Error;

use crate::table::{ConnId, Endpoint, PortId};

/// Why the switch refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SwitchError {
    /// No port has this id.
    #[error("no port {0}")]
    UnknownPort(PortId),
    /// The input side of the cross-connect is already switched.
    #[error("{0} is already connected")]
    EntryExists(Endpoint),
    /// The output side is already the output of another cross-connect (two inputs
    /// would merge into one VC).
    #[error("{0} is already the output of another connection")]
    OutputInUse(Endpoint),
    /// A VPI is VP-switched and VC-switched on the same port (I.311: a VPI is one or
    /// the other on a link).
    #[error("{0} mixes VP and VC switching of one VPI")]
    VpiConflict(Endpoint),
    /// The VPI does not fit the port's header format (8 bits UNI, 12 bits NNI).
    #[error("VPI {vpi} does not fit the {format:?} header of port {port}")]
    VpiOutOfRange {
        /// The port.
        port: PortId,
        /// The VPI asked for.
        vpi: u16,
        /// The port's header format.
        format: HeaderFormat,
    },
    /// VCI 0 marks unassigned and idle cells (I.361); it cannot carry a VC.
    #[error("VCI 0 is unassigned and cannot be switched ({0})")]
    UnassignedVci(Endpoint),
    /// A VP cross-connect between a cell port and a frame port: the cells of a VP's
    /// VCs interleave and carry no frame of their own to convert.
    #[error("{0}: a VP cross-connect cannot join a cell port and a frame port")]
    VpConversion(Endpoint),
    /// No cross-connect has this id (never made, or already disconnected).
    #[error("no connection {0}")]
    UnknownConnection(ConnId),
    /// The VC is not terminated in the switch.
    #[error("{0} is not terminated locally")]
    NotLocal(Endpoint),
    /// The port's control queue is full (the control plane sends faster than the
    /// line).
    #[error("the control queue of port {0} is full")]
    ControlQueueFull(PortId),
    /// A branch asked of a connection that cannot have one: a VP cross-connect, or a
    /// connection released and draining.
    #[error("connection {0} cannot take a point-to-multipoint branch")]
    NotReplicable(ConnId),
    /// A traffic contract whose numbers make no sense.
    #[error("bad traffic contract: {0}")]
    BadContract(&'static str),
    /// A port configuration whose numbers make no sense.
    #[error("bad port configuration: {0}")]
    BadPortConfig(&'static str),
}
