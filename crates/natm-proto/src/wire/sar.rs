//! AAL5 reassembly of a cell link (I.363.5 SAR receiver, I.432.1 header check): the
//! cells of many VCs in, whole CPCS-SDUs out, with bounded memory.
//!
//! [`CellReassembly`] takes cells as they come off one link (or, keyed by a link
//! value `L`, off several, e.g. the sources of an unconnected socket), checks and
//! corrects each header with the I.432.1 receiver (`wire::cell::HecReceiver`: a
//! single-bit error corrected after a good header, anything else discarded), and keeps
//! one [`Reassembler`] per VC. A frame completes at its end-of-SDU cell (AUU = 1) when
//! its CRC-32 and Length check out; a broken frame is dropped whole and counted.
//!
//! Bounds: one frame per VC of at most `max_sdu` octets (a longer one is dropped and
//! the rest of it skipped up to its last cell); at most `max_vcs` VCs with state (VCs
//! with no partial frame are forgotten first when a new one needs room); a partial
//! frame older than `timeout` when its VC's next cell arrives, or at [`expire`], is
//! dropped (I.363.5's reassembly timer, run by the caller's clock).
//!
//! Segmentation, the other direction, is `wire::train::TrainPacker`.
//!
//! [`expire`]: CellReassembly::expire

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use thiserror::Error;

use super::aal5::{Aal5Error, Reassembler, MAX_SDU_LEN};
use super::cell::{
    HeaderFormat, HecReceiver, HecVerdict, Packet, CELL_LEN, PAYLOAD_LEN, VCI_SIGNALLING,
};
use super::oam::Scope;
use super::vcframe::{self, FrameKind};

/// Why a cell or a frame did not make it through segmentation or reassembly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SarError {
    /// An OAM or RM frame of the frame mode is one cell's payload (48 octets), not an
    /// AAL5 SDU: one of another length has no cell form.
    #[error("an OAM or RM frame is one 48-octet cell payload, not an AAL5 SDU")]
    OamFrame,
    /// A train size outside 1..=1,235 cells (`wire::train::MAX_TRAIN_CELLS`).
    #[error("a train of {0} cells: 1..=1235 allowed")]
    TrainSize(usize),
    /// The cell's header had an error the I.432.1 receiver would not correct.
    #[error("cell header error not corrected (I.432.1): cell discarded")]
    Hec,
    /// A cell of a new VC while `max_vcs` VCs hold partial frames.
    #[error("{0} VCs already in reassembly: cell dropped")]
    TooManyVcs(usize),
    /// The AAL5 layer refused the cell or dropped the frame (CRC, Length, size, not
    /// user data).
    #[error(transparent)]
    Aal5(#[from] Aal5Error),
}

/// The bounds of a [`CellReassembly`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReassemblyLimits {
    /// Largest SDU per VC (1..=65,535).
    pub max_sdu: usize,
    /// Most VCs with reassembly state at once.
    pub max_vcs: usize,
    /// A partial frame older than this is dropped; `None`: never.
    pub timeout: Option<Duration>,
}

impl Default for ReassemblyLimits {
    /// 65,535-octet SDUs, 1,024 VCs, 10 s (the order of I.363.5's timer).
    fn default() -> Self {
        ReassemblyLimits {
            max_sdu: MAX_SDU_LEN,
            max_vcs: 1024,
            timeout: Some(Duration::from_secs(10)),
        }
    }
}

/// What a [`CellReassembly`] did, in cells and frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SarCounters {
    /// Cells taken.
    pub cells: u64,
    /// Frames delivered.
    pub frames: u64,
    /// Headers with a single-bit error, corrected.
    pub hec_corrected: u64,
    /// Cells discarded for a header error.
    pub hec_discarded: u64,
    /// Idle or unassigned cells (VPI 0, VCI 0), skipped.
    pub idle: u64,
    /// Cells that are neither AAL5 user data, F5 OAM nor RM (reserved PTI), refused.
    pub not_user_data: u64,
    /// F5 OAM cells, each delivered as an OAM frame of its own (`wire::oam`).
    pub oam: u64,
    /// RM cells, each delivered as an RM frame of its own (`wire::rm`).
    pub rm: u64,
    /// Frames dropped by the AAL5 checks (CRC-32, Length, pad, abort, oversize).
    pub bad_frames: u64,
    /// Partial frames dropped by the reassembly timeout.
    pub timeouts: u64,
    /// Cells dropped because too many VCs were in reassembly.
    pub vc_limit: u64,
}

