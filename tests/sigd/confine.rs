//! Least privilege (issue 31, `natm_sigd::confine`): a sigd started as root gives up
//! root once it has bound its sockets: it becomes the user `--user` names, or stays
//! uid 0 without any capability when no user may write its directories; either way
//! it goes on serving calls. A user that may not write them is refused at start.

use std::process::Command;
use std::time::Duration;

use natm::ulib::Wait;

use crate::sigd_support::{free_port, Sigd};

const CONF: &str =
    "addresses = [\"+4420001\"]\n[link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000\n";
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The `/proc/PID/status` line `key:` (its value, whitespace-separated).
fn status(pid: u32, key: &str) -> Vec<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in {s}"))
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// An echo call through `sigd`: a listener in this process answers one message.
fn echo_call(sigd: &Sigd) {
    let server = sigd.host();
    let l = server.bind("echo", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let c = l
            .next_call(Wait::For(Duration::from_secs(5)))
            .unwrap()
            .accept()
            .unwrap();
        let m = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
        c.send(&m, Wait::Block).unwrap();
        c.flush(Duration::from_secs(5)).unwrap();
    });
    let c = sigd.host().connect("+4420001:echo", "reliable").unwrap();
    c.send(b"through a confined sigd", Wait::Block).unwrap();
    let back = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
    assert_eq!(back, b"through a confined sigd");
    t.join().unwrap();
}

#[test]
fn a_root_sigd_keeps_no_capability_and_still_serves_calls() {
    if !is_root() {
        eprintln!("skipped: sigd gives up root only when started as root");
        return;
    }
    // Its directory is root's (0755): no other user may write it, so sigd stays
    // uid 0, but without a single capability, and sandboxed.
    let sigd = Sigd::start(CONF);
    // sigd listens before it gives up root; a request is answered only by its loop,
    // which starts after.
    sigd.stat();
    let pid = sigd.pid();
    assert_eq!(status(pid, "Uid"), ["0", "0", "0", "0"]);
    for set in ["CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"] {
        assert_eq!(status(pid, set), ["0000000000000000"], "{set}");
    }
    assert_eq!(status(pid, "NoNewPrivs"), ["1"]);
    let log = sigd.log();
    assert!(
        log.contains("running as uid 0 without capabilities")
            && log.contains("Landlock sandbox enforced"),
        "{log}"
    );
    echo_call(&sigd);
}

#[test]
fn sigd_becomes_the_user_it_is_given_and_removes_its_socket_at_the_end() {
    if !is_root() {
        eprintln!("skipped: only root can become another user");
        return;
    }
    let mut sigd = Sigd::prepare(CONF, free_port());
    std::os::unix::fs::chown(&sigd.dir, Some(NOBODY), Some(NOBODY)).unwrap();
    sigd.args = vec!["--user".into(), "nobody".into()];
    sigd.spawn();
    sigd.stat();
    let pid = sigd.pid();
    let nobody = NOBODY.to_string();
    let nobody = nobody.as_str();
    assert_eq!(status(pid, "Uid"), [nobody; 4]);
    assert_eq!(status(pid, "Gid"), [nobody; 4]);
    assert_eq!(
        status(pid, "Groups"),
        [nobody],
        "no supplementary group kept"
    );
    assert_eq!(status(pid, "CapEff"), ["0000000000000000"]);
    assert_eq!(status(pid, "NoNewPrivs"), ["1"]);
    echo_call(&sigd);
    // The socket root made is removed by the user sigd became, on SIGTERM.
    assert!(sigd.terminate().success(), "{}", sigd.log());
    assert!(!sigd.socket.exists(), "{}", sigd.log());
}

#[test]
fn a_user_that_may_not_write_sigds_directory_is_refused_at_start() {
    if !is_root() {
        eprintln!("skipped: only root can become another user");
        return;
    }
    let sigd = Sigd::prepare(CONF, free_port());
    let out = Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["sigd", "--user", "nobody", "--config"])
        .arg(&sigd.config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--user nobody: it may not write")
            && err.contains(&*sigd.dir.to_string_lossy()),
        "{err}"
    );
    assert!(!sigd.socket.exists(), "no stale socket left: {err}");
    let out = Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["sigd", "--user", "no-such-user-here", "--config"])
        .arg(&sigd.config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no such user"), "{err}");
}
