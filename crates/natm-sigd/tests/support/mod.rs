//! Two sigd cores back to back in virtual time (quinn-proto's test `Pair`): host A
//! (+4420001, signalling 10.0.0.1:2905) and host B (+4420002, 10.0.0.2:2905), each
//! routing the other's address to the other's signalling endpoint. Datagrams between
//! them sit in an in-flight queue (a delay, a drop filter); applications are `AppId`s
//! whose messages from sigd collect in an inbox. Nothing sleeps: `drive` runs until
//! no datagram is in flight, `advance` runs the clock forward through every timer.
#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use natm_proto::time::Instant;
use natm_proto::wire::ipc::{DataPath, Message};
use natm_proto::wire::q2931::{self, MessageType};
use natm_proto::wire::sscop::Pdu;
use natm_proto::wire::vcframe::{self, FrameKind};
use natm_sigd::config::ConfigFile;
use natm_sigd::core::{AppId, Core, Creds, HostFacts, Output, Stat};
use natm_sigd::Config;
use natm_switch::control::{Control, ControlConfig, ControlPort, Output as SwitchOutput, PortRole};
use natm_switch::{PortConfig, PortId, Switch};

pub const A_ADDR: &str = "+4420001";
pub const B_ADDR: &str = "+4420002";
pub const A_SIG: &str = "10.0.0.1:2905";
pub const B_SIG: &str = "10.0.0.2:2905";
/// A data endpoint an application opened (the port says which application).
pub fn data(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Which host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    A,
    B,
}

/// A host's sigd configuration: its address, its peer's route, 100 Mbit/s each way,
/// 1 µs per TPDU, plus `extra` TOML (sections after the keys). The link to the peer
/// runs clear (`[[peer]] clear = true`), so that `Pair::trace` reads its Q.2931
/// messages; `noise_config` is the default, Noise-authenticated link.
/// A test whose `extra` has a `[[peer]]` of its own gets the default link.
pub fn config(side: Side, extra: &str) -> Config {
    let peer_sig = match side {
        Side::A => B_SIG,
        Side::B => A_SIG,
    };
    if extra.contains("[[peer]]") {
        return noise_config(side, extra);
    }
    noise_config(
        side,
        &format!("{extra}\n[[peer]]\naddress = \"{peer_sig}\"\nclear = true\n"),
    )
}

/// The same with the default signalling link to the peer: Noise, its key pinned
/// on first use.
pub fn noise_config(side: Side, extra: &str) -> Config {
    let (me, sig, peer, peer_sig) = match side {
        Side::A => (A_ADDR, A_SIG, B_ADDR, B_SIG),
        Side::B => (B_ADDR, B_SIG, A_ADDR, A_SIG),
    };
    let text = format!(
        "addresses = [\"{me}\"]\nsocket = \"/nonexistent/sigd.sock\"\nsignalling = \"{sig}\"\n\
         [link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000\ncpu_share = 1.0\n\
         [[directory]]\nprefix = \"{peer}\"\npeer = \"{peer_sig}\"\n{extra}"
    );
    ConfigFile::parse(&text, Path::new("test.toml"))
        .expect("the test configuration parses")
        .check()
        .expect("the test configuration is valid")
}

/// One host: its core and what it told its applications.
pub struct Node {
    pub core: Core,
    pub sig: SocketAddr,
    pub inbox: HashMap<AppId, VecDeque<Message>>,
    pub closed: Vec<AppId>,
    next_app: u64,
}

impl Node {
    pub fn new(side: Side, extra: &str, seed: u8) -> Node {
        Node::with_config(config(side, extra), seed)
    }

    /// A host whose link to the peer is the default, Noise-authenticated one.
    pub fn noise(side: Side, extra: &str, seed: u8) -> Node {
        Node::with_config(noise_config(side, extra), seed)
    }

