//! natm — a native-mode ATM protocol stack in user space.
//!
//! The layers follow seed 000 (Ahuja, Keshav, Saran 1996) and `docs/ARCHITECTURE.md`:
//! [`wire`] holds the byte-exact formats (cells, AAL5, TPDU, QoS and address text);
//! the transport, scheduler, adaptors, ulib and the signalling daemon stand on it.

pub mod adaptor;
pub(crate) mod engine;
pub mod flow;
pub mod sched;
pub mod sig;
pub mod sigd;
pub mod sim;
pub mod stages;
pub mod time;
pub mod transport;
pub mod ulib;
pub mod wire;
