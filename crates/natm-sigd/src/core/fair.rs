//! Fair service of the application connections (issue 31): how much of one
//! connection's input sigd reads and handles per wake-up of its loop, and when it
//! stops reading a connection at all. Sans-IO: the bytes come from any
//! [`std::io::Read`] (the daemon's non-blocking Unix streams, a test's in-memory
//! streams), and what is decoded goes to whoever drives [`serve_round`].
//!
//! Before, the loop read each readable connection until the socket was empty and
//! decoded everything into a vector first: one connection that writes as fast as
//! sigd reads kept the loop on itself (99 % CPU, every other connection's request
//! waiting behind it) and grew the vector without bound (110 MB). Now, as quinn
//! and sshd bound the work of one wake-up:
//!
//! - *A budget per connection and wake-up* ([`Budget`]): at most `messages` requests
//!   handled and `bytes` read, then the next ready connection's turn; one with input
//!   left goes to the back of the round-robin ([`Ready`]) and the loop polls again
//!   without sleeping.
//! - *No decoded queue*: requests are decoded one at a time, as they are handled,
//!   and bytes are read only when the buffer holds no whole request. What one
//!   connection holds of its input is at most one frame plus one read
//!   ([`MAX_HELD_IN`]).
//! - *Back-pressure*: a connection whose answers are not being read (more than
//!   [`OUT_HIGH`] queued towards it) is not read either, until its queue drains;
//!   it is not dropped for its requests' answers.

use std::collections::{HashSet, VecDeque};
use std::io::{self, Read};

use natm_proto::wire::ipc::{Decoder, IpcError, Message, MAX_FRAME};

/// How much of one connection's input one wake-up serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Requests handled.
    pub messages: usize,
    /// Bytes read from the socket.
    pub bytes: usize,
}

/// The daemon's budget: 64 requests or 64 KiB a turn (a burst of calls from one
/// application still goes through in a few turns; a flood shares the loop).
pub const BUDGET: Budget = Budget {
    messages: 64,
    bytes: 64 * 1024,
};

/// Bytes read from a socket at once.
pub const READ_CHUNK: usize = 16 * 1024;

/// Most input one connection holds: one frame not yet whole, plus one read.
pub const MAX_HELD_IN: usize = MAX_FRAME + 4 + READ_CHUNK;

/// Above this many bytes queued towards an application, sigd reads nothing more
/// from it until they are written (back-pressure).
pub const OUT_HIGH: usize = MAX_FRAME;

/// One connection's undecoded input.
#[derive(Debug, Default)]
pub struct Inbox {
    dec: Decoder,
    /// The socket may hold more (no `WouldBlock` since the last readiness event).
    readable: bool,
    /// Its last turn ended on back-pressure.
    blocked: bool,
}

/// What one step of serving a connection gives.
#[derive(Debug)]
pub enum Step {
    /// A request to hand to the core (boxed: the other steps are small).
    Message(Box<Message>),
    /// The turn's budget is spent and input may be left: serve it again next round.
    More,
    /// Nothing more to read until the next readiness event.
    Idle,
    /// Its answers are not being read: not served until they drain.
    Blocked,
    /// The application closed the connection (or it failed).
    Closed,
    /// Not IPC: tell it why and close it.
    Garbage(IpcError),
}

/// One connection's turn: what it has used of the budget.
#[derive(Debug, Clone, Copy)]
pub struct Turn {
    budget: Budget,
    handled: usize,
    read: usize,
}

