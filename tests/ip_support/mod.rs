//! Helpers for the `natm ip` tests: namespaces joined by veths or a bridge, the
//! processes in them, their logs and stats, removed on drop; the tools the tests
//! need; small Python TCP endpoints.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) const NATM: &str = env!("CARGO_BIN_EXE_natm");

/// Why the tests cannot run here, if they cannot.
pub(crate) fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    for tool in ["ip", "ping", "python3"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} missing"));
        }
    }
    None
}

pub(crate) fn sh(cmd: &[&str]) -> Output {
    Command::new(cmd[0]).args(&cmd[1..]).output().expect("runs")
}

pub(crate) fn ok(cmd: &[&str]) {
    let o = sh(cmd);
    assert!(
        o.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Namespaces and what runs in them; everything goes on drop, on every exit path.
pub(crate) struct Lab {
    pub(crate) ns: Vec<String>,
    pub(crate) dir: PathBuf,
    pub(crate) tag: String,
    pub(crate) children: Vec<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Lab {
    /// `n` namespaces named for this process and `case`.
    pub(crate) fn new(case: &str, n: usize) -> Lab {
        let tag = format!("{:x}{case}", std::process::id() & 0xffff);
        let dir = std::env::temp_dir().join(format!("natm-ipnet-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut lab = Lab {
            ns: Vec::new(),
            dir,
            tag,
            children: Vec::new(),
        };
        for i in 0..n {
            let name = format!("nnet{}{i}", lab.tag);
            ok(&["ip", "netns", "add", &name]);
            lab.ns.push(name);
            ok(&["ip", "-n", &lab.ns[i], "link", "set", "lo", "up"]);
        }
        lab
    }

    /// A veth between namespaces `i` and `j` with these addresses (`/24`).
    pub(crate) fn veth(&self, i: usize, a: &str, j: usize, b: &str) {
        let (va, vb) = (
            format!("v{}{i}{j}", self.tag),
            format!("v{}{j}{i}", self.tag),
        );
        self.veth_pair(i, &va, j, &vb);
        self.up(i, &va, Some(a));
        self.up(j, &vb, Some(b));
    }

    /// A bridge in namespace `at` with a veth to each namespace `i` before it,
    /// addressed `addrs[i]/24` there.
    pub(crate) fn bridge(&self, at: usize, addrs: &[&str]) {
        let br = format!("b{}", self.tag);
        ok(&[
            "ip",
            "-n",
            &self.ns[at],
            "link",
            "add",
            &br,
            "type",
            "bridge",
        ]);
        self.up(at, &br, None);
        for (i, addr) in addrs.iter().enumerate() {
            let (va, vb) = (format!("v{}{i}", self.tag), format!("v{}{i}b", self.tag));
            self.veth_pair(i, &va, at, &vb);
            self.up(i, &va, Some(addr));
            ok(&["ip", "-n", &self.ns[at], "link", "set", &vb, "master", &br]);
            self.up(at, &vb, None);
        }
    }

    /// A veth pair: `va` in namespace `i`, its peer `vb` in namespace `j`.
    fn veth_pair(&self, i: usize, va: &str, j: usize, vb: &str) {
        ok(&[
            "ip",
            "link",
            "add",
            va,
            "netns",
            &self.ns[i],
            "type",
            "veth",
            "peer",
            "name",
            vb,
            "netns",
            &self.ns[j],
        ]);
    }

    /// Link `dev` of namespace `n` up, with `addr/24` first if given.
    fn up(&self, n: usize, dev: &str, addr: Option<&str>) {
        if let Some(addr) = addr {
            let cidr = format!("{addr}/24");
            ok(&["ip", "-n", &self.ns[n], "addr", "add", &cidr, "dev", dev]);
        }
        ok(&["ip", "-n", &self.ns[n], "link", "set", dev, "up"]);
    }

    pub(crate) fn cmd(&self, i: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i]]).args(args);
        c
    }

    pub(crate) fn run(&self, i: usize, args: &[&str]) -> Output {
        self.cmd(i, args).output().expect("runs")
    }

    pub(crate) fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().expect("utf-8").to_owned()
    }

    pub(crate) fn spawn(&mut self, i: usize, args: &[&str], log: &str) {
        let child = self
            .cmd(i, args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(
                std::fs::File::create(self.dir.join(log)).expect("log"),
            ))
            .stderr(Stdio::from(
                std::fs::File::create(self.dir.join(format!("{log}.err"))).expect("log"),
            ))
            .spawn()
            .expect("spawns");
        self.children.push(child);
    }

    pub(crate) fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// Every log of the case, for a failure's message.
    pub(crate) fn logs(&self) -> String {
        let mut out = String::new();
        let mut names: Vec<_> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".err"))
            .collect();
        names.sort();
        for n in names {
            let text = self.log(&n);
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            out += &format!("--- {n}\n");
            for l in tail.into_iter().rev() {
                out += l;
                out.push('\n');
            }
        }
        out
    }

    /// Wait until `natm ip` logging to `NAME.err` says its interface is up. Its
    /// listeners (SAP `ip`, B-LLI LLC, `atmarp` on the ATMARP server) are bound by
    /// then: a client started after the server never finds `atmarp` not yet bound
    /// (cause 88) and falls back to an RFC 2225 LLC VC, which carries every class of
    /// the peer, so no flow of its policy gets a VC of its own.
    pub(crate) fn wait_ip_up(&self, name: &str, secs: u64) {
        self.wait_for(&format!("{name} up"), secs, || {
            self.log(&format!("{name}.err")).contains(" up (mtu ")
        });
    }

    pub(crate) fn wait_for(&self, what: &str, secs: u64, mut f: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(secs);
        while !f() {
            assert!(Instant::now() < until, "{what}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `natm stat --json` of the sigd whose socket is `sock` in namespace `i`.
    pub(crate) fn sigd_stat(&self, i: usize, sock: &str) -> Value {
        let o = self.run(i, &[NATM, "stat", "--json", "--socket", sock]);
        assert!(
            o.status.success(),
            "natm stat: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).expect("JSON")
    }

    /// The socket of the sigd that namespace `i` runs by the usual name.
    pub(crate) fn sock(&self, i: usize) -> PathBuf {
        self.dir.join(format!("sigd{i}.sock"))
    }

    /// `natm stat --json` of that sigd.
    pub(crate) fn stat(&self, i: usize) -> Value {
        self.sigd_stat(i, self.sock(i).to_str().expect("utf-8"))
    }

    /// The QoS of each call on SAP `ip` that sigd holds.
    pub(crate) fn ip_calls(&self, i: usize) -> Vec<String> {
        ip_calls(&self.stat(i))
    }

    /// A switch's stat file (`Null` before its first).
    pub(crate) fn switch_stat(&self, name: &str) -> Value {
        let s = std::fs::read_to_string(self.dir.join(format!("{name}.json"))).unwrap_or_default();
        serde_json::from_str(&s).unwrap_or(Value::Null)
    }

    pub(crate) fn ping(&self, from: usize, args: &[&str]) -> Output {
        let mut a = vec!["ping", "-c", "3", "-i", "0.2", "-w", "20"];
        a.extend_from_slice(args);
        self.run(from, &a)
    }

    pub(crate) fn ping_ok(&self, from: usize, args: &[&str]) -> String {
        let o = self.ping(from, args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "ping {args:?}: {text}\n{}", self.logs());
        text
    }
}

/// The QoS of each call on SAP `ip` in a sigd's `natm stat --json`.
pub(crate) fn ip_calls(stat: &Value) -> Vec<String> {
    stat["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["sap"] == "ip")
        .map(|c| c["qos"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A TCP receiver writing what it gets to a file, and a sender of a file.
pub(crate) const TCP_SINK: &str = "import socket,sys\n\
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(60)\n\
c,_=s.accept(); c.settimeout(60); f=open(sys.argv[3],'wb')\n\
while True:\n  b=c.recv(65536)\n  if not b: break\n  f.write(b)\nf.close()\n";

pub(crate) const TCP_SOURCE: &str = "import socket,sys,time\n\
d=open(sys.argv[3],'rb').read()\n\
for i in range(200):\n  try:\n    c=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20); break\n  except OSError: time.sleep(0.1)\n\
c.sendall(d); c.close()\n";

pub(crate) fn python(lab: &Lab, i: usize, script: &str, args: &[&str]) -> Command {
    let mut c = lab.cmd(i, &["python3", "-c", script]);
    c.args(args);
    c
}

/// Wait until process `pid` has a socket on `port` in its network namespace
/// (`/proc/PID/net/udp` or `tcp`: `proto`), bound for UDP or listening for TCP: a
/// server started in a namespace is ready for its client.
#[allow(dead_code)]
pub(crate) fn wait_port(pid: u32, proto: &str, port: u16) {
    let suffix = format!(":{port:04X}");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/{proto}")).unwrap_or_default();
        // TCP: state 0A is LISTEN; a bound UDP socket is 07.
        let ready = table.lines().skip(1).any(|l| {
            let mut f = l.split_whitespace().skip(1);
            let local = f.next().unwrap_or("");
            let state = f.nth(1).unwrap_or("");
            local.ends_with(&suffix) && (proto == "udp" || state == "0A")
        });
        if ready {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "process {pid} has no {proto} socket on port {port} after 20 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
