//! Two hosts whose UDP links are in cell mode (issue 13): a reliable connection
//! moves data byte-exact through segmentation into cell trains and reassembly, and
//! a frame-mode caller cannot reach a cell-mode listener (its datagrams are not
//! trains). In debug builds this also runs the cell adaptor's locks through the
//! lock-hierarchy check.

use natm::ulib::Wait;
use std::time::Duration;

use crate::support::assert_no_retransmissions;
use natm::ulib::{Error, Host, LinkMode};

fn host(mode: LinkMode) -> Host {
    let mut cfg = crate::support::host_config();
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
        (got, c)
    });
    let c = a.connect(addr, "reliable").unwrap();
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    for m in data.chunks(50_000) {
        c.send(m, Wait::Block).unwrap();
    }
    let (got, receiver) = t.join().unwrap();
    assert_eq!(got, data);
    c.close();
    c.flush(Duration::from_secs(10)).unwrap();
    let st = c.stats();
    let s = st.cells.expect("cell mode counts cells");
    assert!(
        s.trains_in > 0 && s.sar.frames > 0 && s.malformed == 0,
        "{s:?}"
    );
    assert_no_retransmissions("reliable in cell mode", &st, &receiver.stats());
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

/// `smooth=cell` (seed 001 §7): the caller's sending VC puts every cell in a datagram
/// of its own, paced by its cell pacer, and the data still arrives whole; without
/// it the same VC sends a frame's cells in full trains.
#[test]
fn a_cell_smoothed_vc_sends_every_cell_on_its_own_and_delivers_whole() {
    let cell = LinkMode::Cell { train: 32 };
    for (qos, smoothed) in [
        ("cbr:pcr=20Mbps,smooth=cell", true),
        ("cbr:pcr=20Mbps", false),
    ] {
        let (a, b) = (host(cell), host(cell));
        let l = b.bind("127.0.0.1:0", "cbr:pcr=20Mbps").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let c = l.accept(Wait::Block).unwrap();
            let mut got = Vec::new();
            while got.len() < 200_000 {
                match c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
                    Some(m) => got.extend_from_slice(&m),
                    None => break,
                }
            }
            (got, c.stats().cells.expect("cell mode counts cells"))
        });
        let c = a.connect(addr, qos).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 + i / 97) as u8).collect();
        for m in data.chunks(4_000) {
            c.send(m, Wait::Block).unwrap();
        }
        let (got, rx) = t.join().unwrap();
        assert_eq!(got, data, "{qos}");
        let pacer = c.stats().pacer;
        if smoothed {
            let p = pacer.expect("a smoothed VC has a pacer");
            assert!(p.units_sent + 8 >= rx.sar.cells, "{qos}: {p:?} {rx:?}");
            assert_eq!(p.shed_frames, 0, "{qos}: {p:?}");
            // Every data train carries one cell (the handshake's came before the
            // pacer, a few at most).
            assert!(rx.trains_in + 8 >= rx.sar.cells, "{qos}: {rx:?}");
        } else {
            assert!(pacer.is_none(), "{qos}");
            assert!(rx.trains_in * 10 < rx.sar.cells, "{qos}: {rx:?}");
        }
    }
}
