//! What ulib refuses or reports before or instead of a call (issue 32): a bad SAP,
//! before anything is sent; and sigd's refusal of a session, which sigd writes as
//! `Message::Error` before closing (out of descriptors, a per-user limit) while the
//! application may be writing its first request — whether that write got through or
//! failed with EPIPE, ulib reports sigd's reason, never a broken pipe.

use std::io::Write;
use std::os::unix::net::UnixListener;

use natm::sig::SapTextError;
use natm::ulib::{Error, Host, HostConfig};
use natm::wire::ipc::Message;

const DETAIL: &str = "sigd is out of file descriptors (Too many open files (os error 24))";

#[test]
fn a_refused_session_reports_sigds_reason_on_either_side_of_the_race() {
    let path = std::env::temp_dir().join(format!("natm-refusal-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    const SESSIONS: usize = 30;
    let refuser = std::thread::spawn(move || {
        for _ in 0..SESSIONS {
            let (mut s, _) = listener.accept().unwrap();
            let refusal = Message::Error {
                cause: 47,
                detail: DETAIL.into(),
            };
            s.write_all(&refusal.to_bytes()).unwrap();
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    });
    let host = Host::open(HostConfig {
        sigd_socket: Some(path.clone()),
        ..crate::support::host_config()
    })
    .unwrap();
    // Each request opens a new session, refused as soon as the scripted sigd accepts
    // it: some requests are written first, some find the session closed already.
    for i in 0..SESSIONS {
        match host.sigd_stat() {
            Err(Error::SigdClosed { cause, detail }) => {
                assert_eq!((cause, detail.as_str()), (47, DETAIL), "session {i}")
            }
            other => panic!("session {i}: not sigd's reason: {other:?}"),
        }
    }
    refuser.join().unwrap();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_session_closed_before_any_answer_is_no_sigd_not_a_lost_one() {
    // What a dying sigd's listening socket does in the instant between its process
    // closing a client's session and closing the socket itself: it takes a
    // connection that no sigd ever answers. A call placed then has reached no sigd:
    // `NoSigd` (start one), not `SigdGone` (pending calls were lost).
    let path = std::env::temp_dir().join(format!("natm-mute-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    const SESSIONS: usize = 10;
    let mute = std::thread::spawn(move || {
        for _ in 0..SESSIONS {
            let (s, _) = listener.accept().unwrap();
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    });
    let host = Host::open(HostConfig {
        sigd_socket: Some(path.clone()),
        ..crate::support::host_config()
    })
    .unwrap();
    for i in 0..SESSIONS {
        match host.connect("+4420002:echo", "reliable") {
            Err(Error::NoSigd { path: p, source }) => {
                assert_eq!(p, path, "session {i}");
                assert!(
                    source.to_string().contains("before it answered"),
                    "{source}"
                );
            }
            other => panic!("session {i}: {other:?}"),
        }
    }
    mute.join().unwrap();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_bad_sap_is_refused_before_sigd_is_asked() {
    // No sigd at this path: a request that reached for it would fail with NoSigd.
    let host = Host::open(HostConfig {
        sigd_socket: Some(std::env::temp_dir().join("natm-no-sigd-here.sock")),
        ..crate::support::host_config()
    })
    .unwrap();
    let long = format!("+4420002:{}", "s".repeat(300));
    for (called, want) in [
        ("+4420002:my sap", "' ' is not allowed"),
        ("+4420002:", "empty SAP"),
        (long.as_str(), "SAP of 300 characters"),
        ("bob:\u{e9}cho", "'\u{e9}' is not allowed"),
    ] {
        match host.connect(called, "ubr") {
            Err(e @ Error::Sap(_)) => assert!(e.to_string().contains(want), "{called}: {e}"),
            other => panic!("{called}: not refused for its SAP: {other:?}"),
        }
    }
    for sap in ["", "two words", "+4420002:"] {
        assert!(
            matches!(host.bind(sap, "ubr"), Err(Error::Sap(_))),
            "{sap:?}"
        );
    }
    assert!(matches!(
        host.bind("\u{e9}cho", "ubr"),
        Err(Error::Sap(SapTextError::BadCharacter { ch: '\u{e9}', .. }))
    ));
    // Good SAPs, and an address whose colon is its own (an AESA written
    // e164-digits:hex), go on to sigd.
    for called in [
        "+4420002:echo",
        "+4420002:@0060d7.01000003",
        "123456789012345:0000000000000000000000",
        "123456789012345:0000000000000000000000:echo",
        "+4420002",
    ] {
        assert!(
            matches!(host.connect(called, "ubr"), Err(Error::NoSigd { .. })),
            "{called}"
        );
    }
    assert!(matches!(
        host.bind("+4420002:echo", "ubr"),
        Err(Error::NoSigd { .. })
    ));
}
