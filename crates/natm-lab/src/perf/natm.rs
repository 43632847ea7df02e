//! natm's own stacks for `natm-lab perf`: a duplex connection between two hosts on UDP
//! loopback, with the QoS each stack names.

use natm::ulib::Wait;
use std::io;

use serde_json::{json, Value};

use super::stack::{Endpoint, Entry, Pair, Stack, StackOptions};
use natm::ulib::{Connection, Error, Host, LinkMode};

/// This file's lines of the stack registry (`perf::STACKS`).
pub(crate) const ENTRIES: &[Entry] = &[
    Entry {
        name: "natm-be",
        about: "natm best effort over UDP loopback (no error or flow control)",
        make: best_effort,
    },
    Entry {
        name: "natm-reliable",
        about: "natm reliable: SMART + dynamic window, 4 KiB TPDUs",
        make: reliable,
    },
    Entry {
        name: "natm-reliable-32k",
        about: "natm reliable with 32 KiB TPDUs",
        make: reliable_32k,
    },
    Entry {
        name: "natm-reliable-zc",
        about:
            "natm-reliable with owned buffers: send of a Bytes and recv_chunk, no user-space copy",
        make: reliable_zc,
    },
    Entry {
        name: "natm-reliable-32k-zc",
        about: "natm-reliable-zc with 32 KiB TPDUs",
        make: reliable_32k_zc,
    },
    Entry {
        name: "natm-reliable-cell",
        about: "natm reliable, 4 KiB TPDUs, in cell mode: AAL5 cells in trains of 32",
        make: reliable_cell,
    },
    Entry {
        name: "natm-reliable-cell-max",
        about: "natm reliable, 4 KiB TPDUs, in cell mode with the largest trains (1,235 cells)",
        make: reliable_cell_max,
    },
    Entry {
        name: "natm-guaranteed",
        about: "natm guaranteed: a 1 Gbit/s CBR VC paced by its leaky bucket",
        make: guaranteed,
    },
    Entry {
        name: "natm-be-busy",
        about: "natm best effort, engine busy-polling (a core for microseconds)",
        make: best_effort_busy,
    },
    Entry {
        name: "natm-be-sched",
        about: "natm best effort, every send through the driver's task scheduler",
        make: best_effort_sched,
    },
    Entry {
        name: "natm-reliable-sched",
        about: "natm reliable, every send through the driver's task scheduler",
        make: reliable_sched,
    },
];

struct Natm {
    name: &'static str,
    qos: String,
    busy: bool,
    inline: bool,
    link: LinkMode,
    /// The application side uses the owned-buffer calls: a `Bytes` to `send` on send and
    /// `recv_chunk` (no gather) where the receiver only counts.
    zero_copy: bool,
    opts: StackOptions,
}

fn stack(
    name: &'static str,
    qos: &str,
    busy: bool,
    inline: bool,
    opts: &StackOptions,
) -> Box<dyn Stack> {
    Box::new(frame_stack(name, qos, busy, inline, opts))
}

/// A natm stack on frame-mode links, its application copying on both sides.
fn frame_stack(
    name: &'static str,
    qos: &str,
    busy: bool,
    inline: bool,
    opts: &StackOptions,
) -> Natm {
    Natm {
        name,
        qos: qos.to_string(),
        busy,
        inline,
        link: LinkMode::Frame,
        zero_copy: false,
        opts: opts.clone(),
    }
}

/// A natm stack whose links are in cell mode with trains of `train` cells.
fn cell_stack(name: &'static str, qos: &str, train: u16, o: &StackOptions) -> Box<dyn Stack> {
    Box::new(Natm {
        name,
        qos: qos.to_string(),
        busy: false,
        inline: true,
        link: LinkMode::Cell { train },
        zero_copy: false,
        opts: o.clone(),
    })
}

/// `natm-reliable-cell`: `natm-reliable` with both ends in cell mode (issue 13):
/// every 4 KiB TPDU is cut into 86 AAL5 cells, sent in trains of 32 and reassembled.
pub(crate) fn reliable_cell(
    name: &'static str,
    o: &StackOptions,
) -> anyhow::Result<Box<dyn Stack>> {
    Ok(cell_stack(
        name,
        "reliable",
        natm::ulib::DEFAULT_TRAIN_CELLS,
        o,
    ))
}

/// `natm-reliable-cell-max`: cell mode with trains as large as a UDP datagram takes.
pub(crate) fn reliable_cell_max(
    name: &'static str,
    o: &StackOptions,
) -> anyhow::Result<Box<dyn Stack>> {
    Ok(cell_stack(
        name,
        "reliable",
        u16::try_from(natm_proto::wire::train::MAX_TRAIN_CELLS).unwrap_or(u16::MAX),
        o,
    ))
}

