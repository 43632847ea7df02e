//! The cross-connect table: which (port, VPI, VCI) goes to which, for VC switching,
//! and which (port, VPI) to which, for VP switching (ITU-T I.311: a VP switch
//! translates the VPI only and carries every VCI of the path unchanged).
//!
//! Each cross-connect is one direction; a duplex call is two. The table also keeps
//! the output side of every entry, so that two inputs never merge into one VC.

use core::fmt;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::SwitchError;

/// A port of the switch: a link to a host or to another switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PortId(pub u16);

impl PortId {
    /// The port's index (ports are numbered from 0 in the order they were added).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A cross-connect, as [`crate::Switch::connect`] names it. Ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// One end of a VC on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct VcAddr {
    /// The port.
    pub port: PortId,
    /// Virtual path identifier (8 bits on a UNI port, 12 on an NNI port).
    pub vpi: u16,
    /// Virtual channel identifier.
    pub vci: u16,
}

impl VcAddr {
    /// VC `vpi`/`vci` on `port`.
    pub const fn new(port: PortId, vpi: u16, vci: u16) -> VcAddr {
        VcAddr { port, vpi, vci }
    }
}

/// One end of a VP on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct VpAddr {
    /// The port.
    pub port: PortId,
    /// Virtual path identifier.
    pub vpi: u16,
}

impl VpAddr {
    /// VP `vpi` on `port`.
    pub const fn new(port: PortId, vpi: u16) -> VpAddr {
        VpAddr { port, vpi }
    }
}

/// One side of a cross-connect, for errors and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Endpoint {
    /// A VC.
    Vc(VcAddr),
    /// A whole VP.
    Vp(VpAddr),
}

impl Endpoint {
    /// The port this side is on.
    pub const fn port(self) -> PortId {
        match self {
            Endpoint::Vc(a) => a.port,
            Endpoint::Vp(a) => a.port,
        }
    }

    /// The VPI.
    pub const fn vpi(self) -> u16 {
        match self {
            Endpoint::Vc(a) => a.vpi,
            Endpoint::Vp(a) => a.vpi,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Vc(a) => write!(f, "port {} VC {}/{}", a.port, a.vpi, a.vci),
            Endpoint::Vp(a) => write!(f, "port {} VP {}", a.port, a.vpi),
        }
    }
}

/// What a cross-connect joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum CrossConnect {
    /// VC switching: cells of `from` leave as cells of `to`.
    Vc {
        /// The input VC.
        from: VcAddr,
        /// The output VC.
        to: VcAddr,
    },
    /// VP switching: cells of VP `from` leave on VP `to` with their VCI kept.
    Vp {
        /// The input VP.
        from: VpAddr,
        /// The output VP.
        to: VpAddr,
    },
}

impl CrossConnect {
    /// A VC cross-connect.
    pub const fn vc(from: VcAddr, to: VcAddr) -> CrossConnect {
        CrossConnect::Vc { from, to }
    }

    /// A VP cross-connect.
    pub const fn vp(from: VpAddr, to: VpAddr) -> CrossConnect {
        CrossConnect::Vp { from, to }
    }

    /// The input side.
    pub const fn from(&self) -> Endpoint {
        match *self {
            CrossConnect::Vc { from, .. } => Endpoint::Vc(from),
            CrossConnect::Vp { from, .. } => Endpoint::Vp(from),
        }
    }

    /// The output side.
    pub const fn to(&self) -> Endpoint {
        match *self {
            CrossConnect::Vc { to, .. } => Endpoint::Vc(to),
            CrossConnect::Vp { to, .. } => Endpoint::Vp(to),
        }
    }
}

/// Index of a connection's state in the switch's slab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Slot(pub(crate) u32);

impl Slot {
    /// The input side of a VC terminated in the switch (the control plane's), not
    /// cross-connected.
    pub(crate) const LOCAL: Slot = Slot(u32::MAX);

    pub(crate) const fn index(self) -> usize {
        self.0 as usize
    }
}

