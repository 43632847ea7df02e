//! `natm sigd`: the signalling entity of seed 000 §4 — one daemon per host that sets
//! up and tears down connections for applications, holds final authority over their
//! state (seed 004 §4), does admission control (the resource manager of seed 000
//! §5.2), and cleans up when an application dies (seed 001 §4.5).
//!
//! Applications speak the IPC of [`natm_proto::wire::ipc`] over a Unix-domain socket;
//! sigds speak UNI signalling (Q.2931 over SSCOP, `natm_proto::sig`) to each other over
//! UDP. The data plane never passes through sigd: it hands both ends the other's
//! data endpoint, the VCIs and a random cookie, and the applications' engines talk
//! directly. `docs/sigd.md` ("Signalling daemon") records the decisions.

//!
//! The crate is split the quinn way: [`core::Core`] holds every piece of state and
//! every decision and does no I/O (time is an argument, output is pulled), so the same
//! call handling can run in a switch or in a test in virtual time; [`Daemon`] is the
//! thin mio loop that feeds it from the sockets and the clock.

pub mod access;
pub mod admission;
pub mod config;
pub mod confine;
pub mod core;
mod daemon;
pub mod directory;
pub mod metrics;
pub mod sscop_sq;
pub use natm_proto::sig::vci;

pub use crate::core::Creds;
pub use config::{Config, ConfigError, ConfigFile};
pub use daemon::{identity, signal_pipe, Daemon, Stop};
