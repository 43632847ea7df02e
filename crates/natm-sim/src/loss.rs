//! Link impairments: random loss, Gilbert–Elliott burst loss, duplication, corruption.
//!
//! Each link draws from its own ChaCha stream (seeded from the simulation seed and the
//! link's index), so adding a link or changing one link's impairments never shifts the
//! random choices made on the others.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::error::SimError;

/// The simulator's random number generator: portable and reproducible across
/// platforms and `rand` releases, and fast enough to draw several numbers per frame.
pub(crate) type SimRng = ChaCha8Rng;

/// A fresh generator for stream `stream` of simulation `seed`.
pub(crate) fn stream_rng(seed: u64, stream: u64) -> SimRng {
    let mut rng = SimRng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// The Gilbert–Elliott two-state burst-loss model, stepped once per frame.
///
/// In the good state a frame is lost with `loss_in_good`, in the bad state with
/// `loss_in_bad`; after each frame the state flips with the transition probability of
/// the state it is in. A stay in the bad state lasts on average `1 / p_bad_to_good`
/// frames, which is what makes the losses bursty.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Probability of moving from the good to the bad state after a frame.
    pub p_good_to_bad: f64,
    /// Probability of moving from the bad to the good state after a frame.
    pub p_bad_to_good: f64,
    /// Loss probability while in the good state.
    pub loss_in_good: f64,
    /// Loss probability while in the bad state.
    pub loss_in_bad: f64,
}

impl GilbertElliott {
    /// Gilbert's original model: nothing lost in the good state, everything in the bad.
    pub fn new(p_good_to_bad: f64, p_bad_to_good: f64) -> Self {
        GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_in_good: 0.0,
            loss_in_bad: 1.0,
        }
    }

    /// The same transitions with the given per-state loss probabilities.
    #[must_use]
    pub fn with_losses(self, loss_in_good: f64, loss_in_bad: f64) -> Self {
        GilbertElliott {
            loss_in_good,
            loss_in_bad,
            ..self
        }
    }

    /// Long-run fraction of frames lost (from the stationary state distribution).
    pub fn mean_loss(&self) -> f64 {
        let (p, r) = (self.p_good_to_bad, self.p_bad_to_good);
        if p + r == 0.0 {
            // Never leaves the good state it starts in.
            return self.loss_in_good;
        }
        let bad = p / (p + r);
        (1.0 - bad) * self.loss_in_good + bad * self.loss_in_bad
    }

    /// Mean number of consecutive frames spent in the bad state.
    pub fn mean_bad_run(&self) -> f64 {
        1.0 / self.p_bad_to_good
    }

    /// One frame through the channel in state `bad` (updated): whether it is lost.
    /// `draw(p)` is true with probability `p`; a zero probability draws nothing. The
    /// chain advances on every frame, lost or not, so that its run lengths are
    /// counted in frames as the model defines them.
    pub fn step(&self, bad: &mut bool, mut draw: impl FnMut(f64) -> bool) -> bool {
        let p_loss = if *bad {
            self.loss_in_bad
        } else {
            self.loss_in_good
        };
        let lost = draw(p_loss);
        let p_flip = if *bad {
            self.p_bad_to_good
        } else {
            self.p_good_to_bad
        };
        if draw(p_flip) {
            *bad = !*bad;
        }
        lost
    }

    /// Every probability is in 0..=1.
    pub fn validate(&self) -> Result<(), SimError> {
        check_probability("gilbert p_good_to_bad", self.p_good_to_bad)?;
        check_probability("gilbert p_bad_to_good", self.p_bad_to_good)?;
        check_probability("gilbert loss_in_good", self.loss_in_good)?;
        check_probability("gilbert loss_in_bad", self.loss_in_bad)
    }
}

/// What can go wrong to a frame on a link's wire. All probabilities are per frame.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Impairments {
    /// Independent (Bernoulli) loss probability.
    pub loss: f64,
    /// Bursty loss, applied on top of `loss`.
    pub burst: Option<GilbertElliott>,
    /// Probability that a frame that got through arrives twice.
    pub duplicate: f64,
    /// Probability that each arriving copy has one bit flipped (and is then dropped by
    /// the receiver's CRC check).
    pub corrupt: f64,
}

