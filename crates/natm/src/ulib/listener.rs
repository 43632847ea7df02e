//! Listening endpoints: callers' connections queue on a [`Listener`] until accepted,
//! each announced by sigd as an [`IncomingCall`]; pre-authorised links wait in an
//! [`AutoLinks`] pool.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::connection::{random_cookie, Connection};
use super::sigd::{Binding, Session};
use super::wait::Wait;
use super::{Error, Resolved, WouldBlock};
use crate::engine::{Engine, Link, ListenerShared};
use crate::sync::{Level, OrderedMutex};
use crate::wire::qos::Qos;

/// A listening endpoint: callers' connections queue here until accepted.
#[derive(Debug)]
pub struct Listener {
    eng: Arc<Engine>,
    kind: ListenerKind,
    /// The directions its QoS marks `none`, `(tx, rx)`, for the connections it
    /// accepts in direct mode (through sigd each call's QoS says).
    unused: (bool, bool),
}

#[derive(Debug)]
enum ListenerKind {
    /// Direct mode: a UDP socket of our own.
    Direct(Arc<ListenerShared>),
    /// Through sigd: calls are offered over the IPC session the binding is under
    /// (bound again on a restarted sigd: `sigd::Binding`).
    Signalled {
        host: super::Host,
        binding: Arc<Binding>,
    },
}

/// A pre-authorised listener's pre-opened data links, by the endpoint sigd was given:
/// those sigd still holds and those of answered calls not yet taken. Their number is
/// the backlog; `accept` tops it up when it falls to half. With a socket per VC end
/// each endpoint is one link's; on one port per host (`Ports::PerHost`) every link has
/// the port's address, and sigd is given that address once per link.
#[derive(Debug)]
pub(crate) struct AutoLinks {
    links: OrderedMutex<std::collections::HashMap<SocketAddr, Vec<Link>>>,
    backlog: usize,
}

impl AutoLinks {
    pub(crate) fn new(links: Vec<Link>, backlog: usize) -> Result<Arc<AutoLinks>, Error> {
        let mut m = std::collections::HashMap::<SocketAddr, Vec<Link>>::new();
        for l in links {
            m.entry(l.local_addr().map_err(Error::Io)?)
                .or_default()
                .push(l);
        }
        Ok(Arc::new(AutoLinks {
            links: OrderedMutex::new(Level::AutoLinks, m),
            backlog,
        }))
    }

    /// Each link's endpoint, once per link.
    pub(crate) fn endpoints(&self) -> Vec<SocketAddr> {
        self.links
            .lock()
            .iter()
            .flat_map(|(a, ls)| std::iter::repeat_n(*a, ls.len()))
            .collect()
    }

    fn held(&self) -> usize {
        self.links.lock().values().map(Vec::len).sum()
    }

    fn take(&self, data: &SocketAddr) -> Option<Link> {
        let mut links = self.links.lock();
        let ls = links.get_mut(data)?;
        let l = ls.pop();
        if ls.is_empty() {
            links.remove(data);
        }
        l
    }

    /// Open sockets up to the backlog once half are used, and hand them to sigd
    /// (best effort: a failure leaves the backlog shorter until the next call).
    fn refill(&self, host: &super::Host, session: &Session, listener: u64) {
        // In batches of up to 8 sockets: one message for several calls, and no burst
        // of socket creation long enough to show in the callers' setup times.
        let batch = (self.backlog / 2).clamp(1, 8);
        let held = self.held();
        if held + batch > self.backlog {
            return;
        }
        let want = self.backlog - held;
        let mut fresh = Vec::with_capacity(want);
        for _ in 0..want {
            let Ok(l) = host.new_data_link() else { break };
            let Ok(a) = l.local_addr() else { continue };
            fresh.push((a, l));
        }
        if fresh.is_empty() {
            return;
        }
        let data: Vec<SocketAddr> = fresh.iter().map(|(a, _)| *a).collect();
        let mut links = self.links.lock();
        for (a, l) in fresh {
            links.entry(a).or_default().push(l);
        }
        drop(links);
        session.notify(|req| crate::wire::ipc::Message::Endpoints {
            req,
            listener,
            data,
        });
    }
}

/// A call offered to a listener through sigd: who calls and with what QoS, to accept
/// or reject before any connection exists (seed 004 §5.3). Dropping it unanswered
/// rejects it (cause 21).
pub struct IncomingCall {
    /// The caller's ATM address.
    pub caller: String,
    /// The QoS the caller asks for, from this side (tx = what this side sends).
    pub qos: Qos,
    call: u64,
    host: super::Host,
    session: Arc<Session>,
    answered: bool,
}

/// The call as its user sees it; the host and session are engine state, not the call's.
impl std::fmt::Debug for IncomingCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncomingCall")
            .field("call", &self.call)
            .field("caller", &self.caller)
            .field("qos", &self.qos)
            .field("answered", &self.answered)
            .finish_non_exhaustive()
    }
}

