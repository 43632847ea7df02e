//! The buffers large sends copy into, kept by the engine between sends.
//!
//! seed 001 §6 ("Send-side buffer pools") keeps the host's send buffers in a pool the
//! kernel lends from and takes back; natm's pool (`engine::send_pool`) counts the
//! octets, and this keeps the memory. A send of a large message copies it into one
//! buffer its TPDUs share (`natm_proto::transport::CopyBuffers`); when the last of them
//! is acknowledged — on the driver's thread, as a rule — the buffer comes back here
//! instead of to the allocator, which would give its pages back to the kernel for
//! the next send to fault in, zeroed, again (measured: one page fault per 30 KiB sent
//! at 1 MiB per message; docs/decisions/0030-send-buffers-kept.md).
//!
//! Small copies are plain allocations (the allocator's own caches serve them). What
//! is kept is bounded: at most [`SPARE_LIMIT`] octets of buffers, and a buffer is only
//! reused for a copy it fits without wasting more than half of it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use natm_proto::transport::CopyBuffers;

use crate::sync::{Level, OrderedMutex as Mutex};

/// Copies below this are plain allocations: glibc serves them from its free lists
/// without a fault (its dynamic mmap threshold starts at 128 KiB), and a 64 KiB copy
/// measured no faster kept here.
pub(crate) const COPY_MIN: usize = 256 << 10;

/// The most octets of buffers kept for reuse: two default send buffers (2 MiB each)
/// and their spares.
pub(crate) const SPARE_LIMIT: usize = 8 << 20;

/// The engine's spare copy buffers.
#[derive(Debug)]
pub(crate) struct SendBuffers {
    me: Weak<SendBuffers>,
    spares: Mutex<Spares>,
    /// Copies that went into a kept buffer.
    reused: AtomicU64,
}

#[derive(Debug, Default)]
struct Spares {
    bufs: Vec<Vec<u8>>,
    /// Capacity of `bufs`, octets.
    held: usize,
}

impl SendBuffers {
    pub(crate) fn new() -> Arc<SendBuffers> {
        Arc::new_cyclic(|me| SendBuffers {
            me: me.clone(),
            spares: Mutex::new(Level::Leaf, Spares::default()),
            reused: AtomicU64::new(0),
        })
    }

    /// Octets of buffers kept now, and the copies that reused one so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.held() as u64, self.reused.load(Relaxed))
    }

    fn held(&self) -> usize {
        self.spares.lock().held
    }

    /// A kept buffer of at least `len` octets and at most twice that, if any.
    fn take(&self, len: usize) -> Option<Vec<u8>> {
        let mut s = self.spares.lock();
        let i = s
            .bufs
            .iter()
            .rposition(|b| b.capacity() >= len && b.capacity() / 2 <= len)?;
        let buf = s.bufs.swap_remove(i);
        s.held -= buf.capacity();
        self.reused.fetch_add(1, Relaxed);
        Some(buf)
    }

    /// Keep `buf` if there is room. `try_lock`: a buffer may come back while its
    /// holder drops a frame under a leaf lock of its own; freeing it then is correct.
    fn give(&self, mut buf: Vec<u8>) {
        let Some(mut s) = self.spares.try_lock() else {
            return;
        };
        if s.held + buf.capacity() <= SPARE_LIMIT {
            buf.clear();
            s.held += buf.capacity();
            s.bufs.push(buf);
        }
    }
}

impl CopyBuffers for SendBuffers {
    fn copy(&self, data: &[u8]) -> Bytes {
        if data.len() < COPY_MIN {
            return Bytes::copy_from_slice(data);
        }
        let mut buf = self
            .take(data.len())
            .unwrap_or_else(|| Vec::with_capacity(data.len()));
        buf.extend_from_slice(data);
        Bytes::from_owner(Lent {
            buf,
            home: self.me.clone(),
        })
    }
}

/// A buffer lent to a send's TPDUs; back to its engine when the last is dropped.
struct Lent {
    buf: Vec<u8>,
    home: Weak<SendBuffers>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            home.give(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_copy_reuses_the_buffer_its_predecessor_gave_back() {
        let bufs = SendBuffers::new();
        let first = bufs.copy(&vec![1u8; 1 << 20]);
        let at = first.as_ptr();
        let tail = first.slice(512 << 10..);
        drop(first);
        assert_eq!(bufs.held(), 0, "a slice still holds it");
        assert!(tail.iter().all(|&b| b == 1));
        drop(tail);
        assert_eq!(bufs.held(), 1 << 20);
        let second = bufs.copy(&vec![2u8; 1000 << 10]);
        assert_eq!(second.as_ptr(), at, "the same memory, not a new allocation");
        assert_eq!(second.len(), 1000 << 10);
        assert!(second.iter().all(|&b| b == 2));
        assert_eq!(bufs.held(), 0);
    }

    #[test]
    fn small_copies_and_ill_fitting_buffers_are_not_kept_or_reused() {
        let bufs = SendBuffers::new();
        drop(bufs.copy(&[7u8; 100]));
        assert_eq!(bufs.held(), 0);
        let big = bufs.copy(&vec![0u8; 1 << 20]);
        let at = big.as_ptr();
        drop(big);
        // A copy of less than half the kept buffer gets its own.
        let small = bufs.copy(&vec![3u8; 300 << 10]);
        assert_ne!(small.as_ptr(), at);
        assert_eq!(bufs.held(), 1 << 20);
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let bufs = SendBuffers::new();
        let lent: Vec<Bytes> = (0..20).map(|_| bufs.copy(&vec![0u8; 1 << 20])).collect();
        drop(lent);
        assert!(bufs.held() <= SPARE_LIMIT);
        assert_eq!(bufs.held(), SPARE_LIMIT);
    }

    #[test]
    fn a_buffer_outliving_its_engine_is_freed() {
        let bufs = SendBuffers::new();
        let b = bufs.copy(&vec![5u8; 1 << 20]);
        drop(bufs);
        assert!(b.iter().all(|&x| x == 5));
        drop(b);
    }
}
