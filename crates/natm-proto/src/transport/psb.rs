//! The protocol status block: one simplex VC end, its connection life and its two
//! halves (seed 000 Figure 3).

use std::collections::VecDeque;

use bytes::Bytes;

use super::qos::{QosOutcome, QosReceiver, QosSender};
use super::recv::{self, RecvHalf, RecvLimits, Taken};
use super::send::{Full, SendHalf, SendLimits, Stall};
use super::sync::{EchoLimiter, SyncProbe};
use super::tpdu_size::TpduSizer;
use super::{
    AbortReason, Chunk, Event, FlowKind, PsbStats, QosBoundsError, QosChangeError, RecvError,
    RttEstimator, Semantics, SendError, Status, Transmit, TransmitKind, TransportConfig,
};
use crate::flow::FlowController;
use crate::time::Instant;
use crate::wire::rm::RmCell;
use crate::wire::tpdu::{ConnParams, Header, Packet, TpduType, MAX_PAYLOAD};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Sender,
    Receiver,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Sender: CONN-REQ sent, waiting for CONN-ACCEPT.
    Connecting { attempts: u32, deadline: Instant },
    /// Receiver: waiting for CONN-REQ.
    Listening,
    /// Data may flow.
    Established,
    /// Sender: CLOSE sent, waiting for CLOSE-ACK.
    CloseSent { attempts: u32, deadline: Instant },
    /// Finished in order.
    Closed,
    /// Finished abnormally.
    Aborted(AbortReason),
}

/// One end of a simplex VC (seed 000 §5.3): a sender or a receiver.
///
/// Call order, as in quinn-proto: feed every arriving frame to
/// [`handle_frame`](Psb::handle_frame); after any input, drain
/// [`poll_transmit`](Psb::poll_transmit) and [`poll_event`](Psb::poll_event); arm a
/// timer for [`poll_timeout`](Psb::poll_timeout) and call
/// [`handle_timeout`](Psb::handle_timeout) when it fires.
#[derive(Debug)]
pub struct Psb {
    role: Role,
    state: State,
    cfg: TransportConfig,
    cookie: u32,
    params: Option<ConnParams>,
    send: Option<SendHalf>,
    recv: Option<RecvHalf>,
    ctrl: VecDeque<Transmit>,
    events: VecDeque<Event>,
    rtt: RttEstimator,
    flow: Box<dyn FlowController>,
    stats: PsbStats,
    pace_at: Option<Instant>,
    close_requested: bool,
    want_writable: bool,
    readable_signalled: bool,
    peer_closed: bool,
    window_full: bool,
    consecutive_timeouts: u32,
    qos_done: bool,
    qos_refused: bool,
    /// The rate in force (sender: its shaper's; receiver: the last one accepted).
    qos_rate: u64,
    qos_tx: QosSender,
    qos_rx: QosReceiver,
    sync: SyncProbe,
    echo: EchoLimiter,
    /// The adaptive TPDU sizer of a sender with `tpdu=auto`, once the size is agreed.
    sizer: Option<TpduSizer>,
    /// When the TPDU being handled reached the host ([`Psb::handle_tpdu_at`]).
    arrived: Instant,
}

impl Psb {
    /// Open the sending end of a VC: queues the CONN-REQ.
    pub fn connect(cfg: TransportConfig, flow: Box<dyn FlowController>, now: Instant) -> Psb {
        let lim = SendLimits {
            error_control: cfg.error_control,
            acks_expected: cfg.acks(),
            semantics: cfg.semantics,
            tpdu_size: cfg.tpdu_size as usize,
            window: cfg.window,
            snd_buf: cfg.snd_buf,
            max_msg: cfg.max_msg,
            outstanding: cfg.outstanding,
            reorder_threshold: cfg.reorder_threshold,
            detect_lost_retx: cfg.detect_lost_retx,
            coalesce: cfg.flow == FlowKind::LeakyBucket || cfg.contract.is_some(),
        };
        let mut psb = Psb::new(Role::Sender, cfg, flow);
        psb.send = Some(SendHalf::new(lim, psb.cfg.isn));
        let deadline = now + psb.rtt.rto();
        psb.state = State::Connecting {
            attempts: 1,
            deadline,
        };
        psb.queue_conn_req();
        psb
    }

    /// Open the receiving end of a VC: waits for the peer's CONN-REQ.
    pub fn listen(cfg: TransportConfig) -> Psb {
        let lim = RecvLimits {
            error_control: cfg.error_control,
            send_acks: cfg.acks(),
            merge_acks: cfg.flow != FlowKind::PacketPair,
            semantics: cfg.semantics,
            tpdu_size: cfg.tpdu_size as usize,
            window: cfg.window,
            rcv_buf: cfg.rcv_buf,
            max_msg: cfg.max_msg,
            join: cfg.one_way,
        };
        let mut psb = Psb::new(Role::Receiver, cfg, Box::new(crate::flow::NoFlow));
        psb.recv = Some(RecvHalf::new(lim, psb.cfg.isn));
        psb.state = State::Listening;
        psb
    }

    /// Open the sending end of a VC whose parameters signalling already agreed (a call
    /// set up through sigd): no CONN-REQ, the VC starts established with what a receiver
    /// opened from the same configuration agrees to (`cfg.isn` and `cfg.cookie` must be the ones the
    /// receiving end was opened with, see [`Psb::established_receiver`]).
    ///
    /// Departs from seed 000 §5.3, where every simplex VC opens with the transport
    /// handshake: with UNI signalling the SETUP/CONNECT exchange has already carried
    /// the QoS, the data endpoints and the cookie both ways, so the three-way TPDU
    /// handshake would only repeat it (and cost two more process wake-ups per call).
    /// The cookie still binds the data path: frames with any other are dropped.
    pub fn established_sender(
        cfg: TransportConfig,
        flow: Box<dyn FlowController>,
        now: Instant,
    ) -> Psb {
        let mut psb = Psb::connect(cfg, flow, now);
        psb.ctrl.clear();
        // What a receiver opened from the same configuration agrees to.
        let p = psb.agree(&psb.offer());
        psb.apply_agreed(&p);
        psb.params = Some(p);
        psb.state = State::Established;
        psb.sync.start(now);
        psb.events.push_back(Event::Connected);
        psb
    }

