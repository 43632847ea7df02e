//! A port's UDP link: the socket, the peer, the train being built, and the
//! experiment knobs (random loss, one-way delay as a timed queue).

use std::collections::{HashMap, HashSet, VecDeque};
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
    /// `None` on an atmtcp port, whose link is TCP (`crate::atmtcp_link`).
    pub(crate) socket: Option<UdpSocket>,
    pub(crate) bind: SocketAddr,
    pub(crate) peer: SocketAddr,
    pub(crate) mode: LinkMode,
    pub(crate) train: usize,
    pub(crate) cell_time: Duration,
    /// When the next cell of this link may arrive: cells of a train are stamped one
    /// cell time apart, and a train never overlaps the one before.
    pub(crate) next_arrival: natm_proto::time::Instant,
    pub(crate) loss: f64,
    /// Burst loss, and whether its channel is in the bad state.
    pub(crate) burst: Option<(natm_sim::GilbertElliott, bool)>,
    pub(crate) delay: Duration,
    pub(crate) delayed: VecDeque<(Instant, SocketAddr, Vec<u8>)>,
    pub(crate) rng: Rng,
    pub(crate) counters: LinkCounters,
    /// Signalled VCs of a host port, each with its own data endpoint: the labels
    /// each endpoint may send on (anything else from it is refused)...
    pub(crate) sources: HashSet<(SocketAddr, u16, u16)>,
    /// ...and where each output label's units go (the peer if not here).
    pub(crate) dests: HashMap<(u16, u16), SocketAddr>,
}

/// The VPI and VCI of a UNI cell header (I.361: GFC 4 bits, VPI 8, VCI 16); the data
/// plane checks the HEC.
pub(crate) fn uni_label(cell: &[u8]) -> (u16, u16) {
    let vpi = (u16::from(cell[0] & 0x0F) << 4) | u16::from(cell[1] >> 4);
    let vci =
        (u16::from(cell[1] & 0x0F) << 12) | (u16::from(cell[2]) << 4) | u16::from(cell[3] >> 4);
    (vpi, vci)
}

impl Link {
    /// Sends `datagram` to the peer now, or after the configured delay; or loses it.
    pub(crate) fn send(&mut self, datagram: &[u8], wall: Instant) {
        self.send_to(datagram, self.peer, wall);
    }

    /// Whether the next datagram sent is lost: random loss, then the burst channel
    /// (which steps on every datagram, lost or not).
    fn lost(&mut self) -> bool {
        let random = self.loss > 0.0 && self.rng.next_f64() < self.loss;
        let burst = match &mut self.burst {
            Some((ge, bad)) => {
                let rng = &mut self.rng;
                ge.step(bad, |p| p > 0.0 && rng.next_f64() < p)
            }
            None => false,
        };
        random || burst
    }

    /// Where units with output label `(vpi, vci)` go.
    pub(crate) fn dest(&self, vpi: u16, vci: u16) -> SocketAddr {
        if self.dests.is_empty() {
            return self.peer;
        }
        self.dests.get(&(vpi, vci)).copied().unwrap_or(self.peer)
    }

    /// Whether a datagram from `from` may carry units of input label `(vpi, vci)`:
    /// the peer may send any, a VC's own data endpoint only its VC.
    pub(crate) fn may_send(&self, from: SocketAddr, vpi: u16, vci: u16) -> bool {
        from == self.peer || self.sources.contains(&(from, vpi, vci))
    }

    /// Sends `datagram` to `to` now, or after the configured delay; or loses it.
    pub(crate) fn send_to(&mut self, datagram: &[u8], to: SocketAddr, wall: Instant) {
        if self.lost() {
            self.counters.lost += 1;
            return;
        }
        if self.delay.is_zero() {
            self.send_now(datagram, to);
        } else {
            self.delayed
                .push_back((wall + self.delay, to, datagram.to_vec()));
        }
    }

    fn send_now(&mut self, datagram: &[u8], to: SocketAddr) {
        let Some(socket) = self.socket.as_ref() else {
            self.counters.send_errors += 1;
            return;
        };
        match socket.send_to(datagram, to) {
            Ok(_) => self.counters.datagrams_out += 1,
            // A full socket buffer is loss on the link, as a full line would be.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.counters.send_errors += 1,
            Err(_) => self.counters.send_errors += 1,
        }
    }

    /// Sends the delayed datagrams that are due; returns when the next one is.
    pub(crate) fn release_delayed(&mut self, wall: Instant) -> Option<Instant> {
        while let Some((due, ..)) = self.delayed.front() {
            if *due > wall {
                return Some(*due);
            }
            if let Some((_, to, d)) = self.delayed.pop_front() {
                self.send_now(&d, to);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(loss: f64, burst: Option<natm_sim::GilbertElliott>) -> Link {
        let socket = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let bind = socket.local_addr().unwrap();
        Link {
            name: "t".into(),
            socket: Some(socket),
            bind,
            peer: bind,
            mode: LinkMode::Frame,
            train: 1,
            cell_time: Duration::from_nanos(2726),
            next_arrival: natm_proto::time::Instant::ZERO,
            loss,
            burst: burst.map(|g| (g, false)),
            delay: Duration::ZERO,
            delayed: VecDeque::new(),
            rng: Rng::new(7),
            counters: LinkCounters::default(),
            sources: HashSet::new(),
            dests: HashMap::new(),
        }
    }

    #[test]
    fn gilbert_loss_comes_in_bursts_at_the_models_mean() {
        let ge = natm_sim::GilbertElliott::new(0.02, 0.25);
        let mut l = link(0.0, Some(ge));
        let n = 200_000;
        let (mut lost, mut runs, mut prev) = (0u32, 0u32, false);
        for _ in 0..n {
            let x = l.lost();
            lost += u32::from(x);
            runs += u32::from(x && !prev);
            prev = x;
        }
        let rate = f64::from(lost) / f64::from(n);
        let mean_run = f64::from(lost) / f64::from(runs);
        assert!(
            (rate / ge.mean_loss() - 1.0).abs() < 0.1,
            "{rate} vs {}",
            ge.mean_loss()
        );
        assert!(
            (mean_run / ge.mean_bad_run() - 1.0).abs() < 0.1,
            "{mean_run}"
        );
        // Random loss alone is not bursty: runs of about 1/(1-p).
        let mut r = link(0.1, None);
        let (mut lost, mut runs, mut prev) = (0u32, 0u32, false);
        for _ in 0..n {
            let x = r.lost();
            lost += u32::from(x);
            runs += u32::from(x && !prev);
            prev = x;
        }
        assert!(f64::from(lost) / f64::from(runs) < 1.2);
    }
}
