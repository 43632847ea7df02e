//! `natm ip`: IP over natm (issue 18). A TUN interface whose packets ride natm VCs,
//! set up on demand through sigd per destination and policy class, with ATMARP
//! (RFC 2225) resolving IP addresses to ATM addresses. The protocol logic is the
//! sans-IO `natm_proto::ip`; this module holds the interface, the threads and the
//! configuration.

mod daemon;
mod pool;
mod qos;
mod tun;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::Args;
use natm::wire::addr::AtmAddr;
use natm_proto::ip::node::{NodeConfig, DEFAULT_MTU};
use natm_proto::ip::policy::{parse_prefix, Policy};
use serde::Deserialize;

use super::units;

/// `natm ip`'s interface MTU unless told otherwise (decision
/// 0030-ip-mtu-that-fills-tpdus): the largest up to RFC 2225's 9180 whose message (the
/// packet and its LLC/SNAP header) is cut into sealed TPDUs of one size on an IPv4
/// path of 1500 octets, so that the TPDUs of many packets leave in one GSO run and
/// arrive in one GRO batch (8464: six TPDUs of 1412 octets). A shorter last TPDU ends
/// a run: at 9180 every packet was a `sendmsg` of its own. The host still takes
/// packets of 9180 ([`NodeConfig::receive_mtu`]).
pub(crate) const FILLED_MTU: u32 = filled_mtu(1500);

/// The largest MTU up to RFC 2225's default whose messages fill whole sealed TPDUs
/// on an IPv4 path of `link_mtu` octets.
const fn filled_mtu(link_mtu: usize) -> u32 {
    use natm::wire::{seal, tpdu, vcframe};
    use natm_proto::ip::llc;
    // A datagram's room: the path less the IPv4 and UDP headers; a TPDU's payload:
    // that less the VC header, the TPDU header and the seal.
    let payload = link_mtu - 20 - 8 - vcframe::HEADER_LEN - tpdu::HEADER_LEN - seal::OVERHEAD;
    let largest = DEFAULT_MTU as usize + llc::HEADER_LEN;
    if payload >= largest {
        return DEFAULT_MTU;
    }
    (largest / payload * payload - llc::HEADER_LEN) as u32
}

/// The SAP IP data VCs are called on.
pub(crate) const IP_SAP: &str = "ip";
/// The SAP of the ATMARP server.
pub(crate) const ARP_SAP: &str = "atmarp";
/// The SAP of VCs as RFC 2225 makes them, for peers that are not natm (Linux's
/// `atmarpd`): named by a B-LLI of layer 2 LLC (ISO 8802/2) alone.
pub(crate) const LLC_SAP: &str = "blli.llc";
/// The QoS of such VCs: bare AAL5 (no natm transport), UBR as Linux's CLIP calls.
pub(crate) const LLC_QOS: &str = "ubr:transport=none";

/// `natm ip`: run this host's IP interface over natm.
#[derive(Debug, Args)]
#[command(after_long_help = IP_HELP)]
pub(crate) struct IpArgs {
    /// TOML configuration file (docs/tools.md "natm ip" shows every key); flags
    /// override it.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// This host's ATM address (as its sigd knows it), registered with the ATMARP
    /// server. Optional with --pvc: without it `natm ip` needs no sigd and takes
    /// no calls.
    #[arg(long)]
    address: Option<String>,
    /// The interface's name [default: natm0].
    #[arg(long)]
    name: Option<String>,
    /// The interface's IPv4 address and prefix, e.g. 10.77.1.1/24.
    #[arg(long)]
    ipv4: Option<String>,
    /// The interface's IPv6 address and prefix, e.g. fd77::1/64.
    #[arg(long)]
    ipv6: Option<String>,
    /// The interface MTU, the largest packet sent [default: 8464, whole TPDUs on a
    /// 1500-octet path]; packets of RFC 2225's 9180 are taken all the same, and each
    /// VC's MTU is agreed at setup.
    #[arg(long)]
    mtu: Option<u32>,
    /// The ATMARP server's ATM address (this host's own with --arp-server).
    #[arg(long)]
    arp: Option<String>,
    /// Also be the ATMARP server of the subnet (on SAP `atmarp`).
    #[arg(long)]
    arp_server: bool,
    /// A policy rule, `MATCH -> QOS` (e.g. `udp dport 5004 -> cbr:pcr=20Mbps`);
    /// repeat for more, first match wins.
    #[arg(long = "policy", value_name = "RULE")]
    policy: Vec<String>,
    /// QoS of packets no rule matches [default: best-effort].
    #[arg(long)]
    default_qos: Option<String>,
    /// Release a VC that carries nothing either way for this long [default: 60s].
    #[arg(long, value_parser = parse_duration)]
    idle: Option<Duration>,
    /// Longest a packet waits for its address and VC [default: 3s].
    #[arg(long, value_parser = parse_duration)]
    wait: Option<Duration>,
    /// Life of a resolved ATMARP entry, and the time between registrations
    /// [default: 15m, RFC 2225's].
    #[arg(long, value_parser = parse_duration)]
    arp_age: Option<Duration>,
    /// A PVC to a peer (VPI.VCI; its IP address is found by InATMARP, as Linux
    /// CLIP's `atmarp -s` PVCs answer): frames go --pvc-via, come to --pvc-bind.
    #[arg(long, value_name = "VPI.VCI", requires_all = ["pvc_bind", "pvc_via"])]
    pvc: Option<String>,
    /// With --pvc: the local UDP address the PVC's frames come to.
    #[arg(long, value_name = "ADDR", requires = "pvc")]
    pvc_bind: Option<std::net::SocketAddr>,
    /// With --pvc: where this end's frames go.
    #[arg(long, value_name = "ADDR", requires = "pvc")]
    pvc_via: Option<std::net::SocketAddr>,
    /// The host's sigd socket [default: $NATM_SIGD, else /run/natm/sigd.sock].
    #[arg(long)]
    sigd: Option<PathBuf>,
    /// Print the counters and VCs every this often on stderr (0: never).
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    report: Duration,
    /// Read and write the TUN interface one packet at a time, without the kernel's
    /// segmentation and receive offloads (TSO/GRO through virtio-net headers), which
    /// `natm ip` asks for by default and does without where the kernel has none.
    #[arg(long)]
    no_offload: bool,
}

