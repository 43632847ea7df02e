//! One reactor per host: the engine's driver thread also reads the sigd session's IPC
//! stream when no application thread waits for sigd, so a host with a sigd session
//! runs one thread of its own (before: the driver and a sigd watcher thread). Against
//! a scripted sigd on a Unix socket. Its own test binary, so that the natm threads counted
//! are this test's alone.

use natm::ulib::Wait;
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use natm::transport::AbortReason;
use natm::ulib::{Error, Host, HostConfig};
use natm::wire::ipc::{DataPath, Decoder, Message};

/// The tests run one at a time: each counts this process's threads.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The names of this process's natm threads (`natm-driver`; before issue 12's single
/// reactor also `natm-sigd-ipc`): other threads inherit their creator's name.
fn natm_threads() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| n.starts_with("natm-"))
        .collect();
    v.sort();
    v
}

/// Wait until no natm thread is left (a host dropped just before may still be ending).
fn no_natm_threads(within: Duration) {
    let until = Instant::now() + within;
    while !natm_threads().is_empty() {
        assert!(Instant::now() < until, "left: {:?}", natm_threads());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the scripted sigd is told to do.
enum Do {
    /// Send this message to the application.
    Send(Box<Message>),
    /// Close the session and stop serving (sigd died).
    Die,
}

/// A sigd that answers `Register`, `Bind` (listener id 7), `Stat` and `Connect` (call
/// 11, connected to `data_peer`), sends what it is told to, and reports each request
/// and the session's end.
struct FakeSigd {
    path: PathBuf,
    to: mpsc::Sender<Do>,
    seen: mpsc::Receiver<Option<Message>>,
}

impl FakeSigd {
    fn start(name: &str) -> FakeSigd {
        Self::start_with_peer(name, ([127, 0, 0, 1], 9).into())
    }

    fn start_with_peer(name: &str, data_peer: std::net::SocketAddr) -> FakeSigd {
        let path = std::env::temp_dir().join(format!("natm-{name}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let (to, orders) = mpsc::channel::<Do>();
        let (seen_tx, seen) = mpsc::channel();
        let file = path.clone();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // One session per scripted sigd: a new one finds no sigd (`NoSigd`), and
            // no socket file is left behind.
            let _ = std::fs::remove_file(&file);
            s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            let mut dec = Decoder::new();
            let mut buf = [0u8; 4096];
            loop {
                match orders.try_recv() {
                    Ok(Do::Send(m)) => s.write_all(&m.to_bytes()).unwrap(),
                    Ok(Do::Die) => {
                        drop(listener);
                        let _ = std::fs::remove_file(&file);
                        return;
                    }
                    Err(_) => {}
                }
                match s.read(&mut buf) {
                    Ok(0) => {
                        let _ = seen_tx.send(None);
                        return;
                    }
                    Ok(n) => dec.push(&buf[..n]),
                    Err(_) => continue,
                }
                while let Some(m) = dec.next_message().unwrap() {
                    let answers = match &m {
                        Message::Register { req, .. } => vec![Message::Ack { req: *req, id: 0 }],
                        Message::Bind { req, .. } => vec![Message::Ack { req: *req, id: 7 }],
                        Message::Stat { req } => vec![Message::StatReply {
                            req: *req,
                            json: "{}".into(),
                        }],
                        // Call 11, connected at once to the peer `data_peer`.
                        Message::Connect { req, .. } => vec![
                            Message::Ack { req: *req, id: 11 },
                            Message::Connected {
                                call: 11,
                                path: DataPath {
                                    peer: data_peer,
                                    cookie: 1,
                                    tx_vci: 32,
                                    rx_vci: 33,
                                    granted_bps: 0,
                                    qos: "reliable".parse().unwrap(),
                                    resume: String::new(),
                                    keys: None,
                                    multipoint: false,
                                },
                            },
                        ],
                        _ => vec![],
                    };
                    for a in answers {
                        s.write_all(&a.to_bytes()).unwrap();
                    }
                    let _ = seen_tx.send(Some(m));
                }
            }
        });
        FakeSigd { path, to, seen }
    }

    fn host(&self) -> Host {
        Host::open(HostConfig {
            sigd_socket: Some(self.path.clone()),
            ..HostConfig::default()
        })
        .unwrap()
    }

    /// Wait for the session's end (the application's side closed it).
    fn session_ended(&self, within: Duration) -> bool {
        let until = Instant::now() + within;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.seen.recv_timeout(left) {
                Ok(None) => return true,
                Ok(Some(_)) => {}
                Err(_) => return false,
            }
        }
        false
    }
}

#[test]
fn a_host_with_a_sigd_session_runs_one_thread_and_its_drop_ends_both() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sigd = FakeSigd::start("reactor-threads");
    no_natm_threads(Duration::from_secs(5));
    let host = sigd.host();
    host.register_address("+4420001").unwrap();
    // The driver alone: no sigd watcher thread any more.
    assert_eq!(
        natm_threads(),
        ["natm-driver"],
        "threads of a host with a sigd session"
    );

    // An offer nobody waits for is read by the driver: a zero-timeout `next_call`
    // finds it filed without reading the stream itself.
    let l = host.bind("echo", "reliable").unwrap();
    sigd.to
        .send(Do::Send(Box::new(Message::Incoming {
            listener: 7,
            call: 9,
            caller: "+4420002".into(),
            qos: "reliable".parse().unwrap(),
        })))
        .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let offer = loop {
        std::thread::sleep(Duration::from_millis(10));
        match l.next_call(Wait::For(Duration::ZERO)) {
            Ok(o) => break o,
            Err(Error::TimedOut) if Instant::now() < until => {}
            Err(e) => panic!("the driver did not file the offer: {e}"),
        }
    };
    assert_eq!(offer.caller, "+4420002");
    drop(offer);
    drop(l);

    // The driver does not keep the session alive: dropping the host closes it, and
    // the driver thread goes with the engine.
    drop(host);
    assert!(
        sigd.session_ended(Duration::from_secs(5)),
        "the session outlived its host"
    );
    no_natm_threads(Duration::from_secs(5));
}

