//! `--confirm-rounds`: the oracles' verdicts measured again, head to head.
//!
//! The best measured configuration of a workload is the fastest of about fifteen
//! medians, each carrying the machine's noise (a configuration's rounds lie 6.5 % from
//! their mean on the loopback cluster, one of il3's two rounds 3,059 ops/s and the other
//! 2,167): the maximum of noisy figures is biased upwards, so the configurator's choice
//! is compared against the luckiest draw. The contenders (the choice, the configurations
//! measured near or above it, the heuristics near or above it) are therefore measured
//! again, a round at a time in a new random order, and each one is compared with the
//! choice by the median of their ratios within a round: the two are measured seconds
//! apart, so a slow minute of the shared machine falls on both.

use std::collections::BTreeMap;

use puffer_adapt::hyperspace::Configuration;

use super::workload::median;

/// A configuration measured at least this share of the choice's throughput is measured
/// again as a rival for the best (a 5 % verdict on medians that lie several per cent
/// from their mean).
const RIVAL_SHARE: f64 = 0.95;

/// A heuristic measured at least this share of the choice's throughput is measured
/// again.
const HEURISTIC_SHARE: f64 = 0.90;

/// Most rival configurations measured again beside the choice and the heuristics (the
/// fastest first): each costs a build and a run per round.
const MAX_RIVALS: usize = 4;

/// What is measured again: the choice first, then each other contender once.
#[derive(Debug, PartialEq)]
pub(super) struct Contenders {
    pub configurations: Vec<Configuration>,
    /// For each of `configurations`, the heuristics it is (by name).
    pub heuristics: Vec<Vec<String>>,
}

/// The contenders of a workload: the choice (`automatic`), the fastest measured
/// configurations at [`RIVAL_SHARE`] of its median or above (at most [`MAX_RIVALS`]),
/// and every heuristic at [`HEURISTIC_SHARE`] or above. `measured` holds every
/// configuration's median; a configuration that is several of these is listed once.
pub(super) fn contenders(
    measured: &BTreeMap<Configuration, f64>,
    automatic: &Configuration,
    heuristics: &[(&str, Configuration)],
) -> Contenders {
    let automatic_ops = measured.get(automatic).copied().unwrap_or(0.0);
    let mut configurations = vec![automatic.clone()];
    let mut rivals: Vec<(&Configuration, f64)> = measured
        .iter()
        .filter(|(c, &t)| *c != automatic && t >= RIVAL_SHARE * automatic_ops)
        .map(|(c, &t)| (c, t))
        .collect();
    rivals.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    for (configuration, _) in rivals.into_iter().take(MAX_RIVALS) {
        configurations.push(configuration.clone());
    }
    for (_, configuration) in heuristics {
        let ops = measured.get(configuration).copied().unwrap_or(0.0);
        if ops >= HEURISTIC_SHARE * automatic_ops && !configurations.contains(configuration) {
            configurations.push(configuration.clone());
        }
    }
    let heuristics = configurations
        .iter()
        .map(|c| {
            heuristics
                .iter()
                .filter(|(_, h)| h == c)
                .map(|(name, _)| name.to_string())
                .collect()
        })
        .collect();
    Contenders {
        configurations,
        heuristics,
    }
}

/// One contender against the choice, from the rounds measured again.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Rival {
    /// Median throughput of its rounds (ops/s).
    pub ops_per_s: f64,
    /// Median over the rounds of the choice's throughput over this one's (1 for the
    /// choice itself).
    pub automatic_over_this: f64,
}

/// The verdicts measured again.
#[derive(Debug, PartialEq)]
pub(super) struct Verdict {
    pub rivals: Vec<Rival>,
    /// No contender is more than 5 % faster than the choice.
    pub within_5_percent_of_best: bool,
    /// The choice is at least as fast as every heuristic measured again (those left out
    /// measured below [`HEURISTIC_SHARE`] of it).
    pub beats_every_heuristic: bool,
}

