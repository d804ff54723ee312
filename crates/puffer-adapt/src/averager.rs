//! The exponentially averaged queue length: `avg_t = alpha * q_t + (1 - alpha) * avg_{t-delta}`.
//!
//! Averaging is what separates a short spike (ignored) from a longer spike or a plateau
//! (followed): a spike of `s` samples at height `h` raises the average to at most
//! `h * (1 - (1 - alpha)^s)`, so with the high mark above that, it never triggers.

use crate::{config_error, ConfigError};

/// Exponential average of a queue length sampled every `delta`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueAverager {
    alpha: f64,
    average: f64,
}

impl QueueAverager {
    /// An average starting at zero; `alpha` in (0, 1] weighs the newest sample.
    pub fn new(alpha: f64) -> Result<QueueAverager, ConfigError> {
        if !(alpha > 0.0 && alpha <= 1.0) {
            return Err(config_error("alpha", format!("{alpha} is not in (0, 1]")));
        }
        Ok(QueueAverager {
            alpha,
            average: 0.0,
        })
    }

    /// Folds in one sample and returns the new average.
    pub fn observe(&mut self, queue_length: f64) -> f64 {
        let sample = if queue_length.is_finite() {
            queue_length.max(0.0)
        } else {
            0.0
        };
        self.average = self.alpha * sample + (1.0 - self.alpha) * self.average;
        self.average
    }

    /// The current average.
    pub fn average(&self) -> f64 {
        self.average
    }

    /// The weight of the newest sample.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_recurrence_computed_directly() {
        let alpha = 0.3;
        let samples = [0.0, 10.0, 10.0, 3.0, 0.0, 50.0, 7.5];
        let mut averager = QueueAverager::new(alpha).unwrap();
        let mut expected = 0.0;
        for sample in samples {
            expected = alpha * sample + (1.0 - alpha) * expected;
            let got = averager.observe(sample);
            assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
        }
    }

    #[test]
    fn spike_bound_holds() {
        let alpha: f64 = 0.2;
        let mut averager = QueueAverager::new(alpha).unwrap();
        for _ in 0..3 {
            averager.observe(100.0);
        }
        let bound = 100.0 * (1.0 - (1.0 - alpha).powi(3));
        assert!((averager.average() - bound).abs() < 1e-9);
    }

    #[test]
    fn rejects_alpha_out_of_range_and_ignores_garbage_samples() {
        assert!(QueueAverager::new(0.0).is_err());
        assert!(QueueAverager::new(1.5).is_err());
        assert!(QueueAverager::new(f64::NAN).is_err());
        let mut averager = QueueAverager::new(1.0).unwrap();
        assert_eq!(averager.observe(f64::NAN), 0.0);
        assert_eq!(averager.observe(-4.0), 0.0);
        assert_eq!(averager.observe(4.0), 4.0);
    }
}
