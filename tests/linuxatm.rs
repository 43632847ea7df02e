//! Linux's own ATM stack against natm (issue 15): a QEMU guest running Debian's
//! kernel and atm-tools joins its atmtcp interfaces to `natm switch` atmtcp ports —
//! one the guest connects to, one that connects to the guest — and frames cross PVCs
//! byte-exact both ways. The guest is prepared once and
//! cached (scripts/linuxatm/prepare.sh); the test skips only where that cannot be
//! done (no qemu or packages and no root to install them, not x86-64 Linux).
//!
//! The natm side of each PVC is [`NatmEnd`]: a UDP socket speaking the frame-mode VC
//! header to a frame port of the switch, so the test sees each frame's exact octets
//! (`natm call/listen --pvc` carry the same bare PVCs; tests/bare_cli.rs runs them).

#[path = "linuxatm/support.rs"]
mod guest;
mod switch_support;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::time::Duration;

use natm_proto::wire::vcframe;
use switch_support::SwitchProc;

/// Boot to the test script takes ~3 s of guest time under TCG, ~6 s of wall time.
const GUEST: Duration = Duration::from_secs(90);
const FRAME: Duration = Duration::from_secs(20);

/// natm's end of the PVCs: the peer of a frame port `u` of the switch. `[[pvc]]`
/// lines join its VCs to the atmtcp port's VCs of the same numbers.
struct NatmEnd {
    sock: UdpSocket,
    switch: Option<SocketAddr>,
}

impl NatmEnd {
    fn new() -> NatmEnd {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(FRAME)).unwrap();
        NatmEnd { sock, switch: None }
    }

    /// Its port and the PVCs to the same VCIs of the switch's port `linux`, in the
    /// switch's TOML.
    fn toml(&self, vcis: &[u16]) -> String {
        let mut t = format!(
            "[[port]]\nname = \"u\"\nmode = \"frame\"\nbind = \"127.0.0.1:0\"\npeer = \"{}\"\n",
            self.sock.local_addr().unwrap()
        );
        for v in vcis {
            t += &format!("[[pvc]]\nfrom = \"linux:0.{v}\"\nto = \"u:0.{v}\"\nduplex = true\n");
        }
        t
    }

    fn attach(&mut self, sw: &SwitchProc) {
        self.switch = Some(sw.ports["u"]);
    }

    fn send(&self, vci: u16, sdu: &[u8]) {
        let mut d = vcframe::Repr::data(0, vci).to_bytes().to_vec();
        d.extend_from_slice(sdu);
        self.sock
            .send_to(&d, self.switch.expect("attached"))
            .unwrap();
    }

    /// The next frame: its VCI and SDU.
    fn recv(&self) -> (u16, Vec<u8>) {
        let mut b = vec![0; 70_000];
        let n = self
            .sock
            .recv(&mut b)
            .expect("a frame from the Linux guest");
        let (h, sdu) = vcframe::Repr::parse_bytes(&b[..n]).unwrap();
        (h.vci, sdu.to_vec())
    }
}

