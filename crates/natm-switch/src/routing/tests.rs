//! Routers alone, in virtual time: a ring of four, frames moved between them with
//! loss injected by dropping frames in flight, and a delay on every trunk.

use super::*;
use natm_proto::wire::addr::HostsFile;

const MS: Duration = Duration::from_millis(1);

/// Routers joined by trunks: (router, port) ↔ (router, port).
struct Mesh {
    now: Instant,
    r: Vec<Router>,
    trunks: Vec<((usize, u16), (usize, u16))>,
    /// Trunks cut (both directions dropped).
    cut: Vec<usize>,
    /// Drops every n-th frame (0: none).
    drop_every: u64,
    sent: u64,
    events: Vec<(usize, RouterEvent)>,
    /// One-way delay of every trunk (zero: delivered at once).
    delay: Duration,
    /// Frames on their way: (due, router, port, frame).
    in_flight: VecDeque<(Instant, usize, u16, Bytes)>,
}

fn prefix(s: &str) -> Prefix {
    Prefix::parse(s, &HostsFile::default()).unwrap()
}

fn addr(s: &str) -> AtmAddr {
    s.parse().unwrap()
}

impl Mesh {
    /// A ring 1-2-3-4-1: router i's port 1 goes to i+1's port 2; each reaches +44i0.
    fn ring(n: usize) -> Mesh {
        let now = Instant::from_nanos(1);
        let mut r: Vec<Router> = (0..n)
            .map(|i| Router::new(RoutingConfig::lab(NodeId(i as u32 + 1))))
            .collect();
        let mut trunks = Vec::new();
        for i in 0..n {
            trunks.push(((i, 1), ((i + 1) % n, 2)));
        }
        for (i, ri) in r.iter_mut().enumerate() {
            ri.add_trunk(now, PortId(1));
            ri.add_trunk(now, PortId(2));
            let links = [1, 2]
                .into_iter()
                .map(|p| {
                    (
                        PortId(p),
                        LocalLink {
                            max_cells: 100_000,
                            avail_cells: 100_000,
                        },
                    )
                })
                .collect();
            ri.set_local(now, links, vec![prefix(&format!("+44{}0", i + 1))]);
        }
        Mesh {
            now,
            r,
            trunks,
            cut: Vec::new(),
            drop_every: 0,
            sent: 0,
            events: Vec::new(),
            delay: Duration::ZERO,
            in_flight: VecDeque::new(),
        }
    }

    fn peer_of(&self, i: usize, p: u16) -> Option<(usize, u16, usize)> {
        self.trunks.iter().enumerate().find_map(|(k, &(a, b))| {
            if a == (i, p) {
                Some((b.0, b.1, k))
            } else if b == (i, p) {
                Some((a.0, a.1, k))
            } else {
                None
            }
        })
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now <= end {
            for _ in 0..50 {
                let mut moved = false;
                for i in 0..self.r.len() {
                    while let Some((p, f)) = self.r[i].poll_transmit() {
                        moved = true;
                        self.sent += 1;
                        let Some((j, q, k)) = self.peer_of(i, p.0) else {
                            continue;
                        };
                        if self.cut.contains(&k)
                            || (self.drop_every > 0 && self.sent.is_multiple_of(self.drop_every))
                        {
                            continue;
                        }
                        if self.delay.is_zero() {
                            self.r[j].handle_frame(self.now, PortId(q), &f);
                        } else {
                            self.in_flight.push_back((self.now + self.delay, j, q, f));
                        }
                    }
                    while let Some(e) = self.r[i].poll_event() {
                        self.events.push((i, e));
                    }
                }
                if !moved {
                    break;
                }
            }
            self.now += MS;
            // One delay for every frame: they arrive in the order sent.
            while self.in_flight.front().is_some_and(|f| f.0 <= self.now) {
                let (_, j, q, f) = self.in_flight.pop_front().expect("looked at");
                self.r[j].handle_frame(self.now, PortId(q), &f);
            }
            for r in &mut self.r {
                if r.poll_timeout().is_some_and(|t| t <= self.now) {
                    r.handle_timeout(self.now);
                }
            }
        }
    }

