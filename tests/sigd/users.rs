//! Local users against a real `natm sigd` (issue 16, docs/SECURITY.md "Local
//! users"): a user other than root runs `natm listen` and `natm call` against a
//! root sigd and sees only its own calls in `natm stat`; a sigd out of file
//! descriptors answers with an error instead of leaving applications hanging; a
//! flood of binds is refused with sigd's memory bounded; `natm stat` pages
//! thousands of rows; several users together cannot take the connections kept
//! for root (issue 31).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::sigd_support::Sigd;
use natm::wire::ipc::{Decoder, Message};

const CONF: &str =
    "addresses = [\"+4420001\"]\n[link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000\n";
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `natm ARGS` against `sigd` ($NATM_SIGD) as user `uid` (and group `uid`, no
/// supplementary groups), through setpriv as `sigd/local.rs` drops root.
fn natm_as(uid: u32, sigd: &Sigd, args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(env!("CARGO_BIN_EXE_natm"))
        .args(args)
        .env("NATM_SIGD", &sigd.socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn have_setpriv() -> bool {
    Command::new("setpriv").arg("--version").output().is_ok()
}

/// sigd's resident memory, kB.
fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Read one message within `limit` (`None`: closed or nothing in time).
fn read_message(s: &mut UnixStream, dec: &mut Decoder, limit: Duration) -> Option<Message> {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(Some(m)) = dec.next_message() {
            return Some(m);
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => dec.push(&buf[..n]),
        }
    }
}

/// Wait until the peer has shut the connection down (POLLHUP), at most `limit`.
fn wait_for_hangup(s: &UnixStream, limit: Duration) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let until = Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "sigd never closed the refused connection");
        let mut fds = [PollFd::new(s, PollFlags::RDHUP)];
        let ts = Timespec::try_from(left).unwrap();
        if poll(&mut fds, Some(&ts)).unwrap() > 0 && fds[0].revents().contains(PollFlags::HUP) {
            return;
        }
    }
}

