//! Issue 31: two `natm sigd` processes with no keys configured authenticate their
//! signalling link with Noise — a call works over it, forged SSCOP ENDs from the
//! peer's spoofed address release nothing, and a peer proving another key than the
//! one pinned is refused.

mod sigd_support;
mod spoof_support;

use natm::ulib::Wait;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use sigd_support::{pair, LINK};
use spoof_support::Spoofer;

/// An SSCOP END (S=0) on VPI 0/VCI 5, in clear.
fn end_frame() -> Vec<u8> {
    let pdu = natm_proto::wire::sscop::Pdu::End {
        source_sscop: false,
        uu: Vec::new(),
    };
    natm_proto::wire::vcframe::signalling_frame(&pdu.to_bytes())
}

fn show_key(socket: &std::path::Path) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["sigd", "--show-key", "--socket"])
        .arg(socket)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

#[test]
fn sigds_without_keys_call_over_noise_and_forged_ends_release_nothing() {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb.bind("echo", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            c.send(&m, Wait::Block).unwrap();
        }
    });
    let c = a.host().connect("+4420002:echo", "reliable").unwrap();
    c.send(b"before", Wait::Block).unwrap();
    assert_eq!(
        c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
        b"before"
    );
    // The link is Noise-authenticated, and each end holds the key the other proves.
    let (sa, sb) = (a.stat(), b.stat());
    assert_eq!(sa["peers"][0]["auth"], "noise", "{sa}");
    assert_eq!(sb["peers"][0]["auth"], "noise", "{sb}");
    assert_eq!(sa["peers"][0]["peer_key"], show_key(&b.socket), "{sa}");
    assert_eq!(sb["peers"][0]["peer_key"], show_key(&a.socket), "{sb}");
    // `natm stat` says so in its links table, with the key's fingerprint.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["stat", "--socket"])
        .arg(&a.socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.contains(&b.signalling.to_string()))
        .unwrap_or("");
    assert!(
        row.contains(" noise ") && row.contains(&show_key(&b.socket)[..11]),
        "{text}"
    );
    // Each pinned the other in its known-peers file; the key file is the owner's.
    let pins = std::fs::read_to_string(a.socket.with_extension("known-peers")).unwrap();
    assert!(
        pins.contains(&format!("{} {}", b.signalling, show_key(&b.socket))),
        "{pins}"
    );
    let mode = std::fs::metadata(a.socket.with_extension("noise-key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Five clear ENDs from each end's address to the other (they released every call
    // on an unkeyed link before).
    let spoof = Spoofer::open();
    for _ in 0..5 {
        spoof.send(a.signalling, b.signalling, &end_frame());
        spoof.send(b.signalling, a.signalling, &end_frame());
    }
    let until = Instant::now() + Duration::from_secs(5);
    while b.stat()["counters"]["auth_failures"].as_u64().unwrap_or(0) < 5 {
        assert!(Instant::now() < until, "{}", b.stat());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    c.send(b"after", Wait::Block).unwrap();
    assert_eq!(
        c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
        b"after"
    );
    let (sa, sb) = (a.stat(), b.stat());
    assert_eq!(sa["calls"][0]["state"], "active", "{sa}");
    assert_eq!(sb["peers"][0]["up"], true, "{sb}");
    assert!(
        sa["counters"]["auth_failures"].as_u64().unwrap() >= 5,
        "{sa}"
    );
    c.close();
    c.flush(Duration::from_secs(5)).unwrap();
    drop(c);
    t.join().unwrap();
}

#[test]
fn a_peer_with_another_key_than_the_pinned_one_is_refused() {
    let (a, mut b) = pair(LINK, LINK);
    let hb = b.host();
    let l = std::sync::Arc::new(hb.bind("ok", "reliable").unwrap());
    let ha = a.host();
    // One call pins B's key at A (trust on first use). Held until the listener has
    // it. Under load (both CPUs busy) the listener's accept once saw the call aborted
    // by the peer (`Aborted(Peer)`, not explained yet): the pinning call is tried up
    // to three times; what this test checks is the refusal below.
    let mut pinned = false;
    for _ in 0..3 {
        let l2 = l.clone();
        let t = std::thread::spawn(move || l2.accept(Wait::Block).map(|_| ()));
        let c = ha.connect("+4420002:ok", "reliable");
        let accepted = t.join().unwrap();
        drop(c);
        if accepted.is_ok() {
            pinned = true;
            break;
        }
        eprintln!("pinning call: {accepted:?}; again");
    }
    assert!(pinned, "no call between A and B to pin B's key");
    drop((l, ha));
    drop(hb);
    // B comes back at the same address with a new key (its key file lost).
    b.kill();
    std::fs::remove_file(b.socket.with_extension("noise-key")).unwrap();
    b.restart();
    let hb = b.host();
    let _l = hb.bind("ok", "reliable").unwrap();
    let e = a
        .host()
        .connect("+4420002:ok", "reliable")
        .expect_err("a call over a link whose peer proved another key");
    let sa = a.stat();
    assert!(
        sa["counters"]["key_mismatches"].as_u64().unwrap() > 0,
        "{e}: {sa}"
    );
    assert!(a.log().contains("different Noise key"), "{}", a.log());
}

#[test]
fn a_key_file_others_may_read_is_refused() {
    let dir = std::env::temp_dir().join(format!("natm-noise-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("sigd.sock");
    let key = show_key(&socket);
    assert_eq!(key.len(), 44, "{key}");
    assert_eq!(show_key(&socket), key, "made once, then read");
    let file = socket.with_extension("noise-key");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["sigd", "--show-key", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("Noise key file") && err.contains("chmod 600"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
