//! Applications' IPC connections and their requests (seed 004 §4: sigd answers every
//! request at once, with `Ack` or `Refused`, before any asynchronous confirmation).

use natm_proto::wire::ipc::clip;
use tracing::warn;

use super::*;

impl Core {
    /// An application connected, with its credentials if the socket gave them. One
    /// over `[limits] connections` is told why and closed.
    pub fn app_connected(&mut self, now: Instant, app: AppId, creds: Option<Creds>) {
        self.tick(now);
        if let Some(why) = self.connection_refusal(creds) {
            // Counted, logged at debug only: a local flood must not fill the log.
            self.counters.connections_refused += 1;
            if let Some(suppressed) = self.remote_log(super::ratelog::Event::AppRefused) {
                debug!(conn = %app, ?creds, %why, suppressed, "application connection refused");
            }
            // Not recorded: the Error and the close go to it directly.
            self.out.push_back(Output::ToApp(
                app,
                Message::Error {
                    cause: cause::RESOURCES,
                    detail: why,
                },
            ));
            self.out.push_back(Output::CloseApp(app));
            return;
        }
        if let Some(suppressed) = self.app_log() {
            debug!(conn = %app, ?creds, suppressed, "application connected");
        }
        self.counters.app_connections += 1;
        self.apps.insert(
            app,
            App {
                creds,
                last_active: self.now,
                listeners: 0,
            },
        );
    }

    /// An IPC message from an application.
    pub fn handle_app(&mut self, now: Instant, app: AppId, m: Message) {
        self.tick(now);
        let Some(a) = self.apps.get_mut(&app) else {
            return;
        };
        a.last_active = now;
        // A release-type request with tag 0 wants no answer (ulib's releases from
        // `Drop`, where nobody waits): its `Ack` or `Refused` would only wake the
        // application for nothing, once per call at each end.
        self.quiet = matches!(
            m,
            Message::Release { req: 0, .. }
                | Message::Reject { req: 0, .. }
                | Message::Unbind { req: 0, .. }
                | Message::Endpoints { req: 0, .. }
                | Message::Counters { req: 0, .. }
        );
        self.request(app, m);
        self.quiet = false;
    }

    /// The application's byte stream is not IPC: it is told why and closed (its calls
    /// are released when the close is reported).
    pub fn app_malformed(&mut self, now: Instant, app: AppId, e: &IpcError) {
        self.tick(now);
        self.counters.malformed_ipc += 1;
        if let Some(suppressed) = self.remote_log(super::ratelog::Event::Malformed) {
            warn!(conn = %app, error = %e, suppressed, "malformed IPC: closing that connection");
        }
        self.tell(
            app,
            Message::Error {
                cause: e.cause(),
                detail: clip(&format!("{e}; closing this connection")).to_owned(),
            },
        );
        self.out.push_back(Output::CloseApp(app));
    }

    /// The application is gone (closed, crashed, or dropped by the driver): release
    /// its calls, drop its listeners (re-offering their waiting calls) and forget its
    /// registered addresses (seed 001 §4.5: abnormal-termination cleanup).
    ///
    //= seed 000 §4: "The signaling entity establishes connections on behalf of user
    //= applications and tears down connections either when requested by an
    //= application or in the event the application crashes."
    pub fn app_closed(&mut self, now: Instant, app: AppId) {
        self.tick(now);
        let Some(a) = self.apps.remove(&app) else {
            return;
        };
        let mut calls: Vec<u64> = self
            .calls
            .values()
            .filter(|c| c.owner == Some(app))
            .map(|c| c.id)
            .collect();
        calls.sort_unstable();
        let mut ls: Vec<u64> = self
            .listeners
            .values()
            .filter(|l| l.owner == app)
            .map(|l| l.id)
            .collect();
        ls.sort_unstable();
        if !calls.is_empty() || !ls.is_empty() {
            self.counters.app_deaths_cleaned += 1;
            if let Some(suppressed) = self.app_log() {
                info!(
                    conn = %app,
                    pid = a.creds.map(|c| c.pid),
                    calls = calls.len(),
                    listeners = ls.len(),
                    suppressed,
                    "application gone: releasing its calls"
                );
            }
        }
        for id in calls {
            self.end_call(
                id,
                cause::TEMPORARY_FAILURE,
                "the peer application exited without closing (its sigd connection closed)",
                false,
            );
        }
        for l in ls {
            self.remove_listener(l);
        }
        self.dir.unregister_owner(app.0);
    }

    /// A line about something a local application did may be written (one token
    /// bucket per kind, `ratelog`): `Some(suppressed)`.
    pub(super) fn app_log(&mut self) -> Option<u64> {
        self.remote_log(super::ratelog::Event::App)
    }

