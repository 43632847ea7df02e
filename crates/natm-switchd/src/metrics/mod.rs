//! `natm switch --metrics ADDR` (issue 32): the counters of `natm stat --switch`, in
//! the Prometheus text format, per port (`port="<name>"`) and per signalling link;
//! served by natm-sigd's responder (`natm_sigd::metrics::http`). Per-VC counters stay
//! in the stat file: a label per VC would grow with every call.

use natm_sigd::metrics::text::{label, Exposition, Labels};

use crate::stat::{PortSnapshot, Snapshot};
use crate::AtmtcpCounters;

/// A per-port counter: name (before `_total`), help, value.
type PortRow = (&'static str, &'static str, fn(&PortSnapshot) -> u64);

const PORT_COUNTERS: &[PortRow] = &[
    (
        "port_datagrams_in",
        "Datagrams received from the port's peer",
        |p| p.link.datagrams_in,
    ),
    (
        "port_datagrams_out",
        "Datagrams sent to the port's peer (after loss)",
        |p| p.link.datagrams_out,
    ),
    (
        "port_bad_datagrams",
        "Datagrams refused: wrong sender, not a cell train, no VC header, failed authentication",
        |p| p.link.bad_datagrams,
    ),
    (
        "port_datagrams_lost",
        "Datagrams dropped by the configured random loss",
        |p| p.link.lost,
    ),
    (
        "port_mode_mismatch",
        "Units the data plane sent that the link cannot carry (the other link mode; RM frames towards Linux), dropped",
        |p| p.link.mode_mismatch,
    ),
    (
        "port_send_errors",
        "Datagrams the socket refused to send",
        |p| p.link.send_errors,
    ),
    (
        "port_recv_calls",
        "Receive system calls that brought datagrams",
        |p| p.link.recv_calls,
    ),
    ("port_send_calls", "Send system calls", |p| {
        p.link.send_calls
    }),
    (
        "port_cells_in",
        "Cells received (a frame counts its AAL5 cells)",
        |p| p.stats.counters.cells_in,
    ),
    ("port_cells_out", "Cells sent", |p| {
        p.stats.counters.cells_out
    }),
    ("port_frames_in", "AAL5 frames received", |p| {
        p.stats.counters.frames_in
    }),
    ("port_frames_out", "AAL5 frames sent", |p| {
        p.stats.counters.frames_out
    }),
    (
        "port_cells_tagged",
        "Cells tagged CLP = 1 by policing",
        |p| p.stats.counters.tagged,
    ),
    (
        "port_hec_corrected",
        "Headers with a single-bit error, corrected",
        |p| p.stats.hec_corrected,
    ),
    (
        "port_idle_cells",
        "Idle and unassigned cells received and ignored",
        |p| p.stats.idle_cells,
    ),
    ("port_oam_looped", "OAM F5 loopback cells answered", |p| {
        p.stats.oam_looped
    }),
    (
        "port_local_in",
        "Cells and frames received on locally terminated VCs",
        |p| p.stats.local_in,
    ),
    (
        "port_local_out",
        "Cells and frames the control plane sent out of the port",
        |p| p.stats.local_out,
    ),
    (
        "port_abr_rm_forward",
        "Forward ABR RM cells routed to the port",
        |p| p.stats.abr.rm_forward,
    ),
    (
        "port_abr_rm_backward",
        "Backward ABR RM cells routed to the port (never edited)",
        |p| p.stats.abr.rm_backward,
    ),
    (
        "port_abr_rm_marked",
        "Forward RM cells whose explicit rate the port lowered (ERICA)",
        |p| p.stats.abr.rm_marked,
    ),
    (
        "port_abr_rm_invalid",
        "RM cells that are not ABR RM cells (length, protocol, CRC-10), passed on untouched",
        |p| p.stats.abr.rm_invalid,
    ),
    (
        "port_efci_marked",
        "Data cells marked EFCI above the port's queue threshold (a frame counts its AAL5 cells)",
        |p| p.stats.abr.efci_marked,
    ),
];

