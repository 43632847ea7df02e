//! Receiving: the read role's holder drains the link (`drain`, `read_as_app`), opens
//! sealed TPDUs where they arrived, and feeds each frame to its half under the Rx or
//! Tx end's lock (`take_datagram`); the watermark hold (seed 000 §6.2.2) and the
//! peer's release are applied here too. Who holds the role is `read_role`'s.

use super::*;

impl Conn {
    /// Threads waiting on one end's condition variable now, and whether a thread holds
    /// the read role (for tests of who waits where).
    #[cfg(test)]
    pub(crate) fn waiting(&self, w: Which) -> (u32, bool) {
        let waiters = match w {
            Which::Tx => lock(&self.tx).waiters,
            Which::Rx => lock(&self.rx).waiters,
        };
        (waiters, self.read.is_taken())
    }

    /// Hold the read role as a waiting application thread does — the socket out of the
    /// driver's epoll set — while `during` runs, then let it go the way such a thread
    /// does, without having read anything (the read slice ran out, or the thread was
    /// woken for another reason as a datagram came). Returns whether the socket was
    /// out of the set meanwhile; false, and `during` not run, if the role stayed taken
    /// for 5 s. The driver may hold the role for a moment (it reads the handshake's
    /// last frames, or a timer's): wait for it to let go.
    #[cfg(test)]
    pub(crate) fn hold_read_role_unread(&self, eng: &Engine, during: impl FnOnce()) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let mut role = loop {
            if let Some(role) = self.read.try_take() {
                break role;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::yield_now();
        };
        self.quiet_for_wait(eng, &mut role);
        let quiet = role.watch() != Watch::Watched;
        during();
        self.go(eng, &mut role, Watch::rewatch);
        let mut batch = eng.take_buffer();
        self.release_read_role(eng, role, &mut batch);
        eng.give_buffer(batch);
        quiet
    }

    /// Whether the socket is in the driver's epoll set now.
    #[cfg(test)]
    pub(crate) fn driver_watches(&self) -> bool {
        self.read.watch() == Watch::Watched
    }

    /// Whether an application thread waits on the socket itself now (out of the
    /// driver's set for its wait).
    #[cfg(test)]
    pub(crate) fn waits_in_link(&self) -> bool {
        self.read.watch() == Watch::Waiting
    }

