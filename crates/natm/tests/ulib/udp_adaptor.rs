//! The UDP adaptor on loopback: single frames, GSO batches with and without GSO, GRO
//! boundaries, the kernel's source filter, receive timeouts and kernel drops.
//!
//! No timing assertions: waits are bounded by read timeouts only so that a failure
//! cannot hang the run.

use std::io::{self, IoSlice};
use std::net::{Ipv4Addr, SocketAddr};
use std::thread;
use std::time::Duration;

use natm::adaptor::{PortOptions, RecvBatch, SendBatch, UdpPort};
use natm::wire::tpdu::{self, Header, TpduType};
use natm::wire::vcframe::{self, FrameKind, Repr};

const LOCAL: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
const PAYLOAD: usize = 4096;
const FRAME: usize = vcframe::HEADER_LEN + tpdu::HEADER_LEN + PAYLOAD;
/// Bound on any blocking receive, so that a lost datagram fails the test, not hangs it.
const PATIENCE: Duration = Duration::from_secs(10);

fn port(options: PortOptions) -> UdpPort {
    let p = UdpPort::bind_with(LOCAL, &options).unwrap();
    p.set_read_timeout(Some(PATIENCE)).unwrap();
    p
}

fn options(gso: bool, gro: bool) -> PortOptions {
    PortOptions {
        gso,
        gro,
        ..PortOptions::default()
    }
}

/// Two ports connected to each other.
fn pair(a: PortOptions, b: PortOptions) -> (UdpPort, UdpPort) {
    let (a, b) = (port(a), port(b));
    a.connect(b.local_addr().unwrap()).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    (a, b)
}

/// Payload octet `i` of the TPDU with sequence number `seq`.
fn fill(seq: u32, i: usize) -> u8 {
    (seq as usize * 31 + i * 7) as u8
}

fn tpdu_header(seq: u32) -> Header {
    Header {
        seq,
        cookie: 0xC0FF_EE01,
        ..Header::new(TpduType::Data)
    }
}

/// Append the DATA TPDU `seq` with `len` payload octets on VC 0/`vci`.
fn push_tpdu(batch: &mut SendBatch, vci: u16, seq: u32, len: usize) {
    let vc = Repr::data(0, vci).to_bytes();
    let h = tpdu_header(seq).to_bytes();
    let payload: Vec<u8> = (0..len).map(|i| fill(seq, i)).collect();
    batch.push(&[&vc, &h, &payload]).unwrap();
}

/// Check a received frame is the DATA TPDU `seq` on 0/`vci` with `len` payload octets.
fn check_frame(frame: &[u8], vci: u16, seq: u32, len: usize) {
    let (vc, sdu) = Repr::parse_bytes(frame).expect("a VC frame");
    assert_eq!((vc.kind, vc.vpi, vc.vci), (FrameKind::Data, 0, vci));
    let (h, payload) = Header::parse_bytes(sdu).expect("a TPDU");
    assert_eq!(h, tpdu_header(seq), "frame {seq} arrived out of order");
    assert_eq!(payload.len(), len, "frame {seq} has the wrong length");
    assert!(
        payload.iter().enumerate().all(|(i, &b)| b == fill(seq, i)),
        "frame {seq} is corrupted"
    );
}

/// Receive until `count` frames have arrived (blocking, bounded by the read timeout);
/// returns them with their source, and the largest number of datagrams one receive
/// buffer carried.
fn recv_frames(port: &UdpPort, count: usize) -> (Vec<(SocketAddr, Vec<u8>)>, usize) {
    let mut batch = port.recv_batch(8);
    let mut got = Vec::new();
    let mut largest_run = 0;
    while got.len() < count {
        match port.recv(&mut batch) {
            Ok(n) => {
                largest_run = largest_run.max(n);
                got.extend(batch.iter().map(|(a, d)| (a, d.to_vec())));
            }
            Err(e) => panic!(
                "{} of {count} frames arrived, then {e}; kernel drops {:?}, receive buffer {:?}",
                got.len(),
                port.kernel_drops(),
                port.recv_buffer().ok()
            ),
        }
    }
    (got, largest_run)
}

/// The application thread blocked in `recv` and the engine's poller share a port.
#[test]
fn a_port_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<UdpPort>();
    shared::<natm::adaptor::PortStats>();
}

