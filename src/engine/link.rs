//! The engine's view of an adaptor port: one UDP socket per connection (the kernel
//! demultiplexes VCs to per-connection sockets, and each socket's receive buffer is
//! the per-VC queue that drops excess before user space does any work, seed 000
//! §6.2.2). Blocking reads with a timeout for application threads; non-blocking
//! drains for the driver thread.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use rustix::net::{RecvFlags, SendFlags};

use crate::wire::vcframe;

/// The UDP adaptor's VC header in front of each TPDU (`wire::vcframe`).
pub(crate) const VC_HEADER_LEN: usize = vcframe::HEADER_LEN;

/// Append the VC header of a data frame on VPI 0 / `vci` to `out`.
pub(crate) fn put_vc_header(out: &mut Vec<u8>, vci: u16) {
    out.extend_from_slice(&vcframe::Repr::data(0, vci).to_bytes());
}

/// The VCI of a data datagram, or `None` if it is not a natm UDP data frame.
pub(crate) fn vc_of(datagram: &[u8]) -> Option<u16> {
    match vcframe::Repr::parse_bytes(datagram) {
        Ok((r, _)) if r.kind == vcframe::FrameKind::Data && r.vpi == 0 => Some(r.vci),
        _ => None,
    }
}

/// One UDP socket of the engine.
#[derive(Debug)]
pub(crate) struct UdpLink {
    sock: UdpSocket,
}

/// How long a blocked application read waits before it looks at the VC again (an
/// abort or close by another thread is seen within this time at the latest).
pub(crate) const READ_SLICE: Duration = Duration::from_millis(50);

impl UdpLink {
    pub(crate) fn bind(addr: SocketAddr, rcvbuf: usize, sndbuf: usize) -> io::Result<UdpLink> {
        let sock = UdpSocket::bind(addr)?;
        let s2 = socket2::SockRef::from(&sock);
        // Best effort: the kernel caps these at net.core.{r,w}mem_max.
        let _ = s2.set_recv_buffer_size(rcvbuf);
        let _ = s2.set_send_buffer_size(sndbuf);
        sock.set_read_timeout(Some(READ_SLICE))?;
        Ok(UdpLink { sock })
    }

    pub(crate) fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        self.sock.connect(peer)
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }

    /// Send one datagram, to the connected peer or to `to`.
    pub(crate) fn send(&self, buf: &[u8], to: Option<SocketAddr>) -> io::Result<()> {
        match to {
            Some(a) => self.sock.send_to(buf, a).map(|_| ()),
            None => rustix::net::send(&self.sock, buf, SendFlags::empty())
                .map(|_| ())
                .map_err(io::Error::from),
        }
    }

    /// Wait up to [`READ_SLICE`] for a datagram.
    pub(crate) fn recv_blocking(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.sock.recv_from(buf)
    }

    /// A datagram if one is queued now.
    pub(crate) fn recv_now(&self, buf: &mut [u8]) -> io::Result<(usize, Option<SocketAddr>)> {
        let (n, _, from) =
            rustix::net::recvfrom(&self.sock, buf, RecvFlags::DONTWAIT).map_err(io::Error::from)?;
        let from = from.and_then(|a| SocketAddr::try_from(a).ok());
        Ok((n, from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vc_header_round_trips_and_rejects_foreign_datagrams() {
        let mut v = Vec::new();
        put_vc_header(&mut v, 33);
        v.extend_from_slice(b"tpdu");
        assert_eq!(v.len(), VC_HEADER_LEN + 4);
        assert_eq!(vc_of(&v), Some(33));
        assert_eq!(v[0] >> 4, vcframe::MAGIC);
        assert_eq!(vc_of(b"\x45\x00\x00\x1c"), None);
        assert_eq!(vc_of(&[]), None);
    }
}
