//! natm — a native-mode ATM protocol stack in user space.
//!
//! The layers follow seed 000 (Ahuja, Keshav, Saran 1996) and `docs/ARCHITECTURE.md`.
//! This crate is the I/O half: the adaptors that move AAL5 frames ([`adaptor`]), the
//! engine that drives the sans-IO protocol machines of `natm-proto` with sockets,
//! threads and a clock, and the socket-like API applications use ([`ulib`]).
//! The protocol modules are re-exported so that `natm::wire`, `natm::transport` and
//! the rest stay one dependency away.

pub use natm_proto::{flow, sched, sig, time, transport, wire};

pub mod adaptor;
pub(crate) mod engine;
pub(crate) mod error;
pub mod stages;
pub(crate) mod sync;
pub mod ulib;
