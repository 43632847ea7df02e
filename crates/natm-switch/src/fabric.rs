//! The switch: ports, the cross-connect table and the per-VC state, driven
//! sans-IO (quinn-proto's contract: time is an argument, output is pulled).
//!
//! Call order: [`Switch::add_port`] and [`Switch::connect`] (the control plane), then
//! for every cell or frame received [`Switch::handle_cell`] / [`Switch::handle_frame`];
//! whenever [`Switch::poll_timeout`] comes (or after new input), [`Switch::handle_timeout`]
//! and for each port [`Switch::poll_transmit`] until it returns `None`. A port sends one unit per line
//! time: `poll_transmit` returns `None` while the line is busy.
//!
//! The control plane terminates its own VCs in the switch (signalling on VPI 0/VCI 5
//! of each port): [`Switch::terminate`] them, read what arrives on them with
//! [`Switch::poll_local`], and send with [`Switch::send`], which queues ahead of the
//! port's VCs and is paced by the same line.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use natm_proto::time::Instant;
use natm_proto::wire::cell::{
    HeaderFormat, HecVerdict, Pti, CELL_LEN, HEADER_LEN, PAYLOAD_LEN, VCI_SIGNALLING,
};
use natm_proto::wire::crc::hec;
use natm_proto::wire::vcframe;

use crate::abr::{AbrVc, RmSeen};
use crate::discard::{FrameDiscard, FrameDrop};
use crate::efci;
use crate::error::SwitchError;
use crate::oam::{self, Scope, LOCATION_ID_LEN};
use crate::port::{Port, PortConfig, PortUnit};
use crate::queue::{frame_cells, Transmit, VcQueue};
use crate::sar::{self, Assembled, FrameAssembly};
use crate::sched::wrr;
use crate::stats::{Counters, DropCause, PortStats, SwitchStats, VcStats};
use crate::table::{ConnId, CrossConnect, Endpoint, PortId, Slot, Table, VcAddr};
use crate::upc::{Contract, Policer, Violation};

/// What the switch did with one cell or frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Queued at its output port.
    Queued,
    /// Queued, tagged CLP = 1 by policing.
    Tagged,
    /// An OAM F5 loopback cell, answered back out of the port it came in on.
    LoopedBack,
    /// An idle or unassigned cell (VPI 0, VCI 0), ignored.
    Idle,
    /// On a VC terminated in the switch: kept for [`Switch::poll_local`].
    Local,
    /// Dropped.
    Dropped(DropCause),
}

/// The state of one cross-connect.
#[derive(Debug)]
struct Vc {
    id: ConnId,
    xc: CrossConnect,
    contract: Contract,
    policer: Policer,
    discard: FrameDiscard,
    queue: VcQueue,
    out_port: PortId,
    out_vpi: u16,
    /// The output VCI for VC switching; `None` keeps the cell's (VP switching).
    out_vci: Option<u16>,
    /// Its `wrr` quantum.
    weight: u32,
    /// EPD threshold of its own queue: the port's, scaled to the VC's buffer.
    epd_cells: u32,
    /// Whether EPD/PPD apply: an AAL5 VC, VC-switched (the cells of a VP's VCs
    /// interleave, so a VP connection has no frame boundaries of its own).
    frames: bool,
    /// Cells bound for a frame port: reassembled here into frames (`sar`).
    assembly: Option<Box<FrameAssembly>>,
    /// Frames bound for a cell port: segmented into cells when queued.
    to_cells: bool,
    counters: Counters,
    oam_looped: u64,
    /// OAM cells and frames switched along it (not answered here).
    oam_forwarded: u64,
    /// RM cells and frames switched along it.
    rm_forwarded: u64,
    /// ABR at its output port (`abr`): `Some` once it has carried a forward RM cell.
    abr: Option<AbrVc>,
    /// The last output header made, with its [`Fields::key`].
    header_memo: (u32, [u8; HEADER_LEN]),
    /// Released ([`Switch::release`]): its input is gone, and it is removed when its
    /// queue empties or at this time, whichever comes first.
    drain_until: Option<Instant>,
    /// Point-to-multipoint, on the connection that owns the input label: the other
    /// branches every cell and frame of the input is copied to ([`Switch::add_branch`]).
    fanout: Vec<Slot>,
    /// On a branch, the connection that owns the input label.
    owner: Option<Slot>,
}

impl Vc {
    fn stats(&self) -> VcStats {
        VcStats {
            conn: self.id,
            xc: self.xc,
            contract: self.contract,
            counters: self.counters,
            oam_looped: self.oam_looped,
            oam_forwarded: self.oam_forwarded,
            rm_forwarded: self.rm_forwarded,
            abr: self.abr.is_some(),
            queue_cells: self.queue.cells(),
            max_queue_cells: self.queue.max_cells(),
        }
    }
}

/// The data plane of an ATM switch.
#[derive(Debug, Default)]
pub struct Switch {
    ports: Vec<Port>,
    table: Table,
    vcs: Vec<Option<Vc>>,
    free: Vec<Slot>,
    slots: HashMap<ConnId, Slot>,
    next_id: u64,
    location: [u8; LOCATION_ID_LEN],
    /// Cells and frames of locally terminated VCs, for the control plane.
    local: VecDeque<(PortId, Transmit)>,
    /// Released connections still sending what was queued: their deadlines.
    draining: Vec<(Instant, Slot)>,
}

/// Units of locally terminated VCs held for [`Switch::poll_local`] before more are
/// dropped (the control plane reads slower than its VCs bring).
const LOCAL_QUEUE_UNITS: usize = 4096;

/// The header fields a switch reads, from the big-endian word of octets 1-4.
#[derive(Debug, Clone, Copy)]
struct Fields {
    vpi: u16,
    vci: u16,
    pti: Pti,
    clp: bool,
}

impl Fields {
    #[inline]
    fn parse(header: &[u8; HEADER_LEN], format: HeaderFormat) -> Fields {
        let w = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
        Fields {
            vpi: ((w >> 20) as u16) & format.max_vpi(),
            vci: (w >> 4) as u16,
            pti: Pti::from_bits((w >> 1) as u8),
            clp: w & 1 != 0,
        }
    }

    /// The fields a VC's output header depends on (its VPI and VCI are the VC's),
    /// as one word; never [`NO_KEY`].
    #[inline]
    fn key(&self) -> u32 {
        (u32::from(self.vci) << 8) | (u32::from(self.pti.bits()) << 1) | u32::from(self.clp)
    }

    /// The five header octets in `format` (GFC 0: it is local to a UNI link).
    #[inline]
    fn emit(&self, format: HeaderFormat) -> [u8; HEADER_LEN] {
        let w = ((u32::from(self.vpi) & u32::from(format.max_vpi())) << 20)
            | (u32::from(self.vci) << 4)
            | (u32::from(self.pti.bits()) << 1)
            | u32::from(self.clp);
        let b = w.to_be_bytes();
        [b[0], b[1], b[2], b[3], hec(&b)]
    }
}

/// A cell header that takes the plain path of [`Switch::handle_cell`] on its port
/// ([`Switch::plain`]), with what that path needs of it.
#[derive(Debug, Clone, Copy)]
struct Plain {
    header: [u8; HEADER_LEN],
    slot: Slot,
    eof: bool,
    clp: bool,
    /// Data EFCI may mark (`efci::is_data`).
    efci: bool,
}

/// A [`Fields::key`] no header has (its 24 bits never reach the top octet).
const NO_KEY: u32 = u32::MAX;

/// Where a unit that passed policing and frame discard is refused, if it is.
#[inline]
fn admission(port: &Port, vc: &Vc, cells: u32, clp: bool) -> Option<DropCause> {
    if port.queue_cells + cells > port.cfg.buffer_cells
        || vc.queue.cells() + cells > vc.contract.buffer_cells
    {
        Some(DropCause::QueueFull)
    } else if clp && port.queue_cells + cells > port.cfg.clp_threshold {
        Some(DropCause::Clp)
    } else {
        None
    }
}

impl Switch {
    /// A switch with no ports, whose OAM location ID is all zeros.
    pub fn new() -> Switch {
        Switch::default()
    }

