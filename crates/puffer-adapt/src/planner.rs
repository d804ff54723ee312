//! The storage a load needs: by sample layers (BlowFish) versus by selective replication.
//!
//! Both are computed from a measured storage-throughput curve of one shard: a list of
//! steps (footprint, queries per second sustained), one per layer count. A shard with
//! load `r` needs, by layers, the cheapest `n` copies at some layer count `k` with
//! `n * capacity(k) >= r` (one copy at the smallest sufficient `k` when one copy can
//! serve, more only beyond the deepest layer); by selective replication, `n` whole
//! copies at one fixed layer count with `n * capacity >= r`.

/// One point of a shard's curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurveStep {
    /// Footprint of one copy at this layer count.
    pub footprint_bytes: u64,
    /// Queries per second one copy sustains at this layer count.
    pub capacity_per_second: f64,
}

/// Least storage serving `rate_per_second` with copies at any one layer count; `None`
/// if the curve is empty or has no positive capacity.
pub fn storage_by_layers(curve: &[CurveStep], rate_per_second: f64) -> Option<u64> {
    curve
        .iter()
        .filter_map(|step| storage_by_replication(step, rate_per_second))
        .min()
}

/// Storage serving `rate_per_second` with whole copies at one fixed layer count (at
/// least one copy); `None` if that step sustains nothing.
pub fn storage_by_replication(step: &CurveStep, rate_per_second: f64) -> Option<u64> {
    if !(step.capacity_per_second > 0.0 && step.capacity_per_second.is_finite()) {
        return None;
    }
    let copies = (rate_per_second.max(0.0) / step.capacity_per_second)
        .ceil()
        .max(1.0);
    Some((copies as u64).saturating_mul(step.footprint_bytes))
}

/// Shares of load of `shards` shards whose popularity follows Zipf with `skew` (sum 1).
pub fn zipf_shares(shards: usize, skew: f64) -> Vec<f64> {
    let weights: Vec<f64> = (1..=shards)
        .map(|rank| 1.0 / (rank as f64).powf(skew))
        .collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve() -> Vec<CurveStep> {
        [(100, 10.0), (150, 25.0), (250, 45.0), (450, 60.0)]
            .iter()
            .map(|&(footprint_bytes, capacity_per_second)| CurveStep {
                footprint_bytes,
                capacity_per_second,
            })
            .collect()
    }

    /// Brute force: every layer count and copy count up to a generous bound.
    fn brute_force(curve: &[CurveStep], rate: f64) -> u64 {
        let mut best = u64::MAX;
        for step in curve {
            for copies in 1..=1000u64 {
                if copies as f64 * step.capacity_per_second >= rate {
                    best = best.min(copies * step.footprint_bytes);
                    break;
                }
            }
        }
        best
    }

    #[test]
    fn layers_match_brute_force() {
        let curve = curve();
        for rate in [
            0.0, 5.0, 10.0, 10.5, 24.0, 44.9, 45.0, 59.0, 61.0, 200.0, 999.0,
        ] {
            assert_eq!(
                storage_by_layers(&curve, rate),
                Some(brute_force(&curve, rate)),
                "rate {rate}"
            );
        }
        assert_eq!(storage_by_layers(&[], 5.0), None);
    }

    #[test]
    fn replication_counts_whole_copies() {
        let base = curve()[0];
        assert_eq!(storage_by_replication(&base, 0.0), Some(100));
        assert_eq!(storage_by_replication(&base, 10.0), Some(100));
        assert_eq!(storage_by_replication(&base, 10.1), Some(200));
        assert_eq!(storage_by_replication(&base, 95.0), Some(1000));
        let dead = CurveStep {
            footprint_bytes: 1,
            capacity_per_second: 0.0,
        };
        assert_eq!(storage_by_replication(&dead, 1.0), None);
    }

    #[test]
    fn zipf_shares_sum_to_one_and_decrease() {
        let shares = zipf_shares(100, 0.99);
        assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!(shares.windows(2).all(|w| w[0] > w[1]));
        assert!((shares[0] / shares[1] - 2f64.powf(0.99)).abs() < 1e-9);
    }
}
