//! Endpoint tests in virtual time: a quinn-proto style network of endpoints on one
//! clock. `step` moves to the next arrival or timer, `drive` runs until nothing is
//! left to happen; loss is injected by a fate function over the in-flight datagrams
//! or by editing the queue. The tests assert on the events that come out.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::transport::AbortReason;
use crate::wire::tpdu::TpduType;

#[derive(Debug, Clone)]
struct Datagram {
    at: Instant,
    from: SocketAddr,
    to: SocketAddr,
    bytes: Vec<u8>,
}

impl Datagram {
    fn vci(&self) -> u16 {
        u16::from_be_bytes([self.bytes[2], self.bytes[3]])
    }
    fn ty(&self) -> TpduType {
        Header::parse_bytes(&self.bytes[vcframe::HEADER_LEN..])
            .map(|(h, _)| h.ty)
            .expect("the tests send only TPDUs")
    }
}

/// The fate of a datagram about to be delivered: `false` drops it.
type Fate = Box<dyn FnMut(&Datagram) -> bool>;

struct Node {
    addr: SocketAddr,
    ep: Endpoint,
    conns: BTreeMap<ConnectionHandle, Connection>,
    events: Vec<(ConnectionHandle, Event)>,
    received: BTreeMap<ConnectionHandle, Vec<Chunk>>,
    accepted: Vec<ConnectionHandle>,
    responses: usize,
    /// Read every chunk as it becomes readable.
    auto_read: bool,
}

use crate::transport::Chunk;

impl Node {
    fn new(addr: SocketAddr, cfg: EndpointConfig) -> Node {
        Node {
            addr,
            ep: Endpoint::new(cfg),
            conns: BTreeMap::new(),
            events: Vec::new(),
            received: BTreeMap::new(),
            accepted: Vec::new(),
            responses: 0,
            auto_read: true,
        }
    }

    fn conn(&mut self, h: ConnectionHandle) -> &mut Connection {
        self.conns.get_mut(&h).expect("a connection of this node")
    }

    fn events_of(&self, h: ConnectionHandle) -> Vec<Event> {
        self.events
            .iter()
            .filter(|(x, _)| *x == h)
            .map(|(_, e)| *e)
            .collect()
    }

    fn data_of(&self, h: ConnectionHandle) -> Vec<u8> {
        self.received
            .get(&h)
            .map(|v| v.iter().flat_map(|c| c.data.iter().copied()).collect())
            .unwrap_or_default()
    }

    /// Whole messages received on `h`.
    fn messages_of(&self, h: ConnectionHandle) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut cur = Vec::new();
        for c in self.received.get(&h).into_iter().flatten() {
            if c.start {
                cur.clear();
            }
            cur.extend_from_slice(&c.data);
            if c.end {
                out.push(std::mem::take(&mut cur));
            }
        }
        out
    }

    /// Drain every connection's output; returns whether anything happened.
    fn pump(&mut self, now: Instant, wire: &mut Vec<Datagram>) -> bool {
        let mut any = false;
        for (&h, c) in self.conns.iter_mut() {
            loop {
                let mut buf = Vec::new();
                let Some(t) = c.poll_transmit(now, &mut buf) else {
                    break;
                };
                assert_eq!(t.size, buf.len());
                any = true;
                wire.push(Datagram {
                    at: now,
                    from: self.addr,
                    to: t.destination,
                    bytes: buf,
                });
            }
            if self.auto_read {
                while let Ok(Some(ch)) = c.recv() {
                    any = true;
                    self.received.entry(h).or_default().push(ch);
                }
            }
            while let Some(e) = c.poll_event() {
                any = true;
                self.events.push((h, e));
            }
            while let Some(e) = c.poll_endpoint_event() {
                self.ep.handle_event(h, e);
            }
        }
        any
    }

    fn deliver(&mut self, now: Instant, d: Datagram, wire: &mut Vec<Datagram>) {
        match self.ep.handle(now, d.from, Bytes::from(d.bytes)) {
            Some(DatagramEvent::ConnectionEvent(h, ev)) => {
                if let Some(c) = self.conns.get_mut(&h) {
                    c.handle_event(now, ev);
                }
            }
            Some(DatagramEvent::NewConnection(h, c)) => {
                self.accepted.push(h);
                self.conns.insert(h, *c);
            }
            Some(DatagramEvent::Response {
                destination,
                datagram,
            }) => {
                self.responses += 1;
                wire.push(Datagram {
                    at: now,
                    from: self.addr,
                    to: destination,
                    bytes: datagram,
                });
            }
            None => {}
        }
    }
}

