//! The descriptor a C program polls: an eventfd that is readable while a
//! non-blocking call on the handle may succeed.
//!
//! Each handle has one eventfd and a readiness flag per direction (receive/accept,
//! send). The flags start set and the eventfd readable. A non-blocking call clears
//! its direction's flag before it tries (draining the eventfd when no direction is
//! ready), then tries with a waker for that direction registered by the engine
//! under the same lock as the attempt (`Connection::poll_send`/`poll_recv_chunk`). If
//! the call succeeds it sets the flag again, so that the next `poll()` returns at once
//! and the program calls again until it gets `NATM_EAGAIN`; if not, the engine's wake
//! sets the flag and makes the eventfd readable. So `poll()` never sleeps while a
//! non-blocking call could succeed, the level-triggered contract of a socket, at the
//! cost of one spurious wake-up after the last message.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};

use rustix::event::{eventfd, EventfdFlags};

/// Which calls a readiness flag is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// `natm_recv`, `natm_accept`.
    In = 0,
    /// `natm_send`.
    Out = 1,
}

/// A handle's eventfd and its per-direction readiness.
#[derive(Debug)]
pub(crate) struct Readiness {
    fd: OwnedFd,
    ready: Mutex<[bool; 2]>,
}

impl Readiness {
    /// A readable eventfd with both directions ready.
    pub(crate) fn new() -> std::io::Result<Arc<Readiness>> {
        let fd = eventfd(1, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Arc::new(Readiness {
            fd,
            ready: Mutex::new([true, true]),
        }))
    }

    /// The descriptor to poll for readability.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A call in `dir` may succeed: make the eventfd readable.
    pub(crate) fn set(&self, dir: Dir) {
        let mut r = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        r[dir as usize] = true;
        // A full counter (2^64 - 2 wake-ups unread) still reads as readable.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// A call in `dir` is about to try: clear its flag, and the eventfd if no
    /// direction is ready any more.
    pub(crate) fn clear(&self, dir: Dir) {
        let mut r = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        r[dir as usize] = false;
        if !r.iter().any(|&x| x) {
            let mut b = [0u8; 8];
            // Non-blocking: EAGAIN when already clear.
            let _ = rustix::io::read(&self.fd, &mut b);
        }
    }

    /// The waker the engine calls when `dir` can make progress.
    pub(crate) fn waker(self: &Arc<Self>, dir: Dir) -> Waker {
        Waker::from(Arc::new(DirWaker {
            r: self.clone(),
            dir,
        }))
    }
}

#[derive(Debug)]
struct DirWaker {
    r: Arc<Readiness>,
    dir: Dir,
}

impl Wake for DirWaker {
    fn wake(self: Arc<Self>) {
        self.r.set(self.dir);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.r.set(self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(r: &Readiness) -> bool {
        let mut fds = [rustix::event::PollFd::new(&r.fd, rustix::event::PollFlags::IN)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&zero)).unwrap() == 1
    }

    #[test]
    fn starts_readable_and_clears_only_when_no_direction_is_ready() {
        let r = Readiness::new().unwrap();
        assert!(readable(&r));
        r.clear(Dir::In);
        assert!(readable(&r), "send readiness still pending");
        r.clear(Dir::Out);
        assert!(!readable(&r));
        r.waker(Dir::In).wake();
        assert!(readable(&r));
        r.clear(Dir::Out);
        assert!(readable(&r), "receive readiness must survive a send's clear");
        r.clear(Dir::In);
        assert!(!readable(&r));
    }
}
