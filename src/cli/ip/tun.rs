//! `natm ip`'s TUN interface, with the kernel's offloads where it has them (issue 30):
//! virtio-net headers on the device, so the kernel's TCP hands over segments of up to
//! 64 KiB (TSO), which are cut here into packets of the interface MTU, one read for
//! many packets; and packets that arrive together on a VC go back to the kernel
//! coalesced (GRO), one write and one pass of its stack for many. The wire is what it
//! was: every packet on a VC is at most the MTU agreed for it (RFC 2225, RFC 2684).
//! The segmentation and coalescing are tun-rs's (after wireguard-go's).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use anyhow::Context;
use tun_rs::{DeviceBuilder, GROTable, SyncDevice, IDEAL_BATCH_SIZE, VIRTIO_NET_HDR_LEN};

use super::IpConfig;

/// A virtio-net header's GSO type for a packet that is not a segment of several.
const GSO_NONE: u8 = 0;

/// The largest packet a TUN read returns, header included.
const MAX_READ: usize = VIRTIO_NET_HDR_LEN + 65_535;

/// A written packet's buffer: the largest segment GRO makes of it, and the room
/// tun-rs asks for around it.
const SEGMENT_ROOM: usize = 2 * VIRTIO_NET_HDR_LEN + 65_535;

/// The interface.
pub(super) struct Tun {
    dev: SyncDevice,
    offload: bool,
    out: Mutex<Batch>,
    /// What the kernel handed over that could not be cut into packets (a GSO
    /// segment of a kind or shape the splitter refuses): dropped, as a device drops
    /// a bad frame.
    malformed: AtomicU64,
    counts: Counts,
}

/// Reads of the device against the packets they carried (fewer reads than packets
/// is TSO at work), and packets written with the segments GRO made of them.
#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    packets_read: AtomicU64,
    packets_written: AtomicU64,
    /// Batches the written packets came in (with offloads, what GRO could coalesce).
    batches_written: AtomicU64,
    /// Writes of several packets coalesced into one segment.
    segments_written: AtomicU64,
}

/// Packets for the kernel, written together.
struct Batch {
    gro: GROTable,
    /// Each packet behind [`VIRTIO_NET_HDR_LEN`] bytes for its virtio-net header.
    packets: Vec<Vec<u8>>,
    /// Buffers of packets written, for the next ones.
    spare: Vec<Vec<u8>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Tun {
    /// Creates the interface `cfg` names, with offloads if `cfg.offload` and the
    /// kernel grants them, else without (said once on stderr).
    pub(super) fn open(cfg: &IpConfig) -> anyhow::Result<Tun> {
        let build = |offload: bool| {
            let mut b = DeviceBuilder::new()
                .name(cfg.name.clone())
                .mtu(u16::try_from(cfg.node.mtu).unwrap_or(u16::MAX))
                .offload(offload);
            if let Some((a, p)) = cfg.ipv4 {
                b = b.ipv4(a, p, None);
            }
            if let Some((a, p)) = cfg.ipv6 {
                b = b.ipv6(a, p);
            }
            b.build_sync()
        };
        let opened = if cfg.offload {
            build(true).map(|d| (d, true)).or_else(|e| {
                tracing::warn!(
                    "TUN offloads refused ({e}): reading and writing {} a packet at a time",
                    cfg.name
                );
                build(false).map(|d| (d, false))
            })
        } else {
            build(false).map(|d| (d, false))
        };
        let (dev, offload) = opened.with_context(|| {
            format!(
                "cannot create TUN interface {} (needs root or CAP_NET_ADMIN, and /dev/net/tun)",
                cfg.name
            )
        })?;
        Ok(Tun {
            dev,
            offload,
            out: Mutex::new(Batch {
                gro: GROTable::default(),
                packets: Vec::with_capacity(IDEAL_BATCH_SIZE),
                spare: Vec::new(),
            }),
            malformed: AtomicU64::new(0),
            counts: Counts::default(),
        })
    }

    /// Whether the kernel's offloads are on.
    pub(super) fn offload(&self) -> bool {
        self.offload
    }

    /// The device's counters, for `--report`: offloads, reads and writes against
    /// the packets they carried, and what could not be cut into packets.
    pub(super) fn report(&self) -> String {
        let c = &self.counts;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "tun offloads {}: {} reads for {} packets, {} malformed; {} packets written in {} batches, {} coalesced segments",
            if self.offload { "on" } else { "off" },
            n(&c.reads),
            n(&c.packets_read),
            n(&self.malformed),
            n(&c.packets_written),
            n(&c.batches_written),
            n(&c.segments_written),
        )
    }

