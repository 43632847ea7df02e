//! The FORE-style API (issue 34, seed 002 §3.1): `include/natm_fore.h` over
//! [`natm_rs::ulib`], the same safe API natm.h wraps.
//!
//! A descriptor is a number this module hands out (from 3, so it never reads as
//! stdin, stdout or stderr); behind it a [`Desc`]: the host of its device, the SAP
//! bound, a listener, the calls [`atm_listen`] has shown and not yet answered, and a
//! connection or a multipoint root. Blocking calls take what they need out of the
//! table and wait without holding it. Failures return -1 and set the thread's
//! `atm_errno`; the sentence is the one `natm_last_error` gives. docs/capi.md, "The
//! FORE API (seed 002)", is the reference and says where it departs from FORE.

use natm_rs::ulib::Wait;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use natm_rs::ulib::{
    Connection, Error, Host, HostConfig, IncomingCall, LeafId, Listener, Multipoint,
};
use natm_rs::wire::qos::{Rate, TrafficParams, DEFAULT_MAX_SDU};

use crate::error::{guard, Code, Failure};

/// natm_fore.h's `atm_errno` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum AtmCode {
    BadF = 1,
    Inval = 2,
    NoDev = 3,
    Qos = 4,
    Refused = 5,
    NoBw = 6,
    NoSap = 7,
    NotConn = 8,
    State = 9,
    MsgSize = 10,
    TimedOut = 11,
    NotSup = 12,
    Io = 13,
    Internal = 14,
}

/// The text of each code (`atm_strerror`), NUL-terminated for C.
fn describe(code: c_int) -> &'static [u8] {
    match code {
        0 => b"success\0",
        1 => b"bad descriptor\0",
        2 => b"invalid argument\0",
        3 => b"no signalling daemon at the device\0",
        4 => b"QoS not expressible or not usable\0",
        5 => b"call refused\0",
        6 => b"bandwidth not available\0",
        7 => b"nobody bound to that SAP\0",
        8 => b"not connected\0",
        9 => b"descriptor in the wrong state for the call\0",
        10 => b"PDU size out of range\0",
        11 => b"timed out\0",
        12 => b"not supported by natm\0",
        13 => b"I/O error\0",
        14 => b"internal error\0",
        _ => b"unknown error code\0",
    }
}

/// A failure on its way to C: the FORE code, natm's sentence, the UNI cause.
#[derive(Debug)]
pub(crate) struct Fail {
    code: AtmCode,
    message: String,
    cause: u8,
}

fn fail(code: AtmCode, message: impl Into<String>) -> Fail {
    Fail {
        code,
        message: message.into(),
        cause: 0,
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let message = e.to_string();
        let (code, cause) = match &e {
            // 37 user cell rate unavailable, 47 resources unavailable: FORE's
            // "bandwidth not available"; 88 incompatible destination: no listener.
            Error::Refused {
                cause: c @ (37 | 47),
                ..
            } => (AtmCode::NoBw, *c),
            Error::Refused { cause: 88, .. } => (AtmCode::NoSap, 88),
            Error::Refused { cause, .. } => (AtmCode::Refused, *cause),
            Error::NoSigd { .. } | Error::NeedsSigd(_) | Error::SigdGone => (AtmCode::NoDev, 0),
            Error::SigdClosed { cause, .. } => (AtmCode::NoDev, *cause),
            Error::Qos(_)
            | Error::Config(_)
            | Error::QosNotNegotiable(_)
            | Error::QosBounds(_)
            | Error::QosRefused { .. }
            | Error::QosPending(_) => (AtmCode::Qos, 0),
            Error::Aborted(_) | Error::Closed => (AtmCode::NotConn, 0),
            // A send or receive the simplex connection's direction does not allow,
            // as on a multicast root.
            Error::Simplex(_) => (AtmCode::State, 0),
            Error::MessageTooLarge { .. } | Error::EmptyMessage => (AtmCode::MsgSize, 0),
            Error::TimedOut | Error::Unreachable(_) => (AtmCode::TimedOut, 0),
            Error::NoAddress | Error::BadBacklog(_) => (AtmCode::Inval, 0),
            #[allow(unreachable_patterns)]
            _ => (AtmCode::Io, 0),
        };
        Fail {
            code,
            message,
            cause,
        }
    }
}

thread_local! {
    /// This thread's `atm_errno`.
    static ERRNO: Cell<c_int> = const { Cell::new(0) };
}

