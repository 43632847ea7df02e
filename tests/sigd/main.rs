//! natm's sigd as a process, with the tools and the application library that talk
//! to it: calls inside a host and between hosts, crashes and restarts, users and
//! their limits, least privilege, bare calls, `natm stat` and the small tools. Each file is a module of
//! one test binary (one build and one link for all of them: issue 32's CI budget).
//! One file's tests: `cargo test --test sigd -- restart::`.

#[path = "../sigd_support/mod.rs"]
mod sigd_support;
#[path = "../switch_support/mod.rs"]
mod switch_support;

mod bare_calls;
mod confine;
mod crash;
mod local;
mod peers;
mod preauth;
mod restart;
mod simplex;
mod stat_cli;
mod tools_cli;
mod users;
