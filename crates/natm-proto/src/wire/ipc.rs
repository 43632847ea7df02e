//! The IPC between an application (ulib) and its host's signalling daemon (`natm sigd`)
//! over a Unix-domain stream socket: versioned, length-prefixed binary messages that
//! name calls and listeners by opaque 64-bit ids, never by pointers (the Linux-ATM
//! lesson: atmsigd held kernel pointers and needed CAP_SYS_RAWIO).
//!
//! Every frame is `length(4, big-endian) version(1) type(1) body`; `length` counts
//! the bytes after itself. Requests carry a `req` tag the application chooses; sigd
//! answers each request at once with [`Message::Ack`] (carrying the id it assigned)
//! or [`Message::Refused`] (a UNI cause and a sentence), before any asynchronous
//! confirmation such as [`Message::Connected`] (seed 004 §4; FreeBSD libunimsg's rule
//! that no caller blocks because a SETUP could not go out). `docs/wire.md` has the
//! byte layout of every message.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use thiserror::Error;

use super::qos::Qos;
use super::seal::{PathKeys, KEY_LEN};

/// Where sigd listens for applications unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/natm/sigd.sock";

/// The version this codec writes and reads.
pub const VERSION: u8 = 2;
/// Bytes of the length prefix.
pub const LEN_PREFIX: usize = 4;
/// Largest frame (after the length prefix) either side accepts.
pub const MAX_FRAME: usize = 256 * 1024;
/// Largest string field (addresses, QoS text, details).
pub const MAX_STRING: usize = 4096;
/// Most data endpoints one `BindAuto` or `Endpoints` message carries (a
/// pre-authorised listener's backlog is at most this).
pub const MAX_ENDPOINTS: usize = 1024;

/// Where a data socket is: the endpoint of one side's data path, which sigd hands to
/// the other side (the data plane never passes through sigd, seed 000 §4).
pub type Endpoint = SocketAddr;

