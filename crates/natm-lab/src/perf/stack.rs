//! What the experiments measure: a [`Stack`] opens a fresh connection (a [`Pair`] of
//! [`Endpoint`]s on loopback) per run, and a [`Registry`] names every stack `natm-lab perf`
//! knows.
//!
//! Adding a stack (natm's own, QUIC, …) is one file implementing [`Stack`] and
//! [`Endpoint`] that exports its [`Entry`] lines as `ENTRIES`, plus its name in
//! `perf::STACKS`; the experiments, the CLI, the table and the JSON need no change.
//! This module depends on no stack: the stack files depend on it.

use std::io;
use std::time::Duration;

use serde_json::{Map, Value};

use anyhow::Context as _;

/// How a stack sets itself up; the same for every stack in a run of `natm-lab perf`.
#[derive(Debug, Clone)]
pub(crate) struct StackOptions {
    /// Socket buffer size to ask for (`SO_SNDBUF` and `SO_RCVBUF`), or `None` to keep
    /// the kernel's default (for TCP: receive-buffer autotuning).
    pub(crate) sockbuf: Option<usize>,
    /// Longest a blocking `send` or `recv` waits before it gives control back, so that
    /// every loop can check its deadline and stop flag.
    pub(crate) poll: Duration,
    /// Pin a natm host's engine driver thread to these CPUs (`natm-lab perf latency
    /// --pin`); `None` leaves it to the kernel.
    pub(crate) driver_cpus: Option<Vec<usize>>,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            sockbuf: Some(4 << 20),
            poll: Duration::from_millis(20),
            driver_cpus: None,
        }
    }
}

impl StackOptions {
    /// The socket-buffer settings of a connection for the report: what was asked and
    /// what the kernel granted.
    pub(crate) fn socket_params(&self, sndbuf: usize, rcvbuf: usize) -> Params {
        let mut p = Params::new();
        p.insert(
            "sockbuf_asked".into(),
            self.sockbuf
                .map_or(Value::from("kernel default"), Value::from),
        );
        p.insert("sndbuf".into(), Value::from(sndbuf));
        p.insert("rcvbuf".into(), Value::from(rcvbuf));
        p
    }
}

/// Settings of a connection as the stack really got them (e.g. the socket buffer
/// sizes the kernel granted), reported with every result.
pub(crate) type Params = Map<String, Value>;

/// One end of a connection: sends and receives whole messages.
///
/// Both methods give control back within the stack's poll interval
/// ([`StackOptions::poll`]) when nothing can be done, so no caller blocks forever.
pub(crate) trait Endpoint: Send {
    /// Send one message. `Err` of kind `WouldBlock` or `TimedOut` means the stack took
    /// none of it within the poll interval (try again or give up); any other error is
    /// final.
    fn send(&mut self, msg: &[u8]) -> io::Result<()>;

    /// Send `count` copies of `msg`, each its own message, in as few calls into the
    /// stack as it allows (`natm-lab perf throughput --batch`); how many were taken. The
    /// default sends them one by one. `Err` as [`Endpoint::send`], only when none was
    /// taken.
    fn send_batch(&mut self, msg: &[u8], count: usize) -> io::Result<usize> {
        for k in 0..count {
            match self.send(msg) {
                Ok(()) => {}
                Err(e) if k == 0 => return Err(e),
                Err(_) => return Ok(k),
            }
        }
        Ok(count)
    }

    /// Send one message the caller owns as a `Bytes` (`natm-lab perf throughput`'s
    /// sender): a stack whose API takes the buffer without copying it uses that
    /// (`natm-reliable-zc`); the default sends a borrowed view with
    /// [`Endpoint::send`], copying as that does.
    fn send_owned(&mut self, msg: &bytes::Bytes) -> io::Result<()> {
        self.send(msg)
    }

    /// As [`Endpoint::recv`], for a receiver that only counts what arrives
    /// (`natm-lab perf throughput`): the length of the next delivery. A stack that can
    /// hand over a message's pieces without gathering them overrides it; the default
    /// is [`Endpoint::recv`]'s length.
    fn recv_len(&mut self) -> io::Result<Option<usize>> {
        Ok(self.recv()?.map(<[u8]>::len))
    }

    /// Wait up to the poll interval for the next delivery: `Ok(Some(bytes))`, borrowed
    /// until the next call, or `Ok(None)` if nothing arrived in time. A delivery is a
    /// whole message, except on stacks whose [`Stack::max_message`] is smaller than
    /// the message sent (UDP delivers such a message as several datagrams).
    fn recv(&mut self) -> io::Result<Option<&[u8]>>;

    /// The stack's own counters for this connection, one line, if it keeps any (what a
    /// failed transfer reports beside its error).
    fn counters(&self) -> Option<String> {
        None
    }

    /// Acknowledgements this end has sent so far (TPDUs or segments that carried no
    /// data), by the stack's own count; `None` where the stack sends none (UDP) or does
    /// not say.
    fn acks_sent(&self) -> Option<u64> {
        None
    }
}

/// Told when a run's measured interval starts and ends, on the thread that decides it
/// (`natm-lab perf counts` counts the kernel's work over exactly that interval).
pub(crate) trait Marks: Sync {
    /// The measured interval starts.
    fn start(&self);
    /// The measured interval has ended.
    fn end(&self);
}

