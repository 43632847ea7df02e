//! Many direct-mode calls at once, each set up, closed and dropped as `natm-lab perf
//! calls` does: once every call is over, the process holds exactly the descriptors it
//! held before — no socket of a finished call is left behind on either side. (Its own
//! test binary: it counts this process's open file descriptors.)

use natm::ulib::Wait;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use natm::ulib::{Connection, Error, Host, HostConfig};

/// The tests of this binary count the process's descriptors: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// The sockets of this process, for the failure message: `/proc/self/net/udp` lines
/// are every socket of the namespace, so only the count of open descriptors is exact.
fn describe_fds() -> String {
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    if let Ok(d) = std::fs::read_dir("/proc/self/fd") {
        for e in d.flatten() {
            let k = std::fs::read_link(e.path())
                .map(|p| {
                    p.to_string_lossy()
                        .split(':')
                        .next()
                        .unwrap_or("")
                        .to_owned()
                })
                .unwrap_or_default();
            *kinds.entry(k).or_default() += 1;
        }
    }
    format!("{kinds:?}")
}

fn run_calls(callers: usize, per_caller: usize) {
    let client = Host::open(HostConfig::default()).unwrap();
    let server = Host::open(HostConfig::default()).unwrap();
    let l = server.bind("127.0.0.1:0", "reliable").unwrap();
    let addr = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // The perf harness's server: accept, hand each connection to a pool that reads it
    // to its end and drops it.
    let (tx, rx) = std::sync::mpsc::channel::<Connection>();
    let rx = Arc::new(Mutex::new(rx));
    let pool: Vec<_> = (0..callers + 2)
        .map(|_| {
            let rx = rx.clone();
            std::thread::spawn(move || loop {
                let next = rx.lock().unwrap().recv();
                let Ok(c) = next else { return };
                while let Ok(Some(_)) = c.recv(Wait::For(Duration::from_secs(5))) {}
            })
        })
        .collect();
    let acceptor = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(c) = l.accept(Wait::For(Duration::from_millis(50))) {
                    tx.send(c).unwrap();
                }
            }
        })
    };
    let callers: Vec<_> = (0..callers)
        .map(|_| {
            let h = client.clone();
            std::thread::spawn(move || {
                for _ in 0..per_caller {
                    // A listener whose backlog is full (its acceptor slow on a busy
                    // machine) refuses with cause 17: try again, as a client of a
                    // busy server does. The refused attempt must leave nothing either.
                    let until = Instant::now() + Duration::from_secs(30);
                    let c = loop {
                        match h.connect(addr, "reliable") {
                            Ok(c) => break c,
                            Err(Error::Refused { cause: 17, .. }) if Instant::now() < until => {
                                std::thread::yield_now()
                            }
                            Err(e) => panic!("call to {addr}: {e}"),
                        }
                    };
                    c.close();
                    drop(c);
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    acceptor.join().unwrap();
    for w in pool {
        w.join().unwrap();
    }
    // Both hosts go: whatever is still closing keeps its engine until it has finished
    // (`Host::linger` waits for that).
    assert!(
        client.linger(Duration::from_secs(10)),
        "client still closing"
    );
    assert!(
        server.linger(Duration::from_secs(10)),
        "server still closing"
    );
}

/// The descriptor count once it stops changing (engine threads close their epoll and
/// timer descriptors just after their hosts go).
fn settled_fds() -> usize {
    let until = Instant::now() + Duration::from_secs(5);
    let mut last = open_fds();
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        let now = open_fds();
        if now == last {
            break;
        }
        last = now;
    }
    last
}

/// Wait up to 5 s for the count to come back to `before` exactly.
fn assert_back_to(before: usize, what: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let now = open_fds();
        if now == before {
            return;
        }
        assert!(
            Instant::now() < until,
            "{what}: {now} descriptors open after every call ended, {before} before: {}",
            describe_fds()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn parallel_direct_calls_leave_no_socket_behind() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Warm up: the engines' own descriptors, the per-process sockets opened once.
    run_calls(2, 10);
    let before = settled_fds();
    for callers in [1, 4, 16, 64] {
        run_calls(callers, 4000 / callers);
        assert_back_to(before, &format!("{callers} callers"));
    }
}

#[test]
fn a_closed_listener_ends_the_calls_nobody_accepted() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    run_calls(1, 5);
    let before = settled_fds();
    {
        let client = Host::open(HostConfig::default()).unwrap();
        let server = Host::open(HostConfig::default()).unwrap();
        let l = server.bind("127.0.0.1:0", "reliable").unwrap();
        let addr = l.local_addr().unwrap();
        // The endpoint answers each call before the application accepts it.
        let calls: Vec<_> = (0..20)
            .map(|_| client.connect(addr, "reliable").unwrap())
            .collect();
        drop(l);
        // Each caller learns that its call was ended, as from a TCP reset.
        for c in &calls {
            let r = c.recv(Wait::For(Duration::from_secs(5)));
            assert!(
                r.is_err(),
                "a call queued on a closed listener still lives: {r:?}"
            );
        }
        drop(calls);
        assert!(
            client.linger(Duration::from_secs(10)),
            "client still closing"
        );
        assert!(
            server.linger(Duration::from_secs(10)),
            "server still closing"
        );
    }
    assert_back_to(before, "a closed listener's queue");
}

/// One UDP socket per host (`Ports::PerHost`, issue 30): hundreds of connections open
/// at once hold no descriptor of their own — each host's one socket is all there is —
/// and every one of them carries its own bytes exactly.
#[test]
fn a_host_on_one_port_opens_no_socket_per_call() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Warm up: the per-process sockets opened once.
    run_calls(1, 5);
    let before = settled_fds();
    {
        let cfg = || {
            let mut c = HostConfig::default();
            c.engine.ports = natm::ulib::Ports::PerHost;
            c
        };
        let client = Host::open(cfg()).unwrap();
        let server = Host::open(cfg()).unwrap();
        let l = server.bind("127.0.0.1:0", "reliable").unwrap();
        let addr = l.local_addr().unwrap();
        let call = || {
            let c = client.connect(addr, "reliable").unwrap();
            let s = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
            (c, s)
        };
        // The first call binds the client's port.
        let mut calls = vec![call()];
        let with_ports = open_fds();
        for _ in 1..300 {
            calls.push(call());
        }
        assert_eq!(
            open_fds(),
            with_ports,
            "300 open connections took descriptors of their own: {}",
            describe_fds()
        );
        for (i, (c, _)) in calls.iter().enumerate() {
            c.send(&[i as u8; 4096], Wait::Block).unwrap();
        }
        for (i, (_, s)) in calls.iter().enumerate() {
            let got = s.recv(Wait::For(Duration::from_secs(10))).unwrap();
            assert_eq!(got, Some(vec![i as u8; 4096]), "connection {i}");
        }
        drop(calls);
        drop(l);
        assert!(client.linger(Duration::from_secs(10)), "client closing");
        assert!(server.linger(Duration::from_secs(10)), "server closing");
    }
    assert_back_to(before, "two hosts on one port each");
}
