//! What `natm sigd --socket PATH` does to PATH (issue 32): a stale socket is
//! replaced, anything else standing there is left alone and named in the error, and a
//! start that fails after binding the socket leaves no socket behind.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};

use natm_sigd::config::ConfigFile;
use natm_sigd::Daemon;

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("natm-sigd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn bind(socket: &Path, signalling: &str) -> std::io::Result<Daemon> {
    let key = socket.with_extension("key");
    let toml = format!(
        "addresses = [\"+4420001\"]\nsocket = {socket:?}\nsignalling = \"{signalling}\"\n\
         [link]\ntpdu_cost_ns = 1000\n[restart]\nticket_key_file = {key:?}\n"
    );
    let cfg = ConfigFile::parse(&toml, Path::new("test.toml"))
        .unwrap()
        .check()
        .unwrap();
    Daemon::bind(cfg)
}

#[test]
fn a_regular_file_at_the_socket_path_is_not_deleted() {
    let d = dir("regular");
    let path = d.join("sigd.sock");
    std::fs::write(&path, b"precious").unwrap();
    let e = bind(&path, "127.0.0.1:0").expect_err("a file stands at the path");
    assert!(e.to_string().contains("is not a socket"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_stale_socket_is_replaced() {
    let d = dir("stale");
    let path = d.join("sigd.sock");
    // A socket nobody serves: what a killed sigd leaves.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let daemon = bind(&path, "127.0.0.1:0").expect("the stale socket is replaced");
    assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
    drop(daemon);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_busy_signalling_port_leaves_no_socket_behind() {
    let d = dir("busy");
    let path = d.join("sigd.sock");
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap();
    let e = bind(&path, &port.to_string()).expect_err("the signalling port is taken");
    assert!(e.to_string().contains("signalling endpoint"), "{e}");
    assert!(!path.exists(), "the socket was left behind");
    let _ = std::fs::remove_dir_all(&d);
}