    /// Open the receiving end of a VC whose parameters signalling already agreed: no
    /// CONN-ACCEPT, the VC starts established with what this end would have agreed to
    /// a CONN-REQ made from the same configuration (the QoS both ends got from
    /// signalling; `cfg.isn` and `cfg.cookie` as the sender's).
    pub fn established_receiver(cfg: TransportConfig) -> Psb {
        let mut psb = Psb::listen(cfg);
        let offer = psb.offer();
        psb.params = Some(psb.agree(&offer));
        psb.set_recv_limits();
        psb.state = State::Established;
        psb.events.push_back(Event::Connected);
        psb
    }

    fn new(role: Role, cfg: TransportConfig, flow: Box<dyn FlowController>) -> Psb {
        // A sender with a reservation keeps its contract whatever flow control it
        // was given (issue 34: `flow=none` means no feedback, not no contract).
        let flow = match role {
            Role::Sender => crate::flow::contract::enforce(
                cfg.contract,
                crate::flow::FlowParams::from(&cfg).tpdu_size,
                flow,
            ),
            Role::Receiver => flow,
        };
        // seed 003: SYNCs for the VCs that have no ACKs to time.
        // A one-way VC's receivers cannot echo.
        let sync_interval = if role == Role::Sender && !cfg.acks() && !cfg.one_way {
            cfg.sync_interval
        } else {
            None
        };
        Psb {
            qos_refused: false,
            qos_rate: cfg.rate,
            qos_tx: QosSender::default(),
            qos_rx: QosReceiver::default(),
            sync: SyncProbe::new(sync_interval),
            echo: EchoLimiter::default(),
            sizer: None,
            arrived: Instant::ZERO,
            role,
            state: State::Listening,
            cookie: cfg.cookie.unwrap_or(0),
            rtt: RttEstimator::new(cfg.rtt),
            cfg,
            params: None,
            send: None,
            recv: None,
            ctrl: VecDeque::new(),
            events: VecDeque::new(),
            flow,
            stats: PsbStats::default(),
            pace_at: None,
            close_requested: false,
            want_writable: false,
            readable_signalled: false,
            peer_closed: false,
            window_full: false,
            consecutive_timeouts: 0,
            qos_done: false,
        }
    }

    /// The sender takes what the handshake (or signalling) agreed; an adaptive VC's
    /// sizer starts with the agreed size as its ceiling.
    fn apply_agreed(&mut self, p: &ConnParams) {
        let Some(s) = self.send.as_mut() else { return };
        s.renegotiate(p.window, p.tpdu_size as usize, p.max_msg);
        if let Some(a) = self.cfg.tpdu_adapt.filter(|_| self.cfg.error_control) {
            let sizer = TpduSizer::new(a, p.tpdu_size);
            s.set_tpdu_size(sizer.size() as usize);
            self.sizer = Some(sizer);
        }
    }

    /// After an ACK: let the sizer see the loss so far and cut new TPDUs to its size.
    fn adapt_tpdu_size(&mut self) {
        let (Some(z), Some(send)) = (self.sizer.as_mut(), self.send.as_mut()) else {
            return;
        };
        let lost = self.stats.fast_marked + self.stats.timeout_marked;
        let size = z.on_progress(self.stats.tpdus_sent, lost, self.flow.rate_bps());
        send.set_tpdu_size(size as usize);
        self.stats.tpdu_size = u32::try_from(send.tpdu_size()).unwrap_or(u32::MAX);
        self.flow.set_window_limit(send.ec_window());
    }

    /// The VC paired with this one (the connection's other direction) has delivered
    /// `epoch` receives so far: a small send that follows a delivery is taken for a
    /// reply and leaves at once instead of being held for company
    /// (`transport::coalesce`). The caller keeps the count; only changes matter.
    pub fn note_reverse(&mut self, epoch: u64) {
        if let Some(send) = self.send.as_mut() {
            send.note_reverse(epoch);
        }
    }

    /// What this sending VC's retransmission timeouts say about its path (nothing on
    /// a receiving VC): timeouts in a row while its peer still answers, or a head
    /// that crossed when the rest did not, are how a path that shrank without a word
    /// shows (RFC 8899 §4.3).
    pub fn stall(&self) -> Stall {
        self.send
            .as_ref()
            .map_or(Stall::default(), |s| s.stall(self.stats.windows_lost))
    }

    /// The latest ACK that showed one of this sending VC's retransmissions spurious
    /// (RFC 3522), which its timers now allow for; zero if none did.
    pub fn late_rtt(&self) -> std::time::Duration {
        self.send
            .as_ref()
            .map_or(std::time::Duration::ZERO, |s| s.late_rtt())
    }

    /// Tell this sending VC the late ACKs the other VCs on its path saw (RFC 9040's
    /// shared control block): its head check and retransmission timer wait at least
    /// two of them, as for its own. Zero forgets what was shared.
    pub fn share_late_rtt(&mut self, d: std::time::Duration) {
        if let Some(send) = self.send.as_mut() {
            send.share_late_rtt(d);
        }
    }

    /// The path carries at most `cap` payload octets per TPDU without IP
    /// fragmentation (issue 30; the engine learns it from the adaptor's path MTU):
    /// new TPDUs are cut to fit, queued unsent ones are split, and a larger cap lets
    /// them grow back to the agreed (or adaptive) size. TPDUs already sent keep their
    /// size. A departure from seed 000, whose TPDU size is fixed per VC at setup: an
    /// ATM adaptor had no path MTU below it, a UDP one has.
    pub fn set_path_cap(&mut self, cap: usize) {
        if let Some(send) = self.send.as_mut() {
            send.set_path_cap(cap);
            if self.sizer.is_some() {
                self.stats.tpdu_size = u32::try_from(send.tpdu_size()).unwrap_or(u32::MAX);
            }
            self.flow.set_window_limit(send.ec_window());
        }
    }

    /// Whether this sending VC searches its path MTU (RFC 8899, issue 30): one with
    /// error control, whose TPDUs a black hole would stall for good (SMART resends a
    /// TPDU at the size it was cut), and whose flow control reserves no rate — a
    /// leaky-bucket or ABR VC's probes would leave outside its traffic contract and
    /// a switch would police them and the data behind them.
    pub fn searches_path(&self) -> bool {
        self.send.is_some()
            && self.cfg.error_control
            && !matches!(self.cfg.flow, FlowKind::LeakyBucket | FlowKind::Abr)
            && self.cfg.contract.is_none()
    }

    /// The largest TPDU payload the sender may cut, whatever the path (what a
    /// packetization layer's path MTU search need not look beyond); `None` on a
    /// receiver.
    pub fn tpdu_limit(&self) -> Option<usize> {
        self.send.as_ref().map(|s| s.tpdu_limit())
    }

