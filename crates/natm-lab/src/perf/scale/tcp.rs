//! `natm-lab perf scale`'s reference: the same workload over kernel TCP.
//!
//! One TCP connection (cubic, `TCP_NODELAY` as the `tcp-cubic` stack of `perf
//! throughput`) stands for each natm connection: the same two processes, the same
//! round-robin sender that offers each connection a message without waiting, and one
//! receiving thread for all of them — here an epoll loop (mio) reading each ready
//! socket until it would block, as an event-driven TCP server does. What the kernel
//! keeps per socket (its buffers) is not in either process's resident memory, so the
//! memory figures of this reference are the processes' own.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mio::{Events, Interest, Poll, Token};

/// The listening socket's backlog (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: i32 = 4096;

/// A listener on loopback for `count` connections.
pub(super) fn listen() -> anyhow::Result<TcpListener> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())?;
    s.listen(BACKLOG)?;
    Ok(s.into())
}

/// Accept `count` connections before `until`.
pub(super) fn accept_all(
    l: &TcpListener,
    count: usize,
    until: Instant,
) -> anyhow::Result<Vec<TcpStream>> {
    l.set_nonblocking(true)?;
    let mut ends = Vec::with_capacity(count);
    while ends.len() < count {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(true)?;
                ends.push(s);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                anyhow::ensure!(
                    Instant::now() < until,
                    "{} of {count} TCP connections accepted in time",
                    ends.len()
                );
                thread::sleep(Duration::from_micros(200));
            }
            Err(e) => return Err(e).context("accept"),
        }
    }
    Ok(ends)
}

/// Connect `count` times to `addr` with `parallel` callers; the sending ends, each
/// non-blocking with `TCP_NODELAY`.
pub(super) fn connect_all(
    addr: SocketAddr,
    count: usize,
    parallel: usize,
) -> anyhow::Result<Vec<TcpStream>> {
    let parallel = parallel.clamp(1, count.max(1));
    let callers: Vec<_> = (0..parallel)
        .map(|k| {
            let n = count / parallel + usize::from(k < count % parallel);
            thread::spawn(move || -> std::io::Result<Vec<TcpStream>> {
                (0..n)
                    .map(|_| {
                        let s = TcpStream::connect(addr)?;
                        s.set_nodelay(true)?;
                        s.set_nonblocking(true)?;
                        Ok(s)
                    })
                    .collect()
            })
        })
        .collect();
    let mut ends = Vec::with_capacity(count);
    for c in callers {
        let e = c
            .join()
            .map_err(|_| anyhow::anyhow!("a caller thread panicked"))?
            .context("TCP connect")?;
        ends.extend(e);
    }
    Ok(ends)
}

/// Offer `msg` to `s` without waiting: the octets the kernel took (a byte stream takes
/// part of a message where natm takes all or none), 0 if its buffer is full.
pub(super) fn offer(mut s: &TcpStream, msg: &[u8]) -> std::io::Result<u64> {
    match s.write(msg) {
        Ok(n) => Ok(n as u64),
        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

/// Receive on every connection until `stop`, adding what arrives to its counter and to
/// `received`: one epoll set, each ready socket read until it would block.
pub(super) fn receive_all(
    ends: &[TcpStream],
    bytes: &[AtomicU64],
    received: &AtomicU64,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let mut poll = Poll::new()?;
    for (i, s) in ends.iter().enumerate() {
        let fd = std::os::fd::AsRawFd::as_raw_fd(s);
        poll.registry()
            .register(&mut mio::unix::SourceFd(&fd), Token(i), Interest::READABLE)?;
    }
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 << 10];
    while !stop.load(Ordering::Relaxed) {
        match poll.poll(&mut events, Some(Duration::from_millis(20))) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for ev in &events {
            let i = ev.token().0;
            let mut s = &ends[i];
            // Edge-triggered: read until the socket would block.
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        bytes[i].fetch_add(n as u64, Ordering::Relaxed);
                        received.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(())
}
