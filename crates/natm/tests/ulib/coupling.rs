//! A connection's two VCs tied together (`natm_proto::endpoint::coupling`), as an
//! application sees it over UDP: a peer's abort heard on one VC ends both.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use natm::transport::AbortReason;
use natm::ulib::{Error, Host, Wait};

/// A UDP relay between a caller and a listener that can lose the ABORTs the listener's
/// side sends on one VCI (`lose_aborts_on`: 0 loses none), as a lossy path may. Its
/// threads stop when it is dropped.
struct Relay {
    /// Where the caller sends.
    addr: SocketAddr,
    lose_aborts_on: Arc<AtomicU16>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn new(listener: SocketAddr) -> Relay {
        let near = Arc::new(UdpSocket::bind("127.0.0.1:0").unwrap());
        let far = Arc::new(UdpSocket::bind("127.0.0.1:0").unwrap());
        for s in [&near, &far] {
            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        }
        let caller: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        // The far side answers from whichever of its sockets last spoke.
        let callee = Arc::new(Mutex::new(listener));
        let lose = Arc::new(AtomicU16::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let forward = |from: Arc<UdpSocket>,
                       to: Arc<UdpSocket>,
                       lossy: bool,
                       learn: Box<dyn Fn(SocketAddr) + Send>,
                       dest: Box<dyn Fn() -> Option<SocketAddr> + Send>| {
            let (lose, stop) = (lose.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65_536];
                while !stop.load(Relaxed) {
                    let Ok((n, src)) = from.recv_from(&mut buf) else {
                        continue;
                    };
                    learn(src);
                    if lossy && is_abort_on(&buf[..n], lose.load(Relaxed)) {
                        continue;
                    }
                    if let Some(d) = dest() {
                        let _ = to.send_to(&buf[..n], d);
                    }
                }
            })
        };
        let threads = vec![
            forward(
                near.clone(),
                far.clone(),
                false,
                Box::new({
                    let caller = caller.clone();
                    move |a| *caller.lock().unwrap() = Some(a)
                }),
                Box::new({
                    let callee = callee.clone();
                    move || Some(*callee.lock().unwrap())
                }),
            ),
            forward(
                far.clone(),
                near.clone(),
                true,
                Box::new({
                    let callee = callee.clone();
                    move |a| *callee.lock().unwrap() = a
                }),
                Box::new(move || *caller.lock().unwrap()),
            ),
        ];
        Relay {
            addr: near.local_addr().unwrap(),
            lose_aborts_on: lose,
            stop,
            threads,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Whether `frame` is an ABORT TPDU on `vci`.
fn is_abort_on(frame: &[u8], vci: u16) -> bool {
    use natm::wire::tpdu::{Header, TpduType};
    use natm::wire::vcframe;
    let Ok((vc, tpdu)) = vcframe::Repr::parse_bytes(frame) else {
        return false;
    };
    vci != 0
        && vc.vci == vci
        && Header::parse_bytes(tpdu).is_ok_and(|(h, _)| h.ty == TpduType::Abort)
}

#[test]
fn a_peers_abort_heard_on_the_receiving_vc_alone_ends_the_sending_vc_too() {
    let (a, b) = (
        Host::open(crate::support::host_config()).unwrap(),
        Host::open(crate::support::host_config()).unwrap(),
    );
    let l = b.bind("127.0.0.1:0", "reliable").unwrap();
    let relay = Relay::new(l.local_addr().unwrap());
    let to = relay.addr;
    let t = std::thread::spawn(move || (a.connect(to, "reliable").unwrap(), a));
    let s = l.accept(Wait::For(Duration::from_secs(10))).unwrap();
    let (c, _a) = t.join().unwrap();
    c.send(b"hello", Wait::Block).unwrap();
    assert_eq!(
        s.recv(Wait::For(Duration::from_secs(10)))
            .unwrap()
            .as_deref(),
        Some(&b"hello"[..])
    );

    // The callee aborts; the path loses the ABORT on the caller's sending VC (a direct
    // call sends on VCI 32), so the caller hears it on its receiving VC only.
    relay
        .lose_aborts_on
        .store(natm_proto::endpoint::VCI_FORWARD, Relaxed);
    s.abort();
    assert!(matches!(
        c.recv(Wait::For(Duration::from_secs(10))),
        Err(Error::Aborted(AbortReason::Peer))
    ));
    // What the caller sends now would never be acknowledged: its sending VC ends with
    // the receiving one, so a flush ends at once instead of after ten retransmission
    // timeouts (minutes). Before the engine ran natm-proto's coupling rule, this
    // flush waited out its 10 s and the send before it was taken.
    let _ = c.send(b"anyone there?", Wait::No);
    assert!(
        matches!(
            c.flush(Duration::from_secs(10)),
            Err(Error::Aborted(AbortReason::Peer))
        ),
        "{:?}",
        c.stats().tx
    );
}