/// Run `f`: its result, or -1 with `atm_errno` set and the sentence recorded for
/// `natm_last_error` (a panic is `ATM_EINTERNAL`; none crosses into C).
fn run(f: impl FnOnce() -> Result<isize, Fail>) -> isize {
    let mut code = None;
    let r = guard(|| {
        f().map_err(|e| {
            code = Some(e.code);
            let mut fl = Failure::new(Code::Io, e.message);
            fl.cause = e.cause;
            fl
        })
    });
    if r >= 0 {
        return r;
    }
    let c = code.unwrap_or(AtmCode::Internal);
    ERRNO.with(|e| e.set(c as c_int));
    -1
}

fn to_int(r: isize) -> c_int {
    c_int::try_from(r).unwrap_or(c_int::MAX)
}

/// What an open descriptor holds.
struct Desc {
    host: Host,
    sap: Option<AtmSap>,
    listener: Option<Arc<Listener>>,
    /// Calls `atm_listen` showed, by connection id, not yet accepted or rejected.
    offers: HashMap<c_int, IncomingCall>,
    next_conn_id: c_int,
    data: Data,
}

/// The connection on a descriptor.
enum Data {
    None,
    Conn(Arc<Conn>),
    Root(Arc<Mutex<Multipoint>>),
}

/// A connection and a PDU `atm_recv` could not fit into its caller's buffer.
struct Conn {
    conn: Connection,
    held: Mutex<Option<Vec<u8>>>,
}

/// natm_fore.h's `Atm_sap`.
type AtmSap = u32;

/// The descriptor table.
fn table() -> &'static Mutex<HashMap<c_int, Desc>> {
    static T: OnceLock<Mutex<HashMap<c_int, Desc>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run `f` on descriptor `fd` with the table locked (never for a call that waits).
fn with<R>(fd: c_int, f: impl FnOnce(&mut Desc) -> Result<R, Fail>) -> Result<R, Fail> {
    let mut t = lock(table());
    let d = t.get_mut(&fd).ok_or_else(|| {
        fail(
            AtmCode::BadF,
            format!("{fd} is not an open natm ATM descriptor"),
        )
    })?;
    f(d)
}

/// One host (engine) per sigd socket, shared by every descriptor opened on it.
fn host_for(sigd: Option<PathBuf>) -> Result<Host, Fail> {
    static HOSTS: OnceLock<Mutex<HashMap<Option<PathBuf>, Host>>> = OnceLock::new();
    let mut hosts = lock(HOSTS.get_or_init(Default::default));
    if let Some(h) = hosts.get(&sigd) {
        return Ok(h.clone());
    }
    let mut cfg = HostConfig::default();
    if let Some(p) = &sigd {
        cfg.sigd_socket = Some(p.clone());
    }
    // FORE's open fails when the device is not there: so does this one, rather than
    // the first call.
    match &cfg.sigd_socket {
        Some(p) if p.exists() => {}
        Some(p) => {
            return Err(fail(
                AtmCode::NoDev,
                format!(
                    "no sigd socket at {}: start `natm sigd`, or name its socket as the device",
                    p.display()
                ),
            ))
        }
        None => return Err(fail(AtmCode::NoDev, "no sigd socket configured")),
    }
    let h = Host::open(cfg).map_err(Fail::from)?;
    hosts.insert(sigd, h.clone());
    Ok(h)
}

/// A C string argument, NULL allowed.
///
/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
unsafe fn opt_text<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(Some)
        .map_err(|_| fail(AtmCode::Inval, format!("{what} is not UTF-8 text")))
}

/// Write `v` through `p` if it is not null.
///
/// # Safety
/// `p` is null or valid for a write of `T`.
unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: the caller promises null or writable.
    if let Some(r) = unsafe { p.as_mut() } {
        *r = v;
    }
}

/// natm_fore.h's `Atm_address`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AtmAddress {
    /// NUL-terminated text.
    pub address: [c_char; ATM_ADDRESS_LEN],
}

/// natm_fore.h's `ATM_ADDRESS_LEN`.
pub const ATM_ADDRESS_LEN: usize = 64;

/// natm_fore.h's `Atm_endpoint`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AtmEndpoint {
    /// The address.
    pub nsap: AtmAddress,
    /// The SAP.
    pub asap: u32,
}

/// natm_fore.h's `Atm_qos_spec`: kbit/s (bursts: kbit).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AtmQosSpec {
    /// Asked for.
    pub target: i32,
    /// The least that will do.
    pub minimum: i32,
}

/// natm_fore.h's `Atm_qos`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AtmQos {
    /// Peak bandwidth.
    pub peak_bandwidth: AtmQosSpec,
    /// Mean bandwidth.
    pub mean_bandwidth: AtmQosSpec,
    /// Mean burst.
    pub mean_burst: AtmQosSpec,
}

