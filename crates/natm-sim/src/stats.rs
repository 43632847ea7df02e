//! Counters kept by links and hosts.
//!
//! Invariants the tests rely on, per link (after the run has drained):
//! `frames_in = frames_out + dropped_queue_full + queue_frames (+1 while one is in
//! service)`, and `frames_out + duplicated = frames_delivered + dropped_random +
//! dropped_burst + dropped_corrupt (+ frames still propagating)`.

/// Counters for one direction of one link. Byte counts are frame bytes (what an
/// endpoint sent), except `wire_bytes_out`, which includes the link's frame overhead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames offered to the link's queue.
    pub frames_in: u64,
    /// Bytes offered to the link's queue.
    pub bytes_in: u64,
    /// Frames fully serialized onto the wire.
    pub frames_out: u64,
    /// Bytes fully serialized onto the wire.
    pub bytes_out: u64,
    /// Bytes on the wire including the per-frame overhead (padding, cell headers).
    pub wire_bytes_out: u64,
    /// Frames that reached the far end with a good CRC (duplicates included).
    pub frames_delivered: u64,
    /// Bytes that reached the far end with a good CRC.
    pub bytes_delivered: u64,
    /// Frames refused because the queue (total or the VC's share) was full: tail drop.
    pub dropped_queue_full: u64,
    /// Frames lost on the wire by independent random loss.
    pub dropped_random: u64,
    /// Frames lost on the wire by the Gilbert–Elliott burst model.
    pub dropped_burst: u64,
    /// Frames the far end dropped because the CRC check failed.
    pub dropped_corrupt: u64,
    /// Copies that had a bit flipped on the wire (injected corruption).
    pub corrupted: u64,
    /// Frames the wire delivered twice.
    pub duplicated: u64,
    /// Frames waiting in the queue now (the one being serialized is not counted).
    pub queue_frames: u64,
    /// Bytes waiting in the queue now.
    pub queue_bytes: u64,
    /// Most frames ever waiting at once.
    pub max_queue_frames: u64,
    /// Most bytes ever waiting at once.
    pub max_queue_bytes: u64,
    /// Nanoseconds of serialization, counted when each frame starts (utilisation =
    /// `busy_ns` / elapsed).
    pub busy_ns: u64,
}

impl LinkStats {
    /// All frames lost on this link, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_queue_full + self.dropped_random + self.dropped_burst + self.dropped_corrupt
    }
}

/// Counters for one VC on one link (kept under every queue discipline).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VcStats {
    /// Frames of this VC offered to the link's queue.
    pub frames_in: u64,
    /// Bytes of this VC offered to the link's queue.
    pub bytes_in: u64,
    /// Frames of this VC serialized onto the wire.
    pub frames_out: u64,
    /// Bytes of this VC serialized onto the wire.
    pub bytes_out: u64,
    /// Frames of this VC that reached the far end with a good CRC.
    pub frames_delivered: u64,
    /// Frames of this VC refused by a full queue.
    pub dropped_queue_full: u64,
    /// Frames of this VC lost on the wire (random, burst or CRC failure).
    pub dropped_wire: u64,
    /// Frames of this VC waiting now.
    pub queue_frames: u64,
    /// Bytes of this VC waiting now.
    pub queue_bytes: u64,
    /// Most frames of this VC ever waiting at once.
    pub max_queue_frames: u64,
    /// Most bytes of this VC ever waiting at once.
    pub max_queue_bytes: u64,
}

/// Counters for one host's side of the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Frames taken from `poll_transmit`.
    pub frames_sent: u64,
    /// Bytes taken from `poll_transmit`.
    pub bytes_sent: u64,
    /// Frames handed to `handle_frame`.
    pub frames_received: u64,
    /// Bytes handed to `handle_frame`.
    pub bytes_received: u64,
    /// Frames sent on a VC this host has no route for (discarded).
    pub unroutable: u64,
    /// Calls to `handle_timeout`.
    pub timeouts: u64,
}
