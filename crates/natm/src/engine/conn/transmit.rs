//! Transmitting: after any change to an end, `after` sends what its half has to send
//! (bare SDUs, gathered clear TPDUs, sealed TPDUs in batches; RM cells; a smoothed
//! VC's due cells), re-arms its deadline and wakes its waiters; the driver's timers
//! and scheduler rounds come in through `on_timer` and `task`.

use super::*;

impl Conn {
    /// After any input to an end: send what it has (up to `max` TPDUs), re-arm its
    /// timer, and wake whoever waits on it if it made progress. Returns TPDUs sent.
    /// (What the events mean is already in the half's status: natm-proto keeps it.)
    pub(crate) fn after<H: Simplex + Progress>(
        &self,
        eng: &Engine,
        which: Which,
        end: &mut End<H>,
        cv: &Condvar,
        now: Instant,
        max: usize,
    ) -> usize {
        let mut sent = 0;
        if which == Which::Tx {
            if let Some(p) = &self.late_path {
                // RFC 9040: wait for the late ACKs any VC to the peer's host saw.
                let shared = p.report(end.half.late_rtt(), now.as_nanos());
                end.half.share_late_rtt(shared);
            }
        }
        let peer = if self.sock_connected.load(Ordering::Acquire) {
            None
        } else {
            self.handshake_to
        };
        // Frames go out in batches: runs of equal sizes leave in one GSO sendmsg (a
        // burst of ACKs, or the full TPDUs of a message).
        let mut batch = std::mem::take(&mut end.out_batch);
        batch.clear();
        if self.crypt.is_some() && which == Which::Tx {
            // Every sealed TPDU goes through this batch: room for the largest up
            // front (growing it as the first TPDUs came left sealed bulk ~10 % slower,
            // `perf throughput --stacks natm-reliable-enc`, 6 runs each).
            batch.reserve_total(crate::adaptor::MAX_DATAGRAM);
        }
        let header = vc_header_on(end.half.vpi(), end.half.vci());
        // A bare VC's frames are the VC header and the SDU itself (docs/wire.md).
        while self.bare && sent < max {
            let Some(sdu) = end.half.poll_sdu(now) else {
                break;
            };
            let len = VC_HEADER_LEN + sdu.len();
            if batch.check(len).is_err() {
                self.emit(&mut end.smoother, &batch, peer, now);
                batch.clear();
            }
            let pushed = batch.push_with(len, |out| {
                out[..VC_HEADER_LEN].copy_from_slice(&header);
                out[VC_HEADER_LEN..].copy_from_slice(&sdu);
            });
            if pushed.is_err() {
                self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
            }
            sent += 1;
        }
        // An encrypted connection seals each TPDU into the batch from where the send
        // queue holds its payload, after its header is written: no copy beyond the
        // seal, and every frame — a SMART retransmission too — takes a new packet
        // number.
        let overhead = if self.crypt.is_some() {
            seal::OVERHEAD
        } else {
            0
        };
        // Issue 30: TPDUs cut to the path MTU (one relaxed load; the half is told
        // only when the link learnt a new MTU).
        if which == Which::Tx {
            let mut cap = self.link.tpdu_cap(overhead > 0);
            if let (Some(limit), true) = (end.half.tpdu_limit(), end.path.is_some()) {
                let sending = (end.half.send_queued() > 0, end.half.rto(), end.half.stall());
                let half = &end.half;
                let retx = || half.losses();
                if let Some(p) = end.path.as_mut() {
                    cap = cap.min(self.probe_path(p, (limit, sending), overhead, now, peer, retx));
                    if let Some(fit) = p.fit() {
                        self.link.cells_above(fit);
                    }
                    if let Some((plpmtu, searching)) = p.news() {
                        self.events
                            .push(crate::engine::events::ConnEvent::PathMtu { plpmtu, searching });
                    }
                }
            }
            if cap != end.path_cap {
                end.path_cap = cap;
                end.half.set_path_cap(cap);
            }
        }
        // A clear TPDU on a frame-mode UDP link is gathered: its headers written,
        // its payload sent from where the send queue holds it (`engine::gather`).
        let gathers = !self.bare && self.crypt.is_none() && self.link.gathers();
        if gathers {
            let mut run = std::mem::take(&mut end.out_gather);
            while sent < max {
                let Some(t) = end.half.poll_transmit(now) else {
                    break;
                };
                let len = VC_HEADER_LEN + t.len();
                if !run.fits(len) {
                    self.send_gathered(&run, peer);
                    run.clear();
                }
                run.push(&header, &t.header, t.payload);
                sent += 1;
            }
            if !run.is_empty() {
                self.send_gathered(&run, peer);
                run.clear();
            }
            end.out_gather = run;
        }
        // A gathering end's loop above polled until the half had nothing more: one
        // more poll here found nothing, and cost a pass through the PSB per `after`.
        while !gathers && sent < max {
            let Some(t) = end.half.poll_transmit(now) else {
                break;
            };
            let len = VC_HEADER_LEN + t.len() + overhead;
            if batch.check(len).is_err() {
                self.emit(&mut end.smoother, &batch, peer, now);
                batch.clear();
            }
            // A TPDU whose seal fails (its packet numbers spent) is not added to the
            // batch: its payload, still clear, must not leave.
            // A sealed TPDU's payload is encrypted from the send queue straight
            // into the batch: one pass over it, not a copy and then a seal.
            let pushed = batch.try_push_with(len, |out| {
                out[..VC_HEADER_LEN].copy_from_slice(&header);
                t.header.emit_into(&mut out[VC_HEADER_LEN..]);
                match &self.crypt {
                    Some(c) => c
                        .sealer
                        .seal_from(&mut out[VC_HEADER_LEN..], &t.payload)
                        .is_ok(),
                    None => {
                        let body = VC_HEADER_LEN + crate::wire::tpdu::HEADER_LEN;
                        out[body..body + t.payload.len()].copy_from_slice(&t.payload);
                        true
                    }
                }
            });
            if pushed != Ok(true) {
                self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
            } else if overhead > 0 {
                self.counters.seal.sealed.fetch_add(1, Ordering::Relaxed);
            }
            sent += 1;
        }
        if !batch.is_empty() {
            self.emit(&mut end.smoother, &batch, peer, now);
        }
        end.out_batch = batch;
        if which == Which::Tx && !self.bare {
            self.send_due_rm(end, now);
        }
        // A cell-smoothed VC's cells whose slots came, with or without new frames.
        if let Some(s) = end.smoother.as_mut() {
            self.send_due(s, peer, now);
        }
        let mut woke = false;
        while let Some(ev) = end.half.poll_event() {
            woke = true;
            if let natm_proto::transport::Event::Aborted(r) = ev {
                if end.status().connected {
                    self.couple(eng, which, r);
                }
            }
            if let Some(ev) = crate::engine::events::ConnEvent::of(which == Which::Tx, ev) {
                self.events.push(ev);
            }
        }
        let deadline = end
            .half
            .poll_timeout()
            .into_iter()
            .chain(end.smoother.as_ref().and_then(|s| s.next()))
            .chain(end.path.as_ref().and_then(|p| p.deadline()))
            .min()
            .map_or(u64::MAX, |t| t.as_nanos());
        match which {
            Which::Tx => self.tx_deadline.store(deadline, Ordering::Release),
            Which::Rx => self.rx_deadline.store(deadline, Ordering::Release),
        }
        if deadline != u64::MAX {
            eng.arm(self, deadline);
        }
        // What the queue freed (acknowledged, or sent without error control) goes
        // back to the host's pool, waking senders of other VCs asleep on it.
        if let Some(p) = end.pool.as_mut() {
            p.settle(end.half.send_queued());
        }
        let progress = woke || end.half.has_progress();
        if progress && end.waiters > 0 {
            cv.notify_all();
        }
        if progress {
            if let Some(w) = end.waker.take() {
                w.wake();
            }
        }
        sent
    }

