//! A port's UDP link: the socket, the peer, the datagrams being batched for one send,
//! and the experiment knobs (random loss, one-way delay as a timed queue).
//!
//! Socket I/O is batched: the socket is natm's own UDP adaptor port
//! (`natm_udp::UdpPort`, quinn-udp underneath), which receives with `recvmmsg`
//! and UDP GRO, and the datagrams a port sends in one pass of the loop are laid back
//! to back in one buffer and leave as UDP GSO runs (one `sendmsg` per run of
//! datagrams of one size to one destination), as the host engine sends its trains.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use natm_udp::{PortOptions, UdpPort, MAX_DATAGRAM};
use rustix::net::sockopt;

use crate::config::LinkMode;
use crate::stat::LinkCounters;

/// Opens a port's socket: non-blocking, GRO on (quinn-udp's setup), but with the
/// kernel's default path-MTU behaviour put back, so that a datagram larger than a
/// link's MTU (a train of 32 cells is 1,697 octets) is still fragmented as a plain
/// socket would, instead of refused: quinn-udp sets `IP_PMTUDISC_PROBE`. A GSO run of
/// segments over the MTU is refused by the kernel; the port then sends that size one
/// datagram per call (`UdpPort::send`'s fallback).
pub(crate) fn open_socket(bind: SocketAddr) -> io::Result<UdpPort> {
    let port = UdpPort::bind_with(bind, &PortOptions::default())?;
    port.set_nonblocking(true)?;
    if bind.is_ipv4() {
        sockopt::set_ip_mtu_discover(&port, sockopt::Ipv4PathMtuDiscovery::WANT)?;
    } else {
        sockopt::set_ipv6_mtu_discover(&port, sockopt::Ipv6PathMtuDiscovery::WANT)?;
    }
    Ok(port)
}

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
    pub(crate) socket: Option<UdpPort>,
    pub(crate) bind: SocketAddr,
    pub(crate) peer: SocketAddr,
    pub(crate) mode: LinkMode,
    pub(crate) train: usize,
    pub(crate) cell_time: Duration,
    /// When the next cell of this link may arrive: cells of a train are stamped one
    /// cell time apart, and a train never overlaps the one before.
    pub(crate) next_arrival: natm_proto::time::Instant,
    /// The port had nothing queued when it was last drained: whatever it holds now
    /// arrived since, so no line slot before now was missed (no catch-up credit).
    pub(crate) line_idle: bool,
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
    /// A host port's Noise link (issue 31): the default on `signalling = "host"`.
    pub(crate) noise: Option<Box<crate::noise_port::NoisePort>>,
    /// ILMI's network side on a host port with `ilmi_prefix` (issue 33).
    pub(crate) ilmi: Option<crate::ilmi_port::IlmiPort>,
    /// ...and where each output label's units go (the peer if not here).
    pub(crate) dests: HashMap<(u16, u16), SocketAddr>,
    /// Datagrams to send, back to back; see [`Link::open`].
    pub(crate) tx: TxBatch,
}

/// The datagrams a link sends in one pass, back to back in one buffer, all of one size
/// but the last and all to one destination: what one UDP GSO `sendmsg` takes.
#[derive(Debug, Default)]
pub(crate) struct TxBatch {
    buf: Vec<u8>,
    /// Where the datagram being written starts (`buf.len()` when none is open).
    open_at: usize,
    to: Option<SocketAddr>,
    /// The size of every datagram but the last.
    segment: usize,
    datagrams: usize,
    /// The last datagram is shorter than `segment`: nothing may follow it.
    sealed: bool,
}

