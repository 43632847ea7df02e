//! `natm` tools run against a test's sigd: each a child process killed on drop, its
//! output collected by threads so that no pipe fills, waited for under a deadline.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Sigd;

/// A `natm` child: killed on drop; its output collected by threads so that no pipe
/// fills up.
pub(crate) struct Proc {
    child: Option<Child>,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
    what: String,
}

/// How a tool ended.
pub(crate) struct Done {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: String,
}

/// `natm ARGS --sigd SOCKET`, fed `stdin` if given.
pub(crate) fn natm(sigd: &Sigd, args: &[&str], stdin: Option<Vec<u8>>) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_natm"));
    cmd.args(args)
        .arg("--sigd")
        .arg(&sigd.socket)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    spawn(&mut cmd, stdin, format!("natm {}", args.join(" ")))
}

/// Start `cmd` (its stdin as the caller set it up, piped if `stdin` is given, which
/// is then written to it), its output collected.
pub(crate) fn spawn(cmd: &mut Command, stdin: Option<Vec<u8>>, what: String) -> Proc {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{what}`: {e}"));
    if let Some(data) = stdin {
        let mut w = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
    }
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    Proc {
        child: Some(child),
        out: Some(out),
        err: Some(err),
        what,
    }
}

impl Proc {
    /// Wait up to `limit` for the exit; a process still running is killed and the
    /// test fails.
    pub(crate) fn wait(self, limit: Duration) -> Done {
        self.wait_or(limit, String::new)
    }

    /// `wait`, with `context()` (what else the test saw) in the failure message.
    pub(crate) fn wait_or(mut self, limit: Duration, context: impl FnOnce() -> String) -> Done {
        let mut c = self.child.take().unwrap();
        let until = Instant::now() + limit;
        let status = loop {
            if let Some(st) = c.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > until {
                let _ = c.kill();
                let _ = c.wait();
                let err =
                    String::from_utf8_lossy(&self.err.take().unwrap().join().unwrap()).into_owned();
                panic!(
                    "`{}` still ran after {limit:?}: {err}\n{}",
                    self.what,
                    context()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Done {
            status,
            stdout: self.out.take().unwrap().join().unwrap(),
            stderr: String::from_utf8_lossy(&self.err.take().unwrap().join().unwrap()).into_owned(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Start `natm listen` on host B and wait until its sigd holds the listener.
pub(crate) fn listen(b: &Sigd, args: &[&str]) -> Proc {
    let sap = args[0];
    let before = listeners(b, sap);
    let p = natm(b, &[&["listen"], args].concat(), None);
    let until = Instant::now() + Duration::from_secs(10);
    while listeners(b, sap) == before {
        assert!(Instant::now() < until, "the listener never bound");
        std::thread::sleep(Duration::from_millis(20));
    }
    p
}

/// Listeners `s` holds on `sap`.
pub(crate) fn listeners(s: &Sigd, sap: &str) -> usize {
    s.stat()["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["sap"] == sap)
        .count()
}

/// `n` bytes no two offsets of which repeat for a long way (a lost or reordered
/// message shows up), from a fixed xorshift seed.
#[allow(dead_code)]
pub(crate) fn data(n: usize) -> Vec<u8> {
    let mut x = 0x1234_5678_9abc_def0u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The last JSON line a tool printed (`--json`: its summary).
#[allow(dead_code)]
pub(crate) fn json_line(b: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(b);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {text}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}
