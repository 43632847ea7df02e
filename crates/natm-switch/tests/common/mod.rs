//! A virtual-time harness for the switch: inputs (cells or frames) at given times on
//! given ports, ports drained at their line rate, everything each port sent recorded.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use natm_proto::time::Instant;
use natm_proto::wire::aal5::{Reassembler, Segmenter};
use natm_proto::wire::cell::{HeaderRepr, Pti, CELL_LEN};
use natm_proto::wire::vcframe;
use natm_switch::{PortId, Switch, Transmit, Verdict};

/// Something that arrives at the switch.
#[derive(Debug, Clone)]
pub enum Input {
    Cell([u8; CELL_LEN]),
    Frame(vcframe::Repr, Bytes),
}

/// The switch, a clock, the inputs still to arrive and what each port sent.
pub struct Harness {
    pub sw: Switch,
    pub now: Instant,
    inputs: Vec<(Instant, PortId, Input)>,
    next: usize,
    /// Per port: (time sent, unit).
    pub out: Vec<Vec<(Instant, Transmit)>>,
    /// Verdicts of the inputs, in arrival order.
    pub verdicts: Vec<Verdict>,
}

impl Harness {
    pub fn new(sw: Switch) -> Harness {
        let ports = sw.ports().count();
        Harness {
            sw,
            now: Instant::ZERO,
            inputs: Vec::new(),
            next: 0,
            out: vec![Vec::new(); ports],
            verdicts: Vec::new(),
        }
    }

    /// Adds inputs (any order; ties keep the order they were added in).
    pub fn feed(&mut self, items: impl IntoIterator<Item = (Instant, PortId, Input)>) {
        let mut rest = self.inputs.split_off(self.next);
        rest.extend(items);
        rest.sort_by_key(|x| x.0);
        self.inputs = rest;
        self.next = 0;
    }

    /// Runs until `end`: arrivals at each instant first, then one transmission per
    /// free port, as the switch's `poll_timeout` says.
    pub fn run_until(&mut self, end: Instant) {
        let ports: Vec<PortId> = self.sw.ports().collect();
        loop {
            let arrival = self.inputs.get(self.next).map(|x| x.0);
            let tx = self.sw.poll_timeout().map(|t| t.max(self.now));
            let t = match (arrival, tx) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if t > end {
                break;
            }
            self.now = t;
            while let Some((at, port, input)) = self.inputs.get(self.next).cloned() {
                if at > self.now {
                    break;
                }
                self.next += 1;
                let v = match input {
                    Input::Cell(c) => self.sw.handle_cell(at, port, c),
                    Input::Frame(h, sdu) => self.sw.handle_frame(at, port, h, sdu),
                }
                .expect("the harness feeds known ports only");
                self.verdicts.push(v);
            }
            self.sw.handle_timeout(self.now);
            for &p in &ports {
                if let Some(unit) = self.sw.poll_transmit(self.now, p) {
                    self.out[p.index()].push((self.now, unit));
                }
            }
        }
        self.now = self.now.max(end);
    }

    /// Runs until nothing is left to arrive or send.
    pub fn drain(&mut self) {
        self.run_until(Instant::from_nanos(u64::MAX / 2));
    }

    /// Cells sent by `port` in [from, to), by VCI.
    pub fn cells_by_vci(&self, port: PortId, from: Instant, to: Instant) -> HashMap<u16, u64> {
        let mut m = HashMap::new();
        for (t, unit) in &self.out[port.index()] {
            if *t >= from && *t < to {
                let (vci, n) = match unit {
                    Transmit::Cell(c) => (vci_of(c), 1),
                    Transmit::Frame { header, .. } => (header.vci, u64::from(unit.cells())),
                };
                *m.entry(vci).or_insert(0) += n;
            }
        }
        m
    }

    /// The cells `port` sent, in order.
    pub fn cells(&self, port: PortId) -> Vec<[u8; CELL_LEN]> {
        self.out[port.index()]
            .iter()
            .filter_map(|(_, u)| match u {
                Transmit::Cell(c) => Some(*c),
                Transmit::Frame { .. } => None,
            })
            .collect()
    }
}

pub fn at_us(us: u64) -> Instant {
    Instant::from_nanos(us * 1000)
}

pub fn secs(s: f64) -> Instant {
    Instant::from_nanos((s * 1e9) as u64)
}

pub fn vci_of(c: &[u8; CELL_LEN]) -> u16 {
    (u32::from_be_bytes([c[0], c[1], c[2], c[3]]) >> 4) as u16
}

pub fn vpi_of(c: &[u8; CELL_LEN]) -> u16 {
    ((u32::from_be_bytes([c[0], c[1], c[2], c[3]]) >> 20) & 0xFF) as u16
}

