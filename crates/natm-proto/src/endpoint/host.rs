//! The routes of a host port (issue 30): every VC end of a host on one UDP port, each
//! datagram handed to the end its VC header and TPDU header name — the demultiplexing
//! a seed host's adaptor does by VCI (seed 000 §5), with the cookie (seed 001 §4.2)
//! telling apart the direct-mode calls that all use [`VCI_FORWARD`] and
//! [`VCI_BACKWARD`].
//!
//! A VC's frames arrive at both of its ends: its data and control at the receiver, its
//! ACKs and answers at the sender, all under the VC's VCI and the call's cookie. A
//! host that holds both ends of a call (a process calling itself) sees both kinds on
//! one port, so a route also names the direction: frames its sender originates
//! ([`Dir::Forward`]) go to the receiving end, the receiver's answers
//! ([`Dir::Backward`]) to the sending end. An ABORT may come from either end; it goes
//! to whichever end the port has, the receiving one first.
//!
//! Bare VCs (`transport=none`) carry no TPDU header: their frames are routed by VCI
//! alone. OAM and RM frames carry no TPDU header either. Where one end holds the VCI
//! (signalled calls, PVCs) they go to it; where several do (the direct-mode calls
//! between one pair of host ports all ride VCIs 32 and 33), a natm end marks every
//! OAM and RM frame it sends with its call's cookie ([`mark_call`]), in octets of the
//! cell that I.610 and TM 4.0 leave unused and receivers ignore, and the frame goes to
//! the end of that call its direction names: a loopback request or a forward RM cell
//! to the VC's receiving end, an answer or a backward RM cell to its sender. A frame
//! with no such end (unmarked: from another stack) goes to the end that registered
//! the VCI last.
//!
//! Sans-IO and generic over the owner's name for an end (`T`).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use thiserror::Error;

use super::{Route, VCI_FORWARD};
use crate::wire::tpdu::{Header, TpduType};
use crate::wire::vcframe::{self, FrameKind};

/// Where in an OAM or RM cell's 48-octet payload a natm end puts its call's cookie
/// (big-endian): octets 39-42, unused in a loopback cell (I.610 fills them with
/// 0x6A) and reserved in an RM cell (TM 4.0: 0x6A), ignored by receivers. The CRC-10
/// covers them. seed 001 §4.2's cookie, where the seeds' adaptor would tell the VCs
/// apart by VCI alone.
pub const CALL_MARK: core::ops::Range<usize> = 38..42;

/// Mark an OAM or RM cell payload with the cookie of the call whose VC it rides, and
/// fill its CRC-10 again (see [`CALL_MARK`]).
pub fn mark_call(payload: &mut [u8; crate::wire::cell::PAYLOAD_LEN], cookie: u32) {
    payload[CALL_MARK].copy_from_slice(&cookie.to_be_bytes());
    crate::wire::crc::fill_crc10(payload);
}

/// The cookie an OAM or RM frame's SDU (a cell payload, an OAM one maybe padded)
/// names, and the direction it travels on its VC; `None` if it is too short to say.
fn marked(kind: FrameKind, sdu: &[u8]) -> Option<(u32, Dir)> {
    let m = sdu.get(CALL_MARK)?;
    let cookie = u32::from_be_bytes([m[0], m[1], m[2], m[3]]);
    let flags = *sdu.get(1)?;
    let back = match kind {
        // The loopback indication (octet 2, bit 1): set on a request.
        FrameKind::Oam => flags & 1 == 0,
        // DIR (octet 2, bit 8): set on a backward RM cell.
        _ => flags & 0x80 != 0,
    };
    Some((cookie, if back { Dir::Backward } else { Dir::Forward }))
}

/// Which way a frame goes on its VC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// From the VC's sender: data, handshake requests, CLOSE, SYNC, QOS.
    Forward,
    /// From the VC's receiver: ACKs and answers.
    Backward,
}

impl Dir {
    /// The direction a TPDU of type `ty` travels; `None` for ABORT (either way).
    pub fn of(ty: TpduType) -> Option<Dir> {
        use TpduType::*;
        match ty {
            Data | ConnRequest | ConnConfirm | Close | Sync | Qos => Some(Dir::Forward),
            Ack | ConnAccept | CloseAck | SyncEcho | QosAck => Some(Dir::Backward),
            Abort => None,
        }
    }
}

