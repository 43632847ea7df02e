//! Two hosts whose UDP links are in cell mode (issue 13): a reliable connection
//! moves data byte-exact through segmentation into cell trains and reassembly, and
//! a frame-mode caller cannot reach a cell-mode listener (its datagrams are not
//! trains). In debug builds this also runs the cell adaptor's locks through the
//! lock-hierarchy check.

use natm::ulib::Wait;
use std::time::Duration;

use natm::ulib::{Error, Host, HostConfig, LinkMode};

fn host(mode: LinkMode) -> Host {
    let mut cfg = HostConfig::default();
    cfg.engine.link_mode = mode;
    cfg.connect_timeout = Duration::from_millis(500);
    Host::open(cfg).unwrap()
}

#[test]
fn a_reliable_connection_in_cell_mode_is_byte_exact() {
    let cell = LinkMode::Cell { train: 7 };
    let (a, b) = (host(cell), host(cell));
    let l = b.bind("127.0.0.1:0", "reliable").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::Block).unwrap();
        let mut got = Vec::new();
        while got.len() < 1_000_000 {
            match c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
                Some(m) => got.extend_from_slice(&m),
                None => break,
            }
        }
        got
    });
    let c = a.connect(addr, "reliable").unwrap();
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    for m in data.chunks(50_000) {
        c.send(m, Wait::Block).unwrap();
    }
    assert_eq!(t.join().unwrap(), data);
    let s = c.stats().cells.expect("cell mode counts cells");
    assert!(
        s.trains_in > 0 && s.sar.frames > 0 && s.malformed == 0,
        "{s:?}"
    );
}

#[test]
fn a_frame_mode_caller_cannot_reach_a_cell_mode_listener() {
    let b = host(LinkMode::Cell { train: 32 });
    let l = b.bind("127.0.0.1:0", "reliable").unwrap();
    let addr = l.local_addr().unwrap();
    let a = host(LinkMode::Frame);
    assert!(matches!(
        a.connect(addr, "reliable"),
        Err(Error::Unreachable(_))
    ));
}
