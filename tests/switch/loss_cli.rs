//! Exact loss counts on a VC without error control (issue 14), as `natm listen`
//! reports them: a `natm switch` drops a share of the datagrams it sends to the
//! listener's host, and the listener's summary accounts for every message the caller
//! sent — delivered or counted lost, once — and for every lost TPDU.
//!
//! ```text
//!  h1 (+4420001) ── S ──(loss)── h2 (+4420002)
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::sigd_support::tool::{listen, natm};
use crate::sigd_support::{free_port, Sigd, LINK};
use crate::switch_support::SwitchProc;

const LIMIT: Duration = Duration::from_secs(30);

fn port(name: &str, bind: SocketAddr, peer: SocketAddr, extra: &str) -> String {
    format!(
        "[[port]]\nname = \"{name}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = \"frame\"\nline_rate = 1000000000\nbuffer = 16384\nsignalling = \"host\"\n{extra}"
    )
}

fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
}

#[test]
fn the_listener_counts_every_lost_message_and_tpdu_once() {
    let [h1, h2, s1, s2] = std::array::from_fn(|_| free_port());
    let sw = SwitchProc::start(
        "loss",
        &[
            "seed = 7\n".to_owned(),
            port("h1", s1, h1, ""),
            port("h2", s2, h2, "loss = 0.03\n"),
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
    let (a, b) = (host(1, h1, s1), host(2, h2, s2));
    let until = Instant::now() + LIMIT;
    while !(a.stat()["peers"][0]["up"] == true && b.stat()["peers"][0]["up"] == true) {
        assert!(Instant::now() < until, "links not up\n{}", sw.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let l = listen(&b, &["load", "--discard", "--json"]);
    // 1,000 messages of three 1,024-octet TPDUs, paced.
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:load",
            "--qos",
            "ubr:tpdu=1024",
            "--bytes",
            "3000000",
            "--size",
            "3000",
            "--rate",
            "100Mbps",
            "--json",
            "--quiet",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
    let (cs, ls) = (json(&c.stdout), json(&l.stdout));
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert_eq!(n(&cs, "messages_sent"), 1000, "{cs}");
    let (got, lost) = (n(&ls, "messages_received"), n(&ls, "messages_lost"));
    assert_eq!(
        got + lost,
        1000,
        "every message delivered or counted lost once: {ls}"
    );
    assert!(lost > 0 && got > 0, "3% loss of 3,000 TPDUs: {ls}");
    // 3,000 octets are three TPDUs of 1,024 (the last of 952): every one of the
    // 3,000 either arrived or is counted lost, once — lost by the switch's random
    // loss or by a full socket queue on the way (the load runs beside other work).
    let tpdus = n(&ls, "tpdus_lost");
    assert_eq!(n(&ls, "tpdus_received") + tpdus, 3000, "{ls}");
    assert!(tpdus >= lost, "each lost message lost a TPDU: {ls}");
    assert!(tpdus <= 3 * lost, "a lost TPDU costs one message: {ls}");
    assert!(n(&ls, "gaps") <= tpdus, "{ls}");
    drop(sw);
}