/// One route of a VC end on a host port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostKey {
    /// TPDUs of a transport VC: its VCI, the call's cookie, and which way they go.
    Data {
        /// The VC's VCI on this port.
        vci: u16,
        /// The call's cookie.
        cookie: u32,
        /// Which way the frames go.
        dir: Dir,
    },
    /// Every frame arriving on a bare VC (data flows one way on a bare VC: only its
    /// receiving end takes frames).
    Bare {
        /// The VC's VCI on this port.
        vci: u16,
    },
    /// OAM and RM frames on a VC of the end (they carry no cookie); several ends may
    /// name one VCI, and the newest takes them.
    Vci {
        /// The VC's VCI on this port.
        vci: u16,
    },
}

impl HostKey {
    /// The routes of a connection's two ends: its receiving VC's forward frames and
    /// its sending VC's backward ones (or, bare, each VC's frames by VCI).
    pub fn of(route: Route, bare: bool) -> Vec<HostKey> {
        let mut keys = if bare {
            vec![HostKey::Bare { vci: route.rx_vci }]
        } else {
            vec![
                HostKey::Data {
                    vci: route.rx_vci,
                    cookie: route.cookie,
                    dir: Dir::Forward,
                },
                HostKey::Data {
                    vci: route.tx_vci,
                    cookie: route.cookie,
                    dir: Dir::Backward,
                },
            ]
        };
        keys.push(HostKey::Vci { vci: route.rx_vci });
        if route.tx_vci != route.rx_vci {
            keys.push(HostKey::Vci { vci: route.tx_vci });
        }
        keys
    }
}

/// Why a route could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RouteTaken {
    /// Another end of the port holds this route.
    #[error("another VC end on this port has the route {0:?}")]
    Route(HostKey),
    /// The port already has a listener taking CONN-REQs.
    #[error("another listener on this port takes the calls")]
    Acceptor,
}

/// A host port's routing table.
#[derive(Debug, Clone)]
pub struct HostRoutes<T> {
    keys: HashMap<HostKey, T>,
    /// The ends by VCI, in the order they named it (OAM and RM frames).
    by_vci: HashMap<u16, VciEnds<T>>,
    owned: HashMap<T, Vec<HostKey>>,
    acceptor: Option<T>,
    /// The order number the next end to name a VCI gets.
    next_seq: u64,
}

/// The ends that named one VCI, by the order they named it: the newest takes the
/// frames nothing else tells apart. Every direct-mode call between two host ports
/// names VCIs 32 and 33, so one VCI may have thousands of ends; adding, removing and
/// finding the newest each take O(log n) (a list made setting up and tearing down n
/// calls O(n²): 2.5 % of `natm-lab perf scale --counts 10000`'s samples).
#[derive(Debug, Clone)]
struct VciEnds<T> {
    seq: HashMap<T, u64>,
    by_seq: BTreeMap<u64, T>,
}

impl<T: Copy + Eq + Hash> VciEnds<T> {
    fn new() -> VciEnds<T> {
        VciEnds {
            seq: HashMap::new(),
            by_seq: BTreeMap::new(),
        }
    }

    /// `end` names the VCI (again: it keeps its place).
    fn add(&mut self, end: T, seq: u64) {
        if let std::collections::hash_map::Entry::Vacant(v) = self.seq.entry(end) {
            v.insert(seq);
            self.by_seq.insert(seq, end);
        }
    }

    fn remove(&mut self, end: T) {
        if let Some(s) = self.seq.remove(&end) {
            self.by_seq.remove(&s);
        }
    }

    fn newest(&self) -> Option<T> {
        self.by_seq.last_key_value().map(|(_, e)| *e)
    }

    fn len(&self) -> usize {
        self.seq.len()
    }

    fn is_empty(&self) -> bool {
        self.seq.is_empty()
    }
}

impl<T: Copy + Eq + Hash> Default for HostRoutes<T> {
    fn default() -> Self {
        HostRoutes::new()
    }
}

impl<T: Copy + Eq + Hash> HostRoutes<T> {
    /// No routes.
    pub fn new() -> HostRoutes<T> {
        HostRoutes {
            keys: HashMap::new(),
            by_vci: HashMap::new(),
            owned: HashMap::new(),
            acceptor: None,
            next_seq: 0,
        }
    }

