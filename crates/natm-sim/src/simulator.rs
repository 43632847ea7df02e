//! The simulator proper: the virtual clock, the event loop, and the movement of frames
//! between hosts and links.

use core::fmt;
use std::collections::HashMap;
use std::time::Duration;

use super::endpoint::{Endpoint, VcId};
use super::error::SimError;
use super::event::{Event, EventQueue};
use super::frame::Packet;
use super::link::{Link, LinkConfig};
use super::loss::{stream_rng, Impairments, WireLoss};
use super::stats::HostStats;
use super::topology::{Hop, Host, HostConfig, HostId, LinkId, Route, RouteIdx};
use natm_proto::time::Instant;

/// Spare frame buffers kept for duplicates; more would only hold memory.
const SPARE_BUFFERS: usize = 64;

/// A seeded discrete-event network simulator driving sans-IO [`Endpoint`]s.
///
/// Promises: nothing in it reads a clock, does I/O or spawns a thread; two runs with the
/// same seed, topology and endpoints make the same calls in the same order at the same
/// virtual times; events at the same instant run in the order they were scheduled.
///
/// `E` is the endpoint type. The default, `Box<dyn Endpoint>`, mixes kinds of endpoint
/// (write `let mut sim: Sim = Sim::new(seed);`); a concrete type or an enum gives static
/// dispatch and typed access through [`Sim::host`].
pub struct Sim<E: Endpoint = Box<dyn Endpoint>> {
    now: Instant,
    seed: u64,
    events: EventQueue,
    hosts: Vec<Host<E>>,
    links: Vec<Link>,
    routes: Vec<Route>,
    spare: Vec<Vec<u8>>,
    events_processed: u64,
    last_host: Option<HostId>,
}

impl<E: Endpoint> fmt::Debug for Sim<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("now", &self.now)
            .field("seed", &self.seed)
            .field("hosts", &self.hosts.len())
            .field("links", &self.links.len())
            .field("routes", &self.routes.len())
            .field("pending_events", &self.events.len())
            .field("events_processed", &self.events_processed)
            .finish()
    }
}

impl<E: Endpoint> Sim<E> {
    /// An empty network at time zero; `seed` fixes every random choice of the run.
    pub fn new(seed: u64) -> Self {
        Sim {
            now: Instant::ZERO,
            seed,
            events: EventQueue::default(),
            hosts: Vec::new(),
            links: Vec::new(),
            routes: Vec::new(),
            spare: Vec::new(),
            events_processed: 0,
            last_host: None,
        }
    }

    /// The seed this simulation was built with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Adds a host with the default transmit ring; it is first polled at the current time.
    pub fn add_host(&mut self, endpoint: E) -> HostId {
        self.add_host_with(endpoint, HostConfig::default())
    }

    /// Adds a host with the given network-interface settings (a ring of 0 counts as 1).
    pub fn add_host_with(&mut self, endpoint: E, mut cfg: HostConfig) -> HostId {
        cfg.tx_ring = cfg.tx_ring.max(1);
        let id = HostId(self.hosts.len() as u32);
        self.hosts.push(Host {
            endpoint,
            cfg,
            ring_used: 0,
            timer: None,
            routes: HashMap::new(),
            stats: HostStats::default(),
        });
        self.events.push(self.now, Event::Wake(id));
        id
    }

    /// Adds one direction of a link.
    pub fn add_link(&mut self, cfg: LinkConfig) -> Result<LinkId, SimError> {
        let id = LinkId(self.links.len() as u32);
        // One random stream per link, so links do not perturb each other's draws.
        let link = Link::new(cfg, stream_rng(self.seed, u64::from(id.0)))?;
        self.links.push(link);
        Ok(id)
    }

