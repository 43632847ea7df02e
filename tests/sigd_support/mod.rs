//! Helpers for the multi-process sigd tests: start `natm sigd` in a temporary
//! directory with a free signalling port, wait until it serves, kill it on drop.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use natm::ulib::{Host, HostConfig};

pub(crate) mod tool;

static N: AtomicUsize = AtomicUsize::new(0);

/// A running `natm sigd`.
pub(crate) struct Sigd {
    child: Option<Child>,
    pub(crate) dir: PathBuf,
    pub(crate) socket: PathBuf,
    pub(crate) signalling: SocketAddr,
    pub(crate) config: PathBuf,
    /// Flags after `natm sigd --config FILE`.
    pub(crate) args: Vec<String>,
}

/// A loopback port free a moment ago, outside the kernel's ephemeral range and
/// never given twice in this process (`natm_cli::cli::loopnet::free_port`).
pub(crate) fn free_port() -> SocketAddr {
    natm_cli::cli::loopnet::free_port().unwrap()
}

impl Sigd {
    /// Start a sigd whose config is `toml` plus socket and signalling keys.
    pub(crate) fn start(toml: &str) -> Sigd {
        Self::start_at(toml, free_port())
    }

    pub(crate) fn start_at(toml: &str, signalling: SocketAddr) -> Sigd {
        let mut s = Self::prepare(toml, signalling);
        s.spawn();
        s
    }

    /// Its directory and configuration, not yet started ([`Sigd::spawn`]).
    pub(crate) fn prepare(toml: &str, signalling: SocketAddr) -> Sigd {
        let n = N.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("natm-sigd-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("sigd.sock");
        let config = dir.join("sigd.toml");
        let mut f = std::fs::File::create(&config).unwrap();
        writeln!(
            f,
            "socket = \"{}\"\nsignalling = \"{signalling}\"\n{toml}",
            socket.display()
        )
        .unwrap();
        Sigd {
            child: None,
            dir,
            socket,
            signalling,
            config,
            args: Vec::new(),
        }
    }

    /// Starts it and waits until it serves.
    pub(crate) fn spawn(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_natm"))
            .args(["sigd", "--config"])
            .arg(&self.config)
            .args(&self.args)
            .env("RUST_LOG", "natm=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(self.dir.join("sigd.log")).unwrap(),
            ))
            .spawn()
            .unwrap();
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(20);
        while UnixStream::connect(&self.socket).is_err() {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("sigd exited with {st}: {}", self.log());
            }
            assert!(Instant::now() < until, "sigd did not start: {}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The sigd process's id.
    pub(crate) fn process_id(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Its log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sigd.log")).unwrap_or_default()
    }

    /// SIGKILL it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM it and wait for the exit status.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let pid = rustix::process::Pid::from_raw(c.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > until {
                let _ = c.kill();
                panic!("sigd ignored SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Start it again with the same configuration.
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// A host whose calls go through this sigd.
    /// The sigd's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub(crate) fn host(&self) -> Host {
        Host::open(HostConfig {
            sigd_socket: Some(self.socket.clone()),
            connect_timeout: Duration::from_secs(5),
            ..HostConfig::default()
        })
        .unwrap()
    }

    /// Wait (up to 5 s, else fail) until this sigd holds no call.
    pub(crate) fn wait_no_calls(&self) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !self.stat()["calls"].as_array().unwrap().is_empty() {
            assert!(std::time::Instant::now() < until, "{}", self.stat());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `natm stat --json` as a value.
    pub(crate) fn stat(&self) -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_natm"))
            .args(["stat", "--json", "--socket"])
            .arg(&self.socket)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Sigd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A child process that is killed when dropped.
pub(crate) struct ChildGuard(pub(crate) Option<Child>);

impl ChildGuard {
    pub(crate) fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Spawn `natm test-helper` connecting through `sigd` to `to`; returns once it has
/// connected (its first line of output).
pub(crate) fn helper(sigd: &Sigd, to: &str) -> (ChildGuard, String) {
    helper_with(sigd, &["--connect", to])
}

/// Spawn `natm test-helper` with `args`; returns once it printed its first line.
pub(crate) fn helper_with(sigd: &Sigd, args: &[&str]) -> (ChildGuard, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["test-helper", "--socket"])
        .arg(&sigd.socket)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let guard = ChildGuard(Some(child));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the helper did not connect");
    (guard, line)
}

/// Host A (+4420001) and host B (+4420002), each routing the other's prefix.
pub(crate) fn pair(extra_a: &str, extra_b: &str) -> (Sigd, Sigd) {
    let (pa, pb) = (free_port(), free_port());
    let a = Sigd::start_at(
        &format!(
            "addresses = [\"+4420001\"]\n{extra_a}\n[[directory]]\nprefix = \"+4420002\"\npeer = \"{pb}\"\n"
        ),
        pa,
    );
    let b = Sigd::start_at(
        &format!(
            "addresses = [\"+4420002\"]\n{extra_b}\n[[directory]]\nprefix = \"+4420001\"\npeer = \"{pa}\"\n"
        ),
        pb,
    );
    (a, b)
}

/// Two sigds whose signalling link runs clear (`[[peer]] clear = true` at both
/// ends), for tests that read the Q.2931 messages on the wire.
pub(crate) fn pair_clear(extra_a: &str, extra_b: &str) -> (Sigd, Sigd) {
    let (pa, pb) = (free_port(), free_port());
    let a = Sigd::start_at(
        &format!(
            "addresses = [\"+4420001\"]\n{extra_a}\n[[directory]]\nprefix = \"+4420002\"\npeer = \"{pb}\"\n\
             [[peer]]\naddress = \"{pb}\"\nclear = true\n"
        ),
        pa,
    );
    let b = Sigd::start_at(
        &format!(
            "addresses = [\"+4420002\"]\n{extra_b}\n[[directory]]\nprefix = \"+4420001\"\npeer = \"{pa}\"\n\
             [[peer]]\naddress = \"{pa}\"\nclear = true\n"
        ),
        pb,
    );
    (a, b)
}

/// A link section: 100 Mbit/s, CPU cost per TPDU fixed (no measurement at start).
pub(crate) const LINK: &str = "[link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000";