    /// Route `keys` to `end`; nothing changes if another end holds one of them.
    pub fn insert(&mut self, keys: &[HostKey], end: T) -> Result<(), RouteTaken> {
        if let Some(k) = keys.iter().find(|k| {
            !matches!(k, HostKey::Vci { .. }) && self.keys.get(k).is_some_and(|o| *o != end)
        }) {
            return Err(RouteTaken::Route(*k));
        }
        for k in keys {
            match *k {
                HostKey::Vci { vci } => {
                    self.next_seq += 1;
                    self.by_vci
                        .entry(vci)
                        .or_insert_with(VciEnds::new)
                        .add(end, self.next_seq);
                }
                _ => {
                    self.keys.insert(*k, end);
                }
            }
        }
        self.owned.entry(end).or_default().extend_from_slice(keys);
        Ok(())
    }

    /// `end` takes the CONN-REQs on [`VCI_FORWARD`] that no route takes (a direct-mode
    /// listener). Other frames of calls the port does not know go to nobody: on a
    /// port shared with signalled calls they may be a call's first frames, come before
    /// its route, which a listener's endpoint would answer with an ABORT.
    pub fn set_acceptor(&mut self, end: T) -> Result<(), RouteTaken> {
        match self.acceptor {
            Some(a) if a != end => Err(RouteTaken::Acceptor),
            _ => {
                self.acceptor = Some(end);
                Ok(())
            }
        }
    }

    /// Whether an end takes the calls no route takes.
    pub fn has_acceptor(&self) -> bool {
        self.acceptor.is_some()
    }

    /// Forget every route of `end`.
    pub fn remove(&mut self, end: T) {
        if self.acceptor == Some(end) {
            self.acceptor = None;
        }
        for k in self.owned.remove(&end).unwrap_or_default() {
            if let HostKey::Vci { vci } = k {
                if let Some(ends) = self.by_vci.get_mut(&vci) {
                    ends.remove(end);
                    if ends.is_empty() {
                        self.by_vci.remove(&vci);
                    }
                }
            } else if self.keys.get(&k) == Some(&end) {
                self.keys.remove(&k);
            }
        }
    }

    /// The end that takes `datagram` as a new call, if it is a CONN-REQ on
    /// [`VCI_FORWARD`] and the port has a listener: where a CONN-REQ goes that the
    /// end its route names cannot take (it came from another peer than that call's,
    /// which drew the same cookie; the listener refuses it).
    pub fn acceptor_of(&self, datagram: &[u8]) -> Option<T> {
        let (vc, sdu) = vcframe::Repr::parse_bytes(datagram).ok()?;
        if vc.vpi != 0 || vc.kind != FrameKind::Data || vc.vci != VCI_FORWARD {
            return None;
        }
        let (ty, _) = Header::route_fields(sdu)?;
        (ty == TpduType::ConnRequest).then_some(self.acceptor?)
    }

