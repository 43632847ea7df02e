//! What the kernel counts for this process over a measured interval: the system calls
//! its threads made and the times they slept and were woken (issue 30: "count
//! wake-ups, system calls and ACKs per MB and per round trip; they are the figures
//! that explain the ratios").
//!
//! System calls are counted by the kernel's `raw_syscalls:sys_enter` tracepoint, one
//! perf counter per thread (`perf_event_open`, through `perf-event2`), opened on every
//! thread the process has when the interval starts; wake-ups are the threads'
//! voluntary context switches (`/proc/self/task/*/status`): each is one sleep in the
//! kernel — a blocking receive, a futex wait, an epoll wait — and the wake-up that
//! ended it. Both count every thread of the process (the application's, the engine's
//! driver, a runtime's workers), so a stack cannot hide work in a thread of its own.
//! A thread started inside the interval is counted for its wake-ups but not its
//! system calls (its counter did not exist yet); the stacks measured start theirs
//! when the connection opens, before any interval.

use std::collections::HashMap;
use std::fs;
use std::io;

use perf_event::events::Tracepoint;
use perf_event::{Builder, Counter};

/// Where tracefs may be mounted.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Counters opened at the start of an interval; [`Interval::close`] reads them.
pub(crate) struct Interval {
    syscalls: Vec<Counter>,
    switches: HashMap<u32, Switches>,
}

/// What the kernel counted over one interval, every thread of the process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// System calls entered.
    pub(crate) syscalls: u64,
    /// Voluntary context switches: sleeps, each ended by a wake-up.
    pub(crate) wakeups: u64,
    /// Involuntary context switches: a thread preempted (by the other CPU's load too).
    pub(crate) preempted: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Switches {
    voluntary: u64,
    involuntary: u64,
}

impl Interval {
    /// Start counting on every thread of this process. Fails with a hint when the
    /// kernel refuses the tracepoint (not root, `perf_event_paranoid`, no tracefs).
    pub(crate) fn open() -> anyhow::Result<Interval> {
        let id = sys_enter_id()?;
        let mut syscalls = Vec::new();
        let mut switches = HashMap::new();
        for tid in threads()? {
            let Ok(s) = thread_switches(tid) else {
                continue; // the thread ended meanwhile
            };
            let counter = Builder::new(Tracepoint::with_id(id))
                .observe_pid(tid as i32)
                .any_cpu()
                .include_kernel()
                .build();
            let mut counter = match counter {
                Ok(c) => c,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                Err(e) => {
                    return Err(anyhow::anyhow!(
                        "cannot count system calls (perf_event_open on \
                         raw_syscalls:sys_enter: {e}); run as root or lower \
                         /proc/sys/kernel/perf_event_paranoid"
                    ))
                }
            };
            counter.enable()?;
            syscalls.push(counter);
            switches.insert(tid, s);
        }
        Ok(Interval { syscalls, switches })
    }

    /// Stop and read: the counts since [`Interval::open`].
    pub(crate) fn close(mut self) -> anyhow::Result<Tally> {
        let mut t = Tally::default();
        for c in &mut self.syscalls {
            c.disable()?;
            t.syscalls += c.read()?;
        }
        for tid in threads()? {
            let Ok(now) = thread_switches(tid) else {
                continue;
            };
            let before = self.switches.get(&tid).copied().unwrap_or_default();
            t.wakeups += now.voluntary.saturating_sub(before.voluntary);
            t.preempted += now.involuntary.saturating_sub(before.involuntary);
        }
        Ok(t)
    }
}

/// The id of the `raw_syscalls:sys_enter` tracepoint. Where tracefs is not mounted
/// (a fresh container or VM mounts it at boot only if systemd does), root mounts it
/// where the kernel documents it, `/sys/kernel/tracing`, and leaves it there as a
/// booted system would; a refused mount ends in the hint below.
fn sys_enter_id() -> anyhow::Result<u64> {
    read_sys_enter_id().or_else(|_| {
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS[0]])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if mounted {
            eprintln!(
                "mounted tracefs at {} for the system call counter",
                TRACEFS[0]
            );
        }
        read_sys_enter_id()
    })
}