const IP_HELP: &str = "\
Brings up a TUN interface (natm0) with the given addresses. The first packet to a
destination asks the ATMARP server for its ATM address, then calls it on SAP `ip`
with the QoS the policy gives the packet; packets wait (bounded) meanwhile. Each
class gets its own VC to a peer; a VC idle for --idle is released. `natm stat`
shows the VCs as calls on SAP ip.

Examples:
  natm ip --address +4420001 --ipv4 10.77.1.1/24 --ipv6 fd77::1/64 --arp-server
  natm ip --address +4420002 --ipv4 10.77.1.2/24 --arp +4420001 \\
          --policy 'udp dport 5004 -> cbr:pcr=20Mbps' --default-qos best-effort
  natm ip --config /etc/natm/ip.toml";

fn parse_duration(s: &str) -> Result<Duration, String> {
    units::duration(s).map_err(|e| e.to_string())
}

/// The configuration file: the flags' names, `_` for `-`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    address: Option<String>,
    name: Option<String>,
    ipv4: Option<String>,
    ipv6: Option<String>,
    mtu: Option<u32>,
    arp: Option<String>,
    arp_server: Option<bool>,
    policy: Option<Vec<String>>,
    default_qos: Option<String>,
    idle: Option<String>,
    wait: Option<String>,
    arp_age: Option<String>,
    sigd: Option<PathBuf>,
    no_offload: Option<bool>,
}

/// Everything `natm ip` runs with, checked.
#[derive(Debug, Clone)]
pub(crate) struct IpConfig {
    pub(crate) node: NodeConfig,
    pub(crate) policy: Policy,
    pub(crate) name: String,
    pub(crate) ipv4: Option<(Ipv4Addr, u8)>,
    pub(crate) ipv6: Option<(Ipv6Addr, u8)>,
    /// The ATMARP server to keep a VC to (none on a PVC-only interface).
    pub(crate) arp: Option<AtmAddr>,
    pub(crate) arp_server: bool,
    /// Whether this interface uses sigd (calls, ATMARP); false with --pvc and no
    /// --address.
    pub(crate) signalled: bool,
    pub(crate) pvc: Option<(AtmAddr, std::net::SocketAddr, std::net::SocketAddr)>,
    pub(crate) sigd: Option<PathBuf>,
    pub(crate) report: Duration,
    /// Whether to ask the TUN device for offloads (large segments both ways).
    pub(crate) offload: bool,
}