/// One IPC message, in either direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// App → sigd: call `called` ("ATM address or name[:SAP]") with `qos`; the
    /// caller's data socket is at `data` (an unspecified IP is filled in by sigd).
    Connect {
        /// The request tag, echoed in the answer.
        req: u64,
        /// Called party text.
        called: String,
        /// The QoS asked for (on the wire its Linux-ATM text with natm's extensions).
        qos: Qos,
        /// The caller's data endpoint.
        data: Endpoint,
    },
    /// App → sigd: listen on `sap` ("[address]:SAP" or "SAP") with `qos`.
    Bind {
        /// The request tag.
        req: u64,
        /// The service access point.
        sap: String,
        /// The QoS bounding what callers get.
        qos: Qos,
    },
    /// App → sigd: listen on `sap` with `qos`, pre-authorised: sigd answers a call
    /// whose QoS fits `qos` with CONNECT itself, on one of the pre-opened data
    /// endpoints in `data` (each is one slot of the listener's backlog), and tells the
    /// application with [`Message::Accepted`]. Calls that do not fit are offered
    /// with [`Message::Incoming`] as for `Bind`.
    BindAuto {
        /// The request tag.
        req: u64,
        /// The service access point.
        sap: String,
        /// Calls within this QoS are accepted without asking.
        qos: Qos,
        /// Pre-opened data endpoints, one per call sigd may accept ahead.
        data: Vec<Endpoint>,
    },
    /// App → sigd: more pre-opened data endpoints for a pre-authorised listener
    /// (given back as the application takes its accepted calls).
    Endpoints {
        /// The request tag.
        req: u64,
        /// The listener id from the `Ack` of `BindAuto`.
        listener: u64,
        /// The endpoints.
        data: Vec<Endpoint>,
    },
    /// App → sigd: stop listening.
    Unbind {
        /// The request tag.
        req: u64,
        /// The listener id from the `Ack` of `Bind`.
        listener: u64,
    },
    /// App → sigd: accept an incoming call; this side's data socket is at `data`.
    Accept {
        /// The request tag.
        req: u64,
        /// The call id from `Incoming`.
        call: u64,
        /// The callee's data endpoint.
        data: Endpoint,
    },
    /// App → sigd: accept an incoming guaranteed call at lower rates than offered
    /// (issue 33's counter-offer): each direction's rate, bit/s, between the
    /// caller's minimum and what was offered (0: a direction the call does not use).
    /// The CONNECT carries the lowered QoS, and the caller's sigd and every switch on
    /// the path keep only that reserved.
    AcceptAt {
        /// The request tag.
        req: u64,
        /// The call id from `Incoming`.
        call: u64,
        /// The callee's data endpoint.
        data: Endpoint,
        /// This side's sending rate (the offered QoS's tx), bit/s.
        tx_bps: u64,
        /// This side's receiving rate (its rx), bit/s.
        rx_bps: u64,
    },
    /// App → sigd: refuse an incoming call with a UNI cause.
    Reject {
        /// The request tag.
        req: u64,
        /// The call id from `Incoming`.
        call: u64,
        /// UNI cause value (Q.2931 Table 4-3).
        cause: u8,
    },
    /// App → sigd: release a call (both VCs) with a UNI cause.
    Release {
        /// The request tag.
        req: u64,
        /// The call.
        call: u64,
        /// UNI cause value; 16 (normal clearing) for an orderly close.
        cause: u8,
    },
    /// App → sigd: add a local ATM address to the directory while this connection lives.
    Register {
        /// The request tag.
        req: u64,
        /// The address text.
        address: String,
    },
    /// App → sigd: report calls, VCIs, reservations and free capacity.
    Stat {
        /// The request tag.
        req: u64,
    },
    /// App → sigd: the latest traffic counters of one of its calls (the engine sends
    /// them about once a second while the call moves data). `req` 0 asks for no
    /// answer, as the engine always does.
    Counters {
        /// The request tag.
        req: u64,
        /// The call.
        call: u64,
        /// Its counters (boxed: the largest message body by far).
        counters: Box<VcCounters>,
    },
    /// App → sigd: release any call, as an administrator (`natm release`): allowed
    /// to root and to the user owning the call's application, whichever connection
    /// asks. Both ends are released with `cause`.
    AdminRelease {
        /// The request tag.
        req: u64,
        /// The call.
        call: u64,
        /// UNI cause value given to both ends.
        cause: u8,
    },
    /// App → sigd: take over an established call this application held through a
    /// sigd that has since died (docs/sigd.md "sigd restart"): `call` is
    /// the call's id at that sigd, `data` this side's data endpoint and `path` the
    /// data path it was given (its `resume` ticket says which signalling link and
    /// call reference carry the call). Answered with `Ack` (`id` = `call`, and the
    /// call is this connection's again) or `Refused`.
    Reclaim {
        /// The request tag.
        req: u64,
        /// The call's id.
        call: u64,
        /// This side's data endpoint.
        data: Endpoint,
        /// The data path as `Connected` or `Accepted` gave it.
        path: DataPath,
    },
    /// App → sigd: one page of `natm stat`: the document with the calls and
    /// listeners from row `offset` on (calls first, then listeners, each by id), as
    /// many as fit one frame; the reply's `next` names the following page's offset.
    /// `Stat` is the page at offset 0.
    StatPage {
        /// The request tag.
        req: u64,
        /// The first row wanted.
        offset: u64,
    },
    /// App → sigd: change the sending rate of one of its active calls through the
    /// network (Q.2963.1 modification,
    /// docs/decisions/0019-qos-renegotiation-through-the-network.md): `qos` is a QoS whose transmit rate (`scr`, else
    /// `pcr`, else `max_pcr`) is the new rate, within the bounds agreed at setup
    /// (`min_pcr` up to `max_pcr`). Answered, once every hop has agreed, with `Ack`
    /// (`id` = `call`: the new rate is reserved), or `Refused` with the cause (the
    /// old rate stays).
    Modify {
        /// The request tag.
        req: u64,
        /// The call.
        call: u64,
        /// The QoS naming the new transmit rate.
        qos: Qos,
    },
    /// App → sigd: open a point-to-multipoint call (Q.2971) to its first leaf
    /// `called`, sending with `qos`: as `Connect`, but the SETUP says
    /// point-to-multipoint, only the forward direction is reserved, and further
    /// leaves join with `AddParty`. Refused with cause 63 when the network cannot
    /// replicate the call (a leaf of this host, or a call that would be sealed): the
    /// application then reaches each leaf with a call of its own.
    ConnectMultipoint {
        /// The request tag.
        req: u64,
        /// The first leaf ("ATM address or name[:SAP]").
        called: String,
        /// The QoS (the sending direction is the forward one).
        qos: Qos,
        /// The root's data endpoint.
        data: Endpoint,
    },
    /// App → sigd: add the leaf `called` to the application's active multipoint
    /// call `call` (ADD PARTY). Answered with `Ack` (`id` = the party's endpoint
    /// reference) then `PartyAdded` or `PartyRejected`; `Refused` with cause 63 when
    /// the leaf is not reached through the call's first hop (open another
    /// multipoint call for it).
    AddParty {
        /// The request tag.
        req: u64,
        /// The call.
        call: u64,
        /// The leaf ("ATM address or name[:SAP]").
        called: String,
    },
    /// App → sigd: drop party `party` of the multipoint call `call` (DROP PARTY;
    /// the last party releases the call). Answered with `Ack` (`id` = `party`) then
    /// `PartyDropped`.
    DropParty {
        /// The request tag.
        req: u64,
        /// The call.
        call: u64,
        /// The party's endpoint reference.
        party: u16,
        /// UNI cause value; 16 for an orderly drop.
        cause: u8,
    },
    /// sigd → app: the request `req` was taken; `id` names the call or listener.
    Ack {
        /// The request tag.
        req: u64,
        /// The id assigned (0 where the request names nothing new).
        id: u64,
    },
    /// sigd → app: the request `req` was refused.
    Refused {
        /// The request tag.
        req: u64,
        /// UNI cause value.
        cause: u8,
        /// What happened and what to do, for a person.
        detail: String,
    },
    /// sigd → app: a call reached the active state: open the data path to `peer`.
    Connected {
        /// The call.
        call: u64,
        /// Its data path.
        path: DataPath,
    },
    /// sigd → app: a caller wants a listener; answer with `Accept` or `Reject`.
    Incoming {
        /// The listener.
        listener: u64,
        /// The new call.
        call: u64,
        /// The caller's ATM address (text).
        caller: String,
        /// The QoS the caller asks for, seen from the callee.
        qos: Qos,
    },
    /// sigd → app: a pre-authorised listener's call, already answered (CONNECT sent)
    /// on the listener's data endpoint `data`: open the data path to `peer`.
    Accepted {
        /// The listener.
        listener: u64,
        /// The new call.
        call: u64,
        /// Which of the listener's pre-opened endpoints the call uses.
        data: Endpoint,
        /// The caller's ATM address (text).
        caller: String,
        /// Its data path.
        path: DataPath,
    },
    /// sigd → app: the call is gone (refused, released by the peer, or failed).
    Released {
        /// The call.
        call: u64,
        /// UNI cause value.
        cause: u8,
        /// What happened, for a person.
        detail: String,
    },
    /// sigd → app: the peer changed the call's reservation through the network
    /// (it asked with `Modify` on its side); `qos` is the call's QoS now, seen from
    /// this side. The engine's bounds for the peer's in-band QOS follow it.
    QosChanged {
        /// The call.
        call: u64,
        /// The call's QoS, this side's view.
        qos: Qos,
        /// The call's resume ticket for the new QoS (a ticket binds the QoS it
        /// resumes), to keep in place of the one in its data path; empty: keep that.
        resume: String,
    },
    /// sigd → app: a leaf accepted its `AddParty` (ADD PARTY ACKNOWLEDGE): the
    /// network sends it the call's data from now on.
    PartyAdded {
        /// The call.
        call: u64,
        /// The party's endpoint reference.
        party: u16,
    },
    /// sigd → app: a leaf's `AddParty` failed (ADD PARTY REJECT, or no answer in
    /// T399): the party is gone, the call and its other parties go on.
    PartyRejected {
        /// The call.
        call: u64,
        /// The party's endpoint reference.
        party: u16,
        /// UNI cause value.
        cause: u8,
        /// What happened, for a person.
        detail: String,
    },
    /// sigd → app: a party is gone: dropped as the application asked (`left`
    /// false), or it left by itself (`left` true: the leaf's application closed or
    /// died, its host did, or the network dropped it). The call goes on while
    /// parties remain.
    PartyDropped {
        /// The call.
        call: u64,
        /// The party's endpoint reference.
        party: u16,
        /// UNI cause value.
        cause: u8,
        /// Whether the leaf's side dropped it (on the wire one octet, 0 or 1).
        left: bool,
        /// What happened, for a person.
        detail: String,
    },
    /// sigd → app: the answer to `Stat`, as JSON text.
    StatReply {
        /// The request tag.
        req: u64,
        /// JSON document (see `natm stat --json`).
        json: String,
    },
    /// sigd → app: sigd closes the session after this, and says why: the
    /// application broke the protocol, or sigd refuses the session (out of
    /// descriptors, a per-user limit, idle). It is written before the close, so it
    /// stays readable however the application learns of the close: a write that
    /// fails (`EPIPE`, `ECONNRESET`) must be followed by reading what is queued.
    Error {
        /// UNI cause value (100: invalid IE contents, 97: message type unknown, ...).
        cause: u8,
        /// What was wrong.
        detail: String,
    },
}

