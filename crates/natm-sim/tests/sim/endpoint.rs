//! Whole endpoints through the simulated network: the handshake, data both ways and
//! the close of duplex connections — what an application runs, not bare PSBs —
//! through a lossy bottleneck.

use std::net::SocketAddr;
use std::time::Duration;

use natm_proto::endpoint::{ClientConfig, EndpointConfig, Event, ServerConfig, State};
use natm_proto::time::Instant;
use natm_proto::transport::{FlowKind, TransportConfig};
use natm_sim::endpoint_host::{ConnApp, EndpointHost};
use natm_sim::psb_host::{Sink, Source};
use natm_sim::{LinkConfig, QueueLimit, Sim, VcId};

const PATH: VcId = VcId(1);

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 7000))
}

fn cfg() -> TransportConfig {
    let mut c = TransportConfig::reliable();
    c.flow = FlowKind::Window;
    c.window = 64;
    c.rcv_buf = 64 * 4096;
    c.snd_buf = 128 * 4096;
    c.connect_attempts = 30;
    c.close_attempts = 30;
    c.max_timeouts = 30;
    c
}

fn app(send_tag: u8, bytes: u64, recv_tag: u8, msg: u64, recv_bytes: u64) -> ConnApp {
    ConnApp {
        source: Some(Source::new(send_tag, bytes, msg)),
        sink: Some(Sink::new(recv_tag).expecting(msg, recv_bytes)),
    }
}

/// `conns` connections from a client to a server through a 10 Mbit/s bottleneck with
/// `loss`, each sending `up` bytes and getting `down` back, both sides closing.
fn run(seed: u64, loss: f64, conns: u8, up: u64, down: u64) -> Sim<EndpointHost> {
    let ms = Duration::from_millis;
    let msg = 10_000;
    let mut client = EndpointHost::new(
        addr(1),
        EndpointConfig {
            seed,
            handshake_timeout: Duration::from_secs(60),
            server: None,
        },
    )
    .path(addr(2), PATH);
    for i in 0..conns {
        client = client.connect_at(
            Instant::ZERO + ms(u64::from(i)),
            addr(2),
            ClientConfig::new(cfg()),
            app(i, up, 100, msg, down),
        );
    }
    // Every accepted connection gets the same application: it sends pattern 100 back
    // and checks pattern 0, which only the first connection's source writes (the
    // test with several connections counts bytes, not patterns).
    let server = EndpointHost::new(
        addr(2),
        EndpointConfig {
            seed: seed ^ 0xFF,
            handshake_timeout: Duration::from_secs(60),
            server: Some(ServerConfig::new(cfg())),
        },
    )
    .path(addr(1), PATH)
    .accepting_with(app(100, down, 0, msg, up));
    let mut sim: Sim<EndpointHost> = Sim::new(seed);
    let a = sim.add_host(client);
    let b = sim.add_host(server);
    let access = sim
        .add_link(LinkConfig::new(100_000_000, ms(0)).name("access"))
        .expect("valid link");
    let bottleneck = sim
        .add_link(
            LinkConfig::new(10_000_000, ms(5))
                .name("bottleneck")
                .queue_limit(QueueLimit::frames(40))
                .loss(loss),
        )
        .expect("valid link");
    let back = sim
        .add_link(
            LinkConfig::new(10_000_000, ms(5))
                .name("back")
                .queue_limit(QueueLimit::frames(40))
                .loss(loss),
        )
        .expect("valid link");
    sim.add_duplex_route(a, PATH, b, &[access, bottleneck], &[back])
        .expect("valid route");
    sim.run_until(Instant::ZERO + Duration::from_secs(300));
    sim
}

#[test]
fn handshake_transfer_and_close_through_a_lossy_bottleneck() {
    let sim = run(7, 0.02, 1, 2 << 20, 512 << 10);
    let ids: Vec<_> = sim.host_ids().collect();
    let (client, server) = (sim.host(ids[0]), sim.host(ids[1]));
    let (_, c) = client.conns().next().expect("the client's connection");
    let s = server
        .conn(server.accepted()[0])
        .expect("the accepted connection");
    assert!(c.saw(Event::Connected) && s.saw(Event::Connected));
    let (cs, ss) = (
        c.app.sink.as_ref().expect("sink"),
        s.app.sink.as_ref().expect("sink"),
    );
    assert!(cs.intact() && ss.intact(), "data corrupted");
    assert_eq!(ss.delivered(), 2 << 20);
    assert_eq!(cs.delivered(), 512 << 10);
    assert_eq!((cs.bad_messages(), ss.bad_messages()), (0, 0));
    assert!(c.saw(Event::PeerClosed) && s.saw(Event::PeerClosed));
    assert!(c.saw(Event::Closed) && s.saw(Event::Closed));
    assert_eq!(c.conn.state(), State::Closed);
    assert_eq!(s.conn.state(), State::Closed);
    assert_eq!(
        (client.open_connections(), server.open_connections()),
        (0, 0)
    );
    let bn = sim
        .link(sim.link_by_name("bottleneck").expect("named"))
        .stats();
    assert!(bn.dropped_random > 0, "loss was injected");
    assert!(c.conn.stats().tx.retransmissions() > 0);
}

#[test]
fn several_connections_share_the_bottleneck_and_all_finish() {
    let sim = run(11, 0.01, 4, 256 << 10, 0);
    let ids: Vec<_> = sim.host_ids().collect();
    let (client, server) = (sim.host(ids[0]), sim.host(ids[1]));
    assert_eq!(server.accepted().len(), 4);
    for h in server.accepted() {
        let s = server.conn(*h).expect("accepted");
        let sink = s.app.sink.as_ref().expect("sink");
        assert_eq!(sink.delivered(), 256 << 10);
        assert_eq!(s.conn.state(), State::Closed);
    }
    for (_, c) in client.conns() {
        assert!(c.saw(Event::Connected) && c.saw(Event::Closed));
        assert_eq!(c.conn.state(), State::Closed);
    }
    assert_eq!(
        (client.open_connections(), server.open_connections()),
        (0, 0)
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let digest = |sim: &Sim<EndpointHost>| {
        let ids: Vec<_> = sim.host_ids().collect();
        let c = sim.host(ids[0]);
        let (_, hc) = c.conns().next().expect("a connection");
        (sim.now(), sim.events_processed(), hc.conn.stats())
    };
    assert_eq!(
        digest(&run(3, 0.03, 1, 300_000, 100_000)),
        digest(&run(3, 0.03, 1, 300_000, 100_000))
    );
}
