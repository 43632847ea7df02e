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
