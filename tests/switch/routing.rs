//! Routing between `natm switch` processes (issue 33): four switches in a ring, each
//! with `[routing]` and only a route for its own host; h1 calls h3 over a path the
//! first switch computes, the transit switch on it is killed, and a new call goes
//! round the other way.
//!
//! ```text
//!   h1 ── S1 ── S2
//!          │     │
//!         S4 ── S3 ── h3
//! ```

use natm::ulib::Wait;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::sigd_support::{free_port, Sigd, LINK};
use crate::switch_support::SwitchProc;

fn port(name: &str, bind: SocketAddr, peer: SocketAddr, role: &str) -> String {
    format!(
        "[[port]]\nname = \"{name}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = \"frame\"\nline_rate = 1000000000\nbuffer = 16384\nsignalling = \"{role}\"\n"
    )
}

fn host(n: u8, sig: SocketAddr, switch: SocketAddr) -> Sigd {
    Sigd::start_at(
        &format!(
            "addresses = [\"+44300{n}\"]\n{LINK}\n[[directory]]\nprefix = \"*\"\npeer = \"{switch}\"\nswitch = true\n"
        ),
        sig,
    )
}

/// A call from `from` to `to_addr:ring`, one message each way; the connection held.
fn call(
    from: &Sigd,
    to: &Sigd,
    to_addr: &str,
    diag: &dyn Fn() -> String,
) -> (natm::ulib::Connection, natm::ulib::Connection) {
    let l = to.host().bind("ring", "reliable").unwrap();
    let t = std::thread::spawn(move || {
        let c = l
            .next_call(Wait::For(Duration::from_secs(10)))
            .unwrap()
            .accept()
            .unwrap();
        let m = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
        c.send(&m, Wait::Block).unwrap();
        c
    });
    let c = from
        .host()
        .connect(format!("{to_addr}:ring").as_str(), "reliable")
        .unwrap_or_else(|e| panic!("call to {to_addr}: {e}\n{}", diag()));
    c.send(b"round the ring", Wait::Block).unwrap();
    let got = c.recv(Wait::For(Duration::from_secs(5))).unwrap().unwrap();
    assert_eq!(&got[..], b"round the ring");
    (c, t.join().unwrap())
}

/// The trunk of switch `s` (its stat) that carries calls.
fn busy_trunks(s: &SwitchProc) -> Vec<String> {
    busy_in(&s.stat())
}

/// The trunks with calls in a stat document.
fn busy_in(st: &serde_json::Value) -> Vec<String> {
    let names: Vec<String> = st["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    st["signalling"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["role"] == "switch" && l["calls"].as_u64() > Some(0))
        .map(|l| names[l["port"].as_u64().unwrap() as usize].clone())
        .collect()
}

#[test]
fn a_call_is_routed_round_a_killed_switch() {
    // Trunk k joins switch k's "east" and switch k+1's "west".
    let east: [SocketAddr; 4] = std::array::from_fn(|_| free_port());
    let west: [SocketAddr; 4] = std::array::from_fn(|_| free_port());
    let [h1, h3, s1h, s3h] = std::array::from_fn(|_| free_port());
    let mut sw: Vec<SwitchProc> = (0..4)
        .map(|i| {
            let mut t = format!("name = \"s{}\"\n[routing]\nnode = {}\n", i + 1, i + 1);
            t += &port("east", east[i], west[(i + 1) % 4], "switch");
            t += &port("west", west[i], east[(i + 3) % 4], "switch");
            if i == 0 {
                t += &port("h1", s1h, h1, "host");
                t += "[[route]]\nprefix = \"+443001\"\nport = \"h1\"\n";
            }
            if i == 2 {
                t += &port("h3", s3h, h3, "host");
                t += "[[route]]\nprefix = \"+443003\"\nport = \"h3\"\n";
            }
            SwitchProc::start(&format!("s{}", i + 1), &t)
        })
        .collect();
    let h = [host(1, h1, s1h), host(3, h3, s3h)];
    let diag = |sw: &[SwitchProc]| {
        sw.iter()
            .map(|s| format!("{}\n{}", s.stat(), s.log()))
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    // Every link up and every switch's database holding all four.
    for s in &sw {
        s.stat_until(|st| {
            st["routing"]["database"]
                .as_array()
                .is_some_and(|d| d.len() == 4)
                && st["signalling"]
                    .as_array()
                    .is_some_and(|l| l.iter().all(|r| r["up"] == true))
        });
    }
    for s in &h {
        let end = Instant::now() + Duration::from_secs(20);
        while s.stat()["peers"][0]["up"] != true {
            assert!(Instant::now() < end, "host link not up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let (c1, d1) = call(&h[0], &h[1], "+443003", &|| diag(&sw));
    // The stat file is rewritten every 50 ms: wait for it to show the call.
    sw[0].stat_until(|st| !busy_in(st).is_empty());
    let first = busy_trunks(&sw[0]);
    assert_eq!(first.len(), 1, "{}", diag(&sw));
    // The path's transit switch: S2 if S1 sent it east, else S4.
    let transit = if first[0] == "east" { 1 } else { 3 };
    let other = 4 - transit;
    let killed = Instant::now();
    sw[transit].kill();
    // The call is released (its trunk's hellos stop: ~400 ms).
    let r = c1.recv(Wait::For(Duration::from_secs(5)));
    let released = killed.elapsed();
    assert!(r.is_err(), "the call ends: {r:?}");
    drop((c1, d1));
    // The first switch's topology loses the dead one's links.
    sw[0].stat_until(|st| {
        st["routing"]["neighbours"]
            .as_array()
            .is_some_and(|n| n.len() == 1)
    });
    let converged = killed.elapsed();
    let (c2, d2) = call(&h[0], &h[1], "+443003", &|| diag(&sw));
    let second_call = killed.elapsed();
    sw[other].stat_until(|st| st["calls"].as_array().is_some_and(|c| c.len() == 1));
    // The other way round: wait for S1's stat file to show the new call on the
    // other trunk and the old one gone (a file written 50 ms ago may still show the
    // killed path's trunk busy and not yet the new one; CI saw exactly that).
    sw[0].stat_until(|st| {
        let busy = busy_in(st);
        busy.len() == 1 && busy != first
    });
    assert!(
        sw[other].stat()["calls"]
            .as_array()
            .is_some_and(|c| c.len() == 1),
        "{}",
        diag(&sw)
    );
    eprintln!(
        "switch {} killed: call released after {:.0} ms, S1's topology converged after {:.0} ms, \
         a new call round it connected {:.0} ms after the kill",
        transit + 1,
        released.as_secs_f64() * 1e3,
        converged.as_secs_f64() * 1e3,
        second_call.as_secs_f64() * 1e3
    );
    drop((c2, d2));
    // `natm stat --switch` shows the topology database.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["stat", "--switch"])
        .arg(&sw[0].stat)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("routing: node 1"), "{text}");
    assert!(text.contains("+443003"), "{text}");
    let via = if transit == 1 {
        "node 3 via 1→4→3"
    } else {
        "node 3 via 1→2→3"
    };
    assert!(text.contains(via), "{text}");
}
