//! `natm capture` around a real call between two sigds on loopback (issue 14), read
//! back by tshark: signalling decodes as SSCOP and Q.2931, data as AAL5 (with a good
//! CRC in ERF files); and `contrib/wireshark/natm.lua` decodes a plain capture of the
//! same kind of traffic. Needs root (a raw packet socket, dumpcap on `lo`) and tshark,
//! which `scripts/test.sh` installs; without root the tests say so and pass.

mod sigd_support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};
use sigd_support::{pair_clear, tool, Sigd, LINK};

const NATM: &str = env!("CARGO_BIN_EXE_natm");
/// Bound on every process the tests start.
const LIMIT: Duration = Duration::from_secs(60);
/// Expert items tshark 4.0 raises on correct natm messages (docs/wire.md "Captures",
/// specs.md §6.3: its off-by-one reads past the AAL parameters and traffic descriptor
/// IEs). Any other expert item fails the test.
const KNOWN_WARNINGS: [&str; 2] = [
    "Unknown AAL parameter",
    "Unknown ATM traffic descriptor element",
];

/// Held by each test while it captures: both capture every natm datagram on `lo`, and
/// compare counts between captures of their own call (nothing else in the suite sends
/// while this binary runs: `scripts/test.sh` runs only builds beside the tests).
static LO: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether the tests can run: root, else a printed reason.
fn root() -> bool {
    if rustix::process::geteuid().is_root() {
        assert!(
            Command::new("tshark").arg("--version").output().is_ok(),
            "tshark is not installed: scripts/test.sh installs it"
        );
        true
    } else {
        eprintln!("skipped: natm capture and dumpcap need root for a raw packet socket");
        false
    }
}

/// A capturing process, stopped with SIGTERM (as Ctrl-C would) or killed on drop.
struct Capture {
    child: Option<Child>,
    what: String,
}

impl Capture {
    /// Starts `cmd` and waits until `ready` (given its stderr) says it captures.
    fn start(mut cmd: Command, what: &str, ready: impl FnOnce(&mut Child)) -> Capture {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        ready(&mut child);
        Capture {
            child: Some(child),
            what: what.to_owned(),
        }
    }

    /// `natm capture ARGS`, once it says its socket is open ("capturing on").
    fn natm(args: &[&str]) -> Capture {
        let mut cmd = Command::new(NATM);
        cmd.arg("capture").args(args);
        Capture::start(cmd, &format!("natm capture {}", args.join(" ")), |child| {
            let mut err = BufReader::new(child.stderr.as_mut().unwrap());
            let mut line = String::new();
            while err.read_line(&mut line).unwrap() > 0 && !line.contains("capturing on") {
                line.clear();
            }
            assert!(line.contains("capturing on"), "natm capture ended: {line}");
        })
    }

