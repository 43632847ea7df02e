//! Classical IP over ATM between Linux CLIP and `natm ip` (issue 18): the QEMU guest of
//! tests/linuxatm.rs runs Linux's `clip` module and `atmarpd`, with an LLC/SNAP PVC
//! (`atmarp -s`, RFC 2684 §4.1) across its atmtcp link to a `natm switch` atmtcp
//! port; the switch's `[[pvc]]` joins it to the frame port where `natm ip --pvc`
//! (no sigd) runs the TUN interface natm0. natm's InATMARP (RFC 2225 §8.3) finds the
//! guest's IP address on the PVC — nothing else tells it — so the host's ping reaching
//! the guest first proves it; then ping both ways, and TCP both ways byte-exact (an
//! HTTP download from the guest's busybox httpd, a stream to its nc; segments of the
//! RFC 2225 MTU, 9180). The round-trip times are printed beside the
//! same guest's ping over its virtio-net (docs/PERFORMANCE.md "IP over natm").
//!
//! Everything on the host side runs in a network namespace of the test's own thread,
//! so natm0, the switch and QEMU's slirp are invisible to other tests. Needs root,
//! /dev/net/tun, `ip` and `ping`, and the guest (prepared by
//! scripts/linuxatm/prepare.sh); skips with a message otherwise.

#[path = "linuxatm/clip.rs"]
mod clip;
#[path = "linuxatm/support.rs"]
mod guest;
mod switch_support;

use std::process::Command;
use std::time::Duration;

use clip::{
    fetch_seq_then_go, guest_output, guest_tables, own_netns, rtts, send_blob, sh, summary,
    unavailable, GuestTables, NatmIp,
};

use switch_support::{free_addr, SwitchProc};

/// Boot to the test script takes ~6 s of wall time on an idle machine; much more
/// when other builds share it.
const GUEST: Duration = Duration::from_secs(240);
const VCI: u16 = 120;
const NATM_IP: &str = "10.78.0.1";
const LINUX_IP: &str = "10.78.0.2";
/// Lines of the guest's /seq.txt (`seq 1 N`): about 230 kB.
const SEQ: u32 = 40_000;
const PINGS: usize = 20;

#[test]
fn linux_clip_and_natm_ip_over_a_pvc() {
    if let Some(why) = unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    if !guest::ready() {
        return;
    }
    own_netns();

    let natm_end = free_addr();
    let sw = SwitchProc::start(
        "linuxatm-clip",
        &format!(
            "[[port]]\nname = \"linux\"\nmode = \"atmtcp\"\nlisten = \"127.0.0.1:0\"\n\
             [[port]]\nname = \"u\"\nmode = \"frame\"\nbind = \"127.0.0.1:0\"\npeer = \"{natm_end}\"\n\
             [[pvc]]\nfrom = \"linux:0.{VCI}\"\nto = \"u:0.{VCI}\"\nduplex = true\n"
        ),
    );
    let ip = NatmIp::start(
        &[
            "--pvc".into(),
            format!("0.{VCI}"),
            "--pvc-bind".into(),
            natm_end.to_string(),
            "--pvc-via".into(),
            sw.ports["u"].to_string(),
            "--ipv4".into(),
            format!("{NATM_IP}/24"),
            "--report".into(),
            "1s".into(),
        ],
        sw.dir.join("natm-ip.log"),
    );

    let mut g = guest::Guest::boot(
        "clip",
        &[
            ("port", sw.ports["linux"].port().to_string()),
            ("vci", VCI.to_string()),
            ("ip", LINUX_IP.into()),
            ("peer", NATM_IP.into()),
            ("seq", SEQ.to_string()),
            ("count", PINGS.to_string()),
        ],
        None,
    );
    let mtu = g.marker("clip-up mtu=", GUEST);
    eprintln!(
        "linuxatm_clip: CLIP up in the guest {:.1} s after boot (atm0 mtu {mtu})",
        g.started.elapsed().as_secs_f64()
    );
    // RFC 2225 §5: both ends default to 9180.
    assert_eq!(mtu, "9180");

    // natm -> Linux first: nothing has come from the guest's IP yet, so natm knows it
    // only if its InATMARP request on the PVC was answered.
    let ping = Command::new("ping")
        .args(["-c", &PINGS.to_string(), "-i", "0.2", "-W", "5", LINUX_IP])
        .output()
        .unwrap();
    let ping_text = String::from_utf8_lossy(&ping.stdout).to_string();
    assert!(
        ping.status.success(),
        "ping {LINUX_IP}: {ping_text}\nnatm ip: {}\n--- console:\n{}",
        ip.log(),
        g.console()
    );
    let host_rtts = rtts(&ping_text);

    // TCP from the guest's httpd, then the signal for the guest's turn.
    fetch_seq_then_go(&mut g, LINUX_IP.parse().unwrap(), SEQ);

    // Linux -> natm, and the same guest's ping over its virtio-net to slirp's gateway.
    let (clip_text, rc) = guest_output(&mut g, "ping-clip");
    assert_eq!(
        rc,
        "0",
        "guest ping {NATM_IP}: {clip_text}\nnatm ip: {}",
        ip.log()
    );
    let (eth_text, eth_rc) = guest_output(&mut g, "ping-eth");
    let guest_rtts = rtts(&clip_text);
    let eth_rtts = rtts(&eth_text);
    eprintln!(
        "linuxatm_clip: ping RTT over CLIP, host -> guest: {}",
        summary(&host_rtts)
    );
    eprintln!(
        "linuxatm_clip: ping RTT over CLIP, guest -> host: {}",
        summary(&guest_rtts)
    );
    eprintln!(
        "linuxatm_clip: ping RTT over the guest's virtio-net to slirp's gateway (rc {eth_rc}): {}",
        summary(&eth_rtts)
    );

    // TCP natm -> Linux: to the guest's nc, byte-exact.
    send_blob(&mut g, LINUX_IP.parse().unwrap());

    // Linux's ATMARP table: natm's address on the PVC, with LLC/SNAP.
    let GuestTables { arp, atmarpd, .. } = guest_tables(&mut g);
    eprintln!("linuxatm_clip: guest atmarp -a:\n  {}", arp.join("\n  "));
    eprintln!(
        "linuxatm_clip: guest atmarpd log (ARP lines):\n  {}",
        atmarpd.join("\n  ")
    );
    // `IP 10.78.0.1, state VALID, addr <none>, flags 0x4<PERM>` and its VC on the
    // next line: atmarpd does not ask InATMARP itself (it knows the IP from `-s`).
    let at = arp
        .iter()
        .position(|l| l.starts_with(&format!("IP {NATM_IP}, state VALID")))
        .unwrap_or_else(|| panic!("{arp:?}"));
    assert_eq!(
        arp.get(at + 1).map(|l| l.trim()),
        Some(format!("0.0.{VCI}").as_str()),
        "{arp:?}"
    );
    // It answered natm's InATMARP request.
    assert!(
        atmarpd.iter().any(|l| l.contains("sending InARP reply")),
        "{atmarpd:?}"
    );

    let report = ip.log();
    eprintln!(
        "linuxatm_clip: natm ip's last report: {}",
        report
            .lines()
            .rev()
            .find(|l| l.contains("natm ip:"))
            .unwrap_or("-")
    );
    eprintln!(
        "linuxatm_clip: load: {}",
        String::from_utf8_lossy(&sh("uptime").stdout).trim()
    );
    assert_eq!(host_rtts.len(), PINGS, "{ping_text}");
    assert_eq!(guest_rtts.len(), PINGS, "{clip_text}");
    drop(g);
    drop(ip);
    drop(sw);
}