struct Net {
    now: Instant,
    nodes: Vec<Node>,
    in_flight: VecDeque<Datagram>,
    delay: Duration,
    fate: Fate,
    /// Datagrams the fate dropped.
    dropped: Vec<Datagram>,
}

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 7000))
}

fn cfg() -> TransportConfig {
    TransportConfig {
        reorder_threshold: 1,
        ..TransportConfig::reliable()
    }
}

fn server_cfg(seed: u64) -> EndpointConfig {
    EndpointConfig {
        seed,
        server: Some(ServerConfig::new(cfg())),
        ..EndpointConfig::default()
    }
}

fn client_cfg(seed: u64) -> EndpointConfig {
    EndpointConfig {
        seed,
        ..EndpointConfig::default()
    }
}

impl Net {
    /// Node 0 a client, node 1 a server.
    fn pair() -> Net {
        Net::new(vec![client_cfg(1), server_cfg(2)])
    }

    fn new(cfgs: Vec<EndpointConfig>) -> Net {
        Net {
            now: Instant::from_nanos(1_000_000_000),
            nodes: cfgs
                .into_iter()
                .enumerate()
                .map(|(i, c)| Node::new(addr(i as u8 + 1), c))
                .collect(),
            in_flight: VecDeque::new(),
            delay: Duration::from_millis(1),
            fate: Box::new(|_| true),
            dropped: Vec::new(),
        }
    }

    fn connect(&mut self, from: usize, to: usize) -> ConnectionHandle {
        let peer = self.nodes[to].addr;
        let now = self.now;
        let (h, c) = self.nodes[from]
            .ep
            .connect(now, peer, ClientConfig::new(cfg()))
            .expect("a valid configuration");
        self.nodes[from].conns.insert(h, c);
        h
    }

    fn pump(&mut self) {
        loop {
            let mut wire = Vec::new();
            let mut any = false;
            for n in &mut self.nodes {
                any |= n.pump(self.now, &mut wire);
            }
            for mut d in wire {
                d.at = self.now + self.delay;
                self.in_flight.push_back(d);
            }
            if !any {
                return;
            }
        }
    }

    fn next_time(&self) -> Option<Instant> {
        let arrivals = self.in_flight.iter().map(|d| d.at);
        let timers = self
            .nodes
            .iter()
            .flat_map(|n| n.conns.values().filter_map(|c| c.poll_timeout()));
        arrivals.chain(timers).min()
    }

    /// Advance to the next arrival or timer; false when nothing is left to happen.
    fn step(&mut self) -> bool {
        self.pump();
        let Some(t) = self.next_time() else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.now;
        let (due, later): (VecDeque<_>, VecDeque<_>) =
            self.in_flight.drain(..).partition(|d| d.at <= now);
        self.in_flight = later;
        for d in due {
            if !(self.fate)(&d) {
                self.dropped.push(d);
                continue;
            }
            let Some(i) = self.nodes.iter().position(|n| n.addr == d.to) else {
                continue;
            };
            let mut wire = Vec::new();
            self.nodes[i].deliver(now, d, &mut wire);
            for mut r in wire {
                r.at = now + self.delay;
                self.in_flight.push_back(r);
            }
        }
        for n in &mut self.nodes {
            for c in n.conns.values_mut() {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
        }
        self.pump();
        true
    }

    /// Run until idle or `limit` of virtual time has passed.
    fn drive_for(&mut self, limit: Duration) {
        let end = self.now + limit;
        while self.now < end && self.step() {}
    }

    fn drive(&mut self) {
        self.drive_for(Duration::from_secs(120));
    }

    /// Seeded independent loss of data-bearing frames with probability `p`, never of
    /// the handshake (tests of handshake loss edit the queue themselves).
    fn lossy(&mut self, p: f64, seed: u64) {
        let mut x = seed | 1;
        self.fate = Box::new(move |d| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            !(matches!(d.ty(), TpduType::Data | TpduType::Ack) && u < p)
        });
    }
}

fn pattern(n: usize, tag: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ tag)
        .collect()
}

/// A pair with one connection up: (net, client handle, server handle).
fn connected() -> (Net, ConnectionHandle, ConnectionHandle) {
    let mut net = Net::pair();
    let c = net.connect(0, 1);
    net.drive_for(Duration::from_millis(50));
    assert_eq!(net.nodes[1].accepted.len(), 1, "the server accepted one");
    let s = net.nodes[1].accepted[0];
    assert_eq!(net.nodes[0].events_of(c), vec![Event::Connected]);
    assert_eq!(net.nodes[1].events_of(s), vec![Event::Connected]);
    (net, c, s)
}

