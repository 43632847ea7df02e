//! `natm ping --oam` through a `natm switch` (issue 14): two hosts' sigds attached to
//! one switch, OAM F5 loopback probes on the call's VC — a segment probe answered by
//! the switch at the caller's port, an end-to-end probe carried to the far end's
//! engine and its answer back — and the switch's per-port and per-VC counters showing
//! which it did.
//!
//! ```text
//!  h1 (+4420001) ── S ── h2 (+4420002)
//! ```

use natm::ulib::Wait;
use std::time::Duration;

use crate::sigd_support::tool::{listen, natm};
use crate::sigd_support::Sigd;
use crate::switch_support::SwitchProc;
use crate::two_hosts::{json, two_hosts, FAST};
use natm::wire::oam::Scope;

const LIMIT: Duration = Duration::from_secs(15);

/// One switch with frame-mode host ports h1 and h2, and both sigds attached to it.
fn net() -> (SwitchProc, Sigd, Sigd) {
    net_with("frame")
}

/// [`net`] with h2's port in `h2_mode` (`frame` or `cell`).
fn net_with(h2_mode: &str) -> (SwitchProc, Sigd, Sigd) {
    let h2 = format!("mode = \"{h2_mode}\"\nline_rate = 1000000000\nbuffer = 16384\n");
    two_hosts("oam", "", FAST, &h2)
}

fn port_looped(sw: &SwitchProc, name: &str) -> u64 {
    sw.stat()["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .map_or(0, |p| p["stats"]["oam_looped"].as_u64().unwrap())
}

#[test]
fn natm_ping_oam_is_answered_by_the_switch_or_the_far_end() {
    let (sw, a, b) = net();
    let l = listen(&b, &["echo", "--echo", "--keep"]);
    // Segment: the switch answers at h1's port.
    let p = natm(
        &a,
        &[
            "ping", "+4420002", "--oam", "segment", "-c", "4", "-i", "20ms", "--json",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(p.status.success(), "{}\n{}", p.stderr, sw.log());
    let s = json(&p.stdout);
    assert_eq!(
        (&s["probe"], &s["sent"], &s["received"]),
        (&"segment".into(), &4.into(), &4.into()),
        "{s}"
    );
    let med = s["median_ms"].as_f64().unwrap();
    assert!(0.0 < med && med < 1000.0, "{s}");
    sw.stat_until(|_| port_looped(&sw, "h1") == 4);
    // End to end: through the switch to h2's engine and back; the switch loops none.
    let p = natm(
        &a,
        &["ping", "+4420002", "--oam", "e2e", "-c", "3", "-i", "20ms"],
        None,
    )
    .wait(LIMIT);
    let out = String::from_utf8_lossy(&p.stdout);
    assert!(p.status.success(), "{out}{}", p.stderr);
    assert!(
        out.contains("OAM F5 end-to-end loopback from +4420002:echo: seq=2 time="),
        "{out}"
    );
    assert!(out.contains("3 probes sent, 3 answered, 0% loss"), "{out}");
    assert!(out.contains("rtt min/median/max = "), "{out}");
    assert_eq!(port_looped(&sw, "h1"), 4);
    assert_eq!(port_looped(&sw, "h2"), 0);
    drop(l);
}

#[test]
fn the_switch_counts_oam_per_vc_while_the_call_lives() {
    counts_oam_per_vc("frame");
}

/// The callee's host in cell mode: an end-to-end probe crosses the switch's
/// conversion as one OAM cell each way.
#[test]
fn end_to_end_probes_cross_a_frame_to_cell_conversion() {
    counts_oam_per_vc("cell");
}

fn counts_oam_per_vc(h2_mode: &str) {
    let (sw, a, b) = net_with(h2_mode);
    let hb = {
        let mut cfg = natm::ulib::HostConfig {
            sigd_socket: Some(b.socket.clone()),
            ..natm::ulib::HostConfig::default()
        };
        cfg.engine.link_mode = h2_mode.parse().unwrap();
        natm::ulib::Host::open(cfg).unwrap()
    };
    let lis = hb.bind("probe", "ubr").unwrap();
    let callee = std::thread::spawn(move || {
        let c = lis.next_call(Wait::For(LIMIT)).unwrap().accept().unwrap();
        // Hold the call until the caller closes it.
        while let Ok(Some(_)) = c.recv(Wait::For(LIMIT)) {}
        c.stats().oam
    });
    let c = a.host().connect("+4420002:probe", "ubr").unwrap();
    let wait = Duration::from_secs(2);
    for _ in 0..3 {
        assert!(c.oam_loopback(Scope::Segment, wait).unwrap().is_some());
    }
    for _ in 0..2 {
        assert!(c.oam_loopback(Scope::EndToEnd, wait).unwrap().is_some());
    }
    // The caller's label at h1's port: 3 probes looped there and 2 requests switched
    // on; the same label's cross-connect back from h2 carried the 2 answers.
    let v = sw.stat_until(|v| {
        let vcs = v["vcs"].as_array().unwrap();
        let sum = |k: &str| vcs.iter().map(|x| x[k].as_u64().unwrap()).sum::<u64>();
        sum("oam_looped") == 3 && sum("oam_forwarded") == 4
    });
    let vcs = v["vcs"].as_array().unwrap();
    assert!(
        vcs.iter()
            .any(|x| x["oam_looped"] == 3 && x["oam_forwarded"] == 2),
        "{v}"
    );
    let o = c.stats().oam;
    assert_eq!((o.probes_sent, o.answers, o.unmatched), (5, 5, 0));
    c.close();
    c.flush(wait).unwrap();
    drop(c);
    let co = callee.join().unwrap();
    assert_eq!((co.looped, co.ignored, co.malformed), (2, 0, 0));
}
