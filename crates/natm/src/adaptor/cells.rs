//! The cell adaptor: a UDP port in *cell mode* (issue 13), beside the frame mode of
//! [`super::udp`].
//!
//! The engine above still hands over and takes whole frames (the VC header of
//! `wire::vcframe` and a TPDU); this codec sits between it and the socket. Sending,
//! each frame is cut into the 53-octet cells of its AAL5 CPCS-PDU (I.363.5) and the
//! cells are packed into cell trains of at most N cells (`wire::train`: every train
//! but the last full, so one UDP GSO send carries them). Receiving, every train's
//! cells go through the I.432.1 header check (single-bit errors corrected) and per-VC
//! reassembly (`wire::sar`: CRC-32 and Length checked, bounded memory), and each
//! frame completed is laid out as a frame-mode datagram for the engine.
//!
//! Only data and signalling frames have a cell form; OAM probes are refused
//! (counted in [`CellStats::unsendable`]). A datagram that is not a cell train — a
//! frame-mode peer, since both ends of a link must use the same mode — is counted in
//! [`CellStats::malformed`] and dropped.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use natm_proto::wire::cell::{HeaderFormat, CELL_LEN};
use natm_proto::wire::sar::{CellReassembly, ReassemblyLimits, SarCounters, SarError};
use natm_proto::wire::train::{self, TrainPacker};
use natm_proto::wire::vcframe;

use super::batch::{RecvBatch, SendBatch};
use super::udp::GRO_SLOT_LEN;
use crate::sync::{Level, OrderedMutex};

/// Frames reassembled but not yet handed over, past which more are dropped (a
/// receive call's batch is full and the caller has not come back).
const MAX_PENDING: usize = 256;

/// What a cell link did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CellStats {
    /// Cell trains received.
    pub trains_in: u64,
    /// Datagrams that were not cell trains (e.g. from a frame-mode peer).
    pub malformed: u64,
    /// Frames that have no cell form (OAM probes, empty or unreadable frames).
    pub unsendable: u64,
    /// Frames dropped because the caller left too many waiting.
    pub pending_dropped: u64,
    /// The reassembly's counters: cells, frames, HEC, bad frames, timeouts.
    pub sar: SarCounters,
}

#[derive(Debug)]
struct Rx {
    scratch: RecvBatch,
    reassembly: CellReassembly<SocketAddr>,
    pending: VecDeque<(SocketAddr, Vec<u8>)>,
    trains_in: u64,
    malformed: u64,
    pending_dropped: u64,
}

/// The cell mode's codec for one port: a train packer for sends, a reassembly for
/// receives.
#[derive(Debug)]
pub struct CellCodec {
    /// An empty packer of this link's train size, cloned when no spare is free.
    template: TrainPacker,
    /// A packer to reuse: a send takes it and puts it back, so that concurrent
    /// senders (a connection's data and its ACKs) never wait for each other.
    spare: OrderedMutex<Option<TrainPacker>>,
    unsendable: AtomicU64,
    rx: OrderedMutex<Rx>,
    /// Frames reassembled on a frame-mode link and left for the next receive
    /// ([`CellCodec::sort_trains`]); read without the lock.
    waiting: AtomicU64,
}

/// Reassembly limits of a frame-mode link's codec ([`CellCodec::for_frame_link`]):
/// its peer sends trains only for frames that no longer fit the path, one VC's at a
/// time, so a few VCs and a short timeout bound what a stray or forged cell can hold
/// (at most 16 partial frames of 64 KiB per link).
const FRAME_LINK_LIMITS: ReassemblyLimits = ReassemblyLimits {
    max_sdu: vcframe::MAX_SDU_LEN,
    max_vcs: 16,
    timeout: Some(Duration::from_secs(2)),
};

/// Time on the process's monotonic clock since its first use, for the reassembly
/// timeout.
fn now() -> Duration {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    EPOCH.get_or_init(std::time::Instant::now).elapsed()
}

/// Each frame the cells of one train complete, as its VC header and SDU (cell and
/// frame errors are counted by the reassembly; the frame is gone).
fn frames_of(
    reassembly: &mut CellReassembly<SocketAddr>,
    now: Duration,
    from: SocketAddr,
    cells: core::slice::ChunksExact<'_, u8>,
    mut each: impl FnMut(&[u8], &[u8]),
) {
    for c in cells {
        let Ok(mut cell) = <[u8; CELL_LEN]>::try_from(c) else {
            continue;
        };
        let Ok(Some(f)) = reassembly.push(now, from, &mut cell) else {
            continue;
        };
        let Some(h) = f.vc_header() else { continue };
        each(&h.to_bytes(), f.sdu);
    }
}

