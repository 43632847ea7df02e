//! Traffic on one VC for the experiments and demos that run real networks: a sender
//! that offers messages (paced or as fast as flow control lets it) and a receiver
//! that counts what is delivered. Both end when told to, and never block long.

use natm::ulib::Wait;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use natm::ulib::{Connection, Error};

/// A sender whose send buffer is full waits this long before trying again.
const BACKOFF: Duration = Duration::from_micros(200);

/// Sends `size`-byte messages until `stop`, at most at `offered` bit/s if given;
/// never blocks longer than [`BACKOFF`].
pub fn send_loop(c: &Connection, size: usize, offered: Option<u64>, stop: &AtomicBool) {
    let msg = vec![0xA5u8; size];
    let start = Instant::now();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(bps) = offered {
            let due = Duration::from_secs_f64(sent as f64 * 8.0 / bps as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                thread::sleep(wait.min(BACKOFF));
                continue;
            }
        }
        match c.send(&msg, Wait::No) {
            Ok(()) => sent += size as u64,
            Err(Error::WouldBlock(_)) => thread::sleep(BACKOFF),
            Err(_) => return,
        }
    }
}

/// Counts what arrives until `stop` or the end of the connection.
pub fn recv_loop(c: &Connection, delivered: &AtomicU64, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match c.recv(Wait::For(Duration::from_millis(50))) {
            Ok(Some(m)) => {
                delivered.fetch_add(m.len() as u64, Ordering::Relaxed);
            }
            Ok(None) => return,
            Err(Error::TimedOut) => {}
            Err(_) => return,
        }
    }
}
