//! A host of the mesh: `natm-lab perf mesh-host`, run inside a host's namespace next
//! to its sigd, answers every call on the SAP `mesh` and places the calls the driver
//! asks for, one command a line on stdin, one answer a line on stdout; and
//! [`HostPeer`], the driver's end of it. Calls are placed from inside the namespace
//! so that their data sockets, like the signalling, use the host's veth.
//!
//! Commands: `up SECS` (wait until sigd's link to its switch is up), `call ADDR`,
//! `burst ADDR N CONC`, `hold ADDR`, `mark`, `released SECS`, `retry ADDR SECS`,
//! `drop`. Every wait is bounded by its SECS or the connect timeout.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use natm::ulib::{Connection, Error, Host, HostConfig, Wait};

use crate::perf::netlab::{reap, spawn_in};

/// The SAP every host answers on.
const SAP: &str = "mesh";
/// How long a single call may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for an answer beyond what the command itself may wait.
const SLACK: Duration = Duration::from_secs(30);

/// `natm-lab perf mesh-host`.
#[derive(Debug, clap::Args)]
pub(crate) struct HostArgs {
    /// The sigd's socket.
    #[arg(long)]
    socket: PathBuf,
}

/// A held call, and when it ended (if it has).
struct Held {
    /// Kept to keep the call; dropping it releases the call.
    _conn: Arc<Connection>,
    ended: Arc<Mutex<Option<Instant>>>,
}

