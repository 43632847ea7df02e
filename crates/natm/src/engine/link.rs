//! The engine's view of an adaptor port: one UDP socket per connection (the kernel
//! demultiplexes VCs to per-connection sockets, and each socket's receive buffer is
//! the per-VC queue that drops excess before user space does any work, seed 000
//! §6.2.2). Every read takes what is queued in one batched call (GRO and a
//! non-waiting `recvmmsg`); an application thread that waits sleeps in a blocking
//! receive of its own socket.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};

use super::gather::GatherBatch;
use crate::adaptor::udp::GRO_SLOT_LEN;
use crate::adaptor::{CellCodec, MemNetwork, MemPort, RecvBatch, SendBatch, UdpPort};
use natm_udp::VcReceive;

use crate::wire::vcframe;

mod as_cells;
pub(crate) use as_cells::{CellFit, PeerPath};

/// The UDP adaptor's VC header in front of each TPDU (`wire::vcframe`).
pub(crate) const VC_HEADER_LEN: usize = vcframe::HEADER_LEN;

/// The VC header of a data frame on VPI 0 / `vci`.
#[cfg(test)]
pub(crate) fn vc_header(vci: u16) -> [u8; VC_HEADER_LEN] {
    vc_header_on(0, vci)
}

/// The VC header of a data frame on `vpi`/`vci` (a PVC may use any VPI).
pub(crate) fn vc_header_on(vpi: u8, vci: u16) -> [u8; VC_HEADER_LEN] {
    vcframe::Repr::data(vpi, vci).to_bytes()
}

/// The VCI of a data datagram on VPI 0, or `None` if it is not a natm UDP data frame.
#[cfg(test)]
pub(crate) fn vc_of(datagram: &[u8]) -> Option<u16> {
    vc_of_on(datagram, 0)
}

/// The VCI of a data datagram on `vpi`, or `None` if it is not a natm UDP data frame
/// on that VPI.
pub(crate) fn vc_of_on(datagram: &[u8], vpi: u8) -> Option<u16> {
    match vcframe::Repr::parse_bytes(datagram) {
        Ok((r, _)) if r.kind == vcframe::FrameKind::Data && r.vpi == vpi => Some(r.vci),
        _ => None,
    }
}

/// ICMP errors a read that found nothing takes at most ([`Link::refused_by`]).
const ICMP_DRAIN: usize = 64;

/// One UDP socket of the engine: an adaptor port with GSO sends and GRO receives (one
/// `recvmmsg` takes a GRO run of up to 64 datagrams, 64 KiB).
///
/// The socket stays blocking, with the read slice as its receive timeout: a thread
/// that waits (the application blocked in `recv`) sleeps in the receive call itself,
/// as on a raw UDP socket — measured, a `poll(2)` before a non-blocking receive
/// instead took natm-be's round trip from 15 µs to 60 µs on an idle machine. Reads
/// that must not wait pass `MSG_DONTWAIT` to one `recvmmsg` and take up to a whole
/// batch of buffers.
#[derive(Debug)]
pub(crate) struct UdpLink {
    pub(crate) port: UdpPort,
    /// Cell mode's codec; `None` in frame mode (one frame per datagram). Boxed: a
    /// frame-mode link pays one pointer for it.
    cells: Option<Box<CellCodec>>,
    /// The largest datagram payload the path carries unfragmented, as the kernel last
    /// said (path MTU less the IP and UDP headers); 0 until the socket is connected.
    /// Read with one relaxed load per flush ([`UdpLink::path_payload`]).
    path_payload: AtomicUsize,
    /// Datagrams the kernel refused as larger than the path MTU and that went out
    /// again with fragmentation allowed: TPDUs sent before the path shrank.
    oversize_fallbacks: AtomicU64,
    /// Frame mode: frames longer than this many octets leave as AAL5 cell trains
    /// that fit it (0: none do). The sending VC sets it to its PLPMTU
    /// ([`UdpLink::cells_above`]): after a black hole, the TPDUs cut before the path
    /// shrank keep their size and sequence number when SMART resends them, so they
    /// cross the path as cells, as a frame crosses an ATM network.
    cells_above: AtomicUsize,
    /// Frame mode: the codec for frames sent as cells and for the trains a peer
    /// sent so, made at first use.
    fallback: std::sync::OnceLock<Box<CellCodec>>,
    /// Frames sent as cell trains ([`UdpLink::cells_above`]).
    frames_as_cells: AtomicU64,
    /// The socket's receive timeout as last set, in whole milliseconds: the read
    /// slice, or less while an application's wait has less time left
    /// ([`UdpLink::recv_wait`]).
    read_timeout_ms: AtomicU64,
    /// Whether the kernel queues the ICMP errors that answer this socket
    /// ([`Link::watch_icmp_errors`]): then every read that finds nothing drains them.
    icmp_errors: AtomicBool,
}

/// How a UDP link carries frames (issue 13). Both ends of a link must use the same
/// mode: a frame-mode datagram is not a cell train and the other way round, so a
/// mismatched end drops what it receives as malformed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LinkMode {
    /// One AAL5 frame per datagram behind the 4-octet VC header (`wire::vcframe`).
    #[default]
    Frame,
    /// AAL5 cells, several per datagram: each frame is segmented into 53-octet cells
    /// sent in trains of at most `train` cells (`wire::train`), and cells received
    /// are reassembled per VC (`wire::sar`, HEC checked and corrected).
    Cell {
        /// Most cells per train (1..=1,235).
        train: u16,
    },
}

