//! What the CLIP tests with the Linux guest share (tests/linuxatm_clip.rs over a PVC,
//! tests/linuxatm_clip_svc.rs over SVCs): `natm ip` as a child process, the test's
//! own network namespace, the guest's ping output, HTTP and digests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Moves this thread into a network namespace of its own, with loopback up and
/// ping allowed: what it starts (switch, sigd, `natm ip`, QEMU) and the sockets it
/// opens live there, and it goes when they have all ended.
pub(crate) fn own_netns() {
    // `unshare` is deprecated for the flags that make it unsafe (CLONE_FILES and the
    // like); CLONE_NEWNET only moves this thread's network namespace.
    #[allow(deprecated)]
    rustix::thread::unshare(rustix::thread::UnshareFlags::NEWNET).expect("unshare(CLONE_NEWNET)");
    let up = sh("ip link set lo up && echo '0 2147483647' >/proc/sys/net/ipv4/ping_group_range");
    assert!(up.status.success(), "{up:?}");
}

pub(crate) fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Why the test cannot run here, if it cannot.
pub(crate) fn unavailable() -> Option<String> {
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

pub(crate) fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh").args(["-c", cmd]).output().expect("sh")
}

/// `natm ip`, killed on drop; its stderr goes to a file.
pub(crate) struct NatmIp {
    pub(crate) child: Child,
    log: std::path::PathBuf,
}

impl NatmIp {
    /// Starts `natm ip ARGS` (stderr to `log`) and waits for its interface natm0.
    pub(crate) fn start(args: &[String], log: std::path::PathBuf) -> NatmIp {
        let mut ip = NatmIp {
            child: Command::new(env!("CARGO_BIN_EXE_natm"))
                .arg("ip")
                .args(args)
                .env("RUST_LOG", "info")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("log file"))
                .spawn()
                .expect("natm ip"),
            log,
        };
        let t = Instant::now();
        while !sh("ip link show natm0").status.success() {
            if let Some(st) = ip.child.try_wait().expect("wait") {
                panic!("natm ip ended ({st}): {}", ip.log());
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "no natm0: {}",
                ip.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        ip
    }

    pub(crate) fn log(&self) -> String {
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
pub(crate) fn rtts(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Median, min and max, for the log.
pub(crate) fn summary(v: &[f64]) -> String {
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
pub(crate) fn guest_output(g: &mut crate::guest::Guest, what: &str) -> (String, String) {
    let out = format!("NATM-GUEST {what}-out ");
    let rc = format!("NATM-GUEST {what} rc=");
    let mut text = String::new();
    loop {
        let l = g.wait_for(what, Duration::from_secs(60), |l| {
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
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> Vec<u8> {
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

pub(crate) fn md5_hex(data: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The guest's tables as its script prints them after its tests, up to its
/// `NATM-GUEST done`: `atmarp -a` (`arp …`), /proc/net/atm/vc (`vc …`) and atmarpd's
/// log lines (`atmarpd …`).
#[derive(Default)]
pub(crate) struct GuestTables {
    pub(crate) arp: Vec<String>,
    pub(crate) vcs: Vec<String>,
    pub(crate) atmarpd: Vec<String>,
}

pub(crate) fn guest_tables(g: &mut crate::guest::Guest) -> GuestTables {
    let mut t = GuestTables::default();
    loop {
        let l = g.wait_for("the guest's tables", Duration::from_secs(60), |l| {
            l.strip_prefix("NATM-GUEST ").map(str::to_string)
        });
        if l == "done" {
            return t;
        }
        for (prefix, to) in [
            ("arp ", &mut t.arp),
            ("vc ", &mut t.vcs),
            ("atmarpd ", &mut t.atmarpd),
        ] {
            if let Some(a) = l.strip_prefix(prefix) {
                to.push(a.to_string());
            }
        }
    }
}

/// TCP from the guest at `guest`: its httpd's /seq.txt, `seq 1 lines` byte-exact;
/// then /cgi-bin/go, the signal for the guest's turn, and its `go` marker.
pub(crate) fn fetch_seq_then_go(
    g: &mut crate::guest::Guest,
    guest: std::net::Ipv4Addr,
    lines: u32,
) {
    let web = SocketAddr::from((guest, 8080));
    let seq = http_get(web, "/seq.txt");
    let want: String = (1..=lines).map(|i| format!("{i}\n")).collect();
    assert!(
        seq == want.as_bytes(),
        "seq.txt: {} bytes, not {}",
        seq.len(),
        want.len()
    );
    http_get(web, "/cgi-bin/go");
    g.marker("go", Duration::from_secs(60));
}

/// TCP to the guest at `guest`: 100 kB (every octet value, over several MTUs) to its
/// nc on port 7001, and the guest's digest of what it took must match.
pub(crate) fn send_blob(g: &mut crate::guest::Guest, guest: std::net::Ipv4Addr) {
    let blob: Vec<u8> = (0..100_000u32).map(|i| (i * 31 + i / 256) as u8).collect();
    let mut s =
        TcpStream::connect_timeout(&SocketAddr::from((guest, 7001)), Duration::from_secs(10))
            .expect("connect to the guest's nc");
    s.write_all(&blob).expect("send the blob");
    s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    drop(s);
    let got = g.marker("blob rc=", Duration::from_secs(60));
    assert_eq!(
        got,
        format!("0 md5={} len={}", md5_hex(&blob), blob.len()),
        "the guest's copy of the blob"
    );
}