impl Impairments {
    /// No impairments at all.
    pub const NONE: Impairments = Impairments {
        loss: 0.0,
        burst: None,
        duplicate: 0.0,
        corrupt: 0.0,
    };

    /// Checks that every probability lies in [0, 1].
    pub fn validate(&self) -> Result<(), SimError> {
        check_probability("loss", self.loss)?;
        check_probability("duplicate", self.duplicate)?;
        check_probability("corrupt", self.corrupt)?;
        self.burst.as_ref().map_or(Ok(()), GilbertElliott::validate)
    }
}

fn check_probability(what: &'static str, value: f64) -> Result<(), SimError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(SimError::BadProbability { what, value })
    }
}

/// Why the wire lost a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireLoss {
    Random,
    Burst,
}

/// What happens to one frame put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fate {
    pub(crate) lost: Option<WireLoss>,
    pub(crate) duplicated: bool,
}

/// The random state a link's impairments evolve; the settings live in the link's
/// configuration and are passed in, so changing them mid-run is a plain assignment.
#[derive(Debug, Clone)]
pub(crate) struct Impairer {
    rng: SimRng,
    /// Gilbert–Elliott state; every link starts in the good state, and keeps its state
    /// across a change of settings, like a channel whose statistics changed.
    bad: bool,
}

impl Impairer {
    pub(crate) fn new(rng: SimRng) -> Self {
        Impairer { rng, bad: false }
    }

    /// Decides the fate of the next frame. Zero probabilities draw nothing, so a clean
    /// link costs no random numbers.
    pub(crate) fn fate(&mut self, cfg: &Impairments) -> Fate {
        let random = self.draw(cfg.loss);
        // The burst chain advances on every frame, lost or not, so that its run lengths
        // are counted in frames as the model defines them.
        let burst = match cfg.burst {
            Some(ge) => {
                let mut bad = self.bad;
                let lost = ge.step(&mut bad, |p| self.draw(p));
                self.bad = bad;
                lost
            }
            None => false,
        };
        let lost = if random {
            Some(WireLoss::Random)
        } else if burst {
            Some(WireLoss::Burst)
        } else {
            None
        };
        let duplicated = lost.is_none() && self.draw(cfg.duplicate);
        Fate { lost, duplicated }
    }

    /// Whether the next arriving copy gets a bit flipped.
    pub(crate) fn corrupts(&mut self, cfg: &Impairments) -> bool {
        self.draw(cfg.corrupt)
    }

    pub(crate) fn rng(&mut self) -> &mut SimRng {
        &mut self.rng
    }

    fn draw(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random_bool(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_probabilities_outside_unit_interval() {
        let bad = Impairments {
            loss: 1.5,
            ..Impairments::NONE
        };
        assert!(matches!(
            bad.validate(),
            Err(SimError::BadProbability { what: "loss", .. })
        ));
        let nan = Impairments {
            burst: Some(GilbertElliott::new(f64::NAN, 0.5)),
            ..Impairments::NONE
        };
        assert!(nan.validate().is_err());
        assert!(Impairments::NONE.validate().is_ok());
    }

    #[test]
    fn gilbert_stationary_loss_matches_formula() {
        let ge = GilbertElliott::new(0.01, 0.25).with_losses(0.001, 0.8);
        let cfg = Impairments {
            burst: Some(ge),
            ..Impairments::NONE
        };
        let mut imp = Impairer::new(stream_rng(7, 0));
        let n = 400_000;
        let lost = (0..n).filter(|_| imp.fate(&cfg).lost.is_some()).count();
        let measured = lost as f64 / n as f64;
        let expected = ge.mean_loss();
        assert!(
            (measured - expected).abs() < 0.1 * expected,
            "measured {measured}, expected {expected}"
        );
    }

    #[test]
    fn clean_link_draws_no_random_numbers() {
        let mut imp = Impairer::new(stream_rng(1, 0));
        let before = imp.rng.get_word_pos();
        for _ in 0..100 {
            assert_eq!(
                imp.fate(&Impairments::NONE),
                Fate {
                    lost: None,
                    duplicated: false
                }
            );
            assert!(!imp.corrupts(&Impairments::NONE));
        }
        assert_eq!(imp.rng.get_word_pos(), before);
    }
}
