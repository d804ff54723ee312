//! The configurator's decision (paper §5.1): whether to move to another configuration,
//! and to which.
//!
//! Reconfiguring rewrites every object into the new subspaces, and the model is only
//! about 92 % accurate, so the paper clusters configurations whose predictions are within
//! a tunable threshold and deploys the most efficient of the best cluster. Here two
//! fractions say what "within" means (0.1: 10 % more predicted throughput):
//! - the *switch margin*: the current configuration is kept unless the best candidate is
//!   predicted to beat it by more than this; a migration is never paid for a tie;
//! - the *tie margin*: every candidate predicted within this of the best is as good as the
//!   best as far as the model can tell, and of those the one storing the fewest copies of
//!   each object is deployed (fewer subspaces: less memory, less work per update), the
//!   higher prediction breaking a tie in copies.
//!
//! Why the tie goes to fewer copies: the one with fewer costs less memory and less work
//! per update, and of two configurations predicted within 5 % of each other, the one
//! with more copies measured faster in only 7 of 20 pairs (docs/subspaces.md,
//! "Configurator"). The tie margin is 0 by default all the same: the choices made with
//! 5 % did worse when measured again head to head.

use super::{Configuration, RankedConfiguration};
use crate::{config_error, ConfigError};

/// The default switch margin: 10 % more predicted throughput.
pub const DEFAULT_SWITCH_MARGIN: f64 = 0.10;

/// The default tie margin: none, only equal predictions tie. Measured with 5 %, the
/// choices held up worse head to head than without the rule (docs/subspaces.md,
/// "Measured", 2026-12-05 midday), so it is left to the owner who would trade a few per
/// cent of predicted throughput for fewer copies.
pub const DEFAULT_TIE_MARGIN: f64 = 0.0;

/// The two margins of a decision, fractions of predicted throughput.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Margins {
    /// How much more than the current configuration the best must be predicted to do
    /// for a switch (finite, >= 0).
    pub switch: f64,
    /// How far below the best a candidate may be predicted and still tie with it
    /// (finite, >= 0).
    pub tie: f64,
}

impl Default for Margins {
    fn default() -> Margins {
        Margins {
            switch: DEFAULT_SWITCH_MARGIN,
            tie: DEFAULT_TIE_MARGIN,
        }
    }
}

impl Margins {
    /// Checks that both margins are finite fractions >= 0.
    pub fn check(&self) -> Result<(), ConfigError> {
        for (name, margin) in [("switch_margin", self.switch), ("tie_margin", self.tie)] {
            if !(margin.is_finite() && margin >= 0.0) {
                return Err(config_error(
                    name,
                    format!("{margin} is not a finite non-negative fraction"),
                ));
            }
        }
        Ok(())
    }
}

/// Copies of each object `configuration` stores: one per subspace and one in the key
/// subspace, each `replicas` times.
pub fn copies_per_object(configuration: &Configuration) -> u32 {
    (configuration.subspaces().len() as u32 + 1) * configuration.replicas()
}

/// Of `ranked` (in any order), the candidates predicted within `tie_margin` of the best,
/// the one with the fewest copies per object; among those the highest prediction, then
/// the earliest listed. `None` when `ranked` is empty. Predictions are assumed checked.
pub fn pick_among_ties(
    ranked: &[RankedConfiguration],
    tie_margin: f64,
) -> Option<&RankedConfiguration> {
    let best = ranked
        .iter()
        .map(|r| r.predicted_throughput_ops_per_s)
        .reduce(f64::max)?;
    // A product rather than a ratio, so that a prediction exactly at the margin (100
    // against 105 and 5 %) ties despite rounding.
    // `min_by` keeps the first of equal elements: the earliest listed.
    ranked
        .iter()
        .filter(|r| r.predicted_throughput_ops_per_s * (1.0 + tie_margin) >= best)
        .min_by(|a, b| {
            copies_per_object(&a.configuration)
                .cmp(&copies_per_object(&b.configuration))
                .then(
                    b.predicted_throughput_ops_per_s
                        .total_cmp(&a.predicted_throughput_ops_per_s),
                )
        })
}

