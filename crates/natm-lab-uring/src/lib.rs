//! io_uring send and receive loops over one UDP socket, for `natm-lab perf udp-io`
//! (issue 30: io_uring measured beside `sendmmsg`/`recvmmsg` and natm's own socket
//! layer). The lab only: natm's data path does not use io_uring.
//!
//! - [`Sender`]: one `IORING_OP_SEND` per datagram, a batch of them submitted with
//!   one `io_uring_enter` that also waits for all of their completions; or
//!   ([`Sender::send_gso`]) one `IORING_OP_SENDMSG` per UDP GSO run, carrying a
//!   `UDP_SEGMENT` control message, the runs of a batch submitted with one enter;
//! - [`Receiver`]: a fixed set of buffers, each with an `IORING_OP_RECV` armed on it;
//!   one enter waits for completions (and submits the receives re-armed since the
//!   last), and each completed buffer is handed to the caller and armed again;
//! - [`MultiReceiver`]: one multishot `IORING_OP_RECV` that takes its buffers from a
//!   registered ring of provided buffers, each given back once the caller has read it.
//!
//! Every call counts its `io_uring_enter` system calls ([`Moved::enters`]): the
//! figure the lab sets beside `sendmmsg`'s and `recvmmsg`'s calls.
//!
//! Soundness rests on one rule: the kernel holds a pointer into a buffer only while an
//! entry naming it is in flight, and no Rust reference to that buffer is used then.
//! [`Sender`] borrows the caller's buffers and returns only after every entry of the
//! call has completed; [`Receiver`] and [`MultiReceiver`] own their buffers, never read
//! one the kernel may write (armed, or in the provided ring), and on drop cancel their
//! receives and wait for each to end before they free them (or, if that fails, leave
//! them allocated).
//!
//! A ring is created with `SINGLE_ISSUER` and `DEFER_TASKRUN` where the kernel has
//! them (6.1 and later; otherwise a plain ring): create each [`Sender`] and
//! [`Receiver`] on the thread that drives it.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::time::Duration;

use io_uring::{opcode, types, IoUring};

/// What one call moved and what it cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    /// Datagrams (receive buffers, for a [`Receiver`]; GSO runs are counted as the
    /// datagrams they carry) that completed without error.
    pub datagrams: usize,
    /// Completions that carried an error.
    pub errors: usize,
    /// `io_uring_enter` system calls made.
    pub enters: u64,
}

/// A ring of at least `entries` submission entries, set up as cheaply driven from one
/// thread as the kernel allows.
fn ring(entries: u32) -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::builder().setup_coop_taskrun().build(entries))
        .or_else(|_| IoUring::new(entries))
}

/// Whether an `io_uring_enter` that failed with `e` left the ring as it was, to be
/// entered again.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY | libc::ETIME)
    )
}

/// Most datagrams one [`Sender::send`] takes, and runs one [`Sender::send_gso`] takes.
pub const MAX_BATCH: usize = 64;

/// A `UDP_SEGMENT` control message: the header, then the segment size where
/// `CMSG_DATA` puts it (right after the header, which is 8-aligned), padded to
/// `CMSG_SPACE(2)`.
#[repr(C)]
#[derive(Clone, Copy)]
struct GsoCmsg {
    hdr: libc::cmsghdr,
    segment: u16,
    _pad: [u8; 6],
}

/// What one GSO run's `SENDMSG` entry points at; kept in the [`Sender`], so that it
/// stays put while the entry is in flight.
struct GsoMsg {
    msg: libc::msghdr,
    iov: libc::iovec,
    cmsg: GsoCmsg,
}

/// The sending end: a connected UDP socket and its ring.
pub struct Sender {
    ring: IoUring,
    /// Room for the messages of one [`Sender::send_gso`]; its length never changes
    /// after [`Sender::new`], so the entries' pointers into it stay valid.
    gso: Box<[GsoMsg]>,
    socket: UdpSocket,
}

