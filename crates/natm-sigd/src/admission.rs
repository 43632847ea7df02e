//! The resource manager: admission control for guaranteed VCs (seed 000 §5.2 names it;
//! the paper never finished it — natm does).
//!
//! Two resources are accounted each way of the host's link: bandwidth (the configured
//! link rate) and CPU (a share of the host's cores, spent at a cost per TPDU measured
//! when sigd starts by timing the real PSB send path). A guaranteed VC reserves its
//! rate and the CPU that rate costs in TPDUs per second. The cost per TPDU is a number
//! here; measuring it (which needs a clock, a socket and the transport) is the
//! daemon's start-up job (`daemon::measure`). A request gives a target and
//! a minimum (the FORE API); the grant is the best rate between them that fits, and
//! a call that does not fit even at its minimum is refused with cause 37 (user cell
//! rate unavailable, the link) or 47 (resources unavailable, the CPU), with a sentence
//! that says how much is free. Reservations return on release.

use natm_proto::wire::qos::grant;

/// A direction of the host's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// From this host.
    Out,
    /// To this host.
    In,
}

/// What one direction of a VC asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Demand {
    /// Desired payload rate, bit/s (0: nothing to reserve).
    pub target_bps: u64,
    /// Least acceptable, bit/s (≤ target).
    pub min_bps: u64,
    /// TPDU payload size, bytes (sets the CPU cost).
    pub tpdu_size: u32,
}

/// What was reserved for one call end; give it back with [`Resources::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Grant {
    /// Granted out-going rate, bit/s.
    pub out_bps: u64,
    /// Granted in-coming rate, bit/s.
    pub in_bps: u64,
    /// CPU reserved, nanoseconds per second (summed over both ways).
    pub cpu_ns_per_s: u64,
}

/// A refusal: the UNI cause and a sentence for the application.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cause {cause}: {detail}")]
pub struct Refusal {
    /// 37 (link rate) or 47 (CPU) from admission; other causes when a call is
    /// refused for another reason.
    pub cause: u8,
    /// "80 Mbit/s requested, 35 Mbit/s free on the link out of this host (100 Mbit/s)".
    pub detail: String,
}

impl Refusal {
    /// A refusal with cause `cause` and the sentence `detail`.
    pub fn new(cause: u8, detail: impl Into<String>) -> Refusal {
        Refusal {
            cause,
            detail: detail.into(),
        }
    }
}

/// The host's resources and what is reserved of them.
#[derive(Debug, Clone)]
pub struct Resources {
    capacity_bps: u64,
    reserved_out: u64,
    reserved_in: u64,
    tpdu_cost_ns: u64,
    cpu_budget_ns_per_s: u64,
    cpu_reserved: u64,
}

fn mbps(bps: u64) -> String {
    let m = bps as f64 / 1e6;
    if m >= 10.0 || m == m.round() {
        format!("{m:.0} Mbit/s")
    } else {
        format!("{m:.2} Mbit/s")
    }
}

fn tpdus_per_s(bps: u64, tpdu: u32) -> u64 {
    let bits = u64::from(tpdu.max(1)) * 8;
    bps.div_ceil(bits)
}

impl Resources {
    /// A link of `capacity_bps` each way, TPDUs costing `tpdu_cost_ns`, and
    /// `cpu_share` of `cores` cores for guaranteed VCs.
    pub fn new(capacity_bps: u64, tpdu_cost_ns: u64, cpu_share: f64, cores: usize) -> Resources {
        Resources {
            capacity_bps,
            reserved_out: 0,
            reserved_in: 0,
            tpdu_cost_ns: tpdu_cost_ns.max(1),
            cpu_budget_ns_per_s: (1e9 * cpu_share * cores.max(1) as f64) as u64,
            cpu_reserved: 0,
        }
    }

    fn cpu_of(&self, bps: u64, tpdu: u32) -> u64 {
        tpdus_per_s(bps, tpdu).saturating_mul(self.tpdu_cost_ns)
    }

    /// Free rate each way.
    pub fn free_bps(&self, way: Way) -> u64 {
        let used = match way {
            Way::Out => self.reserved_out,
            Way::In => self.reserved_in,
        };
        self.capacity_bps.saturating_sub(used)
    }

    /// Free CPU, nanoseconds per second.
    pub fn free_cpu(&self) -> u64 {
        self.cpu_budget_ns_per_s.saturating_sub(self.cpu_reserved)
    }

