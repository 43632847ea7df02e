//! One duplex connection: two simplex VCs managed together (seed 000 §5.3).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use super::coupling::{self, Phase};
use super::half::{Half, RxHalf, Simplex, TxHalf};
use super::{ConnectionEvent, EndpointEvent, Route, Transmit};
use crate::time::Instant;
use crate::transport::{
    AbortReason, Chunk, Event as PsbEvent, PsbStats, RecvError, SendError, TransmitKind,
};
use crate::wire::vcframe;

/// Where a duplex connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// At least one VC's handshake has not finished.
    Connecting,
    /// Both VCs are up; data may flow both ways.
    Established,
    /// The peer closed its direction (everything it sent is delivered); ours is open.
    PeerClosed,
    /// Both directions finished in order.
    Closed,
    /// Ended abnormally (connection refused, handshake timed out, peer dead, abort).
    Aborted(AbortReason),
}

/// Something the application should know (quinn-proto's `Event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Both VCs are up.
    Connected,
    /// The connection never came up: `Timeout` (no answer) or `Refused` (the peer
    /// turned it down).
    ConnectFailed(AbortReason),
    /// Data became readable.
    Readable,
    /// The send buffer has room again after a full one.
    Writable,
    /// The peer closed: everything it sent has been delivered (end of stream).
    PeerClosed,
    /// Our close completed: the peer has everything we sent.
    Closed,
    /// The connection was aborted after it came up.
    Aborted(AbortReason),
    /// A QoS change took effect: on the sending VC once the peer accepted it, on the
    /// receiving VC when the peer announced it (seed 003 "QoS changed").
    QosChanged {
        /// Which VC: [`Half::Tx`] for this end's sending rate, [`Half::Rx`] the peer's.
        half: Half,
        /// The rate now in force, payload bit/s.
        rate: u64,
    },
    /// A QoS change was refused (or never answered); the rate stays.
    QosRefused {
        /// Which VC.
        half: Half,
        /// The rate asked for, payload bit/s.
        rate: u64,
    },
}

/// Which end of the setup this connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// It called (`Endpoint::connect`).
    Client,
    /// A listener accepted it.
    Server,
    /// Signalling set it up; no transport handshake.
    Signalled,
}

/// Counters of both VCs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionStats {
    /// The sending VC.
    pub tx: PsbStats,
    /// The receiving VC.
    pub rx: PsbStats,
    /// Smoothed RTT of the sending VC, once it has a sample.
    pub srtt: Option<Duration>,
}

/// A duplex connection: a [`TxHalf`] and an [`RxHalf`] and what couples them.
///
/// Call order (quinn-proto's): feed every frame the endpoint routed here to
/// [`handle_event`](Self::handle_event) (or a whole datagram to
/// [`handle_frame`](Self::handle_frame) when nothing else demultiplexes); after any
/// input — a frame, a timeout, `send`, `recv`, `close` — drain
/// [`poll_transmit`](Self::poll_transmit) until `None`, then
/// [`poll_event`](Self::poll_event) and [`poll_endpoint_event`](Self::poll_endpoint_event)
/// (hand the latter to `Endpoint::handle_event`), and arm a timer for
/// [`poll_timeout`](Self::poll_timeout), calling [`handle_timeout`](Self::handle_timeout)
/// when it fires. Nothing here reads a clock: `now` comes with every call.
///
/// An I/O layer that locks the two directions separately (see [`super::half`]) takes
/// them apart with [`into_parts`](Self::into_parts).
#[derive(Debug)]
pub struct Connection {
    route: Route,
    side: Side,
    tx: TxHalf,
    rx: RxHalf,
    remote: SocketAddr,
    /// The remote address is confirmed by a frame with the right cookie.
    pinned: bool,
    state: State,
    /// Both VCs must be up by then (the peer's VC back may never come).
    handshake_deadline: Option<Instant>,
    events: VecDeque<Event>,
    endpoint_events: VecDeque<EndpointEvent>,
    drained_told: bool,
}

