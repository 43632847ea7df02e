//! Issue 16, signalling peers: logging of remote events is rate-limited. In a test
//! binary of its own: a `tracing` subscriber set with `with_default` while other tests
//! run on other threads of the same process can miss events (callsite interest is
//! process-wide), which made this test fail now and then beside core_peers.rs's.

mod support;

use std::sync::{Arc, Mutex};

use support::*;

#[test]
fn remote_events_are_logged_at_a_bounded_rate() {
    let lines: Arc<Mutex<Vec<u8>>> = Arc::default();
    let sink = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || SharedWriter(sink.clone()))
        .finish();
    let mut p = Pair::default();
    tracing::subscriber::with_default(subscriber, || {
        // 2,000 SETUPs refused (nobody listens), within one second.
        let a_app = p.app(Side::A);
        for _ in 0..2_000 {
            p.connect(Side::A, a_app, "+4420002:nobody", "reliable");
        }
    });
    let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
    let refused = text.matches("incoming call refused").count();
    assert!((1..=30).contains(&refused), "{refused} lines");
    assert!(p.stat(Side::B).counters.log_suppressed >= 1_900);
}

struct SharedWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