/// Move the frames left waiting into `batch` (empty) while they fit; one larger than
/// a whole batch can never be handed over and is dropped.
fn hand_over_waiting(
    pending: &mut VecDeque<(SocketAddr, Vec<u8>)>,
    pending_dropped: &mut u64,
    batch: &mut RecvBatch,
) {
    while let Some((from, frame)) = pending.front() {
        if !batch.push_packed(*from, &[frame]) {
            if !batch.is_empty() {
                break;
            }
            *pending_dropped += 1;
        }
        pending.pop_front();
    }
}

impl CellCodec {
    /// A codec sending trains of at most `train` cells (1..=1,235).
    pub fn new(train: usize) -> Result<CellCodec, SarError> {
        CellCodec::build(
            train,
            RecvBatch::new(1, GRO_SLOT_LEN),
            ReassemblyLimits::default(),
        )
    }

    /// The codec of a frame-mode link (issue 30): it sends as trains only the frames
    /// cut before the path shrank (trains as long as the path allows, given per
    /// send), and takes the trains its peer sent so among the frames it receives
    /// ([`CellCodec::sort_trains`]). No scratch batch: the link's own receive reads.
    pub fn for_frame_link() -> CellCodec {
        CellCodec::build(
            train::MAX_TRAIN_CELLS,
            RecvBatch::new(1, 1),
            FRAME_LINK_LIMITS,
        )
        .expect("the longest train is a valid train size")
    }

    fn build(
        train: usize,
        scratch: RecvBatch,
        limits: ReassemblyLimits,
    ) -> Result<CellCodec, SarError> {
        Ok(CellCodec {
            template: TrainPacker::new(train)?,
            spare: OrderedMutex::new(Level::Leaf, None),
            unsendable: AtomicU64::new(0),
            rx: OrderedMutex::new(
                Level::Leaf,
                Rx {
                    scratch,
                    reassembly: CellReassembly::new(HeaderFormat::Uni, limits),
                    pending: VecDeque::new(),
                    trains_in: 0,
                    malformed: 0,
                    pending_dropped: 0,
                },
            ),
            waiting: AtomicU64::new(0),
        })
    }

    /// Whether `batch` holds a cell train among its datagrams.
    pub fn has_train(batch: &RecvBatch) -> bool {
        batch
            .iter()
            .any(|(_, d)| d.first() == Some(&train::TRAIN_MAGIC))
    }

    /// A frame-mode link's batch that holds cell trains ([`CellCodec::has_train`]):
    /// their cells are reassembled per VC and `batch` is laid out again with the
    /// other datagrams as they came and each frame the cells completed, in arrival
    /// order (arrival stamps are dropped; a datagram that starts as a train and is
    /// not one is counted malformed and dropped). What no longer fits the batch waits for
    /// [`CellCodec::take_waiting`]. Returns the datagrams in `batch` now.
    pub fn sort_trains(&self, batch: &mut RecvBatch) -> usize {
        let mut rx = self.rx.lock();
        let Rx {
            reassembly,
            pending,
            trains_in,
            malformed,
            pending_dropped,
            ..
        } = &mut *rx;
        let now = now();
        let mut out: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        for (from, datagram) in batch.iter() {
            let cells = match train::parse(datagram) {
                Ok(cells) => cells,
                Err(train::TrainError::Magic(_)) => {
                    out.push((from, datagram.to_vec()));
                    continue;
                }
                Err(train::TrainError::Length(_)) => {
                    *malformed += 1;
                    continue;
                }
            };
            *trains_in += 1;
            frames_of(reassembly, now, from, cells, |h, sdu| {
                out.push((from, [h, sdu].concat()));
            });
        }
        batch.clear();
        for (from, frame) in out {
            if pending.is_empty() && batch.push_packed(from, &[&frame]) {
                continue;
            }
            if pending.len() < MAX_PENDING {
                pending.push_back((from, frame));
            } else {
                *pending_dropped += 1;
            }
        }
        self.waiting.store(pending.len() as u64, Ordering::Release);
        if !pending.is_empty() {
            batch.set_more();
        }
        batch.len()
    }