/// A per-port gauge of ERICA's last averaging interval (0 before the first).
type AbrRow = (
    &'static str,
    &'static str,
    fn(&natm_switch::AbrInterval) -> u64,
);

const ABR_GAUGES: &[AbrRow] = &[
    (
        "port_abr_input_cells_per_second",
        "ABR cells/s that reached the port in the last averaging interval",
        |i| i.input_rate.round() as u64,
    ),
    (
        "port_abr_target_cells_per_second",
        "ERICA's target for ABR: 0.9 x (line - non-ABR reservations), cells/s",
        |i| i.target.round() as u64,
    ),
    (
        "port_abr_fair_share_cells_per_second",
        "ERICA's fair share: target / active ABR VCs, cells/s",
        |i| i.fair_share.round() as u64,
    ),
    (
        "port_abr_load_permille",
        "ERICA's load factor z (input rate / target), in thousandths",
        |i| (i.load * 1000.0).round() as u64,
    ),
    (
        "port_abr_active_vcs",
        "ABR VCs active in the last averaging interval",
        |i| u64::from(i.active_vcs),
    ),
];

/// An atmtcp port's link counter: name (before `_total`), help, value.
type AtmtcpRow = (&'static str, &'static str, fn(&AtmtcpCounters) -> u64);

const ATMTCP_COUNTERS: &[AtmtcpRow] = &[
    (
        "atmtcp_connections",
        "atmtcp connections established",
        |c| c.connections,
    ),
    ("atmtcp_disconnects", "atmtcp connections that ended", |c| {
        c.disconnects
    }),
    (
        "atmtcp_refused",
        "atmtcp connections closed at once: one was already up and not idle",
        |c| c.refused,
    ),
    (
        "atmtcp_refused_source",
        "atmtcp connections closed at once: their source is not in the port's allow",
        |c| c.refused_source,
    ),
    (
        "atmtcp_idle_taken_over",
        "atmtcp connections let go, idle for idle_ms, when a new allowed peer connected",
        |c| c.idle_taken_over,
    ),
    (
        "atmtcp_connect_failures",
        "atmtcp connection attempts that failed",
        |c| c.connect_failures,
    ),
    (
        "atmtcp_framing_errors",
        "atmtcp connections closed on a header that is not atmtcp",
        |c| c.framing_errors,
    ),
    ("atmtcp_frames_in", "atmtcp data messages received", |c| {
        c.frames_in
    }),
    ("atmtcp_frames_out", "atmtcp data messages sent", |c| {
        c.frames_out
    }),
    (
        "atmtcp_control_in",
        "atmtcp control messages received",
        |c| c.control_in,
    ),
    (
        "atmtcp_dropped_full",
        "atmtcp frames dropped: the send queue was full",
        |c| c.dropped_full,
    ),
    (
        "atmtcp_dropped_down",
        "atmtcp frames dropped: no connection was up",
        |c| c.dropped_down,
    ),
];

