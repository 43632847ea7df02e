//! IP over natm (issue 18): the sans-IO parts of the `natm ip` interface.
//!
//! Classical IP over ATM as RFC 2225 has it and seed 004 §6 built it: IP packets ride
//! VCs in RFC 2684 LLC/SNAP encapsulation ([`llc`]), IP addresses are resolved to
//! ATM addresses by an ATMARP server ([`atmarp`] packets, [`arp`] table and server),
//! and VCs are set up on demand per destination and policy class, released when
//! idle, with the MTU agreed per VC ([`node`], [`policy`], [`packet`]).

pub mod arp;
pub mod atmarp;
pub mod llc;
pub mod node;
pub mod packet;
pub mod policy;