/// natm_fore.h's `Atm_qos_sel`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AtmQosSel {
    /// Peak bandwidth granted, kbit/s.
    pub peak_bandwidth: i32,
    /// Mean bandwidth granted, kbit/s.
    pub mean_bandwidth: i32,
    /// Mean burst, kbit.
    pub mean_burst: i32,
}

/// natm_fore.h's `Atm_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AtmInfo {
    /// The largest PDU `atm_send` takes.
    pub mtu: i32,
}

const AAL_NULL: c_int = 0;
const AAL_3_4: c_int = 3;
const AAL_5: c_int = 5;
const DUPLEX: c_int = 0;
const SIMPLEX: c_int = 1;
const MULTICAST: c_int = 2;

/// natm QoS text for FORE's QoS: UBR when nothing is asked, CBR at the peak, VBR
/// when a mean below the peak is given. `bare`: AAL5 PDUs without natm's transport
/// (`transport=none`), as FORE's adapters carried them; a multicast root keeps
/// natm's transport (its branches need it) without error control.
pub(crate) fn qos_text(q: &AtmQos, bare: bool) -> Result<String, Fail> {
    let all = [
        q.peak_bandwidth.target,
        q.peak_bandwidth.minimum,
        q.mean_bandwidth.target,
        q.mean_bandwidth.minimum,
        q.mean_burst.target,
        q.mean_burst.minimum,
    ];
    if all.iter().any(|&v| v < 0) {
        return Err(fail(AtmCode::Qos, format!("a negative QoS value in {q:?}")));
    }
    let (peak, pmin) = (q.peak_bandwidth.target, q.peak_bandwidth.minimum);
    let (mean, burst) = (q.mean_bandwidth.target, q.mean_burst.target);
    if pmin > peak || q.mean_bandwidth.minimum > mean {
        return Err(fail(
            AtmCode::Qos,
            format!("a minimum above its target in {q:?}"),
        ));
    }
    let traffic = if peak == 0 && mean == 0 {
        "ubr".to_owned()
    } else if peak == 0 {
        return Err(fail(
            AtmCode::Qos,
            "a mean bandwidth without a peak: give peak_bandwidth (kbit/s)",
        ));
    } else if mean == 0 || mean >= peak {
        if pmin > 0 && pmin < peak {
            format!("cbr:max_pcr={peak}kbps,min_pcr={pmin}kbps")
        } else {
            format!("cbr:pcr={peak}kbps")
        }
    } else {
        // A burst of kbit in cells of 48 payload bytes, at least one.
        let cells = (u64::try_from(burst).unwrap_or(0) * 1000)
            .div_ceil(8 * 48)
            .max(1);
        format!("vbr:pcr={peak}kbps,scr={mean}kbps,mbs={cells}")
    };
    Ok(match (bare, traffic.contains(':')) {
        (false, _) => traffic,
        (true, true) => format!("{traffic},transport=none"),
        (true, false) => format!("{traffic}:transport=none"),
    })
}

fn kbps(r: Option<Rate>) -> i32 {
    match r {
        Some(Rate::Bps(b)) => i32::try_from(b / 1000).unwrap_or(i32::MAX),
        Some(Rate::Max) => i32::MAX,
        None => 0,
    }
}

/// FORE's QoS for what one direction of natm's QoS asks.
fn fore_qos(t: &TrafficParams) -> AtmQos {
    let peak = kbps(t.pcr.or(t.max_pcr));
    let mean = kbps(t.scr);
    let burst = t.mbs.map_or(0, |c| {
        i32::try_from(u64::from(c) * 48 * 8 / 1000).unwrap_or(i32::MAX)
    });
    AtmQos {
        peak_bandwidth: AtmQosSpec {
            target: peak,
            minimum: kbps(t.min_pcr),
        },
        mean_bandwidth: AtmQosSpec {
            target: if mean == 0 { peak } else { mean },
            minimum: 0,
        },
        mean_burst: AtmQosSpec {
            target: burst,
            minimum: 0,
        },
    }
}

/// "address:SAP" for natm from a FORE endpoint.
fn called(dst: &AtmEndpoint) -> Result<String, Fail> {
    let raw = &dst.nsap.address;
    let end = raw
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| fail(AtmCode::Inval, "dst->nsap.address is not NUL-terminated"))?;
    let bytes: Vec<u8> = raw[..end].iter().map(|&c| c as u8).collect();
    let addr = String::from_utf8(bytes)
        .map_err(|_| fail(AtmCode::Inval, "dst->nsap.address is not UTF-8 text"))?;
    if addr.is_empty() {
        return Err(fail(AtmCode::Inval, "dst->nsap.address is empty"));
    }
    Ok(format!("{addr}:{}", sap_text(dst.asap)?))
}

