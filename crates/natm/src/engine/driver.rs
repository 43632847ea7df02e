//! The driver thread, the host's one reactor: sleeps in epoll until a socket is
//! readable (data, listeners, the sigd session's IPC stream), a timer is due, or work
//! is handed to it, then runs timers and the task scheduler. It never polls the data
//! path on a period (seed 000 §7); its one periodic job is the report of established
//! calls' counters to sigd, once a second while the host holds such calls
//! ([`Engine::run_reports`]).

use std::cmp::Reverse;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use std::os::fd::{AsRawFd, OwnedFd};

use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};

use super::{Engine, TIMER_TOKEN, WAKER_TOKEN};

/// Most TPDUs the scheduler sends per wake-up before it looks at sockets and timers
/// again.
const ROUNDS_PER_WAKE: usize = 64;

/// Events one `epoll_wait` returns at most.
const EVENTS: usize = 256;

/// Most `epoll_wait` calls per wake-up before the timers run: up to 4,096 ready
/// sockets are read first.
const MAX_EVENT_ROUNDS: usize = 16;

/// epoll's own timeout has millisecond granularity; a leaky bucket pacing a 20 Mbit/s
/// VC needs a TPDU every 1.6 ms, so timers go through a timerfd (nanoseconds). Made
/// by `Engine::start` before it returns, not by the driver thread as it begins: an
/// engine's descriptors are all open once it is (a count taken after a host opened
/// found one more later, when the driver thread had started late under load).
pub(super) fn timerfd(poll: &mio::Poll) -> Option<OwnedFd> {
    let fd = rustix::time::timerfd_create(
        TimerfdClockId::Monotonic,
        TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
    )
    .ok()?;
    poll.registry()
        .register(
            &mut mio::unix::SourceFd(&fd.as_raw_fd()),
            mio::Token(TIMER_TOKEN),
            mio::Interest::READABLE,
        )
        .ok()?;
    Some(fd)
}

/// Sets the driver's timer to `at` (ns of engine time), from the driver or from any
/// thread whose deadline comes before the driver's wake-up ([`Engine::wake_before`]):
/// that thread brings the timer forward itself, one `timerfd_settime`, instead of
/// writing the driver's eventfd for the driver to do it (a wake-up of another CPU on
/// the path of the datagram that armed it). Settings race — the driver storing its
/// own wake-up time, threads lowering it — so whoever sets the timer reads
/// `sleep_until` again after and sets it once more while that is earlier than what it
/// set: the last to finish leaves the earliest.
pub(super) fn set_timer_at(eng: &Engine, fd: &OwnedFd, mut at: u64) {
    loop {
        let now = eng.clock.now().as_nanos();
        set_timer(fd, Duration::from_nanos(at.saturating_sub(now)));
        let s = eng.sleep_until.load(Ordering::SeqCst);
        if s == 0 || s >= at {
            return;
        }
        at = s;
    }
}

fn set_timer(fd: &OwnedFd, after: Duration) {
    // A zero it_value disarms; the smallest real delay is one nanosecond.
    let ns = after.as_nanos().max(1);
    let spec = Itimerspec {
        it_interval: Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: Timespec {
            tv_sec: (ns / 1_000_000_000) as i64,
            tv_nsec: (ns % 1_000_000_000) as i64,
        },
    };
    let _ = rustix::time::timerfd_settime(fd, TimerfdTimerFlags::empty(), &spec);
}

pub(super) fn run(weak: Weak<Engine>, mut poll: mio::Poll) {
    let mut events = mio::Events::with_capacity(EVENTS);
    let mut buf = super::UdpLink::recv_batch();
    let mut drain = [0u8; 8];
    loop {
        let Some(eng) = weak.upgrade() else { return };
        if eng.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let deadline = next_deadline(&eng);
        let now = eng.clock.now().as_nanos();
        let mut timeout = deadline.map(|t| Duration::from_nanos(t.saturating_sub(now)));
        if let Some(d) = eng.host_ports.park_due() {
            timeout = Some(timeout.map_or(d, |t| t.min(d)));
        }
        let until = timeout.map_or(u64::MAX, |t| now.saturating_add(t.as_nanos() as u64));
        // SeqCst: a host port's reader that handed the driver work stores its flag,
        // then reads this; the driver stores this, then reads the flags
        // (`HostPorts::due`): one of the two sees the other.
        eng.sleep_until.store(until.max(1), Ordering::SeqCst);
        // A deadline armed between the look above and that store found the driver
        // awake and left it to the driver: look again.
        let armed_since = next_deadline(&eng).is_some_and(|d| d < deadline.unwrap_or(u64::MAX));
        if eng.host_ports.due() || armed_since {
            timeout = Some(Duration::ZERO);
        }
        if let (Some(fd), Some(t)) = (&eng.timer, timeout) {
            if !t.is_zero() {
                set_timer_at(&eng, fd, until);
                timeout = None;
            }
        }
        // Do not keep the engine alive while asleep (connections dropped while still
        // finishing keep it: `Engine::linger`).
        drop(eng);
        let r = poll.poll(&mut events, timeout);
        let Some(eng) = weak.upgrade() else { return };
        eng.sleep_until.store(0, Ordering::Release);
        if r.is_err() {
            continue;
        }
        // Every socket found readable is read before any timer runs: a timer that
        // ran first would take a TPDU whose ACK waits unread for lost (with 1,000
        // connections a descheduled driver woke to more ready sockets than one
        // `epoll_wait` returns, and the timers of those beyond it resent what had
        // arrived). The events are taken again without waiting while a call fills
        // the whole array, a bounded number of times.
        for round in 0..MAX_EVENT_ROUNDS {
            for ev in events.iter() {
                let token = ev.token().0;
                if token == WAKER_TOKEN {
                    continue;
                }
                if token == TIMER_TOKEN {
                    if let Some(fd) = &eng.timer {
                        let _ = rustix::io::read(fd, &mut drain);
                    }
                    continue;
                }
                on_readable(&eng, token, &mut buf);
            }
            let full = events.iter().count() >= EVENTS;
            if !full
                || round + 1 == MAX_EVENT_ROUNDS
                || poll.poll(&mut events, Some(Duration::ZERO)).is_err()
            {
                break;
            }
        }
        eng.host_ports.unpark_due();
        for hp in eng.host_ports.all() {
            hp.run_ready(&eng, &mut buf);
        }
        run_timers(&eng);
        run_tasks(&eng);
        for hp in eng.host_ports.all() {
            hp.read_on(&eng, &mut buf);
        }
        eng.run_reports(eng.clock.now().as_nanos());
        eng.run_sweep(eng.clock.now().as_nanos(), &mut buf);
    }
}

