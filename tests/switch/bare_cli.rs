//! `natm call` and `natm listen` on bare AAL5 VCs (`transport=none`): through two
//! sigds (a file, a generated load, an echo, an oversize message refused), and on a
//! PVC through a `natm switch` `[[pvc]]`, with no signalling at all.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::sigd_support::tool::{data, json_line, listen, natm};
use crate::sigd_support::{pair, LINK};
use crate::switch_support::{free_addr, wait_udp_bound, SwitchProc};

const LIMIT: Duration = Duration::from_secs(30);

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("bare-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_file_and_a_load_cross_a_bare_call_byte_exact_with_sdu_counts() {
    let (a, b) = pair(LINK, LINK);
    let dir = scratch("file");
    let (src, dst) = (dir.join("in.bin"), dir.join("out.bin"));
    let body = data(400_000);
    std::fs::write(&src, &body).unwrap();
    let l = listen(
        &b,
        &[
            "files2",
            "--qos",
            "cbr:pcr=40Mbps,transport=none",
            "--json",
            "--out",
            dst.to_str().unwrap(),
        ],
    );
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:files2",
            "--qos",
            "cbr:pcr=40Mbps,transport=none",
            "--file",
            src.to_str().unwrap(),
            "--json",
            "--discard",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
    let got = std::fs::read(&dst).unwrap();
    assert!(
        got == body,
        "{} of {} bytes, not the same",
        got.len(),
        body.len()
    );
    let cj = json_line(&c.stdout);
    let lj = json_line(&l.stdout);
    // The default --size on a bare VC is its max_sdu: 9188 bytes per SDU.
    let sdus = body.len().div_ceil(9188) as u64;
    assert_eq!(cj["bare"]["sdus_sent"], sdus, "{cj}");
    assert_eq!(lj["bare"]["sdus_received"], sdus, "{lj}");
    assert_eq!(lj["bytes_received"], body.len() as u64, "{lj}");
    assert_eq!(cj["srtt_us"], serde_json::Value::Null, "no ACKs: {cj}");
    assert_eq!(cj["reserved_bps"], 40_000_000u64, "{cj}");
    let _ = std::fs::remove_dir_all(&dir);

    // A generated load, one way; the listener counts and discards.
    let l = listen(&b, &["sink", "--discard", "--json"]);
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:sink",
            "--qos",
            "cbr:pcr=40Mbps,transport=none",
            "--bytes",
            "2MB",
            "--size",
            "8KiB",
            "--json",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
    let (cj, lj) = (json_line(&c.stdout), json_line(&l.stdout));
    assert_eq!(cj["bytes_sent"], 2_000_000u64, "{cj}");
    assert_eq!(cj["bare"]["sdus_sent"], 2_000_000u64.div_ceil(8192), "{cj}");
    assert_eq!(lj["bytes_received"], 2_000_000u64, "{lj}");
    assert_eq!(lj["bare"]["dropped_queue_full"], 0u64, "{lj}");
}

#[test]
fn an_echo_listener_returns_stdin_over_a_bare_call_and_text_shows_sdus() {
    let (a, b) = pair(LINK, LINK);
    let body = data(120_000);
    let l = listen(&b, &["echo", "--echo", "--qos", "ubr:transport=none"]);
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:echo",
            "--qos",
            "ubr:transport=none",
            "--size",
            "4000",
        ],
        Some(body.clone()),
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    assert!(c.stdout == body, "{} bytes came back", c.stdout.len());
    // Each read of stdin is one message, so the count is the pipe's; every SDU sent
    // comes back as one.
    let line = c
        .stderr
        .lines()
        .find(|l| l.starts_with("bare AAL5 VC (transport=none): SDUs "))
        .unwrap_or_else(|| panic!("{}", c.stderr));
    let n: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(n[5], n[7].trim_end_matches(';'), "{line}");
    assert!(
        line.ends_with("bytes 120000 sent, 120000 received"),
        "{line}"
    );
    assert!(
        c.stderr.contains("no RTT or retransmissions"),
        "{}",
        c.stderr
    );
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
}

