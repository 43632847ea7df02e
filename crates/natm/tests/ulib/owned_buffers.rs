//! Owned-buffer sends and chunked receives (issue 17): a large transfer handed over
//! as a `Bytes` to `Connection::send` and taken with `recv_chunk` arrives byte-exact, with
//! its message boundaries, over UDP loopback directly and through a lossy relay.

use natm::ulib::Wait;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert_no_retransmissions;
use bytes::Bytes;
use natm::ulib::{ConnStats, Connection, Host};

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// A client on host `a` connected to a listener of `b`, through `via` if given (the
/// client dials `via`, which forwards to the listener).
fn connect(
    qos: &str,
    via: Option<&dyn Fn(SocketAddr) -> SocketAddr>,
) -> (Host, Host, Connection, Connection) {
    let a = Host::open(crate::support::host_config()).unwrap();
    let b = Host::open(crate::support::host_config()).unwrap();
    let l = b.bind("127.0.0.1:0", qos).unwrap();
    let mut addr = l.local_addr().unwrap();
    if let Some(relay) = via {
        addr = relay(addr);
    }
    let (a2, q) = (a.clone(), qos.to_string());
    let t = thread::spawn(move || a2.connect(addr, &q).unwrap());
    let server = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
    (a, b, t.join().unwrap(), server)
}

/// Messages of uneven sizes (up to 1 MiB, some of one TPDU, some ending mid-TPDU),
/// slices of one buffer of `total` octets.
fn messages(total: usize) -> (Bytes, Vec<Bytes>) {
    let data = Bytes::from((0..total).map(pattern).collect::<Vec<u8>>());
    let sizes = [65_536, 1 << 20, 1, 4096, 4097, 100_000, 32_768, 777_777];
    let (mut at, mut i, mut out) = (0, 0, Vec::new());
    while at < total {
        let n = sizes[i % sizes.len()].min(total - at);
        out.push(data.slice(at..at + n));
        at += n;
        i += 1;
    }
    (data, out)
}

/// Send every message as `Bytes`, close, and receive them all with
/// `recv_chunk`; check the bytes and the boundaries (each message's chunks start and end it). The sender's counters, after
/// its flush.
fn transfer_by_owned_buffers(
    c: Connection,
    s: &Connection,
    msgs: Vec<Bytes>,
    data: &Bytes,
    tpdu: usize,
) -> ConnStats {
    let sizes: Vec<usize> = msgs.iter().map(Bytes::len).collect();
    let sender = thread::spawn(move || {
        for m in msgs {
            c.send(m, Wait::Block).unwrap();
        }
        c.close();
        c.flush(Duration::from_secs(60)).unwrap();
        c
    });
    let mut got = Vec::with_capacity(data.len());
    let mut got_sizes = Vec::new();
    let mut this = 0;
    while let Some(chunk) = s.recv_chunk(Wait::For(Duration::from_secs(30))).unwrap() {
        // Each message's first chunk, and only it, says it starts the message.
        assert_eq!(
            chunk.start_of_message,
            this == 0,
            "message {}",
            got_sizes.len()
        );
        got.extend_from_slice(&chunk.data);
        this += chunk.data.len();
        if chunk.end_of_message {
            got_sizes.push(std::mem::take(&mut this));
        }
    }
    let c = sender.join().unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data[..], "byte-exact");
    assert_eq!(got_sizes, sizes, "message boundaries kept");
    let st = c.stats();
    assert!(st.tx.tpdus_sent >= (data.len() / tpdu) as u64);
    st
}

#[test]
fn a_large_transfer_by_owned_buffers_and_chunks_is_byte_exact() {
    let (_a, _b, c, s) = connect("reliable", None);
    let (data, msgs) = messages(24 << 20);
    let st = transfer_by_owned_buffers(c, &s, msgs, &data, 4096);
    assert_no_retransmissions("reliable", &st, &s.stats());
}

#[test]
fn owned_buffers_with_32k_tpdus_are_byte_exact() {
    let (_a, _b, c, s) = connect("reliable:tpdu=32768", None);
    let (data, msgs) = messages(12 << 20);
    let st = transfer_by_owned_buffers(c, &s, msgs, &data, 32_768);
    assert_no_retransmissions("reliable:tpdu=32768", &st, &s.stats());
}

