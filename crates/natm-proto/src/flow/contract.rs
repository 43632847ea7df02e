//! The traffic contract of a VC with a reservation, held by the host whatever flow
//! control the application picked (issue 34).
//!
//! A guaranteed (CBR or VBR) VC was admitted by sigd at its PCR (VBR: SCR, with PCR
//! and MBS): that is a contract, and the host keeps it. [`Contracted`] wraps the flow
//! controller the application chose (none, window, packet-pair or the leaky bucket)
//! with the contract's shaper, and a TPDU may go at the *later* of the two permits:
//! `flow=none` means no feedback, not no contract.
//!
//! seed 000 §2: "Guaranteed-performance service ensures that an application conforms
//! to pre-specified leaky-bucket parameters"; §5.3.4: "The transport layer shapes
//! guaranteed-performance traffic with a leaky bucket"; §5.4, step 2: the send task
//! "attaches a transport header to TPDU's marked as eligible by the flow control
//! protocol". Departure: in seed 000 the leaky bucket *is* a guaranteed VC's flow
//! control, so a TPDU is eligible when that one controller says so; natm lets the application pick feedback flow control on a
//! guaranteed VC too (`cbr:pcr=…,flow=window`), so the contract's shaper is a layer of
//! its own under whatever was picked, and a TPDU is eligible only when both agree.
//!
//! The shaper is a dual token bucket in payload bytes, the byte form of the dual GCRA
//! of specs §3.1 (the switch's policer, `natm_switch::upc`): a peak bucket at the PCR
//! and, for VBR, a sustained bucket at the SCR whose depth is the MBS. Rates are
//! payload bit/s like every rate in natm; the switch raises them by the TPDU header and
//! AAL5 overhead when it polices the cells.

use super::{AckSample, FlowController, LeakyBucket, Permit};
use crate::time::Instant;
use crate::wire::rm::RmCell;

/// The traffic contract of one sending direction, in payload bit/s and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contract {
    /// Peak rate (CBR's only rate), payload bit/s; `None`: no peak test.
    pub pcr: Option<u64>,
    /// Sustainable rate (VBR), payload bit/s.
    pub scr: Option<u64>,
    /// The burst tolerated at the contract's rate, payload bytes: VBR's MBS (at the
    /// SCR), or a CBR VC's `bucket=` (at the PCR). `None`: the leaky bucket's default
    /// depth ([`LeakyBucket::default_depth`]), which is what the switch's policer
    /// tolerates beyond its CDVT.
    pub burst: Option<u64>,
}

impl Contract {
    /// A CBR contract at `pcr` payload bit/s with the default burst.
    pub fn cbr(pcr: u64) -> Contract {
        Contract {
            pcr: Some(pcr),
            scr: None,
            burst: None,
        }
    }

    /// A VBR contract: `pcr`, `scr` payload bit/s and `mbs` payload bytes of burst at
    /// the SCR.
    pub fn vbr(pcr: u64, scr: u64, mbs: u64) -> Contract {
        Contract {
            pcr: Some(pcr),
            scr: Some(scr),
            burst: Some(mbs),
        }
    }

    /// The rate the VC is reserved at: the SCR for VBR, else the PCR.
    pub fn reserved(&self) -> Option<u64> {
        self.scr.or(self.pcr)
    }
}

/// A flow controller held to a [`Contract`]: the permit is the later of the contract
/// shaper's and the wrapped controller's, and everything sent is charged to both.
#[derive(Debug)]
pub struct Contracted {
    /// The peak bucket (PCR), then the sustained one (SCR/MBS).
    peak: Option<LeakyBucket>,
    sustained: Option<LeakyBucket>,
    inner: Box<dyn FlowController>,
}

impl Contracted {
    /// `inner` held to `contract`; TPDUs of `tpdu_size` payload bytes size the
    /// default bursts.
    pub fn new(contract: Contract, tpdu_size: u32, inner: Box<dyn FlowController>) -> Self {
        let default = |rate| LeakyBucket::default_depth(rate, tpdu_size);
        // A burst given in the contract belongs to its reserved rate: MBS to the SCR,
        // a CBR bucket to the PCR. The peak of a VBR contract gets the default
        // tolerance, as the switch's PCR test does.
        let peak = contract.pcr.filter(|&r| r > 0).map(|r| {
            let depth = match contract.scr {
                Some(_) => default(r),
                None => contract.burst.unwrap_or_else(|| default(r)),
            };
            LeakyBucket::new(r, depth)
        });
        let sustained = contract
            .scr
            .filter(|&r| r > 0)
            .map(|r| LeakyBucket::new(r, contract.burst.unwrap_or_else(|| default(r))));
        Contracted {
            peak,
            sustained,
            inner,
        }
    }