#[test]
fn sigd_dying_fails_a_waiting_call_at_once_and_is_noticed_with_nobody_waiting() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A thread waiting for sigd (it holds the read role) fails at once.
    let sigd = FakeSigd::start("reactor-death-wait");
    let host = sigd.host();
    let l = host.bind("echo", "reliable").unwrap();
    let waiter = std::thread::spawn(move || {
        let t = Instant::now();
        (l.next_call(Wait::Block).map(|_| ()), t)
    });
    std::thread::sleep(Duration::from_millis(50));
    sigd.to.send(Do::Die).unwrap();
    let (r, t) = waiter.join().unwrap();
    assert!(matches!(r, Err(Error::SigdGone)), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    drop(host);

    // Nobody waits: the driver reads the end of the stream and marks the session
    // gone, so the next request tries a new session (and finds no sigd) instead of
    // writing into the dead one.
    let sigd = FakeSigd::start("reactor-death-idle");
    let host = sigd.host();
    host.register_address("+4420001").unwrap();
    sigd.to.send(Do::Die).unwrap();
    // No retry: a request on a session nobody marked gone would fail with `SigdGone`
    // itself, and the retry would then pass without the driver.
    std::thread::sleep(Duration::from_millis(500));
    let r = host.sigd_stat();
    assert!(
        matches!(r, Err(Error::NoSigd { .. })),
        "expected NoSigd once the driver saw sigd go: {r:?}"
    );
}

#[test]
fn a_released_call_read_by_the_driver_aborts_its_connection_at_once() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The far end's data socket: nothing is sent on it in this test.
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sigd = FakeSigd::start_with_peer("reactor-released", peer.local_addr().unwrap());
    let host = sigd.host();
    let c = host.connect("+4420002:echo", "reliable").unwrap();
    // The application waits on the data path, not on sigd: the driver reads the
    // `Released` and aborts the connection, which wakes the blocked `recv`.
    let receiver = std::thread::spawn(move || {
        let r = c.recv(Wait::For(Duration::from_secs(5)));
        (r, Instant::now())
    });
    std::thread::sleep(Duration::from_millis(50));
    let sent = Instant::now();
    sigd.to
        .send(Do::Send(Box::new(Message::Released {
            call: 11,
            cause: 41,
            detail: "the peer application went away".into(),
        })))
        .unwrap();
    let (r, at) = receiver.join().unwrap();
    assert!(matches!(r, Err(Error::Aborted(AbortReason::Peer))), "{r:?}");
    assert!(at - sent < Duration::from_secs(1), "{:?}", at - sent);
}
