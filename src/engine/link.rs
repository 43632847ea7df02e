//! The engine's view of an adaptor port: one UDP socket per connection (the kernel
//! demultiplexes VCs to per-connection sockets, and each socket's receive buffer is
//! the per-VC queue that drops excess before user space does any work, seed 000
//! §6.2.2). Blocking reads with a timeout for application threads; non-blocking
//! drains for the driver thread.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use rustix::net::RecvFlags;

use crate::adaptor::{PortOptions, SendBatch, UdpPort};

use crate::wire::vcframe;

/// The UDP adaptor's VC header in front of each TPDU (`wire::vcframe`).
pub(crate) const VC_HEADER_LEN: usize = vcframe::HEADER_LEN;

/// The VC header of a data frame on VPI 0 / `vci`.
pub(crate) fn vc_header(vci: u16) -> [u8; VC_HEADER_LEN] {
    vcframe::Repr::data(0, vci).to_bytes()
}

/// The VCI of a data datagram, or `None` if it is not a natm UDP data frame.
pub(crate) fn vc_of(datagram: &[u8]) -> Option<u16> {
    match vcframe::Repr::parse_bytes(datagram) {
        Ok((r, _)) if r.kind == vcframe::FrameKind::Data && r.vpi == 0 => Some(r.vci),
        _ => None,
    }
}

/// One UDP socket of the engine: an adaptor port (GSO sends; reads stay single
/// datagrams so a blocked application wakes once per arrival).
#[derive(Debug)]
pub(crate) struct UdpLink {
    port: UdpPort,
}

/// How long a blocked application read waits before it looks at the VC again (an
/// abort or close by another thread is seen within this time at the latest).
pub(crate) const READ_SLICE: Duration = Duration::from_millis(50);

impl UdpLink {
    pub(crate) fn bind(addr: SocketAddr, rcvbuf: usize, sndbuf: usize) -> io::Result<UdpLink> {
        let port = UdpPort::bind_with(
            addr,
            &PortOptions {
                gso: true,
                gro: false,
                reuse_address: false,
            },
        )?;
        // Best effort: the kernel caps these at net.core.{r,w}mem_max.
        let _ = port.set_recv_buffer(rcvbuf);
        let _ = port.set_send_buffer(sndbuf);
        port.set_read_timeout(Some(READ_SLICE))?;
        Ok(UdpLink { port })
    }

    pub(crate) fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        self.port.connect(peer)
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.port.local_addr()
    }

    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.port.as_raw_fd()
    }

    /// Send a batch of frames (one GSO `sendmsg` per run of equal sizes); returns how
    /// many went out.
    pub(crate) fn send_batch(
        &self,
        batch: &SendBatch,
        to: Option<SocketAddr>,
    ) -> io::Result<usize> {
        self.port.send_batch(to, batch)
    }

    /// Wait up to [`READ_SLICE`] for a datagram.
    pub(crate) fn recv_blocking(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let (n, _, from) =
            rustix::net::recvfrom(&self.port, buf, RecvFlags::empty()).map_err(io::Error::from)?;
        let from = from
            .and_then(|a| SocketAddr::try_from(a).ok())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))?;
        Ok((n, from))
    }

    /// A datagram if one is queued now.
    pub(crate) fn recv_now(&self, buf: &mut [u8]) -> io::Result<(usize, Option<SocketAddr>)> {
        let (n, _, from) =
            rustix::net::recvfrom(&self.port, buf, RecvFlags::DONTWAIT).map_err(io::Error::from)?;
        let from = from.and_then(|a| SocketAddr::try_from(a).ok());
        Ok((n, from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vc_header_round_trips_and_rejects_foreign_datagrams() {
        let mut v = vc_header(33).to_vec();
        v.extend_from_slice(b"tpdu");
        assert_eq!(v.len(), VC_HEADER_LEN + 4);
        assert_eq!(vc_of(&v), Some(33));
        assert_eq!(v[0] >> 4, vcframe::MAGIC);
        assert_eq!(vc_of(b"\x45\x00\x00\x1c"), None);
        assert_eq!(vc_of(&[]), None);
    }
}
