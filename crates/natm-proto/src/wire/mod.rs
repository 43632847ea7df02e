//! Byte-exact wire formats, with parse and emit and no I/O.
//!
//! # The no-panic contract
//! Every parser in this module takes untrusted bytes or text and returns either a value
//! or a typed error that names what was wrong; none of them panics, whatever the input
//! (each is fuzzed under `fuzz/`). Accessors on a `Packet<T>` wrapper never panic once
//! its `new_checked` has succeeded. Emitters write into buffers of at least
//! `Repr::buffer_len()` bytes and panic only on a smaller one (a caller bug, not input).
//!
//! Layout follows smoltcp: one file per format, `Packet<T: AsRef<[u8]>>` over a buffer
//! with named field ranges, and a small `Copy` `Repr` with `parse`, `buffer_len`, `emit`.

pub mod aal5;
pub mod addr;
pub mod cell;
pub mod crc;
pub mod ipc;
pub mod oam;
pub mod oam_auth;
pub mod pcap;
pub mod q2931;
pub mod qos;
#[cfg(feature = "daemon")]
pub mod resume;
pub mod rm;
pub mod sar;
pub mod seal;
pub mod sscop;
mod text;
pub mod tpdu;
pub mod train;
pub mod vcframe;