/// What one end of a call needs to open its data path, as sigd signalled it: the
/// tail of `Connected` and of `Accepted`, in this order on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPath {
    /// The other side's data endpoint.
    pub peer: Endpoint,
    /// The capability both ends put in every TPDU (seed 001 §4.2).
    pub cookie: u32,
    /// VCI this side sends on.
    pub tx_vci: u16,
    /// VCI this side receives on.
    pub rx_vci: u16,
    /// Granted rate, payload bit/s, this side's sending direction (0: none reserved).
    pub granted_bps: u64,
    /// The QoS as granted, from this side.
    pub qos: Qos,
    /// What a restarted sigd needs to take the call over from this end's
    /// [`Message::Reclaim`]: sigd's own text, kept and returned as is by the
    /// application (empty: the call does not survive its sigd).
    pub resume: String,
    /// The call's TPDU keys (issue 16), as this side uses them; `None`: the VCs carry
    /// clear TPDUs. On the wire bit 0 of the flags octet, and when set the sending key
    /// then the receiving key (32 octets each). Only sigd sends them, over the host's
    /// own stream socket; they never leave the host.
    pub keys: Option<PathKeys>,
    /// The call is point-to-multipoint (Q.2971, issue 19): this side is its root or a
    /// leaf, and its VC is one-way — nothing the leaf sends reaches the root. On the
    /// wire bit 1 of the flags octet.
    pub multipoint: bool,
}

/// The flags octet of a [`DataPath`]: keys follow.
const PATH_KEYS: u8 = 0x01;
/// The flags octet of a [`DataPath`]: a point-to-multipoint call.
const PATH_MULTIPOINT: u8 = 0x02;

impl DataPath {
    fn put(&self, out: &mut Vec<u8>) {
        put_endpoint(out, &self.peer);
        out.extend_from_slice(&self.cookie.to_be_bytes());
        out.extend_from_slice(&self.tx_vci.to_be_bytes());
        out.extend_from_slice(&self.rx_vci.to_be_bytes());
        out.extend_from_slice(&self.granted_bps.to_be_bytes());
        put_qos(out, &self.qos);
        put_string(out, &self.resume);
        let mut flags = 0;
        if self.keys.is_some() {
            flags |= PATH_KEYS;
        }
        if self.multipoint {
            flags |= PATH_MULTIPOINT;
        }
        out.push(flags);
        if let Some(k) = &self.keys {
            out.extend_from_slice(&k.tx);
            out.extend_from_slice(&k.rx);
        }
    }

    fn take(r: &mut Reader<'_>) -> Result<DataPath, IpcError> {
        let peer = r.endpoint("peer endpoint")?;
        let cookie = r.u32("cookie")?;
        let tx_vci = r.u16("tx vci")?;
        let rx_vci = r.u16("rx vci")?;
        let granted_bps = r.u64("granted rate")?;
        let qos = r.qos("qos")?;
        let resume = r.short_string("resume ticket")?;
        let flags = r.u8("path flags")?;
        if flags & !(PATH_KEYS | PATH_MULTIPOINT) != 0 {
            return Err(IpcError::BadFlag {
                field: "path flags",
                value: flags,
            });
        }
        let keys = if flags & PATH_KEYS != 0 {
            let mut k = PathKeys {
                tx: [0; KEY_LEN],
                rx: [0; KEY_LEN],
            };
            k.tx.copy_from_slice(r.take(KEY_LEN, "sending key")?);
            k.rx.copy_from_slice(r.take(KEY_LEN, "receiving key")?);
            Some(k)
        } else {
            None
        };
        Ok(DataPath {
            peer,
            cookie,
            tx_vci,
            rx_vci,
            granted_bps,
            qos,
            resume,
            keys,
            multipoint: flags & PATH_MULTIPOINT != 0,
        })
    }
}

/// The layout of [`VcCounters`] on the wire this codec writes.
pub const COUNTERS_LAYOUT: u8 = 4;

/// One call's traffic counters as its application's engine counts them, both VCs
/// (tx: the VC this side sends on; rx: the one it receives on).
///
/// On the wire: `layout u8` ([`COUNTERS_LAYOUT`]), `n u8` (the field count, 27 in
/// layout 4), then `n` u64s in the order of the fields below; an unknown value
/// (`None`) is `u64::MAX`. Fields are added only with a new layout number, which
/// a reader of this one refuses (as the version octet, ulib and sigd come from one
/// release): decoding and encoding stay exact inverses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct VcCounters {
    /// When the engine took the sample, ms on its own monotonic clock: rates come
    /// from two samples and the time between them.
    pub sampled_ms: u64,
    /// Payload bytes sent (first transmissions).
    pub tx_bytes: u64,
    /// Data TPDUs sent (first transmissions).
    pub tx_tpdus: u64,
    /// Payload bytes delivered to the application.
    pub rx_bytes: u64,
    /// Data TPDUs received.
    pub rx_tpdus: u64,
    /// Retransmissions SMART's fast path asked for (holes an ACK revealed).
    pub retx_fast: u64,
    /// Retransmissions after a retransmission timeout.
    pub retx_timeout: u64,
    /// Retransmissions of the window head by the two-RTT check.
    pub retx_head: u64,
    /// Payload bytes retransmitted.
    pub retx_bytes: u64,
    /// Frames dropped for a cookie other than the call's.
    pub drop_bad_cookie: u64,
    /// TPDUs dropped beyond the error-control window.
    pub drop_out_of_window: u64,
    /// TPDUs dropped for want of receive buffer.
    pub drop_rcv_buf: u64,
    /// Duplicate TPDUs dropped.
    pub drop_duplicate: u64,
    /// TPDUs dropped for arriving after a later one (VCs without error control).
    pub drop_late: u64,
    /// Other drops: oversize, headless message pieces, malformed frames.
    pub drop_other: u64,
    /// Datagrams the data socket's receive queue dropped (the kernel's count).
    pub queue_drops: Option<u64>,
    /// Smoothed RTT of the sending VC, µs.
    pub srtt_us: Option<u64>,
    /// The flow controller's rate on the sending VC, bit/s.
    pub rate_bps: Option<u64>,
    /// Bytes waiting in the sending VC (not yet sent or not yet acknowledged).
    pub send_queued: u64,
    /// Bytes received and not yet read by the application.
    pub recv_queued: u64,
    /// Gaps in the received sequence (VCs without error control): runs of lost TPDUs.
    pub gaps: u64,
    /// TPDUs lost on the receiving VC, each counted once (VCs without error control).
    pub lost_tpdus: u64,
    /// Messages not delivered on the receiving VC, each counted once (VCs without
    /// error control).
    pub lost_messages: u64,
    /// Sealed TPDUs dropped because their tag did not verify: forged, modified, or
    /// sealed under another key (encrypted calls only, issue 16).
    pub drop_bad_tag: u64,
    /// Sealed TPDUs dropped because their packet number was seen before or is below
    /// the replay window, and clear TPDUs on an encrypted VC.
    pub drop_replayed: u64,
    /// Octets the application's sending VCs hold in its host's send buffer pool
    /// (seed 001 §6), this call's among them.
    pub send_pool_used: u64,
    /// That pool's bound, octets.
    pub send_pool_limit: u64,
}

/// Fields of layout 4 (layout 3 had 25: no send_pool_used, send_pool_limit; layout 2
/// had 23: no drop_bad_tag, drop_replayed; layout 1 had 21: no lost_tpdus,
/// lost_messages).
const COUNTER_FIELDS: usize = 27;

fn opt(v: Option<u64>) -> u64 {
    v.unwrap_or(u64::MAX)
}

fn unopt(v: u64) -> Option<u64> {
    (v != u64::MAX).then_some(v)
}