// ---- handshake ---------------------------------------------------------------------

#[test]
fn handshake_brings_both_directions_up_at_both_ends() {
    let (net, c, s) = connected();
    let client = &net.nodes[0].conns[&c];
    let server = &net.nodes[1].conns[&s];
    assert_eq!(client.state(), State::Established);
    assert_eq!(server.state(), State::Established);
    assert_eq!(client.side(), Side::Client);
    assert_eq!(server.side(), Side::Server);
    assert_eq!(client.route().cookie, server.route().cookie);
    assert_eq!(client.route().tx_vci, server.route().rx_vci);
    assert_eq!(client.remote(), addr(2));
    assert_eq!(server.remote(), addr(1));
    assert_eq!(
        net.nodes[1].ep.backlog(),
        0,
        "established leaves the backlog"
    );
}

#[test]
fn handshake_survives_the_loss_of_the_first_request_and_answer() {
    let mut net = Net::pair();
    let mut lost_req = false;
    let mut lost_acc = false;
    net.fate = Box::new(move |d| match d.ty() {
        TpduType::ConnRequest if !lost_req => {
            lost_req = true;
            false
        }
        TpduType::ConnAccept if !lost_acc => {
            lost_acc = true;
            false
        }
        _ => true,
    });
    let c = net.connect(0, 1);
    net.drive_for(Duration::from_secs(5));
    assert_eq!(net.dropped.len(), 2);
    assert_eq!(net.nodes[0].events_of(c), vec![Event::Connected]);
    assert_eq!(
        net.nodes[1].accepted.len(),
        1,
        "a repeated request is not a new call"
    );
}

#[test]
fn handshake_to_an_endpoint_that_does_not_listen_is_refused() {
    let mut net = Net::new(vec![client_cfg(1), client_cfg(2)]);
    let c = net.connect(0, 1);
    net.drive_for(Duration::from_secs(1));
    assert_eq!(
        net.nodes[0].events_of(c),
        vec![Event::ConnectFailed(AbortReason::Refused)]
    );
    assert_eq!(
        net.nodes[0].conns[&c].state(),
        State::Aborted(AbortReason::Refused)
    );
    assert_eq!(net.nodes[1].ep.stats().refused, 1);
    assert!(net.nodes[1].accepted.is_empty());
}

#[test]
fn requests_beyond_the_backlog_are_refused() {
    let mut server = server_cfg(2);
    if let Some(s) = server.server.as_mut() {
        s.backlog = 1;
    }
    let mut net = Net::new(vec![client_cfg(1), server]);
    let a = net.connect(0, 1);
    let b = net.connect(0, 1);
    net.drive_for(Duration::from_secs(1));
    assert_eq!(net.nodes[0].events_of(a), vec![Event::Connected]);
    assert_eq!(
        net.nodes[0].events_of(b),
        vec![Event::ConnectFailed(AbortReason::Refused)]
    );
    assert_eq!(net.nodes[1].ep.stats().refused, 1);
}

#[test]
fn handshake_times_out_when_nothing_answers() {
    let mut net = Net::pair();
    net.fate = Box::new(|d| d.ty() != TpduType::ConnRequest);
    let c = net.connect(0, 1);
    net.drive();
    assert_eq!(
        net.nodes[0].events_of(c),
        vec![Event::ConnectFailed(AbortReason::Timeout)]
    );
    assert!(net.nodes[0].conns[&c].is_drained());
    assert_eq!(
        net.nodes[0].ep.open_connections(),
        0,
        "a failed connection is forgotten"
    );
}

#[test]
fn handshake_times_out_when_the_vc_back_never_comes() {
    let mut net = Net::pair();
    // Every CONN-REQ of the listener's VC back is lost; our own VC comes up.
    net.fate = Box::new(|d| !(d.ty() == TpduType::ConnRequest && d.vci() == VCI_BACKWARD));
    let c = net.connect(0, 1);
    net.drive();
    assert!(net.nodes[0].conns[&c].tx().status().connected);
    assert_eq!(
        net.nodes[0].events_of(c),
        vec![Event::ConnectFailed(AbortReason::Timeout)]
    );
    let s = net.nodes[1].accepted[0];
    assert!(matches!(
        net.nodes[1].events_of(s).as_slice(),
        [Event::ConnectFailed(_)]
    ));
}