    /// A host with a configuration of the test's own.
    pub fn with_config(cfg: Config, seed: u8) -> Node {
        let sig = cfg.signalling;
        let facts = HostFacts {
            signalling: sig,
            tpdu_cost_ns: 1000,
            cores: 1,
        };
        let mut core = Core::new(cfg, facts, [seed; 32]);
        // The host's ticket key outlives its sigd (a file, in the daemon): a
        // restarted node of the same host has the same one.
        core.set_ticket_key(ticket_key(sig));
        // Its Noise key too (the key file): peers that pinned it take it again.
        core.set_identity(noise_key(sig), HashMap::new());
        Node {
            core,
            sig,
            inbox: HashMap::new(),
            closed: Vec::new(),
            next_app: 16,
        }
    }
}

/// The Noise static key of the host whose signalling endpoint is `sig`.
pub fn noise_key(sig: SocketAddr) -> [u8; 32] {
    let mut k = ticket_key(sig);
    k[31] ^= 0x5a;
    k
}

/// The ticket key of the host whose signalling endpoint is `sig`.
pub fn ticket_key(sig: SocketAddr) -> [u8; 32] {
    let mut k = [0x4b; 32];
    k[..2].copy_from_slice(&sig.port().to_be_bytes());
    if let std::net::IpAddr::V4(ip) = sig.ip() {
        k[2..6].copy_from_slice(&ip.octets());
    }
    k
}

/// A datagram on the wire between the two hosts.
#[derive(Debug, Clone)]
pub struct Datagram {
    pub deliver_at: Instant,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub bytes: Bytes,
}

impl Datagram {
    /// The Q.2931 message it carries, if it is an SSCOP SD with one.
    pub fn q2931(&self) -> Option<q2931::Message> {
        q2931_of(&self.bytes)
    }
}

/// The Q.2931 message in a signalling datagram (an SD's information field).
pub fn q2931_of(d: &[u8]) -> Option<q2931::Message> {
    sd_of(d).and_then(|(_, info)| q2931::Message::parse(&info).ok())
}

/// An SSCOP SD's N(S) and information field.
fn sd_of(d: &[u8]) -> Option<(u32, Vec<u8>)> {
    let (r, pdu) = vcframe::Repr::parse_bytes(d).ok()?;
    if r.kind != FrameKind::Signalling || r.vci != 5 {
        return None;
    }
    match Pdu::parse(pdu).ok()? {
        Pdu::Sd { ns, info } => Some((ns.value(), info)),
        _ => None,
    }
}

/// What went over the wire, in order: sender and Q.2931 message type (cause value).
pub type Trace = Vec<(Side, MessageType, Option<u8>)>;

pub struct Pair {
    pub now: Instant,
    pub a: Node,
    pub b: Node,
    pub in_flight: Vec<Datagram>,
    /// One-way delay of every datagram.
    pub delay: Duration,
    /// Datagrams for which this returns true are lost.
    pub lose: Box<dyn FnMut(&Datagram) -> bool>,
    /// Applied to every datagram as it is sent (a peer of another kind, a tamperer).
    pub rewrite: Box<dyn FnMut(&mut Datagram)>,
    /// Each host's record of its links' last BGN N(SQ) (the daemon's `sscop-sq`
    /// file), kept as the daemon does and read by a restarted core.
    pub sq_files: [HashMap<SocketAddr, u8>; 2],
    /// Every Q.2931 message sent (lost or not).
    pub trace: Trace,
    seen: HashSet<(Side, u32, Vec<u8>)>,
    next_req: u64,
    /// A natm switch between the hosts ([`Pair::switched`]), else they are linked
    /// directly.
    pub switch: Option<Hop>,
}

/// A natm switch's control and data planes between A (its port 0) and B (port 1),
/// each port's signalling endpoint in `ports`.
pub struct Hop {
    pub ctl: Control,
    pub sw: Switch,
    pub ports: [SocketAddr; 2],
}

