//! `natm-lab perf udp-io` (issue 30): what the kernel's UDP path costs per method of
//! moving datagrams — one per system call, `sendmmsg`/`recvmmsg`, natm's own socket
//! layer (`natm_udp::UdpPort`: GSO sends, GRO and `recvmmsg` receives), and io_uring
//! (crate `natm-lab-uring`) — measured alike: one sender thread and one receiver
//! thread of this process, each with its own socket, over loopback, the same payload,
//! the methods interleaved run by run.
//!
//! Each datagram carries its sequence number in its first 8 octets and a fixed pattern
//! after; the receiver keeps a bitmap of the numbers it saw, so a datagram lost,
//! duplicated, cut or corrupted is counted (every octet of one datagram in
//! `--verify-every` is compared with the pattern), never hidden. Each thread counts the
//! system calls its loop makes and reads its own CPU time (`getrusage(RUSAGE_THREAD)`)
//! at the start and the end of the measured interval.
//!
//! On loopback the sender's system call carries the datagram up to the receiver's
//! socket queue (the receive softirq runs on the sending thread), so the sender's CPU
//! holds most of the kernel's UDP path, and the receiver's the copy out of the queue.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Acquire, Ordering::Release};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};

use natm_cli::cli::{table, units};
use natm_udp::{RecvBatch, UdpPort, GRO_SLOT_LEN, MAX_DATAGRAM};

use super::counts::spread;
use super::experiment::{Experiment, OutputArgs};
use super::results::Machine;

/// Datagrams per batch of the batched methods: Linux's GSO limit, and natm's run.
const BATCH: usize = 64;
/// Octets of the sequence number at the start of every datagram.
const SEQ: usize = 8;
/// Each receive call waits at most this long, so that the receiver sees the end.
const RECV_WAIT: Duration = Duration::from_millis(20);
/// How long a receiver waits, once the sender is done, for datagrams still missing.
const DRAIN_IDLE: Duration = Duration::from_millis(200);
/// Longest a windowed sender waits for the receiver before it reports a loss.
const STALL: Duration = Duration::from_secs(5);
/// natm's receive batch: one 64 KiB buffer per call (`natm::engine::link::RECV_SLOTS`).
const NATM_RECV_SLOTS: usize = 1;
/// natm's read slice: how long a blocked read waits (`natm::engine::link::READ_SLICE`).
const NATM_READ_SLICE: Duration = Duration::from_millis(50);

/// How datagrams cross from the sender's socket to the receiver's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Method {
    /// `send` and `recv`, one datagram per system call: the per-datagram floor.
    Send,
    /// `sendmmsg` of 64, `recvmmsg` of up to 64 (`MSG_WAITFORONE`).
    Mmsg,
    /// natm's socket layer as the engine drives it: `UdpPort::send_gathered` of 64
    /// frames (GSO runs of at most 64 KiB), `UdpPort::recv` then `recv_now` with GRO.
    Natm,
    /// io_uring: 64 SEND entries per `io_uring_enter`; 64 RECV entries kept armed.
    Uring,
    /// io_uring: sent as `uring`; received by one multishot RECV that takes its
    /// buffers from a ring of 256 provided buffers.
    UringMulti,
    /// io_uring with GSO: one SENDMSG with `UDP_SEGMENT` per run of at most 64 KiB,
    /// the runs of 64 datagrams per enter; received as `uring-multi`.
    UringGso,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Send => "send/recv",
            Method::Mmsg => "sendmmsg/recvmmsg",
            Method::Natm => "natm UdpPort",
            Method::Uring => "io_uring",
            Method::UringMulti => "io_uring multishot",
            Method::UringGso => "io_uring GSO+multishot",
        }
    }
}

/// `natm-lab perf udp-io`.
#[derive(Debug, Args)]
pub(crate) struct UdpIoArgs {
    /// Datagram payload sizes, comma-separated (8 to 65,507 octets).
    #[arg(long, value_delimiter = ',', value_parser = units::bytes, default_value = "1436,65000")]
    sizes: Vec<u64>,
    /// Methods, comma-separated, in the order they run within each run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "send,mmsg,natm,uring,uring-multi,uring-gso"
    )]
    methods: Vec<Method>,
    /// Repeat each measurement this many times, the methods interleaved; the table
    /// gives the median of runs and the spread.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Not counted at the start of each run.
    #[arg(long, default_value = "300ms", value_parser = units::duration)]
    warmup: Duration,
    /// Counted for this long after the warm-up.
    #[arg(long, default_value = "2s", value_parser = units::duration)]
    time: Duration,
    /// SO_SNDBUF and SO_RCVBUF asked for on every socket (Linux grants twice this,
    /// capped by net.core.[rw]mem_max).
    #[arg(long, default_value = "4MiB", value_parser = units::bytes)]
    sockbuf: u64,
    /// Compare every octet of one datagram in this many with what was sent (each
    /// datagram's sequence number and length are checked always).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    verify_every: u64,
    #[command(flatten)]
    to: OutputArgs,
}