#[test]
fn an_answer_with_the_wrong_cookie_is_not_taken_and_the_handshake_times_out() {
    let mut net = Net::pair();
    let c = net.connect(0, 1);
    // A man in the middle rewrites the cookie of every answer on the VC we opened.
    net.pump();
    let mut attempts = 0;
    while net.now < Instant::from_nanos(200_000_000_000) && attempts < 100_000 {
        attempts += 1;
        for d in net.in_flight.iter_mut() {
            if d.to == addr(1) && d.vci() == VCI_FORWARD {
                d.bytes[vcframe::HEADER_LEN + 4] ^= 0xFF;
            }
        }
        if !net.step() {
            break;
        }
    }
    assert_eq!(
        net.nodes[0].events_of(c),
        vec![Event::ConnectFailed(AbortReason::Timeout)]
    );
    assert!(
        net.nodes[0].ep.stats().unknown_vc > 0,
        "counted, not routed"
    );
}

// ---- demultiplexing ------------------------------------------------------------------

#[test]
fn several_connections_between_one_pair_keep_their_data_apart() {
    let mut net = Net::pair();
    let hs: Vec<_> = (0..4).map(|_| net.connect(0, 1)).collect();
    net.drive_for(Duration::from_millis(50));
    assert_eq!(net.nodes[1].accepted.len(), 4);
    for (i, &h) in hs.iter().enumerate() {
        let msg = pattern(10_000 + i * 1000, i as u8);
        let n = net.nodes[0].conn(h).send(&msg, true).expect("room");
        assert_eq!(n, msg.len());
    }
    net.drive_for(Duration::from_secs(1));
    // Server handles in order of acceptance match the client's connects.
    let mut got: Vec<Vec<u8>> = net.nodes[1]
        .accepted
        .clone()
        .into_iter()
        .map(|s| net.nodes[1].data_of(s))
        .collect();
    got.sort_by_key(|v| v.len());
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g, &pattern(10_000 + i * 1000, i as u8), "connection {i}");
    }
}

#[test]
fn connections_from_two_clients_are_told_apart() {
    let mut net = Net::new(vec![client_cfg(1), server_cfg(2), client_cfg(1)]);
    // Same seed: both clients draw the same cookie; the source tells them apart.
    let a = net.connect(0, 1);
    let b = net.connect(2, 1);
    net.drive_for(Duration::from_millis(50));
    assert_eq!(
        net.nodes[0].conns[&a].route().cookie,
        net.nodes[2].conns[&b].route().cookie
    );
    // Same cookie and VCIs from two sources: the second is one the first's route
    // already holds, pinned to its source, so it is dropped, not mixed in.
    assert_eq!(net.nodes[1].accepted.len(), 1);
    assert!(net.nodes[1].ep.stats().bad_source > 0);
    assert_eq!(net.nodes[0].events_of(a), vec![Event::Connected]);
}

#[test]
fn clients_with_their_own_seeds_both_connect() {
    let mut net = Net::new(vec![client_cfg(1), server_cfg(2), client_cfg(3)]);
    let a = net.connect(0, 1);
    let b = net.connect(2, 1);
    net.drive_for(Duration::from_millis(50));
    assert_eq!(net.nodes[1].accepted.len(), 2);
    net.nodes[0].conn(a).send(b"from a", true).expect("room");
    net.nodes[2].conn(b).send(b"from b", true).expect("room");
    net.drive_for(Duration::from_millis(50));
    let mut got: Vec<_> = net.nodes[1]
        .accepted
        .clone()
        .into_iter()
        .map(|s| (net.nodes[1].conns[&s].remote(), net.nodes[1].data_of(s)))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![(addr(1), b"from a".to_vec()), (addr(3), b"from b".to_vec())]
    );
}

#[test]
fn a_frame_for_an_unknown_vc_is_answered_with_abort() {
    let mut net = Net::pair();
    let mut d = vcframe::Repr::data(0, 77).to_bytes().to_vec();
    d.extend_from_slice(
        &Header {
            cookie: 5,
            ..Header::new(TpduType::Data)
        }
        .to_bytes(),
    );
    let now = net.now;
    match net.nodes[1].ep.handle(now, addr(9), Bytes::from(d)) {
        Some(DatagramEvent::Response {
            destination,
            datagram,
        }) => {
            assert_eq!(destination, addr(9));
            let (vc, tpdu) = vcframe::Repr::parse_bytes(&datagram).expect("a VC frame");
            assert_eq!(vc.vci, 77);
            let (h, _) = Header::parse_bytes(tpdu).expect("a TPDU");
            assert_eq!((h.ty, h.cookie), (TpduType::Abort, 5));
        }
        other => panic!("expected an ABORT, got {other:?}"),
    }
    assert_eq!(net.nodes[1].ep.stats().unknown_vc, 1);
}