/// Cells per train when `cell` is given without a number: a 4 KiB TPDU's 86 cells
/// fit three trains, and a train is well under a 9,000-octet MTU.
pub const DEFAULT_TRAIN_CELLS: u16 = 32;

impl std::fmt::Display for LinkMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkMode::Frame => f.write_str("frame"),
            LinkMode::Cell { train } => write!(f, "cell:{train}"),
        }
    }
}

impl std::str::FromStr for LinkMode {
    type Err = String;

    /// `frame`, `cell` (trains of [`DEFAULT_TRAIN_CELLS`]) or `cell:N`.
    fn from_str(s: &str) -> Result<LinkMode, String> {
        let max = natm_proto::wire::train::MAX_TRAIN_CELLS;
        match s.split_once(':') {
            None if s == "frame" => Ok(LinkMode::Frame),
            None if s == "cell" => Ok(LinkMode::Cell {
                train: DEFAULT_TRAIN_CELLS,
            }),
            Some(("cell", n)) => match n.parse::<u16>() {
                Ok(train) if (1..=max).contains(&usize::from(train)) => {
                    Ok(LinkMode::Cell { train })
                }
                _ => Err(format!("cell:{n}: a train is 1..={max} cells")),
            },
            _ => Err(format!("link mode {s:?}: frame, cell or cell:N")),
        }
    }
}

/// How long a blocked application read waits before it looks at the VC again (an
/// abort or close by another thread is seen within this time at the latest).
pub(crate) const READ_SLICE: Duration = Duration::from_millis(READ_SLICE_MS);
const READ_SLICE_MS: u64 = 50;

/// Buffers per receive call, each of 64 KiB (a whole GRO run). One: measured on
/// loopback with 64 KiB messages (docs/PERFORMANCE.md, "Receive batching"), reliable
/// VCs delivered 0.70x TCP with one slot, 0.5-0.6x with two or four and 0.2-0.3x with
/// sixteen — a batch of up to 1 MiB is copied in, and again into the PSB, before the
/// application consumes any of it, and falls out of the cache on the way. A GSO
/// sender's run arrives whole in one slot anyway; datagrams sent one by one are read
/// one per call, as before.
pub(crate) const RECV_SLOTS: usize = 1;

/// What a send does with a datagram the kernel refuses as larger than the path MTU
/// (EMSGSIZE: DF is set, and the path shrank under what was cut before).
#[derive(Clone, Copy)]
enum TooBig<'a> {
    /// Stop there: the caller sends the rest as cells that fit (frame mode).
    Stop,
    /// The same on a socket with no peer of its own (a shared host port): the path
    /// to this peer is read again.
    StopFor(&'a dyn PeerPath),
    /// Clear DF and let the run go out in IP fragments (cell trains, cut to the
    /// path as the kernel knew it when they were packed).
    Fragment,
}

/// How long a sender whose send came back short waits for room before the rest of its
/// batch counts as send errors.
const SEND_WAIT: Duration = Duration::from_millis(200);

impl UdpLink {
    /// Frame mode: one frame per datagram (no cell codec).
    pub(crate) fn in_frames(&self) -> bool {
        self.cells.is_none()
    }

    pub(crate) fn bind(
        addr: SocketAddr,
        rcvbuf: usize,
        sndbuf: usize,
        mode: LinkMode,
    ) -> io::Result<UdpLink> {
        let cells = match mode {
            LinkMode::Frame => None,
            LinkMode::Cell { train } => Some(Box::new(
                CellCodec::new(usize::from(train))
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            )),
        };
        // Neither GRO nor arrival stamps until the connection says it needs them
        // ([`Link::receive_for_acks`], [`UdpLink::recv_now`]): a connected socket
        // without them receives with a plain `recv(2)`. Buffers best effort (capped
        // at net.core.{r,w}mem_max).
        let port = UdpPort::bind_vc(addr, rcvbuf, sndbuf, READ_SLICE, VcReceive::PLAIN)?;
        // Issue 30: no datagram natm sends is fragmented by IP. With DF set the kernel
        // refuses what exceeds the path MTU, and the VC cuts its TPDUs to fit
        // (`Conn::after`, `TxHalf::set_path_cap`).
        port.set_dont_fragment(true)?;
        Ok(UdpLink {
            port,
            cells,
            path_payload: AtomicUsize::new(0),
            oversize_fallbacks: AtomicU64::new(0),
            cells_above: AtomicUsize::new(0),
            fallback: std::sync::OnceLock::new(),
            frames_as_cells: AtomicU64::new(0),
            read_timeout_ms: AtomicU64::new(READ_SLICE_MS),
            icmp_errors: AtomicBool::new(false),
        })
    }