    /// The path's cap on a TPDU's payload, as last given ([`Psb::set_path_cap`]);
    /// `None` while none was given, or on a receiver.
    pub fn path_cap(&self) -> Option<usize> {
        self.send
            .as_ref()
            .map(|s| s.path_cap())
            .filter(|&c| c != usize::MAX)
    }

    /// The adaptive TPDU sizer, on a sender with `tpdu=auto` once established.
    pub fn tpdu_sizer(&self) -> Option<&TpduSizer> {
        self.sizer.as_ref()
    }

    /// The size new TPDUs are cut to (sender), or the agreed size.
    pub fn tpdu_size(&self) -> u32 {
        self.send.as_ref().map_or(self.cfg.tpdu_size, |s| {
            u32::try_from(s.tpdu_size()).unwrap_or(u32::MAX)
        })
    }

    fn offer(&self) -> ConnParams {
        let mut options = 0;
        if self.cfg.error_control {
            options |= ConnParams::OPT_ERROR_CONTROL;
        }
        if self.cfg.semantics == Semantics::Stream {
            options |= ConnParams::OPT_STREAM;
        }
        let mut p = ConnParams {
            window: self.cfg.window,
            tpdu_size: self.cfg.tpdu_size,
            max_msg: self.cfg.max_msg,
            outstanding: self.cfg.outstanding,
            options,
            rate: self.cfg.rate,
            min_rate: self.cfg.min_rate,
            rcv_buf: 0,
            isn: self.cfg.isn,
        };
        p.set_flow_code(self.cfg.flow.code());
        p
    }

    fn header(&self, ty: TpduType) -> Header {
        Header {
            cookie: self.cookie,
            ..Header::new(ty)
        }
    }

    fn queue_ctrl(&mut self, header: Header, payload: Bytes, kind: TransmitKind) {
        if self.cfg.one_way && self.role == Role::Receiver {
            // A leaf of a point-to-multipoint VC has no way back to its root: what
            // it would answer (SYNC-ECHO, CLOSE-ACK, QOS-ACK, ABORT) is not sent.
            return;
        }
        // Bounded: if the host stops polling, old ACKs go first (later ones repeat C).
        let cap = 2 * self.cfg.window as usize + 16;
        if self.ctrl.len() >= cap {
            if let Some(i) = self.ctrl.iter().position(|t| t.kind == TransmitKind::Ack) {
                self.ctrl.remove(i);
                self.stats.acks_dropped += 1;
            }
        }
        self.ctrl.push_back(Transmit {
            header,
            payload,
            kind,
        });
    }

    /// Queue the ACK of a data TPDU, or let it stand for the in-order ACK still
    /// queued before it ([`recv::merges`]: one ACK per receive batch in order).
    fn queue_ack(&mut self, ack: Header, merge: bool) {
        if merge {
            if let Some(back) = self.ctrl.back_mut() {
                if back.kind == TransmitKind::Ack && recv::merges(&back.header, &ack) {
                    back.header = ack;
                    self.stats.acks_merged += 1;
                    return;
                }
            }
        }
        self.stats.acks_sent += 1;
        self.queue_ctrl(ack, Bytes::new(), TransmitKind::Ack);
    }

    fn queue_conn_req(&mut self) {
        let h = Header {
            window: self.cfg.window.min(u32::from(u16::MAX)) as u16,
            ..self.header(TpduType::ConnRequest)
        };
        let payload = Bytes::copy_from_slice(&self.offer().to_bytes());
        self.queue_ctrl(h, payload, TransmitKind::Control);
    }

    fn queue_abort(&mut self) {
        let h = self.header(TpduType::Abort);
        self.queue_ctrl(h, Bytes::new(), TransmitKind::Control);
    }

    fn enter_aborted(&mut self, reason: AbortReason, tell_peer: bool) {
        if matches!(self.state, State::Aborted(_)) {
            return;
        }
        self.state = State::Aborted(reason);
        if let Some(r) = self.recv.as_mut() {
            r.discard();
        }
        self.ctrl
            .retain(|t| t.kind == TransmitKind::Control && t.header.ty == TpduType::Abort);
        if tell_peer {
            self.queue_abort();
        }
        if reason != AbortReason::Local {
            self.events.push_back(Event::Aborted(reason));
        }
    }

    // ---- input -------------------------------------------------------------------

    /// A frame (one TPDU) arrived on this VC.
    pub fn handle_frame(&mut self, now: Instant, frame: Bytes) {
        let header = match Packet::new_checked(&frame[..]).and_then(|p| Header::parse(&p)) {
            Ok(h) => h,
            Err(_) => {
                self.stats.drop_malformed += 1;
                return;
            }
        };
        let payload = frame.slice(crate::wire::tpdu::HEADER_LEN..);
        self.handle_tpdu(now, header, payload);
    }

    /// A TPDU whose header the caller already parsed, with its payload on its own: an
    /// adaptor that copies the payload out of its receive buffer anyway hands it over
    /// at offset 0 of its allocation, so the application can later take a whole-TPDU
    /// message as that very allocation (no second copy).
    pub fn handle_tpdu(&mut self, now: Instant, header: Header, payload: Bytes) {
        self.handle_tpdu_at(now, now, header, payload)
    }

    /// [`Psb::handle_tpdu`] of a TPDU that reached the host at `arrived` (the kernel's
    /// receive time, before `now` by however long it queued). A receiver stamps the
    /// ACK of a data TPDU with it, so the sender times packet pairs by when they
    /// arrived rather than by when their ACKs were read (`wire::tpdu`: an ACK's
    /// `tsval`).
    pub fn handle_tpdu_at(
        &mut self,
        now: Instant,
        arrived: Instant,
        header: Header,
        payload: Bytes,
    ) {
        self.arrived = arrived.min(now);
        if self.state == State::Listening
            && header.ty == TpduType::ConnRequest
            && self.cfg.cookie.is_none()
        {
            self.cookie = header.cookie;
        }
        if header.cookie != self.cookie {
            self.stats.drop_bad_cookie += 1;
            return;
        }
        if let State::Aborted(_) = self.state {
            if header.ty != TpduType::Abort {
                // Like a TCP RST: whoever still talks to a dead VC is told so.
                self.queue_abort();
            }
            return;
        }
        if header.ty == TpduType::Abort {
            self.enter_aborted(AbortReason::Peer, false);
            return;
        }
        match self.role {
            Role::Sender => self.sender_frame(now, header, payload),
            Role::Receiver => self.receiver_frame(now, header, payload),
        }
    }