#[test]
fn an_abort_for_an_unknown_vc_is_not_answered_and_junk_is_counted() {
    let mut ep = Endpoint::new(server_cfg(1));
    let mut d = vcframe::Repr::data(0, 77).to_bytes().to_vec();
    d.extend_from_slice(&Header::new(TpduType::Abort).to_bytes());
    assert!(ep.handle(Instant::ZERO, addr(9), Bytes::from(d)).is_none());
    assert!(ep
        .handle(Instant::ZERO, addr(9), Bytes::from_static(b"\x45\x00junk"))
        .is_none());
    assert_eq!(ep.stats().unknown_vc, 1);
    assert_eq!(ep.stats().not_natm, 1);
}

#[test]
fn a_forged_frame_from_another_source_does_not_reach_the_connection() {
    let (mut net, c, s) = connected();
    // A copy of a real frame of the connection, sent from elsewhere.
    net.nodes[0].conn(c).send(b"real", true).expect("room");
    net.pump();
    let mut forged = net.in_flight.front().expect("a frame in flight").clone();
    forged.from = addr(66);
    net.in_flight.push_back(forged);
    net.drive_for(Duration::from_millis(50));
    assert_eq!(net.nodes[1].ep.stats().bad_source, 1);
    assert_eq!(net.nodes[1].messages_of(s), vec![b"real".to_vec()]);
}

#[test]
fn a_second_caller_that_drew_an_established_calls_cookie_is_refused_at_once() {
    // Nodes 0 and 2 draw the same cookies (one seed): the server could not tell the
    // second call's VCs from the first's, so it refuses it in one round trip, and the
    // first goes on.
    let mut net = Net::new(vec![client_cfg(1), server_cfg(2), client_cfg(1)]);
    let first = net.connect(0, 1);
    net.drive_for(Duration::from_millis(50));
    let second = net.connect(2, 1);
    net.drive_for(Duration::from_millis(10));
    assert_eq!(
        net.nodes[2].events_of(second),
        vec![Event::ConnectFailed(AbortReason::Refused)]
    );
    assert_eq!(net.nodes[1].accepted.len(), 1);
    assert_eq!(net.nodes[1].ep.stats().refused, 1);
    let s = net.nodes[1].accepted[0];
    net.nodes[0]
        .conn(first)
        .send(b"still mine", true)
        .expect("room");
    net.drive_for(Duration::from_millis(50));
    assert_eq!(net.nodes[1].messages_of(s), vec![b"still mine".to_vec()]);
}

#[test]
fn a_wrong_cookie_on_an_established_connection_changes_nothing() {
    let (mut net, c, s) = connected();
    net.nodes[0].conn(c).send(b"one", true).expect("room");
    net.pump();
    let mut forged = net.in_flight.front().expect("a frame").clone();
    forged.bytes[vcframe::HEADER_LEN + 4] ^= 0x5A;
    net.in_flight.push_back(forged);
    net.drive_for(Duration::from_millis(50));
    assert_eq!(net.nodes[1].messages_of(s), vec![b"one".to_vec()]);
    assert_eq!(net.nodes[1].conns[&s].state(), State::Established);
    // The client never hears of the forged frame's ABORT answer: it carries the
    // forged cookie, which routes nowhere at the client either.
    assert_eq!(net.nodes[0].conns[&c].state(), State::Established);
}

// ---- data ------------------------------------------------------------------------------

#[test]
fn data_arrives_byte_exact_both_ways() {
    let (mut net, c, s) = connected();
    let up = pattern(300_000, 1);
    let down = pattern(200_000, 2);
    let (mut u, mut d) = (0, 0);
    while u < up.len() || d < down.len() {
        u += net.nodes[0].conn(c).send(&up[u..], true).unwrap_or(0);
        d += net.nodes[1].conn(s).send(&down[d..], true).unwrap_or(0);
        net.step();
    }
    net.drive_for(Duration::from_secs(2));
    assert_eq!(net.nodes[1].data_of(s), up);
    assert_eq!(net.nodes[0].data_of(c), down);
}