    pub(crate) fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        self.port.connect(peer)?;
        self.learn_path_mtu();
        Ok(())
    }

    /// Read the path MTU the kernel holds for the peer again (after connecting, and
    /// when a send was refused as too large).
    fn learn_path_mtu(&self) {
        if let Ok(mtu) = self.port.path_mtu() {
            let payload = mtu.saturating_sub(self.port.ip_udp_overhead());
            self.path_payload.store(payload, Ordering::Relaxed);
        }
    }

    /// [`UdpLink::learn_path_mtu`], and whether the socket has a path MTU (a peer).
    fn relearn_path_mtu(&self) -> bool {
        self.learn_path_mtu();
        self.path_payload().is_some()
    }

    /// The largest datagram payload the path carries unfragmented; `None` while the
    /// socket has no peer.
    pub(crate) fn path_payload(&self) -> Option<usize> {
        match self.path_payload.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// Datagrams that went out fragmented after the kernel refused them as larger
    /// than the path MTU (they were cut before the path shrank).
    pub(crate) fn oversize_fallbacks(&self) -> u64 {
        self.oversize_fallbacks.load(Ordering::Relaxed)
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.port.local_addr()
    }

    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.port.as_raw_fd()
    }

    /// A receive batch for this link's socket.
    pub(crate) fn recv_batch() -> RecvBatch {
        RecvBatch::new(RECV_SLOTS, GRO_SLOT_LEN)
    }

    /// Send a batch of frames (one GSO `sendmsg` per run of equal sizes); returns how
    /// many went out. The blocking socket waits for room itself; a send that still
    /// comes back short is retried once after waiting up to [`SEND_WAIT`].
    pub(crate) fn send_batch(
        &self,
        batch: &SendBatch,
        to: Option<SocketAddr>,
    ) -> io::Result<usize> {
        self.send_batch_fit(batch, to, self.own_fit())
    }

    /// [`UdpLink::send_batch`], frames longer than `fit` leaving as cells (a host
    /// port's sub gives its own VC's fit, [`CellFit`]).
    pub(crate) fn send_batch_fit(
        &self,
        batch: &SendBatch,
        to: Option<SocketAddr>,
        fit: CellFit<'_>,
    ) -> io::Result<usize> {
        if let Some(cells) = &self.cells {
            let fit = self.path_payload();
            return cells.send(batch, fit, |bytes, seg, n| {
                self.send_run(bytes, seg, n, to, TooBig::Fragment)
            });
        }
        let Some(seg) = batch.segment_size() else {
            return Ok(0);
        };
        if let Some(limit) = fit.over(seg) {
            return self.send_cells(batch, limit, to, fit.count);
        }
        let n = self.send_run(batch.as_bytes(), seg, batch.len(), to, fit.too_big())?;
        let rest = batch.frames().skip(n).map(|f| [f, &[][..]]);
        Ok(n + self.rest_as_cells(seg, rest, to, fit))
    }

    /// Send a gathered run (one vectored GSO `sendmsg` per run, no copy into a
    /// batch; frame mode only, see [`Link::gathers`]); returns how many went out,
    /// waiting for room as [`UdpLink::send_batch`] does.
    pub(crate) fn send_gathered(
        &self,
        batch: &GatherBatch,
        to: Option<SocketAddr>,
    ) -> io::Result<usize> {
        self.send_gathered_fit(batch, to, self.own_fit())
    }

    /// [`UdpLink::send_gathered`], frames longer than `fit` leaving as cells.
    pub(crate) fn send_gathered_fit(
        &self,
        batch: &GatherBatch,
        to: Option<SocketAddr>,
        fit: CellFit<'_>,
    ) -> io::Result<usize> {
        let seg = batch.segment_size();
        if let Some(limit) = fit.over(seg) {
            // Rare (a black hole's aftermath): the run is copied into a batch.
            return Ok(self.frames_as_cells_of(batch.frames(), limit, to, fit.count));
        }
        if batch.len() == 1 {
            // A lone frame (a small message, an ACK): no run of slots to clear.
            let frames = [batch.frames().next().expect("one frame")];
            let n = self.send_waiting(
                1,
                |sent| self.port.send_gathered(to, &frames[sent..], seg),
                fit.too_big(),
            )?;
            return Ok(n + self.rest_as_cells(seg, frames.into_iter().skip(n), to, fit));
        }
        // A run holds at most `gather::MAX_FRAMES`: on the stack, no allocation per send.
        let mut frames = [[&[][..]; 2]; super::gather::MAX_FRAMES];
        let mut n = 0;
        for f in batch.frames() {
            frames[n] = f;
            n += 1;
        }
        let frames = &frames[..n];
        let n = self.send_waiting(
            frames.len(),
            |sent| self.port.send_gathered(to, &frames[sent..], seg),
            fit.too_big(),
        )?;
        Ok(n + self.rest_as_cells(seg, frames[n..].iter().copied(), to, fit))
    }

    /// Send `count` datagrams of `seg` octets (the last may be shorter) laid back to
    /// back in `bytes`; returns how many went out.
    #[inline]
    fn send_run(
        &self,
        bytes: &[u8],
        seg: usize,
        count: usize,
        to: Option<SocketAddr>,
        too_big: TooBig<'_>,
    ) -> io::Result<usize> {
        self.send_waiting(
            count,
            |sent| self.port.send(to, &bytes[sent * seg..], seg),
            too_big,
        )
    }

    /// How many times one send clears DF after the kernel refused a datagram as
    /// larger than the path MTU (`send_waiting`).
    const MSG_SIZE_TRIES: u32 = 4;

    /// Send `count` datagrams, `send(from)` sending as many as it can from the
    /// `from`-th on; waits for room (at most [`SEND_WAIT`], once in a row) when none
    /// went out. Returns how many went out; `too_big` says what a refusal as larger
    /// than the path MTU does.
    fn send_waiting(
        &self,
        count: usize,
        send: impl Fn(usize) -> io::Result<usize>,
        too_big: TooBig<'_>,
    ) -> io::Result<usize> {
        let mut sent = 0;
        let mut waited = false;
        let mut fragmenting = false;
        let mut fragmented_from = 0;
        let mut refused = 0;
        let result = loop {
            if sent >= count {
                break Ok(sent);
            }
            match send(sent) {
                Ok(n) if n > 0 => {
                    sent += n;
                    waited = false;
                    continue;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Larger than the path MTU with DF set: a TPDU cut before the path
                // shrank (a retransmission keeps its size). Learn the new MTU, so
                // that the VC cuts new TPDUs to it; a frame-mode send stops here
                // and sends the rest as cells (`UdpLink::rest_as_cells`), a cell
                // train lets this run go out in IP fragments rather than never.
                // (A host port's socket has no peer: the sub reads its peer's path
                // again.)
                Err(e)
                    if natm_udp::is_msg_size_err(&e)
                        && match too_big {
                            TooBig::Stop => self.relearn_path_mtu(),
                            TooBig::StopFor(peer) => {
                                peer.forget_path();
                                true
                            }
                            TooBig::Fragment => false,
                        } =>
                {
                    break Ok(sent);
                }
                // DF is the socket's, and another thread's fallback on the same
                // socket may set it back between this one's clearing and its send:
                // refused again, clear it again (bounded).
                Err(e) if refused < Self::MSG_SIZE_TRIES && natm_udp::is_msg_size_err(&e) => {
                    refused += 1;
                    if !fragmenting {
                        self.learn_path_mtu();
                    }
                    if self.port.set_dont_fragment(false).is_err() {
                        break if sent == 0 { Err(e) } else { Ok(sent) };
                    }
                    if !fragmenting {
                        fragmenting = true;
                        fragmented_from = sent;
                    }
                    continue;
                }
                Err(e) if sent == 0 => break Err(e),
                Err(_) => break Ok(sent),
            }
            // Nothing went out: the send buffer is full (or the kernel refused the
            // next datagram, which a second try tells apart).
            if waited {
                break Ok(sent);
            }
            match self.wait(PollFlags::OUT, SEND_WAIT) {
                Ok(true) => waited = true,
                Ok(false) => break Ok(sent),
                Err(e) => break Err(e),
            }
        };
        if fragmenting {
            let _ = self.port.set_dont_fragment(true);
            if let Ok(n) = result {
                self.oversize_fallbacks
                    .fetch_add((n - fragmented_from) as u64, Ordering::Relaxed);
            }
        }
        result
    }

    /// Wait up to `slice` (at most the read slice, [`READ_SLICE`]) for a datagram or
    /// GRO run and receive it into `batch`; `WouldBlock` if none came. The wait is
    /// the socket's receive timeout, a blocking `recv`: a slice other than the one
    /// last set (an application's wait with less time left than the read slice) sets
    /// it first, so a run of waits alike costs one `setsockopt`, not one each. The
    /// kernel counts the timeout in its ticks (4 ms at 250 Hz), as it does for any
    /// socket's (docs/decisions/0030-a-short-recv-timeout-bounds-the-socket-wait.md).
    pub(crate) fn recv_wait(&self, batch: &mut RecvBatch, slice: Duration) -> io::Result<usize> {
        if slice.is_zero() {
            return self.recv_now(batch);
        }
        // Whole milliseconds, rounded up: finer than the kernel's tick.
        let ms = u64::try_from(slice.as_micros().div_ceil(1000))
            .unwrap_or(u64::MAX)
            .min(READ_SLICE_MS);
        if self.read_timeout_ms.load(Ordering::Relaxed) != ms
            && self
                .port
                .set_read_timeout(Some(Duration::from_millis(ms)))
                .is_ok()
        {
            self.read_timeout_ms.store(ms, Ordering::Relaxed);
        }
        self.receive(batch, UdpPort::recv)
    }

    /// Receive what is queued now into `batch`, up to a whole batch of buffers in one
    /// non-waiting `recvmmsg` ([`UdpPort::recv_now`]); `WouldBlock` if nothing is.
    pub(crate) fn recv_now(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        self.receive(batch, UdpPort::recv_now)
    }

    /// Receive with `recv`, through the cell codec in cell mode (frames completed by
    /// the last call come first, without a receive), then see whether the traffic
    /// wants GRO.
    fn receive(
        &self,
        batch: &mut RecvBatch,
        recv: fn(&UdpPort, &mut RecvBatch) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let recv = |b: &mut RecvBatch| {
            let r = recv(&self.port, b);
            self.gro_for_runs(b);
            r
        };
        match &self.cells {
            None => {
                // Frame mode: a peer's frames that no longer fitted the path come
                // as cell trains (`UdpLink::cells_above`) among its other frames.
                if let Some(c) = self.fallback.get() {
                    let n = c.take_waiting(batch);
                    if n > 0 {
                        return Ok(n);
                    }
                }
                let n = recv(batch)?;
                if !CellCodec::has_train(batch) {
                    return Ok(n);
                }
                match self.fallback().sort_trains(batch) {
                    0 => Err(io::ErrorKind::WouldBlock.into()),
                    n => Ok(n),
                }
            }
            Some(cells) => cells.recv(batch, recv),
        }
    }

    /// Turn GRO on at the first sign of bulk: a receive that found several datagrams
    /// queued, or one datagram larger than a request's or reply's. The peer's GSO
    /// runs reach a socket without GRO cut into datagrams, a buffer and a receive's
    /// share of work each; a connection of small requests and replies keeps the
    /// plain `recv(2)` (issue 30: the 32 B round trip). Called holding the read
    /// role, so no other receive is under way ([`UdpPort::set_gro`]).
    fn gro_for_runs(&self, b: &RecvBatch) {
        const LARGE: usize = 512;
        if !self.port.gro() && (b.buffers_filled() > 1 || natm_udp::areas::received(b) > LARGE) {
            let _ = self.port.set_gro(true);
        }
    }

    /// Receive one datagram or GRO run queued now ([`UdpPort::recv_one_now`]: what a
    /// busy poller calls in its loop); `WouldBlock` if nothing is.
    pub(crate) fn recv_one_now(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        self.receive(batch, UdpPort::recv_one_now)
    }

    /// The cell mode's counters, if the link is in cell mode.
    pub(crate) fn cell_stats(&self) -> Option<crate::adaptor::CellStats> {
        self.cells.as_deref().map(CellCodec::stats)
    }

    /// Whether the socket became ready for `flags` within `timeout`.
    pub(crate) fn wait(&self, flags: PollFlags, timeout: Duration) -> io::Result<bool> {
        let mut fds = [PollFd::new(&self.port, flags)];
        let ts = Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: timeout.subsec_nanos() as i64,
        };
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(n) => Ok(n > 0),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// Which adaptor carries a host's frames.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Network {
    /// UDP/IP sockets (DESIGN §2): addresses are the peers' UDP addresses.
    #[default]
    Udp,
    /// In-process links of one [`MemNetwork`]: hosts given clones of the same network
    /// reach each other by the addresses they bind on it; nothing touches the kernel's
    /// network stack.
    Mem(MemNetwork),
}