    /// Runs until every router holds every router's latest PTSE, at most `limit`.
    fn until_converged(&mut self, limit: Duration) -> bool {
        let end = self.now + limit;
        while self.now < end {
            self.run(5 * MS);
            if self.converged() {
                return true;
            }
        }
        false
    }

    /// Whether every router holds every router's latest PTSE.
    fn converged(&self) -> bool {
        self.r.iter().all(|a| {
            self.r.iter().all(|b| {
                let own = b.db.get(&b.node()).map(|s| s.ptse.seq);
                a.db.get(&b.node()).map(|s| s.ptse.seq) == own
            })
        })
    }
}

fn nodes(d: &Dtl) -> Vec<u32> {
    d.hops.iter().map(|h| h.node.0).collect()
}

#[test]
fn a_ring_of_four_finds_its_neighbours_and_floods_the_database() {
    let mut m = Mesh::ring(4);
    m.run(300 * MS);
    assert!(m.converged());
    for r in &m.r {
        assert_eq!(r.database().len(), 4);
        assert!(r.neighbour(PortId(1)).is_some() && r.neighbour(PortId(2)).is_some());
    }
    let routes: Vec<(u32, Vec<u32>)> = m.r[0]
        .routes()
        .into_iter()
        .map(|(n, p)| (n.0, p.into_iter().map(|x| x.0).collect()))
        .collect();
    assert_eq!(
        routes,
        [(2, vec![1, 2]), (3, vec![1, 2, 3]), (4, vec![1, 4])]
    );
    // Node 1 to node 3's hosts: two equal paths; the tie goes to node 2.
    let d = m.r[0].path(&addr("+4430123"), 1000, 1000, &[]).unwrap();
    assert_eq!(nodes(&d), [1, 2, 3]);
    assert_eq!(d.hops[0].port, logical_port(PortId(1)));
    assert_eq!(d.hops[2].port, 0);
    // Next door: one hop.
    assert_eq!(
        nodes(&m.r[0].path(&addr("+4440"), 0, 0, &[]).unwrap()),
        [1, 4]
    );
    assert!(m.r[0].is_local(&addr("+441099")));
    assert_eq!(
        m.r[0].path(&addr("+4499"), 0, 0, &[]),
        Err(NoPath::Unreachable)
    );
}

#[test]
fn a_blocked_link_or_node_takes_the_other_way_round() {
    let mut m = Mesh::ring(4);
    m.run(300 * MS);
    let via2 = Blocked::Link {
        from: NodeId(1),
        port: logical_port(PortId(1)),
        to: NodeId(2),
    };
    let d = m.r[0].path(&addr("+4430"), 0, 0, &[via2]).unwrap();
    assert_eq!(nodes(&d), [1, 4, 3]);
    let d = m.r[0]
        .path(&addr("+4430"), 0, 0, &[Blocked::Node(NodeId(4))])
        .unwrap();
    assert_eq!(nodes(&d), [1, 2, 3]);
    assert_eq!(
        m.r[0].path(&addr("+4430"), 0, 0, &[via2, Blocked::Node(NodeId(4))]),
        Err(NoPath::NoCapacity)
    );
}

#[test]
fn the_path_avoids_links_without_room_for_the_contract() {
    let mut m = Mesh::ring(4);
    m.run(300 * MS);
    // Node 2's link towards node 3 (its port 1) is nearly full.
    let t = m.now;
    let links = [(1, 5_000), (2, 100_000)]
        .into_iter()
        .map(|(p, a)| {
            (
                PortId(p),
                LocalLink {
                    max_cells: 100_000,
                    avail_cells: a,
                },
            )
        })
        .collect();
    m.r[1].set_local(t, links, vec![prefix("+4420")]);
    m.run(100 * MS);
    assert_eq!(
        nodes(&m.r[0].path(&addr("+4430"), 4_000, 0, &[]).unwrap()),
        [1, 2, 3]
    );
    assert_eq!(
        nodes(&m.r[0].path(&addr("+4430"), 6_000, 0, &[]).unwrap()),
        [1, 4, 3]
    );
    // The backward direction counts too: node 3's link back towards node 2.
    assert_eq!(
        nodes(&m.r[2].path(&addr("+4410"), 0, 6_000, &[]).unwrap()),
        [3, 4, 1]
    );
}

