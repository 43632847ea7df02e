//! The C API (issue 19): natm.h compiles as strict C99 and declares every symbol
//! libnatm.so exports; the C example, the readiness checks and the ported ttcp are
//! built with gcc against the static and the shared library and run, through a
//! sigd and in direct mode; the ported ttcp moves megabytes byte-exact.

mod sigd_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sigd_support::Sigd;

const CONF: &str = "addresses = [\"+4420001\"]\n";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn header_dir() -> PathBuf {
    root().join("crates/natm-capi/include")
}

/// The directory holding libnatm.a and libnatm.so, this test's profile's. A workspace
/// build (CI's) has built them; when they are missing or older than the C API's or the
/// library's sources (a narrow `cargo test --test capi` after a change), cargo builds
/// them now, in an environment of its own: the variables cargo gives a test process
/// would otherwise make it see the workspace's builds as stale.
fn lib_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let bin = PathBuf::from(env!("CARGO_BIN_EXE_natm"));
            let dir = bin.parent().unwrap().to_path_buf();
            let libs = ["libnatm.a", "libnatm.so"].map(|f| dir.join(f));
            let built = libs
                .iter()
                .map(|l| std::fs::metadata(l).and_then(|m| m.modified()).ok())
                .min()
                .flatten();
            let newest_source = [
                "crates/natm-capi",
                "crates/natm/src",
                "crates/natm-proto/src",
            ]
            .iter()
            .filter_map(|d| newest(&root().join(d)))
            .max();
            if built.is_none() || newest_source > built {
                let target = dir.parent().unwrap();
                let mut cmd =
                    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
                cmd.env_clear();
                for k in [
                    "PATH",
                    "HOME",
                    "CARGO_HOME",
                    "RUSTUP_HOME",
                    "RUSTUP_TOOLCHAIN",
                    "TMPDIR",
                ] {
                    if let Some(v) = std::env::var_os(k) {
                        cmd.env(k, v);
                    }
                }
                cmd.args(["build", "-q", "-p", "natm-capi", "--target-dir"])
                    .arg(target)
                    .current_dir(root());
                // The profile the tests were built with names their directory
                // (target/release, target/ci; target/debug is cargo's `dev`).
                match dir.file_name().unwrap().to_str().unwrap() {
                    "debug" => {}
                    profile => {
                        cmd.args(["--profile", profile]);
                    }
                }
                let st = cmd.status().expect("cargo runs");
                assert!(st.success(), "building natm-capi failed");
            }
            for l in &libs {
                assert!(l.exists(), "{} missing", l.display());
            }
            dir
        })
        .clone()
}

/// The newest modification time of a file under `dir`.
fn newest(dir: &Path) -> Option<std::time::SystemTime> {
    let mut best = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let t = if p.is_dir() {
            newest(&p)
        } else {
            e.metadata().and_then(|m| m.modified()).ok()
        };
        best = best.max(t);
    }
    best
}

#[derive(Clone, Copy, Debug)]
enum Link {
    Static,
    Shared,
}

/// Compile `src` (C99, every warning an error) into a per-test temporary directory.
fn cc(src: &Path, link: Link, out_dir: &Path) -> PathBuf {
    let lib = lib_dir();
    let stem = src.file_stem().unwrap().to_str().unwrap();
    let out = out_dir.join(format!("{stem}-{link:?}"));
    let mut cmd = Command::new("gcc");
    cmd.args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-I"])
        .arg(header_dir())
        .arg("-o")
        .arg(&out)
        .arg(src);
    match link {
        // The static library's own dependencies (`rustc --print native-static-libs`).
        Link::Static => {
            cmd.arg(lib.join("libnatm.a")).args([
                "-lgcc_s",
                "-lutil",
                "-lrt",
                "-lpthread",
                "-lm",
                "-ldl",
                "-lc",
            ]);
        }
        Link::Shared => {
            cmd.arg("-L")
                .arg(&lib)
                .arg("-lnatm")
                .arg(format!("-Wl,-rpath,{}", lib.display()));
        }
    }
    let o = cmd.output().expect("gcc runs");
    assert!(
        o.status.success(),
        "gcc {stem} ({link:?}) failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("natm-capi-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Run to completion within `limit` (killed after), output collected.
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let d = sigd_support::tool::spawn(cmd, None, format!("{cmd:?}")).wait(limit);
    Output {
        status: d.status,
        stdout: d.stdout,
        stderr: d.stderr.into_bytes(),
    }
}

fn ok(o: &Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{what} failed ({}):\n{text}", o.status);
    text
}

#[test]
fn the_header_is_strict_c99_and_cpp() {
    let dir = scratch("header");
    let src = dir.join("h.c");
    std::fs::write(
        &src,
        "#include \"natm.h\"\n#include \"natm_fore.h\"\nint main(void) { return NATM_OK + ATM_EBADF - 1; }\n",
    )
    .unwrap();
    let o = Command::new("gcc")
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
            "-I",
        ])
        .arg(header_dir())
        .arg(&src)
        .output()
        .expect("gcc runs");
    ok(&o, "gcc -std=c99 -pedantic on natm.h and natm_fore.h");
    if Command::new("g++").arg("--version").output().is_ok() {
        let cpp = dir.join("h.cc");
        std::fs::write(
            &cpp,
            "#include \"natm.h\"\n#include \"natm_fore.h\"\nint main() { return NATM_OK + ATM_EBADF - 1; }\n",
        )
        .unwrap();
        let o = Command::new("g++")
            .args([
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
                "-I",
            ])
            .arg(header_dir())
            .arg(&cpp)
            .output()
            .unwrap();
        ok(&o, "g++ on natm.h and natm_fore.h");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The functions libnatm.so exports whose names start with `prefix`.
fn exported(syms: &str, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = syms
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind == "T" && name.starts_with(prefix)).then(|| name.to_owned())
        })
        .collect();
    v.sort();
    v
}