impl VcCounters {
    fn fields(&self) -> [u64; COUNTER_FIELDS] {
        [
            self.sampled_ms,
            self.tx_bytes,
            self.tx_tpdus,
            self.rx_bytes,
            self.rx_tpdus,
            self.retx_fast,
            self.retx_timeout,
            self.retx_head,
            self.retx_bytes,
            self.drop_bad_cookie,
            self.drop_out_of_window,
            self.drop_rcv_buf,
            self.drop_duplicate,
            self.drop_late,
            self.drop_other,
            opt(self.queue_drops),
            opt(self.srtt_us),
            opt(self.rate_bps),
            self.send_queued,
            self.recv_queued,
            self.gaps,
            self.lost_tpdus,
            self.lost_messages,
            self.drop_bad_tag,
            self.drop_replayed,
            self.send_pool_used,
            self.send_pool_limit,
        ]
    }

    fn from_fields(f: &[u64; COUNTER_FIELDS]) -> VcCounters {
        VcCounters {
            sampled_ms: f[0],
            tx_bytes: f[1],
            tx_tpdus: f[2],
            rx_bytes: f[3],
            rx_tpdus: f[4],
            retx_fast: f[5],
            retx_timeout: f[6],
            retx_head: f[7],
            retx_bytes: f[8],
            drop_bad_cookie: f[9],
            drop_out_of_window: f[10],
            drop_rcv_buf: f[11],
            drop_duplicate: f[12],
            drop_late: f[13],
            drop_other: f[14],
            queue_drops: unopt(f[15]),
            srtt_us: unopt(f[16]),
            rate_bps: unopt(f[17]),
            send_queued: f[18],
            recv_queued: f[19],
            gaps: f[20],
            lost_tpdus: f[21],
            lost_messages: f[22],
            drop_bad_tag: f[23],
            drop_replayed: f[24],
            send_pool_used: f[25],
            send_pool_limit: f[26],
        }
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.push(COUNTERS_LAYOUT);
        out.push(COUNTER_FIELDS as u8);
        for v in self.fields() {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }

    fn take(r: &mut Reader<'_>) -> Result<VcCounters, IpcError> {
        let layout = r.u8("counters layout")?;
        let n = r.u8("counters count")? as usize;
        if layout != COUNTERS_LAYOUT || n != COUNTER_FIELDS {
            return Err(IpcError::BadCounters { layout, fields: n });
        }
        let mut f = [0u64; COUNTER_FIELDS];
        for v in f.iter_mut() {
            *v = r.u64("counters")?;
        }
        Ok(VcCounters::from_fields(&f))
    }
}

/// Why bytes are not an IPC message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IpcError {
    /// The frame ended inside a field.
    #[error("IPC frame truncated in {field}")]
    Truncated {
        /// The field being read.
        field: &'static str,
    },
    /// The length prefix is beyond the limit (or below the 2-octet minimum).
    #[error("IPC frame length {len} outside 2..={max}: not a natm sigd peer, or a corrupt stream")]
    BadLength {
        /// Length given.
        len: usize,
        /// Largest allowed.
        max: usize,
    },
    /// Another protocol version.
    #[error("IPC version {got}, this side speaks {VERSION}: use ulib and sigd from the same natm release")]
    BadVersion {
        /// Version found.
        got: u8,
    },
    /// A yes/no octet that is neither 0 nor 1.
    #[error("IPC field {field} is {value}, expected 0 or 1")]
    BadFlag {
        /// The field.
        field: &'static str,
        /// The octet found.
        value: u8,
    },
    /// A message type this version does not know.
    #[error("unknown IPC message type {0:#04x}")]
    UnknownType(u8),
    /// A string that is not UTF-8.
    #[error("IPC field {field} is not UTF-8")]
    BadUtf8 {
        /// The field.
        field: &'static str,
    },
    /// A string longer than [`MAX_STRING`].
    #[error("IPC field {field} is {len} bytes, more than {MAX_STRING}")]
    StringTooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
    },
    /// More endpoints than [`MAX_ENDPOINTS`] in one message.
    #[error("IPC endpoint list of {0} entries, more than {MAX_ENDPOINTS}")]
    TooManyEndpoints(usize),
    /// An address family other than 4 or 6.
    #[error("IPC endpoint address family {0}, expected 4 or 6")]
    BadFamily(u8),
    /// A counters block of another layout, or with another field count than its
    /// layout has.
    #[error("IPC counters layout {layout} with {fields} fields: this side reads layout {COUNTERS_LAYOUT} with {COUNTER_FIELDS}; use ulib and sigd from the same natm release")]
    BadCounters {
        /// Layout found.
        layout: u8,
        /// Field count found.
        fields: usize,
    },
    /// QoS text that does not parse: the other side is not natm's ulib or sigd of
    /// this release (both send only a typed [`Qos`]).
    #[error("IPC field {field} is not a QoS: {detail}")]
    BadQos {
        /// The field.
        field: &'static str,
        /// What the QoS parser said.
        detail: String,
    },
    /// Bytes left after the last field.
    #[error("{0} unexpected bytes after the IPC message")]
    Trailing(usize),
}

impl IpcError {
    /// The UNI cause sigd reports for this error before it closes the connection.
    pub fn cause(&self) -> u8 {
        match self {
            IpcError::UnknownType(_) => 97,
            IpcError::BadVersion { .. } => 111,
            _ => 100,
        }
    }
}

