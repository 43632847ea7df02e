//! `natm release CALL`: an administrator ends any call. Allowed to root and to the
//! user whose application holds the call (the uid SO_PEERCRED gave for the owning
//! connection), from any connection; anyone else gets a refusal naming the owner.
//! Both ends are released with the cause given, as if the owner had released it and
//! sigd had also told the owner (docs/sigd.md "Who may release a call").

use super::*;

/// Why an administrative release is refused, as the sentence the requester reads.
fn permission(requester: Option<Creds>, owner: Option<Creds>, call: u64) -> Result<(), String> {
    let Some(who) = requester else {
        return Err(format!(
            "permission denied: sigd could not read your credentials, so only the call's \
             owner may release call {call:016x} (from its own connection)"
        ));
    };
    if who.uid == 0 || owner.is_some_and(|o| o.uid == who.uid) {
        return Ok(());
    }
    Err(match owner {
        Some(o) => format!(
            "permission denied: call {call:016x} belongs to uid {}; only that user or root may release it",
            o.uid
        ),
        None => format!("permission denied: call {call:016x} has no owner yet; only root may release it"),
    })
}

impl Core {
    /// `AdminRelease`: check who asks, then release both ends with `c`.
    pub(super) fn admin_release(&mut self, t: AppId, req: u64, call: u64, c: u8) {
        let Some(owner) = self.calls.get(&call).map(|x| x.owner) else {
            return self.refuse(
                t,
                req,
                cause::INVALID_CALL_REF,
                format!("no call {call:016x} at this sigd (see `natm stat`)"),
            );
        };
        let creds = |a: AppId| self.apps.get(&a).and_then(|x| x.creds);
        let requester = creds(t);
        let owner_creds = owner.and_then(creds);
        // A connection may always end its own calls, as with `Release`.
        let own = owner == Some(t);
        if let (false, Err(why)) = (own, permission(requester, owner_creds, call)) {
            self.counters.admin_refusals += 1;
            if let Some(suppressed) = self.app_log() {
                info!(conn = %t, uid = requester.map(|r| r.uid), call, suppressed, "administrative release refused");
            }
            return self.refuse(t, req, cause::NOT_AUTHORIZED, why);
        }
        self.tell(t, Message::Ack { req, id: call });
        let by = match requester {
            Some(r) => format!(
                "released by an administrator (uid {}, pid {})",
                r.uid, r.pid
            ),
            None => "released by an administrator".to_owned(),
        };
        if let Some(suppressed) = self.app_log() {
            info!(call, cause = c, %by, suppressed, "administrative release");
        }
        self.counters.admin_releases += 1;
        self.end_call(call, c, &by, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(uid: u32) -> Option<Creds> {
        Some(Creds {
            pid: 1,
            uid,
            gid: uid,
        })
    }

    #[test]
    fn root_and_the_owning_user_may_release_others_may_not() {
        assert!(permission(c(0), c(1000), 7).is_ok());
        assert!(permission(c(1000), c(1000), 7).is_ok());
        assert!(permission(c(0), None, 7).is_ok());
        let e = permission(c(1001), c(1000), 0x7b).unwrap_err();
        assert!(
            e.starts_with("permission denied: call 000000000000007b belongs to uid 1000"),
            "{e}"
        );
        assert!(permission(c(1001), None, 7).is_err());
        assert!(permission(None, c(1000), 7).is_err());
    }
}
