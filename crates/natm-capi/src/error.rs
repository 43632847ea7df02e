//! Error codes, the per-thread last-error message, and the guard that keeps panics
//! on the Rust side of the boundary.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use natm_rs::ulib::Error;

/// The negative codes of natm.h, one per kind of failure a C caller acts on
/// differently. The detail (sigd's cause and reason, the offending QoS token) is in
/// the thread's last-error message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum Code {
    Inval = -1,
    Again = -2,
    Qos = -3,
    Refused = -4,
    NoSigd = -5,
    SigdGone = -6,
    TimedOut = -7,
    Unreachable = -8,
    Aborted = -9,
    Closed = -10,
    MsgSize = -11,
    Io = -12,
    Unbound = -13,
    Internal = -14,
    QosBounds = -15,
    QosRefused = -16,
    QosPending = -17,
}

/// The text of each code (`natm_strerror`), NUL-terminated for C.
pub(crate) fn describe(code: c_int) -> &'static [u8] {
    match code {
        0 => b"success\0",
        -1 => b"invalid argument\0",
        -2 => b"would block\0",
        -3 => b"bad or unusable QoS\0",
        -4 => b"call refused\0",
        -5 => b"no signalling daemon\0",
        -6 => b"signalling daemon went away\0",
        -7 => b"timed out\0",
        -8 => b"peer unreachable\0",
        -9 => b"connection aborted\0",
        -10 => b"connection closed in this direction\0",
        -11 => b"message too large\0",
        -12 => b"I/O error\0",
        -13 => b"listener unbound\0",
        -14 => b"internal error\0",
        -15 => b"rate outside the agreed QoS bounds\0",
        -16 => b"QoS change refused by the peer\0",
        -17 => b"a QoS change is still pending\0",
        _ => b"unknown error code\0",
    }
}

/// A failure on its way to C: the code and the sentence for `natm_last_error`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: Code,
    pub(crate) message: String,
    /// The UNI cause, where there is one (refused or released calls, sigd closing the
    /// session).
    pub(crate) cause: u8,
}

impl Failure {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            cause: 0,
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let message = e.to_string();
        let (code, cause) = match &e {
            Error::WouldBlock(_) => (Code::Again, 0),
            Error::Io(_) => (Code::Io, 0),
            Error::NoAddress | Error::Sap(_) => (Code::Inval, 0),
            Error::Qos(_) | Error::Config(_) | Error::QosNotNegotiable(_) => (Code::Qos, 0),
            Error::QosBounds(_) => (Code::QosBounds, 0),
            Error::QosRefused { .. } => (Code::QosRefused, 0),
            Error::QosPending(_) => (Code::QosPending, 0),
            Error::Unreachable(_) => (Code::Unreachable, 0),
            Error::Refused { cause, .. } => (Code::Refused, *cause),
            Error::NoSigd { .. } | Error::NeedsSigd(_) => (Code::NoSigd, 0),
            Error::SigdGone => (Code::SigdGone, 0),
            Error::SigdClosed { cause, .. } => (Code::SigdGone, *cause),
            Error::Aborted(_) => (Code::Aborted, 0),
            // The direction a simplex connection does not use is closed for good.
            Error::Closed | Error::Simplex(_) => (Code::Closed, 0),
            Error::MessageTooLarge { .. } | Error::EmptyMessage => (Code::MsgSize, 0),
            Error::TimedOut => (Code::TimedOut, 0),
            Error::BadBacklog(_) => (Code::Inval, 0),
            Error::TooManyProbes(_) => (Code::Again, 0),
            #[allow(unreachable_patterns)]
            _ => (Code::Io, 0),
        };
        Failure {
            code,
            message,
            cause,
        }
    }
}

thread_local! {
    /// The last failure on this thread: its message (valid until the thread's next
    /// failing call) and UNI cause.
    static LAST: RefCell<(CString, u8)> = RefCell::new((CString::default(), 0));
}

pub(crate) fn record(f: &Failure) {
    // A NUL inside the message would end it early in C: drop any.
    let text = CString::new(f.message.replace('\0', "")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = (text, f.cause));
}

/// The thread's last failure message (never null; empty before any failure).
pub(crate) fn last_message() -> *const c_char {
    LAST.with(|l| l.borrow().0.as_ptr())
}

/// The thread's last failure's UNI cause (0: none).
pub(crate) fn last_cause() -> c_int {
    LAST.with(|l| c_int::from(l.borrow().1))
}

/// Run `f`, turning a failure into its negative code (recorded for
/// `natm_last_error`) and a panic into `NATM_EINTERNAL`: no unwinding crosses into C.
pub(crate) fn guard<F>(f: F) -> isize
where
    F: FnOnce() -> Result<isize, Failure>,
{
    // A call that succeeds leaves errno as it found it, as the socket calls it stands
    // in for do: the library's own system calls (a send that would block, then a
    // wait) may set it on the way, and C programs test errno after a loop of
    // successful calls (ttcp's `if (errno) err("IO")`).
    let saved = errno::errno();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => {
            errno::set_errno(saved);
            n
        }
        Ok(Err(fail)) => {
            record(&fail);
            fail.code as isize
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            record(&Failure::new(
                Code::Internal,
                format!("internal error in libnatm (a bug; please report it): {what}"),
            ));
            Code::Internal as isize
        }
    }
}
