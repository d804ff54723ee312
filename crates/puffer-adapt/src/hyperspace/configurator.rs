//! The configurator's decision (paper §5.1): whether to move to the best ranked
//! configuration.
//!
//! Reconfiguring rewrites every object into the new subspaces, and the model is only
//! about 92 % accurate, so the paper clusters configurations whose predictions are within
//! a tunable threshold. Here the current configuration is kept unless the best candidate
//! is predicted to beat it by more than `margin` (a fraction: 0.1 means 10 % more
//! throughput); a prediction within the margin is treated as a tie, and a tie never pays
//! for a migration.

use super::{Configuration, RankedConfiguration};
use crate::{config_error, ConfigError};

/// The default switch margin: 10 % more predicted throughput.
pub const DEFAULT_SWITCH_MARGIN: f64 = 0.10;

/// Why the configurator chose what it chose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DecisionReason {
    /// No candidate was given.
    NoCandidates,
    /// No candidate is predicted faster than the current configuration.
    CurrentIsBest,
    /// The best candidate is faster, by `gain` (a fraction), but not by more than the
    /// margin.
    WithinMargin {
        /// Best predicted throughput over the current one, minus 1.
        gain: f64,
    },
    /// The best candidate is faster by `gain`, more than the margin.
    BeyondMargin {
        /// Best predicted throughput over the current one, minus 1.
        gain: f64,
    },
}

/// The configurator's decision.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfiguratorDecision {
    /// The configuration to run: the current one, or the best candidate.
    pub chosen: Configuration,
    /// Whether `chosen` differs from the current configuration.
    pub switch: bool,
    /// Why.
    pub reason: DecisionReason,
}

/// Decides between `current` (with its predicted throughput under the same profile and
/// calibration) and the best of `ranked` (the first of the highest predictions; the list
/// need not be sorted). `margin` is a finite fraction >= 0.
pub fn decide(
    current: &RankedConfiguration,
    ranked: &[RankedConfiguration],
    margin: f64,
) -> Result<ConfiguratorDecision, ConfigError> {
    if !(margin.is_finite() && margin >= 0.0) {
        return Err(config_error(
            "switch_margin",
            format!("{margin} is not a finite non-negative fraction"),
        ));
    }
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
    let Some(best) = ranked.iter().reduce(|best, candidate| {
        if candidate.predicted_throughput_ops_per_s > best.predicted_throughput_ops_per_s {
            candidate
        } else {
            best
        }
    }) else {
        return Ok(keep(DecisionReason::NoCandidates));
    };
    if best.configuration == current.configuration
        || best.predicted_throughput_ops_per_s <= current.predicted_throughput_ops_per_s
    {
        return Ok(keep(DecisionReason::CurrentIsBest));
    }
    let gain = best.predicted_throughput_ops_per_s / current.predicted_throughput_ops_per_s - 1.0;
    // Compared as a product rather than through `gain`, so that a prediction exactly at
    // the margin (110 against 100 and 10 %) stays within it despite rounding.
    let margin_ops_per_s = current.predicted_throughput_ops_per_s * (1.0 + margin);
    if best.predicted_throughput_ops_per_s <= margin_ops_per_s {
        return Ok(keep(DecisionReason::WithinMargin { gain }));
    }
    Ok(ConfiguratorDecision {
        chosen: best.configuration.clone(),
        switch: true,
        reason: DecisionReason::BeyondMargin { gain },
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

    fn ranked(attribute: Option<u16>, predicted: f64) -> RankedConfiguration {
        RankedConfiguration {
            configuration: DEPLOYMENT
                .configuration(attribute.map(|a| AttributeSet::from([a])))
                .unwrap(),
            predicted_throughput_ops_per_s: predicted,
        }
    }

    #[test]
    fn margin_rule() {
        let current = ranked(None, 100.0);
        let candidates = [ranked(Some(1), 110.0), ranked(Some(2), 105.0)];
        let decision = decide(&current, &candidates, DEFAULT_SWITCH_MARGIN).unwrap();
        assert!(!decision.switch);
        assert_eq!(decision.chosen, current.configuration);
        assert!(
            matches!(decision.reason, DecisionReason::WithinMargin { gain } if (gain - 0.1).abs() < 1e-12)
        );

        let candidates = [ranked(Some(2), 105.0), ranked(Some(1), 111.0)];
        let decision = decide(&current, &candidates, DEFAULT_SWITCH_MARGIN).unwrap();
        assert!(decision.switch);
        assert_eq!(decision.chosen, candidates[1].configuration);

        let decision = decide(&current, &[ranked(Some(1), 90.0)], 0.0).unwrap();
        assert_eq!(decision.reason, DecisionReason::CurrentIsBest);
        let decision = decide(&current, &[], 0.0).unwrap();
        assert_eq!(decision.reason, DecisionReason::NoCandidates);
        assert!(decide(&current, &[], -0.1).is_err());
        assert!(decide(&current, &[ranked(Some(1), f64::NAN)], 0.1).is_err());
    }

    proptest! {
        #[test]
        fn switches_exactly_beyond_the_margin(
            current_ops in 1.0f64..1000.0,
            predictions in proptest::collection::vec(1.0f64..1000.0, 0..5),
            margin in 0.0f64..1.0,
        ) {
            let current = ranked(None, current_ops);
            let candidates: Vec<RankedConfiguration> = predictions
                .iter()
                .enumerate()
                .map(|(attribute, &ops)| ranked(Some(attribute as u16), ops))
                .collect();
            let decision = decide(&current, &candidates, margin).unwrap();
            let best = predictions.iter().copied().fold(0.0, f64::max);
            prop_assert_eq!(decision.switch, best > current_ops * (1.0 + margin));
            if decision.switch {
                let chosen = candidates
                    .iter()
                    .find(|candidate| candidate.configuration == decision.chosen)
                    .unwrap();
                prop_assert_eq!(chosen.predicted_throughput_ops_per_s, best);
            } else {
                prop_assert_eq!(&decision.chosen, &current.configuration);
            }
        }
    }
}
