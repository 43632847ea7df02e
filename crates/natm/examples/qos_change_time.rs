//! Time to apply a QoS change on a guaranteed VC over loopback (direct mode, two
//! hosts' engines in one process): request → the peer's acceptance → the receiver's
//! rate changed. The sender keeps a 8 Mbit/s VC (floor 1 Mbit/s) busy with 2,000-byte
//! messages and alternates `set_qos` between 8 and 2 Mbit/s; the receiver timestamps
//! every message. "Receiver rate changed" is the first arrival after the request
//! whose gap from the previous one is at least half-way between the two rates'
//! spacings (2 ms at 8 Mbit/s, 8 ms at 2 Mbit/s). Prints medians and spreads, and the
//! VC's RTT from SYNC probes and raw UDP round trips between blocking sockets (the
//! reference: a QoS change's confirmation is one round trip through both engines).
//!
//! `cargo run --release -p natm --example qos_change_time -- [CHANGES]`

use natm::ulib::Wait;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use natm::ulib::{Host, HostConfig};

const QOS: &str = "cbr:pcr=8Mbps,min_pcr=1Mbps";
const MSG: usize = 2000;

/// The reference: `n` round trips of a 32-byte datagram between two blocking UDP
/// sockets on loopback (one echoing thread), in ms.
fn udp_round_trips(n: usize) -> Vec<f64> {
    let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    a.connect(b.local_addr().unwrap()).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..n {
            let k = b.recv(&mut buf).unwrap();
            b.send(&buf[..k]).unwrap();
        }
    });
    let mut out = Vec::with_capacity(n);
    let mut buf = [0u8; 64];
    for _ in 0..n {
        let t = Instant::now();
        a.send(&[7u8; 32]).unwrap();
        a.recv(&mut buf).unwrap();
        out.push(t.elapsed().as_secs_f64() * 1e3);
    }
    echo.join().unwrap();
    out
}

fn main() {
    let changes: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let a = Host::open(HostConfig::default()).unwrap();
    let b = Host::open(HostConfig::default()).unwrap();
    let l = b.bind("127.0.0.1:0", QOS).unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || a.connect(addr, QOS).unwrap());
    let rx = l.accept(Wait::For(Duration::from_secs(5))).unwrap();
    let tx = Arc::new(t.join().unwrap());
    let arrivals = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let seen = arrivals.clone();
    let reader = std::thread::spawn(move || {
        while let Ok(Some(_)) = rx.recv(Wait::For(Duration::from_secs(5))) {
            seen.lock().unwrap().push(Instant::now());
        }
    });
    let sender = {
        let tx = tx.clone();
        let stop = Arc::new(Mutex::new(false));
        let s = stop.clone();
        let h = std::thread::spawn(move || {
            let m = vec![1u8; MSG];
            while !*s.lock().unwrap() {
                tx.send(&m, Wait::Block).unwrap();
            }
        });
        (h, stop)
    };
    std::thread::sleep(Duration::from_millis(300));
    let (mut confirm, mut down, mut up) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..changes {
        let (qos, spacing_old, spacing_new) = if k % 2 == 0 {
            ("cbr:pcr=2Mbps", 2.0, 8.0)
        } else {
            ("cbr:pcr=8Mbps", 8.0, 2.0)
        };
        let asked = Instant::now();
        let ch = tx.set_qos(qos, Duration::from_secs(5)).unwrap();
        confirm.push(ch.took.as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(400));
        let threshold = Duration::from_secs_f64((spacing_old + spacing_new) / 2.0 / 1e3);
        let arr = arrivals.lock().unwrap();
        let after: Vec<Instant> = arr.iter().copied().filter(|t| *t >= asked).collect();
        let slower = spacing_new > spacing_old;
        let hit = after.windows(2).find(|w| {
            let gap = w[1] - w[0];
            if slower {
                gap >= threshold
            } else {
                // Faster: the first gap below the threshold.
                gap < threshold
            }
        });
        if let Some(w) = hit {
            let v = if slower { &mut down } else { &mut up };
            v.push((w[1] - asked).as_secs_f64() * 1e3);
        }
    }
    *sender.1.lock().unwrap() = true;
    let stats = tx.stats();
    sender.0.join().unwrap();
    tx.close();
    let _ = tx.flush(Duration::from_secs(5));
    drop(tx);
    let _ = reader.join();
    let show = |name: &str, v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            println!("{name}: no samples");
            return;
        }
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        println!(
            "{name}: median {:.3} ms, p10 {:.3}, p90 {:.3}, min {:.3}, max {:.3} ({} samples)",
            q(0.5),
            q(0.1),
            q(0.9),
            v[0],
            v[v.len() - 1],
            v.len()
        );
    };
    show("request -> confirmed", &mut confirm);
    show("request -> receiver rate changed, 8 -> 2 Mbit/s", &mut down);
    show("request -> receiver rate changed, 2 -> 8 Mbit/s", &mut up);
    show(
        "raw UDP round trip, blocking sockets",
        &mut udp_round_trips(200),
    );
    println!(
        "VC RTT from SYNC: {:?} ({} probes answered)",
        stats.srtt, stats.tx.sync_echoes
    );
}