/// natm's SAP for FORE's number: its decimal text (natm SAPs are 1–8 characters).
fn sap_text(sap: AtmSap) -> Result<String, Fail> {
    if !(1..=99_999_999).contains(&sap) {
        return Err(fail(
            AtmCode::Inval,
            format!("SAP {sap} outside 1..=99999999 (natm's SAPs are up to 8 characters)"),
        ));
    }
    Ok(sap.to_string())
}

fn endpoint(addr: &str, sap: AtmSap) -> AtmEndpoint {
    let mut e = AtmEndpoint {
        nsap: AtmAddress {
            address: [0; ATM_ADDRESS_LEN],
        },
        asap: sap,
    };
    for (d, s) in e
        .nsap
        .address
        .iter_mut()
        .zip(addr.bytes().take(ATM_ADDRESS_LEN - 1))
    {
        *d = s as c_char;
    }
    e
}

// ---------------------------------------------------------------------------------
// Errors

/// The calling thread's `atm_errno` (natm_fore.h's macro reads through it).
#[no_mangle]
pub extern "C" fn atm_errno_location() -> *mut c_int {
    ERRNO.with(|e| e.as_ptr())
}

/// The text of an `atm_errno` value (a static string).
#[no_mangle]
pub extern "C" fn atm_strerror(code: c_int) -> *const c_char {
    describe(code).as_ptr().cast()
}

/// The UNI cause of this thread's last failure, 0 if none.
#[no_mangle]
pub extern "C" fn atm_cause() -> c_int {
    crate::error::last_cause()
}

/// Print `msg: what failed: the detail` on stderr, as perror does.
///
/// # Safety
/// `msg` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn atm_error(msg: *const c_char) {
    let code = ERRNO.with(Cell::get);
    let what = String::from_utf8_lossy(describe(code).strip_suffix(b"\0").unwrap_or(b""));
    // SAFETY: the last-error text is NUL-terminated and lives until this thread's
    // next failing call.
    let detail = unsafe { CStr::from_ptr(crate::error::last_message()) }.to_string_lossy();
    // SAFETY: the caller promises null or a NUL-terminated string.
    let prefix = match unsafe { opt_text(msg, "msg") } {
        Ok(Some(m)) if !m.is_empty() => format!("{m}: "),
        _ => String::new(),
    };
    let _ = writeln!(std::io::stderr(), "{prefix}{what}: {detail}");
}

// ---------------------------------------------------------------------------------
// Descriptors and calls

/// Open a descriptor on `device` (a sigd socket path; NULL, "" or "/dev/…" for the
/// default sigd). `flags` is ignored. `info` (may be NULL) gets the MTU.
///
/// # Safety
/// `device` is null or a NUL-terminated string; `info` null or writable.
#[no_mangle]
pub unsafe extern "C" fn atm_open(
    device: *const c_char,
    _flags: c_int,
    info: *mut AtmInfo,
) -> c_int {
    to_int(run(|| {
        // SAFETY: the caller's promise.
        let dev = unsafe { opt_text(device, "device") }?;
        let sigd = match dev {
            None | Some("") => None,
            Some(d) if d.starts_with("/dev/") => None,
            Some(d) => Some(PathBuf::from(d)),
        };
        let host = host_for(sigd)?;
        static NEXT: AtomicU32 = AtomicU32::new(3);
        let fd = NEXT.fetch_add(1, Ordering::Relaxed);
        let fd = c_int::try_from(fd).map_err(|_| fail(AtmCode::Io, "out of descriptors"))?;
        lock(table()).insert(
            fd,
            Desc {
                host,
                sap: None,
                listener: None,
                offers: HashMap::new(),
                next_conn_id: 1,
                data: Data::None,
            },
        );
        // SAFETY: the caller promises null or writable.
        unsafe {
            put(
                info,
                AtmInfo {
                    mtu: DEFAULT_MAX_SDU as i32,
                },
            )
        };
        Ok(fd as isize)
    }))
}