fn read_sys_enter_id() -> anyhow::Result<u64> {
    for root in TRACEFS {
        let path = format!("{root}/events/raw_syscalls/sys_enter/id");
        if let Ok(s) = fs::read_to_string(&path) {
            return s
                .trim()
                .parse()
                .map_err(|e| anyhow::anyhow!("{path}: not a tracepoint id ({e})"));
        }
    }
    anyhow::bail!(
        "no raw_syscalls:sys_enter tracepoint under {} (mount tracefs, or run as root)",
        TRACEFS.join(" or ")
    )
}

/// The thread ids of this process.
fn threads() -> io::Result<Vec<u32>> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc/self/task")? {
        if let Some(tid) = e?.file_name().to_str().and_then(|s| s.parse().ok()) {
            out.push(tid);
        }
    }
    Ok(out)
}

/// A thread's context switches so far.
fn thread_switches(tid: u32) -> io::Result<Switches> {
    let status = fs::read_to_string(format!("/proc/self/task/{tid}/status"))?;
    Ok(parse_switches(&status))
}

fn parse_switches(status: &str) -> Switches {
    let mut s = Switches::default();
    for line in status.lines() {
        let field = |name: &str| {
            line.strip_prefix(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let Some(v) = field("voluntary_ctxt_switches:") {
            s.voluntary = v;
        } else if let Some(v) = field("nonvoluntary_ctxt_switches:") {
            s.involuntary = v;
        }
    }
    s
}

/// Segments a TCP socket has sent that carried no data (on a receiver: its ACKs):
/// `segs_out − data_segs_out` of the kernel's `TCP_INFO` for the connection, as `ss -i`
/// reports it (the workspace forbids the `unsafe` a raw `getsockopt` would need).
pub(crate) fn tcp_pure_acks_sent(stream: &std::net::TcpStream) -> Option<u64> {
    let (local, peer) = (stream.local_addr().ok()?, stream.peer_addr().ok()?);
    let out = std::process::Command::new("ss")
        .args(["-Htin", "src", &local.to_string(), "dst", &peer.to_string()])
        .output()
        .ok()?;
    parse_ss_acks(&String::from_utf8_lossy(&out.stdout))
}

fn parse_ss_acks(ss: &str) -> Option<u64> {
    let field = |name: &str| {
        ss.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse::<u64>().ok())
    };
    if ss.trim().is_empty() {
        return None; // no such connection
    }
    // `ss` leaves out a count that is still zero.
    let segs = field("segs_out:").unwrap_or(0);
    Some(segs.saturating_sub(field("data_segs_out:").unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_switches_are_read_from_a_status_file() {
        let s = parse_switches(
            "Name:\tx\nvoluntary_ctxt_switches:\t42\nnonvoluntary_ctxt_switches:\t7\n",
        );
        assert_eq!((s.voluntary, s.involuntary), (42, 7));
    }

    #[test]
    fn a_thread_that_sleeps_is_counted_as_woken() {
        // Needs the tracepoint (root); where the kernel refuses it the error says why.
        let iv = match Interval::open() {
            Ok(iv) => iv,
            Err(e) => {
                assert!(e.to_string().contains("perf_event"), "{e}");
                return;
            }
        };
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let t = iv.close().unwrap();
        assert!(t.wakeups >= 5, "{t:?}");
        assert!(t.syscalls >= 5, "{t:?}");
    }

    #[test]
    fn acks_are_the_segments_without_data() {
        let line = "ESTAB 0 0 127.0.0.1:1 127.0.0.1:2 cubic segs_out:120 segs_in:900 \
                    data_segs_out:20 data_segs_in:899";
        assert_eq!(parse_ss_acks(line), Some(100));
        assert_eq!(parse_ss_acks("ESTAB segs_out:7 segs_in:9"), Some(7));
        assert_eq!(
            parse_ss_acks("ESTAB 0 0 127.0.0.1:1 127.0.0.1:2 segs_in:2"),
            Some(0)
        );
        assert_eq!(parse_ss_acks(""), None);
    }

    #[test]
    fn a_tcp_receiver_counts_the_acks_it_sent() {
        use std::io::{Read as _, Write as _};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let before = tcp_pure_acks_sent(&s).unwrap();
        let mut buf = vec![0_u8; 1 << 20];
        let w = std::thread::spawn(move || c.write_all(&vec![1_u8; 1 << 20]).unwrap());
        s.read_exact(&mut buf).unwrap();
        w.join().unwrap();
        let after = tcp_pure_acks_sent(&s).unwrap();
        assert!(after > before, "{before} → {after}");
    }
}
