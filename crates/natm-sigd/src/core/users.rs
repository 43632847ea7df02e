//! Local users (issue 16, docs/SECURITY.md "Local users"): what one uid may hold and
//! do — connections, listeners, registrations and calls per user and per
//! connection, SAPs owned by the uid that bound them, the `[[access]]` policy — and
//! the closing of idle connections. Root and sigd's own user are bound only by the
//! per-connection limits and the totals.

use super::*;
use crate::access::Denied;

/// A uid no real user has: what a connection whose credentials could not be read
/// owns things as (never privileged, never equal to a real user's).
const UNKNOWN_UID: u32 = u32::MAX;

/// The cause sigd gives a connection it cannot serve for want of resources.
pub(crate) fn cause_resources() -> u8 {
    cause::RESOURCES
}

impl Core {
    /// The driver refused a connection before the core saw it (sigd is out of file
    /// descriptors): counted with the core's refusals.
    pub fn count_refused_connection(&mut self) {
        self.counters.connections_refused += 1;
    }

    pub(super) fn creds_of(&self, t: AppId) -> Option<Creds> {
        self.apps.get(&t).and_then(|a| a.creds)
    }

    /// The uid a connection acts as.
    pub(super) fn uid_of(&self, t: AppId) -> u32 {
        self.creds_of(t).map_or(UNKNOWN_UID, |c| c.uid)
    }

    /// Whether the connection's user may do anything (root, or sigd's own user).
    pub(super) fn privileged(&self, t: AppId) -> bool {
        self.cfg.access.privileged(self.creds_of(t))
    }

    /// Connections `uid` holds.
    pub(super) fn connections_of_user(&self, uid: u32) -> usize {
        self.apps
            .values()
            .filter(|a| a.creds.map_or(UNKNOWN_UID, |c| c.uid) == uid)
            .count()
    }

    /// Why a new connection of `creds` is refused, if it is: the total, or its
    /// user's share.
    pub(super) fn connection_refusal(&self, creds: Option<Creds>) -> Option<String> {
        if self.apps.len() >= self.cfg.max_connections {
            return Some(format!(
                "sigd serves at most {} applications at once ([limits] connections)",
                self.cfg.max_connections
            ));
        }
        if self.cfg.access.privileged(creds) {
            return None;
        }
        // Users together hold at most `connections - root_reserve`, whatever root
        // holds itself: root always has the reserve to come in with.
        let reserve = self.cfg.user_limits.root_reserve;
        let users = self
            .apps
            .values()
            .filter(|a| !self.cfg.access.privileged(a.creds))
            .count();
        if users + reserve >= self.cfg.max_connections {
            return Some(format!(
                "sigd keeps its last {reserve} of {} connections for root ([limits] root_reserve)",
                self.cfg.max_connections
            ));
        }
        let uid = creds.map_or(UNKNOWN_UID, |c| c.uid);
        let max = self.cfg.user_limits.connections_per_user;
        (self.connections_of_user(uid) >= max).then(|| {
            format!(
                "uid {uid} holds its share of {max} sigd connections ([limits] connections_per_user); \
                 close some (idle ones are closed after [limits] idle_close_ms)"
            )
        })
    }

    /// Why `t` may not place or take one more call, if it may not (its user's share).
    pub(super) fn call_limit(&self, t: AppId) -> Option<String> {
        if self.privileged(t) {
            return None;
        }
        let uid = self.uid_of(t);
        let max = self.cfg.user_limits.calls_per_user;
        let held = self
            .calls
            .values()
            .filter(|c| c.owner.is_some_and(|o| self.uid_of(o) == uid))
            .count();
        (held >= max)
            .then(|| format!("uid {uid} holds its share of {max} calls ([limits] calls_per_user)"))
    }

