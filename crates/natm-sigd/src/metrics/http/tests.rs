use super::*;

#[test]
fn a_get_of_metrics_is_served() {
    assert_eq!(
        route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
        Route::Metrics
    );
    assert_eq!(route(b"GET /metrics HTTP/1.0\r\n\r\n"), Route::Metrics);
    assert_eq!(route(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n"), Route::Metrics);
}

#[test]
fn half_a_request_waits_for_the_rest() {
    assert_eq!(route(b""), Route::Incomplete);
    assert_eq!(route(b"GET /metr"), Route::Incomplete);
    assert_eq!(
        route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"),
        Route::Incomplete
    );
}

#[test]
fn bad_requests_get_their_status() {
    let refused = |r: &[u8]| match route(r) {
        Route::Refuse(x) => x.status().0,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(r)),
    };
    assert_eq!(refused(b"POST /metrics HTTP/1.1\r\n\r\n"), 405);
    assert_eq!(refused(b"HEAD /metrics HTTP/1.1\r\n\r\n"), 405);
    assert_eq!(refused(b"GET / HTTP/1.1\r\n\r\n"), 404);
    assert_eq!(refused(b"GET /metrics/ HTTP/1.1\r\n\r\n"), 404);
    assert_eq!(
        refused(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"),
        400
    );
    assert_eq!(refused(b"\0\0\0\0\r\n\r\n"), 400);
    assert_eq!(refused(b"GET /metrics SPDY/3\r\n\r\n"), 400);
    let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    long.resize(MAX_REQUEST, b'a');
    assert_eq!(refused(&long), 431);
    let mut many = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for i in 0..MAX_HEADERS + 1 {
        many.extend_from_slice(format!("X{i}: y\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(refused(&many), 431);
}

#[test]
fn responses_say_what_they_carry() {
    let ok = String::from_utf8(metrics_response("a 1\n")).unwrap();
    assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    assert!(
        ok.contains("\r\nContent-Type: text/plain; version=0.0.4"),
        "{ok}"
    );
    assert!(ok.contains("\r\nContent-Length: 4\r\n"), "{ok}");
    assert!(ok.ends_with("\r\n\r\na 1\n"), "{ok}");
    let no = String::from_utf8(Refusal::MethodNotAllowed.response()).unwrap();
    assert!(
        no.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{no}"
    );
    assert!(no.contains("\r\nAllow: GET\r\n"), "{no}");
}

#[test]
fn an_address_needs_its_host() {
    assert!(parse_addr("127.0.0.1:9464").is_ok());
    assert!(parse_addr("[::1]:9464").is_ok());
    assert!(
        parse_addr("0.0.0.0:9464").is_ok(),
        "explicit: the operator's choice"
    );
    for bad in [":9464", "9464", "localhost:9464", "127.0.0.1", ""] {
        let e = parse_addr(bad).unwrap_err();
        assert!(e.contains("give the host explicitly"), "{bad}: {e}");
    }
}

/// A server on its own poll, driven as a daemon's loop drives it.
struct Loop {
    poll: mio::Poll,
    server: MetricsServer,
    renders: usize,
}

impl Loop {
    fn new() -> Loop {
        let poll = mio::Poll::new().unwrap();
        let server =
            MetricsServer::bind("127.0.0.1:0".parse().unwrap(), poll.registry(), Token(10))
                .unwrap();
        Loop {
            poll,
            server,
            renders: 0,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// One turn: poll (at most `wait`), handle the events, then the timeouts.
    fn turn(&mut self, wait: Duration) {
        let mut events = mio::Events::with_capacity(64);
        let wait = self.server.poll_timeout().map_or(wait, |t| {
            t.saturating_duration_since(Instant::now()).min(wait)
        });
        self.poll.poll(&mut events, Some(wait)).unwrap();
        for ev in events.iter() {
            assert!(self.server.owns(ev.token()));
            let renders = &mut self.renders;
            self.server
                .handle_event(ev.token(), self.poll.registry(), Instant::now(), || {
                    *renders += 1;
                    "natm_test_total 1\n".into()
                });
        }
        self.server
            .handle_timeout(self.poll.registry(), Instant::now());
    }

    /// Turns until `done` (at most 5 s).
    fn until(&mut self, mut done: impl FnMut(&Loop) -> bool) {
        let end = Instant::now() + Duration::from_secs(5);
        while !done(self) {
            assert!(Instant::now() < end, "not done in 5 s");
            self.turn(Duration::from_millis(20));
        }
    }
}

/// Send `request` (then close the write side if `close`), serve, and read the answer.
fn exchange(l: &mut Loop, request: &[u8], close: bool) -> String {
    use std::io::{Read as _, Write as _};
    let mut c = std::net::TcpStream::connect(l.addr()).unwrap();
    c.write_all(request).unwrap();
    if close {
        c.shutdown(std::net::Shutdown::Write).unwrap();
    }
    l.until(|l| l.server.open() == 1);
    l.until(|l| l.server.open() == 0);
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_scrape_then_close() {
    let mut l = Loop::new();
    let r = exchange(&mut l, b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", false);
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.ends_with("\r\n\r\nnatm_test_total 1\n"), "{r}");
    assert_eq!(l.renders, 1);
}

#[test]
fn bad_inputs_get_a_status_and_lose_nothing_else() {
    let mut l = Loop::new();
    let cases: [(&[u8], &str); 4] = [
        (b"POST /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 405 "),
        (b"GET /admin HTTP/1.1\r\n\r\n", "HTTP/1.1 404 "),
        (b"\x16\x03\x01garbage\r\n\r\n", "HTTP/1.1 400 "),
        (&[0xff; 64], "HTTP/1.1 400 "),
    ];
    for (req, status) in cases {
        let r = exchange(&mut l, req, false);
        assert!(r.starts_with(status), "{req:?}: {r}");
    }
    // Oversize: the first 4 KiB decide; the rest is never read.
    let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    big.resize(3 * MAX_REQUEST, b'a');
    let r = exchange(&mut l, &big, false);
    assert!(r.starts_with("HTTP/1.1 431 "), "{r}");
    // Half a request, then the client stops sending.
    let r = exchange(&mut l, b"GET /metr", true);
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
    // Nothing at all, then close: nothing to answer.
    assert_eq!(exchange(&mut l, b"", true), "");
    assert_eq!(l.renders, 0, "no refused request costs a render");
    // And the next scrape is served as ever.
    let r = exchange(&mut l, b"GET /metrics HTTP/1.1\r\n\r\n", false);
    assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
}

#[test]
fn a_silent_client_is_timed_out_and_an_excess_one_refused_at_once() {
    use std::io::Read as _;
    let mut l = Loop::new();
    let idle: Vec<_> = (0..MAX_CONNECTIONS)
        .map(|_| std::net::TcpStream::connect(l.addr()).unwrap())
        .collect();
    l.until(|l| l.server.open() == MAX_CONNECTIONS);
    let mut extra = std::net::TcpStream::connect(l.addr()).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let _ = extra.read_to_end(&mut out);
        });
        l.until(|_| reader.is_finished());
    });
    let r = String::from_utf8_lossy(&out);
    assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
    assert!(started.elapsed() < REQUEST_TIMEOUT, "refused at once");
    assert_eq!(l.server.open(), MAX_CONNECTIONS);
    // The silent ones are answered 408 and closed after REQUEST_TIMEOUT.
    l.until(|l| l.server.open() == 0);
    assert!(started.elapsed() >= REQUEST_TIMEOUT - Duration::from_millis(100));
    for mut c in idle {
        let mut out = Vec::new();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = c.read_to_end(&mut out);
        assert!(
            out.starts_with(b"HTTP/1.1 408 "),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
}