/// The switch's signalling endpoint on A's port and on B's.
pub const SWITCH_PORTS: [&str; 2] = ["10.0.0.9:5000", "10.0.0.9:5001"];

/// A host attached to the switch (`natm sigd --switch`): every address through it.
/// The link is clear: the switch here is the control plane alone
/// (`natm_switch::control`), whose frames the switch process's Noise layer carries
/// (tests/switch_noise.rs).
pub fn switched_config(side: Side, extra: &str) -> Config {
    let (me, sig, port) = match side {
        Side::A => (A_ADDR, A_SIG, SWITCH_PORTS[0]),
        Side::B => (B_ADDR, B_SIG, SWITCH_PORTS[1]),
    };
    let text = format!(
        "addresses = [\"{me}\"]\nsocket = \"/nonexistent/sigd.sock\"\nsignalling = \"{sig}\"\n\
         [link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000\ncpu_share = 1.0\n\
         [[directory]]\nprefix = \"*\"\npeer = \"{port}\"\nswitch = true\n\
         [[peer]]\naddress = \"{port}\"\nclear = true\n{extra}"
    );
    ConfigFile::parse(&text, Path::new("test.toml"))
        .expect("the test configuration parses")
        .check()
        .expect("the test configuration is valid")
}

impl Default for Pair {
    fn default() -> Self {
        Pair::new("", "")
    }
}

impl Pair {
    /// Two hosts whose link is the default, Noise-authenticated one.
    pub fn noise() -> Pair {
        let mut p = Pair::new("", "");
        p.a = Node::noise(Side::A, "", 1);
        p.b = Node::noise(Side::B, "", 2);
        p
    }

    /// Two hosts with extra TOML for each.
    pub fn new(a_extra: &str, b_extra: &str) -> Pair {
        Pair {
            now: Instant::from_nanos(1_000_000),
            a: Node::new(Side::A, a_extra, 1),
            b: Node::new(Side::B, b_extra, 2),
            in_flight: Vec::new(),
            delay: Duration::from_micros(100),
            lose: Box::new(|_| false),
            rewrite: Box::new(|_| {}),
            sq_files: [HashMap::new(), HashMap::new()],
            trace: Vec::new(),
            seen: HashSet::new(),
            next_req: 1,
            switch: None,
        }
    }

    /// Hosts A and B attached to one natm switch (host ports, `preserve` their kept
    /// calls' time; `None`: the switch's default), all links up.
    pub fn switched(preserve: Option<Duration>) -> Pair {
        Pair::switched_line(preserve, 1_000_000_000)
    }

    /// [`Pair::switched`] with the switch's ports `line` bit/s each.
    pub fn switched_line(preserve: Option<Duration>, line: u64) -> Pair {
        let mut p = Pair::new("", "");
        p.a = Node::with_config(switched_config(Side::A, ""), 1);
        p.b = Node::with_config(switched_config(Side::B, ""), 2);
        p.switch = Some(Hop::new(p.now, preserve, line));
        let now = p.now;
        p.a.core.start(now);
        p.b.core.start(now);
        p.advance(Duration::from_millis(100));
        assert!(p.switch.as_ref().unwrap().ctl.is_up(PortId(0)));
        assert!(p.switch.as_ref().unwrap().ctl.is_up(PortId(1)));
        p
    }

    /// Host `s`'s sigd dies and a new one with the same configuration starts (and
    /// brings up its switch link, if any): what a SIGKILL and a restart do.
    pub fn restart(&mut self, s: Side, seed: u8) {
        let cfg = match (s, self.switch.is_some()) {
            (Side::A, true) => switched_config(Side::A, ""),
            (Side::B, true) => switched_config(Side::B, ""),
            (side, false) => config(side, ""),
        };
        *self.node(s) = Node::with_config(cfg, seed);
        let last = self.sq_files[s as usize].clone();
        self.node(s).core.set_last_sq(last);
        let now = self.now;
        self.node(s).core.start(now);
    }

