//! A delay line between two veth ends (shared/NETLAB.md, "Delay (no netem)"): the
//! program `natm-lab perf delay-line` (hidden) runs in the middle namespace of
//! `natm-lab perf loss --rtt`, reads every Ethernet frame arriving on one end with an
//! AF_PACKET socket and writes it to the other end a fixed one-way delay after the
//! kernel received it (its receive stamp, so frames the reader reads in one go keep
//! the spacing they arrived with: packet-pair measures that spacing), in order, both
//! ways. The kernel has no netem, so this is how a path gets its RTT.
//!
//! A packet socket bound to an interface also sees the frames written to it; a frame
//! whose source MAC address was seen arriving on the other end is such a copy and is
//! not forwarded again (a learning bridge's rule). What waits in the line is bounded
//! ([`MAX_QUEUED`] frames per direction; beyond, frames are dropped and counted), and
//! the program ends after `--time` if no one has stopped it first.

use std::collections::HashSet;
use std::io::{self, BufRead as _, Write as _};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use std::os::fd::{AsRawFd as _, IntoRawFd as _};

use anyhow::Context as _;
use pnet_datalink::{Channel, Config, DataLinkSender, NetworkInterface};
use socket2::{Domain, Protocol, Socket, Type};

use super::netlab::{reap, spawn_in};

/// Frames waiting per direction: 100 Mbit/s × 50 ms of 1,514-octet frames is ~410,
/// so this holds far more than any delay the experiment asks for, and ~12 MiB at most.
pub(crate) const MAX_QUEUED: usize = 8192;

/// Most source addresses learned per end (a hostile frame source cannot grow the set).
const MAX_LEARNED: usize = 1024;

/// How often blocked reads and waits look at the clock.
const TICK: Duration = Duration::from_millis(100);

/// `natm-lab perf delay-line` (hidden): forward frames between two interfaces with a delay.
#[derive(Debug, clap::Args)]
pub(crate) struct DelayLineArgs {
    /// The two interfaces, comma-separated (in this namespace, without IP addresses).
    #[arg(long, value_delimiter = ',', required = true)]
    between: Vec<String>,
    /// One-way delay added to every frame, each way (the RTT grows by twice this).
    #[arg(long, value_parser = natm_cli::cli::units::duration)]
    delay: Duration,
    /// End after this long.
    #[arg(long, default_value = "3600s", value_parser = natm_cli::cli::units::duration)]
    time: Duration,
}

/// Source MAC addresses seen arriving on one end.
type Learned = Arc<Mutex<HashSet<[u8; 6]>>>;

fn source(frame: &[u8]) -> Option<[u8; 6]> {
    frame.get(6..12)?.try_into().ok()
}

fn interface(name: &str) -> anyhow::Result<NetworkInterface> {
    pnet_datalink::interfaces()
        .into_iter()
        .find(|i| i.name == name)
        .with_context(|| format!("no interface {name} in this namespace"))
}

/// `ETH_P_ALL` in network order, as `socket(2)` takes it: every protocol.
const ETH_P_ALL_BE: i32 = 0x0003_u16.to_be() as i32;

/// The packet socket of one end: pnet's channel binds it to the interface and writes
/// with it; the reader receives on a second descriptor of the same socket with
/// `recvmsg`, which hands over the kernel's receive stamp of each frame
/// (`SO_TIMESTAMPNS`) that pnet's reader drops.
fn open(i: &NetworkInterface) -> anyhow::Result<(Box<dyn DataLinkSender>, Socket)> {
    let sock = Socket::new(
        Domain::PACKET,
        Type::RAW,
        Some(Protocol::from(ETH_P_ALL_BE)),
    )
    .with_context(|| format!("AF_PACKET socket on {}", i.name))?;
    nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::ReceiveTimestampns, &true)
        .with_context(|| format!("receive stamps on {}", i.name))?;
    let _ = sock.set_recv_buffer_size(4 << 20);
    let mine = sock.try_clone()?;
    let cfg = Config {
        read_timeout: Some(TICK),
        read_buffer_size: 65_536,
        write_buffer_size: 65_536,
        promiscuous: true,
        socket_fd: Some(sock.into_raw_fd()),
        ..Config::default()
    };
    match pnet_datalink::channel(i, cfg)
        .with_context(|| format!("AF_PACKET socket on {}", i.name))?
    {
        // pnet's receiver shares the socket with its sender and is not used.
        Channel::Ethernet(tx, _rx) => Ok((tx, mine)),
        _ => anyhow::bail!("{}: not an Ethernet channel", i.name),
    }
}

/// The next frame on `sock` and when the kernel received it (on this process's
/// monotonic clock), waiting up to [`TICK`]; `TimedOut` if none came.
fn next_frame(sock: &Socket, buf: &mut [u8]) -> io::Result<(usize, Instant)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut fds = [rustix::event::PollFd::new(
        sock,
        rustix::event::PollFlags::IN,
    )];
    let tick = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: TICK.as_nanos() as _,
    };
    if rustix::event::poll(&mut fds, Some(&tick))? == 0 {
        return Err(io::ErrorKind::TimedOut.into());
    }
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    let now = Instant::now();
    let mut at = now;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmTimestampns(ts) = c {
            // The stamp is the realtime clock: how long ago, on the monotonic one.
            let stamp = Duration::new(ts.tv_sec() as u64, ts.tv_nsec() as u32);
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            if let Some(ago) = wall.checked_sub(stamp).filter(|a| *a < TICK * 10) {
                at = now.checked_sub(ago).unwrap_or(now);
            }
        }
    }
    Ok((msg.bytes, at))
}