/// Run the host: answer calls, obey stdin until it closes.
pub(crate) fn run(a: &HostArgs) -> natm_cli::cli::CliResult {
    let host = Host::open(HostConfig {
        sigd_socket: Some(a.socket.clone()),
        connect_timeout: CONNECT_TIMEOUT,
        ..HostConfig::default()
    })
    .context("cannot open the host")?;
    let listener = host.bind(SAP, "best-effort").context("cannot bind")?;
    std::thread::spawn(move || loop {
        match listener.next_call(Wait::For(Duration::from_secs(1))) {
            Ok(c) => {
                if let Ok(conn) = c.accept() {
                    std::thread::spawn(move || hold_until_released(&conn));
                }
            }
            Err(Error::TimedOut) => {}
            Err(_) => break,
        }
    });
    let mut held: Vec<Held> = Vec::new();
    let mut mark = Instant::now();
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("stdin")?;
        let w: Vec<&str> = line.split_whitespace().collect();
        let answer = match w.as_slice() {
            ["up", secs] => up(&host, secs.parse()?),
            ["call", addr] => match call(&host, addr) {
                Ok(_) => "ok".into(),
                Err(e) => format!("err {e}"),
            },
            ["burst", addr, n, conc] => burst(&host, addr, n.parse()?, conc.parse()?),
            ["hold", addr] => match call(&host, addr) {
                Ok(c) => {
                    held.push(watch(c));
                    "ok".into()
                }
                Err(e) => format!("err {e}"),
            },
            ["mark"] => {
                mark = Instant::now();
                "ok".into()
            }
            ["released", secs] => released(&held, mark, secs.parse()?),
            ["retry", addr, secs] => {
                let end = Instant::now() + Duration::from_secs_f64(secs.parse()?);
                let mut tries = 0u32;
                loop {
                    tries += 1;
                    match call(&host, addr) {
                        Ok(c) => {
                            held.push(watch(c));
                            break format!("ok {:.1} {tries}", ms(mark.elapsed()));
                        }
                        Err(e) if Instant::now() >= end => break format!("err {e}"),
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            }
            ["drop"] => {
                held.clear();
                "ok".into()
            }
            _ => format!("err unknown command {line:?}"),
        };
        let mut out = stdout.lock();
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn call(host: &Host, addr: &str) -> Result<Connection, Error> {
    host.connect(format!("{addr}:{SAP}").as_str(), "best-effort")
}

/// Keep an answered call until the caller releases it.
fn hold_until_released(c: &Connection) {
    loop {
        match c.recv(Wait::For(Duration::from_secs(1))) {
            Ok(Some(_)) | Err(Error::TimedOut) => {}
            _ => return,
        }
    }
}

/// Hold a placed call, noting when the network releases it.
fn watch(conn: Connection) -> Held {
    let conn = Arc::new(conn);
    let ended = Arc::new(Mutex::new(None));
    let (c, e) = (Arc::downgrade(&conn), ended.clone());
    std::thread::spawn(move || loop {
        let Some(c) = c.upgrade() else { return };
        match c.recv(Wait::For(Duration::from_millis(100))) {
            Ok(Some(_)) | Err(Error::TimedOut) => {}
            _ => {
                if let Ok(mut e) = e.lock() {
                    *e = Some(Instant::now());
                }
                return;
            }
        }
    });
    Held { _conn: conn, ended }
}

/// Wait until sigd's link to its switch is up: `ok`, or `err`.
fn up(host: &Host, secs: f64) -> String {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        let up = host
            .sigd_stat()
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .is_some_and(|v| v["peers"][0]["up"] == true);
        if up {
            return "ok".into();
        }
        if Instant::now() >= end {
            return "err sigd's link to its switch is not up".into();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `n` calls to `addr`, `conc` at a time, each released once connected:
/// `ok ADMITTED ATTEMPTED SECS`.
fn burst(host: &Host, addr: &str, n: usize, conc: usize) -> String {
    let t0 = Instant::now();
    let conc = conc.clamp(1, n.max(1));
    let workers: Vec<_> = (0..conc)
        .map(|w| {
            let (host, addr) = (host.clone(), addr.to_string());
            let mine = n / conc + usize::from(w < n % conc);
            std::thread::spawn(move || (0..mine).filter(|_| call(&host, &addr).is_ok()).count())
        })
        .collect();
    let admitted: usize = workers.into_iter().map(|w| w.join().unwrap_or(0)).sum();
    format!("ok {admitted} {n} {:.6}", t0.elapsed().as_secs_f64())
}

/// Wait until the first held call has ended: `ok MS_SINCE_MARK`, or `none`.
fn released(held: &[Held], mark: Instant, secs: f64) -> String {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let Some(h) = held.first() else {
        return "err nothing held".into();
    };
    loop {
        if let Some(t) = h.ended.lock().ok().and_then(|e| *e) {
            return format!("ok {:.1}", ms(t.saturating_duration_since(mark)));
        }
        if Instant::now() >= end {
            return "none".into();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The driver's end of a host: its process, commands in, answers out.
pub(super) struct HostPeer {
    child: Option<Child>,
    stdin: ChildStdin,
    answers: Receiver<String>,
}

impl HostPeer {
    /// Start `natm-lab perf mesh-host` in `ns` on sigd's `socket`.
    pub(super) fn start(ns: &str, socket: &std::path::Path) -> anyhow::Result<HostPeer> {
        let mut child = spawn_in(
            ns,
            &[
                "perf".into(),
                "mesh-host".into(),
                "--socket".into(),
                socket.display().to_string(),
            ],
            Stdio::piped(),
        )?;
        let stdin = child.stdin.take().context("the host has no stdin")?;
        let out = child.stdout.take().context("the host has no stdout")?;
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Ok(HostPeer {
            child: Some(child),
            stdin,
            answers,
        })
    }

    /// Send a command without waiting for its answer.
    pub(super) fn send(&mut self, cmd: &str) -> anyhow::Result<()> {
        writeln!(self.stdin, "{cmd}").context("the host has gone")?;
        self.stdin.flush().context("the host has gone")
    }

    /// The answer to the last command sent, waiting at most `wait` plus a margin.
    pub(super) fn answer(&mut self, wait: Duration) -> anyhow::Result<String> {
        match self.answers.recv_timeout(wait + SLACK) {
            Ok(a) => Ok(a),
            Err(_) => {
                let err = self.child.take().map(reap).unwrap_or_default();
                anyhow::bail!("a host did not answer: {err}")
            }
        }
    }

    /// Send a command and wait for its answer.
    pub(super) fn ask(&mut self, cmd: &str, wait: Duration) -> anyhow::Result<String> {
        self.send(cmd)?;
        self.answer(wait)
    }
}

impl Drop for HostPeer {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            reap(c);
        }
    }
}
