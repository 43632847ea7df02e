//! The network most of these tests start from: one `natm switch` with host ports h1
//! and h2, a route to each host's address, and both hosts' sigds attached, their
//! signalling links up.
//!
//! ```text
//!  h1 (+4420001) ── S ── h2 (+4420002)
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::sigd_support::{free_port, Sigd, LINK};
use crate::switch_support::SwitchProc;

/// How long the signalling links may take to come up.
const LINKS_UP: Duration = Duration::from_secs(30);

/// A fast frame-mode port's keys: 1 Gbit/s, 16,384 cells of buffer.
pub(crate) const FAST: &str = "mode = \"frame\"\nline_rate = 1000000000\nbuffer = 16384\n";

fn port(name: &str, bind: SocketAddr, peer: SocketAddr, keys: &str) -> String {
    format!(
        "[[port]]\nname = \"{name}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nsignalling = \"host\"\n{keys}"
    )
}

/// The switch (`name` for its files; `top`: configuration lines before the ports)
/// with ports h1 and h2 of `h1` and `h2`'s keys (mode, line rate, buffer, loss…),
/// and the sigds of +4420001 on h1 and +4420002 on h2, once both links are up.
pub(crate) fn two_hosts(name: &str, top: &str, h1: &str, h2: &str) -> (SwitchProc, Sigd, Sigd) {
    let [p1, p2, s1, s2] = std::array::from_fn(|_| free_port());
    let sw = SwitchProc::start(
        name,
        &[
            top.to_owned(),
            port("h1", s1, p1, h1),
            port("h2", s2, p2, h2),
            "[[route]]\nprefix = \"+4420001\"\nport = \"h1\"\n".to_owned(),
            "[[route]]\nprefix = \"+4420002\"\nport = \"h2\"\n".to_owned(),
        ]
        .concat(),
    );
    let host = |n: u8, sig: SocketAddr, at: SocketAddr| {
        Sigd::start_at(
            &format!(
                "addresses = [\"+442000{n}\"]\n{LINK}\n[[directory]]\nprefix = \"*\"\npeer = \"{at}\"\nswitch = true\n"
            ),
            sig,
        )
    };
    let (a, b) = (host(1, p1, s1), host(2, p2, s2));
    let until = Instant::now() + LINKS_UP;
    while !(a.stat()["peers"][0]["up"] == true && b.stat()["peers"][0]["up"] == true) {
        assert!(Instant::now() < until, "links not up\n{}", sw.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    (sw, a, b)
}

/// A JSON document a tool printed.
pub(crate) fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
}