/// No one listens for the interval.
pub(crate) struct NoMarks;

impl Marks for NoMarks {
    fn start(&self) {}
    fn end(&self) {}
}

/// A connection opened by [`Stack::connect`]: the client and server ends, in the same
/// process, and the settings they got.
pub(crate) struct Pair {
    /// The end that sends (throughput) or sends and times round trips (latency).
    pub(crate) client: Box<dyn Endpoint>,
    /// The end that receives (throughput) or echoes (latency).
    pub(crate) server: Box<dyn Endpoint>,
    /// Settings as granted, for the report.
    pub(crate) params: Params,
}

/// A protocol stack under test.
pub(crate) trait Stack {
    /// The name used on the command line and in the results.
    fn name(&self) -> &str;

    /// The largest message one delivery carries whole, if the stack has a limit
    /// (UDP over IPv4: 65,507 B). Latency refuses larger messages; throughput lets the
    /// stack's `send` split them.
    fn max_message(&self) -> Option<usize> {
        None
    }

    /// Open a fresh connection on loopback (ephemeral ports) for messages of up to
    /// `max_msg` bytes. Dropping the [`Pair`] closes it.
    fn connect(&self, max_msg: usize) -> io::Result<Pair>;
}

/// A stack's constructor: its registry name and the shared options in; the stack, or
/// why it cannot be built, out.
pub(crate) type MakeStack = fn(&'static str, &StackOptions) -> anyhow::Result<Box<dyn Stack>>;

/// A registry line: a stack's name, a one-line description, and its constructor.
pub(crate) struct Entry {
    /// Name on the command line.
    pub(crate) name: &'static str,
    /// What the stack is, for `natm-lab perf stacks` and error messages.
    pub(crate) about: &'static str,
    /// Build the stack (may start helper threads; may fail with a message).
    pub(crate) make: MakeStack,
}

/// A list of registry lines; each stack file exports its own ([`Entry`] constants
/// named `ENTRIES`), and `natm-lab perf` puts them together once. This module knows no
/// stack, so no stack file and this module import each other.
#[derive(Clone, Copy)]
pub(crate) struct Registry(pub(crate) &'static [&'static [Entry]]);

impl Registry {
    /// Every line, in the order given.
    pub(crate) fn entries(&self) -> impl Iterator<Item = &'static Entry> {
        self.0.iter().flat_map(|group| group.iter())
    }

    /// The names of the stacks, comma-separated.
    pub(crate) fn available(&self) -> String {
        self.entries()
            .map(|e| e.name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Build the stacks named, in order; an unknown or repeated name is an error that
    /// lists the available ones.
    pub(crate) fn resolve(
        &self,
        names: &[String],
        opts: &StackOptions,
    ) -> anyhow::Result<Vec<Box<dyn Stack>>> {
        if names.is_empty() {
            anyhow::bail!("no stack given; available stacks: {}", self.available());
        }
        let mut out: Vec<Box<dyn Stack>> = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let name = name.trim();
            if names[..i].iter().any(|n| n.trim() == name) {
                anyhow::bail!("stack \"{name}\" given twice");
            }
            let entry = self.entries().find(|e| e.name == name).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown stack \"{name}\"; available stacks: {}",
                    self.available()
                )
            })?;
            let stack = (entry.make)(entry.name, opts)
                .with_context(|| format!("cannot set up stack {}", entry.name))?;
            out.push(stack);
        }
        Ok(out)
    }
}

/// Whether an I/O error only means "nothing happened within the poll interval".
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(&'static str);

    impl Stack for Fake {
        fn name(&self) -> &str {
            self.0
        }
        fn connect(&self, _max_msg: usize) -> io::Result<Pair> {
            Err(io::Error::other("a fake stack does not connect"))
        }
    }

    fn fake(name: &'static str, _: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
        Ok(Box::new(Fake(name)))
    }

    const A: &[Entry] = &[
        Entry {
            name: "udp",
            about: "",
            make: fake,
        },
        Entry {
            name: "udp-busy",
            about: "",
            make: fake,
        },
    ];
    const B: &[Entry] = &[Entry {
        name: "tcp",
        about: "",
        make: fake,
    }];
    const TEST: Registry = Registry(&[A, B]);

    #[test]
    fn unknown_and_repeated_names_are_refused_with_the_list() {
        let opts = StackOptions::default();
        let err = TEST
            .resolve(&["udp".into(), "pigeon".into()], &opts)
            .err()
            .expect("pigeon is unknown")
            .to_string();
        assert!(err.contains("\"pigeon\""), "{err}");
        assert!(err.contains("udp, udp-busy, tcp"), "{err}");
        let err = TEST
            .resolve(&["tcp".into(), "tcp".into()], &opts)
            .err()
            .expect("tcp twice")
            .to_string();
        assert!(err.contains("twice"), "{err}");
        let ok = TEST.resolve(&["tcp".into(), "udp".into()], &opts).unwrap();
        assert_eq!(ok[0].name(), "tcp");
        assert_eq!(ok[1].name(), "udp");
    }
}