/// Bind SAP `sap` (0: one the library picks) to `fd`; `qlen` > 0 listens for calls.
///
/// # Safety
/// `sap_assigned` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn atm_bind(
    fd: c_int,
    sap: AtmSap,
    sap_assigned: *mut AtmSap,
    qlen: c_int,
) -> c_int {
    to_int(run(|| {
        if qlen < 0 {
            return Err(fail(AtmCode::Inval, format!("qlen {qlen} is negative")));
        }
        let host = with(fd, |d| {
            if d.sap.is_some() {
                return Err(fail(
                    AtmCode::State,
                    format!("descriptor {fd} is bound already"),
                ));
            }
            if !matches!(d.data, Data::None) {
                return Err(fail(
                    AtmCode::State,
                    format!("descriptor {fd} is connected"),
                ));
            }
            Ok(d.host.clone())
        })?;
        let sap = if sap == 0 {
            // natm's sigd assigns no SAPs: pick one unlikely to be another process's
            // (the process id and a counter, within natm's 8 digits).
            static PICKED: AtomicU32 = AtomicU32::new(0);
            let n = PICKED.fetch_add(1, Ordering::Relaxed) % 64;
            10_000_000 + (std::process::id() % 1_000_000) * 64 + n
        } else {
            sap
        };
        let text = sap_text(sap)?;
        // The listener's QoS bounds only pre-authorised calls; every call is shown
        // to atm_listen, whatever it asks for.
        let listener = if qlen > 0 {
            Some(Arc::new(
                host.bind(text.as_str(), "ubr:transport=none")
                    .map_err(Fail::from)?,
            ))
        } else {
            None
        };
        with(fd, |d| {
            d.sap = Some(sap);
            d.listener = listener;
            Ok(())
        })?;
        // SAFETY: the caller promises null or writable.
        unsafe { put(sap_assigned, sap) };
        Ok(0)
    }))
}

/// Call `dst` with `qos` over `aal`; `dataflow` duplex or multicast (the first party).
///
/// # Safety
/// `dst` readable; `qos` null or readable; `qos_selected` null or writable.
#[no_mangle]
pub unsafe extern "C" fn atm_connect(
    fd: c_int,
    dst: *const AtmEndpoint,
    qos: *const AtmQos,
    qos_selected: *mut AtmQosSel,
    aal: c_int,
    dataflow: c_int,
) -> c_int {
    to_int(run(|| {
        // SAFETY: the caller promises null or a readable endpoint.
        let dst = unsafe { dst.as_ref() }.ok_or_else(|| fail(AtmCode::Inval, "dst is NULL"))?;
        // SAFETY: the caller promises null or a readable QoS.
        let q = unsafe { qos.as_ref() }.copied().unwrap_or_default();
        check_aal(aal)?;
        let addr = called(dst)?;
        let host = with(fd, |d| {
            if !matches!(d.data, Data::None) || d.listener.is_some() {
                return Err(fail(
                    AtmCode::State,
                    format!("descriptor {fd} is connected or listening"),
                ));
            }
            Ok(d.host.clone())
        })?;
        let (data, sel) = match dataflow {
            DUPLEX | SIMPLEX => {
                let mut text = qos_text(&q, true)?;
                // seed 000 §5.3: a simplex connection sends only; its callee's QoS
                // is this one reversed (`tx:none`).
                if dataflow == SIMPLEX {
                    text.push_str(if text.contains(':') {
                        ",rx:none"
                    } else {
                        ":rx:none"
                    });
                }
                let c = host.connect(addr.as_str(), &text).map_err(Fail::from)?;
                let granted = c.granted().map_or(0, |g| g.tx_bps);
                let sel = selected(&q, granted);
                (
                    Data::Conn(Arc::new(Conn {
                        conn: c,
                        held: Mutex::new(None),
                    })),
                    sel,
                )
            }
            MULTICAST => {
                let mp = host
                    .connect_multipoint(addr.as_str(), &qos_text(&q, false)?)
                    .map_err(Fail::from)?;
                (Data::Root(Arc::new(Mutex::new(mp))), selected(&q, 0))
            }
            _ => {
                return Err(fail(
                    AtmCode::Inval,
                    format!("dataflow {dataflow}: duplex (0), simplex (1) or multicast (2)"),
                ))
            }
        };
        with(fd, |d| {
            d.data = data;
            Ok(())
        })?;
        // SAFETY: the caller promises null or writable.
        unsafe { put(qos_selected, sel) };
        Ok(0)
    }))
}

fn check_aal(aal: c_int) -> Result<(), Fail> {
    match aal {
        AAL_5 => Ok(()),
        AAL_3_4 => Err(fail(
            AtmCode::NotSup,
            "AAL 3/4 is not offered: natm carries AAL5 only; use aal_type_5",
        )),
        AAL_NULL => Err(fail(
            AtmCode::NotSup,
            "raw cells (aal_type_null) are not offered through this API; use aal_type_5",
        )),
        1 | 2 => Err(fail(
            AtmCode::NotSup,
            format!("AAL {aal} is not offered (nor was it by FORE's adapters); use aal_type_5"),
        )),
        _ => Err(fail(AtmCode::Inval, format!("aal {aal} is no AAL type"))),
    }
}