/// One port of the engine on whichever adaptor the host uses.
// A link lives once per connection (in its `Arc<Conn>`) or in a host's spare slot, so
// the UDP variant's size costs nothing; boxing it would cost a pointer chase on every
// send and receive.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Link {
    Udp(UdpLink),
    Mem(MemPort),
    /// A share of the host's one UDP port (`Ports::PerHost`).
    Host(super::host_port::HostSub),
}

impl Link {
    /// Bind a port at `addr` on the host's network; `cfg.socket_rcvbuf` bounds its
    /// receive queue (the socket buffer, or the mem port's queue).
    pub(crate) fn bind(eng: &super::Engine, addr: SocketAddr) -> io::Result<Link> {
        Link::bind_as(eng, addr, false)
    }

    /// [`Link::bind`] for a direct-mode listener: on a host port it takes the calls
    /// no connection's route takes (the CONN-REQs of new calls); elsewhere the socket
    /// is the listener's own.
    pub(crate) fn bind_listener(eng: &super::Engine, addr: SocketAddr) -> io::Result<Link> {
        Link::bind_as(eng, addr, true)
    }

    fn bind_as(eng: &super::Engine, addr: SocketAddr, accept: bool) -> io::Result<Link> {
        let cfg = &eng.cfg;
        match &cfg.network {
            Network::Udp if cfg.ports_in_use() == super::Ports::PerHost => {
                eng.host_ports.sub(eng, addr, accept).map(Link::Host)
            }
            Network::Udp => {
                UdpLink::bind(addr, cfg.socket_rcvbuf, cfg.socket_sndbuf, cfg.link_mode)
                    .map(Link::Udp)
            }
            Network::Mem(m) => m.bind(addr, cfg.socket_rcvbuf).map(Link::Mem),
        }
    }

