//! What a receive hands the application: a piece of a message as it arrived.

use bytes::Bytes;

/// A piece of a received message as it arrived, without a copy: the payload of one
/// TPDU, as the buffer it was received into ([`Connection::recv_chunk`](crate::ulib::Connection::recv_chunk); quinn's
/// `read_chunk` shape).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The bytes (reference-counted: pass them on, or keep them, without copying).
    pub data: Bytes,
    /// This chunk begins its message (seed 003's start-of-message flag; on a byte
    /// stream every chunk does). A gatherer starts a new message at it: on a VC
    /// without error control the end of the one before may have been lost.
    pub start_of_message: bool,
    /// This chunk ends its message (on a byte stream, every chunk does).
    pub end_of_message: bool,
}