/// What was granted, in FORE's units: the reserved rate where sigd reserved one,
/// else what was asked for (best effort has no reservation to report).
fn selected(q: &AtmQos, granted_bps: u64) -> AtmQosSel {
    let peak = if granted_bps > 0 {
        i32::try_from(granted_bps / 1000).unwrap_or(i32::MAX)
    } else {
        q.peak_bandwidth.target
    };
    AtmQosSel {
        peak_bandwidth: peak,
        mean_bandwidth: if q.mean_bandwidth.target > 0 {
            q.mean_bandwidth.target.min(peak)
        } else {
            peak
        },
        mean_burst: q.mean_burst.target,
    }
}

/// Wait for the next call on listener `fd`: its id, the caller, its QoS, its AAL.
///
/// # Safety
/// `conn_id` writable; `dst`, `qos` and `aal` null or writable.
#[no_mangle]
pub unsafe extern "C" fn atm_listen(
    fd: c_int,
    conn_id: *mut c_int,
    dst: *mut AtmEndpoint,
    qos: *mut AtmQos,
    aal: *mut c_int,
) -> c_int {
    to_int(run(|| {
        if conn_id.is_null() {
            return Err(fail(AtmCode::Inval, "conn_id is NULL"));
        }
        let (l, sap) = with(fd, |d| match (&d.listener, d.sap) {
            (Some(l), Some(s)) => Ok((l.clone(), s)),
            _ => Err(fail(
                AtmCode::State,
                format!("descriptor {fd} is not listening: atm_bind it with qlen > 0"),
            )),
        })?;
        let call = l.next_call(Wait::Block).map_err(Fail::from)?;
        // What the caller sends is this side's receiving direction.
        let q = fore_qos(call.qos.rx());
        let caller = endpoint(&call.caller, sap);
        let id = with(fd, |d| {
            let id = d.next_conn_id;
            d.next_conn_id = d.next_conn_id.wrapping_add(1).max(1);
            d.offers.insert(id, call);
            Ok(id)
        })?;
        // SAFETY: checked non-null; the caller promises it writable, and the others
        // null or writable.
        unsafe {
            conn_id.write(id);
            put(dst, caller);
            put(qos, q);
            put(aal, AAL_5);
        }
        Ok(0)
    }))
}

/// The offer `conn_id` on `fd`, taken out of the table.
fn take_offer(fd: c_int, conn_id: c_int) -> Result<IncomingCall, Fail> {
    with(fd, |d| {
        d.offers.remove(&conn_id).ok_or_else(|| {
            fail(
                AtmCode::Inval,
                format!("no call {conn_id} waiting on descriptor {fd} (atm_listen gives the ids)"),
            )
        })
    })
}

/// Accept call `conn_id` of listener `fd` onto `newfd`. `qos` is ignored (natm takes
/// the call with the QoS it asked for), so any pointer will do.
#[no_mangle]
pub extern "C" fn atm_accept(
    fd: c_int,
    newfd: c_int,
    conn_id: c_int,
    _qos: *const AtmQos,
    dataflow: c_int,
) -> c_int {
    to_int(run(|| {
        match dataflow {
            DUPLEX | MULTICAST | SIMPLEX => {}
            _ => return Err(fail(AtmCode::Inval, format!("dataflow {dataflow}"))),
        }
        with(newfd, |d| match d.data {
            Data::None => Ok(()),
            _ => Err(fail(
                AtmCode::State,
                format!("descriptor {newfd} is connected already"),
            )),
        })?;
        let call = take_offer(fd, conn_id)?;
        let c = call.accept().map_err(Fail::from)?;
        let conn = Data::Conn(Arc::new(Conn {
            conn: c,
            held: Mutex::new(None),
        }));
        // newfd closed meanwhile: the connection closes with this failure.
        with(newfd, |d| {
            d.data = conn;
            Ok(())
        })?;
        Ok(0)
    }))
}

/// Reject call `conn_id` of listener `fd` with a UNI cause.
#[no_mangle]
pub extern "C" fn atm_reject(fd: c_int, conn_id: c_int, cause: c_int) -> c_int {
    to_int(run(|| {
        let cause = u8::try_from(cause)
            .ok()
            .filter(|c| (1..=127).contains(c))
            .ok_or_else(|| {
                fail(
                    AtmCode::Inval,
                    format!("cause {cause} outside 1..=127 (21: call rejected)"),
                )
            })?;
        take_offer(fd, conn_id)?.reject(cause).map_err(Fail::from)?;
        Ok(0)
    }))
}

