//! TLS 1.3 over kernel TCP with CUBIC on loopback (issue 30): the strongest encrypted
//! stream this machine has (no kernel TLS or WireGuard module here), the reference
//! for natm's sealed calls. rustls with AWS-LC, AES-256-GCM only (what natm's seal
//! uses), a self-signed certificate made at run time; messages framed by a 4-byte
//! length as on the `tcp` stack.
//!
//! The I/O is rustls's own buffers driven by hand: a message's header and body are
//! written into the connection's plaintext buffer together and leave in one
//! `write_tls` (a vectored write of every record), and a receive reads what the socket
//! holds, decrypts it and hands out whole messages from a frame buffer.

use std::io::{self, Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::json;

use super::framing::{check_max_msg, FrameBuf, HEADER};
use super::quic::{Identity, SERVER_NAME};
use super::stack::{is_timeout, Endpoint, Entry, Pair, Stack, StackOptions};
use super::tcp::{cubic_pair, LARGE, MAX_STALLS, READ_CHUNK};

/// This file's line of the stack registry (`perf::STACKS`).
pub(crate) const ENTRIES: &[Entry] = &[Entry {
    name: "tcp-tls",
    about: "TLS 1.3 (rustls, AES-256-GCM) over kernel TCP with CUBIC, messages framed by a 4-byte length",
    make: new,
}];

/// The `tcp-tls` stack.
struct TcpTls {
    name: &'static str,
    opts: StackOptions,
    identity: Identity,
}

/// Make the stack (one certificate for all its connections).
pub(crate) fn new(name: &'static str, opts: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(Box::new(TcpTls {
        name,
        opts: opts.clone(),
        identity: Identity::generate()?,
    }))
}

/// AWS-LC's provider (rustls's default, and its AES-GCM the faster on this CPU: docs/
/// decisions/0030-aws-lc-aead.md) with AES-256-GCM as its only suite, TLS 1.3 only.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::aws_lc_rs as lc;
    let mut p = lc::default_provider();
    p.cipher_suites = vec![lc::cipher_suite::TLS13_AES_256_GCM_SHA384];
    Arc::new(p)
}

fn tls_err(e: rustls::Error) -> io::Error {
    io::Error::other(format!("TLS: {e}"))
}

impl TcpTls {
    fn configs(&self) -> io::Result<(rustls::ServerConfig, rustls::ClientConfig)> {
        let versions = [&rustls::version::TLS13];
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .map_err(tls_err)?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(self.identity.cert.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.identity.key.clone())),
            )
            .map_err(tls_err)?;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.identity.cert.clone()))
            .map_err(tls_err)?;
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .map_err(tls_err)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok((server, client))
    }
}

/// Run a connection's handshake to its end on a blocking socket.
fn handshake(conn: &mut rustls::Connection, sock: &mut TcpStream) -> io::Result<()> {
    while conn.is_handshaking() {
        conn.complete_io(sock)?;
    }
    // The client's last flight (Finished) may still be queued.
    while conn.wants_write() {
        conn.write_tls(sock)?;
    }
    Ok(())
}

impl Stack for TcpTls {
    fn name(&self) -> &str {
        self.name
    }