#[test]
fn data_arrives_byte_exact_both_ways_under_loss() {
    let (mut net, c, s) = connected();
    net.lossy(0.05, 42);
    let up = pattern(400_000, 3);
    let down = pattern(150_000, 4);
    let (mut u, mut d) = (0, 0);
    let end = net.now + Duration::from_secs(60);
    while (u < up.len() || d < down.len()) && net.now < end {
        u += net.nodes[0].conn(c).send(&up[u..], true).unwrap_or(0);
        d += net.nodes[1].conn(s).send(&down[d..], true).unwrap_or(0);
        if !net.step() {
            break;
        }
    }
    net.drive_for(Duration::from_secs(30));
    assert!(net.dropped.len() > 10, "loss was injected");
    assert_eq!(net.nodes[1].data_of(s), up);
    assert_eq!(net.nodes[0].data_of(c), down);
    let st = net.nodes[0].conns[&c].stats();
    assert!(st.tx.retransmissions() > 0);
}

#[test]
fn message_boundaries_are_kept() {
    let (mut net, c, s) = connected();
    let msgs: Vec<Vec<u8>> = [0usize, 1, 4095, 4096, 4097, 20_000, 7]
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u8))
        .collect();
    for m in &msgs {
        assert_eq!(net.nodes[0].conn(c).send(m, true), Ok(m.len()));
    }
    net.drive_for(Duration::from_secs(1));
    assert_eq!(net.nodes[1].messages_of(s), msgs);
}

#[test]
fn a_message_written_in_pieces_arrives_as_one() {
    let (mut net, c, s) = connected();
    let m = pattern(10_000, 9);
    for piece in m.chunks(3000) {
        let last = piece.as_ptr_range().end == m.as_ptr_range().end;
        assert_eq!(net.nodes[0].conn(c).send(piece, last), Ok(piece.len()));
    }
    net.drive_for(Duration::from_secs(1));
    assert_eq!(net.nodes[1].messages_of(s), vec![m]);
}

#[test]
fn a_full_send_buffer_becomes_writable_again() {
    let (mut net, c, _s) = connected();
    let big = pattern(16 << 20, 5);
    let n = net.nodes[0].conn(c).send(&big, true).expect("some room");
    assert!(n < big.len(), "the send buffer filled");
    assert!(matches!(
        net.nodes[0].conn(c).send(&big[n..], true),
        Err(crate::transport::SendError::WindowFull)
    ));
    net.drive_for(Duration::from_millis(200));
    assert!(net.nodes[0].events_of(c).contains(&Event::Writable));
}

#[test]
fn received_chunks_are_slices_of_the_arriving_frame_not_copies() {
    let (mut net, c, s) = connected();
    net.nodes[1].auto_read = false;
    net.nodes[0]
        .conn(c)
        .send(&pattern(1000, 1), true)
        .expect("room");
    net.pump();
    let d = net.in_flight.pop_front().expect("the data frame");
    let bytes = Bytes::from(d.bytes);
    let range = bytes.as_ptr_range();
    let now = net.now;
    let node = &mut net.nodes[1];
    match node.ep.handle(now, d.from, bytes.clone()) {
        Some(DatagramEvent::ConnectionEvent(h, ev)) => {
            assert_eq!(h, s);
            node.conn(h).handle_event(now, ev);
        }
        other => panic!("expected a connection event, got {other:?}"),
    }
    let chunk = node.conn(s).recv().expect("not aborted").expect("a chunk");
    assert_eq!(chunk.data.len(), 1000);
    assert!(
        range.contains(&chunk.data.as_ptr()),
        "the chunk points into the frame"
    );
}

// ---- close and abort -----------------------------------------------------------------

#[test]
fn close_from_the_client_after_data_delivers_everything_then_the_end() {
    let (mut net, c, s) = connected();
    let m = pattern(50_000, 7);
    net.nodes[0].conn(c).send(&m, true).expect("room");
    net.nodes[0].conn(c).close();
    net.drive_for(Duration::from_secs(1));
    assert_eq!(net.nodes[1].messages_of(s), vec![m]);
    assert!(net.nodes[1].events_of(s).contains(&Event::PeerClosed));
    assert!(net.nodes[0].events_of(c).contains(&Event::Closed));
    assert_eq!(net.nodes[1].conns[&s].state(), State::PeerClosed);
    // The server closes its side too: both finish in order and are forgotten.
    net.nodes[1].conn(s).send(b"bye", true).expect("room");
    net.nodes[1].conn(s).close();
    net.drive_for(Duration::from_secs(1));
    assert_eq!(net.nodes[0].messages_of(c), vec![b"bye".to_vec()]);
    assert_eq!(net.nodes[0].conns[&c].state(), State::Closed);
    assert_eq!(net.nodes[1].conns[&s].state(), State::Closed);
    assert_eq!(net.nodes[0].ep.open_connections(), 0);
    assert_eq!(net.nodes[1].ep.open_connections(), 0);
}