/// The functions a header declares (`prefix…(` outside preprocessor lines and
/// comment lines).
fn declared(header: &str, prefix: &str) -> Vec<String> {
    let text = std::fs::read_to_string(header_dir().join(header)).unwrap();
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim_start().starts_with('*'))
        .filter(|l| !l.trim_start().starts_with("/*"))
        .filter_map(|l| {
            let at = l.find(prefix)?;
            let rest = &l[at..];
            let end = rest.find('(')?;
            let name = &rest[..end];
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
                .then(|| name.to_owned())
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// What natm.h declares (`name(` after a type) and what libnatm.so exports are the
/// same set of functions, and so are natm_fore.h's `atm_` functions: neither can
/// drift from the other.
#[test]
fn the_header_declares_exactly_what_the_library_exports() {
    let so = lib_dir().join("libnatm.so");
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("nm runs");
    let syms = ok(&o, "nm");
    let natm = exported(&syms, "natm_");
    assert!(natm.len() >= 20, "too few symbols found: {natm:?}");
    assert_eq!(
        natm,
        declared("natm.h", "natm_"),
        "libnatm.so exports (left) and natm.h declares (right) different functions"
    );
    let fore = exported(&syms, "atm_");
    assert!(fore.len() >= 15, "too few atm_ symbols found: {fore:?}");
    assert_eq!(
        fore,
        declared("natm_fore.h", "atm_"),
        "libnatm.so exports (left) and natm_fore.h declares (right) different atm_ functions"
    );
    // The library exports nothing of natm's own outside the natm_ and atm_ prefixes.
    let stray: Vec<&str> = syms
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind == "T" && name.contains("natm") && !name.starts_with("natm_")).then_some(name)
        })
        .collect();
    assert!(stray.is_empty(), "stray exports: {stray:?}");
}

