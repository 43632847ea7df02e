//! A sigd SIGKILLed in the middle of a transfer (issue 16 item 6): the transfer goes
//! on, the restarted sigd takes the call over from the application that reconnects,
//! and the call is kept or released at both ends alike (docs/ARCHITECTURE.md "sigd
//! restart", docs/SECURITY.md "sigd restart").

mod sigd_support;

use std::time::{Duration, Instant};

use sigd_support::tool::{self, Proc};
use sigd_support::{pair, Sigd, LINK};

/// Long enough for a kill and a restart in the middle: 3 MB at 4 Mbit/s, 6 s.
const BYTES: usize = 3_000_000;
const RATE: &str = "4Mbps";

/// The calls `s` holds, as `natm stat --json` shows them.
fn calls(s: &Sigd) -> Vec<serde_json::Value> {
    s.stat()["calls"].as_array().unwrap().clone()
}

/// Wait until `s` holds `n` calls, up to `limit`: how long it took.
fn wait_calls(s: &Sigd, n: usize, limit: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let c = calls(s);
        if c.len() == n {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < limit,
            "{} calls after {limit:?}, expected {n}: {c:?}\n{}",
            c.len(),
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A directory of the test's own, removed on drop.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new() -> Dir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let d = std::env::temp_dir().join(format!("natm-restart-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Transfer {
    dir: Dir,
    data: Vec<u8>,
    listen: Proc,
    call: Proc,
}

/// A reliable `natm call` from A to `natm listen` on B, writing to a file, paced to
/// last several seconds; returns once B's sigd holds the call.
fn start(a: &Sigd, b: &Sigd) -> Transfer {
    let dir = Dir::new();
    let data = tool::data(BYTES);
    let input = dir.0.join("in.bin");
    std::fs::write(&input, &data).unwrap();
    let out = dir.0.join("out.bin");
    let listen = tool::listen(
        b,
        &[
            "sink",
            "--qos",
            "reliable",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    );
    let call = tool::natm(
        a,
        &[
            "call",
            "+4420002:sink",
            "--qos",
            "reliable",
            "--file",
            input.to_str().unwrap(),
            "--rate",
            RATE,
            "--json",
        ],
        None,
    );
    wait_calls(b, 1, Duration::from_secs(10));
    // Data is moving before anything is killed.
    std::thread::sleep(Duration::from_millis(700));
    Transfer {
        dir,
        data,
        listen,
        call,
    }
}

impl Transfer {
    /// Both tools succeed and the listener wrote exactly what was sent.
    fn finish(self) {
        let c = self.call.wait(Duration::from_secs(60));
        assert!(c.status.success(), "natm call failed: {}", c.stderr);
        let l = self.listen.wait(Duration::from_secs(30));
        assert!(l.status.success(), "natm listen failed: {}", l.stderr);
        let got = std::fs::read(self.dir.0.join("out.bin")).unwrap();
        assert_eq!(got.len(), self.data.len(), "every byte arrived");
        assert!(got == self.data, "byte-exact");
        // The caller's data-back goes to stdout, its summary to stderr.
        let summary = tool::json_line(c.stderr.as_bytes());
        assert_eq!(summary["bytes"].as_u64(), Some(BYTES as u64), "{summary}");
    }
}

/// Kill `victim`'s sigd mid-transfer, restart it, and check the restarted sigd
/// takes the call over while the transfer goes on to the end.
fn kill_and_restart(a: &mut Sigd, b: &mut Sigd, kill_a: bool) {
    let t = start(a, b);
    let victim = if kill_a { &mut *a } else { &mut *b };
    victim.kill();
    std::thread::sleep(Duration::from_millis(500));
    victim.restart();
    let restarted = Instant::now();
    // The application reconnects and reclaims its call.
    let took = wait_calls(victim, 1, Duration::from_secs(10));
    let row = calls(victim).remove(0);
    assert_eq!(row["state"], "active", "{row}");
    assert_eq!(victim.stat()["counters"]["calls_reclaimed"], 1);
    eprintln!(
        "restarted sigd holds the call again {:?} after its start",
        restarted.elapsed().max(took)
    );
    t.finish();
    // The callers' closes release the call at both ends.
    a.wait_no_calls();
    b.wait_no_calls();
}

#[test]
fn the_callers_sigd_killed_mid_transfer_loses_no_byte() {
    let (mut a, mut b) = pair(LINK, LINK);
    kill_and_restart(&mut a, &mut b, true);
}

#[test]
fn the_callees_sigd_killed_mid_transfer_loses_no_byte() {
    let (mut a, mut b) = pair(LINK, LINK);
    kill_and_restart(&mut a, &mut b, false);
}

#[test]
fn a_call_whose_application_died_with_its_sigd_is_released_at_both_ends() {
    // The restarted sigd (A) waits 1 s, not 3, for reclaims.
    let (mut a, b) = pair("[restart]\nreclaim_window_ms = 1000\n", LINK);
    let t = start(&a, &b);
    // The caller's sigd dies, then the caller itself, before sigd is back.
    a.kill();
    let Transfer {
        call, listen, dir, ..
    } = t;
    drop(call);
    std::thread::sleep(Duration::from_millis(500));
    a.restart();
    let restarted = Instant::now();
    // Nobody reclaims the call: B's sigd finds A's again, asks about the call, hears
    // "no such call" and releases it; its listener learns the call is gone.
    let l = listen.wait(Duration::from_secs(45));
    eprintln!(
        "released at the survivor {:?} after the restart",
        restarted.elapsed()
    );
    assert!(!l.status.success(), "the listener sees the call cut short");
    assert!(l.stderr.contains("cause"), "{}", l.stderr);
    b.wait_no_calls();
    assert!(calls(&a).is_empty());
    drop(dir);
}
