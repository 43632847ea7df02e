//! A frame-mode UDP link's frames that no longer fit the path leave as AAL5 cell
//! trains that do, and trains a peer sent so are taken among its frames (issue 30,
//! RFC 8899 §4.3; docs/decisions/0030-a-frame-that-no-longer-fits-crosses-as-cells.md):
//! a TPDU cut before the path shrank keeps its size and sequence number when SMART
//! resends it, and a bare VC's SDU is never cut at all.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{SendBatch, TooBig, UdpLink};
use crate::adaptor::CellCodec;

/// The largest frame a VC sends whole on a frame-mode link — its PLPMTU, if it
/// searches its path — and the counter of the frames it sent as cells instead.
///
/// Only a VC that searches its path (error control, no reserved rate) has one: its
/// TPDUs were cut to fit, so one that no longer does was cut before the path shrank.
/// A VC that does not (a bare VC, whose SDUs are the application's and never cut; a
/// best-effort one, which resends nothing) lets what the path refuses go out in IP
/// fragments, as before: measured, a bare VC's 8,476-octet SDUs as 7 trains each
/// overran the receiving socket where the kernel's reassembly had queued one
/// datagram, and IP over natm's TCP stalled (`tests/ip_network.rs`).
#[derive(Clone, Copy)]
pub(crate) struct CellFit<'a> {
    /// `None`: every frame leaves whole.
    pub(crate) limit: Option<usize>,
    pub(crate) count: &'a AtomicU64,
    /// Where the path to the peer is read again after the kernel refused a frame, on
    /// a socket with no peer of its own (a host port's sub); `None`: the link's own.
    pub(crate) peer: Option<&'a dyn PeerPath>,
}

impl std::fmt::Debug for CellFit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellFit")
            .field("limit", &self.limit)
            .field("peer", &self.peer.is_some())
            .finish()
    }
}

/// The path to one peer of a socket that has none of its own (a shared host port).
pub(crate) trait PeerPath {
    /// The largest datagram payload the path carries unfragmented, as last read.
    fn path_payload(&self) -> Option<usize>;
    /// The kernel refused a datagram as larger than the path MTU: the next
    /// [`PeerPath::path_payload`] reads it again.
    fn forget_path(&self);
}

impl CellFit<'_> {
    /// The fit frames of up to `seg` octets must be cut to as cells, if they do not
    /// fit whole.
    pub(super) fn over(&self, seg: usize) -> Option<usize> {
        self.limit.filter(|&l| seg > l)
    }

    /// What a send does with a frame the kernel refuses as larger than the path MTU:
    /// a VC that searches its path sends the rest as cells, any other fragments.
    pub(super) fn too_big(&self) -> TooBig<'_> {
        match (self.limit, self.peer) {
            (Some(_), None) => TooBig::Stop,
            (Some(_), Some(peer)) => TooBig::StopFor(peer),
            (None, _) => TooBig::Fragment,
        }
    }

    /// The path payload the cells of a run that stopped short fit: the peer's, or
    /// the link's.
    fn path(&self, link: &UdpLink) -> Option<usize> {
        match self.peer {
            Some(p) => p.path_payload(),
            None => link.path_payload(),
        }
    }
}

impl UdpLink {
    /// Frame mode: from now on send each frame longer than `fit` octets as AAL5 cell
    /// trains of at most `fit` octets (0: none). Issue 30, RFC 8899 §4.3.
    pub(crate) fn cells_above(&self, fit: usize) {
        if self.cells_above.load(Ordering::Relaxed) != fit {
            self.cells_above.store(fit, Ordering::Relaxed);
        }
    }

    /// Frames sent as cell trains because they no longer fitted the path.
    pub(crate) fn frames_as_cells(&self) -> u64 {
        self.frames_as_cells.load(Ordering::Relaxed)
    }

    /// The frame-mode link's cell codec, made at first use.
    pub(super) fn fallback(&self) -> &CellCodec {
        self.fallback
            .get_or_init(|| Box::new(CellCodec::for_frame_link()))
    }

    /// This link's own fit (a VC's own socket): frames longer than its VC's PLPMTU
    /// ([`UdpLink::cells_above`]) leave as cells. None in cell mode, where every
    /// frame does.
    pub(super) fn own_fit(&self) -> CellFit<'_> {
        let limit = match (&self.cells, self.cells_above.load(Ordering::Relaxed)) {
            (Some(_), _) | (None, 0) => None,
            (None, fit) => Some(fit),
        };
        CellFit {
            limit,
            count: &self.frames_as_cells,
            peer: None,
        }
    }

    /// Send `batch` as cell trains of at most `fit` octets, counting them in
    /// `count`; returns the frames sent.
    pub(super) fn send_cells(
        &self,
        batch: &SendBatch,
        fit: usize,
        to: Option<SocketAddr>,
        count: &AtomicU64,
    ) -> io::Result<usize> {
        let n = self.fallback().send(batch, Some(fit), |bytes, seg, n| {
            self.send_run(bytes, seg, n, to, TooBig::Fragment)
        })?;
        count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// After a frame-mode send that stopped short: if the kernel now says frames of
    /// `seg` octets do not fit the path (it refused one as larger than the path MTU,
    /// EMSGSIZE: the path shrank under TPDUs cut before, whose retransmissions keep
    /// their size), the `rest` leave as AAL5 cell trains that fit, not in IP
    /// fragments. Returns how many of them went.
    pub(super) fn rest_as_cells<'a>(
        &self,
        seg: usize,
        rest: impl Iterator<Item = [&'a [u8]; 2]>,
        to: Option<SocketAddr>,
        fit: CellFit<'_>,
    ) -> usize {
        match fit.path(self).filter(|&p| seg > p) {
            Some(p) => self.frames_as_cells_of(rest, p, to, fit.count),
            None => 0,
        }
    }

    /// Send `frames` as cell trains of at most `fit` octets; returns how many went
    /// (the others count as the caller's send errors; SMART resends them).
    pub(super) fn frames_as_cells_of<'a>(
        &self,
        frames: impl Iterator<Item = [&'a [u8]; 2]>,
        fit: usize,
        to: Option<SocketAddr>,
        count: &AtomicU64,
    ) -> usize {
        let mut sent = 0;
        let mut b = SendBatch::new();
        for f in frames {
            if b.push(&f).is_err() {
                sent += self.send_cells(&b, fit, to, count).unwrap_or(0);
                b.clear();
                if b.push(&f).is_err() {
                    break;
                }
            }
        }
        if !b.is_empty() {
            sent += self.send_cells(&b, fit, to, count).unwrap_or(0);
        }
        sent
    }
}