#[test]
fn the_readiness_contract_holds_in_c_static_and_shared() {
    let dir = scratch("readiness");
    for link in [Link::Static, Link::Shared] {
        let exe = cc(&root().join("tests/capi/readiness.c"), link, &dir);
        let o = run(
            Command::new(&exe).env_remove("NATM_SIGD"),
            Duration::from_secs(60),
        );
        let text = ok(&o, &format!("readiness ({link:?})"));
        assert!(text.contains("all checks passed"), "{text}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_c_example_echoes_through_sigd_and_in_direct_mode() {
    let sigd = Sigd::start(CONF);
    let dir = scratch("echo");
    for link in [Link::Static, Link::Shared] {
        let exe = cc(&root().join("examples/c/echo.c"), link, &dir);
        let o = run(
            Command::new(&exe)
                .args(["echo", "+4420001:echo", "reliable", "150"])
                .env("NATM_SIGD", &sigd.socket),
            Duration::from_secs(60),
        );
        let text = ok(&o, &format!("echo through sigd ({link:?})"));
        assert!(text.contains("echoed 150 messages"), "{text}");
        assert!(text.contains("through sigd"), "{text}");
        assert!(text.contains("granted: reliable"), "{text}");
        let o = run(
            Command::new(&exe)
                .args(["127.0.0.1:0", "-", "reliable", "50"])
                .env_remove("NATM_SIGD"),
            Duration::from_secs(60),
        );
        let text = ok(&o, &format!("echo in direct mode ({link:?})"));
        assert!(text.contains("echoed 50 messages"), "{text}");
        assert!(text.contains("direct mode"), "{text}");
    }
    // A call nobody answers: the refusal's code, sigd's reason and the UNI cause.
    let exe = dir.join("echo-Shared");
    let o = run(
        Command::new(&exe)
            .args(["lonely", "+4420001:nobody", "reliable", "1"])
            .env("NATM_SIGD", &sigd.socket),
        Duration::from_secs(30),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("call refused") && err.contains("UNI cause 88"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The QoS and multipoint example: a guaranteed root sends to three leaves and
/// drops one half way (the others still receive everything), a VC's rate goes
/// 8 -> 4 -> 2 Mbit/s by set_qos and try_set_qos and the receiver's flags and events
/// follow, a raise beyond the bounds is NATM_EQOSBOUNDS; in direct mode (statically
/// linked) and through sigd (shared).
#[test]
fn the_qos_and_multipoint_example_runs_in_direct_mode_and_through_sigd() {
    let sigd = Sigd::start(CONF);
    let dir = scratch("mpqos");
    let src = root().join("examples/c/mpqos.c");
    for (link, mode) in [(Link::Static, "direct"), (Link::Shared, "+4420001")] {
        let exe = cc(&src, link, &dir);
        let o = run(
            Command::new(&exe).arg(mode).env("NATM_SIGD", &sigd.socket),
            Duration::from_secs(90),
        );
        let text = ok(&o, &format!("mpqos {mode} ({link:?})"));
        for want in [
            "leaf event: dropped leaf 1",
            "leaf 1 received 30 messages, the last #29",
            "leaf 2 received 60 messages, the last #59",
            "set_qos: now sending at 4000000 bit/s",
            "set_qos 16 Mbit/s: -15",
            "the peer now sends at 2000000 bit/s",
            "all checks passed",
        ] {
            assert!(text.contains(want), "mpqos {mode}: no {want:?} in\n{text}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Wait until `sigd` holds a listener on `sap` (the receiver `rx` put it there), or
/// fail with the receiver's own words if it exited.
fn wait_listening(sigd: &Sigd, sap: &str, rx: &mut std::process::Child) {
    let until = Instant::now() + Duration::from_secs(30);
    while sigd_support::tool::listeners(sigd, sap) == 0 {
        if let Some(st) = rx.try_wait().unwrap() {
            let mut e = String::new();
            std::io::Read::read_to_string(&mut rx.stderr.take().unwrap(), &mut e).unwrap();
            panic!("the ttcp receiver exited ({st}): {e}");
        }
        if Instant::now() > until {
            let _ = rx.kill();
            panic!("the ttcp receiver never listened on {sap}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The ported ttcp: receiver linked statically, transmitter against the shared
/// library, 4 MB from standard input to standard output through sigd, byte-exact;
/// then the pattern source and sink (-s) the other way round.
#[test]
fn ported_ttcp_moves_megabytes_byte_exact_through_sigd() {
    let sigd = Sigd::start(CONF);
    let dir = scratch("ttcp");
    let rx = cc(&root().join("examples/c/ttcp_natm.c"), Link::Static, &dir);
    let tx = cc(&root().join("examples/c/ttcp_natm.c"), Link::Shared, &dir);
    let data = sigd_support::tool::data(4 << 20);
    let input = dir.join("in.bin");
    let output = dir.join("out.bin");
    std::fs::write(&input, &data).unwrap();

    let mut receiver = Command::new(&rx)
        .args(["-r", "-p", "ttcpdata", "-l", "16384"])
        .env("NATM_SIGD", &sigd.socket)
        .stdout(std::fs::File::create(&output).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(&sigd, "ttcpdata", &mut receiver);
    let o = run(
        Command::new(&tx)
            .args(["-t", "-v", "-p", "ttcpdata", "+4420001"])
            .env("NATM_SIGD", &sigd.socket)
            .stdin(std::fs::File::open(&input).unwrap()),
        Duration::from_secs(60),
    );
    let t_text = ok(&o, "ttcp -t");
    assert!(
        t_text.contains(&format!("ttcp-t: {} bytes in", data.len())),
        "{t_text}"
    );
    let until = Instant::now() + Duration::from_secs(30);
    let st = loop {
        if let Some(st) = receiver.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > until {
            let _ = receiver.kill();
            panic!("the ttcp receiver did not finish");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut r_text = String::new();
    std::io::Read::read_to_string(&mut receiver.stderr.take().unwrap(), &mut r_text).unwrap();
    assert!(st.success(), "ttcp -r failed: {r_text}");
    assert!(
        r_text.contains(&format!("ttcp-r: {} bytes in", data.len())),
        "{r_text}"
    );
    let got = std::fs::read(&output).unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the received bytes differ from those sent");

    // Source and sink: 2,048 buffers of 8 KiB, the receiver now the shared build.
    let mut sink = Command::new(&tx)
        .args(["-r", "-s", "-p", "ttcpsink"])
        .env("NATM_SIGD", &sigd.socket)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(&sigd, "ttcpsink", &mut sink);
    let o = run(
        Command::new(&rx)
            .args(["-t", "-s", "-p", "ttcpsink", "+4420001"])
            .env("NATM_SIGD", &sigd.socket),
        Duration::from_secs(60),
    );
    ok(&o, "ttcp -t -s");
    let st = sink.wait().unwrap();
    let mut s_text = String::new();
    std::io::Read::read_to_string(&mut sink.stderr.take().unwrap(), &mut s_text).unwrap();
    assert!(st.success(), "ttcp -r -s failed: {s_text}");
    assert!(
        s_text.contains(&format!("ttcp-r: {} bytes in", 2048 * 8192)),
        "{s_text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The program before the port still builds and runs over kernel TCP: the diff in
/// docs/capi.md is between two working programs.
#[test]
fn the_original_socket_ttcp_runs_over_loopback_tcp() {
    let dir = scratch("ttcp-sock");
    let src = root().join("examples/c/ttcp.c");
    let exe = dir.join("ttcp");
    let o = Command::new("gcc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    ok(&o, "gcc ttcp.c");
    let port = sigd_support::free_port().port().to_string();
    let mut r = Command::new(&exe)
        .args(["-r", "-s", "-p", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let o = loop {
        let o = run(
            Command::new(&exe).args(["-t", "-s", "-n", "512", "-p", &port, "127.0.0.1"]),
            Duration::from_secs(30),
        );
        if o.status.success() || Instant::now() > until {
            break o;
        }
        // The receiver was not listening yet.
        std::thread::sleep(Duration::from_millis(50));
    };
    ok(&o, "ttcp -t over TCP");
    assert!(r.wait().unwrap().success());
    let mut text = String::new();
    std::io::Read::read_to_string(&mut r.stderr.take().unwrap(), &mut text).unwrap();
    assert!(
        text.contains(&format!("ttcp-r: {} bytes in", 512 * 8192)),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// docs/capi.md shows the port as it is: the unified diff between the two files.
#[test]
fn the_port_diff_in_the_docs_is_current() {
    let o = Command::new("diff")
        .args([
            "-u",
            "--label",
            "examples/c/ttcp.c",
            "--label",
            "examples/c/ttcp_natm.c",
            "examples/c/ttcp.c",
            "examples/c/ttcp_natm.c",
        ])
        .current_dir(root())
        .output()
        .expect("diff runs");
    assert_eq!(o.status.code(), Some(1), "the files should differ");
    let diff = String::from_utf8(o.stdout).unwrap();
    let doc = std::fs::read_to_string(root().join("docs/capi.md")).unwrap();
    assert!(
        doc.contains(&format!("```diff\n{diff}```")),
        "docs/capi.md's diff is stale: regenerate it with diff -u --label examples/c/ttcp.c --label examples/c/ttcp_natm.c"
    );
    let (added, removed) = diff.lines().fold((0, 0), |(a, r), l| {
        match (
            l.starts_with('+') && !l.starts_with("+++"),
            l.starts_with('-') && !l.starts_with("---"),
        ) {
            (true, _) => (a + 1, r),
            (_, true) => (a, r + 1),
            _ => (a, r),
        }
    });
    assert!(
        doc.contains(&format!("adds {added} lines and removes {removed}")),
        "docs/capi.md's line counts are stale: {added} added, {removed} removed"
    );
}

/// The Python binding (`python/natm.py`, ctypes over libnatm.so): messages both
/// ways, a `select()` on the receive descriptor, the end of data and typed errors, in
/// direct mode and through sigd.
#[test]
fn the_python_binding_works_in_direct_mode_and_through_sigd() {
    let so = lib_dir().join("libnatm.so");
    let sigd = Sigd::start(CONF);
    for call in [None, Some("+4420001:pyecho")] {
        let mut cmd = Command::new("python3");
        cmd.arg("check_natm.py")
            .args(call)
            .current_dir(root().join("python"))
            .env("NATM_LIB", &so)
            .env("NATM_SIGD", &sigd.socket);
        let o = run(&mut cmd, Duration::from_secs(60));
        let text = ok(&o, &format!("python3 check_natm.py {call:?}"));
        assert!(text.contains("all checks passed"), "{text}");
    }
}

/// A program written to seed 002's FORE API (tests/capi/fore_echo.c), compiled
/// against natm_fore.h: its server (statically linked) binds a SAP, listens,
/// accepts and echoes; its client (shared) sends 32 PDUs of 1 to 9,188 bytes and
/// checks each comes back intact, then meets the refusals a FORE program handles (a
/// SAP nobody is bound to, a call the server rejects, AAL 3/4, a PDU over the MTU)
/// by their codes, makes a simplex call whose callee cannot send, and runs a
/// multicast call with a party dropped half way.
#[test]
fn a_fore_api_program_echoes_pdus_and_sees_refusals_through_sigd() {
    let sigd = Sigd::start(CONF);
    let dir = scratch("fore");
    let src = root().join("tests/capi/fore_echo.c");
    let srv = cc(&src, Link::Static, &dir);
    let cli = cc(&src, Link::Shared, &dir);
    let dev = sigd.socket.to_str().unwrap().to_owned();
    let mut server = Command::new(&srv)
        .args(["server", &dev, "5001"])
        .env_remove("NATM_SIGD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The server binds 5001, 5002 and 5003 in that order.
    wait_listening(&sigd, "5003", &mut server);
    let o = run(
        Command::new(&cli)
            .args(["client", &dev, "+4420001", "5001"])
            .env_remove("NATM_SIGD"),
        Duration::from_secs(90),
    );
    if !o.status.success() {
        // The server's side of what went wrong: its output, killed if still running.
        let _ = server.kill();
        let s = server.wait_with_output().unwrap();
        panic!(
            "fore_echo client failed ({}):\n{}{}\nthe server:\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            String::from_utf8_lossy(&s.stdout),
            String::from_utf8_lossy(&s.stderr)
        );
    }
    let text = ok(&o, "fore_echo client");
    for want in [
        "ok: atm_send on a bad descriptor: ATM_EBADF",
        "ok: atm_open of a device with no sigd: ATM_ENODEV",
        "ok: the granted peak is the 20,000 kbit/s asked for",
        "ok: 32 PDUs of 1 to 9188 bytes echoed intact (98004 bytes)",
        "ok: a 9,189-byte PDU: ATM_EMSGSIZE",
        "ok: the same PDU whole into a larger buffer",
        "ok: a call to a SAP nobody is bound to: ATM_ENOSAP, UNI cause 88",
        "ok: a call the server rejects with cause 21: ATM_EREFUSED, cause 21",
        "ok: AAL 3/4: ATM_ENOTSUP",
        "ok: atm_recv on a simplex caller: ATM_ESTATE",
        "all checks passed",
    ] {
        assert!(
            text.contains(want),
            "fore_echo client: no {want:?} in\n{text}"
        );
    }
    let until = Instant::now() + Duration::from_secs(30);
    let st = loop {
        if let Some(st) = server.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > until {
            let _ = server.kill();
            panic!("the FORE server did not finish");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut s_out = String::new();
    std::io::Read::read_to_string(&mut server.stdout.take().unwrap(), &mut s_out).unwrap();
    std::io::Read::read_to_string(&mut server.stderr.take().unwrap(), &mut s_out).unwrap();
    assert!(st.success(), "fore_echo server failed:\n{s_out}");
    for want in [
        "server: call 1 from +4420001, peak 20000 kbit/s, aal 5",
        // The 32 PDUs and the one the client took into a larger buffer.
        "server: echoed 33 PDUs",
        "server: atm_send on a simplex callee: ATM_ESTATE",
        "server: the simplex call brought 5 PDUs",
        "server: rejected call 1 with cause 21",
        "server: party 0 received 10 PDUs",
        "server: done",
    ] {
        assert!(
            s_out.contains(want),
            "fore_echo server: no {want:?} in\n{s_out}"
        );
    }
    // The dropped party got at most the five PDUs sent before its drop, in order
    // (the server checks the order): all five normally; fewer on a loaded machine,
    // where the drop can overtake its accept.
    let party1 = s_out
        .lines()
        .find_map(|l| l.strip_prefix("server: party 1 received "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("fore_echo server: no count for party 1 in\n{s_out}"));
    assert!(
        party1 <= 5,
        "party 1 received {party1} PDUs after its drop\n{s_out}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