#[test]
fn an_oversize_message_and_a_mismatched_listener_are_refused() {
    let (a, b) = pair(LINK, LINK);
    let l = listen(&b, &["x", "--discard", "--keep"]);
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:x",
            "--qos",
            "ubr:transport=none,max_sdu=1000",
            "--size",
            "2000",
            "--bytes",
            "5000",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(!c.status.success());
    assert!(
        c.stderr
            .contains("message of 2000 bytes exceeds the agreed maximum of 1000 bytes"),
        "{}",
        c.stderr
    );
    drop(l);
    // A listener that takes natm's transport turns a bare call away (cause 73).
    let l = listen(&b, &["natm", "--qos", "ubr", "--discard"]);
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:natm",
            "--qos",
            "ubr:transport=none",
            "--bytes",
            "10",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(!c.status.success());
    assert!(c.stderr.contains("cause 73"), "{}", c.stderr);
    drop(l);
}

/// `--ttcp-marks` frames a run as ttcp does on a datagram socket (what `ttcp_atm -r
/// -a` times and ends on): one 4-octet SDU before the data and four after, each its
/// own SDU; on natm's own transport it is refused before any call.
#[test]
fn ttcp_marks_frame_a_bare_run_and_need_a_bare_call() {
    let (a, b) = pair(LINK, LINK);
    let dir = scratch("marks");
    let dst = dir.join("out.bin");
    let qos = "cbr:pcr=40Mbps,transport=none";
    let l = listen(
        &b,
        &[
            "marks",
            "--qos",
            qos,
            "--json",
            "--out",
            dst.to_str().unwrap(),
        ],
    );
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:marks",
            "--qos",
            qos,
            "--bytes",
            "20000",
            "--size",
            "8192",
            "--ttcp-marks",
            "--json",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
    let cj = json_line(&c.stdout);
    let lj = json_line(&l.stdout);
    // 3 data SDUs (8192, 8192, 3616) between 1 + 4 marks.
    assert_eq!(lj["bare"]["sdus_received"], 8u64, "{lj}");
    assert_eq!(cj["bare"]["sdus_sent"], 8u64, "{cj}");
    let got = std::fs::read(&dst).unwrap();
    let mut want = b"ttcp".to_vec();
    for n in [8192, 8192, 3616] {
        want.extend((0..n).map(|i| (i % 251) as u8));
    }
    want.extend(b"ttcpttcpttcpttcp");
    assert!(got == want, "{} octets, not the marked run", got.len());
    let _ = std::fs::remove_dir_all(&dir);

    let c = natm(
        &a,
        &[
            "call",
            "+4420002:marks",
            "--qos",
            "ubr",
            "--ttcp-marks",
            "--bytes",
            "10",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(!c.status.success());
    assert!(
        c.stderr.contains("--ttcp-marks frames bare SDUs"),
        "{}",
        c.stderr
    );
}

/// `natm ARGS` with no sigd (a PVC needs none).
fn tool(args: &[&str], stdin: Option<Vec<u8>>) -> std::process::Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(d) = stdin {
        let mut w = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let _ = w.write_all(&d);
        });
    }
    child
}

/// A PVC listener, returned once it has opened its VC (its first line on stderr):
/// before that, the switch would send its frames to a closed port.
fn pvc_listener(args: &[&str]) -> std::process::Child {
    use std::io::BufRead;
    let mut child = tool(args, None);
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let first = rx
        .recv_timeout(LIMIT)
        .expect("the listener says it is receiving");
    assert!(first.contains("receiving on pvc"), "{first}");
    child
}

/// Wait up to `LIMIT`; killed (and the test failed) if still running.
fn finish(child: std::process::Child, what: &str) -> std::process::Output {
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg(id.to_string()).status();
            panic!("{what} still ran after {LIMIT:?}");
        }
    }
}

