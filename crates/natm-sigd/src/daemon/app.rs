//! One application's IPC connection to sigd: a non-blocking Unix stream with bounded
//! buffers both ways and the peer's credentials (SO_PEERCRED) read at accept.

use std::io::{self, Read, Write};

use mio::net::UnixStream;

use natm_proto::wire::ipc::{Decoder, IpcError, Message, MAX_FRAME};

use crate::core::Creds;

/// Most bytes queued towards an application that does not read; past it the
/// connection is dropped (its calls are released) rather than grow sigd's memory.
pub(super) const MAX_OUT: usize = 4 * MAX_FRAME;

/// An application connection.
#[derive(Debug)]
pub(super) struct AppConn {
    pub(super) stream: UnixStream,
    dec: Decoder,
    out: Vec<u8>,
    out_off: usize,
    pub(super) creds: Option<Creds>,
    /// After a protocol error: write what is queued, then close.
    pub(super) closing: bool,
    /// The write side wants WRITABLE interest.
    pub(super) want_write: bool,
}

/// What reading produced.
pub(super) enum ReadOutcome {
    /// Messages decoded (maybe none).
    Messages(Vec<Message>),
    /// Messages decoded before a protocol error.
    Garbage(Vec<Message>, IpcError),
    /// The application closed (or the socket failed) after these messages.
    Closed(Vec<Message>),
}

impl AppConn {
    pub(super) fn new(stream: UnixStream) -> AppConn {
        let creds = rustix::net::sockopt::socket_peercred(&stream)
            .ok()
            .map(|c| Creds {
                pid: c.pid.as_raw_nonzero().get(),
                uid: c.uid.as_raw(),
                gid: c.gid.as_raw(),
            });
        AppConn {
            stream,
            dec: Decoder::new(),
            out: Vec::new(),
            out_off: 0,
            creds,
            closing: false,
            want_write: false,
        }
    }

    /// Read everything available.
    pub(super) fn read(&mut self) -> ReadOutcome {
        let mut msgs = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return ReadOutcome::Closed(msgs),
                Ok(n) => {
                    self.dec.push(&buf[..n]);
                    // Decode as we go so the buffer never holds more than one frame.
                    loop {
                        match self.dec.next_message() {
                            Ok(Some(m)) => msgs.push(m),
                            Ok(None) => break,
                            Err(e) => return ReadOutcome::Garbage(msgs, e),
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return ReadOutcome::Messages(msgs)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return ReadOutcome::Closed(msgs),
            }
        }
    }

    /// Queue a message; false if the application is too far behind (drop it).
    pub(super) fn send(&mut self, m: &Message) -> bool {
        m.encode(&mut self.out);
        self.out.len() - self.out_off <= MAX_OUT
    }

    /// Write what is queued; false if the socket failed.
    pub(super) fn flush(&mut self) -> bool {
        while self.out_off < self.out.len() {
            match self.stream.write(&self.out[self.out_off..]) {
                Ok(0) => return false,
                Ok(n) => self.out_off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.want_write = true;
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        self.out.clear();
        self.out_off = 0;
        self.want_write = false;
        true
    }

    /// Whether everything queued has been written.
    pub(super) fn drained(&self) -> bool {
        self.out_off >= self.out.len()
    }
}