    /// Sets the OAM loopback location ID this switch answers to (besides all ones).
    pub fn set_location(&mut self, id: [u8; LOCATION_ID_LEN]) {
        self.location = id;
    }

    /// Adds a port; ids are given in order from 0.
    pub fn add_port(&mut self, cfg: PortConfig) -> Result<PortId, SwitchError> {
        let id = u16::try_from(self.ports.len())
            .map(PortId)
            .map_err(|_| SwitchError::BadPortConfig("more than 65,536 ports"))?;
        self.ports.push(Port::new(id, cfg)?);
        Ok(id)
    }

    /// The configuration of `port`.
    pub fn port_config(&self, port: PortId) -> Option<&PortConfig> {
        self.ports.get(port.index()).map(|p| &p.cfg)
    }

    /// The ABR averaging interval of `port` (`abr`: [`crate::abr::AVERAGING_CELLS`]
    /// cell times of its line, at least [`crate::abr::MIN_AVERAGING`]).
    pub fn abr_interval(&self, port: PortId) -> Option<Duration> {
        self.ports.get(port.index()).map(|p| p.abr.interval())
    }

    /// Ports, in id order.
    pub fn ports(&self) -> impl Iterator<Item = PortId> + '_ {
        self.ports.iter().map(|p| p.id)
    }

    fn port(&self, id: PortId) -> Result<&Port, SwitchError> {
        self.ports
            .get(id.index())
            .ok_or(SwitchError::UnknownPort(id))
    }

    fn check_endpoint(&self, e: Endpoint) -> Result<(), SwitchError> {
        let port = self.port(e.port())?;
        let format = port.cfg.format;
        if e.vpi() > format.max_vpi() {
            return Err(SwitchError::VpiOutOfRange {
                port: e.port(),
                vpi: e.vpi(),
                format,
            });
        }
        if let Endpoint::Vc(a) = e {
            if a.vci == 0 {
                return Err(SwitchError::UnassignedVci(e));
            }
        }
        Ok(())
    }

    /// Installs a one-way cross-connect with its traffic contract (a duplex call is
    /// two, one per direction, each with its direction's contract).
    pub fn connect(&mut self, xc: CrossConnect, contract: Contract) -> Result<ConnId, SwitchError> {
        self.check_endpoint(xc.from())?;
        self.check_endpoint(xc.to())?;
        contract.validate()?;
        self.table.check(&xc)?;
        let vc = self.make_vc(xc, contract)?;
        let id = vc.id;
        let slot = self.place(vc)?;
        self.table.insert(&xc, slot);
        self.table_changed();
        self.slots.insert(id, slot);
        Ok(id)
    }

    /// Adds a branch to a point-to-multipoint VC (ITU-T I.311 and Q.2971: a switch
    /// copies each cell of a multipoint connection to every branch): every cell and
    /// frame arriving on the input of `root` (a VC cross-connect, or a branch of one)
    /// is also sent on output VC `to`, under `contract`'s share of `to`'s port and
    /// buffer. The input is policed once, under the root's contract; each branch has
    /// its own queue, frame discard, conversion and counters, so that a full or slow
    /// branch drops only its own copies. The branch is a connection of its own:
    /// [`Switch::release`] or [`Switch::disconnect`] it to end that branch alone. When
    /// the connection owning the input ends while branches remain, the oldest branch
    /// takes the input over (and its policer state); the input goes when the last
    /// branch does.
    pub fn add_branch(
        &mut self,
        root: ConnId,
        to: VcAddr,
        contract: Contract,
    ) -> Result<ConnId, SwitchError> {
        let slot = *self
            .slots
            .get(&root)
            .ok_or(SwitchError::UnknownConnection(root))?;
        let vc = self.vc(slot).ok_or(SwitchError::UnknownConnection(root))?;
        let owner = vc.owner.unwrap_or(slot);
        let from = match self.vc(owner).map(|v| (v.xc, v.drain_until)) {
            Some((CrossConnect::Vc { from, .. }, None)) => from,
            _ => return Err(SwitchError::NotReplicable(root)),
        };
        let xc = CrossConnect::vc(from, to);
        self.check_endpoint(xc.to())?;
        contract.validate()?;
        self.table.check_output(xc.to())?;
        let mut vc = self.make_vc(xc, contract)?;
        vc.owner = Some(owner);
        let id = vc.id;
        let branch = self.place(vc)?;
        self.table.insert_output(xc.to(), branch);
        if let Some(o) = self.vcs.get_mut(owner.index()).and_then(Option::as_mut) {
            o.fanout.push(branch);
        }
        self.table_changed();
        self.slots.insert(id, branch);
        Ok(id)
    }

    /// Every branch of the point-to-multipoint VC `id` belongs to, the one owning the
    /// input first; just `id` for a point-to-point connection; empty if unknown.
    pub fn branches(&self, id: ConnId) -> Vec<ConnId> {
        let Some(vc) = self.slots.get(&id).and_then(|s| self.vc(*s)) else {
            return Vec::new();
        };
        let owner = vc.owner.map_or(vc, |o| self.vc(o).unwrap_or(vc));
        core::iter::once(owner.id)
            .chain(
                owner
                    .fanout
                    .iter()
                    .filter_map(|s| self.vc(*s))
                    .map(|v| v.id),
            )
            .collect()
    }

    /// A connection's state, not yet placed in the table.
    fn make_vc(&mut self, xc: CrossConnect, contract: Contract) -> Result<Vc, SwitchError> {
        let out = self.port(xc.to().port())?.cfg;
        let inp = self.port(xc.from().port())?.cfg.unit;
        let converts = matches!(
            (inp, out.unit),
            (PortUnit::Cells, PortUnit::Frames) | (PortUnit::Frames, PortUnit::Cells)
        );
        if converts && matches!(xc, CrossConnect::Vp { .. }) {
            return Err(SwitchError::VpConversion(xc.from()));
        }
        // A frame's VC header has an 8-bit VPI.
        if out.unit == PortUnit::Frames && xc.to().vpi() > u16::from(u8::MAX) {
            return Err(SwitchError::VpiOutOfRange {
                port: xc.to().port(),
                vpi: xc.to().vpi(),
                format: HeaderFormat::Uni,
            });
        }
        let epd_cells = match out.epd_threshold {
            Some(t) => {
                let scaled =
                    u64::from(contract.buffer_cells) * u64::from(t) / u64::from(out.buffer_cells);
                u32::try_from(scaled).unwrap_or(u32::MAX)
            }
            None => u32::MAX,
        };
        let (out_vpi, out_vci, frames) = match xc {
            CrossConnect::Vc { to, .. } => (to.vpi, Some(to.vci), contract.frame_discard),
            CrossConnect::Vp { to, .. } => (to.vpi, None, false),
        };
        let id = ConnId(self.next_id);
        self.next_id += 1;
        Ok(Vc {
            id,
            xc,
            contract,
            policer: Policer::new(&contract),
            discard: FrameDiscard::default(),
            queue: VcQueue::default(),
            out_port: xc.to().port(),
            out_vpi,
            out_vci,
            weight: wrr::weight(contract.reserved, out.cells_per_sec()),
            epd_cells,
            frames,
            assembly: (out.unit == PortUnit::Frames && out_vci.is_some())
                .then(|| Box::new(FrameAssembly::new(out.reassembly_timeout))),
            to_cells: out.unit == PortUnit::Cells,
            counters: Counters::default(),
            oam_looped: 0,
            oam_forwarded: 0,
            rm_forwarded: 0,
            abr: None,
            header_memo: (NO_KEY, [0; HEADER_LEN]),
            drain_until: None,
            fanout: Vec::new(),
            owner: None,
        })
    }

    /// Puts `vc` in a free slot of the slab; its output port counts its reservation.
    fn place(&mut self, vc: Vc) -> Result<Slot, SwitchError> {
        if let Some(out) = self.ports.get_mut(vc.out_port.index()) {
            out.abr.reserve(vc.contract.reserved);
        }
        Ok(match self.free.pop() {
            Some(s) => {
                self.vcs[s.index()] = Some(vc);
                s
            }
            None => {
                let s = Slot(
                    u32::try_from(self.vcs.len())
                        .map_err(|_| SwitchError::BadContract("more than 2^32 connections"))?,
                );
                self.vcs.push(Some(vc));
                s
            }
        })
    }

    /// Takes connection `slot`'s labels out of the table: its input and output, or
    /// a branch's output alone; a point-to-multipoint input whose owner goes while
    /// branches remain passes to the oldest branch, with the policer's state.
    fn unlink(&mut self, slot: Slot) {
        let Some(vc) = self.vcs.get_mut(slot.index()).and_then(Option::as_mut) else {
            return;
        };
        let xc = vc.xc;
        if let Some(owner) = vc.owner.take() {
            self.table.remove_output(xc.to());
            if let Some(o) = self.vcs.get_mut(owner.index()).and_then(Option::as_mut) {
                o.fanout.retain(|s| *s != slot);
            }
        } else if vc.fanout.is_empty() {
            self.table.remove(&xc);
        } else {
            let mut rest = core::mem::take(&mut vc.fanout);
            let heir = rest.remove(0);
            let (policer, input) = (vc.policer.clone(), vc.contract);
            self.table.remove_output(xc.to());
            self.table.move_input(xc.from(), heir);
            for s in &rest {
                if let Some(b) = self.vcs.get_mut(s.index()).and_then(Option::as_mut) {
                    b.owner = Some(heir);
                }
            }
            if let Some(h) = self.vcs.get_mut(heir.index()).and_then(Option::as_mut) {
                h.owner = None;
                h.fanout = rest;
                // The input is policed as before: the root's contract and state.
                h.policer = policer;
                h.contract.pcr = input.pcr;
                h.contract.cdvt = input.cdvt;
                h.contract.scr = input.scr;
                h.contract.violation = input.violation;
            }
        }
        self.table_changed();
    }

    /// Gives a connection a new traffic contract in place (a call's modification,
    /// Q.2963.1): its policer starts afresh at the new rates (a fresh GCRA holds no
    /// debt from the old ones), its scheduler weight follows the new reservation, and
    /// its queue, counters and cells in flight stay. The queue's size and the frame
    /// discard setting stay those of the original contract.
    pub fn renegotiate(&mut self, id: ConnId, contract: Contract) -> Result<(), SwitchError> {
        contract.validate()?;
        let slot = *self
            .slots
            .get(&id)
            .ok_or(SwitchError::UnknownConnection(id))?;
        let out_cells = {
            let vc = self
                .vcs
                .get(slot.index())
                .and_then(Option::as_ref)
                .ok_or(SwitchError::UnknownConnection(id))?;
            self.port(vc.out_port)?.cfg.cells_per_sec()
        };
        let vc = self
            .vcs
            .get_mut(slot.index())
            .and_then(Option::as_mut)
            .ok_or(SwitchError::UnknownConnection(id))?;
        let contract = Contract {
            buffer_cells: vc.contract.buffer_cells,
            frame_discard: vc.contract.frame_discard,
            ..contract
        };
        if let Some(out) = self.ports.get_mut(vc.out_port.index()) {
            out.abr
                .rereserve(vc.contract.reserved, contract.reserved, vc.abr.as_mut());
        }
        vc.contract = contract;
        vc.policer = Policer::new(&contract);
        vc.weight = wrr::weight(contract.reserved, out_cells);
        Ok(())
    }

    /// Removes a cross-connect at once; cells still queued for it are dropped
    /// (counted as flushed). Returns its final counters.
    pub fn disconnect(&mut self, id: ConnId) -> Result<VcStats, SwitchError> {
        let slot = *self
            .slots
            .get(&id)
            .ok_or(SwitchError::UnknownConnection(id))?;
        let vc = self
            .vcs
            .get(slot.index())
            .and_then(Option::as_ref)
            .ok_or(SwitchError::UnknownConnection(id))?;
        // A draining connection's input label is gone already (and may be in use by
        // a newer connection).
        if vc.drain_until.is_none() {
            self.unlink(slot);
        }
        Ok(self.remove_slot(slot))
    }

    /// Releases a cross-connect the way a call ends: its input label is removed at
    /// once (cells arriving on it are unknown from now on, and the label may be given
    /// to another connection), while the cells and frames already queued for it still
    /// leave at its output port's pace, in order, under its scheduler share. It is
    /// removed when its queue is empty, or at `now + within` with what is still
    /// queued flushed (counted as [`DropCause::Flushed`]): a stalled or starved
    /// output port cannot hold it for ever. [`Switch::poll_timeout`] includes the
    /// deadline; call [`Switch::handle_timeout`] when it comes. Releasing a
    /// connection already draining changes nothing.
    pub fn release(
        &mut self,
        now: Instant,
        id: ConnId,
        within: Duration,
    ) -> Result<(), SwitchError> {
        let slot = *self
            .slots
            .get(&id)
            .ok_or(SwitchError::UnknownConnection(id))?;
        let vc = self
            .vcs
            .get_mut(slot.index())
            .and_then(Option::as_mut)
            .ok_or(SwitchError::UnknownConnection(id))?;
        if vc.drain_until.is_some() {
            return Ok(());
        }
        let empty = vc.queue.is_empty();
        if empty || within.is_zero() {
            self.unlink(slot);
            self.remove_slot(slot);
            return Ok(());
        }
        let until = now + within;
        vc.drain_until = Some(until);
        self.unlink(slot);
        self.draining.push((until, slot));
        Ok(())
    }

    /// Whether a released connection is still sending on output VC `a` (its label
    /// should not be given to a new connection yet: the cells would mix).
    pub fn is_draining_to(&self, a: VcAddr) -> bool {
        self.draining.iter().any(|(_, s)| {
            self.vc(*s)
                .is_some_and(|vc| vc.xc.to() == crate::table::Endpoint::Vc(a))
        })
    }

    /// Released connections still draining.
    pub fn draining(&self) -> usize {
        self.draining.len()
    }

    /// Removes draining connections whose deadline has come by `now`, flushing what
    /// they still hold.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.draining.len() {
            let (until, slot) = self.draining[i];
            if until <= now {
                self.remove_slot(slot);
            } else {
                i += 1;
            }
        }
    }

    /// Takes connection `slot` out of the switch (its table entry is already gone
    /// or removed by the caller): what it still queues is flushed and counted.
    fn remove_slot(&mut self, slot: Slot) -> VcStats {
        let mut vc = self
            .vcs
            .get_mut(slot.index())
            .and_then(Option::take)
            .expect("a connection's slot holds it");
        self.slots.remove(&vc.id);
        self.draining.retain(|(_, s)| *s != slot);
        let (cells, _) = vc.queue.flush();
        vc.discard.reset();
        vc.counters
            .dropped
            .add(DropCause::Flushed, u64::from(cells));
        if let Some(out) = self.ports.get_mut(vc.out_port.index()) {
            out.abr.release(vc.contract.reserved, vc.abr);
            out.sched.remove(slot);
            out.queue_cells -= cells;
            out.counters
                .dropped
                .add(DropCause::Flushed, u64::from(cells));
        }
        self.free.push(slot);
        vc.stats()
    }

    /// Forgets every port's last lookup: the table changed.
    fn table_changed(&mut self) {
        for p in &mut self.ports {
            p.lookup_memo = None;
        }
    }

    /// The connection cells of VC `vpi`/`vci` arriving on `port` belong to (a VP
    /// cross-connect of the VPI, else a VC one).
    pub fn lookup(&self, port: PortId, vpi: u16, vci: u16) -> Option<ConnId> {
        let slot = self.table.lookup(port, vpi, vci)?;
        self.vc(slot).map(|vc| vc.id)
    }

    fn vc(&self, slot: Slot) -> Option<&Vc> {
        self.vcs.get(slot.index()).and_then(Option::as_ref)
    }

    /// Branch `k` of the replicated VC whose input `owner` holds: the owner itself
    /// first, then its fanout in order (indexed, so a unit is copied to every
    /// branch without collecting them first).
    fn branch(&self, owner: Slot, k: usize) -> Option<Slot> {
        match k {
            0 => Some(owner),
            _ => self.vc(owner)?.fanout.get(k - 1).copied(),
        }
    }

    /// One cell received on `port` at `now`: HEC checked and single-bit corrected,
    /// looked up, OAM loopback answered, policed, frame-discarded, queued at its
    /// output port with its header translated.
    pub fn handle_cell(
        &mut self,
        now: Instant,
        port: PortId,
        cell: [u8; CELL_LEN],
    ) -> Result<Verdict, SwitchError> {
        self.cell_in(now, port, cell)
    }

    /// Cells received back to back on `port`, the first at `start` and each next one
    /// `spacing` later: each is handled as by [`Switch::handle_cell`] at its time, in
    /// one call (the loop a train of cells takes). Returns the time after the last
    /// (`start` plus `spacing` per cell).
    pub fn handle_cells<'a>(
        &mut self,
        start: Instant,
        spacing: Duration,
        port: PortId,
        cells: impl IntoIterator<Item = &'a [u8; CELL_LEN]>,
    ) -> Result<Instant, SwitchError> {
        self.port(port)?;
        let mut t = start;
        let mut plain: Option<Plain> = None;
        for c in cells {
            if let Some(p) = plain.filter(|p| c[..HEADER_LEN] == p.header) {
                self.plain_cell(port, &p, c);
            } else {
                // Only an unknown port fails, and this one exists.
                let _ = self.cell_in(t, port, *c);
                plain = self.plain(port, c);
            }
            t += spacing;
        }
        Ok(t)
    }

    /// Whether the next cell of `port` with the header of `cell` takes the plain path
    /// of [`Switch::handle_cell`] whatever its time: its header known valid (the HEC
    /// receiver's memo), its label the port's last looked up, its VC unpoliced,
    /// without frame discard or reassembly, its output header made — so that
    /// [`Switch::plain_cell`] does all `handle_cell` would.
    #[inline]
    fn plain(&self, port: PortId, cell: &[u8; CELL_LEN]) -> Option<Plain> {
        let inp = self.ports.get(port.index())?;
        let header = *cell.first_chunk::<HEADER_LEN>()?;
        if inp.hec_memo != Some(header) {
            return None;
        }
        let f = Fields::parse(&header, inp.cfg.format);
        let (vpi, vci, slot) = inp.lookup_memo?;
        if (vpi, vci) != (f.vpi, f.vci) || (f.vpi == 0 && f.vci == 0) || slot == Slot::LOCAL {
            return None;
        }
        let vc = self.vc(slot)?;
        let plain = vc.assembly.is_none()
            && vc.fanout.is_empty()
            && vc.abr.is_none()
            && vc.policer.is_off()
            && !vc.frames
            && f.pti.is_user_data()
            && vc.header_memo.0 == f.key();
        plain.then_some(Plain {
            header,
            slot,
            eof: f.pti.is_end_of_sdu(),
            clp: f.clp,
            efci: efci::is_data(f.pti, f.vci, vc.out_vci),
        })
    }

    /// [`Switch::handle_cell`] of a cell that [`Switch::plain`] found takes the plain
    /// path (nothing it reads has changed since): counted, admitted or dropped by the
    /// buffers, its header translated, queued.
    #[inline(always)]
    fn plain_cell(&mut self, port: PortId, p: &Plain, cell: &[u8; CELL_LEN]) {
        let Some(vc) = self.vcs.get_mut(p.slot.index()).and_then(Option::as_mut) else {
            return;
        };
        if let Some(inp) = self.ports.get_mut(port.index()) {
            inp.counters.cells_in += 1;
            inp.counters.frames_in += u64::from(p.eof);
        }
        vc.counters.cells_in += 1;
        vc.counters.frames_in += u64::from(p.eof);
        let Some(out) = self.ports.get_mut(vc.out_port.index()) else {
            return;
        };
        if let Some(cause) = admission(out, vc, 1, p.clp) {
            out.counters.dropped.add(cause, 1);
            vc.counters.dropped.add(cause, 1);
            return;
        }
        let mut c = *cell;
        c[..HEADER_LEN].copy_from_slice(&vc.header_memo.1);
        if p.efci && out.efci_congested() && efci::mark_cell(&mut c) {
            out.efci_marked += 1;
        }
        let was_empty = vc.queue.is_empty();
        vc.queue.push_cell(c);
        out.queue_cells += 1;
        out.max_queue_cells = out.max_queue_cells.max(out.queue_cells);
        out.sched.enqueued(p.slot, was_empty, vc.weight);
    }

    /// The body of [`Switch::handle_cell`], inlined into the loop of
    /// [`Switch::handle_cells`].
    #[inline(always)]
    fn cell_in(
        &mut self,
        now: Instant,
        port: PortId,
        mut cell: [u8; CELL_LEN],
    ) -> Result<Verdict, SwitchError> {
        let inp = self
            .ports
            .get_mut(port.index())
            .ok_or(SwitchError::UnknownPort(port))?;
        inp.counters.cells_in += 1;
        let header = cell
            .first_chunk_mut::<HEADER_LEN>()
            .expect("a cell is longer than its header");
        // ITU-T I.432.1 receiver: correct one bit after a good header, else discard.
        // A header equal to the last one found valid is valid (the HEC is a function
        // of the header alone), and the receiver is still in correction mode, the
        // state a valid header leaves: the CRC is skipped, as the cells of one VC
        // mostly share a header.
        if inp.hec_memo != Some(*header) {
            match inp.hec.check(header) {
                HecVerdict::Valid => inp.hec_memo = Some(*header),
                HecVerdict::Corrected { .. } => {
                    inp.hec_memo = None;
                    inp.hec_corrected += 1;
                }
                HecVerdict::Discarded => {
                    inp.hec_memo = None;
                    inp.counters.dropped.add(DropCause::Hec, 1);
                    return Ok(Verdict::Dropped(DropCause::Hec));
                }
            }
        }
        let mut f = Fields::parse(header, inp.cfg.format);
        if f.vpi == 0 && f.vci == 0 {
            inp.idle_cells += 1;
            return Ok(Verdict::Idle);
        }
        // The cells of a train mostly belong to one VC: the last label looked up on
        // the port is kept with its entry (forgotten whenever the table changes).
        let slot = match inp.lookup_memo {
            Some((vpi, vci, slot)) if (vpi, vci) == (f.vpi, f.vci) => slot,
            _ => {
                let Some(slot) = self.table.lookup(port, f.vpi, f.vci) else {
                    inp.counters.dropped.add(DropCause::UnknownVc, 1);
                    return Ok(Verdict::Dropped(DropCause::UnknownVc));
                };
                inp.lookup_memo = Some((f.vpi, f.vci, slot));
                slot
            }
        };
        if slot == Slot::LOCAL {
            return Ok(if self.local.len() < LOCAL_QUEUE_UNITS {
                inp.local_in += 1;
                self.local.push_back((port, Transmit::Cell(cell)));
                Verdict::Local
            } else {
                inp.counters.dropped.add(DropCause::QueueFull, 1);
                Verdict::Dropped(DropCause::QueueFull)
            });
        }
        let Some(vc) = self.vcs.get_mut(slot.index()).and_then(Option::as_mut) else {
            inp.counters.dropped.add(DropCause::UnknownVc, 1);
            return Ok(Verdict::Dropped(DropCause::UnknownVc));
        };
        if !vc.fanout.is_empty() {
            return Ok(self.replicate_cell(now, port, slot, cell, f));
        }
        vc.counters.cells_in += 1;

        if f.pti.is_oam_f5() && vc.out_vci.is_some() {
            if let Some(reply) = oam::loopback_reply(&cell, &self.location) {
                return Ok(if inp.push_control(Transmit::Cell(reply)) {
                    inp.oam_looped += 1;
                    vc.oam_looped += 1;
                    Verdict::LoopedBack
                } else {
                    inp.counters.dropped.add(DropCause::QueueFull, 1);
                    vc.counters.dropped.add(DropCause::QueueFull, 1);
                    Verdict::Dropped(DropCause::QueueFull)
                });
            }
        }

        let eof = f.pti.is_end_of_sdu();
        if eof {
            inp.counters.frames_in += 1;
            vc.counters.frames_in += 1;
        }
        let frames = vc.frames && f.pti.is_user_data();
        let mut verdict = Verdict::Queued;
        if !vc.policer.police(now) {
            // A cell already tagged cannot be tagged again: it is discarded, or a
            // sender could pass any rate by tagging its own cells.
            if vc.contract.violation == Violation::Tag && !f.clp {
                f.clp = true;
                inp.counters.tagged += 1;
                vc.counters.tagged += 1;
                verdict = Verdict::Tagged;
            } else {
                let mut n = 1;
                // An OAM or RM cell is no part of the AAL5 frame in assembly.
                if let Some(a) = vc.assembly.as_deref_mut().filter(|_| f.pti.is_user_data()) {
                    n += u64::from(a.abandon(eof));
                }
                inp.counters.dropped.add(DropCause::Policing, n);
                vc.counters.dropped.add(DropCause::Policing, n);
                if frames {
                    let ppd = self
                        .ports
                        .get(vc.out_port.index())
                        .is_some_and(|p| p.cfg.ppd);
                    vc.discard.dropped(eof, ppd);
                }
                return Ok(Verdict::Dropped(DropCause::Policing));
            }
        }
        Ok(self.cell_out(now, slot, cell, f, verdict))
    }

    /// A cell of a point-to-multipoint VC (its input owned by `owner`, which has
    /// branches): answered if an OAM loopback for this switch, policed once under
    /// the owner's contract, then queued on every branch as [`Switch::cell_out`]
    /// queues it, each branch admitting or dropping its own copy. The verdict is the
    /// first branch's that queued it, else the first branch's drop.
    #[inline(never)]
    fn replicate_cell(
        &mut self,
        now: Instant,
        port: PortId,
        owner: Slot,
        cell: [u8; CELL_LEN],
        mut f: Fields,
    ) -> Verdict {
        let (Some(inp), Some(vc)) = (
            self.ports.get_mut(port.index()),
            self.vcs.get_mut(owner.index()).and_then(Option::as_mut),
        ) else {
            return Verdict::Dropped(DropCause::UnknownVc);
        };
        if f.pti.is_oam_f5() {
            if let Some(reply) = oam::loopback_reply(&cell, &self.location) {
                vc.counters.cells_in += 1;
                return if inp.push_control(Transmit::Cell(reply)) {
                    inp.oam_looped += 1;
                    vc.oam_looped += 1;
                    Verdict::LoopedBack
                } else {
                    inp.counters.dropped.add(DropCause::QueueFull, 1);
                    vc.counters.dropped.add(DropCause::QueueFull, 1);
                    Verdict::Dropped(DropCause::QueueFull)
                };
            }
        }
        let eof = f.pti.is_end_of_sdu();
        inp.counters.frames_in += u64::from(eof);
        let mut verdict = Verdict::Queued;
        let mut policed = false;
        if !vc.policer.police(now) {
            if vc.contract.violation == Violation::Tag && !f.clp {
                f.clp = true;
                inp.counters.tagged += 1;
                verdict = Verdict::Tagged;
            } else {
                inp.counters.dropped.add(DropCause::Policing, 1);
                policed = true;
            }
        }
        let mut result: Option<Verdict> = None;
        let mut k = 0;
        while let Some(b) = self.branch(owner, k) {
            k += 1;
            let Some(vc) = self.vcs.get_mut(b.index()).and_then(Option::as_mut) else {
                continue;
            };
            vc.counters.cells_in += 1;
            vc.counters.frames_in += u64::from(eof);
            if policed {
                let frames = vc.frames && f.pti.is_user_data();
                let mut n = 1;
                // An OAM or RM cell is no part of the AAL5 frame in assembly.
                if let Some(a) = vc.assembly.as_deref_mut().filter(|_| f.pti.is_user_data()) {
                    n += u64::from(a.abandon(eof));
                }
                vc.counters.dropped.add(DropCause::Policing, n);
                if frames {
                    let ppd = self
                        .ports
                        .get(vc.out_port.index())
                        .is_some_and(|p| p.cfg.ppd);
                    vc.discard.dropped(eof, ppd);
                }
                continue;
            }
            vc.counters.tagged += u64::from(verdict == Verdict::Tagged);
            let v = self.cell_out(now, b, cell, f, verdict);
            result = Some(best_branch_verdict(result, v));
        }
        if policed {
            return Verdict::Dropped(DropCause::Policing);
        }
        result.unwrap_or(Verdict::Dropped(DropCause::UnknownVc))
    }

    /// The output half of [`Switch::handle_cell`] for connection `slot`, after
    /// policing: frame discard, reassembly for a frame port, buffer admission, the
    /// header translated, queued.
    #[inline(always)]
    fn cell_out(
        &mut self,
        now: Instant,
        slot: Slot,
        mut cell: [u8; CELL_LEN],
        mut f: Fields,
        verdict: Verdict,
    ) -> Verdict {
        let Some(vc) = self.vcs.get_mut(slot.index()).and_then(Option::as_mut) else {
            return Verdict::Dropped(DropCause::UnknownVc);
        };
        let eof = f.pti.is_end_of_sdu();
        let frames = vc.frames && f.pti.is_user_data();
        let out = self
            .ports
            .get_mut(vc.out_port.index())
            .expect("a connection's output port exists: ports are never removed");
        // ABR (`abr`): VC connections' units are measured, forward RM cells marked.
        if vc.out_vci.is_some() {
            if f.pti == Pti::ResourceManagement {
                let reserved = vc.contract.reserved;
                out.abr
                    .rm(now, &mut vc.abr, reserved, &mut cell[HEADER_LEN..]);
            } else if let Some(a) = vc.abr.as_mut() {
                out.abr.data(now, a, 1);
            }
        }
        let efci = efci::is_data(f.pti, f.vci, vc.out_vci) && out.efci_congested();
        if frames {
            let over = || {
                out.cfg
                    .epd_threshold
                    .is_some_and(|t| out.queue_cells >= t || vc.queue.cells() >= vc.epd_cells)
            };
            if let Err(why) = vc
                .discard
                .before(eof, out.cfg.epd_threshold.is_some(), over)
            {
                let cause = match why {
                    FrameDrop::Epd => DropCause::Epd,
                    FrameDrop::Ppd => DropCause::Ppd,
                };
                // A frame in assembly never meets this: EPD refuses a frame at its
                // first cell, and PPD follows a drop that abandoned the assembly.
                out.counters.dropped.add(cause, 1);
                vc.counters.dropped.add(cause, 1);
                return Verdict::Dropped(cause);
            }
        }
        if let Some(a) = vc.assembly.as_deref_mut() {
            // Bound for a frame port: the cell joins its frame, which is queued
            // whole at its last cell.
            let unit = if f.pti.is_user_data() {
                let stale = u64::from(a.expire(now));
                out.counters
                    .dropped
                    .add(DropCause::ReassemblyTimeout, stale);
                vc.counters.dropped.add(DropCause::ReassemblyTimeout, stale);
                // `connect` refused a VPI over 8 bits towards a frame port.
                let vpi = u8::try_from(vc.out_vpi).unwrap_or(u8::MAX);
                let vci = vc.out_vci.unwrap_or(f.vci);
                let pti = if efci && !f.pti.congestion_experienced() {
                    out.efci_marked += 1;
                    f.pti.with_congestion()
                } else {
                    f.pti
                };
                match a.push(now, &cell, vpi, vci, pti, f.clp) {
                    Assembled::Partial => {
                        if frames {
                            vc.discard.admitted(eof);
                        }
                        return verdict;
                    }
                    Assembled::Dropped(cause, n) => {
                        out.counters.dropped.add(cause, u64::from(n));
                        vc.counters.dropped.add(cause, u64::from(n));
                        if frames {
                            vc.discard.admitted(eof);
                        }
                        return Verdict::Dropped(cause);
                    }
                    Assembled::Frame { header, sdu } => Transmit::Frame { header, sdu },
                }
            } else {
                // OAM and RM cells: one frame each; a reserved PTI has no frame form.
                let vpi = u8::try_from(vc.out_vpi).unwrap_or(u8::MAX);
                let vci = vc.out_vci.unwrap_or(f.vci);
                let Some(unit) = sar::single_cell_frame(&cell, vpi, vci, f.clp) else {
                    out.counters.dropped.add(DropCause::Unconvertible, 1);
                    vc.counters.dropped.add(DropCause::Unconvertible, 1);
                    return Verdict::Dropped(DropCause::Unconvertible);
                };
                unit
            };
            // A frame takes its AAL5 cells on the frame line and in the buffer.
            let cells = unit.cells();
            if frames {
                vc.discard.admitted(eof);
            }
            if let Some(cause) = admission(out, vc, cells, f.clp) {
                out.counters.dropped.add(cause, u64::from(cells));
                vc.counters.dropped.add(cause, u64::from(cells));
                return Verdict::Dropped(cause);
            }
            vc.oam_forwarded += u64::from(f.pti.is_oam_f5());
            vc.rm_forwarded += u64::from(f.pti == Pti::ResourceManagement);
            let was_empty = vc.queue.is_empty();
            vc.queue.push(unit, cells);
            out.queue_cells += cells;
            out.max_queue_cells = out.max_queue_cells.max(out.queue_cells);
            out.sched.enqueued(slot, was_empty, vc.weight);
            return verdict;
        }
        if let Some(cause) = admission(out, vc, 1, f.clp) {
            out.counters.dropped.add(cause, 1);
            vc.counters.dropped.add(cause, 1);
            if frames {
                vc.discard.dropped(eof, out.cfg.ppd);
            }
            return Verdict::Dropped(cause);
        }
        if frames {
            vc.discard.admitted(eof);
        }
        // The output header depends only on the VC and the input's VCI, PTI and CLP:
        // the last one made is kept with its key, which saves the HEC of most cells.
        let key = f.key();
        if vc.header_memo.0 != key {
            f.vpi = vc.out_vpi;
            if let Some(vci) = vc.out_vci {
                f.vci = vci;
            }
            vc.header_memo = (key, f.emit(out.cfg.format));
        }
        cell[..HEADER_LEN].copy_from_slice(&vc.header_memo.1);
        if efci && efci::mark_cell(&mut cell) {
            out.efci_marked += 1;
        }
        vc.oam_forwarded += u64::from(f.pti.is_oam_f5());
        vc.rm_forwarded += u64::from(f.pti == Pti::ResourceManagement);
        let was_empty = vc.queue.is_empty();
        vc.queue.push_cell(cell);
        out.queue_cells += 1;
        out.max_queue_cells = out.max_queue_cells.max(out.queue_cells);
        out.sched.enqueued(slot, was_empty, vc.weight);
        verdict
    }

    /// One AAL5 frame of the frame mode received on `port` at `now`: the VC header
    /// (`wire::vcframe`) and the SDU. Policed as its AAL5 cells arriving back to back
    /// at the port's line rate; queued whole or dropped whole.
    pub fn handle_frame(
        &mut self,
        now: Instant,
        port: PortId,
        header: vcframe::Repr,
        sdu: Bytes,
    ) -> Result<Verdict, SwitchError> {
        let inp = self
            .ports
            .get_mut(port.index())
            .ok_or(SwitchError::UnknownPort(port))?;
        let cells = frame_cells(&header, sdu.len());
        let n = u64::from(cells);
        inp.counters.cells_in += n;
        inp.counters.frames_in += 1;
        let slot = self.table.lookup(port, u16::from(header.vpi), header.vci);
        if slot == Some(Slot::LOCAL) {
            return Ok(if self.local.len() < LOCAL_QUEUE_UNITS {
                inp.local_in += 1;
                self.local
                    .push_back((port, Transmit::Frame { header, sdu }));
                Verdict::Local
            } else {
                inp.counters.dropped.add(DropCause::QueueFull, n);
                Verdict::Dropped(DropCause::QueueFull)
            });
        }
        let found = slot.and_then(|s| Some((s, self.vcs.get_mut(s.index())?.as_mut()?)));
        let Some((slot, vc)) = found else {
            inp.counters.dropped.add(DropCause::UnknownVc, n);
            return Ok(Verdict::Dropped(DropCause::UnknownVc));
        };
        if !vc.fanout.is_empty() {
            return Ok(self.replicate_frame(now, port, slot, header, sdu));
        }
        vc.counters.cells_in += n;
        vc.counters.frames_in += 1;
        let oam = header.kind == vcframe::FrameKind::Oam;
        // The same OAM loopback as `handle_cell` (`oam`'s module doc): a segment
        // request is answered at the first switch, on the same VC out of this port.
        if oam && vc.out_vci.is_some() {
            if let Some(a) = oam::loopback_answer(Scope::of_frame(&header), &sdu, &self.location) {
                let reply = Transmit::Frame {
                    header,
                    sdu: Bytes::copy_from_slice(&a),
                };
                return Ok(if inp.push_control(reply) {
                    inp.oam_looped += 1;
                    vc.oam_looped += 1;
                    Verdict::LoopedBack
                } else {
                    inp.counters.dropped.add(DropCause::QueueFull, n);
                    vc.counters.dropped.add(DropCause::QueueFull, n);
                    Verdict::Dropped(DropCause::QueueFull)
                });
            }
        }
        // A host's path MTU probe (an OAM loopback request padded with zeros, RFC 8899)
        // has crossed the frame hops up to here, and cells have no MTU to probe: bound
        // for a cell port, it goes on as its one cell.
        let sdu = if vc.to_cells
            && header.kind == vcframe::FrameKind::Oam
            && sdu.len() > PAYLOAD_LEN
            && natm_proto::wire::oam::unpad(&sdu).len() == PAYLOAD_LEN
        {
            sdu.slice(..PAYLOAD_LEN)
        } else {
            sdu
        };
        // Bound for a cell port: no cell form at all is refused before policing.
        if vc.to_cells && sar::cell_form_len(&header, sdu.len()).is_none() {
            inp.counters.dropped.add(DropCause::Unconvertible, n);
            vc.counters.dropped.add(DropCause::Unconvertible, n);
            return Ok(Verdict::Dropped(DropCause::Unconvertible));
        }
        // A frame-mode datagram carries a VPI of 8 bits; an NNI VPI above 255 cannot
        // leave as a frame.
        if !vc.to_cells && u8::try_from(vc.out_vpi).is_err() {
            inp.counters.dropped.add(DropCause::UnknownVc, n);
            vc.counters.dropped.add(DropCause::UnknownVc, n);
            return Ok(Verdict::Dropped(DropCause::UnknownVc));
        }
        let mut clp = header.clp;
        let mut verdict = Verdict::Queued;
        if !vc.policer.police_frame(now, cells, inp.cell_spacing()) {
            if vc.contract.violation == Violation::Tag && !clp {
                clp = true;
                inp.counters.tagged += n;
                vc.counters.tagged += n;
                verdict = Verdict::Tagged;
            } else {
                inp.counters.dropped.add(DropCause::Policing, n);
                vc.counters.dropped.add(DropCause::Policing, n);
                return Ok(Verdict::Dropped(DropCause::Policing));
            }
        }
        Ok(self.frame_out(now, slot, header, sdu, clp, verdict))
    }

    /// A frame of a point-to-multipoint VC (its input owned by `owner`, which has
    /// branches), as [`Switch::replicate_cell`] treats a cell: an OAM loopback for
    /// this switch answered, policed once, then each branch converts, admits and
    /// queues its own copy (the SDU's octets are shared, not copied).
    #[inline(never)]
    fn replicate_frame(
        &mut self,
        now: Instant,
        port: PortId,
        owner: Slot,
        header: vcframe::Repr,
        sdu: Bytes,
    ) -> Verdict {
        let (Some(inp), Some(vc)) = (
            self.ports.get_mut(port.index()),
            self.vcs.get_mut(owner.index()).and_then(Option::as_mut),
        ) else {
            return Verdict::Dropped(DropCause::UnknownVc);
        };
        let cells = frame_cells(&header, sdu.len());
        let n = u64::from(cells);
        if header.kind == vcframe::FrameKind::Oam {
            if let Some(a) = oam::loopback_answer(Scope::of_frame(&header), &sdu, &self.location) {
                vc.counters.cells_in += n;
                vc.counters.frames_in += 1;
                let reply = Transmit::Frame {
                    header,
                    sdu: Bytes::copy_from_slice(&a),
                };
                return if inp.push_control(reply) {
                    inp.oam_looped += 1;
                    vc.oam_looped += 1;
                    Verdict::LoopedBack
                } else {
                    inp.counters.dropped.add(DropCause::QueueFull, n);
                    vc.counters.dropped.add(DropCause::QueueFull, n);
                    Verdict::Dropped(DropCause::QueueFull)
                };
            }
        }
        let mut clp = header.clp;
        let mut verdict = Verdict::Queued;
        let mut policed = false;
        if !vc.policer.police_frame(now, cells, inp.cell_spacing()) {
            if vc.contract.violation == Violation::Tag && !clp {
                clp = true;
                inp.counters.tagged += n;
                verdict = Verdict::Tagged;
            } else {
                inp.counters.dropped.add(DropCause::Policing, n);
                policed = true;
            }
        }
        let mut result: Option<Verdict> = None;
        let mut k = 0;
        while let Some(b) = self.branch(owner, k) {
            k += 1;
            let Some(vc) = self.vcs.get_mut(b.index()).and_then(Option::as_mut) else {
                continue;
            };
            vc.counters.cells_in += n;
            vc.counters.frames_in += 1;
            if policed {
                vc.counters.dropped.add(DropCause::Policing, n);
                continue;
            }
            vc.counters.tagged += if verdict == Verdict::Tagged { n } else { 0 };
            let v = self.frame_out(now, b, header, sdu.clone(), clp, verdict);
            result = Some(best_branch_verdict(result, v));
        }
        if policed {
            return Verdict::Dropped(DropCause::Policing);
        }
        result.unwrap_or(Verdict::Dropped(DropCause::UnknownVc))
    }

    /// The output half of [`Switch::handle_frame`] for connection `slot`, after
    /// policing: converted to the output port's unit (segmented into cells, or
    /// dropped if it has no form there), admitted by the buffers, its header
    /// translated, queued.
    #[inline(always)]
    fn frame_out(
        &mut self,
        now: Instant,
        slot: Slot,
        mut header: vcframe::Repr,
        mut sdu: Bytes,
        clp: bool,
        verdict: Verdict,
    ) -> Verdict {
        let Some(vc) = self.vcs.get_mut(slot.index()).and_then(Option::as_mut) else {
            return Verdict::Dropped(DropCause::UnknownVc);
        };
        let cells = frame_cells(&header, sdu.len());
        let n = u64::from(cells);
        let oam = header.kind == vcframe::FrameKind::Oam;
        let rm = header.kind == vcframe::FrameKind::Rm;
        let out = self
            .ports
            .get_mut(vc.out_port.index())
            .expect("a connection's output port exists: ports are never removed");
        // ABR (`abr`), as `cell_out`: an RM frame is the payload of one RM cell, and
        // a marked one is copied (its SDU may be shared with other branches).
        if vc.out_vci.is_some() {
            if rm {
                let reserved = vc.contract.reserved;
                let mut p = [0u8; PAYLOAD_LEN];
                let payload: &mut [u8] = match sdu.get(..) {
                    Some(s) if s.len() == PAYLOAD_LEN => {
                        p.copy_from_slice(s);
                        &mut p
                    }
                    // Not one cell payload: counted as not an RM cell, left as it is.
                    _ => &mut [],
                };
                let seen = out.abr.rm(now, &mut vc.abr, reserved, payload);
                if seen == (RmSeen::Forward { marked: true }) {
                    sdu = Bytes::copy_from_slice(&p);
                }
            } else if let Some(a) = vc.abr.as_mut() {
                out.abr.data(now, a, cells);
            }
        }
        let efci = header.kind == vcframe::FrameKind::Data
            && !header.ci
            && header.vci != VCI_SIGNALLING
            && vc.out_vci != Some(VCI_SIGNALLING)
            && out.efci_congested();
        let out_cells = if vc.to_cells {
            let Some(c) = sar::cell_form_len(&header, sdu.len()) else {
                out.counters.dropped.add(DropCause::Unconvertible, n);
                vc.counters.dropped.add(DropCause::Unconvertible, n);
                return Verdict::Dropped(DropCause::Unconvertible);
            };
            c
        } else {
            cells
        };
        let out_vpi = match u8::try_from(vc.out_vpi) {
            Ok(v) => v,
            Err(_) if vc.to_cells => 0,
            Err(_) => {
                out.counters.dropped.add(DropCause::UnknownVc, n);
                vc.counters.dropped.add(DropCause::UnknownVc, n);
                return Verdict::Dropped(DropCause::UnknownVc);
            }
        };
        if let Some(cause) = admission(out, vc, out_cells, clp) {
            out.counters.dropped.add(cause, n);
            vc.counters.dropped.add(cause, n);
            return Verdict::Dropped(cause);
        }
        if efci {
            header.ci = true;
            out.efci_marked += u64::from(out_cells);
        }
        vc.rm_forwarded += u64::from(rm);
        let was_empty = vc.queue.is_empty();
        if vc.to_cells {
            let header = vcframe::Repr { clp, ..header };
            let vci = vc.out_vci.unwrap_or(header.vci);
            let (queue, sched, weight) = (&mut vc.queue, &mut out.sched, vc.weight);
            let mut first = was_empty;
            sar::segment(&header, &sdu, out.cfg.format, vc.out_vpi, vci, |c| {
                queue.push_cell(c);
                // Each cell is a unit to the scheduler (fifo keeps one entry per unit).
                sched.enqueued(slot, first, weight);
                first = false;
            });
            out.queue_cells += out_cells;
            out.max_queue_cells = out.max_queue_cells.max(out.queue_cells);
            vc.oam_forwarded += u64::from(oam);
            return verdict;
        }
        let header = vcframe::Repr {
            clp,
            vpi: out_vpi,
            vci: vc.out_vci.unwrap_or(header.vci),
            ..header
        };
        vc.queue.push(Transmit::Frame { header, sdu }, cells);
        vc.oam_forwarded += u64::from(oam);
        out.queue_cells += cells;
        out.max_queue_cells = out.max_queue_cells.max(out.queue_cells);
        out.sched.enqueued(slot, was_empty, vc.weight);
        verdict
    }

    /// The next cell or frame `port` sends at `now`, as its scheduler picks it; `None`
    /// if the line is still busy with the previous one or nothing waits. OAM answers
    /// go first.
    pub fn poll_transmit(&mut self, now: Instant, port: PortId) -> Option<Transmit> {
        let p = self.ports.get(port.index())?;
        if !p.free_at(now) {
            return None;
        }
        self.transmit_next(now, port)
    }

    /// The next cell or frame `port` sends if its line is free by `horizon`: it
    /// takes the line from when the line frees, or from `earliest` if that is later
    /// (slots further behind are lost). `None` if nothing waits or the line is busy
    /// past `horizon`. What a loop that sends in batches calls instead of
    /// [`Switch::port_timeout`] then [`Switch::poll_transmit`] at that time, in one
    /// look at the port.
    pub fn poll_transmit_by(
        &mut self,
        earliest: Instant,
        horizon: Instant,
        port: PortId,
    ) -> Option<Transmit> {
        let p = self.ports.get(port.index())?;
        if !p.free_at(horizon) {
            return None;
        }
        self.transmit_next(earliest, port)
    }

    /// The next unit of `port`, its line taken from `now` or from when it frees.
    #[inline]
    fn transmit_next(&mut self, now: Instant, port: PortId) -> Option<Transmit> {
        let p = self.ports.get_mut(port.index())?;
        if !p.backlogged() {
            return None;
        }
        if let Some(unit) = p.control.pop_front() {
            let cells = unit.cells();
            p.occupy(now, cells);
            p.counters.cells_out += u64::from(cells);
            return Some(unit);
        }
        let vcs = &self.vcs;
        let slot = p.sched.pick(|s| {
            vcs.get(s.index())
                .and_then(Option::as_ref)
                .and_then(|vc| vc.queue.head_cells())
        })?;
        self.take_head(now, port, slot)
    }

    /// Sends the head unit of `slot`, which `port`'s scheduler picked, its line taken
    /// from `now` or from when it frees.
    #[inline]
    fn take_head(&mut self, now: Instant, port: PortId, slot: Slot) -> Option<Transmit> {
        let p = self.ports.get_mut(port.index())?;
        let vc = self.vcs.get_mut(slot.index()).and_then(Option::as_mut)?;
        let unit = vc.queue.pop()?;
        p.sched.sent(slot, vc.queue.is_empty());
        let cells = unit.cells();
        let eof = match &unit {
            Transmit::Cell(c) => Pti::from_bits(c[3] >> 1).is_end_of_sdu(),
            Transmit::Frame { .. } => true,
        };
        p.queue_cells -= cells;
        p.occupy(now, cells);
        for c in [&mut p.counters, &mut vc.counters] {
            c.cells_out += u64::from(cells);
            c.frames_out += u64::from(eof);
        }
        // A released connection goes with the last of what it held.
        if vc.drain_until.is_some() && vc.queue.is_empty() {
            self.remove_slot(slot);
        }
        Some(unit)
    }

    /// Up to `max` cells `port` sends if its line is free by `horizon`, appended to
    /// `out` back to back (53 octets each), the line taken from `earliest` or from
    /// when it frees: the same cells in the same order, with the same effect on the
    /// queues, the scheduler, the line and the counters, as calling
    /// [`Switch::poll_transmit_by`] until it returns `None`, a frame, or `max` cells —
    /// but a run of one VC's cells that the scheduler would send back to back is
    /// taken in one step and one copy. A frame met before `max` cells is returned
    /// (it is taken, as `poll_transmit_by` takes it); `None` once nothing more may go.
    pub fn poll_cells_by(
        &mut self,
        earliest: Instant,
        horizon: Instant,
        port: PortId,
        max: usize,
        out: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let mut left = u64::try_from(max).unwrap_or(u64::MAX);
        while left > 0 {
            let p = self.ports.get_mut(port.index())?;
            if !p.free_at(horizon) || !p.backlogged() {
                return None;
            }
            if !p.control.is_empty() {
                match self.transmit_next(earliest, port)? {
                    Transmit::Cell(c) => {
                        out.extend_from_slice(&c);
                        left -= 1;
                        continue;
                    }
                    frame => return Some(frame),
                }
            }
            let vcs = &self.vcs;
            let (slot, allowed) = p.sched.pick_run(|s| {
                vcs.get(s.index())
                    .and_then(Option::as_ref)
                    .and_then(|vc| vc.queue.head_cells())
            })?;
            let vc = self.vcs.get_mut(slot.index()).and_then(Option::as_mut)?;
            let run = u64::from(vc.queue.head_run());
            if run == 0 {
                // A frame at the head: one unit, as `transmit_next` sends it.
                match self.take_head(earliest, port, slot)? {
                    Transmit::Cell(c) => {
                        out.extend_from_slice(&c);
                        left -= 1;
                        continue;
                    }
                    frame => return Some(frame),
                }
            }
            let k = left
                .min(allowed)
                .min(run)
                .min(p.cells_by(earliest, horizon));
            // `k` is at most `run`, a u32.
            let k = u32::try_from(k).unwrap_or(u32::MAX);
            let at = out.len();
            vc.queue.pop_cells(k, out);
            let eofs = out[at..]
                .chunks_exact(CELL_LEN)
                .filter(|c| Pti::from_bits(c[3] >> 1).is_end_of_sdu())
                .count() as u64;
            p.sched.sent_run(slot, k, vc.queue.is_empty());
            p.queue_cells -= k;
            p.occupy(earliest, k);
            for c in [&mut p.counters, &mut vc.counters] {
                c.cells_out += u64::from(k);
                c.frames_out += eofs;
            }
            left -= u64::from(k);
            // A released connection goes with the last of what it held.
            if vc.drain_until.is_some() && vc.queue.is_empty() {
                self.remove_slot(slot);
            }
        }
        None
    }

    /// Terminates input VC `a` in the switch instead of cross-connecting it: its
    /// cells and frames (HEC-checked, not policed) are kept for [`Switch::poll_local`].
    /// The control plane's VCs, e.g. signalling on VPI 0/VCI 5.
    pub fn terminate(&mut self, a: VcAddr) -> Result<(), SwitchError> {
        self.check_endpoint(Endpoint::Vc(a))?;
        self.table.insert_local(a)?;
        self.table_changed();
        Ok(())
    }

    /// Ends the local termination of `a`.
    pub fn unterminate(&mut self, a: VcAddr) -> Result<(), SwitchError> {
        if self.table.remove_local(a) {
            self.table_changed();
            Ok(())
        } else {
            Err(SwitchError::NotLocal(Endpoint::Vc(a)))
        }
    }

    /// The next cell or frame that arrived on a locally terminated VC, with the port
    /// it came in on; its header is as received (HEC corrected).
    pub fn poll_local(&mut self) -> Option<(PortId, Transmit)> {
        self.local.pop_front()
    }

    /// Sends a cell or frame of the control plane out of `port`, ahead of the VCs'
    /// queues and paced by the line; the caller builds the header (and HEC).
    pub fn send(&mut self, port: PortId, unit: Transmit) -> Result<(), SwitchError> {
        let p = self
            .ports
            .get_mut(port.index())
            .ok_or(SwitchError::UnknownPort(port))?;
        if p.push_control(unit) {
            p.local_out += 1;
            Ok(())
        } else {
            Err(SwitchError::ControlQueueFull(port))
        }
    }

    /// When `port` can next send: `None` if nothing waits; a time at or before `now`
    /// means at once.
    pub fn port_timeout(&self, port: PortId) -> Option<Instant> {
        let p = self.ports.get(port.index())?;
        p.backlogged().then(|| p.next_free())
    }

    /// The earliest time any port can send something that waits (quinn's
    /// `poll_timeout`), or a released connection's drain deadline
    /// ([`Switch::handle_timeout`]); `None` if every queue is empty.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let drain = self.draining.iter().map(|(t, _)| *t).min();
        self.ports
            .iter()
            .filter(|p| p.backlogged())
            .map(Port::next_free)
            .chain(drain)
            .min()
    }

    /// Cells waiting at `port`.
    pub fn queue_cells(&self, port: PortId) -> Option<u32> {
        self.ports.get(port.index()).map(|p| p.queue_cells)
    }

    /// Counters of `port`.
    pub fn port_stats(&self, port: PortId) -> Option<PortStats> {
        self.ports.get(port.index()).map(Port::stats)
    }

    /// Counters of a connection.
    pub fn vc_stats(&self, id: ConnId) -> Option<VcStats> {
        let slot = *self.slots.get(&id)?;
        self.vc(slot).map(Vc::stats)
    }

    /// The connection with input VC `a`, for the control plane (VC entries only).
    pub fn connection_of(&self, a: VcAddr) -> Option<ConnId> {
        let slot = self.table.lookup_vc(a)?;
        self.vc(slot).map(|vc| vc.id)
    }

    /// A snapshot of every counter: ports in id order, connections in id order.
    pub fn stat(&self) -> SwitchStats {
        let mut vcs: Vec<VcStats> = self.vcs.iter().flatten().map(Vc::stats).collect();
        vcs.sort_by_key(|v| v.conn);
        SwitchStats {
            ports: self.ports.iter().map(Port::stats).collect(),
            vcs,
        }
    }
}

/// What a replicated unit's sender is told: queued (or tagged) if any branch took
/// it, else the first branch's drop.
fn best_branch_verdict(so_far: Option<Verdict>, v: Verdict) -> Verdict {
    match (so_far, v) {
        (None, v) | (Some(Verdict::Dropped(_)), v @ (Verdict::Queued | Verdict::Tagged)) => v,
        (Some(r), _) => r,
    }
}