/// Read frames arriving on one end into the line until `until`, each due `delay` after
/// the kernel received it: frames read together keep the spacing they arrived with.
fn reader(
    rx: Socket,
    line: SyncSender<(Instant, Vec<u8>)>,
    here: Learned,
    there: Learned,
    delay: Duration,
    until: Instant,
) -> u64 {
    let mut dropped = 0u64;
    let mut buf = vec![0u8; 65_536];
    while Instant::now() < until {
        let (len, arrived) = match next_frame(&rx, &mut buf) {
            Ok(f) => f,
            // A trunk whose end was taken down (`perf mesh` cuts one) reports it once
            // and may come back: the line waits, as a wire would.
            Err(e)
                if e.kind() == io::ErrorKind::TimedOut
                    || e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted
                    || e.kind() == io::ErrorKind::NetworkDown =>
            {
                continue
            }
            Err(_) => break,
        };
        let frame = &buf[..len];
        let Some(src) = source(frame) else { continue };
        if there.lock().is_ok_and(|t| t.contains(&src)) {
            // Our own copy of a frame from the other end.
            continue;
        }
        if let Ok(mut h) = here.lock() {
            if h.len() < MAX_LEARNED {
                h.insert(src);
            }
        }
        match line.try_send((arrived + delay, frame.to_vec())) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => dropped += 1,
            Err(TrySendError::Disconnected(_)) => break,
        }
    }
    dropped
}

/// Write each frame of the line to the other end once its time has come.
///
/// The thread's timer slack is 1 ns, not the default 50 µs: a sleep that overshoots
/// by more than the spacing of two frames releases them together, and a line that
/// bunches frames is not a delay but a different path (packet-pair times the spacing
/// a bottleneck gave two frames; 1,500 octets at 100 Mbit/s are 120 µs apart).
fn writer(mut tx: Box<dyn DataLinkSender>, line: Receiver<(Instant, Vec<u8>)>, until: Instant) {
    let _ = nix::sys::prctl::set_timerslack(1);
    loop {
        let (due, frame) = match line.recv_timeout(TICK) {
            Ok(x) => x,
            Err(RecvTimeoutError::Timeout) if Instant::now() < until => continue,
            Err(_) => return,
        };
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
        // A frame the kernel refuses (e.g. the peer end went down) is lost, as on a wire.
        let _ = tx.send_to(&frame, None);
    }
}

/// Start `natm-lab perf delay-line` between `dla` and `dlb` in namespace `ns` with
/// this one-way delay; returns once it says it forwards (within ten seconds).
pub(crate) fn start_in(ns: &str, one_way: Duration) -> anyhow::Result<Child> {
    let args = [
        "perf".into(),
        "delay-line".into(),
        "--between".into(),
        "dla,dlb".into(),
        "--delay".into(),
        format!("{}us", one_way.as_micros()),
        "--time".into(),
        "10800s".into(),
    ];
    let mut child = spawn_in(ns, &args, Stdio::null())?;
    let out = child
        .stdout
        .take()
        .context("the delay line has no stdout")?;
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut first = String::new();
        let _ = io::BufReader::new(out).read_line(&mut first);
        let _ = tx.send(first);
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(l) if l.trim() == "ready" => Ok(child),
        _ => Err(anyhow::anyhow!(
            "the delay line did not start: {}",
            reap(child)
        )),
    }
}

/// Run the delay line: say `ready` on stdout once both sockets are open, forward until
/// `--time`; the frames dropped because the line was full go to stderr at the end.
pub(crate) fn run(a: &DelayLineArgs) -> natm_cli::cli::CliResult {
    let [x, y] = a.between.as_slice() else {
        anyhow::bail!("--between takes two interfaces");
    };
    let (ix, iy) = (interface(x)?, interface(y)?);
    let ((tx_x, rx_x), (tx_y, rx_y)) = (open(&ix)?, open(&iy)?);
    let until = Instant::now() + a.time;
    let (lx, ly): (Learned, Learned) = Default::default();
    // x → y and y → x.
    let (to_y, from_x) = mpsc::sync_channel(MAX_QUEUED);
    let (to_x, from_y) = mpsc::sync_channel(MAX_QUEUED);
    let d = a.delay;
    let readers = [
        {
            let (h, t) = (lx.clone(), ly.clone());
            thread::spawn(move || reader(rx_x, to_y, h, t, d, until))
        },
        {
            let (h, t) = (ly.clone(), lx.clone());
            thread::spawn(move || reader(rx_y, to_x, h, t, d, until))
        },
    ];
    let writers = [
        thread::spawn(move || writer(tx_y, from_x, until)),
        thread::spawn(move || writer(tx_x, from_y, until)),
    ];
    println!("ready");
    io::stdout().flush()?;
    let dropped: u64 = readers.into_iter().map(|r| r.join().unwrap_or(0)).sum();
    for w in writers {
        let _ = w.join();
    }
    if dropped > 0 {
        eprintln!("delay line: {dropped} frame(s) dropped, the line was full");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frames_source_is_octets_6_to_12_and_a_runt_has_none() {
        let mut f = vec![0u8; 60];
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        assert_eq!(source(&f), Some([2, 0, 0, 0, 0, 9]));
        assert_eq!(source(&f[..11]), None);
    }
}
