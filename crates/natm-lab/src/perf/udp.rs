//! Raw UDP on loopback, the reference for an unreliable datagram service: two
//! sockets bound to `127.0.0.1:0` and connected to each other.
//!
//! Blocking (`udp`): each `recv` sleeps in the kernel until a datagram arrives, so a
//! round trip pays two wake-ups. Busy (`udp-busy`): non-blocking sockets polled in a
//! loop, so a round trip pays only the system calls; it shows the floor and burns a
//! core per end.
//!
//! A message longer than [`MAX_DATAGRAM`] is sent as several datagrams and not
//! reassembled: the receiver sees (and throughput counts) whatever datagrams arrive,
//! as a naive application on raw UDP would. Latency refuses such sizes.

use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

use serde_json::json;
use socket2::SockRef;

use super::stack::{is_timeout, Endpoint, Entry, Pair, Stack, StackOptions};

/// The largest UDP payload over IPv4: 65,535 − 20 (IP header) − 8 (UDP header).
pub(crate) const MAX_DATAGRAM: usize = 65_507;

/// This file's lines of the stack registry (`perf::STACKS`).
pub(crate) const ENTRIES: &[Entry] = &[
    Entry {
        name: "udp",
        about: "raw UDP, blocking sockets; datagrams of at most 65,507 B",
        make: blocking,
    },
    Entry {
        name: "udp-busy",
        about: "raw UDP, non-blocking sockets polled in a busy loop (the latency floor)",
        make: busy,
    },
];

/// How many times a datagram that the kernel would not take is retried before `send`
/// gives up (each try waits up to the poll interval).
const MAX_STALLS: u32 = 50;

/// A busy-polling end yields the CPU after this many empty polls (each a `recv`
/// system call, well under a microsecond), so two ends sharing a core still alternate
/// within microseconds instead of a scheduler time slice.
const YIELD_EVERY: u32 = 32;

/// Raw UDP, blocking or busy-polled.
struct Udp {
    name: &'static str,
    busy: bool,
    opts: StackOptions,
}

/// The `udp` stack: blocking sockets.
pub(crate) fn blocking(name: &'static str, opts: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(Box::new(Udp {
        name,
        busy: false,
        opts: opts.clone(),
    }))
}

/// The `udp-busy` stack: non-blocking sockets polled in a busy loop.
pub(crate) fn busy(name: &'static str, opts: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(Box::new(Udp {
        name,
        busy: true,
        opts: opts.clone(),
    }))
}

impl Stack for Udp {
    fn name(&self) -> &str {
        self.name
    }

    fn max_message(&self) -> Option<usize> {
        Some(MAX_DATAGRAM)
    }

    fn connect(&self, _max_msg: usize) -> io::Result<Pair> {
        let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        a.connect(b.local_addr()?)?;
        b.connect(a.local_addr()?)?;
        for s in [&a, &b] {
            let r = SockRef::from(s);
            if let Some(size) = self.opts.sockbuf {
                r.set_send_buffer_size(size)?;
                r.set_recv_buffer_size(size)?;
            }
            if self.busy {
                s.set_nonblocking(true)?;
            } else {
                s.set_read_timeout(Some(self.opts.poll))?;
                s.set_write_timeout(Some(self.opts.poll))?;
            }
        }
        let r = SockRef::from(&a);
        let mut params = self
            .opts
            .socket_params(r.send_buffer_size()?, r.recv_buffer_size()?);
        params.insert("max_datagram".into(), json!(MAX_DATAGRAM));
        params.insert(
            "wait".into(),
            json!(if self.busy { "busy-poll" } else { "blocking" }),
        );
        let end = |sock| -> Box<dyn Endpoint> {
            Box::new(UdpEnd {
                sock,
                busy: self.busy,
                poll: self.opts.poll,
                buf: vec![0; MAX_DATAGRAM + 1],
                gso: 0,
                burst: Vec::new(),
            })
        };
        Ok(Pair {
            client: end(a),
            server: end(b),
            params,
        })
    }
}

/// One connected UDP socket and its receive buffer.
struct UdpEnd {
    sock: UdpSocket,
    busy: bool,
    poll: Duration,
    buf: Vec<u8>,
    /// The socket's `UDP_SEGMENT` size while a batch set it (0: off), and the burst
    /// sent with it: copies of one message back to back.
    gso: usize,
    burst: Vec<u8>,
}