    pub(super) fn send_gathered(
        &self,
        run: &crate::engine::gather::GatherBatch,
        peer: Option<SocketAddr>,
    ) {
        stages::record(Stage::TxStart, self.stage_key());
        let r = self.link.send_gathered(run, peer);
        stages::record(Stage::TxDone, self.stage_key());
        let unsent = run.len() - r.map_or(0, |n| n.min(run.len()));
        if unsent > 0 {
            self.counters
                .send_errors
                .fetch_add(unsent as u64, Ordering::Relaxed);
        }
    }

    /// Send `batch` now, or hand its frames to the VC's cell pacer, which sends the
    /// cells whose slots have come.
    fn emit(
        &self,
        smoother: &mut Option<crate::engine::smoother::CellSmoother>,
        batch: &SendBatch,
        peer: Option<SocketAddr>,
        now: Instant,
    ) {
        match smoother {
            Some(s) => {
                s.push(now, batch);
                self.send_due(s, peer, now);
            }
            None => self.send_batch(batch, peer),
        }
    }

    /// Send the cells of `s` due at `now`.
    fn send_due(
        &self,
        s: &mut crate::engine::smoother::CellSmoother,
        peer: Option<SocketAddr>,
        now: Instant,
    ) {
        let (bytes, unit) = s.due(now);
        if bytes.is_empty() {
            return;
        }
        let n = bytes.len() / unit;
        let r = self.link.send_units(bytes, unit, peer);
        let unsent = n - r.map_or(0, |k| k.min(n));
        if unsent > 0 {
            self.counters
                .send_errors
                .fetch_add(unsent as u64, Ordering::Relaxed);
        }
    }

