//! Experiment 3 again, on real VCs (issue 34): cell-level against packet-level
//! smoothing (seed 001 §7) where the senders are a natm host's own VCs, not the lab's
//! synthetic sources. One host (cell-mode links) opens four bare CBR PVCs, each from
//! its own UDP endpoint into its own input port of a `natm switch`; the PVCs meet at
//! one output port (a FIFO, one cell per datagram, [`LINE`] cells/s), whose queue is
//! sampled as in [`super::smoothing`]. Each VC sends AAL5 frames of [`FRAME_CELLS`]
//! cells at its contract, `smooth=cell` (every cell in its own slot, from the
//! engine's cell pacer) or `smooth=frame` (a frame's cells back to back, frames
//! spaced by the contract's shaper). The lab's receiver counts cells and whole
//! frames; the switch's counters say which cells its queue dropped, and what is
//! neither delivered nor dropped there was lost on the way (socket buffers).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use natm::ulib::{Host, HostConfig, LinkMode, Wait};
use serde::{Deserialize, Serialize};

use super::lab::{counter, Lab, Port};
use super::run::{sample_queue, Spread, OUT_VCI, OUT_VPI};
use super::smoothing::{Smoothing, DEEP_BUFFER, FRAME_CELLS, LINE, LOAD, VCS};
use super::traffic;

/// The input lines: far above the load, as in [`super::run`].
const INPUT_CELLS_PER_S: u64 = 2_000_000;
/// SDU octets of a frame of [`FRAME_CELLS`] cells (the AAL5 trailer takes 8).
const SDU: usize = FRAME_CELLS * 48 - 8;
/// How often the queue is sampled, ms.
const SAMPLE_MS: u64 = 5;

/// One run.
#[derive(Debug, Clone, Copy)]
pub(super) struct HostRun {
    offered: f64,
    delivered: f64,
    lost: f64,
    queue_dropped: f64,
    good_frames: f64,
    max_queue: f64,
    mean_queue: f64,
    late: f64,
}

/// One smoothing of real VCs over runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HostSmoothingCase {
    pub(crate) smoothing: Smoothing,
    /// Each VC's buffer at the output port, cells.
    pub(crate) vc_buffer_cells: u32,
    /// Cells the host's VCs sent per second (frames sent × cells per frame).
    pub(crate) offered_cells_per_s: Spread,
    pub(crate) delivered_cells_per_s: Spread,
    /// Fraction of the cells sent that did not arrive, and of those sent the share
    /// the switch's queue dropped (the rest were lost before or after it).
    pub(crate) lost_fraction: Spread,
    pub(crate) queue_dropped_fraction: Spread,
    /// Fraction of the frames sent that arrived whole.
    pub(crate) good_frame_fraction: Spread,
    pub(crate) max_queue_cells: Spread,
    pub(crate) mean_queue_cells: Spread,
    /// Cells the pacer sent more than one slot late (`smooth=cell`), a fraction.
    pub(crate) late_fraction: Spread,
}

/// A free loopback UDP endpoint: bound, read and let go, for the PVC to bind.
fn free_endpoint() -> anyhow::Result<SocketAddr> {
    Ok(UdpSocket::bind("127.0.0.1:0")?.local_addr()?)
}