    pub fn node(&mut self, s: Side) -> &mut Node {
        match s {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    fn side_of(&self, sig: SocketAddr) -> Option<Side> {
        if sig == self.a.sig {
            Some(Side::A)
        } else if sig == self.b.sig {
            Some(Side::B)
        } else {
            None
        }
    }

    /// Take every output of both cores: messages into inboxes, datagrams onto the
    /// wire (or lost). True if there was any.
    pub fn collect(&mut self) -> bool {
        let mut any = false;
        for s in [Side::A, Side::B] {
            if let Some(last) = self.node(s).core.take_sq_record() {
                self.sq_files[s as usize] = last.into_iter().collect();
            }
            loop {
                let now = self.now;
                let delay = self.delay;
                let n = self.node(s);
                let Some(o) = n.core.poll_output() else {
                    break;
                };
                any = true;
                match o {
                    Output::ToApp(app, m) => n.inbox.entry(app).or_default().push_back(m),
                    Output::Flush(_) => {}
                    Output::CloseApp(app) => n.closed.push(app),
                    Output::ToPeer(to, bytes) => {
                        let mut d = Datagram {
                            deliver_at: now + delay,
                            from: n.sig,
                            to,
                            bytes,
                        };
                        // Each SD once: SSCOP's retransmissions are not new messages.
                        if let Some((ns, info)) = sd_of(&d.bytes) {
                            if self.seen.insert((s, ns, info.clone())) {
                                if let Ok(m) = q2931::Message::parse(&info) {
                                    let cause = m.cause().map(|c| c.value.raw());
                                    self.trace.push((s, m.kind, cause));
                                }
                            }
                        }
                        (self.rewrite)(&mut d);
                        if !(self.lose)(&d) {
                            self.in_flight.push(d);
                        }
                    }
                }
            }
        }
        if let Some(h) = self.switch.as_mut() {
            while let Some(o) = h.ctl.poll_output(&mut h.sw) {
                any = true;
                if let SwitchOutput::Signal(port, pdu) = o {
                    let i = usize::from(port.0);
                    let d = Datagram {
                        deliver_at: self.now + self.delay,
                        from: h.ports[i],
                        to: [self.a.sig, self.b.sig][i],
                        bytes: Bytes::from(vcframe::signalling_frame(&pdu)),
                    };
                    if !(self.lose)(&d) {
                        self.in_flight.push(d);
                    }
                }
            }
        }
        any
    }

    /// Deliver the datagrams due by now. True if there were any.
    fn deliver_due(&mut self) -> bool {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|d| d.deliver_at <= now);
        self.in_flight = later;
        for d in &due {
            // Datagrams to anyone else (a spoofed source) leave the test's network.
            if let Some(to) = self.side_of(d.to) {
                self.node(to).core.handle_peer(now, d.from, &d.bytes);
            } else if let Some(h) = self.switch.as_mut() {
                let port = h.ports.iter().position(|p| *p == d.to);
                if let (Some(i), Some(pdu)) = (port, vcframe::signalling_pdu(&d.bytes)) {
                    h.ctl.handle_signal(now, PortId(i as u16), pdu);
                }
            }
        }
        !due.is_empty()
    }

    /// The next instant anything happens: a delivery or a timer.
    fn next_event(&self) -> Option<Instant> {
        let wire = self.in_flight.iter().map(|d| d.deliver_at).min();
        let switch = self.switch.as_ref().and_then(|h| h.ctl.poll_timeout());
        [
            wire,
            self.a.core.poll_timeout(),
            self.b.core.poll_timeout(),
            switch,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Run the clock to `until`, through every delivery and timer on the way.
    pub fn advance_to(&mut self, until: Instant) {
        for _ in 0..1_000_000 {
            self.collect();
            if self.deliver_due() {
                continue;
            }
            let Some(t) = self.next_event().filter(|&t| t <= until) else {
                break;
            };
            self.now = self.now.max(t);
            let now = self.now;
            self.a.core.handle_timeout(now);
            self.b.core.handle_timeout(now);
            if let Some(h) = self.switch.as_mut() {
                h.sw.handle_timeout(now);
                h.ctl.handle_timeout(now);
            }
        }
        self.now = self.now.max(until);
        self.collect();
    }

    /// Run the clock forward by `d`.
    pub fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        self.advance_to(until);
    }

    /// Run until no datagram is in flight (timers due before the last delivery fire;
    /// later ones wait).
    pub fn drive(&mut self) {
        for _ in 0..100_000 {
            self.collect();
            if self.deliver_due() {
                continue;
            }
            let Some(t) = self.in_flight.iter().map(|d| d.deliver_at).min() else {
                return;
            };
            self.advance_to(t);
        }
        panic!("the two cores never went quiet");
    }

    /// A new application on host `s`, run by root.
    pub fn app(&mut self, s: Side) -> AppId {
        self.app_as(s, 0)
    }

    /// A new application on host `s`, run by user `uid`.
    pub fn app_as(&mut self, s: Side, uid: u32) -> AppId {
        let now = self.now;
        let n = self.node(s);
        let app = AppId(n.next_app);
        n.next_app += 1;
        let creds = Creds {
            pid: 1000 + app.0 as i32,
            uid,
            gid: uid,
        };
        n.core.app_connected(now, app, Some(creds));
        self.collect();
        app
    }

    /// A fresh request tag.
    pub fn req(&mut self) -> u64 {
        let r = self.next_req;
        self.next_req += 1;
        r
    }

    /// Application `app` on host `s` sends `m`; the pair then drives.
    pub fn send(&mut self, s: Side, app: AppId, m: Message) {
        let now = self.now;
        self.node(s).core.handle_app(now, app, m);
        self.drive();
    }

    /// Application `app` on host `s` goes away.
    pub fn close(&mut self, s: Side, app: AppId) {
        let now = self.now;
        self.node(s).core.app_closed(now, app);
        self.drive();
    }

    /// What sigd told `app` on host `s` since the last look.
    pub fn take(&mut self, s: Side, app: AppId) -> Vec<Message> {
        self.node(s)
            .inbox
            .get_mut(&app)
            .map(|q| q.drain(..).collect())
            .unwrap_or_default()
    }

    /// Connect from `app` on host `s`: the request's `Ack` id (panics on anything
    /// else).
    pub fn connect(&mut self, s: Side, app: AppId, called: &str, qos: &str) -> u64 {
        let req = self.req();
        self.send(
            s,
            app,
            Message::Connect {
                req,
                called: called.into(),
                qos: qos.parse().expect("test QoS"),
                data: data(40_000 + app.0 as u16),
            },
        );
        self.take_ack(s, app, req)
    }

    /// The `Ack` of `req` from `app`'s inbox; what came after it stays there.
    pub fn take_ack(&mut self, s: Side, app: AppId, req: u64) -> u64 {
        let msgs = self.take(s, app);
        let id = ack_of(&msgs, req);
        let at = msgs
            .iter()
            .position(|m| matches!(m, Message::Ack { req: r, .. } if *r == req))
            .expect("ack_of found it");
        let rest: VecDeque<Message> = msgs.into_iter().skip(at + 1).collect();
        self.node(s).inbox.insert(app, rest);
        id
    }

    /// Bind `sap` from `app` on host `s`: the listener id.
    pub fn bind(&mut self, s: Side, app: AppId, sap: &str, qos: &str) -> u64 {
        let req = self.req();
        self.send(
            s,
            app,
            Message::Bind {
                req,
                sap: sap.into(),
                qos: qos.parse().expect("test QoS"),
            },
        );
        self.take_ack(s, app, req)
    }

    /// Bind `sap` pre-authorised with these pre-opened endpoints: the listener id.
    pub fn bind_auto(
        &mut self,
        s: Side,
        app: AppId,
        sap: &str,
        qos: &str,
        endpoints: Vec<SocketAddr>,
    ) -> u64 {
        let req = self.req();
        self.send(
            s,
            app,
            Message::BindAuto {
                req,
                sap: sap.into(),
                qos: qos.parse().expect("test QoS"),
                data: endpoints,
            },
        );
        ack_of(&self.take(s, app), req)
    }

    /// Accept an offered call on a data endpoint: the messages that came back.
    pub fn accept(&mut self, s: Side, app: AppId, call: u64) -> Vec<Message> {
        let req = self.req();
        self.send(
            s,
            app,
            Message::Accept {
                req,
                call,
                data: data(50_000 + app.0 as u16),
            },
        );
        self.take(s, app)
    }

    /// `natm stat` on host `s`, through a short-lived application.
    pub fn stat(&mut self, s: Side) -> Stat {
        let app = self.app(s);
        let req = self.req();
        self.send(s, app, Message::Stat { req });
        let msgs = self.take(s, app);
        let now = self.now;
        self.node(s).core.app_closed(now, app);
        match msgs.as_slice() {
            [Message::StatReply { req: r, json }] if *r == req => {
                serde_json::from_str(json).expect("StatReply is a Stat")
            }
            other => panic!("expected one StatReply, got {other:?}"),
        }
    }

    /// The message types sent by `s`, in order.
    pub fn sent_by(&self, s: Side) -> Vec<MessageType> {
        self.trace
            .iter()
            .filter(|(f, _, _)| *f == s)
            .map(|(_, k, _)| *k)
            .collect()
    }

    /// An explicit listener on B's SAP "echo", a call to it from A, accepted: the
    /// caller's `Connected` path, the callee's, and the apps and call ids
    /// `(a_app, a_call, b_app, b_call)`.
    pub fn call_ab(&mut self) -> (DataPath, DataPath, (AppId, u64, AppId, u64)) {
        self.call_ab_as(0, 0)
    }

    /// `call_ab` with A's application run by `a_uid` and B's by `b_uid`.
    pub fn call_ab_as(
        &mut self,
        a_uid: u32,
        b_uid: u32,
    ) -> (DataPath, DataPath, (AppId, u64, AppId, u64)) {
        let b_app = self.app_as(Side::B, b_uid);
        let listener = self.bind(Side::B, b_app, "echo", "reliable");
        let a_app = self.app_as(Side::A, a_uid);
        let a_call = self.connect(Side::A, a_app, "+4420002:echo", "reliable");
        let b_call = match self.take(Side::B, b_app).as_slice() {
            [Message::Incoming {
                listener: l, call, ..
            }] if *l == listener => *call,
            other => panic!("expected one Incoming, got {other:?}"),
        };
        let b_path = connected_of(&self.accept(Side::B, b_app, b_call), b_call);
        let a_path = match self.take(Side::A, a_app).as_slice() {
            [Message::Connected { call, path }] if *call == a_call => path.clone(),
            other => panic!("expected the caller's Connected, got {other:?}"),
        };
        (a_path, b_path, (a_app, a_call, b_app, b_call))
    }
}

/// The id of the `Ack` for `req` among `msgs` (panics if it was refused).
pub fn ack_of(msgs: &[Message], req: u64) -> u64 {
    for m in msgs {
        match m {
            Message::Ack { req: r, id } if *r == req => return *id,
            Message::Refused {
                req: r,
                cause,
                detail,
            } if *r == req => panic!("request {req} refused, cause {cause}: {detail}"),
            _ => {}
        }
    }
    panic!("no answer to request {req} in {msgs:?}")
}

/// The `Connected` path of `call` among `msgs`.
pub fn connected_of(msgs: &[Message], call: u64) -> DataPath {
    msgs.iter()
        .find_map(|m| match m {
            Message::Connected { call: c, path } if *c == call => Some(path.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Connected for {call:016x} in {msgs:?}"))
}

/// The `Released` of `call` among `msgs`: cause and detail.
pub fn released_of(msgs: &[Message], call: u64) -> (u8, String) {
    msgs.iter()
        .find_map(|m| match m {
            Message::Released {
                call: c,
                cause,
                detail,
            } if *c == call => Some((*cause, detail.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Released for {call:016x} in {msgs:?}"))
}

impl Hop {
    /// Routes +4420001 to port 0 and +4420002 to port 1, each a line of `line` bit/s.
    fn new(now: Instant, preserve: Option<Duration>, line: u64) -> Hop {
        Hop::counting_from(now, preserve, line, None)
    }

    /// [`Hop::new`] whose ports' SSCOP counts on from `first_sq`
    /// (`ControlPort::first_sq`): a restarted switch's.
    pub fn counting_from(
        now: Instant,
        preserve: Option<Duration>,
        line: u64,
        first_sq: Option<u8>,
    ) -> Hop {
        let mut sw = Switch::new();
        let p0 = sw.add_port(PortConfig::new(line)).unwrap();
        let p1 = sw.add_port(PortConfig::new(line)).unwrap();
        let h = natm_proto::wire::addr::HostsFile::default();
        let prefix = |a: &str| natm_proto::wire::addr::Prefix::parse(a, &h).unwrap();
        let mut ctl = Control::new(ControlConfig {
            routes: vec![(prefix(A_ADDR), p0), (prefix(B_ADDR), p1)],
            ..ControlConfig::default()
        });
        let ports: [SocketAddr; 2] = SWITCH_PORTS.map(|p| p.parse().unwrap());
        for (port, data) in [(p0, ports[0]), (p1, ports[1])] {
            ctl.add_port(
                now,
                ControlPort {
                    port,
                    name: format!("p{}", port.0),
                    role: PortRole::Host,
                    data,
                    vcis: natm_proto::sig::vci::NETWORK_HALF,
                    link_cells: 2_000_000,
                    preserve,
                    no_response: None,
                    screen_calling: true,
                    first_sq,
                },
            );
        }
        Hop { ctl, sw, ports }
    }
}

// Restart tests (core/restart.rs, core/switch_restart.rs).

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

pub fn released(p: &Pair, s: Side, app: AppId, call: u64) -> Option<u8> {
    let n = match s {
        Side::A => &p.a,
        Side::B => &p.b,
    };
    n.inbox.get(&app).and_then(|q| {
        q.iter().find_map(|m| match m {
            Message::Released { call: c, cause, .. } if *c == call => Some(*cause),
            _ => None,
        })
    })
}

/// A new application on `s` reclaims `call` with `path`: its id and the answer.
pub fn reclaim(p: &mut Pair, s: Side, call: u64, path: DataPath) -> (AppId, Message) {
    reclaim_as(p, s, 0, call, path)
}

/// `reclaim` by an application run by `uid`.
pub fn reclaim_as(p: &mut Pair, s: Side, uid: u32, call: u64, path: DataPath) -> (AppId, Message) {
    let app = p.app_as(s, uid);
    let req = p.req();
    p.send(
        s,
        app,
        Message::Reclaim {
            req,
            call,
            data: data(51_000),
            path,
        },
    );
    let msgs = p.take(s, app);
    let at = msgs
        .iter()
        .position(|m| matches!(m, Message::Ack { req: r, .. } | Message::Refused { req: r, .. } if *r == req))
        .expect("an answer to Reclaim");
    // What came after the answer stays for the test to look at.
    let mut rest: std::collections::VecDeque<Message> = msgs.into();
    let answer = rest.remove(at).expect("found above");
    p.node(s).inbox.insert(app, rest);
    (app, answer)
}
