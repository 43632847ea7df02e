//! A seeded soak in virtual time: random calls (local, remote, pre-authorised, to
//! nobody), answers, releases, application deaths, time jumps and loss between the
//! two cores. Whatever happens, no call is reported released twice, and once every
//! application has gone and the timers have run, both hosts hold nothing: no calls,
//! no VCIs, every bit/s and every ns of CPU free again.

use std::cell::Cell;
use std::collections::HashSet;
use std::rc::Rc;
use std::time::Duration;

use crate::support::*;
use natm_proto::wire::ipc::Message;
use natm_sigd::core::AppId;

/// xorshift64: the soak's own dice (deterministic per seed).
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() {
            None
        } else {
            v.get(self.below(v.len() as u64) as usize)
        }
    }
}

/// What the soak knows of each application.
struct Apps {
    /// (side, app) still connected.
    live: Vec<(Side, AppId)>,
    /// Calls each application may act on: (side, app, call).
    calls: Vec<(Side, AppId, u64)>,
    /// Offers waiting for an answer: (side, app, call).
    offers: Vec<(Side, AppId, u64)>,
    released: HashSet<(Side, u64)>,
    /// Calls an application was told are connected (or accepted ahead).
    connected: usize,
}

impl Apps {
    /// Read every live application's inbox.
    fn read(&mut self, p: &mut Pair) {
        for &(s, app) in &self.live.clone() {
            for m in p.take(s, app) {
                match m {
                    Message::Ack { .. } | Message::StatReply { .. } => {}
                    Message::Refused { .. } => {}
                    Message::Incoming { call, .. } => self.offers.push((s, app, call)),
                    Message::Accepted { call, .. } | Message::Connected { call, .. } => {
                        self.connected += 1;
                        self.calls.push((s, app, call))
                    }
                    Message::Released { call, .. } => {
                        assert!(
                            self.released.insert((s, call)),
                            "call {call:016x} on {s:?} released twice"
                        );
                        self.calls.retain(|c| c.2 != call);
                        self.offers.retain(|c| c.2 != call);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }

    fn forget(&mut self, s: Side, app: AppId) {
        self.live.retain(|l| *l != (s, app));
        self.calls.retain(|c| (c.0, c.1) != (s, app));
        self.offers.retain(|c| (c.0, c.1) != (s, app));
    }
}

fn soak(seed: u64) -> (usize, usize) {
    let mut dice = Dice(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut p = Pair::default();
    p.delay = Duration::from_millis(1);
    let loss = Rc::new(Cell::new(0u64));
    {
        let loss = loss.clone();
        let mut wire = Dice(seed ^ 0x5555_aaaa_5555_aaaa | 1);
        p.lose = Box::new(move |_| wire.below(100) < loss.get());
    }
    let echo = p.app(Side::B);
    p.bind(Side::B, echo, "echo", "cbr:pcr=40Mbps");
    let auto = p.app(Side::B);
    let auto_l = p.bind_auto(
        Side::B,
        auto,
        "auto",
        "reliable",
        (0..4).map(|i| data(60_000 + i)).collect(),
    );
    let local = p.app(Side::A);
    p.bind(Side::A, local, "loc", "reliable");
    let mut apps = Apps {
        live: vec![(Side::B, echo), (Side::B, auto), (Side::A, local)],
        calls: Vec::new(),
        offers: Vec::new(),
        released: HashSet::new(),
        connected: 0,
    };
    let mut callers: Vec<AppId> = (0..3).map(|_| p.app(Side::A)).collect();
    apps.live.extend(callers.iter().map(|&a| (Side::A, a)));
    let targets = [
        "+4420002:echo",
        "+4420002:auto",
        "+4420001:loc",
        "+4420002:nobody",
    ];
    let qoses = ["reliable", "cbr:pcr=30Mbps", "cbr:pcr=30Mbps,min_pcr=5Mbps"];
    for _ in 0..80 {
        match dice.below(9) {
            0 | 1 => {
                let &app = dice.pick(&callers).expect("three callers");
                let req = p.req();
                let m = Message::Connect {
                    req,
                    called: dice.pick(&targets).expect("targets").to_string(),
                    qos: dice.pick(&qoses).expect("qoses").parse().expect("test QoS"),
                    data: data(40_000 + app.0 as u16),
                };
                p.send(Side::A, app, m);
            }
            2 | 3 => {
                if let Some(&(s, app, call)) = dice.pick(&apps.offers) {
                    apps.offers.retain(|o| o.2 != call);
                    let req = p.req();
                    let m = if dice.below(4) == 0 {
                        Message::Reject {
                            req,
                            call,
                            cause: 21,
                        }
                    } else {
                        Message::Accept {
                            req,
                            call,
                            data: data(50_000 + app.0 as u16),
                        }
                    };
                    p.send(s, app, m);
                }
            }
            4 => {
                if let Some(&(s, app, call)) = dice.pick(&apps.calls) {
                    let req = dice.below(2);
                    p.send(
                        s,
                        app,
                        Message::Release {
                            req,
                            call,
                            cause: 16,
                        },
                    );
                }
            }
            5 => p.advance(Duration::from_millis(dice.below(3_000))),
            6 => loss.set(*dice.pick(&[0, 0, 20, 100]).expect("levels")),
            7 => {
                // A caller dies and another takes its place.
                let i = dice.below(callers.len() as u64) as usize;
                let dead = callers[i];
                apps.forget(Side::A, dead);
                p.close(Side::A, dead);
                callers[i] = p.app(Side::A);
                apps.live.push((Side::A, callers[i]));
            }
            _ => {
                let req = p.req();
                let m = Message::Endpoints {
                    req,
                    listener: auto_l,
                    data: vec![data(61_000 + dice.below(1_000) as u16)],
                };
                p.send(Side::B, auto, m);
            }
        }
        apps.read(&mut p);
    }
    loss.set(0);
    p.advance(Duration::from_secs(2));
    apps.read(&mut p);
    for (s, app) in apps.live.clone() {
        apps.forget(s, app);
        p.close(s, app);
    }
    p.advance(Duration::from_secs(120));
    for s in [Side::A, Side::B] {
        let st = p.stat(s);
        assert!(
            st.calls.is_empty(),
            "seed {seed}: {s:?} still holds {:?}",
            st.calls
        );
        assert!(st.listeners.is_empty(), "seed {seed}");
        assert_eq!(st.vcis_in_use, 0, "seed {seed}: {s:?} VCIs");
        assert_eq!(
            (st.free_out_bps, st.free_in_bps),
            (st.capacity_bps, st.capacity_bps),
            "seed {seed}: {s:?} reservations"
        );
        assert_eq!(st.cpu_free_ns_per_s, st.cpu_budget_ns_per_s, "seed {seed}");
    }
    (apps.connected, apps.released.len())
}

#[test]
fn random_calls_loss_and_deaths_leave_nothing_behind() {
    let (mut connected, mut released) = (0, 0);
    for seed in 1..=200 {
        let (c, r) = soak(seed);
        connected += c;
        released += r;
    }
    // The dice must have made real traffic for the end state to mean anything.
    assert!(
        connected > 1_000 && released > 1_000,
        "{connected} connected, {released} released"
    );
}