    pub(super) fn send_batch(&self, batch: &SendBatch, peer: Option<SocketAddr>) {
        stages::record(Stage::TxStart, self.stage_key());
        let r = self.link.send_batch(batch, peer);
        stages::record(Stage::TxDone, self.stage_key());
        let unsent = batch.len() - r.map_or(0, |n| n.min(batch.len()));
        if unsent > 0 {
            self.counters
                .send_errors
                .fetch_add(unsent as u64, Ordering::Relaxed);
        }
    }

    /// This connection's key in `natm::stages` records.
    pub(crate) fn stage_key(&self) -> u64 {
        self as *const Conn as u64
    }

    /// Timers: run the timers of each end that is due.
    pub(crate) fn on_timer(&self, eng: &Engine, now: Instant) {
        // An abort the other half owes this one (`coupled`) first: no end is locked
        // here, so either half may be taken.
        let coupled_tx = self.coupled.of(Which::Tx).take();
        let mut ended = false;
        if coupled_tx.is_some() || self.tx_deadline.load(Ordering::Acquire) <= now.as_nanos() {
            let (mut end, cv) = self.tx();
            if let Some(r) = coupled_tx {
                ended |= self.abort_end(eng, Which::Tx, &mut end, cv, r, now);
            }
            // The deadline may be a paced cell's slot rather than the half's own.
            if end.half.poll_timeout().is_some_and(|t| t <= now) {
                end.half.handle_timeout(now);
            }
            self.after(eng, Which::Tx, &mut end, cv, now, usize::MAX);
        }
        let coupled_rx = self.coupled.of(Which::Rx).take();
        let rx_due = self.rx_deadline.load(Ordering::Acquire) <= now.as_nanos();
        if coupled_rx.is_some() || rx_due {
            let (mut end, cv) = self.rx();
            if let Some(r) = coupled_rx {
                ended |= self.abort_end(eng, Which::Rx, &mut end, cv, r, now);
            }
            if rx_due {
                end.half.handle_timeout(now);
            }
            self.after(eng, Which::Rx, &mut end, cv, now, usize::MAX);
        }
        if ended {
            // Both halves have ended (the rule ends the other only then).
            self.stop_reading(eng);
        }
    }

