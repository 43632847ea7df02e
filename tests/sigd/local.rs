//! sigd with applications in separate processes and threads on one host: calls
//! through the daemon, the listener's decision before the connection exists, the UNI
//! cause on refusals, admission control, and a daemon that survives garbage.

use natm::ulib::Wait;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::sigd_support::Sigd;
use natm::ulib::Error;
use natm::wire::ipc::{Decoder, Message};

const CONF: &str =
    "addresses = [\"+4420001\"]\n[link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000\n";

#[test]
fn connect_accept_send_release_through_sigd() {
    let sigd = Sigd::start(CONF);
    let server = sigd.host();
    let client = sigd.host();
    let l = server.bind("echo", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let call = l.next_call(Wait::For(Duration::from_secs(5))).unwrap();
        assert_eq!(call.caller, "+4420001");
        assert_eq!(
            call.qos.service(),
            natm::wire::qos::Service::Reliable,
            "{}",
            call.qos
        );
        let c = call.accept().unwrap();
        let m = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
        c.send(&m, Wait::Block).unwrap();
        // The client's close reaches us as end of data.
        assert_eq!(c.recv(Wait::For(Duration::from_secs(5))).unwrap(), None);
    });
    let c = client.connect("+4420001:echo", "reliable").unwrap();
    assert_eq!(c.granted().unwrap().tx_bps, 0, "reliable reserves nothing");
    c.send(b"ping through sigd", Wait::Block).unwrap();
    let back = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
    assert_eq!(back, b"ping through sigd");
    let st = sigd.stat();
    assert_eq!(st["calls"].as_array().unwrap().len(), 2, "{st}");
    assert!(st["vcis_in_use"].as_u64().unwrap() >= 2);
    c.close();
    c.flush(Duration::from_secs(5)).unwrap();
    drop(c);
    t.join().unwrap();
    // Both ends released: nothing left in sigd.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let st = sigd.stat();
        if st["calls"].as_array().unwrap().is_empty() && st["vcis_in_use"] == 0 {
            break;
        }
        assert!(Instant::now() < until, "calls not released: {st}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_rejected_call_gives_the_caller_the_cause() {
    let sigd = Sigd::start(CONF);
    let server = sigd.host();
    let l = server.bind("picky", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let call = l.next_call(Wait::For(Duration::from_secs(5))).unwrap();
        // What a listener logs: the caller and QoS, not the engine behind the call.
        let shown = format!("{call:?}");
        assert!(
            shown.contains("+4420001") && shown.contains("reliable"),
            "{shown}"
        );
        assert!(shown.len() < 200, "{} bytes: {shown}", shown.len());
        call.reject(21).unwrap();
    });
    match sigd.host().connect("+4420001:picky", "reliable") {
        Err(Error::Refused { cause, detail }) => {
            assert_eq!(cause, 21);
            assert!(detail.contains("rejected"), "{detail}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    t.join().unwrap();
    // Nobody on that SAP: cause 88 at once.
    match sigd.host().connect("+4420001:nobody", "reliable") {
        Err(Error::Refused { cause: 88, detail }) => assert!(detail.contains("nobody"), "{detail}"),
        other => panic!("{other:?}"),
    }
    // An address no route covers: cause 3.
    match sigd.host().connect("+1555:x", "reliable") {
        Err(Error::Refused { cause: 3, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn admission_grants_what_fits_and_refuses_with_37_or_47() {
    let sigd = Sigd::start(CONF);
    let server = sigd.host();
    let l = server.bind("video", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok(call) = l.next_call(Wait::For(Duration::from_secs(3))) {
            held.push(call.accept().unwrap());
        }
        held.len()
    });
    let client = sigd.host();
    let a = client.connect("+4420001:video", "cbr:pcr=80Mbps").unwrap();
    assert_eq!(a.granted().unwrap().tx_bps, 80_000_000);
    // 50 wanted, nothing less: 20 free.
    match client.connect("+4420001:video", "cbr:pcr=50Mbps") {
        Err(Error::Refused { cause: 37, detail }) => {
            assert!(detail.contains("20 Mbit/s free"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    // 50 wanted, 10 enough: 20 granted, and the QoS says so.
    let b = client
        .connect("+4420001:video", "cbr:pcr=50Mbps,min_pcr=10Mbps")
        .unwrap();
    assert_eq!(b.granted().unwrap().tx_bps, 20_000_000);
    let pcr = b.granted().unwrap().qos.tx().pcr;
    assert_eq!(
        pcr.and_then(|r| r.bits_per_sec()),
        Some(20_000_000),
        "{:?}",
        b.granted()
    );
    let st = sigd.stat();
    assert_eq!(st["free_out_bps"], 0, "{st}");
    drop(a);
    // Released reservations come back.
    let until = Instant::now() + Duration::from_secs(5);
    while sigd.stat()["free_out_bps"] != 80_000_000 {
        assert!(Instant::now() < until, "{}", sigd.stat());
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(b);
    assert_eq!(t.join().unwrap(), 2);
}

#[test]
fn the_cpu_budget_refuses_with_47() {
    // 1 ms per TPDU and 1% of the CPUs: a few hundred TPDUs per second at most.
    let sigd = Sigd::start(
        "addresses = [\"+4420001\"]\n[link]\ncapacity = \"10Gbps\"\ntpdu_cost_ns = 1000000\ncpu_share = 0.01\n",
    );
    let server = sigd.host();
    let _l = server.bind("x", "reliable").unwrap();
    match sigd.host().connect("+4420001:x", "cbr:pcr=1Gbps") {
        Err(Error::Refused { cause: 47, detail }) => assert!(detail.contains("CPU"), "{detail}"),
        other => panic!("{other:?}"),
    }
}

fn read_message(s: &mut UnixStream) -> Option<Message> {
    let mut d = Decoder::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(m) = d.next_message().unwrap() {
            return Some(m);
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => d.push(&buf[..n]),
        }
    }
}

#[test]
fn garbage_on_the_socket_gets_an_error_and_the_daemon_keeps_serving() {
    let sigd = Sigd::start(CONF);
    let mut s = UnixStream::connect(&sigd.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: sigd\r\n\r\n")
        .unwrap();
    match read_message(&mut s) {
        Some(Message::Error { cause, detail }) => {
            assert_eq!(cause, 100);
            assert!(detail.contains("length"), "{detail}");
        }
        other => panic!("expected an error message, got {other:?}"),
    }
    assert_eq!(read_message(&mut s), None, "then the connection closes");
    // A request for a call that is not this connection's is refused, not obeyed.
    let mut s2 = UnixStream::connect(&sigd.socket).unwrap();
    s2.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s2.write_all(
        &Message::Release {
            req: 9,
            call: 12345,
            cause: 16,
        }
        .to_bytes(),
    )
    .unwrap();
    match read_message(&mut s2) {
        Some(Message::Refused {
            req: 9, cause: 81, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // Others are still served.
    let h = sigd.host();
    let _l = h.bind("still", "reliable").unwrap();
    assert_eq!(sigd.stat()["counters"]["malformed_ipc"], 1);
}

/// The QoS is typed from the API through the IPC: text that does not parse is the
/// caller's `Error::Qos` before sigd hears of it, and a raw frame carrying such text
/// is malformed IPC (cause 100, the field named, the connection closed) while
/// other connections are served.
#[test]
fn qos_text_that_does_not_parse_never_reaches_the_network() {
    let sigd = Sigd::start(CONF);
    let h = sigd.host();
    match h.connect("+4420001:echo", "warp:speed=9") {
        Err(Error::Qos(m)) => assert!(m.contains("warp"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(sigd.stat()["counters"]["malformed_ipc"], 0);
    let mut frame = Message::Connect {
        req: 1,
        called: "+4420001:echo".into(),
        qos: "reliable".parse().unwrap(),
        data: "127.0.0.1:4000".parse().unwrap(),
    }
    .to_bytes();
    let at = frame.windows(8).position(|w| w == b"reliable").unwrap();
    frame[at..at + 8].copy_from_slice(b"warp:x=1");
    let mut s = UnixStream::connect(&sigd.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&frame).unwrap();
    match read_message(&mut s) {
        Some(Message::Error { cause, detail }) => {
            assert_eq!(cause, 100);
            assert!(
                detail.contains("qos") && detail.contains("warp"),
                "{detail}"
            );
        }
        other => panic!("expected an error message, got {other:?}"),
    }
    assert_eq!(read_message(&mut s), None, "then the connection closes");
    let _l = h.bind("still", "reliable").unwrap();
    assert_eq!(sigd.stat()["counters"]["malformed_ipc"], 1);
}

#[test]
fn wrong_config_names_the_key() {
    let dir = std::env::temp_dir().join(format!("natm-badconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.toml");
    std::fs::write(&p, "[link]\ncapacity = \"lots\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["sigd", "--config"])
        .arg(&p)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("link.capacity") && err.contains("Mbps"),
        "{err}"
    );
}

#[test]
fn sigterm_releases_calls_and_removes_the_socket() {
    let mut sigd = Sigd::start(CONF);
    let server = sigd.host();
    let l = server.bind("term", "reliable").unwrap();
    let t = std::thread::spawn(move || l.accept(Wait::Block).unwrap());
    let c = sigd.host().connect("+4420001:term", "reliable").unwrap();
    let peer = t.join().unwrap();
    let st = sigd.terminate();
    assert!(st.success(), "{st}");
    assert!(!sigd.socket.exists(), "socket file left behind");
    // Both ends hear the release at once.
    match c.recv(Wait::For(Duration::from_secs(2))) {
        Err(Error::Aborted(_)) => {}
        other => panic!("{other:?}"),
    }
    drop(peer);
}

#[test]
fn a_connection_cannot_act_on_another_connections_ids() {
    let sigd = Sigd::start(CONF);
    let mut owner = UnixStream::connect(&sigd.socket).unwrap();
    owner
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    owner
        .write_all(
            &Message::Bind {
                req: 1,
                sap: "mine".into(),
                qos: "reliable".parse().unwrap(),
            }
            .to_bytes(),
        )
        .unwrap();
    let Some(Message::Ack { req: 1, id }) = read_message(&mut owner) else {
        panic!("bind not acknowledged");
    };
    let mut other = UnixStream::connect(&sigd.socket).unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    other
        .write_all(
            &Message::Unbind {
                req: 2,
                listener: id,
            }
            .to_bytes(),
        )
        .unwrap();
    match read_message(&mut other) {
        Some(Message::Refused {
            req: 2, cause: 81, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // Still listening: the owner's listener is intact.
    assert_eq!(sigd.stat()["listeners"].as_array().unwrap().len(), 1);
    // And the owner's pid is what SO_PEERCRED reported.
    assert_eq!(
        sigd.stat()["listeners"][0]["pid"],
        i64::from(std::process::id() as i32)
    );
}

/// A release-type request with tag 0 wants no answer (ulib's releases from `Drop`,
/// where nobody waits): sigd sends none, not even a refusal; any other tag is
/// answered. `Endpoints` for a listener that is not pre-authorised is refused.
#[test]
fn requests_tagged_zero_get_no_answer() {
    let sigd = Sigd::start(CONF);
    let mut s = UnixStream::connect(&sigd.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let quiet = [
        Message::Release {
            req: 0,
            call: 12345,
            cause: 16,
        },
        Message::Reject {
            req: 0,
            call: 12345,
            cause: 21,
        },
        Message::Endpoints {
            req: 0,
            listener: 7,
            data: vec![],
        },
    ];
    for m in quiet {
        s.write_all(&m.to_bytes()).unwrap();
    }
    s.write_all(
        &Message::Endpoints {
            req: 8,
            listener: 7,
            data: vec![],
        }
        .to_bytes(),
    )
    .unwrap();
    match read_message(&mut s) {
        Some(Message::Refused {
            req: 8, cause: 81, ..
        }) => {}
        other => panic!("expected only the refusal of the tagged request, got {other:?}"),
    }
}

#[test]
fn the_example_config_runs_on_loopback_as_shipped() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/sigd.example.toml");
    let text = std::fs::read_to_string(example).unwrap();
    assert!(
        text.lines().next().unwrap().contains("loopback"),
        "the first line says where it runs"
    );
    let socket = std::path::Path::new("/tmp/natm-example/sigd.sock");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["sigd", "--config", example])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut guard = crate::sigd_support::ChildGuard(Some(child));
    let until = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(socket).is_err() {
        let c = guard.0.as_mut().unwrap();
        if let Some(st) = c.try_wait().unwrap() {
            let mut err = String::new();
            c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            panic!("the example sigd exited with {st}: {err}");
        }
        assert!(Instant::now() < until, "the example sigd never served");
        std::thread::sleep(Duration::from_millis(20));
    }
    // It serves applications: a listener binds through it.
    let h = natm::ulib::Host::open(natm::ulib::HostConfig {
        sigd_socket: Some(socket.to_owned()),
        connect_timeout: Duration::from_secs(5),
        ..natm::ulib::HostConfig::default()
    })
    .unwrap();
    let _l = h.bind("echo", "reliable").unwrap();
    drop(guard);
}

#[test]
fn permission_denied_names_the_path_and_what_to_do() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = std::env::temp_dir().join(format!("natm-perm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let socket = dir.join("natm").join("sigd.sock");
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    // Root may write anywhere: drop to nobody to meet what a user meets.
    let mut cmd = if root {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_natm"));
        c
    } else {
        std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
    };
    let out = cmd
        .args(["sigd", "--signalling", "127.0.0.1:0", "--socket"])
        .arg(&socket)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let Ok(out) = out else {
        eprintln!("skipped: no setpriv to drop root");
        return;
    };
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Permission denied"), "{err}");
    assert!(err.contains(&*dir.join("natm").to_string_lossy()), "{err}");
    assert!(err.contains("--socket"), "{err}");
}

/// `natm sigd` with its stderr on a pipe: plain text (no ANSI colours) in its log, and
/// when whoever read the pipe goes away, sigd keeps serving and stops cleanly on
/// SIGTERM (issue 32: it died when a log line hit the closed pipe).
#[test]
fn sigd_logs_plain_text_and_outlives_its_closed_stderr() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("natm-sigd-stderr-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("sigd.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["sigd", "--address", "+4420001", "--tpdu-cost-ns", "1000"])
        .args(["--signalling", "127.0.0.1:0", "--socket"])
        .arg(&socket)
        .env("RUST_LOG", "natm=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("sigd serving") {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            panic!("sigd ended before serving: {seen}");
        }
        seen.push_str(&line);
    }
    assert!(
        !seen.contains('\u{1b}'),
        "ANSI escapes in a piped log: {seen:?}"
    );
    // Nobody reads sigd's stderr any more; what it logs next meets EPIPE.
    drop(err);
    // An application comes and goes (debug lines), and sigd still answers.
    let mut s = UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&Message::Stat { req: 1 }.to_bytes()).unwrap();
    assert!(
        matches!(read_message(&mut s), Some(Message::StatReply { .. })),
        "sigd stopped answering once its stderr closed"
    );
    drop(s);
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("sigd did not stop on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(st.success(), "sigd ended with {st}");
    assert!(
        !socket.exists(),
        "sigd did not remove its socket: it did not stop cleanly"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
