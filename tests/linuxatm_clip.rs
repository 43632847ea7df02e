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

#[path = "linuxatm/support.rs"]
mod guest;
mod switch_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use switch_support::{free_addr, SwitchProc};

/// Boot to the test script takes ~6 s of wall time on an idle machine; much more
/// when other builds share it.
const GUEST: Duration = Duration::from_secs(240);
const STEP: Duration = Duration::from_secs(60);
const VCI: u16 = 120;
const NATM_IP: &str = "10.78.0.1";
const LINUX_IP: &str = "10.78.0.2";
/// Lines of the guest's /seq.txt (`seq 1 N`): about 230 kB.
const SEQ: u32 = 40_000;
const PINGS: usize = 20;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Why the test cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    ["ip", "ping"]
        .into_iter()
        .find(|t| !have(t))
        .map(|t| format!("{t} missing"))
}

fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh").args(["-c", cmd]).output().expect("sh")
}

/// `natm ip`, killed on drop; its stderr goes to a file.
struct NatmIp {
    child: Child,
    log: std::path::PathBuf,
}

impl NatmIp {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NatmIp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The round-trip times a `ping` printed (`time=X ms`, iputils and busybox alike).
fn rtts(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Median, min and max, for the log.
fn summary(v: &[f64]) -> String {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return "no replies".into();
    }
    format!(
        "median {:.3} ms, min {:.3}, max {:.3} ({} replies)",
        s[s.len() / 2],
        s[0],
        s[s.len() - 1],
        s.len()
    )
}

/// The guest's lines `NATM-GUEST <what>-out …` up to `NATM-GUEST <what> rc=N`:
/// (the lines, N).
fn guest_output(g: &mut guest::Guest, what: &str) -> (String, String) {
    let out = format!("NATM-GUEST {what}-out ");
    let rc = format!("NATM-GUEST {what} rc=");
    let mut text = String::new();
    loop {
        let l = g.wait_for(what, STEP, |l| {
            (l.starts_with(&out) || l.starts_with(&rc)).then(|| l.to_string())
        });
        if let Some(r) = l.strip_prefix(&rc) {
            return (text, r.trim().to_string());
        }
        text += l.strip_prefix(&out).unwrap_or_default();
        text.push('\n');
    }
}

/// One HTTP/1.0 GET of `path` from `addr`: the body of a 200 answer.
fn http_get(addr: SocketAddr, path: &str) -> Vec<u8> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: guest\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).expect("HTTP answer");
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("HTTP header");
    let head = String::from_utf8_lossy(&all[..end]);
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    all[end + 4..].to_vec()
}

fn md5_hex(data: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn linux_clip_and_natm_ip_over_a_pvc() {
    if let Some(why) = unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    if !guest::ready() {
        return;
    }
    // This thread's own network namespace: what it starts (the switch, natm ip, QEMU)
    // and the sockets it opens live there; it goes when they have all ended.
    // `unshare` is deprecated for the flags that make it unsafe (CLONE_FILES and the
    // like); CLONE_NEWNET only moves this thread's network namespace.
    #[allow(deprecated)]
    rustix::thread::unshare(rustix::thread::UnshareFlags::NEWNET).expect("unshare(CLONE_NEWNET)");
    let up = sh("ip link set lo up && echo '0 2147483647' >/proc/sys/net/ipv4/ping_group_range");
    assert!(up.status.success(), "{up:?}");

    let natm_end = free_addr();
    let sw = SwitchProc::start(
        "linuxatm-clip",
        &format!(
            "[[port]]\nname = \"linux\"\nmode = \"atmtcp\"\nlisten = \"127.0.0.1:0\"\n\
             [[port]]\nname = \"u\"\nmode = \"frame\"\nbind = \"127.0.0.1:0\"\npeer = \"{natm_end}\"\n\
             [[pvc]]\nfrom = \"linux:0.{VCI}\"\nto = \"u:0.{VCI}\"\nduplex = true\n"
        ),
    );
    let log = sw.dir.join("natm-ip.log");
    let mut ip = NatmIp {
        child: Command::new(env!("CARGO_BIN_EXE_natm"))
            .args(["ip", "--pvc", &format!("0.{VCI}")])
            .args(["--pvc-bind", &natm_end.to_string()])
            .args(["--pvc-via", &sw.ports["u"].to_string()])
            .args(["--ipv4", &format!("{NATM_IP}/24"), "--report", "1s"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("natm ip"),
        log,
    };
    let t = Instant::now();
    while !sh("ip link show natm0").status.success() {
        if let Some(st) = ip.child.try_wait().unwrap() {
            panic!("natm ip ended ({st}): {}", ip.log());
        }
        assert!(t.elapsed() < STEP, "no natm0: {}", ip.log());
        std::thread::sleep(Duration::from_millis(100));
    }

    // What natm's side sends the guest over TCP: every octet value, over several MTUs.
    let blob: Vec<u8> = (0..100_000u32).map(|i| (i * 31 + i / 256) as u8).collect();

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
    let seq = http_get(SocketAddr::from(([10, 78, 0, 2], 8080)), "/seq.txt");
    let want: String = (1..=SEQ).map(|i| format!("{i}\n")).collect();
    assert!(
        seq == want.as_bytes(),
        "seq.txt: {} bytes, not {}",
        seq.len(),
        want.len()
    );
    http_get(SocketAddr::from(([10, 78, 0, 2], 8080)), "/cgi-bin/go");
    g.marker("go", STEP);

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
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::from(([10, 78, 0, 2], 7001)),
        Duration::from_secs(10),
    )
    .expect("connect to the guest's nc");
    s.write_all(&blob).expect("send the blob");
    s.shutdown(std::net::Shutdown::Write).unwrap();
    drop(s);
    let got = g.marker("blob rc=", STEP);
    assert!(got.starts_with("0 "), "nc: {got}");
    assert_eq!(
        got,
        format!("0 md5={} len={}", md5_hex(&blob), blob.len()),
        "the guest's copy of the blob"
    );

    // Linux's ATMARP table: natm's address on the PVC, with LLC/SNAP.
    let mut arp = Vec::new();
    let mut atmarpd = Vec::new();
    loop {
        let l = g.wait_for("the guest's tables", STEP, |l| {
            l.strip_prefix("NATM-GUEST ").map(str::to_string)
        });
        if l == "done" {
            break;
        }
        if let Some(a) = l.strip_prefix("arp ") {
            arp.push(a.to_string());
        } else if let Some(a) = l.strip_prefix("atmarpd ") {
            atmarpd.push(a.to_string());
        }
    }
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
