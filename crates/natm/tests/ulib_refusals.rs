//! What ulib reports instead of a call (issue 32): sigd's refusal of a session, which
//! sigd writes as `Message::Error` before closing (out of descriptors, a per-user
//! limit) while the application may be writing its first request — whether that write
//! got through or failed with EPIPE, ulib reports sigd's reason, never a broken pipe.

use std::io::Write;
use std::os::unix::net::UnixListener;

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
        ..HostConfig::default()
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
