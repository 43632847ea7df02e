//! UDP adaptor throughput on loopback: 4 KiB TPDUs (4,132-octet datagrams), sender and
//! receiver on two threads, a plain `send`/`recv` loop side by side with the port's GSO
//! sends and GRO receives.
//!
//! `cargo bench --bench udp -- --warm-up-time 1 --measurement-time 3`; the figures are
//! in `docs/PERFORMANCE.md`. One iteration is 60 datagrams (four full GSO sends). The
//! time is the receiver's: from the first send to the last datagram received, so the
//! throughput is goodput. The sender stops while more datagrams are unreceived than the
//! receive buffer holds (an in-process credit counter), so it never overflows; if
//! a datagram is lost anyway, the receiver gives up after a read timeout and the time is
//! scaled to the datagrams that did arrive.

use std::io::IoSlice;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use natm::adaptor::{PortOptions, SendBatch, UdpPort};
use natm::wire::tpdu::{Header, TpduType};
use natm::wire::vcframe::Repr;

const PAYLOAD: usize = 4096;
const FRAME: usize = 4 + 32 + PAYLOAD;
const PER_ITER: u64 = 60;
/// Receive buffer asked for; Linux grants twice `net.core.rmem_max` at most.
const RCVBUF: usize = 8 << 20;
/// Receive-buffer memory one 4 KiB datagram takes, with margin (about 8.5 KiB measured).
const TRUESIZE: usize = 10 << 10;
/// The receiver gives up after this long without a datagram.
const QUIET: Duration = Duration::from_secs(1);

#[derive(Clone, Copy)]
enum Tx {
    /// `send` on a connected std socket, one frame per system call.
    Plain,
    /// The port's `send_vectored`: VC header, TPDU header and payload gathered by one
    /// `sendmsg`, no copy.
    Gather,
    /// The port with GSO off: one `send` per frame.
    PortNoGso,
    /// The port with GSO, frames already contiguous.
    Gso,
    /// The port with GSO, each frame first copied into a reused `SendBatch` from its
    /// three parts.
    GsoCopyIn,
    /// Experiment, not in the port: GSO without the copy — socket2's `sendmsg` with the
    /// parts of 15 frames as 45 iovecs and a hand-encoded `UDP_SEGMENT` control message.
    GatherGso,
}

#[derive(Clone, Copy)]
enum Rx {
    /// `recv` on a connected std socket, one datagram per system call.
    Plain,
    /// The port in blocking mode without GRO: one datagram per call.
    PortNoGro,
    /// The port in blocking mode with GRO: one buffer (a run of datagrams) per call.
    PortGro,
    /// The port non-blocking without GRO, spinning on `recvmmsg` batches of 32.
    PortMmsgSpin,
}

fn local() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

fn frame_parts(seq: u32) -> ([u8; 4], [u8; 32], Vec<u8>) {
    let vc = Repr::data(0, 32).to_bytes();
    let h = Header {
        seq,
        ..Header::new(TpduType::Data)
    }
    .to_bytes();
    (vc, h, vec![seq as u8; PAYLOAD])
}