fn connection(fd: c_int) -> Result<Arc<Conn>, Fail> {
    with(fd, |d| match &d.data {
        Data::Conn(c) => Ok(c.clone()),
        Data::Root(_) => Err(fail(
            AtmCode::State,
            format!("descriptor {fd} is a multicast root: it sends only"),
        )),
        Data::None => Err(fail(
            AtmCode::NotConn,
            format!("descriptor {fd} is not connected"),
        )),
    })
}

/// Send one PDU.
///
/// # Safety
/// `buf` readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn atm_send(fd: c_int, buf: *const c_void, len: c_int) -> c_int {
    to_int(run(|| {
        let n = usize::try_from(len)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                fail(
                    AtmCode::MsgSize,
                    format!("len {len}: a PDU holds 1 byte or more"),
                )
            })?;
        if buf.is_null() {
            return Err(fail(AtmCode::Inval, "buf is NULL"));
        }
        // SAFETY: non-null and readable for len bytes by the caller's promise.
        let pdu = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) };
        let root = with(fd, |d| match &d.data {
            Data::Root(mp) => Ok(Some(mp.clone())),
            _ => Ok(None),
        })?;
        match root {
            Some(mp) => {
                lock(&mp).send(pdu).map_err(Fail::from)?;
            }
            None => connection(fd)?
                .conn
                .send(pdu, Wait::Block)
                .map_err(Fail::from)?,
        }
        Ok(n as isize)
    }))
}

/// Receive one PDU.
///
/// # Safety
/// `buf` writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn atm_recv(fd: c_int, buf: *mut c_void, len: c_int) -> c_int {
    to_int(run(|| {
        let cap = usize::try_from(len)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| fail(AtmCode::Inval, format!("len {len}: give a buffer")))?;
        if buf.is_null() {
            return Err(fail(AtmCode::Inval, "buf is NULL"));
        }
        let c = connection(fd)?;
        let mut held = lock(&c.held);
        let pdu = match held.take() {
            Some(p) => p,
            None => match c.conn.recv(Wait::Block).map_err(Fail::from)? {
                Some(p) => p,
                None => return Ok(0),
            },
        };
        if pdu.len() > cap {
            let n = pdu.len();
            *held = Some(pdu);
            return Err(fail(
                AtmCode::MsgSize,
                format!("the PDU is {n} bytes and the buffer {cap}: it stays for a larger buffer"),
            ));
        }
        // SAFETY: buf is writable for len >= pdu.len() bytes (the caller's promise),
        // and cannot overlap the PDU, which this library owns.
        unsafe { std::ptr::copy_nonoverlapping(pdu.as_ptr(), buf.cast::<u8>(), pdu.len()) };
        Ok(pdu.len() as isize)
    }))
}

fn root(fd: c_int) -> Result<Arc<Mutex<Multipoint>>, Fail> {
    with(fd, |d| match &d.data {
        Data::Root(mp) => Ok(mp.clone()),
        _ => Err(fail(
            AtmCode::State,
            format!("descriptor {fd} is not a multicast connection (atm_connect with multicast)"),
        )),
    })
}

/// Add a party to the multicast connection on `fd`.
///
/// # Safety
/// `dst` readable; `conn_id` null or writable.
#[no_mangle]
pub unsafe extern "C" fn atm_add_party(
    fd: c_int,
    dst: *const AtmEndpoint,
    conn_id: *mut c_int,
) -> c_int {
    to_int(run(|| {
        // SAFETY: the caller promises null or readable.
        let dst = unsafe { dst.as_ref() }.ok_or_else(|| fail(AtmCode::Inval, "dst is NULL"))?;
        let addr = called(dst)?;
        let mp = root(fd)?;
        let leaf = lock(&mp).add_sink(addr.as_str()).map_err(Fail::from)?;
        // SAFETY: the caller promises null or writable.
        unsafe { put(conn_id, c_int::from(leaf.0)) };
        Ok(0)
    }))
}

/// Drop party `conn_id` of the multicast connection on `fd`.
#[no_mangle]
pub extern "C" fn atm_drop_party(fd: c_int, conn_id: c_int) -> c_int {
    to_int(run(|| {
        let leaf = u16::try_from(conn_id)
            .map_err(|_| fail(AtmCode::Inval, format!("no party {conn_id}")))?;
        let mp = root(fd)?;
        lock(&mp)
            .drop_sink(LeafId(leaf), Duration::from_secs(5))
            .map_err(Fail::from)?;
        Ok(0)
    }))
}

/// How long `atm_close` waits for a connection's close to finish.
const LINGER: Duration = Duration::from_secs(5);