/// The verdicts from `rounds[i]`, contender `i`'s throughputs in round order (the
/// choice is contender 0; every contender measured in every round; the choice alone
/// when nothing came near it).
pub(super) fn verdict(contenders: &Contenders, rounds: &[Vec<f64>]) -> Verdict {
    let automatic = &rounds[0];
    let rivals: Vec<Rival> = rounds
        .iter()
        .enumerate()
        .map(|(i, runs)| {
            let mut ratios: Vec<f64> = automatic
                .iter()
                .zip(runs)
                .map(|(a, t)| if *t > 0.0 { a / t } else { f64::INFINITY })
                .collect();
            Rival {
                ops_per_s: median(&mut runs.clone()),
                automatic_over_this: if i == 0 { 1.0 } else { median(&mut ratios) },
            }
        })
        .collect();
    let within_5_percent_of_best = rivals.iter().all(|r| r.automatic_over_this >= 0.95);
    let beats_every_heuristic = rivals
        .iter()
        .zip(&contenders.heuristics)
        .filter(|(_, names)| !names.is_empty())
        .all(|(r, _)| r.automatic_over_this >= 1.0);
    Verdict {
        rivals,
        within_5_percent_of_best,
        beats_every_heuristic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use puffer_adapt::hyperspace::Subspace;

    /// Configuration `i`: one subspace over attribute `i` (0 is the key subspace alone).
    fn configuration(i: u16) -> Configuration {
        let subspaces = if i == 0 {
            Vec::new()
        } else {
            vec![Subspace::new([i], 16).unwrap()]
        };
        Configuration::new(subspaces, 4, 1).unwrap()
    }

    /// Against the rule worked out by hand for each configuration: the rivals are the
    /// fastest at 95 % of the choice or above, the heuristics those at 90 % or above.
    #[test]
    fn contenders_are_the_choice_its_near_rivals_and_near_heuristics() {
        let measured: BTreeMap<Configuration, f64> = [
            (0, 500.0),  // the key subspace alone: far below
            (1, 1000.0), // the choice
            (2, 1200.0), // faster: a rival
            (3, 960.0),  // within 5 %, but the fifth fastest such: left out
            (4, 940.0),  // below 95 %: no rival, but a heuristic above 90 %
            (5, 800.0),  // a heuristic below 90 %
            (6, 1100.0), // a rival and a heuristic: listed once
            (7, 1001.0), // a rival
            (8, 1002.0), // a rival
        ]
        .into_iter()
        .map(|(i, t)| (configuration(i), t))
        .collect();
        let heuristics = vec![
            ("no-subspace", configuration(0)),
            ("dominant", configuration(4)),
            ("subspaces-all", configuration(5)),
            ("hyperspace", configuration(6)),
        ];
        let got = contenders(&measured, &configuration(1), &heuristics);
        let expected: Vec<Configuration> = [1, 2, 6, 8, 7, 4].map(configuration).to_vec();
        assert_eq!(got.configurations, expected);
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got.heuristics,
            vec![
                names(&[]),
                names(&[]),
                names(&["hyperspace"]),
                names(&[]),
                names(&[]),
                names(&["dominant"]),
            ]
        );
        // A choice that is itself a heuristic carries its name.
        let own = contenders(&measured, &configuration(6), &heuristics);
        assert_eq!(own.configurations[0], configuration(6));
        assert_eq!(own.heuristics[0], names(&["hyperspace"]));
    }

    /// Ratios within a round decide, not the contenders' medians: a slow round falls on
    /// every contender and cancels out. Checked by hand.
    #[test]
    fn the_verdict_compares_within_rounds() {
        let contenders = Contenders {
            configurations: [1, 2, 3].map(configuration).to_vec(),
            heuristics: vec![vec![], vec![], vec!["dominant".to_string()]],
        };
        // Round 2 is slow for everyone. The choice is 4 % below contender 1 in every
        // round (within 5 %) and 2 % above the heuristic.
        let automatic = vec![960.0, 500.0, 980.0];
        let scaled = |factors: [f64; 3]| -> Vec<f64> {
            automatic.iter().zip(factors).map(|(a, f)| a / f).collect()
        };
        let rounds = vec![automatic.clone(), scaled([0.96; 3]), scaled([1.02; 3])];
        let v = verdict(&contenders, &rounds);
        assert!((v.rivals[0].automatic_over_this - 1.0).abs() < 1e-12);
        assert!((v.rivals[1].automatic_over_this - 0.96).abs() < 1e-9);
        assert!((v.rivals[2].automatic_over_this - 1.02).abs() < 1e-9);
        assert!((v.rivals[1].ops_per_s - 960.0 / 0.96).abs() < 1e-9);
        assert!(v.within_5_percent_of_best);
        assert!(v.beats_every_heuristic);
        // A rival 6 % faster in two rounds of three fails the first verdict; a
        // heuristic faster in two of three fails the second. The medians of the
        // throughputs alone would pass both: the rival's slow round is the choice's too.
        let worse = vec![
            automatic.clone(),
            scaled([0.94, 0.94, 1.2]),
            scaled([1.05, 0.99, 0.99]),
        ];
        let v = verdict(&contenders, &worse);
        assert!(!v.within_5_percent_of_best);
        assert!(!v.beats_every_heuristic);
        assert!((v.rivals[1].automatic_over_this - 0.94).abs() < 1e-9);
    }

    /// Nothing near the choice: it alone, measured as before, passes both verdicts.
    #[test]
    fn the_choice_alone_passes() {
        let contenders = Contenders {
            configurations: vec![configuration(1)],
            heuristics: vec![vec![]],
        };
        let v = verdict(&contenders, &[vec![900.0, 1000.0]]);
        assert_eq!(
            v.rivals,
            vec![Rival {
                ops_per_s: 950.0,
                automatic_over_this: 1.0
            }]
        );
        assert!(v.within_5_percent_of_best && v.beats_every_heuristic);
    }
}
