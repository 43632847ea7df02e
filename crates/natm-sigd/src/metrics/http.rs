//! The `/metrics` responder of `natm sigd --metrics` and `natm switch --metrics`
//! (issue 32): plain HTTP/1.1 served on the daemon's own mio loop, one response per
//! connection, then close. Bounded whatever peers do: at most [`MAX_CONNECTIONS`] at
//! once (more are answered 503 and closed at once), a request of at most
//! [`MAX_REQUEST`] octets read within [`REQUEST_TIMEOUT`], a response written within
//! [`RESPONSE_TIMEOUT`]; no thread, no blocking call, so a slow client holds one slot
//! for two seconds and never the loop (docs/decisions/0032-metrics.md).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use tracing::{debug, warn};

/// Scrape connections served at once; the next are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 4;
/// Most octets of one request (request line and headers).
pub const MAX_REQUEST: usize = 4096;
/// A connection that has not sent a whole request by then is answered 408 and closed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// A response not taken by then is dropped with its connection.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Tokens a [`MetricsServer`] uses from its base: the listener, then one a slot.
pub const TOKENS: usize = 1 + MAX_CONNECTIONS;
/// Connections accepted in one turn of the loop (more wait for the next turn).
const ACCEPT_BURST: usize = 64;
/// Headers a request may have.
const MAX_HEADERS: usize = 32;
/// How long accepting pauses after an error (out of descriptors).
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The `Content-Type` of the Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// `--metrics ADDR` / `metrics = "ADDR"`: an IP address and a TCP port, the host
/// always explicit (`:9100` or `9100` alone is refused, not taken as every address).
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.trim().parse().map_err(|_| {
        format!(
            "\"{text}\" is not IP:PORT; give the host explicitly, e.g. 127.0.0.1:9464 \
             (an address beyond loopback exposes the counters to the network)"
        )
    })
}

/// What a request asks for, once read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Not a whole request yet: read on.
    Incomplete,
    /// `GET /metrics`: answer 200 with the exposition.
    Metrics,
    /// Answer this status and close.
    Refuse(Refusal),
}

/// Why a connection gets no metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not HTTP/1.x (400).
    BadRequest,
    /// A path other than `/metrics` (404).
    NotFound,
    /// A method other than GET (405).
    MethodNotAllowed,
    /// Over [`MAX_REQUEST`] octets or [`MAX_HEADERS`] headers (431).
    TooLarge,
    /// No whole request within [`REQUEST_TIMEOUT`] (408).
    Timeout,
    /// [`MAX_CONNECTIONS`] already served (503).
    Busy,
}

impl Refusal {
    /// The status code and its reason phrase.
    pub fn status(self) -> (u16, &'static str) {
        match self {
            Refusal::BadRequest => (400, "Bad Request"),
            Refusal::NotFound => (404, "Not Found"),
            Refusal::MethodNotAllowed => (405, "Method Not Allowed"),
            Refusal::TooLarge => (431, "Request Header Fields Too Large"),
            Refusal::Timeout => (408, "Request Timeout"),
            Refusal::Busy => (503, "Service Unavailable"),
        }
    }

    /// The whole response: status, a one-line body saying what is served.
    pub fn response(self) -> Vec<u8> {
        let (code, reason) = self.status();
        let extra = match self {
            Refusal::MethodNotAllowed => "Allow: GET\r\n",
            Refusal::Busy => "Retry-After: 1\r\n",
            _ => "",
        };
        let body = format!("{code} {reason}: this server answers GET /metrics only\n");
        response(
            code,
            reason,
            "text/plain; charset=utf-8",
            extra,
            body.as_bytes(),
        )
    }
}

/// What the request read so far asks for. Pure: the fuzz target `metrics_request`
/// drives it with any octets.
pub fn route(request: &[u8]) -> Route {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(request) {
        Ok(httparse::Status::Partial) if request.len() >= MAX_REQUEST => {
            Route::Refuse(Refusal::TooLarge)
        }
        Ok(httparse::Status::Partial) => Route::Incomplete,
        Ok(httparse::Status::Complete(_)) => {
            if req.method != Some("GET") {
                return Route::Refuse(Refusal::MethodNotAllowed);
            }
            let path = req.path.unwrap_or("");
            let path = path.split_once('?').map_or(path, |(p, _)| p);
            if path == "/metrics" {
                Route::Metrics
            } else {
                Route::Refuse(Refusal::NotFound)
            }
        }
        Err(httparse::Error::TooManyHeaders) => Route::Refuse(Refusal::TooLarge),
        Err(_) => Route::Refuse(Refusal::BadRequest),
    }
}

/// A response with `Connection: close` (the server closes after it).
fn response(code: u16, reason: &str, content_type: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n{extra}\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// The 200 response carrying `exposition`.
pub fn metrics_response(exposition: &str) -> Vec<u8> {
    response(200, "OK", CONTENT_TYPE, "", exposition.as_bytes())
}

/// One scrape connection.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    request: Vec<u8>,
    /// The response, once the request is read (then nothing more is read).
    response: Option<Vec<u8>>,
    sent: usize,
    deadline: Instant,
    /// Registered for writability too (the response did not fit the socket).
    writable: bool,
}

/// A listening socket and its [`MAX_CONNECTIONS`] slots, driven by the daemon's loop:
/// [`MetricsServer::handle_event`] for its tokens, [`MetricsServer::poll_timeout`] in
/// the loop's wake-up and [`MetricsServer::handle_timeout`] after each poll.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
    local: SocketAddr,
    base: usize,
    conns: [Option<Conn>; MAX_CONNECTIONS],
    /// Accepting resumes then (a burst was cut short, or accept failed).
    accept_at: Option<Instant>,
}