#[test]
fn a_dead_trunk_is_noticed_and_the_topology_converges_around_it() {
    let mut m = Mesh::ring(4);
    m.run(300 * MS);
    let cut_at = m.now;
    m.cut.push(0); // 1 ↔ 2
    let mut converged_at = None;
    for _ in 0..100 {
        m.run(10 * MS);
        let ok = m.r.iter().all(|r| {
            nodes(&r.path(&addr("+4420"), 0, 0, &[]).unwrap_or_default()) != [1, 2]
                && r.path(&addr("+4420"), 0, 0, &[]).is_ok()
        });
        if ok
            && m.r[0]
                .path(&addr("+4420"), 0, 0, &[])
                .is_ok_and(|d| nodes(&d) == [1, 4, 3, 2])
        {
            converged_at = Some(m.now);
            break;
        }
    }
    let took = converged_at
        .expect("converged")
        .saturating_duration_since(cut_at);
    // The dead interval (400 ms) and a hold-down; flooding itself is immediate here.
    assert!(took <= 520 * MS, "{took:?}");
    assert!(m.events.iter().any(|&(i, e)| i == 0
        && e == RouterEvent::Down {
            port: PortId(1),
            node: NodeId(2)
        }));
    // Healed: the trunk is used again.
    m.cut.clear();
    m.run(300 * MS);
    assert_eq!(
        nodes(&m.r[0].path(&addr("+4420"), 0, 0, &[]).unwrap()),
        [1, 2]
    );
}

#[test]
fn flooding_survives_lost_frames() {
    let mut m = Mesh::ring(4);
    m.drop_every = 4; // a quarter of all frames lost, hellos and acks included
    assert!(m.until_converged(1000 * MS));
    let before = m.r.iter().map(|r| r.counters().retransmits).sum::<u64>();
    assert!(before > 0);
    // A change floods through the same loss.
    let t = m.now;
    m.r[2].set_local(t, BTreeMap::new(), vec![prefix("+4430"), prefix("+4431")]);
    m.run(30 * MS); // past the hold-down: the change is originated
    assert!(m.until_converged(1000 * MS));
    assert!(m.r[0].path(&addr("+4431"), 0, 0, &[]).is_ok());
}

#[test]
fn an_unrefreshed_ptse_ages_out() {
    let mut m = Mesh::ring(4);
    m.run(300 * MS);
    // Node 3 isolated: its PTSE stays until its lifetime (4 s) ends.
    m.cut.extend([1, 2]);
    m.run(1000 * MS);
    assert!(m.r[0].database().iter().any(|r| r.origin == 3));
    assert!(m.r[0].path(&addr("+4430"), 0, 0, &[]).is_err());
    m.run(4000 * MS);
    assert!(!m.r[0].database().iter().any(|r| r.origin == 3));
}

/// Trunks of 300 ms one way: the retransmission timeout follows the round trip, so a
/// PTSE goes across about once, where a fixed 50 ms sent each a dozen times.
#[test]
fn ptse_retransmission_follows_a_long_round_trip() {
    let mut m = Mesh::ring(4);
    m.delay = 300 * MS;
    assert!(m.until_converged(10_000 * MS));
    let sum = |m: &Mesh| -> (u64, u64) {
        m.r.iter().fold((0, 0), |(o, r), x| {
            (o + x.counters().ptses_out, r + x.counters().retransmits)
        })
    };
    let (out0, retx0) = sum(&m);
    // Ten seconds of refreshes (each router re-originates every second).
    m.run(10_000 * MS);
    let (out, retx) = (sum(&m).0 - out0, sum(&m).1 - retx0);
    assert!(out >= 4 * 10 * 2, "refreshes flooded: {out}");
    assert!(
        retx * 10 <= out,
        "{retx} retransmissions for {out} PTSEs sent in the steady state"
    );
    // Still a routed network: every router reaches the others.
    assert!(m.converged());
    assert!(m.r[0].path(&addr("+4430"), 0, 0, &[]).is_ok());
}