    fn sender_frame(&mut self, now: Instant, h: Header, payload: Bytes) {
        match h.ty {
            TpduType::ConnAccept => {
                let Ok(p) = ConnParams::parse(&payload) else {
                    self.stats.drop_malformed += 1;
                    return;
                };
                if let State::Connecting { .. } = self.state {
                    if p.isn != self.cfg.isn
                        || p.tpdu_size != self.cfg.tpdu_size
                        || p.window == 0
                        || p.window > self.cfg.window
                    {
                        self.stats.drop_malformed += 1;
                        return;
                    }
                    self.apply_agreed(&p);
                    self.params = Some(p);
                    self.state = State::Established;
                    self.sync.start(now);
                    let confirm = self.header(TpduType::ConnConfirm);
                    self.queue_ctrl(confirm, Bytes::new(), TransmitKind::Control);
                    self.events.push_back(Event::Connected);
                } else {
                    // A duplicate accept: our confirm was lost or is in flight.
                    let confirm = self.header(TpduType::ConnConfirm);
                    self.queue_ctrl(confirm, Bytes::new(), TransmitKind::Control);
                }
            }
            TpduType::Ack => {
                if !matches!(self.state, State::Established | State::CloseSent { .. }) {
                    self.stats.drop_malformed += 1;
                    return;
                }
                let rtt = rtt_from_echo(now, h.tsecr);
                if let Some(r) = rtt {
                    self.rtt.on_sample(r);
                }
                let min_rtt = self.rtt.min_rtt().unwrap_or_else(|| self.rtt.srtt());
                let rto = self.rtt.rto();
                let Some(send) = self.send.as_mut() else {
                    return;
                };
                let before = send.capacity();
                if send.on_ack(now, &h, rtt, min_rtt, rto, &mut self.stats, &mut *self.flow) {
                    self.consecutive_timeouts = 0;
                }
                self.adapt_tpdu_size();
                let Some(send) = self.send.as_mut() else {
                    return;
                };
                // The ACK may have raised the controller's rate: ask it again rather
                // than wait out a pacing timer armed at the old one.
                self.pace_at = None;
                if self.want_writable && send.capacity() > before && send.capacity() > 0 {
                    self.want_writable = false;
                    self.window_full = false;
                    self.events.push_back(Event::Writable);
                }
            }
            TpduType::CloseAck => {
                if let State::CloseSent { .. } = self.state {
                    self.state = State::Closed;
                    self.events.push_back(Event::Closed);
                }
            }
            TpduType::SyncEcho => {
                // Only the echo of the probe outstanding is a sample (at most one per
                // interval, whatever arrives).
                if !self.sync.on_echo(h.seq) {
                    self.stats.sync_unmatched += 1;
                    return;
                }
                self.stats.sync_echoes += 1;
                if let Some(r) = rtt_from_echo(now, h.tsecr) {
                    self.rtt.on_sample(r);
                }
            }
            TpduType::QosAck => {
                let rate = qos_rate_of(&h);
                match self.qos_tx.on_ack(h.seq, rate, h.window == 1) {
                    Some(QosOutcome::Changed { rate }) => {
                        // Only now does the shaper take the new rate (seed 003).
                        self.apply_send_rate(rate);
                        self.events.push_back(Event::QosChanged { rate });
                    }
                    Some(QosOutcome::Refused { rate }) => {
                        self.qos_refused = true;
                        self.events.push_back(Event::QosRefused { rate });
                    }
                    None => self.stats.drop_malformed += 1,
                }
            }
            _ => self.stats.drop_malformed += 1,
        }
    }

    fn receiver_frame(&mut self, now: Instant, h: Header, payload: Bytes) {
        match h.ty {
            TpduType::ConnRequest => {
                let Ok(offer) = ConnParams::parse(&payload) else {
                    self.stats.drop_malformed += 1;
                    return;
                };
                match self.state {
                    State::Listening => {
                        if offer.tpdu_size > self.cfg.tpdu_size.max(MAX_PAYLOAD as u32)
                            || FlowKind::from_code(offer.flow_code()).is_none()
                        {
                            self.enter_aborted(AbortReason::Refused, true);
                            return;
                        }
                        let agreed = self.agree(&offer);
                        self.params = Some(agreed);
                        self.state = State::Established;
                        self.events.push_back(Event::Connected);
                        self.queue_accept();
                    }
                    // The accept was lost: answer again with the same parameters.
                    _ if self.params.is_some_and(|p| p.isn == offer.isn) => self.queue_accept(),
                    _ => self.stats.drop_malformed += 1,
                }
            }
            TpduType::ConnConfirm => {}
            TpduType::Data => {
                if !matches!(self.state, State::Established | State::Closed) {
                    self.stats.drop_malformed += 1;
                    return;
                }
                let cookie = self.cookie;
                let Some(recv) = self.recv.as_mut() else {
                    return;
                };
                let before = recv.readable();
                let taken = recv.on_data(&h, payload, &mut self.stats);
                if recv.limits().send_acks {
                    let ack = recv.ack_for(&h, cookie, self.arrived);
                    let merge = recv.limits().merge_acks;
                    self.queue_ack(ack, merge);
                }
                if taken == Taken::Readable && before == 0 && !self.readable_signalled {
                    self.readable_signalled = true;
                    self.events.push_back(Event::Readable);
                }
                self.check_close_complete();
            }
            TpduType::Sync if matches!(self.state, State::Established | State::Closed) => {
                if !self.echo.allow(now, TransportConfig::MIN_SYNC_INTERVAL) {
                    self.stats.syncs_unanswered += 1;
                    return;
                }
                let echo = Header {
                    seq: h.seq,
                    tsval: now.micros_u32(),
                    tsecr: h.tsval,
                    ..self.header(TpduType::SyncEcho)
                };
                self.queue_ctrl(echo, Bytes::new(), TransmitKind::Control);
            }
            TpduType::Qos if matches!(self.state, State::Established | State::Closed) => {
                let rate = qos_rate_of(&h);
                let within = self.params.is_some_and(|p| {
                    rate > 0 && rate >= p.min_rate && (p.rate == 0 || rate <= p.rate)
                });
                let (accepted, new) = self.qos_rx.answer(h.seq, rate, within);
                if new {
                    if accepted {
                        self.qos_rate = rate;
                        self.qos_done = true;
                        self.qos_refused = false;
                        self.events.push_back(Event::QosChanged { rate });
                    } else {
                        self.qos_refused = true;
                        self.events.push_back(Event::QosRefused { rate });
                    }
                }
                let ack = Header {
                    seq: h.seq,
                    ack: h.ack,
                    aux: h.aux,
                    window: u16::from(accepted),
                    ..self.header(TpduType::QosAck)
                };
                self.queue_ctrl(ack, Bytes::new(), TransmitKind::Control);
            }
            TpduType::Close => {
                if let Some(recv) = self.recv.as_mut() {
                    recv.set_close(h.seq, h.msg, &mut self.stats);
                }
                if self.state == State::Closed {
                    let ack = self.header(TpduType::CloseAck);
                    self.queue_ctrl(ack, Bytes::new(), TransmitKind::Control);
                } else {
                    self.check_close_complete();
                }
            }
            _ => self.stats.drop_malformed += 1,
        }
    }