#[test]
fn single_frames_round_trip() {
    let (a, b) = pair(PortOptions::default(), PortOptions::default());
    let mut batch = SendBatch::new();
    for (seq, len) in [(1u32, 0usize), (2, 1), (3, 1400), (4, PAYLOAD), (5, 60_000)] {
        batch.clear();
        push_tpdu(&mut batch, 32, seq, len);
        assert_eq!(a.send_batch(None, &batch).unwrap(), 1);
        let (got, _) = recv_frames(&b, 1);
        assert_eq!(got[0].0, a.local_addr().unwrap());
        check_frame(&got[0].1, 32, seq, len);
    }
    // The same frame gathered from its three parts, without copying them together.
    let vc = Repr::data(0, 33).to_bytes();
    let h = tpdu_header(6).to_bytes();
    let payload: Vec<u8> = (0..PAYLOAD).map(|i| fill(6, i)).collect();
    let parts = [IoSlice::new(&vc), IoSlice::new(&h), IoSlice::new(&payload)];
    a.send_vectored(None, &parts).unwrap();
    check_frame(&recv_frames(&b, 1).0[0].1, 33, 6, PAYLOAD);
    // And back the other way, to an explicit destination.
    batch.clear();
    push_tpdu(&mut batch, 34, 7, 100);
    b.send_batch(Some(a.local_addr().unwrap()), &batch).unwrap();
    check_frame(&recv_frames(&a, 1).0[0].1, 34, 7, 100);
    let s = a.stats();
    assert_eq!((s.datagrams_sent, s.datagrams_received), (6, 1));
    assert_eq!(s.send_errors + s.recv_errors + s.truncated, 0);
}

/// Send 64 × 4 KiB frames in one call and check each one on arrival.
fn batch_of_64(sender: PortOptions, receiver: PortOptions) -> (UdpPort, UdpPort, usize) {
    let (a, b) = pair(sender, receiver);
    b.set_recv_buffer(8 << 20).unwrap();
    let mut batch = SendBatch::with_capacity(64 * FRAME);
    for seq in 0..64 {
        push_tpdu(&mut batch, 40, seq, PAYLOAD);
    }
    assert_eq!(batch.segment_size(), Some(FRAME));
    let (got, largest_run) = thread::scope(|s| {
        let rx = s.spawn(|| recv_frames(&b, 64));
        assert_eq!(a.send_batch(None, &batch).unwrap(), 64);
        rx.join().unwrap()
    });
    assert_eq!(got.len(), 64);
    for (seq, (from, frame)) in got.iter().enumerate() {
        assert_eq!(*from, a.local_addr().unwrap());
        check_frame(frame, 40, seq as u32, PAYLOAD);
    }
    (a, b, largest_run)
}

#[test]
fn gso_batch_of_64_frames_arrives_intact_and_in_order() {
    let (a, _b, _) = batch_of_64(options(true, true), options(true, false));
    let s = a.stats();
    assert_eq!((s.datagrams_sent, s.bytes_sent), (64, 64 * FRAME as u64));
    if a.max_gso_segments() > 1 {
        // 65,507 / 4,132 = 15 frames per sendmsg: 5 GSO sends.
        assert_eq!((s.gso_batches, s.send_calls), (5, 5));
    } else {
        eprintln!("note: no UDP GSO on this kernel; the batch went out one by one");
        assert_eq!(s.send_calls, 64);
    }
    assert_eq!(s.gso_fallbacks + s.send_errors, 0);
}

#[test]
fn batch_of_64_frames_without_gso_goes_one_by_one() {
    let (a, _b, _) = batch_of_64(options(false, true), options(true, false));
    assert_eq!(a.max_gso_segments(), 1);
    let s = a.stats();
    assert_eq!((s.datagrams_sent, s.send_calls, s.gso_batches), (64, 64, 0));
}

