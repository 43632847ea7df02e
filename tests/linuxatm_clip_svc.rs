//! Classical IP over ATM over SVCs between Linux and `natm ip` (issue 33): RFC 2225's
//! normal mode, an ATMARP server and VCs set up on demand. The QEMU guest of
//! tests/linuxatm.rs runs `atmsigd` (UNI 3.1) over its atmtcp link to a natm switch's
//! `uni` port and `atmarpd` with the CLIP interface atm0; a natm host's sigd is on
//! another port of the switch, and `natm ip` on it. natm ip calls natm's SAP `ip`
//! first; the switch refuses natm's transport towards a standard UNI user (cause 88),
//! and natm ip calls again as RFC 2225 does: bare AAL5 with LLC/SNAP, named by B-LLI
//! alone. Linux's calls arrive the same way.
//!
//! Both ways round: Linux's atmarpd registers with `natm ip --arp-server`, and natm
//! ip registers with Linux's atmarpd as its server. In each, the guest pings natm
//! (Linux resolves and calls), the host pings the guest (natm resolves and calls, or
//! uses Linux's VC), an HTTP download from the guest and a stream to it, byte-exact.
//!
//! Everything on the host side runs in a network namespace of the test's thread.
//! Needs root, /dev/net/tun, `ip` and `ping`, and the guest (prepared by
//! scripts/linuxatm/prepare.sh); skips with a message otherwise.

#[path = "linuxatm/clip.rs"]
mod clip;
#[path = "linuxatm/support.rs"]
mod guest;
mod sigd_support;
mod switch_support;

use std::process::Command;
use std::time::Duration;

use clip::{
    fetch_seq_then_go, guest_output, guest_tables, own_netns, rtts, send_blob, summary,
    unavailable, GuestTables, NatmIp,
};
use sigd_support::{free_port, Sigd, LINK};
use switch_support::SwitchProc;

/// Boot to the test script: seconds on an idle machine, much more under load.
const GUEST: Duration = Duration::from_secs(240);
const STEP: Duration = Duration::from_secs(60);
/// One guest at a time: each is a whole emulated machine on a 2-CPU host.
static ONE_GUEST: std::sync::Mutex<()> = std::sync::Mutex::new(());

const LINUX: &str = "47.0005.80ffe1000000f21a26d8.0020ea000ee0.00";
const NATM: &str = "47.0005.80ffe1000000f21a26d8.0020ea000ee1.00";
const NATM_IP: &str = "10.79.0.1";
const LINUX_IP: &str = "10.79.0.2";
/// Lines of the guest's /seq.txt (`seq 1 N`): about 230 kB.
const SEQ: u32 = 40_000;
const PINGS: usize = 20;

/// Which end is the subnet's ATMARP server.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Server {
    Natm,
    Linux,
}