#[test]
fn the_caller_keeps_its_buffer_and_may_send_it_again() {
    let (_a, _b, c, s) = connect("reliable", None);
    let (data, _) = messages(300_000);
    // The same buffer three times: each send holds its own references.
    for _ in 0..3 {
        c.send(data.clone(), Wait::Block).unwrap();
    }
    for _ in 0..3 {
        let mut m = Vec::new();
        loop {
            let ch = s
                .recv_chunk(Wait::For(Duration::from_secs(10)))
                .unwrap()
                .unwrap();
            m.extend_from_slice(&ch.data);
            if ch.end_of_message {
                break;
            }
        }
        assert!(m == data[..]);
    }
    assert_eq!(data.len(), 300_000, "the caller's buffer is untouched");
    c.close();
    c.flush(Duration::from_secs(10)).unwrap();
    assert_no_retransmissions("reliable", &c.stats(), &s.stats());
}

/// A UDP relay, like a NAT, between one client and a server that answers from a
/// socket of its own per connection: the server sees the relay's `back` socket as the
/// client; the client sees one `front` socket per server address (the first is the
/// listener's, `addr`). It drops one datagram in `one_in` each way (after the first
/// `spare`, so the handshake gets through) and stops when `stop` is set or after
/// `limit`.
struct LossyRelay {
    addr: SocketAddr,
    dropped: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

/// Most server addresses one relay maps (a test's connection needs two).
const MAX_FRONTS: usize = 8;

impl LossyRelay {
    fn start(server: SocketAddr, one_in: u64, spare: u64, limit: Duration) -> LossyRelay {
        let bind = || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_nonblocking(true).unwrap();
            s
        };
        let back = bind();
        // (server address, the front socket the client talks to it through)
        let mut fronts = vec![(server, bind())];
        let addr = fronts[0].1.local_addr().unwrap();
        let (dropped, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (d, st) = (dropped.clone(), stop.clone());
        let thread = thread::spawn(move || {
            let until = Instant::now() + limit;
            let mut client: Option<SocketAddr> = None;
            let mut buf = vec![0u8; 65_536];
            let (mut seen, mut rng) = (0u64, 0x0017_5eed_u64);
            let mut lose = || {
                seen += 1;
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let l = seen > spare && rng % one_in == 0;
                if l {
                    d.fetch_add(1, Ordering::Relaxed);
                }
                l
            };
            while !st.load(Ordering::Relaxed) && Instant::now() < until {
                let mut moved = 0;
                for (to, front) in &fronts {
                    while let Ok((n, from)) = front.recv_from(&mut buf) {
                        moved += 1;
                        if *client.get_or_insert(from) == from && !lose() {
                            let _ = back.send_to(&buf[..n], to);
                        }
                    }
                }
                while let Ok((n, from)) = back.recv_from(&mut buf) {
                    moved += 1;
                    let Some(c) = client else { continue };
                    let k = match fronts.iter().position(|(s, _)| *s == from) {
                        Some(k) => k,
                        None if fronts.len() < MAX_FRONTS => {
                            fronts.push((from, bind()));
                            fronts.len() - 1
                        }
                        None => continue,
                    };
                    if !lose() {
                        let _ = fronts[k].1.send_to(&buf[..n], c);
                    }
                }
                if moved == 0 {
                    thread::sleep(Duration::from_micros(200));
                }
            }
        });
        LossyRelay {
            addr,
            dropped,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn owned_buffers_arrive_byte_exact_through_a_lossy_path() {
    let relay = std::cell::RefCell::new(None::<LossyRelay>);
    let via = |server: SocketAddr| {
        let r = LossyRelay::start(server, 100, 8, Duration::from_secs(120));
        let addr = r.addr;
        *relay.borrow_mut() = Some(r);
        addr
    };
    let (_a, _b, c, s) = connect("reliable", Some(&via));
    let (data, msgs) = messages(6 << 20);
    let st = transfer_by_owned_buffers(c, &s, msgs, &data, 4096);
    let relay = relay.borrow_mut().take().unwrap();
    assert!(
        relay.dropped.load(Ordering::Relaxed) > 10,
        "the path lost datagrams: {}",
        relay.dropped.load(Ordering::Relaxed)
    );
    // The counters the loss-free tests find at 0 do count: here they must not be.
    assert!(st.tx.retransmissions() > 0, "{st:?}");
}
