//! The task scheduler of seed 000 §5.1: tasks are procedure calls
//! `task(vc, max_work) -> work_done` (one unit of work = one TPDU), chosen by a
//! multi-level weighted round robin.
//!
//! "We give the highest priority to guaranteed-performance connections, with a weight
//! corresponding to their bandwidth allocation ... Reliable connections get an
//! intermediate priority and a unit weight. Finally, best-effort connections get the
//! lowest priority. Best-effort tasks are handled only when no higher-priority tasks
//! await service. Within each service class, tasks are serviced in round-robin order."
//!
//! This is a pure data structure (no threads, no clock): the engine's driver thread
//! owns one and calls [`Scheduler::run`]; application threads ask
//! [`Scheduler::pending_above`] to decide whether they may send inline.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;

/// The priority level of a VC's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Guaranteed-performance VCs: served first, weighted by reserved bandwidth.
    Guaranteed = 0,
    /// Reliable VCs: intermediate priority, unit weight.
    Reliable = 1,
    /// Best-effort VCs: only when nothing else waits.
    BestEffort = 2,
}

impl Level {
    /// All levels, highest priority first.
    pub const ALL: [Level; 3] = [Level::Guaranteed, Level::Reliable, Level::BestEffort];
}

/// A runnable task: its VC key and its weight (units of work per round).
#[derive(Debug, Clone, Copy)]
struct Task<K> {
    key: K,
    weight: u32,
}

/// The multi-level weighted round-robin scheduler.
#[derive(Debug)]
pub struct Scheduler<K: Copy + Eq + Hash> {
    levels: [VecDeque<Task<K>>; 3],
    queued: HashSet<K>,
}

impl<K: Copy + Eq + Hash> Default for Scheduler<K> {
    fn default() -> Self {
        Scheduler {
            levels: [VecDeque::new(), VecDeque::new(), VecDeque::new()],
            queued: HashSet::new(),
        }
    }
}

impl<K: Copy + Eq + Hash> Scheduler<K> {
    /// An empty scheduler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Make `key`'s task runnable at `level` with `weight` units per round (an interface
    /// procedure's job: quick, no work done here). A task already queued stays where
    /// it is.
    pub fn schedule(&mut self, key: K, level: Level, weight: u32) {
        if self.queued.insert(key) {
            self.levels[level as usize].push_back(Task {
                key,
                weight: weight.max(1),
            });
        }
    }

    /// Whether a task waits at a level above `level`.
    pub fn pending_above(&self, level: Level) -> bool {
        self.levels[..level as usize].iter().any(|q| !q.is_empty())
    }

    /// Whether any task waits.
    pub fn is_idle(&self) -> bool {
        self.queued.is_empty()
    }

    /// Tasks waiting at each level.
    pub fn lengths(&self) -> [usize; 3] {
        [
            self.levels[0].len(),
            self.levels[1].len(),
            self.levels[2].len(),
        ]
    }

    /// Run one round: every task of the highest non-empty level once, with up to its
    /// weight in units; lower levels run only when every higher level is empty. A task
    /// that used its whole quota has more to do and goes to the back of its level; one
    /// that did less is finished and leaves the queue. Returns the work done.
    pub fn run(&mut self, mut task: impl FnMut(K, u32) -> u32) -> u64 {
        let Some(level) = self.levels.iter().position(|q| !q.is_empty()) else {
            return 0;
        };
        let mut done = 0u64;
        let n = self.levels[level].len();
        for _ in 0..n {
            let Some(t) = self.levels[level].pop_front() else {
                break;
            };
            let work = task(t.key, t.weight);
            done += u64::from(work);
            if work >= t.weight {
                self.levels[level].push_back(t);
            } else {
                self.queued.remove(&t.key);
            }
        }
        done
    }

    /// Forget `key` (its VC closed).
    pub fn remove(&mut self, key: K) {
        if self.queued.remove(&key) {
            for q in &mut self.levels {
                q.retain(|t| t.key != key);
            }
        }
    }
}

/// Weight of a guaranteed VC: proportional to its reserved rate, in units of 1 Mbit/s
/// (at least 1), so a 20 Mbit/s VC gets twice the turns of a 10 Mbit/s one.
pub fn guaranteed_weight(rate_bps: u64) -> u32 {
    u32::try_from(rate_bps / 1_000_000)
        .unwrap_or(u32::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_levels_run_first_and_best_effort_only_when_idle() {
        let mut s = Scheduler::new();
        s.schedule('b', Level::BestEffort, 1);
        s.schedule('r', Level::Reliable, 1);
        s.schedule('g', Level::Guaranteed, 1);
        let mut order = Vec::new();
        // Each task does one unit and is then finished.
        while !s.is_idle() {
            s.run(|k, _| {
                order.push(k);
                0
            });
        }
        assert_eq!(order, vec!['g', 'r', 'b']);
    }

    #[test]
    fn weights_share_work_within_a_level() {
        let mut s = Scheduler::new();
        s.schedule(1, Level::Guaranteed, guaranteed_weight(20_000_000));
        s.schedule(2, Level::Guaranteed, guaranteed_weight(10_000_000));
        let mut work = [0u32; 3];
        for _ in 0..10 {
            s.run(|k, max| {
                work[k] += max;
                max // always more to do
            });
        }
        assert_eq!(work[1], 200);
        assert_eq!(work[2], 100);
        assert!(!s.pending_above(Level::Guaranteed));
        assert!(s.pending_above(Level::Reliable));
    }

    #[test]
    fn a_busy_high_level_starves_best_effort_until_it_is_done() {
        let mut s = Scheduler::new();
        s.schedule("g", Level::Guaranteed, 2);
        s.schedule("b", Level::BestEffort, 5);
        let mut g_left = 6;
        let mut ran_b_while_g = false;
        for _ in 0..10 {
            s.run(|k, max| {
                if k == "g" {
                    let w = max.min(g_left);
                    g_left -= w;
                    w
                } else {
                    ran_b_while_g |= g_left > 0;
                    0
                }
            });
        }
        assert!(!ran_b_while_g);
        assert!(s.is_idle());
        s.schedule("b", Level::BestEffort, 1);
        s.remove("b");
        assert!(s.is_idle());
    }
}