    /// Routes frames that `src` sends on `vc` through `links`, in order, to `dst`.
    ///
    /// The reverse direction of the VC is a separate route from `dst` to `src` on the
    /// same `vc`. Refuses a second route for the same (`src`, `vc`) and a VC id already
    /// used on one of the links by another route.
    pub fn add_route(
        &mut self,
        src: HostId,
        vc: VcId,
        dst: HostId,
        links: &[LinkId],
    ) -> Result<(), SimError> {
        for h in [src, dst] {
            if h.index() >= self.hosts.len() {
                return Err(SimError::UnknownHost(h));
            }
        }
        if links.is_empty() {
            return Err(SimError::EmptyPath);
        }
        if self.hosts[src.index()].routes.contains_key(&vc) {
            return Err(SimError::DuplicateRoute { host: src, vc });
        }
        for (i, &l) in links.iter().enumerate() {
            let link = self.links.get(l.index()).ok_or(SimError::UnknownLink(l))?;
            if link.queue_owner(vc).is_some() || links[..i].contains(&l) {
                return Err(SimError::VcInUse { link: l, vc });
            }
        }
        let idx = RouteIdx(self.routes.len() as u32);
        let hops = links
            .iter()
            .map(|&l| {
                let q = self.links[l.index()].queue_mut();
                let slot = q.slot(vc);
                q.set_owner(slot, idx);
                Hop { link: l, slot }
            })
            .collect();
        self.routes.push(Route { src, dst, vc, hops });
        self.hosts[src.index()].routes.insert(vc, idx);
        Ok(())
    }

    /// Adds the routes for both directions of a duplex VC: `a` to `b` over `forward`,
    /// and `b` to `a` over `reverse`.
    pub fn add_duplex_route(
        &mut self,
        a: HostId,
        vc: VcId,
        b: HostId,
        forward: &[LinkId],
        reverse: &[LinkId],
    ) -> Result<(), SimError> {
        self.add_route(a, vc, b, forward)?;
        self.add_route(b, vc, a, reverse)
    }

    /// Gives `vc` `weight` frames per turn on a round-robin link (ignored under FIFO).
    pub fn set_vc_weight(&mut self, link: LinkId, vc: VcId, weight: u32) -> Result<(), SimError> {
        if weight == 0 {
            return Err(SimError::ZeroWeight);
        }
        let q = self
            .links
            .get_mut(link.index())
            .ok_or(SimError::UnknownLink(link))?
            .queue_mut();
        let slot = q.slot(vc);
        q.set_weight(slot, weight);
        Ok(())
    }

    /// Changes a link's impairments from now on (e.g. a loss episode in mid-run).
    pub fn set_impairments(&mut self, link: LinkId, imp: Impairments) -> Result<(), SimError> {
        self.links
            .get_mut(link.index())
            .ok_or(SimError::UnknownLink(link))?
            .set_impairments(imp)
    }

    /// The endpoint of a host. Panics if `id` is not from this simulation.
    pub fn host(&self, id: HostId) -> &E {
        &self.hosts[id.index()].endpoint
    }

    /// The endpoint of a host, to change it (e.g. an application writes data). The
    /// host is polled again at the current time, so what it now wants to send goes out.
    pub fn host_mut(&mut self, id: HostId) -> &mut E {
        self.events.push(self.now, Event::Wake(id));
        &mut self.hosts[id.index()].endpoint
    }

    /// The simulator's counters for a host.
    pub fn host_stats(&self, id: HostId) -> &HostStats {
        &self.hosts[id.index()].stats
    }

    /// Every host id, in the order added.
    pub fn host_ids(&self) -> impl Iterator<Item = HostId> {
        (0..self.hosts.len() as u32).map(HostId)
    }

