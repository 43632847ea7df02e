//! The data plane of an ATM switch, sans-IO (issue 13): the part of `natm switch`
//! that moves cells and frames, with no sockets, threads or clock reads. Time is an
//! argument and output is pulled, as in quinn-proto and `natm_proto::transport::Psb`.
//!
//! * [`table`]: ports and the cross-connect table (VC and VP switching, I.311);
//! * [`upc`]: the traffic contract and its GCRA policer (specs.md §3, I.371);
//! * `queue`: per-VC output queues bounded in cells;
//! * [`sched`]: the port schedulers `fifo`, `rr` (seed 000 §5.3.3) and `wrr`;
//! * `discard`: early and partial packet discard for AAL5 VCs;
//! * [`oam`]: OAM F5 loopback (I.610);
//! * [`abr`]: ABR explicit-rate marking (ERICA, TM 4.0) per output port, and `efci`:
//!   EFCI marking of data above a queue threshold;
//! * [`stats`]: counters per port and per VC;
//! * [`Switch`] (`fabric`) ties them together, and terminates the control plane's own
//!   VCs (signalling on VPI 0/VCI 5): `terminate`, `poll_local`, `send`.
//!   A VC may have several branches (`add_branch`): point-to-multipoint, each cell
//!   or frame of its input copied to every branch.
//!
//! * [`routing`]: PNNI-like routing between switches (hellos, flooded topology, paths).
//! * [`control`]: the control plane — the network side of UNI signalling on each
//!   port, routing by address prefix, admission, VCIs, cross-connects per call.
//!
//! Not here: sockets and the `natm switch` process. A port's [`PortUnit`] says what
//! its line carries: a VC from a frame port to a cell port has its frames segmented
//! into AAL5 cells, one from a cell port to a frame port has its cells reassembled
//! into frames (`sar`); a port of [`PortUnit::Any`] sends each unit as it came.
//!
//! ```
//! use natm_proto::time::Instant;
//! use natm_proto::wire::cell::{HeaderRepr, Pti};
//! use natm_switch::{Contract, CrossConnect, PortConfig, Switch, Transmit, VcAddr, Verdict};
//!
//! let mut sw = Switch::new();
//! let a = sw.add_port(PortConfig::new(155_520_000))?;
//! let b = sw.add_port(PortConfig::new(155_520_000))?;
//! sw.connect(
//!     CrossConnect::vc(VcAddr::new(a, 1, 32), VcAddr::new(b, 2, 40)),
//!     Contract::best_effort(),
//! )?;
//! let mut cell = [0u8; 53];
//! cell[..5].copy_from_slice(&HeaderRepr::uni(1, 32, Pti::UserDataEnd).to_bytes());
//! assert_eq!(sw.handle_cell(Instant::ZERO, a, cell)?, Verdict::Queued);
//! let Some(Transmit::Cell(out)) = sw.poll_transmit(Instant::ZERO, b) else { panic!() };
//! assert_eq!(&out[..5], &HeaderRepr::uni(2, 40, Pti::UserDataEnd).to_bytes());
//! // The line is busy for one cell time (2.7 µs at 155.52 Mbit/s).
//! assert!(sw.poll_timeout().is_none());
//! # Ok::<(), natm_switch::SwitchError>(())
//! ```

#![forbid(unsafe_code)]

pub mod abr;
pub mod control;
mod discard;
mod efci;
mod error;
mod fabric;
pub mod oam;
mod port;
mod queue;
pub mod routing;
mod sar;
pub mod sched;
pub mod stats;
pub mod table;
pub mod upc;

pub use error::SwitchError;
pub use fabric::{Switch, Verdict};
pub use port::{PortConfig, PortUnit, CELL_BITS, DEFAULT_BUFFER_CELLS, DEFAULT_REASSEMBLY_TIMEOUT};
pub use queue::Transmit;
pub use sched::SchedulerKind;
pub use stats::{
    AbrInterval, AbrStats, Counters, DropCause, Drops, PortStats, SwitchStats, VcStats,
};
pub use table::{ConnId, CrossConnect, Endpoint, PortId, VcAddr, VpAddr};
pub use upc::{Contract, Violation};