impl Sender {
    /// A sender on `socket`, which must be connected (entries carry no address).
    pub fn new(socket: UdpSocket) -> io::Result<Sender> {
        let gso = (0..MAX_BATCH)
            .map(|_| GsoMsg {
                msg: libc::msghdr {
                    msg_name: std::ptr::null_mut(),
                    msg_namelen: 0,
                    msg_iov: std::ptr::null_mut(),
                    msg_iovlen: 1,
                    msg_control: std::ptr::null_mut(),
                    msg_controllen: std::mem::size_of::<GsoCmsg>(),
                    msg_flags: 0,
                },
                iov: libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                },
                cmsg: GsoCmsg {
                    hdr: libc::cmsghdr {
                        // CMSG_LEN(2): the header and the u16 segment size.
                        cmsg_len: std::mem::size_of::<libc::cmsghdr>() + 2,
                        cmsg_level: libc::SOL_UDP,
                        cmsg_type: libc::UDP_SEGMENT,
                    },
                    segment: 0,
                    _pad: [0; 6],
                },
            })
            .collect();
        Ok(Sender {
            ring: ring(MAX_BATCH as u32)?,
            gso,
            socket,
        })
    }

    /// Send each buffer as one datagram: one `SEND` entry each, all submitted by one
    /// `io_uring_enter` that waits for all their completions (more enters only if it
    /// is interrupted). At most [`MAX_BATCH`] buffers.
    pub fn send(&mut self, bufs: &[&[u8]]) -> io::Result<Moved> {
        if bufs.len() > MAX_BATCH {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        if bufs.iter().any(|b| u32::try_from(b.len()).is_err()) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let fd = types::Fd(self.socket.as_raw_fd());
        {
            let mut sq = self.ring.submission();
            for (i, b) in bufs.iter().enumerate() {
                let entry = opcode::Send::new(fd, b.as_ptr(), b.len() as u32)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the entry names `b`, which the caller lends for this whole
                // call, and this call returns only after every entry it pushed has
                // completed (`complete` reaps one completion per entry, or aborts):
                // the kernel never reads `b` after the borrow ends. The kernel only
                // reads it, so the caller's shared borrow is not broken. The socket
                // is `self`'s and outlives the call.
                unsafe { sq.push(&entry) }
                    .map_err(|_| io::Error::other("submission queue full"))?;
            }
        }
        Ok(self.complete(bufs.len(), |_| 1))
    }

    /// Send runs of UDP GSO: each of `runs` goes out as one `SENDMSG` entry carrying a
    /// `UDP_SEGMENT` control message of `segment` octets (the kernel cuts the run into
    /// datagrams of that size, the last possibly shorter), all submitted by one
    /// `io_uring_enter` that waits for their completions. At most [`MAX_BATCH`] runs,
    /// each at most 65,507 octets and 64 segments (Linux's GSO limits).
    pub fn send_gso(&mut self, runs: &[&[u8]], segment: u16) -> io::Result<Moved> {
        if runs.len() > MAX_BATCH || segment == 0 {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let fd = types::Fd(self.socket.as_raw_fd());
        {
            let mut sq = self.ring.submission();
            for (i, (run, m)) in runs.iter().zip(self.gso.iter_mut()).enumerate() {
                m.iov = libc::iovec {
                    iov_base: run.as_ptr().cast_mut().cast(),
                    iov_len: run.len(),
                };
                m.cmsg.segment = segment;
                m.msg.msg_iov = &mut m.iov;
                m.msg.msg_control = (&mut m.cmsg as *mut GsoCmsg).cast();
                let entry = opcode::SendMsg::new(fd, &m.msg).build().user_data(i as u64);
                // SAFETY: the entry names `m.msg`, which points at `m.iov` and
                // `m.cmsg` (all in `self.gso`, a boxed slice that is never resized or
                // moved while `self` lives), and `m.iov` at `run`, which the caller
                // lends for this whole call. The call returns only after every entry
                // it pushed has completed (`complete`), so none of these is read by
                // the kernel after this call, nor written by us while it may read
                // them (they are rewritten only by the next call, after that). The
                // socket is `self`'s.
                unsafe { sq.push(&entry) }
                    .map_err(|_| io::Error::other("submission queue full"))?;
            }
        }
        let seg = usize::from(segment);
        Ok(self.complete(runs.len(), |i| runs[i].len().div_ceil(seg)))
    }

    /// Submit what was pushed and reap `pushed` completions, entering the kernel as
    /// often as that takes; a successful completion of entry `i` counts `per(i)`
    /// datagrams.
    ///
    /// Does not return while an entry is in flight: an enter that fails other than
    /// transiently aborts the process, since the caller's buffers, named by entries
    /// the kernel may still hold, would be freed on return.
    fn complete(&mut self, pushed: usize, per: impl Fn(usize) -> usize) -> Moved {
        let mut moved = Moved::default();
        let mut left = pushed;
        while left > 0 {
            moved.enters += 1;
            match self.ring.submit_and_wait(left) {
                Ok(_) => {}
                Err(e) if transient(&e) => {}
                Err(e) => {
                    eprintln!("natm-lab-uring: io_uring_enter failed with entries in flight: {e}");
                    std::process::abort();
                }
            }
            for cqe in self.ring.completion() {
                left -= 1;
                if cqe.result() >= 0 {
                    moved.datagrams += per(cqe.user_data() as usize);
                } else {
                    moved.errors += 1;
                }
            }
        }
        moved
    }
}

/// The receiving end: a UDP socket, its ring, and the buffers armed on it.
pub struct Receiver {
    ring: IoUring,
    /// `slots` buffers of `slot_len` octets, back to back: a `Box<[u8]>` turned into a
    /// raw pointer, so that no Rust reference covers a buffer the kernel writes.
    /// Freed by `Drop` once no entry names it.
    area: NonNull<u8>,
    slots: usize,
    slot_len: usize,
    /// Receives pushed and not completed yet.
    armed: usize,
    /// Slots completed by the last call, armed again at its end.
    done: Vec<usize>,
    socket: UdpSocket,
}

/// The entry's `user_data` of the cancellation [`Receiver`]'s drop submits.
const CANCEL: u64 = u64::MAX;

impl Receiver {
    /// A receiver on `socket` with `slots` buffers (1 to [`MAX_BATCH`]) of `slot_len`
    /// octets (1 to 4 GiB), each with a receive armed on it at once.
    pub fn new(socket: UdpSocket, slots: usize, slot_len: usize) -> io::Result<Receiver> {
        if !(1..=MAX_BATCH).contains(&slots) || slot_len == 0 || u32::try_from(slot_len).is_err() {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        // One entry more than the slots: room for the cancellation of `Drop` while
        // every slot waits to be submitted again.
        let ring = ring((slots + 1).next_power_of_two() as u32)?;
        let area = Box::into_raw(vec![0u8; slots * slot_len].into_boxed_slice());
        let mut r = Receiver {
            ring,
            area: NonNull::new(area.cast::<u8>()).expect("a box is never null"),
            slots,
            slot_len,
            armed: 0,
            done: Vec::with_capacity(slots),
            socket,
        };
        for i in 0..slots {
            r.arm(i);
        }
        r.ring.submit()?;
        Ok(r)
    }

    /// Push a receive into slot `i` (submitted by the next enter).
    fn arm(&mut self, i: usize) {
        let fd = types::Fd(self.socket.as_raw_fd());
        // SAFETY: `i < slots`, so the slot lies inside the area's allocation.
        let buf = unsafe { self.area.as_ptr().add(i * self.slot_len) };
        let entry = opcode::Recv::new(fd, buf, self.slot_len as u32)
            .build()
            .user_data(i as u64);
        // SAFETY: the entry names slot `i` of the area, which lives until `Drop` has
        // reaped every entry's completion; slot `i` was not armed (it is armed once at
        // the start, then only after its completion was reaped), so the kernel is the
        // only writer, and no reference to it is made until its completion is reaped.
        // The socket is `self`'s and outlives every entry the same way. The queue has
        // room: at most `slots` receives are ever pushed and not yet submitted.
        unsafe { self.ring.submission().push(&entry) }.expect("room for every slot");
        self.armed += 1;
    }

    /// Wait up to `timeout` for at least one datagram (submitting the receives armed
    /// again since the last call, in the same `io_uring_enter`), hand every datagram
    /// completed to `each`, and arm its buffer again. A timeout is `Ok` with nothing
    /// received.
    pub fn recv(&mut self, timeout: Duration, mut each: impl FnMut(&[u8])) -> io::Result<Moved> {
        let mut moved = Moved {
            enters: 1,
            ..Moved::default()
        };
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if transient(&e) => {}
            // Nothing is lost by returning: the buffers are `self`'s, and `Drop` waits
            // for the kernel to be done with them.
            Err(e) => return Err(e),
        }
        let (area, slot_len) = (self.area, self.slot_len);
        for cqe in self.ring.completion() {
            let i = cqe.user_data() as usize;
            self.armed -= 1;
            self.done.push(i);
            match usize::try_from(cqe.result()) {
                Ok(len) => {
                    // SAFETY: the receive into slot `i` completed, so the kernel no
                    // longer writes it, and it is armed again only after `each`
                    // returns; the kernel wrote `len <= slot_len` octets from the
                    // slot's start, inside the area. Slots are disjoint, so the
                    // kernel's writes into other armed slots do not touch this slice.
                    let d =
                        unsafe { std::slice::from_raw_parts(area.as_ptr().add(i * slot_len), len) };
                    each(d);
                    moved.datagrams += 1;
                }
                // EAGAIN: the receive found the socket empty after all (a race of
                // its readiness with another slot's receive, seen on 6.18); the slot
                // is armed again below and nothing was lost.
                Err(_) if cqe.result() == -libc::EAGAIN => {}
                Err(_) => moved.errors += 1,
            }
        }
        let done = std::mem::take(&mut self.done);
        for &i in &done {
            self.arm(i);
        }
        self.done = done;
        self.done.clear();
        Ok(moved)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // Cancel every request on the socket, and again each time a cancellation
        // completed with receives still outstanding: a receive submitted in the same
        // enter as the cancellation can be missed by it (seen: a test run hung with
        // two receives left after the first cancellation).
        let fd = types::Fd(self.socket.as_raw_fd());
        let ts = types::Timespec::from(Duration::from_millis(20));
        let args = types::SubmitArgs::new().timespec(&ts);
        let mut cancelling = false;
        for _ in 0..DRAIN_TRIES {
            if self.armed == 0 {
                break;
            }
            if !cancelling {
                let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::fd(fd).all())
                    .build()
                    .user_data(CANCEL);
                // SAFETY: a cancellation names no buffer. The queue has room: it holds
                // at most `slots` receives and has more entries than that.
                cancelling = unsafe { self.ring.submission().push(&cancel) }.is_ok();
            }
            let _ = self.ring.submitter().submit_with_args(1, &args);
            for cqe in self.ring.completion() {
                if cqe.user_data() == CANCEL {
                    cancelling = false;
                } else {
                    self.armed -= 1;
                }
            }
        }
        if self.armed > 0 {
            // The kernel may still write into the area: leave it allocated (it is
            // freed with the process) rather than free memory a receive still names.
            return;
        }
        let area =
            std::ptr::slice_from_raw_parts_mut(self.area.as_ptr(), self.slots * self.slot_len);
        // SAFETY: `area` is the pointer and length `Box::into_raw` gave in `new`, freed
        // only here, and every receive naming it has completed, so nothing else uses it.
        drop(unsafe { Box::from_raw(area) });
    }
}

