//! Issue 31, local users: what a local application can make sigd log is bounded. A
//! flood of malformed IPC (connect, garbage, close, again) and of refused requests
//! writes at most each kind's burst of lines plus its rate over the time the flood
//! lasts, the next line written says how many were left out, and text the
//! application chose reaches the log only as a short escaped prefix. In a test
//! binary of its own, as core_peers_log.rs (a `tracing` subscriber set with
//! `with_default` can miss events of callsites other test threads registered).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use natm_proto::wire::ipc::{IpcError, Message};
use support::*;

#[test]
fn a_flood_of_malformed_ipc_writes_a_bounded_number_of_lines() {
    let lines: Arc<Mutex<Vec<u8>>> = Arc::default();
    let sink = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || SharedWriter(sink.clone()))
        .finish();
    let mut p = Pair::default();
    const N: usize = 7_198;
    tracing::subscriber::with_default(subscriber, || {
        // 7,198 connections of uid 1000, each sending garbage and closed for it, and
        // as many refused requests with a long, newline-laden SAP: all at one
        // instant, as fast as a local process can.
        for _ in 0..N {
            let app = p.app_as(Side::A, 1000);
            let now = p.now;
            p.a.core
                .app_malformed(now, app, &IpcError::UnknownType(0xee));
            p.a.core.app_closed(now, app);
        }
        let app = p.app_as(Side::A, 1000);
        let evil = format!("x\nFAKE LOG LINE{}", "y".repeat(5_000));
        for _ in 0..N {
            let req = p.req();
            p.send(
                Side::A,
                app,
                Message::Connect {
                    req,
                    called: format!("+4420077:{evil}"),
                    qos: "ubr".parse().unwrap(),
                    data: data(40_001),
                },
            );
            p.take(Side::A, app);
        }
        // A second later, one more of each: let through, carrying the count.
        p.advance(Duration::from_secs(1));
        let last = p.app_as(Side::A, 1000);
        let now = p.now;
        p.a.core
            .app_malformed(now, last, &IpcError::UnknownType(0xee));
    });
    let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
    let malformed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("malformed IPC"))
        .collect();
    // The burst (log_per_s = 10), then one a second later.
    assert_eq!(malformed.len(), 11, "{malformed:#?}");
    let last = malformed[10];
    assert!(
        last.contains(&format!("suppressed={}", N - 10)),
        "the line after the gap says how many were left out: {last}"
    );
    let refused = text
        .lines()
        .filter(|l| l.contains("request refused"))
        .count();
    assert!((1..=10).contains(&refused), "{refused} refusal lines");
    assert!(
        !text.contains("\nFAKE LOG LINE"),
        "no line the application wrote starts a line of the log"
    );
    assert!(
        text.lines().all(|l| l.len() < 1_000),
        "no line carries the application's 5,000 characters"
    );
    assert!(p.stat(Side::A).counters.log_suppressed >= 2 * N as u64 - 40);
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
