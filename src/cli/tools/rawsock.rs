//! A raw AF_PACKET socket on one interface (packet(7)), for `natm capture`: every frame
//! the interface sends or receives, with its link header. Safe code only: socket2
//! opens the socket and attaches a classic BPF filter that keeps the chosen interface
//! (no `sockaddr_ll` bind, which would need `unsafe`), and frames are read with `read`.

use std::io::{self, Read};
use std::time::Duration;

use anyhow::{bail, Context};
use natm_proto::wire::pcap::link::Framing;
use socket2::{Domain, Protocol, SockFilter, Socket, Type};

/// ETH_P_ALL: frames of every protocol, outgoing ones included (linux/if_ether.h).
const ETH_P_ALL: u16 = 0x0003;
/// ARPHRD_ETHER and ARPHRD_LOOPBACK (linux/if_arp.h): a 14-octet Ethernet header.
const ARPHRD_ETHER: u16 = 1;
const ARPHRD_LOOPBACK: u16 = 772;
/// ARPHRD_NONE: no link header (tun devices).
const ARPHRD_NONE: u16 = 0xFFFE;

// Classic BPF (linux/filter.h, linux/bpf_common.h).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;
/// Ancillary loads: SKF_AD_OFF (−4096) plus SKF_AD_PKTTYPE (4) or SKF_AD_IFINDEX (8).
const SKF_AD_PKTTYPE: u32 = (-4096i32 + 4) as u32;
const SKF_AD_IFINDEX: u32 = (-4096i32 + 8) as u32;
/// sll_pkttype of a frame this host sends (linux/if_packet.h).
const PACKET_OUTGOING: u32 = 4;
/// Octets a filter keeps of an accepted frame: all of them.
const ACCEPT_ALL: u32 = 0x0004_0000;

/// How long a read waits before the caller looks at its clock and stop flag.
const POLL: Duration = Duration::from_millis(100);
/// Kernel receive buffer: room for bursts of 64 KiB loopback frames.
const RECV_BUFFER: usize = 8 << 20;

/// A packet socket that sees the frames of one interface.
#[derive(Debug)]
pub(crate) struct RawSocket {
    sock: Socket,
    framing: Framing,
}

impl RawSocket {
    /// Opens a socket on `iface` (needs CAP_NET_RAW).
    ///
    /// On loopback every frame passes twice, once outgoing and once incoming: the
    /// outgoing copy is filtered out so that each datagram is seen once. On other
    /// interfaces both directions are kept.
    pub(crate) fn open(iface: &str) -> anyhow::Result<RawSocket> {
        let sys = |file: &str| -> anyhow::Result<u32> {
            let path = format!("/sys/class/net/{iface}/{file}");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("no interface {iface:?} ({path})"))?;
            text.trim()
                .parse()
                .with_context(|| format!("{path}: {text:?} is not a number"))
        };
        let ifindex = sys("ifindex")?;
        let arphrd = sys("type")?;
        let loopback = arphrd == u32::from(ARPHRD_LOOPBACK);
        let framing = match u16::try_from(arphrd) {
            Ok(ARPHRD_ETHER | ARPHRD_LOOPBACK) => Framing::Ethernet,
            Ok(ARPHRD_NONE) => Framing::RawIp,
            _ => bail!("{iface}: link type {arphrd} is neither Ethernet, loopback nor raw IP"),
        };
        let protocol = Protocol::from(i32::from(ETH_P_ALL.to_be()));
        let sock = Socket::new(Domain::PACKET, Type::RAW, Some(protocol)).map_err(|e| {
            if e.kind() == io::ErrorKind::PermissionDenied {
                anyhow::anyhow!("a raw packet socket needs root (CAP_NET_RAW): {e}")
            } else {
                anyhow::anyhow!("opening a packet socket: {e}")
            }
        })?;
        // Frames that arrive before the filter is attached may come from any
        // interface; the caller parses them like the rest (they are rare and harmless).
        sock.attach_filter(&filter(ifindex, loopback))
            .context("attaching the interface filter")?;
        sock.set_read_timeout(Some(POLL))?;
        // A smaller buffer than asked is not an error: the capture only drops more.
        let _ = sock.set_recv_buffer_size(RECV_BUFFER);
        Ok(RawSocket { sock, framing })
    }

    /// What precedes the IP header in this interface's frames.
    pub(crate) fn framing(&self) -> Framing {
        self.framing
    }

    /// From now on [`RawSocket::recv`] returns at once (`None` when nothing is
    /// queued): to drain what arrived before a stop.
    pub(crate) fn stop_waiting(&self) -> io::Result<()> {
        self.sock.set_nonblocking(true)
    }

    /// The next frame into `buf` (cut to its length): its length, or `None` when no
    /// frame came within the poll interval or a signal interrupted the wait.
    pub(crate) fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match (&self.sock).read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// A BPF program: accept frames of interface `ifindex`, and on loopback only those
/// not outgoing.
fn filter(ifindex: u32, loopback: bool) -> Vec<SockFilter> {
    let mut prog = vec![SockFilter::new(BPF_LD_W_ABS, 0, 0, SKF_AD_IFINDEX)];
    if loopback {
        prog.extend([
            // Another interface: jump over the three to "drop".
            SockFilter::new(BPF_JMP_JEQ_K, 0, 3, ifindex),
            SockFilter::new(BPF_LD_W_ABS, 0, 0, SKF_AD_PKTTYPE),
            // Outgoing: jump over "accept" to "drop".
            SockFilter::new(BPF_JMP_JEQ_K, 1, 0, PACKET_OUTGOING),
        ]);
    } else {
        prog.push(SockFilter::new(BPF_JMP_JEQ_K, 0, 1, ifindex));
    }
    prog.extend([
        SockFilter::new(BPF_RET_K, 0, 0, ACCEPT_ALL),
        SockFilter::new(BPF_RET_K, 0, 0, 0),
    ]);
    prog
}
