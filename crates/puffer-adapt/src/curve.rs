//! A replica's storage-throughput curve, measured on the running system.
//!
//! Each `delta` the runtime reports, per replica, how many queries completed and how many
//! thread-seconds its workers were busy, at the layer count it had. Completed queries per
//! busy thread-second is the throughput one thread sustains at that layer count (the
//! inverse of the mean service time), which is what a layer buys. Points are averaged
//! exponentially so the curve follows the data and the query mix as they change, and a
//! partly filled opportunistic layer shows its growing value.

use serde::{Deserialize, Serialize};

/// Busy time below which a delta says too little about the service rate to be used.
pub const MIN_BUSY_SECONDS: f64 = 0.01;

/// Most layer counts a curve tracks (more are ignored: no index has that many).
pub const MAX_LAYERS: u32 = 64;

/// Weight of the newest measurement in a curve point.
const POINT_WEIGHT: f64 = 0.3;

/// One point of the curve: the throughput per thread and footprint at a layer count.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Queries per busy thread-second, averaged; `None` until measured.
    pub ops_per_thread_second: Option<f64>,
    /// The replica's footprint when last seen at this layer count.
    pub footprint_bytes: Option<u64>,
    /// Total busy thread-seconds the point is based on.
    pub busy_seconds: f64,
}

/// Throughput per thread at each layer count (index 0 = one layer, the base).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ThroughputCurve {
    points: Vec<CurvePoint>,
}

impl ThroughputCurve {
    /// An empty curve.
    pub fn new() -> ThroughputCurve {
        ThroughputCurve::default()
    }

    /// Folds in one delta's measurement taken at `layers` layers.
    pub fn observe(
        &mut self,
        layers: u32,
        completed: u64,
        busy_seconds: f64,
        footprint_bytes: u64,
    ) {
        if layers == 0 || layers > MAX_LAYERS {
            return;
        }
        let slot = layers as usize - 1;
        if self.points.len() <= slot {
            self.points.resize(slot + 1, CurvePoint::default());
        }
        let point = &mut self.points[slot];
        point.footprint_bytes = Some(footprint_bytes);
        if !(busy_seconds.is_finite() && busy_seconds >= MIN_BUSY_SECONDS) {
            return;
        }
        let rate = completed as f64 / busy_seconds;
        point.ops_per_thread_second = Some(match point.ops_per_thread_second {
            Some(old) => POINT_WEIGHT * rate + (1.0 - POINT_WEIGHT) * old,
            None => rate,
        });
        point.busy_seconds += busy_seconds;
    }

    /// Queries per second one thread sustains at `layers` layers, if measured.
    pub fn ops_per_thread_second(&self, layers: u32) -> Option<f64> {
        let slot = (layers as usize).checked_sub(1)?;
        self.points.get(slot)?.ops_per_thread_second
    }

    /// Queries per second `threads` threads sustain at `layers` layers, if measured.
    pub fn capacity_per_second(&self, layers: u32, threads: u32) -> Option<f64> {
        self.ops_per_thread_second(layers)
            .map(|rate| rate * threads as f64)
    }

    /// The measured points, index 0 = one layer.
    pub fn points(&self) -> &[CurvePoint] {
        &self.points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_per_layer_count_and_skips_idle_deltas() {
        let mut curve = ThroughputCurve::new();
        curve.observe(1, 100, 1.0, 1000);
        assert_eq!(curve.ops_per_thread_second(1), Some(100.0));
        curve.observe(1, 200, 1.0, 1000);
        let expected = POINT_WEIGHT * 200.0 + (1.0 - POINT_WEIGHT) * 100.0;
        assert!((curve.ops_per_thread_second(1).unwrap() - expected).abs() < 1e-9);
        // Too little busy time: footprint recorded, rate untouched.
        curve.observe(3, 1, 0.0001, 4000);
        assert_eq!(curve.ops_per_thread_second(3), None);
        assert_eq!(curve.points()[2].footprint_bytes, Some(4000));
        assert_eq!(curve.ops_per_thread_second(2), None);
        assert_eq!(curve.capacity_per_second(1, 4), Some(expected * 4.0));
        assert_eq!(curve.ops_per_thread_second(0), None);
        curve.observe(u32::MAX, 5, 1.0, 1);
        assert_eq!(curve.points().len(), 3);
    }
}