fn unique(what: &str) -> String {
    format!(
        "{what}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[test]
fn awrite_and_aread_reach_natm_over_pvcs_byte_exact() {
    if !guest::ready() {
        return;
    }
    let mut natm = NatmEnd::new();
    let mut sw = SwitchProc::start(
        "linuxatm-pvc",
        &format!(
            "[[port]]\nname = \"linux\"\nmode = \"atmtcp\"\nlisten = \"127.0.0.1:0\"\n{}",
            natm.toml(&[100, 200])
        ),
    );
    natm.attach(&sw);
    let port = sw.ports["linux"].port();
    // Unique per run, so a stale frame cannot pass for this one.
    let payload = unique("linux-awrite-to-natm");
    let payload2 = unique("linux-listen-awrite-to-natm");
    // The host end of slirp's forward to the guest's atmtcp listener.
    let fwd = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut g = guest::Guest::boot(
        "pvc",
        &[
            ("port", port.to_string()),
            ("payload", payload.clone()),
            ("rx_vci", "200".into()),
            ("tx_vci", "100".into()),
            ("stray_vci", "400".into()),
            ("listen", "1".into()),
            ("payload2", payload2.clone()),
            ("rx2_vci", "300".into()),
            ("tx2_vci", "301".into()),
        ],
        Some(fwd),
    );
    g.marker("ready", GUEST);
    eprintln!(
        "linuxatm: guest ready {:.1} s after boot",
        g.started.elapsed().as_secs_f64()
    );

    // Linux -> natm: awrite's string, as one SDU on the PVC.
    assert_eq!(g.marker("awrite rc=", FRAME), "0");
    assert_eq!(natm.recv(), (100, payload.into_bytes()));

    // natm -> Linux: every octet value, a one-octet SDU, and aread's largest (its
    // VC's max_sdu is 1024), in order.
    let frames: Vec<Vec<u8>> = vec![
        (0..=255).collect(),
        vec![0x5a],
        (0..1024u32).map(|i| (i * 7 + 3) as u8).collect(),
    ];
    for f in &frames {
        natm.send(200, f);
    }
    for f in &frames {
        assert_eq!(&g.aread_frame(FRAME), f, "aread on 0.0.200");
    }

    // The switch saw Linux open and close its VCs (informational O/C text), and
    // counted the frame on a VC it has no PVC for.
    assert_eq!(g.marker("stray rc=", FRAME), "0");
    let stat = sw.stat_until(|s| {
        let l = &s["ports"][0];
        l["atmtcp"]["counters"]["control_in"].as_u64() >= Some(5)
            && l["stats"]["counters"]["dropped"]["unknown_vc"].as_u64() >= Some(1)
    });
    let l = &stat["ports"][0];
    assert_eq!(l["mode"], "atmtcp");
    let c = &l["atmtcp"]["counters"];
    assert_eq!(c["connections"], 1, "{c}");
    assert_eq!(c["framing_errors"], 0, "{c}");
    assert_eq!(c["frames_in"], 2, "{c}");
    assert_eq!(c["frames_out"], 3, "{c}");
    assert_eq!(c["dropped_full"], 0, "{c}");

    // The other role: a switch port that connects to `atmtcp virtual listen` in the
    // guest. Started once the guest listens: slirp accepts the host's connection at
    // once and keeps it half-open while nothing listens in the guest.
    g.marker("listening", GUEST);
    let mut natm2 = NatmEnd::new();
    let sw2 = SwitchProc::start(
        "linuxatm-connect",
        &format!(
            "[[port]]\nname = \"linux\"\nmode = \"atmtcp\"\nconnect = \"127.0.0.1:{fwd}\"\n{}",
            natm2.toml(&[300, 301])
        ),
    );
    natm2.attach(&sw2);
    g.marker("connected2", GUEST);
    assert_eq!(g.marker("awrite2 rc=", FRAME), "0");
    assert_eq!(natm2.recv(), (301, payload2.into_bytes()));
    // The switch's end is up once it has carried a frame; this one goes back.
    let back: Vec<u8> = (0..700u32).map(|i| (i * 13 + 1) as u8).collect();
    natm2.send(300, &back);
    assert_eq!(g.aread_frame(FRAME), back, "aread on 1.0.300");
    let stat2 = sw2.stat_until(|s| s["ports"][0]["atmtcp"]["counters"]["frames_out"] == 1);
    let c2 = &stat2["ports"][0]["atmtcp"];
    assert_eq!(c2["role"], "connect", "{c2}");
    assert_eq!(c2["counters"]["frames_in"], 1, "{c2}");
    drop(sw2);
    drop(g);
    // The guest gone, its connection ends and the switch says so.
    sw.stat_until(|s| s["ports"][0]["atmtcp"]["counters"]["disconnects"] == 1);
    assert!(sw.terminate().success());
}

#[test]
fn aread_lines_parse_only_when_whole() {
    assert_eq!(guest::parse_aread("3:  0A FF 00"), Some(vec![10, 255, 0]));
    assert_eq!(guest::parse_aread("0:"), Some(vec![]));
    assert_eq!(guest::parse_aread("4:  0A FF 00"), None, "short");
    assert_eq!(guest::parse_aread("[    3.07] reboot: Power down"), None);
    assert_eq!(guest::parse_aread("NATM-GUEST ready rx=0.0.200"), None);
}
