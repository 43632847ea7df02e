//! ABR between two natm end points with no switch between them (`flow=abr`, issue
//! 33): the source's forward RM cells come back turned around by the far end's
//! engine, and with no switch to lower their explicit rate or mark congestion, each
//! one raises the source's allowed cell rate by RIF·PCR until it reaches PCR (TM 4.0
//! source rule 8). With a switch in the path the rate follows the switch's ERICA
//! (`tests/switch/abr.rs`).

use natm::ulib::Wait;
use std::time::Duration;

use natm::ulib::{Connection, Host, LinkMode};

pub(crate) fn connect(a: &Host, b: &Host, at: &str, qos: &str) -> (Connection, Connection) {
    let l = b.bind(at, qos).unwrap();
    let addr = l.local_addr().unwrap();
    let (a, q) = (a.clone(), qos.to_string());
    let t = std::thread::spawn(move || a.connect(addr, &q).unwrap());
    let server = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
    (t.join().unwrap(), server)
}

/// 200 Mbit/s of 4 KiB TPDUs: ICR is PCR/16, 12.5 Mbit/s.
const PCR: f64 = 200e6;

pub(crate) fn climbs_to_pcr(c: &Connection, s: &Connection) {
    // It starts at ICR (PCR/16; flow::abr's tests) and its first FRM, sent once the
    // VC is up, may already be back: at most a step or two above.
    let start = c.stats().rate_bps.expect("an ABR source has a rate") as f64;
    assert!(
        (PCR / 16.0 - 1e3..PCR / 2.0).contains(&start),
        "starts near ICR: {start}"
    );
    let msg = vec![0x5Au8; 4096];
    let n = 200;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..n {
                c.send(&msg, Wait::Block).unwrap();
            }
        });
        for i in 0..n {
            let m = s.recv(Wait::For(Duration::from_secs(10))).unwrap();
            assert_eq!(m.map(|m| m.len()), Some(4096), "message {i}");
        }
    });
    let (cs, ss) = (c.stats(), s.stats());
    assert!(cs.rm.frm_sent >= 16, "{:?}", cs.rm);
    assert!(ss.rm.turned >= 16, "{:?}", ss.rm);
    assert!(cs.rm.brm_taken >= 15, "{:?}", cs.rm);
    assert_eq!(
        (
            cs.rm.malformed,
            ss.rm.malformed,
            cs.rm.ignored,
            ss.rm.ignored
        ),
        (0, 0, 0, 0)
    );
    let acr = cs.rate_bps.unwrap() as f64;
    assert!(
        (acr - PCR).abs() < PCR * 0.01,
        "ACR {acr} after {:?}",
        cs.rm
    );
    // RM frames never reach the transport: nothing refused, nothing retransmitted
    // on their account.
    assert_eq!(cs.refused_frames + ss.refused_frames, 0);
}

#[test]
fn an_abr_source_climbs_to_its_pcr_on_its_turned_around_rm_cells_over_udp() {
    let a = Host::open(crate::support::host_config()).unwrap();
    let b = Host::open(crate::support::host_config()).unwrap();
    let (c, s) = connect(&a, &b, "127.0.0.1:0", "abr:pcr=200Mbps");
    climbs_to_pcr(&c, &s);
}

#[test]
fn rm_cells_travel_as_pti_110_cells_in_cell_mode() {
    let mut cfg = crate::support::host_config();
    cfg.engine.link_mode = LinkMode::Cell { train: 8 };
    let a = Host::open(cfg.clone()).unwrap();
    let b = Host::open(cfg).unwrap();
    let (c, s) = connect(&a, &b, "127.0.0.1:0", "abr:pcr=200Mbps,ec=on");
    climbs_to_pcr(&c, &s);
    // Each BRM came in as one RM cell (PTI 110), none as a broken AAL5 frame.
    let cells = c.stats().cells.expect("cell mode");
    assert!(cells.sar.rm >= 15, "{:?}", cells.sar);
    assert_eq!((cells.sar.not_user_data, cells.unsendable), (0, 0));
    assert!(s.stats().cells.unwrap().sar.rm >= 16);
}