    fn buckets(&mut self) -> impl Iterator<Item = &mut LeakyBucket> {
        self.peak.iter_mut().chain(self.sustained.iter_mut())
    }

    /// The controller the application chose.
    pub fn inner(&self) -> &dyn FlowController {
        &*self.inner
    }
}

/// `inner` held to `contract` if there is one, else `inner` itself.
pub fn enforce(
    contract: Option<Contract>,
    tpdu_size: u32,
    inner: Box<dyn FlowController>,
) -> Box<dyn FlowController> {
    match contract {
        Some(c) if c.reserved().is_some_and(|r| r > 0) => {
            Box::new(Contracted::new(c, tpdu_size, inner))
        }
        _ => inner,
    }
}

impl FlowController for Contracted {
    fn poll_send(&mut self, now: Instant, in_flight: u32, bytes: usize) -> Permit {
        let mut at = match self.inner.poll_send(now, in_flight, bytes) {
            // Waiting for an ACK: asking the buckets would mark the VC over rate.
            Permit::Blocked => return Permit::Blocked,
            Permit::Now => now,
            Permit::At(t) => t,
        };
        // A packet train's later TPDUs go without asking (the PSB sends them back to
        // back with the first), so the first waits for tokens for all of them.
        let need = bytes.saturating_mul(self.inner.train_len().max(1) as usize);
        for b in self.buckets() {
            // seed 000 §5.3.4: the shaper works out "the earliest time that the next
            // TPDU can be sent" from the tokens that arrived since the last; §5.4: a
            // TPDU goes only once "marked as eligible" — here by the contract too.
            if let Permit::At(t) = b.poll_send(now, in_flight, need) {
                at = at.max(t);
            }
        }
        if at <= now {
            Permit::Now
        } else {
            Permit::At(at)
        }
    }

    fn on_sent(&mut self, now: Instant, bytes: usize, retransmission: bool) {
        for b in self.buckets() {
            b.on_sent(now, bytes, retransmission);
        }
        self.inner.on_sent(now, bytes, retransmission);
    }

    fn on_ack(&mut self, sample: &AckSample) {
        self.inner.on_ack(sample);
    }

    fn on_loss(&mut self, now: Instant, in_flight: u32, next_seq: u64) {
        self.inner.on_loss(now, in_flight, next_seq);
    }

    fn on_timeout(&mut self, now: Instant, in_flight: u32) {
        self.inner.on_timeout(now, in_flight);
    }

    fn wants_pair(&self) -> bool {
        self.inner.wants_pair()
    }

    fn train_len(&self) -> u32 {
        self.inner.train_len()
    }

    fn window(&self) -> Option<f64> {
        self.inner.window()
    }

    fn rate_bps(&self) -> Option<f64> {
        self.inner.rate_bps()
    }

    /// Over rate when the contract holds the VC back as well as when the chosen
    /// controller says so (seed 003's flag: the application offers more than its
    /// contract).
    fn over_rate(&self) -> bool {
        self.peak.as_ref().is_some_and(|b| b.over_rate())
            || self.sustained.as_ref().is_some_and(|b| b.over_rate())
            || self.inner.over_rate()
    }

    /// The rate in force changes within the bounds agreed at setup (seed 003
    /// `set_qos`): the contract follows it — the PCR of a CBR VC, the SCR of a VBR
    /// one — so the host never sends above the rate the peer accepted either.
    fn set_rate(&mut self, bps: u64) {
        if let Some(b) = self.sustained.as_mut().or(self.peak.as_mut()) {
            b.set_rate(bps);
        }
        self.inner.set_rate(bps);
    }

    fn set_window_limit(&mut self, tpdus: u32) {
        self.inner.set_window_limit(tpdus);
    }

    fn poll_rm(&mut self, now: Instant) -> Option<RmCell> {
        self.inner.poll_rm(now)
    }

