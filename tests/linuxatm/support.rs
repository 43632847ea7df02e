//! The Linux-ATM guest harness for tests: prepare it (`scripts/linuxatm/prepare.sh`,
//! cached under target/linuxatm), boot it on a test script from tests/linuxatm/guest
//! (`scripts/linuxatm/boot.sh`), and read its serial console line by line. Lines that
//! start with `NATM-GUEST ` are the guest scripts' markers; `aread` prints frames as
//! `LEN:  HH HH …`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A cold prepare installs packages and downloads ~200 MB; bound it anyway.
const PREPARE_LIMIT: Duration = Duration::from_secs(900);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Prepares the guest, or says why this machine cannot run it (then the caller
/// skips). A failure of the recipe itself panics: that is a bug, not a skip.
pub(crate) fn prepare() -> Result<(), String> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Err("the guest is an x86-64 Debian kernel run by qemu on Linux".into());
    }
    let start = Instant::now();
    let mut child = Command::new("bash")
        .arg(repo().join("scripts/linuxatm/prepare.sh"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    let err = child.stderr.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            s.push_str(&l);
            s.push('\n');
        }
        let _ = tx.send(s);
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for prepare.sh") {
            break st;
        }
        if start.elapsed() > PREPARE_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("scripts/linuxatm/prepare.sh took over {PREPARE_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    match status.code() {
        Some(0) => {
            eprintln!(
                "linuxatm: guest prepared in {:.1} s",
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Some(3) => Err(log.trim().to_string()),
        _ => panic!("scripts/linuxatm/prepare.sh failed ({status}):\n{log}"),
    }
}

/// Prepares the guest, or prints why this machine skips the test (then false).
pub(crate) fn ready() -> bool {
    match prepare() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("SKIPPED: this machine cannot run the Linux-ATM guest: {why}");
            false
        }
    }
}

/// A booted guest running one test script; killed on drop.
pub(crate) struct Guest {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    /// Every console line so far, for failure messages.
    console: Arc<Mutex<Vec<String>>>,
    /// Lines taken by [`Guest::wait_for`] but not matched, still available to it.
    seen: Vec<String>,
    pub(crate) started: Instant,
}

impl Guest {
    /// Boots tests/linuxatm/guest/`test`.sh with `natm_KEY=VALUE` arguments (values
    /// without spaces: they travel on the kernel command line); `fwd` forwards the
    /// host's 127.0.0.1:`fwd` to the guest's TCP port 2812.
    pub(crate) fn boot(test: &str, args: &[(&str, String)], fwd: Option<u16>) -> Guest {
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("scripts/linuxatm/boot.sh")).arg(test);
        if let Some(p) = fwd {
            cmd.env("NATM_LINUXATM_FWD", p.to_string());
        }
        for (k, v) in args {
            assert!(
                !v.contains(char::is_whitespace),
                "{k}={v}: no spaces on the kernel command line"
            );
            cmd.arg(format!("natm_{k}={v}"));
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run scripts/linuxatm/boot.sh");
        let out = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        let console = Arc::new(Mutex::new(Vec::new()));
        let all = Arc::clone(&console);
        std::thread::spawn(move || {
            for l in BufReader::new(out).split(b'\n').map_while(Result::ok) {
                let l = String::from_utf8_lossy(&l)
                    .trim_end_matches('\r')
                    .to_string();
                all.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(l.clone());
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Guest {
            child: Some(child),
            lines: rx,
            console,
            seen: Vec::new(),
            started: Instant::now(),
        }
    }

    /// The console so far.
    pub(crate) fn console(&self) -> String {
        self.console
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n")
    }

    /// The first console line (not yet taken) for which `f` gives a value, within
    /// `limit`; panics with the console otherwise.
    pub(crate) fn wait_for<T>(
        &mut self,
        what: &str,
        limit: Duration,
        mut f: impl FnMut(&str) -> Option<T>,
    ) -> T {
        if let Some(i) = self.seen.iter().position(|l| f(l).is_some()) {
            let l = self.seen.remove(i);
            return f(&l).expect("matched just now");
        }
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some(v) = f(&l) {
                        return v;
                    }
                    if l.starts_with("NATM-GUEST fail") || l.starts_with("NATM-GUEST error") {
                        panic!("the guest failed: {l}\n--- console:\n{}", self.console());
                    }
                    self.seen.push(l);
                }
                Err(_) => panic!(
                    "no {what} from the guest within {limit:?}\n--- console:\n{}",
                    self.console()
                ),
            }
        }
    }

    /// Waits for the marker line `NATM-GUEST <prefix>…` and returns the rest of it.
    pub(crate) fn marker(&mut self, prefix: &str, limit: Duration) -> String {
        let p = format!("NATM-GUEST {prefix}");
        self.wait_for(&p.clone(), limit, |l| {
            l.strip_prefix(&p).map(|r| r.trim().to_string())
        })
    }

    /// Waits for the next frame `aread` prints.
    pub(crate) fn aread_frame(&mut self, limit: Duration) -> Vec<u8> {
        self.wait_for("aread frame", limit, parse_aread)
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // boot.sh execs qemu, so this is qemu once it runs.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A line `aread` prints for one frame: `LEN:  HH HH …` (uppercase hex), checked
/// against its length.
pub(crate) fn parse_aread(line: &str) -> Option<Vec<u8>> {
    let (len, hex) = line.trim().split_once(':')?;
    let len: usize = len.trim().parse().ok()?;
    let bytes: Option<Vec<u8>> = hex
        .split_whitespace()
        .map(|h| {
            (h.len() == 2)
                .then(|| u8::from_str_radix(h, 16).ok())
                .flatten()
        })
        .collect();
    bytes.filter(|b| b.len() == len)
}

/// The directory the prepared guest lives in.
pub(crate) fn cache_dir() -> PathBuf {
    std::env::var_os("NATM_LINUXATM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/linuxatm"))
}
