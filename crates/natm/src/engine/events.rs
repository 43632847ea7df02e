//! A connection's status events (issue 19): seed 003's status flags — "QoS changed",
//! "closed", "aborted", "over rate", ... — as a queue of changes the application
//! takes one at a time, rather than only flags it reads.
//!
//! The engine already drains each half's events after every input (`Conn::after`);
//! those an application acts on (everything but readable/writable, which the
//! receive and send calls and the C descriptors cover) go onto the connection's
//! queue. The application's own acts that a peer never answers — a QoS change
//! started, a non-blocking send held by the window or the rate — are queued by the
//! calls that make them. The queue is bounded ([`EVENT_QUEUE`] events): when the
//! application does not take them, the oldest are dropped and counted, so a
//! connection nobody watches holds a few hundred bytes at most, whatever the peer
//! sends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::sync::{Condvar, Level, OrderedMutex as Mutex};
use crate::transport::{AbortReason, Event};

/// How many events a connection holds for its application before the oldest go.
pub const EVENT_QUEUE: usize = 64;

/// A change of a connection's status ([`crate::ulib::Connection::next_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnEvent {
    /// This end asked the peer for a new sending rate; the old rate holds until it
    /// answers.
    QosPending {
        /// The rate asked for, payload bit/s.
        rate: u64,
    },
    /// The peer accepted this end's QoS change: the new sending rate is in force.
    QosChanged {
        /// The sending rate now in force, payload bit/s.
        rate: u64,
    },
    /// The peer refused this end's QoS change, or never answered it: the rate stayed.
    QosRefused {
        /// The rate that was asked for, payload bit/s.
        rate: u64,
    },
    /// The peer changed the rate of the receiving VC (seed 003: the receiver is told
    /// as the sender asks).
    PeerQosChanged {
        /// The peer's sending rate now, payload bit/s.
        rate: u64,
    },
    /// A QoS change the peer asked for was refused on this side (outside the agreed
    /// bounds).
    PeerQosRefused {
        /// The rate the peer asked for, payload bit/s.
        rate: u64,
    },
    /// A non-blocking send found the window full (once until a send succeeds).
    WindowFull,
    /// A non-blocking send found the application sending faster than its agreed rate
    /// (once until a send succeeds).
    OverRate,
    /// The peer closed: everything it sent has been delivered.
    PeerClosed,
    /// This end's close completed: the peer has everything.
    Closed,
    /// The connection was aborted (once, whichever VC learnt it first).
    Aborted(AbortReason),
    /// The sending VC's path MTU search (RFC 8899, issue 30) confirmed a size, or
    /// started or ended a search: the VC's TPDUs are now cut to fit `plpmtu`.
    PathMtu {
        /// The largest datagram payload confirmed to cross the path, octets.
        plpmtu: usize,
        /// Whether the search is still probing for a larger size (`false`: it is
        /// complete until the path is probed again).
        searching: bool,
    },
    /// sigd ended the call (the peer released it, an administrator did, or sigd
    /// stopped).
    Released {
        /// UNI cause value (16: normal clearing).
        cause: u8,
        /// sigd's sentence.
        detail: String,
    },
}

impl ConnEvent {
    /// The event an application sees for a half's event; `None` for those it does
    /// not (readable, writable, connected).
    pub(crate) fn of(tx: bool, ev: Event) -> Option<ConnEvent> {
        Some(match (tx, ev) {
            (true, Event::QosChanged { rate }) => ConnEvent::QosChanged { rate },
            (true, Event::QosRefused { rate }) => ConnEvent::QosRefused { rate },
            (false, Event::QosChanged { rate }) => ConnEvent::PeerQosChanged { rate },
            (false, Event::QosRefused { rate }) => ConnEvent::PeerQosRefused { rate },
            (true, Event::Closed) => ConnEvent::Closed,
            (false, Event::PeerClosed) => ConnEvent::PeerClosed,
            (_, Event::Aborted(r)) => ConnEvent::Aborted(r),
            _ => return None,
        })
    }
}

#[derive(Debug, Default)]
struct Queue {
    events: VecDeque<ConnEvent>,
    /// Events dropped because the queue was full.
    dropped: u64,
    /// An abort was queued already (both halves report it).
    aborted: bool,
    /// Woken when an event is queued (a C descriptor, an async task).
    waker: Option<Waker>,
}

/// A connection's queue of status events.
#[derive(Debug)]
pub(crate) struct EventQueue {
    q: Mutex<Queue>,
    cv: Condvar,
    /// A non-blocking send was held and reported; cleared by the next send that goes.
    held: AtomicBool,
}