/// `natm-be`: best effort (no error or flow control).
pub(crate) fn best_effort(name: &'static str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(stack(name, "best-effort", false, true, o))
}

/// `natm-reliable`: SMART and the dynamic window, 4 KiB TPDUs (the paper's default).
pub(crate) fn reliable(name: &'static str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(stack(name, "reliable", false, true, o))
}

/// `natm-reliable-32k`: as `natm-reliable` with 32 KiB TPDUs (seed 000 §5.3.1: the TPDU
/// size is chosen per environment; a loopback path has no loss to amortise).
pub(crate) fn reliable_32k(name: &'static str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(stack(name, "reliable:tpdu=32768", false, true, o))
}

/// `natm-reliable-zc`: `natm-reliable` whose application hands each message over as
/// a `Bytes` (`Connection::send` of a `Bytes`: the PSB queue holds slices of it) and counts
/// what arrives chunk by chunk (`Connection::recv_chunk`: slices of the receive
/// areas), so no octet is copied in user space on either side.
pub(crate) fn reliable_zc(name: &'static str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(zero_copy(name, "reliable", o))
}

/// `natm-reliable-32k-zc`: `natm-reliable-zc` with 32 KiB TPDUs.
pub(crate) fn reliable_32k_zc(
    name: &'static str,
    o: &StackOptions,
) -> anyhow::Result<Box<dyn Stack>> {
    Ok(zero_copy(name, "reliable:tpdu=32768", o))
}

fn zero_copy(name: &'static str, qos: &str, o: &StackOptions) -> Box<dyn Stack> {
    Box::new(Natm {
        zero_copy: true,
        ..frame_stack(name, qos, false, true, o)
    })
}

/// `natm-guaranteed`: a constant-bit-rate VC of 1 Gbit/s of payload (direct mode: no
/// admission), paced by its leaky bucket of the default depth.
pub(crate) fn guaranteed(name: &'static str, o: &StackOptions) -> anyhow::Result<Box<dyn Stack>> {
    Ok(stack(name, "cbr:pcr=1000Mbps", false, true, o))
}

/// A natm stack with any QoS text (the guaranteed and loss experiments).
pub(crate) fn with_qos(name: &'static str, qos: &str, o: &StackOptions) -> Box<dyn Stack> {
    stack(name, qos, false, true, o)
}

/// `natm-be-busy`: best effort with the engine busy-polling its sockets.
pub(crate) fn best_effort_busy(
    name: &'static str,
    o: &StackOptions,
) -> anyhow::Result<Box<dyn Stack>> {
    Ok(stack(name, "best-effort", true, true, o))
}

/// `natm-be-sched`: best effort with every send going through the driver's task
/// scheduler (the paper's structure), for comparison with inline sends.
pub(crate) fn best_effort_sched(
    name: &'static str,
    o: &StackOptions,
) -> anyhow::Result<Box<dyn Stack>> {
    Ok(stack(name, "best-effort", false, false, o))
}

/// `natm-reliable-sched`: `natm-reliable` with every send through the driver's task
/// scheduler (the stage breakdown's fourth variant).
pub(crate) fn reliable_sched(
    name: &'static str,
    o: &StackOptions,
) -> anyhow::Result<Box<dyn Stack>> {
    Ok(stack(name, "reliable", false, false, o))
}

struct End {
    conn: Connection,
    last: Vec<u8>,
    poll: std::time::Duration,
    /// Send `Bytes` and count with `recv_chunk` (`natm-reliable-zc`).
    zero_copy: bool,
    /// Octets of the message being received chunk by chunk so far.
    partial: usize,
}

fn io_err(e: Error) -> io::Error {
    io::Error::from(e)
}

