//! The simulator's tests: endpoints, flows, networks and the transport in virtual
//! time, and the goodput snapshot, each file a module of one test binary (one build
//! and one link for all of them: issue 32's CI budget). One file's tests: `cargo test
//! --release -p natm-sim --test sim -- transport::`.

mod endpoint;
mod flow;
mod goodput_snapshot;
mod net;
mod transport;