impl EventQueue {
    pub(crate) fn new() -> EventQueue {
        EventQueue {
            q: Mutex::new(Level::Leaf, Queue::default()),
            cv: Condvar::new(),
            held: AtomicBool::new(false),
        }
    }

    /// Queue `ev`, dropping the oldest if full, and wake whoever waits.
    pub(crate) fn push(&self, ev: ConnEvent) {
        let mut q = self.q.lock();
        if matches!(ev, ConnEvent::Aborted(_)) {
            if q.aborted {
                return;
            }
            q.aborted = true;
        }
        if q.events.len() == EVENT_QUEUE {
            q.events.pop_front();
            q.dropped += 1;
        }
        q.events.push_back(ev);
        self.cv.notify_all();
        if let Some(w) = q.waker.take() {
            w.wake();
        }
    }

    /// A non-blocking send was held by the window or the rate: queue it once per run
    /// of held sends.
    pub(crate) fn send_held(&self, ev: ConnEvent) {
        if !self.held.swap(true, Ordering::Relaxed) {
            self.push(ev);
        }
    }

    /// A send went: the next held one is reported again.
    pub(crate) fn send_went(&self) {
        if self.held.load(Ordering::Relaxed) {
            self.held.store(false, Ordering::Relaxed);
        }
    }

    /// The oldest event, waiting up to `timeout` (`None`: for ever) for one.
    pub(crate) fn next(&self, timeout: Option<Duration>) -> Option<ConnEvent> {
        let until = timeout.map(|t| Instant::now() + t);
        let mut q = self.q.lock();
        loop {
            if let Some(ev) = q.events.pop_front() {
                return Some(ev);
            }
            let wait = match until {
                Some(u) => {
                    let left = u.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    left
                }
                None => Duration::from_secs(3600),
            };
            self.cv.wait_for(&mut q, wait);
        }
    }

    /// The oldest event if there is one; else `waker` is woken when one is queued
    /// (checked and registered under the same lock).
    pub(crate) fn poll(&self, waker: &Waker) -> Option<ConnEvent> {
        let mut q = self.q.lock();
        let ev = q.events.pop_front();
        if ev.is_none() {
            q.waker = Some(waker.clone());
        }
        ev
    }

    /// Events dropped because the application did not take them in time.
    pub(crate) fn dropped(&self) -> u64 {
        self.q.lock().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_and_counts_what_it_drops() {
        let q = EventQueue::new();
        for rate in 0..(EVENT_QUEUE as u64 + 10) {
            q.push(ConnEvent::QosChanged { rate });
        }
        assert_eq!(q.dropped(), 10);
        // The oldest went: the first left is the 11th.
        assert_eq!(
            q.next(Some(Duration::ZERO)),
            Some(ConnEvent::QosChanged { rate: 10 })
        );
    }

    #[test]
    fn an_abort_is_reported_once_and_held_sends_once_per_run() {
        let q = EventQueue::new();
        q.push(ConnEvent::Aborted(AbortReason::Peer));
        q.push(ConnEvent::Aborted(AbortReason::Timeout));
        q.send_held(ConnEvent::OverRate);
        q.send_held(ConnEvent::OverRate);
        q.send_went();
        q.send_held(ConnEvent::WindowFull);
        let mut got = Vec::new();
        while let Some(e) = q.next(Some(Duration::ZERO)) {
            got.push(e);
        }
        assert_eq!(
            got,
            [
                ConnEvent::Aborted(AbortReason::Peer),
                ConnEvent::OverRate,
                ConnEvent::WindowFull
            ]
        );
    }

    #[test]
    fn a_waiter_is_woken_by_the_next_event() {
        let q = std::sync::Arc::new(EventQueue::new());
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.next(Some(Duration::from_secs(30))));
        std::thread::sleep(Duration::from_millis(20));
        q.push(ConnEvent::PeerClosed);
        assert_eq!(t.join().unwrap(), Some(ConnEvent::PeerClosed));
        assert_eq!(q.next(Some(Duration::from_millis(1))), None);
    }

    #[test]
    fn a_registered_waker_fires_once_an_event_is_queued() {
        struct Flag(AtomicBool);
        impl std::task::Wake for Flag {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let f = std::sync::Arc::new(Flag(AtomicBool::new(false)));
        let w = Waker::from(f.clone());
        let q = EventQueue::new();
        assert_eq!(q.poll(&w), None);
        assert!(!f.0.load(Ordering::SeqCst));
        q.push(ConnEvent::Closed);
        assert!(f.0.load(Ordering::SeqCst));
        assert_eq!(q.poll(&w), Some(ConnEvent::Closed));
    }
}