    fn agree(&self, offer: &ConnParams) -> ConnParams {
        let by_buf = (self.cfg.rcv_buf / offer.tpdu_size.max(1) as usize).max(1);
        let window = offer
            .window
            .min(self.cfg.window)
            .min(u32::try_from(by_buf).unwrap_or(u32::MAX))
            .max(1);
        ConnParams {
            window,
            tpdu_size: offer.tpdu_size,
            max_msg: offer.max_msg.min(self.cfg.max_msg),
            outstanding: offer.outstanding.min(self.cfg.outstanding),
            options: offer.options,
            rate: offer.rate,
            min_rate: offer.min_rate,
            rcv_buf: u32::try_from(self.cfg.rcv_buf).unwrap_or(u32::MAX),
            isn: offer.isn,
        }
    }

    fn queue_accept(&mut self) {
        let Some(p) = self.params else { return };
        self.set_recv_limits();
        let h = Header {
            window: p.window.min(u32::from(u16::MAX)) as u16,
            ..self.header(TpduType::ConnAccept)
        };
        self.queue_ctrl(
            h,
            Bytes::copy_from_slice(&p.to_bytes()),
            TransmitKind::Control,
        );
    }

    /// The receive half takes the agreed parameters (before any data arrived).
    fn set_recv_limits(&mut self) {
        let Some(p) = self.params else { return };
        let error_control = p.options & ConnParams::OPT_ERROR_CONTROL != 0;
        let flow = FlowKind::from_code(p.flow_code()).unwrap_or_default();
        let lim = RecvLimits {
            error_control,
            send_acks: error_control || flow.is_feedback(),
            merge_acks: flow != FlowKind::PacketPair,
            semantics: if p.options & ConnParams::OPT_STREAM != 0 {
                Semantics::Stream
            } else {
                Semantics::Message
            },
            tpdu_size: p.tpdu_size as usize,
            window: p.window,
            rcv_buf: self.cfg.rcv_buf.max(p.tpdu_size as usize),
            max_msg: p.max_msg,
            join: self.cfg.one_way,
        };
        if let Some(r) = self.recv.as_mut() {
            if r.readable() == 0 && r.buffered() == 0 {
                r.set_limits(lim, p.isn);
            }
        }
    }

    fn check_close_complete(&mut self) {
        if self.state != State::Established || self.peer_closed {
            return;
        }
        if self.recv.as_ref().is_some_and(|r| r.close_complete()) {
            self.peer_closed = true;
            self.state = State::Closed;
            let ack = self.header(TpduType::CloseAck);
            self.queue_ctrl(ack, Bytes::new(), TransmitKind::Control);
            self.events.push_back(Event::PeerClosed);
        }
    }

    // ---- output ------------------------------------------------------------------

