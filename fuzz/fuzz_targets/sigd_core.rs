//! Fuzzes sigd's whole core in virtual time: applications (root and two other
//! users) connecting, sending IPC frames (decoded as the daemon does: a frame that
//! does not decode is a protocol error) and closing, interleaved with signalling
//! datagrams from a configured peer and from a stranger, and time steps. Checks that
//! nothing panics, that what the core holds stays within its limits, and that every
//! message it writes to an application fits one IPC frame.
#![no_main]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use natm_proto::time::Instant;
use natm_proto::wire::ipc::{Message, MAX_FRAME};
use natm_sigd::config::ConfigFile;
use natm_sigd::core::{AppId, Core, Creds, HostFacts, Output};

const CONFIG: &str = "addresses = [\"+4420001\"]\nsocket = \"/nonexistent/s.sock\"\n\
signalling = \"10.0.0.1:2905\"\n[link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000\n\
[limits]\nconnections = 8\ncalls = 16\nlisteners_per_connection = 4\nlisteners_per_user = 6\n\
registrations_per_connection = 2\ncalls_per_user = 6\nidle_close_ms = 2000\n\
[[directory]]\nprefix = \"+4420002\"\npeer = \"10.0.0.2:2905\"\n";

fuzz_target!(|data: &[u8]| {
    let cfg = ConfigFile::parse(CONFIG, Path::new("fuzz.toml"))
        .expect("parses")
        .check()
        .expect("valid");
    let facts = HostFacts {
        signalling: cfg.signalling,
        tpdu_cost_ns: 1000,
        cores: 1,
    };
    let mut core = Core::new(cfg, facts, [7; 32]);
    let peers: [SocketAddr; 2] = ["10.0.0.2:2905".parse().unwrap(), "192.0.2.9:4000".parse().unwrap()];
    let mut now = Instant::from_nanos(1);
    core.start(now);
    let mut next_app = 16u64;
    let mut apps: Vec<AppId> = Vec::new();
    let mut rest = data;
    // Records: op (1) | len (1) | len octets.
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        let pick = apps.get(usize::from(*len) % apps.len().max(1)).copied();
        match op % 8 {
            0 => {
                let uid = [0, 1000, 1001][usize::from(*len) % 3];
                let app = AppId(next_app);
                next_app += 1;
                core.app_connected(now, app, Some(Creds { pid: 1, uid, gid: uid }));
                apps.push(app);
            }
            1 | 2 => {
                if let Some(app) = pick {
                    // A frame body: version 1, then the message's type and fields.
                    let mut frame = Vec::with_capacity(body.len() + 5);
                    frame.extend_from_slice(&(body.len() as u32 + 1).to_be_bytes());
                    frame.push(1);
                    frame.extend_from_slice(body);
                    match Message::decode(&frame) {
                        Ok(Some((m, _))) => core.handle_app(now, app, m),
                        Ok(None) => {}
                        Err(e) => core.app_malformed(now, app, &e),
                    }
                }
            }
            3 | 4 => core.handle_peer(now, peers[usize::from(*op >> 7)], body),
            5 => {
                now += Duration::from_millis(u64::from(*len) * 50);
                core.handle_timeout(now);
            }
            6 => {
                if let Some(app) = pick {
                    core.app_closed(now, app);
                    apps.retain(|a| *a != app);
                }
            }
            _ => {
                if let Some(app) = pick {
                    core.handle_app(now, app, Message::Stat { req: 1 });
                }
            }
        }
        let mut closed = Vec::new();
        for _ in 0..100_000 {
            let Some(o) = core.poll_output() else { break };
            match o {
                Output::ToApp(_, m) => assert!(m.to_bytes().len() <= MAX_FRAME + 4),
                Output::CloseApp(a) => closed.push(a),
                Output::ToPeer(_, d) => assert!(d.len() <= 65_539),
                Output::Flush(_) => {}
            }
        }
        for a in closed {
            core.app_closed(now, a);
            apps.retain(|x| *x != a);
        }
        let s = core.stat();
        assert!(s.applications <= 8, "{} connections", s.applications);
        // Local calls are two rows; each of two links holds at most `calls` more.
        assert!(s.calls.len() <= 16 * 4, "{} calls", s.calls.len());
        assert!(s.listeners.len() <= 8 * 4, "{} listeners", s.listeners.len());
        for uid in [1000, 1001] {
            let l = s.listeners.iter().filter(|l| l.uid == Some(uid)).count();
            assert!(l <= 6, "uid {uid} holds {l} listeners");
        }
        assert!(s.addresses.len() <= 1 + 8 * 2, "{:?}", s.addresses);
    }
});
