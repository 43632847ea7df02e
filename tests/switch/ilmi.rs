//! ILMI on an atmtcp `uni` port (issue 33) against a user that speaks it over the
//! port's TCP connection as Linux's `ilmid` does (the Linux guest's own test is
//! `tests/linuxatm_svc.rs`): the prefix is offered once the user reads its
//! configuration, a registration under it shows in the stat file, one outside it is
//! refused, and the connection's end ends the registration.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use natm_proto::ilmi::{
    self, as_int, atm_layer, bind, index_of, int, integer, null, octets_index, oid, pdu, status,
    GetRequest, GetResponse, Pdu, Pdus, SetRequest, ILMI_VCI,
};
use natm_switchd::atmtcp::{emit_data, Decoder, Message};

use crate::switch_support::SwitchProc;

const PREFIX: &str = "47.0005.80ffe1000000f21a26d8";

/// The ILMI user's end of the atmtcp connection.
struct User {
    s: TcpStream,
    dec: Decoder,
}

impl User {
    fn send(&mut self, pdus: Pdus) {
        let b = ilmi::encode(pdus).expect("encodes");
        let mut out = Vec::new();
        emit_data(0, ILMI_VCI, &b, &mut out).expect("frames");
        self.s.write_all(&out).expect("sends");
    }

    /// The next ILMI message from the switch.
    fn recv(&mut self) -> Pdus {
        let until = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 4096];
        loop {
            assert!(Instant::now() < until, "no ILMI message from the switch");
            let n = self.s.read(&mut buf).expect("reads");
            assert!(n > 0, "the switch closed the connection");
            for m in self.dec.handle_all(&buf[..n]).expect("atmtcp") {
                if let Message::Data { vpi: 0, vci, sdu } = m {
                    if vci == ILMI_VCI {
                        return ilmi::decode(&sdu).expect("ILMI").data;
                    }
                }
            }
        }
    }

    /// The switch's answer to request `id` (other messages it sends meanwhile are
    /// returned too, in order).
    fn answer(&mut self, id: i64) -> (Pdu, Vec<Pdus>) {
        let mut others = Vec::new();
        loop {
            match self.recv() {
                Pdus::GetResponse(GetResponse(r)) if int(&r.request_id) == Some(id) => {
                    return (r, others)
                }
                p => others.push(p),
            }
        }
    }
}

fn aesa(esi_last: u8) -> [u8; 20] {
    let mut a = [0u8; 20];
    a[..13].copy_from_slice(&hex::decode(PREFIX.replace('.', "")).expect("hex"));
    a[13..19].copy_from_slice(&[0x00, 0x20, 0xea, 0x00, 0x0e, esi_last]);
    a
}

fn register(id: i64, a: &[u8; 20]) -> Pdus {
    let name = octets_index(oid::ADDRESS_STATUS, 0, a);
    Pdus::SetRequest(SetRequest(pdu(id, 0, 0, vec![bind(&name, integer(1))])))
}

fn dotted(a: &[u8; 20]) -> String {
    let h = hex::encode(a);
    format!(
        "{}.{}.{}.{}.{}",
        &h[..2],
        &h[2..6],
        &h[6..26],
        &h[26..38],
        &h[38..]
    )
}

