//! The `ulib` binary's tests (`tests/ulib/`) again, with every host on one UDP socket
//! per local address (`Ports::PerHost`, issue 30): the same behaviour whichever way a
//! host's VCs meet the kernel. `cargo test -p natm --test ulib_host -- udp::`.

/// One UDP socket per host.
const PORTS: natm::ulib::Ports = natm::ulib::Ports::PerHost;

#[path = "ulib/abr.rs"]
mod abr;
#[path = "ulib/cell_mode.rs"]
mod cell_mode;
#[path = "ulib/guaranteed_queue.rs"]
mod guaranteed_queue;
#[path = "ulib/mem.rs"]
mod mem;
#[path = "ulib/oam_loopback.rs"]
mod oam_loopback;
#[path = "ulib/owned_buffers.rs"]
mod owned_buffers;
#[path = "ulib/refusals.rs"]
mod refusals;
#[path = "ulib/send_many.rs"]
mod send_many;
#[path = "ulib/send_pool.rs"]
mod send_pool;
#[path = "ulib/simplex.rs"]
mod simplex;
#[path = "ulib/support.rs"]
mod support;
#[path = "ulib/udp.rs"]
mod udp;
#[path = "ulib/udp_adaptor.rs"]
mod udp_adaptor;