    /// The best rate in `[min, target]` for one direction that fits `free_bps` and
    /// `free_cpu`; `Err` names the resource short.
    fn fit(&self, d: &Demand, way: Way, free_cpu: u64) -> Result<(u64, u64), Refusal> {
        if d.target_bps == 0 {
            return Ok((0, 0));
        }
        let min = d.min_bps.min(d.target_bps);
        let free = self.free_bps(way);
        let where_ = match way {
            Way::Out => "out of",
            Way::In => "into",
        };
        if min > free {
            return Err(Refusal {
                cause: 37,
                detail: format!(
                    "{} requested (at least {}), {} free on the link {where_} this host ({} total)",
                    mbps(d.target_bps),
                    mbps(min),
                    mbps(free),
                    mbps(self.capacity_bps)
                ),
            });
        }
        // The most the CPU can carry at this TPDU size.
        let cpu_bps = (free_cpu / self.tpdu_cost_ns).saturating_mul(u64::from(d.tpdu_size) * 8);
        if min > cpu_bps {
            return Err(Refusal {
                cause: 47,
                detail: format!(
                    "{} requested (at least {}), but the CPU left for guaranteed VCs carries only {} at {} bytes per TPDU ({} ns per TPDU, {:.0}% of a core free)",
                    mbps(d.target_bps),
                    mbps(min),
                    mbps(cpu_bps),
                    d.tpdu_size,
                    self.tpdu_cost_ns,
                    free_cpu as f64 / 1e7
                ),
            });
        }
        // The most between the minimum and the target that both fit: the rule a
        // switch applies too (`natm_proto::wire::qos::grant`).
        let rate = grant(d.target_bps, min, free.min(cpu_bps)).unwrap_or(min);
        Ok((rate, self.cpu_of(rate, d.tpdu_size)))
    }

    /// Reserve for a call end that sends `out` and receives `inn`; all or nothing.
    pub fn admit(&mut self, out: &Demand, inn: &Demand) -> Result<Grant, Refusal> {
        let (o, o_cpu) = self.fit(out, Way::Out, self.free_cpu())?;
        let (i, i_cpu) = self.fit(inn, Way::In, self.free_cpu().saturating_sub(o_cpu))?;
        self.reserved_out += o;
        self.reserved_in += i;
        self.cpu_reserved += o_cpu + i_cpu;
        Ok(Grant {
            out_bps: o,
            in_bps: i,
            cpu_ns_per_s: o_cpu + i_cpu,
        })
    }

    /// Give a grant back.
    pub fn release(&mut self, g: &Grant) {
        self.reserved_out = self.reserved_out.saturating_sub(g.out_bps);
        self.reserved_in = self.reserved_in.saturating_sub(g.in_bps);
        self.cpu_reserved = self.cpu_reserved.saturating_sub(g.cpu_ns_per_s);
    }

    /// Link rate each way.
    pub fn capacity_bps(&self) -> u64 {
        self.capacity_bps
    }

    /// Cost of one TPDU, ns.
    pub fn tpdu_cost_ns(&self) -> u64 {
        self.tpdu_cost_ns
    }

    /// CPU budget, ns per second.
    pub fn cpu_budget(&self) -> u64 {
        self.cpu_budget_ns_per_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(target: u64, min: u64) -> Demand {
        Demand {
            target_bps: target,
            min_bps: min,
            tpdu_size: 4096,
        }
    }

    #[test]
    fn grants_the_best_that_fits_and_returns_it_on_release() {
        let mut r = Resources::new(100_000_000, 1, 1.0, 1);
        let g1 = r.admit(&d(60_000_000, 60_000_000), &d(0, 0)).unwrap();
        assert_eq!(g1.out_bps, 60_000_000);
        // 80 wanted, 20 acceptable: 40 is what is left.
        let g2 = r.admit(&d(80_000_000, 20_000_000), &d(0, 0)).unwrap();
        assert_eq!(g2.out_bps, 40_000_000);
        let e = r.admit(&d(10_000_000, 10_000_000), &d(0, 0)).unwrap_err();
        assert_eq!(e.cause, 37);
        assert!(e.detail.contains("0 Mbit/s free"), "{}", e.detail);
        r.release(&g2);
        assert_eq!(r.free_bps(Way::Out), 40_000_000);
        // The in-direction is separate.
        assert_eq!(
            r.admit(&d(0, 0), &d(90_000_000, 90_000_000))
                .unwrap()
                .in_bps,
            90_000_000
        );
    }

    #[test]
    fn cpu_runs_out_with_cause_47() {
        // 100 µs per TPDU, one core at 50%: 5,000 TPDUs/s, 164 Mbit/s at 4 KiB.
        let mut r = Resources::new(10_000_000_000, 100_000, 0.5, 1);
        let e = r
            .admit(&d(1_000_000_000, 500_000_000), &d(0, 0))
            .unwrap_err();
        assert_eq!(e.cause, 47);
        assert!(e.detail.contains("CPU"), "{}", e.detail);
        let g = r.admit(&d(1_000_000_000, 100_000_000), &d(0, 0)).unwrap();
        assert!(g.out_bps < 170_000_000 && g.out_bps > 100_000_000);
    }
}
