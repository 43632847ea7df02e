use super::*;
use rasn_snmp::v1::{GetRequest, SetRequest};

fn get(id: i64, names: &[&[u32]]) -> Vec<u8> {
    let binds = names.iter().map(|n| bind(n, null())).collect();
    encode(Pdus::GetRequest(GetRequest(pdu(id, 0, 0, binds)))).unwrap()
}

#[test]
fn a_message_survives_encoding_and_decoding() {
    let b = get(7, &[oid::SYS_UP_TIME, oid::PORT_MY_IDENTIFIER]);
    let m = decode(&b).unwrap();
    let Pdus::GetRequest(GetRequest(p)) = m.data else {
        panic!("a GetRequest")
    };
    assert_eq!(int(&p.request_id), Some(7));
    assert_eq!(p.variable_bindings.len(), 2);
    assert_eq!(&*p.variable_bindings[0].name, oid::SYS_UP_TIME);
}

#[test]
fn what_is_not_ilmi_gets_a_typed_error() {
    assert_eq!(
        decode(&[0u8; MAX_MESSAGE + 1]),
        Err(IlmiError::TooLong(MAX_MESSAGE + 1))
    );
    assert_eq!(decode(b"\x30\x03\x02\x01"), Err(IlmiError::Malformed));
    assert_eq!(decode(&[]), Err(IlmiError::Malformed));
    let public = rasn::ber::encode(&rasn_snmp::v1::Message {
        version: Integer::from(0),
        community: OctetString::from_static(b"public"),
        data: Pdus::GetRequest(GetRequest(pdu(1, 0, 0, vec![]))),
    })
    .unwrap();
    assert_eq!(decode(&public), Err(IlmiError::Community));
    let v2 = rasn::ber::encode(&rasn_snmp::v1::Message {
        version: Integer::from(1),
        community: OctetString::from_static(COMMUNITY),
        data: Pdus::GetRequest(GetRequest(pdu(1, 0, 0, vec![]))),
    })
    .unwrap();
    assert_eq!(decode(&v2), Err(IlmiError::Version(1)));
}

#[test]
fn an_address_index_is_port_length_and_octets() {
    let addr: Vec<u8> = (0..20).collect();
    let name = octets_index(oid::ADDRESS_STATUS, 0, &addr);
    // ilmid counts arcs: 12 for the column, the port, the length, 20 octets.
    assert_eq!(name.len(), 12 + 1 + 1 + 20);
    let index = index_of(&name, oid::ADDRESS_STATUS).unwrap();
    assert_eq!(parse_octets_index(index, ADDRESS_LEN), Some((0, addr)));
    assert_eq!(parse_octets_index(index, PREFIX_LEN), None);
    let mut bad = index.to_vec();
    bad[5] = 256;
    assert_eq!(parse_octets_index(&bad, ADDRESS_LEN), None);
    let set = encode(Pdus::SetRequest(SetRequest(pdu(
        3,
        0,
        0,
        vec![bind(&name, integer(1))],
    ))))
    .unwrap();
    assert!(set.len() <= MAX_MESSAGE);
}
