//! Where a send's one copy goes (seed 000 §5.4 step 1: "the data is copied from the
//! application into the send buffer").
//!
//! The transport copies what [`Psb::send`](super::Psb::send) takes into a [`Bytes`]
//! its TPDUs share until the last of them is acknowledged. A plain allocation serves
//! small sends well; a large one (a message of a megabyte) is fresh memory each time
//! — with glibc, pages handed back when the acknowledging thread frees it and faulted
//! in again, zeroed, by the next send. The owner of a [`Psb`](super::Psb) may lend it
//! buffers it keeps for that ([`Psb::lend_copy_buffers`](super::Psb::lend_copy_buffers));
//! the engine's are the host's send pool's (seed 001 §6, "Send-side buffer pools").

use bytes::Bytes;
use std::fmt::Debug;

/// A source of buffers for the copies sends make.
pub trait CopyBuffers: Send + Sync + Debug {
    /// `data`, copied into a buffer whose [`Bytes`] may be sliced and shared; the
    /// buffer goes back to its source when the last slice is dropped.
    fn copy(&self, data: &[u8]) -> Bytes;
}
