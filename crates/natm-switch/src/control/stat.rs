//! What `natm stat --switch` shows of the control plane: signalling links and the
//! calls through the switch.

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
}

/// One call through the switch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CallRow {
    /// The switch's id of the call.
    pub id: u64,
    /// The called address.
    pub called: String,
    /// The QoS asked for.
    pub qos: String,
    /// Caller's port, and the VCIs the switch receives on and sends with there.
    pub a: (u16, Option<u16>, Option<u16>),
    /// Callee's port and VCIs, likewise.
    pub b: (u16, Option<u16>, Option<u16>),
    /// Connected (CONNECT ACKNOWLEDGE seen from the caller).
    pub active: bool,
    /// Cells/s reserved forward (on b's output) and backward (on a's).
    pub reserved_cells: (u64, u64),
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
            })
            .collect()
    }

    /// The calls, oldest first.
    pub fn calls(&self) -> Vec<CallRow> {
        let mut v: Vec<_> = self.calls.iter().collect();
        v.sort_by_key(|(id, t)| (t.since, **id));
        v.into_iter()
            .map(|(id, t)| CallRow {
                id: *id,
                called: t.called.clone(),
                qos: t.qos.clone(),
                a: (t.a.port.0, t.a.vci_in, t.a.vci_out),
                b: (t.b.port.0, t.b.vci_in, t.b.vci_out),
                active: t.active,
                reserved_cells: (t.fwd_cells, t.bwd_cells),
            })
            .collect()
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
