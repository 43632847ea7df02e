//! Kernel TCP on loopback, the reference for a reliable service: `TCP_NODELAY`, each
//! message framed by a 4-byte big-endian length so the receiver knows its boundaries.
//!
//! The sender writes header and body with one `writev` per message. The receiver reads
//! into its own buffer in large reads (many small messages per system call, as any
//! sensible framed-TCP application does) and hands out each message as a slice of it;
//! the body of a large message is read straight to its place, without a second copy.

use std::io::{self, IoSlice, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};

use serde_json::json;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::framing::{check_max_msg, FrameBuf, HEADER};
use super::stack::{is_timeout, Endpoint, Entry, Pair, Params, Stack, StackOptions};

/// Reads when no large message is in progress take at most this much, so a read never
/// runs far into the next large message (which would then have to be moved).
pub(crate) const READ_CHUNK: usize = 256 << 10;
/// A message at least this long is read to its end and no further.
pub(crate) const LARGE: usize = 64 << 10;
/// How many poll intervals a half-written message may stall before `send` gives up.
pub(crate) const MAX_STALLS: u32 = 50;

/// This file's lines of the stack registry (`perf::STACKS`).
pub(crate) const ENTRIES: &[Entry] = &[
    Entry {
        name: "tcp",
        about: "kernel TCP, TCP_NODELAY, messages framed by a 4-byte length",
        make: new,
    },
    Entry {
        name: "tcp-cubic",
        about: "as tcp, with CUBIC congestion control whatever the system default",
        make: cubic,
    },
];

/// Kernel TCP with `TCP_NODELAY` and length-prefixed messages.
struct Tcp {
    name: &'static str,
    opts: StackOptions,
    /// Congestion control to ask for, or `None` for the system default.
    congestion: Option<&'static str>,
}

/// The `tcp` stack: the system's default congestion control.
pub(crate) fn new(name: &'static str, opts: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(Box::new(Tcp {
        name,
        opts: opts.clone(),
        congestion: None,
    }))
}

/// The `tcp-cubic` stack: CUBIC congestion control whatever the system default (on
/// loopback it differs from BBR by a factor of about three, see shared/NETLAB.md).
pub(crate) fn cubic(name: &'static str, opts: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(Box::new(Tcp {
        name,
        opts: opts.clone(),
        congestion: Some("cubic"),
    }))
}

impl Tcp {
    /// A TCP socket with the buffer sizes asked for: set before `listen`/`connect`, so
    /// that the window scale offered in the SYN matches them.
    fn socket(&self) -> io::Result<Socket> {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
        if let Some(size) = self.opts.sockbuf {
            s.set_send_buffer_size(size)?;
            s.set_recv_buffer_size(size)?;
        }
        if let Some(cc) = self.congestion {
            s.set_tcp_congestion(cc.as_bytes()).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "TCP congestion control {cc}: {e} (root, or list it in \
                         net.ipv4.tcp_allowed_congestion_control)"
                    ),
                )
            })?;
        }
        Ok(s)
    }
}

impl Tcp {
    /// A connected pair of TCP sockets on loopback with `TCP_NODELAY`, the poll
    /// interval as read and write timeouts, and the settings they got.
    fn pair(&self) -> io::Result<(Socket, Socket, Params)> {
        let listener = self.socket()?;
        listener.bind(&SockAddr::from(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))))?;
        listener.listen(1)?;
        let addr = listener.local_addr()?;
        let client = self.socket()?;
        client.connect_timeout(&addr, self.opts.poll.max(std::time::Duration::from_secs(1)))?;
        let (server, _) = listener.accept()?;
        drop(listener);
        for s in [&client, &server] {
            s.set_tcp_nodelay(true)?;
            s.set_read_timeout(Some(self.opts.poll))?;
            s.set_write_timeout(Some(self.opts.poll))?;
        }
        let mut params = self
            .opts
            .socket_params(client.send_buffer_size()?, server.recv_buffer_size()?);
        params.insert(
            "congestion".into(),
            json!(String::from_utf8_lossy(&server.tcp_congestion()?)
                .trim_end_matches('\0')
                .to_string()),
        );
        params.insert("nodelay".into(), json!(true));
        params.insert("framing".into(), json!("4-byte length"));
        Ok((client, server, params))
    }
}

/// A connected pair of kernel TCP sockets on loopback with CUBIC, as the `tcp-cubic`
/// stack opens them (the transport under `tcp-tls`).
pub(crate) fn cubic_pair(opts: &StackOptions) -> io::Result<(Socket, Socket, Params)> {
    Tcp {
        name: "tcp-cubic",
        opts: opts.clone(),
        congestion: Some("cubic"),
    }
    .pair()
}

impl Stack for Tcp {
    fn name(&self) -> &str {
        self.name
    }

    fn connect(&self, max_msg: usize) -> io::Result<Pair> {
        check_max_msg(max_msg)?;
        let (client, server, params) = self.pair()?;
        let end = |s: Socket| -> Box<dyn Endpoint> {
            Box::new(TcpEnd {
                stream: s.into(),
                max_msg,
                frames: FrameBuf::new(READ_CHUNK.max(HEADER + max_msg + LARGE), max_msg),
            })
        };
        Ok(Pair {
            client: end(client),
            server: end(server),
            params,
        })
    }
}

/// One end of the connection: the stream and the receive buffer.
struct TcpEnd {
    stream: TcpStream,
    max_msg: usize,
    frames: FrameBuf,
}

impl Endpoint for TcpEnd {
    fn acks_sent(&self) -> Option<u64> {
        super::tally::tcp_pure_acks_sent(&self.stream)
    }

    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        let len = u32::try_from(msg.len())
            .ok()
            .filter(|&l| l as usize <= self.max_msg)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "message longer than asked for")
            })?;
        let header = len.to_be_bytes();
        let mut slices = [IoSlice::new(&header), IoSlice::new(msg)];
        let mut rest = &mut slices[..];
        let mut started = false;
        let mut stalls = 0;
        while !rest.is_empty() {
            match self.stream.write_vectored(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    started = true;
                    stalls = 0;
                    IoSlice::advance_slices(&mut rest, n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) && !started => return Err(e),
                Err(e) if is_timeout(&e) => {
                    stalls += 1;
                    if stalls > MAX_STALLS {
                        // Not a timeout kind: part of the message has gone.
                        return Err(io::Error::other("TCP stalled in the middle of a message"));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Option<&[u8]>> {
        loop {
            let need = match self.frames.next()? {
                Ok(r) => return Ok(Some(self.frames.get(r))),
                Err(need) => need,
            };
            let limit = if need >= HEADER + LARGE {
                need - self.frames.avail()
            } else {
                READ_CHUNK
            };
            match self.stream.read(self.frames.window(need, limit)) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.frames.filled(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages of mixed sizes, small and over [`LARGE`], arrive whole, in order and
    /// intact, with the receive buffer compacted and grown along the way.
    #[test]
    fn framing_delivers_every_message_whole() {
        let stack = new("tcp", &StackOptions::default()).unwrap();
        let max = *crate::perf::framing::TEST_SIZES.iter().max().unwrap();
        let pair = stack.connect(max).unwrap();
        let (mut tx, mut rx) = (pair.client, pair.server);
        crate::perf::framing::check_messages_cross_whole(&mut tx, &mut rx);
        assert!(matches!(
            stack.connect(usize::MAX).map(|_| ()),
            Err(e) if e.kind() == io::ErrorKind::InvalidInput
        ));
    }
}
