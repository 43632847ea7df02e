//! The receive side of length-prefixed messages on a byte stream, shared by the `tcp`
//! and `quic` reference stacks: each message is a 4-byte big-endian length and the
//! body, and the receiver hands out whole messages as slices of its own buffer.

use std::io;
use std::ops::Range;

/// Length prefix of every message.
pub(crate) const HEADER: usize = 4;

/// Refuse a largest message the 4-byte length prefix cannot carry.
pub(crate) fn check_max_msg(max_msg: usize) -> io::Result<()> {
    if u32::try_from(max_msg).is_err() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "messages over 4 GiB do not fit the 4-byte length prefix",
        ));
    }
    Ok(())
}

/// A receive buffer whose bytes `buf[head..tail]` are received and not yet handed out.
pub(crate) struct FrameBuf {
    buf: Vec<u8>,
    head: usize,
    tail: usize,
    max_msg: usize,
}

impl FrameBuf {
    /// A buffer of `capacity` bytes for messages of at most `max_msg` bytes.
    pub(crate) fn new(capacity: usize, max_msg: usize) -> FrameBuf {
        FrameBuf {
            buf: vec![0; capacity.max(HEADER + max_msg)],
            head: 0,
            tail: 0,
            max_msg,
        }
    }

    /// The next whole message's place in the buffer, or how many bytes from `head` it
    /// needs (the header alone while the length is not known yet).
    pub(crate) fn next(&mut self) -> io::Result<Result<Range<usize>, usize>> {
        let avail = self.tail - self.head;
        if avail < HEADER {
            return Ok(Err(HEADER));
        }
        let mut h = [0; HEADER];
        h.copy_from_slice(&self.buf[self.head..self.head + HEADER]);
        let len = u32::from_be_bytes(h) as usize;
        if len > self.max_msg {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "length prefix {len} is over the {} B asked for",
                    self.max_msg
                ),
            ));
        }
        let need = HEADER + len;
        if avail < need {
            return Ok(Err(need));
        }
        let start = self.head + HEADER;
        self.head += need;
        if self.head == self.tail {
            self.head = 0;
            self.tail = 0;
        }
        Ok(Ok(start..start + len))
    }

    /// The bytes of a message [`FrameBuf::next`] found.
    pub(crate) fn get(&self, r: Range<usize>) -> &[u8] {
        &self.buf[r]
    }

    /// Bytes received and not yet handed out.
    pub(crate) fn avail(&self) -> usize {
        self.tail - self.head
    }

    /// Where the next read goes: at most `limit` bytes, after moving the pending bytes
    /// to the front if fewer than `min_room` bytes are left after `head`.
    pub(crate) fn window(&mut self, min_room: usize, limit: usize) -> &mut [u8] {
        if self.buf.len() - self.head < min_room {
            self.buf.copy_within(self.head..self.tail, 0);
            self.tail -= self.head;
            self.head = 0;
        }
        let end = self.buf.len().min(self.tail + limit);
        &mut self.buf[self.tail..end]
    }

    /// `n` bytes were read into the last [`FrameBuf::window`].
    pub(crate) fn filled(&mut self, n: usize) {
        self.tail += n;
    }

    /// The buffer's size.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }
}

/// For the framed stacks' tests: messages of mixed sizes, small and over 64 KiB, sent
/// three times over by `tx` arrive at `rx` whole, in order and intact (the receive
/// buffer compacted and grown along the way).
#[cfg(test)]
pub(crate) fn check_messages_cross_whole(
    tx: &mut Box<dyn super::stack::Endpoint>,
    rx: &mut Box<dyn super::stack::Endpoint>,
) {
    use std::time::{Duration, Instant};
    let msgs: Vec<Vec<u8>> = TEST_SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..3 {
                for m in &msgs {
                    tx.send(m).unwrap();
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        for _ in 0..3 {
            for m in &msgs {
                let got = loop {
                    assert!(Instant::now() < deadline, "timed out");
                    if let Some(g) = rx.recv().unwrap() {
                        break g.to_vec();
                    }
                };
                assert_eq!(got.len(), m.len());
                assert!(got == *m, "content of a {} B message differs", m.len());
            }
        }
    });
}

/// The message sizes of [`check_messages_cross_whole`].
#[cfg(test)]
pub(crate) const TEST_SIZES: [usize; 9] = [1, 64, 70_000, 3, 200_000, 5, 0, 65_536, 4];

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages split at every possible point arrive whole and in order.
    #[test]
    fn messages_cut_anywhere_come_out_whole() {
        let msgs: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; usize::from(i) * 7]).collect();
        let mut wire = Vec::new();
        for m in &msgs {
            wire.extend_from_slice(&(m.len() as u32).to_be_bytes());
            wire.extend_from_slice(m);
        }
        for step in [1, 3, 5, 64, wire.len()] {
            let mut f = FrameBuf::new(64, 200);
            let (mut fed, mut got) = (0, Vec::new());
            while got.len() < msgs.len() {
                match f.next().unwrap() {
                    Ok(r) => got.push(f.get(r).to_vec()),
                    Err(need) => {
                        let w = f.window(need, step);
                        let n = w.len().min(wire.len() - fed);
                        w[..n].copy_from_slice(&wire[fed..fed + n]);
                        fed += n;
                        f.filled(n);
                    }
                }
            }
            assert_eq!(got, msgs, "step {step}");
            assert_eq!(f.avail(), 0);
        }
    }

    #[test]
    fn an_oversized_length_is_an_error() {
        let mut f = FrameBuf::new(64, 10);
        let w = f.window(HEADER, 64);
        w[..4].copy_from_slice(&11u32.to_be_bytes());
        f.filled(4);
        assert_eq!(f.next().unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