/// A multiplicative hash for the table's integer keys (FxHash's constant). The keys
/// are switch-local identifiers that the control plane allocates, not strings an
/// attacker picks, and SipHash would cost more than the rest of a cell's lookup.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

const fn vc_key(a: VcAddr) -> u64 {
    ((a.port.0 as u64) << 32) | ((a.vpi as u64) << 16) | a.vci as u64
}

const fn vp_key(port: PortId, vpi: u16) -> u32 {
    ((port.0 as u32) << 16) | vpi as u32
}

/// One side (inputs or outputs) of every cross-connect: VC entries, VP entries, and
/// how many VC entries use each VPI of a port (to refuse VP/VC mixing).
#[derive(Debug, Default)]
struct Side {
    vc: FastMap<u64, Slot>,
    vp: FastMap<u32, Slot>,
    vc_per_vpi: FastMap<u32, u32>,
}

impl Side {
    fn check_free(
        &self,
        e: Endpoint,
        taken: fn(Endpoint) -> SwitchError,
    ) -> Result<(), SwitchError> {
        match e {
            Endpoint::Vc(a) => {
                if self.vc.contains_key(&vc_key(a)) {
                    return Err(taken(e));
                }
                if self.vp.contains_key(&vp_key(a.port, a.vpi)) {
                    return Err(SwitchError::VpiConflict(e));
                }
            }
            Endpoint::Vp(a) => {
                let k = vp_key(a.port, a.vpi);
                if self.vp.contains_key(&k) {
                    return Err(taken(e));
                }
                if self.vc_per_vpi.get(&k).is_some_and(|&n| n > 0) {
                    return Err(SwitchError::VpiConflict(e));
                }
            }
        }
        Ok(())
    }

    fn insert(&mut self, e: Endpoint, slot: Slot) {
        match e {
            Endpoint::Vc(a) => {
                self.vc.insert(vc_key(a), slot);
                *self.vc_per_vpi.entry(vp_key(a.port, a.vpi)).or_default() += 1;
            }
            Endpoint::Vp(a) => {
                self.vp.insert(vp_key(a.port, a.vpi), slot);
            }
        }
    }

    fn remove(&mut self, e: Endpoint) {
        match e {
            Endpoint::Vc(a) => {
                if self.vc.remove(&vc_key(a)).is_some() {
                    let k = vp_key(a.port, a.vpi);
                    if let Some(n) = self.vc_per_vpi.get_mut(&k) {
                        *n -= 1;
                        if *n == 0 {
                            self.vc_per_vpi.remove(&k);
                        }
                    }
                }
            }
            Endpoint::Vp(a) => {
                self.vp.remove(&vp_key(a.port, a.vpi));
            }
        }
    }
}

/// The translation table of the whole switch.
#[derive(Debug, Default)]
pub(crate) struct Table {
    inputs: Side,
    outputs: Side,
}

impl Table {
    /// Checks that `xc` can be added: its input not switched yet, its output not used,
    /// and no VPI both VP- and VC-switched on a port.
    pub(crate) fn check(&self, xc: &CrossConnect) -> Result<(), SwitchError> {
        self.inputs
            .check_free(xc.from(), SwitchError::EntryExists)?;
        self.outputs.check_free(xc.to(), SwitchError::OutputInUse)
    }

    /// Adds `xc` (after [`Table::check`]).
    pub(crate) fn insert(&mut self, xc: &CrossConnect, slot: Slot) {
        self.inputs.insert(xc.from(), slot);
        self.outputs.insert(xc.to(), slot);
    }

    /// Terminates input VC `a` in the switch: its cells go to the control plane.
    pub(crate) fn insert_local(&mut self, a: VcAddr) -> Result<(), SwitchError> {
        let e = Endpoint::Vc(a);
        self.inputs.check_free(e, SwitchError::EntryExists)?;
        self.inputs.insert(e, Slot::LOCAL);
        Ok(())
    }

