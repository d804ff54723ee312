//! How fast the machine runs right now, measured beside the experiment: a thread
//! that, every [`PERIOD`], times a fixed piece of arithmetic on its own CPU clock.
//!
//! Why: on a shared virtual machine the same CPU second does more or less work from
//! one minute to the next (other tenants' work on the same physical cores and caches;
//! no steal time shows it). A plain loop's CPU time per iteration measured 40 % apart
//! within seconds here, and one configuration's throughput a third apart between
//! runs. The probe's CPU time for its fixed work rises and falls with that; multiplying a
//! run's throughput by the probe's slowdown over the run's seconds (`--speed-normalise`)
//! reports it at one reference speed. On 31 calibration runs measured three times each
//! (`--calibrate-only --rounds 3`, the same arithmetic timed by a separate C process
//! beside it), that
//! took the mean distance of a run from its runs' mean from 5.2 to 2.4 %; with the
//! probe's samples shifted 30 s out of line, only to 4.5 %: the probe tracks the
//! machine, not the experiment.
//!
//! The probe costs under 1 ms of CPU every 200 ms (0.4 % of one core), in every run
//! alike.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::cpu::this_thread_s;

/// Time between two samples.
const PERIOD: Duration = Duration::from_millis(200);

/// Iterations of the fixed work: about 0.8 ms on the machines the project runs on.
const WORK_ITERATIONS: u64 = 400_000;

/// Samples kept (the newest): three hours at [`PERIOD`]; a window older than that
/// finds none and is reported as unmeasured.
const MAX_SAMPLES: usize = 3 * 3600 * 5;

/// Samples whose median is the reference speed, the first ones taken.
const REFERENCE_SAMPLES: usize = 25;

/// Fewest samples in a window for its speed to be told.
const MIN_WINDOW_SAMPLES: usize = 5;

/// The probe's thread and what it measured: (when, CPU seconds of the fixed work).
pub(super) struct SpeedProbe {
    samples: Arc<Mutex<VecDeque<(Instant, f64)>>>,
    reference_s: Arc<Mutex<Option<f64>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SpeedProbe {
    /// Starts the probe's thread.
    pub(super) fn start() -> anyhow::Result<SpeedProbe> {
        let samples = Arc::new(Mutex::new(VecDeque::new()));
        let reference_s = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, reference_s, stop) = (samples.clone(), reference_s.clone(), stop.clone());
            std::thread::Builder::new()
                .name("speed-probe".into())
                .spawn(move || {
                    let mut first = Vec::with_capacity(REFERENCE_SAMPLES);
                    while !stop.load(Ordering::Relaxed) {
                        let seconds = fixed_work_s();
                        if seconds > 0.0 {
                            if first.len() < REFERENCE_SAMPLES {
                                first.push(seconds);
                                if first.len() == REFERENCE_SAMPLES {
                                    *reference_s.lock().expect("probe reference") =
                                        median(&mut first);
                                }
                            }
                            let mut kept = samples.lock().expect("probe samples");
                            if kept.len() == MAX_SAMPLES {
                                kept.pop_front();
                            }
                            kept.push_back((Instant::now(), seconds));
                        }
                        std::thread::sleep(PERIOD);
                    }
                })?
        };
        Ok(SpeedProbe {
            samples,
            reference_s,
            stop,
            thread: Some(thread),
        })
    }

    /// How much slower than the reference the machine ran from `from` to `to`: the
    /// median CPU time of the fixed work over those samples divided by the first
    /// samples' median (above 1: slower). `None` while the reference is not yet taken
    /// or the window holds too few samples.
    pub(super) fn slowdown(&self, from: Instant, to: Instant) -> Option<f64> {
        let reference = (*self.reference_s.lock().expect("probe reference"))?;
        window_slowdown(
            self.samples.lock().expect("probe samples").iter(),
            reference,
            from,
            to,
        )
    }

    /// Waits until the reference is taken (the first [`REFERENCE_SAMPLES`] samples,
    /// about five seconds after the start), at most `limit`.
    pub(super) fn wait_for_reference(&self, limit: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit {
            if self.reference_s.lock().expect("probe reference").is_some() {
                return true;
            }
            std::thread::sleep(PERIOD);
        }
        false
    }
}

impl Drop for SpeedProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// CPU seconds of [`WORK_ITERATIONS`] steps of a 64-bit generator (0 where the
/// thread's clock cannot be read).
fn fixed_work_s() -> f64 {
    let started = this_thread_s();
    let mut x = std::hint::black_box(0x9E37_79B9_7F4A_7C15u64);
    for _ in 0..WORK_ITERATIONS {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x ^= x >> 29;
    }
    std::hint::black_box(x);
    let ended = this_thread_s();
    if started > 0.0 && ended > started {
        ended - started
    } else {
        0.0
    }
}

/// The median of `samples` taken from `from` to `to` over `reference` (`None` with
/// fewer than [`MIN_WINDOW_SAMPLES`] there).
fn window_slowdown<'s>(
    samples: impl Iterator<Item = &'s (Instant, f64)>,
    reference: f64,
    from: Instant,
    to: Instant,
) -> Option<f64> {
    let mut window: Vec<f64> = samples
        .filter(|(at, _)| *at >= from && *at <= to)
        .map(|&(_, seconds)| seconds)
        .collect();
    if window.len() < MIN_WINDOW_SAMPLES {
        return None;
    }
    median(&mut window).map(|m| m / reference)
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts_and_of_nothing() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }

    /// A window's slowdown is the median of the samples inside it (bounds included)
    /// over the reference, checked against the samples sorted by hand.
    #[test]
    fn a_window_slowdown_is_its_samples_median_over_the_reference() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        // Eight samples 200 ms apart; the window 200..=1000 ms holds the five
        // 2, 9, 4, 6, 3 (ms of CPU): sorted 2, 3, 4, 6, 9, median 4.
        let cpu_ms = [1.0, 2.0, 9.0, 4.0, 6.0, 3.0, 7.0, 8.0];
        let samples: Vec<(Instant, f64)> = cpu_ms
            .iter()
            .enumerate()
            .map(|(i, &ms)| (at(200 * i as u64), ms * 1e-3))
            .collect();
        let slowdown = window_slowdown(samples.iter(), 2e-3, at(200), at(1000)).unwrap();
        assert!((slowdown - 2.0).abs() < 1e-12, "{slowdown}");
        // Four samples are too few to tell.
        assert_eq!(
            window_slowdown(samples.iter(), 2e-3, at(200), at(800)),
            None
        );
    }

    /// The thread takes its reference and then samples: a window of a few periods
    /// after it tells a slowdown (its value depends on the machine: not checked).
    #[test]
    fn the_probe_samples_once_it_has_its_reference() {
        assert!(fixed_work_s() > 0.0);
        let probe = SpeedProbe::start().unwrap();
        assert!(probe.wait_for_reference(Duration::from_secs(60)));
        let from = Instant::now();
        std::thread::sleep(PERIOD * (MIN_WINDOW_SAMPLES as u32 + 3));
        assert!(probe.slowdown(from, Instant::now()).is_some());
        // A window with no sample tells nothing.
        let later = Instant::now() + Duration::from_secs(3600);
        assert_eq!(probe.slowdown(later, later), None);
    }
}
