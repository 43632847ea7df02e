//! What `natm stat --switch` shows of the control plane: signalling links and the
//! calls through the switch.

use natm_proto::time::Instant;

use super::{Control, PortRole};
use crate::PortId;

/// One signalling port.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LinkRow {
    /// The data plane's port.
    pub port: u16,
    /// `host` or `switch`.
    pub role: String,
    /// Whether SSCOP is established.
    pub up: bool,
    /// Calls through this port.
    pub calls: usize,
    /// Cells/s reserved on the port's output by calls.
    pub reserved_cells: u64,
    /// Calls this switch refused because of this link (its capacity, its state, no
    /// route from it).
    #[cfg_attr(feature = "serde", serde(default))]
    pub refused: u64,
}

/// One call through the switch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CallRow {
    /// The switch's id of the call.
    pub id: u64,
    /// The called address.
    pub called: String,
    /// The QoS asked for, lowered to what the switch granted.
    pub qos: String,
    /// Caller's port, and the VCIs the switch receives on and sends with there.
    pub a: (u16, Option<u16>, Option<u16>),
    /// Callee's port and VCIs, likewise.
    pub b: (u16, Option<u16>, Option<u16>),
    /// Connected (CONNECT ACKNOWLEDGE seen from the caller).
    pub active: bool,
    /// Cells/s reserved forward (on b's output; a point-to-multipoint call's, summed
    /// over its branches) and backward (on a's).
    pub reserved_cells: (u64, u64),
    /// A point-to-multipoint call's branches, oldest first (`b` is the oldest); empty
    /// for a point-to-point call.
    #[cfg_attr(feature = "serde", serde(default))]
    pub branches: Vec<BranchRow>,
}

/// One branch of a point-to-multipoint call: an output port's leg.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BranchRow {
    /// The output port.
    pub port: u16,
    /// The label the switch named in the branch's SETUP (held; nothing comes back
    /// on it).
    pub vci_in: u16,
    /// The label the branch's far end receives on, which the data plane sends with
    /// (`None` until connected).
    pub vci_out: Option<u16>,
    /// Whether the branch's call is connected and replicated to.
    pub connected: bool,
    /// The root's parties the branch carries (the root's endpoint references; 0 is
    /// the SETUP's).
    pub parties: Vec<u16>,
    /// Cells/s reserved on the port's output.
    pub reserved_cells: u64,
}

impl Control {
    /// The signalling links, by port.
    pub fn links(&self) -> Vec<LinkRow> {
        self.links
            .iter()
            .map(|(p, l)| LinkRow {
                port: p.0,
                role: match l.cfg.role {
                    PortRole::Host => "host".into(),
                    PortRole::Switch => "switch".into(),
                    PortRole::Uni => "uni".into(),
                },
                up: l.saal.is_up(),
                calls: l.calls.len(),
                reserved_cells: l.reserved_cells,
                refused: l.refused,
            })
            .collect()
    }

    /// The calls, oldest first.
    pub fn calls(&self) -> Vec<CallRow> {
        let mut v: Vec<(Instant, CallRow)> = self
            .calls
            .iter()
            .map(|(id, t)| {
                let row = CallRow {
                    id: *id,
                    called: t.called.clone(),
                    qos: t.qos.to_string(),
                    a: (t.a.port.0, t.a.vci_in, t.a.vci_out),
                    b: (t.b.port.0, t.b.vci_in, t.b.vci_out),
                    active: t.active,
                    reserved_cells: (t.fwd_cells, t.bwd_cells),
                    branches: Vec::new(),
                };
                (t.since, row)
            })
            .chain(self.multicasts.iter().map(|(id, m)| (m.since, m.row(*id))))
            .collect();
        v.sort_by_key(|(since, row)| (*since, row.id));
        v.into_iter().map(|(_, row)| row).collect()
    }

    /// Calls refused by this switch (no route, admission, VCIs, bad SETUP).
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Calls through `port`.
    pub fn calls_on(&self, port: PortId) -> usize {
        self.links.get(&port).map_or(0, |l| l.calls.len())
    }
}