/// What `natm-lab perf udp-io` measured.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct UdpIoResult {
    pub(crate) machine: Machine,
    pub(crate) warmup_s: f64,
    pub(crate) time_s: f64,
    pub(crate) verify_every: u64,
    pub(crate) rows: Vec<MethodRuns>,
}

/// One method at one size, each run.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct MethodRuns {
    pub(crate) method: Method,
    pub(crate) size: usize,
    pub(crate) runs: Vec<IoRun>,
}

/// One run of one method.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct IoRun {
    /// Datagrams the sender's calls reported sent, over the whole run.
    pub(crate) sent: u64,
    /// Datagrams the sender's calls reported failed.
    pub(crate) send_errors: u64,
    /// Distinct datagrams received intact, over the whole run.
    pub(crate) received: u64,
    /// Datagrams received again (a sequence number seen before).
    pub(crate) duplicates: u64,
    /// Datagrams of the wrong length, or whose octets differ from what was sent.
    pub(crate) bad: u64,
    /// Receive calls or completions that failed.
    pub(crate) recv_errors: u64,
    /// The sender's measured interval.
    pub(crate) tx: Side,
    /// The receiver's measured interval.
    pub(crate) rx: Side,
    /// CPU time of the whole process (both threads, and any io_uring worker the
    /// kernel started) over the measured time, seconds; 0 when counted by datagrams.
    pub(crate) process_cpu_s: f64,
}

impl IoRun {
    /// Sent and not received intact: lost on the way (a full receive queue), or bad.
    pub(crate) fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }
}

/// One thread's measured interval.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct Side {
    pub(crate) secs: f64,
    /// Datagrams sent (receiver: received) in the interval.
    pub(crate) datagrams: u64,
    /// System calls the thread's loop made in the interval.
    pub(crate) calls: u64,
    /// The thread's CPU time in the interval, user and system, seconds.
    pub(crate) cpu_s: f64,
}

/// One run's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunConfig {
    pub(crate) method: Method,
    pub(crate) size: usize,
    pub(crate) warmup: Duration,
    pub(crate) time: Duration,
    /// Send exactly this many datagrams (measured from the first) instead of for
    /// `warmup + time`.
    pub(crate) count: Option<u64>,
    /// Never let the sender be more than this many datagrams ahead of the receiver
    /// (so that nothing is dropped); `None`: send as fast as the calls go.
    pub(crate) window: Option<u64>,
    pub(crate) sockbuf: usize,
    pub(crate) verify_every: u64,
}

/// What the two threads share.
#[derive(Default)]
struct Shared {
    /// 0: warming up, 1: measuring, 2: stop.
    phase: AtomicU8,
    received: AtomicU64,
    /// Sequence numbers the sender used, set before `sender_done`.
    attempted: AtomicU64,
    sent: AtomicU64,
    sender_done: AtomicBool,
    /// Either thread failed: the other stops.
    failed: AtomicBool,
}

/// A thread's counters at one moment.
#[derive(Clone, Copy)]
struct Snap {
    at: Instant,
    datagrams: u64,
    calls: u64,
    cpu: Duration,
}

impl Snap {
    fn now(datagrams: u64, calls: u64) -> Snap {
        Snap {
            at: Instant::now(),
            datagrams,
            calls,
            cpu: thread_cpu(),
        }
    }

    fn to(self, end: Snap) -> Side {
        Side {
            secs: (end.at - self.at).as_secs_f64(),
            datagrams: end.datagrams - self.datagrams,
            calls: end.calls - self.calls,
            cpu_s: end.cpu.saturating_sub(self.cpu).as_secs_f64(),
        }
    }
}

/// This thread's CPU time so far, user and system.
fn thread_cpu() -> Duration {
    cpu(nix::sys::resource::UsageWho::RUSAGE_THREAD)
}

/// The whole process's CPU time so far, user and system.
fn process_cpu_now() -> Duration {
    cpu(nix::sys::resource::UsageWho::RUSAGE_SELF)
}

fn cpu(who: nix::sys::resource::UsageWho) -> Duration {
    let Ok(u) = nix::sys::resource::getrusage(who) else {
        return Duration::ZERO;
    };
    let d = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().max(0) as u64)
            + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    d(u.user_time()) + d(u.system_time())
}

/// The octets every datagram of `size` carries after its sequence number.
fn pattern(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i.wrapping_mul(7) + 13) as u8).collect()
}

/// The receiver's account of what arrived.
struct Check {
    size: usize,
    pattern: Vec<u8>,
    every: u64,
    /// Bit `n` set: sequence number `n` arrived.
    seen: Vec<u64>,
    taken: u64,
    received: u64,
    duplicates: u64,
    bad: u64,
}

