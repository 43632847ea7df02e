//! A connection's ABR RM cells (`natm_proto::flow::abr`, `wire::rm`): the source's
//! forward RM cells out, the destination's turnaround, the source's feedback in.
//!
//! natm VCs are bidirectional as ATM's are: the destination sends each forward RM
//! cell back on the VC it came by (its receiving VC's VCI, TM 4.0 destination rules
//! 1–2), where it reaches the source on the VCI it sends on. RM frames are never
//! sealed, even on an encrypted call: switches rewrite their explicit rate on the way.
//! What a forged one can do is bounded: a backward cell moves the source's ACR only
//! within MCR..PCR, the contract the network polices anyway; a forward cell is turned
//! around once, to the connection's own peer (never to the datagram's source address),
//! so a forger reflects nothing and amplifies nothing.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use super::{Conn, End, Which};
use crate::adaptor::SendBatch;
use crate::engine::link::VC_HEADER_LEN;
use crate::engine::Engine;
use crate::time::Instant;
use crate::wire::rm::{Direction, RmCell};
use crate::wire::vcframe;
use natm_proto::endpoint::{Half, Simplex};

/// What a connection's RM cells did.
#[derive(Debug, Default)]
pub(crate) struct RmCounters {
    /// Forward RM cells this end's ABR source sent.
    pub(crate) frm_sent: std::sync::atomic::AtomicU64,
    /// Backward RM cells this end's source took as feedback.
    pub(crate) brm_taken: std::sync::atomic::AtomicU64,
    /// Forward RM cells of the peer's source turned around here.
    pub(crate) turned: std::sync::atomic::AtomicU64,
    /// RM frames that were not ABR RM cells (length, protocol, CRC-10): dropped.
    pub(crate) malformed: std::sync::atomic::AtomicU64,
    /// RM cells going the wrong way for their VC (a backward cell on the receiving
    /// VC, a forward one on the sending VC), or with nobody to answer: dropped.
    pub(crate) ignored: std::sync::atomic::AtomicU64,
}

impl Conn {
    /// Where a frame this end originates goes: the connected socket's peer, or
    /// before the handshake pinned it, the address the call named.
    fn own_peer(&self) -> Option<Option<SocketAddr>> {
        if self.sock_connected.load(Ordering::Acquire) {
            Some(None)
        } else {
            self.handshake_to.map(Some)
        }
    }

    /// Sends one RM cell on `vci` as an RM frame; false if it did not go.
    fn send_rm(&self, vci: u16, cell: &RmCell) -> bool {
        let Some(peer) = self.own_peer() else {
            return false;
        };
        let header = vcframe::Repr::new(vcframe::FrameKind::Rm, self.vpi, vci).to_bytes();
        let mut payload = cell.to_bytes();
        // Told apart from other direct calls' RM cells on the same VCI at a host port.
        natm_proto::endpoint::mark_call(&mut payload, self.route.cookie);
        let mut batch = SendBatch::with_capacity(VC_HEADER_LEN + payload.len());
        if batch.push(&[&header, &payload]).is_err() {
            return false;
        }
        self.send_batch(&batch, peer);
        true
    }

    /// The forward RM cell the sending half's ABR source wants out now, if any
    /// (called after each flush of the sending end).
    pub(super) fn send_due_rm<H: Simplex>(&self, end: &mut End<H>, now: Instant) {
        if let Some(frm) = end.half.poll_rm(now) {
            if self.send_rm(end.half.vci(), &frm) {
                self.counters.rm.frm_sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The data frame just taken on the receiving VC carried EFCI or not: the VC's
    /// EFCI state is its last data cell's (TM 4.0 destination rule 2).
    pub(super) fn note_efci(&self, half: Half, d: &[u8]) {
        if half == Half::Rx {
            let ci = vcframe::Packet::new_unchecked(d).ci();
            if ci != self.efci.load(Ordering::Relaxed) {
                self.efci.store(ci, Ordering::Relaxed);
            }
        }
    }

    /// An RM frame on one of the connection's VCs: turned around if it is the peer
    /// source's forward cell on the receiving VC, taken as feedback if it is a
    /// backward cell on the sending VC, else counted and dropped.
    pub(super) fn take_rm(&self, eng: &Engine, h: &vcframe::Repr, sdu: &[u8]) {
        let c = &self.counters.rm;
        let Some(half) = self.route.half_of(h.vci) else {
            self.counters.unknown_vc.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Ok(cell) = RmCell::parse(sdu) else {
            c.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match (half, cell.dir) {
            (Half::Rx, Direction::Forward) => {
                let congested = self.efci.swap(false, Ordering::Relaxed);
                if self.send_rm(h.vci, &cell.turned_around(congested)) {
                    c.turned.fetch_add(1, Ordering::Relaxed);
                } else {
                    c.ignored.fetch_add(1, Ordering::Relaxed);
                }
            }
            (Half::Tx, Direction::Backward) => {
                let now = eng.clock.now();
                let (mut e, cv) = self.tx();
                e.half.handle_backward_rm(now, &cell);
                c.brm_taken.fetch_add(1, Ordering::Relaxed);
                // A higher rate may let queued TPDUs go before the shaper's timer.
                self.after(eng, Which::Tx, &mut e, cv, now, usize::MAX);
            }
            _ => {
                c.ignored.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