/// Runs one smoothing once on real VCs.
pub(super) fn run(smoothing: Smoothing, buffer: u32, secs: f64) -> anyhow::Result<HostRun> {
    let per_vc = (LINE as f64 * LOAD / f64::from(VCS)) as u64;
    // The PCR whose cells on the wire (`Qos::wire_cells`, which counts 40 octets of
    // overhead per frame) are `per_vc`: the pacer spaces cells at exactly that.
    let pcr_cells = natm::wire::qos::payload_cells(per_vc, SDU as u32);
    let smooth = match smoothing {
        Smoothing::Cell => "cell",
        Smoothing::Packet => "frame",
    };
    let qos = format!("cbr:pcr={pcr_cells}cps,transport=none,max_sdu={SDU},smooth={smooth}");
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    let locals = (0..VCS)
        .map(|_| free_endpoint())
        .collect::<anyhow::Result<Vec<_>>>()?;
    let names: Vec<String> = (0..VCS).map(|i| format!("in{i}")).collect();
    let mut ports: Vec<Port<'_>> = locals
        .iter()
        .zip(&names)
        .map(|(&peer, name)| Port {
            name,
            peer,
            cells_per_s: INPUT_CELLS_PER_S,
            extra: String::new(),
        })
        .collect();
    ports.push(Port {
        name: "out",
        peer: rx.local_addr()?,
        cells_per_s: LINE,
        extra: format!("scheduler = \"fifo\"\nbuffer = {DEEP_BUFFER}\ntrain = 1\n"),
    });
    let out_port = (ports.len() - 1).to_string();
    let mut pvcs = String::new();
    for i in 0..VCS {
        pvcs += &format!(
            "[[pvc]]\nfrom = \"in{i}:0.32\"\nto = \"out:{OUT_VPI}.{}\"\nbuffer = {buffer}\nframe_discard = false\n",
            OUT_VCI + i
        );
    }
    let lab = Lab::start(&ports, &pvcs, SAMPLE_MS)?;
    let mut cfg = HostConfig::default();
    cfg.engine.link_mode = LinkMode::Cell { train: 32 };
    let host = Host::open(cfg)?;
    let mut conns = Vec::new();
    for (i, &local) in locals.iter().enumerate() {
        let to = lab.port(&names[i])?;
        conns.push(host.open_pvc_from(local, 0, 32, to, qos.as_str())?);
    }
    let base = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = traffic::receive(rx, base, Some(SDU), stop.clone());
    let until = base + Duration::from_secs_f64(secs);
    let queue = std::thread::scope(|s| {
        let sampler = {
            let (lab, stop, port) = (&lab, &stop, out_port.as_str());
            s.spawn(move || sample_queue(lab, stop, Duration::from_millis(SAMPLE_MS), port))
        };
        let senders: Vec<_> = conns
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let sdu = vec![0x5a; SDU];
                    // The VC's shaper (and pacer) decide when each frame leaves; the
                    // send only waits for room in its queue.
                    while Instant::now() < until {
                        let _ = c.send(&sdu, Wait::For(Duration::from_millis(20)));
                    }
                    // What is still queued never leaves: what left is what was offered.
                    c.abort();
                })
            })
            .collect();
        for h in senders {
            let _ = h.join();
        }
        stop.store(true, Ordering::Relaxed);
        sampler.join().unwrap_or_default()
    });
    let elapsed = base.elapsed().as_secs_f64();
    let got = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the receiving host panicked"))??;
    // Cells that left each VC: its pacer's count, or its whole frames' cells.
    let (mut sent_cells, mut frames, mut late) = (0u64, 0u64, 0u64);
    for c in &conns {
        let st = c.stats();
        let sdus = st.bare.map_or(0, |b| b.tx.sdus_sent);
        frames += sdus;
        match st.pacer {
            Some(p) => {
                sent_cells += p.units_sent;
                late += p.late_units;
            }
            None => sent_cells += sdus * FRAME_CELLS as u64,
        }
    }
    drop(conns);
    let stat = lab.finish()?;
    let (mut delivered, mut good) = (0u64, 0u64);
    for i in 0..VCS {
        if let Some(g) = got.get(&(OUT_VPI, OUT_VCI + i)) {
            delivered += g.cells;
            good += g.good_frames;
        }
    }
    let dropped = counter(
        &stat,
        &[
            "ports",
            &out_port,
            "stats",
            "counters",
            "dropped",
            "queue_full",
        ],
    );
    let per = |n: u64| n as f64 / sent_cells.max(1) as f64;
    Ok(HostRun {
        offered: sent_cells as f64 / elapsed,
        delivered: delivered as f64 / elapsed,
        lost: per(sent_cells.saturating_sub(delivered)),
        queue_dropped: per(dropped),
        good_frames: good as f64 / frames.max(1) as f64,
        max_queue: counter(&stat, &["ports", &out_port, "stats", "max_queue_cells"]) as f64,
        mean_queue: if queue.is_empty() {
            f64::NAN
        } else {
            queue.iter().sum::<u64>() as f64 / queue.len() as f64
        },
        late: per(late),
    })
}

/// Medians over runs.
pub(super) fn summarize(smoothing: Smoothing, buffer: u32, r: &[HostRun]) -> HostSmoothingCase {
    HostSmoothingCase {
        smoothing,
        vc_buffer_cells: buffer,
        offered_cells_per_s: Spread::over(r, |x| x.offered),
        delivered_cells_per_s: Spread::over(r, |x| x.delivered),
        lost_fraction: Spread::over(r, |x| x.lost),
        queue_dropped_fraction: Spread::over(r, |x| x.queue_dropped),
        good_frame_fraction: Spread::over(r, |x| x.good_frames),
        max_queue_cells: Spread::over(r, |x| x.max_queue),
        mean_queue_cells: Spread::over(r, |x| x.mean_queue),
        late_fraction: Spread::over(r, |x| x.late),
    }
}