    /// A reader of the interface for one thread, with its buffers.
    pub(super) fn reader(&self, mtu: u32) -> Reader<'_> {
        let (n, each) = if self.offload {
            (IDEAL_BATCH_SIZE, usize::try_from(mtu).unwrap_or(MAX_READ))
        } else {
            (1, MAX_READ)
        };
        let mut bufs = vec![vec![0u8; each]; n];
        // A packet the kernel did not segment may be as large as a read.
        bufs[0].resize(MAX_READ, 0);
        Reader {
            tun: self,
            whole: vec![0u8; if self.offload { MAX_READ } else { 0 }],
            bufs,
            sizes: vec![0; n],
        }
    }

    /// Queues `packet` for the kernel: written by the next [`Tun::flush`], or now if
    /// the batch is full.
    pub(super) fn queue(&self, packet: &[u8]) {
        let mut out = lock(&self.out);
        if out.packets.len() >= IDEAL_BATCH_SIZE {
            self.write_batch(&mut out);
        }
        // Room for what GRO may append to it: it coalesces only into a packet whose
        // buffer holds the whole segment already (tun-rs does not reallocate).
        let mut buf = out
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(if self.offload { SEGMENT_ROOM } else { 0 }));
        buf.clear();
        buf.resize(VIRTIO_NET_HDR_LEN, 0);
        buf.extend_from_slice(packet);
        out.packets.push(buf);
    }

    /// Writes what is queued, packets of one TCP flow coalesced where they follow
    /// each other (with offloads on).
    pub(super) fn flush(&self) {
        let mut out = lock(&self.out);
        if !out.packets.is_empty() {
            self.write_batch(&mut out);
        }
    }

    /// Writes `packet` now, with whatever was queued before it.
    pub(super) fn write(&self, packet: &[u8]) {
        self.queue(packet);
        self.flush();
    }

    fn write_batch(&self, out: &mut Batch) {
        let Batch {
            gro,
            packets,
            spare,
        } = out;
        // A packet the kernel refuses is lost as on a device (the sender's
        // transport recovers it); the others are written all the same.
        let _ = self.dev.send_multiple(gro, packets, VIRTIO_NET_HDR_LEN);
        let c = &self.counts;
        c.packets_written
            .fetch_add(packets.len() as u64, Ordering::Relaxed);
        c.batches_written.fetch_add(1, Ordering::Relaxed);
        if self.offload {
            // GRO wrote a GSO type (the header's second octet) into each packet that
            // now heads a segment of several; the header of every other packet is
            // as `queue` left it, zero.
            let heads = packets.iter().filter(|p| p[1] != GSO_NONE).count();
            c.segments_written
                .fetch_add(heads as u64, Ordering::Relaxed);
        }
        spare.extend(packets.drain(..).filter(|b| b.capacity() <= SEGMENT_ROOM));
        spare.truncate(IDEAL_BATCH_SIZE);
    }
}

/// One thread's reads of the interface.
pub(super) struct Reader<'a> {
    tun: &'a Tun,
    /// What one read returns, virtio-net header first (offloads on).
    whole: Vec<u8>,
    bufs: Vec<Vec<u8>>,
    sizes: Vec<usize>,
}

impl Reader<'_> {
    /// Waits for the kernel's next packet, or segment of many, and returns the
    /// packets it holds, each at most the MTU. A segment the splitter refuses is
    /// counted ([`Tun::malformed`]) and gives none; an error is the device's.
    pub(super) fn read(&mut self) -> io::Result<impl Iterator<Item = &[u8]>> {
        let n =
            match self
                .tun
                .dev
                .recv_multiple(&mut self.whole, &mut self.bufs, &mut self.sizes, 0)
            {
                Ok(n) => n,
                Err(e) if e.raw_os_error().is_some() => return Err(e),
                Err(e) => {
                    tracing::debug!("a TUN read not cut into packets: {e}");
                    self.tun.malformed.fetch_add(1, Ordering::Relaxed);
                    0
                }
            };
        let c = &self.tun.counts;
        c.reads.fetch_add(1, Ordering::Relaxed);
        c.packets_read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(self.bufs[..n]
            .iter()
            .zip(&self.sizes)
            .map(|(b, &len)| &b[..len]))
    }
}