/// The exposition of the switch's counters now.
pub fn render(s: &Snapshot) -> String {
    let mut e = Exposition::new("natm_switch");
    let port = |p: &PortSnapshot| label("port", &p.name);
    for (name, help, value) in PORT_COUNTERS {
        e.counters(name, help, s.ports.iter().map(|p| (port(p), value(p))));
    }
    e.counters(
        "port_cells_dropped",
        "Cells dropped on the port, by cause (a frame counts its AAL5 cells)",
        s.ports.iter().flat_map(|p| {
            let causes = serde_json::to_value(p.stats.counters.dropped).unwrap_or_default();
            let rows: Vec<(Labels, u64)> = causes
                .as_object()
                .into_iter()
                .flatten()
                .map(|(cause, n)| {
                    let mut l = port(p);
                    l.push(("cause".into(), cause.clone()));
                    (l, n.as_u64().unwrap_or(0))
                })
                .collect();
            rows
        }),
    );
    e.gauges(
        "port_queue_cells",
        "Cells waiting in the port's output queues now",
        s.ports
            .iter()
            .map(|p| (port(p), u64::from(p.stats.queue_cells))),
    );
    e.gauges(
        "port_max_queue_cells",
        "The most cells that ever waited at the port",
        s.ports
            .iter()
            .map(|p| (port(p), u64::from(p.stats.max_queue_cells))),
    );
    for (name, help, value) in ABR_GAUGES {
        e.gauges(
            name,
            help,
            s.ports.iter().map(|p| {
                let v = p.stats.abr.interval.as_ref().map_or(0, value);
                (port(p), v)
            }),
        );
    }
    e.gauges(
        "port_line_rate_bps",
        "The port's line rate, bit/s",
        s.ports.iter().map(|p| (port(p), p.stats.line_rate)),
    );
    for (name, help, value) in ATMTCP_COUNTERS {
        e.counters(
            name,
            help,
            s.ports
                .iter()
                .filter_map(|p| Some((port(p), value(&p.atmtcp.as_ref()?.counters)))),
        );
    }
    let link_port = |id: u16| {
        let name = s
            .ports
            .get(usize::from(id))
            .map_or_else(|| id.to_string(), |p| p.name.clone());
        label("port", name)
    };
    e.gauges(
        "link_up",
        "Whether SSCOP is established on the port's signalling link",
        s.signalling
            .iter()
            .map(|l| (link_port(l.port), u64::from(l.up))),
    );
    e.gauges(
        "link_calls",
        "Calls through the port's signalling link now",
        s.signalling
            .iter()
            .map(|l| (link_port(l.port), l.calls as u64)),
    );
    e.gauges(
        "link_reserved_cells_per_second",
        "Cells/s reserved on the port's output by calls",
        s.signalling
            .iter()
            .map(|l| (link_port(l.port), l.reserved_cells)),
    );
    e.counters(
        "link_calls_refused",
        "Calls refused because of the port's link (its capacity, its state, no route from it)",
        s.signalling.iter().map(|l| (link_port(l.port), l.refused)),
    );
    e.counter("calls_refused", "Calls the switch refused", s.calls_refused);
    e.counter(
        "calls_screened",
        "SETUPs refused because their calling number is not their port's",
        s.calls_screened,
    );
    let active = s.calls.iter().filter(|c| c.active).count() as u64;
    e.gauges(
        "calls",
        "Calls through the switch now, by state",
        [
            (label("state", "setup"), s.calls.len() as u64 - active),
            (label("state", "active"), active),
        ],
    );
    e.gauge("vcs", "Cross-connects installed now", s.vcs.len() as u64);
    if let Some(r) = &s.routing {
        e.counter(
            "routing_crankbacks",
            "Calls routed again after a crankback",
            r.crankbacks,
        );
        let c = &r.counters;
        for (name, help, v) in [
            ("routing_hellos_out", "Routing hellos sent", c.hellos_out),
            ("routing_hellos_in", "Routing hellos received", c.hellos_in),
            (
                "routing_ptses_out",
                "PTSE transmissions (floods and retransmissions)",
                c.ptses_out,
            ),
            ("routing_retransmits", "PTSE retransmissions", c.retransmits),
            (
                "routing_ptses_installed",
                "Newer PTSEs received and installed",
                c.ptses_installed,
            ),
            ("routing_originated", "Own PTSE originations", c.originated),
            (
                "routing_bad_frames",
                "Routing frames that did not parse",
                c.bad_frames,
            ),
            (
                "routing_neighbours_lost",
                "Neighbours declared dead",
                c.neighbours_lost,
            ),
        ] {
            e.counter(name, help, v);
        }
        e.gauge(
            "routing_neighbours",
            "Trunks with a two-way neighbour now",
            r.neighbours.len() as u64,
        );
    }
    e.render()
}

#[cfg(test)]
mod tests;
