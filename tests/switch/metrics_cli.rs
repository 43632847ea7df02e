//! `natm sigd --metrics` and `natm switch --metrics` (issue 32) as a user meets them:
//! real daemons, a call set up or frames sent through the switch, `/metrics` scraped
//! over TCP, the text format checked line by line, and the counters moved by what
//! was done. A flood of scrape connections and a slow-loris neither stop signalling
//! and forwarding nor keep a normal scrape out for long.

use natm::ulib::Wait;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sigd_support::{pair, LINK};
use crate::switch_support::{free_addr, SwitchProc};
use natm_proto::wire::vcframe;

/// A loopback TCP port free a moment ago, outside the ephemeral range.
fn free_tcp() -> SocketAddr {
    crate::sigd_support::free_port()
}

/// One HTTP exchange: the status code, the headers (names lowercased), the body.
fn http(
    addr: SocketAddr,
    request: &[u8],
) -> std::io::Result<(u16, HashMap<String, String>, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    if raw.is_empty() {
        return Err(std::io::Error::other("closed without a response"));
    }
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap();
    assert!(status.starts_with("HTTP/1.1 "), "{status}");
    let code = status[9..12].parse().unwrap();
    let headers: HashMap<String, String> = lines
        .map(|l| {
            let (k, v) = l.split_once(": ").expect("name: value");
            (k.to_ascii_lowercase(), v.to_owned())
        })
        .collect();
    assert_eq!(headers["content-length"], body.len().to_string());
    assert_eq!(headers["connection"], "close");
    Ok((code, headers, body.to_owned()))
}

const GET: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n";

/// `GET /metrics`: 200 with the 0.0.4 content type; the samples, strictly parsed.
fn scrape(addr: SocketAddr) -> Samples {
    let (code, headers, body) = http(addr, GET).unwrap_or_else(|e| panic!("scrape {addr}: {e}"));
    assert_eq!(code, 200, "{body}");
    assert!(
        headers["content-type"].starts_with("text/plain; version=0.0.4"),
        "{headers:?}"
    );
    parse(&body)
}

/// Samples by `name{labels}` exactly as exposed.
struct Samples(HashMap<String, f64>, String);

impl Samples {
    fn get(&self, key: &str) -> f64 {
        *self
            .0
            .get(key)
            .unwrap_or_else(|| panic!("no sample {key} in:\n{}", self.1))
    }
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || (colon && f == ':'))
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || (colon && x == ':'))
}

/// The Prometheus text format, version 0.0.4, checked strictly: every line is a HELP,
/// a TYPE (counter or gauge) or a sample of the family they announced, in that
/// order; names and label names are well formed, label values properly quoted and
/// escaped, values numbers; counters end `_total`; no family twice; no sample
/// twice; every name starts `natm_sigd_` or `natm_switch_`.
fn parse(text: &str) -> Samples {
    assert!(text.ends_with('\n'), "the last line ends: {text:?}");
    let mut samples = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    let mut family: Option<(String, String)> = None;
    let mut help: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, doc) = rest.split_once(' ').expect("HELP name text");
            assert!(is_name(name, true) && !doc.is_empty(), "{line}");
            assert!(
                name.starts_with("natm_sigd_") || name.starts_with("natm_switch_"),
                "{line}"
            );
            assert!(seen.insert(name.to_owned()), "family twice: {line}");
            help = Some(name.to_owned());
            family = None;
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert_eq!(Some(name), help.as_deref(), "TYPE after its HELP: {line}");
            assert!(kind == "counter" || kind == "gauge", "{line}");
            if kind == "counter" {
                assert!(name.ends_with("_total"), "{line}");
            }
            family = Some((name.to_owned(), kind.to_owned()));
        } else {
            assert!(!line.starts_with('#'), "no other comment: {line}");
            let (name, _) = family.as_ref().expect("a sample after its TYPE");
            let (series, value) = line.rsplit_once(' ').expect("series value");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
            assert!(value.is_finite() && value >= 0.0, "{line}");
            let labels = series
                .strip_prefix(name.as_str())
                .expect("the family's name");
            if !labels.is_empty() {
                check_labels(labels, line);
            }
            assert!(
                samples.insert(series.to_owned(), value).is_none(),
                "twice: {line}"
            );
        }
    }
    Samples(samples, text.to_owned())
}

