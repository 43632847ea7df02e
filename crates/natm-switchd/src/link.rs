//! A port's UDP link: the socket, the peer, the train being built, and the
//! experiment knobs (random loss, one-way delay as a timed queue).

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;

use crate::config::LinkMode;
use crate::stat::LinkCounters;

/// SplitMix64: a seeded generator for the loss experiment (not for anything secret).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Uniform in [0, 1).
    pub(crate) fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One port's link.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) name: String,
    pub(crate) socket: UdpSocket,
    pub(crate) bind: SocketAddr,
    pub(crate) peer: SocketAddr,
    pub(crate) mode: LinkMode,
    pub(crate) train: usize,
    pub(crate) cell_time: Duration,
    /// When the next cell of this link may arrive: cells of a train are stamped one
    /// cell time apart, and a train never overlaps the one before.
    pub(crate) next_arrival: natm_proto::time::Instant,
    pub(crate) loss: f64,
    pub(crate) delay: Duration,
    pub(crate) delayed: VecDeque<(Instant, Vec<u8>)>,
    pub(crate) rng: Rng,
    pub(crate) counters: LinkCounters,
}

impl Link {
    /// Sends `datagram` to the peer now, or after the configured delay; or loses it.
    pub(crate) fn send(&mut self, datagram: &[u8], wall: Instant) {
        if self.loss > 0.0 && self.rng.next_f64() < self.loss {
            self.counters.lost += 1;
            return;
        }
        if self.delay.is_zero() {
            self.send_now(datagram);
        } else {
            self.delayed
                .push_back((wall + self.delay, datagram.to_vec()));
        }
    }

    fn send_now(&mut self, datagram: &[u8]) {
        match self.socket.send_to(datagram, self.peer) {
            Ok(_) => self.counters.datagrams_out += 1,
            // A full socket buffer is loss on the link, as a full line would be.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.counters.send_errors += 1,
            Err(_) => self.counters.send_errors += 1,
        }
    }

    /// Sends the delayed datagrams that are due; returns when the next one is.
    pub(crate) fn release_delayed(&mut self, wall: Instant) -> Option<Instant> {
        while let Some((due, _)) = self.delayed.front() {
            if *due > wall {
                return Some(*due);
            }
            if let Some((_, d)) = self.delayed.pop_front() {
                self.send_now(&d);
            }
        }
        None
    }
}
