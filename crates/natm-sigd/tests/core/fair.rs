//! Issue 31, local users: one application connection that floods sigd with
//! requests does not keep another's request from being answered, and what sigd
//! holds for it stays bounded. The loop's fair service (`natm_sigd::core::fair`:
//! a budget per connection and wake-up, round-robin, back-pressure) drives a real
//! core here, with in-memory streams in place of the Unix sockets: a flooding
//! application is a stream that never runs dry, which the old loop (read until
//! `WouldBlock`) would never have returned from.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};

use crate::support::*;
use natm_proto::wire::ipc::{IpcError, Message, VcCounters};
use natm_sigd::core::fair::{self, Conns, Inbox, Ready, BUDGET, MAX_HELD_IN, OUT_HIGH};
use natm_sigd::core::{AppId, Output};

/// An application's end of its sigd socket, as sigd reads it.
enum Stream {
    /// Writes `frame` over and over, for ever, as fast as sigd reads.
    Flood { frame: Vec<u8>, at: usize },
    /// Bytes written so far; then nothing (`WouldBlock`).
    Script(VecDeque<u8>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Flood { frame, at } => {
                for b in buf.iter_mut() {
                    *b = frame[*at];
                    *at = (*at + 1) % frame.len();
                }
                Ok(buf.len())
            }
            Stream::Script(q) => {
                if q.is_empty() {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                let n = buf.len().min(q.len());
                for (b, x) in buf.iter_mut().zip(q.drain(..n)) {
                    *b = x;
                }
                Ok(n)
            }
        }
    }
}

struct Conn {
    inbox: Inbox,
    stream: Stream,
    /// Bytes sigd queued towards it that it has not read.
    queued: usize,
    /// It reads what sigd sends (else it piles up in `queued`).
    reads: bool,
    /// What it read, in order.
    got: Vec<Message>,
}

/// One sigd host's core and its connections, served as the daemon serves them.
struct Host {
    node: Node,
    now: natm_proto::time::Instant,
    conns: HashMap<u64, Conn>,
    /// Requests handled, by connection, in order.
    handled: Vec<u64>,
    /// The largest input any connection held at any step.
    most_held: usize,
}

impl Host {
    fn new() -> Host {
        let node = Node::new(Side::A, "", 1);
        Host {
            node,
            now: natm_proto::time::Instant::from_nanos(1_000_000),
            conns: HashMap::new(),
            handled: Vec::new(),
            most_held: 0,
        }
    }

    fn connect(&mut self, t: u64, uid: u32, stream: Stream, reads: bool) {
        let creds = natm_sigd::Creds {
            pid: t as i32,
            uid,
            gid: uid,
        };
        self.node
            .core
            .app_connected(self.now, AppId(t), Some(creds));
        let mut inbox = Inbox::new();
        inbox.wake();
        self.conns.insert(
            t,
            Conn {
                inbox,
                stream,
                queued: 0,
                reads,
                got: Vec::new(),
            },
        );
        self.outputs();
    }

    fn outputs(&mut self) {
        while let Some(o) = self.node.core.poll_output() {
            if let Output::ToApp(AppId(t), m) = o {
                if let Some(c) = self.conns.get_mut(&t) {
                    if c.reads {
                        c.got.push(m);
                    } else {
                        c.queued += m.to_bytes().len();
                    }
                }
            }
        }
    }
}

impl Conns for Host {
    type Stream = Stream;

    fn conn(&mut self, t: u64) -> Option<(&mut Inbox, &mut Stream, usize)> {
        let c = self.conns.get_mut(&t)?;
        self.most_held = self.most_held.max(c.inbox.held());
        Some((&mut c.inbox, &mut c.stream, c.queued))
    }

    fn deliver(&mut self, t: u64, m: Message) {
        self.handled.push(t);
        self.node.core.handle_app(self.now, AppId(t), m);
        self.outputs();
    }

    fn closed(&mut self, t: u64) {
        panic!("connection {t} closed");
    }

    fn garbage(&mut self, t: u64, e: IpcError) {
        panic!("connection {t} sent garbage: {e}");
    }
}

const FLOODER: u64 = 100;
const CALLER: u64 = 200;