mod ty {
    pub(super) const CONNECT: u8 = 0x01;
    pub(super) const BIND: u8 = 0x02;
    pub(super) const UNBIND: u8 = 0x03;
    pub(super) const ACCEPT: u8 = 0x04;
    pub(super) const REJECT: u8 = 0x05;
    pub(super) const RELEASE: u8 = 0x06;
    pub(super) const REGISTER: u8 = 0x07;
    pub(super) const STAT: u8 = 0x08;
    pub(super) const BIND_AUTO: u8 = 0x09;
    pub(super) const ENDPOINTS: u8 = 0x0A;
    pub(super) const COUNTERS: u8 = 0x0B;
    pub(super) const ADMIN_RELEASE: u8 = 0x0C;
    pub(super) const RECLAIM: u8 = 0x0D;
    pub(super) const MODIFY: u8 = 0x0E;
    pub(super) const STAT_PAGE: u8 = 0x10;
    pub(super) const CONNECT_MULTIPOINT: u8 = 0x11;
    pub(super) const ADD_PARTY: u8 = 0x12;
    pub(super) const DROP_PARTY: u8 = 0x13;
    pub(super) const ACCEPT_AT: u8 = 0x14;
    pub(super) const ACK: u8 = 0x81;
    pub(super) const REFUSED: u8 = 0x82;
    pub(super) const CONNECTED: u8 = 0x83;
    pub(super) const INCOMING: u8 = 0x84;
    pub(super) const RELEASED: u8 = 0x85;
    pub(super) const STAT_REPLY: u8 = 0x86;
    pub(super) const ERROR: u8 = 0x87;
    pub(super) const ACCEPTED: u8 = 0x88;
    pub(super) const QOS_CHANGED: u8 = 0x89;
    pub(super) const PARTY_ADDED: u8 = 0x8A;
    pub(super) const PARTY_REJECTED: u8 = 0x8B;
    pub(super) const PARTY_DROPPED: u8 = 0x8C;
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], IpcError> {
        if self.b.len() < n {
            return Err(IpcError::Truncated { field });
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self, f: &'static str) -> Result<u8, IpcError> {
        Ok(self.take(1, f)?[0])
    }
    fn u16(&mut self, f: &'static str) -> Result<u16, IpcError> {
        let b = self.take(2, f)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, f: &'static str) -> Result<u32, IpcError> {
        let b = self.take(4, f)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, f: &'static str) -> Result<u64, IpcError> {
        let b = self.take(8, f)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    fn string(&mut self, f: &'static str) -> Result<String, IpcError> {
        let len = self.u32(f)? as usize;
        if len > MAX_STRING.max(MAX_FRAME) {
            return Err(IpcError::StringTooLong { field: f, len });
        }
        let b = self.take(len, f)?;
        String::from_utf8(b.to_vec()).map_err(|_| IpcError::BadUtf8 { field: f })
    }
    fn qos(&mut self, f: &'static str) -> Result<Qos, IpcError> {
        let text = self.short_string(f)?;
        text.parse::<Qos>().map_err(|e| IpcError::BadQos {
            field: f,
            detail: e.render(&text),
        })
    }
    fn short_string(&mut self, f: &'static str) -> Result<String, IpcError> {
        let s = self.string(f)?;
        if s.len() > MAX_STRING {
            return Err(IpcError::StringTooLong {
                field: f,
                len: s.len(),
            });
        }
        Ok(s)
    }
    fn endpoint(&mut self, f: &'static str) -> Result<Endpoint, IpcError> {
        let ip = match self.u8(f)? {
            4 => {
                let b = self.take(4, f)?;
                IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
            }
            6 => {
                let b = self.take(16, f)?;
                let mut a = [0u8; 16];
                a.copy_from_slice(b);
                IpAddr::V6(Ipv6Addr::from(a))
            }
            other => return Err(IpcError::BadFamily(other)),
        };
        Ok(SocketAddr::new(ip, self.u16(f)?))
    }
    fn endpoints(&mut self, f: &'static str) -> Result<Vec<Endpoint>, IpcError> {
        let n = self.u16(f)? as usize;
        if n > MAX_ENDPOINTS {
            return Err(IpcError::TooManyEndpoints(n));
        }
        (0..n).map(|_| self.endpoint(f)).collect()
    }
}

fn put_endpoints(out: &mut Vec<u8>, es: &[Endpoint]) {
    out.extend_from_slice(&(es.len() as u16).to_be_bytes());
    for e in es {
        put_endpoint(out, e);
    }
}

/// A QoS goes as its text form (Linux-ATM syntax with natm's extensions), which
/// every [`Qos`] round-trips through; the reader parses it once, so no side works
/// with QoS text that does not parse.
fn put_qos(out: &mut Vec<u8>, q: &Qos) {
    put_string(out, &q.to_string());
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_endpoint(out: &mut Vec<u8>, e: &Endpoint) {
    match e.ip() {
        IpAddr::V4(a) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            out.push(6);
            out.extend_from_slice(&a.octets());
        }
    }
    out.extend_from_slice(&e.port().to_be_bytes());
}

/// Cut a string to at most [`MAX_STRING`] bytes on a character boundary (details
/// written by sigd never make a frame the other side refuses).
pub fn clip(s: &str) -> &str {
    if s.len() <= MAX_STRING {
        return s;
    }
    let mut end = MAX_STRING;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Message {
    /// The message type octet.
    pub fn type_octet(&self) -> u8 {
        match self {
            Message::Connect { .. } => ty::CONNECT,
            Message::Bind { .. } => ty::BIND,
            Message::Unbind { .. } => ty::UNBIND,
            Message::Accept { .. } => ty::ACCEPT,
            Message::AcceptAt { .. } => ty::ACCEPT_AT,
            Message::Reject { .. } => ty::REJECT,
            Message::Release { .. } => ty::RELEASE,
            Message::Register { .. } => ty::REGISTER,
            Message::Stat { .. } => ty::STAT,
            Message::BindAuto { .. } => ty::BIND_AUTO,
            Message::Endpoints { .. } => ty::ENDPOINTS,
            Message::Counters { .. } => ty::COUNTERS,
            Message::AdminRelease { .. } => ty::ADMIN_RELEASE,
            Message::Reclaim { .. } => ty::RECLAIM,
            Message::StatPage { .. } => ty::STAT_PAGE,
            Message::Modify { .. } => ty::MODIFY,
            Message::QosChanged { .. } => ty::QOS_CHANGED,
            Message::ConnectMultipoint { .. } => ty::CONNECT_MULTIPOINT,
            Message::AddParty { .. } => ty::ADD_PARTY,
            Message::DropParty { .. } => ty::DROP_PARTY,
            Message::PartyAdded { .. } => ty::PARTY_ADDED,
            Message::PartyRejected { .. } => ty::PARTY_REJECTED,
            Message::PartyDropped { .. } => ty::PARTY_DROPPED,
            Message::Accepted { .. } => ty::ACCEPTED,
            Message::Ack { .. } => ty::ACK,
            Message::Refused { .. } => ty::REFUSED,
            Message::Connected { .. } => ty::CONNECTED,
            Message::Incoming { .. } => ty::INCOMING,
            Message::Released { .. } => ty::RELEASED,
            Message::StatReply { .. } => ty::STAT_REPLY,
            Message::Error { .. } => ty::ERROR,
        }
    }

    /// Whether this message goes from an application to sigd.
    pub fn is_request(&self) -> bool {
        self.type_octet() < 0x80
    }

    /// Append the whole frame (length prefix included) to `out`. Strings longer than
    /// [`MAX_STRING`] (except the stat JSON) are the caller's bug; the decoder refuses them.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; LEN_PREFIX]);
        out.push(VERSION);
        out.push(self.type_octet());
        match self {
            Message::Connect {
                req,
                called,
                qos,
                data,
            }
            | Message::ConnectMultipoint {
                req,
                called,
                qos,
                data,
            } => {
                out.extend_from_slice(&req.to_be_bytes());
                put_string(out, called);
                put_qos(out, qos);
                put_endpoint(out, data);
            }
            Message::Bind { req, sap, qos } => {
                out.extend_from_slice(&req.to_be_bytes());
                put_string(out, sap);
                put_qos(out, qos);
            }
            Message::Unbind { req, listener } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&listener.to_be_bytes());
            }
            Message::BindAuto {
                req,
                sap,
                qos,
                data,
            } => {
                out.extend_from_slice(&req.to_be_bytes());
                put_string(out, sap);
                put_qos(out, qos);
                put_endpoints(out, data);
            }
            Message::Endpoints {
                req,
                listener,
                data,
            } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&listener.to_be_bytes());
                put_endpoints(out, data);
            }
            Message::Accepted {
                listener,
                call,
                data,
                caller,
                path,
            } => {
                out.extend_from_slice(&listener.to_be_bytes());
                out.extend_from_slice(&call.to_be_bytes());
                put_endpoint(out, data);
                put_string(out, caller);
                path.put(out);
            }
            Message::Accept { req, call, data } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&call.to_be_bytes());
                put_endpoint(out, data);
            }
            Message::AcceptAt {
                req,
                call,
                data,
                tx_bps,
                rx_bps,
            } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&call.to_be_bytes());
                put_endpoint(out, data);
                out.extend_from_slice(&tx_bps.to_be_bytes());
                out.extend_from_slice(&rx_bps.to_be_bytes());
            }
            Message::Reclaim {
                req,
                call,
                data,
                path,
            } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&call.to_be_bytes());
                put_endpoint(out, data);
                path.put(out);
            }
            Message::Reject { req, call, cause }
            | Message::Release { req, call, cause }
            | Message::AdminRelease { req, call, cause } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&call.to_be_bytes());
                out.push(*cause);
            }
            Message::Register { req, address } => {
                out.extend_from_slice(&req.to_be_bytes());
                put_string(out, address);
            }
            Message::Modify { req, call, qos } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&call.to_be_bytes());
                put_qos(out, qos);
            }
            Message::QosChanged { call, qos, resume } => {
                out.extend_from_slice(&call.to_be_bytes());
                put_qos(out, qos);
                put_string(out, resume);
            }
            Message::AddParty { req, call, called } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&call.to_be_bytes());
                put_string(out, called);
            }
            Message::DropParty {
                req,
                call,
                party,
                cause,
            } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&call.to_be_bytes());
                out.extend_from_slice(&party.to_be_bytes());
                out.push(*cause);
            }
            Message::PartyAdded { call, party } => {
                out.extend_from_slice(&call.to_be_bytes());
                out.extend_from_slice(&party.to_be_bytes());
            }
            Message::PartyRejected {
                call,
                party,
                cause,
                detail,
            } => {
                out.extend_from_slice(&call.to_be_bytes());
                out.extend_from_slice(&party.to_be_bytes());
                out.push(*cause);
                put_string(out, detail);
            }
            Message::PartyDropped {
                call,
                party,
                cause,
                left,
                detail,
            } => {
                out.extend_from_slice(&call.to_be_bytes());
                out.extend_from_slice(&party.to_be_bytes());
                out.push(*cause);
                out.push(u8::from(*left));
                put_string(out, detail);
            }
            Message::Stat { req } => out.extend_from_slice(&req.to_be_bytes()),
            Message::StatPage { req, offset } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&offset.to_be_bytes());
            }
            Message::Counters {
                req,
                call,
                counters,
            } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&call.to_be_bytes());
                counters.put(out);
            }
            Message::Ack { req, id } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.extend_from_slice(&id.to_be_bytes());
            }
            Message::Refused { req, cause, detail } => {
                out.extend_from_slice(&req.to_be_bytes());
                out.push(*cause);
                put_string(out, detail);
            }
            Message::Connected { call, path } => {
                out.extend_from_slice(&call.to_be_bytes());
                path.put(out);
            }
            Message::Incoming {
                listener,
                call,
                caller,
                qos,
            } => {
                out.extend_from_slice(&listener.to_be_bytes());
                out.extend_from_slice(&call.to_be_bytes());
                put_string(out, caller);
                put_qos(out, qos);
            }
            Message::Released {
                call,
                cause,
                detail,
            } => {
                out.extend_from_slice(&call.to_be_bytes());
                out.push(*cause);
                put_string(out, detail);
            }
            Message::StatReply { req, json } => {
                out.extend_from_slice(&req.to_be_bytes());
                put_string(out, json);
            }
            Message::Error { cause, detail } => {
                out.push(*cause);
                put_string(out, detail);
            }
        }
        let len = (out.len() - start - LEN_PREFIX) as u32;
        out[start..start + LEN_PREFIX].copy_from_slice(&len.to_be_bytes());
    }

    /// The frame as a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }

    /// Decode one frame body (the bytes after the length prefix).
    pub fn decode_body(body: &[u8]) -> Result<Message, IpcError> {
        let mut r = Reader { b: body };
        let version = r.u8("version")?;
        if version != VERSION {
            return Err(IpcError::BadVersion { got: version });
        }
        let t = r.u8("type")?;
        let m = match t {
            ty::CONNECT => Message::Connect {
                req: r.u64("req")?,
                called: r.short_string("called")?,
                qos: r.qos("qos")?,
                data: r.endpoint("data endpoint")?,
            },
            ty::BIND => Message::Bind {
                req: r.u64("req")?,
                sap: r.short_string("sap")?,
                qos: r.qos("qos")?,
            },
            ty::UNBIND => Message::Unbind {
                req: r.u64("req")?,
                listener: r.u64("listener")?,
            },
            ty::ACCEPT => Message::Accept {
                req: r.u64("req")?,
                call: r.u64("call")?,
                data: r.endpoint("data endpoint")?,
            },
            ty::ACCEPT_AT => Message::AcceptAt {
                req: r.u64("req")?,
                call: r.u64("call")?,
                data: r.endpoint("data endpoint")?,
                tx_bps: r.u64("tx rate")?,
                rx_bps: r.u64("rx rate")?,
            },
            ty::REJECT => Message::Reject {
                req: r.u64("req")?,
                call: r.u64("call")?,
                cause: r.u8("cause")?,
            },
            ty::RELEASE => Message::Release {
                req: r.u64("req")?,
                call: r.u64("call")?,
                cause: r.u8("cause")?,
            },
            ty::REGISTER => Message::Register {
                req: r.u64("req")?,
                address: r.short_string("address")?,
            },
            ty::STAT => Message::Stat { req: r.u64("req")? },
            ty::MODIFY => Message::Modify {
                req: r.u64("req")?,
                call: r.u64("call")?,
                qos: r.qos("qos")?,
            },
            ty::QOS_CHANGED => Message::QosChanged {
                call: r.u64("call")?,
                qos: r.qos("qos")?,
                resume: r.short_string("resume ticket")?,
            },
            ty::CONNECT_MULTIPOINT => Message::ConnectMultipoint {
                req: r.u64("req")?,
                called: r.short_string("called")?,
                qos: r.qos("qos")?,
                data: r.endpoint("data endpoint")?,
            },
            ty::ADD_PARTY => Message::AddParty {
                req: r.u64("req")?,
                call: r.u64("call")?,
                called: r.short_string("called")?,
            },
            ty::DROP_PARTY => Message::DropParty {
                req: r.u64("req")?,
                call: r.u64("call")?,
                party: r.u16("party")?,
                cause: r.u8("cause")?,
            },
            ty::PARTY_ADDED => Message::PartyAdded {
                call: r.u64("call")?,
                party: r.u16("party")?,
            },
            ty::PARTY_REJECTED => Message::PartyRejected {
                call: r.u64("call")?,
                party: r.u16("party")?,
                cause: r.u8("cause")?,
                detail: r.short_string("detail")?,
            },
            ty::PARTY_DROPPED => Message::PartyDropped {
                call: r.u64("call")?,
                party: r.u16("party")?,
                cause: r.u8("cause")?,
                left: match r.u8("left")? {
                    0 => false,
                    1 => true,
                    value => {
                        return Err(IpcError::BadFlag {
                            field: "left",
                            value,
                        })
                    }
                },
                detail: r.short_string("detail")?,
            },
            ty::STAT_PAGE => Message::StatPage {
                req: r.u64("req")?,
                offset: r.u64("offset")?,
            },
            ty::COUNTERS => Message::Counters {
                req: r.u64("req")?,
                call: r.u64("call")?,
                counters: Box::new(VcCounters::take(&mut r)?),
            },
            ty::ADMIN_RELEASE => Message::AdminRelease {
                req: r.u64("req")?,
                call: r.u64("call")?,
                cause: r.u8("cause")?,
            },
            ty::RECLAIM => Message::Reclaim {
                req: r.u64("req")?,
                call: r.u64("call")?,
                data: r.endpoint("data endpoint")?,
                path: DataPath::take(&mut r)?,
            },
            ty::BIND_AUTO => Message::BindAuto {
                req: r.u64("req")?,
                sap: r.short_string("sap")?,
                qos: r.qos("qos")?,
                data: r.endpoints("data endpoints")?,
            },
            ty::ENDPOINTS => Message::Endpoints {
                req: r.u64("req")?,
                listener: r.u64("listener")?,
                data: r.endpoints("data endpoints")?,
            },
            ty::ACCEPTED => Message::Accepted {
                listener: r.u64("listener")?,
                call: r.u64("call")?,
                data: r.endpoint("data endpoint")?,
                caller: r.short_string("caller")?,
                path: DataPath::take(&mut r)?,
            },
            ty::ACK => Message::Ack {
                req: r.u64("req")?,
                id: r.u64("id")?,
            },
            ty::REFUSED => Message::Refused {
                req: r.u64("req")?,
                cause: r.u8("cause")?,
                detail: r.short_string("detail")?,
            },
            ty::CONNECTED => Message::Connected {
                call: r.u64("call")?,
                path: DataPath::take(&mut r)?,
            },
            ty::INCOMING => Message::Incoming {
                listener: r.u64("listener")?,
                call: r.u64("call")?,
                caller: r.short_string("caller")?,
                qos: r.qos("qos")?,
            },
            ty::RELEASED => Message::Released {
                call: r.u64("call")?,
                cause: r.u8("cause")?,
                detail: r.short_string("detail")?,
            },
            ty::STAT_REPLY => Message::StatReply {
                req: r.u64("req")?,
                json: r.string("json")?,
            },
            ty::ERROR => Message::Error {
                cause: r.u8("cause")?,
                detail: r.short_string("detail")?,
            },
            other => return Err(IpcError::UnknownType(other)),
        };
        if !r.b.is_empty() {
            return Err(IpcError::Trailing(r.b.len()));
        }
        Ok(m)
    }

    /// Decode one whole frame (length prefix included); returns the message and the
    /// bytes used, or `Ok(None)` if `buf` does not yet hold a whole frame.
    pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, IpcError> {
        if buf.len() < LEN_PREFIX {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if !(2..=MAX_FRAME).contains(&len) {
            return Err(IpcError::BadLength {
                len,
                max: MAX_FRAME,
            });
        }
        if buf.len() < LEN_PREFIX + len {
            return Ok(None);
        }
        let m = Message::decode_body(&buf[LEN_PREFIX..LEN_PREFIX + len])?;
        Ok(Some((m, LEN_PREFIX + len)))
    }
}

