//! Ten switches in a mesh, in virtual time (issue 33): calls between random hosts
//! until the trunks fill, each checked against an oracle over the switches' actual
//! reservations — a call that has a path with room both ways is admitted, and one
//! that is refused has none.

use std::net::SocketAddr;

use natm_proto::sig::{CallAccept, CallEvent, CallId, CallParams, Saal, SigEvent};
use natm_proto::wire::addr::{party, AtmAddr, HostsFile};
use natm_proto::wire::q2931::{ConnectionId, NatmParams, NodeId};

use super::*;
use crate::routing::RoutingConfig;
use crate::PortConfig;

const MS: Duration = Duration::from_millis(1);
const N: usize = 10;

fn sock(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn host_addr(i: usize) -> AtmAddr {
    format!("+44{:02}01", i + 1).parse().unwrap()
}

struct Mesh {
    now: Instant,
    sw: Vec<Switch>,
    ctl: Vec<Control>,
    hosts: Vec<Saal>,
    events: Vec<Vec<CallEvent>>,
    /// Trunks: (switch, port) ↔ (switch, port).
    trunks: Vec<((usize, u16), (usize, u16))>,
    /// Each switch's host port.
    host_port: Vec<PortId>,
    label: u16,
}

impl Mesh {
    /// A ring of `N` with chords from every even switch to the one three on.
    fn new(trunk_bps: u64) -> Mesh {
        let mut edges: Vec<(usize, usize)> = (0..N).map(|i| (i, (i + 1) % N)).collect();
        edges.extend((0..N).step_by(2).map(|i| (i, (i + 3) % N)));
        let now = Instant::from_nanos(1);
        let h = HostsFile::default();
        let mut sw: Vec<Switch> = (0..N).map(|_| Switch::new()).collect();
        let mut trunks = Vec::new();
        let mut trunk_ports: Vec<Vec<(PortId, bool)>> = vec![Vec::new(); N];
        for &(a, b) in &edges {
            let pa = sw[a].add_port(PortConfig::new(trunk_bps)).unwrap();
            let pb = sw[b].add_port(PortConfig::new(trunk_bps)).unwrap();
            trunks.push(((a, pa.0), (b, pb.0)));
            trunk_ports[a].push((pa, true));
            trunk_ports[b].push((pb, false));
        }
        let mut ctl = Vec::new();
        let mut host_port = Vec::new();
        for i in 0..N {
            let host = sw[i].add_port(PortConfig::new(155_520_000)).unwrap();
            host_port.push(host);
            let cfg = ControlConfig {
                name: format!("s{}", i + 1),
                routes: vec![(
                    Prefix::parse(&format!("+44{:02}0", i + 1), &h).unwrap(),
                    host,
                )],
                routing: Some(RoutingConfig::lab(NodeId(i as u32 + 1))),
                ..ControlConfig::default()
            };
            let mut c = Control::new(cfg);
            let mut ports: Vec<(PortId, PortRole, RangeInclusive<u16>)> = trunk_ports[i]
                .iter()
                .map(|&(p, lower)| {
                    let half = if lower {
                        natm_proto::sig::vci::USER_HALF
                    } else {
                        natm_proto::sig::vci::NETWORK_HALF
                    };
                    (p, PortRole::Switch, half)
                })
                .collect();
            ports.push((host, PortRole::Host, natm_proto::sig::vci::NETWORK_HALF));
            for (p, role, vcis) in ports {
                c.add_port(
                    now,
                    ControlPort {
                        port: p,
                        name: format!("s{}p{}", i + 1, p.0),
                        role,
                        data: sock(9000 + 10 * i as u16 + p.0),
                        vcis,
                        link_cells: 353_207,
                        preserve: None,
                        no_response: None,
                        screen_calling: true,
                        first_sq: None,
                    },
                );
            }
            ctl.push(c);
        }
        let hosts = (0..N)
            .map(|_| {
                let mut s = Saal::new(ControlConfig::network_saal());
                s.start(now);
                s
            })
            .collect();
        let mut m = Mesh {
            now,
            sw,
            ctl,
            hosts,
            events: vec![Vec::new(); N],
            trunks,
            host_port,
            label: 40,
        };
        m.run(500 * MS);
        m
    }

    fn peer(&self, i: usize, p: u16) -> Option<(usize, u16)> {
        self.trunks.iter().find_map(|&(a, b)| {
            if a == (i, p) {
                Some(b)
            } else if b == (i, p) {
                Some(a)
            } else {
                None
            }
        })
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now <= end {
            for _ in 0..500 {
                let mut moved = false;
                for i in 0..N {
                    while let Some(pdu) = self.hosts[i].poll_transmit() {
                        moved = true;
                        self.ctl[i].handle_signal(self.now, self.host_port[i], &pdu);
                    }
                    while let Some(e) = self.hosts[i].poll_event() {
                        if let SigEvent::Call(c) = e {
                            if let CallEvent::Incoming { call, .. } = &c {
                                let accept = CallAccept {
                                    qos: None,
                                    natm: NatmParams {
                                        data_endpoint: Some(sock(6000 + i as u16)),
                                        cookie: Some(77),
                                        ..NatmParams::default()
                                    },
                                    conn_id: Some(ConnectionId::exclusive(0, self.label)),
                                };
                                self.label += 1;
                                self.hosts[i].accept(self.now, *call, accept).unwrap();
                            }
                            self.events[i].push(c);
                        }
                    }
                    while let Some(o) = self.ctl[i].poll_output(&mut self.sw[i]) {
                        moved = true;
                        let (p, pdu, routing) = match o {
                            Output::Signal(p, pdu) => (p, pdu, false),
                            Output::Routing(p, f) => (p, f, true),
                            _ => continue,
                        };
                        if p == self.host_port[i] {
                            self.hosts[i].handle_frame(self.now, &pdu);
                            continue;
                        }
                        let Some((j, q)) = self.peer(i, p.0) else {
                            continue;
                        };
                        if routing {
                            self.ctl[j].handle_routing(self.now, PortId(q), &pdu);
                        } else {
                            self.ctl[j].handle_signal(self.now, PortId(q), &pdu);
                        }
                    }
                }
                if !moved {
                    break;
                }
            }
            self.now += MS;
            for i in 0..N {
                self.sw[i].handle_timeout(self.now);
                if self.hosts[i].poll_timeout().is_some_and(|t| t <= self.now) {
                    self.hosts[i].handle_timeout(self.now);
                }
                if self.ctl[i].poll_timeout().is_some_and(|t| t <= self.now) {
                    self.ctl[i].handle_timeout(self.now);
                }
            }
        }
    }

    fn call(&mut self, from: usize, to: usize, qos: &str) -> CallId {
        let q: Qos = qos.parse().unwrap();
        let params = CallParams {
            called: party(&host_addr(to)).unwrap(),
            calling: party(&host_addr(from)),
            sap: None,
            qos: q,
            natm: NatmParams {
                qos: Some(q.to_string()),
                data_endpoint: Some(sock(5000 + from as u16)),
                cookie: Some(77),
                ..NatmParams::default()
            },
            conn_id: Some(ConnectionId::exclusive(0, self.label)),
            multipoint: false,
            dtl: None,
        };
        self.label += 1;
        self.hosts[from].setup(self.now, params).unwrap()
    }

    fn outcome(&self, i: usize, call: CallId) -> (bool, Option<u8>) {
        let connected = self.events[i]
            .iter()
            .any(|e| matches!(e, CallEvent::Connected { call: c, .. } if *c == call));
        let released = self.events[i].iter().find_map(|e| match e {
            CallEvent::Released { call: c, cause, .. } if *c == call => Some(cause.value.raw()),
            _ => None,
        });
        (connected, released)
    }

    /// The oracle: whether some path from switch `from` to `to` has `need` cells/s
    /// free on every trunk both ways, from the control planes' own reservations.
    fn fits(&self, from: usize, to: usize, need: u64) -> bool {
        let free = |i: usize, p: u16| {
            let line = self.sw[i]
                .port_config(PortId(p))
                .map_or(0, |c| c.cells_per_sec());
            let used = self.ctl[i]
                .links()
                .iter()
                .find(|l| l.port == p)
                .map_or(0, |l| l.reserved_cells);
            line.saturating_sub(used)
        };
        let mut seen = [false; N];
        let mut stack = vec![from];
        seen[from] = true;
        while let Some(u) = stack.pop() {
            if u == to {
                return true;
            }
            for &(a, b) in &self.trunks {
                for (x, y) in [(a, b), (b, a)] {
                    if x.0 == u && !seen[y.0] && free(x.0, x.1) >= need && free(y.0, y.1) >= need {
                        seen[y.0] = true;
                        stack.push(y.0);
                    }
                }
            }
        }
        false
    }
}

#[test]
fn every_call_that_fits_a_ten_switch_mesh_is_admitted() {
    // 10 Mbit/s trunks, 2 Mbit/s calls each way: a trunk takes 4 of them.
    let mut m = Mesh::new(10_000_000);
    let qos = "cbr:pcr=2Mbps";
    // SplitMix-ish pairs, deterministic.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let mut need = None;
    let (mut admitted, mut refused) = (0, 0);
    for k in 0..80 {
        let from = next(N);
        let to = (from + 1 + next(N - 1)) % N;
        let fits = need.is_none_or(|n| m.fits(from, to, n));
        let c = m.call(from, to, qos);
        m.run(60 * MS); // set up, and the reservations flooded
        let (connected, released) = m.outcome(from, c);
        if connected {
            admitted += 1;
            if need.is_none() {
                let row = m.ctl[from].calls().into_iter().next().unwrap();
                need = Some(row.reserved_cells.0.max(row.reserved_cells.1));
            }
        } else {
            refused += 1;
        }
        assert_eq!(
            connected, fits,
            "call {k} from s{} to s{}: connected {connected}, cause {released:?}, but the oracle says fits = {fits}",
            from + 1,
            to + 1
        );
        if !connected {
            assert_eq!(
                released,
                Some(37),
                "call {k}: refused for want of cell rate"
            );
        }
    }
    eprintln!(
        "ten-switch mesh: {admitted} calls admitted, {refused} refused, all as the oracle says"
    );
    assert!(
        admitted > 20 && refused > 5,
        "{admitted} admitted, {refused} refused"
    );
}
