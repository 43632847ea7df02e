//! What a connection counts and reports: both VCs' counters ([`ConnStats`], for
//! `Connection::stats` and the periodic report to sigd) and seed 003's status flags
//! ([`ConnStatus`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::adaptor::UdpDrops;
use crate::engine::Conn;
use natm_proto::endpoint::PsbStats;
use natm_proto::transport::plpmtud::PlpmtudStats;
use natm_proto::transport::{AbortReason, QosOutcome};

/// Counters of both VCs of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnStats {
    /// The sending VC.
    pub tx: PsbStats,
    /// The receiving VC.
    pub rx: PsbStats,
    /// Smoothed RTT of the sending VC, once it has a sample (VCs without ACKs never do).
    pub srtt: Option<Duration>,
    /// Flow controller's rate on the sending VC, bit/s, if it sets one.
    pub rate_bps: Option<u64>,
    /// Flow controller's window on the sending VC, TPDUs, if it keeps one.
    pub window: Option<u64>,
    /// Datagrams refused before reaching a VC: not natm, unknown VC.
    pub refused_frames: u64,
    /// Times the receive side stopped reading at its high watermark.
    pub watermark_holds: u64,
    /// ACKs (NACKs) and retransmissions handled before data that arrived ahead of them
    /// in the same receive batch: seed 003's receive-side priority at work.
    pub rx_high_first: u64,
    /// Datagrams the socket failed to send.
    pub send_errors: u64,
    /// Frames the connection's receive queue dropped because it was full, before any
    /// work was spent on them (seed 000 §6.2.2): the mem port's own count, or the
    /// kernel's for the UDP socket (read from `/proc/net/udp`); `None` where unknown.
    pub queue_drops: Option<u64>,
    /// Bytes queued on the sending VC: not yet sent, or not yet acknowledged.
    pub send_queued: u64,
    /// Bytes held on the receiving VC: out of order, or not yet read.
    pub recv_queued: u64,
    /// The host's send buffer pool, which this connection's sending VC draws on with
    /// every other sending VC of the host (seed 001 §6, `EngineConfig::send_pool`).
    pub send_pool: crate::engine::SendPoolStats,
    /// The cell mode's counters (trains, cells, HEC corrections, reassembly drops,
    /// datagrams that were not trains); `None` in frame mode.
    pub cells: Option<crate::adaptor::CellStats>,
    /// The cell pacer of a cell-smoothed sending VC (`smooth=cell` on a cell-mode
    /// link, seed 001 §7): cells sent, frames shed, the deepest backlog, late cells.
    pub pacer: Option<natm_proto::flow::PacerStats>,
    /// The connection's UDP socket: datagrams and octets it handed to the kernel and
    /// took from it (VC headers or cell trains included), and the system calls that
    /// did it; `None` on an in-memory link.
    pub port: Option<crate::adaptor::PortStats>,
    /// A bare AAL5 VC pair's own counters (`transport=none`); `None` otherwise.
    pub bare: Option<BareStats>,
    /// The connection's OAM F5 loopback end point.
    pub oam: OamStats,
    /// The connection's ABR RM cells (`flow=abr`): its source's and its destination's.
    pub rm: RmStats,
    /// What sealing did, for a connection whose TPDUs are encrypted (issue 16);
    /// `None`: clear TPDUs.
    pub seal: Option<SealStats>,
    /// The path MTU the kernel holds for the peer (octets, IP header included), which
    /// the sending VC's TPDUs are cut to fit (issue 30); `None` on a mem link or
    /// before the socket has a peer.
    pub path_mtu: Option<u32>,
    /// Datagrams the kernel refused as larger than the path MTU and that went out in
    /// IP fragments after all: on a shared host port's socket or a cell link, what
    /// was cut before the path shrank (a frame-mode VC's own socket sends it as
    /// cells instead, [`ConnStats::sent_as_cells`]). 0 while the path MTU holds.
    pub fragmented: u64,
    /// Frames sent as AAL5 cell trains because they no longer fitted the path: TPDUs
    /// cut before a black hole was found (RFC 8899 §4.3) or before the kernel's path
    /// MTU fell (EMSGSIZE), sent as cells that fit, as a frame crosses an ATM
    /// network. 0 while the path holds.
    pub sent_as_cells: u64,
    /// The sending VC's path MTU search (RFC 8899 PLPMTUD, issue 30): the largest
    /// datagram payload confirmed to cross the path, which the VC's TPDUs are cut
    /// to fit, and the probes that found it; `None` on a mem or cell link, a bare
    /// VC, or a loopback path (whose MTU is the kernel's: TPDUs are cut to it).
    pub plpmtud: Option<PlpmtudStats>,
}

