//! OAM F5 at the connection's end: loopback cells answered and matched
//! (docs/decisions/0014-oam-f5-end-point.md), signed on a sealed call, and the path
//! MTU probes that ride on them (`engine::path_probe`).

use super::*;

impl Conn {
    /// An OAM frame on one of the connection's VCs (`engine::oam`): answered, handed
    /// to the probe waiting for it, or counted and dropped.
    /// `None` if `d` is not an OAM or RM frame; else the end it touched, if any (an
    /// answer to the sending VC's path MTU probe).
    pub(super) fn take_oam(
        &self,
        eng: &Engine,
        d: &[u8],
        from: Option<SocketAddr>,
    ) -> Option<Option<Which>> {
        let Ok((h, sdu)) = vcframe::Repr::parse_bytes(d) else {
            return None;
        };
        if h.kind == vcframe::FrameKind::Rm && h.vpi == self.vpi {
            self.take_rm(eng, &h, sdu);
            return Some(None);
        }
        if h.kind != vcframe::FrameKind::Oam || h.vpi != 0 {
            return None;
        }
        if self.route.half_of(h.vci).is_none() {
            self.counters.unknown_vc.fetch_add(1, Ordering::Relaxed);
            return Some(None);
        }
        let c = &self.counters.oam;
        let keys = self.crypt.as_ref().map(|k| &k.oam);
        let action = oam::on_frame(Scope::of_frame(&h), sdu, keys);
        let refusal = match action {
            Action::Answer(_, tag) => self
                .oam
                .lock()
                .may_answer(
                    eng.clock.now(),
                    tag,
                    keys.is_some(),
                    sdu.len() > crate::wire::cell::PAYLOAD_LEN,
                )
                .err(),
            _ => None,
        };
        match (action, refusal) {
            (Action::Answer(..), Some(oam::Unanswered::RateLimited)) => {
                c.rate_limited.fetch_add(1, Ordering::Relaxed);
            }
            (Action::Answer(..), Some(oam::Unanswered::Replayed)) => {
                c.replayed.fetch_add(1, Ordering::Relaxed);
            }
            (Action::Answer(mut payload, _), None) => {
                // Back on the same VC, the way it came (`h` keeps VCI and flow),
                // marked with the call like every OAM frame this end sends (a signed
                // answer is written anew).
                natm_proto::endpoint::mark_call(&mut payload, self.route.cookie);
                let mut batch = SendBatch::with_capacity(VC_HEADER_LEN + payload.len());
                let header = vcframe::Repr { clp: false, ..h }.to_bytes();
                if batch.push(&[&header, &payload]).is_ok() {
                    let peer = if self.sock_connected.load(Ordering::Acquire) {
                        None
                    } else {
                        from.or(self.handshake_to)
                    };
                    self.send_batch(&batch, peer);
                    // A padded request is the peer's path MTU probe.
                    let n = if sdu.len() > payload.len() {
                        &c.path_probes_answered
                    } else {
                        &c.looped
                    };
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
            (Action::Answered(tag), _) => {
                let now = eng.clock.now();
                if self.oam.lock().answered(tag, now) {
                    if self.path_answered(tag, now) {
                        return Some(Some(Which::Tx));
                    }
                    c.answers.fetch_add(1, Ordering::Relaxed);
                    self.oam_cv.notify_all();
                } else {
                    c.unmatched.fetch_add(1, Ordering::Relaxed);
                }
            }
            (Action::Ignored, _) => {
                c.ignored.fetch_add(1, Ordering::Relaxed);
            }
            (Action::Malformed, _) => {
                c.malformed.fetch_add(1, Ordering::Relaxed);
            }
            (Action::Unauthenticated, _) => {
                c.unauthenticated.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(None)
    }

    /// Whether the OAM answer `tag` is the sending VC's path MTU probe (then its size
    /// is confirmed, and the VC may cut larger TPDUs).
    fn path_answered(&self, tag: u32, now: Instant) -> bool {
        let (mut end, _) = self.tx();
        let Some(p) = end.path.as_mut().filter(|p| p.tag() == Some(tag)) else {
            return false;
        };
        let rtt = self.oam.lock().take_answer(tag).unwrap_or_default();
        p.answered(now, tag, rtt)
    }

    /// Send one OAM F5 loopback request of flow `scope` on the sending VC and wait up
    /// to `timeout` for its answer: the round trip, or `None` if none came (the probe
    /// is then given up on, and a late answer counts as unmatched). Who reads the
    /// socket meanwhile is the read role's holder, as for any frame.
    pub(crate) fn oam_loopback(
        &self,
        eng: &Engine,
        scope: Scope,
        timeout: Duration,
    ) -> Result<Option<Duration>, TooManyProbes> {
        // The answer must be read as it comes, by the driver if nobody else.
        self.unpark(eng);
        let tag = self.oam.lock().start(eng.clock.now())?;
        let payload = self.loopback_request(scope, tag);
        let header = scope.frame_header(0, self.route.tx_vci).to_bytes();
        let mut batch = SendBatch::with_capacity(VC_HEADER_LEN + payload.len());
        if batch.push(&[&header, &payload]).is_ok() {
            let peer = if self.sock_connected.load(Ordering::Acquire) {
                None
            } else {
                self.handshake_to
            };
            self.send_batch(&batch, peer);
            self.counters
                .oam
                .probes_sent
                .fetch_add(1, Ordering::Relaxed);
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut probes = self.oam.lock();
        loop {
            if let Some(rtt) = probes.take_answer(tag) {
                return Ok(Some(rtt));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                probes.forget(tag);
                return Ok(None);
            }
            self.oam_cv.wait_for(&mut probes, left);
        }
    }

    /// An OAM loopback request of flow `scope` with correlation `tag`: a sealed call
    /// signs its end-to-end probes; a segment probe is for a switch, which holds no
    /// call keys.
    fn loopback_request(&self, scope: Scope, tag: u32) -> [u8; crate::wire::cell::PAYLOAD_LEN] {
        let request = crate::wire::oam::Loopback::request(tag);
        let mut p = match &self.crypt {
            Some(k) if scope == Scope::EndToEnd => k.oam.sign(request),
            _ => request,
        }
        .to_bytes();
        // Marked with the call's cookie (the answer keeps it), so that a host port
        // whose direct calls all ride VCIs 32 and 33 hands the request, and then the
        // answer, to this call's ends (`natm_proto::endpoint::host`).
        natm_proto::endpoint::mark_call(&mut p, self.route.cookie);
        p
    }

    /// Run the sending VC's path MTU search (`engine::path_probe`) up to `now`: send
    /// the probe it asks for, forget one it gave up on. Returns the cap on a TPDU's
    /// payload that the confirmed size allows (`limit`: the largest TPDU payload the
    /// VC may send; `sending`: whether it has data queued, without which it does not
    /// probe, its RTO and what its timeouts say; `overhead`: the seal's).
    pub(super) fn probe_path(
        &self,
        p: &mut crate::engine::path_probe::PathProbe,
        (limit, sending): (
            usize,
            (bool, std::time::Duration, natm_proto::transport::Stall),
        ),
        overhead: usize,
        now: Instant,
        peer: Option<SocketAddr>,
        retx: impl Fn() -> u64,
    ) -> usize {
        let fixed = VC_HEADER_LEN + crate::wire::tpdu::HEADER_LEN + overhead;
        let full = limit.saturating_add(fixed);
        let step = p.step(now, (self.link.path_payload(), full), sending, retx);
        if let Some(tag) = step.lost {
            self.oam.lock().forget(tag);
        }
        if let Some(size) = step.probe {
            // The answer to a probe is an OAM answer like any other: the probe takes
            // a tag from the connection's loopback probes.
            if let Ok(tag) = self.oam.lock().start(now) {
                let request = self.loopback_request(Scope::EndToEnd, tag);
                let header = Scope::EndToEnd
                    .frame_header(0, self.route.tx_vci)
                    .to_bytes();
                let mut frame = vec![0; size.max(VC_HEADER_LEN + request.len())];
                crate::engine::path_probe::write_probe(&mut frame, &header, &request);
                p.sent(tag, size);
                // One the kernel refuses is never answered: the search counts it lost.
                let _ = self.link.send_probe(&frame, peer);
            }
        }
        p.plpmtu().saturating_sub(fixed).max(1)
    }
}