    /// Let the read role go, answering what other threads asked of it meanwhile
    /// (`read_role::ReadSide::let_go`).
    pub(super) fn release_read_role<'a>(
        &'a self,
        eng: &Engine,
        role: Reading<'a>,
        buf: &mut RecvBatch,
    ) {
        self.read.let_go(role, |role, ask| match ask {
            Ask::Drain => self.drain(eng, role, buf),
            Ask::Release => {
                // The peer released the call: what the RELEASE followed is in the
                // socket by now; read it, then end the receiving VC.
                self.drain(eng, role, buf);
                self.end_rx_released(eng);
            }
            Ask::Rewatch => self.go(eng, role, Watch::rewatch),
        });
    }

    /// Make a transition of the link's [`Watch`] and do what it asks of the driver's
    /// epoll set. A link shut meanwhile ([`Conn::abort_both`] shuts, then takes it
    /// out) is taken out again if this added it after the abort's removal.
    pub(super) fn go(
        &self,
        eng: &Engine,
        role: &mut Reading<'_>,
        t: impl FnOnce(&mut Watch) -> Epoll,
    ) {
        let before = role.watch();
        match role.go(t) {
            Epoll::Keep => {}
            Epoll::Add => {
                let _ = self.link.watch(eng, self.token);
                if self.read.is_shut() {
                    let _ = self.link.unwatch(eng);
                    role.undo(before);
                }
            }
            Epoll::Remove => {
                let _ = self.link.unwatch(eng);
            }
        }
    }

    /// Before the read role's holder waits on the socket itself: stop the driver being
    /// woken by it (`Watch::begin_wait`). A failure leaves the socket watched, which
    /// costs a wake-up and loses nothing.
    ///
    /// Out of the set, not only with another interest: a UDP socket's arrival wakes its
    /// wait queue with `EPOLLIN | EPOLLPRI | EPOLLRDNORM | EPOLLRDBAND`, so an
    /// `EPOLLPRI`-only registration still woke the driver inside `epoll_wait` once per
    /// datagram (no return, the same context switches; `perf record -e
    /// sched:sched_switch`).
    ///
    /// After the wait the socket goes back (`Watch::rewatch`, unless it parks): epoll
    /// checks a socket as it is added, so whatever arrived meanwhile and was not read
    /// raises an event at once; the driver, finding the role still held, asks for a
    /// drain ([`Ask::Drain`]) answered as the role is let go, or reads it itself once
    /// the role is free, so no datagram waits for a later one to be noticed.
    pub(super) fn quiet_for_wait(&self, eng: &Engine, role: &mut Reading<'_>) {
        if role.go(Watch::begin_wait) == Epoll::Remove && self.link.unwatch(eng).is_err() {
            role.undo(Watch::Watched);
        }
    }

    /// Process whatever is queued on the socket now (the driver saw it readable, or
    /// an application thread needs progress); if another thread holds the read role,
    /// it drains once more as it lets the role go. The holder may have stopped at the
    /// high watermark, with the socket out of the driver's epoll set, before this
    /// caller took what it read: only a drain after that take ends the hold, and
    /// nothing else would ask for one.
    pub(crate) fn read_now(&self, eng: &Engine, buf: &mut RecvBatch) {
        if let Some(mut role) = self.read.take_or_ask(Ask::Drain) {
            self.drain(eng, &mut role, buf);
            self.release_read_role(eng, role, buf);
        }
    }

    /// Whether to stop reading the socket: the receive side went over its high
    /// watermark and has not yet come back under its low one (hysteresis), so the
    /// kernel sheds the excess before any work is spent on it (seed 000 §6.2.2).
    /// Called only by the read-role holder, which is what makes the hold's
    /// deregistration and re-registration with the driver's epoll race-free.
    fn over_watermark(&self, eng: &Engine, role: &mut Reading<'_>) -> bool {
        let Some(w) = eng.cfg.watermarks else {
            return false;
        };
        let (backlog, w) = {
            let rx = lock(&self.rx);
            let buf = rx.half.rcv_buf();
            let w = w.for_buffer(buf);
            // A reliable VC's window already holds its sender to the buffer (seed
            // 000 §6.2.1; the watermarks are §6.2.2's, for VCs whose sender nothing
            // holds back): it is held only if the sender overruns that. Held at the
            // high watermark, TPDUs its window let into flight waited unread in the
            // kernel until the sender's timer resent them (issue 34).
            let w = if rx.half.window_bounds_sender() {
                crate::engine::Watermarks { high: buf, ..w }
            } else {
                w
            };
            (rx.half.readable(), w)
        };
        if role.watch() == Watch::Held {
            if backlog <= w.low {
                // Watch the socket again; epoll reports what queued meanwhile. It is
                // in the set now, whatever a wait or a park had left.
                self.go(eng, role, Watch::end_hold);
                return false;
            }
            true
        } else if backlog > w.high {
            // Stop watching the socket too, not only reading it: every arrival would
            // otherwise still wake the driver (seed 000 §6.2.2's interrupt per packet),
            // and on a host with one CPU those wake-ups are the work that livelocks it.
            self.go(eng, role, Watch::hold);
            true
        } else {
            false
        }
    }

    /// Process every datagram queued on the socket now. Requires the read role.
    ///
    /// Frames are handed to their PSBs first and the ends flushed once per batch: the
    /// ACKs of a burst go out back to back, so the peer's engine wakes once for the
    /// burst rather than once per ACK (SMART still gets one ACK per TPDU).
    pub(super) fn drain(&self, eng: &Engine, role: &mut Reading<'_>, batch: &mut RecvBatch) {
        let mut touched = [false; 2];
        self.drain_into(eng, role, batch, &mut touched);
        self.flush_touched(eng, touched, None);
    }

    /// Receive batches until the socket is empty or the watermarks say stop.
    fn drain_into(
        &self,
        eng: &Engine,
        role: &mut Reading<'_>,
        batch: &mut RecvBatch,
        touched: &mut [bool; 2],
    ) {
        // On a sealed VC a drain sends its ACKs after each quarter of the receive
        // buffer it takes (which bounds the peer's window), not only at its end: both
        // ends spend time on each octet (sealing, opening), and a receiver that took
        // the whole window before its first ACK would wait while the sender sealed
        // the next one — the two would take turns instead of overlapping. A clear
        // drain flushes at its end only: measured, ACKs in the middle of it made the
        // sender send in smaller runs and cost a clear VC a fifth of its throughput
        // (docs/decisions/0030-sealed-receive-in-place.md).
        let flush_at = match (&self.crypt, lock(&self.rx).half.rcv_buf() / 4) {
            (Some(_), n) if n > 0 => n,
            _ => usize::MAX,
        };
        let mut unflushed = 0;
        loop {
            if self.read.is_shut() {
                return;
            }
            if self.over_watermark(eng, role) {
                self.counters
                    .held_by_watermark
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
            match self.link.recv_now(batch) {
                Ok(_) => {
                    // A batch that did not fill every buffer emptied the socket: a
                    // datagram arriving later is a new readiness edge for the driver.
                    let more = batch.may_have_more();
                    unflushed += natm_udp::areas::received(batch);
                    self.take_batch(eng, batch, touched);
                    if !more {
                        return;
                    }
                    if unflushed >= flush_at {
                        unflushed = 0;
                        self.flush_touched(eng, std::mem::take(touched), None);
                    }
                }
                Err(_) => {
                    self.after_read_error(eng);
                    return;
                }
            }
        }
    }

    /// Hand every datagram of a received batch to its PSB, flushing the touched ends
    /// every [`FLUSH_EVERY`] datagrams so that the first ACKs of a long burst are not
    /// held back. Returns the clock as last read, for a flush that follows at once.
    pub(super) fn take_batch(
        &self,
        eng: &Engine,
        batch: &mut RecvBatch,
        touched: &mut [bool; 2],
    ) -> Instant {
        // A sealed TPDU is opened where it arrived, so that what follows sees clear
        // TPDUs, lent or copied like any.
        let opened = self.crypt.as_ref().map(|c| self.open_in_place(c, batch));
        // A receive of some size is lent, not copied (`natm_udp::areas`): its
        // payloads go on as slices of the area. A smaller one of several datagrams
        // is copied once, whole, and sliced the same way (a host port's sub takes
        // a few TPDUs at a time: an allocation each was 9 % of the CPU of 1,000
        // connections).
        let received = natm_udp::areas::received(batch);
        let area = if received >= natm_udp::areas::LEND_MIN {
            let budget = lock(&self.rx).half.rcv_buf();
            eng.rx_areas.lend(&self.areas, batch, budget)
        } else if batch.len() > 1 {
            let budget = lock(&self.rx).half.rcv_buf();
            natm_udp::areas::copy_out(&self.areas, batch, budget)
        } else {
            None
        };
        // One clock read for the datagrams one receive call brought (they arrived
        // together), not one each; read again after a flush, so the PSBs never see
        // time go back.
        let mut now = eng.clock.now();
        // The kernel stamps datagrams with the realtime clock; one read of it per
        // batch turns each stamp into the engine's clock. Only a VC that exchanges
        // ACKs uses the stamps (its ACKs carry them): others skip the read.
        let wall = self.stamps.then(natm_udp::wall_clock);
        // A lone datagram (a small message, a ping) on a connection that exchanges
        // no ACKs is taken under the lock it is fed under: nothing else of the batch
        // is to come before the flush, and the flush sends nothing. (On one that
        // exchanges ACKs, answering before the socket goes back to the driver cost
        // reliable bulk a fifth of its throughput: `perf throughput --stacks
        // tcp-cubic,natm-reliable --sizes 64KiB`, 6 alternations.)
        let flush = if !self.stamps && batch.len() == 1 && !batch.marked_more() {
            Flush::Now
        } else {
            Flush::Later
        };
        let mut take = |n: usize, from, d: &[u8], opened, stamp, area: Option<&Bytes>| {
            let arrived = arrival(now, wall, stamp);
            let d = Datagram {
                bytes: d,
                seal: opened,
                from: Some(from),
                area,
            };
            if let Some(w) = self.take_datagram(eng, now, arrived, d, flush) {
                touched[w as usize] = true;
            }
            if (n + 1).is_multiple_of(FLUSH_EVERY) {
                now = eng.clock.now();
                self.flush_touched(eng, std::mem::take(touched), Some(now));
            }
        };
        let bytes: &[u8] = match &area {
            Some(a) => &a[..],
            None => batch.area(),
        };
        // seed 003: ACKs, NACKs and retransmissions first (`rx_order`).
        for (n, d) in rx_order::in_priority_order(batch, bytes, !self.bare).enumerate() {
            if d.jumped {
                self.counters.rx_high_first.fetch_add(1, Ordering::Relaxed);
            }
            let seal = match &opened {
                None => Sealed::Clear,
                Some(o) => sealed_at(o, d.span.start),
            };
            take(n, d.from, &bytes[d.span], seal, d.stamp, area.as_ref());
        }
        now
    }

    /// Let the ends the datagrams touched send what they owe (ACKs, replies) and wake
    /// their waiters, at `at`: the clock as the caller last read it, if nothing slow
    /// ran since (a lone datagram's receive: the read is a twentieth of the round
    /// trip's own work), else it is read now. Nothing touched, nothing read.
    fn flush_touched(&self, eng: &Engine, touched: [bool; 2], at: Option<Instant>) {
        if touched == [false; 2] {
            return;
        }
        let now = at.unwrap_or_else(|| eng.clock.now());
        if touched[Which::Tx as usize] {
            let (mut end, cv) = self.tx();
            self.after(eng, Which::Tx, &mut end, cv, now, usize::MAX);
        }
        if touched[Which::Rx as usize] {
            self.rx_epoch.fetch_add(1, Ordering::Relaxed);
            let (mut end, cv) = self.rx();
            self.after(eng, Which::Rx, &mut end, cv, now, usize::MAX);
        }
    }

    /// Whether the watermarks hold reading off (the socket out of the driver's epoll
    /// set): only a drain by a reader ends the hold.
    pub(crate) fn held_by_watermark(&self) -> bool {
        self.read.watch() == Watch::Held
    }

    /// Whether the driver reads this VC's own socket (it is in the epoll set): then
    /// whatever arrives is delivered, and a waker registered, without another read.
    pub(crate) fn driver_reads(&self) -> bool {
        matches!(self.link, Link::Udp(_)) && self.read.watch() == Watch::Watched
    }

    /// Read as an application thread: wait up to the read slice for the socket (or
    /// spin, in busy-poll mode), or `left` if the caller's wait has less, then take
    /// everything queued, a batch at a time. Returns false if another thread holds
    /// the read role.
    pub(crate) fn read_as_app(
        &self,
        eng: &Engine,
        batch: &mut RecvBatch,
        left: Option<std::time::Duration>,
    ) -> bool {
        if self.read.is_shut() {
            // Aborted: the caller finds the abort in the end, or waits on its
            // condition variable (never a spin on a shut socket).
            return false;
        }
        // If another thread reads, ask it to drain once more when it lets go: it may
        // have stopped at the high watermark just before this thread consumed enough
        // to go under the low one, and the socket's readiness edge is spent, so
        // without this nobody would read until the caller's read slice ran out.
        let Some(mut role) = self.read.take_or_ask(Ask::Drain) else {
            return false;
        };
        let mut read_failed = false;
        if !self.over_watermark(eng, &mut role) {
            let mut touched = [false; 2];
            let mut taken_at = None;
            self.quiet_for_wait(eng, &mut role);
            // No longer than the caller's wait has left (a short timeout is kept).
            let slice = left.map_or(crate::engine::link::READ_SLICE, |l| {
                l.min(crate::engine::link::READ_SLICE)
            });
            let first = if eng.cfg.busy_poll {
                self.link
                    .recv_spin(batch, std::time::Instant::now() + slice)
            } else {
                self.link.recv_wait(batch, slice)
            };
            if first.is_ok() {
                // A lone datagram (a small message, a ping) is answered at once, without
                // a last empty `recvmmsg` on the latency path; anything that arrived
                // with it raised its own readiness edge, so the driver reads it, or
                // finds this thread holding the role and asks it for a drain at the
                // release below. A GRO run means a burst: read on, as does a cell
                // link that read trains it has not handed over whole.
                let burst = batch.len() > 1 || batch.marked_more();
                let at = self.take_batch(eng, batch, &mut touched);
                if burst {
                    self.drain_into(eng, &mut role, batch, &mut touched);
                } else {
                    taken_at = Some(at);
                }
            }
            self.end_wait(eng, &mut role, first.is_ok());
            self.flush_touched(eng, touched, taken_at);
            read_failed = first.is_err();
        }
        self.release_read_role(eng, role, batch);
        if read_failed {
            self.after_read_error(eng);
        }
        true
    }

    /// A direct call's handshake, sent from an unconnected socket, learns from the
    /// ICMP errors the kernel queued that nothing listens where it called: both VCs
    /// abort as [`AbortReason::NoListener`], and `connect` fails at once rather than
    /// at its timeout, as TCP's does. An ICMP message is not authenticated, so it
    /// ends only a handshake that no valid answer has reached yet, and only from the
    /// called host (an off-path sender must also hit the socket's ephemeral port, as
    /// against TCP's SYN); once an answer pins the socket, errors are no longer asked
    /// for (`Link::unwatch_icmp_errors`), so this costs a read nothing after the
    /// handshake.
    fn after_read_error(&self, eng: &Engine) {
        let Some(to) = self.handshake_to else {
            return;
        };
        if self.link.refused_by(to.ip()) && !self.sock_connected.load(Ordering::Acquire) {
            self.abort_both(eng, AbortReason::NoListener);
        }
    }

    /// A TPDU the listener's endpoint routed to this connection (a repeated CONN-REQ).
    pub(crate) fn on_routed(&self, eng: &Engine, half: Half, tpdu: Bytes) {
        let now = eng.clock.now();
        match half {
            Half::Tx => {
                let (mut e, cv) = self.tx();
                e.half.handle_frame(now, tpdu);
                self.after(eng, Which::Tx, &mut e, cv, now, usize::MAX);
            }
            Half::Rx => {
                let (mut e, cv) = self.rx();
                e.half.handle_frame(now, tpdu);
                self.after(eng, Which::Rx, &mut e, cv, now, usize::MAX);
            }
        }
    }

    /// Hand a datagram to its VC's half; returns the end it touched, if that end is
    /// still to be flushed. With [`Flush::Now`] a receiving end is flushed (it wakes
    /// its waiters) under the lock it was fed under — one lock, not two, per lone
    /// datagram — once the socket is connected: before that, the handshake's answer
    /// connects it first, and the end is left to the caller's flush. A sending end is
    /// always left to the caller: an ACK that opens its window makes it send a
    /// window's worth, which an application thread does only after giving the socket
    /// back to the driver (`end_wait`), so that the driver reads the next ACKs while it
    /// sends. The VC is found by natm-proto's [`Route`]; the half checks the cookie
    /// (and counts a wrong one).
    fn take_datagram(
        &self,
        eng: &Engine,
        now: Instant,
        arrived: Instant,
        d: Datagram<'_>,
        flush: Flush,
    ) -> Option<Which> {
        let Datagram {
            bytes: d,
            seal,
            from,
            area,
        } = d;
        let flush_now = flush == Flush::Now && self.sock_connected.load(Ordering::Acquire);
        stages::record(Stage::RxRead, self.stage_key());
        if seal == Sealed::Refused {
            return None;
        }
        let Some(vci) = vc_of_on(d, self.vpi) else {
            let Some(touched) = self.take_oam(eng, d, from) else {
                self.counters.not_natm.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            return touched;
        };
        let Some(half) = self.route.half_of(vci) else {
            self.counters.unknown_vc.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        self.note_efci(half, d);
        let tpdu = &d[VC_HEADER_LEN..];
        let bare = self.bare;
        let frame = match seal {
            Sealed::Clear => tpdu,
            Sealed::Opened(len) => &tpdu[..len],
            // The opening pass counted what it refused, and found a VC here for
            // every frame it looked at.
            Sealed::Refused | Sealed::Unopened => {
                self.counters.seal.bad_tag.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let connected = match half {
            Half::Tx => {
                let (mut end, _) = self.tx();
                feed(&mut end.half, now, arrived, frame, bare, area);
                end.status().connected
            }
            Half::Rx => {
                let (mut end, cv) = self.rx();
                feed(&mut end.half, now, arrived, frame, bare, area);
                if stages::COMPILED && end.half.readable() > 0 {
                    stages::record(Stage::Deliver, self.stage_key());
                }
                if flush_now {
                    self.rx_epoch.fetch_add(1, Ordering::Relaxed);
                    self.after(eng, Which::Rx, &mut end, cv, now, usize::MAX);
                }
                end.status().connected
            }
        };
        if flush_now && half == Half::Rx {
            return None;
        }
        // Client handshake: the accepting side answers from the connection's own
        // socket; once a valid answer (right cookie) arrives, pin the socket to it.
        if !self.sock_connected.load(Ordering::Acquire) && connected {
            if let Some(src) = from {
                if self.link.connect(src).is_ok() {
                    self.sock_connected.store(true, Ordering::Release);
                    self.link.unwatch_icmp_errors();
                }
            } else {
                self.counters.bad_source.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(match half {
            Half::Tx => Which::Tx,
            Half::Rx => Which::Rx,
        })
    }

    /// Open in place every sealed TPDU of a batch on an encrypted connection, cheapest
    /// checks first (issue 16): the cookie (a compare), then the packet number against
    /// the replay window (a bitmap), and only then the tag (AES-GCM over the frame).
    /// Whatever fails is counted here and dropped before any PSB sees it. Frames that
    /// are not data on one of the connection's VCs (OAM, strangers) are left as they
    /// came, for `take_datagram` to route or count.
    fn open_in_place(&self, c: &Crypt, batch: &mut RecvBatch) -> Vec<(usize, Sealed)> {
        let n = &self.counters.seal;
        let cookie = self.route.cookie.to_be_bytes();
        let mut opener = c.opener.lock();
        let mut opened = Vec::with_capacity(batch.len());
        batch.for_each_mut(|span, d| {
            let known = vc_of_on(d, self.vpi).is_some_and(|vci| self.route.half_of(vci).is_some());
            if !known {
                return;
            }
            let tpdu = &mut d[VC_HEADER_LEN..];
            let seal = if tpdu.get(4..8) != Some(&cookie[..]) {
                n.bad_cookie.fetch_add(1, Ordering::Relaxed);
                Sealed::Refused
            } else {
                match opener.open(tpdu) {
                    Ok(clear) => {
                        n.opened.fetch_add(1, Ordering::Relaxed);
                        Sealed::Opened(clear.len())
                    }
                    Err(OpenError::BadTag | OpenError::Truncated(_)) => {
                        n.bad_tag.fetch_add(1, Ordering::Relaxed);
                        Sealed::Refused
                    }
                    Err(OpenError::Replayed(_) | OpenError::NotSealed) => {
                        n.replayed.fetch_add(1, Ordering::Relaxed);
                        Sealed::Refused
                    }
                }
            };
            opened.push((span.start, seal));
        });
        opened
    }

    /// The peer's application released the call normally (cause 16): the receiving
    /// VC ends after what arrived, as if its close had come. A peer running this
    /// library releases only once its data path has closed, so the close came
    /// already and this changes nothing; a RELEASE that overtakes the close (an
    /// administrator's, or a peer that does not wait) must not leave the reader
    /// waiting for a close a switch on the path can no longer carry. The sending VC
    /// finishes, or times out, by itself.
    ///
    /// What already waits on the data socket is read first: the RELEASE comes by
    /// sigd's stream and the data by the socket, and nothing orders the two. A
    /// point-to-multipoint leaf depends on it — no CLOSE-ACK holds its root's release
    /// back, so the switch's last copies and its RELEASE reach this host together.
    ///
    /// Another thread may hold the read role with datagrams read and not yet fed (the
    /// driver, an application thread): then that holder ends the VC as it lets the
    /// role go (`release_read_role`), never before it has fed them.
    pub(crate) fn peer_released(&self, eng: &Engine) {
        self.read.ask(Ask::Release);
        if let Some(role) = self.read.try_take() {
            let mut buf = eng.take_buffer();
            self.release_read_role(eng, role, &mut buf);
            eng.give_buffer(buf);
        }
    }

    /// The receiving VC's end after the peer's release (`peer_released`).
    fn end_rx_released(&self, eng: &Engine) {
        let now = eng.clock.now();
        let (mut e, cv) = self.rx();
        if !e.finished() {
            e.half.peer_released(now);
            self.after(eng, Which::Rx, &mut e, cv, now, usize::MAX);
            cv.notify_all();
            if let Some(wk) = e.waker.take() {
                wk.wake();
            }
        }
    }
}

/// When a datagram the kernel stamped `stamp` reached the host, on the engine's
/// clock, given `now` and the realtime clock `wall` read together: `now` less the
/// time it waited (`natm_udp::stamp_age`), else (or without `wall`) `now` itself.
fn arrival(now: Instant, wall: Option<Duration>, stamp: Option<std::time::Duration>) -> Instant {
    wall.map_or(now, |wall| {
        now - natm_udp::stamp_age(wall, stamp).unwrap_or_default()
    })
}

/// What the opening pass of an encrypted connection did with one datagram
/// (`Conn::open_in_place`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sealed {
    /// A clear connection: nothing to open.
    Clear,
    /// Opened in place: its clear TPDU is the first this many octets after the VC
    /// header.
    Opened(usize),
    /// Counted and dropped (wrong cookie, replayed, bad tag).
    Refused,
    /// Not looked at: not a data frame of the connection's VCs (OAM, a stranger).
    Unopened,
}

/// Where the opening pass left the datagram at `start` (the pass meets the
/// datagrams in arrival order, so its list is sorted by it).
fn sealed_at(list: &[(usize, Sealed)], start: usize) -> Sealed {
    list.binary_search_by_key(&start, |&(s, _)| s)
        .map_or(Sealed::Unopened, |i| list[i].1)
}

/// A received datagram as `take_datagram` takes it: its octets (a slice of `area`
/// when the receive was lent: its payload is sliced, not copied), whether it was
/// opened, and where it came from.
struct Datagram<'a> {
    bytes: &'a [u8],
    seal: Sealed,
    from: Option<SocketAddr>,
    area: Option<&'a Bytes>,
}

/// When the end a datagram touched sends what it owes and wakes its waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flush {
    /// Under the lock the datagram was fed under: it came alone, on a connection that
    /// exchanges no ACKs (a receiving end only, see `take_datagram`).
    Now,
    /// Once per batch (or every [`FLUSH_EVERY`] datagrams), by the caller.
    Later,
}
