//! The UDP adaptor port: one UDP socket, batched with GSO, GRO and `recvmmsg`.
//!
//! A [`UdpPort`] is either a VC's own connected socket (the kernel then delivers only
//! the peer's datagrams, and the socket's receive buffer is the VC's receive queue) or
//! a listener that takes datagrams from anyone. Sends go out as one UDP GSO `sendmsg`
//! per run of equal-sized frames (via quinn-udp), and fall back to one datagram per
//! frame at run time if the kernel or the device refuses GSO. Receives take up to
//! [`quinn_udp::BATCH_SIZE`] buffers per `recvmmsg`, each of which may carry several
//! datagrams coalesced by GRO.
//!
//! All methods take `&self`: a port may be shared between the application thread that
//! blocks in [`UdpPort::recv`] and the engine thread that polls it.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use quinn_udp::{RecvMeta, Transmit, UdpSocketState, BATCH_SIZE};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::batch::{RecvBatch, SendBatch, MAX_DATAGRAM};

/// Receive-buffer size a GRO port needs per slot: more than the largest run GRO
/// coalesces (a GSO send is at most 65,507 octets, and Linux's default `gro_max_size`
/// stops at 64 KiB), so that a full slot means truncation. A larger run — a raised
/// `gro_max_size` — is dropped and counted in [`PortStats::truncated`], never cut.
pub const GRO_SLOT_LEN: usize = 65_536;

// errno values with which a kernel or device that cannot do GSO refuses it (the same
// on every Linux architecture); quinn-udp turns GSO off on the same two.
const EIO: i32 = 5;
/// Asynchronous errors one receive reads past before it gives up and reports the
/// error (each was cleared by being reported; a new one needs a new ICMP message).
const MAX_ASYNC_ERRORS: u32 = 8;
const EINVAL: i32 = 22;

/// How to open a [`UdpPort`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortOptions {
    /// Send runs of equal-sized frames with UDP GSO where the kernel supports it. Off:
    /// always one datagram per `send` system call.
    pub gso: bool,
    /// Let quinn-udp configure the socket, which turns on UDP GRO. quinn-udp also sets
    /// `IP_PMTUDISC_PROBE`: the kernel then refuses (EMSGSIZE) any datagram larger than
    /// the interface MTU instead of fragmenting it. Turn GRO off on paths whose MTU is
    /// smaller than the VC's frames (4 KiB TPDUs over 1500-octet Ethernet); the socket
    /// then keeps the kernel's defaults, fragmentation included.
    pub gro: bool,
    /// `SO_REUSEADDR`, so that a VC's connected socket can share its local port with
    /// the listener (the kernel prefers the connected socket for its peer's datagrams).
    pub reuse_address: bool,
}

/// What a VC's socket ([`UdpPort::bind_vc`]) hands up with each datagram from the
/// start; [`UdpPort::set_gro`] and [`UdpPort::set_receive_stamps`] change it later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VcReceive {
    /// UDP GRO: a GSO run arrives whole, in one buffer, its segment size in a control
    /// message. Off, the kernel cuts the run into datagrams as it queues them.
    pub gro: bool,
    /// The kernel's arrival stamp on each datagram (`SO_TIMESTAMPNS`).
    pub stamps: bool,
}

impl VcReceive {
    /// GRO and stamps: what a VC that exchanges ACKs and moves bulk reads.
    pub const ALL: VcReceive = VcReceive {
        gro: true,
        stamps: true,
    };
    /// Neither: each receive on a connected socket is then a plain `recv(2)`, with
    /// no message header or control messages for the kernel to copy in and out.
    pub const PLAIN: VcReceive = VcReceive {
        gro: false,
        stamps: false,
    };
}

impl Default for PortOptions {
    fn default() -> PortOptions {
        PortOptions {
            gso: true,
            gro: true,
            reuse_address: false,
        }
    }
}

/// A snapshot of a port's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Datagrams handed to the kernel.
    pub datagrams_sent: u64,
    /// Octets handed to the kernel.
    pub bytes_sent: u64,
    /// Successful send system calls (a GSO send counts once).
    pub send_calls: u64,
    /// Send calls that carried more than one datagram with GSO.
    pub gso_batches: u64,
    /// Times a GSO send was refused and its frames went out one by one instead.
    pub gso_fallbacks: u64,
    /// Sends that failed with an error other than `WouldBlock`.
    pub send_errors: u64,
    /// Datagrams received (GRO buffers split).
    pub datagrams_received: u64,
    /// Octets received.
    pub bytes_received: u64,
    /// Successful receive system calls.
    pub recv_calls: u64,
    /// Receive buffers that carried more than one datagram (GRO).
    pub gro_coalesced: u64,
    /// Receives that failed with an error other than `WouldBlock`/`TimedOut`: mostly
    /// asynchronous errors (ECONNREFUSED from an ICMP port unreachable), after which
    /// the receive is tried again.
    pub recv_errors: u64,
    /// Receive buffers dropped because they came back full, so perhaps truncated.
    pub truncated: u64,
}

#[derive(Debug, Default)]
struct Counters {
    datagrams_sent: AtomicU64,
    bytes_sent: AtomicU64,
    send_calls: AtomicU64,
    gso_batches: AtomicU64,
    gso_fallbacks: AtomicU64,
    send_errors: AtomicU64,
    datagrams_received: AtomicU64,
    bytes_received: AtomicU64,
    recv_calls: AtomicU64,
    gro_coalesced: AtomicU64,
    recv_errors: AtomicU64,
    truncated: AtomicU64,
}

fn add(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Relaxed);
}

type HeldGro = Option<(std::net::UdpSocket, Arc<UdpSocketState>)>;
/// [`hold_gro_key`]'s sockets, IPv4 and IPv6.
static HELD_GRO: [std::sync::OnceLock<HeldGro>; 2] =
    [std::sync::OnceLock::new(), std::sync::OnceLock::new()];

/// Keep one socket with UDP GRO on for the life of the process, per address family,
/// and a quinn-udp state made beside it; the state, shared, drives every VC's socket
/// ([`UdpPort::bind_vc`]).
///
/// Turning GRO on for a UDP socket takes a reference on a kernel static key
/// (`udp_encap_needed_key`, and the IPv6 one), and closing the socket drops it; when
/// the count goes 0 → 1 or 1 → 0 the kernel patches its code and interrupts every CPU
/// (text poke, IPIs). With one socket per VC end and a call's sockets short-lived,
/// that happened twice per call: `perf record` of `natm-lab perf calls` showed a quarter
/// of all CPU in `static_key_slow_inc`/`_dec` under `setsockopt(UDP_GRO)` and
/// `close`. Held here, the count never reaches 0 and the per-socket cost is one
/// atomic increment. Best effort: if the socket cannot be made, nothing changes.
fn hold_gro_key(v6: bool) -> Option<Arc<UdpSocketState>> {
    HELD_GRO[usize::from(v6)]
        .get_or_init(|| {
            let any = if v6 {
                SocketAddr::from((Ipv6Addr::LOCALHOST, 0))
            } else {
                SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
            };
            // quinn-udp's state is made on a socket of its own, closed at once:
            // quinn-udp turns arrival stamps on, and Linux lets go of its stamp key
            // (`netstamp_needed_key`, which has every packet the host receives
            // stamped by `ktime_get_real`, whichever socket it is for) only when such
            // a socket closes, not when the option is turned off again. Held, it
            // cost a 32 B round trip on one CPU ~0.1 us (`read_tsc` under
            // `netif_rx`, issue 30). The stamp key is taken when a VC wants stamps
            // ([`hold_stamp_key`]).
            let state = {
                let probe = std::net::UdpSocket::bind(any).ok()?;
                UdpSocketState::new((&probe).into()).ok()?
            };
            let s = std::net::UdpSocket::bind(any).ok()?;
            // The held socket takes the GRO key alone (best effort, as below).
            let _ =
                nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::UdpGroSegment, &true);
            Some((s, Arc::new(state)))
        })
        .as_ref()
        .map(|(_, state)| state.clone())
}