/// Waits of 20 ms a dropped [`Receiver`] makes at most for its receives to complete
/// (2 s) before it leaves their buffers allocated.
const DRAIN_TRIES: usize = 100;

/// The receiving end with one multishot receive: a ring of provided buffers
/// registered with the kernel, and one `IORING_OP_RECV` with `IORING_RECV_MULTISHOT`
/// armed on the socket, which completes once per datagram into a buffer the kernel
/// picks from the ring, until the ring runs dry. One poll entry waits on the socket,
/// where [`Receiver`]'s armed receives are one each (and each is woken by every
/// datagram).
pub struct MultiReceiver {
    ring: IoUring,
    /// The buffer ring: `entries` `BufRingEntry`s, page-aligned, from `alloc_zeroed`
    /// with `ring_layout`; the kernel reads it while it is registered.
    buf_ring: NonNull<types::BufRingEntry>,
    ring_layout: std::alloc::Layout,
    entries: u16,
    /// `entries` buffers of `buf_len` octets, back to back (a leaked `Box<[u8]>`, as
    /// [`Receiver`]'s area).
    area: NonNull<u8>,
    buf_len: usize,
    /// Our copy of the ring's tail: buffers handed to the kernel so far.
    tail: u16,
    /// The multishot receive is in flight (its last completion said more follow).
    armed: bool,
    /// The buffer ring is registered.
    registered: bool,
    socket: UdpSocket,
}