pub fn clp_of(c: &[u8; CELL_LEN]) -> bool {
    c[3] & 1 != 0
}

/// A UNI cell on `vpi`/`vci` with payload `fill`.
pub fn cell(vpi: u8, vci: u16, pti: Pti, fill: u8) -> [u8; CELL_LEN] {
    let mut c = [fill; CELL_LEN];
    c[..5].copy_from_slice(&HeaderRepr::uni(vpi, vci, pti).to_bytes());
    c
}

/// `count` single cells on `port` `vpi`/`vci`, one every `interval` from `start`.
pub fn cbr(
    port: PortId,
    vpi: u8,
    vci: u16,
    start: Instant,
    interval: Duration,
    count: u64,
) -> Vec<(Instant, PortId, Input)> {
    (0..count)
        .map(|i| {
            let t = start + interval * u32::try_from(i).unwrap();
            (
                t,
                port,
                Input::Cell(cell(vpi, vci, Pti::UserDataEnd, i as u8)),
            )
        })
        .collect()
}

/// The SDU of frame `seq` of VC `vci`: `len` octets, recognisable.
pub fn sdu(vci: u16, seq: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u8) ^ (seq as u8) ^ (vci as u8))
        .collect();
    v[..4].copy_from_slice(&seq.to_be_bytes());
    v[4..6].copy_from_slice(&vci.to_be_bytes());
    v
}

/// `frames` AAL5 frames of `len` octets on `port` `vpi`/`vci`, segmented into cells
/// sent one every `interval` from `start`.
pub fn aal5_cells(
    port: PortId,
    vpi: u8,
    vci: u16,
    start: Instant,
    interval: Duration,
    frames: u32,
    len: usize,
) -> Vec<(Instant, PortId, Input)> {
    let mut v = Vec::new();
    let mut k = 0u32;
    for seq in 0..frames {
        let data = sdu(vci, seq, len);
        for c in Segmenter::new(&data, HeaderRepr::uni(vpi, vci, Pti::UserData)).unwrap() {
            v.push((start + interval * k, port, Input::Cell(c)));
            k += 1;
        }
    }
    v
}

/// `frames` frame-mode frames of `len` octets, one every `interval`.
pub fn frames(
    port: PortId,
    vpi: u8,
    vci: u16,
    start: Instant,
    interval: Duration,
    frames: u32,
    len: usize,
) -> Vec<(Instant, PortId, Input)> {
    (0..frames)
        .map(|seq| {
            (
                start + interval * seq,
                port,
                Input::Frame(
                    vcframe::Repr::data(vpi, vci),
                    Bytes::from(sdu(vci, seq, len)),
                ),
            )
        })
        .collect()
}

/// Reassembles the cells `port` sent per VCI: (whole frames with the right content,
/// frames that failed the AAL5 checks or came out wrong).
pub fn reassemble(cells: &[[u8; CELL_LEN]], len: usize) -> HashMap<u16, (u64, u64)> {
    let mut r: HashMap<u16, Reassembler> = HashMap::new();
    let mut out: HashMap<u16, (u64, u64)> = HashMap::new();
    for c in cells {
        let vci = vci_of(c);
        let e = out.entry(vci).or_default();
        match r.entry(vci).or_default().push_cell(c) {
            Ok(Some(s)) => {
                let seq = u32::from_be_bytes(s[..4].try_into().unwrap());
                let orig_vci = u16::from_be_bytes(s[4..6].try_into().unwrap());
                if s == sdu(orig_vci, seq, len).as_slice() {
                    e.0 += 1;
                } else {
                    e.1 += 1;
                }
            }
            Ok(None) => {}
            Err(_) => e.1 += 1,
        }
    }
    out
}

/// A small deterministic generator (xorshift64*), so the tests need no `rand`.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Delays each input by a uniform random fraction of `jitter` (the mean rate is
/// kept; strictly periodic sources phase-lock against a periodic line otherwise).
pub fn jittered(
    items: Vec<(Instant, PortId, Input)>,
    jitter: Duration,
    seed: u64,
) -> Vec<(Instant, PortId, Input)> {
    let mut rng = Rng::new(seed);
    let mut v: Vec<_> = items
        .into_iter()
        .map(|(t, p, i)| (t + jitter.mul_f64(rng.unit()), p, i))
        .collect();
    // Cells of one VC keep their order.
    let mut times: Vec<Instant> = v.iter().map(|x| x.0).collect();
    times.sort();
    for (x, t) in v.iter_mut().zip(times) {
        x.0 = t;
    }
    v
}