#[test]
fn a_bare_pvc_through_a_switch_carries_a_file_and_an_echo_byte_exact() {
    let (ha, hb) = (free_addr(), free_addr());
    let port = |name: &str, peer: std::net::SocketAddr| {
        format!(
            "[[port]]\nname = {name:?}\nbind = \"{}\"\npeer = \"{peer}\"\nmode = \"frame\"\nline_rate = 1000000000\n",
            free_addr()
        )
    };
    // A bare VC has no error control, so every frame must get through the switch.
    // The switch's default queue of 256 cells for the VC holds 5 ms of the calls'
    // 20 Mbit/s: a switch process descheduled longer than that under CI load
    // dropped 168 cells (two SDUs). 4,096 cells hold 80 ms.
    let toml = port("a", ha)
        + &port("b", hb)
        + "[[pvc]]\nfrom = \"a:0.100\"\nto = \"b:2.200\"\nduplex = true\nbuffer = 4096\n";
    let sw = SwitchProc::start("bare-pvc", &toml);
    let (sa, sb) = (sw.ports["a"].to_string(), sw.ports["b"].to_string());
    let (ha, hb) = (ha.to_string(), hb.to_string());
    let dir = scratch("pvc");
    let (src, dst) = (dir.join("in.bin"), dir.join("out.bin"));
    let body = data(250_000);
    std::fs::write(&src, &body).unwrap();

    // One way: a file, written out by the far end, which stops 1 s after the last SDU.
    let l = tool(
        &[
            "listen",
            "--pvc",
            "2.200",
            "--bind",
            &hb,
            "--via",
            &sb,
            "--idle",
            "1s",
            "--json",
            "--out",
            dst.to_str().unwrap(),
        ],
        None,
    );
    wait_udp_bound(hb.parse().unwrap());
    let c = finish(
        tool(
            &[
                "call",
                "--pvc",
                "0.100",
                "--via",
                &sa,
                "--bind",
                &ha,
                "--file",
                src.to_str().unwrap(),
                "--size",
                "4000",
                "--discard",
                "--idle",
                "200ms",
                // Shaped: an unshaped burst would overrun the switch's 256-cell queue
                // for the VC, as UBR may.
                "--qos",
                "cbr:pcr=20Mbps,transport=none",
            ],
            None,
        ),
        "natm call --pvc",
    );
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    let l = finish(l, "natm listen --pvc");
    assert!(l.status.success(), "{}", String::from_utf8_lossy(&l.stderr));
    let got = std::fs::read(&dst).unwrap();
    assert!(
        got == body,
        "{} of {} bytes, not the same\ncall: {}\nswitch: {}",
        got.len(),
        body.len(),
        String::from_utf8_lossy(&c.stderr),
        sw.stat()
    );
    let lj = json_line(&l.stdout);
    assert_eq!(
        lj["bare"]["sdus_received"],
        body.len().div_ceil(4000) as u64,
        "{lj}"
    );
    assert_eq!(lj["peer"], "pvc 2.200", "{lj}");

    // Both ways: the far end echoes every SDU back on the duplex PVC.
    // The echoes are shaped as the calls are: a loaded listener echoes what it read in
    // one burst, and unshaped (UBR, the --pvc default) a burst of ten 1,500-byte SDUs
    // overran the switch's queue for the VC, as UBR may (a loaded CI run lost four
    // SDUs there with the default 256 cells).
    let l = pvc_listener(&[
        "listen",
        "--pvc",
        "2.200",
        "--bind",
        &hb,
        "--via",
        &sb,
        "--idle",
        "5s",
        "--echo",
        "--qos",
        "cbr:pcr=20Mbps,transport=none",
    ]);
    let small = data(60_000);
    let c = finish(
        tool(
            &[
                "call",
                "--pvc",
                "0.100",
                "--via",
                &sa,
                "--bind",
                &ha,
                "--size",
                "1500",
                // A bare VC has no end of data: the caller stops after this long
                // without an echo. On a loaded machine (both CPUs busy, a second
                // suite beside) echoes came more than 500 ms apart.
                "--idle",
                "3s",
                "--qos",
                "cbr:pcr=20Mbps,transport=none",
            ],
            Some(small.clone()),
        ),
        "natm call --pvc (echo)",
    );
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    assert!(c.stdout == small, "{} bytes came back", c.stdout.len());
    let l = finish(l, "natm listen --pvc --echo");
    assert!(l.status.success(), "{}", String::from_utf8_lossy(&l.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
