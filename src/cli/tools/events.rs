//! `--events`: a connection's status events (seed 003's flags as they change) and a
//! multipoint root's leaf events, one line each on stderr.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use natm::ulib::{ConnEvent, LeafEvent};

/// One status event as a line's text.
pub(crate) fn describe(e: &ConnEvent) -> String {
    let mbps = |r: &u64| *r as f64 / 1e6;
    match e {
        ConnEvent::QosPending { rate } => {
            format!(
                "QoS change to {:.1} Mbit/s asked for; waiting for the peer",
                mbps(rate)
            )
        }
        ConnEvent::QosChanged { rate } => {
            format!("QoS changed: sending at {:.1} Mbit/s", mbps(rate))
        }
        ConnEvent::QosRefused { rate } => format!(
            "QoS change to {:.1} Mbit/s refused by the peer; the rate stays",
            mbps(rate)
        ),
        ConnEvent::PeerQosChanged { rate } => {
            format!(
                "the peer changed its QoS: now sending at {:.1} Mbit/s",
                mbps(rate)
            )
        }
        ConnEvent::PeerQosRefused { rate } => format!(
            "the peer asked for {:.1} Mbit/s, outside the agreed bounds: refused",
            mbps(rate)
        ),
        ConnEvent::WindowFull => "the send window is full".into(),
        ConnEvent::OverRate => "sending faster than the agreed rate".into(),
        ConnEvent::PeerClosed => "the peer closed; everything it sent was delivered".into(),
        ConnEvent::Closed => "closed: the peer has everything".into(),
        ConnEvent::Aborted(r) => format!("aborted ({r:?})"),
        // RFC 8899's base is where a search starts, and where a black hole sends it
        // back: assumed, not confirmed.
        ConnEvent::PathMtu { plpmtu, searching } => format!(
            "path MTU: {plpmtu} octets {}{}",
            if *plpmtu == natm::transport::plpmtud::BASE_PLPMTU {
                "(the base every path carries)"
            } else {
                "confirmed by probing"
            },
            if *searching {
                "; searching for more"
            } else {
                "; search complete"
            }
        ),
        ConnEvent::Released { cause, detail } => {
            format!("released by sigd (cause {cause}): {detail}")
        }
        other => format!("{other:?}"),
    }
}

/// One leaf event as a line's text.
pub(crate) fn describe_leaf(e: &LeafEvent, names: &dyn Fn(u16) -> String) -> String {
    match e {
        LeafEvent::Added(l) => format!("{l} added ({})", names(l.0)),
        LeafEvent::Dropped(l) => format!("{l} dropped ({})", names(l.0)),
        LeafEvent::Left {
            leaf,
            cause,
            detail,
        } => {
            let d = if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            };
            format!("{leaf} left ({}; cause {cause}{d})", names(leaf.0))
        }
    }
}

/// Run `f` while a thread prints every status event `next` yields as `natm WHO:
/// event: …` (when `on`); the events still queued when `f` returns are printed too.
pub(crate) fn printing<R>(
    on: bool,
    who: &str,
    next: impl Fn(Duration) -> Option<ConnEvent> + Sync,
    f: impl FnOnce() -> R,
) -> R {
    if !on {
        return f();
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                if let Some(e) = next(Duration::from_millis(100)) {
                    eprintln!("natm {who}: event: {}", describe(&e));
                }
            }
            while let Some(e) = next(Duration::ZERO) {
                eprintln!("natm {who}: event: {}", describe(&e));
            }
        });
        let r = f();
        stop.store(true, Ordering::Release);
        r
    })
}

/// A thread printing status events until stopped (for a connection whose halves
/// live in other threads: `natm call`'s).
pub(crate) struct Printer {
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Printer {
    /// Start printing what `next` yields (nothing at all unless `on`).
    pub(crate) fn start(
        on: bool,
        who: &'static str,
        next: impl Fn(Duration) -> Option<ConnEvent> + Send + 'static,
    ) -> Printer {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = on.then(|| {
            std::thread::spawn(move || {
                while !s.load(Ordering::Acquire) {
                    if let Some(e) = next(Duration::from_millis(100)) {
                        eprintln!("natm {who}: event: {}", describe(&e));
                    }
                }
                while let Some(e) = next(Duration::ZERO) {
                    eprintln!("natm {who}: event: {}", describe(&e));
                }
            })
        });
        Printer { stop, thread }
    }

    /// Print what is still queued, then stop.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_mtu_event_tells_the_base_from_a_size_confirmed() {
        let base = ConnEvent::PathMtu {
            plpmtu: 1_200,
            searching: true,
        };
        assert_eq!(
            describe(&base),
            "path MTU: 1200 octets (the base every path carries); searching for more"
        );
        let found = ConnEvent::PathMtu {
            plpmtu: 1_285,
            searching: false,
        };
        assert_eq!(
            describe(&found),
            "path MTU: 1285 octets confirmed by probing; search complete"
        );
    }
}