impl TxBatch {
    /// The datagram being written (after [`Link::open`]).
    #[inline]
    pub(crate) fn datagram(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Octets of the datagram being written.
    #[inline]
    pub(crate) fn open_len(&self) -> usize {
        self.buf.len() - self.open_at
    }
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

    /// Whether a datagram sent now would meet an experiment (loss or delay) and so
    /// cannot simply join the batch.
    #[inline]
    fn experiments(&self) -> bool {
        self.loss > 0.0 || self.burst.is_some() || !self.delay.is_zero()
    }

    /// Starts a datagram of at most `max_len` octets to `to` at the end of the batch
    /// (sending the batch first if the datagram cannot join it); write it through
    /// `self.tx.datagram()` (appending only), then [`Link::close`] it.
    #[inline]
    pub(crate) fn open(&mut self, to: SocketAddr, max_len: usize) {
        let tx = &self.tx;
        if tx.datagrams > 0
            && (tx.to != Some(to)
                || tx.sealed
                || max_len > tx.segment
                || tx.datagrams >= self.socket.as_ref().map_or(1, |s| s.max_gso_segments())
                || tx.buf.len() + max_len > MAX_DATAGRAM)
        {
            self.flush();
        }
        self.tx.to = Some(to);
        self.tx.open_at = self.tx.buf.len();
    }

    /// Drops the datagram being written (nothing went into it worth sending).
    #[inline]
    pub(crate) fn discard_open(&mut self) {
        let at = self.tx.open_at;
        self.tx.buf.truncate(at);
    }

    /// Ends the datagram being written: it joins the batch, or is lost or delayed by
    /// the experiments. An empty one is dropped.
    pub(crate) fn close(&mut self, wall: Instant) {
        let len = self.tx.open_len();
        if len == 0 {
            return;
        }
        if self.experiments() {
            let at = self.tx.open_at;
            if self.lost() {
                self.counters.lost += 1;
            } else if !self.delay.is_zero() {
                let to = self.tx.to.unwrap_or(self.peer);
                let d = self.tx.buf[at..].to_vec();
                self.delayed.push_back((wall + self.delay, to, d));
            } else {
                let to = self.tx.to.unwrap_or(self.peer);
                let d = std::mem::take(&mut self.tx.buf);
                self.send_now(&d[at..], to, len);
                self.tx.buf = d;
            }
            self.tx.buf.truncate(at);
            return;
        }
        let tx = &mut self.tx;
        debug_assert!(
            tx.datagrams == 0 || len <= tx.segment,
            "open() checked the size"
        );
        if tx.datagrams == 0 {
            tx.segment = len;
        } else if len < tx.segment {
            tx.sealed = true;
        }
        tx.datagrams += 1;
        tx.open_at = tx.buf.len();
    }

    /// Sends what the batch holds.
    pub(crate) fn flush(&mut self) {
        let tx = &mut self.tx;
        if tx.datagrams == 0 {
            return;
        }
        let to = tx.to.unwrap_or(self.peer);
        let buf = std::mem::take(&mut tx.buf);
        let segment = tx.segment;
        self.send_now(&buf, to, segment);
        let tx = &mut self.tx;
        tx.buf = buf;
        tx.buf.clear();
        tx.open_at = 0;
        tx.datagrams = 0;
        tx.sealed = false;
    }

    /// Sends `datagram` to the peer (see [`Link::send_to`]).
    pub(crate) fn send(&mut self, datagram: &[u8], wall: Instant) {
        self.send_to(datagram, self.peer, wall);
    }

    /// Sends `datagram` to `to` with the batch, or after the configured delay; or
    /// loses it.
    pub(crate) fn send_to(&mut self, datagram: &[u8], to: SocketAddr, wall: Instant) {
        self.open(to, datagram.len());
        self.tx.datagram().extend_from_slice(datagram);
        self.close(wall);
    }

    /// Sends `contents`, datagrams of `segment` octets (the last may be shorter), to
    /// `to` now.
    fn send_now(&mut self, contents: &[u8], to: SocketAddr, segment: usize) {
        let datagrams = contents.len().div_ceil(segment) as u64;
        let Some(socket) = self.socket.as_ref() else {
            self.counters.send_errors += datagrams;
            return;
        };
        self.counters.send_calls += 1;
        match socket.send(Some(to), contents, segment) {
            Ok(n) => {
                self.counters.datagrams_out += n as u64;
                // A full socket buffer is loss on the link, as a full line would be.
                self.counters.send_errors += datagrams - n as u64;
            }
            Err(_) => self.counters.send_errors += datagrams,
        }
    }

    /// Sends the delayed datagrams that are due; returns when the next one is.
    pub(crate) fn release_delayed(&mut self, wall: Instant) -> Option<Instant> {
        while let Some((due, ..)) = self.delayed.front() {
            if *due > wall {
                return Some(*due);
            }
            if let Some((_, to, d)) = self.delayed.pop_front() {
                self.send_now(&d, to, d.len().max(1));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(loss: f64, burst: Option<natm_sim::GilbertElliott>) -> Link {
        let socket = open_socket("127.0.0.1:0".parse().unwrap()).unwrap();
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
            line_idle: true,
            loss,
            burst: burst.map(|g| (g, false)),
            delay: Duration::ZERO,
            delayed: VecDeque::new(),
            rng: Rng::new(7),
            counters: LinkCounters::default(),
            sources: HashSet::new(),
            noise: None,
            ilmi: None,
            dests: HashMap::new(),
            tx: TxBatch::default(),
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