    /// SIGTERM, then the exit status and output (`stop` false: let it end by itself).
    fn finish(mut self, stop: bool) -> Output {
        let child = self.child.take().unwrap();
        if stop {
            let pid = Pid::from_child(&child);
            kill_process(pid, Signal::TERM).unwrap();
        }
        wait(child, &self.what)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits up to [`LIMIT`] for `child`, collecting its output; kills it after that.
fn wait(mut child: Child, what: &str) -> Output {
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(child.stdout.take().map(|r| Box::new(r) as _));
    let err = drain(child.stderr.take().map(|r| Box::new(r) as _));
    let until = Instant::now() + LIMIT;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`{what}` still ran after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// One call from A to B that moves `bytes` and is released, both sigds idle after.
fn call(a: &Sigd, b: &Sigd, bytes: usize) {
    let body: Vec<u8> = (0..bytes).map(|i| (i * 7 + i / 251) as u8).collect();
    let listener = tool::listen(b, &["cap", "--discard"]);
    let c = tool::natm(a, &["call", "+4420002:cap", "--size", "4000"], Some(body)).wait(LIMIT);
    assert!(c.status.success(), "call: {}", c.stderr);
    let l = listener.wait(LIMIT);
    assert!(l.status.success(), "listen: {}", l.stderr);
    // A sigd drops the call once the last RELEASE (COMPLETE) of the clearing has
    // crossed `lo`: a packet socket on `lo` holds it by then.
    for s in [a, b] {
        s.wait_no_calls();
    }
}

/// Sends a datagram across `lo` every 20 ms until `file`, written by a capture of
/// UDP on `lo` that flushes now and then (dumpcap does, every few hundred ms), holds
/// one: the capture is on, and has written everything that crossed `lo` before.
fn wait_captured(file: &Path, what: &str) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let marker = format!(
        "natm capture test: {what} of {} at {:?}",
        std::process::id(),
        std::time::SystemTime::now()
    );
    let until = Instant::now() + LIMIT;
    loop {
        tx.send_to(marker.as_bytes(), rx.local_addr().unwrap())
            .unwrap();
        let held = std::fs::read(file).unwrap_or_default();
        if held.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            return;
        }
        assert!(
            Instant::now() < until,
            "{}: no {what} datagram after {LIMIT:?}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// tshark's output for `args`; it must succeed.
fn tshark(args: &[&str]) -> String {
    let out = Command::new("tshark").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tshark {}: {}{text}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Frames per protocol path in `tshark -q -z io,phs` output ("atm" → 12, ...).
fn hierarchy(phs: &str) -> BTreeMap<String, u64> {
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut counts = BTreeMap::new();
    for line in phs.lines() {
        let Some((name, rest)) = line.split_once("frames:") else {
            continue;
        };
        let depth = name.len() - name.trim_start().len();
        path.retain(|(d, _)| *d < depth);
        path.push((depth, name.trim().to_owned()));
        let frames = rest.split_whitespace().next().unwrap().parse().unwrap();
        let key: Vec<&str> = path.iter().map(|(_, p)| p.as_str()).collect();
        counts.insert(key.join(":"), frames);
    }
    counts
}

/// No "Malformed" and no expert item but tshark's own known warnings.
fn assert_clean(verbose: &str, what: &str) {
    assert!(
        !verbose.contains("Malformed"),
        "{what}: Malformed\n{verbose}"
    );
    for line in verbose.lines().filter(|l| l.contains("[Expert Info")) {
        assert!(
            KNOWN_WARNINGS.iter().any(|w| line.contains(w)) && line.contains("(Warning/"),
            "{what}: unexpected expert item: {line}"
        );
    }
}

fn message_count(verbose: &str, message: &str) -> usize {
    verbose
        .lines()
        .filter(|l| l.trim() == format!("Message type: {message}"))
        .count()
}

fn path_in(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

#[test]
fn a_call_captured_as_atm_decodes_in_tshark() {
    if !root() {
        return;
    }
    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
    // Clear signalling, so that the capture shows Q.2931 (between sigds it is
    // Noise-encrypted by default, on VCI 31).
    let (a, b) = pair_clear(LINK, LINK);
    let sunatm = path_in(&a.dir, "call.pcap");
    let erf = path_in(&a.dir, "call-erf.pcap");
    let port_a = a.signalling.port().to_string();
    let s = Capture::natm(&[
        "-i",
        "lo",
        "-w",
        sunatm.to_str().unwrap(),
        "--seconds",
        "50",
    ]);
    let e = Capture::natm(&[
        "-i",
        "lo",
        "-w",
        erf.to_str().unwrap(),
        "--format",
        "erf",
        "--seconds",
        "50",
    ]);
    // Sigd A's signalling only, one line per frame, ended by --seconds.
    let lines = Capture::natm(&["-i", "lo", "--port", &port_a, "--seconds", "10"]);
    call(&a, &b, 200_000);

    for (cap, file) in [(s, &sunatm), (e, &erf)] {
        let out = cap.finish(true);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {err}", file.display());
        assert!(
            err.contains("natm capture: ") && err.contains(" signalling, "),
            "{err}"
        );
    }

    // SunATM: everything decodes with no preference set.
    let sv = tshark(&["-r", sunatm.to_str().unwrap(), "-V"]);
    assert_clean(&sv, "SunATM");
    for m in ["SETUP (0x05)", "CONNECT (0x07)", "RELEASE (0x4d)"] {
        assert!(message_count(&sv, m) >= 1, "no {m} in\n{sv}");
    }
    // The call is cleared one of two ways: one side's RELEASE answered by RELEASE
    // COMPLETE, or both ends closing at once — a clear collision (Q.2931 §5.4.5), in
    // which each side takes the other's RELEASE as the answer and no RELEASE COMPLETE
    // is sent.
    assert!(
        message_count(&sv, "RELEASE COMPLETE (0x5a)") >= 1
            || message_count(&sv, "RELEASE (0x4d)") >= 2,
        "the call was not cleared in\n{sv}"
    );
    let phs = hierarchy(&tshark(&[
        "-r",
        sunatm.to_str().unwrap(),
        "-q",
        "-z",
        "io,phs",
    ]));
    eprintln!("SunATM protocol hierarchy: {phs:?}");
    let n = |k: &str| phs.get(k).copied().unwrap_or(0);
    assert!(n("atm:sscop:q2931") >= 4, "{phs:?}");
    assert!(
        n("atm:sscop") > n("atm:sscop:q2931"),
        "SSCOP's own PDUs: {phs:?}"
    );
    // 200 kB in 4000-octet messages, AAL5 frames of raw traffic. How many frames
    // depends on the sender's batching: a UDP GSO run crosses the loopback unsplit, so
    // a packet socket sees it as one frame (as tcpdump does); all the octets are there.
    let data_octets: u64 = tshark(&[
        "-r",
        sunatm.to_str().unwrap(),
        "-Y",
        "atm and not sscop",
        "-T",
        "fields",
        "-e",
        "frame.len",
    ])
    .lines()
    .filter_map(|l| l.trim().parse::<u64>().ok())
    .sum();
    assert!(
        n("atm:data") >= 1 && data_octets >= 200_000,
        "{data_octets} octets of data frames: {phs:?}"
    );
    assert_eq!(n("atm"), n("atm:sscop") + n("atm:data"), "{phs:?}");
    assert!(sv.contains("AAL: AAL5") && sv.contains("AAL: Signalling AAL"));

    // ERF: the whole CPCS-PDU, so Wireshark checks the CRC of every frame. With
    // default preferences it guesses VCI 5 as signalling, and other VCs as LANE; with
    // erf.aal5_type "unspecified" it shows them as AAL5 data (and signalling as data).
    let erf = erf.to_str().unwrap();
    let ev = tshark(&["-r", erf, "-Y", "atm.vci == 5", "-V"]);
    assert_clean(&ev, "ERF signalling");
    for m in ["SETUP (0x05)", "CONNECT (0x07)", "RELEASE (0x4d)"] {
        assert!(message_count(&ev, m) >= 1, "no {m} in\n{ev}");
    }
    let ephs = hierarchy(&tshark(&["-r", erf, "-q", "-z", "io,phs"]));
    eprintln!("ERF protocol hierarchy (default preferences): {ephs:?}");
    // (The captures see all natm traffic on lo, a sigd's own too: counts are bounds.)
    let e = |k: &str| ephs.get(k).copied().unwrap_or(0);
    assert!(e("erf:atm:sscop:q2931") >= 4, "{ephs:?}");
    assert!(e("erf:atm:sscop") > e("erf:atm:sscop:q2931"), "{ephs:?}");
    let dv = tshark(&[
        "-r",
        erf,
        "-o",
        "erf.aal5_type:unspecified",
        "-Y",
        "atm.vci != 5",
        "-V",
    ]);
    assert_clean(&dv, "ERF data");
    let crcs: Vec<&str> = dv.lines().filter(|l| l.contains("AAL5 CRC:")).collect();
    // The same data frames as the SunATM capture's, each a whole CPCS-PDU.
    assert_eq!(
        crcs.len() as u64,
        n("atm:data"),
        "{} AAL5 data frames",
        crcs.len()
    );
    assert!(crcs.iter().all(|l| l.ends_with("(correct)")), "{crcs:?}");

    // The port filter kept sigd A's signalling and nothing else.
    let out = lines.finish(false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.lines().count() >= 6, "{text}");
    for l in text.lines() {
        assert!(l.contains(&format!(":{port_a} ")), "{l}");
        assert!(
            l.contains(" 0/5 signalling ") && l.contains(" SSCOP "),
            "{l}"
        );
    }
    for m in ["Q.2931 SETUP", "Q.2931 CONNECT", "Q.2931 RELEASE"] {
        assert!(text.contains(m), "no {m} in\n{text}");
    }
}

#[test]
fn the_lua_dissector_decodes_a_plain_capture() {
    if !root() {
        return;
    }
    let lua = concat!(env!("CARGO_MANIFEST_DIR"), "/contrib/wireshark/natm.lua");
    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
    // Clear signalling, so that the capture shows Q.2931 (between sigds it is
    // Noise-encrypted by default, on VCI 31).
    let (a, b) = pair_clear(LINK, LINK);
    let file = path_in(&a.dir, "plain.pcap");
    let mut cmd = Command::new("dumpcap");
    cmd.args([
        "-i",
        "lo",
        "-f",
        "udp",
        "-q",
        "-P",
        "-a",
        "duration:50",
        "-w",
    ])
    .arg(&file);
    // dumpcap says "Capturing on 'Loopback: lo'" a moment before its packet socket
    // is open: the file holding a datagram sent now says it is.
    let d = Capture::start(cmd, "dumpcap", |_| wait_captured(&file, "start"));
    call(&a, &b, 100_000);
    // dumpcap drops what its socket still holds when stopped.
    wait_captured(&file, "end");
    let out = d.finish(true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let path = file.to_str().unwrap();
    let lua_arg = format!("lua_script:{lua}");
    let with_lua = |extra: &[&str]| {
        let mut args = vec!["-r", path, "-X", &lua_arg];
        args.extend_from_slice(extra);
        tshark(&args)
    };
    // Without the dissector tshark sees only UDP payloads.
    let plain = tshark(&["-r", path, "-Y", "sscop"]);
    assert!(plain.trim().is_empty(), "{plain}");

    let kinds = with_lua(&[
        "-Y",
        "natm.vci",
        "-T",
        "fields",
        "-e",
        "natm.kind",
        "-e",
        "natm.vci",
    ]);
    let count = |kind: &str| kinds.lines().filter(|l| l.starts_with(kind)).count();
    assert!(count("1\t5") >= 6, "signalling frames on VCI 5:\n{kinds}");
    // 100 kB in 4000-octet messages: 25 TPDUs, in as many frames as the sender's
    // GSO runs made (a run crosses the loopback unsplit), all their octets there.
    assert!(count("0\t") >= 1, "data frames:\n{kinds}");
    let tpdus = with_lua(&[
        "-Y",
        "natm.tpdu.type == 0",
        "-T",
        "fields",
        "-e",
        "natm.tpdu.seq",
    ]);
    assert!(tpdus.lines().count() >= 1, "DATA TPDUs:\n{tpdus}");
    let data_octets: u64 = with_lua(&["-Y", "natm.kind == 0", "-T", "fields", "-e", "frame.len"])
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .sum();
    assert!(
        data_octets >= 100_000,
        "{data_octets} octets in data frames:\n{tpdus}"
    );
    let v = with_lua(&["-Y", "natm", "-V"]);
    assert_clean(&v, "Lua");
    for m in ["SETUP (0x05)", "CONNECT (0x07)", "RELEASE (0x4d)"] {
        assert!(message_count(&v, m) >= 1, "no {m} through natm.lua:\n{v}");
    }
    let phs = hierarchy(&with_lua(&["-q", "-z", "io,phs"]));
    eprintln!("plain capture with natm.lua: {phs:?}");
    // Lua dissectors show up as "_ws.lua.fake" between udp and natm.
    let q2931 = phs
        .iter()
        .find(|(k, _)| k.starts_with("eth:ip:udp:") && k.ends_with(":natm:sscop:q2931"));
    assert!(matches!(q2931, Some((_, &n)) if n >= 4), "{phs:?}");
}