impl Turn {
    /// A new turn with `budget`.
    pub fn new(budget: Budget) -> Turn {
        Turn {
            budget,
            handled: 0,
            read: 0,
        }
    }
}

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Inbox {
        Inbox::default()
    }

    /// The socket reported readable: there may be input again.
    pub fn wake(&mut self) {
        self.readable = true;
    }

    /// Whether its last turn ended on back-pressure (cleared): once what is queued
    /// towards it is down to [`OUT_HIGH`], it must be made ready again.
    pub fn take_blocked(&mut self) -> bool {
        std::mem::take(&mut self.blocked)
    }

    /// Bytes of input held.
    pub fn held(&self) -> usize {
        self.dec.buffered()
    }

    /// The next step of `turn` for this connection, reading from `r` as needed;
    /// `out_queued` is what waits to be written to the application.
    pub fn step<R: Read>(&mut self, r: &mut R, turn: &mut Turn, out_queued: usize) -> Step {
        loop {
            if out_queued > OUT_HIGH {
                self.blocked = true;
                return Step::Blocked;
            }
            if turn.handled >= turn.budget.messages {
                return Step::More;
            }
            match self.dec.next_message() {
                Ok(Some(m)) => {
                    turn.handled += 1;
                    return Step::Message(Box::new(m));
                }
                Ok(None) => {}
                Err(e) => return Step::Garbage(e),
            }
            if !self.readable {
                return Step::Idle;
            }
            let room = turn.budget.bytes.saturating_sub(turn.read).min(READ_CHUNK);
            if room == 0 {
                return Step::More;
            }
            let mut buf = [0u8; READ_CHUNK];
            match r.read(&mut buf[..room]) {
                Ok(0) => return Step::Closed,
                Ok(n) => {
                    turn.read += n;
                    self.dec.push(&buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable = false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Closed,
            }
        }
    }
}

/// The connections with input to serve, in round-robin order, each once.
#[derive(Debug, Default)]
pub struct Ready {
    order: VecDeque<u64>,
    queued: HashSet<u64>,
}

impl Ready {
    /// Nobody is ready.
    pub fn new() -> Ready {
        Ready::default()
    }

    /// `t` has input (or room again): serve it, after those already waiting.
    pub fn push(&mut self, t: u64) {
        if self.queued.insert(t) {
            self.order.push_back(t);
        }
    }

    /// Forget `t` (closed).
    pub fn remove(&mut self, t: u64) {
        if self.queued.remove(&t) {
            self.order.retain(|x| *x != t);
        }
    }

    /// Whether anyone waits: the loop must not sleep.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// This round's connections, in order; each one served and still ready is
    /// pushed again, behind the others.
    pub fn round(&mut self) -> Vec<u64> {
        self.queued.clear();
        self.order.drain(..).collect()
    }
}

/// What [`serve_round`] drives: the connections, and what to do with what they send.
pub trait Conns {
    /// The byte source of a connection.
    type Stream: Read;
    /// Connection `t`'s inbox, stream and the bytes queued towards it (`None`: gone,
    /// or closing).
    fn conn(&mut self, t: u64) -> Option<(&mut Inbox, &mut Self::Stream, usize)>;
    /// Hand a request of `t` to the core, and carry out what it answers (the bytes
    /// queued towards each application change).
    fn deliver(&mut self, t: u64, m: Message);
    /// `t` closed its end.
    fn closed(&mut self, t: u64);
    /// `t` sent what is not IPC.
    fn garbage(&mut self, t: u64, e: IpcError);
}

/// One round: every ready connection gets one turn of `budget`, in order. Those
/// that still have input go to the back of `ready`; a blocked one is pushed again
/// by the driver once its answers drain.
pub fn serve_round<C: Conns>(ready: &mut Ready, conns: &mut C, budget: Budget) {
    for t in ready.round() {
        let mut turn = Turn::new(budget);
        while let Some((inbox, stream, out)) = conns.conn(t) {
            match inbox.step(stream, &mut turn, out) {
                Step::Message(m) => conns.deliver(t, *m),
                Step::More => {
                    ready.push(t);
                    break;
                }
                Step::Idle | Step::Blocked => break,
                Step::Closed => {
                    conns.closed(t);
                    break;
                }
                Step::Garbage(e) => {
                    conns.garbage(t, e);
                    break;
                }
            }
        }
    }
}