fn port_ilmi(stat: &serde_json::Value) -> serde_json::Value {
    stat["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "linux")
        .map(|p| p["ilmi"].clone())
        .unwrap_or_default()
}

#[test]
fn a_user_gets_the_prefix_registers_under_it_and_loses_it_with_the_connection() {
    let sw = SwitchProc::start(
        "ilmi",
        &format!(
            "[[port]]\nname = \"linux\"\nmode = \"atmtcp\"\nlisten = \"127.0.0.1:0\"\n\
             signalling = \"uni\"\nilmi_prefix = \"{PREFIX}\"\n"
        ),
    );
    let s = TcpStream::connect(sw.ports["linux"]).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut u = User {
        s,
        dec: Decoder::new(),
    };
    // The switch's coldStart on the new connection.
    assert!(matches!(u.recv(), Pdus::Trap(t) if int(&t.generic_trap) == Some(0)));
    u.send(ilmi::cold_start(0));
    let device_type = [oid::ATM_LAYER, &[atm_layer::DEVICE_TYPE, 0]].concat();
    u.send(Pdus::GetRequest(GetRequest(pdu(
        1,
        0,
        0,
        vec![bind(&device_type, null())],
    ))));
    let (r, _) = u.answer(1);
    assert_eq!(as_int(&r.variable_bindings[0].value), Some(2), "a node");
    // Then the prefix.
    let offer = loop {
        if let Pdus::SetRequest(SetRequest(r)) = u.recv() {
            let name = &r.variable_bindings[0].name;
            assert!(index_of(name, oid::NET_PREFIX_STATUS).is_some());
            break r;
        }
    };
    let id = int(&offer.request_id).unwrap();
    u.send(Pdus::GetResponse(GetResponse(pdu(
        id,
        0,
        0,
        offer.variable_bindings,
    ))));
    // A registration under it.
    u.send(register(2, &aesa(0xe5)));
    assert_eq!(int(&u.answer(2).0.error_status), Some(status::NO_ERROR));
    let want = dotted(&aesa(0xe5));
    let st = sw.stat_until(|s| {
        let i = port_ilmi(s);
        i["prefix_taken"] == true
            && i["registered"]
                .as_array()
                .is_some_and(|r| r.iter().any(|a| a == want.as_str()))
    });
    assert!(port_ilmi(&st)["received"].as_u64() >= Some(4));
    // Another network's address: refused, not registered.
    let mut other = aesa(0xe6);
    other[1] = 0x99;
    u.send(register(3, &other));
    assert_eq!(int(&u.answer(3).0.error_status), Some(status::BAD_VALUE));
    sw.stat_until(|s| port_ilmi(s)["refused"] == 1);
    // The connection's end ends the registration.
    drop(u);
    sw.stat_until(|s| {
        port_ilmi(s)["registered"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });
}

/// Waits until `f` holds for `sigd`'s stat; the stat then.
fn sigd_until(
    sigd: &crate::sigd_support::Sigd,
    what: &str,
    f: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let st = sigd.stat();
        if f(&st) {
            return st;
        }
        assert!(Instant::now() < until, "{what}: {st}\n{}", sigd.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every port of the switch holds one registration.
fn each_port_holds_one(st: &serde_json::Value) -> bool {
    st["ports"].as_array().is_some_and(|p| {
        p.iter().all(|p| {
            p["ilmi"]["registered"]
                .as_array()
                .is_some_and(|r| r.len() == 1)
        })
    })
}

/// A natm host's address as digits alone.
fn digits(v: &serde_json::Value) -> String {
    v.as_str()
        .unwrap_or_default()
        .replace('.', "")
        .to_lowercase()
}

#[test]
fn natm_hosts_without_an_address_learn_one_from_the_switch_and_call_each_other_by_it() {
    use crate::sigd_support::{free_port, Sigd, LINK};
    use natm::ulib::{Host, HostConfig, Wait};

    let [h1, h2, s1h1, s1h2] = std::array::from_fn(|_| free_port());
    let port = |name: &str, bind: std::net::SocketAddr, peer: std::net::SocketAddr| {
        format!(
            "[[port]]\nname = \"{name}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = \"frame\"\nsignalling = \"host\"\nilmi_prefix = \"{PREFIX}\"\n"
        )
    };
    // No route: the hosts' registrations are the switch's only routes.
    let mut sw = SwitchProc::start(
        "ilmihosts",
        &[port("h1", s1h1, h1), port("h2", s1h2, h2)].concat(),
    );
    let start = |sig: std::net::SocketAddr, at: std::net::SocketAddr| {
        Sigd::start_at(
            &format!("{LINK}\n[[directory]]\nprefix = \"*\"\npeer = \"{at}\"\nswitch = true\n"),
            sig,
        )
    };
    let (a, b) = (start(h1, s1h1), start(h2, s1h2));
    let learned = |s: &Sigd| {
        let st = sigd_until(s, "an address from the switch", |st| {
            st["addresses"].as_array().is_some_and(|v| !v.is_empty())
        });
        assert!(
            st["peers"][0]["ilmi"]
                .as_str()
                .is_some_and(|i| i.starts_with("registered 47")),
            "{st}"
        );
        st["addresses"][0].clone()
    };
    let (addr_a, addr_b) = (learned(&a), learned(&b));
    let prefix = PREFIX.replace('.', "");
    for x in [&addr_a, &addr_b] {
        assert!(digits(x).starts_with(&prefix), "{x}");
        assert!(digits(x).ends_with("00"), "selector 0: {x}");
    }
    assert_ne!(addr_a, addr_b, "each host's ESI is its own key's");
    // `natm stat` shows it on the switch link's row.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["stat", "--socket"])
        .arg(&a.socket)
        .output()
        .expect("natm stat");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains(&s1h1.to_string()) && l.contains("registered")),
        "{text}"
    );
    // The switch holds each registration on its own port.
    let st = sw.stat_until(each_port_holds_one);
    assert_eq!(
        digits(&st["ports"][0]["ilmi"]["registered"][0]),
        digits(&addr_a)
    );
    assert_eq!(
        digits(&st["ports"][1]["ilmi"]["registered"][0]),
        digits(&addr_b)
    );

    // `a` calls `b` at its learned address; the call carries `a`'s as the calling
    // number and passes the switch's screening.
    let call = |from: &Sigd, to: &Sigd, to_addr: &serde_json::Value, sw: &SwitchProc| {
        let open = |s: &Sigd| {
            Host::open(HostConfig {
                sigd_socket: Some(s.socket.clone()),
                connect_timeout: Duration::from_secs(10),
                ..HostConfig::default()
            })
            .expect("host")
        };
        let (hf, ht) = (open(from), open(to));
        let l = ht.bind("ilmi", "reliable").expect("bind");
        let callee = std::thread::spawn(move || {
            let got = l
                .accept(Wait::For(Duration::from_secs(10)))
                .expect("accepted");
            let m = got.recv(Wait::For(Duration::from_secs(10))).expect("recv");
            (got, m)
        });
        let c = hf
            .connect(format!("{}:ilmi", to_addr.as_str().unwrap()), "reliable")
            .unwrap_or_else(|e| {
                panic!(
                    "the call through the switch: {e}\ncaller: {}\ncallee: {}\nswitch: {}",
                    from.log(),
                    to.log(),
                    sw.log()
                )
            });
        c.send(&b"by a learned address"[..], Wait::Block)
            .expect("send");
        // The callee's end stays open while its sigd is asked about the call.
        let (_open, m) = callee.join().expect("the callee");
        assert_eq!(m.as_deref(), Some(&b"by a learned address"[..]));
        let st = to.stat();
        let row = &st["calls"][0];
        (row["remote"].clone(), st)
    };
    let (remote, st) = call(&a, &b, &addr_b, &sw);
    assert_eq!(digits(&remote), digits(&addr_a), "{st}");
    let screened = sw.stat()["calls_screened"].as_u64().unwrap_or(0);
    assert_eq!(screened, 0, "a registered calling number passes screening");

    // The switch restarts: it forgets, tells the hosts, and they register again.
    sw.restart();
    let st = sw.stat_until(each_port_holds_one);
    assert_eq!(
        digits(&st["ports"][0]["ilmi"]["registered"][0]),
        digits(&addr_a)
    );
    assert_eq!(
        digits(&st["ports"][1]["ilmi"]["registered"][0]),
        digits(&addr_b)
    );
    for (s, addr) in [(&a, &addr_a), (&b, &addr_b)] {
        let st = sigd_until(s, "registered again", |st| {
            st["peers"][0]["ilmi"]
                .as_str()
                .is_some_and(|i| i.starts_with("registered"))
        });
        assert_eq!(st["addresses"][0], *addr, "the same address: {st}");
    }
    // And they call each other by them again.
    let (remote, _) = call(&a, &b, &addr_b, &sw);
    assert_eq!(digits(&remote), digits(&addr_a));
}