/// The buffer group of [`MultiReceiver`]'s ring.
const BGID: u16 = 0;
/// The `user_data` of [`MultiReceiver`]'s receive.
const MULTI: u64 = 0;

impl MultiReceiver {
    /// A receiver on `socket` with `entries` buffers (a power of two, 1 to 32,768) of
    /// `buf_len` octets (1 to 4 GiB), its multishot receive armed at once.
    pub fn new(socket: UdpSocket, entries: u16, buf_len: usize) -> io::Result<MultiReceiver> {
        if !entries.is_power_of_two()
            || entries > 1 << 15
            || buf_len == 0
            || u32::try_from(buf_len).is_err()
        {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let ring = ring(8)?;
        let ring_layout = std::alloc::Layout::from_size_align(
            usize::from(entries) * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: the layout's size is not zero (at least one 16-octet entry).
        let raw = unsafe { std::alloc::alloc_zeroed(ring_layout) };
        let Some(buf_ring) = NonNull::new(raw.cast::<types::BufRingEntry>()) else {
            std::alloc::handle_alloc_error(ring_layout);
        };
        let area = Box::into_raw(vec![0u8; usize::from(entries) * buf_len].into_boxed_slice());
        let mut r = MultiReceiver {
            ring,
            buf_ring,
            ring_layout,
            entries,
            area: NonNull::new(area.cast::<u8>()).expect("a box is never null"),
            buf_len,
            tail: 0,
            armed: false,
            registered: false,
            socket,
        };
        // SAFETY: the ring memory is page-aligned, `entries` entries long, zeroed (an
        // empty ring: tail 0), and stays allocated and registered until `Drop`
        // unregisters it before freeing it.
        unsafe {
            r.ring.submitter().register_buf_ring_with_flags(
                buf_ring.as_ptr() as u64,
                entries,
                BGID,
                0,
            )?;
        }
        r.registered = true;
        for bid in 0..entries {
            r.give(bid);
        }
        r.publish();
        r.arm();
        r.ring.submit()?;
        Ok(r)
    }

    /// Write buffer `bid` into the ring's next free entry (published by `publish`).
    fn give(&mut self, bid: u16) {
        let idx = usize::from(self.tail & (self.entries - 1));
        // SAFETY: `idx < entries`, inside the ring's allocation. The entry at the tail
        // is not yet published, so the kernel does not read it (it reads entries
        // between its head and the published tail only; at most `entries` buffers are
        // ever out, so the tail never laps the head). The setters write the address,
        // length and id fields only, never the tail that shares the first entry.
        let e = unsafe { &mut *self.buf_ring.as_ptr().add(idx) };
        // SAFETY: `bid < entries`, so the buffer lies inside the area.
        let addr = unsafe { self.area.as_ptr().add(usize::from(bid) * self.buf_len) };
        e.set_addr(addr as u64);
        e.set_len(self.buf_len as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publish the entries written since the last call to the kernel.
    fn publish(&self) {
        // SAFETY: the ring is live and registered; `tail` points at its tail field, a
        // naturally aligned u16 that the kernel only reads, so an atomic store of it
        // is the release the kernel's acquire pairs with (liburing's
        // io_uring_buf_ring_advance).
        unsafe {
            let tail = types::BufRingEntry::tail(self.buf_ring.as_ptr())
                .cast_mut()
                .cast::<std::sync::atomic::AtomicU16>();
            (*tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }

    /// Push the multishot receive (submitted by the next enter).
    fn arm(&mut self) {
        let fd = types::Fd(self.socket.as_raw_fd());
        let entry = opcode::RecvMulti::new(fd, BGID).build().user_data(MULTI);
        // SAFETY: the entry names no buffer of ours directly, only the registered
        // group, whose buffers the kernel writes only when it takes them from the
        // ring and hands back in a completion; the group stays registered, and the
        // socket open, until `Drop` has seen the receive end. The queue (8 entries)
        // holds at most this receive and a cancellation.
        unsafe { self.ring.submission().push(&entry) }.expect("room for the receive");
        self.armed = true;
    }

    /// Wait up to `timeout` for at least one datagram, hand each one completed to
    /// `each`, give its buffer back, and arm the receive again if it ended (its
    /// buffers ran out). A timeout is `Ok` with nothing received.
    pub fn recv(&mut self, timeout: Duration, mut each: impl FnMut(&[u8])) -> io::Result<Moved> {
        let mut moved = Moved {
            enters: 1,
            ..Moved::default()
        };
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if transient(&e) => {}
            Err(e) => return Err(e),
        }
        let (area, buf_len) = (self.area, self.buf_len);
        // Buffers handed over by the completions of one pass, given back after it.
        let mut back = [0u16; 64];
        loop {
            let (mut n, mut k) = (0, 0);
            let mut ended = false;
            for cqe in self.ring.completion().take(back.len()) {
                n += 1;
                if !io_uring::cqueue::more(cqe.flags()) {
                    ended = true;
                }
                let Some(bid) = io_uring::cqueue::buffer_select(cqe.flags()) else {
                    // No buffer: the ring ran dry (ENOBUFS) or an error; the datagram
                    // is still queued on the socket.
                    if cqe.result() < 0 && cqe.result() != -libc::ENOBUFS {
                        moved.errors += 1;
                    }
                    continue;
                };
                if let Ok(len) = usize::try_from(cqe.result()) {
                    // SAFETY: the kernel handed buffer `bid` over in this completion
                    // and takes it again only after `give` puts it back in the ring,
                    // below, after `each` returns; it wrote `len <= buf_len` octets
                    // from the buffer's start, inside the area.
                    let d = unsafe {
                        std::slice::from_raw_parts(
                            area.as_ptr().add(usize::from(bid) * buf_len),
                            len.min(buf_len),
                        )
                    };
                    each(d);
                    moved.datagrams += 1;
                } else {
                    moved.errors += 1;
                }
                back[k] = bid;
                k += 1;
            }
            for &bid in &back[..k] {
                self.give(bid);
            }
            if k > 0 {
                self.publish();
            }
            if ended {
                self.armed = false;
            }
            if n < 64 {
                break;
            }
        }
        if !self.armed {
            self.arm();
        }
        Ok(moved)
    }
}

impl Drop for MultiReceiver {
    fn drop(&mut self) {
        let fd = types::Fd(self.socket.as_raw_fd());
        let ts = types::Timespec::from(Duration::from_millis(20));
        let args = types::SubmitArgs::new().timespec(&ts);
        let mut cancelling = false;
        for _ in 0..DRAIN_TRIES {
            if !self.armed {
                break;
            }
            if !cancelling {
                let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::fd(fd).all())
                    .build()
                    .user_data(CANCEL);
                // SAFETY: a cancellation names no buffer; the queue has room for it.
                cancelling = unsafe { self.ring.submission().push(&cancel) }.is_ok();
            }
            let _ = self.ring.submitter().submit_with_args(1, &args);
            for cqe in self.ring.completion() {
                if cqe.user_data() == CANCEL {
                    cancelling = false;
                } else if !io_uring::cqueue::more(cqe.flags()) {
                    self.armed = false;
                }
            }
        }
        if self.armed
            || (self.registered && self.ring.submitter().unregister_buf_ring(BGID).is_err())
        {
            // The kernel may still use the ring or its buffers: leave them allocated.
            return;
        }
        // SAFETY: allocated in `new` with this layout, no longer registered, and the
        // receive that took buffers from it has ended.
        unsafe { std::alloc::dealloc(self.buf_ring.as_ptr().cast(), self.ring_layout) };
        let area = std::ptr::slice_from_raw_parts_mut(
            self.area.as_ptr(),
            usize::from(self.entries) * self.buf_len,
        );
        // SAFETY: the pointer and length `Box::into_raw` gave in `new`, freed only
        // here, after the receive that wrote into it ended.
        drop(unsafe { Box::from_raw(area) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        (a, b)
    }

    /// A batch sent through the ring arrives whole, each datagram once and byte-exact,
    /// for one enter on the sending side.
    #[test]
    fn a_batch_crosses_byte_exact_in_one_enter() {
        let (a, b) = pair();
        let mut tx = Sender::new(a).unwrap();
        let mut rx = Receiver::new(b, 16, 2048).unwrap();
        let msgs: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 100 + usize::from(i)]).collect();
        let bufs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        let sent = tx.send(&bufs).unwrap();
        assert_eq!((sent.datagrams, sent.errors, sent.enters), (40, 0, 1));
        let mut got = Vec::new();
        while got.len() < msgs.len() {
            let m = rx
                .recv(Duration::from_secs(5), |d| got.push(d.to_vec()))
                .unwrap();
            assert!(m.datagrams > 0, "nothing within the timeout");
        }
        assert_eq!(got, msgs);
    }

    /// A GSO run sent through the ring arrives as its datagrams.
    #[test]
    fn a_gso_run_arrives_cut_into_its_segments() {
        let (a, b) = pair();
        let mut tx = Sender::new(a).unwrap();
        let mut rx = Receiver::new(b, 8, 2048).unwrap();
        let run: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let sent = tx.send_gso(&[&run[..]], 300).unwrap();
        assert_eq!((sent.datagrams, sent.errors, sent.enters), (4, 0, 1));
        let mut got = Vec::new();
        while got.len() < 4 {
            rx.recv(Duration::from_secs(5), |d| got.push(d.to_vec()))
                .unwrap();
        }
        let want: Vec<Vec<u8>> = run.chunks(300).map(<[u8]>::to_vec).collect();
        assert_eq!(got, want);
    }

    /// A multishot receive hands every datagram over intact, more of them than its
    /// ring has buffers (so it is armed again after running dry).
    #[test]
    fn a_multishot_receive_takes_more_datagrams_than_buffers() {
        let (a, b) = pair();
        let mut tx = Sender::new(a).unwrap();
        let mut rx = MultiReceiver::new(b, 8, 2048).unwrap();
        let msgs: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 50 + usize::from(i)]).collect();
        let bufs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        assert_eq!(tx.send(&bufs).unwrap().datagrams, 40);
        let mut got = Vec::new();
        while got.len() < msgs.len() {
            let m = rx
                .recv(Duration::from_secs(5), |d| got.push(d.to_vec()))
                .unwrap();
            assert_eq!(m.errors, 0);
        }
        assert_eq!(got, msgs);
    }

    /// Nothing to receive: the wait ends at its timeout, and dropping a receiver with
    /// every buffer armed cancels them and returns.
    #[test]
    fn an_idle_receiver_times_out_and_drops() {
        let (_a, b) = pair();
        let mut rx = Receiver::new(b, 4, 64).unwrap();
        let m = rx.recv(Duration::from_millis(10), |_| {}).unwrap();
        assert_eq!(m.datagrams, 0);
        drop(rx);
    }
}