    /// The next frame to put on the wire, if any may go now. Control frames and ACKs
    /// first, then retransmissions, then new data (seed 003: ACKs and retransmissions
    /// ahead of new data).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.probe(now);
        if let Some(t) = self.ctrl.pop_front() {
            return Some(t);
        }
        if !matches!(self.state, State::Established | State::CloseSent { .. }) {
            return None;
        }
        if self.pace_at.is_some_and(|t| now < t) {
            return None;
        }
        self.pace_at = None;
        let rto = self.rtt.rto();
        let cookie = self.cookie;
        let send = self.send.as_mut()?;
        if let Some(out) = send.poll_data(
            now,
            cookie,
            rto,
            &mut self.stats,
            &mut *self.flow,
            &mut self.pace_at,
        ) {
            let kind = match out.retx {
                Some(k) => TransmitKind::Retransmission(k),
                None => TransmitKind::Data,
            };
            if !self.cfg.error_control && self.want_writable && send.capacity() > 0 {
                self.want_writable = false;
                self.window_full = false;
                self.events.push_back(Event::Writable);
            }
            return Some(Transmit {
                header: out.header,
                payload: out.payload,
                kind,
            });
        }
        self.maybe_send_close(now);
        self.ctrl.pop_front()
    }

    /// Queue a SYNC if one is due (only while established: a closing VC's CLOSE and
    /// CLOSE-ACK time it).
    fn probe(&mut self, now: Instant) {
        if self.state != State::Established {
            return;
        }
        if let Some(seq) = self.sync.due(now) {
            let h = Header {
                seq,
                tsval: now.micros_u32(),
                ..self.header(TpduType::Sync)
            };
            self.stats.syncs_sent += 1;
            self.queue_ctrl(h, Bytes::new(), TransmitKind::Control);
        }
    }

    fn queue_qos(&mut self, seq: u32, rate: u64) {
        let h = Header {
            seq,
            ack: (rate >> 32) as u32,
            aux: rate as u32,
            ..self.header(TpduType::Qos)
        };
        self.queue_ctrl(h, Bytes::new(), TransmitKind::Control);
    }

    fn maybe_send_close(&mut self, now: Instant) {
        if !self.close_requested || self.state != State::Established {
            return;
        }
        let Some(send) = self.send.as_ref() else {
            return;
        };
        if !send.is_drained() {
            return;
        }
        let seq = super::seq::to_wire(send.end_seq());
        // The CLOSE's msg: messages started, so that a receiver without error
        // control can count whole messages lost at the tail.
        let h = Header {
            seq,
            msg: send.messages_started(),
            ..self.header(TpduType::Close)
        };
        self.queue_ctrl(h, Bytes::new(), TransmitKind::Control);
        if self.cfg.one_way {
            // No CLOSE-ACK can come back: the close is complete once the CLOSE goes
            // (the network's RELEASE, which follows it, ends the leaves' VCs anyway).
            self.state = State::Closed;
            self.events.push_back(Event::Closed);
            return;
        }
        self.state = State::CloseSent {
            attempts: 1,
            deadline: now + self.rtt.rto(),
        };
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Psb::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.pace_at;
        let mut take = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |y: Instant| y.min(x)));
            }
        };
        match self.state {
            State::Connecting { deadline, .. } | State::CloseSent { deadline, .. } => {
                take(Some(deadline))
            }
            _ => {}
        }
        if matches!(self.state, State::Established | State::CloseSent { .. }) {
            if let Some(s) = self.send.as_ref() {
                take(s.poll_timeout(self.rtt.head_check(), self.rtt.has_sample()));
            }
            take(self.qos_tx.pending.map(|p| p.deadline));
        }
        if self.state == State::Established {
            take(self.sync.deadline());
        }
        t
    }

    /// Timers fired: handshake and close retries, SMART's timeout and head check, pacing.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.pace_at.is_some_and(|t| now >= t) {
            self.pace_at = None;
        }
        match self.state {
            State::Connecting { attempts, deadline } if now >= deadline => {
                if attempts >= self.cfg.connect_attempts {
                    self.state = State::Aborted(AbortReason::Timeout);
                    self.ctrl.clear();
                    self.events.push_back(Event::ConnectFailed);
                    return;
                }
                self.rtt.on_timeout();
                self.state = State::Connecting {
                    attempts: attempts + 1,
                    deadline: now + self.rtt.rto(),
                };
                self.queue_conn_req();
                return;
            }
            State::CloseSent { attempts, deadline } if now >= deadline => {
                if attempts >= self.cfg.close_attempts {
                    self.enter_aborted(AbortReason::Timeout, true);
                    self.events.push_back(Event::Aborted(AbortReason::Timeout));
                    return;
                }
                self.rtt.on_timeout();
                let (seq, msg) = self.send.as_ref().map_or((0, 0), |s| {
                    (super::seq::to_wire(s.end_seq()), s.messages_started())
                });
                let h = Header {
                    seq,
                    msg,
                    ..self.header(TpduType::Close)
                };
                self.queue_ctrl(h, Bytes::new(), TransmitKind::Control);
                self.state = State::CloseSent {
                    attempts: attempts + 1,
                    deadline: now + self.rtt.rto(),
                };
            }
            _ => {}
        }
        if !matches!(self.state, State::Established | State::CloseSent { .. }) {
            return;
        }
        self.probe(now);
        if let Some(p) = self.qos_tx.pending.filter(|p| now >= p.deadline) {
            if p.attempts >= self.cfg.close_attempts {
                if let Some(QosOutcome::Refused { rate }) = self.qos_tx.give_up() {
                    self.qos_refused = true;
                    self.events.push_back(Event::QosRefused { rate });
                }
            } else {
                self.qos_tx.pending = Some(super::qos::Pending {
                    attempts: p.attempts + 1,
                    deadline: now + self.rtt.rto(),
                    ..p
                });
                self.queue_qos(p.seq, p.rate);
            }
        }
        let head_check = self.rtt.head_check();
        let has = self.rtt.has_sample();
        let rto = self.rtt.rto();
        if let Some(send) = self.send.as_mut() {
            if send.handle_timeout(now, rto, head_check, has, &mut self.stats, &mut *self.flow) {
                self.rtt.on_timeout();
                self.consecutive_timeouts += 1;
                if self.consecutive_timeouts >= self.cfg.max_timeouts {
                    self.enter_aborted(AbortReason::Timeout, true);
                }
            }
        }
    }

    // ---- application calls --------------------------------------------------------

    /// Queue message bytes; `end` closes the message (ignored on stream VCs).
    /// Returns how many bytes were taken: all, or a prefix when the buffer filled.
    pub fn send(&mut self, data: &[u8], end: bool) -> Result<usize, SendError> {
        self.check_send(data.len() as u64)?;
        let r = self
            .send
            .as_mut()
            .ok_or(SendError::NotSender)?
            .push(data, end);
        self.after_push(r)
    }

    /// Take the copies [`Psb::send`] makes from `copies` ([`CopyBuffers`]) rather
    /// than a fresh allocation each. A receiving PSB ignores it.
    pub fn lend_copy_buffers(&mut self, copies: std::sync::Arc<dyn super::CopyBuffers>) {
        if let Some(s) = self.send.as_mut() {
            s.lend_copy_buffers(copies);
        }
    }

    /// As [`Psb::send`], taking a `Bytes` without copying it.
    pub fn send_bytes(&mut self, data: &Bytes, end: bool) -> Result<usize, SendError> {
        self.check_send(data.len() as u64)?;
        let r = self
            .send
            .as_mut()
            .ok_or(SendError::NotSender)?
            .push_bytes(data, end);
        self.after_push(r)
    }

    fn check_send(&self, len: u64) -> Result<(), SendError> {
        if let State::Aborted(r) = self.state {
            return Err(SendError::Aborted(r));
        }
        if self.role != Role::Sender {
            return Err(SendError::NotSender);
        }
        if self.close_requested || matches!(self.state, State::Closed | State::CloseSent { .. }) {
            return Err(SendError::Closed);
        }
        let send = self.send.as_ref().ok_or(SendError::NotSender)?;
        let max = send.limits().max_msg;
        let so_far = send.open_message_len().unwrap_or(0);
        if self.cfg.semantics == Semantics::Message && so_far.saturating_add(len) > max {
            return Err(SendError::MessageTooLarge {
                size: so_far.saturating_add(len),
                max,
            });
        }
        Ok(())
    }

    fn after_push(&mut self, r: Result<usize, Full>) -> Result<usize, SendError> {
        match r {
            Ok(n) => Ok(n),
            Err(_) => {
                self.want_writable = true;
                self.window_full = true;
                if self.flow.over_rate() {
                    Err(SendError::OverRate)
                } else {
                    Err(SendError::WindowFull)
                }
            }
        }
    }

    /// Free bytes in the send buffer.
    pub fn send_capacity(&self) -> usize {
        self.send.as_ref().map_or(0, |s| s.capacity())
    }

    /// Bytes queued and not yet acknowledged (or, without error control, not yet sent).
    pub fn send_buffered(&self) -> usize {
        self.send.as_ref().map_or(0, |s| s.buffered())
    }

    /// The next chunk of received data, `Ok(None)` if none is ready now.
    pub fn recv_chunk(&mut self) -> Result<Option<Chunk>, RecvError> {
        if let State::Aborted(r) = self.state {
            return Err(RecvError::Aborted(r));
        }
        let recv = self.recv.as_mut().ok_or(RecvError::NotReceiver)?;
        let c = recv.pop_chunk();
        if let Some(c) = &c {
            self.stats.bytes_delivered += c.data.len() as u64;
            if c.end {
                self.stats.messages_delivered += 1;
            }
        }
        self.after_read();
        Ok(c)
    }

    /// Read stream bytes into `buf`; `Ok(0)` with [`Status::peer_closed`] is the end.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, RecvError> {
        if let State::Aborted(r) = self.state {
            return Err(RecvError::Aborted(r));
        }
        let recv = self.recv.as_mut().ok_or(RecvError::NotReceiver)?;
        let n = recv.read(buf);
        self.stats.bytes_delivered += n as u64;
        self.after_read();
        Ok(n)
    }

    fn after_read(&mut self) {
        let cookie = self.cookie;
        let Some(recv) = self.recv.as_mut() else {
            return;
        };
        if recv.readable() == 0 {
            self.readable_signalled = false;
        }
        if let Some(upd) = recv.window_update(cookie) {
            self.stats.acks_sent += 1;
            self.queue_ctrl(upd, Bytes::new(), TransmitKind::Ack);
        }
    }

    /// Whether control TPDUs (an ACK, a window update) wait to be sent: the host
    /// should poll for them now, not at the next arrival. A read that reopens a
    /// shut window queues one, and the sender, with nothing in flight, sends nothing
    /// that would make the host poll.
    pub fn has_control(&self) -> bool {
        !self.ctrl.is_empty()
    }

    /// Whether this receiver's advertised window bounds what its sender has in
    /// flight: a VC with error control, whose sender holds to the window (seed 000
    /// §6.2.1: "the receive rate determines the transmission rate"), unlike a
    /// feedback-only sender, which writes unacknowledged TPDUs off after a timeout.
    pub fn window_bounds_sender(&self) -> bool {
        self.recv
            .as_ref()
            .is_some_and(|r| r.limits().error_control && r.limits().send_acks)
    }

    /// The receive buffer's size in bytes (0 on a sending end).
    pub fn rcv_buf(&self) -> usize {
        self.recv.as_ref().map_or(0, |r| r.limits().rcv_buf)
    }

    /// Bytes ready for the application.
    pub fn readable(&self) -> usize {
        self.recv.as_ref().map_or(0, |r| r.readable())
    }

    /// Close the sending side in order: everything queued is still delivered.
    pub fn close(&mut self) {
        if self.role == Role::Receiver {
            // A receiver that closes before the end of data aborts the VC.
            if !self.peer_closed {
                self.abort();
            }
            return;
        }
        self.close_requested = true;
        if let Some(s) = self.send.as_mut() {
            s.finish_message();
        }
    }

    /// The direction a point-to-multipoint VC does not carry (`TransportConfig::
    /// one_way`): a leaf's sending VC and its root's receiving VC, which no switch
    /// cross-connects. Finished from the start and silently — nothing is ever sent
    /// on it; the sender's `send` finds it closed, the receiver's reader the end.
    pub fn shut(&mut self) {
        self.ctrl.clear();
        self.state = State::Closed;
        self.close_requested = true;
        if self.role == Role::Receiver {
            self.peer_closed = true;
        }
    }

    /// Signalling released the call normally (cause 16) from the peer's side, whose
    /// application releases only after every byte it sent was acknowledged: a
    /// receiver ends its stream here as if the peer's close had arrived (through a
    /// switch the network tears the VC down with the RELEASE, so a close still in
    /// flight may never come); what was received is still read, then the end. Only
    /// for an established receiver; anything else is left as it is.
    pub fn peer_released(&mut self) {
        if self.role != Role::Receiver || self.state != State::Established || self.peer_closed {
            return;
        }
        self.peer_closed = true;
        self.state = State::Closed;
        self.events.push_back(Event::PeerClosed);
    }

    /// Abort: drop everything and tell the peer.
    pub fn abort(&mut self) {
        if matches!(self.state, State::Closed) && self.role == Role::Sender {
            return;
        }
        self.enter_aborted(AbortReason::Local, true);
    }

    fn check_bounds(&self, bps: u64) -> Result<(), QosBoundsError> {
        let (min, max) = (self.cfg.min_rate, self.cfg.rate);
        if bps < min || (max != 0 && bps > max) {
            return Err(QosBoundsError {
                requested: bps,
                min,
                max,
            });
        }
        Ok(())
    }

    /// The upper bound of the VC's rate moves to `max` bit/s: the network reserved a
    /// new rate for it (a Q.2963.1 modification through sigd,
    /// docs/decisions/0019-qos-renegotiation-through-the-network.md). On the sender it bounds
    /// [`Psb::set_qos`] and [`Psb::set_rate`], and a shaped VC's send queue keeps its
    /// bound in time; on the receiver it bounds the QOS requests accepted. The rate in
    /// force does not change here (the sender's QOS does that). 0 is ignored.
    pub fn set_rate_bound(&mut self, max: u64) {
        if max == 0 {
            return;
        }
        if self.cfg.rate > 0 {
            let scaled = u128::from(max) * self.cfg.snd_buf as u128 / u128::from(self.cfg.rate);
            self.cfg.snd_buf = usize::try_from(scaled)
                .unwrap_or(usize::MAX)
                .max(self.cfg.tpdu_size as usize);
        }
        self.cfg.rate = max;
        if let Some(p) = self.params.as_mut() {
            p.rate = max;
        }
    }

    /// Change this end's sending rate at once, within the bounds agreed at setup,
    /// without telling the peer (a local adjustment of the shaper; the peer-confirmed
    /// change is [`Psb::set_qos`]).
    pub fn set_rate(&mut self, bps: u64) -> Result<(), QosBoundsError> {
        self.check_bounds(bps)?;
        self.apply_send_rate(bps);
        Ok(())
    }

    /// The shaper takes `bps`, and a shaped VC's send queue keeps the bound in time
    /// it was given at setup (`shaped_send_buffer`: bucket plus `delay` at the rate):
    /// its size in bytes follows the rate, never below one TPDU, so a lowered rate
    /// does not leave a blocking sender seconds of queue to wait behind.
    fn apply_send_rate(&mut self, bps: u64) {
        self.qos_rate = bps;
        self.flow.set_rate(bps);
        // A pacing timer armed at the old rate would hold the first TPDU at the new
        // rate too long; let the next poll ask the controller again.
        self.pace_at = None;
        self.qos_done = true;
        if self.cfg.flow == FlowKind::LeakyBucket && self.cfg.rate > 0 && bps > 0 {
            let scaled = u128::from(bps) * self.cfg.snd_buf as u128 / u128::from(self.cfg.rate);
            let bytes = usize::try_from(scaled)
                .unwrap_or(usize::MAX)
                .max(self.cfg.tpdu_size as usize);
            if let Some(send) = self.send.as_mut() {
                send.set_snd_buf(bytes);
            }
        }
    }

    /// Ask the peer for a new sending rate within the bounds agreed at setup (seed
    /// 003 `setqos`): a QOS TPDU goes out and the change is pending; the shaper takes
    /// the rate only once the peer accepts ([`Event::QosChanged`]), else
    /// [`Event::QosRefused`] and the rate stays. Returns the change's number.
    pub fn set_qos(&mut self, now: Instant, bps: u64) -> Result<u32, QosChangeError> {
        if self.role != Role::Sender {
            return Err(QosChangeError::NotSender);
        }
        if self.cfg.one_way {
            return Err(QosChangeError::OneWay);
        }
        if self.state != State::Established || self.close_requested {
            return Err(QosChangeError::NotEstablished);
        }
        if let Some(p) = self.qos_tx.pending {
            return Err(QosChangeError::Pending(p.rate));
        }
        self.check_bounds(bps)?;
        let seq = self.qos_tx.begin(bps, now + self.rtt.rto());
        self.qos_done = false;
        self.qos_refused = false;
        self.queue_qos(seq, bps);
        Ok(seq)
    }

    /// The rate in force, payload bit/s: the sender's shaper's, or on the receiver
    /// the last one the sender changed to (0: none agreed).
    pub fn qos_rate(&self) -> u64 {
        self.qos_rate
    }

    /// How the sender's last QoS change ended, if one did.
    pub fn qos_outcome(&self) -> Option<QosOutcome> {
        self.qos_tx.last
    }

    // ---- ABR (flow::abr) ------------------------------------------------------------

    /// A forward RM cell the sender's flow controller wants on the VC now (ABR, TM
    /// 4.0 source rule 3); only while data may flow. The I/O layer sends it as an RM
    /// frame (`wire::rm`) on this VC.
    pub fn poll_rm(&mut self, now: Instant) -> Option<RmCell> {
        if self.role != Role::Sender
            || !matches!(self.state, State::Established | State::CloseSent { .. })
        {
            return None;
        }
        self.flow.poll_rm(now)
    }

    /// A backward RM cell of this VC came back (ABR source rule 8): the sender's
    /// flow controller takes its explicit rate and congestion bits. A receiver has no
    /// use for one.
    pub fn handle_backward_rm(&mut self, now: Instant, cell: &RmCell) {
        if self.role == Role::Sender {
            self.flow.on_backward_rm(now, cell);
        }
    }

    // ---- observation --------------------------------------------------------------

    /// Whether this VC exchanges ACKs: its receiver sends them (error control or a
    /// feedback flow controller) and its sender waits for them. A VC that does not
    /// needs nothing from its peer promptly but its data; what else comes (a CLOSE,
    /// an OAM cell) may wait until the application, or the engine a little later,
    /// reads it.
    pub fn exchanges_acks(&self) -> bool {
        self.cfg.acks()
    }

    /// Seed 003's status flags.
    pub fn status(&self) -> Status {
        Status {
            connected: !matches!(self.state, State::Connecting { .. } | State::Listening),
            peer_closed: self.peer_closed,
            closed: self.state == State::Closed && self.role == Role::Sender,
            aborted: matches!(self.state, State::Aborted(_)),
            window_full: self.window_full,
            over_rate: self.flow.over_rate(),
            qos_pending: self.qos_tx.pending.is_some(),
            qos_done: self.qos_done,
            qos_refused: self.qos_refused,
        }
    }

    /// Whether the VC has finished, in order or not, and has nothing left to send.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, State::Closed | State::Aborted(_)) && self.ctrl.is_empty()
    }

    /// Whether this end sends.
    pub fn is_sender(&self) -> bool {
        self.role == Role::Sender
    }

    /// Counters.
    pub fn stats(&self) -> &PsbStats {
        &self.stats
    }

    /// The parameters agreed in the handshake.
    pub fn params(&self) -> Option<&ConnParams> {
        self.params.as_ref()
    }

    /// The RTT estimator.
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// The flow controller.
    pub fn flow(&self) -> &dyn FlowController {
        &*self.flow
    }

    /// The VC's capability.
    pub fn cookie(&self) -> u32 {
        self.cookie
    }

    /// TPDUs in flight (sender).
    pub fn in_flight(&self) -> u32 {
        self.send.as_ref().map_or(0, |s| s.in_flight())
    }

    /// Bytes held on the receive side (out of order plus ready).
    pub fn recv_buffered(&self) -> usize {
        self.recv.as_ref().map_or(0, |r| r.buffered())
    }
}