    /// Ends the local termination of `a`; false if it was not terminated.
    pub(crate) fn remove_local(&mut self, a: VcAddr) -> bool {
        if self.lookup_vc(a) != Some(Slot::LOCAL) {
            return false;
        }
        self.inputs.remove(Endpoint::Vc(a));
        true
    }

    /// Removes `xc`.
    pub(crate) fn remove(&mut self, xc: &CrossConnect) {
        self.inputs.remove(xc.from());
        self.outputs.remove(xc.to());
    }

    /// Checks that output `e` is free, for a branch of a point-to-multipoint VC (its
    /// input is its root's).
    pub(crate) fn check_output(&self, e: Endpoint) -> Result<(), SwitchError> {
        self.outputs.check_free(e, SwitchError::OutputInUse)
    }

    /// Adds the output of a branch (after [`Table::check_output`]).
    pub(crate) fn insert_output(&mut self, e: Endpoint, slot: Slot) {
        self.outputs.insert(e, slot);
    }

    /// Removes the output of a branch.
    pub(crate) fn remove_output(&mut self, e: Endpoint) {
        self.outputs.remove(e);
    }

    /// Hands input `e`, already in the table, to connection `slot` (a branch that
    /// takes over the input of a point-to-multipoint VC whose root branch leaves).
    pub(crate) fn move_input(&mut self, e: Endpoint, slot: Slot) {
        match e {
            Endpoint::Vc(a) => {
                if let Some(s) = self.inputs.vc.get_mut(&vc_key(a)) {
                    *s = slot;
                }
            }
            Endpoint::Vp(a) => {
                if let Some(s) = self.inputs.vp.get_mut(&vp_key(a.port, a.vpi)) {
                    *s = slot;
                }
            }
        }
    }

    /// The connection cells of `vpi`/`vci` arriving on `port` belong to: a VP entry
    /// for the VPI if there is one, else the VC entry.
    #[inline]
    pub(crate) fn lookup(&self, port: PortId, vpi: u16, vci: u16) -> Option<Slot> {
        if !self.inputs.vp.is_empty() {
            if let Some(&s) = self.inputs.vp.get(&vp_key(port, vpi)) {
                return Some(s);
            }
        }
        self.inputs
            .vc
            .get(&vc_key(VcAddr { port, vpi, vci }))
            .copied()
    }

    /// The connection whose input is VC `vpi`/`vci` on `port` (VC entries only: an F5
    /// flow belongs to a VC).
    pub(crate) fn lookup_vc(&self, a: VcAddr) -> Option<Slot> {
        self.inputs.vc.get(&vc_key(a)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vc(p: u16, vpi: u16, vci: u16) -> VcAddr {
        VcAddr::new(PortId(p), vpi, vci)
    }

    #[test]
    fn vp_and_vc_entries_and_their_conflicts() {
        let mut t = Table::default();
        let a = CrossConnect::vc(vc(0, 1, 32), vc(1, 2, 40));
        t.check(&a).unwrap();
        t.insert(&a, Slot(0));
        assert_eq!(t.lookup(PortId(0), 1, 32), Some(Slot(0)));
        assert_eq!(t.lookup(PortId(0), 1, 33), None);
        assert_eq!(
            t.check(&CrossConnect::vc(vc(0, 1, 32), vc(2, 0, 40))),
            Err(SwitchError::EntryExists(Endpoint::Vc(vc(0, 1, 32))))
        );
        assert_eq!(
            t.check(&CrossConnect::vc(vc(3, 1, 32), vc(1, 2, 40))),
            Err(SwitchError::OutputInUse(Endpoint::Vc(vc(1, 2, 40))))
        );
        let vp = CrossConnect::vp(VpAddr::new(PortId(0), 1), VpAddr::new(PortId(2), 7));
        assert_eq!(t.check(&vp), Err(SwitchError::VpiConflict(vp.from())));
        t.remove(&a);
        t.check(&vp).unwrap();
        t.insert(&vp, Slot(1));
        assert_eq!(t.lookup(PortId(0), 1, 999), Some(Slot(1)));
        assert_eq!(t.lookup_vc(vc(0, 1, 999)), None);
    }
}