/// Hold the kernel's receive-stamp key on for the life of the process, from the first
/// socket that wants stamps: the held socket of [`hold_gro_key`] turns them on once.
/// While any socket stamps, the kernel stamps every packet the host receives, so a
/// process that never asks (best-effort VCs only: no ACKs to carry stamps) leaves the
/// key off; one that asked keeps it, so that sockets opened and closed with calls do
/// not flip it (each flip patches kernel code on every CPU, as the GRO key's did).
/// The key is the kernel's, one for all families: one held socket of either holds it.
fn hold_stamp_key() {
    static HELD: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    HELD.get_or_init(|| {
        let held = HELD_GRO.iter().find_map(|h| h.get()?.as_ref());
        if let Some((s, _)) = held {
            let _ = nix::sys::socket::setsockopt(
                s,
                nix::sys::socket::sockopt::ReceiveTimestampns,
                &true,
            );
        }
    });
}

/// An ICMP error that answered one of a port's datagrams ([`UdpPort::take_icmp_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpError {
    /// Who sent the ICMP message (the destination host, or a router on the path).
    pub from: Option<std::net::IpAddr>,
    /// Port unreachable (`ECONNREFUSED`): the host is there and nothing listens on
    /// the datagram's destination port.
    pub refused: bool,
}

/// One UDP socket of the UDP adaptor (DESIGN §2: each AAL5 frame is one datagram).
#[derive(Debug)]
pub struct UdpPort {
    socket: Socket,
    /// quinn-udp's: what the kernel can do (GSO segments) and its error history,
    /// nothing of this socket; shared by the VC sockets of a process.
    state: Arc<UdpSocketState>,
    /// Our GSO switch: the option, cleared for good when the kernel or device cannot
    /// do GSO at all (EIO, EINVAL).
    gso: AtomicBool,
    /// Largest segment the path took with GSO: lowered when a GSO send of larger
    /// segments fails with EMSGSIZE (a segment over the path MTU; GSO cannot fragment).
    gso_size_limit: AtomicUsize,
    /// Whether the kernel can do UDP GRO for this socket (receive buffers are sized
    /// for runs).
    gro_able: bool,
    /// Whether GRO is on now ([`UdpPort::set_gro`]).
    gro: AtomicBool,
    /// Whether the kernel stamps arrivals now ([`UdpPort::set_receive_stamps`]).
    stamps: AtomicBool,
    nonblocking: AtomicBool,
    /// The socket's family is IPv6 (fixed when it was made): options that differ by
    /// family ask this, not the kernel for the local address each time.
    v6: bool,
    /// Set once, by [`UdpPort::connect`]: a receive reads it without a lock, and
    /// a connected port's receives ask the kernel for no source address.
    peer: OnceLock<SocketAddr>,
    /// What quinn-udp found the kernel allows per GSO send (64 on Linux ≥ 4.18).
    max_segments: usize,
    counters: Counters,
}

/// Room for one received datagram's control messages: the GRO segment size and the
/// receive stamp natm asks for, and the packet info and TOS that quinn-udp turns on
/// for a socket it sets up ([`UdpPort::bind_with`]). (Sized for the stamp and GRO
/// alone, such a socket's datagrams came with their control messages cut, and a GRO
/// run's segment size lost.)
fn cmsg_room() -> Vec<u8> {
    nix::cmsg_space!(i32, nix::sys::time::TimeSpec, nix::libc::in6_pktinfo, i32)
}

/// A lone frame of at most this many octets is copied into one buffer and sent with
/// send(2) ([`UdpPort::send_gathered`]).
const SMALL_FRAME: usize = 256;

/// Most frames one gathered `sendmsg` carries: Linux's GSO limit (`UDP_MAX_SEGMENTS`).
const MAX_GATHERED: usize = 64;

impl UdpPort {
    /// Open a socket bound to `addr` with the default [`PortOptions`] (GSO and GRO
    /// on), in blocking mode.
    pub fn bind(addr: SocketAddr) -> io::Result<UdpPort> {
        UdpPort::bind_with(addr, &PortOptions::default())
    }

    /// Open a socket bound to `addr` with `options`, in blocking mode.
    pub fn bind_with(addr: SocketAddr, options: &PortOptions) -> io::Result<UdpPort> {
        let _ = hold_gro_key(addr.is_ipv6());
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if options.reuse_address {
            socket.set_reuse_address(true)?;
        }
        socket.bind(&addr.into())?;
        let state = if options.gro {
            UdpSocketState::new((&socket).into())?
        } else {
            // quinn-udp's state holds what the kernel can do (GSO segments) and its
            // error history, nothing of the socket it was made on; its send and receive
            // take the socket as an argument. Made on a scratch socket, it leaves ours
            // at the kernel's defaults: no GRO, no IP_PMTUDISC_PROBE.
            let any = match addr {
                SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
                SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
            };
            let scratch = std::net::UdpSocket::bind(any)?;
            UdpSocketState::new((&scratch).into())?
        };
        // quinn-udp made the socket non-blocking; a port starts blocking, like std's.
        socket.set_nonblocking(false)?;
        // quinn-udp's set-up turned GRO and arrival stamps on (and packet info,
        // which natm does not read).
        let gro_able = options.gro && state.gro_segments() > 1;
        Ok(UdpPort::with_state(
            socket,
            addr.is_ipv6(),
            Arc::new(state),
            options.gso,
            gro_able,
            (options.gro, options.gro),
        ))
    }

    /// A VC's data socket bound to `addr`: GSO, UDP GRO, the kernel's default path-MTU
    /// discovery (large frames fragment, as on a fresh socket), blocking, with receive
    /// and send buffers of `rcvbuf` and `sndbuf` bytes (best effort: the kernel caps
    /// them at `net.core.{r,w}mem_max`) and reads bounded by `read_timeout`.
    ///
    /// Seven system calls (socket, bind, five options) where [`UdpPort::bind_with`]
    /// takes about twenty: quinn-udp's per-socket set-up turns on receive options natm
    /// never reads (TOS, packet info), probes GSO, makes the socket
    /// non-blocking and sets `IP_PMTUDISC_PROBE`, which the VC's link then had to
    /// undo, and each buffer size was read back. A call through sigd opens two such
    /// sockets (`natm-lab perf calls`: `strace -f` counted 21 system calls per socket;
    /// docs/PERFORMANCE.md, issue 17 round three). The quinn-udp state is the
    /// process's shared one ([`hold_gro_key`]); if it cannot be made, the socket
    /// is [`UdpPort::bind_with`]'s without GRO.
    pub fn bind_vc(
        addr: SocketAddr,
        rcvbuf: usize,
        sndbuf: usize,
        read_timeout: Duration,
        receive: VcReceive,
    ) -> io::Result<UdpPort> {
        let Some(state) = hold_gro_key(addr.is_ipv6()) else {
            // No GRO then, and the socket keeps the kernel's defaults.
            let options = PortOptions {
                gro: false,
                ..PortOptions::default()
            };
            let port = UdpPort::bind_with(addr, &options)?;
            let _ = port.socket.set_recv_buffer_size(rcvbuf);
            let _ = port.socket.set_send_buffer_size(sndbuf);
            port.set_read_timeout(Some(read_timeout))?;
            if receive.stamps {
                let _ = port.set_receive_stamps(true);
            }
            return Ok(port);
        };
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        socket.bind(&addr.into())?;
        let _ = socket.set_recv_buffer_size(rcvbuf);
        let _ = socket.set_send_buffer_size(sndbuf);
        socket.set_read_timeout(Some(read_timeout))?;
        let gro_able = state.gro_segments() > 1;
        let port = UdpPort::with_state(
            socket,
            addr.is_ipv6(),
            state,
            true,
            gro_able,
            (false, false),
        );
        // Without GRO (an old kernel) the port reads one datagram per buffer.
        if receive.gro {
            let _ = port.set_gro(true);
        }
        // Kernel receive stamps: a receiver stamps each ACK with when its TPDU
        // arrived, so packet-pair times pairs by the spacing the path gave them, not
        // by when a batched read got to them (`transport::recv`). Without them the
        // ACKs carry the read time.
        if receive.stamps {
            let _ = port.set_receive_stamps(true);
        }
        Ok(port)
    }