/// The rate a QOS or QOS-ACK carries: `ack` the high 32 bits, `aux` the low.
fn qos_rate_of(h: &Header) -> u64 {
    u64::from(h.ack) << 32 | u64::from(h.aux)
}

/// RTT from an echoed 32-bit microsecond timestamp; `None` if it is implausible, or
/// 0: nothing echoed (a window update answers no TPDU). As Linux ignores a zero
/// TSecr (RFC 7323 §3.2): taken as a stamp, it made a sample of the clock's whole
/// reading — a second or more — and the smoothed RTT, the RTO and the head check with
/// it. A TPDU stamped 0 by the clock's wrap (once in 72 minutes) goes unsampled.
fn rtt_from_echo(now: Instant, tsecr: u32) -> Option<std::time::Duration> {
    if tsecr == 0 {
        return None;
    }
    let d = now.micros_u32().wrapping_sub(tsecr);
    (d < 1 << 31).then(|| std::time::Duration::from_micros(u64::from(d).max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_echo_of_nothing_is_no_rtt_sample() {
        let now = Instant::from_nanos(5_000_000_000);
        assert_eq!(
            rtt_from_echo(now, 0),
            None,
            "a window update echoes nothing"
        );
        assert_eq!(
            rtt_from_echo(now, 5_000_000 - 1_500),
            Some(std::time::Duration::from_micros(1_500))
        );
        assert_eq!(rtt_from_echo(now, 5_000_000 + 10), None, "from the future");
    }
}