#[test]
fn gro_receive_keeps_frame_boundaries() {
    let (a, b, largest_run) = batch_of_64(options(true, true), options(true, true));
    let r = b.stats();
    assert_eq!(r.datagrams_received, 64);
    if a.max_gso_segments() > 1 && b.gro() {
        // Over loopback a GSO send reaches a GRO socket as one buffer.
        assert!(r.gro_coalesced > 0 && largest_run > 1, "{r:?}");
        assert!(r.recv_calls < 64);
    }
    // A run whose last frame is shorter: the stride split must end it right there.
    let mut batch = SendBatch::new();
    for seq in 0..9 {
        push_tpdu(&mut batch, 41, seq, PAYLOAD);
    }
    push_tpdu(&mut batch, 41, 9, 1000);
    assert_eq!(a.send_batch(None, &batch).unwrap(), 10);
    let (got, _) = recv_frames(&b, 10);
    for (seq, (_, frame)) in got.iter().enumerate() {
        let len = if seq == 9 { 1000 } else { PAYLOAD };
        check_frame(frame, 41, seq as u32, len);
    }
}

#[test]
fn connected_socket_hears_only_its_peer_and_the_listener_hears_the_rest() {
    let shared = PortOptions {
        reuse_address: true,
        ..PortOptions::default()
    };
    let listener = port(shared);
    let vc = UdpPort::bind_with(listener.local_addr().unwrap(), &shared).unwrap();
    let (peer, stranger) = (port(PortOptions::default()), port(PortOptions::default()));
    vc.connect(peer.local_addr().unwrap()).unwrap();
    vc.set_nonblocking(true).unwrap();

    let mut batch = SendBatch::new();
    push_tpdu(&mut batch, 50, 1, 10);
    stranger
        .send_batch(Some(listener.local_addr().unwrap()), &batch)
        .unwrap();
    // The stranger's datagram reaches the listener, with its source address...
    let (got, _) = recv_frames(&listener, 1);
    assert_eq!(got[0].0, stranger.local_addr().unwrap());
    check_frame(&got[0].1, 50, 1, 10);
    // ...and never the VC's socket, which holds only what its peer sends.
    let mut rx = vc.recv_batch(4);
    assert_eq!(
        vc.recv(&mut rx).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    batch.clear();
    push_tpdu(&mut batch, 50, 2, 10);
    peer.send_batch(Some(vc.local_addr().unwrap()), &batch)
        .unwrap();
    vc.set_nonblocking(false).unwrap();
    vc.set_read_timeout(Some(PATIENCE)).unwrap();
    let (got, _) = recv_frames(&vc, 1);
    assert_eq!(got[0].0, peer.local_addr().unwrap());
    check_frame(&got[0].1, 50, 2, 10);
    assert_eq!(listener.stats().datagrams_received, 1);
}

#[test]
fn connected_socket_alone_makes_the_kernel_refuse_strangers() {
    let (vc, _peer) = pair(PortOptions::default(), PortOptions::default());
    let stranger = port(PortOptions::default());
    stranger.connect(vc.local_addr().unwrap()).unwrap();
    let mut batch = SendBatch::new();
    push_tpdu(&mut batch, 51, 1, 10);
    stranger.send_batch(None, &batch).unwrap();
    // No socket took it: the kernel answered with ICMP port unreachable, which the
    // stranger's connected socket reports on its next receive as ECONNREFUSED; the
    // port counts it and reads on past it (an asynchronous error must not stop a
    // drain with datagrams queued behind it), finding nothing else.
    stranger
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut rx = stranger.recv_batch(1);
    let err = stranger.recv(&mut rx).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "{err}");
    assert_eq!(stranger.stats().recv_errors, 1);
    vc.set_nonblocking(true).unwrap();
    let mut rx = vc.recv_batch(1);
    assert_eq!(
        vc.recv(&mut rx).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
}

/// A busy poller's read (`recv_one_now`): with nothing queued it says `WouldBlock` at
/// once, even on a blocking socket; a batch of 64 frames comes back a buffer (one
/// datagram or GRO run) per call, every frame intact and in order; and lone small
/// frames, which go out copied into one buffer, arrive whole.
#[test]
fn a_busy_pollers_read_takes_one_buffer_per_call_and_never_waits() {
    let (a, b) = pair(options(true, true), options(true, true));
    b.set_recv_buffer(8 << 20).unwrap();
    let mut rx = b.recv_batch(8);
    let asked = std::time::Instant::now();
    let err = b.recv_one_now(&mut rx).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    assert!(
        asked.elapsed() < PATIENCE / 2,
        "it waited for the read timeout"
    );
    let mut batch = SendBatch::with_capacity(64 * FRAME);
    for seq in 0..64 {
        push_tpdu(&mut batch, 41, seq, PAYLOAD);
    }
    assert_eq!(a.send_batch(None, &batch).unwrap(), 64);
    // Loopback queues what a send carries before the send returns.
    let mut got = Vec::new();
    let mut calls = 0;
    while got.len() < 64 {
        let n = b
            .recv_one_now(&mut rx)
            .expect("the rest of the batch queued");
        calls += 1;
        assert_eq!(n, rx.iter().count());
        got.extend(rx.iter().map(|(from, d)| (from, d.to_vec())));
    }
    for (seq, (from, frame)) in got.iter().enumerate() {
        assert_eq!(*from, a.local_addr().unwrap());
        check_frame(frame, 41, seq as u32, PAYLOAD);
    }
    assert_eq!(
        b.recv_one_now(&mut rx).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    for seq in 100..103u32 {
        batch.clear();
        push_tpdu(&mut batch, 42, seq, seq as usize - 90);
        assert_eq!(a.send_batch(None, &batch).unwrap(), 1);
        assert_eq!(b.recv_one_now(&mut rx).unwrap(), 1);
        check_frame(rx.iter().next().unwrap().1, 42, seq, seq as usize - 90);
    }
    let s = b.stats();
    assert_eq!((s.recv_calls, s.datagrams_received), (calls + 3, 67));
    assert_eq!(s.recv_errors + s.truncated, 0);
}

#[test]
fn receive_timeout_and_nonblocking_return_would_block() {
    let p = port(PortOptions::default());
    p.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut rx = p.recv_batch(4);
    let err = p.recv(&mut rx).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    p.set_nonblocking(true).unwrap();
    assert!(p.is_nonblocking());
    assert_eq!(
        p.recv(&mut rx).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    assert!(rx.is_empty());
    let s = p.stats();
    assert_eq!((s.recv_calls, s.recv_errors), (0, 0));
}

#[test]
fn flood_into_a_small_receive_buffer_is_dropped_by_the_kernel() {
    let (a, b) = pair(options(false, false), options(false, false));
    let granted = b.set_recv_buffer(4096).unwrap();
    const SENT: u64 = 500;
    let mut batch = SendBatch::new();
    push_tpdu(&mut batch, 60, 0, 1024);
    for _ in 0..SENT {
        a.send_batch(None, &batch).unwrap();
    }
    // The receiver has done nothing so far; the kernel already threw the excess away.
    assert_eq!(b.stats().recv_calls, 0);
    b.set_nonblocking(true).unwrap();
    let mut rx: RecvBatch = b.recv_batch(32);
    let mut received = 0;
    while let Ok(n) = b.recv(&mut rx) {
        received += n as u64;
    }
    assert!(
        received > 0 && received < SENT / 2,
        "{received} fit {granted} octets"
    );
    match b.kernel_drops().unwrap() {
        Some(drops) => {
            assert!(
                drops > 0 && received + drops <= SENT,
                "{received} + {drops}"
            );
            eprintln!("{SENT} sent, {received} received, {drops} dropped by the kernel");
        }
        None => eprintln!("note: no per-socket drop count on this platform"),
    }
}

/// In a network namespace whose loopback has a 1500-octet MTU, 4 KiB GSO segments are
/// refused by the kernel at run time (EMSGSIZE on Linux 6.x, EINVAL on older ones):
/// the port must fall back to single datagrams, which IP fragments. Runs itself under
/// `unshare --net` (root only).
#[test]
fn gso_refused_at_run_time_falls_back_to_single_datagrams() {
    if std::env::var_os("NATM_UDP_NETNS_CHILD").is_some() {
        return small_mtu_child();
    }
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "ip link set lo up mtu 1500 && exec '{}' \
         gso_refused_at_run_time_falls_back_to_single_datagrams --nocapture",
        exe.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["--net", "--", "sh", "-c", &script])
        .env("NATM_UDP_NETNS_CHILD", "1")
        .output();
    match out {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("1 passed"), "child did not run: {text}");
        }
        Ok(out) if String::from_utf8_lossy(&out.stderr).contains("unshare failed") => {
            eprintln!("note: skipped, cannot create a network namespace (not root?)");
        }
        Ok(out) => panic!(
            "child failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("note: skipped, no unshare: {e}"),
    }
}

fn small_mtu_child() {
    // GRO off: the socket keeps the kernel's defaults, so oversized datagrams fragment.
    let (a, b) = pair(options(true, false), options(true, false));
    b.set_recv_buffer(4 << 20).unwrap();
    let gso_before = a.max_gso_segments();
    let mut batch = SendBatch::new();
    for seq in 0..16 {
        push_tpdu(&mut batch, 70, seq, PAYLOAD);
    }
    let (got, _) = thread::scope(|s| {
        let rx = s.spawn(|| recv_frames(&b, 16));
        assert_eq!(a.send_batch(None, &batch).unwrap(), 16);
        rx.join().unwrap()
    });
    for (seq, (_, frame)) in got.iter().enumerate() {
        check_frame(frame, 70, seq as u32, PAYLOAD);
    }
    let s = a.stats();
    if gso_before > 1 {
        assert_eq!((s.gso_fallbacks, s.gso_batches, s.send_calls), (1, 0, 16));
        // Small frames still fit the MTU, and GSO goes on carrying them (unless the
        // kernel refused GSO altogether with EINVAL).
        batch.clear();
        for seq in 0..4 {
            push_tpdu(&mut batch, 70, 100 + seq, 500);
        }
        assert_eq!(a.send_batch(None, &batch).unwrap(), 4);
        for (seq, (_, frame)) in recv_frames(&b, 4).0.iter().enumerate() {
            check_frame(frame, 70, 100 + seq as u32, 500);
        }
        let s = a.stats();
        assert_eq!(s.gso_batches, u64::from(a.max_gso_segments() > 1));
    }
    // With GRO on, quinn-udp's IP_PMTUDISC_PROBE refuses a datagram over the MTU.
    let (c, _d) = pair(options(false, true), options(false, true));
    batch.clear();
    push_tpdu(&mut batch, 71, 0, PAYLOAD);
    let err = c.send_batch(None, &batch).unwrap_err();
    assert!(
        quinn_udp::is_msg_size_err(&err),
        "EMSGSIZE expected, got {err}"
    );
    assert_eq!(c.stats().send_errors, 1);
}

/// Frames gathered from their headers and payloads where they lie (issue 17): 40
/// full TPDUs and a shorter last one arrive intact and in order, in GSO runs when the
/// kernel has GSO, one by one when it has not.
#[test]
fn gathered_frames_arrive_intact_in_gso_runs() {
    for gso in [true, false] {
        let (a, b) = pair(options(gso, true), options(true, true));
        b.set_recv_buffer(8 << 20).unwrap();
        let vc = Repr::data(0, 42).to_bytes();
        let lens: Vec<usize> = (0..41)
            .map(|s| if s == 40 { 1000 } else { PAYLOAD })
            .collect();
        let parts: Vec<(Vec<u8>, Vec<u8>)> = lens
            .iter()
            .enumerate()
            .map(|(seq, &len)| {
                let mut head = vc.to_vec();
                head.extend_from_slice(&tpdu_header(seq as u32).to_bytes());
                (head, (0..len).map(|i| fill(seq as u32, i)).collect())
            })
            .collect();
        let frames: Vec<[&[u8]; 2]> = parts.iter().map(|(h, p)| [&h[..], &p[..]]).collect();
        let got = thread::scope(|s| {
            let rx = s.spawn(|| recv_frames(&b, 41).0);
            assert_eq!(a.send_gathered(None, &frames, FRAME).unwrap(), 41);
            rx.join().unwrap()
        });
        for (seq, (_, frame)) in got.iter().enumerate() {
            check_frame(frame, 42, seq as u32, lens[seq]);
        }
        let s = a.stats();
        assert_eq!(s.datagrams_sent, 41);
        if a.max_gso_segments() > 1 {
            // 65,507 / 4,132 = 15 frames per sendmsg: 15 + 15 + 11.
            assert_eq!((s.gso_batches, s.send_calls), (3, 3), "{s:?}");
        } else {
            assert_eq!(s.send_calls, 41);
        }
        assert_eq!(s.send_errors, 0);
    }
}