/// Sequence numbers past this are garbage, not a run that long.
const MAX_SEQ: u64 = 1 << 36;

impl Check {
    fn new(size: usize, every: u64) -> Check {
        Check {
            size,
            pattern: pattern(size),
            every,
            seen: vec![0; 1 << 14],
            taken: 0,
            received: 0,
            duplicates: 0,
            bad: 0,
        }
    }

    fn take(&mut self, d: &[u8]) {
        self.taken += 1;
        if d.len() != self.size {
            self.bad += 1;
            return;
        }
        let mut s = [0; SEQ];
        s.copy_from_slice(&d[..SEQ]);
        let seq = u64::from_le_bytes(s);
        if seq >= MAX_SEQ {
            self.bad += 1;
            return;
        }
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if word >= self.seen.len() {
            self.seen.resize((word + 1).next_power_of_two(), 0);
        }
        if self.seen[word] & bit != 0 {
            self.duplicates += 1;
            return;
        }
        if self.taken.is_multiple_of(self.every) && d[SEQ..] != self.pattern[SEQ..] {
            self.bad += 1;
            return;
        }
        self.seen[word] |= bit;
        self.received += 1;
    }
}

/// What one send call did.
#[derive(Debug, Clone, Copy, Default)]
struct Out {
    ok: u64,
    errors: u64,
    calls: u64,
}

/// The sending end of a method.
trait Tx {
    /// Send datagrams `seq..seq + n` (`n` at most [`BATCH`]).
    fn send(&mut self, seq: u64, n: usize) -> io::Result<Out>;
}

