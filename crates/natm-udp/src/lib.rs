//! natm's UDP adaptor: the socket layer under both the host engine (crate `natm`)
//! and the switch process (crate `natm-switchd`), as quinn-udp is under quinn.
//!
//! seed 000 §5.4 steps 4–5: the adaptor takes frames off the wire, drops bad ones, and
//! puts each on its VC's queue. Over UDP each AAL5 frame (or cell train) is one
//! datagram; this crate moves datagrams in batches and knows nothing of what they
//! carry:
//! - [`UdpPort`]: one UDP socket; sends go out as one UDP GSO `sendmsg` per run of
//!   equal-sized datagrams (or gathered from separate buffers), receives take a
//!   `recvmmsg` of buffers each of which may hold a GRO run, with the kernel's
//!   receive stamps; DF and the path MTU for packetization-layer PMTU discovery;
//! - [`SendBatch`] and [`RecvBatch`]: reusable batches, nothing allocated per
//!   datagram;
//! - [`areas`]: the area a receive filled lent on as one `Bytes`, so that each
//!   datagram's payload travels on as a slice of it, not a copy, with the memory it
//!   pins bounded;
//! - [`UdpDrops`]: the kernel's per-socket drop counts (`/proc/net/udp`).
//!
//! Locks here are leaves: each is held only to copy a value in or out, never while
//! another lock is taken, so they stay out of `natm::sync`'s checked order.

pub mod areas;
pub mod batch;
pub mod port;
mod proc_net;

pub use areas::{AreaAccount, AreaPool};
pub use batch::{
    stamp_age, wall_clock, Datagrams, PushError, RecvBatch, SendBatch, Spans, StampedSpans,
    MAX_DATAGRAM,
};
pub use port::{IcmpError, PortOptions, PortStats, UdpPort, VcReceive, GRO_SLOT_LEN};
pub use proc_net::UdpDrops;

/// Whether `e` is the kernel refusing a datagram as larger than the path MTU (with DF
/// set) or than a GSO send may be.
pub fn is_msg_size_err(e: &std::io::Error) -> bool {
    quinn_udp::is_msg_size_err(e)
}