/// A receive buffer for one IPC stream: bytes go in as they arrive, whole messages
/// come out; never holds more than one frame's worth beyond what was decoded.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// An empty decoder.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Append received bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes buffered and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next whole message, `Ok(None)` if more bytes are needed. After an error
    /// the stream cannot be resynchronised: close it.
    pub fn next_message(&mut self) -> Result<Option<Message>, IpcError> {
        match Message::decode(&self.buf)? {
            Some((m, used)) => {
                self.buf.drain(..used);
                Ok(Some(m))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(s: &str) -> Endpoint {
        s.parse().unwrap()
    }

    #[test]
    fn golden_connect_frame() {
        let m = Message::Connect {
            req: 7,
            called: "bob:echo".into(),
            qos: "ubr".parse().unwrap(),
            data: ep("127.0.0.1:4000"),
        };
        let b = m.to_bytes();
        let expect: Vec<u8> = [
            &[0, 0, 0, 36, 2, 1][..],
            &7u64.to_be_bytes(),
            &[0, 0, 0, 8],
            b"bob:echo",
            &[0, 0, 0, 3],
            b"ubr",
            &[4, 127, 0, 0, 1, 0x0f, 0xa0],
        ]
        .concat();
        assert_eq!(b, expect);
        assert_eq!(Message::decode(&b).unwrap(), Some((m, b.len())));
    }

    #[test]
    fn qos_text_that_does_not_parse_is_a_typed_error() {
        let m = Message::Connect {
            req: 7,
            called: "bob:echo".into(),
            qos: "ubr".parse().unwrap(),
            data: ep("127.0.0.1:4000"),
        };
        let mut b = m.to_bytes();
        let at = b.windows(3).position(|w| w == b"ubr").unwrap();
        b[at..at + 3].copy_from_slice(b"xbr");
        match Message::decode(&b) {
            Err(IpcError::BadQos { field, detail }) => {
                assert_eq!(field, "qos");
                assert!(detail.contains("xbr"), "{detail}");
            }
            other => panic!("expected BadQos, got {other:?}"),
        }
        assert_eq!(
            IpcError::BadQos {
                field: "qos",
                detail: String::new()
            }
            .cause(),
            100
        );
    }

    #[test]
    fn golden_connected_frame() {
        // The layout docs/wire.md gives: call, peer endpoint, cookie, tx VCI, rx VCI,
        // granted rate, QoS text, keys (0: none).
        let m = Message::Connected {
            call: 5,
            path: DataPath {
                peer: ep("127.0.0.1:4000"),
                cookie: 0x0102_0304,
                tx_vci: 32,
                rx_vci: 33,
                granted_bps: 1_000_000,
                qos: "cbr".parse().unwrap(),
                resume: "t".into(),
                keys: None,
                multipoint: false,
            },
        };
        let b = m.to_bytes();
        let expect: Vec<u8> = [
            &[0, 0, 0, 46, 2, 0x83][..],
            &5u64.to_be_bytes(),
            &[4, 127, 0, 0, 1, 0x0f, 0xa0],
            &[1, 2, 3, 4],
            &[0, 32, 0, 33],
            &1_000_000u64.to_be_bytes(),
            &[0, 0, 0, 3],
            b"cbr",
            &[0, 0, 0, 1],
            b"t",
            &[0],
        ]
        .concat();
        assert_eq!(b, expect);
        assert_eq!(Message::decode(&b).unwrap(), Some((m, b.len())));
    }

    #[test]
    fn pre_authorised_messages_round_trip_and_endpoint_lists_are_bounded() {
        let ms = [
            Message::BindAuto {
                req: 3,
                sap: "perf".into(),
                qos: "reliable".parse().unwrap(),
                data: vec![ep("0.0.0.0:4000"), ep("[::1]:4001")],
            },
            Message::Endpoints {
                req: 4,
                listener: 9,
                data: vec![],
            },
            Message::Accepted {
                listener: 9,
                call: 10,
                data: ep("0.0.0.0:4000"),
                caller: "+4420001".into(),
                path: DataPath {
                    peer: ep("127.0.0.1:5000"),
                    cookie: 0xdead_beef,
                    tx_vci: 33,
                    rx_vci: 32,
                    granted_bps: 0,
                    qos: "reliable".parse().unwrap(),
                    resume: String::new(),
                    keys: None,
                    multipoint: true,
                },
            },
            Message::Reclaim {
                req: 5,
                call: 10,
                data: ep("0.0.0.0:4000"),
                path: DataPath {
                    peer: ep("127.0.0.1:5000"),
                    cookie: 7,
                    tx_vci: 33,
                    rx_vci: 32,
                    granted_bps: 0,
                    qos: "reliable".parse().unwrap(),
                    resume: "natm-resume/1 link=127.0.0.1:2905".into(),
                    keys: Some(crate::wire::seal::PathKeys {
                        tx: [1; 32],
                        rx: [2; 32],
                    }),
                    multipoint: true,
                },
            },
        ];
        for m in ms {
            let b = m.to_bytes();
            assert_eq!(Message::decode(&b).unwrap(), Some((m, b.len())));
        }
        let mut b = Message::Endpoints {
            req: 1,
            listener: 2,
            data: vec![],
        }
        .to_bytes();
        let n = b.len();
        b[n - 2..].copy_from_slice(&((MAX_ENDPOINTS + 1) as u16).to_be_bytes());
        assert_eq!(
            Message::decode(&b),
            Err(IpcError::TooManyEndpoints(MAX_ENDPOINTS + 1))
        );
    }

    #[test]
    fn counters_and_admin_release_round_trip_and_counters_are_bounded() {
        let counters = VcCounters {
            sampled_ms: 1234,
            tx_bytes: 1 << 40,
            rx_tpdus: 7,
            retx_fast: 2,
            queue_drops: None,
            srtt_us: Some(250),
            rate_bps: Some(0),
            recv_queued: 4096,
            ..VcCounters::default()
        };
        let ms = [
            Message::Counters {
                req: 0,
                call: 9,
                counters: Box::new(counters),
            },
            Message::AdminRelease {
                req: 3,
                call: 9,
                cause: 16,
            },
            Message::StatPage {
                req: 4,
                offset: 3_000,
            },
        ];
        for m in ms {
            let b = m.to_bytes();
            assert_eq!(Message::decode(&b).unwrap(), Some((m, b.len())));
        }
        let b = Message::Counters {
            req: 0,
            call: 9,
            counters: Box::new(counters),
        }
        .to_bytes();
        // Body: version, type, req, call, layout, count, 27 u64s.
        assert_eq!(b.len(), LEN_PREFIX + 2 + 16 + 2 + 8 * 27);
        assert_eq!(&b[22..24], &[COUNTERS_LAYOUT, 27]);
        // Another field count or layout is refused (decoding stays the exact inverse
        // of encoding, which the fuzz target checks).
        for (at, v) in [(23, 24u8), (23, 26), (22, 2)] {
            let mut bad = b.clone();
            bad[at] = v;
            assert!(
                matches!(Message::decode(&bad), Err(IpcError::BadCounters { .. })),
                "{at}={v}"
            );
        }
    }

    #[test]
    fn multipoint_messages_round_trip_and_a_bad_left_flag_is_refused() {
        let ms = [
            Message::ConnectMultipoint {
                req: 1,
                called: "+4420002:tv".into(),
                qos: "guaranteed:pcr=4Mbps".parse().unwrap(),
                data: ep("0.0.0.0:4000"),
            },
            Message::AddParty {
                req: 2,
                call: 7,
                called: "+4420003:tv".into(),
            },
            Message::DropParty {
                req: 3,
                call: 7,
                party: 0x7fff,
                cause: 16,
            },
            Message::PartyAdded { call: 7, party: 1 },
            Message::PartyRejected {
                call: 7,
                party: 2,
                cause: 37,
                detail: "no bandwidth".into(),
            },
            Message::PartyDropped {
                call: 7,
                party: 1,
                cause: 31,
                left: true,
                detail: "the leaf left".into(),
            },
        ];
        for m in ms {
            let b = m.to_bytes();
            assert_eq!(Message::decode(&b).unwrap(), Some((m.clone(), b.len())));
            assert_eq!(m.is_request(), m.type_octet() < 0x80);
        }
        // DropParty: req, call, party (2 octets), cause.
        let b = Message::DropParty {
            req: 3,
            call: 7,
            party: 0x0102,
            cause: 16,
        }
        .to_bytes();
        assert_eq!(&b[4..6], &[2, 0x13]);
        assert_eq!(&b[22..], &[1, 2, 16]);
        let mut b = Message::PartyDropped {
            call: 7,
            party: 1,
            cause: 16,
            left: false,
            detail: String::new(),
        }
        .to_bytes();
        b[LEN_PREFIX + 2 + 8 + 2 + 1] = 2;
        assert_eq!(
            Message::decode(&b),
            Err(IpcError::BadFlag {
                field: "left",
                value: 2
            })
        );
    }

    #[test]
    fn partial_frames_wait_and_garbage_is_refused() {
        let b = Message::Stat { req: 1 }.to_bytes();
        for cut in 0..b.len() {
            assert_eq!(Message::decode(&b[..cut]).unwrap(), None);
        }
        assert!(matches!(
            Message::decode(b"GET / HTTP/1.1\r\n"),
            Err(IpcError::BadLength { .. })
        ));
        let mut bad = b.clone();
        bad[4] = 9;
        assert_eq!(Message::decode(&bad), Err(IpcError::BadVersion { got: 9 }));
        let mut bad = b.clone();
        bad[5] = 0x55;
        assert_eq!(Message::decode(&bad), Err(IpcError::UnknownType(0x55)));
        let mut long = b.clone();
        long.push(0);
        long[3] += 1;
        assert_eq!(Message::decode(&long), Err(IpcError::Trailing(1)));
    }

    #[test]
    fn decoder_splits_a_stream_at_frame_boundaries() {
        let a = Message::Ack { req: 1, id: 2 };
        let r = Message::Released {
            call: 2,
            cause: 16,
            detail: "normal".into(),
        };
        let mut s = a.to_bytes();
        s.extend(r.to_bytes());
        let mut d = Decoder::new();
        for chunk in s.chunks(3) {
            d.push(chunk);
        }
        assert_eq!(d.next_message().unwrap(), Some(a));
        assert_eq!(d.next_message().unwrap(), Some(r));
        assert_eq!(d.next_message().unwrap(), None);
        assert_eq!(d.buffered(), 0);
    }
}