/// `{a="x",b="y\"z"}`.
fn check_labels(labels: &str, line: &str) {
    let inner = labels
        .strip_prefix('{')
        .and_then(|l| l.strip_suffix('}'))
        .unwrap_or_else(|| panic!("labels in braces: {line}"));
    let mut rest = inner;
    loop {
        let (name, after) = rest.split_once("=\"").unwrap_or_else(|| panic!("{line}"));
        assert!(is_name(name, false), "label name: {line}");
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => {
                    let e = chars.next().map(|(_, c)| c);
                    assert!(matches!(e, Some('\\' | '"' | 'n')), "escape: {line}");
                }
                Some((i, '"')) => break i,
                Some((_, '\n')) | None => panic!("unterminated label value: {line}"),
                Some(_) => {}
            }
        };
        rest = &after[end + 1..];
        if rest.is_empty() {
            return;
        }
        rest = rest.strip_prefix(',').unwrap_or_else(|| panic!("{line}"));
    }
}

/// What the slow-loris of [`flood`] was answered, each time the server cut it off.
#[derive(Default)]
struct Cuts {
    /// 408: its request was not whole by the server's deadline.
    timed_out: AtomicUsize,
    /// 503: every slot was taken.
    busy: AtomicUsize,
    /// Anything else (a 200 would mean its endless request was served).
    other: AtomicUsize,
    /// How long its first connection answered 408 had lasted, ms.
    first_timeout_ms: AtomicUsize,
}

