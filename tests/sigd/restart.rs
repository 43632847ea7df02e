//! A sigd SIGKILLed in the middle of a transfer (issue 16 item 6): the transfer goes
//! on, the restarted sigd takes the call over from the application that reconnects,
//! and the call is kept or released at both ends alike (docs/sigd.md "sigd
//! restart", docs/SECURITY.md "sigd restart").

use natm::ulib::Wait;
use std::time::{Duration, Instant};

use crate::sigd_support::tool::{self, Proc};
use crate::sigd_support::{free_port, pair, Sigd, LINK};
use crate::switch_support::SwitchProc;

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
    start_to(a, b, "+4420002:sink", 1)
}

/// `start` calling `called` on B, once B's sigd holds `rows` calls (2 when A and B
/// are one sigd: a call inside one host is a row per end).
fn start_to(a: &Sigd, b: &Sigd, called: &str, rows: usize) -> Transfer {
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
            called,
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
    wait_calls(b, rows, Duration::from_secs(10));
    // The call is up (waited for above); the transfer runs 700 ms before anything
    // is killed: a scenario's time, not a wait for an event.
    std::thread::sleep(Duration::from_millis(700));
    Transfer {
        dir,
        data,
        listen,
        call,
    }
}

impl Transfer {
    /// Both tools succeed and the listener wrote exactly what was sent; `logs` (the
    /// daemons' logs, read when a tool failed) say why one did not.
    fn finish(self, logs: impl Fn() -> String) {
        let c = self.call.wait(Duration::from_secs(60));
        assert!(
            c.status.success(),
            "natm call failed: {}\n{}",
            c.stderr,
            logs()
        );
        let l = self.listen.wait(Duration::from_secs(30));
        assert!(
            l.status.success(),
            "natm listen failed: {}\n{}",
            l.stderr,
            logs()
        );
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
    t.finish(|| format!("A's sigd:\n{}\nB's sigd:\n{}", a.log(), b.log()));
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
    // Nobody reclaims the call: B's sigd finds A's again, asks about the call, hears
    // "no such call" and releases it; its listener learns the call is gone.
    let dir = orphan_is_released(&mut a, &b, "at the survivor");
    drop(dir);
}

/// A transfer from A to B; A's sigd dies, then the caller itself, before A's sigd
/// is back (0.5 s later). Nobody reclaims the call: B's listener ends with a cause
/// and neither sigd holds a call. Returns the transfer's directory.
fn orphan_is_released(a: &mut Sigd, b: &Sigd, where_: &str) -> Dir {
    let t = start(a, b);
    let (l, dir) = caller_dies_with_its_sigd(a, t, where_);
    assert!(l.stderr.contains("cause"), "{}", l.stderr);
    b.wait_no_calls();
    assert!(calls(a).is_empty());
    dir
}

/// Kills `a`'s sigd under the running transfer `t`, then the caller itself; restarts
/// the sigd 0.5 s later and waits for the listener to end, which it must with an
/// error (the call cut short). Returns the listener's outcome and the directory.
fn caller_dies_with_its_sigd(a: &mut Sigd, t: Transfer, where_: &str) -> (tool::Done, Dir) {
    a.kill();
    let Transfer {
        call, listen, dir, ..
    } = t;
    drop(call);
    std::thread::sleep(Duration::from_millis(500));
    a.restart();
    let restarted = Instant::now();
    let l = listen.wait(Duration::from_secs(45));
    eprintln!(
        "released {where_} {:?} after the restart",
        restarted.elapsed()
    );
    assert!(!l.status.success(), "the listener sees the call cut short");
    (l, dir)
}

/// Host A (+4420001) and host B (+4420002) attached to one `natm switch` (frame
/// ports, signalling = "host", the default preservation time), every link up.
fn switched_pair() -> (SwitchProc, Sigd, Sigd) {
    let [ha, hb, sa, sb] = std::array::from_fn(|_| free_port());
    let port = |name: &str, bind, peer| {
        format!(
            "[[port]]\nname = \"{name}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = \"frame\"\n\
             line_rate = 1000000000\nbuffer = 16384\nsignalling = \"host\"\n"
        )
    };
    let sw = SwitchProc::start(
        "restart",
        &[
            port("a", sa, ha),
            port("b", sb, hb),
            "[[route]]\nprefix = \"+4420001\"\nport = \"a\"\n".into(),
            "[[route]]\nprefix = \"+4420002\"\nport = \"b\"\n".into(),
        ]
        .concat(),
    );
    let host = |n: u8, sig, switch| {
        Sigd::start_at(
            &format!(
                "addresses = [\"+442000{n}\"]\n{LINK}\n[[directory]]\nprefix = \"*\"\npeer = \"{switch}\"\nswitch = true\n"
            ),
            sig,
        )
    };
    let (a, b) = (host(1, ha, sa), host(2, hb, sb));
    let until = Instant::now() + Duration::from_secs(20);
    while !(a.stat()["peers"][0]["up"] == true && b.stat()["peers"][0]["up"] == true) {
        assert!(Instant::now() < until, "links not up: {}", sw.stat());
        std::thread::sleep(Duration::from_millis(50));
    }
    (sw, a, b)
}

/// The calls through the switch, as its stat file shows them.
fn switch_calls(sw: &SwitchProc) -> usize {
    sw.stat()["calls"].as_array().map_or(0, Vec::len)
}

/// Wait (up to 5 s, else fail) until the switch holds no call.
fn wait_switch_empty(sw: &SwitchProc) {
    let until = Instant::now() + Duration::from_secs(5);
    while switch_calls(sw) != 0 {
        assert!(Instant::now() < until, "{}", sw.stat());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kill one host's sigd (A's: the caller's; else B's: the listener's) mid-transfer
/// through the switch, restart it, and check the restarted sigd holds the call
/// again while the switch kept it and the transfer goes on to the end.
fn kill_and_restart_through_a_switch(kill_a: bool) {
    let (sw, mut a, mut b) = switched_pair();
    let t = start(&a, &b);
    assert_eq!(switch_calls(&sw), 1, "{}", sw.stat());
    let (victim, other) = if kill_a { (&mut a, &b) } else { (&mut b, &a) };
    victim.kill();
    std::thread::sleep(Duration::from_millis(500));
    victim.restart();
    let restarted = Instant::now();
    let took = wait_calls(victim, 1, Duration::from_secs(10));
    let row = calls(victim).remove(0);
    assert_eq!(row["state"], "active", "{row}");
    assert_eq!(victim.stat()["counters"]["calls_reclaimed"], 1);
    eprintln!(
        "restarted sigd ({}) holds the call through the switch again {:?} after its start",
        if kill_a { "caller's" } else { "callee's" },
        restarted.elapsed().max(took)
    );
    // The switch kept the call (and the other host's side of it) all along.
    assert_eq!(switch_calls(&sw), 1, "{}", sw.stat());
    assert_eq!(calls(other).len(), 1);
    t.finish(|| {
        format!(
            "A's sigd:\n{}\nB's sigd:\n{}\nthe switch:\n{}",
            a.log(),
            b.log(),
            sw.log()
        )
    });
    // The caller's close releases the call at both ends and in the switch.
    a.wait_no_calls();
    b.wait_no_calls();
    wait_switch_empty(&sw);
    for s in [&a, &b] {
        assert_eq!(s.stat()["counters"]["reclaims_refused"], 0);
    }
}

#[test]
fn the_callers_sigd_killed_mid_transfer_through_a_switch_loses_no_byte() {
    kill_and_restart_through_a_switch(true);
}

#[test]
fn the_callees_sigd_killed_mid_transfer_through_a_switch_loses_no_byte() {
    kill_and_restart_through_a_switch(false);
}

/// One host (+4420001): `natm listen` and `natm call` both on its one sigd.
fn one_host(extra: &str) -> Sigd {
    Sigd::start(&format!("addresses = [\"+4420001\"]\n{LINK}\n{extra}"))
}

#[test]
fn a_call_inside_one_host_is_held_again_when_its_sigd_restarts_and_loses_no_byte() {
    let mut a = one_host("");
    let t = start_to(&a, &a, "+4420001:sink", 2);
    let before: Vec<_> = calls(&a);
    // sigd made its ticket key on first start, readable by its own user only...
    let key_file = a.socket.with_extension("ticket-key");
    let ticket_key = std::fs::read(&key_file).expect("the ticket key file next to the socket");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    a.kill();
    std::thread::sleep(Duration::from_millis(500));
    a.restart();
    let restarted = Instant::now();
    // Both applications reconnect and reclaim their halves; sigd pairs them.
    let took = wait_calls(&a, 2, Duration::from_secs(10));
    let held = restarted.elapsed().max(took);
    let rows = calls(&a);
    assert!(rows.iter().all(|r| r["state"] == "active"), "{rows:?}");
    let st = a.stat();
    assert_eq!(st["counters"]["calls_reclaimed"], 2, "one per end");
    assert_eq!(st["counters"]["reclaims_refused"], 0);
    // The same call as before: ids, ends and VCIs.
    let key = |r: &serde_json::Value| {
        (
            r["id"].to_string(),
            r["direction"].to_string(),
            r["tx_vci"].to_string(),
            r["rx_vci"].to_string(),
        )
    };
    let mut was: Vec<_> = before.iter().map(key).collect();
    let mut now: Vec<_> = rows.iter().map(key).collect();
    was.sort();
    now.sort();
    assert_eq!(now, was);
    // ...and the restarted sigd used the same key.
    assert_eq!(std::fs::read(&key_file).unwrap(), ticket_key);
    eprintln!(
        "restarted sigd holds the call inside one host again (both ends) {held:?} after its start"
    );
    t.finish(|| a.log());
    a.wait_no_calls();
}

#[test]
fn a_call_inside_one_host_whose_caller_died_with_its_sigd_is_released_after_the_window() {
    // The restarted sigd waits 1 s, not 3, for the other half.
    let mut a = one_host("[restart]\nreclaim_window_ms = 1000\n");
    let t = start_to(&a, &a, "+4420001:sink", 2);
    let (l, dir) = caller_dies_with_its_sigd(&mut a, t, "the listener's half inside one host");
    assert!(l.stderr.contains("cause 41"), "{}", l.stderr);
    assert!(l.stderr.contains("did not reclaim"), "{}", l.stderr);
    a.wait_no_calls();
    let st = a.stat();
    assert_eq!(
        st["counters"]["calls_reclaimed"], 1,
        "the listener's half only"
    );
    assert_eq!(st["vcis_in_use"], 0);
    drop(dir);
}

#[test]
fn a_call_through_a_switch_whose_application_died_with_its_sigd_is_released_at_both_ends() {
    let (sw, mut a, b) = switched_pair();
    // Nobody reclaims: the switch asks the restarted sigd about the call, hears "no
    // such call" after its reclaim window, and releases B's side.
    let dir = orphan_is_released(&mut a, &b, "at the far end through the switch");
    wait_switch_empty(&sw);
    drop(dir);
}

/// Wait (up to 10 s, else fail) until `s` holds `n` listeners on `sap`: how long.
fn wait_listeners(s: &Sigd, sap: &str, n: usize) -> Duration {
    let t0 = Instant::now();
    while tool::listeners(s, sap) != n {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{} listeners on {sap}, expected {n}: {}",
            tool::listeners(s, sap),
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    t0.elapsed()
}

/// Wait (up to 10 s) until `s` holds `listen`'s listener on `sap` again; else fail
/// with what `natm listen` printed (killed if still running) beside sigd's log: it
/// failed once in a loaded run of the suite, with only sigd's log to go on.
fn bound_again_or_why(s: &Sigd, listen: Proc, sap: &str) -> Proc {
    let t0 = Instant::now();
    while tool::listeners(s, sap) != 1 {
        if t0.elapsed() > Duration::from_secs(10) {
            let d = listen.wait_or(Duration::ZERO, || {
                format!(
                    "0 listeners on {sap} 10 s after the restart; sigd:\n{}",
                    s.log()
                )
            });
            panic!(
                "natm listen ended ({}) and was not bound again on {sap}: {}\nsigd:\n{}",
                d.status,
                d.stderr,
                s.log()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    listen
}

#[test]
fn a_listener_is_bound_again_when_its_sigd_restarts_and_takes_new_calls() {
    use natm::ulib::Error;
    let (a, mut b) = pair(LINK, LINK);
    let server = b.host();
    let l = server.bind("keep", "reliable").unwrap();
    // A thread waiting in accept when sigd dies learns it at once.
    let waiter = std::thread::spawn(move || {
        let r = l.accept(Wait::For(Duration::from_secs(30)));
        (l, r.map(|_| ()))
    });
    // Most likely in accept by then (a thread not yet there finds sigd gone all
    // the same: the outcome does not depend on the order).
    std::thread::sleep(Duration::from_millis(200));
    b.kill();
    let (l, r) = waiter.join().unwrap();
    assert!(matches!(r, Err(Error::SigdGone)), "{r:?}");
    std::thread::sleep(Duration::from_millis(500));
    b.restart();
    let restarted = Instant::now();
    wait_listeners(&b, "keep", 1);
    eprintln!(
        "the listener is bound again {:?} after sigd's restart",
        restarted.elapsed()
    );
    // A new call to it succeeds and carries data.
    let client = a.host();
    let caller = std::thread::spawn(move || {
        let c = client
            .connect("+4420002:keep", "reliable")
            .expect("the call after the restart");
        c.send(b"after the restart", Wait::Block).unwrap();
        let echo = c.recv(Wait::For(Duration::from_secs(10))).unwrap().unwrap();
        (client, echo)
    });
    let conn = l
        .accept(Wait::For(Duration::from_secs(20)))
        .expect("accepted after the restart");
    let got = conn
        .recv(Wait::For(Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    assert_eq!(&got[..], b"after the restart");
    conn.send(&got, Wait::Block).unwrap();
    let (_client, echo) = caller.join().unwrap();
    assert_eq!(&echo[..], b"after the restart");
    assert!(!l.is_unbound());
}

#[test]
fn a_listener_its_restarted_sigd_will_not_bind_reports_why() {
    use natm::ulib::Error;
    let (_a, mut b) = pair(LINK, LINK);
    let server = b.host();
    let l = server.bind("+4420002:keep", "reliable").unwrap();
    b.kill();
    // The restarted sigd no longer has the address the listener was bound on.
    let cfg = std::fs::read_to_string(&b.config).unwrap();
    std::fs::write(
        &b.config,
        cfg.replace("addresses = [\"+4420002\"]", "addresses = [\"+4420009\"]"),
    )
    .unwrap();
    b.restart();
    // An accept that was already reading when the session ended fails with
    // `SigdGone` (at most once); the next one waits for the new binding.
    let mut r = l.accept(Wait::For(Duration::from_secs(20)));
    if matches!(r, Err(Error::SigdGone)) {
        r = l.accept(Wait::For(Duration::from_secs(20)));
    }
    match r {
        Err(Error::Refused {
            cause: 1,
            ref detail,
        }) => {
            assert!(detail.contains("did not bind"), "{detail}")
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(l.is_unbound());
    assert_eq!(tool::listeners(&b, "keep"), 0);
}

#[test]
fn natm_listen_keep_takes_calls_after_its_sigd_restarts() {
    let (a, mut b) = pair(LINK, LINK);
    let listen = tool::listen(&b, &["echo", "--echo", "--keep", "--qos", "reliable"]);
    b.kill();
    std::thread::sleep(Duration::from_millis(500));
    b.restart();
    let listen = bound_again_or_why(&b, listen, "echo");
    let data = tool::data(10_000);
    let c = tool::natm(
        &a,
        &["call", "+4420002:echo", "--qos", "reliable"],
        Some(data.clone()),
    )
    .wait(Duration::from_secs(30));
    assert!(c.status.success(), "natm call failed: {}", c.stderr);
    assert!(
        c.stdout == data,
        "echoed byte-exact through the listener bound again"
    );
    // Still listening.
    assert_eq!(tool::listeners(&b, "echo"), 1);
    drop(listen);
}
