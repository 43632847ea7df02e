//! One application's IPC connection to sigd: a non-blocking Unix stream with bounded
//! buffers both ways and the peer's credentials (SO_PEERCRED) read at accept.

use std::io::{self, Write};

use mio::net::UnixStream;

use natm_proto::wire::ipc::{Message, MAX_FRAME};

use crate::core::fair::Inbox;
use crate::core::Creds;

/// Most bytes queued towards an application that does not read; past it the
/// connection is dropped (its calls are released) rather than grow sigd's memory.
pub(super) const MAX_OUT: usize = 4 * MAX_FRAME;

/// An application connection.
#[derive(Debug)]
pub(super) struct AppConn {
    pub(super) stream: UnixStream,
    /// Input not yet handled (read a budget at a time: `core::fair`).
    pub(super) inbox: Inbox,
    out: Vec<u8>,
    out_off: usize,
    pub(super) creds: Option<Creds>,
    /// After a protocol error: write what is queued, then close.
    pub(super) closing: bool,
    /// The write side wants WRITABLE interest.
    pub(super) want_write: bool,
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
            inbox: Inbox::new(),
            out: Vec::new(),
            out_off: 0,
            creds,
            closing: false,
            want_write: false,
        }
    }

    /// Queue a message; false if the application is too far behind (drop it).
    pub(super) fn send(&mut self, m: &Message) -> bool {
        m.encode(&mut self.out);
        self.queued() <= MAX_OUT
    }

    /// Bytes queued towards the application and not yet written.
    pub(super) fn queued(&self) -> usize {
        self.out.len() - self.out_off
    }

    /// Write what is queued; false if the socket failed.
    pub(super) fn flush(&mut self) -> bool {
        while self.out_off < self.out.len() {
            match self.stream.write(&self.out[self.out_off..]) {
                Ok(0) => return false,
                Ok(n) => self.out_off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.want_write = true;
                    // What was written is not kept: a reader that takes a little at
                    // a time must not grow the buffer by what it already took.
                    if self.out_off >= self.out.len() / 2 {
                        self.out.drain(..self.out_off);
                        self.out_off = 0;
                    }
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