fn on_readable(eng: &Arc<Engine>, token: usize, buf: &mut crate::adaptor::RecvBatch) {
    if let Some(hp) = eng.host_ports.by_token(token) {
        hp.pump(eng, buf);
        return;
    }
    dispatch(eng, token, buf);
}

/// `token`'s socket, or its share of a host port, has frames: drain them.
pub(super) fn dispatch(eng: &Arc<Engine>, token: usize, buf: &mut crate::adaptor::RecvBatch) {
    if let Some(c) = eng.conn(token) {
        c.read_now(eng, buf);
        // A dropped connection whose last frame (a CLOSE-ACK, an ABORT) just finished
        // it: forget it now. No timer may be left to do it, and its socket would stay
        // open until the process ends (found by `natm-lab perf calls`: thousands of
        // sockets per second of calls).
        if c.collectable() {
            eng.remove_conn(c.token);
        }
        return;
    }
    let listener = eng.listeners.lock().get(&token).cloned();
    if let Some(l) = listener {
        l.drain(eng, buf);
        return;
    }
    // The host's sigd session (nobody else is reading it, or it would not be in this
    // epoll set). Called with no lock held: a `Released` it reads may abort a
    // connection, taking that connection's ends.
    if let Some(s) = eng.source(token) {
        s.on_readable();
    }
}

/// The earliest deadline (ns of engine time), 0 while the scheduler has work.
fn next_deadline(eng: &Engine) -> Option<u64> {
    if !eng.sched.lock().is_idle() {
        return Some(0);
    }
    let timer = eng.timers.lock().peek().map(|Reverse((t, _))| *t);
    // The periodic reports (sigd's view of each call's counters) and the sweep of
    // parked sockets are two more.
    timer
        .into_iter()
        .chain(eng.report_due())
        .chain(eng.parked.due())
        .min()
}

/// Whether the earliest timer is due now.
fn timer_due(eng: &Engine) -> bool {
    let top = eng.timers.lock().peek().map(|Reverse((t, _))| *t);
    top.is_some_and(|t| t <= eng.clock.now().as_nanos())
}

fn run_timers(eng: &Arc<Engine>) {
    let now = eng.clock.now();
    loop {
        let (at, token) = {
            let mut heap = eng.timers.lock();
            match heap.peek() {
                Some(Reverse((t, _))) if *t <= now.as_nanos() => {}
                _ => return,
            }
            let Some(Reverse(entry)) = heap.pop() else {
                return;
            };
            entry
        };
        let Some(c) = eng.conn(token) else { continue };
        c.disarm(at);
        if c.deadline() <= now.as_nanos() {
            // Which timers are due is decided against the time the run started (so a
            // timer re-armed just ahead cannot keep the loop going), but each runs at
            // the time it actually runs: with 10,000 VCs a run of timers lasts long
            // enough that the start time would stamp the retransmissions it sends,
            // and start their timers, early by the run's length so far.
            c.on_timer(eng, eng.clock.now());
            // `on_timer` re-arms the ends it ran. The other end's deadline, set by
            // another thread after this entry was popped and before `disarm`, found
            // this entry's time armed and added none of its own: arm it here, or it
            // is lost (a bare VC's end after a release would never come).
            let d = c.deadline();
            if d != u64::MAX {
                eng.arm(&c, d);
            }
        } else if c.deadline() != u64::MAX {
            // The deadline moved later since this entry was armed.
            eng.arm(&c, c.deadline());
        }
        if c.collectable() {
            eng.remove_conn(c.token);
        }
    }
}

fn run_tasks(eng: &Arc<Engine>) {
    for _ in 0..ROUNDS_PER_WAKE {
        // Timers preempt tasks between rounds: a guaranteed VC's leaky bucket is
        // paced by its timer, and a bucket served late by more than its depth loses
        // the credit for good, so a long run of best-effort and reliable tasks must
        // not hold it back (measured with `natm-lab perf isolation`).
        if timer_due(eng) {
            run_timers(eng);
        }
        let mut sched = eng.sched.lock();
        if sched.is_idle() {
            eng.mirror(&sched);
            return;
        }
        sched.run(|token, max| eng.conn(token).map_or(0, |c| c.task(eng, max)));
        eng.mirror(&sched);
    }
}