/// A `Counters` report with `req` 0: a request that asks for no answer (the engine
/// sends one a second per call), here for a call the flooder does not have.
fn no_answer_frame() -> Vec<u8> {
    Message::Counters {
        req: 0,
        call: 0x1234,
        counters: Box::new(VcCounters::default()),
    }
    .to_bytes()
}

fn bind_frame(req: u64) -> Vec<u8> {
    Message::Bind {
        req,
        sap: "echo".into(),
        qos: "ubr".parse().unwrap(),
    }
    .to_bytes()
}

#[test]
fn a_flooding_connection_does_not_keep_another_connections_request_waiting() {
    let mut h = Host::new();
    let mut ready = Ready::new();
    h.connect(
        FLOODER,
        1000,
        Stream::Flood {
            frame: no_answer_frame(),
            at: 0,
        },
        true,
    );
    ready.push(FLOODER);
    // The flood runs alone for a while: every round it gets one turn, and is still
    // ready after it (the stream never runs dry).
    for _ in 0..200 {
        fair::serve_round(&mut ready, &mut h, BUDGET);
        assert!(!ready.is_empty(), "the flooder always has more");
    }
    assert_eq!(h.handled.len(), 200 * BUDGET.messages, "one budget a round");
    // Now another user's application asks to listen.
    h.connect(CALLER, 1001, Stream::Script(bind_frame(7).into()), true);
    ready.push(CALLER);
    let before = h.handled.len();
    fair::serve_round(&mut ready, &mut h, BUDGET);
    // Answered in the very next round, behind at most one budget of the flood.
    let got = &h.conns[&CALLER].got;
    assert!(
        matches!(got.as_slice(), [Message::Ack { req: 7, .. }]),
        "answered in one round: {got:?}"
    );
    let flood_first = h.handled[before..]
        .iter()
        .take_while(|t| **t == FLOODER)
        .count();
    assert!(
        flood_first <= BUDGET.messages,
        "{flood_first} flood requests handled before the bind"
    );
    // And the flood goes on being served, within its budget, with what sigd holds
    // of its input bounded by one frame and one read.
    for _ in 0..300 {
        fair::serve_round(&mut ready, &mut h, BUDGET);
    }
    assert!(h.most_held <= MAX_HELD_IN, "held {} bytes", h.most_held);
    assert!(
        h.most_held < 20 * 1024,
        "small frames: never more than a read's worth held ({} bytes)",
        h.most_held
    );
}

#[test]
fn a_connection_that_does_not_read_its_answers_is_not_read_either() {
    let mut h = Host::new();
    let mut ready = Ready::new();
    // Stat requests, answered with a reply each, by an application that reads none.
    h.connect(
        FLOODER,
        1000,
        Stream::Flood {
            frame: Message::Stat { req: 1 }.to_bytes(),
            at: 0,
        },
        false,
    );
    ready.push(FLOODER);
    let mut rounds = 0;
    while !ready.is_empty() {
        fair::serve_round(&mut ready, &mut h, BUDGET);
        rounds += 1;
        assert!(rounds < 10_000, "never stopped reading");
    }
    let flooder = &h.conns[&FLOODER];
    let held_out = flooder.queued;
    let handled = h.handled.len();
    assert!(held_out > OUT_HIGH, "stopped because its answers piled up");
    assert!(
        held_out <= OUT_HIGH + 64 * 1024,
        "what sigd holds towards it stays within one turn past the mark: {held_out}"
    );
    // Not served any more, while the rest are.
    h.connect(CALLER, 1001, Stream::Script(bind_frame(9).into()), true);
    ready.push(CALLER);
    for _ in 0..10 {
        fair::serve_round(&mut ready, &mut h, BUDGET);
    }
    assert_eq!(h.handled.len(), handled + 1, "only the bind was handled");
    assert!(matches!(
        h.conns[&CALLER].got.as_slice(),
        [Message::Ack { req: 9, .. }]
    ));
    // Once it reads its answers, it is served again (the daemon pushes it back
    // when its queue drains).
    let c = h.conns.get_mut(&FLOODER).expect("still connected");
    c.queued = 0;
    assert!(c.inbox.take_blocked());
    ready.push(FLOODER);
    fair::serve_round(&mut ready, &mut h, BUDGET);
    assert!(h.handled.len() > handled + 1);
}