impl IncomingCall {
    /// Accept: sigd admits the call on this host too, then both ends open the data path.
    pub fn accept(self) -> Result<Connection, Error> {
        self.answer(None)
    }

    /// Accept a guaranteed call at lower rates than [`IncomingCall::qos`] offers (a
    /// counter-offer, issue 33): this side sends at `tx_bps` and receives at `rx_bps`
    /// (bit/s; 0 for a direction the call does not use), each between the caller's
    /// minimum (`min_pcr`) and the offer. The caller's connection, its sigd and every
    /// switch on the path keep only that reserved. Outside those bounds sigd refuses
    /// with cause 73 and releases the call.
    pub fn accept_at(self, tx_bps: u64, rx_bps: u64) -> Result<Connection, Error> {
        self.answer(Some((tx_bps, rx_bps)))
    }

    fn answer(mut self, lower: Option<(u64, u64)>) -> Result<Connection, Error> {
        self.answered = true;
        let link = self.host.data_link()?;
        let data = link.local_addr().map_err(Error::Io)?;
        let call = self.call;
        let req = self.session.send_request(|req| match lower {
            None => crate::wire::ipc::Message::Accept { req, call, data },
            Some((tx_bps, rx_bps)) => crate::wire::ipc::Message::AcceptAt {
                req,
                call,
                data,
                tx_bps,
                rx_bps,
            },
        })?;
        self.host.open_spare_link();
        self.session.answer(req)?;
        self.host.await_connected(&self.session, call, link, false)
    }

    /// Reject with a UNI cause (21 "call rejected" is the usual one); the caller's
    /// `connect` fails with [`Error::Refused`] carrying it.
    pub fn reject(mut self, cause: u8) -> Result<(), Error> {
        self.answered = true;
        let call = self.call;
        self.session.forget(call);
        self.session
            .request(|req| crate::wire::ipc::Message::Reject { req, call, cause })
            .map(|_| ())
    }
}

impl Drop for IncomingCall {
    fn drop(&mut self) {
        if !self.answered {
            let call = self.call;
            self.session.forget(call);
            self.session
                .notify(|req| crate::wire::ipc::Message::Reject {
                    req,
                    call,
                    cause: 21,
                });
        }
    }
}

impl Listener {
    pub(super) fn bind(eng: Arc<Engine>, addr: SocketAddr, r: Resolved) -> Result<Listener, Error> {
        let link = Link::bind_listener(&eng, addr).map_err(Error::Io)?;
        let token = eng.token();
        let seed = u64::from(random_cookie()) << 32 | u64::from(random_cookie());
        let shared = Arc::new(ListenerShared::new(
            token,
            link,
            r.cfg.clone(),
            r.cfg,
            r.level,
            r.weight,
            seed,
        ));
        shared.link.watch(&eng, token).map_err(Error::Io)?;
        eng.listeners.lock().insert(token, shared.clone());
        Ok(Listener {
            eng,
            kind: ListenerKind::Direct(shared),
            unused: r.unused,
        })
    }

    pub(super) fn signalled(host: super::Host, binding: Arc<Binding>) -> Listener {
        Listener {
            eng: host.eng.clone(),
            kind: ListenerKind::Signalled { host, binding },
            unused: (false, false),
        }
    }

