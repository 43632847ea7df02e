//! QUIC from the quinn crate, the modern alternative to a reliable natm VC: two real
//! quinn endpoints on loopback, TLS 1.3 by rustls with a self-signed certificate made
//! by rcgen at run time, and the messages on **one bidirectional stream**, each framed
//! by a 4-byte big-endian length as on the `tcp` stack (not datagrams: those are
//! unreliable and capped at the path MTU, so they would not compare with a reliable
//! service).
//!
//! quinn is asynchronous; tokio stays inside this module. Each connection gets its own
//! multi-threaded tokio runtime with one worker, which drives both endpoints' sockets
//! and timers; the measuring threads call into it with `block_on`, so every message
//! crosses from the calling thread to the connection's driver task, as in any
//! synchronous program that uses quinn.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use quinn::{ClientConfig, Connection, EndpointConfig, RecvStream, SendStream, ServerConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::runtime::Runtime;

use super::framing::{check_max_msg, FrameBuf};
use super::stack::{Endpoint, Entry, Pair, Params, Stack, StackOptions};

/// Largest single read from the stream.
const READ_CHUNK: usize = 256 << 10;
/// The client's first bytes on the stream, so that the server sees the stream open.
const PREAMBLE: &[u8; 4] = b"natm";
/// How many poll intervals a half-written message may stall before `send` gives up.
const MAX_STALLS: u32 = 50;
/// Longest wait for the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The server name in the certificate and the one the client asks for.
pub(crate) const SERVER_NAME: &str = "localhost";

/// This file's lines of the stack registry (`perf::STACKS`).
pub(crate) const ENTRIES: &[Entry] = &[Entry {
    name: "quic",
    about: "QUIC (quinn, rustls, self-signed), one bidirectional stream, 4-byte length framing",
    make: new,
}];

/// The `quic` stack.
struct Quic {
    name: &'static str,
    opts: StackOptions,
}

/// The `quic` stack: quinn, one bidirectional stream.
pub(crate) fn new(name: &'static str, opts: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(Box::new(Quic {
        name,
        opts: opts.clone(),
    }))
}

/// A self-signed certificate for [`SERVER_NAME`] and its private key, both DER.
#[derive(Clone)]
pub(crate) struct Identity {
    /// The certificate, also the client's only trusted root.
    pub(crate) cert: Vec<u8>,
    /// The PKCS #8 private key.
    pub(crate) key: Vec<u8>,
}

impl Identity {
    /// Make a fresh key pair and certificate.
    pub(crate) fn generate() -> io::Result<Self> {
        let ck = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
            .map_err(|e| io::Error::other(format!("cannot make a certificate: {e}")))?;
        Ok(Self {
            cert: ck.cert.der().to_vec(),
            key: ck.signing_key.serialize_der(),
        })
    }

    fn server_config(&self) -> io::Result<ServerConfig> {
        ServerConfig::with_single_cert(
            vec![CertificateDer::from(self.cert.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone())),
        )
        .map_err(|e| io::Error::other(format!("QUIC server TLS: {e}")))
    }

    fn client_config(&self) -> io::Result<ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.cert.clone()))
            .map_err(|e| io::Error::other(format!("QUIC client TLS: {e}")))?;
        ClientConfig::with_root_certificates(Arc::new(roots))
            .map_err(|e| io::Error::other(format!("QUIC client TLS: {e}")))
    }
}

/// A tokio runtime with one worker thread for a connection's endpoints.
pub(crate) fn runtime() -> io::Result<Arc<Runtime>> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("natm-perf-quic")
        .enable_all()
        .build()
        .map(Arc::new)
}

/// A UDP socket bound to `addr` with the socket buffers asked for.
fn udp_socket(addr: SocketAddr, opts: &StackOptions) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(size) = opts.sockbuf {
        s.set_send_buffer_size(size)?;
        s.set_recv_buffer_size(size)?;
    }
    s.bind(&addr.into())?;
    Ok(s.into())
}

fn endpoint(
    rt: &Runtime,
    sock: UdpSocket,
    server: Option<ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    let _guard = rt.enter();
    quinn::Endpoint::new(
        EndpointConfig::default(),
        server,
        sock,
        Arc::new(quinn::TokioRuntime),
    )
}

fn other(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("QUIC {what}: {e}"))
}

/// A listening QUIC endpoint.
pub(crate) struct Listener {
    rt: Arc<Runtime>,
    endpoint: quinn::Endpoint,
    poll: Duration,
    rcvbuf: usize,
}