/// A flood on `addr` until `stop`: 200 connections opened at once from 4 threads
/// and held silent, and a slow-loris that sends a request that never ends (a
/// request line, then header after header) one octet every 100 ms, connecting again
/// whenever the server cuts it off. The join gives how many connections were held.
fn flood(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    cuts: Arc<Cuts>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let holders: Vec<_> = (0..4)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let held: Vec<_> = (0..50)
                        .filter_map(|_| TcpStream::connect(addr).ok())
                        .collect();
                    while !stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    held.len()
                })
            })
            .collect();
        let endless = b"GET /metrics HTTP/1.1\r\n"
            .iter()
            .chain(b"X-Slow: loris\r\n".iter().cycle());
        while !stop.load(Ordering::SeqCst) {
            let Ok(mut s) = TcpStream::connect(addr) else {
                continue;
            };
            let opened = Instant::now();
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let mut buf = [0u8; 256];
            for &b in endless.clone() {
                if stop.load(Ordering::SeqCst) || s.write_all(&[b]).is_err() {
                    break;
                }
                match s.read(&mut buf) {
                    Ok(n) if n >= 12 => {
                        let kind = match &buf[9..12] {
                            b"408" => {
                                let ms = opened.elapsed().as_millis() as usize;
                                let _ = cuts.first_timeout_ms.compare_exchange(
                                    0,
                                    ms,
                                    Ordering::SeqCst,
                                    Ordering::SeqCst,
                                );
                                &cuts.timed_out
                            }
                            b"503" => &cuts.busy,
                            _ => &cuts.other,
                        };
                        kind.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                    Ok(_) => break,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        holders.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

/// Waits (up to 15 s) until the slow-loris has been cut off by the server's request
/// deadline at least once; checks it never got anything but 408 and 503.
fn slow_loris_timed_out(cuts: &Cuts) {
    let end = Instant::now() + Duration::from_secs(15);
    while cuts.timed_out.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < end, "the slow-loris was never timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cuts.other.load(Ordering::SeqCst), 0, "only 408 and 503");
    let ms = cuts.first_timeout_ms.load(Ordering::SeqCst);
    assert!(ms >= 1900, "cut at the 2 s deadline, not before: {ms} ms");
}

/// A scrape that succeeds within 10 s (a busy server answers 503, or a connection
/// is cut while the flood holds the slots).
fn scrape_through(addr: SocketAddr) -> Samples {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        match http(addr, GET) {
            Ok((200, _, body)) => return parse(&body),
            Ok((503, _, _)) | Err(_) => {}
            Ok((code, _, body)) => panic!("{code}: {body}"),
        }
        assert!(Instant::now() < end, "no scrape in 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigd_metrics_count_a_call() {
    let m = free_tcp();
    let (a, b) = pair(&format!("metrics = \"{m}\"\n{LINK}"), LINK);
    let before = scrape(m);
    assert_eq!(before.get("natm_sigd_calls_setup_total"), 0.0);
    assert_eq!(before.get("natm_sigd_calls{state=\"active\"}"), 0.0);
    let hb = b.host();
    let l = hb.bind("echo", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let c = l
            .next_call(Wait::For(Duration::from_secs(10)))
            .unwrap()
            .accept()
            .unwrap();
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            c.send(&m, Wait::Block).unwrap();
        }
    });
    let ha = a.host();
    let c = ha.connect("+4420002:echo", "reliable").unwrap();
    c.send(b"ping", Wait::Block).unwrap();
    assert_eq!(
        c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
        b"ping"
    );
    let during = scrape(m);
    assert_eq!(during.get("natm_sigd_calls_setup_total"), 1.0);
    assert_eq!(during.get("natm_sigd_calls{state=\"active\"}"), 1.0);
    assert_eq!(during.get("natm_sigd_calls_released_total"), 0.0);
    assert_eq!(
        during.get(&format!("natm_sigd_peer_up{{peer=\"{}\"}}", b.signalling)),
        1.0
    );
    assert_eq!(
        during.get(&format!(
            "natm_sigd_peer_calls{{peer=\"{}\"}}",
            b.signalling
        )),
        1.0
    );
    assert!(during.get("natm_sigd_app_connections_total") >= 1.0);
    assert!(during.get("natm_sigd_vcis_in_use") >= 1.0);
    // natm stat says the same.
    assert_eq!(a.stat()["counters"]["calls_setup"], 1);
    c.close();
    c.flush(Duration::from_secs(5)).unwrap();
    drop(c);
    t.join().unwrap();
    a.wait_no_calls();
    let after = scrape(m);
    assert_eq!(after.get("natm_sigd_calls_setup_total"), 1.0);
    assert_eq!(after.get("natm_sigd_calls_released_total"), 1.0);
    assert_eq!(after.get("natm_sigd_calls{state=\"active\"}"), 0.0);
}

/// Two frame ports joined by a PVC (a:0.100 → b:2.200), `/metrics` on `m`.
fn frame_switch(name: &str, m: SocketAddr) -> (UdpSocket, UdpSocket, SwitchProc) {
    let (a, b) = (
        UdpSocket::bind("127.0.0.1:0").unwrap(),
        UdpSocket::bind("127.0.0.1:0").unwrap(),
    );
    b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let port = |n: &str, peer: SocketAddr| {
        format!(
            "[[port]]\nname = {n:?}\nbind = \"{}\"\npeer = \"{peer}\"\nmode = \"frame\"\nline_rate = 1000000000\n",
            free_addr()
        )
    };
    let toml = format!("metrics = \"{m}\"\n")
        + &port("a", a.local_addr().unwrap())
        + &port("b", b.local_addr().unwrap())
        + "[[pvc]]\nfrom = \"a:0.100\"\nto = \"b:2.200\"\n";
    (a, b, SwitchProc::start(name, &toml))
}

/// `n` frames from `a` through the switch, each received at `b`.
fn send_frames(a: &UdpSocket, b: &UdpSocket, sw: &SwitchProc, n: usize) {
    let mut buf = [0u8; 2048];
    for i in 0..n {
        let mut d = vcframe::Repr::data(0, 100).to_bytes().to_vec();
        d.extend_from_slice(&[i as u8; 1000]);
        a.send_to(&d, sw.ports["a"]).unwrap();
        let got = b.recv(&mut buf).expect("the frame arrives");
        let (h, sdu) = vcframe::Repr::parse_bytes(&buf[..got]).unwrap();
        assert_eq!(((h.vpi, h.vci), sdu.len()), ((2, 200), 1000));
    }
}

#[test]
fn switch_metrics_count_frames_on_their_ports() {
    let m = free_tcp();
    let (a, b, sw) = frame_switch("metrics", m);
    let before = scrape(m);
    assert_eq!(
        before.get("natm_switch_port_frames_in_total{port=\"a\"}"),
        0.0
    );
    send_frames(&a, &b, &sw, 50);
    let s = scrape(m);
    assert_eq!(
        s.get("natm_switch_port_datagrams_in_total{port=\"a\"}"),
        50.0
    );
    assert_eq!(s.get("natm_switch_port_frames_in_total{port=\"a\"}"), 50.0);
    assert_eq!(s.get("natm_switch_port_frames_out_total{port=\"b\"}"), 50.0);
    assert_eq!(
        s.get("natm_switch_port_datagrams_out_total{port=\"b\"}"),
        50.0
    );
    assert_eq!(s.get("natm_switch_port_frames_out_total{port=\"a\"}"), 0.0);
    // 1000 octets and an AAL5 trailer: 21 cells a frame.
    assert_eq!(
        s.get("natm_switch_port_cells_in_total{port=\"a\"}"),
        50.0 * 21.0
    );
    assert_eq!(
        s.get("natm_switch_port_cells_dropped_total{port=\"b\",cause=\"queue_full\"}"),
        0.0
    );
    assert_eq!(s.get("natm_switch_vcs"), 1.0);
    // The stat file says the same.
    let st = sw.stat_until(|v| v["ports"][0]["stats"]["counters"]["frames_in"] == 50);
    assert_eq!(st["ports"][1]["stats"]["counters"]["frames_out"], 50);
    // Bad requests get their status, and the next scrape is served as ever.
    for (req, code) in [
        (&b"POST /metrics HTTP/1.1\r\n\r\n"[..], 405),
        (b"GET / HTTP/1.1\r\n\r\n", 404),
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", 400),
    ] {
        assert_eq!(http(m, req).unwrap().0, code);
    }
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    big.resize(8192, b'a');
    assert_eq!(http(m, &big).unwrap().0, 431);
    assert_eq!(
        scrape(m).get("natm_switch_port_frames_in_total{port=\"a\"}"),
        50.0
    );
}

#[test]
fn a_scrape_flood_leaves_signalling_and_a_scrape_through() {
    let m = free_tcp();
    let (a, b) = pair(&format!("metrics = \"{m}\"\n{LINK}"), LINK);
    let hb = b.host();
    let l = hb.bind("echo", "reliable").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let cuts = Arc::new(Cuts::default());
    let f = flood(m, stop.clone(), cuts.clone());
    // Signalling goes on during the flood: a call is set up and carries data, and
    // natm stat is answered.
    let t = std::thread::spawn(move || {
        let c = l
            .next_call(Wait::For(Duration::from_secs(10)))
            .unwrap()
            .accept()
            .unwrap();
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            c.send(&m, Wait::Block).unwrap();
        }
    });
    let ha = a.host();
    let c = ha.connect("+4420002:echo", "reliable").unwrap();
    c.send(b"during the flood", Wait::Block).unwrap();
    assert_eq!(
        c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
        b"during the flood"
    );
    assert_eq!(a.stat()["counters"]["calls_setup"], 1);
    // A normal scrape gets through while the slow-loris goes on, and the
    // slow-loris is cut off at the request deadline.
    let s = scrape_through(m);
    assert_eq!(s.get("natm_sigd_calls_setup_total"), 1.0);
    slow_loris_timed_out(&cuts);
    c.send(b"still", Wait::Block).unwrap();
    assert_eq!(
        c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap(),
        b"still"
    );
    stop.store(true, Ordering::SeqCst);
    assert_eq!(f.join().unwrap(), 200, "every flood connection was made");
    c.close();
    c.flush(Duration::from_secs(5)).unwrap();
    drop(c);
    t.join().unwrap();
    a.wait_no_calls();
    // And sigd is whole after it: scraped at once.
    let after = scrape(m);
    assert_eq!(after.get("natm_sigd_calls_setup_total"), 1.0);
    assert_eq!(after.get("natm_sigd_calls_released_total"), 1.0);
}

#[test]
fn a_scrape_flood_leaves_forwarding_and_a_scrape_through() {
    let m = free_tcp();
    let (a, b, sw) = frame_switch("flood", m);
    let stop = Arc::new(AtomicBool::new(false));
    let cuts = Arc::new(Cuts::default());
    let f = flood(m, stop.clone(), cuts.clone());
    send_frames(&a, &b, &sw, 100);
    let s = scrape_through(m);
    assert_eq!(
        s.get("natm_switch_port_frames_out_total{port=\"b\"}"),
        100.0
    );
    slow_loris_timed_out(&cuts);
    send_frames(&a, &b, &sw, 100);
    stop.store(true, Ordering::SeqCst);
    assert_eq!(f.join().unwrap(), 200, "every flood connection was made");
    assert_eq!(
        scrape(m).get("natm_switch_port_frames_out_total{port=\"b\"}"),
        200.0
    );
}

#[test]
fn an_address_without_its_host_is_refused() {
    for (args, what) in [
        (&["sigd", "--metrics", ":9464"][..], "sigd"),
        (&["sigd", "--metrics", "9464"][..], "sigd"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
            .args(args)
            .args([
                "--socket",
                "/nonexistent/natm-metrics-test.sock",
                "--tpdu-cost-ns",
                "1000",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what} {args:?} started");
        assert!(err.contains("give the host explicitly"), "{err}");
    }
    let dir = std::env::temp_dir().join(format!("natm-metrics-addr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("switch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[port]]\nname = \"a\"\nbind = \"{}\"\npeer = \"127.0.0.1:9\"\nmode = \"frame\"\n",
            free_addr()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["switch", "--metrics", ":9465", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the switch started");
    assert!(err.contains("give the host explicitly"), "{err}");
}