    /// Why `t` may not ask for `qos`, if it may not (the `[[access]]` rule's
    /// `max_rate`).
    pub(super) fn rate_refusal(&self, t: AppId, q: &Qos) -> Option<String> {
        let max = self.cfg.access.max_rate(self.creds_of(t))?;
        let cap = self.res.capacity_bps();
        let want = qos::demand(q, true, cap)
            .target_bps
            .max(qos::demand(q, false, cap).target_bps);
        (want > max).then(|| {
            format!(
                "permission denied: uid {} may reserve at most {max} bit/s each way \
                 ([[access]] max_rate); this QoS asks {want} bit/s",
                self.uid_of(t)
            )
        })
    }

    /// The guaranteed bit/s `q` asks for, the larger direction's target (what
    /// counts against a user's share).
    pub(super) fn share_demand(&self, q: &Qos) -> u64 {
        let cap = self.res.capacity_bps();
        qos::demand(q, true, cap)
            .target_bps
            .max(qos::demand(q, false, cap).target_bps)
    }

    /// Why `t`'s user may not hold `want` guaranteed bit/s more, if it may not: its
    /// calls (but `except`) already hold the rest of `[limits] bandwidth_per_user`.
    /// `max_rate` bounds one call; this bounds them all, so that one user's many
    /// calls cannot take the whole link.
    pub(super) fn share_refusal(&self, t: AppId, want: u64, except: Option<u64>) -> Option<String> {
        if want == 0 || self.privileged(t) {
            return None;
        }
        let uid = self.uid_of(t);
        let held: u64 = self
            .calls
            .values()
            .filter(|c| Some(c.id) != except && c.owner.is_some_and(|o| self.uid_of(o) == uid))
            .map(|c| c.grant.out_bps.max(c.grant.in_bps))
            .sum();
        let max = self.cfg.bandwidth_per_user_bps;
        (held.saturating_add(want) > max).then(|| {
            format!(
                "uid {uid}'s calls hold {held} bit/s of guaranteed bandwidth and may hold at most \
                 {max} ([limits] bandwidth_per_user); this asks {want} bit/s more"
            )
        })
    }

    /// Why `t` may not bind `sap` (on `addr`), if it may not: the policy, another
    /// user's hold on the SAP (squatting), or the limits.
    pub(super) fn bind_refusal(&self, t: AppId, sap: &str) -> Option<(u8, Denied)> {
        let creds = self.creds_of(t);
        if let Err(e) = self.cfg.access.may_bind(creds, sap) {
            return Some((cause::NOT_AUTHORIZED, e));
        }
        let uid = self.uid_of(t);
        let privileged = self.privileged(t);
        // seed 004 §5.3 names a listener by its SAP alone: whoever holds a SAP gets
        // its calls, so a SAP held by one user is closed to the others — root
        // included: a root service that binds after a user got there first must hear
        // so, not be acknowledged and never see a call.
        if let Some(l) = self
            .listeners
            .values()
            .find(|l| l.sap == sap && self.uid_of(l.owner) != uid)
        {
            return Some((
                cause::NOT_AUTHORIZED,
                format!(
                    "permission denied: SAP \"{sap}\" is held by uid {}; only that user may \
                     listen on it while it does",
                    self.uid_of(l.owner)
                ),
            ));
        }
        let lim = self.cfg.user_limits;
        let mine = self.apps.get(&t).map_or(0, |a| a.listeners);
        if mine >= lim.listeners_per_connection {
            return Some((
                cause::RESOURCES,
                format!(
                    "this connection holds its limit of {} listeners ([limits] listeners_per_connection)",
                    lim.listeners_per_connection
                ),
            ));
        }
        if !privileged {
            let users: usize = self
                .apps
                .values()
                .filter(|a| a.creds.map_or(UNKNOWN_UID, |c| c.uid) == uid)
                .map(|a| a.listeners)
                .sum();
            if users >= lim.listeners_per_user {
                return Some((
                    cause::RESOURCES,
                    format!(
                        "uid {uid} holds its limit of {} listeners ([limits] listeners_per_user)",
                        lim.listeners_per_user
                    ),
                ));
            }
        }
        None
    }

