//! The descriptors a C program polls: one eventfd per direction of a handle
//! (receive or accept; send), readable while a non-blocking call in that direction
//! may succeed.
//!
//! A descriptor starts readable. A non-blocking call drains it before it tries, then
//! tries with a waker for its direction that the engine registers under the same lock
//! as the attempt (`Connection::poll_send`/`poll_recv_chunk`): a wake-up either comes
//! before the attempt (which then sees the progress) or after the registration (which
//! then makes the descriptor readable). A call that succeeds makes it readable again,
//! so that the next `poll()` returns at once and the program calls until it gets
//! `NATM_EAGAIN`. So `poll()` never sleeps while a non-blocking call could succeed, and
//! never spins while none can: a socket's level-triggered contract, at the cost of
//! one spurious wake-up after the last message. One descriptor per direction, so a
//! program that only receives is not woken by room to send.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::task::{Wake, Waker};

use rustix::event::{eventfd, EventfdFlags};

/// One direction's eventfd.
#[derive(Debug)]
pub(crate) struct Readiness {
    fd: OwnedFd,
}

impl Readiness {
    /// A readable eventfd.
    pub(crate) fn new() -> std::io::Result<Arc<Readiness>> {
        let fd = eventfd(1, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Arc::new(Readiness { fd }))
    }

    /// The descriptor to poll for readability.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A call may succeed: make the eventfd readable.
    pub(crate) fn set(&self) {
        // A full counter (2^64 - 2 wake-ups unread) still reads as readable.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// A call is about to try: make the eventfd unreadable.
    pub(crate) fn clear(&self) {
        let mut b = [0u8; 8];
        // Non-blocking: EAGAIN when already clear.
        let _ = rustix::io::read(&self.fd, &mut b);
    }

    /// The waker the engine calls when this direction can make progress.
    pub(crate) fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(Arc::new(Wakes(self.clone())))
    }
}

#[derive(Debug)]
struct Wakes(Arc<Readiness>);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.set();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.set();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(r: &Readiness) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            &r.fd,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&zero)).unwrap() == 1
    }

    #[test]
    fn starts_readable_clears_and_is_set_by_its_waker() {
        let r = Readiness::new().unwrap();
        assert!(readable(&r));
        r.clear();
        assert!(!readable(&r));
        r.clear();
        assert!(!readable(&r), "clearing twice must not block or set it");
        let w = r.waker();
        w.wake_by_ref();
        w.wake_by_ref();
        assert!(readable(&r));
        r.clear();
        assert!(!readable(&r), "one clear drains several wake-ups");
        w.wake();
        assert!(readable(&r));
    }
}