fn run(tx: Tx, rx: Rx, iters: u64) -> Duration {
    let target = iters * PER_ITER;
    let gro = matches!(rx, Rx::PortGro);
    let receiver = UdpPort::bind_with(
        local(),
        &PortOptions {
            gro,
            ..PortOptions::default()
        },
    )
    .unwrap();
    let granted = receiver.set_recv_buffer(RCVBUF).unwrap();
    // Datagrams in flight at most: what the granted buffer holds, less one iteration.
    let window = ((granted / TRUESIZE) as u64)
        .saturating_sub(PER_ITER)
        .max(PER_ITER);
    let gso = matches!(tx, Tx::Gso | Tx::GsoCopyIn | Tx::GatherGso);
    let sender = UdpPort::bind_with(
        local(),
        &PortOptions {
            gso,
            gro: false,
            ..PortOptions::default()
        },
    )
    .unwrap();
    let plain_tx = UdpSocket::bind(local()).unwrap();
    let sender_addr = if matches!(tx, Tx::Plain) {
        plain_tx.local_addr().unwrap()
    } else {
        sender.local_addr().unwrap()
    };
    receiver.connect(sender_addr).unwrap();
    let dst = receiver.local_addr().unwrap();
    sender.connect(dst).unwrap();
    plain_tx.connect(dst).unwrap();
    receiver.set_read_timeout(Some(QUIET)).unwrap();

    let received = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let ready = Barrier::new(2);
    let (got, elapsed) = thread::scope(|s| {
        let rx_thread = s.spawn(|| {
            // However this thread ends, the sender must stop waiting for credit.
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Relaxed);
                }
            }
            let _done = Done(&done);
            let mut batch = receiver.recv_batch(32);
            let mut buf = vec![0u8; 65_536];
            let std_rx = match rx {
                Rx::Plain => Some(clone_std(&receiver)),
                _ => None,
            };
            if matches!(rx, Rx::PortMmsgSpin) {
                receiver.set_nonblocking(true).unwrap();
            }
            ready.wait();
            let start = Instant::now();
            let mut last = start;
            let mut got = 0u64;
            let mut idle_since: Option<Instant> = None;
            while got < target {
                let n = match (&std_rx, rx) {
                    (Some(s), _) => s.recv(&mut buf).map(|_| 1),
                    _ => receiver.recv(&mut batch).map(|n| n as u64),
                };
                match n {
                    Ok(n) => {
                        got += n;
                        received.store(got, Relaxed);
                        last = Instant::now();
                        idle_since = None;
                    }
                    Err(_) if matches!(rx, Rx::PortMmsgSpin) => {
                        let t = *idle_since.get_or_insert_with(Instant::now);
                        if t.elapsed() > QUIET {
                            break;
                        }
                        std::hint::spin_loop();
                    }
                    Err(_) => break,
                }
            }
            (got, last - start)
        });
        let credit = Credit {
            window,
            received: &received,
            done: &done,
        };
        let mut frames = Frames::new();
        ready.wait();
        frames.send_all(tx, &sender, &plain_tx, target, &credit);
        rx_thread.join().unwrap()
    });
    if got < target {
        eprintln!("lost {} of {target} datagrams", target - got);
    }
    elapsed.mul_f64(target as f64 / got.max(1) as f64)
}

/// A std handle on the port's socket, for the plain `recv` loop.
fn clone_std(port: &UdpPort) -> UdpSocket {
    use std::os::fd::AsFd;
    UdpSocket::from(port.as_fd().try_clone_to_owned().unwrap())
}

/// The receiver's credit: how far the sender may run ahead of it.
struct Credit<'a> {
    window: u64,
    received: &'a AtomicU64,
    done: &'a AtomicBool,
}

/// One iteration's frames, in every form the senders need, made before the clock starts.
struct Frames {
    parts: Vec<([u8; 4], [u8; 32], Vec<u8>)>,
    contiguous: SendBatch,
    copy_in: SendBatch,
    gso_cmsg: Vec<u8>,
}

impl Frames {
    fn new() -> Frames {
        let parts: Vec<_> = (0..PER_ITER as u32).map(frame_parts).collect();
        let mut contiguous = SendBatch::with_capacity(PER_ITER as usize * FRAME);
        for (vc, h, p) in &parts {
            contiguous.push(&[vc, h, p]).unwrap();
        }
        Frames {
            parts,
            contiguous,
            copy_in: SendBatch::with_capacity(PER_ITER as usize * FRAME),
            gso_cmsg: udp_segment_cmsg(FRAME as u16),
        }
    }