fn clip_over_svcs(server: Server) {
    if let Some(why) = unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    if !guest::ready() {
        return;
    }
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    own_netns();

    let (sig, sw_port) = (free_port(), free_port());
    let sw = SwitchProc::start(
        "linuxatm-clip-svc",
        &format!(
            "[[port]]\nname = \"linux\"\nmode = \"atmtcp\"\nlisten = \"127.0.0.1:0\"\n\
             signalling = \"uni\"\nsscop_no_response_ms = 20000\n\
             [[port]]\nname = \"h\"\nmode = \"frame\"\nbind = \"{sw_port}\"\npeer = \"{sig}\"\n\
             line_rate = 100000000\nsignalling = \"host\"\n\
             [[route]]\nprefix = \"47.0005.80ffe1000000f21a26d8.0020ea000ee0\"\nport = \"linux\"\n\
             [[route]]\nprefix = \"47.0005.80ffe1000000f21a26d8.0020ea000ee1\"\nport = \"h\"\n"
        ),
    );
    let sigd = Sigd::start_at(
        &format!(
            "addresses = [\"{NATM}\"]\n{LINK}\n[[directory]]\nprefix = \"*\"\n\
             peer = \"{sw_port}\"\nswitch = true\n"
        ),
        sig,
    );
    let mut args: Vec<String> = [
        "--sigd",
        &sigd.socket.display().to_string(),
        "--address",
        NATM,
        "--ipv4",
        &format!("{NATM_IP}/24"),
        "--report",
        "2s",
    ]
    .map(String::from)
    .to_vec();
    match server {
        Server::Natm => args.extend(["--arp-server".into(), "--arp".into(), NATM.into()]),
        Server::Linux => args.extend(["--arp".into(), LINUX.into()]),
    }
    let ip = NatmIp::start(&args, sw.dir.join("natm-ip.log"));

    let mut boot = vec![
        ("port", sw.ports["linux"].port().to_string()),
        ("addr", LINUX.to_string()),
        ("ip", LINUX_IP.to_string()),
        ("peer", NATM_IP.to_string()),
        ("seq", SEQ.to_string()),
        ("count", PINGS.to_string()),
    ];
    match server {
        Server::Natm => boot.extend([("role", "client".into()), ("server", NATM.into())]),
        Server::Linux => boot.push(("role", "server".into())),
    }
    let mut g = guest::Guest::boot("clipsvc", &boot, None);
    let up = g.marker("sigd up", GUEST);
    assert!(up.is_empty(), "{up}\n{}", g.console());
    let mtu = g.marker("clip-up mtu=", STEP);
    assert_eq!(mtu, "9180", "RFC 2225 §5");

    // Linux -> natm first: atmarpd resolves natm's address and calls it.
    let (clip_text, rc) = guest_output(&mut g, "ping-clip");
    let fail = |what: &str, g: &guest::Guest, ip: &NatmIp| {
        format!(
            "{what}\n--- natm ip:\n{}\n--- switch (tail):\n{}\n--- console:\n{}",
            ip.log(),
            tail(&sw.log(), 30),
            g.console()
        )
    };
    assert_eq!(
        rc,
        "0",
        "{}",
        fail(&format!("guest ping {NATM_IP}: {clip_text}"), &g, &ip)
    );
    let guest_rtts = rtts(&clip_text);

    // natm -> Linux.
    let ping = Command::new("ping")
        .args(["-c", &PINGS.to_string(), "-i", "0.2", "-W", "5", LINUX_IP])
        .output()
        .expect("ping");
    let ping_text = String::from_utf8_lossy(&ping.stdout).to_string();
    assert!(
        ping.status.success(),
        "{}",
        fail(&format!("ping {LINUX_IP}: {ping_text}"), &g, &ip)
    );
    let host_rtts = rtts(&ping_text);
    // An echo of 9,028 octets: natm sends it in fragments of its own MTU (8464), and
    // Linux answers with one packet of its 9180, which natm takes (RFC 2225 §5).
    let big = Command::new("ping")
        .args(["-c", "2", "-s", "9000", "-W", "5", LINUX_IP])
        .output()
        .expect("ping");
    assert!(
        big.status.success(),
        "{}",
        fail(
            &format!(
                "ping -s 9000 {LINUX_IP}: {}",
                String::from_utf8_lossy(&big.stdout)
            ),
            &g,
            &ip
        )
    );

    // TCP: the guest's httpd to natm, then natm to the guest's nc, byte-exact.
    let linux: std::net::Ipv4Addr = LINUX_IP.parse().expect("IPv4");
    fetch_seq_then_go(&mut g, linux, SEQ);
    send_blob(&mut g, linux);

    // What each side's tables say.
    let GuestTables { arp, vcs, atmarpd } = guest_tables(&mut g);
    let log = ip.log();
    eprintln!(
        "linuxatm_clip_svc ({server:?} server): guest atmarp -a:\n  {}",
        arp.join("\n  ")
    );
    eprintln!(
        "linuxatm_clip_svc ({server:?} server): guest VCs:\n  {}",
        vcs.join("\n  ")
    );
    eprintln!(
        "linuxatm_clip_svc ({server:?} server): guest atmarpd:\n  {}",
        atmarpd.join("\n  ")
    );
    eprintln!(
        "linuxatm_clip_svc ({server:?} server): ping RTT guest -> host {}; host -> guest {}",
        summary(&guest_rtts),
        summary(&host_rtts)
    );
    eprintln!(
        "linuxatm_clip_svc ({server:?} server): natm ip's last report: {}",
        log.lines()
            .rev()
            .find(|l| l.contains("natm ip:"))
            .unwrap_or("-")
    );
    // Linux knows natm's IP address at natm's ATM address (not a PVC), on SVCs.
    let entry = arp
        .iter()
        .find(|l| {
            l.to_lowercase()
                .starts_with(&format!("ip {NATM_IP}, state valid, addr {NATM}"))
        })
        .unwrap_or_else(|| panic!("{}", fail(&format!("{arp:?}"), &g, &ip)));
    match server {
        // natm ip found Linux's address through its own server, which learnt it from
        // atmarpd's registration; Linux has natm as its server.
        Server::Natm => {
            assert!(entry.contains("ARPSRV"), "{entry}");
            assert!(
                log.contains(&format!("arp {LINUX_IP} at {}", LINUX.to_uppercase())),
                "{}",
                fail("natm ip never resolved Linux's address", &g, &ip)
            );
        }
        // natm ip registered with Linux's atmarpd: the entry is published.
        Server::Linux => assert!(entry.contains("PUBL"), "{entry}"),
    }
    // natm ip met a peer that is not natm and called it as RFC 2225 does, or took
    // Linux's call of that kind; and its ATMARP VC is (or talks to) Linux's.
    assert!(
        log.contains("kind=Llc"),
        "{}",
        fail("no RFC 2225 VC in natm ip's log", &g, &ip)
    );
    assert!(guest_rtts.len() >= PINGS / 2, "{clip_text}");
    assert!(host_rtts.len() >= PINGS / 2, "{ping_text}");
    drop(g);
    drop(ip);
    drop(sigd);
    drop(sw);
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[test]
fn linux_atmarpd_registers_with_natm_ip_and_ip_runs_on_demand_svcs() {
    clip_over_svcs(Server::Natm);
}

#[test]
fn natm_ip_registers_with_linux_atmarpd_and_ip_runs_on_demand_svcs() {
    clip_over_svcs(Server::Linux);
}