/// Why the configurator chose what it chose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DecisionReason {
    /// No candidate was given.
    NoCandidates,
    /// No candidate is predicted faster than the current configuration.
    CurrentIsBest,
    /// The best candidate is faster, by `gain` (a fraction), but not by more than the
    /// larger margin: the switch margin, or the tie margin (the current configuration ties
    /// with the best).
    WithinMargin {
        /// Best predicted throughput over the current one, minus 1.
        gain: f64,
    },
    /// The best candidate is faster than the current configuration by more than the
    /// switch margin; the one chosen (the fewest copies among the best's ties) by `gain`.
    BeyondMargin {
        /// The chosen configuration's predicted throughput over the current one, minus 1.
        gain: f64,
    },
}

/// The configurator's decision.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfiguratorDecision {
    /// The configuration to run: the current one, or the fewest copies among the
    /// candidates that tie with the best.
    pub chosen: Configuration,
    /// Whether `chosen` differs from the current configuration.
    pub switch: bool,
    /// Why.
    pub reason: DecisionReason,
}

/// Decides between `current` (with its predicted throughput under the same profile and
/// calibration) and `ranked` (need not be sorted): the current configuration is kept when
/// it ties with the best (within the tie margin) or the best beats it by no more than the
/// switch margin; otherwise the fewest copies among the best's ties is chosen
/// ([`pick_among_ties`]).
pub fn decide(
    current: &RankedConfiguration,
    ranked: &[RankedConfiguration],
    margins: Margins,
) -> Result<ConfiguratorDecision, ConfigError> {
    margins.check()?;
    for candidate in std::iter::once(current).chain(ranked) {
        let predicted = candidate.predicted_throughput_ops_per_s;
        if !(predicted.is_finite() && predicted > 0.0) {
            return Err(config_error(
                "predicted_throughput_ops_per_s",
                format!("{predicted} is not a finite positive throughput"),
            ));
        }
    }
    let keep = |reason| ConfiguratorDecision {
        chosen: current.configuration.clone(),
        switch: false,
        reason,
    };
    let Some(best) = ranked
        .iter()
        .map(|r| r.predicted_throughput_ops_per_s)
        .reduce(f64::max)
    else {
        return Ok(keep(DecisionReason::NoCandidates));
    };
    let current_ops_per_s = current.predicted_throughput_ops_per_s;
    if best <= current_ops_per_s {
        return Ok(keep(DecisionReason::CurrentIsBest));
    }
    let gain = best / current_ops_per_s - 1.0;
    // Compared as products rather than through `gain`, so that a prediction exactly at a
    // margin (110 against 100 and 10 %) stays within it despite rounding.
    if best <= current_ops_per_s * (1.0 + margins.switch.max(margins.tie)) {
        return Ok(keep(DecisionReason::WithinMargin { gain }));
    }
    let chosen = pick_among_ties(ranked, margins.tie).expect("ranked is not empty");
    Ok(ConfiguratorDecision {
        chosen: chosen.configuration.clone(),
        switch: true,
        reason: DecisionReason::BeyondMargin {
            gain: chosen.predicted_throughput_ops_per_s / current_ops_per_s - 1.0,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hyperspace::{AttributeSet, Deployment};
    use proptest::prelude::*;

    const DEPLOYMENT: Deployment = Deployment {
        subspace_regions: 16,
        key_regions: 16,
        replicas: 1,
    };

    /// Subspaces over attributes `first..first + count`, one attribute each.
    fn ranked_with(first: u16, count: u16, predicted: f64) -> RankedConfiguration {
        RankedConfiguration {
            configuration: DEPLOYMENT
                .configuration((first..first + count).map(|a| AttributeSet::from([a])))
                .unwrap(),
            predicted_throughput_ops_per_s: predicted,
        }
    }

    fn ranked(attribute: Option<u16>, predicted: f64) -> RankedConfiguration {
        match attribute {
            Some(a) => ranked_with(a, 1, predicted),
            None => ranked_with(0, 0, predicted),
        }
    }

    const ONLY_SWITCH: Margins = Margins {
        switch: DEFAULT_SWITCH_MARGIN,
        tie: 0.0,
    };

    #[test]
    fn margin_rule() {
        let current = ranked(None, 100.0);
        let candidates = [ranked(Some(1), 110.0), ranked(Some(2), 105.0)];
        let decision = decide(&current, &candidates, ONLY_SWITCH).unwrap();
        assert!(!decision.switch);
        assert_eq!(decision.chosen, current.configuration);
        assert!(
            matches!(decision.reason, DecisionReason::WithinMargin { gain } if (gain - 0.1).abs() < 1e-12)
        );

        let candidates = [ranked(Some(2), 105.0), ranked(Some(1), 111.0)];
        let decision = decide(&current, &candidates, ONLY_SWITCH).unwrap();
        assert!(decision.switch);
        assert_eq!(decision.chosen, candidates[1].configuration);

        let decision = decide(&current, &[ranked(Some(1), 90.0)], ONLY_SWITCH).unwrap();
        assert_eq!(decision.reason, DecisionReason::CurrentIsBest);
        let decision = decide(&current, &[], Margins::default()).unwrap();
        assert_eq!(decision.reason, DecisionReason::NoCandidates);
        let negative = Margins {
            switch: -0.1,
            tie: 0.0,
        };
        assert!(decide(&current, &[], negative).is_err());
        let infinite = Margins {
            switch: 0.1,
            tie: f64::INFINITY,
        };
        assert!(decide(&current, &[], infinite).is_err());
        assert!(decide(&current, &[ranked(Some(1), f64::NAN)], ONLY_SWITCH).is_err());
    }

    #[test]
    fn a_tie_goes_to_the_fewest_copies() {
        let current = ranked(None, 100.0);
        // Two subspaces predicted best, one subspace 4 % below it: a tie at 5 %.
        let two = ranked_with(1, 2, 200.0);
        let one = ranked_with(1, 1, 192.5);
        let three = ranked_with(1, 3, 199.0);
        let margins = Margins {
            switch: 0.1,
            tie: 0.05,
        };
        let decision = decide(&current, &[two.clone(), three, one.clone()], margins).unwrap();
        assert!(decision.switch);
        assert_eq!(decision.chosen, one.configuration);
        assert!(
            matches!(decision.reason, DecisionReason::BeyondMargin { gain } if (gain - 0.925).abs() < 1e-12)
        );
        // At 3 % it is no tie: the best is chosen.
        let margins = Margins {
            switch: 0.1,
            tie: 0.03,
        };
        let decision = decide(&current, &[one, two.clone()], margins).unwrap();
        assert_eq!(decision.chosen, two.configuration);
        // The current configuration tying with the best is kept, even past the switch
        // margin (a tie never pays for a migration).
        let current = ranked_with(5, 3, 185.0);
        let margins = Margins {
            switch: 0.05,
            tie: 0.1,
        };
        let decision = decide(&current, &[two], margins).unwrap();
        assert!(!decision.switch);
        assert_eq!(decision.chosen, current.configuration);
        assert_eq!(copies_per_object(&current.configuration), 4);
    }

    proptest! {
        #[test]
        fn decides_as_a_brute_force_over_the_ties(
            current_subspaces in 0u16..4,
            current_ops in 1.0f64..1000.0,
            candidates in proptest::collection::vec((0u16..4, 1.0f64..1000.0), 0..6),
            switch in 0.0f64..0.5,
            tie in 0.0f64..0.5,
        ) {
            // Attributes 100.. for the current configuration, so it is never a candidate.
            let current = ranked_with(100, current_subspaces, current_ops);
            let ranked: Vec<RankedConfiguration> = candidates
                .iter()
                .enumerate()
                .map(|(i, &(count, ops))| ranked_with(10 * i as u16, count, ops))
                .collect();
            let decision = decide(&current, &ranked, Margins { switch, tie }).unwrap();
            let best = candidates.iter().map(|&(_, ops)| ops).fold(0.0, f64::max);
            let keep = ranked.is_empty()
                || best <= current_ops * (1.0 + switch)
                || current_ops * (1.0 + tie) >= best;
            prop_assert_eq!(decision.switch, !keep);
            if keep {
                prop_assert_eq!(&decision.chosen, &current.configuration);
            } else {
                // Every tie, sorted by copies, then prediction (higher first), then order.
                let mut ties: Vec<(u16, f64, usize)> = candidates
                    .iter()
                    .enumerate()
                    .filter(|(_, &(_, ops))| ops * (1.0 + tie) >= best)
                    .map(|(i, &(count, ops))| (count, ops, i))
                    .collect();
                ties.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(&b.2)));
                prop_assert_eq!(&decision.chosen, &ranked[ties[0].2].configuration);
                // A switch never goes to a configuration predicted slower than the
                // current one.
                prop_assert!(ties[0].1 > current_ops);
            }
        }
    }
}