    fn send_all(
        &mut self,
        tx: Tx,
        port: &UdpPort,
        plain: &UdpSocket,
        target: u64,
        credit: &Credit<'_>,
    ) {
        let Frames {
            parts: frames,
            contiguous,
            copy_in,
            gso_cmsg,
        } = self;
        let (frames, contiguous, gso_cmsg) = (&*frames, &*contiguous, &gso_cmsg[..]);
        let gather_gso = socket2::SockRef::from(port);
        let mut sent = 0u64;
        while sent < target {
            while sent - credit.received.load(Relaxed) > credit.window {
                if credit.done.load(Relaxed) {
                    return; // the receiver gave up: datagrams were lost
                }
                std::hint::spin_loop();
            }
            match tx {
                Tx::Plain => {
                    for f in contiguous.frames() {
                        plain.send(f).unwrap();
                    }
                }
                Tx::Gather => {
                    for (vc, h, p) in frames {
                        let parts = [IoSlice::new(vc), IoSlice::new(h), IoSlice::new(p)];
                        port.send_vectored(None, &parts).unwrap();
                    }
                }
                Tx::PortNoGso | Tx::Gso => {
                    assert_eq!(
                        port.send_batch(None, contiguous).unwrap(),
                        PER_ITER as usize
                    );
                }
                Tx::GatherGso => {
                    for chunk in frames.chunks(15) {
                        let mut it = chunk.iter().flat_map(|(vc, h, p)| {
                            [IoSlice::new(vc), IoSlice::new(h), IoSlice::new(p)]
                        });
                        let parts: [IoSlice<'_>; 45] = std::array::from_fn(|_| it.next().unwrap());
                        let msg = socket2::MsgHdr::new()
                            .with_buffers(&parts)
                            .with_control(gso_cmsg);
                        gather_gso.sendmsg(&msg, 0).unwrap();
                    }
                }
                Tx::GsoCopyIn => {
                    copy_in.clear();
                    for (vc, h, p) in frames {
                        copy_in.push(&[vc, h, p]).unwrap();
                    }
                    assert_eq!(port.send_batch(None, copy_in).unwrap(), PER_ITER as usize);
                }
            }
            sent += PER_ITER;
        }
    }
}

/// A `cmsghdr` for `SOL_UDP`/`UDP_SEGMENT` (Linux: 17/103) carrying `size`, padded to
/// `CMSG_SPACE(2)`. The kernel copies control data before parsing it, so the buffer
/// needs no alignment.
fn udp_segment_cmsg(size: u16) -> Vec<u8> {
    let word = std::mem::size_of::<usize>();
    let len = 2 * word + 2; // CMSG_LEN(2): cmsg_len (size_t), level and type (int)
    let mut c = Vec::new();
    c.extend_from_slice(&len.to_ne_bytes());
    c.extend_from_slice(&17i32.to_ne_bytes());
    c.extend_from_slice(&103i32.to_ne_bytes());
    c.extend_from_slice(&size.to_ne_bytes());
    c.resize(len.div_ceil(word) * word, 0);
    c
}

fn bench_loopback(c: &mut Criterion) {
    let mut g = c.benchmark_group("udp_loopback_4k");
    g.throughput(Throughput::BytesDecimal(PER_ITER * FRAME as u64));
    g.sample_size(10);
    let cases = [
        ("send/recv (reference)", Tx::Plain, Rx::Plain),
        ("gather sendmsg/recv", Tx::Gather, Rx::Plain),
        ("port no GSO/port no GRO", Tx::PortNoGso, Rx::PortNoGro),
        ("port no GSO/recvmmsg spin", Tx::PortNoGso, Rx::PortMmsgSpin),
        ("GSO/recv", Tx::Gso, Rx::Plain),
        ("GSO/port no GRO", Tx::Gso, Rx::PortNoGro),
        ("GSO/port GRO", Tx::Gso, Rx::PortGro),
        ("GSO copy-in/port GRO", Tx::GsoCopyIn, Rx::PortGro),
        (
            "gather GSO (experiment)/port GRO",
            Tx::GatherGso,
            Rx::PortGro,
        ),
    ];
    for (name, tx, rx) in cases {
        g.bench_function(name, |b| b.iter_custom(|iters| run(tx, rx, iters)));
    }
    g.finish();
}

/// The copy the port's GSO path costs: 60 frames pushed from their three parts into a
/// reused `SendBatch`, no I/O.
fn bench_copy_in(c: &mut Criterion) {
    let frames: Vec<_> = (0..PER_ITER as u32).map(frame_parts).collect();
    let mut batch = SendBatch::with_capacity(PER_ITER as usize * FRAME);
    let mut g = c.benchmark_group("udp_batch");
    g.throughput(Throughput::BytesDecimal(PER_ITER * FRAME as u64));
    g.bench_function("copy-in 60 frames", |b| {
        b.iter(|| {
            batch.clear();
            for (vc, h, p) in &frames {
                batch.push(&[vc, h, p]).unwrap();
            }
            std::hint::black_box(batch.as_bytes().len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench_copy_in, bench_loopback);
criterion_main!(benches);