/// The receiving end of a method.
trait Rx {
    /// Wait a little ([`RECV_WAIT`] or so) for datagrams and hand each to `check`;
    /// returns the system calls made and the failed receives.
    fn recv(&mut self, check: &mut Check) -> io::Result<(u64, u64)>;
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// `send`, one datagram per call.
struct SendTx {
    socket: UdpSocket,
    buf: Vec<u8>,
}

impl Tx for SendTx {
    fn send(&mut self, seq: u64, n: usize) -> io::Result<Out> {
        let mut out = Out::default();
        for s in seq..seq + n as u64 {
            self.buf[..SEQ].copy_from_slice(&s.to_le_bytes());
            out.calls += 1;
            match self.socket.send(&self.buf) {
                Ok(_) => out.ok += 1,
                Err(_) => out.errors += 1,
            }
        }
        Ok(out)
    }
}

/// `recv`, one datagram per call.
struct RecvRx {
    socket: UdpSocket,
    buf: Vec<u8>,
}

impl Rx for RecvRx {
    fn recv(&mut self, check: &mut Check) -> io::Result<(u64, u64)> {
        match self.socket.recv(&mut self.buf) {
            Ok(n) => check.take(&self.buf[..n]),
            Err(e) if would_block(&e) => {}
            Err(_) => return Ok((1, 1)),
        }
        Ok((1, 0))
    }
}

/// `sendmmsg` of up to 64 datagrams, each its own buffer.
struct MmsgTx {
    socket: UdpSocket,
    bufs: Vec<Vec<u8>>,
    headers: nix::sys::socket::MultiHeaders<nix::sys::socket::SockaddrStorage>,
}

impl Tx for MmsgTx {
    fn send(&mut self, seq: u64, n: usize) -> io::Result<Out> {
        use nix::sys::socket::{sendmmsg, MsgFlags, SockaddrStorage};
        for (i, b) in self.bufs[..n].iter_mut().enumerate() {
            b[..SEQ].copy_from_slice(&(seq + i as u64).to_le_bytes());
        }
        let mut out = Out::default();
        let mut from = 0;
        let none: [Option<SockaddrStorage>; BATCH] = [None; BATCH];
        while from < n {
            let slices: Vec<[IoSlice<'_>; 1]> = self.bufs[from..n]
                .iter()
                .map(|b| [IoSlice::new(b)])
                .collect();
            out.calls += 1;
            let r = sendmmsg(
                self.socket.as_raw_fd(),
                &mut self.headers,
                &slices,
                &none[..n - from],
                [],
                MsgFlags::empty(),
            );
            match r {
                Ok(res) => {
                    let k = res.count();
                    out.ok += k as u64;
                    from += k;
                }
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
                Err(_) => {
                    out.errors += (n - from) as u64;
                    break;
                }
            }
        }
        Ok(out)
    }
}

/// `recvmmsg` of up to 64 datagrams, waiting for the first only.
struct MmsgRx {
    socket: UdpSocket,
    area: Vec<u8>,
    headers: nix::sys::socket::MultiHeaders<nix::sys::socket::SockaddrStorage>,
}

/// Octets per receive buffer of the methods without GRO: more than any datagram.
const SLOT: usize = MAX_DATAGRAM + 1;

impl Rx for MmsgRx {
    fn recv(&mut self, check: &mut Check) -> io::Result<(u64, u64)> {
        use nix::sys::socket::{recvmmsg, MsgFlags};
        let mut lens = [0usize; BATCH];
        let got = {
            let mut slices: Vec<[IoSliceMut<'_>; 1]> = self
                .area
                .chunks_mut(SLOT)
                .map(|s| [IoSliceMut::new(s)])
                .collect();
            match recvmmsg(
                self.socket.as_raw_fd(),
                &mut self.headers,
                slices.iter_mut(),
                MsgFlags::MSG_WAITFORONE,
                None,
            ) {
                Ok(res) => {
                    let mut k = 0;
                    for (m, l) in res.zip(lens.iter_mut()) {
                        *l = m.bytes;
                        k += 1;
                    }
                    k
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => 0,
                Err(_) => return Ok((1, 1)),
            }
        };
        for (slot, &len) in self.area.chunks(SLOT).zip(&lens[..got]) {
            check.take(&slot[..len]);
        }
        Ok((1, 0))
    }
}

/// natm's socket layer as the engine sends: `send_gathered` of 64 frames, each its
/// header (here the sequence number) and its payload where it lies.
struct NatmTx {
    port: UdpPort,
    heads: [[u8; SEQ]; BATCH],
    payload: Vec<u8>,
}

impl Tx for NatmTx {
    fn send(&mut self, seq: u64, n: usize) -> io::Result<Out> {
        for (i, h) in self.heads[..n].iter_mut().enumerate() {
            *h = (seq + i as u64).to_le_bytes();
        }
        let mut frames = [[&[][..]; 2]; BATCH];
        for (f, h) in frames.iter_mut().zip(&self.heads[..n]) {
            *f = [&h[..], &self.payload[SEQ..]];
        }
        let before = self.port.stats();
        let r = self
            .port
            .send_gathered(None, &frames[..n], self.payload.len());
        let after = self.port.stats();
        let calls = (after.send_calls - before.send_calls)
            + (after.send_errors - before.send_errors)
            + (after.gso_fallbacks - before.gso_fallbacks);
        let ok = r.unwrap_or(0) as u64;
        Ok(Out {
            ok,
            errors: n as u64 - ok,
            calls,
        })
    }
}

/// natm's socket layer as the engine receives (`Conn`'s read): a blocking
/// `UdpPort::recv` of one 64 KiB buffer, and after a GRO run (a burst), `recv_now`
/// until the socket is empty.
struct NatmRx {
    port: UdpPort,
    batch: RecvBatch,
}

impl NatmRx {
    fn take(&self, check: &mut Check) {
        for (_, d) in self.batch.iter() {
            check.take(d);
        }
    }
}

impl Rx for NatmRx {
    fn recv(&mut self, check: &mut Check) -> io::Result<(u64, u64)> {
        let mut calls = 1;
        match self.port.recv(&mut self.batch) {
            Ok(_) => {
                self.take(check);
                if self.batch.len() > 1 || self.batch.marked_more() {
                    loop {
                        calls += 1;
                        match self.port.recv_now(&mut self.batch) {
                            Ok(_) => {
                                self.take(check);
                                if !self.batch.may_have_more() {
                                    break;
                                }
                            }
                            Err(e) if would_block(&e) => break,
                            Err(_) => return Ok((calls, 1)),
                        }
                    }
                }
                Ok((calls, 0))
            }
            Err(e) if would_block(&e) => Ok((calls, 0)),
            Err(_) => Ok((calls, 1)),
        }
    }
}

/// io_uring: one SEND per datagram, each its own buffer, 64 per enter.
struct UringTx {
    ring: natm_lab_uring::Sender,
    bufs: Vec<Vec<u8>>,
}

impl Tx for UringTx {
    fn send(&mut self, seq: u64, n: usize) -> io::Result<Out> {
        for (i, b) in self.bufs[..n].iter_mut().enumerate() {
            b[..SEQ].copy_from_slice(&(seq + i as u64).to_le_bytes());
        }
        let bufs: Vec<&[u8]> = self.bufs[..n].iter().map(Vec::as_slice).collect();
        let m = self.ring.send(&bufs)?;
        Ok(Out {
            ok: m.datagrams as u64,
            errors: m.errors as u64,
            calls: m.enters,
        })
    }
}

/// io_uring with GSO: the 64 datagrams back to back, one SENDMSG per run of at most
/// 64 KiB, all the runs per enter.
struct UringGsoTx {
    ring: natm_lab_uring::Sender,
    area: Vec<u8>,
    size: usize,
}

impl Tx for UringGsoTx {
    fn send(&mut self, seq: u64, n: usize) -> io::Result<Out> {
        let size = self.size;
        for (i, d) in self.area.chunks_mut(size).take(n).enumerate() {
            d[..SEQ].copy_from_slice(&(seq + i as u64).to_le_bytes());
        }
        let per_run = (MAX_DATAGRAM / size).clamp(1, BATCH);
        let runs: Vec<&[u8]> = self.area[..n * size].chunks(per_run * size).collect();
        let m = self.ring.send_gso(&runs, size as u16)?;
        Ok(Out {
            ok: m.datagrams as u64,
            errors: n as u64 - (m.datagrams as u64).min(n as u64),
            calls: m.enters,
        })
    }
}

/// io_uring: 64 RECVs kept armed.
struct UringRx {
    ring: natm_lab_uring::Receiver,
}

impl Rx for UringRx {
    fn recv(&mut self, check: &mut Check) -> io::Result<(u64, u64)> {
        let m = self.ring.recv(RECV_WAIT, |d| check.take(d))?;
        Ok((m.enters, m.errors as u64))
    }
}

/// Provided buffers of the multishot receive.
const MULTI_BUFFERS: u16 = 256;

/// io_uring: one multishot RECV over a ring of provided buffers.
struct UringMultiRx {
    ring: natm_lab_uring::MultiReceiver,
}

impl Rx for UringMultiRx {
    fn recv(&mut self, check: &mut Check) -> io::Result<(u64, u64)> {
        let m = self.ring.recv(RECV_WAIT, |d| check.take(d))?;
        Ok((m.enters, m.errors as u64))
    }
}

/// Two connected loopback sockets with the buffers asked for: (sender, receiver).
fn socket_pair(sockbuf: usize) -> anyhow::Result<(UdpSocket, UdpSocket)> {
    let tx = UdpSocket::bind("127.0.0.1:0")?;
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    tx.connect(rx.local_addr()?)?;
    rx.connect(tx.local_addr()?)?;
    for s in [&tx, &rx] {
        let s = socket2::SockRef::from(s);
        let _ = s.set_send_buffer_size(sockbuf);
        let _ = s.set_recv_buffer_size(sockbuf);
    }
    rx.set_read_timeout(Some(RECV_WAIT))?;
    Ok((tx, rx))
}

/// The sender's end of `cfg.method` on `socket`, made on the thread that drives it.
fn make_tx(
    cfg: &RunConfig,
    socket: Option<UdpSocket>,
    port: Option<UdpPort>,
) -> anyhow::Result<Box<dyn Tx>> {
    let size = cfg.size;
    let filled = || {
        let p = pattern(size);
        (0..BATCH).map(|_| p.clone()).collect::<Vec<_>>()
    };
    let socket = || socket.context("no socket");
    Ok(match cfg.method {
        Method::Send => Box::new(SendTx {
            socket: socket()?,
            buf: pattern(size),
        }),
        Method::Mmsg => Box::new(MmsgTx {
            socket: socket()?,
            bufs: filled(),
            headers: nix::sys::socket::MultiHeaders::preallocate(BATCH, None),
        }),
        Method::Natm => Box::new(NatmTx {
            port: port.context("no port")?,
            heads: [[0; SEQ]; BATCH],
            payload: pattern(size),
        }),
        Method::Uring | Method::UringMulti => Box::new(UringTx {
            ring: natm_lab_uring::Sender::new(socket()?)?,
            bufs: filled(),
        }),
        Method::UringGso => Box::new(UringGsoTx {
            ring: natm_lab_uring::Sender::new(socket()?)?,
            area: filled().concat(),
            size,
        }),
    })
}

/// The receiver's end of `cfg.method`, made on the thread that drives it.
fn make_rx(
    cfg: &RunConfig,
    socket: Option<UdpSocket>,
    port: Option<UdpPort>,
) -> anyhow::Result<Box<dyn Rx>> {
    let socket = || socket.context("no socket");
    Ok(match cfg.method {
        Method::Send => Box::new(RecvRx {
            socket: socket()?,
            buf: vec![0; SLOT],
        }),
        Method::Mmsg => Box::new(MmsgRx {
            socket: socket()?,
            area: vec![0; BATCH * SLOT],
            headers: nix::sys::socket::MultiHeaders::preallocate(BATCH, None),
        }),
        Method::Natm => Box::new(NatmRx {
            port: port.context("no port")?,
            batch: RecvBatch::new(NATM_RECV_SLOTS, GRO_SLOT_LEN),
        }),
        Method::Uring => Box::new(UringRx {
            ring: natm_lab_uring::Receiver::new(socket()?, BATCH, SLOT)?,
        }),
        Method::UringMulti | Method::UringGso => Box::new(UringMultiRx {
            ring: natm_lab_uring::MultiReceiver::new(socket()?, MULTI_BUFFERS, SLOT)?,
        }),
    })
}

/// Two natm ports as a VC's link opens them (`UdpLink::bind`, then `connect`).
fn port_pair(sockbuf: usize) -> anyhow::Result<(UdpPort, UdpPort)> {
    let local: SocketAddr = ([127, 0, 0, 1], 0).into();
    let tx = UdpPort::bind_vc(
        local,
        sockbuf,
        sockbuf,
        NATM_READ_SLICE,
        natm_udp::VcReceive::ALL,
    )?;
    let rx = UdpPort::bind_vc(
        local,
        sockbuf,
        sockbuf,
        NATM_READ_SLICE,
        natm_udp::VcReceive::ALL,
    )?;
    for p in [&tx, &rx] {
        p.set_dont_fragment(true)?;
    }
    tx.connect(rx.local_addr()?)?;
    rx.connect(tx.local_addr()?)?;
    Ok((tx, rx))
}

/// One run of one method: the sender and receiver threads, the clock in this one.
pub(crate) fn run_once(cfg: &RunConfig) -> anyhow::Result<IoRun> {
    if cfg.size < SEQ || cfg.size > MAX_DATAGRAM {
        anyhow::bail!(
            "a datagram of {} B: sizes are {SEQ} to {MAX_DATAGRAM} B",
            cfg.size
        );
    }
    if cfg.window.is_some_and(|w| w < BATCH as u64) {
        anyhow::bail!("a window of fewer than {BATCH} datagrams");
    }
    let (sockets, ports) = if cfg.method == Method::Natm {
        let (t, r) = port_pair(cfg.sockbuf)?;
        ((None, None), (Some(t), Some(r)))
    } else {
        let (t, r) = socket_pair(cfg.sockbuf)?;
        ((Some(t), Some(r)), (None, None))
    };
    let shared = Shared::default();
    if cfg.count.is_some() {
        shared.phase.store(1, Release);
    }
    std::thread::scope(|s| {
        let sh = &shared;
        let tx = s.spawn(move || {
            let r = sender(cfg, sh, sockets.0, ports.0);
            if r.is_err() {
                sh.failed.store(true, Release);
                sh.sender_done.store(true, Release);
            }
            r
        });
        let rx = s.spawn(move || {
            let r = receiver(cfg, sh, sockets.1, ports.1);
            if r.is_err() {
                sh.failed.store(true, Release);
            }
            r
        });
        let mut process_cpu = Duration::ZERO;
        if cfg.count.is_none() {
            std::thread::sleep(cfg.warmup);
            let before = process_cpu_now();
            sh.phase.store(1, Release);
            std::thread::sleep(cfg.time);
            sh.phase.store(2, Release);
            process_cpu = process_cpu_now().saturating_sub(before);
        }
        let (tx_side, send_errors) = tx.join().expect("the sender does not panic")?;
        let mut run = rx.join().expect("the receiver does not panic")?;
        run.tx = tx_side;
        run.sent = sh.sent.load(Acquire);
        run.send_errors = send_errors;
        run.process_cpu_s = process_cpu.as_secs_f64();
        Ok(run)
    })
}

/// The sender's loop; returns its measured interval and its failed datagrams.
fn sender(
    cfg: &RunConfig,
    sh: &Shared,
    socket: Option<UdpSocket>,
    port: Option<UdpPort>,
) -> anyhow::Result<(Side, u64)> {
    let mut tx = make_tx(cfg, socket, port)?;
    let batch = if cfg.method == Method::Send { 1 } else { BATCH };
    let (mut seq, mut ok, mut errors, mut calls) = (0u64, 0u64, 0u64, 0u64);
    let mut start = None;
    'run: loop {
        let phase = sh.phase.load(Acquire);
        if phase >= 1 && start.is_none() {
            start = Some(Snap::now(ok, calls));
        }
        if phase == 2 || sh.failed.load(Acquire) {
            break;
        }
        let n = match cfg.count {
            Some(c) => (c - seq).min(batch as u64) as usize,
            None => batch,
        };
        if n == 0 {
            break;
        }
        if let Some(w) = cfg.window {
            let since = Instant::now();
            while seq + n as u64 > sh.received.load(Acquire) + w {
                if sh.failed.load(Acquire) || sh.phase.load(Acquire) == 2 {
                    break 'run;
                }
                if since.elapsed() > STALL {
                    sh.failed.store(true, Release);
                    anyhow::bail!(
                        "the receiver has {} of {seq} datagrams after {STALL:?}: some were lost",
                        sh.received.load(Acquire)
                    );
                }
                std::thread::yield_now();
            }
        }
        let out = tx.send(seq, n)?;
        seq += n as u64;
        ok += out.ok;
        errors += out.errors;
        calls += out.calls;
    }
    let end = Snap::now(ok, calls);
    sh.attempted.store(seq, Release);
    sh.sent.store(ok, Release);
    sh.sender_done.store(true, Release);
    Ok((start.unwrap_or(end).to(end), errors))
}

/// The receiver's loop: until the sender is done and everything it sent arrived, or
/// nothing more came for [`DRAIN_IDLE`].
fn receiver(
    cfg: &RunConfig,
    sh: &Shared,
    socket: Option<UdpSocket>,
    port: Option<UdpPort>,
) -> anyhow::Result<IoRun> {
    let mut rx = make_rx(cfg, socket, port)?;
    let mut check = Check::new(cfg.size, cfg.verify_every);
    let (mut calls, mut errors) = (0u64, 0u64);
    let (mut start, mut end) = (None, None);
    let mut idle_since: Option<Instant> = None;
    loop {
        let phase = sh.phase.load(Acquire);
        if phase >= 1 && start.is_none() {
            start = Some(Snap::now(check.received, calls));
        }
        if phase == 2 && end.is_none() {
            end = Some(Snap::now(check.received, calls));
        }
        if sh.failed.load(Acquire) {
            anyhow::bail!("the sender failed");
        }
        let before = check.taken;
        let (c, e) = rx.recv(&mut check)?;
        calls += c;
        errors += e;
        sh.received.store(check.received, Release);
        if sh.sender_done.load(Acquire) {
            if check.received >= sh.sent.load(Acquire) {
                break;
            }
            if check.taken == before {
                if idle_since.get_or_insert_with(Instant::now).elapsed() >= DRAIN_IDLE {
                    break;
                }
            } else {
                idle_since = None;
            }
        }
    }
    let end = end.unwrap_or_else(|| Snap::now(check.received, calls));
    let start = start.unwrap_or(end);
    Ok(IoRun {
        received: check.received,
        duplicates: check.duplicates,
        bad: check.bad,
        recv_errors: errors,
        rx: start.to(end),
        ..IoRun::default()
    })
}

impl Experiment for UdpIoArgs {
    type Result = UdpIoResult;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(UdpIoResult, ())> {
        if self.runs == 0 {
            anyhow::bail!("--runs must be at least 1");
        }
        let sockbuf = usize::try_from(self.sockbuf).context("--sockbuf")?;
        let mut rows: Vec<MethodRuns> = Vec::new();
        for &size in &self.sizes {
            let size = usize::try_from(size).context("--sizes")?;
            for &method in &self.methods {
                rows.push(MethodRuns {
                    method,
                    size,
                    runs: Vec::new(),
                });
            }
        }
        pb.set_length((rows.len() * self.runs) as u64);
        for run in 0..self.runs {
            for row in &mut rows {
                pb.set_message(format!(
                    "{} {} B run {}/{}",
                    row.method.name(),
                    row.size,
                    run + 1,
                    self.runs
                ));
                let cfg = RunConfig {
                    method: row.method,
                    size: row.size,
                    warmup: self.warmup,
                    time: self.time,
                    count: None,
                    window: None,
                    sockbuf,
                    verify_every: self.verify_every,
                };
                let r = run_once(&cfg)
                    .with_context(|| format!("{} at {} B", row.method.name(), row.size))?;
                row.runs.push(r);
                pb.inc(1);
            }
        }
        Ok((
            UdpIoResult {
                machine: Machine::now(),
                warmup_s: self.warmup.as_secs_f64(),
                time_s: self.time.as_secs_f64(),
                verify_every: self.verify_every,
                rows,
            },
            (),
        ))
    }