impl Endpoint for End {
    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        self.conn.send(msg, Wait::Block).map_err(io_err)
    }

    fn send_batch(&mut self, msg: &[u8], count: usize) -> io::Result<usize> {
        // One call for the burst: the TPDUs leave in GSO batches (Connection::send_many).
        let burst = vec![msg; count];
        self.conn.send_many(&burst, Wait::Block).map_err(io_err)?;
        Ok(count)
    }

    fn send_owned(&mut self, msg: &bytes::Bytes) -> io::Result<()> {
        if self.zero_copy {
            self.conn.send(msg.clone(), Wait::Block).map_err(io_err)
        } else {
            self.send(msg)
        }
    }

    fn recv_len(&mut self) -> io::Result<Option<usize>> {
        if !self.zero_copy {
            return Ok(self.recv()?.map(<[u8]>::len));
        }
        // A message is its chunks up to the one that ends it; each is a slice of a
        // receive area, dropped at once (the area goes back to the free list).
        loop {
            match self.conn.recv_chunk(Wait::For(self.poll)) {
                Ok(Some(c)) => {
                    self.partial += c.data.len();
                    if c.end_of_message {
                        return Ok(Some(std::mem::take(&mut self.partial)));
                    }
                }
                Ok(None) => {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed"))
                }
                Err(Error::TimedOut) => return Ok(None),
                Err(e) => return Err(io_err(e)),
            }
        }
    }

    fn recv(&mut self) -> io::Result<Option<&[u8]>> {
        // Into the same buffer each time, as the TCP endpoint reads into its own.
        match self.conn.recv_into(&mut self.last, Some(self.poll)) {
            Ok(true) => Ok(Some(&self.last)),
            Ok(false) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed")),
            Err(Error::TimedOut) => Ok(None),
            Err(e) => Err(io_err(e)),
        }
    }

    fn acks_sent(&self) -> Option<u64> {
        Some(self.conn.stats().rx.acks_sent)
    }

    fn counters(&self) -> Option<String> {
        let s = self.conn.stats();
        let (t, r) = (&s.tx, &s.rx);
        Some(format!(
            "tx: sent {} retx fast/head/timeout {}/{}/{} timeouts {} acks {} (invalid {}) \
             window stalls {} tpdu {}; srtt {:?} rate {:?} bit/s; \
             rx: tpdus {} delivered {} B in {} msgs, out of order {} dup {} \
             dropped window/buffer {}/{}; queued send {} recv {} B; socket drops {:?}",
            t.tpdus_sent,
            t.retx_fast,
            t.retx_head,
            t.retx_timeout,
            t.timeouts,
            t.acks_received,
            t.acks_invalid,
            t.window_stalls,
            t.tpdu_size,
            s.srtt,
            s.rate_bps,
            r.tpdus_received,
            r.bytes_delivered,
            r.messages_delivered,
            r.ooo_tpdus,
            r.dup_tpdus,
            r.drop_out_of_window,
            r.drop_rcv_buf,
            s.send_queued,
            s.recv_queued,
            s.queue_drops,
        ))
    }
}

impl Stack for Natm {
    fn name(&self) -> &str {
        self.name
    }

    fn connect(&self, _max_msg: usize) -> io::Result<Pair> {
        let mut cfg = super::host_config();
        cfg.engine.busy_poll = self.busy;
        cfg.engine.inline_send = self.inline;
        cfg.engine.link_mode = self.link;
        cfg.engine.driver_cpus.clone_from(&self.opts.driver_cpus);
        if let Some(b) = self.opts.sockbuf {
            cfg.engine.socket_rcvbuf = b;
            cfg.engine.socket_sndbuf = b;
        }
        let host = Host::open(cfg).map_err(io_err)?;
        let l = host.bind("127.0.0.1:0", &self.qos).map_err(io_err)?;
        let addr = l.local_addr().map_err(io_err)?;
        let h2 = host.clone();
        let qos = self.qos.clone();
        let t = std::thread::spawn(move || h2.connect(addr, &qos));
        let server = l
            .accept(Wait::For(std::time::Duration::from_secs(5)))
            .map_err(io_err)?;
        let client = t
            .join()
            .map_err(|_| io::Error::other("connect thread panicked"))?
            .map_err(io_err)?;
        let mut params = serde_json::Map::new();
        params.insert("qos".into(), Value::String(self.qos.clone()));
        params.insert("busy_poll".into(), json!(self.busy));
        params.insert("inline_send".into(), json!(self.inline));
        params.insert("link".into(), json!(self.link.to_string()));
        params.insert("zero_copy".into(), json!(self.zero_copy));
        if let Some(c) = &self.opts.driver_cpus {
            params.insert("driver_cpus".into(), json!(c));
        }
        Ok(Pair {
            client: Box::new(End {
                conn: client,
                last: Vec::new(),
                poll: self.opts.poll,
                zero_copy: self.zero_copy,
                partial: 0,
            }),
            server: Box::new(End {
                conn: server,
                last: Vec::new(),
                poll: self.opts.poll,
                zero_copy: self.zero_copy,
                partial: 0,
            }),
            params,
        })
    }
}

/// A natm connection as an [`Endpoint`] (the loss experiment's peers, the stacks
/// through sigd).
pub(crate) fn endpoint(
    conn: Connection,
    poll: std::time::Duration,
    zero_copy: bool,
) -> Box<dyn Endpoint> {
    Box::new(End {
        conn,
        last: Vec::new(),
        poll,
        zero_copy,
        partial: 0,
    })
}