    /// Another port beside this one for an accepted connection: on a host port a sub
    /// of the same socket, else a port of its own at the same IP address.
    pub(crate) fn bind_beside(&self, eng: &super::Engine) -> io::Result<Link> {
        if let Link::Host(h) = self {
            return Ok(Link::Host(h.beside()));
        }
        let mut local = self.local_addr()?;
        local.set_port(0);
        Link::bind(eng, local)
    }

    /// Route a connection's frames to this link: on a host port, by its VCIs and
    /// cookie; elsewhere the socket is the connection's own and nothing is needed.
    pub(crate) fn route(&self, route: natm_proto::endpoint::Route, bare: bool) -> io::Result<()> {
        match self {
            Link::Host(h) => h.route(route, bare),
            _ => Ok(()),
        }
    }

    /// Turn on the kernel's arrival stamps and GRO on a socket of the VC's own, for a
    /// connection a VC of which exchanges ACKs: its ACKs carry the stamps
    /// ([`UdpPort::set_receive_stamps`]), and it moves data in runs. A shared host
    /// port has both on for all its VCs. Best effort: a kernel that refuses leaves
    /// the ACKs carrying the read time, and the runs cut into datagrams.
    pub(crate) fn receive_for_acks(&self) {
        if let Link::Udp(l) = self {
            let _ = l.port.set_gro(true);
            let _ = l.port.set_receive_stamps(true);
        }
    }

    /// Have the kernel queue the ICMP errors that answer this link's datagrams: a
    /// direct call's handshake goes out from an unconnected socket, which otherwise
    /// never hears that nothing listens where it called. A UDP link only (a host
    /// port's socket is every VC's; a memory link has no ICMP).
    pub(crate) fn watch_icmp_errors(&self) {
        if let Link::Udp(l) = self {
            if l.port.set_icmp_errors(true).is_ok() {
                l.icmp_errors.store(true, Ordering::Release);
            }
        }
    }