impl MetricsServer {
    /// Listen on `addr` and register under tokens `base .. base + TOKENS`.
    pub fn bind(addr: SocketAddr, registry: &Registry, base: Token) -> io::Result<MetricsServer> {
        let mut listener = TcpListener::bind(addr).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot listen for metrics on {addr}: {e}"),
            )
        })?;
        registry.register(&mut listener, base, Interest::READABLE)?;
        let local = listener.local_addr()?;
        if !local.ip().is_loopback() {
            warn!(%local, "metrics served beyond loopback: anyone who reaches this address reads the counters");
        }
        Ok(MetricsServer {
            listener,
            local,
            base: base.0,
            conns: Default::default(),
            accept_at: None,
        })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether `t` is one of this server's tokens.
    pub fn owns(&self, t: Token) -> bool {
        (self.base..self.base + TOKENS).contains(&t.0)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.conns.iter().filter(|c| c.is_some()).count()
    }

    /// An event on one of this server's tokens; `render` makes the exposition when
    /// a request asks for it.
    pub fn handle_event(
        &mut self,
        t: Token,
        registry: &Registry,
        now: Instant,
        render: impl FnOnce() -> String,
    ) {
        if t.0 == self.base {
            self.accept(registry, now);
            return;
        }
        let Some(k) = t.0.checked_sub(self.base + 1) else {
            return;
        };
        if k >= MAX_CONNECTIONS || self.conns[k].is_none() {
            return;
        }
        if self.conns[k].as_ref().is_some_and(|c| c.response.is_none()) {
            self.read(k, now, render);
        }
        self.write(k, registry);
    }

    /// When [`MetricsServer::handle_timeout`] has work: a deadline, or accepting to
    /// resume.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .iter()
            .flatten()
            .map(|c| c.deadline)
            .chain(self.accept_at)
            .min()
    }

    /// Close the connections past their deadline (a request not read in time is
    /// answered 408 first, if the socket takes it); resume accepting.
    pub fn handle_timeout(&mut self, registry: &Registry, now: Instant) {
        for k in 0..MAX_CONNECTIONS {
            let Some(c) = self.conns[k].as_mut() else {
                continue;
            };
            if c.deadline > now {
                continue;
            }
            if c.response.is_none() {
                let _ = c.stream.write(&Refusal::Timeout.response());
            }
            self.close(k, registry);
        }
        if self.accept_at.is_some_and(|t| t <= now) {
            self.accept(registry, now);
        }
    }

    fn accept(&mut self, registry: &Registry, now: Instant) {
        self.accept_at = None;
        for _ in 0..ACCEPT_BURST {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    let Some(k) = self.conns.iter().position(Option::is_none) else {
                        // Full: told so if its socket takes it, and closed at once.
                        let _ = stream.write(&Refusal::Busy.response());
                        continue;
                    };
                    let token = Token(self.base + 1 + k);
                    if registry
                        .register(&mut stream, token, Interest::READABLE)
                        .is_err()
                    {
                        continue;
                    }
                    self.conns[k] = Some(Conn {
                        stream,
                        request: Vec::new(),
                        response: None,
                        sent: 0,
                        deadline: now + REQUEST_TIMEOUT,
                        writable: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    debug!(error = %e, "metrics: accept failed");
                    self.accept_at = Some(now + ACCEPT_RETRY);
                    return;
                }
            }
        }
        // The burst is spent: the rest of the backlog on the next turn (the listener
        // is edge-triggered and would not be reported again).
        self.accept_at = Some(now);
    }

    /// Read what the request sent, up to [`MAX_REQUEST`], and decide the response.
    fn read(&mut self, k: usize, now: Instant, render: impl FnOnce() -> String) {
        let Some(c) = self.conns[k].as_mut() else {
            return;
        };
        let mut eof = false;
        let mut chunk = [0u8; 1024];
        while c.request.len() < MAX_REQUEST {
            let room = (MAX_REQUEST - c.request.len()).min(chunk.len());
            match c.stream.read(&mut chunk[..room]) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => c.request.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // Reset: nothing to answer; the slot is freed by the write below.
                    c.response = Some(Vec::new());
                    return;
                }
            }
        }
        let answer = match route(&c.request) {
            Route::Incomplete if !eof => return,
            // The peer stopped sending halfway: nothing more will come.
            Route::Incomplete if c.request.is_empty() => Vec::new(),
            Route::Incomplete => Refusal::BadRequest.response(),
            Route::Metrics => metrics_response(&render()),
            Route::Refuse(r) => r.response(),
        };
        c.response = Some(answer);
        c.deadline = now + RESPONSE_TIMEOUT;
    }

    /// Write what the response has left; close once it is all sent (or cannot be).
    fn write(&mut self, k: usize, registry: &Registry) {
        let Some(c) = self.conns[k].as_mut() else {
            return;
        };
        let Some(response) = c.response.as_ref() else {
            return;
        };
        while c.sent < response.len() {
            match c.stream.write(&response[c.sent..]) {
                Ok(0) => break,
                Ok(n) => c.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !c.writable {
                        c.writable = true;
                        let token = Token(self.base + 1 + k);
                        let interest = Interest::READABLE | Interest::WRITABLE;
                        if registry.reregister(&mut c.stream, token, interest).is_ok() {
                            return;
                        }
                        break;
                    }
                    return;
                }
                Err(_) => break,
            }
        }
        self.close(k, registry);
    }

    fn close(&mut self, k: usize, registry: &Registry) {
        if let Some(mut c) = self.conns[k].take() {
            let _ = registry.deregister(&mut c.stream);
            let _ = c.stream.shutdown(std::net::Shutdown::Write);
        }
    }
}

#[cfg(test)]
mod tests;
