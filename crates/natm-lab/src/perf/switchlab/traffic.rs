//! The hosts around the lab's switch: a paced sender of cell trains and a receiver
//! that counts cells per VC, reassembles AAL5 frames (CRC-32 checked) and measures
//! each stamped cell's delay. Both threads stop at a deadline.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use natm::wire::aal5;
use natm::wire::cell::{HeaderFormat, HeaderRepr, Packet, Pti, CELL_LEN, PAYLOAD_LEN};
use natm_switchd::train::{MAX_TRAIN_CELLS, TRAIN_MAGIC};

/// What one VC sends: stamped cells (each its own one-cell frame, its payload the
/// send time) or AAL5 frames of a fixed SDU, one after the other.
pub(super) struct Source {
    vci: u16,
    /// The AAL5 PDU being sent and the offset of its next cell; `None`: stamped cells.
    frame: Option<(Vec<u8>, usize)>,
}

impl Source {
    /// Stamped cells on VPI 0, `vci`.
    pub(super) fn stamped(vci: u16) -> Source {
        Source { vci, frame: None }
    }

    /// AAL5 frames of `sdu` octets (each a different pattern) on VPI 0, `vci`.
    pub(super) fn frames(vci: u16, sdu: usize) -> Source {
        let body: Vec<u8> = (0..sdu)
            .map(|i| (i * 31 + usize::from(vci)) as u8)
            .collect();
        let pdu = aal5::encode(&body, 0).expect("the SDU fits an AAL5 frame");
        Source {
            vci,
            frame: Some((pdu, 0)),
        }
    }

    /// The next cell, stamped `now_ns` if stamped.
    fn next_cell(&mut self, now_ns: u64) -> [u8; CELL_LEN] {
        let mut c = [0u8; CELL_LEN];
        let pti = match &mut self.frame {
            None => {
                c[5..13].copy_from_slice(&now_ns.to_be_bytes());
                Pti::UserDataEnd
            }
            Some((pdu, at)) => {
                c[5..].copy_from_slice(&pdu[*at..*at + PAYLOAD_LEN]);
                *at += PAYLOAD_LEN;
                if *at == pdu.len() {
                    *at = 0;
                    Pti::UserDataEnd
                } else {
                    Pti::UserData
                }
            }
        };
        c[..5].copy_from_slice(&HeaderRepr::uni(0, self.vci, pti).to_bytes());
        c
    }
}

/// How one VC's cells are spaced: bursts of `burst` cells, one every `burst / rate`
/// seconds, the first at `phase`.
pub(super) struct Pacing {
    pub(super) cells_per_s: f64,
    pub(super) burst: usize,
    pub(super) phase: Duration,
}

/// How the sender runs.
pub(super) struct SendPlan {
    pub(super) secs: f64,
    /// Least time between two wake-ups (what is due meanwhile leaves together).
    pub(super) tick: Duration,
    /// A sender later than this behind its schedule skips ahead instead of catching
    /// up with a burst (a shaper never sends faster than its rate).
    pub(super) slack: Duration,
}

/// What the sender did.
#[derive(Debug, Clone, Default)]
pub(super) struct Sent {
    /// Cells per VC, in the order of the sources.
    pub(super) cells: Vec<u64>,
    pub(super) datagrams: u64,
    /// Most cells in one datagram.
    pub(super) max_train: usize,
    pub(super) elapsed_s: f64,
}

/// Sends each source's cells paced as its [`Pacing`] says, to `to`, until the plan's
/// time is up; cells due at one wake-up leave in one train (several if more than a
/// train holds).
pub(super) fn send(
    sock: &UdpSocket,
    to: SocketAddr,
    base: Instant,
    mut vcs: Vec<(Source, Pacing)>,
    plan: &SendPlan,
) -> Sent {
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(plan.secs);
    let mut due: Vec<Instant> = vcs.iter().map(|(_, p)| start + p.phase).collect();
    let mut sent = Sent {
        cells: vec![0; vcs.len()],
        ..Sent::default()
    };
    let mut train = Vec::with_capacity(1 + MAX_TRAIN_CELLS * CELL_LEN);
    let mut cells_in_train = 0usize;
    let flush = |train: &mut Vec<u8>, n: &mut usize, sent: &mut Sent| {
        if *n > 0 {
            // A full socket buffer loses the datagram, as a line would.
            let _ = sock.send_to(train, to);
            sent.datagrams += 1;
            sent.max_train = sent.max_train.max(*n);
        }
        train.clear();
        train.push(TRAIN_MAGIC);
        *n = 0;
    };
    train.push(TRAIN_MAGIC);
    let mut woke = start;
    loop {
        let next = due
            .iter()
            .min()
            .copied()
            .unwrap_or(end)
            .max(woke + plan.tick);
        if next >= end {
            break;
        }
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        let now = Instant::now();
        woke = now;
        let now_ns = now.duration_since(base).as_nanos() as u64;
        for at in &mut due {
            if *at + plan.slack < now {
                *at = now;
            }
        }
        // Bursts in the order of their due times, so the VCs' cells interleave.
        while let Some(i) = (0..due.len())
            .filter(|&i| due[i] <= now)
            .min_by_key(|&i| due[i])
        {
            let (src, pace) = &mut vcs[i];
            for _ in 0..pace.burst {
                train.extend_from_slice(&src.next_cell(now_ns));
                cells_in_train += 1;
                sent.cells[i] += 1;
                if cells_in_train == MAX_TRAIN_CELLS {
                    flush(&mut train, &mut cells_in_train, &mut sent);
                }
            }
            due[i] += Duration::from_secs_f64(pace.burst as f64 / pace.cells_per_s);
        }
        flush(&mut train, &mut cells_in_train, &mut sent);
    }
    sent.elapsed_s = start.elapsed().as_secs_f64();
    sent
}