    /// A port on `socket` (IPv6 if `v6`), with GSO if `gso` and the kernel allows,
    /// and GRO that may be turned on if `gro_able`; `(gro, stamps)` say what the
    /// socket has on now.
    fn with_state(
        socket: Socket,
        v6: bool,
        state: Arc<UdpSocketState>,
        gso: bool,
        gro_able: bool,
        (gro, stamps): (bool, bool),
    ) -> UdpPort {
        let max_segments = if gso { state.max_gso_segments() } else { 1 };
        UdpPort {
            socket,
            gso: AtomicBool::new(gso && max_segments > 1),
            gso_size_limit: AtomicUsize::new(usize::MAX),
            gro_able,
            gro: AtomicBool::new(gro && gro_able),
            stamps: AtomicBool::new(stamps),
            state,
            nonblocking: AtomicBool::new(false),
            v6,
            peer: OnceLock::new(),
            max_segments,
            counters: Counters::default(),
        }
    }

    /// Connect to `peer`: sends without a destination go there, and the kernel drops
    /// datagrams from anyone else before they reach this socket. A port connects
    /// once: connecting it again to the same peer does nothing, to another is
    /// refused (`AlreadyExists`), so that what it received is always from the
    /// peer it names.
    pub fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        if let Some(&had) = self.peer.get() {
            return if had == peer {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("connected to {had} already"),
                ))
            };
        }
        self.socket.connect(&peer.into())?;
        // Two threads connecting at once both reached the kernel; the first to set
        // the peer names it, and the kernel holds the last: tell the loser.
        match self.peer.set(peer) {
            Ok(()) => Ok(()),
            Err(_) if self.peer.get() == Some(&peer) => Ok(()),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "connected to another peer at the same time",
            )),
        }
    }

    /// The peer [`UdpPort::connect`] gave, if any.
    fn peer(&self) -> Option<SocketAddr> {
        self.peer.get().copied()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        sock_addr(self.socket.local_addr()?)
    }

    /// The connected peer (`NotConnected` for a listener).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        sock_addr(self.socket.peer_addr()?)
    }

    /// Ask for a receive buffer of `bytes` (the VC's receive queue, seed 000 §6.2.2);
    /// returns what the kernel granted (Linux doubles the request and caps it at
    /// `net.core.rmem_max`).
    pub fn set_recv_buffer(&self, bytes: usize) -> io::Result<usize> {
        self.socket.set_recv_buffer_size(bytes)?;
        self.socket.recv_buffer_size()
    }

    /// Ask for a send buffer of `bytes`; returns what the kernel granted.
    pub fn set_send_buffer(&self, bytes: usize) -> io::Result<usize> {
        self.socket.set_send_buffer_size(bytes)?;
        self.socket.send_buffer_size()
    }

    /// The receive buffer the kernel holds for this socket, octets.
    pub fn recv_buffer(&self) -> io::Result<usize> {
        self.socket.recv_buffer_size()
    }

    /// The send buffer the kernel holds for this socket, octets.
    pub fn send_buffer(&self) -> io::Result<usize> {
        self.socket.send_buffer_size()
    }

    /// Bound a blocking receive: after `timeout` it fails with `WouldBlock` (Linux's
    /// EAGAIN). `None` waits for ever.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket.set_read_timeout(timeout)
    }

    /// Whether the kernel stamps each datagram with its arrival (`SO_TIMESTAMPNS`,
    /// on for a VC's socket from [`UdpPort::bind_vc`]): a VC that exchanges no ACKs
    /// has no use for the stamps, and each costs its receive a control message
    /// (~0.3 us of a 32 B round trip on one CPU, issue 30).
    pub fn set_receive_stamps(&self, on: bool) -> io::Result<()> {
        if on {
            hold_stamp_key();
            // Known before the kernel stamps: every receive from here on reads the
            // control messages.
            self.stamps.store(true, Relaxed);
        }
        let set = nix::sys::socket::setsockopt(
            &self.socket,
            nix::sys::socket::sockopt::ReceiveTimestampns,
            &on,
        )
        .map_err(io::Error::from);
        // A refused switch leaves the stamps as they were; a failed turn-on is
        // still read for (harmless), one off is the kernel's word that none come.
        if !on && set.is_ok() {
            self.stamps.store(false, Relaxed);
        }
        set
    }

    /// Have the kernel keep (`true`) the ICMP errors that answer this socket's
    /// datagrams (`IP_RECVERR`, and `IPV6_RECVERR` on an IPv6 socket), for
    /// [`UdpPort::take_icmp_error`]: an unconnected socket learns of them no other
    /// way. While any is queued, a send or receive may fail once with its error
    /// (`ECONNREFUSED`), and each is charged to the receive buffer: drain them, and
    /// turn them off (`false`, which also drops those queued) when no longer wanted.
    pub fn set_icmp_errors(&self, on: bool) -> io::Result<()> {
        use nix::sys::socket::{setsockopt, sockopt};
        if self.v6 {
            setsockopt(&self.socket, sockopt::Ipv6RecvErr, &on)?;
            // A dual-stack socket hears IPv4 ICMP too (best effort: v6-only refuses).
            let _ = setsockopt(&self.socket, sockopt::Ipv4RecvErr, &on);
            Ok(())
        } else {
            Ok(setsockopt(&self.socket, sockopt::Ipv4RecvErr, &on)?)
        }
    }

    /// The next ICMP error queued for this socket (while [`UdpPort::set_icmp_errors`]),
    /// or `None`. Each costs one `recvmsg(MSG_ERRQUEUE)`; queued errors are charged to
    /// the socket's receive buffer, so whoever turns them on drains them.
    pub fn take_icmp_error(&self) -> io::Result<Option<IcmpError>> {
        let e = self.state.recv_transport_error((&self.socket).into())?;
        Ok(e.map(|e| IcmpError {
            from: e.addr.map(|a| a.ip()),
            refused: e.raw_errno == nix::libc::ECONNREFUSED,
        }))
    }

    /// Bound a blocking send (a full send buffer) the same way.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket.set_write_timeout(timeout)
    }

    /// Non-blocking mode, for a port driven by a poller: calls that cannot proceed fail
    /// with `WouldBlock` at once, and a receive drains up to a whole batch per call.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.socket.set_nonblocking(nonblocking)?;
        self.nonblocking.store(nonblocking, Relaxed);
        Ok(())
    }

    /// Whether the port is in non-blocking mode.
    pub fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Relaxed)
    }

    /// Set (`true`) or clear the IP "don't fragment" bit on what the port sends
    /// (`IP_PMTUDISC_DO` or `IP_PMTUDISC_DONT`, and the IPv6 equivalents). With it
    /// set, the kernel refuses a datagram larger than the path MTU it knows (EMSGSIZE)
    /// instead of cutting it into IP fragments, and learns a smaller path MTU from
    /// ICMP "fragmentation needed" / "packet too big" (RFC 1191, RFC 8201).
    pub fn set_dont_fragment(&self, on: bool) -> io::Result<()> {
        use rustix::net::sockopt::{self, Ipv4PathMtuDiscovery, Ipv6PathMtuDiscovery};
        let v6 = self.v6;
        if v6 {
            let mode = if on {
                Ipv6PathMtuDiscovery::DO
            } else {
                Ipv6PathMtuDiscovery::DONT
            };
            sockopt::set_ipv6_mtu_discover(&self.socket, mode)?;
            // A dual-stack socket sends IPv4 too.
        }
        let mode = if on {
            Ipv4PathMtuDiscovery::DO
        } else {
            Ipv4PathMtuDiscovery::DONT
        };
        match sockopt::set_ip_mtu_discover(&self.socket, mode) {
            Err(_) if v6 => Ok(()),
            r => r.map_err(io::Error::from),
        }
    }

    /// The path MTU the kernel holds for the connected peer (`IP_MTU`/`IPV6_MTU`):
    /// the route's or interface's MTU, lowered by what ICMP reported. `NotConnected`
    /// on a socket with no peer.
    pub fn path_mtu(&self) -> io::Result<usize> {
        use rustix::net::sockopt;
        let mtu = match self.peer().ok_or(io::ErrorKind::NotConnected)? {
            SocketAddr::V4(_) => sockopt::ip_mtu(&self.socket)?,
            SocketAddr::V6(_) => sockopt::ipv6_mtu(&self.socket)?,
        };
        Ok(mtu as usize)
    }

    /// Octets of IP and UDP header in front of each datagram's payload to the
    /// connected peer (or on the local address's family when unconnected).
    pub fn ip_udp_overhead(&self) -> usize {
        let v6 = match self.peer() {
            Some(p) => p.is_ipv6() && p.ip().to_canonical().is_ipv6(),
            None => self.v6,
        };
        if v6 {
            40 + 8
        } else {
            20 + 8
        }
    }

    /// Most datagrams one send system call carries now: 1 without GSO or after the
    /// kernel refused it.
    pub fn max_gso_segments(&self) -> usize {
        if self.gso.load(Relaxed) {
            self.max_segments
        } else {
            1
        }
    }

    /// Whether the socket has UDP GRO on now (receive buffers may carry several
    /// datagrams).
    pub fn gro(&self) -> bool {
        self.gro.load(Relaxed)
    }

    /// Turn UDP GRO on or off: on, a GSO run arrives whole in one buffer; off, the
    /// kernel cuts it into datagrams as it queues them. Call it from the port's one
    /// receiving thread, or with no receive under way: a connected port with neither
    /// GRO nor stamps receives with a plain `recv(2)`, which cannot tell a run from
    /// one datagram, and a receive that had chosen it as GRO came on could take a run
    /// queued meanwhile for one datagram. `Unsupported` if the kernel cannot.
    pub fn set_gro(&self, on: bool) -> io::Result<()> {
        if on && !self.gro_able {
            return Err(io::ErrorKind::Unsupported.into());
        }
        if on {
            // Known before the kernel queues a run: every receive from here on reads
            // the segment size.
            self.gro.store(true, Relaxed);
        }
        let set = nix::sys::socket::setsockopt(
            &self.socket,
            nix::sys::socket::sockopt::UdpGroSegment,
            &on,
        )
        .map_err(io::Error::from);
        // Off as asked, or never turned on; a refused turn-off leaves it on.
        if set.is_ok() != on {
            self.gro.store(false, Relaxed);
        }
        set
    }

    /// A receive batch of `slots` buffers sized for this port: [`GRO_SLOT_LEN`] if it
    /// can have GRO on, else one octet more than the largest UDP payload.
    pub fn recv_batch(&self, slots: usize) -> RecvBatch {
        let slot_len = if self.gro_able {
            GRO_SLOT_LEN
        } else {
            MAX_DATAGRAM + 1
        };
        RecvBatch::new(slots, slot_len)
    }

    /// Send `contents` as datagrams of `segment_size` octets (the last may be shorter)
    /// to `dst`, or to the connected peer if `None`; returns how many went out.
    ///
    /// With GSO, runs of up to [`UdpPort::max_gso_segments`] datagrams (and at most
    /// 65,507 octets) go out in one `sendmsg`. If the kernel refuses a GSO send, the
    /// port counts a fallback and sends that run again one datagram at a time, then
    /// remembers: after EIO or EINVAL (no GSO in the kernel or the device; quinn-udp's
    /// own test) it stops using GSO; after EMSGSIZE (a segment larger than the path MTU,
    /// which GSO cannot fragment — Linux 6.x answers so) it stops using GSO for segments
    /// of that size and larger. Single datagrams over the MTU still go out fragmented
    /// unless [`PortOptions::gro`] is on.
    ///
    /// Like `Write::write`, a count short of the whole means the rest was not sent: the
    /// socket would block (non-blocking mode or a write timeout) or the kernel refused a
    /// datagram; the error itself comes back only when nothing was sent. Errors other
    /// than `WouldBlock` are counted in [`PortStats::send_errors`].
    pub fn send(
        &self,
        dst: Option<SocketAddr>,
        contents: &[u8],
        segment_size: usize,
    ) -> io::Result<usize> {
        if segment_size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "segment size must be at least 1",
            ));
        }
        let mut sent = 0;
        let mut rest = contents;
        while !rest.is_empty() {
            let max = self.run_limit(segment_size);
            let take = rest.len().min(max * segment_size);
            let (chunk, tail) = rest.split_at(take);
            let segments = chunk.len().div_ceil(segment_size);
            let result = if segments > 1 {
                self.send_gso(dst, chunk, segment_size)
            } else {
                self.send_one(dst, chunk)
            };
            match self.account(result, segments, chunk.len(), segment_size) {
                Ok(0) => {}
                Ok(n) => {
                    sent += n;
                    rest = tail;
                }
                Err(e) => return if sent > 0 { Ok(sent) } else { Err(e) },
            }
        }
        Ok(sent)
    }

    /// Most datagrams of `segment_size` octets one send may carry now (GSO's limits,
    /// and what the kernel refused before).
    fn run_limit(&self, segment_size: usize) -> usize {
        if segment_size <= self.gso_size_limit.load(Relaxed) {
            self.max_gso_segments()
                .min(MAX_DATAGRAM / segment_size)
                .max(1)
        } else {
            1
        }
    }

    /// Count what one send of `segments` datagrams (`bytes` octets, GSO if more than
    /// one) came to: how many went out — 0 when a GSO send was refused and the same
    /// datagrams are to go again one at a time (the fallbacks of [`UdpPort::send`]) —
    /// or the error that ends the send.
    fn account(
        &self,
        result: io::Result<()>,
        segments: usize,
        bytes: usize,
        segment_size: usize,
    ) -> io::Result<usize> {
        match result {
            Ok(()) => {
                add(&self.counters.send_calls, 1);
                add(&self.counters.datagrams_sent, segments);
                add(&self.counters.bytes_sent, bytes);
                if segments > 1 {
                    add(&self.counters.gso_batches, 1);
                }
                Ok(segments)
            }
            Err(e) if segments > 1 && matches!(e.raw_os_error(), Some(EIO | EINVAL)) => {
                self.gso.store(false, Relaxed);
                add(&self.counters.gso_fallbacks, 1);
                Ok(0)
            }
            Err(e) if segments > 1 && quinn_udp::is_msg_size_err(&e) => {
                self.gso_size_limit.fetch_min(segment_size - 1, Relaxed);
                add(&self.counters.gso_fallbacks, 1);
                Ok(0)
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::WouldBlock {
                    add(&self.counters.send_errors, 1);
                }
                Err(e)
            }
        }
    }

    /// Send every frame of `batch` (see [`UdpPort::send`]); returns how many went out.
    pub fn send_batch(&self, dst: Option<SocketAddr>, batch: &SendBatch) -> io::Result<usize> {
        match batch.segment_size() {
            Some(size) => self.send(dst, batch.as_bytes(), size),
            None => Ok(0),
        }
    }

    /// Send `frames` datagrams, each gathered from its parts (e.g. the VC and TPDU
    /// headers, then the payload where it lies), as GSO runs of `segment_size`
    /// octets (every frame that long but the last, which may be shorter) with one
    /// vectored `sendmsg` per run: the frames are never copied together in user
    /// space; the kernel copies each once, as it copies a contiguous run. Same
    /// fallbacks and return as [`UdpPort::send`].
    pub fn send_gathered(
        &self,
        dst: Option<SocketAddr>,
        frames: &[[&[u8]; 2]],
        segment_size: usize,
    ) -> io::Result<usize> {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, SockaddrStorage};
        if segment_size == 0 || segment_size > usize::from(u16::MAX) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "segment size must be 1 to 65,535 octets",
            ));
        }
        if let [[head, body]] = frames {
            let len = head.len() + body.len();
            if len <= SMALL_FRAME {
                // A lone small frame (a 32 B message, an ACK) goes as one buffer by
                // send(2): the copy costs less than `sendmsg`'s header and vector
                // copies in the kernel.
                let mut buf = [0u8; SMALL_FRAME];
                buf[..head.len()].copy_from_slice(head);
                buf[head.len()..len].copy_from_slice(body);
                let result = self.send_one(dst, &buf[..len]);
                return self.account(result, 1, len, segment_size.max(len));
            }
        }
        let addr = dst.map(SockaddrStorage::from);
        // Two parts per frame, at most a GSO run of frames per call: on the stack, no
        // allocation per send.
        let mut iov = [IoSlice::new(&[]); 2 * MAX_GATHERED];
        let mut sent = 0;
        while sent < frames.len() {
            let max = self.run_limit(segment_size).min(MAX_GATHERED);
            let chunk = &frames[sent..frames.len().min(sent + max)];
            let mut parts = 0;
            let mut bytes = 0;
            for part in chunk.iter().flatten().filter(|p| !p.is_empty()) {
                bytes += part.len();
                iov[parts] = IoSlice::new(part);
                parts += 1;
            }
            let iov = &iov[..parts];
            let segments = chunk.len();
            let gso = u16::try_from(segment_size).expect("checked above");
            let cmsgs = [ControlMessage::UdpGsoSegments(&gso)];
            let cmsgs: &[ControlMessage<'_>] = if segments > 1 { &cmsgs } else { &[] };
            let result = sendmsg(
                self.socket.as_raw_fd(),
                iov,
                cmsgs,
                MsgFlags::empty(),
                addr.as_ref(),
            )
            .map(drop)
            .map_err(io::Error::from);
            match self.account(result, segments, bytes, segment_size) {
                Ok(n) => sent += n,
                Err(e) => return if sent > 0 { Ok(sent) } else { Err(e) },
            }
        }
        Ok(sent)
    }

    /// Send one datagram gathered from `parts` (VC header, TPDU header, payload) with
    /// one vectored `sendmsg`, without copying them together first. No GSO: quinn-udp
    /// takes one contiguous buffer per send.
    pub fn send_vectored(&self, dst: Option<SocketAddr>, parts: &[IoSlice<'_>]) -> io::Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let result = match dst {
            Some(addr) => self.socket.send_to_vectored(parts, &addr.into()),
            None => self.socket.send_vectored(parts),
        };
        match result {
            Ok(_) => {
                add(&self.counters.send_calls, 1);
                add(&self.counters.datagrams_sent, 1);
                add(&self.counters.bytes_sent, len);
                Ok(())
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::WouldBlock {
                    add(&self.counters.send_errors, 1);
                }
                Err(e)
            }
        }
    }

    fn send_gso(
        &self,
        dst: Option<SocketAddr>,
        chunk: &[u8],
        segment_size: usize,
    ) -> io::Result<()> {
        let destination = match dst {
            Some(addr) => addr,
            None => self
                .peer()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?,
        };
        let transmit = Transmit {
            destination,
            ecn: None,
            contents: chunk,
            segment_size: Some(segment_size),
            src_ip: None,
        };
        self.state.try_send((&self.socket).into(), &transmit)
    }

    fn send_one(&self, dst: Option<SocketAddr>, datagram: &[u8]) -> io::Result<()> {
        // A plain send(2): no control message to build, and the connected fast path.
        match dst {
            Some(addr) => self.socket.send_to(datagram, &addr.into()),
            None => self.socket.send(datagram),
        }
        .map(|_| ())
    }

    /// Receive into `batch` (cleared first); returns the number of datagrams.
    ///
    /// In blocking mode the call waits (up to the read timeout) for the first datagram
    /// and returns with that one buffer — a single datagram, or a GRO run of them — so
    /// that a blocked reader wakes once per arrival, as with a raw UDP socket. In
    /// non-blocking mode one `recvmmsg` fills up to [`quinn_udp::BATCH_SIZE`] buffers
    /// with what is queued, or fails with `WouldBlock`. A buffer that comes back full may
    /// have been truncated: it is dropped and counted in [`PortStats::truncated`].
    pub fn recv(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        if !self.is_nonblocking() {
            // One buffer: a `recvmsg`, which spares the kernel the `recvmmsg` batch's
            // header and vector copies (a blocking 32 B round trip on one CPU spent
            // ~0.5 µs in them, `perf record`, issue 30).
            return self.recv_one(batch, nix::sys::socket::MsgFlags::empty());
        }
        batch.clear();
        let slot_len = batch.slot_len();
        let wanted = batch.slots().min(BATCH_SIZE);
        let mut meta = [RecvMeta::default(); BATCH_SIZE];
        let filled = self.receiving(|| {
            let mut slots = batch.area_mut().chunks_mut(slot_len);
            let mut bufs: [IoSliceMut<'_>; BATCH_SIZE] =
                core::array::from_fn(|_| IoSliceMut::new(slots.next().unwrap_or_default()));
            self.state.recv(
                (&self.socket).into(),
                &mut bufs[..wanted],
                &mut meta[..wanted],
            )
        })?;
        let mut got = [Received::default(); BATCH_SIZE];
        for (m, out) in meta[..filled].iter().zip(got.iter_mut()) {
            *out = Received {
                addr: Some(m.addr),
                len: m.len,
                stride: m.stride,
                stamp: m.timestamp,
                truncated: m.len >= slot_len,
            };
        }
        self.record(batch, &got[..filled]);
        Ok(batch.len())
    }

    /// Make one receive system call `call` until it succeeds or gives up: nothing to
    /// read (`WouldBlock`, or `TimedOut` after a read timeout) returns at once, an
    /// interrupted call is made again, and so is one that failed with an error the
    /// kernel reported ahead of the queued datagrams, at most [`MAX_ASYNC_ERRORS`]
    /// times, each counted in [`PortStats::recv_errors`].
    fn receiving<T>(&self, mut call: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        let mut errors = 0;
        loop {
            match call() {
                Ok(v) => return Ok(v),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(e)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    add(&self.counters.recv_errors, 1);
                    // An asynchronous error the kernel reports ahead of the queued
                    // datagrams: on a connected socket, an ICMP port unreachable for
                    // an earlier send (the peer's socket has closed) comes back as
                    // ECONNREFUSED from the next receive, however many datagrams wait
                    // behind it. Reporting it cleared it, so receive again: a caller
                    // that stopped here would leave those datagrams unread with the
                    // readiness edge spent (found with parallel direct-mode calls: an
                    // ABORT left unread kept a finished call's socket open for the
                    // whole of its CLOSE retries).
                    errors += 1;
                    if errors >= MAX_ASYNC_ERRORS {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Receive what is queued now into `batch` (cleared first), without waiting and
    /// whatever the socket's blocking mode: one `recvmmsg` with `MSG_DONTWAIT` fills up
    /// to [`quinn_udp::BATCH_SIZE`] buffers (each a datagram or a GRO run), or fails
    /// with `WouldBlock` when nothing is queued. The datagrams' GRO segment sizes and
    /// kernel receive stamps come with them, as [`UdpPort::recv`]'s do.
    ///
    /// One system call where a zero-timeout `poll` and then a one-buffer receive took
    /// two per buffer: `natm-lab perf counts` counted the `ppoll` as a third of a
    /// reliable VC's system calls per MB (issue 30, work per batch).
    pub fn recv_now(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        use nix::sys::socket::SockaddrStorage;
        use nix::sys::socket::{recvmmsg, MsgFlags, MultiHeaders};
        batch.clear();
        let slot_len = batch.slot_len();
        let wanted = batch.slots().min(BATCH_SIZE);
        let cmsg = cmsg_room();
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(wanted, Some(cmsg));
        let mut got = [Received::default(); BATCH_SIZE];
        let filled = self.receiving(|| {
            let mut slots = batch.area_mut().chunks_mut(slot_len);
            let mut bufs: [[IoSliceMut<'_>; 1]; BATCH_SIZE] =
                core::array::from_fn(|_| [IoSliceMut::new(slots.next().unwrap_or_default())]);
            let msgs = recvmmsg(
                self.socket.as_raw_fd(),
                &mut headers,
                bufs[..wanted].iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            )?;
            let mut n = 0;
            for (m, out) in msgs.zip(got.iter_mut()) {
                *out = Received::of(&m, slot_len, m.address.and_then(socket_addr_of));
                n += 1;
            }
            Ok(n)
        })?;
        self.record(batch, &got[..filled]);
        Ok(batch.len())
    }

    /// Receive one datagram or GRO run queued now into `batch` (cleared first), without
    /// waiting: one `recvmsg` with `MSG_DONTWAIT` into the batch's first buffer, or
    /// `WouldBlock` when nothing is queued. What a busy poller calls over and over:
    /// it allocates nothing (its control-message buffer is the thread's), where
    /// [`UdpPort::recv_now`]'s headers for a whole batch are allocated on each call
    /// and the kernel reads a second header when one datagram was all there was.
    pub fn recv_one_now(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        self.recv_one(batch, nix::sys::socket::MsgFlags::MSG_DONTWAIT)
    }

    /// One `recvmsg` into the batch's first buffer with `flags` (see
    /// [`UdpPort::recv_one_now`]); in blocking mode it waits up to the read timeout.
    fn recv_one(
        &self,
        batch: &mut RecvBatch,
        flags: nix::sys::socket::MsgFlags,
    ) -> io::Result<usize> {
        use nix::sys::socket::{recvmsg, SockaddrStorage};
        thread_local! {
            static CMSG: std::cell::RefCell<Vec<u8>> =
                std::cell::RefCell::new(cmsg_room());
        }
        batch.clear();
        let slot_len = batch.slot_len();
        // A connected socket's datagrams are all from its peer: the kernel is asked
        // for no source address, which it would otherwise copy out on every
        // receive (`move_addr_to_user`, as `recv(2)` on a connected socket skips).
        let peer = self.peer();
        if let Some(p) = peer.filter(|_| !self.gro() && !self.stamps.load(Relaxed)) {
            // No control message to read either: a plain `recv(2)`, without a
            // message header to copy in and out (~0.2 us of a 32 B round trip's
            // receive on one CPU, issue 30).
            let got = self.receiving(|| {
                let area = batch.area_mut();
                let end = slot_len.min(area.len());
                let n = nix::sys::socket::recv(self.socket.as_raw_fd(), &mut area[..end], flags)?;
                Ok(Received {
                    addr: Some(p),
                    len: n,
                    stride: n,
                    stamp: None,
                    truncated: n >= slot_len,
                })
            })?;
            self.record(batch, &[got]);
            return Ok(batch.len());
        }
        let got = CMSG.with_borrow_mut(|cmsg| {
            self.receiving(|| {
                let area = batch.area_mut();
                let end = slot_len.min(area.len());
                let mut iov = [IoSliceMut::new(&mut area[..end])];
                let fd = self.socket.as_raw_fd();
                Ok(match peer {
                    Some(p) => {
                        let m = recvmsg::<()>(fd, &mut iov, Some(&mut *cmsg), flags)?;
                        Received::of(&m, slot_len, Some(p))
                    }
                    None => {
                        let m = recvmsg::<SockaddrStorage>(fd, &mut iov, Some(&mut *cmsg), flags)?;
                        Received::of(&m, slot_len, m.address.and_then(socket_addr_of))
                    }
                })
            })
        })?;
        self.record(batch, &[got]);
        Ok(batch.len())
    }

    /// Count a receive call and put what it received into `batch`.
    fn record(&self, batch: &mut RecvBatch, got: &[Received]) {
        add(&self.counters.recv_calls, 1);
        for &Received {
            addr,
            len,
            stride,
            stamp,
            truncated,
        } in got
        {
            let Some(addr) = addr.filter(|_| !truncated) else {
                if truncated {
                    add(&self.counters.truncated, 1);
                }
                batch.skip();
                continue;
            };
            let n = batch.record_stamped(addr, len, stride.min(len), stamp);
            add(&self.counters.datagrams_received, n);
            add(&self.counters.bytes_received, len);
            if n > 1 {
                add(&self.counters.gro_coalesced, 1);
            }
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> PortStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Relaxed);
        PortStats {
            datagrams_sent: get(&c.datagrams_sent),
            bytes_sent: get(&c.bytes_sent),
            send_calls: get(&c.send_calls),
            gso_batches: get(&c.gso_batches),
            gso_fallbacks: get(&c.gso_fallbacks),
            send_errors: get(&c.send_errors),
            datagrams_received: get(&c.datagrams_received),
            bytes_received: get(&c.bytes_received),
            recv_calls: get(&c.recv_calls),
            gro_coalesced: get(&c.gro_coalesced),
            recv_errors: get(&c.recv_errors),
            truncated: get(&c.truncated),
        }
    }

    /// Datagrams the kernel dropped because this socket's receive buffer was full — the
    /// early discard of seed 000 §6.2.2, done before any user-space work.
    ///
    /// Read from the `drops` column of `/proc/net/udp{,6}` for this socket's inode
    /// (Linux; `None` elsewhere or if the row is not found). It costs a read of that
    /// file, which lists every UDP socket of the network namespace: call it for
    /// statistics, not per datagram. (`SO_RXQ_OVFL` would report the same count per
    /// receive, but neither quinn-udp nor socket2 can set or decode it without unsafe
    /// code.)
    pub fn kernel_drops(&self) -> io::Result<Option<u64>> {
        crate::proc_net::udp_drops(self.socket.as_raw_fd())
    }
}

fn sock_addr(addr: SockAddr) -> io::Result<SocketAddr> {
    addr.as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP socket address"))
}

impl AsFd for UdpPort {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl AsRawFd for UdpPort {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

/// The IPv4 or IPv6 address a receive's source address holds.
fn socket_addr_of(a: nix::sys::socket::SockaddrStorage) -> Option<SocketAddr> {
    a.as_sockaddr_in()
        .map(|v4| SocketAddr::V4((*v4).into()))
        .or_else(|| a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into())))
}

/// One buffer of a non-waiting receive ([`UdpPort::recv_now`]), as the kernel filled it.
#[derive(Debug, Clone, Copy, Default)]
struct Received {
    addr: Option<SocketAddr>,
    len: usize,
    /// GRO segment size (`len` when the buffer is one datagram).
    stride: usize,
    stamp: Option<Duration>,
    truncated: bool,
}

impl Received {
    /// What one received message holds: its length, source, GRO segment size and
    /// kernel receive stamp (from its control messages), and whether it filled its
    /// `slot_len` buffer (truncated).
    fn of<S: nix::sys::socket::SockaddrLike>(
        m: &nix::sys::socket::RecvMsg<'_, '_, S>,
        slot_len: usize,
        addr: Option<SocketAddr>,
    ) -> Received {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags};
        let mut stride = m.bytes;
        let mut stamp = None;
        if let Ok(cmsgs) = m.cmsgs() {
            for c in cmsgs {
                match c {
                    ControlMessageOwned::UdpGroSegments(seg) if seg > 0 => {
                        stride = seg as usize;
                    }
                    ControlMessageOwned::ScmTimestampns(ts) => {
                        stamp = Some(Duration::new(
                            u64::try_from(ts.tv_sec()).unwrap_or(0),
                            u32::try_from(ts.tv_nsec()).unwrap_or(0),
                        ));
                    }
                    _ => {}
                }
            }
        }
        Received {
            addr,
            len: m.bytes,
            stride,
            stamp,
            // Control messages cut short may have lost the GRO segment size, without
            // which a run's frames cannot be told apart: dropped as a cut datagram is.
            truncated: m
                .flags
                .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC)
                || m.bytes >= slot_len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unconnected port that asked for ICMP errors learns that nothing listens
    /// where it sent: its socket is marked in error (what wakes a poller), and the
    /// queued error names the host that refused; one that did not ask learns nothing.
    #[test]
    fn a_port_that_asks_learns_of_a_refusal() {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let local: SocketAddr = ([127, 0, 0, 1], 0).into();
        let closed = UdpPort::bind(local).unwrap().local_addr().unwrap(); // dropped: closed
        let (asks, deaf) = (UdpPort::bind(local).unwrap(), UdpPort::bind(local).unwrap());
        asks.set_icmp_errors(true).unwrap();
        assert_eq!(asks.take_icmp_error().unwrap(), None, "nothing queued yet");
        for p in [&asks, &deaf] {
            p.send_one(Some(closed), b"anyone?").unwrap();
        }
        let error_on = |p: &UdpPort| {
            let mut fds = [PollFd::new(p.socket.as_fd(), PollFlags::empty())];
            let n = poll(&mut fds, PollTimeout::from(2000u16)).unwrap();
            n == 1 && fds[0].revents().unwrap().contains(PollFlags::POLLERR)
        };
        assert!(error_on(&asks), "the refusal marks the socket in error");
        let icmp = asks
            .take_icmp_error()
            .unwrap()
            .expect("the refusal is queued");
        assert!(icmp.refused, "{icmp:?}");
        assert_eq!(icmp.from, Some(closed.ip()));
        assert_eq!(asks.take_icmp_error().unwrap(), None, "taken once");
        // Turned off, the errors queued meanwhile are dropped and no more come.
        asks.send_one(Some(closed), b"anyone now?").unwrap();
        assert!(error_on(&asks));
        asks.set_icmp_errors(false).unwrap();
        assert_eq!(
            asks.take_icmp_error().unwrap(),
            None,
            "dropped when turned off"
        );
        // (This send may fail with the refusal still pending on the socket.)
        let _ = asks.send_one(Some(closed), b"and now?");
        assert_eq!(
            asks.take_icmp_error().unwrap(),
            None,
            "none queued when off"
        );
        // Without the option nothing is reported (it was sent at the same time as
        // the other's, whose refusal has arrived).
        assert_eq!(deaf.take_icmp_error().unwrap(), None);
        let mut fds = [PollFd::new(deaf.socket.as_fd(), PollFlags::empty())];
        assert_eq!(poll(&mut fds, PollTimeout::ZERO).unwrap(), 0);
    }

    /// A connected port names its peer as the source of what it receives (it asks
    /// the kernel for no address), on each receive path, and refuses to connect
    /// to a second peer, whose datagrams it would otherwise put under the first
    /// one's name.
    #[test]
    fn a_connected_port_receives_from_its_peer_and_connects_once() {
        // With GRO and stamps a `recvmsg` without an address, without either a
        // plain `recv(2)`.
        for receive in [VcReceive::ALL, VcReceive::PLAIN] {
            let local: SocketAddr = ([127, 0, 0, 1], 0).into();
            let patience = Duration::from_secs(10);
            let a = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, receive).unwrap();
            let b = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, receive).unwrap();
            let other = UdpPort::bind(local).unwrap();
            let (a_at, b_at) = (a.local_addr().unwrap(), b.local_addr().unwrap());
            a.connect(b_at).unwrap();
            b.connect(a_at).unwrap();
            b.connect(a_at).unwrap();
            let refused = b.connect(other.local_addr().unwrap()).unwrap_err();
            assert_eq!(refused.kind(), io::ErrorKind::AlreadyExists, "{refused}");
            // The kernel still filters for the first peer: the other's datagram is
            // never received.
            other.send_one(Some(b_at), b"not for b").unwrap();
            let mut batch = b.recv_batch(8);
            for (k, msg) in [&b"one"[..], b"two", b"three"].into_iter().enumerate() {
                a.send_one(None, msg).unwrap();
                match k {
                    0 => b.recv_one(&mut batch, nix::sys::socket::MsgFlags::empty()),
                    1 => b.recv(&mut batch),
                    _ => {
                        b.set_nonblocking(true).unwrap();
                        loop {
                            match b.recv_one_now(&mut batch) {
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                    std::thread::yield_now()
                                }
                                r => break r,
                            }
                        }
                    }
                }
                .unwrap();
                let got: Vec<_> = batch.iter().map(|(from, d)| (from, d.to_vec())).collect();
                assert_eq!(got, vec![(a_at, msg.to_vec())]);
            }
        }
    }

    /// A plain VC socket (no GRO, no stamps) gets a peer's GSO run cut into its
    /// datagrams, each whole and in order, unstamped, by the blocking, waiting and
    /// batch receives alike; with GRO turned on, the next run arrives in one buffer
    /// and is still told apart datagram by datagram.
    #[test]
    fn a_plain_port_reads_runs_cut_and_once_gro_is_on_whole() {
        let local: SocketAddr = ([127, 0, 0, 1], 0).into();
        let patience = Duration::from_secs(10);
        let a = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, VcReceive::ALL).unwrap();
        let b = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, VcReceive::PLAIN).unwrap();
        let (a_at, b_at) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        a.connect(b_at).unwrap();
        b.connect(a_at).unwrap();
        assert!(!b.gro());
        let run: Vec<u8> = (0..4 * 700).map(|i| (i / 700) as u8).collect();
        let mut batch = b.recv_batch(8);
        let read = |b: &UdpPort, batch: &mut RecvBatch, how: u8| {
            let mut got = Vec::new();
            while got.len() < 4 {
                match how {
                    0 => b.recv(batch),
                    _ => b.recv_now(batch),
                }
                .unwrap();
                for (from, d, stamp) in batch.stamped_iter() {
                    assert_eq!(from, a_at);
                    assert_eq!(stamp, None, "a plain port is not stamped");
                    got.push(d.to_vec());
                }
            }
            got
        };
        let want: Vec<Vec<u8>> = (0..4u8).map(|k| vec![k; 700]).collect();
        let coalesced = b.stats().gro_coalesced;
        assert_eq!(a.send(None, &run, 700).unwrap(), 4);
        assert_eq!(read(&b, &mut batch, 0), want, "one at a time, blocking");
        assert_eq!(a.send(None, &run, 700).unwrap(), 4);
        assert_eq!(read(&b, &mut batch, 1), want, "in a batch, not waiting");
        assert_eq!(b.stats().gro_coalesced, coalesced, "no run read whole");
        if b.set_gro(true).is_ok() {
            assert!(b.gro());
            assert_eq!(a.send(None, &run, 700).unwrap(), 4);
            assert_eq!(read(&b, &mut batch, 0), want, "a run, whole");
            assert_eq!(b.stats().gro_coalesced, coalesced + 1);
        }
    }

    /// A VC's socket hands each datagram over with the kernel's receive stamp (the
    /// receiver's ACKs carry it, `transport::recv`), and the stamps of datagrams sent
    /// apart are apart.
    #[test]
    fn vc_sockets_stamp_what_they_receive() {
        let local: SocketAddr = ([127, 0, 0, 1], 0).into();
        let patience = Duration::from_secs(10);
        let a = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, VcReceive::ALL).unwrap();
        let b = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, VcReceive::ALL).unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        let mut batch = b.recv_batch(8);
        // The kernel turns stamping on a moment after the first socket asks (deferred
        // work); until then it stamps at the read. One datagram through first.
        a.send_one(None, b"warm-up").unwrap();
        b.recv(&mut batch).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        a.send_one(None, b"first").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        a.send_one(None, b"second").unwrap();
        let mut stamps = Vec::new();
        while stamps.len() < 2 {
            b.recv(&mut batch).unwrap();
            stamps.extend(batch.stamped_spans().map(|(_, _, s)| s));
        }
        let (s1, s2) = (stamps[0].expect("stamped"), stamps[1].expect("stamped"));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        assert!(s1 <= s2 && s2 <= now, "{s1:?} {s2:?} {now:?}");
        assert!(s2 - s1 >= Duration::from_millis(10), "{:?}", s2 - s1);
    }

    /// A VC that exchanges no ACKs turns its socket's stamps off: its datagrams then
    /// come without one, by either read, and with one again once turned back on.
    #[test]
    fn stamps_turned_off_leave_datagrams_unstamped() {
        let local: SocketAddr = ([127, 0, 0, 1], 0).into();
        let patience = Duration::from_secs(10);
        let a = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, VcReceive::ALL).unwrap();
        let b = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, VcReceive::ALL).unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        let mut batch = b.recv_batch(8);
        let mut stamp_of = |b: &UdpPort, what: &[u8], now: bool| {
            a.send_one(None, what).unwrap();
            if now {
                b.recv_one_now(&mut batch).unwrap();
            } else {
                b.recv(&mut batch).unwrap();
            }
            let (_, d, s) = batch.stamped_iter().next().expect("one datagram");
            assert_eq!(d, what);
            s
        };
        assert!(stamp_of(&b, b"on", false).is_some());
        b.set_receive_stamps(false).unwrap();
        assert_eq!(stamp_of(&b, b"off", false), None);
        assert_eq!(stamp_of(&b, b"off, polled", true), None);
        b.set_receive_stamps(true).unwrap();
        assert!(stamp_of(&b, b"on again", true).is_some());
    }

    /// `recv_now` on a blocking socket never waits: nothing queued is `WouldBlock` at
    /// once (not after the read timeout), and what is queued comes in one call — every
    /// datagram, from its sender, with its stamp, whatever GRO made of them.
    #[test]
    fn recv_now_takes_what_is_queued_in_one_call_and_never_waits() {
        let local: SocketAddr = ([127, 0, 0, 1], 0).into();
        let patience = Duration::from_secs(10);
        let a = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, VcReceive::ALL).unwrap();
        let b = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, VcReceive::ALL).unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        let mut batch = b.recv_batch(8);
        let t0 = std::time::Instant::now();
        let e = b.recv_now(&mut batch).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(t0.elapsed() < patience / 2, "waited {:?}", t0.elapsed());

        let sizes = [100_usize, 1_000, 1_000, 1_000, 7, 1_400];
        for (i, &n) in sizes.iter().enumerate() {
            a.send_one(None, &vec![i as u8; n]).unwrap();
        }
        // Loopback delivers at send: all six are queued once the last send returns.
        let calls = b.stats().recv_calls;
        let got = b.recv_now(&mut batch).unwrap();
        assert_eq!(got, sizes.len(), "every datagram queued, in one call");
        assert_eq!(b.stats().recv_calls, calls + 1);
        let from = a.local_addr().unwrap();
        let mut seen = Vec::new();
        for (addr, payload) in batch.iter() {
            assert_eq!(addr, from);
            seen.push((payload.len(), payload[0]));
        }
        let want: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (n, i as u8))
            .collect();
        assert_eq!(seen, want);
        assert!(
            batch.stamped_spans().all(|(_, _, s)| s.is_some()),
            "stamped"
        );
        assert_eq!(
            b.recv_now(&mut batch).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "emptied"
        );
    }

    /// A batch of one buffer (how the engine drains a VC's socket) is read one
    /// datagram per call, in order and from its sender, and `recv_now` still never
    /// waits on a blocking socket, connected or not.
    #[test]
    fn recv_now_into_one_buffer_takes_one_datagram_per_call_and_never_waits() {
        let local: SocketAddr = ([127, 0, 0, 1], 0).into();
        let patience = Duration::from_secs(10);
        for connected in [false, true] {
            let a = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, VcReceive::ALL).unwrap();
            let b = UdpPort::bind_vc(local, 1 << 20, 1 << 20, patience, VcReceive::ALL).unwrap();
            a.connect(b.local_addr().unwrap()).unwrap();
            if connected {
                b.connect(a.local_addr().unwrap()).unwrap();
            }
            let mut batch = b.recv_batch(1);
            let t0 = std::time::Instant::now();
            let e = b.recv_now(&mut batch).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
            assert!(t0.elapsed() < patience / 2, "waited {:?}", t0.elapsed());
            let sizes = [100_usize, 1_400, 7];
            for (i, &n) in sizes.iter().enumerate() {
                a.send_one(None, &vec![i as u8; n]).unwrap();
            }
            let from = a.local_addr().unwrap();
            for (i, &n) in sizes.iter().enumerate() {
                assert_eq!(b.recv_now(&mut batch).unwrap(), 1, "connected: {connected}");
                let (addr, payload) = batch.iter().next().unwrap();
                assert_eq!((addr, payload.len(), payload[0]), (from, n, i as u8));
            }
            let t0 = std::time::Instant::now();
            let e = b.recv_now(&mut batch).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "emptied");
            assert!(t0.elapsed() < patience / 2, "waited {:?}", t0.elapsed());
        }
    }
}
