//! Time, behind a trait so that freshness can be tested deterministically.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A source of wall-clock time in microseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    /// Now, in microseconds since the Unix epoch.
    fn now_micros(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug, Default, Clone)]
pub struct ManualClock {
    now_micros: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start_micros`.
    pub fn new(start_micros: u64) -> ManualClock {
        ManualClock {
            now_micros: Arc::new(AtomicU64::new(start_micros)),
        }
    }

    /// Moves the clock forward.
    pub fn advance_micros(&self, micros: u64) {
        self.now_micros.fetch_add(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> u64 {
        self.now_micros.load(Ordering::SeqCst)
    }
}