fn config(a: IpArgs) -> anyhow::Result<IpConfig> {
    let file: FileConfig = match &a.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("{}", p.display()))?
        }
        None => FileConfig::default(),
    };
    let dur = |flag: Option<Duration>, key: &Option<String>, name: &str, default: Duration| match (
        flag, key,
    ) {
        (Some(d), _) => Ok(d),
        (None, Some(s)) => {
            units::duration(s).with_context(|| format!("bad {name} in the config file"))
        }
        (None, None) => Ok(default),
    };
    let pvc = match (a.pvc, a.pvc_bind, a.pvc_via) {
        (Some(p), Some(b), Some(v)) => {
            let addr: AtmAddr = format!("0.{p}")
                .parse()
                .map_err(|e| anyhow!("bad --pvc {p}: {e}"))?;
            Some((addr, b, v))
        }
        _ => None,
    };
    let address = a.address.or(file.address);
    let signalled = address.is_some();
    let atm: AtmAddr = match (&address, &pvc) {
        (Some(address), _) => address
            .parse()
            .map_err(|e| anyhow!("bad --address {address}: {e}"))?,
        // A PVC-only interface: the PVC stands for this end (InATMARP then carries
        // no ATM address, as RFC 2225 §8.7 allows with a zero length).
        (None, Some((p, _, _))) => *p,
        (None, None) => {
            bail!("give this host's ATM address (--address or `address` in the config), or a --pvc")
        }
    };
    let arp_server = a.arp_server || file.arp_server.unwrap_or(false);
    if arp_server && !signalled {
        bail!("--arp-server needs this host's ATM address (--address)");
    }
    let arp = match a.arp.or(file.arp) {
        Some(_) if !signalled => bail!("--arp needs this host's ATM address (--address)"),
        Some(s) => Some(s.parse().map_err(|e| anyhow!("bad --arp {s}: {e}"))?),
        None if arp_server => Some(atm),
        None if pvc.is_some() => None,
        None => {
            bail!("give the ATMARP server's ATM address (--arp), or serve it here (--arp-server)")
        }
    };
    let prefix4 = |s: String| -> anyhow::Result<(Ipv4Addr, u8)> {
        match parse_prefix(&s) {
            Some((IpAddr::V4(a), l)) => Ok((a, l)),
            _ => bail!("bad --ipv4 {s}: want ADDRESS/PREFIX, e.g. 10.77.1.1/24"),
        }
    };
    let prefix6 = |s: String| -> anyhow::Result<(Ipv6Addr, u8)> {
        match parse_prefix(&s) {
            Some((IpAddr::V6(a), l)) => Ok((a, l)),
            _ => bail!("bad --ipv6 {s}: want ADDRESS/PREFIX, e.g. fd77::1/64"),
        }
    };
    let ipv4 = a.ipv4.or(file.ipv4).map(prefix4).transpose()?;
    let ipv6 = a.ipv6.or(file.ipv6).map(prefix6).transpose()?;
    if ipv4.is_none() && ipv6.is_none() {
        bail!("give the interface an address (--ipv4 and/or --ipv6)");
    }
    let mtu = a.mtu.or(file.mtu).unwrap_or(FILLED_MTU);
    if !(1280..=65_000).contains(&mtu) {
        bail!("--mtu {mtu}: want 1280 to 65000 (IPv6's minimum to what one natm message and the LLC/SNAP header carry on a TUN)");
    }
    let rules = if a.policy.is_empty() {
        file.policy.unwrap_or_default()
    } else {
        a.policy
    };
    let default_qos = a
        .default_qos
        .or(file.default_qos)
        .unwrap_or_else(|| "best-effort".to_owned());
    let policy =
        Policy::parse(&rules.join("\n"), &default_qos).map_err(|e| anyhow!("bad --policy: {e}"))?;
    for class in 0..policy.classes() {
        qos::with_mtu(policy.qos(class), mtu)
            .with_context(|| format!("bad QoS in the policy: {}", policy.qos(class)))?;
    }
    let mut node = NodeConfig::new(atm);
    node.ipv4 = ipv4.map(|x| x.0);
    node.ipv6 = ipv6.map(|x| x.0);
    node.mtu = mtu;
    node.idle = dur(a.idle, &file.idle, "idle", node.idle)?;
    node.wait = dur(a.wait, &file.wait, "wait", node.wait)?;
    node.arp_age = dur(a.arp_age, &file.arp_age, "arp_age", node.arp_age)?;
    node.register_every = node.arp_age;
    node.server = arp.is_some();
    Ok(IpConfig {
        node,
        policy,
        name: a.name.or(file.name).unwrap_or_else(|| "natm0".to_owned()),
        ipv4,
        ipv6,
        arp,
        arp_server,
        signalled,
        pvc,
        sigd: a.sigd.or(file.sigd),
        report: a.report,
        offload: !(a.no_offload || file.no_offload.unwrap_or(false)),
    })
}

pub(crate) fn run(a: IpArgs) -> super::CliResult {
    // Its warnings (a refused setup, a VC without threads, a refused ATMARP request)
    // went nowhere before: no subscriber was installed.
    super::sigd::init_logs(0);
    let cfg = config(a)?;
    daemon::run(cfg)
}

#[cfg(test)]
mod tests {
    use super::filled_mtu;

    #[test]
    fn the_default_mtu_is_whole_tpdus_of_the_path() {
        // 1500-octet Ethernet: six sealed TPDUs of 1412 octets carry 8464 + 8.
        assert_eq!(super::FILLED_MTU, 8464);
        // A 9000-octet link: one TPDU of 8912 carries 8904 + 8.
        assert_eq!(filled_mtu(9000), 8904);
        // A link whose one TPDU takes RFC 2225's default whole: the default.
        assert_eq!(filled_mtu(9300), 9180);
    }

    #[test]
    fn tools_states_the_default_mtu() {
        let doc = include_str!("../../../docs/tools.md");
        let stated = format!(
            "(default {}, whole sealed TPDUs on a 1500-octet path)",
            super::FILLED_MTU
        );
        assert!(
            doc.lines()
                .any(|l| l.contains("`--mtu N`") && l.contains(&stated)),
            "docs/tools.md's --mtu row does not say {stated}"
        );
    }
}
