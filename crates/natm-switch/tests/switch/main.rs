//! The switch's data plane (and what its control plane gets from it) in virtual time,
//! each file a module of one test binary (one build and one link for all of them:
//! issue 32's CI budget). One file's tests: `cargo test -p natm-switch --test switch
//! -- policing::`.

#[path = "../common/mod.rs"]
mod common;

mod abr;
mod bare_contract;
mod batch;
mod control;
mod conversion;
mod forwarding;
mod frame_discard;
mod guaranteed_contract;
mod oam;
mod policing;
mod release;
mod replication;
mod scheduling;
mod smoothing;
