//! Property tests of natm-proto's wire formats, IPC, sealing, text and signalling
//! machines, each file a module of one test binary (one build and one link for all of
//! them: issue 32's CI budget). One file's properties: `cargo test -p natm-proto
//! --test props -- wire::`.

#[path = "../strategies/mod.rs"]
mod strategies;

mod ipc;
mod seal;
mod signalling;
mod text;
mod wire;