    /// A link, for its counters and queue depth. Panics if `id` is not from this
    /// simulation.
    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id.index()]
    }

    /// Every link with its id, in the order added.
    pub fn links(&self) -> impl Iterator<Item = (LinkId, &Link)> {
        self.links
            .iter()
            .enumerate()
            .map(|(i, l)| (LinkId(i as u32), l))
    }

    /// The first link with this name.
    pub fn link_by_name(&self, name: &str) -> Option<LinkId> {
        self.links()
            .find(|(_, l)| l.name() == name)
            .map(|(id, _)| id)
    }

    /// Polls a host again at the current time.
    pub fn wake(&mut self, id: HostId) {
        self.events.push(self.now, Event::Wake(id));
    }

    /// When the next event is due, if any.
    pub fn next_event_time(&self) -> Option<Instant> {
        self.events.peek_time()
    }

    /// Events run so far (a measure of the work a scenario costs).
    pub fn events_processed(&self) -> u64 {
        self.events_processed
    }

    /// The host the last [`Sim::step`] delivered to, polled or timed out, if any: the
    /// only endpoint that step can have changed (a step runs at most one host), so a
    /// driver watching thousands of hosts need look at one after each step.
    pub fn last_host(&self) -> Option<HostId> {
        self.last_host
    }

    /// Advances the clock to the next event and runs it; `false` if there was none.
    pub fn step(&mut self) -> bool {
        self.last_host = None;
        let Some((at, event)) = self.events.pop() else {
            return false;
        };
        debug_assert!(at >= self.now, "event queue went back in time");
        self.now = at;
        self.events_processed += 1;
        match event {
            Event::Wake(h) => self.service_host(h),
            Event::Timer(h, deadline) => self.fire_timer(h, deadline),
            Event::TxDone(l) => self.tx_done(l),
            Event::Arrive(l, pkt) => self.arrive(l, pkt),
        }
        true
    }

    /// Runs every event due at or before `deadline`, then sets the clock to `deadline`
    /// (if it is not already later).
    pub fn run_until(&mut self, deadline: Instant) {
        while self.events.peek_time().is_some_and(|t| t <= deadline) {
            self.step();
        }
        self.now = self.now.max(deadline);
    }

    /// Runs for `d` of virtual time from now.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// Steps while `cond` holds. Returns `true` if `cond` turned false, `false` if the
    /// simulation ran out of events first. Endpoints that always want a timer never run
    /// out, so `cond` should bound the run.
    pub fn run_while(&mut self, mut cond: impl FnMut(&Self) -> bool) -> bool {
        while cond(self) {
            if !self.step() {
                return false;
            }
        }
        true
    }

    fn fire_timer(&mut self, h: HostId, deadline: Instant) {
        let host = &mut self.hosts[h.index()];
        // A timer the host has since moved or cancelled is stale.
        if host.timer != Some(deadline) {
            return;
        }
        host.timer = None;
        host.stats.timeouts += 1;
        self.last_host = Some(h);
        host.endpoint.handle_timeout(self.now);
        self.service_host(h);
    }

    /// Polls a host for frames while its transmit ring has room, then re-arms its timer.
    fn service_host(&mut self, h: HostId) {
        let now = self.now;
        self.last_host = Some(h);
        loop {
            let host = &mut self.hosts[h.index()];
            if host.ring_used >= host.cfg.tx_ring {
                break;
            }
            // A recycled buffer: no allocation per frame once the run is warm.
            let mut bytes = self.spare.pop().unwrap_or_default();
            bytes.clear();
            let Some(vc) = host.endpoint.poll_transmit_into(now, &mut bytes) else {
                self.recycle(bytes);
                break;
            };
            host.stats.frames_sent += 1;
            host.stats.bytes_sent += bytes.len() as u64;
            let Some(&route) = host.routes.get(&vc) else {
                host.stats.unroutable += 1;
                self.recycle(bytes);
                continue;
            };
            host.ring_used += 1;
            if let Err(pkt) = self.forward(Packet::new(route, bytes)) {
                // Refused by the first link's queue: the ring slot frees at once.
                self.hosts[h.index()].ring_used -= 1;
                self.recycle(pkt.bytes);
            }
        }
        let host = &mut self.hosts[h.index()];
        let wanted = host.endpoint.poll_timeout();
        if wanted != host.timer {
            host.timer = wanted;
            if let Some(t) = wanted {
                self.events.push(t.max(now), Event::Timer(h, t));
            }
        }
    }

    /// Offers a frame to the link of its current hop; gives it back if tail-dropped.
    fn forward(&mut self, pkt: Packet) -> Result<(), Packet> {
        let hop = self.routes[pkt.route.0 as usize].hops[pkt.hop as usize];
        let link = &mut self.links[hop.link.index()];
        link.enqueue(hop.slot, pkt)?;
        if let Some(done) = link.start_next(self.now) {
            self.events.push(done, Event::TxDone(hop.link));
        }
        Ok(())
    }

    /// A frame's serialization ended: the wire decides its fate, the next frame starts,
    /// and a host whose ring slot this frees is polled again.
    fn tx_done(&mut self, l: LinkId) {
        let now = self.now;
        let link = &mut self.links[l.index()];
        let (slot, pkt) = link.finish();
        if let Some(done) = link.start_next(now) {
            self.events.push(done, Event::TxDone(l));
        }
        let first_hop_of = (pkt.hop == 0).then(|| self.routes[pkt.route.0 as usize].src);

        let link = &mut self.links[l.index()];
        let (cfg, imp) = link.wire();
        let fate = imp.fate(cfg);
        match fate.lost {
            Some(reason) => {
                let stats = link.stats_mut();
                match reason {
                    WireLoss::Random => stats.dropped_random += 1,
                    WireLoss::Burst => stats.dropped_burst += 1,
                }
                link.queue_mut().vc_stats_mut(slot).dropped_wire += 1;
                self.recycle(pkt.bytes);
            }
            None => {
                let at = now + link.delay();
                let dup = fate.duplicated.then(|| {
                    link.stats_mut().duplicated += 1;
                    pkt.duplicate(self.spare.pop().unwrap_or_default())
                });
                self.launch(l, pkt, at);
                if let Some(dup) = dup {
                    self.launch(l, dup, at);
                }
            }
        }

        if let Some(src) = first_hop_of {
            self.hosts[src.index()].ring_used -= 1;
            self.service_host(src);
        }
    }

    /// Sends one copy down the wire, corrupting it first if the dice say so.
    fn launch(&mut self, l: LinkId, mut pkt: Packet, at: Instant) {
        let link = &mut self.links[l.index()];
        let (cfg, imp) = link.wire();
        if imp.corrupts(cfg) {
            pkt.corrupt(imp.rng());
            link.stats_mut().corrupted += 1;
        }
        self.events.push(at, Event::Arrive(l, pkt));
    }

    /// A frame reached the far end of a link: check its CRC, then switch it onto the
    /// next link of its route or deliver it.
    fn arrive(&mut self, l: LinkId, mut pkt: Packet) {
        let route = &self.routes[pkt.route.0 as usize];
        let (slot, hops, dst, vc) = (
            route.hops[pkt.hop as usize].slot,
            route.hops.len(),
            route.dst,
            route.vc,
        );
        let link = &mut self.links[l.index()];
        if !pkt.crc_ok() {
            link.stats_mut().dropped_corrupt += 1;
            link.queue_mut().vc_stats_mut(slot).dropped_wire += 1;
            self.recycle(pkt.bytes);
            return;
        }
        let stats = link.stats_mut();
        stats.frames_delivered += 1;
        stats.bytes_delivered += pkt.bytes.len() as u64;
        link.queue_mut().vc_stats_mut(slot).frames_delivered += 1;

        pkt.hop += 1;
        if (pkt.hop as usize) < hops {
            if let Err(pkt) = self.forward(pkt) {
                self.recycle(pkt.bytes);
            }
            return;
        }
        let now = self.now;
        self.last_host = Some(dst);
        let host = &mut self.hosts[dst.index()];
        host.stats.frames_received += 1;
        host.stats.bytes_received += pkt.bytes.len() as u64;
        host.endpoint.handle_frame(now, vc, &pkt.bytes);
        self.recycle(pkt.bytes);
        self.service_host(dst);
    }

    fn recycle(&mut self, bytes: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS {
            self.spare.push(bytes);
        }
    }
}