    /// The frames [`CellCodec::sort_trains`] left waiting, into `batch` (cleared
    /// first); 0 when none wait (the caller then reads its socket).
    pub fn take_waiting(&self, batch: &mut RecvBatch) -> usize {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return 0;
        }
        batch.clear();
        let mut rx = self.rx.lock();
        let Rx {
            pending,
            pending_dropped,
            ..
        } = &mut *rx;
        hand_over_waiting(pending, pending_dropped, batch);
        self.waiting.store(pending.len() as u64, Ordering::Release);
        batch.set_more();
        batch.len()
    }

    /// Cuts every frame of `batch` into cells, packs them into trains and hands the
    /// trains to `send` (the bytes and the train size, as `UdpPort::send` takes them;
    /// it returns the trains sent). Returns the frames sent: all of them if every
    /// train went, else the share that did.
    ///
    /// `fit`, the largest datagram the path carries unfragmented, shortens the trains
    /// below the link's train size where they would not fit (issue 30: a 32-cell
    /// train is 1,697 octets, over a 1,500-octet Ethernet MTU).
    pub fn send(
        &self,
        batch: &SendBatch,
        fit: Option<usize>,
        send: impl FnOnce(&[u8], usize, usize) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let cells = match fit {
            Some(n) => (n.saturating_sub(train::train_len(0)) / natm_proto::wire::cell::CELL_LEN)
                .clamp(1, self.template.max_cells()),
            None => self.template.max_cells(),
        };
        let taken = self.spare.lock().take();
        let mut packer = match taken {
            Some(p) if p.max_cells() == cells => p,
            _ if cells == self.template.max_cells() => self.template.clone(),
            _ => TrainPacker::new(cells)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
        };
        packer.clear();
        for frame in batch.frames() {
            let packed = vcframe::Repr::parse_bytes(frame)
                .map_err(|_| ())
                .and_then(|(h, sdu)| packer.push_frame(&h, sdu).map_err(|_| ()));
            if packed.is_err() {
                self.unsendable.fetch_add(1, Ordering::Relaxed);
            }
        }
        let trains = packer.trains();
        let sent = if packer.is_empty() {
            Ok(0)
        } else {
            send(packer.as_bytes(), packer.train_len(), trains)
        };
        *self.spare.lock() = Some(packer);
        let sent = sent?;
        Ok(if sent >= trains {
            batch.len()
        } else {
            batch.len() * sent / trains
        })
    }

    /// Fills `batch` (cleared first) with the frames the link has completed: those
    /// left from the last call first, else what `read` (the port's receive into the
    /// scratch batch) brings. Errors are `read`'s. The batch is marked
    /// ([`RecvBatch::set_more`]) whenever the port may hold more: cells of a frame
    /// not yet complete are often still in the socket.
    pub fn recv(
        &self,
        batch: &mut RecvBatch,
        read: impl FnOnce(&mut RecvBatch) -> io::Result<usize>,
    ) -> io::Result<usize> {
        batch.clear();
        let mut rx = self.rx.lock();
        let Rx {
            scratch,
            reassembly,
            pending,
            trains_in,
            malformed,
            pending_dropped,
        } = &mut *rx;
        hand_over_waiting(pending, pending_dropped, batch);
        if !batch.is_empty() {
            batch.set_more();
            return Ok(batch.len());
        }
        read(scratch)?;
        batch.set_more();
        let now = now();
        for (from, datagram) in scratch.iter() {
            let Ok(cells) = train::parse(datagram) else {
                *malformed += 1;
                continue;
            };
            *trains_in += 1;
            frames_of(reassembly, now, from, cells, |h, sdu| {
                if !batch.push_packed(from, &[h, sdu]) {
                    if pending.len() < MAX_PENDING {
                        pending.push_back((from, [h, sdu].concat()));
                    } else {
                        *pending_dropped += 1;
                    }
                }
            });
        }
        Ok(batch.len())
    }

    /// The counters so far.
    pub fn stats(&self) -> CellStats {
        let unsendable = self.unsendable.load(Ordering::Relaxed);
        let rx = self.rx.lock();
        CellStats {
            trains_in: rx.trains_in,
            malformed: rx.malformed,
            unsendable,
            pending_dropped: rx.pending_dropped,
            sar: rx.reassembly.counters(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_go_through_trains_and_back() {
        let codec = CellCodec::new(4).unwrap();
        let mut batch = SendBatch::new();
        let tpdu = vec![7u8; 500];
        for vci in [40u16, 41] {
            let h = vcframe::Repr::data(0, vci).to_bytes();
            batch.push(&[&h, &tpdu]).unwrap();
        }
        let mut wire: Vec<(Vec<u8>, usize)> = Vec::new();
        let sent = codec
            .send(&batch, None, |bytes, seg, trains| {
                wire.push((bytes.to_vec(), seg));
                Ok(trains)
            })
            .unwrap();
        assert_eq!(sent, 2);
        // 500 octets take 11 cells; 22 cells in trains of 4: 6 datagrams.
        let (bytes, seg) = &wire[0];
        assert_eq!(*seg, train::train_len(4));
        assert_eq!(bytes.chunks(*seg).count(), 6);

        let from: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut out = RecvBatch::new(1, GRO_SLOT_LEN);
        codec
            .recv(&mut out, |scratch| {
                scratch.clear();
                for t in bytes.chunks(*seg) {
                    assert!(scratch.push_packed(from, &[t]));
                }
                Ok(scratch.len())
            })
            .unwrap();
        let frames: Vec<&[u8]> = out.iter().map(|(_, d)| d).collect();
        assert_eq!(frames.len(), 2);
        for (f, vci) in frames.iter().zip([40u16, 41]) {
            let (h, sdu) = vcframe::Repr::parse_bytes(f).unwrap();
            assert_eq!((h.vci, sdu), (vci, &tpdu[..]));
        }
        assert!(out.marked_more());
        // A frame-mode datagram is not a train: counted, dropped.
        codec
            .recv(&mut out, |scratch| {
                scratch.clear();
                scratch.push(from, &vcframe::Repr::data(0, 40).to_bytes());
                Ok(1)
            })
            .unwrap();
        assert!(out.is_empty());
        let s = codec.stats();
        assert_eq!((s.trains_in, s.malformed, s.sar.frames), (6, 1, 2));
    }

    #[test]
    fn a_frame_link_takes_trains_among_its_frames_in_arrival_order() {
        let codec = CellCodec::for_frame_link();
        let from: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let frame = |vci: u16, len: usize, fill: u8| {
            let mut f = vcframe::Repr::data(0, vci).to_bytes().to_vec();
            f.resize(vcframe::HEADER_LEN + len, fill);
            f
        };
        let (a, big, b) = (frame(40, 200, 1), frame(40, 3_000, 2), frame(40, 200, 3));
        let mut one = SendBatch::new();
        one.push(&[&big]).unwrap();
        let mut trains = Vec::new();
        codec
            .send(&one, Some(1_200), |bytes, seg, n| {
                trains.extend(bytes.chunks(seg).map(<[u8]>::to_vec));
                Ok(n)
            })
            .unwrap();
        assert_eq!(trains.len(), 3, "63 cells in trains of 22");
        let arrive = |slot: usize, datagrams: &[&[u8]]| {
            let mut batch = RecvBatch::new(1, slot);
            for d in datagrams {
                assert!(batch.push_packed(from, &[d]));
            }
            batch
        };
        let junk = [train::TRAIN_MAGIC, 0, 0];
        let all = [&a[..], &trains[0], &junk, &trains[1], &trains[2], &b];
        let mut batch = arrive(8_192, &all);
        assert!(CellCodec::has_train(&batch));
        assert_eq!(codec.sort_trains(&mut batch), 3);
        let got: Vec<&[u8]> = batch.iter().map(|(_, d)| d).collect();
        assert_eq!(got, [&a[..], &big[..], &b[..]]);
        assert!(!CellCodec::has_train(&batch));
        assert_eq!(codec.take_waiting(&mut batch), 0, "nothing left");
        // A frame's cells over two receives, the second's area too small for the
        // frame they complete and the one after it: that one waits.
        let mut batch = arrive(3_100, &all[..3]);
        assert_eq!(
            codec.sort_trains(&mut batch),
            1,
            "a alone; the frame is partial"
        );
        let mut batch = arrive(3_100, &all[3..]);
        assert_eq!(codec.sort_trains(&mut batch), 1);
        assert_eq!(batch.iter().next().map(|(_, d)| d), Some(&big[..]));
        assert!(batch.marked_more());
        assert_eq!(codec.take_waiting(&mut batch), 1);
        assert_eq!(batch.iter().next().map(|(_, d)| d), Some(&b[..]));
        assert_eq!(codec.take_waiting(&mut batch), 0);
        let s = codec.stats();
        assert_eq!((s.trains_in, s.malformed, s.sar.frames), (6, 2, 2));
    }
}
