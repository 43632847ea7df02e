//! sigd's cores in virtual time, each file a module of one test binary (one build and
//! one link for all of them, not one each: issue 32's CI budget). The log tests
//! (`core_apps_log.rs`, `core_peers_log.rs`) keep binaries of their own: a `tracing`
//! subscriber set with `with_default` can miss events of callsites that other test
//! threads registered. Run one file's tests with `cargo test -p natm-sigd --test core
//! -- peers::`.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod calls;
mod fair;
mod keys;
mod modify;
mod multipoint;
mod network;
mod noise;
mod peers;
mod preauth;
mod refusals;
mod restart;
mod soak;
mod stat;
mod switch_restart;
mod timers;
mod users;