/// A frame reassembled from cells; the SDU borrows the reassembler until its next
/// call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellFrame<'a> {
    /// VPI of its cells.
    pub vpi: u16,
    /// VCI of its cells.
    pub vci: u16,
    /// Any of its cells had CLP = 1.
    pub clp: bool,
    /// Any of its cells had EFCI set.
    pub efci: bool,
    /// Cells it took.
    pub cells: usize,
    /// The CPCS-SDU; for an OAM or RM cell, its 48-octet payload.
    pub sdu: &'a [u8],
    /// A cell that is a frame of its own, not part of an AAL5 frame.
    pub single: Option<SingleCell>,
}

/// A cell that is a frame by itself (`vcframe::Repr::single_cell_pti`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SingleCell {
    /// An F5 OAM cell (PTI 100 or 101) of this flow.
    Oam(Scope),
    /// An ABR RM cell (PTI 110).
    Rm,
}

impl CellFrame<'_> {
    /// Its frame-mode VC header (`wire::vcframe`): OAM for an OAM cell (the flow in
    /// the `C` bit, `wire::oam`), RM for an RM cell, signalling on VCI 5, data
    /// elsewhere; `None` if the VPI does not fit the header's 8 bits (NNI).
    pub fn vc_header(&self) -> Option<vcframe::Repr> {
        let vpi = u8::try_from(self.vpi).ok()?;
        match self.single {
            Some(SingleCell::Oam(scope)) => {
                return Some(vcframe::Repr {
                    clp: self.clp,
                    ..scope.frame_header(vpi, self.vci)
                })
            }
            Some(SingleCell::Rm) => {
                return Some(vcframe::Repr {
                    clp: self.clp,
                    ..vcframe::Repr::new(FrameKind::Rm, vpi, self.vci)
                })
            }
            None => {}
        }
        let kind = if self.vci == VCI_SIGNALLING {
            FrameKind::Signalling
        } else {
            FrameKind::Data
        };
        Some(vcframe::Repr {
            kind,
            ci: self.efci,
            clp: self.clp,
            vpi: u8::try_from(self.vpi).ok()?,
            vci: self.vci,
        })
    }
}

#[derive(Debug)]
struct Partial {
    rx: Reassembler,
    started: Duration,
    clp: bool,
    efci: bool,
}

/// Per-VC AAL5 reassembly of the cells of one link (or of several, told apart by
/// `L`).
#[derive(Debug)]
pub struct CellReassembly<L = ()> {
    vcs: HashMap<(L, u16, u16), Partial>,
    hec: HecReceiver,
    format: HeaderFormat,
    limits: ReassemblyLimits,
    counters: SarCounters,
    /// The payload of the last OAM or RM cell, which [`CellFrame::sdu`] borrows.
    oam: [u8; PAYLOAD_LEN],
}