    fn connect(&self, max_msg: usize) -> io::Result<Pair> {
        check_max_msg(max_msg)?;
        let (client, server, mut params) = cubic_pair(&self.opts)?;
        let (server_cfg, client_cfg) = self.configs()?;
        let name = ServerName::try_from(SERVER_NAME).map_err(io::Error::other)?;
        let mut c = rustls::Connection::from(
            rustls::ClientConnection::new(Arc::new(client_cfg), name).map_err(tls_err)?,
        );
        let mut s = rustls::Connection::from(
            rustls::ServerConnection::new(Arc::new(server_cfg)).map_err(tls_err)?,
        );
        let (mut cs, mut ss): (TcpStream, TcpStream) = (client.into(), server.into());
        // The handshake blocks (a poll-interval timeout would cut it), then the
        // sockets go back to the poll interval.
        for sock in [&cs, &ss] {
            sock.set_read_timeout(None)?;
            sock.set_write_timeout(None)?;
        }
        std::thread::scope(|scope| {
            let server = scope.spawn(|| handshake(&mut s, &mut ss));
            let client = handshake(&mut c, &mut cs);
            let server = server
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("TLS server handshake panicked")));
            client.and(server)
        })?;
        for sock in [&cs, &ss] {
            sock.set_read_timeout(Some(self.opts.poll))?;
            sock.set_write_timeout(Some(self.opts.poll))?;
        }
        let suite = c
            .negotiated_cipher_suite()
            .map_or("none".to_owned(), |s| format!("{:?}", s.suite()));
        params.insert("tls".into(), json!("1.3 (rustls, aws-lc-rs)"));
        params.insert("cipher_suite".into(), json!(suite));
        let end = |conn: rustls::Connection, sock: TcpStream| -> Box<dyn Endpoint> {
            let mut conn = conn;
            // A whole message (up to `max_msg`) is taken into the plaintext buffer
            // at once and written in one go.
            conn.set_buffer_limit(None);
            Box::new(TlsEnd {
                conn,
                sock,
                max_msg,
                frames: FrameBuf::new(READ_CHUNK.max(HEADER + max_msg + LARGE), max_msg),
            })
        };
        Ok(Pair {
            client: end(c, cs),
            server: end(s, ss),
            params,
        })
    }
}

/// One end: the TLS connection, its socket and the receive buffer of plaintext.
struct TlsEnd {
    conn: rustls::Connection,
    sock: TcpStream,
    max_msg: usize,
    frames: FrameBuf,
}

impl TlsEnd {
    /// Write every queued record; a timeout before any byte of this flush left is
    /// `Err` (the message stays queued and the next flush sends it).
    fn flush_tls(&mut self) -> io::Result<()> {
        let mut stalls = 0;
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => stalls = 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => {
                    stalls += 1;
                    if stalls > MAX_STALLS {
                        return Err(io::Error::other("TLS over TCP stalled"));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Endpoint for TlsEnd {
    fn acks_sent(&self) -> Option<u64> {
        super::tally::tcp_pure_acks_sent(&self.sock)
    }

    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        let len = u32::try_from(msg.len())
            .ok()
            .filter(|&l| l as usize <= self.max_msg)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "message longer than asked for")
            })?;
        // A previous message still queued (the peer was slow): send it first, and
        // give control back if it still cannot leave.
        if self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Err(e) if is_timeout(&e) => return Err(e),
                r => {
                    r?;
                }
            }
        }
        // With no buffer limit the writer takes everything: the records are sealed
        // here (rustls copies the plaintext once, as TLS must).
        let mut w = self.conn.writer();
        w.write_all(&len.to_be_bytes())?;
        w.write_all(msg)?;
        self.flush_tls()
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
            // Plaintext already decrypted first, then the socket.
            match self.conn.reader().read(self.frames.window(need, limit)) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.frames.filled(n);
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match self.conn.read_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {
                    self.conn
                        .process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
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
    use crate::perf::framing::{check_messages_cross_whole, TEST_SIZES};

    /// Messages of mixed sizes arrive whole, in order and intact through TLS, and the
    /// connection really negotiated TLS 1.3 with AES-256-GCM.
    #[test]
    fn messages_cross_tls_whole() {
        let stack = new("tcp-tls", &StackOptions::default()).unwrap();
        let pair = stack.connect(*TEST_SIZES.iter().max().unwrap()).unwrap();
        assert_eq!(pair.params["cipher_suite"], "TLS13_AES_256_GCM_SHA384");
        let (mut tx, mut rx) = (pair.client, pair.server);
        check_messages_cross_whole(&mut tx, &mut rx);
    }
}
