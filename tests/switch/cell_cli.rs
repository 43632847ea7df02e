//! Two hosts' engines, direct mode, through a `natm switch` whose ports are in the
//! link modes the hosts attach in (issue 13): host A in cell mode and host B in frame
//! mode (the switch segments and reassembles per VC), and both in cell mode. A
//! reliable connection moves 4 MB byte-exact across, and the switch's counters show
//! cells on the cell ports and frames on the frame ports.

use natm::ulib::Wait;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use crate::switch_support::{free_addr, SwitchProc, DEADLINE};
use natm::ulib::{Host, HostConfig, LinkMode};

const TOTAL: usize = 4_000_000;

fn host(mode: &str) -> Host {
    let mut cfg = HostConfig::default();
    cfg.engine.link_mode = mode.parse::<LinkMode>().unwrap();
    Host::open(cfg).unwrap()
}

fn port(name: &str, bind: SocketAddr, peer: SocketAddr, mode: &str) -> String {
    let mode = mode.split(':').next().unwrap();
    format!(
        "[[port]]\nname = {name:?}\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = {mode:?}\n\
         line_rate = 10000000000\nbuffer = 65536\ntrain = 32\n"
    )
}

/// A switch port admits datagrams from its one configured peer, but a direct-mode
/// listener answers each caller from a new socket on an ephemeral port. So host B sits
/// behind this shim at the port's `peer` address: what comes from the switch goes to
/// the address B last spoke from (its listener until then), what comes from B goes to
/// the switch. Datagrams pass unchanged, so the switch sees B's link mode.
struct Shim {
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Shim {
    fn new(switch_port: SocketAddr, listener: SocketAddr) -> Shim {
        use std::sync::atomic::{AtomicBool, Ordering};
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut host = listener;
            let mut buf = vec![0u8; 65_536];
            while !flag.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let to = if from == switch_port {
                    host
                } else {
                    host = from;
                    switch_port
                };
                let _ = sock.send_to(&buf[..n], to);
            }
        });
        Shim {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Host A (link mode `a`) calls host B (`b`) through the switch and sends 4 MB; B
/// checks every byte. Returns the switch's stat afterwards.
fn transfer(name: &str, a: &str, b: &str) -> serde_json::Value {
    let (a_addr, b_addr, pa, pb) = (free_addr(), free_addr(), free_addr(), free_addr());
    let shim = Shim::new(pb, b_addr);
    // Direct mode's VCs: 0.32 from the caller, 0.33 from the listener
    // (natm_proto::endpoint), each with its ACKs coming back on its own VCI: duplex.
    let toml = format!(
        "{}{}[[pvc]]\nfrom = \"a:0.32\"\nto = \"b:0.32\"\nbuffer = 65536\nduplex = true\n\
         [[pvc]]\nfrom = \"a:0.33\"\nto = \"b:0.33\"\nbuffer = 65536\nduplex = true\n",
        port("a", pa, a_addr, a),
        port("b", pb, shim.addr, b),
    );
    let sw = SwitchProc::start(name, &toml);
    let hb = host(b);
    let listener = hb.bind(b_addr, "reliable").unwrap();
    let rx = std::thread::spawn(move || {
        let c = listener.accept(Wait::Block).unwrap();
        let mut got = 0usize;
        while let Some(m) = c.recv(Wait::For(DEADLINE)).unwrap() {
            for (k, &byte) in m.iter().enumerate() {
                assert_eq!(byte, pattern(got + k), "octet {} differs", got + k);
            }
            got += m.len();
            if got >= TOTAL {
                break;
            }
        }
        got
    });
    let ha = host(a);
    let c = match ha.connect_from(a_addr, pa, "reliable") {
        Ok(c) => c,
        Err(e) => panic!(
            "{e}: {}",
            std::fs::read_to_string(&sw.stat).unwrap_or_default()
        ),
    };
    let data: Vec<u8> = (0..TOTAL).map(pattern).collect();
    for chunk in data.chunks(64 << 10) {
        c.send(chunk, Wait::Block).unwrap();
    }
    assert_eq!(rx.join().unwrap(), TOTAL, "every byte arrived");
    let stats = c.stats();
    match a.parse::<LinkMode>().unwrap() {
        LinkMode::Cell { .. } => {
            let cells = stats.cells.expect("a cell-mode link counts cells");
            assert!(cells.trains_in > 0 && cells.malformed == 0, "{cells:?}");
        }
        LinkMode::Frame => assert!(stats.cells.is_none()),
    }
    c.close();
    // The forward VC carried at least the 4 MB as AAL5 cells (4 KiB TPDUs: 86 cells).
    let min_cells = (TOTAL / 4096 * 86) as u64;
    // ... and, to a frame port, every TPDU left it (the stat file is rewritten every
    // few ms, so wait for the snapshot that has them).
    let min_frames = (TOTAL / 4096) as u64;
    sw.stat_until(|v| {
        v["ports"][0]["stats"]["counters"]["cells_in"]
            .as_u64()
            .is_some_and(|n| n >= min_cells)
            && (v["ports"][1]["mode"] != "frame"
                || v["ports"][1]["stats"]["counters"]["frames_out"]
                    .as_u64()
                    .is_some_and(|n| n >= min_frames))
    })
}

fn counters(v: &serde_json::Value, port: usize) -> (u64, u64, u64, u64) {
    let p = &v["ports"][port];
    let c = &p["stats"]["counters"];
    (
        p["link"]["datagrams_in"].as_u64().unwrap(),
        c["cells_in"].as_u64().unwrap(),
        c["frames_in"].as_u64().unwrap(),
        p["link"]["bad_datagrams"].as_u64().unwrap() + p["link"]["mode_mismatch"].as_u64().unwrap(),
    )
}

#[test]
fn a_cell_host_and_a_frame_host_through_one_switch() {
    let v = transfer("mixed", "cell:32", "frame");
    assert_eq!(v["ports"][0]["mode"], "cell");
    assert_eq!(v["ports"][1]["mode"], "frame");
    // Port a (cell mode) takes trains of cells: many cells per datagram.
    let (dg, cells, frames, bad) = counters(&v, 0);
    assert_eq!(bad, 0);
    assert!(
        cells > 4 * dg,
        "cells arrive in trains: {cells} cells in {dg} datagrams"
    );
    assert!(frames > 0);
    // Port b (frame mode) takes one frame per datagram (the ACKs and the handshake).
    let (dg, _, frames, bad) = counters(&v, 1);
    assert_eq!(bad, 0);
    assert_eq!(frames, dg, "one frame per datagram on the frame port");
    // What left b was reassembled frames; what left a, segmented cells.
    let out_b = &v["ports"][1]["stats"]["counters"];
    assert!(out_b["frames_out"].as_u64().unwrap() >= (TOTAL / 4096) as u64);
    let out_a = &v["ports"][0]["stats"]["counters"];
    assert!(out_a["cells_out"].as_u64().unwrap() >= out_a["frames_out"].as_u64().unwrap());
    // Trains lost on loopback (a full socket buffer) break their frames: those are
    // counted as reassembly drops at b and recovered by the reliable VC.
    let d = &v["ports"][1]["stats"]["counters"]["dropped"];
    eprintln!(
        "reassembly drops at the frame port: {} cells, timeouts {}",
        d["reassembly"], d["reassembly_timeout"]
    );
}

#[test]
fn two_cell_hosts_through_one_switch() {
    let v = transfer("cells", "cell:32", "cell:64");
    for p in 0..2 {
        assert_eq!(v["ports"][p]["mode"], "cell");
        let (dg, cells, _, bad) = counters(&v, p);
        assert_eq!(bad, 0);
        assert!(cells >= dg, "port {p}: {cells} cells in {dg} datagrams");
    }
}
