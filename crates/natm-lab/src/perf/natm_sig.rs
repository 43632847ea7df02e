//! natm stacks whose calls go through two `natm sigd`s on loopback, as an
//! application's do: the encrypted stacks (issue 16: every TPDU sealed with
//! AES-256-GCM under keys sigd derived for the call) and the same call in clear, so
//! that the cost of encryption is measured on one path.

use natm::ulib::Wait;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

use super::calls::{two_sigds, Daemons};
use super::stack::{Entry, Pair, Stack, StackOptions};
use natm::ulib::{Error, Host, HostConfig, Listener};

/// This file's lines of the stack registry (`perf::STACKS`).
pub(crate) const ENTRIES: &[Entry] = &[
    Entry {
        name: "natm-reliable-enc",
        about: "natm reliable through two sigds, every TPDU sealed (AES-256-GCM, per-call keys)",
        make: reliable_enc,
    },
    Entry {
        name: "natm-reliable-enc-zc",
        about: "natm-reliable-enc with owned buffers: send of a Bytes and recv_chunk, no user-space copy beside the seal",
        make: reliable_enc_zc,
    },
    Entry {
        name: "natm-reliable-enc-32k",
        about: "natm-reliable-enc with 32 KiB TPDUs (one seal per 32 KiB)",
        make: reliable_enc_32k,
    },
    Entry {
        name: "natm-reliable-sig",
        about:
            "natm reliable through two sigds in clear (encrypt=off): natm-reliable-enc's baseline",
        make: reliable_sig,
    },
    Entry {
        name: "natm-be-enc",
        about: "natm best effort through two sigds, every TPDU sealed",
        make: best_effort_enc,
    },
];

static N: AtomicUsize = AtomicUsize::new(0);

/// A stack on two sigds: both hosts and a listener on B, made once; each
/// `connect` is one call.
struct Signalled {
    name: &'static str,
    qos: String,
    /// Send `Bytes` and count with `recv_chunk` (the `-zc` stacks).
    zero_copy: bool,
    a: Host,
    listener: Listener,
    _hosts: Host,
    _daemons: Daemons,
}

fn make(name: &'static str, qos: &str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    make_with(name, qos, false, o)
}

fn make_with(
    name: &'static str,
    qos: &str,
    zero_copy: bool,
    o: &StackOptions,
) -> anyhow::Result<Box<dyn Stack>> {
    let tag = format!("{name}-{}", N.fetch_add(1, Ordering::Relaxed));
    let (daemons, sa, sb) = two_sigds(&tag)?;
    let host = |socket: &std::path::Path| {
        let mut cfg = HostConfig {
            sigd_socket: Some(socket.to_owned()),
            ..super::host_config()
        };
        if let Some(b) = o.sockbuf {
            cfg.engine.socket_rcvbuf = b;
            cfg.engine.socket_sndbuf = b;
        }
        Host::open(cfg)
    };
    let (a, b) = (host(&sa)?, host(&sb)?);
    let listener = b.bind("perf", qos)?;
    Ok(Box::new(Signalled {
        name,
        qos: qos.to_owned(),
        zero_copy,
        a,
        listener,
        _hosts: b,
        _daemons: daemons,
    }))
}

fn reliable_enc(name: &'static str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    make(name, "reliable:encrypt=on", o)
}

/// `natm-reliable-enc-zc`: `natm-reliable-enc` whose application hands each message
/// over as a `Bytes` and counts what arrives with `recv_chunk`: the sender's driver
/// seals from the application's buffer and the receiver opens in place, so the only
/// passes over the data in user space are the seal and the open.
fn reliable_enc_zc(name: &'static str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    make_with(name, "reliable:encrypt=on", true, o)
}

fn reliable_enc_32k(name: &'static str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    make(name, "reliable:encrypt=on,tpdu=32768", o)
}

fn reliable_sig(name: &'static str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    make(name, "reliable:encrypt=off", o)
}

fn best_effort_enc(name: &'static str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    make(name, "best-effort:encrypt=on", o)
}

fn io_err(e: Error) -> io::Error {
    io::Error::from(e)
}

impl Stack for Signalled {
    fn name(&self) -> &str {
        self.name
    }

    fn connect(&self, _max_msg: usize) -> io::Result<Pair> {
        let a = self.a.clone();
        let qos = self.qos.clone();
        let t = std::thread::spawn(move || a.connect("+4420002:perf", &qos));
        let server = self
            .listener
            .accept(Wait::For(Duration::from_secs(5)))
            .map_err(io_err)?;
        let client = t
            .join()
            .map_err(|_| io::Error::other("connect thread panicked"))?
            .map_err(io_err)?;
        let encrypted = client.stats().seal.is_some() && server.stats().seal.is_some();
        if encrypted != self.qos.contains("encrypt=on") {
            return Err(io::Error::other(format!(
                "the call's encryption is {encrypted}, not what {} asks",
                self.qos
            )));
        }
        let mut params = serde_json::Map::new();
        params.insert("qos".into(), Value::String(self.qos.clone()));
        params.insert("encrypted".into(), json!(encrypted));
        params.insert("through".into(), json!("two sigds on loopback"));
        let poll = Duration::from_millis(50);
        Ok(Pair {
            client: super::natm::endpoint(client, poll, self.zero_copy),
            server: super::natm::endpoint(server, poll, self.zero_copy),
            params,
        })
    }
}