    /// Send up to `max` TPDUs of deferred work (the scheduler's task). Returns the
    /// work done.
    pub(crate) fn task(&self, eng: &Engine, max: u32) -> u32 {
        stages::record(Stage::Sched, self.stage_key());
        let now = eng.clock.now();
        let mut done = {
            let (mut end, cv) = self.rx();
            self.after(eng, Which::Rx, &mut end, cv, now, max as usize) as u32
        };
        if done < max {
            let (mut end, cv) = self.tx();
            done += self.after(eng, Which::Tx, &mut end, cv, now, (max - done) as usize) as u32;
        }
        done
    }
}

/// Whether an end can make progress for a waiting application (data to read, room to
/// write).
pub(crate) trait Progress {
    fn has_progress(&self) -> bool;
    /// The late ACK this sending VC learnt to wait for (zero on a receiving end).
    fn late_rtt(&self) -> std::time::Duration;
    /// What the VCs to the peer's host learnt of late ACKs (`late_path`).
    fn share_late_rtt(&mut self, d: std::time::Duration);
    /// The path carries at most `cap` payload octets per TPDU unfragmented (a
    /// sender cuts its TPDUs to it; a receiver has nothing to cut).
    fn set_path_cap(&mut self, cap: usize);
    /// Octets queued to send and not yet acknowledged (0 on a receiving end).
    fn send_queued(&self) -> usize;
    /// The largest TPDU payload the end may send whatever the path (`None` on a
    /// receiving end or a bare VC: nothing to search a path MTU for).
    fn tpdu_limit(&self) -> Option<usize>;
    /// TPDUs the end has sent again so far that no ACK showed needless: the path's
    /// losses as far as the end knows (0 on a receiving end).
    fn losses(&self) -> u64;
    /// The end's retransmission timeout now (0 without error control).
    fn rto(&self) -> std::time::Duration;
    /// What the end's retransmission timeouts say about its path (nothing on a
    /// receiving end): the path MTU search's signs of a black hole.
    fn stall(&self) -> natm_proto::transport::Stall;
}

impl Progress for TxHalf {
    fn has_progress(&self) -> bool {
        self.capacity() > 0
    }
    fn late_rtt(&self) -> std::time::Duration {
        TxHalf::late_rtt(self)
    }
    fn share_late_rtt(&mut self, d: std::time::Duration) {
        TxHalf::share_late_rtt(self, d);
    }
    fn set_path_cap(&mut self, cap: usize) {
        TxHalf::set_path_cap(self, cap);
    }
    fn send_queued(&self) -> usize {
        self.buffered()
    }
    fn tpdu_limit(&self) -> Option<usize> {
        TxHalf::tpdu_limit(self)
    }
    fn losses(&self) -> u64 {
        self.stats().losses()
    }
    fn rto(&self) -> std::time::Duration {
        self.psb()
            .map_or(std::time::Duration::ZERO, |p| p.rtt().rto())
    }
    fn stall(&self) -> natm_proto::transport::Stall {
        TxHalf::stall(self)
    }
}

impl Progress for RxHalf {
    fn has_progress(&self) -> bool {
        self.readable() > 0
    }
    fn late_rtt(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    fn share_late_rtt(&mut self, _d: std::time::Duration) {}
    fn set_path_cap(&mut self, _cap: usize) {}
    fn send_queued(&self) -> usize {
        0
    }
    fn tpdu_limit(&self) -> Option<usize> {
        None
    }
    fn losses(&self) -> u64 {
        0
    }
    fn rto(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    fn stall(&self) -> natm_proto::transport::Stall {
        natm_proto::transport::Stall::default()
    }
}