impl Connection {
    pub(crate) fn new(
        route: Route,
        side: Side,
        tx: TxHalf,
        rx: RxHalf,
        remote: SocketAddr,
        handshake_deadline: Option<Instant>,
    ) -> Connection {
        let mut c = Connection {
            route,
            side,
            tx,
            rx,
            remote,
            pinned: side == Side::Signalled,
            state: State::Connecting,
            handshake_deadline,
            events: VecDeque::new(),
            endpoint_events: VecDeque::new(),
            drained_told: false,
        };
        c.update();
        c
    }

    // ---- input -------------------------------------------------------------------

    /// A frame the endpoint routed to this connection.
    pub fn handle_event(&mut self, now: Instant, ev: ConnectionEvent) {
        if !self.pinned {
            // Direct mode: the accepting side answers from wherever it likes (the
            // engine, from a new socket); the first frame with the right cookie fixes
            // the peer's address.
            self.remote = ev.from;
            self.pinned = true;
        }
        match ev.half {
            Half::Tx => self.tx.handle_frame(now, ev.tpdu),
            Half::Rx => self.rx.handle_frame(now, ev.tpdu),
        }
        self.update();
    }

    /// A whole datagram (VC header + TPDU) for this connection alone, as a connection
    /// with a socket of its own receives it: VCI and cookie are checked here. Returns
    /// false (and counts nothing else) if it was not for this connection.
    pub fn handle_frame(&mut self, now: Instant, from: SocketAddr, datagram: Bytes) -> bool {
        if self.rx.is_bare() {
            // A bare VC's frames carry no cookie: VPI and VCI are all there is.
            let Some(half) = self.bare_half_of(&datagram) else {
                return false;
            };
            let sdu = datagram.slice(vcframe::HEADER_LEN..);
            self.handle_event(
                now,
                ConnectionEvent {
                    half,
                    from,
                    tpdu: sdu,
                },
            );
            return true;
        }
        match self.route.classify(&datagram) {
            Ok(half) => {
                let tpdu = datagram.slice(vcframe::HEADER_LEN..);
                self.handle_event(now, ConnectionEvent { half, from, tpdu });
                true
            }
            Err(_) => false,
        }
    }

    fn bare_half_of(&self, datagram: &[u8]) -> Option<Half> {
        let (vc, _) = vcframe::Repr::parse_bytes(datagram).ok()?;
        if vc.kind != vcframe::FrameKind::Data || vc.vpi != self.rx.vpi() {
            return None;
        }
        self.route.half_of(vc.vci)
    }

