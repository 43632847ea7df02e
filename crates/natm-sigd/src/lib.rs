//! `natm sigd`: the signalling entity of seed 000 §4 — one daemon per host that sets
//! up and tears down connections for applications, holds final authority over their
//! state (seed 004 §4), does admission control (the resource manager of seed 000
//! §5.2), and cleans up when an application dies (seed 001 §4.5).
//!
//! Applications speak the IPC of [`natm_proto::wire::ipc`] over a Unix-domain socket;
//! sigds speak UNI signalling (Q.2931 over SSCOP, `natm_proto::sig`) to each other over
//! UDP. The data plane never passes through sigd: it hands both ends the other's
//! data endpoint, the VCIs and a random cookie, and the applications' engines talk
//! directly. `docs/ARCHITECTURE.md` ("Signalling daemon") records the decisions.

pub mod admission;
mod app;
pub mod config;
mod daemon;
pub mod directory;
mod peer;
pub mod vci;

pub use app::Creds;
pub use config::{Config, ConfigError, ConfigFile};
pub use daemon::{Daemon, Stop};