#[test]
fn close_from_the_server_after_data_under_loss() {
    let (mut net, c, s) = connected();
    net.lossy(0.1, 7);
    let m = pattern(100_000, 8);
    net.nodes[1].conn(s).send(&m, true).expect("room");
    net.nodes[1].conn(s).close();
    net.drive_for(Duration::from_secs(20));
    assert_eq!(net.nodes[0].messages_of(c), vec![m]);
    assert!(net.nodes[0].events_of(c).contains(&Event::PeerClosed));
    assert!(net.nodes[1].events_of(s).contains(&Event::Closed));
}

#[test]
fn abort_from_the_client_is_seen_by_the_server() {
    let (mut net, c, s) = connected();
    net.nodes[0].conn(c).abort();
    net.drive_for(Duration::from_secs(1));
    assert_eq!(
        net.nodes[1].events_of(s),
        vec![Event::Connected, Event::Aborted(AbortReason::Peer)]
    );
    assert_eq!(
        net.nodes[0].conns[&c].state(),
        State::Aborted(AbortReason::Local)
    );
    assert_eq!(net.nodes[1].ep.open_connections(), 0);
    assert_eq!(net.nodes[0].ep.open_connections(), 0);
}

#[test]
fn abort_from_the_server_ends_sending_at_the_client() {
    let (mut net, c, s) = connected();
    net.nodes[1].conn(s).abort();
    net.drive_for(Duration::from_secs(1));
    assert!(net.nodes[0]
        .events_of(c)
        .contains(&Event::Aborted(AbortReason::Peer)));
    assert!(matches!(
        net.nodes[0].conn(c).send(b"x", true),
        Err(crate::transport::SendError::Aborted(_))
    ));
    assert!(net.nodes[0].conn(c).recv().is_err());
}

#[test]
fn a_dead_peer_is_detected_by_the_retransmission_timeouts() {
    let (mut net, c, _s) = connected();
    net.fate = Box::new(|_| false);
    net.nodes[0]
        .conn(c)
        .send(&pattern(20_000, 1), true)
        .expect("room");
    net.drive_for(Duration::from_secs(600));
    assert_eq!(
        net.nodes[0].events_of(c).last(),
        Some(&Event::Aborted(AbortReason::Timeout))
    );
    assert_eq!(net.nodes[0].ep.open_connections(), 0);
}

#[test]
fn a_peer_that_hangs_up_after_sending_is_read_to_the_end_and_sees_no_more_of_ours() {
    let (mut net, c, s) = connected();
    let m = pattern(60_000, 3);
    net.nodes[0].conn(c).send(&m, true).expect("room");
    net.nodes[0].conn(c).hang_up();
    net.drive_for(Duration::from_secs(2));
    // seed 000 §5.3's two simplex VCs, coupled by `coupling`: the server's sending VC
    // aborts (nobody reads it), its receiving VC delivers everything and the close.
    assert_eq!(net.nodes[1].messages_of(s), vec![m]);
    let ev = net.nodes[1].events_of(s);
    assert!(ev.contains(&Event::Aborted(AbortReason::Peer)), "{ev:?}");
    assert!(ev.contains(&Event::PeerClosed), "{ev:?}");
    assert!(matches!(
        net.nodes[1].conn(s).send(b"x", true),
        Err(crate::transport::SendError::Aborted(AbortReason::Peer))
    ));
    // The client's sending VC closed in order, though it reads no more.
    assert!(net.nodes[0].events_of(c).contains(&Event::Closed));
    assert_eq!(net.nodes[0].ep.open_connections(), 0);
    assert_eq!(net.nodes[1].ep.open_connections(), 0);
}

#[test]
fn a_sender_that_times_out_ends_receiving_too() {
    let (mut net, c, _s) = connected();
    net.fate = Box::new(|_| false);
    net.nodes[0]
        .conn(c)
        .send(&pattern(20_000, 1), true)
        .expect("room");
    net.drive_for(Duration::from_secs(600));
    // The peer is gone: a receive on the connection ends with the same reason rather
    // than waiting for data that cannot come.
    assert_eq!(
        net.nodes[0].conn(c).recv(),
        Err(crate::transport::RecvError::Aborted(AbortReason::Timeout))
    );
}

// ---- signalled connections --------------------------------------------------------------

