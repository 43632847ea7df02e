//! `natm qos`: QoS text in the Linux-ATM syntax, extended for natm's services.

use clap::Subcommand;

use super::{outln, CliResult};
use natm::transport::TransportConfig;
use natm::wire::addr::AtmAddr;
use natm::wire::qos::Qos;

#[derive(Debug, Subcommand)]
pub(crate) enum QosCmd {
    /// Parse QoS text and print its canonical form and what the transport will run.
    ///
    /// Rates mean application payload bits per second; a bare number is cells/s at
    /// 48 payload bytes per cell. Examples: ubr, 'cbr:pcr=10Mbps',
    /// 'vbr:pcr=20Mbps,scr=5Mbps,mbs=100', 'reliable:flow=window,tpdu=8192'.
    Parse {
        /// The QoS text.
        text: String,
        /// Resolve feedback flow control for a network that is not round-robin.
        #[arg(long)]
        fifo_network: bool,
    },
    /// Parse an ATM address ([itf.]vpi.vci, NSAP/AESA, +E.164) and print it canonically.
    Addr {
        /// The address text.
        text: String,
    },
}

pub(crate) fn run(cmd: QosCmd) -> CliResult {
    match cmd {
        QosCmd::Parse { text, fifo_network } => {
            let q: Qos = text
                .parse()
                .map_err(|e: natm::wire::qos::QosParseError| anyhow::anyhow!(e.render(&text)))?;
            outln!("{q}");
            let t = TransportConfig::from_qos(&q, !fifo_network)?;
            outln!(
                "service={} error_control={} flow={} semantics={} tpdu={} window={} rate={}bps",
                q.service(),
                if t.error_control { "on" } else { "off" },
                t.flow,
                t.semantics,
                match t.tpdu_adapt {
                    Some(a) => format!("auto({}..={})", a.floor, t.tpdu_size),
                    None => t.tpdu_size.to_string(),
                },
                t.window,
                t.rate
            );
            Ok(())
        }
        QosCmd::Addr { text } => {
            let a: AtmAddr = text
                .parse()
                .map_err(|e: natm::wire::addr::AddrParseError| anyhow::anyhow!(e.render(&text)))?;
            outln!("{a}");
            Ok(())
        }
    }
}
