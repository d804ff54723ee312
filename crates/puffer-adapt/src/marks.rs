//! High and low marks on the averaged queue length, one pair per layer count.
//!
//! Crossing the high mark asks for a layer; staying below the low mark lets one go. The
//! gap between them is the hysteresis that keeps a queue oscillating around one mark
//! from flapping layers (BlowFish 3.2).

use serde::{Deserialize, Serialize};

use crate::{config_error, ConfigError};

/// Marks indexed by layer count: `high[k - 1]` and `low[k - 1]` apply with `k` layers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marks {
    high: Vec<f64>,
    low: Vec<f64>,
}

impl Marks {
    /// Per-layer-count marks; the last pair also applies to any deeper layer count.
    pub fn new(high: Vec<f64>, low: Vec<f64>) -> Result<Marks, ConfigError> {
        if high.is_empty() || high.len() != low.len() {
            return Err(config_error(
                "marks",
                format!(
                    "need as many high marks as low marks, at least one (got {} and {})",
                    high.len(),
                    low.len()
                ),
            ));
        }
        for (i, (&h, &l)) in high.iter().zip(&low).enumerate() {
            if !(l.is_finite() && h.is_finite() && l >= 0.0 && l < h) {
                return Err(config_error(
                    "marks",
                    format!("with {} layers: need 0 <= low ({l}) < high ({h})", i + 1),
                ));
            }
        }
        Ok(Marks { high, low })
    }

    /// The same pair at every layer count.
    pub fn uniform(high: f64, low: f64) -> Result<Marks, ConfigError> {
        Marks::new(vec![high], vec![low])
    }

    /// The high mark with `layers` layers.
    pub fn high(&self, layers: u32) -> f64 {
        self.high[Self::slot(layers, self.high.len())]
    }

    /// The low mark with `layers` layers.
    pub fn low(&self, layers: u32) -> f64 {
        self.low[Self::slot(layers, self.low.len())]
    }

    fn slot(layers: u32, len: usize) -> usize {
        (layers.max(1) as usize - 1).min(len - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_layer_marks_with_the_last_pair_extending() {
        let marks = Marks::new(vec![10.0, 20.0], vec![1.0, 2.0]).unwrap();
        assert_eq!((marks.high(1), marks.low(1)), (10.0, 1.0));
        assert_eq!((marks.high(2), marks.low(2)), (20.0, 2.0));
        assert_eq!((marks.high(7), marks.low(7)), (20.0, 2.0));
        assert_eq!(marks.high(0), 10.0);
    }

    #[test]
    fn rejects_inverted_or_mismatched_marks() {
        assert!(Marks::new(vec![], vec![]).is_err());
        assert!(Marks::new(vec![1.0], vec![1.0]).is_err());
        assert!(Marks::new(vec![1.0, 2.0], vec![0.5]).is_err());
        assert!(Marks::uniform(f64::INFINITY, 0.0).is_err());
        assert!(Marks::uniform(5.0, -1.0).is_err());
    }
}
