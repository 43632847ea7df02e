//! The latest traffic counters of each call, as its application's engine reports
//! them (`Message::Counters`): sigd counts no traffic itself (the data path never
//! passes through it), so `natm stat` shows what the owners last said. Bounded: only
//! the connection holding a call may report for it, and each call keeps one entry,
//! which goes with the call.

use std::collections::HashMap;

use natm_proto::time::Instant;
use natm_proto::wire::ipc::VcCounters;

use super::*;

/// The last report of each call that has reported.
#[derive(Debug, Default)]
pub(super) struct Traffic {
    latest: HashMap<u64, (Instant, VcCounters)>,
}

impl Traffic {
    /// The last report of `call` and when it came.
    pub(super) fn get(&self, call: u64) -> Option<&(Instant, VcCounters)> {
        self.latest.get(&call)
    }

    /// How many calls have an entry.
    pub(super) fn len(&self) -> usize {
        self.latest.len()
    }
}

impl Core {
    /// How many calls have counters on record (never more than the calls held, plus
    /// the latest report's).
    pub fn traffic_entries(&self) -> usize {
        self.traffic.len()
    }

    /// An application's report of one of its calls' counters: kept (replacing the
    /// previous one) if the call is active and this connection's, else refused with
    /// cause 81 (a request with `req` 0 hears nothing either way).
    pub(super) fn counters_report(&mut self, t: AppId, req: u64, call: u64, c: VcCounters) {
        if !self.owned(t, call, Some(CallState::Active)) {
            self.counters.counters_refused += 1;
            return self.refuse(
                t,
                req,
                cause::INVALID_CALL_REF,
                format!("no active call {call:016x} on this connection to report counters for"),
            );
        }
        self.traffic.latest.insert(call, (self.now, c));
        // Entries of calls that ended go when the table outgrows the call table: it
        // never holds more than one entry per call sigd holds, plus this one.
        if self.traffic.latest.len() > self.calls.len() {
            let calls = &self.calls;
            self.traffic.latest.retain(|id, _| calls.contains_key(id));
        }
        self.tell(t, Message::Ack { req, id: call });
    }
}