/// Counters of an encrypted connection's sealing ([`ConnStats::seal`]). The drops
/// happen before any VC sees the frame: none changes the connection's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SealStats {
    /// TPDUs sealed and sent.
    pub sealed: u64,
    /// TPDUs received whose tag verified.
    pub opened: u64,
    /// Frames with another cookie: dropped before any decryption.
    pub bad_cookie: u64,
    /// Frames whose tag did not verify (forged, modified, another key): dropped.
    pub bad_tag: u64,
    /// Frames replayed, too old for the replay window, or sent in clear: dropped
    /// before any decryption.
    pub replayed: u64,
}

/// Counters of a bare AAL5 VC pair (`transport=none`): SDUs and bytes each way, and
/// what was refused or dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BareStats {
    /// The sending VC.
    pub tx: natm_proto::endpoint::VcCounters,
    /// The receiving VC.
    pub rx: natm_proto::endpoint::VcCounters,
}

/// What a connection's OAM F5 loopback end point counted ([`Connection::oam_loopback`](super::Connection::oam_loopback)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OamStats {
    /// Loopback probes this end sent.
    pub probes_sent: u64,
    /// Answers to them that came back in time.
    pub answers: u64,
    /// End-to-end loopback requests this end answered.
    pub looped: u64,
    /// The peer's path MTU probes (loopback requests padded to the size probed, RFC
    /// 8899) this end answered; not in `looped`.
    pub path_probes_answered: u64,
    /// Answers no probe waited for (late, duplicated, foreign): dropped.
    pub unmatched: u64,
    /// Requests not for this end point (a segment flow, another location): dropped.
    pub ignored: u64,
    /// OAM frames that were not loopback cells: dropped.
    pub malformed: u64,
    /// End-to-end requests not answered: over the connection's answer budget (100 a
    /// second after a burst of 16).
    pub rate_limited: u64,
    /// On a sealed call: end-to-end requests and answers the peer did not sign
    /// (forged, or from a clear end point), dropped unanswered and unmatched.
    pub unauthenticated: u64,
    /// On a sealed call: signed requests whose tag was answered before (replays),
    /// dropped unanswered.
    pub replayed: u64,
}

/// What a connection's ABR RM cells did ([`ConnStats::rm`]); the source's allowed
/// cell rate is [`ConnStats::rate_bps`], in payload bit/s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RmStats {
    /// Forward RM cells this end's ABR source sent.
    pub frm_sent: u64,
    /// Backward RM cells it took as feedback.
    pub brm_taken: u64,
    /// The peer source's forward RM cells this end turned around.
    pub turned: u64,
    /// RM frames that were not ABR RM cells: dropped.
    pub malformed: u64,
    /// RM cells going the wrong way for their VC: dropped.
    pub ignored: u64,
}

/// seed 003's status flags of a connection ([`Connection::status`](super::Connection::status),
/// [`Connection::recv_with_status`](super::Connection::recv_with_status)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnStatus {
    /// The data returned with this status starts a message (receive calls only).
    pub message_start: bool,
    /// The data returned with this status ends a message (receive calls only).
    pub message_end: bool,
    /// The peer closed its sending VC and everything it sent was delivered.
    pub peer_closed: bool,
    /// This end's close completed: the peer has everything.
    pub closed: bool,
    /// The connection was aborted (by the peer, a timeout or the network), and why.
    pub aborted: Option<AbortReason>,
    /// The last send found the window full.
    pub window_full: bool,
    /// The application is sending faster than its agreed rate.
    pub over_rate: bool,
    /// A QoS change of this end's sending VC waits for the peer's answer.
    pub qos_pending: bool,
    /// How this end's last QoS change ended.
    pub qos: Option<QosOutcome>,
    /// The sending VC's rate in force, payload bit/s (0: none).
    pub tx_rate_bps: u64,
    /// How the peer's last QoS change of the receiving VC ended (the receiver
    /// learns the new rate as the peer asks for it).
    pub peer_qos: Option<QosOutcome>,
    /// The receiving VC's rate as the peer last set it, payload bit/s (0: none).
    pub rx_rate_bps: u64,
}