    /// The address callers connect to (direct mode; a listener through sigd is reached
    /// by the host's ATM address and the SAP).
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        match &self.kind {
            ListenerKind::Direct(shared) => shared.link.local_addr().map_err(Error::Io),
            ListenerKind::Signalled { .. } => Err(Error::NeedsSigd(
                "a listener through sigd has no socket address: callers use the host's ATM address and the SAP",
            )),
        }
    }

    /// The next call offered through sigd, before any connection exists: look at the
    /// caller and the QoS, then [`IncomingCall::accept`] or [`IncomingCall::reject`].
    /// [`Wait::Block`] waits until one comes (or sigd goes away); none in time is
    /// [`Error::TimedOut`] ([`Wait::No`]: [`Error::WouldBlock`]). A pre-authorised
    /// listener ([`super::Accept::Auto`]) is offered only the calls that do not fit
    /// its QoS; [`Listener::accept`] returns the others.
    pub fn next_call(&self, wait: impl Into<Wait>) -> Result<IncomingCall, Error> {
        let wait = wait.into();
        let timeout = wait.timeout();
        self.next_call_within(timeout)
            .map_err(|e| would_block_if(wait, e))
    }

    fn next_call_within(&self, timeout: Option<Duration>) -> Result<IncomingCall, Error> {
        match &self.kind {
            ListenerKind::Direct(_) => Err(Error::NeedsSigd(
                "direct mode cannot show a call before it connects: bind a SAP through sigd",
            )),
            ListenerKind::Signalled { host, binding } => {
                let deadline = timeout.map(|t| std::time::Instant::now() + t);
                let (session, id) = binding.current(deadline)?;
                let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
                let o = session.next_offer(id, left)?;
                session.watch_call(o.call);
                Ok(IncomingCall {
                    caller: o.caller,
                    qos: o.qos,
                    call: o.call,
                    host: host.clone(),
                    session,
                    answered: false,
                })
            }
        }
    }

    /// The next caller, waiting as `wait` says (through sigd: accept whoever calls).
    /// None in time is [`Error::TimedOut`] ([`Wait::No`]: [`Error::WouldBlock`]).
    pub fn accept(&self, wait: impl Into<Wait>) -> Result<Connection, Error> {
        let wait = wait.into();
        self.accept_within(wait.timeout())
            .map_err(|e| would_block_if(wait, e))
    }

    fn accept_within(&self, timeout: Option<Duration>) -> Result<Connection, Error> {
        let shared = match &self.kind {
            ListenerKind::Direct(s) => s,
            ListenerKind::Signalled { host, binding } => match &binding.auto {
                None => return self.next_call_within(timeout)?.accept(),
                Some(links) => {
                    let deadline = timeout.map(|t| std::time::Instant::now() + t);
                    let (session, id) = binding.current(deadline)?;
                    let left =
                        deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
                    return Self::accept_auto(host, &session, id, links, left);
                }
            },
        };
        let until = timeout.map(|t| std::time::Instant::now() + t);
        let mut q = shared.queue.lock();
        loop {
            if let Some(c) = q.pop_front() {
                drop(q);
                c.set_unused(self.unused);
                return Ok(Connection::from_conn(self.eng.clone(), c));
            }
            let wait = match until {
                Some(u) => {
                    let left = u.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(Error::TimedOut);
                    }
                    left
                }
                None => Duration::from_secs(1),
            };
            shared.queue_cv.wait_for(&mut q, wait);
        }
    }

    /// A pre-authorised listener's next call: one sigd answered already (open its data
    /// path on the socket it took, give the backlog a socket back), or one offered
    /// because it does not fit (accept it as [`IncomingCall::accept`] does).
    fn accept_auto(
        host: &super::Host,
        session: &Arc<Session>,
        id: u64,
        links: &Arc<AutoLinks>,
        timeout: Option<Duration>,
    ) -> Result<Connection, Error> {
        let a = match session.next_for_listener(id, timeout)? {
            super::sigd::NextCall::Accepted(a) => a,
            super::sigd::NextCall::Offered(o) => {
                session.watch_call(o.call);
                return IncomingCall {
                    caller: o.caller,
                    qos: o.qos,
                    call: o.call,
                    host: host.clone(),
                    session: session.clone(),
                    answered: false,
                }
                .accept();
            }
        };
        let Some(link) = links.take(&a.data) else {
            // Not a socket this listener gave: end the call rather than guess.
            let call = a.call;
            session.forget(call);
            session.notify(|req| crate::wire::ipc::Message::Release {
                req,
                call,
                cause: 41,
            });
            return Err(Error::SigdGone);
        };
        let conn = host.open_signalled(session, a.call, link, a.connected, false);
        links.refill(host, session, id);
        conn
    }

    /// Connection requests refused because the accept backlog was full (direct mode).
    pub fn backlog_drops(&self) -> u64 {
        match &self.kind {
            ListenerKind::Direct(s) => s.counters.backlog_full.load(Ordering::Relaxed),
            ListenerKind::Signalled { .. } => 0,
        }
    }

    /// Whether this listener takes no more calls for good: its sigd restarted and
    /// refused to bind it again (someone else bound the SAP meanwhile), or no sigd
    /// came back within 10 minutes. `accept` then fails with that error every time.
    /// A listener through sigd is otherwise bound again by itself after a restart.
    pub fn is_unbound(&self) -> bool {
        match &self.kind {
            ListenerKind::Direct(_) => false,
            ListenerKind::Signalled { binding, .. } => binding.is_lost(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        match &self.kind {
            ListenerKind::Direct(shared) => {
                let _ = shared.link.unwatch(&self.eng);
                self.eng.listeners.lock().remove(&shared.token);
                shared.close(&self.eng);
            }
            ListenerKind::Signalled { binding, .. } => {
                let (session, listener) = binding.bound();
                // Calls sigd answered for a pre-authorised listener and nobody took
                // end now (cause 41), as a TCP listen queue's do when it closes.
                for call in session.close_listener(listener) {
                    session.notify(|req| crate::wire::ipc::Message::Release {
                        req,
                        call,
                        cause: 41,
                    });
                }
                session.notify(|req| crate::wire::ipc::Message::Unbind { req, listener });
            }
        }
    }
}

/// A wait of [`Wait::No`] that found nothing says so as a non-blocking call does.
fn would_block_if(wait: Wait, e: Error) -> Error {
    match (wait, e) {
        (Wait::No, Error::TimedOut) => Error::WouldBlock(WouldBlock::Empty),
        (_, e) => e,
    }
}
