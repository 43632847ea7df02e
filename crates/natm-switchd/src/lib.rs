//! `natm switch`: one switch process (issue 13). A thin mio loop ([`SwitchDaemon`])
//! around the sans-IO data plane of `natm_switch::Switch`: each port is a UDP
//! endpoint joined to one peer, in *cell mode* (datagrams carry trains of 53-octet
//! cells, `natm_proto::wire::train`) or *frame mode* (one AAL5 frame per datagram behind the VC
//! header of `natm_proto::wire::vcframe`); or a port is an [`atmtcp`] link, a TCP
//! connection to a Linux host's ATM interface carrying AAL5 SDUs in Linux's format.
//! Cross-connects are permanent (PVCs and PVPs from the [`config`]) or set up by the
//! control plane on signalling ports.

#![forbid(unsafe_code)]

pub mod allow;
pub mod atmtcp;
mod atmtcp_link;
pub mod config;
mod daemon;
mod ilmi_port;
mod link;
pub mod metrics;
mod noise_port;
pub mod stat;
mod stat_file;
/// The cell-train codec, now in `natm_proto::wire::train` (the host engine speaks it too).
pub use natm_proto::wire::train;

pub use atmtcp_link::{AtmtcpCounters, AtmtcpSnapshot, Role as AtmtcpRole};
pub use config::{Config, ConfigError, LinkMode};
pub use daemon::{show_key, Stop, SwitchDaemon};
pub use ilmi_port::IlmiSnapshot;