impl Listener {
    /// Listen on `addr` with `id`'s certificate.
    pub(crate) fn bind(
        rt: Arc<Runtime>,
        addr: SocketAddr,
        id: &Identity,
        opts: &StackOptions,
    ) -> io::Result<Self> {
        let sock = udp_socket(addr, opts)?;
        let s2 = socket2::SockRef::from(&sock);
        let rcvbuf = s2.recv_buffer_size()?;
        let endpoint = endpoint(&rt, sock, Some(id.server_config()?))?;
        Ok(Self {
            rt,
            endpoint,
            poll: opts.poll,
            rcvbuf,
        })
    }

    /// The address it listens on.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// Wait up to `wait` for a connection and its stream.
    pub(crate) fn accept(&self, max_msg: usize, wait: Duration) -> io::Result<QuicEnd> {
        let ep = self.endpoint.clone();
        let (conn, send, mut recv) = self.rt.block_on(async move {
            tokio::time::timeout(wait, async {
                let incoming = ep
                    .accept()
                    .await
                    .ok_or_else(|| other("accept", "endpoint closed"))?;
                let conn = incoming.await.map_err(|e| other("handshake", e))?;
                let (send, recv) = conn.accept_bi().await.map_err(|e| other("stream", e))?;
                Ok::<_, io::Error>((conn, send, recv))
            })
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no QUIC connection came"))?
        })?;
        let mut pre = [0u8; PREAMBLE.len()];
        self.rt
            .block_on(async {
                tokio::time::timeout(HANDSHAKE_TIMEOUT, recv.read_exact(&mut pre)).await
            })
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no QUIC preamble"))?
            .map_err(|e| other("preamble", e))?;
        if &pre != PREAMBLE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "QUIC peer sent no natm preamble",
            ));
        }
        Ok(QuicEnd::new(
            self.rt.clone(),
            Some(self.endpoint.clone()),
            conn,
            send,
            recv,
            max_msg,
            self.poll,
        ))
    }
}

/// Connect to `addr`, trusting only `id`'s certificate, and open the stream.
pub(crate) fn dial(
    rt: Arc<Runtime>,
    addr: SocketAddr,
    id: &Identity,
    opts: &StackOptions,
    max_msg: usize,
) -> io::Result<(QuicEnd, usize, usize)> {
    let local: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = udp_socket(local, opts)?;
    let s2 = socket2::SockRef::from(&sock);
    let (sndbuf, rcvbuf) = (s2.send_buffer_size()?, s2.recv_buffer_size()?);
    let mut ep = endpoint(&rt, sock, None)?;
    ep.set_default_client_config(id.client_config()?);
    let ep2 = ep.clone();
    let (conn, send, recv) = rt.block_on(async move {
        tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
            let conn = ep2
                .connect(addr, SERVER_NAME)
                .map_err(|e| other("connect", e))?
                .await
                .map_err(|e| other("handshake", e))?;
            let (mut send, recv) = conn.open_bi().await.map_err(|e| other("stream", e))?;
            send.write_all(PREAMBLE)
                .await
                .map_err(|e| other("preamble", e))?;
            Ok::<_, io::Error>((conn, send, recv))
        })
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "QUIC handshake timed out"))?
    })?;
    Ok((
        QuicEnd::new(rt, Some(ep), conn, send, recv, max_msg, opts.poll),
        sndbuf,
        rcvbuf,
    ))
}

impl Stack for Quic {
    fn name(&self) -> &str {
        self.name
    }

    fn connect(&self, max_msg: usize) -> io::Result<Pair> {
        check_max_msg(max_msg)?;
        let rt = runtime()?;
        let id = Identity::generate()?;
        let listener =
            Listener::bind(rt.clone(), (Ipv4Addr::LOCALHOST, 0).into(), &id, &self.opts)?;
        let addr = listener.local_addr()?;
        let ((client, sndbuf, _), server) = std::thread::scope(|s| -> io::Result<_> {
            let t = s.spawn(|| dial(rt.clone(), addr, &id, &self.opts, max_msg));
            let server = listener.accept(max_msg, HANDSHAKE_TIMEOUT);
            let client = t
                .join()
                .map_err(|_| io::Error::other("QUIC connect thread panicked"))??;
            Ok((client, server?))
        })?;
        let mut params = self.opts.socket_params(sndbuf, listener.rcvbuf);
        params_quic(&mut params);
        Ok(Pair {
            client: Box::new(client),
            server: Box::new(server),
            params,
        })
    }
}