#[test]
fn signalled_connections_start_established_and_carry_data() {
    let mut net = Net::new(vec![client_cfg(1), client_cfg(2)]);
    let now = net.now;
    let p = |peer, tx_vci, rx_vci| SignalledParams {
        peer,
        tx_vci,
        rx_vci,
        cookie: 0xC0FFEE,
        caller: tx_vci < rx_vci,
        tx: cfg(),
        rx: cfg(),
    };
    let (a, ca) = net.nodes[0]
        .ep
        .open_signalled(now, p(addr(2), 40, 41))
        .expect("free route");
    let (b, cb) = net.nodes[1]
        .ep
        .open_signalled(now, p(addr(1), 41, 40))
        .expect("free route");
    assert_eq!(ca.state(), State::Established);
    net.nodes[0].conns.insert(a, ca);
    net.nodes[1].conns.insert(b, cb);
    net.nodes[0].conn(a).send(b"over sigd", true).expect("room");
    net.drive_for(Duration::from_millis(50));
    assert_eq!(net.nodes[1].messages_of(b), vec![b"over sigd".to_vec()]);
    assert_eq!(net.nodes[0].events_of(a), vec![Event::Connected]);
    assert!(matches!(
        net.nodes[0].ep.open_signalled(now, p(addr(2), 40, 41)),
        Err(ConnectError::RouteInUse(40))
    ));
}

#[test]
fn a_connection_with_its_own_socket_checks_vci_and_cookie_itself() {
    let now = Instant::ZERO;
    let p = |tx_vci, rx_vci| SignalledParams {
        peer: addr(2),
        tx_vci,
        rx_vci,
        cookie: 9,
        caller: tx_vci < rx_vci,
        tx: cfg(),
        rx: cfg(),
    };
    let mut a = Connection::signalled(now, p(50, 51)).expect("valid");
    let mut b = Connection::signalled(now, p(51, 50)).expect("valid");
    a.send(b"hello", true).expect("room");
    let mut buf = Vec::new();
    let t = a.poll_transmit(now, &mut buf).expect("the data");
    assert_eq!(t.half, Half::Tx);
    let frame = Bytes::from(buf);
    assert_eq!(b.route().classify(&frame), Ok(Half::Rx));
    let mut wrong = frame.to_vec();
    wrong[vcframe::HEADER_LEN + 4] ^= 1;
    assert_eq!(b.route().classify(&wrong), Err(Refusal::BadCookie));
    assert_eq!(a.route().classify(&wrong[..3]), Err(Refusal::NotNatm));
    assert!(b.handle_frame(now, addr(1), frame));
    let ch = b.recv().expect("fine").expect("a chunk");
    assert_eq!(&ch.data[..], b"hello");
    assert!(ch.start && ch.end);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let run = || {
        let (mut net, c, s) = connected();
        net.lossy(0.05, 11);
        net.nodes[0]
            .conn(c)
            .send(&pattern(200_000, 1), true)
            .expect("room");
        net.drive_for(Duration::from_secs(10));
        (
            net.now,
            net.dropped.len(),
            net.nodes[0].conns[&c].stats(),
            net.nodes[1].data_of(s).len(),
        )
    };
    assert_eq!(run(), run());
}

#[test]
fn a_one_tpdu_message_handed_in_apart_is_taken_out_as_the_same_allocation() {
    let now = Instant::ZERO;
    let p = |tx_vci, rx_vci| SignalledParams {
        peer: addr(2),
        tx_vci,
        rx_vci,
        cookie: 3,
        caller: tx_vci < rx_vci,
        tx: cfg(),
        rx: cfg(),
    };
    let mut a = Connection::signalled(now, p(60, 61)).expect("valid");
    let b = Connection::signalled(now, p(61, 60)).expect("valid");
    a.send(&pattern(2000, 4), true).expect("room");
    let mut buf = Vec::new();
    a.poll_transmit(now, &mut buf).expect("the data");
    let (h, payload) =
        Header::parse_bytes(&buf[vcframe::HEADER_LEN..]).expect("a TPDU from the sender");
    // What the engine does: the payload copied once out of the receive batch, alone.
    let own = Bytes::from(payload.to_vec());
    let at = own.as_ptr();
    let (_, _, _, mut rx) = b.into_parts();
    rx.handle_tpdu(now, h, own);
    let chunk = rx.recv().expect("fine").expect("a chunk");
    assert!(chunk.start && chunk.end);
    let msg = Vec::from(chunk.data);
    assert_eq!(msg, pattern(2000, 4));
    assert_eq!(
        msg.as_ptr(),
        at,
        "the message is the payload's own allocation"
    );
}
