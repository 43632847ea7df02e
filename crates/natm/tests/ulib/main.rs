//! The application library over its adaptors (UDP, cells, the in-process mem
//! adaptor): each file a module of one test binary (one build and one link for all of
//! them: issue 32's CI budget). The tests that count this process's descriptors or
//! threads (`direct_calls_fds.rs`, `engine_collect.rs`, `engine_linger.rs`,
//! `host_reactor.rs`) keep binaries of their own. One file's tests: `cargo test -p
//! natm --test ulib -- udp::`.

/// A UDP socket per VC end, the library's default (`ulib_host` runs these tests with
/// one per host).
const PORTS: natm::ulib::Ports = natm::ulib::Ports::PerVc;

mod abr;
mod cell_mode;
mod coupling;
mod guaranteed_queue;
mod mem;
mod oam_loopback;
mod owned_buffers;
mod refusals;
mod send_many;
mod send_pool;
mod simplex;
mod support;
mod udp;
mod udp_adaptor;