    /// Stop [`Link::watch_icmp_errors`] (the handshake is answered): the kernel
    /// drops what it queued and queues no more, and reads that find nothing cost no
    /// more than before.
    pub(crate) fn unwatch_icmp_errors(&self) {
        if let Link::Udp(l) = self {
            if l.icmp_errors.swap(false, Ordering::AcqRel) {
                let _ = l.port.set_icmp_errors(false);
            }
        }
    }

    /// Whether the ICMP errors queued for this link (if it watches them) include a
    /// port unreachable from `host`. Takes them all, at most [`ICMP_DRAIN`] per
    /// call, so that they neither fill the socket's receive buffer nor keep waking
    /// its poller; the rest wait for the next call.
    pub(crate) fn refused_by(&self, host: std::net::IpAddr) -> bool {
        let Link::Udp(l) = self else { return false };
        if !l.icmp_errors.load(Ordering::Acquire) {
            return false;
        }
        let mut refused = false;
        for _ in 0..ICMP_DRAIN {
            match l.port.take_icmp_error() {
                Ok(Some(e)) => refused |= e.refused && e.from == Some(host),
                _ => break,
            }
        }
        refused
    }

    pub(crate) fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        match self {
            Link::Udp(l) => l.connect(peer),
            Link::Mem(m) => {
                m.connect(peer);
                Ok(())
            }
            Link::Host(h) => {
                h.connect(peer);
                Ok(())
            }
        }
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Link::Udp(l) => l.local_addr(),
            Link::Mem(m) => Ok(m.local_addr()),
            Link::Host(h) => Ok(h.local_addr()),
        }
    }

    /// The driver watches this link for `token`: its socket (or mem port's eventfd)
    /// goes into the epoll set, or a host sub is drained by the driver when frames
    /// come.
    pub(crate) fn watch(&self, eng: &super::Engine, token: usize) -> io::Result<()> {
        match self {
            Link::Udp(l) => eng.register(l.raw_fd(), token),
            Link::Mem(m) => eng.register(m.as_raw_fd(), token),
            Link::Host(h) => h.watch(eng, token),
        }
    }

    /// The driver stops watching; an error means it was not watching.
    pub(crate) fn unwatch(&self, eng: &super::Engine) -> io::Result<()> {
        match self {
            Link::Udp(l) => eng.deregister(l.raw_fd()),
            Link::Mem(m) => eng.deregister(m.as_raw_fd()),
            Link::Host(h) => h.unwatch(),
        }
    }

    pub(crate) fn send_batch(
        &self,
        batch: &SendBatch,
        to: Option<SocketAddr>,
    ) -> io::Result<usize> {
        match self {
            Link::Udp(l) => l.send_batch(batch, to),
            Link::Mem(m) => m.send_batch(to, batch),
            Link::Host(h) => h.send_batch(batch, to),
        }
    }

    /// Whether frames leave as cells (a UDP link in cell mode).
    pub(crate) fn is_cell(&self) -> bool {
        self.udp().is_some_and(|l| l.cells.is_some())
    }

    /// The UDP socket this link sends on: its own, or its host port's.
    fn udp(&self) -> Option<&UdpLink> {
        match self {
            Link::Udp(l) => Some(l),
            Link::Host(h) => Some(h.link()),
            Link::Mem(_) => None,
        }
    }

    /// Where a send goes: `to`, or on a host port (whose socket has no peer) the
    /// sub's connected peer.
    fn dest(&self, to: Option<SocketAddr>) -> io::Result<Option<SocketAddr>> {
        match self {
            Link::Host(h) => h.dest(to).map(Some),
            _ => Ok(to),
        }
    }

    /// Send cell trains already laid out, `unit` octets each, back to back in
    /// `bytes` (a cell-smoothed VC's due cells, `engine::smoother`); returns how
    /// many went out. Cell mode only: elsewhere nothing is sent.
    pub(crate) fn send_units(
        &self,
        bytes: &[u8],
        unit: usize,
        to: Option<SocketAddr>,
    ) -> io::Result<usize> {
        match self.udp() {
            Some(l) if l.cells.is_some() => l.send_run(
                bytes,
                unit,
                bytes.len() / unit.max(1),
                self.dest(to)?,
                TooBig::Fragment,
            ),
            _ => Ok(0),
        }
    }

    /// The most payload one TPDU may carry on this link without IP fragmentation,
    /// `sealed` or not: on a frame-mode UDP link, the path MTU less the IP, UDP, VC
    /// and TPDU headers (and the seal); `usize::MAX` where the link sets no bound (a
    /// cell link cuts frames into trains that fit, a mem link has no IP) or while the
    /// path MTU is unknown.
    pub(crate) fn tpdu_cap(&self, sealed: bool) -> usize {
        match self {
            _ if self.is_cell() => usize::MAX,
            Link::Udp(_) | Link::Host(_) => self.path_payload().map_or(usize::MAX, |p| {
                let seal = if sealed {
                    crate::wire::seal::OVERHEAD
                } else {
                    0
                };
                p.saturating_sub(VC_HEADER_LEN + crate::wire::tpdu::HEADER_LEN + seal)
                    .max(1)
            }),
            _ => usize::MAX,
        }
    }

    /// The path MTU the kernel holds for the peer, IP header included (`None` on a
    /// mem link or with no peer yet).
    pub(crate) fn path_mtu(&self) -> Option<u32> {
        match self {
            Link::Udp(l) => l
                .path_payload()
                .map(|p| (p + l.port.ip_udp_overhead()) as u32),
            Link::Host(h) => h.path_payload().map(|p| (p + h.ip_udp_overhead()) as u32),
            Link::Mem(_) => None,
        }
    }

    /// Datagrams sent in IP fragments because the path shrank under them (see
    /// [`UdpLink::oversize_fallbacks`]); 0 on a mem link.
    pub(crate) fn oversize_fallbacks(&self) -> u64 {
        match self {
            Link::Udp(l) => l.oversize_fallbacks(),
            Link::Host(h) => h.oversize_fallbacks(),
            Link::Mem(_) => 0,
        }
    }

    /// See [`UdpLink::cells_above`] (a VC's own socket, or its share of a host port;
    /// a mem link has no path).
    pub(crate) fn cells_above(&self, fit: usize) {
        match self {
            Link::Udp(l) => l.cells_above(fit),
            Link::Host(h) => h.cells_above(fit),
            Link::Mem(_) => {}
        }
    }

    /// Frames sent as cell trains because they no longer fitted the path
    /// ([`UdpLink::cells_above`]); 0 elsewhere.
    pub(crate) fn frames_as_cells(&self) -> u64 {
        match self {
            Link::Udp(l) => l.frames_as_cells(),
            Link::Host(h) => h.frames_as_cells(),
            Link::Mem(_) => 0,
        }
    }

    /// Whether the link sends gathered frames ([`Link::send_gathered`]): a UDP link in
    /// frame mode. A cell link cuts frames into cells and a mem link copies them.
    pub(crate) fn gathers(&self) -> bool {
        self.udp().is_some_and(|l| l.cells.is_none())
    }

    /// Whether the link has a path MTU to search (`engine::path_probe`): a
    /// frame-mode UDP link (a cell link cuts trains to the kernel's MTU, a mem link
    /// has no IP).
    pub(crate) fn probes_path(&self) -> bool {
        self.gathers()
    }

    /// The largest datagram payload the kernel says the path carries; `None` on a mem
    /// link or with no peer yet.
    pub(crate) fn path_payload(&self) -> Option<usize> {
        match self {
            Link::Udp(l) => l.path_payload(),
            Link::Host(h) => h.path_payload(),
            Link::Mem(_) => None,
        }
    }

    /// Send one path MTU probe (`engine::path_probe`) as it is: DF set, never
    /// fragmented. A probe the kernel refuses as larger than the path MTU is not
    /// sent (the kernel's MTU is read again) and so never confirmed.
    pub(crate) fn send_probe(&self, frame: &[u8], to: Option<SocketAddr>) -> io::Result<()> {
        match self {
            Link::Udp(l) => match l.port.send(to, frame, frame.len()) {
                Ok(_) => Ok(()),
                Err(e) => {
                    if natm_udp::is_msg_size_err(&e) {
                        l.learn_path_mtu();
                    }
                    Err(e)
                }
            },
            Link::Host(h) => h.send_one(frame, to).map(|_| ()),
            Link::Mem(_) => Ok(()),
        }
    }

    /// Send a gathered run; on a link that cannot gather, the frames are copied
    /// together and sent as a batch.
    pub(crate) fn send_gathered(
        &self,
        batch: &GatherBatch,
        to: Option<SocketAddr>,
    ) -> io::Result<usize> {
        match self {
            Link::Udp(l) if l.cells.is_none() => l.send_gathered(batch, to),
            Link::Host(h) if !self.is_cell() => h.send_gathered(batch, to),
            _ => {
                let mut b = SendBatch::with_capacity(batch.len() * batch.segment_size());
                for f in batch.frames() {
                    b.push(&f)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                }
                self.send_batch(&b, to)
            }
        }
    }

    /// Wake a thread blocked in [`Link::recv_wait`] now rather than at the end of its
    /// read slice, for a connection that has ended: the UDP socket's read side is shut
    /// down, so every receive on it returns at once from then on. Mem links carry no
    /// signalled calls and are left as they are.
    pub(crate) fn interrupt_reader(&self) {
        match self {
            Link::Udp(l) => {
                let _ = rustix::net::shutdown(&l.port, rustix::net::Shutdown::Read);
            }
            Link::Host(h) => h.interrupt_reader(),
            Link::Mem(_) => {}
        }
    }

    /// Wait up to `slice` (at most [`READ_SLICE`]) for frames and receive them into
    /// `batch`.
    pub(crate) fn recv_wait(&self, batch: &mut RecvBatch, slice: Duration) -> io::Result<usize> {
        let slice = slice.min(READ_SLICE);
        match self {
            Link::Udp(l) => l.recv_wait(batch, slice),
            Link::Mem(m) => m.recv_wait(batch, slice),
            Link::Host(h) => h.recv_wait(batch, slice),
        }
    }

    /// Busy polling: receive into `batch`, spinning until a frame comes or `until`.
    pub(crate) fn recv_spin(
        &self,
        batch: &mut RecvBatch,
        until: std::time::Instant,
    ) -> io::Result<usize> {
        if let Link::Host(h) = self {
            return h.recv_spin(batch, until);
        }
        // One datagram per call and no allocation, and the clock read every few
        // calls: each empty turn of the loop is time a frame that has just arrived
        // waits (issue 30, the busy round trip).
        const TURNS_PER_CLOCK: u32 = 8;
        let mut turns = 0u32;
        loop {
            let r = match self {
                Link::Udp(l) => l.recv_one_now(batch),
                _ => self.recv_now(batch),
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
            turns += 1;
            if turns.is_multiple_of(TURNS_PER_CLOCK) && std::time::Instant::now() >= until {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            std::hint::spin_loop();
        }
    }

    pub(crate) fn recv_now(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        match self {
            Link::Udp(l) => l.recv_now(batch),
            Link::Mem(m) => m.recv_now(batch),
            Link::Host(h) => h.recv_now(batch),
        }
    }

    /// The cell mode's counters; `None` in frame mode and on mem links.
    pub(crate) fn cell_stats(&self) -> Option<crate::adaptor::CellStats> {
        match self {
            Link::Udp(l) => l.cell_stats(),
            Link::Host(h) => h.link().cell_stats(),
            Link::Mem(_) => None,
        }
    }

    /// The UDP socket's own counters (datagrams, octets, system calls); `None` on mem
    /// links.
    pub(crate) fn port_stats(&self) -> Option<crate::adaptor::PortStats> {
        match self {
            Link::Udp(l) => Some(l.port.stats()),
            Link::Mem(_) | Link::Host(_) => None,
        }
    }

    /// Frames the port's receive queue dropped because it was full (UDP: the kernel's
    /// count from `/proc/net/udp`, a file read; `None` where unknown).
    pub(crate) fn queue_drops(&self) -> Option<u64> {
        match self {
            Link::Udp(l) => l.port.kernel_drops().ok().flatten(),
            Link::Mem(m) => Some(m.stats().dropped_queue_full),
            Link::Host(h) => Some(h.queue_drops()),
        }
    }

    /// [`Link::queue_drops`] looked up in tables read once for many links.
    pub(crate) fn queue_drops_in(&self, tables: &crate::adaptor::UdpDrops) -> Option<u64> {
        match self {
            Link::Udp(l) => tables.of(l.raw_fd()),
            Link::Mem(m) => Some(m.stats().dropped_queue_full),
            Link::Host(h) => Some(h.queue_drops()),
        }
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

    /// Issue 30, RFC 8899 §4.3: frames cut before the path shrank cross it as cell
    /// trains that fit, and a frame-mode peer takes them among its frames.
    #[test]
    fn frames_too_long_for_the_path_cross_it_as_cells_and_arrive_whole() {
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = UdpLink::bind(lo, 1 << 20, 1 << 20, LinkMode::Frame).unwrap();
        let b = UdpLink::bind(lo, 1 << 20, 1 << 20, LinkMode::Frame).unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        let frame = |vci: u16, len: usize, fill: u8| {
            let mut f = vc_header(vci).to_vec();
            f.resize(VC_HEADER_LEN + len, fill);
            f
        };
        let big = [frame(40, 3_000, 7), frame(40, 3_000, 8)];
        a.cells_above(1_200);
        let mut batch = SendBatch::new();
        for f in &big {
            batch.push(&[f]).unwrap();
        }
        assert_eq!(a.send_batch(&batch, None).unwrap(), 2);
        // A gathered run too: its headers written, its payload where it lies.
        let h = crate::wire::tpdu::Header::new(crate::wire::tpdu::TpduType::Data);
        let mut run = GatherBatch::default();
        run.push(&vc_header(41), &h, bytes::Bytes::from(vec![5; 2_000]));
        assert_eq!(a.send_gathered(&run, None).unwrap(), 1);
        // A frame that fits leaves as a frame.
        let small = frame(41, 500, 9);
        batch.clear();
        batch.push(&[&small]).unwrap();
        assert_eq!(a.send_batch(&batch, None).unwrap(), 1);
        assert_eq!(a.frames_as_cells(), 3, "only the three too long");

        let mut got = Vec::new();
        let mut rx = UdpLink::recv_batch();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while got.len() < 4 && std::time::Instant::now() < until {
            if b.recv_wait(&mut rx, Duration::from_millis(50)).is_ok() {
                got.extend(rx.iter().map(|(_, d)| d.to_vec()));
            }
        }
        let gathered = [&vc_header(41)[..], &h.to_bytes()[..], &[5; 2_000][..]].concat();
        let want = vec![big[0].clone(), big[1].clone(), gathered, small];
        assert_eq!(got, want, "whole, in order");
        let s = b.fallback.get().expect("the receiver met trains").stats();
        // 1,200 octets hold 22 cells: 3,004 octets are 63 cells, 3 trains.
        assert_eq!((s.trains_in, s.sar.frames), (3 + 3 + 2, 3));

        // A VC that does not search its path (a bare VC, whose SDU is never cut)
        // sends whole whatever the path the kernel knows: the kernel fragments what
        // it must.
        a.cells_above(0);
        a.path_payload.store(1_472, Ordering::Relaxed);
        batch.clear();
        batch.push(&[&big[0]]).unwrap();
        assert_eq!(a.send_batch(&batch, None).unwrap(), 1);
        assert_eq!(a.frames_as_cells(), 3);
        got.clear();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while got.is_empty() && std::time::Instant::now() < until {
            if b.recv_wait(&mut rx, Duration::from_millis(50)).is_ok() {
                got.extend(rx.iter().map(|(_, d)| d.to_vec()));
            }
        }
        assert_eq!(got, [big[0].clone()]);
        let s = b.fallback.get().expect("the receiver met trains").stats();
        assert_eq!((s.trains_in, s.sar.frames), (3 + 3 + 2, 3), "no train more");
    }
}
