//! The contract between the simulator and the protocol machinery it drives.

use core::fmt;

use natm_proto::time::Instant;

/// The VCI-like identifier of a VC on the simulated network.
///
/// One id names both directions of a VC: data goes one way and acknowledgements come
/// back on the same id along the reverse route (the TPDU layout's "ACK on the backward
/// direction of the same VCC").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VcId(pub u32);

impl fmt::Display for VcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vc{}", self.0)
    }
}

/// A host's protocol machinery as the simulator sees it (sans-IO, quinn-proto call order).
///
/// The simulator promises: time never goes backwards between calls; `handle_frame` sees
/// only frames whose CRC checked out; `poll_transmit` is called only while the host's
/// transmit ring has room, so an endpoint never has to drop a frame itself; after every
/// `handle_*` call (and after [`Sim::host_mut`](super::Sim::host_mut)) the simulator
/// polls `poll_transmit` until it yields `None` or the ring fills, then `poll_timeout`.
///
/// The endpoint promises what quinn-proto's connection does: after `handle_timeout`,
/// `poll_timeout` is later than `now` or `None`. A deadline that stays at `now` is
/// honoured again at `now`, so the run would never leave that instant.
pub trait Endpoint {
    /// A frame arrived on `vc` (bytes are the frame as sent; corruption already filtered).
    fn handle_frame(&mut self, now: Instant, vc: VcId, frame: &[u8]);
    /// Next frame to put on the wire, if any is ready now: (vc, bytes).
    fn poll_transmit(&mut self, now: Instant) -> Option<(VcId, Vec<u8>)>;
    /// As [`Endpoint::poll_transmit`], writing the frame into `buf` (empty; a buffer the
    /// simulator recycled from a frame it finished with) so that an endpoint need not
    /// allocate a buffer per frame. Returns the frame's VC; on `None`, `buf` is left
    /// empty. By default it takes the buffer `poll_transmit` allocates.
    fn poll_transmit_into(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<VcId> {
        let (vc, frame) = self.poll_transmit(now)?;
        *buf = frame;
        Some(vc)
    }
    /// Earliest time this endpoint wants `handle_timeout`.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Called at or after the time `poll_timeout` gave.
    fn handle_timeout(&mut self, now: Instant);
}

// Lets `Sim<Box<dyn Endpoint>>` mix endpoint types while `Sim<T>` keeps static dispatch.
impl<T: Endpoint + ?Sized> Endpoint for Box<T> {
    fn handle_frame(&mut self, now: Instant, vc: VcId, frame: &[u8]) {
        (**self).handle_frame(now, vc, frame)
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<(VcId, Vec<u8>)> {
        (**self).poll_transmit(now)
    }
    fn poll_transmit_into(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<VcId> {
        (**self).poll_transmit_into(now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
}