    fn table(r: &UdpIoResult) -> String {
        let mut out = String::new();
        let mut sizes: Vec<usize> = r.rows.iter().map(|m| m.size).collect();
        sizes.dedup();
        for size in sizes {
            let mut t = table::new(
                [
                    "method",
                    "datagrams/s",
                    "Gbit/s",
                    "lost %",
                    "calls/dgram tx",
                    "calls/dgram rx",
                    "CPU ns/dgram tx",
                    "CPU ns/dgram rx",
                    "CPU s/GB tx",
                    "CPU s/GB rx",
                ],
                1,
            );
            for m in r.rows.iter().filter(|m| m.size == size) {
                t.add_row(row(m));
            }
            let bad: u64 = r
                .rows
                .iter()
                .filter(|m| m.size == size)
                .flat_map(|m| &m.runs)
                .map(|x| x.bad + x.duplicates + x.send_errors + x.recv_errors)
                .sum();
            out += &format!(
                "{size} B datagrams over loopback, as received; median of runs [min–max]:\n{}\n{}\n",
                table::render(&t),
                if bad == 0 {
                    "every datagram received was intact, none twice, no call failed.".to_string()
                } else {
                    format!("{bad} datagrams bad, duplicated or failed (see --json).")
                }
            );
        }
        out += &format!(
            "{} CPUs, kernel {}, load {}; {} s measured after {} s of warm-up per run; \
             every octet compared in one datagram of {}. datagrams/s and Gbit/s: payload \
             received in the receiver's interval; tx: the sending thread (on loopback it \
             carries each datagram up to the receiver's queue), rx: the receiving thread.\n",
            r.machine.cpus,
            r.machine.kernel.as_deref().unwrap_or("?"),
            r.machine.loadavg.as_deref().unwrap_or("?"),
            r.time_s,
            r.warmup_s,
            r.verify_every
        );
        out
    }