/// What the report says about a QUIC connection.
pub(crate) fn params_quic(p: &mut Params) {
    p.insert(
        "transport".into(),
        json!("quinn 0.11, one bidirectional stream"),
    );
    p.insert("tls".into(), json!("rustls (aws-lc-rs), self-signed"));
    p.insert("congestion".into(), json!("cubic (quinn default)"));
    p.insert("framing".into(), json!("4-byte length"));
}

/// One end of a QUIC connection and its receive buffer.
pub(crate) struct QuicEnd {
    rt: Arc<Runtime>,
    // Kept so the endpoint lives as long as the connection.
    _endpoint: Option<quinn::Endpoint>,
    conn: Connection,
    send: SendStream,
    recv: RecvStream,
    max_msg: usize,
    poll: Duration,
    frames: FrameBuf,
}

impl QuicEnd {
    fn new(
        rt: Arc<Runtime>,
        endpoint: Option<quinn::Endpoint>,
        conn: Connection,
        send: SendStream,
        recv: RecvStream,
        max_msg: usize,
        poll: Duration,
    ) -> Self {
        Self {
            rt,
            _endpoint: endpoint,
            conn,
            send,
            recv,
            max_msg,
            poll,
            frames: FrameBuf::new(READ_CHUNK, max_msg),
        }
    }
}

impl Drop for QuicEnd {
    fn drop(&mut self) {
        self.conn.close(0u32.into(), b"done");
    }
}

impl Endpoint for QuicEnd {
    /// ACK frames sent (a receiver's are mostly in packets of their own).
    fn acks_sent(&self) -> Option<u64> {
        Some(self.conn.stats().frame_tx.acks)
    }

    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        let len = u32::try_from(msg.len())
            .ok()
            .filter(|&l| l as usize <= self.max_msg)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "message longer than asked for")
            })?;
        let header = len.to_be_bytes();
        let (send, poll) = (&mut self.send, self.poll);
        self.rt.block_on(async move {
            let parts: [&[u8]; 2] = [&header, msg];
            let mut started = false;
            for part in parts {
                let mut off = 0;
                let mut stalls = 0;
                while off < part.len() {
                    match tokio::time::timeout(poll, send.write(&part[off..])).await {
                        Ok(Ok(n)) => {
                            off += n;
                            started = true;
                            stalls = 0;
                        }
                        Ok(Err(e)) => return Err(other("write", e)),
                        Err(_) if !started => {
                            return Err(io::Error::new(io::ErrorKind::TimedOut, "QUIC busy"))
                        }
                        Err(_) => {
                            stalls += 1;
                            if stalls > MAX_STALLS {
                                return Err(io::Error::other(
                                    "QUIC stalled in the middle of a message",
                                ));
                            }
                        }
                    }
                }
            }
            Ok(())
        })
    }

    fn recv(&mut self) -> io::Result<Option<&[u8]>> {
        loop {
            let need = match self.frames.next()? {
                Ok(r) => return Ok(Some(self.frames.get(r))),
                Err(need) => need,
            };
            let room = need.max(READ_CHUNK.min(self.frames.capacity()));
            let (recv, poll) = (&mut self.recv, self.poll);
            let window = self.frames.window(room, READ_CHUNK);
            let got = self
                .rt
                .block_on(async move { tokio::time::timeout(poll, recv.read(window)).await });
            match got {
                Err(_) => return Ok(None),
                Ok(Ok(Some(n))) => self.frames.filled(n),
                Ok(Ok(None)) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(Err(e)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        format!("QUIC read: {e}"),
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Messages of mixed sizes cross a real quinn connection whole and in order.
    #[test]
    fn framing_delivers_every_message_whole() {
        let stack = new("quic", &StackOptions::default()).unwrap();
        let sizes = [1usize, 64, 70_000, 3, 300_000, 0, 4];
        let pair = stack.connect(300_000).unwrap();
        let (mut tx, mut rx) = (pair.client, pair.server);
        let msgs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 7 + j) as u8).collect())
            .collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                for m in &msgs {
                    loop {
                        match tx.send(m) {
                            Ok(()) => break,
                            Err(e) if super::super::stack::is_timeout(&e) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            });
            let deadline = Instant::now() + Duration::from_secs(10);
            for m in &msgs {
                let got = loop {
                    assert!(Instant::now() < deadline, "timed out");
                    if let Some(g) = rx.recv().unwrap() {
                        break g.to_vec();
                    }
                };
                assert!(got == *m, "a {} B message differs", m.len());
            }
        });
        assert_eq!(pair.params["framing"], "4-byte length");
    }
}