/// Most datagrams one GSO send carries (the kernel's `UDP_MAX_SEGMENTS`).
const GSO_MAX_SEGMENTS: usize = 64;

impl UdpEnd {
    /// Set the socket's GSO segment size (0: off); `false` if the kernel refused.
    fn set_gso(&mut self, seg: usize) -> bool {
        if self.gso == seg {
            return true;
        }
        let ok = nix::sys::socket::setsockopt(
            &self.sock,
            nix::sys::socket::sockopt::UdpGsoSegment,
            &(seg as i32),
        )
        .is_ok();
        if ok {
            self.gso = seg;
        }
        ok
    }
}

impl UdpEnd {
    /// Send one datagram: retried while the kernel will not take it, up to
    /// [`MAX_STALLS`] poll intervals once part of the message has gone.
    fn send_datagram(&mut self, d: &[u8], first: bool) -> io::Result<()> {
        let mut stalls = 0;
        let mut since = Instant::now();
        loop {
            match self.sock.send(d) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => {
                    if self.busy {
                        if since.elapsed() < self.poll {
                            std::hint::spin_loop();
                            continue;
                        }
                        since = Instant::now();
                    }
                    if first {
                        return Err(e);
                    }
                    stalls += 1;
                    if stalls > MAX_STALLS {
                        // Not a timeout kind: part of the message has gone.
                        return Err(io::Error::other(
                            "UDP socket would not take the rest of a message",
                        ));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Endpoint for UdpEnd {
    /// The strongest raw-UDP batch: `count` equal datagrams per GSO `send`
    /// (`UDP_SEGMENT`), up to 64 or 64 KiB at a time; one by one where GSO cannot
    /// carry them (one datagram, a message over a datagram, a kernel without GSO).
    fn send_batch(&mut self, msg: &[u8], count: usize) -> io::Result<usize> {
        let per = GSO_MAX_SEGMENTS.min(MAX_DATAGRAM / msg.len().max(1));
        if count < 2 || msg.is_empty() || per < 2 || !self.set_gso(msg.len()) {
            return one_by_one(self, msg, count);
        }
        let mut sent = 0;
        while sent < count {
            let k = per.min(count - sent);
            self.burst.clear();
            for _ in 0..k {
                self.burst.extend_from_slice(msg);
            }
            match self.sock.send(&self.burst) {
                Ok(_) => sent += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if sent == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(sent)
    }

    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        // A datagram longer than the GSO size a batch left set would be cut up.
        if self.gso != 0 && msg.len() > self.gso {
            self.set_gso(0);
        }
        if msg.is_empty() {
            return self.send_datagram(msg, true);
        }
        for (i, d) in msg.chunks(MAX_DATAGRAM).enumerate() {
            self.send_datagram(d, i == 0)?;
        }
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Option<&[u8]>> {
        let start = Instant::now();
        let mut spins: u32 = 0;
        loop {
            match self.sock.recv(&mut self.buf) {
                Ok(n) => return Ok(Some(&self.buf[..n])),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => {
                    if !self.busy {
                        return Ok(None);
                    }
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(YIELD_EVERY) {
                        if start.elapsed() >= self.poll {
                            return Ok(None);
                        }
                        // If the peer shares this core (a loaded machine), let it run
                        // instead of spinning out a whole time slice.
                        std::thread::yield_now();
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// [`Endpoint::send_batch`]'s default: one `send` per message.
fn one_by_one(end: &mut UdpEnd, msg: &[u8], count: usize) -> io::Result<usize> {
    for k in 0..count {
        match end.send(msg) {
            Ok(()) => {}
            Err(e) if k == 0 => return Err(e),
            Err(_) => return Ok(k),
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message over [`MAX_DATAGRAM`] goes as full datagrams and a remainder.
    #[test]
    fn long_messages_go_as_several_datagrams() {
        for make in [blocking, busy] {
            let stack = make("udp", &StackOptions::default()).unwrap();
            let pair = stack.connect(100_000).unwrap();
            let (mut tx, mut rx) = (pair.client, pair.server);
            tx.send(&[7; 100_000]).unwrap();
            let mut sizes = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(5);
            while sizes.iter().sum::<usize>() < 100_000 && Instant::now() < deadline {
                if let Some(d) = rx.recv().unwrap() {
                    assert!(d.iter().all(|&b| b == 7));
                    sizes.push(d.len());
                }
            }
            assert_eq!(sizes, [MAX_DATAGRAM, 100_000 - MAX_DATAGRAM]);
        }
    }
}
