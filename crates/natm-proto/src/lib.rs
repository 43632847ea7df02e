//! natm's protocol core: everything of the stack that is a pure function of its
//! inputs — no sockets, threads or clock reads (the sans-IO contract of quinn-proto).
//!
//! [`wire`] holds the byte-exact formats (cells, AAL5, TPDU, Q.2931, SSCOP, IPC, QoS
//! and address text); [`transport`] the per-VC protocol status block (seed 000 §5.3);
//! [`flow`] the flow controllers; [`sched`] the multi-level weighted round robin of
//! seed 000 §5.1; [`sig`] the UNI signalling state machines (SSCOP, call control);
//! `ilmi` (with the `daemon` feature) a switch port's end of ILMI address registration.
//! The I/O crate `natm`, the daemon `natm-sigd` and the simulator `natm-sim` drive them.

pub mod endpoint;
pub mod flow;
#[cfg(feature = "daemon")]
pub mod ilmi;
pub mod ip;
pub mod sched;
pub mod sig;
pub mod time;
pub mod transport;
pub mod wire;
