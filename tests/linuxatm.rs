//! Linux's own ATM stack against natm (issue 15): a QEMU guest running Debian's
//! kernel and atm-tools joins its atmtcp interfaces to `natm switch` atmtcp ports —
//! one the guest connects to, one that connects to the guest — and frames cross PVCs
//! byte-exact both ways. The guest is prepared once and
//! cached (scripts/linuxatm/prepare.sh); the test skips only where that cannot be
//! done (no qemu or packages and no root to install them, not x86-64 Linux).
//!
//! The natm side of each PVC is what a user runs: `natm listen --pvc` and `natm call
//! --pvc` (bare AAL5 VCs, docs/tools.md) at the peer address of a frame port of the
//! switch; `--json` says how many SDUs and octets crossed, `--out` what they were.

#[path = "linuxatm/support.rs"]
mod guest;
mod switch_support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use switch_support::{free_addr, SwitchProc};

/// Boot to the test script takes ~3 s of guest time under TCG, ~6 s of wall time.
const GUEST: Duration = Duration::from_secs(90);
const FRAME: Duration = Duration::from_secs(20);

/// natm's end of the PVCs: the peer of a frame port `u` of the switch, where the
/// natm tools bind. `[[pvc]]` lines join its VCs to the atmtcp port's VCs of the
/// same numbers.
struct NatmEnd {
    host: SocketAddr,
    switch: Option<SocketAddr>,
    dir: PathBuf,
}

impl NatmEnd {
    fn new(name: &str) -> NatmEnd {
        let dir = std::env::temp_dir().join(unique(name));
        std::fs::create_dir_all(&dir).unwrap();
        NatmEnd {
            host: free_addr(),
            switch: None,
            dir,
        }
    }

    /// Its port and the PVCs to the same VCIs of the switch's port `linux`, in the
    /// switch's TOML.
    fn toml(&self, vcis: &[u16]) -> String {
        let mut t = format!(
            "[[port]]\nname = \"u\"\nmode = \"frame\"\nbind = \"127.0.0.1:0\"\npeer = \"{}\"\n",
            self.host
        );
        for v in vcis {
            t += &format!("[[pvc]]\nfrom = \"linux:0.{v}\"\nto = \"u:0.{v}\"\nduplex = true\n");
        }
        t
    }

    fn attach(&mut self, sw: &SwitchProc) {
        self.switch = Some(sw.ports["u"]);
    }

    fn natm(&self, args: &[&str]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_natm"))
            .args(args)
            .args(["--bind", &self.host.to_string()])
            .args(["--via", &self.switch.expect("attached").to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `natm listen --pvc 0.VCI`, returned once it has opened its VC (its first line
    /// on stderr); it writes what arrives to `out` and stops 1 s after the first SDU.
    fn listen(&self, vci: u16, out: &Path) -> Child {
        let mut c = self.natm(&[
            "listen",
            "--pvc",
            &format!("0.{vci}"),
            "--idle",
            "1s",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = c.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let first = rx
            .recv_timeout(FRAME)
            .expect("natm listen says it is receiving");
        assert!(first.contains("receiving on pvc"), "{first}");
        c
    }

    /// `natm call --pvc 0.VCI` sending `sdu` as one SDU: the whole file, in one
    /// message of its size.
    fn send(&self, vci: u16, sdu: &[u8]) {
        let f = self.dir.join(format!("sdu-{vci}-{}", sdu.len()));
        std::fs::write(&f, sdu).unwrap();
        let c = self.natm(&[
            "call",
            "--pvc",
            &format!("0.{vci}"),
            "--qos",
            "ubr:transport=none",
            "--file",
            f.to_str().unwrap(),
            "--size",
            &sdu.len().to_string(),
            // Nothing comes back on the PVC: stop waiting for it soon.
            "--discard",
            "--idle",
            "200ms",
            "--json",
            "--quiet",
        ]);
        let out = finish(c, "natm call --pvc");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j = json(&out.stdout);
        assert_eq!(j["bare"]["sdus_sent"], 1, "{j}");
    }
}

/// Waits for a tool, killed (and the test failed) after [`FRAME`].
fn finish(child: Child, what: &str) -> std::process::Output {
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(FRAME) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg(id.to_string()).status();
            panic!("{what} still ran after {FRAME:?}");
        }
    }
}

/// The JSON summary line a tool printed.
fn json(out: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(out);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {text}"));
    serde_json::from_str(line).unwrap()
}

/// What `natm listen` received: one SDU of exactly `want`.
fn received_one(l: Child, out: &Path, want: &[u8]) {
    let done = finish(l, "natm listen --pvc");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let j = json(&done.stdout);
    assert_eq!(j["bare"]["sdus_received"], 1, "{j}");
    assert_eq!(std::fs::read(out).unwrap(), want);
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
    let mut natm = NatmEnd::new("natm-linuxatm-pvc");
    let mut sw = SwitchProc::start(
        "linuxatm-pvc",
        &format!(
            "[[port]]\nname = \"linux\"\nmode = \"atmtcp\"\nlisten = \"127.0.0.1:0\"\n{}",
            natm.toml(&[100, 200])
        ),
    );
    natm.attach(&sw);
    // Listening before the guest writes.
    let out100 = natm.dir.join("vc100.out");
    let l100 = natm.listen(100, &out100);
    let port = sw.ports["linux"].port();
    // Unique per run, so a stale frame cannot pass for this one.
    let payload = unique("linux-awrite-to-natm");
    let payload2 = unique("linux-listen-awrite-to-natm");
    // The host end of slirp's forward to the guest's atmtcp listener.
    let fwd = natm_cli::cli::loopnet::free_port().unwrap().port();
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
    received_one(l100, &out100, payload.as_bytes());

    // natm -> Linux: every octet value, a one-octet SDU, and aread's largest (its
    // VC's max_sdu is 1024), in order.
    let frames: Vec<Vec<u8>> = vec![
        (0..=255).collect(),
        vec![0x5a],
        (0..1024u32).map(|i| (i * 7 + 3) as u8).collect(),
    ];
    for f in &frames {
        natm.send(200, f);
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
    let mut natm2 = NatmEnd::new("natm-linuxatm-pvc2");
    let sw2 = SwitchProc::start(
        "linuxatm-connect",
        &format!(
            "[[port]]\nname = \"linux\"\nmode = \"atmtcp\"\nconnect = \"127.0.0.1:{fwd}\"\n{}",
            natm2.toml(&[300, 301])
        ),
    );
    natm2.attach(&sw2);
    let out301 = natm2.dir.join("vc301.out");
    let l301 = natm2.listen(301, &out301);
    g.marker("connected2", GUEST);
    assert_eq!(g.marker("awrite2 rc=", FRAME), "0");
    received_one(l301, &out301, payload2.as_bytes());
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
    let _ = std::fs::remove_dir_all(&natm.dir);
    let _ = std::fs::remove_dir_all(&natm2.dir);
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