    /// Routes held (data and bare; not the VCIs of OAM and RM frames).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no route of any kind is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.by_vci.is_empty()
    }

    /// The end a datagram (VC header and SDU) goes to, if any.
    pub fn route(&self, datagram: &[u8]) -> Option<T> {
        let (vc, sdu) = vcframe::Repr::parse_bytes(datagram).ok()?;
        if vc.vpi != 0 && vc.kind == FrameKind::Data {
            // PVCs on another VPI are routed by VCI as bare VCs are.
            return self.keys.get(&HostKey::Bare { vci: vc.vci }).copied();
        }
        match vc.kind {
            FrameKind::Data => {}
            FrameKind::Oam | FrameKind::Rm => {
                let ends = self.by_vci.get(&vc.vci)?;
                if ends.len() > 1 {
                    if let Some((cookie, dir)) = marked(vc.kind, sdu) {
                        let key = HostKey::Data {
                            vci: vc.vci,
                            cookie,
                            dir,
                        };
                        if let Some(&end) = self.keys.get(&key) {
                            return Some(end);
                        }
                    }
                }
                return ends.newest();
            }
            FrameKind::Signalling => return None,
        }
        if let Some(&end) = self.keys.get(&HostKey::Bare { vci: vc.vci }) {
            return Some(end);
        }
        let (ty, cookie) = Header::route_fields(sdu)?;
        let key = |dir| HostKey::Data {
            vci: vc.vci,
            cookie,
            dir,
        };
        let found = match Dir::of(ty) {
            Some(dir) => self.keys.get(&key(dir)),
            None => self
                .keys
                .get(&key(Dir::Forward))
                .or_else(|| self.keys.get(&key(Dir::Backward))),
        };
        if let Some(&end) = found {
            return Some(end);
        }
        if ty == TpduType::ConnRequest && vc.vci == VCI_FORWARD {
            return self.acceptor;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::VCI_BACKWARD;
    use crate::wire::tpdu::{Header, TpduType};

    fn frame(vci: u16, ty: TpduType, cookie: u32) -> Vec<u8> {
        let mut d = vcframe::Repr::data(0, vci).to_bytes().to_vec();
        let mut h = Header::new(ty);
        h.cookie = cookie;
        let mut b = vec![0u8; crate::wire::tpdu::HEADER_LEN];
        h.emit_into(&mut b);
        d.extend_from_slice(&b);
        d
    }

    fn direct(cookie: u32, client: bool) -> Route {
        let (tx_vci, rx_vci) = if client {
            (VCI_FORWARD, VCI_BACKWARD)
        } else {
            (VCI_BACKWARD, VCI_FORWARD)
        };
        Route {
            tx_vci,
            rx_vci,
            cookie,
        }
    }

    #[test]
    fn both_ends_of_a_call_on_one_port_get_their_own_frames() {
        let mut r = HostRoutes::new();
        r.insert(&HostKey::of(direct(7, true), false), "client")
            .unwrap();
        r.insert(&HostKey::of(direct(7, false), false), "server")
            .unwrap();
        // The client's data on VCI 32 is the server's; the server's ACK of it, the
        // client's.
        assert_eq!(r.route(&frame(32, TpduType::Data, 7)), Some("server"));
        assert_eq!(r.route(&frame(32, TpduType::Ack, 7)), Some("client"));
        assert_eq!(r.route(&frame(33, TpduType::Data, 7)), Some("client"));
        assert_eq!(r.route(&frame(33, TpduType::ConnAccept, 7)), Some("server"));
        assert_eq!(r.route(&frame(32, TpduType::Abort, 7)), Some("server"));
        // Another cookie is another call: nobody's.
        assert_eq!(r.route(&frame(32, TpduType::Data, 8)), None);
    }

    #[test]
    fn conn_requests_of_unknown_calls_go_to_the_acceptor_and_nothing_else_does() {
        let mut r = HostRoutes::new();
        assert_eq!(r.route(&frame(32, TpduType::ConnRequest, 1)), None);
        r.set_acceptor(1).unwrap();
        assert_eq!(r.set_acceptor(2), Err(RouteTaken::Acceptor));
        assert_eq!(r.route(&frame(32, TpduType::ConnRequest, 1)), Some(1));
        assert_eq!(r.route(&frame(33, TpduType::ConnRequest, 1)), None);
        assert_eq!(r.route(&frame(32, TpduType::Data, 1)), None);
        r.insert(&HostKey::of(direct(1, false), false), 3).unwrap();
        assert_eq!(r.route(&frame(32, TpduType::ConnRequest, 1)), Some(3));
        r.remove(1);
        assert_eq!(r.route(&frame(32, TpduType::ConnRequest, 2)), None);
    }

    #[test]
    fn sealed_tpdus_are_routed_by_their_clear_header() {
        let mut r = HostRoutes::new();
        r.insert(&HostKey::of(direct(7, false), false), 1).unwrap();
        let mut d = frame(32, TpduType::Data, 7);
        d[vcframe::HEADER_LEN + 1] |= crate::wire::seal::SEALED;
        d.extend_from_slice(&[0; 24]);
        assert!(Header::parse_bytes(&d[vcframe::HEADER_LEN..]).is_err());
        assert_eq!(r.route(&d), Some(1));
    }

    #[test]
    fn a_taken_route_is_refused_whole_and_freed_with_its_end() {
        let mut r = HostRoutes::new();
        r.insert(&HostKey::of(direct(5, true), false), 1).unwrap();
        let e = r.insert(&HostKey::of(direct(5, true), false), 2);
        assert!(matches!(e, Err(RouteTaken::Route(_))));
        assert_eq!(r.len(), 2);
        r.remove(1);
        assert!(r.is_empty());
        r.insert(&HostKey::of(direct(5, true), false), 2).unwrap();
        assert_eq!(r.route(&frame(33, TpduType::Data, 5)), Some(2));
    }

    /// An OAM or RM frame on `vci`, its cell payload marked with `cookie` (or not).
    fn cell_frame(kind: FrameKind, vci: u16, flags: u8, cookie: Option<u32>) -> Vec<u8> {
        let mut p = [0x6Au8; crate::wire::cell::PAYLOAD_LEN];
        p[1] = flags;
        if let Some(c) = cookie {
            mark_call(&mut p, c);
        }
        let mut d = vcframe::Repr {
            kind,
            ..vcframe::Repr::data(0, vci)
        }
        .to_bytes()
        .to_vec();
        d.extend_from_slice(&p);
        d
    }

    #[test]
    fn oam_and_rm_frames_of_direct_calls_sharing_vcis_go_to_their_own_call() {
        let mut r = HostRoutes::new();
        // Three direct calls between the same two ports, both ends of each on this
        // one (a process calling itself): all on VCIs 32 and 33.
        for cookie in [7, 8, 9] {
            r.insert(
                &HostKey::of(direct(cookie, true), false),
                (cookie, "client"),
            )
            .unwrap();
            r.insert(
                &HostKey::of(direct(cookie, false), false),
                (cookie, "server"),
            )
            .unwrap();
        }
        let (oam, rm) = (FrameKind::Oam, FrameKind::Rm);
        // The client probes on its sending VC (32): the request is the server's, the
        // answer (indication clear) the client's; likewise the callee's probe on 33.
        assert_eq!(
            r.route(&cell_frame(oam, 32, 1, Some(7))),
            Some((7, "server"))
        );
        assert_eq!(
            r.route(&cell_frame(oam, 32, 0, Some(7))),
            Some((7, "client"))
        );
        assert_eq!(
            r.route(&cell_frame(oam, 33, 1, Some(8))),
            Some((8, "client"))
        );
        assert_eq!(
            r.route(&cell_frame(oam, 33, 0, Some(8))),
            Some((8, "server"))
        );
        // A forward RM cell goes with the data, a backward one back to the source.
        assert_eq!(
            r.route(&cell_frame(rm, 32, 0, Some(8))),
            Some((8, "server"))
        );
        assert_eq!(
            r.route(&cell_frame(rm, 32, 0x80, Some(8))),
            Some((8, "client"))
        );
        // A path MTU probe: the request padded with zeros.
        let mut probe = cell_frame(oam, 32, 1, Some(9));
        probe.resize(1400, 0);
        assert_eq!(r.route(&probe), Some((9, "server")));
        // Unmarked (another stack) or marked with no call's cookie: the newest end.
        let newest = Some((9, "server"));
        assert_eq!(r.route(&cell_frame(oam, 32, 1, None)), newest);
        assert_eq!(r.route(&cell_frame(oam, 32, 1, Some(5))), newest);
        // Where one end holds the VCI, the mark is not read.
        let mut one = HostRoutes::new();
        one.insert(&HostKey::of(direct(7, true), false), 1).unwrap();
        assert_eq!(one.route(&cell_frame(oam, 32, 0, Some(5))), Some(1));
    }

    proptest::proptest! {
        /// Whatever direct calls share the port's VCIs and whichever of their ends
        /// registered last, an OAM or RM frame marked with a call's cookie goes to
        /// that call's end its direction names, on either VCI.
        #[test]
        fn a_marked_frame_reaches_its_own_call_whatever_the_order(
            cookies in proptest::collection::hash_set(proptest::prelude::any::<u32>(), 2..8),
            pick in proptest::prelude::any::<proptest::sample::Index>(),
            flags in proptest::prelude::any::<u8>(),
            rm in proptest::prelude::any::<bool>(),
            on_33 in proptest::prelude::any::<bool>(),
        ) {
            let cookies: Vec<u32> = cookies.into_iter().collect();
            let mut r = HostRoutes::new();
            for &c in &cookies {
                r.insert(&HostKey::of(direct(c, true), false), (c, true)).unwrap();
                r.insert(&HostKey::of(direct(c, false), false), (c, false)).unwrap();
            }
            let cookie = cookies[pick.index(cookies.len())];
            let vci = if on_33 { VCI_BACKWARD } else { VCI_FORWARD };
            let kind = if rm { FrameKind::Rm } else { FrameKind::Oam };
            let forward = if rm { flags & 0x80 == 0 } else { flags & 1 == 1 };
            // Forward on 32 is the caller's sending VC: its receiver is the callee.
            let client = forward == on_33;
            proptest::prop_assert_eq!(
                r.route(&cell_frame(kind, vci, flags, Some(cookie))),
                Some((cookie, client))
            );
        }
    }

    #[test]
    fn a_marked_cell_still_parses_and_its_answer_keeps_the_mark() {
        let mut p = crate::wire::oam::Loopback::request(0x1234).to_bytes();
        mark_call(&mut p, 0xC0FF_EE01);
        let l = crate::wire::oam::Loopback::parse(&p).unwrap();
        assert_eq!(l, crate::wire::oam::Loopback::request(0x1234));
        let a = crate::wire::oam::answer(&p);
        assert_eq!(
            marked(FrameKind::Oam, &a),
            Some((0xC0FF_EE01, Dir::Backward))
        );
        let rate = crate::wire::rm::Rate::from_cells(1000.0);
        let mut rm = crate::wire::rm::RmCell::forward(rate, rate, rate).to_bytes();
        mark_call(&mut rm, 3);
        assert!(crate::wire::rm::RmCell::parse(&rm).is_ok());
    }

    /// Unmarked OAM on a VCI that thousands of direct calls name goes to the newest
    /// end; removing ends, the newest and others, hands it to the newest left.
    #[test]
    fn an_unmarked_cell_goes_to_the_newest_end_of_many_on_its_vci() {
        let mut r = HostRoutes::new();
        for cookie in 1..=5000u32 {
            r.insert(&HostKey::of(direct(cookie, false), false), cookie)
                .unwrap();
        }
        let oam = vcframe::Repr {
            kind: FrameKind::Oam,
            ..vcframe::Repr::data(0, VCI_FORWARD)
        }
        .to_bytes();
        assert_eq!(r.route(&oam), Some(5000));
        // Named again: it keeps its place.
        r.insert(&HostKey::of(direct(17, false), false), 17)
            .unwrap();
        assert_eq!(r.route(&oam), Some(5000));
        r.remove(5000);
        r.remove(4998);
        assert_eq!(r.route(&oam), Some(4999));
        for cookie in 1..=4999 {
            r.remove(cookie);
        }
        assert_eq!(r.route(&oam), None);
        assert!(r.is_empty());
    }

    #[test]
    fn a_conn_request_the_route_names_another_end_for_is_the_acceptors_as_a_new_call() {
        let mut r = HostRoutes::new();
        r.set_acceptor(1).unwrap();
        r.insert(&HostKey::of(direct(0xC0FFEE, false), false), 2)
            .unwrap();
        let req = frame(VCI_FORWARD, TpduType::ConnRequest, 0xC0FFEE);
        assert_eq!(r.route(&req), Some(2));
        assert_eq!(r.acceptor_of(&req), Some(1));
        assert_eq!(
            r.acceptor_of(&frame(VCI_FORWARD, TpduType::Data, 0xC0FFEE)),
            None
        );
        r.remove(1);
        assert_eq!(r.acceptor_of(&req), None);
    }

    #[test]
    fn bare_vcs_and_oam_are_routed_by_vci() {
        let mut r = HostRoutes::new();
        let pvc = Route {
            tx_vci: 100,
            rx_vci: 101,
            cookie: 0,
        };
        r.insert(&HostKey::of(pvc, true), 9).unwrap();
        let mut sdu = vcframe::Repr::data(0, 101).to_bytes().to_vec();
        sdu.extend_from_slice(&[0xAA, 0xAA, 0x03]);
        assert_eq!(r.route(&sdu), Some(9));
        // The other end of the same bare VCs on this port (a host calling itself):
        // each end takes what arrives on its receiving VC.
        let back = Route {
            tx_vci: 101,
            rx_vci: 100,
            cookie: 0,
        };
        r.insert(&HostKey::of(back, true), 10).unwrap();
        assert_eq!(r.route(&sdu), Some(9));
        let mut other = vcframe::Repr::data(0, 100).to_bytes().to_vec();
        other.extend_from_slice(b"x");
        assert_eq!(r.route(&other), Some(10));
        r.remove(10);
        let oam = vcframe::Repr {
            kind: FrameKind::Oam,
            ..vcframe::Repr::data(0, 100)
        };
        assert_eq!(r.route(&oam.to_bytes()), Some(9));
        assert_eq!(r.route(b"\x45\x00"), None);
        assert_eq!(r.route(&[]), None);
    }
}
