//! A connection split into its simplex halves ([`Connection::split`]): a [`Sender`]
//! and a [`Receiver`] that can move to different threads (seed 000: a duplex
//! connection is two simplex VCs).

use std::sync::Arc;
use std::time::Duration;

use super::connection::{Connection, QosChange, Release};
use super::wait::{Outgoing, Wait};
use super::Chunk;
use super::{ConnEvent, ConnStats, ConnStatus, Error, IntoQos};

/// The sending half of a connection (seed 000's simplex VC, as ulib hands it out).
#[derive(Debug, Clone)]
pub struct Sender(Arc<Connection>);

/// The receiving half of a connection.
#[derive(Debug, Clone)]
pub struct Receiver(Arc<Connection>);

impl Connection {
    /// Split into simplex halves that can move to different threads. The connection
    /// closes when both halves are dropped.
    pub fn split(self) -> (Sender, Receiver) {
        let c = Arc::new(self);
        (Sender(c.clone()), Receiver(c))
    }
}

impl Sender {
    /// See [`Connection::set_qos`].
    pub fn set_qos(&self, qos: impl IntoQos, timeout: Duration) -> Result<QosChange, Error> {
        self.0.set_qos(qos, timeout)
    }
    /// See [`Connection::try_set_qos`].
    pub fn try_set_qos(&self, qos: impl IntoQos) -> Result<(), Error> {
        self.0.try_set_qos(qos)
    }
    /// See [`Connection::status`].
    pub fn status(&self) -> ConnStatus {
        self.0.status()
    }
    /// See [`Connection::send`].
    pub fn send<'a>(
        &self,
        msg: impl Into<Outgoing<'a>>,
        wait: impl Into<Wait>,
    ) -> Result<(), Error> {
        self.0.send(msg, wait)
    }
    /// See [`Connection::send_many`].
    pub fn send_many<M: AsRef<[u8]>>(
        &self,
        msgs: &[M],
        wait: impl Into<Wait>,
    ) -> Result<usize, Error> {
        self.0.send_many(msgs, wait)
    }
    /// See [`Connection::send_many_bytes`].
    pub fn send_many_bytes(
        &self,
        msgs: &[bytes::Bytes],
        wait: impl Into<Wait>,
    ) -> Result<usize, Error> {
        self.0.send_many_bytes(msgs, wait)
    }
    /// See [`Connection::send_async`].
    pub async fn send_async(&self, msg: &[u8]) -> Result<(), Error> {
        self.0.send_async(msg).await
    }
    /// See [`Connection::close`].
    pub fn close(&self) {
        self.0.close()
    }
    /// See [`Connection::flush`].
    pub fn flush(&self, wait: impl Into<Wait>) -> Result<(), Error> {
        self.0.flush(wait)
    }
    /// See [`Connection::stats`].
    pub fn stats(&self) -> ConnStats {
        self.0.stats()
    }
    /// See [`Connection::released`].
    pub fn released(&self) -> Option<Release> {
        self.0.released()
    }
}

impl Receiver {
    /// See [`Connection::next_event`].
    pub fn next_event(&self, wait: impl Into<Wait>) -> Option<ConnEvent> {
        self.0.next_event(wait)
    }
    /// See [`Connection::recv_with_status`].
    pub fn recv_with_status(
        &self,
        wait: impl Into<Wait>,
    ) -> Result<(Option<Vec<u8>>, ConnStatus), Error> {
        self.0.recv_with_status(wait)
    }
    /// See [`Connection::status`].
    pub fn status(&self) -> ConnStatus {
        self.0.status()
    }
    /// See [`Connection::recv`].
    pub fn recv(&self, wait: impl Into<Wait>) -> Result<Option<Vec<u8>>, Error> {
        self.0.recv(wait)
    }
    /// See [`Connection::recv_into`].
    pub fn recv_into(&self, buf: &mut Vec<u8>, wait: impl Into<Wait>) -> Result<bool, Error> {
        self.0.recv_into(buf, wait)
    }
    /// See [`Connection::recv_async`].
    pub async fn recv_async(&self) -> Result<Option<Vec<u8>>, Error> {
        self.0.recv_async().await
    }
    /// See [`Connection::recv_chunk`].
    pub fn recv_chunk(&self, wait: impl Into<Wait>) -> Result<Option<Chunk>, Error> {
        self.0.recv_chunk(wait)
    }
    /// See [`Connection::recv_chunk_async`].
    pub async fn recv_chunk_async(&self) -> Result<Option<Chunk>, Error> {
        self.0.recv_chunk_async().await
    }
    /// See [`Connection::stats`].
    pub fn stats(&self) -> ConnStats {
        self.0.stats()
    }
    /// See [`Connection::released`].
    pub fn released(&self) -> Option<Release> {
        self.0.released()
    }
}
