//! `natm switch` as a process, with hosts' sigds attached: its command line and
//! configuration, cell ports, routing among switches, multipoint calls, QoS changes,
//! OAM ping, metrics, loss on its links and bare VCs through it. Each file is a module
//! of one test binary (one build and one link for all of them: issue 32's CI budget).
//! One file's tests: `cargo test --test switch -- routing::`. The tests that spoof
//! or capture on the host's loopback (`switch_network.rs`, `switch_noise.rs`) keep
//! binaries of their own.

#[path = "../sigd_support/mod.rs"]
mod sigd_support;
#[path = "../switch_support/mod.rs"]
mod switch_support;

mod abr_calls;
mod abr_cli;
mod bare_cli;
mod cell_cli;
mod cli;
mod ilmi;
mod loss_cli;
mod metrics_cli;
mod multipoint;
mod ping_oam;
mod qos_change;
mod routing;
mod simplex;
mod two_hosts;