    pub(super) fn refuse(&mut self, t: AppId, req: u64, cause: u8, detail: String) {
        if let Some(suppressed) = self.remote_log(super::ratelog::Event::AppRefused) {
            let detail = super::ratelog::untrusted(&detail);
            debug!(conn = %t, req, cause, %detail, suppressed, "request refused");
        }
        self.tell(
            t,
            Message::Refused {
                req,
                cause,
                detail: clip(&detail).to_owned(),
            },
        );
    }

    fn request(&mut self, t: AppId, m: Message) {
        match m {
            Message::Connect {
                req,
                called,
                qos,
                data,
            } => self.connect(t, req, &called, qos, data, false),
            Message::ConnectMultipoint {
                req,
                called,
                qos,
                data,
            } => self.connect(t, req, &called, qos, data, true),
            Message::AddParty { req, call, called } => self.add_party(t, req, call, &called),
            Message::DropParty {
                req,
                call,
                party,
                cause,
            } => self.drop_party(t, req, call, party, cause),
            Message::Bind { req, sap, qos } => self.bind_sap(t, req, &sap, qos, None),
            Message::BindAuto {
                req,
                sap,
                qos,
                data,
            } => self.bind_sap(t, req, &sap, qos, Some(data)),
            Message::Endpoints {
                req,
                listener,
                data,
            } => self.add_endpoints(t, req, listener, data),
            Message::Unbind { req, listener } => match self.listeners.get(&listener) {
                Some(l) if l.owner == t => {
                    self.remove_listener(listener);
                    self.tell(t, Message::Ack { req, id: listener });
                }
                _ => self.refuse(
                    t,
                    req,
                    cause::INVALID_CALL_REF,
                    "no such listener on this connection".into(),
                ),
            },
            Message::Accept { req, call, data } => self.accept_call(t, req, call, data, None),
            Message::AcceptAt {
                req,
                call,
                data,
                tx_bps,
                rx_bps,
            } => self.accept_call(t, req, call, data, Some((tx_bps, rx_bps))),
            Message::Reject {
                req,
                call,
                cause: c,
            } => {
                if !self.owned(t, call, Some(CallState::Offered)) {
                    return self.refuse(
                        t,
                        req,
                        cause::INVALID_CALL_REF,
                        "no call waiting for an answer with that id on this connection".into(),
                    );
                }
                self.tell(t, Message::Ack { req, id: call });
                self.end_call(call, c, "rejected by the called application", false);
            }
            Message::Release {
                req,
                call,
                cause: c,
            } => {
                if !self.owned(t, call, None) {
                    return self.refuse(
                        t,
                        req,
                        cause::INVALID_CALL_REF,
                        "no call with that id on this connection".into(),
                    );
                }
                self.tell(t, Message::Ack { req, id: call });
                let why = if c == cause::NORMAL {
                    "closed by the peer application"
                } else {
                    "released by the peer application"
                };
                self.end_call(call, c, why, false);
            }
            Message::Register { req, address } => self.register_address(t, req, &address),
            Message::Modify { req, call, qos } => self.modify_request(t, req, call, qos),
            Message::Stat { req } => {
                let json = self.stat_page(t, 0);
                self.tell(t, Message::StatReply { req, json });
            }
            Message::StatPage { req, offset } => {
                let json = self.stat_page(t, offset);
                self.tell(t, Message::StatReply { req, json });
            }
            Message::Counters {
                req,
                call,
                counters,
            } => self.counters_report(t, req, call, *counters),
            Message::AdminRelease {
                req,
                call,
                cause: c,
            } => self.admin_release(t, req, call, c),
            Message::Reclaim {
                req,
                call,
                data,
                path,
            } => self.reclaim(t, req, call, data, path),
            other => {
                // An answer-type message sent to sigd is a protocol error.
                self.counters.malformed_ipc += 1;
                self.tell(
                    t,
                    Message::Error {
                        cause: cause::WRONG_STATE,
                        detail: format!(
                            "message type {:#04x} goes from sigd to applications, not back; closing this connection",
                            other.type_octet()
                        ),
                    },
                );
                self.out.push_back(Output::CloseApp(t));
            }
        }
    }

    /// Whether `call` belongs to `t` (and is in `state`, if given): every request
    /// naming an id is checked against the connection that owns it.
    pub(super) fn owned(&self, t: AppId, call: u64, state: Option<CallState>) -> bool {
        self.calls
            .get(&call)
            .is_some_and(|c| c.owner == Some(t) && state.is_none_or(|s| c.state == s))
    }

    /// An application's data endpoint, with an unspecified IP filled in.
    pub(super) fn data_endpoint(&self, mut data: SocketAddr) -> SocketAddr {
        if data.ip().is_unspecified() {
            data.set_ip(self.cfg.data_ip);
        }
        data
    }
}
