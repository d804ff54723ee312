//! Routing a shard's queries to its replicas in inverse proportion to their queue lengths.
//!
//! Every response carries the replica's queue length back (BlowFish 3.3.2); the scheduler
//! keeps the latest one per replica and sends replica `i` a share proportional to
//! `1 / (1 + q_i)`. A replica that cannot grow keeps a longer queue and so gets less
//! traffic, until the queues even out.

/// The last known queue length of each replica of one shard.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaScheduler {
    queue_lengths: Vec<f64>,
}

impl ReplicaScheduler {
    /// A scheduler for `replicas` replicas, all assumed idle.
    pub fn new(replicas: usize) -> ReplicaScheduler {
        ReplicaScheduler {
            queue_lengths: vec![0.0; replicas],
        }
    }

    /// Records the queue length a response from `replica` reported.
    pub fn report(&mut self, replica: usize, queue_length: f64) {
        if let Some(slot) = self.queue_lengths.get_mut(replica) {
            *slot = if queue_length.is_finite() {
                queue_length.max(0.0)
            } else {
                0.0
            };
        }
    }

    /// The share of queries each replica gets now (sums to 1; empty with no replicas).
    pub fn shares(&self) -> Vec<f64> {
        let weights: Vec<f64> = self.queue_lengths.iter().map(|q| 1.0 / (1.0 + q)).collect();
        let total: f64 = weights.iter().sum();
        weights.iter().map(|w| w / total).collect()
    }

    /// The replica for a query, given `uniform` drawn from [0, 1) by the caller.
    pub fn pick(&self, uniform: f64) -> Option<usize> {
        let shares = self.shares();
        let mut cumulative = 0.0;
        for (replica, share) in shares.iter().enumerate() {
            cumulative += share;
            if uniform < cumulative {
                return Some(replica);
            }
        }
        // Rounding can leave the sum a hair under 1.
        shares.len().checked_sub(1)
    }

    /// The last reported queue lengths.
    pub fn queue_lengths(&self) -> &[f64] {
        &self.queue_lengths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_inverse_to_queue_lengths() {
        let mut scheduler = ReplicaScheduler::new(3);
        assert_eq!(scheduler.shares(), vec![1.0 / 3.0; 3]);
        scheduler.report(2, 9.0);
        let shares = scheduler.shares();
        // weights 1, 1, 0.1
        assert!((shares[0] - 1.0 / 2.1).abs() < 1e-12);
        assert!((shares[2] - 0.1 / 2.1).abs() < 1e-12);
        scheduler.report(7, 3.0); // unknown replica: ignored
        assert_eq!(scheduler.queue_lengths().len(), 3);
    }

    #[test]
    fn picks_follow_the_shares() {
        let mut scheduler = ReplicaScheduler::new(2);
        scheduler.report(0, 3.0); // weights 0.25 and 1 -> shares 0.2 and 0.8
        let draws = 10_000;
        let picked_first = (0..draws)
            .filter(|i| scheduler.pick(*i as f64 / draws as f64) == Some(0))
            .count();
        assert_eq!(picked_first, 2000);
        assert_eq!(scheduler.pick(0.999_999_999_999), Some(1));
        assert_eq!(ReplicaScheduler::new(0).pick(0.5), None);
    }
}