#[test]
fn a_non_root_user_listens_and_calls_against_a_root_sigd() {
    if !is_root() || !have_setpriv() {
        eprintln!(
            "skipped: needs root and setpriv to run sigd as root and the tools as uid {NOBODY}"
        );
        return;
    }
    let sigd = Sigd::start(CONF);
    // The test's directory is root's 0755: users may reach the socket in it.
    let out_dir = sigd.dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    std::fs::set_permissions(
        &out_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = out_dir.join("copy.bin");
    let input = out_dir.join("big.bin");
    std::fs::write(&input, crate::sigd_support::tool::data(300_000)).unwrap();
    let listen = natm_as(
        NOBODY,
        &sigd,
        &[
            "listen",
            "ttcp",
            "--qos",
            "reliable",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .spawn()
    .unwrap();
    let mut listen = crate::sigd_support::ChildGuard(Some(listen));
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let st = sigd.stat();
        let ls = st["listeners"].as_array().unwrap();
        if let Some(l) = ls.iter().find(|l| l["sap"] == "ttcp") {
            assert_eq!(l["uid"], NOBODY, "{st}");
            break;
        }
        let ended = listen.0.as_mut().unwrap().try_wait().unwrap();
        assert!(ended.is_none(), "natm listen as nobody exited: {ended:?}");
        assert!(Instant::now() < until, "the listener never bound: {st}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Another user's squat on the SAP is refused, with the reason.
    let squat = natm_as(NOBODY - 1, &sigd, &["listen", "ttcp", "--qos", "reliable"])
        .output()
        .unwrap();
    assert!(!squat.status.success());
    let err = String::from_utf8_lossy(&squat.stderr);
    assert!(err.contains("held by uid 65534"), "{err}");
    let call = natm_as(
        NOBODY,
        &sigd,
        &[
            "call",
            "+4420001:ttcp",
            "--qos",
            "reliable",
            "--file",
            input.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert!(
        call.status.success(),
        "{}",
        String::from_utf8_lossy(&call.stderr)
    );
    let until = Instant::now() + Duration::from_secs(10);
    while listen.0.as_mut().unwrap().try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < until,
            "natm listen did not end after its call"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut child = listen.0.take().unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    let _ = child.wait();
    let call_err = String::from_utf8_lossy(&call.stderr);
    // Both ends, run as nobody, got their call through the root sigd.
    assert!(
        err.contains("natm listen: connected to +4420001"),
        "natm listen: {err}"
    );
    assert!(
        call_err.contains("natm call: connected to +4420001:ttcp"),
        "natm call: {call_err}"
    );
    // And the data crossed whole.
    let got = std::fs::read(&out).unwrap_or_default();
    assert!(
        got == std::fs::read(&input).unwrap(),
        "natm listen as nobody wrote {} of 300,000 bytes; natm call: {call_err}; natm listen: {err}",
        got.len()
    );
}

#[test]
fn a_user_sees_only_its_own_rows_in_stat() {
    if !is_root() || !have_setpriv() {
        eprintln!("skipped: needs root and setpriv to run `natm stat` as uid {NOBODY}");
        return;
    }
    let sigd = Sigd::start(CONF);
    let mut root = UnixStream::connect(&sigd.socket).unwrap();
    let mut dec = Decoder::new();
    root.write_all(
        &Message::Bind {
            req: 1,
            sap: "secret".into(),
            qos: "ubr".parse().unwrap(),
        }
        .to_bytes(),
    )
    .unwrap();
    assert!(matches!(
        read_message(&mut root, &mut dec, Duration::from_secs(5)),
        Some(Message::Ack { .. })
    ));
    let out = natm_as(NOBODY, &sigd, &["stat", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(st["listeners"].as_array().unwrap().is_empty(), "{st}");
    assert_eq!(sigd.stat()["listeners"].as_array().unwrap().len(), 1);
}

#[test]
fn out_of_descriptors_sigd_answers_with_an_error_and_keeps_serving() {
    let mut sigd = Sigd::start(CONF);
    let pid = sigd.process_id();
    // Lower sigd's descriptor limit under it (prlimit(2) on the running process).
    let lim = rustix::process::Rlimit {
        current: Some(24),
        maximum: rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum,
    };
    let p = rustix::process::Pid::from_raw(pid as i32).unwrap();
    let old = rustix::process::prlimit(Some(p), rustix::process::Resource::Nofile, lim);
    if old.is_err() {
        eprintln!("skipped: cannot lower sigd's descriptor limit: {old:?}");
        return;
    }
    let mut held = Vec::new();
    let mut refused = None;
    for _ in 0..40 {
        let mut s = UnixStream::connect(&sigd.socket).unwrap();
        let mut dec = Decoder::new();
        // sigd may refuse the connection (write its Error and close) before the
        // request is written: the write fails then, and the Error is still readable.
        if let Err(e) = s.write_all(&Message::Stat { req: 1 }.to_bytes()) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
        }
        // Never a hang: an answer or an error, within the time.
        match read_message(&mut s, &mut dec, Duration::from_secs(5)) {
            Some(Message::StatReply { .. }) => held.push(s),
            Some(Message::Error { detail, .. }) => {
                refused = Some(detail);
                break;
            }
            other => panic!("no answer and no error: {other:?}"),
        }
    }
    let detail = refused.expect("sigd ran out of descriptors");
    assert!(detail.contains("out of file descriptors"), "{detail}");
    // An application that writes only after sigd closed its refused connection
    // (the race above, forced: wait until the close is seen) gets EPIPE, and then
    // reads why.
    let mut s = UnixStream::connect(&sigd.socket).unwrap();
    wait_for_hangup(&s, Duration::from_secs(5));
    let e = s
        .write_all(&Message::Stat { req: 1 }.to_bytes())
        .expect_err("sigd closed the refused connection");
    assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    match read_message(&mut s, &mut Decoder::new(), Duration::from_secs(5)) {
        Some(Message::Error { detail, .. }) => {
            assert!(detail.contains("out of file descriptors"), "{detail}")
        }
        other => panic!("the refusal was not readable after EPIPE: {other:?}"),
    }
    // ulib says so too, not "broken pipe", whichever side of the race it is on.
    let host = sigd.host();
    let e = host.bind("x", "ubr").unwrap_err().to_string();
    assert!(e.contains("out of file descriptors"), "{e}");
    // Once applications leave, sigd serves again.
    drop(held);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = UnixStream::connect(&sigd.socket).unwrap();
        let mut dec = Decoder::new();
        s.write_all(&Message::Stat { req: 1 }.to_bytes()).unwrap();
        if let Some(Message::StatReply { json, .. }) =
            read_message(&mut s, &mut dec, Duration::from_secs(5))
        {
            assert!(json.contains("connections_refused"), "{json}");
            break;
        }
        assert!(Instant::now() < until, "sigd never served again");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sigd.log().contains("out of file descriptors"));
    sigd.kill();
}

#[test]
fn two_hundred_thousand_binds_are_refused_with_memory_bounded() {
    let sigd = Sigd::start(CONF);
    let pid = sigd.process_id();
    let before = rss_kb(pid);
    let mut s = UnixStream::connect(&sigd.socket).unwrap();
    let mut dec = Decoder::new();
    const N: u64 = 200_000;
    // In windows of 2,000: an application that never reads its answers is dropped
    // (sigd queues at most 1 MiB towards it), which is not what is tested here.
    let (mut acks, mut refusals) = (0u64, 0u64);
    for w in 0..N / 2_000 {
        let mut batch = Vec::new();
        for i in w * 2_000..(w + 1) * 2_000 {
            Message::Bind {
                req: i + 1,
                sap: format!("b{i}"),
                qos: "ubr".parse().unwrap(),
            }
            .encode(&mut batch);
        }
        s.write_all(&batch).unwrap();
        for _ in 0..2_000 {
            match read_message(&mut s, &mut dec, Duration::from_secs(30)) {
                Some(Message::Ack { .. }) => acks += 1,
                Some(Message::Refused { cause: 47, .. }) => refusals += 1,
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(acks, 1024, "listeners_per_connection");
    assert_eq!(refusals, N - 1024);
    let after = rss_kb(pid);
    eprintln!("sigd RSS {before} kB before 200,000 binds, {after} kB after");
    // main grew from 7.5 to 172 MB here.
    assert!(
        after < before + 16 * 1024,
        "sigd's RSS grew from {before} kB to {after} kB"
    );
    drop(s);
}

#[test]
fn stat_pages_three_thousand_listeners_and_fifteen_hundred_calls() {
    let sigd = Sigd::start(&format!(
        "{CONF}[limits]\nlisteners_per_connection = 4000\n"
    ));
    let mut s = UnixStream::connect(&sigd.socket).unwrap();
    let mut dec = Decoder::new();
    let mut batch = Vec::new();
    for i in 0..3_000u64 {
        Message::Bind {
            req: i + 1,
            sap: format!("l{i}"),
            qos: "ubr".parse().unwrap(),
        }
        .encode(&mut batch);
    }
    s.write_all(&batch).unwrap();
    for _ in 0..3_000 {
        assert!(matches!(
            read_message(&mut s, &mut dec, Duration::from_secs(10)),
            Some(Message::Ack { .. })
        ));
    }
    // 800 local calls (two rows each), offered to and accepted by listener "l0".
    let mut c = UnixStream::connect(&sigd.socket).unwrap();
    let mut cdec = Decoder::new();
    for i in 0..800u64 {
        let data: std::net::SocketAddr = format!("127.0.0.1:{}", 20_000 + i).parse().unwrap();
        c.write_all(
            &Message::Connect {
                req: i + 1,
                called: "+4420001:l0".into(),
                qos: "ubr".parse().unwrap(),
                data,
            }
            .to_bytes(),
        )
        .unwrap();
        let call = loop {
            match read_message(&mut s, &mut dec, Duration::from_secs(10)) {
                Some(Message::Incoming { call, .. }) => break call,
                Some(_) => {}
                None => panic!("no offer"),
            }
        };
        s.write_all(
            &Message::Accept {
                req: 10_000 + i,
                call,
                data: format!("127.0.0.1:{}", 30_000 + i).parse().unwrap(),
            }
            .to_bytes(),
        )
        .unwrap();
    }
    // Collect the callers' answers so that sigd's queue towards them drains.
    let mut connected = 0;
    while connected < 800 {
        match read_message(&mut c, &mut cdec, Duration::from_secs(10)) {
            Some(Message::Connected { .. }) => connected += 1,
            Some(_) => {}
            None => panic!("{connected} calls connected"),
        }
    }
    let st = sigd.stat();
    assert_eq!(st["calls"].as_array().unwrap().len(), 1_600);
    assert_eq!(st["listeners"].as_array().unwrap().len(), 3_000);
    assert!(st.get("next").is_none());
    drop((s, c));
}

#[test]
fn users_together_cannot_take_the_connections_kept_for_root() {
    if !is_root() || !have_setpriv() {
        eprintln!("skipped: needs root and setpriv to run `natm listen` as three users");
        return;
    }
    // 12 connections, 4 per user, the last 2 kept for root.
    let sigd = Sigd::start(&format!(
        "{CONF}[limits]\nconnections = 12\nconnections_per_user = 4\nroot_reserve = 2\n"
    ));
    let uids = [NOBODY - 3, NOBODY - 2, NOBODY - 1];
    let mut held = Vec::new();
    let mut refused = Vec::new();
    // Each user tries for its whole share, one listener (one connection) at a
    // time, the users taking turns; each try ends bound or refused before the next.
    for round in 0..4 {
        for (u, uid) in uids.iter().enumerate() {
            let sap = format!("s{round}{u}");
            let mut child = crate::sigd_support::ChildGuard(Some(
                natm_as(*uid, &sigd, &["listen", &sap, "--qos", "ubr", "--discard"])
                    .spawn()
                    .unwrap(),
            ));
            let until = Instant::now() + Duration::from_secs(10);
            loop {
                let st = sigd.stat();
                let ls = st["listeners"].as_array().unwrap();
                if ls.iter().any(|l| l["sap"] == sap.as_str()) {
                    held.push(child);
                    break;
                }
                if let Some(status) = child.0.as_mut().unwrap().try_wait().unwrap() {
                    let mut err = String::new();
                    let mut c = child.0.take().unwrap();
                    let _ = c.stderr.take().unwrap().read_to_string(&mut err);
                    let _ = c.wait();
                    refused.push((*uid, status, err));
                    break;
                }
                assert!(Instant::now() < until, "neither bound nor refused: {st}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    // 10 user connections (12 - 2) were taken; the last two users' last tries were
    // refused, each told why.
    assert_eq!(held.len(), 10, "refused: {refused:?}");
    assert_eq!(refused.len(), 2, "{refused:?}");
    for (uid, status, err) in &refused {
        assert!(!status.success(), "uid {uid}");
        assert!(err.contains("root_reserve"), "uid {uid}: {err}");
    }
    // Root still gets in, beside them, and sees every user's listener.
    let st = sigd.stat();
    assert_eq!(st["listeners"].as_array().unwrap().len(), 10, "{st}");
    let mut root = UnixStream::connect(&sigd.socket).unwrap();
    let mut dec = Decoder::new();
    root.write_all(
        &Message::Bind {
            req: 1,
            sap: "admin".into(),
            qos: "ubr".parse().unwrap(),
        }
        .to_bytes(),
    )
    .unwrap();
    assert!(matches!(
        read_message(&mut root, &mut dec, Duration::from_secs(5)),
        Some(Message::Ack { .. })
    ));
}