/// Close `fd`: its connection in order, its SAP unbound, calls waiting rejected.
#[no_mangle]
pub extern "C" fn atm_close(fd: c_int) -> c_int {
    to_int(run(|| {
        let d = lock(table()).remove(&fd).ok_or_else(|| {
            fail(
                AtmCode::BadF,
                format!("{fd} is not an open natm ATM descriptor"),
            )
        })?;
        // Offers drop as rejections (cause 21), the listener unbinds, a connection
        // closes in order and its call is released before this returns (up to
        // LINGER): a program that exits right after still has its data read.
        // Another thread still using the descriptor holds it until it is done;
        // the host (kept for the process) then finishes it.
        match d.data {
            Data::Root(mp) => {
                if let Ok(m) = Arc::try_unwrap(mp) {
                    let _ = m
                        .into_inner()
                        .unwrap_or_else(|p| p.into_inner())
                        .close(LINGER);
                }
            }
            Data::Conn(c) => {
                if let Ok(c) = Arc::try_unwrap(c) {
                    c.conn.linger(LINGER);
                }
            }
            Data::None => {}
        }
        Ok(0)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use natm_rs::wire::qos::Qos;

    fn q(peak: (i32, i32), mean: i32, burst: i32) -> AtmQos {
        AtmQos {
            peak_bandwidth: AtmQosSpec {
                target: peak.0,
                minimum: peak.1,
            },
            mean_bandwidth: AtmQosSpec {
                target: mean,
                minimum: 0,
            },
            mean_burst: AtmQosSpec {
                target: burst,
                minimum: 0,
            },
        }
    }

    /// FORE's QoS becomes natm QoS text that natm parses, with the service seed 002's
    /// reader would expect.
    #[test]
    fn fore_qos_maps_to_natm_qos_text() {
        let cases = [
            (q((0, 0), 0, 0), true, "ubr:transport=none"),
            (
                q((10_000, 0), 0, 0),
                true,
                "cbr:pcr=10000kbps,transport=none",
            ),
            (q((10_000, 0), 10_000, 0), false, "cbr:pcr=10000kbps"),
            (
                q((10_000, 8_000), 0, 0),
                true,
                "cbr:max_pcr=10000kbps,min_pcr=8000kbps,transport=none",
            ),
            // 96 kbit = 12,000 bytes = 250 cells.
            (
                q((10_000, 0), 2_000, 96),
                true,
                "vbr:pcr=10000kbps,scr=2000kbps,mbs=250,transport=none",
            ),
        ];
        for (fore, bare, want) in cases {
            let text = qos_text(&fore, bare).unwrap();
            assert_eq!(text, want);
            let parsed: Qos = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(parsed.is_bare(), bare, "{text}");
        }
        // Back: what a VBR caller asks for reads as FORE's QoS again.
        let p: Qos = "vbr:pcr=10000kbps,scr=2000kbps,mbs=250,transport=none"
            .parse()
            .unwrap();
        let back = fore_qos(p.tx());
        assert_eq!(back.peak_bandwidth.target, 10_000);
        assert_eq!(back.mean_bandwidth.target, 2_000);
        assert_eq!(back.mean_burst.target, 96);
    }

    #[test]
    fn fore_qos_natm_cannot_express_is_an_error() {
        for bad in [q((-1, 0), 0, 0), q((0, 0), 500, 0), q((100, 200), 0, 0)] {
            let e = qos_text(&bad, true).unwrap_err();
            assert_eq!(e.code, AtmCode::Qos, "{bad:?}");
        }
    }

    #[test]
    fn sap_numbers_are_natm_saps_of_up_to_eight_digits() {
        assert_eq!(sap_text(4097).unwrap(), "4097");
        assert_eq!(sap_text(99_999_999).unwrap(), "99999999");
        assert_eq!(sap_text(0).unwrap_err().code, AtmCode::Inval);
        assert_eq!(sap_text(100_000_000).unwrap_err().code, AtmCode::Inval);
    }

    #[test]
    fn unoffered_aals_say_so() {
        assert!(check_aal(AAL_5).is_ok());
        for a in [AAL_NULL, 1, 2, AAL_3_4] {
            assert_eq!(check_aal(a).unwrap_err().code, AtmCode::NotSup);
        }
        assert_eq!(check_aal(4).unwrap_err().code, AtmCode::Inval);
        // Through the C entry points: a bad descriptor, a bad AAL.
        assert_eq!(atm_close(12345), -1);
        assert_eq!(ERRNO.with(Cell::get), AtmCode::BadF as c_int);
    }
}