/// What arrived on one VC.
#[derive(Debug, Clone, Default)]
pub(super) struct VcReceived {
    pub(super) cells: u64,
    /// Cells tagged (CLP = 1) on the way.
    pub(super) tagged: u64,
    /// AAL5 frames whose length and CRC-32 were right.
    pub(super) good_frames: u64,
    /// AAL5 frames that ended but were broken (cells lost, frames merged).
    pub(super) bad_frames: u64,
    /// Delay of each stamped cell, nanoseconds.
    pub(super) delays_ns: Vec<u64>,
    /// The frame being reassembled.
    pdu: Vec<u8>,
}

impl VcReceived {
    fn take(&mut self, h: &HeaderRepr, payload: &[u8], now_ns: u64, sdu: Option<usize>) {
        self.cells += 1;
        self.tagged += u64::from(h.clp);
        let Some(sdu) = sdu else {
            let sent = u64::from_be_bytes(payload[..8].try_into().expect("8 octets"));
            self.delays_ns.push(now_ns.saturating_sub(sent));
            return;
        };
        self.pdu.extend_from_slice(payload);
        if !h.pti.is_end_of_sdu() {
            // A frame longer than any we send has lost its end: it will fail anyway.
            if self.pdu.len() > aal5::MAX_SDU_LEN + PAYLOAD_LEN * 2 {
                self.pdu.clear();
                self.bad_frames += 1;
            }
            return;
        }
        let good = aal5::Aal5Pdu::new_checked(&self.pdu[..])
            .and_then(|p| aal5::Aal5Repr::parse(&p, sdu))
            .is_ok_and(|r| r.sdu_len == sdu);
        if good {
            self.good_frames += 1;
        } else {
            self.bad_frames += 1;
        }
        self.pdu.clear();
    }
}

/// What the receiver saw, per (VPI, VCI).
pub(super) type Received = HashMap<(u16, u16), VcReceived>;

/// A receiving host on `sock`: runs until `stop` is set and the socket has been
/// quiet for 300 ms (the switch's queues drained), or 3 s after `stop` at most.
/// `sdu`: the SDU octets of the AAL5 frames sent, or `None` for stamped cells.
pub(super) fn receive(
    sock: UdpSocket,
    base: Instant,
    sdu: Option<usize>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<anyhow::Result<Received>> {
    std::thread::spawn(move || {
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let mut got = Received::new();
        let mut buf = vec![0u8; 65_536];
        let mut quiet_since = Instant::now();
        let mut stopped: Option<Instant> = None;
        loop {
            match sock.recv(&mut buf) {
                Ok(n) if n > 1 && buf[0] == TRAIN_MAGIC && (n - 1) % CELL_LEN == 0 => {
                    let now = Instant::now();
                    quiet_since = now;
                    let now_ns = now.duration_since(base).as_nanos() as u64;
                    for c in buf[1..n].chunks_exact(CELL_LEN) {
                        let Ok(h) = HeaderRepr::parse(&Packet::new_unchecked(c), HeaderFormat::Uni)
                        else {
                            continue;
                        };
                        got.entry((h.vpi, h.vci))
                            .or_default()
                            .take(&h, &c[5..], now_ns, sdu);
                    }
                }
                _ => {}
            }
            let now = Instant::now();
            if stopped.is_none() && stop.load(Ordering::Relaxed) {
                stopped = Some(now);
            }
            if let Some(t) = stopped {
                let drained = now.duration_since(quiet_since) > Duration::from_millis(300)
                    && now.duration_since(t) > Duration::from_millis(100);
                if drained || now.duration_since(t) > Duration::from_secs(3) {
                    break;
                }
            }
        }
        Ok(got)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds cells to a receiving VC as the receiver does.
    fn feed(rx: &mut VcReceived, cells: &[[u8; CELL_LEN]], sdu: usize) {
        for c in cells {
            let h = HeaderRepr::parse(&Packet::new_unchecked(&c[..]), HeaderFormat::Uni).unwrap();
            rx.take(&h, &c[5..], 0, Some(sdu));
        }
    }

    #[test]
    fn frames_reassemble_whole_and_a_lost_cell_breaks_one() {
        let mut src = Source::frames(32, 952);
        let cells: Vec<_> = (0..40).map(|_| src.next_cell(0)).collect();
        let ends = cells
            .iter()
            .filter(|c| Pti::from_bits(c[3] >> 1).is_end_of_sdu())
            .count();
        assert_eq!(ends, 2, "two 20-cell frames");
        let mut rx = VcReceived::default();
        feed(&mut rx, &cells, 952);
        assert_eq!((rx.good_frames, rx.bad_frames), (2, 0));
        // The first frame loses a middle cell, the second its end (merged with the next).
        let mut lossy = cells.clone();
        lossy.remove(7);
        lossy.remove(38);
        lossy.extend_from_slice(&cells[..20]);
        let mut rx = VcReceived::default();
        feed(&mut rx, &lossy, 952);
        assert_eq!((rx.good_frames, rx.bad_frames), (0, 2));
        assert_eq!(rx.cells, 58);
    }

    #[test]
    fn stamped_cells_give_their_delay() {
        let mut src = Source::stamped(40);
        let c = src.next_cell(1_000);
        let h = HeaderRepr::parse(&Packet::new_unchecked(&c[..]), HeaderFormat::Uni).unwrap();
        let mut rx = VcReceived::default();
        rx.take(&h, &c[5..], 4_500, None);
        assert_eq!(rx.delays_ns, [3_500]);
    }
}