/// The status flags of `conn`; `edge` is the message start/end of data just taken.
pub(super) fn conn_status(conn: &Conn, edge: Option<(bool, bool)>) -> ConnStatus {
    let (t, r) = conn.status_parts();
    let (ts, th, trate, rs, rh, rrate) = (t.psb, t.half, t.rate_bps, r.psb, r.half, r.rate_bps);
    let (message_start, message_end) = edge.unwrap_or_default();
    let mut s = ConnStatus {
        message_start,
        message_end,
        peer_closed: rh.peer_closed,
        closed: th.closed,
        aborted: th.aborted.or(rh.aborted),
        window_full: ts.window_full,
        over_rate: ts.over_rate,
        qos_pending: ts.qos_pending,
        qos: th.qos,
        tx_rate_bps: trate,
        peer_qos: rh.qos,
        rx_rate_bps: rrate,
    };
    s.peer_closed |= rs.peer_closed;
    s
}

/// Counters of both VCs of an engine connection (`Connection::stats`, and the
/// periodic report to sigd). The socket queue's drops are looked up in `tables` when
/// given (read once for many connections), else read for this connection alone.
pub(crate) fn conn_stats(conn: &Conn, tables: Option<&UdpDrops>) -> ConnStats {
    let p = conn.stats_parts();
    let c = &conn.counters;
    ConnStats {
        tx: p.tx,
        rx: p.rx,
        srtt: p.srtt,
        rate_bps: p.rate_bps,
        window: p.window,
        refused_frames: c.not_natm.load(Ordering::Relaxed) + c.unknown_vc.load(Ordering::Relaxed),
        watermark_holds: c.held_by_watermark.load(Ordering::Relaxed),
        rx_high_first: c.rx_high_first.load(Ordering::Relaxed),
        send_errors: c.send_errors.load(Ordering::Relaxed),
        queue_drops: match tables {
            Some(t) => conn.link.queue_drops_in(t),
            None => conn.link.queue_drops(),
        },
        send_queued: p.send_queued,
        recv_queued: p.recv_queued,
        send_pool: p.send_pool,
        cells: conn.link.cell_stats(),
        pacer: conn.pacer_stats(),
        port: conn.link.port_stats(),
        bare: p.bare.map(|(tx, rx)| BareStats { tx, rx }),
        oam: {
            let o = &c.oam;
            let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            OamStats {
                probes_sent: n(&o.probes_sent),
                answers: n(&o.answers),
                looped: n(&o.looped),
                path_probes_answered: n(&o.path_probes_answered),
                unmatched: n(&o.unmatched),
                ignored: n(&o.ignored),
                malformed: n(&o.malformed),
                rate_limited: n(&o.rate_limited),
                unauthenticated: n(&o.unauthenticated),
                replayed: n(&o.replayed),
            }
        },
        rm: {
            let r = &c.rm;
            let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            RmStats {
                frm_sent: n(&r.frm_sent),
                brm_taken: n(&r.brm_taken),
                turned: n(&r.turned),
                malformed: n(&r.malformed),
                ignored: n(&r.ignored),
            }
        },
        path_mtu: conn.link.path_mtu(),
        fragmented: conn.link.oversize_fallbacks(),
        sent_as_cells: conn.link.frames_as_cells(),
        plpmtud: p.plpmtud,
        seal: conn.encrypted().then(|| {
            let c = &c.seal;
            let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            SealStats {
                sealed: n(&c.sealed),
                opened: n(&c.opened),
                bad_cookie: n(&c.bad_cookie),
                bad_tag: n(&c.bad_tag),
                replayed: n(&c.replayed),
            }
        }),
    }
}
