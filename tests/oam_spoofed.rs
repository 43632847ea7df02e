//! OAM F5 loopback requests forged with the peer's address (issue 31: "answers are
//! rate-limited per VC"): a connection answers a burst and then its rate, however
//! many requests a spoofer sends; the data path is not disturbed. Needs root (the
//! spoofer's raw socket).

mod spoof_support;

use natm::ulib::Wait;
use std::time::{Duration, Instant};

use natm::ulib::{Host, HostConfig};
use natm::wire::oam::{Loopback, Scope};
use spoof_support::Spoofer;

const WAIT: Duration = Duration::from_secs(20);
/// The direct-mode forward VC (client to server).
const VCI_FORWARD: u16 = 32;

#[test]
fn a_flood_of_forged_loopback_requests_gets_a_bounded_number_of_answers() {
    let a = Host::open(HostConfig::default()).unwrap();
    let b = Host::open(HostConfig::default()).unwrap();
    let l = b.bind("127.0.0.1:0", "reliable").unwrap();
    let at = l.local_addr().unwrap();
    let t = std::thread::spawn(move || a.connect(at, "reliable").unwrap());
    let s = l.accept(Wait::For(WAIT)).unwrap();
    let c = t.join().unwrap();
    let (client, server) = (c.local_addr().unwrap(), s.local_addr().unwrap());

    let mut frame = Scope::EndToEnd
        .frame_header(0, VCI_FORWARD)
        .to_bytes()
        .to_vec();
    frame.extend_from_slice(&Loopback::request(7).to_bytes());
    let spoof = Spoofer::open();
    let sent = 1_000_u64;
    let t0 = Instant::now();
    for _ in 0..sent {
        spoof.send(client, server, &frame);
    }
    // Every request is accounted for: answered, refused by the budget, or dropped by
    // the kernel's queue before natm saw it.
    let seen = |s: &natm::ulib::Connection| {
        let st = s.stats();
        st.oam.looped + st.oam.rate_limited + st.queue_drops.unwrap_or(0)
    };
    while seen(&s) < sent {
        assert!(
            t0.elapsed() < WAIT,
            "requests unaccounted for: {:?}",
            s.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let o = s.stats().oam;
    // The budget: a burst of 16, then 100 a second over the time the flood took.
    let budget = 16 + (100.0 * elapsed).ceil() as u64 + 1;
    assert!(o.looped >= 16, "the burst is answered: {o:?}");
    assert!(
        o.looped <= budget,
        "{} answers in {elapsed:.3} s: {o:?}",
        o.looped
    );
    assert!(o.rate_limited > 0 || elapsed > 9.0, "{o:?}");

    // The budget refills at its rate: a real probe is answered (one may still meet
    // the flood's debt, the next one cannot), and data flows.
    let answered = (0..3).any(|_| {
        c.oam_loopback(Scope::EndToEnd, Duration::from_secs(1))
            .unwrap()
            .is_some()
    });
    assert!(answered, "{:?}", s.stats().oam);
    c.send(b"after the flood", Wait::Block).unwrap();
    assert_eq!(
        s.recv(Wait::For(WAIT)).unwrap().as_deref(),
        Some(&b"after the flood"[..])
    );
}