    fn on_backward_rm(&mut self, now: Instant, cell: &RmCell) {
        self.inner.on_backward_rm(now, cell);
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::NoFlow;
    use std::time::Duration;

    /// Drive `f` with a backlog of `n` TPDUs of `bytes`; the release times in ns.
    fn releases(f: &mut dyn FlowController, n: usize, bytes: usize) -> Vec<u64> {
        let mut now = Instant::ZERO;
        let mut out = Vec::new();
        while out.len() < n {
            match f.poll_send(now, 0, bytes) {
                Permit::Now => {
                    f.on_sent(now, bytes, false);
                    out.push(now.as_nanos());
                }
                Permit::At(t) => now = t,
                Permit::Blocked => panic!("no feedback here"),
            }
        }
        out
    }

    #[test]
    fn no_flow_control_still_keeps_the_peak_rate() {
        // 8 Mbit/s = 1 B/µs, burst 4 KiB: after the burst, one 1 KiB TPDU per 1024 µs.
        let c = Contract {
            burst: Some(4096),
            ..Contract::cbr(8_000_000)
        };
        let mut f = enforce(Some(c), 1024, Box::new(NoFlow));
        let t = releases(&mut *f, 20, 1024);
        assert!(t[..4].iter().all(|&x| x == 0), "{t:?}");
        for w in t[4..].windows(2) {
            assert_eq!(w[1] - w[0], 1_024_000, "{t:?}");
        }
        assert_eq!(f.name(), "none");
    }

    #[test]
    fn vbr_bursts_mbs_at_the_pcr_then_sustains_the_scr() {
        // PCR 8 Mbit/s (1 B/µs), SCR 1 Mbit/s, MBS 8 KiB, 1 KiB TPDUs (peak depth 4 KiB).
        let mut f = enforce(
            Some(Contract::vbr(8_000_000, 1_000_000, 8192)),
            1024,
            Box::new(NoFlow),
        );
        let t = releases(&mut *f, 40, 1024);
        // The first 4 at once (the peak bucket), then at the PCR while MBS lasts…
        assert_eq!(&t[..4], &[0, 0, 0, 0]);
        assert_eq!(t[4], 1_024_000);
        // …then one per 8.192 ms (1 KiB at the SCR).
        let late = &t[20..];
        for w in late.windows(2) {
            assert_eq!(w[1] - w[0], 8_192_000, "{t:?}");
        }
    }

    /// A controller that always sends in pairs and never holds anything back.
    #[derive(Debug)]
    struct Pairs;
    impl FlowController for Pairs {
        fn poll_send(&mut self, _: Instant, _: u32, _: usize) -> Permit {
            Permit::Now
        }
        fn on_sent(&mut self, _: Instant, _: usize, _: bool) {}
        fn on_ack(&mut self, _: &AckSample) {}
        fn on_loss(&mut self, _: Instant, _: u32, _: u64) {}
        fn on_timeout(&mut self, _: Instant, _: u32) {}
        fn wants_pair(&self) -> bool {
            true
        }
        fn name(&self) -> &'static str {
            "pairs"
        }
    }

    #[test]
    fn a_packet_pair_waits_for_tokens_for_both() {
        let c = Contract {
            burst: Some(3072),
            ..Contract::cbr(8_000_000)
        };
        let mut f = enforce(Some(c), 1024, Box::new(Pairs));
        assert!(f.wants_pair());
        let now = Instant::ZERO;
        assert_eq!(f.poll_send(now, 0, 1024), Permit::Now);
        f.on_sent(now, 1024, false);
        f.on_sent(now, 1024, false); // the pair's second, unasked
                                     // 1 KiB left: the next pair needs 2 KiB, 1024 µs more at 1 B/µs.
        assert_eq!(
            f.poll_send(now, 2, 1024),
            Permit::At(now + Duration::from_micros(1024))
        );
        assert!(f.over_rate());
    }

    #[test]
    fn the_contract_follows_the_rate_in_force() {
        let mut f = enforce(Some(Contract::cbr(8_000_000)), 1024, Box::new(NoFlow));
        f.set_rate(4_000_000);
        let t = releases(&mut *f, 40, 1024);
        // Default depth 4 TPDUs; then 1 KiB per 2.048 ms at 4 Mbit/s.
        assert_eq!(t[39] - t[38], 2_048_000);
        // No contract, no wrapper.
        assert_eq!(
            enforce(None, 1024, Box::new(NoFlow)).poll_send(Instant::ZERO, 0, 1 << 20),
            Permit::Now
        );
    }
}