    fn figure(_: &UdpIoResult, (): &(), _: &Path) -> anyhow::Result<()> {
        anyhow::bail!("udp-io draws no figure")
    }
}

/// One method's table row: each figure as median [min–max] over its runs.
fn row(m: &MethodRuns) -> Vec<String> {
    let size = m.size as f64;
    let fig = |f: &dyn Fn(&IoRun) -> f64, fmt: &dyn Fn(f64) -> String| {
        let v: Vec<f64> = m.runs.iter().map(f).filter(|x| x.is_finite()).collect();
        spread(&v, fmt)
    };
    let per = |n: f64, d: u64| if d == 0 { f64::NAN } else { n / d as f64 };
    vec![
        m.method.name().to_string(),
        fig(&|r| r.rx.datagrams as f64 / r.rx.secs, &si),
        fig(
            &|r| r.rx.datagrams as f64 * size * 8.0 / r.rx.secs / 1e9,
            &|x| format!("{x:.2}"),
        ),
        fig(&|r| per(r.lost() as f64 * 100.0, r.sent), &|x| {
            format!("{x:.1}")
        }),
        fig(&|r| per(r.tx.calls as f64, r.tx.datagrams), &|x| {
            format!("{x:.3}")
        }),
        fig(&|r| per(r.rx.calls as f64, r.rx.datagrams), &|x| {
            format!("{x:.3}")
        }),
        fig(&|r| per(r.tx.cpu_s * 1e9, r.tx.datagrams), &|x| {
            format!("{x:.0}")
        }),
        fig(&|r| per(r.rx.cpu_s * 1e9, r.rx.datagrams), &|x| {
            format!("{x:.0}")
        }),
        fig(&|r| per(r.tx.cpu_s * 1e9, r.tx.datagrams) / size, &|x| {
            format!("{x:.3}")
        }),
        fig(&|r| per(r.rx.cpu_s * 1e9, r.rx.datagrams) / size, &|x| {
            format!("{x:.3}")
        }),
    ]
}

/// A rate with a k or M suffix.
fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.0}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every method moves 2,000 datagrams of each size byte-exact, each once, with
    /// the sender never more than a batch ahead (so nothing may be dropped); the
    /// batched methods send them in fewer system calls than datagrams, and natm's
    /// receive with GRO takes a GSO run in fewer calls than datagrams too.
    #[test]
    fn every_method_moves_every_datagram_intact() {
        for method in Method::value_variants() {
            for size in [1436, 65_000] {
                let cfg = RunConfig {
                    method: *method,
                    size,
                    warmup: Duration::ZERO,
                    time: Duration::ZERO,
                    count: Some(2_000),
                    window: Some(BATCH as u64),
                    sockbuf: 4 << 20,
                    verify_every: 1,
                };
                let r = run_once(&cfg).unwrap();
                let what = format!("{method:?} at {size} B: {r:?}");
                assert_eq!(r.sent, 2_000, "{what}");
                assert_eq!(r.received, 2_000, "{what}");
                assert_eq!(r.tx.datagrams, 2_000, "{what}");
                assert_eq!(r.rx.datagrams, 2_000, "{what}");
                assert_eq!(
                    (r.bad, r.duplicates, r.send_errors, r.recv_errors),
                    (0, 0, 0, 0),
                    "{what}"
                );
                // A GSO run holds one 65,000 B datagram only: natm then sends one
                // per call, as its engine does.
                let batched = match method {
                    Method::Send => false,
                    Method::Natm => size <= MAX_DATAGRAM / 2,
                    _ => true,
                };
                if batched {
                    assert!(r.tx.calls < r.tx.datagrams, "{what}");
                } else {
                    assert!(r.tx.calls >= r.tx.datagrams, "{what}");
                }
                if *method == Method::Natm && batched {
                    assert!(r.rx.calls < r.rx.datagrams, "{what}");
                }
            }
        }
    }

    /// A datagram of the wrong length, a corrupted one and a repeated one are each
    /// counted, and only intact first copies count as received.
    #[test]
    fn the_check_counts_what_is_wrong() {
        let mut c = Check::new(16, 1);
        let mut d = pattern(16);
        d[..SEQ].copy_from_slice(&5u64.to_le_bytes());
        c.take(&d);
        c.take(&d);
        c.take(&d[..10]);
        let mut e = d.clone();
        e[..SEQ].copy_from_slice(&6u64.to_le_bytes());
        e[12] ^= 1;
        c.take(&e);
        e[..SEQ].copy_from_slice(&100_000u64.to_le_bytes());
        e[12] ^= 1;
        c.take(&e);
        assert_eq!((c.received, c.duplicates, c.bad), (2, 1, 2));
    }
}
