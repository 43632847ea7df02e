//! The adaptor: moves AAL5 frames on VCs (the seed's device driver and host adaptor).
//!
//! seed 000 §5.4 steps 4–5: the adaptor takes frames off the wire, drops bad ones, and
//! puts each on its VC's queue for the transport. Over UDP (the [`udp`] port) each
//! AAL5 frame is one datagram behind the 4-octet VC header of
//! [`crate::wire::vcframe`]; the UDP checksum stands in for the AAL5 CRC (step 4's
//! "drops incomplete or incorrect frames" is the kernel's), and the VC socket does the
//! per-VCI queueing of step 5.
//!
//! In *cell mode* ([`cells`]) the same port carries cell trains instead: the
//! [`CellCodec`] segments each frame into AAL5 cells on the way out and reassembles
//! them per VC on the way in, so the engine above still sees frames.
//!
//! # One socket per VC end
//! The engine gives every simplex VC end its own connected UDP socket, so that:
//! - the kernel demultiplexes by VC (the connected 4-tuple) and drops datagrams from
//!   anyone but the peer before user space sees them;
//! - the socket's receive buffer is the VC's receive queue with its limit, so excess
//!   is dropped by the kernel before any work is wasted on it (seed 000 §6.2.2: drop as
//!   early as possible, the defence against receive livelock), and counted
//!   ([`udp::UdpPort::kernel_drops`]);
//! - an application thread blocked in `recv` on a VC blocks in that socket's receive
//!   call and is woken once per arrival, like a raw UDP socket; VCs with no thread
//!   waiting are polled (the port is `AsFd`, and works in non-blocking mode).
//!
//! A listener socket (unconnected, [`udp::PortOptions::reuse_address`] on the same
//! local port) receives connection requests from any peer, with the source address.
//!
//! # Batching
//! The socket and its batches are crate `natm-udp` (re-exported here), which the
//! switch process uses too. Throughput comes from moving many frames per system call: a [`SendBatch`] of
//! equal-sized frames goes out as UDP GSO sends (one `sendmsg` per up to 64 datagrams)
//! and a [`RecvBatch`] is filled by one `recvmmsg`, each of whose buffers may carry a
//! GRO run of datagrams. Both are reusable: nothing is allocated per frame.

pub mod cells;
pub mod mem;

pub use cells::{CellCodec, CellStats};
pub use mem::{MemNetwork, MemPort, MemPortStats};
/// The socket layer (crate `natm-udp`, shared with the switch process).
pub use natm_udp::{
    batch, port as udp, Datagrams, PortOptions, PortStats, PushError, RecvBatch, SendBatch, Spans,
    UdpDrops, UdpPort, MAX_DATAGRAM,
};

// The socket layer knows no VC header; the largest datagram it takes is the one the
// wire format sizes its frames for.
const _: () = assert!(MAX_DATAGRAM == natm_proto::wire::vcframe::MAX_UDP_PAYLOAD_V4);
