//! Test support: two sans-IO endpoints joined by a lossy in-memory wire with a delay,
//! driven by a virtual clock (the idea of `natm_sim`, cut down to one link).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use bytes::Bytes;

use crate::time::Instant;

use super::{Saal, Sscop};
use crate::wire::addr::Aesa;
use crate::wire::q2931::PartyAddress;

/// A party address for tests: one fixed private AESA with its last octet `last`.
pub(crate) fn aesa(last: u8) -> PartyAddress {
    let mut b = hex::decode("47000580FFE1000000F21A26D80020481A26D800").unwrap();
    b[19] = last;
    PartyAddress::Aesa(Aesa::new(b.try_into().unwrap()).unwrap())
}

/// Something with the sans-IO frame interface.
pub(crate) trait Endpoint {
    fn handle(&mut self, now: Instant, frame: &[u8]);
    fn poll_tx(&mut self) -> Option<Bytes>;
    fn timeout(&self) -> Option<Instant>;
    fn on_timeout(&mut self, now: Instant);
}

impl Endpoint for Sscop {
    fn handle(&mut self, now: Instant, frame: &[u8]) {
        self.handle_pdu(now, frame);
    }
    fn poll_tx(&mut self) -> Option<Bytes> {
        self.poll_transmit()
    }
    fn timeout(&self) -> Option<Instant> {
        self.poll_timeout()
    }
    fn on_timeout(&mut self, now: Instant) {
        self.handle_timeout(now);
    }
}

impl Endpoint for Saal {
    fn handle(&mut self, now: Instant, frame: &[u8]) {
        self.handle_frame(now, frame);
    }
    fn poll_tx(&mut self) -> Option<Bytes> {
        self.poll_transmit()
    }
    fn timeout(&self) -> Option<Instant> {
        self.poll_timeout()
    }
    fn on_timeout(&mut self, now: Instant) {
        self.handle_timeout(now);
    }
}

/// A deterministic xorshift generator (no dependency, same sequence everywhere).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
}

/// Which way a frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Dir {
    AtoB,
    BtoA,
}

/// A frame on the wire: arrival time, tie-break, direction, bytes.
type InFlight = Reverse<(Instant, u64, Dir, Vec<u8>)>;

/// Two endpoints, a one-way delay and a loss probability per direction.
pub(crate) struct Net<E: Endpoint> {
    pub(crate) a: E,
    pub(crate) b: E,
    pub(crate) now: Instant,
    pub(crate) delay: Duration,
    pub(crate) loss: f64,
    /// Extra delay, uniform in 0..jitter per frame: frames overtake each other.
    pub(crate) jitter: Duration,
    /// While set, every frame is dropped (a cut cable).
    pub(crate) cut: bool,
    rng: Rng,
    seq: u64,
    in_flight: BinaryHeap<InFlight>,
    pub(crate) delivered: u64,
    pub(crate) dropped: u64,
    /// Every frame sent, with its direction, for inspection.
    pub(crate) trace: Vec<(Dir, Bytes)>,
    pub(crate) keep_trace: bool,
}

impl<E: Endpoint> Net<E> {
    pub(crate) fn new(a: E, b: E, seed: u64) -> Net<E> {
        Net {
            a,
            b,
            now: Instant::from_nanos(1_000_000_000),
            delay: Duration::from_millis(5),
            loss: 0.0,
            jitter: Duration::ZERO,
            cut: false,
            rng: Rng::new(seed),
            seq: 0,
            in_flight: BinaryHeap::new(),
            delivered: 0,
            dropped: 0,
            trace: Vec::new(),
            keep_trace: false,
        }
    }

    /// Moves frames the endpoints want to send onto the wire.
    fn collect(&mut self) {
        for dir in [Dir::AtoB, Dir::BtoA] {
            loop {
                let f = match dir {
                    Dir::AtoB => self.a.poll_tx(),
                    Dir::BtoA => self.b.poll_tx(),
                };
                let Some(f) = f else { break };
                if self.keep_trace {
                    self.trace.push((dir, f.clone()));
                }
                if self.cut || self.rng.chance(self.loss) {
                    self.dropped += 1;
                    continue;
                }
                self.seq += 1;
                let jitter_ns = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
                let extra = match jitter_ns {
                    0 => Duration::ZERO,
                    j => Duration::from_nanos(self.rng.next_u64() % j),
                };
                self.in_flight.push(Reverse((
                    self.now + self.delay + extra,
                    self.seq,
                    dir,
                    f.to_vec(),
                )));
            }
        }
    }

    /// Advances to the next frame arrival or timer, at most until `until`; false if
    /// nothing is left to happen before it.
    pub(crate) fn step(&mut self, until: Instant) -> bool {
        self.collect();
        let next_frame = self.in_flight.peek().map(|Reverse(x)| x.0);
        let next_timer = [self.a.timeout(), self.b.timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = [next_frame, next_timer].into_iter().flatten().min() else {
            return false;
        };
        if t > until {
            self.now = until;
            return false;
        }
        self.now = self.now.max(t);
        if next_frame.is_some_and(|f| f <= self.now) {
            if let Some(Reverse((_, _, dir, f))) = self.in_flight.pop() {
                self.delivered += 1;
                match dir {
                    Dir::AtoB => self.b.handle(self.now, &f),
                    Dir::BtoA => self.a.handle(self.now, &f),
                }
            }
        } else {
            if self.a.timeout().is_some_and(|x| x <= self.now) {
                self.a.on_timeout(self.now);
            }
            if self.b.timeout().is_some_and(|x| x <= self.now) {
                self.b.on_timeout(self.now);
            }
        }
        self.collect();
        true
    }

    /// Runs for `d` of virtual time.
    pub(crate) fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        while self.step(until) {}
        self.now = self.now.max(until);
    }

    /// Runs until `done` holds (checked after each step) or `limit` passes; whether
    /// `done` held.
    pub(crate) fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> bool {
        let until = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if !self.step(until) {
                return done(self);
            }
        }
    }
}