    /// `Register`: the policy (a user registers only what `[[access]]` gives it),
    /// another user's hold on the address, and the connection's limit.
    pub(super) fn register_address(&mut self, t: AppId, req: u64, address: &str) {
        let a = match AtmAddr::parse_with_hosts(address, &self.cfg.hosts) {
            Ok(a) if !matches!(a, AtmAddr::Pvc(_)) => a,
            Ok(_) => {
                return self.refuse(
                    t,
                    req,
                    cause::INVALID_NUMBER,
                    format!("\"{address}\" is a PVC; register an NSAP or E.164 address"),
                )
            }
            Err(e) => return self.refuse(t, req, cause::INVALID_NUMBER, e.render(address)),
        };
        if let Err(e) = self
            .cfg
            .access
            .may_register(self.creds_of(t), &a, &self.cfg.addresses)
        {
            self.counters.access_refusals += 1;
            if let Some(suppressed) = self.app_log() {
                info!(address = %a, conn = %t, uid = self.uid_of(t), suppressed, "registration refused");
            }
            return self.refuse(t, req, cause::NOT_AUTHORIZED, e);
        }
        if let Some(holder) = self.dir.registered_by(&a) {
            let holder = AppId(holder);
            if holder != t && self.uid_of(holder) != self.uid_of(t) && !self.privileged(t) {
                self.counters.access_refusals += 1;
                return self.refuse(
                    t,
                    req,
                    cause::NOT_AUTHORIZED,
                    format!(
                        "permission denied: {a} is registered by uid {}",
                        self.uid_of(holder)
                    ),
                );
            }
        }
        let max = self.cfg.user_limits.registrations_per_connection;
        let held = self.dir.registered_count(t.0);
        if held >= max && self.dir.registered_by(&a) != Some(t.0) {
            self.counters.access_refusals += 1;
            return self.refuse(
                t,
                req,
                cause::RESOURCES,
                format!(
                    "this connection holds its limit of {max} registered addresses ([limits] registrations_per_connection)"
                ),
            );
        }
        self.dir.register(a, t.0);
        if let Some(suppressed) = self.app_log() {
            info!(address = %a, conn = %t, suppressed, "address registered");
        }
        self.tell(t, Message::Ack { req, id: 0 });
    }

    /// When the idle connections are next looked at: the earliest instant a
    /// connection has been silent for `[limits] idle_close_ms`.
    pub(super) fn idle_deadline(&self) -> Option<Instant> {
        let after = self.cfg.user_limits.idle_close?;
        self.apps.values().map(|a| a.last_active + after).min()
    }

    /// Close the connections that hold nothing and have been silent for
    /// `[limits] idle_close_ms`: they would otherwise keep their slot for ever. One
    /// that holds a call, listener or address counts as active now, and is looked
    /// at again a period later: a connection is closed at least that long after it
    /// last held anything or spoke.
    pub(super) fn close_idle(&mut self, now: Instant) {
        let Some(after) = self.cfg.user_limits.idle_close else {
            return;
        };
        let mut due: Vec<AppId> = self
            .apps
            .iter()
            .filter(|(_, a)| a.last_active + after <= now)
            .map(|(t, _)| *t)
            .collect();
        if due.is_empty() {
            return;
        }
        due.sort_unstable();
        let owners: std::collections::HashSet<AppId> =
            self.calls.values().filter_map(|c| c.owner).collect();
        for t in due {
            let busy = owners.contains(&t)
                || self.apps.get(&t).is_some_and(|a| a.listeners > 0)
                || self.dir.registered_count(t.0) > 0;
            if busy {
                if let Some(a) = self.apps.get_mut(&t) {
                    a.last_active = now;
                }
                continue;
            }
            self.counters.idle_closed += 1;
            if let Some(suppressed) = self.app_log() {
                debug!(conn = %t, suppressed, "closing an idle connection");
            }
            self.tell(
                t,
                Message::Error {
                    cause: cause::NORMAL,
                    detail: format!(
                        "closing this connection: it held no call, listener or address for {} ms ([limits] idle_close_ms)",
                        after.as_millis()
                    ),
                },
            );
            self.out.push_back(Output::CloseApp(t));
            // Closed as far as the core is concerned: it may not act any more.
            self.apps.remove(&t);
        }
    }
}