impl<L: Copy + Eq + Hash> CellReassembly<L> {
    /// Reassembly of cells in header `format` within `limits`.
    pub fn new(format: HeaderFormat, limits: ReassemblyLimits) -> Self {
        CellReassembly {
            vcs: HashMap::new(),
            hec: HecReceiver::new(),
            format,
            limits: ReassemblyLimits {
                max_sdu: limits.max_sdu.clamp(1, MAX_SDU_LEN),
                max_vcs: limits.max_vcs.max(1),
                ..limits
            },
            counters: SarCounters::default(),
            oam: [0; PAYLOAD_LEN],
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> SarCounters {
        self.counters
    }

    /// VCs with reassembly state.
    pub fn vcs(&self) -> usize {
        self.vcs.len()
    }

    /// Cells buffered in partial frames, over all VCs.
    pub fn buffered_cells(&self) -> usize {
        self.vcs.values().map(|p| p.rx.buffered_cells()).sum()
    }

    /// Takes one cell received at `now` (time since the caller's epoch: `wire`
    /// depends on no clock type) on `link`: its header is checked and corrected
    /// in place, then its payload joins its VC's frame. Returns the frame its last cell
    /// completes, `None` mid-frame (or for an idle cell), or why the cell or its frame
    /// was dropped (also counted).
    pub fn push(
        &mut self,
        now: Duration,
        link: L,
        cell: &mut [u8; CELL_LEN],
    ) -> Result<Option<CellFrame<'_>>, SarError> {
        self.counters.cells += 1;
        let header = cell
            .first_chunk_mut()
            .expect("a cell is longer than its header");
        match self.hec.check(header) {
            HecVerdict::Valid => {}
            HecVerdict::Corrected { .. } => self.counters.hec_corrected += 1,
            HecVerdict::Discarded => {
                self.counters.hec_discarded += 1;
                return Err(SarError::Hec);
            }
        }
        let p = Packet::new_unchecked(&cell[..]);
        let (vpi, vci, pti, clp) = (p.vpi(self.format), p.vci(), p.pti(), p.clp());
        if vpi == 0 && vci == 0 {
            self.counters.idle += 1;
            return Ok(None);
        }
        let single = match Scope::of_pti(pti) {
            Some(scope) => Some(SingleCell::Oam(scope)),
            None => (pti == super::cell::Pti::ResourceManagement).then_some(SingleCell::Rm),
        };
        if let Some(single) = single {
            // One cell, one frame: no reassembly, and the VC's partial frame (OAM and
            // RM cells may come between its cells) is left as it is.
            match single {
                SingleCell::Oam(_) => self.counters.oam += 1,
                SingleCell::Rm => self.counters.rm += 1,
            }
            self.oam.copy_from_slice(&cell[5..]);
            return Ok(Some(CellFrame {
                vpi,
                vci,
                clp,
                efci: false,
                cells: 1,
                sdu: &self.oam,
                single: Some(single),
            }));
        }
        if !pti.is_user_data() {
            self.counters.not_user_data += 1;
            return Err(Aal5Error::NotUserData { pti }.into());
        }
        let key = (link, vpi, vci);
        if !self.vcs.contains_key(&key) && self.vcs.len() >= self.limits.max_vcs {
            self.vcs.retain(|_, p| p.rx.buffered_cells() > 0);
            if self.vcs.len() >= self.limits.max_vcs {
                self.counters.vc_limit += 1;
                return Err(SarError::TooManyVcs(self.limits.max_vcs));
            }
        }
        let max_sdu = self.limits.max_sdu;
        let entry = self.vcs.entry(key).or_insert_with(|| Partial {
            rx: Reassembler::with_max_sdu(max_sdu),
            started: now,
            clp: false,
            efci: false,
        });
        if entry.rx.buffered_cells() == 0 {
            entry.started = now;
            entry.clp = false;
            entry.efci = false;
        } else if self
            .limits
            .timeout
            .is_some_and(|t| now.saturating_sub(entry.started) > t)
        {
            entry.rx.reset();
            self.counters.timeouts += 1;
            entry.started = now;
            entry.clp = false;
            entry.efci = false;
        }
        entry.clp |= clp;
        entry.efci |= pti.congestion_experienced();
        let cells = entry.rx.buffered_cells() + 1;
        let (clp, efci) = (entry.clp, entry.efci);
        let payload = cell[5..].try_into().expect("48 octets after the header");
        match entry.rx.push_payload(payload, pti.is_end_of_sdu()) {
            Ok(None) => Ok(None),
            Ok(Some(sdu)) => {
                self.counters.frames += 1;
                Ok(Some(CellFrame {
                    vpi,
                    vci,
                    clp,
                    efci,
                    cells,
                    sdu,
                    single: None,
                }))
            }
            Err(e) => {
                self.counters.bad_frames += 1;
                Err(e.into())
            }
        }
    }

    /// Drops every partial frame older than the timeout at `now` (each counted);
    /// returns how many.
    pub fn expire(&mut self, now: Duration) -> usize {
        let Some(t) = self.limits.timeout else {
            return 0;
        };
        let mut n = 0;
        for p in self.vcs.values_mut() {
            if p.rx.buffered_cells() > 0 && now.saturating_sub(p.started) > t {
                p.rx.reset();
                n += 1;
            }
        }
        self.counters.timeouts += n as u64;
        n
    }

    /// Forgets the state of one VC (its partial frame is dropped, not counted).
    pub fn forget(&mut self, link: L, vpi: u16, vci: u16) {
        self.vcs.remove(&(link, vpi, vci));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::train::{self, TrainPacker};
    use proptest::prelude::*;

    fn rx() -> CellReassembly {
        CellReassembly::new(HeaderFormat::Uni, ReassemblyLimits::default())
    }

    /// Every cell of the packed trains, in order.
    fn cells_of(p: &TrainPacker) -> Vec<[u8; CELL_LEN]> {
        p.datagrams()
            .flat_map(|d| train::parse(d).expect("a train"))
            .map(|c| c.try_into().unwrap())
            .collect()
    }

    /// The SDUs (as owned vectors) and errors that `cells` reassemble into.
    fn reassemble(
        r: &mut CellReassembly,
        cells: Vec<[u8; CELL_LEN]>,
    ) -> Vec<Result<(u16, Vec<u8>), SarError>> {
        let mut out = Vec::new();
        for mut c in cells {
            match r.push(Duration::ZERO, (), &mut c) {
                Ok(Some(f)) => out.push(Ok((f.vci, f.sdu.to_vec()))),
                Ok(None) => {}
                Err(e) => out.push(Err(e)),
            }
        }
        out
    }

    #[test]
    fn a_64k_tpdu_takes_several_trains_and_comes_back() {
        let sdu: Vec<u8> = (0..65_535u32).map(|i| (i * 7) as u8).collect();
        let mut p = TrainPacker::new(train::MAX_TRAIN_CELLS).unwrap();
        assert_eq!(p.push_frame(&vcframe::Repr::data(0, 40), &sdu), Ok(1366));
        assert_eq!(p.trains(), 2);
        let mut r = rx();
        assert_eq!(reassemble(&mut r, cells_of(&p)), vec![Ok((40, sdu))]);
        assert_eq!(r.buffered_cells(), 0);
    }

    #[test]
    fn an_oam_frame_is_one_oam_cell_and_back_even_inside_a_frame() {
        use crate::wire::oam::Loopback;
        let probe = Loopback::request(42).to_bytes();
        let data: Vec<u8> = (0..200u8).collect();
        let mut p = TrainPacker::new(32).unwrap();
        // A data frame's first cells, an end-to-end and a segment OAM frame, the rest.
        let mut whole = TrainPacker::new(32).unwrap();
        assert_eq!(whole.push_frame(&vcframe::Repr::data(0, 40), &data), Ok(5));
        let cells = cells_of(&whole);
        for c in &cells[..2] {
            p.push_cell(c);
        }
        for scope in [Scope::EndToEnd, Scope::Segment] {
            assert_eq!(p.push_frame(&scope.frame_header(0, 40), &probe), Ok(1));
        }
        for c in &cells[2..] {
            p.push_cell(c);
        }
        let all = cells_of(&p);
        assert_eq!(
            Packet::new_unchecked(&all[2][..]).pti(),
            Scope::EndToEnd.pti()
        );
        assert_eq!(
            Packet::new_unchecked(&all[3][..]).pti(),
            Scope::Segment.pti()
        );
        let mut r = rx();
        let mut heads = Vec::new();
        for mut c in all {
            if let Ok(Some(f)) = r.push(Duration::ZERO, (), &mut c) {
                heads.push((f.vc_header().unwrap(), f.sdu.to_vec()));
            }
        }
        assert_eq!(
            heads,
            vec![
                (Scope::EndToEnd.frame_header(0, 40), probe.to_vec()),
                (Scope::Segment.frame_header(0, 40), probe.to_vec()),
                (vcframe::Repr::data(0, 40), data),
            ],
            "each OAM cell is its own frame; the data frame around them is whole"
        );
        assert_eq!((r.counters().oam, r.counters().not_user_data), (2, 0));
        // An OAM frame that is not one cell payload has no cell form.
        assert_eq!(
            p.push_frame(&Scope::EndToEnd.frame_header(0, 40), &probe[..47]),
            Err(SarError::OamFrame)
        );
    }

    #[test]
    fn an_rm_frame_is_one_pti_110_cell_and_back() {
        use crate::wire::rm::{Rate, RmCell};
        let rm = RmCell::forward(Rate::from_cells(1e5), Rate::from_cells(1e4), Rate::ZERO);
        let h = vcframe::Repr::new(FrameKind::Rm, 0, 40);
        let mut p = TrainPacker::new(8).unwrap();
        assert_eq!(p.push_frame(&h, &rm.to_bytes()), Ok(1));
        let mut cells = cells_of(&p);
        assert_eq!(
            Packet::new_unchecked(&cells[0][..]).pti(),
            crate::wire::cell::Pti::ResourceManagement
        );
        let mut r = rx();
        let f = r.push(Duration::ZERO, (), &mut cells[0]).unwrap().unwrap();
        assert_eq!((f.vc_header(), f.single), (Some(h), Some(SingleCell::Rm)));
        assert_eq!(RmCell::parse(f.sdu), Ok(rm));
        assert_eq!((r.counters().rm, r.counters().not_user_data), (1, 0));
        assert_eq!(p.push_frame(&h, &[0; 47]), Err(SarError::OamFrame));
    }

    #[test]
    fn flags_kinds_and_limits() {
        let mut p = TrainPacker::new(8).unwrap();
        let h = vcframe::Repr {
            ci: true,
            clp: true,
            ..vcframe::Repr::new(FrameKind::Signalling, 0, VCI_SIGNALLING)
        };
        p.push_frame(&h, b"setup").unwrap();
        let mut r = rx();
        let mut c = cells_of(&p)[0];
        let f = r.push(Duration::ZERO, (), &mut c).unwrap().unwrap();
        assert_eq!(f.vc_header(), Some(h));
        assert_eq!(f.cells, 1);

        // Two VCs allowed; a third VC's cell is refused while both hold a partial frame.
        let mut r = CellReassembly::new(
            HeaderFormat::Uni,
            ReassemblyLimits {
                max_vcs: 2,
                ..ReassemblyLimits::default()
            },
        );
        for vci in [40, 41, 42] {
            let mut p = TrainPacker::new(8).unwrap();
            p.push_frame(&vcframe::Repr::data(0, vci), &[1; 100])
                .unwrap();
            let mut first = cells_of(&p)[0];
            let got = r.push(Duration::ZERO, (), &mut first);
            if vci == 42 {
                assert_eq!(got, Err(SarError::TooManyVcs(2)));
            } else {
                assert_eq!(got, Ok(None));
            }
        }
        assert_eq!(r.counters().vc_limit, 1);
        // A partial frame past the timeout is dropped when its VC's next cell arrives.
        let late = Duration::from_secs(11);
        assert_eq!(r.expire(late), 2);
        assert_eq!(r.counters().timeouts, 2);
        assert_eq!(r.buffered_cells(), 0);
    }

    #[test]
    fn empty_sdu_is_refused() {
        let mut p = TrainPacker::new(8).unwrap();
        assert_eq!(
            p.push_frame(&vcframe::Repr::data(0, 40), &[]),
            Err(SarError::Aal5(Aal5Error::EmptySdu))
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// segment ∘ reassemble is the identity, for any SDU length and train size.
        #[test]
        fn segment_then_reassemble_is_identity(
            len in 1usize..=65_535,
            seed in any::<u8>(),
            n in 1usize..=train::MAX_TRAIN_CELLS,
        ) {
            let sdu: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
            let mut p = TrainPacker::new(n).unwrap();
            p.push_frame(&vcframe::Repr::data(0, 77), &sdu).unwrap();
            prop_assert_eq!(p.trains(), crate::wire::aal5::cell_count(len).div_ceil(n));
            let mut r = rx();
            prop_assert_eq!(reassemble(&mut r, cells_of(&p)), vec![Ok((77, sdu))]);
        }

        /// Any single-bit error in any cell's header is corrected (I.432.1).
        #[test]
        fn single_bit_header_errors_are_corrected(
            len in 1usize..=4_000,
            which in any::<prop::sample::Index>(),
            bit in 0usize..40,
        ) {
            let sdu = vec![0xA5; len];
            let mut p = TrainPacker::new(32).unwrap();
            p.push_frame(&vcframe::Repr::data(1, 99), &sdu).unwrap();
            let mut cells = cells_of(&p);
            let i = which.index(cells.len());
            cells[i][bit / 8] ^= 0x80 >> (bit % 8);
            let mut r = rx();
            prop_assert_eq!(reassemble(&mut r, cells), vec![Ok((99, sdu))]);
            prop_assert_eq!(r.counters().hec_corrected, 1);
        }

        /// A lost cell loses its frame and no other: the next frame reassembles. Losing
        /// a frame's last cell (its end mark) merges it with the next, whose CRC then
        /// fails too (AAL5 has no other frame boundary); the frame after that survives.
        #[test]
        fn a_lost_cell_loses_its_frame(
            lens in prop::array::uniform3(1usize..=3_000),
            lost in any::<prop::sample::Index>(),
        ) {
            let sdus: Vec<Vec<u8>> =
                lens.iter().enumerate().map(|(k, &l)| vec![k as u8 + 1; l]).collect();
            let mut p = TrainPacker::new(16).unwrap();
            for s in &sdus {
                p.push_frame(&vcframe::Repr::data(0, 50), s).unwrap();
            }
            let first = crate::wire::aal5::cell_count(lens[0]);
            let i = lost.index(first);
            let mut cells = cells_of(&p);
            cells.remove(i);
            let mut r = rx();
            let got: Vec<Vec<u8>> =
                reassemble(&mut r, cells).into_iter().filter_map(Result::ok).map(|(_, s)| s).collect();
            if first == 1 {
                // A one-cell frame lost whole: nothing to merge.
                prop_assert_eq!(got, sdus[1..].to_vec());
            } else if i + 1 < first {
                prop_assert_eq!(got, sdus[1..].to_vec());
                prop_assert_eq!(r.counters().bad_frames, 1);
            } else {
                prop_assert_eq!(got, sdus[2..].to_vec());
                prop_assert_eq!(r.counters().bad_frames, 1);
            }
        }
    }
}