    /// Timers fired: both VCs' and the handshake's.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.tx.poll_timeout().is_some_and(|t| t <= now) {
            self.tx.handle_timeout(now);
        }
        if self.rx.poll_timeout().is_some_and(|t| t <= now) {
            self.rx.handle_timeout(now);
        }
        if self.state == State::Connecting && self.handshake_deadline.is_some_and(|d| d <= now) {
            self.handshake_deadline = None;
            self.fail(AbortReason::Timeout);
        }
        self.update();
    }

    // ---- application calls --------------------------------------------------------

    /// Queue message bytes; `end_of_message` closes the message. Returns the bytes
    /// taken (a prefix when the send buffer filled; wait for [`Event::Writable`]).
    pub fn send(&mut self, data: &[u8], end_of_message: bool) -> Result<usize, SendError> {
        let r = self.tx.send(data, end_of_message);
        self.update();
        r
    }

    /// As [`Connection::send`], without copying `data`.
    pub fn send_bytes(&mut self, data: &Bytes, end_of_message: bool) -> Result<usize, SendError> {
        let r = self.tx.send_bytes(data, end_of_message);
        self.update();
        r
    }

    /// The next chunk of received data: a `Bytes` slice of the frame it came in
    /// (never copied), with its message boundaries.
    pub fn recv(&mut self) -> Result<Option<Chunk>, RecvError> {
        let r = self.rx.recv();
        self.update();
        r
    }

    /// Close our direction in order; receiving continues until the peer closes.
    pub fn close(&mut self) {
        self.tx.close();
        self.update();
    }

    /// Hang up: close our direction in order and stop receiving (what an application
    /// that drops its connection does). The peer reads everything sent before, and
    /// learns that nobody reads what it sends (`coupling`: its sending VC aborts,
    /// its receiving one goes on).
    pub fn hang_up(&mut self) {
        self.tx.close();
        self.rx.close();
        self.update();
    }

    /// Abort both directions at once; the peer is told on both VCs.
    pub fn abort(&mut self) {
        self.abort_with(AbortReason::Local);
    }

    /// Abort both directions, telling the application `reason` (e.g. `Peer` when
    /// signalling reports the peer gone).
    pub fn abort_with(&mut self, reason: AbortReason) {
        self.tx.abort(reason);
        self.rx.abort(reason);
        if !matches!(self.state, State::Aborted(_) | State::Closed) {
            self.state = State::Aborted(reason);
        }
        self.update();
    }

    // ---- output ------------------------------------------------------------------

    /// The next datagram to send, appended to `buf` (VC header + TPDU): the receiving
    /// VC's ACKs and answers first, then the sending VC's frames.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.tx.is_bare() {
            let sdu = self.tx.poll_sdu(now)?;
            let start = buf.len();
            buf.extend_from_slice(
                &vcframe::Repr::data(self.tx.vpi(), self.route.tx_vci).to_bytes(),
            );
            buf.extend_from_slice(&sdu);
            self.update();
            return Some(Transmit {
                destination: self.remote,
                size: buf.len() - start,
                half: Half::Tx,
                kind: TransmitKind::Data,
            });
        }
        let (half, t) = match self.rx.poll_transmit(now) {
            Some(t) => (Half::Rx, t),
            None => (Half::Tx, self.tx.poll_transmit(now)?),
        };
        let vci = match half {
            Half::Tx => self.route.tx_vci,
            Half::Rx => self.route.rx_vci,
        };
        let start = buf.len();
        buf.extend_from_slice(&vcframe::Repr::data(0, vci).to_bytes());
        t.write_to(buf);
        self.update();
        Some(Transmit {
            destination: self.remote,
            size: buf.len() - start,
            half,
            kind: t.kind,
        })
    }

    /// The next application event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next event for the endpoint (hand it to `Endpoint::handle_event`).
    pub fn poll_endpoint_event(&mut self) -> Option<EndpointEvent> {
        self.endpoint_events.pop_front()
    }

    /// When [`Connection::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let hs = if self.state == State::Connecting {
            self.handshake_deadline
        } else {
            None
        };
        [self.tx.poll_timeout(), self.rx.poll_timeout(), hs]
            .into_iter()
            .flatten()
            .min()
    }

    // ---- coupling of the two directions -------------------------------------------

    fn fail(&mut self, reason: AbortReason) {
        self.tx.abort(reason);
        self.rx.abort(reason);
        self.state = State::Aborted(reason);
        self.events.push_back(Event::ConnectFailed(reason));
    }

    /// Turn the halves' events into the connection's.
    fn update(&mut self) {
        while let Some(e) = self.rx.poll_event() {
            self.on_half_event(Half::Rx, e);
        }
        while let Some(e) = self.tx.poll_event() {
            self.on_half_event(Half::Tx, e);
        }
        if self.state == State::Connecting
            && self.tx.status().connected
            && self.rx.status().connected
        {
            self.state = State::Established;
            self.handshake_deadline = None;
            self.events.push_back(Event::Connected);
            self.endpoint_events.push_back(EndpointEvent::Established);
        }
        if matches!(self.state, State::Established | State::PeerClosed)
            && self.tx.status().closed
            && self.rx.status().peer_closed
        {
            self.state = State::Closed;
        }
        if !self.drained_told && self.is_drained() {
            self.drained_told = true;
            self.endpoint_events.push_back(EndpointEvent::Drained);
        }
    }

    fn on_half_event(&mut self, half: Half, e: PsbEvent) {
        match e {
            PsbEvent::Connected => {}
            PsbEvent::ConnectFailed => {
                if self.state == State::Connecting {
                    self.fail(AbortReason::Timeout);
                }
            }
            PsbEvent::Readable => self.events.push_back(Event::Readable),
            PsbEvent::Writable => self.events.push_back(Event::Writable),
            PsbEvent::QosChanged { rate } => {
                self.events.push_back(Event::QosChanged { half, rate })
            }
            PsbEvent::QosRefused { rate } => {
                self.events.push_back(Event::QosRefused { half, rate })
            }
            PsbEvent::PeerClosed => {
                if self.state == State::Established {
                    self.state = State::PeerClosed;
                }
                self.events.push_back(Event::PeerClosed);
            }
            PsbEvent::Closed => self.events.push_back(Event::Closed),
            PsbEvent::Aborted(r) => {
                if matches!(self.state, State::Aborted(_)) {
                    return;
                }
                let phase = if self.state == State::Connecting {
                    Phase::Setup
                } else {
                    Phase::Up
                };
                match (phase, coupling::abort_other(half, r, phase)) {
                    (Phase::Setup, Some(why)) => self.fail(why),
                    (_, other) => {
                        if let Some(o) = other {
                            let other = match half {
                                Half::Tx => &mut self.rx as &mut dyn Simplex,
                                Half::Rx => &mut self.tx as &mut dyn Simplex,
                            };
                            other.abort(o);
                            // The half's own Aborted event would be reported a
                            // second time.
                            while other.poll_event().is_some() {}
                        }
                        // Reported once, whichever half learnt it first; a half the
                        // rule lets go on still delivers (`coupling`).
                        self.state = State::Aborted(r);
                        self.events.push_back(Event::Aborted(r));
                    }
                }
            }
        }
    }

    // ---- observation --------------------------------------------------------------

    /// Where the connection is.
    pub fn state(&self) -> State {
        self.state
    }

    /// Which end of the setup this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The peer's address (fixed by the first frame with the right cookie).
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// Whether [`Connection::remote`] is confirmed by a frame from it.
    pub fn remote_confirmed(&self) -> bool {
        self.pinned
    }

    /// The VCIs and cookie that identify this connection's frames.
    pub fn route(&self) -> Route {
        self.route
    }

    /// Both directions finished and nothing is left to send: the endpoint may forget
    /// the connection.
    pub fn is_drained(&self) -> bool {
        self.tx.is_finished() && self.rx.is_finished()
    }

    /// Bytes ready to [`Connection::recv`].
    pub fn readable(&self) -> usize {
        self.rx.readable()
    }

    /// Free bytes in the send buffer.
    pub fn send_capacity(&self) -> usize {
        self.tx.capacity()
    }

    /// Counters of both VCs.
    pub fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            tx: self.tx.stats(),
            rx: self.rx.stats(),
            srtt: self
                .tx
                .psb()
                .map(|p| p.rtt())
                .filter(|rtt| rtt.has_sample())
                .map(|rtt| rtt.srtt()),
        }
    }

    /// The sending half.
    pub fn tx(&self) -> &TxHalf {
        &self.tx
    }

    /// The receiving half.
    pub fn rx(&self) -> &RxHalf {
        &self.rx
    }

    /// Take the connection apart for an I/O layer that locks each direction on its
    /// own; from then on it applies [`super::coupling`]'s rule itself when a half
    /// reports its abort.
    pub fn into_parts(self) -> (Route, SocketAddr, TxHalf, RxHalf) {
        (self.route, self.remote, self.tx, self.rx)
    }

    /// Whether the frame carries an ordinary data TPDU (for tests and tracing).
    pub fn is_data(kind: TransmitKind) -> bool {
        matches!(kind, TransmitKind::Data | TransmitKind::Retransmission(_))
    }
}
